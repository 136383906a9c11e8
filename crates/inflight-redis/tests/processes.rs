//! Fleet budgets across real processes (copies of this test binary) on one loopback
//! `redis-server`: a holder killed with SIGKILL, many processes racing for the last permits, and
//! a holder stalled with SIGSTOP for longer than its lease.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use inflight::Budget;
use inflight_redis::{Fail, RedisFleet};
use support::{ms, ChildProcess, RedisServer};
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

/// Takes `HOLD` permits, says `held`, and on `release` says whether each lease was lost, gives
/// them back and says `released`.
async fn hold() {
    let limit = env_u64("LIMIT") as usize;
    let budget = fleet_budget(&env("URL"), limit, ms(env_u64("LEASE_MS")), ms(5000));
    let mut held = Vec::new();
    for _ in 0..env_u64("HOLD") {
        held.push(budget.acquire().await.unwrap());
    }
    println!("child: held");
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(tokio::io::stdin()));
    while let Ok(Some(line)) = lines.next_line().await {
        if line == "release" {
            let lost: Vec<bool> = held.iter().map(|p| p.lease().unwrap().is_lost()).collect();
            println!("child: lost {lost:?}");
            // The releases go out in the background; the store's drop sends any still on
            // their way before the process ends.
            held.clear();
            println!("child: released");
            return;
        }
    }
}

/// `TASKS` tasks, each `ROUNDS` times: take a permit, count itself in on an independent Redis
/// counter, hold `HOLD_MS`, count itself out, give the permit back. Says the highest count seen.
async fn race() {
    let url = env("URL");
    let limit = env_u64("LIMIT") as usize;
    let budget = fleet_budget(&url, limit, ms(2000), ms(20_000));
    let client = redis::Client::open(url.as_str()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let peak = Arc::new(AtomicUsize::new(0));
    let admitted = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..env_u64("TASKS"))
        .map(|_| {
            let (budget, mut conn) = (budget.clone(), conn.clone());
            let (peak, admitted) = (peak.clone(), admitted.clone());
            let (rounds, hold) = (env_u64("ROUNDS"), ms(env_u64("HOLD_MS")));
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let permit = budget.acquire().await.unwrap();
                    let now: usize = redis::cmd("INCR")
                        .arg("probe:in_flight")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    peak.fetch_max(now, Ordering::Relaxed);
                    admitted.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(hold).await;
                    let _: i64 = redis::cmd("DECR")
                        .arg("probe:in_flight")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    drop(permit);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    println!(
        "child: peak {} admitted {}",
        peak.load(Ordering::Relaxed),
        admitted.load(Ordering::Relaxed)
    );
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
/// writes of `HOLD_MS` through a budget of `LIMIT`, local and fleet, each counted in and out
/// on a counter in Redis. Says when the last write ended, the time spent in writes, the most
/// writes in flight the counter saw, and how many writes were made.
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
    let client = redis::Client::open(url.as_str()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let (peak, busy) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let hold = ms(env_u64("HOLD_MS"));
    let start_at = env_u64("START_AT") * 1000;
    tokio::time::sleep(Duration::from_micros(
        start_at.saturating_sub(unix_micros()),
    ))
    .await;
    let writes = (0..env_u64("WRITES")).map(|_| {
        let (conn, peak, busy) = (conn.clone(), peak.clone(), busy.clone());
        budget.call(move || async move {
            let mut conn = conn;
            let began = std::time::Instant::now();
            let now: usize = redis::cmd("INCR")
                .arg("probe:writes")
                .query_async(&mut conn)
                .await
                .unwrap();
            peak.fetch_max(now, Ordering::Relaxed);
            tokio::time::sleep(hold).await;
            let _: i64 = redis::cmd("DECR")
                .arg("probe:writes")
                .query_async(&mut conn)
                .await
                .unwrap();
            busy.fetch_add(began.elapsed().as_micros() as usize, Ordering::Relaxed);
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
        "child: end {end} busy {} peak {} made {made}",
        busy.load(Ordering::Relaxed),
        peak.load(Ordering::Relaxed)
    );
}

/// Samples the number of holders on the server until `stop`, returning the most seen.
fn watch_holders(server: &RedisServer, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    let mut conn = server.conn();
    std::thread::spawn(move || {
        let mut most = 0;
        let start = std::time::Instant::now();
        while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(120) {
            let n: usize = redis::cmd("ZCARD")
                .arg("inflight:{records}:holders")
                .query(&mut conn)
                .unwrap_or(0);
            most = most.max(n);
            std::thread::sleep(ms(2));
        }
        most
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_with_sigkill_frees_its_permits_within_one_lease() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let lease = ms(1000);
    let holder = ChildProcess::spawn(
        "hold",
        &[
            ("URL", server.url()),
            ("LIMIT", "3".into()),
            ("HOLD", "3".into()),
            ("LEASE_MS", lease.as_millis().to_string()),
        ],
    );
    assert_eq!(holder.expect_line(Duration::from_secs(30)), "held");
    let stop = Arc::new(AtomicBool::new(false));
    let most = watch_holders(&server, stop.clone());
    // Let the holder renew at least once, so the lease it loses is a renewed one.
    tokio::time::sleep(lease / 2).await;
    holder.signal(libc::SIGKILL);
    let killed = Instant::now();
    let budget = fleet_budget(&server.url(), 3, lease, ms(10_000));
    let mut mine = Vec::new();
    for _ in 0..3 {
        mine.push(budget.acquire().await.unwrap());
    }
    let took = killed.elapsed();
    stop.store(true, Ordering::Relaxed);
    assert!(most.join().unwrap() <= 3, "the limit held throughout");
    // Its leases were last renewed at most a third of a lease before the kill.
    assert!(
        took <= lease + lease / 2,
        "the permits came back within about one lease, took {took:?}"
    );
    assert!(
        took >= lease / 2,
        "they were not free before the lease ran out, took {took:?}"
    );
    drop(mine);
    let _ = holder.wait(ms(100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_processes_racing_for_the_last_permits_never_exceed_the_limit() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (processes, tasks, rounds) = (5, 4, 15);
    let stop = Arc::new(AtomicBool::new(false));
    let most = watch_holders(&server, stop.clone());
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
                ],
            )
        })
        .collect();
    let mut total = 0;
    for child in children {
        let line = child.expect_line(Duration::from_secs(90));
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(words[0], "peak", "{line}");
        let peak: usize = words[1].parse().unwrap();
        assert!(peak <= 3, "a process saw {peak} calls in flight: {line}");
        total += words[3].parse::<usize>().unwrap();
        assert!(child.wait(Duration::from_secs(10)));
    }
    stop.store(true, Ordering::Relaxed);
    assert!(most.join().unwrap() <= 3);
    assert_eq!(total, processes * tasks * rounds, "every call got its turn");
    let left: i64 = redis::cmd("GET")
        .arg("probe:in_flight")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(left, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stalled_past_its_lease_learns_it_lost_it_and_releases_nothing_of_others() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let lease = ms(600);
    let mut holder = ChildProcess::spawn(
        "hold",
        &[
            ("URL", server.url()),
            ("LIMIT", "1".into()),
            ("HOLD", "1".into()),
            ("LEASE_MS", lease.as_millis().to_string()),
        ],
    );
    assert_eq!(holder.expect_line(Duration::from_secs(30)), "held");
    holder.signal(libc::SIGSTOP);
    let budget = fleet_budget(&server.url(), 1, lease, ms(5000));
    let mine = budget.acquire().await.unwrap();
    let my_id = mine.lease().unwrap().id().to_string();
    assert_eq!(server.holders("records"), std::slice::from_ref(&my_id));
    tokio::time::sleep(lease / 2).await;
    holder.signal(libc::SIGCONT);
    // Its renewal runs within a third of a lease of waking up.
    tokio::time::sleep(lease).await;
    holder.say("release");
    assert_eq!(holder.expect_line(Duration::from_secs(10)), "lost [true]");
    assert_eq!(holder.expect_line(Duration::from_secs(10)), "released");
    assert!(holder.wait(Duration::from_secs(10)));
    assert_eq!(
        server.holders("records"),
        [my_id],
        "the stalled holder did not release the lease that replaced its own"
    );
    assert!(
        !mine.lease().unwrap().is_lost(),
        "this process kept renewing"
    );
    drop(mine);
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
        let peak: usize = words[5].parse().unwrap();
        assert!(peak <= limit, "{peak} writes in flight at once: {line}");
        made += words[7].parse::<usize>().unwrap();
        assert!(child.wait(Duration::from_secs(10)));
    }
    assert_eq!(made, processes * writes);
    let wall = end - start_at * 1000;
    let utilization = busy as f64 / (limit as u64 * wall) as f64;
    println!(
        "{processes} processes x {writes} writes of {hold} ms through {limit} permits: wall \
         {:.3} s (ideal {:.3} s), write time {:.3} s, {:.1}% of the limit in use",
        wall as f64 / 1e6,
        (processes * writes * hold) as f64 / limit as f64 / 1e3,
        busy as f64 / 1e6,
        utilization * 100.0
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
