//! Fleet budgets across real processes (copies of this test binary) on one loopback
//! `redis-server`: a holder killed with SIGKILL, many processes racing for the last permits, a
//! holder stalled with SIGSTOP for longer than its lease, and a holder whose link to Redis
//! stalls or only slows down. Every call is made at an [`Observer`]: the limit is checked where
//! the calls arrive, not by the clients' counters or Redis.

mod support;

use std::sync::Arc;
use std::time::Duration;

use inflight::Budget;
use inflight_redis::{Fail, RedisFleet};
use support::{ms, Call, ChildProcess, Link, Observer, RedisServer};
use tokio::time::Instant;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set for a child"))
}

fn env_u64(name: &str) -> u64 {
    env(name).parse().unwrap()
}

fn fleet_budget(url: &str, limit: usize, lease: Duration, permit_timeout: Duration) -> Budget {
    let fleet = RedisFleet::builder(url).lease(lease).build().unwrap();
    Budget::builder("records")
        .max_concurrent(limit)
        .permit_timeout(permit_timeout)
        .store(Arc::new(fleet.store(limit, Fail::Closed)))
        .build()
        .unwrap()
}

/// The body of a child process; a no-op when the test harness runs it as a test.
#[test]
fn child() {
    let Ok(role) = std::env::var("INFLIGHT_REDIS_CHILD") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        match role.as_str() {
            "hold" => hold().await,
            "race" => race().await,
            "batch" => batch().await,
            "writes" => writes().await,
            other => panic!("unknown role {other}"),
        }
    });
}

/// Takes `HOLD` permits, each with a call open at the observer `OBSERVER` when it is set, and
/// says `held`. On `status` says whether each lease was lost; on `release` says it too, ends
/// the calls, gives the permits back and says `released`.
async fn hold() {
    let limit = env_u64("LIMIT") as usize;
    let budget = fleet_budget(&env("URL"), limit, ms(env_u64("LEASE_MS")), ms(5000));
    let observer = std::env::var("OBSERVER").ok();
    let mut held = Vec::new();
    for _ in 0..env_u64("HOLD") {
        let permit = budget.acquire().await.unwrap();
        let call = match &observer {
            Some(addr) => Some(Call::begin(addr).await),
            None => None,
        };
        held.push((permit, call));
    }
    println!("child: held");
    let lost = |held: &[(inflight::Permit<'_>, Option<Call>)]| -> Vec<bool> {
        held.iter()
            .map(|(p, _)| p.lease().unwrap().is_lost())
            .collect()
    };
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(tokio::io::stdin()));
    while let Ok(Some(line)) = lines.next_line().await {
        match line.as_str() {
            "status" => println!("child: lost {:?}", lost(&held)),
            "release" => {
                println!("child: lost {:?}", lost(&held));
                for (permit, call) in held {
                    if let Some(call) = call {
                        call.end().await;
                    }
                    // The release goes out in the background; the store's drop sends any
                    // still on its way before the process ends.
                    drop(permit);
                }
                println!("child: released");
                return;
            }
            _ => {}
        }
    }
}

/// `TASKS` tasks, each `ROUNDS` times: take a permit, make a call of `HOLD_MS` at the observer
/// `OBSERVER`, give the permit back. Leases of `LEASE_MS` (2 s when unset). Says how many calls
/// were admitted and how many of their leases were lost by the end of the call.
async fn race() {
    let lease = std::env::var("LEASE_MS").map_or(2000, |v| v.parse().unwrap());
    let limit = env_u64("LIMIT") as usize;
    let budget = fleet_budget(&env("URL"), limit, ms(lease), ms(20_000));
    let observer = env("OBSERVER");
    let tasks: Vec<_> = (0..env_u64("TASKS"))
        .map(|_| {
            let (budget, observer) = (budget.clone(), observer.clone());
            let (rounds, hold) = (env_u64("ROUNDS"), ms(env_u64("HOLD_MS")));
            tokio::spawn(async move {
                let (mut admitted, mut lost) = (0, 0);
                for _ in 0..rounds {
                    let asked = std::time::Instant::now();
                    let permit = budget.acquire().await.unwrap();
                    admitted += 1;
                    let label = format!(
                        "pid {} lease {} waited {:?}",
                        std::process::id(),
                        permit.lease().unwrap().id(),
                        asked.elapsed()
                    );
                    support::held_call(&observer, &label, hold).await;
                    lost += usize::from(permit.lease().unwrap().is_lost());
                    drop(permit);
                }
                (admitted, lost)
            })
        })
        .collect();
    let (mut admitted, mut lost) = (0, 0);
    for task in tasks {
        let (a, l) = task.await.unwrap();
        admitted += a;
        lost += l;
    }
    println!("child: admitted {admitted} lost {lost}");
}

/// A batch job: `WRITES` writes of `HOLD_MS` through a fleet budget of `LIMIT`, all started at
/// once; says how long they took, then ends, with `fleet.shutdown().await` when `SHUTDOWN` is 1
/// and by dropping the budget otherwise.
async fn batch() {
    let fleet = RedisFleet::builder(&env("URL"))
        .lease(ms(env_u64("LEASE_MS")))
        .build()
        .unwrap();
    let limit = env_u64("LIMIT") as usize;
    let budget = Budget::builder("records")
        .max_concurrent(limit)
        .permit_timeout(ms(30_000))
        .store(Arc::new(fleet.store(limit, Fail::Closed)))
        .build()
        .unwrap();
    let hold = ms(env_u64("HOLD_MS"));
    let start = Instant::now();
    let writes = (0..env_u64("WRITES")).map(|_| {
        budget.call(|| async move {
            tokio::time::sleep(hold).await;
            Ok::<_, std::io::Error>(())
        })
    });
    for result in futures::future::join_all(writes).await {
        result.unwrap();
    }
    println!("child: took {}", start.elapsed().as_millis());
    if env("SHUTDOWN") == "1" {
        fleet.shutdown().await;
    }
}

fn unix_micros() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(since.as_micros()).unwrap()
}

/// The example's load: at `START_AT` (unix ms, the same moment in every process), `WRITES`
/// writes of `HOLD_MS` through a budget of `LIMIT`, local and fleet, each a call at the
/// observer `OBSERVER`. Says when the last write ended, the time spent in writes, and how many
/// writes were made.
async fn writes() {
    let url = env("URL");
    let limit = env_u64("LIMIT") as usize;
    let fleet = RedisFleet::builder(&url).lease(ms(5000)).build().unwrap();
    let budget = Budget::builder("records")
        .max_concurrent(limit)
        .permit_timeout(ms(30_000))
        .store(Arc::new(fleet.store(limit, Fail::Closed)))
        .build()
        .unwrap();
    let observer = env("OBSERVER");
    let busy = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let hold = ms(env_u64("HOLD_MS"));
    let start_at = env_u64("START_AT") * 1000;
    tokio::time::sleep(Duration::from_micros(
        start_at.saturating_sub(unix_micros()),
    ))
    .await;
    let writes = (0..env_u64("WRITES")).map(|_| {
        let (observer, busy) = (observer.clone(), busy.clone());
        budget.call(move || async move {
            let began = std::time::Instant::now();
            support::call(&observer, hold).await;
            let took = u64::try_from(began.elapsed().as_micros()).unwrap();
            busy.fetch_add(took, std::sync::atomic::Ordering::Relaxed);
            Ok::<_, std::io::Error>(())
        })
    });
    let mut made = 0;
    for result in futures::future::join_all(writes).await {
        result.unwrap();
        made += 1;
    }
    let end = unix_micros();
    fleet.shutdown().await;
    println!(
        "child: end {end} busy {} made {made}",
        busy.load(std::sync::atomic::Ordering::Relaxed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_with_sigkill_frees_its_permits_within_one_lease() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let observer = Observer::start();
    let lease = ms(1000);
    let holder = ChildProcess::spawn(
        "hold",
        &[
            ("URL", server.url()),
            ("LIMIT", "3".into()),
            ("HOLD", "3".into()),
            ("LEASE_MS", lease.as_millis().to_string()),
            ("OBSERVER", observer.addr()),
        ],
    );
    assert_eq!(holder.expect_line(Duration::from_secs(30)), "held");
    assert_eq!(observer.served().in_service, 3);
    // Let the holder renew at least once, so the lease it loses is a renewed one.
    tokio::time::sleep(lease / 2).await;
    holder.signal(libc::SIGKILL);
    let killed = Instant::now();
    let budget = fleet_budget(&server.url(), 3, lease, ms(10_000));
    let mut mine = Vec::new();
    for _ in 0..3 {
        let permit = budget.acquire().await.unwrap();
        mine.push((permit, Call::begin(&observer.addr()).await));
    }
    let took = killed.elapsed();
    let served = observer.served();
    assert_eq!(served.in_service, 3, "the killed calls ended: {served:?}");
    assert!(
        served.peak <= 3,
        "the limit held at the dependency: {served:?}"
    );
    // Its leases were last renewed at most a third of a lease before the kill.
    assert!(
        took <= lease + lease / 2,
        "the permits came back within about one lease, took {took:?}"
    );
    assert!(
        took >= lease / 2,
        "they were not free before the lease ran out, took {took:?}"
    );
    for (permit, call) in mine {
        call.end().await;
        drop(permit);
    }
    let _ = holder.wait(ms(100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_processes_racing_for_the_last_permits_never_exceed_the_limit() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let observer = Observer::start();
    let (processes, tasks, rounds) = (5, 4, 15);
    let children: Vec<_> = (0..processes)
        .map(|_| {
            ChildProcess::spawn(
                "race",
                &[
                    ("URL", server.url()),
                    ("LIMIT", "3".into()),
                    ("TASKS", tasks.to_string()),
                    ("ROUNDS", rounds.to_string()),
                    ("HOLD_MS", "3".into()),
                    ("OBSERVER", observer.addr()),
                ],
            )
        })
        .collect();
    let mut total = 0;
    for child in children {
        let line = child.expect_line(Duration::from_secs(90));
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!((words[0], words[3]), ("admitted", "0"), "{line}");
        total += words[1].parse::<usize>().unwrap();
        assert!(child.wait(Duration::from_secs(10)));
    }
    let served = observer.served();
    println!("{processes} processes racing for 3 permits, at the dependency: {served:?}");
    assert!(
        served.peak <= 3,
        "over the limit at the dependency: {served:?}, in service at the peak: {:#?}",
        observer.at_peak()
    );
    assert_eq!(total, processes * tasks * rounds, "every call got its turn");
    assert_eq!((served.begun, served.ended), (total, total), "{served:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stalled_past_its_lease_learns_it_lost_it_and_releases_nothing_of_others() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let observer = Observer::start();
    let lease = ms(600);
    let mut holder = ChildProcess::spawn(
        "hold",
        &[
            ("URL", server.url()),
            ("LIMIT", "1".into()),
            ("HOLD", "1".into()),
            ("LEASE_MS", lease.as_millis().to_string()),
            ("OBSERVER", observer.addr()),
        ],
    );
    assert_eq!(holder.expect_line(Duration::from_secs(30)), "held");
    holder.signal(libc::SIGSTOP);
    let budget = fleet_budget(&server.url(), 1, lease, ms(5000));
    let mine = budget.acquire().await.unwrap();
    let call = Call::begin(&observer.addr()).await;
    let my_id = mine.lease().unwrap().id().to_string();
    assert_eq!(server.holders("records"), std::slice::from_ref(&my_id));
    // The stopped holder's call is still open at the dependency: one over the limit, and no
    // more, for as long as it stays open.
    assert_eq!(observer.served().in_service, 2);
    tokio::time::sleep(lease / 2).await;
    holder.signal(libc::SIGCONT);
    // Its renewal runs within a third of a lease of waking up.
    tokio::time::sleep(lease).await;
    holder.say("release");
    assert_eq!(holder.expect_line(Duration::from_secs(10)), "lost [true]");
    assert_eq!(holder.expect_line(Duration::from_secs(10)), "released");
    assert!(holder.wait(Duration::from_secs(10)));
    let served = observer.served();
    assert_eq!(served.in_service, 1, "{served:?}");
    assert_eq!(
        served.peak, 2,
        "the limit of 1 plus the one stalled holder: {served:?}"
    );
    assert_eq!(
        server.holders("records"),
        [my_id],
        "the stalled holder did not release the lease that replaced its own"
    );
    assert!(
        !mine.lease().unwrap().is_lost(),
        "this process kept renewing"
    );
    call.end().await;
    drop(mine);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_link_stalls_past_its_lease_loses_it_and_the_dependency_sees_one_more() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let observer = Observer::start();
    let link = Link::start(&server.addr());
    let (limit, lease) = (2, ms(600));
    let mut holder = ChildProcess::spawn(
        "hold",
        &[
            ("URL", link.url()),
            ("LIMIT", limit.to_string()),
            ("HOLD", "1".into()),
            ("LEASE_MS", lease.as_millis().to_string()),
            ("OBSERVER", observer.addr()),
        ],
    );
    assert_eq!(holder.expect_line(Duration::from_secs(30)), "held");
    let budget = fleet_budget(&server.url(), limit, lease, ms(10_000));
    let first = budget.acquire().await.unwrap();
    let first_call = Call::begin(&observer.addr()).await;
    assert_eq!(observer.served().in_service, limit);
    // Let the holder renew through the link at least once before it stalls.
    tokio::time::sleep(lease / 2).await;
    link.stall();
    let stalled = Instant::now();
    // The holder's lease and when it expires on the server's clock (ms), as of the stall.
    let first_id = first.lease().unwrap().id().to_string();
    let theirs = server
        .holders("records")
        .into_iter()
        .find(|id| *id != first_id)
        .expect("the holder's lease is in Redis");
    let expiry: u64 = redis::cmd("ZSCORE")
        .arg("inflight:{records}:holders")
        .arg(&theirs)
        .query(&mut server.conn())
        .unwrap();
    // The holder cannot renew: its permit is reissued once its lease runs out on the server.
    let second = budget.acquire().await.unwrap();
    let reissued = stalled.elapsed();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut server.conn()).unwrap();
    let second_call = Call::begin(&observer.addr()).await;
    assert!(
        secs * 1000 + micros / 1000 >= expiry,
        "reissued before the stalled lease ran out on the server's clock"
    );
    assert!(!server.holders("records").contains(&theirs));
    // The holder learns it on its own clock, the link still stalled.
    let start = Instant::now();
    loop {
        holder.say("status");
        if holder.expect_line(Duration::from_secs(10)) == "lost [true]" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the holder saw its lease lost"
        );
        tokio::time::sleep(ms(50)).await;
    }
    let during = observer.served();
    link.resume();
    // What the stall held reaches Redis late: a renewal of a lease that is someone else's now.
    tokio::time::sleep(lease / 2).await;
    holder.say("release");
    assert_eq!(holder.expect_line(Duration::from_secs(10)), "lost [true]");
    assert_eq!(holder.expect_line(Duration::from_secs(10)), "released");
    assert!(holder.wait(Duration::from_secs(10)));
    let after = observer.served();
    println!(
        "a link stalled past its lease: limit {limit}, 1 holder stalled, peak at the \
         dependency {} (in service while stalled {}, after its release {}), permit reissued \
         {reissued:?} after the stall began (lease {lease:?})",
        after.peak, during.in_service, after.in_service
    );
    assert_eq!(during.in_service, limit + 1, "{during:?}");
    assert!(
        after.peak <= limit + 1,
        "over the honest bound (limit + holders stalled past their lease): {after:?}"
    );
    assert_eq!(after.in_service, limit, "{after:?}");
    let mut ids: Vec<String> = [&first, &second]
        .iter()
        .map(|p| p.lease().unwrap().id().to_string())
        .collect();
    ids.sort();
    let mut holders = server.holders("records");
    holders.sort();
    assert_eq!(holders, ids, "the late traffic took nothing of others");
    assert!(!first.lease().unwrap().is_lost() && !second.lease().unwrap().is_lost());
    first_call.end().await;
    second_call.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_that_only_delays_keeps_the_limit_exactly() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let observer = Observer::start();
    let link = Link::start(&server.addr());
    // 100 ms each way: a round trip of 200 ms, well under a third of the lease (1 s) and the 1 s
    // round-trip timeout. A long lease: a holder starved of CPU past it would be one over.
    link.delay(ms(100));
    let (limit, lease, hold) = (3, ms(3000), ms(20));
    let child = ChildProcess::spawn(
        "race",
        &[
            ("URL", link.url()),
            ("LIMIT", limit.to_string()),
            ("TASKS", "3".into()),
            ("ROUNDS", "8".into()),
            ("HOLD_MS", hold.as_millis().to_string()),
            ("LEASE_MS", lease.as_millis().to_string()),
            ("OBSERVER", observer.addr()),
        ],
    );
    let budget = fleet_budget(&server.url(), limit, lease, ms(20_000));
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let (budget, observer) = (budget.clone(), observer.addr());
            tokio::spawn(async move {
                let mut lost = 0;
                for _ in 0..40 {
                    let asked = std::time::Instant::now();
                    let permit = budget.acquire().await.unwrap();
                    let label = format!(
                        "test lease {} waited {:?}",
                        permit.lease().unwrap().id(),
                        asked.elapsed()
                    );
                    support::held_call(&observer, &label, hold).await;
                    lost += usize::from(permit.lease().unwrap().is_lost());
                }
                lost
            })
        })
        .collect();
    let mut lost = 0;
    for task in tasks {
        lost += task.await.unwrap();
    }
    let line = child.expect_line(Duration::from_secs(60));
    assert!(child.wait(Duration::from_secs(10)));
    let served = observer.served();
    println!(
        "a link delayed 100 ms each way, limit {limit}: child {line}; at the dependency {served:?}"
    );
    assert_eq!(line, "admitted 24 lost 0");
    assert_eq!(lost, 0, "no lease of this process was lost");
    assert_eq!(
        served.peak,
        limit,
        "the limit, used and never passed: {served:?}, in service at the peak: {:#?}",
        observer.at_peak()
    );
    assert_eq!((served.begun, served.ended), (24 + 120, 24 + 120));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_jobs_run_back_to_back_leave_no_lease_behind() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (limit, writes, hold, lease) = (3, 6, 30, 3000);
    let ideal = writes / limit * hold;
    let mut took = Vec::new();
    for run in 0..20 {
        // Half end with an explicit shutdown, half by dropping their budget.
        let shutdown = if run % 2 == 0 { "1" } else { "0" };
        let child = ChildProcess::spawn(
            "batch",
            &[
                ("URL", server.url()),
                ("LIMIT", limit.to_string()),
                ("WRITES", writes.to_string()),
                ("HOLD_MS", hold.to_string()),
                ("LEASE_MS", lease.to_string()),
                ("SHUTDOWN", shutdown.into()),
            ],
        );
        let line = child.expect_line(Duration::from_secs(60));
        let ms: u64 = line.strip_prefix("took ").unwrap().parse().unwrap();
        assert!(
            child.wait(Duration::from_secs(20)),
            "run {run} exits cleanly"
        );
        assert_eq!(
            server.holders("records"),
            Vec::<String>::new(),
            "run {run} (shutdown {shutdown}) left leases behind"
        );
        took.push(ms);
    }
    // A lease left by the previous run would hold up this one for up to a lease (3 s); the
    // writes alone take 60 ms.
    let slowest = *took.iter().max().unwrap();
    assert!(
        slowest < ideal + lease / 2,
        "a run waited on a lease left behind: {took:?} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_keep_the_fleet_limit_busy() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let observer = Observer::start();
    let (processes, limit, writes, hold) = (3, 6, 24, 100);
    // Late enough for every process to be up and connected.
    let start_at = unix_micros() / 1000 + 1500;
    let children: Vec<_> = (0..processes)
        .map(|_| {
            ChildProcess::spawn(
                "writes",
                &[
                    ("URL", server.url()),
                    ("LIMIT", limit.to_string()),
                    ("WRITES", writes.to_string()),
                    ("HOLD_MS", hold.to_string()),
                    ("START_AT", start_at.to_string()),
                    ("OBSERVER", observer.addr()),
                ],
            )
        })
        .collect();
    let (mut end, mut busy, mut made) = (0, 0, 0);
    for child in children {
        let line = child.expect_line(Duration::from_secs(60));
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(words[0], "end", "{line}");
        end = end.max(words[1].parse::<u64>().unwrap());
        busy += words[3].parse::<u64>().unwrap();
        made += words[5].parse::<usize>().unwrap();
        assert!(child.wait(Duration::from_secs(10)));
    }
    let served = observer.served();
    assert_eq!(made, processes * writes);
    assert_eq!(served.begun, made, "{served:?}");
    assert!(
        served.peak <= limit,
        "over the limit at the dependency: {served:?}"
    );
    let wall = end - start_at * 1000;
    let utilization = busy as f64 / (limit as u64 * wall) as f64;
    println!(
        "{processes} processes x {writes} writes of {hold} ms through {limit} permits: wall \
         {:.3} s (ideal {:.3} s), write time {:.3} s, {:.1}% of the limit in use; at most {} \
         writes in service at the dependency",
        wall as f64 / 1e6,
        (processes * writes * hold) as f64 / limit as f64 / 1e3,
        busy as f64 / 1e6,
        utilization * 100.0,
        served.peak
    );
    assert!(
        utilization >= 0.9,
        "{:.1}% of the limit in use",
        utilization * 100.0
    );
    assert!(server.holders("records").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_killed_in_the_queue_is_skipped_once_its_entry_lapses() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let lease = ms(600);
    let holder = fleet_budget(&server.url(), 1, lease, ms(5000));
    let held = holder.acquire_owned().await.unwrap();
    // A process joins the queue (its `hold` waits for the permit), and is killed there.
    let waiter = ChildProcess::spawn(
        "hold",
        &[
            ("URL", server.url()),
            ("LIMIT", "1".into()),
            ("HOLD", "1".into()),
            ("LEASE_MS", lease.as_millis().to_string()),
        ],
    );
    let queue = || -> Vec<String> {
        redis::cmd("ZRANGE")
            .arg("inflight:{records}:queue")
            .arg(0)
            .arg(-1)
            .query(&mut server.conn())
            .unwrap()
    };
    let start = Instant::now();
    let dead = loop {
        if let [dead] = queue().as_slice() {
            break dead.clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the child queued"
        );
        tokio::time::sleep(ms(5)).await;
    };
    waiter.signal(libc::SIGKILL);
    // Its queue entry lapses one lease after its last ask.
    tokio::time::sleep(lease + lease / 2).await;
    let next = fleet_budget(&server.url(), 1, lease, ms(10_000));
    let behind = tokio::spawn(async move {
        let start = Instant::now();
        let permit = next.acquire_owned().await.unwrap();
        (start.elapsed(), permit)
    });
    let start = Instant::now();
    loop {
        let now = queue();
        if now.iter().any(|id| *id != dead) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "queue {now:?}");
        tokio::time::sleep(ms(5)).await;
    }
    drop(held);
    let (waited, permit) = tokio::time::timeout(Duration::from_secs(10), behind)
        .await
        .expect("the live waiter is served")
        .unwrap();
    // Handed the permit by the release itself, not a lease later: the dead waiter was skipped.
    assert!(
        waited < lease / 2,
        "the next waiter waited {waited:?} behind a dead one"
    );
    assert_eq!(server.holders("records").len(), 1);
    drop(permit);
    let _ = waiter.wait(ms(100));
}
