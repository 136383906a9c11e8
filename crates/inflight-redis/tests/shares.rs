//! Share budgets against a real `redis-server` on loopback: the max-min split, the limit held
//! at the dependency (a counting TCP server on 127.0.0.1) while real processes join, leave and
//! are killed, and the Redis commands per call counted by the server itself.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use inflight::Budget;
use inflight_redis::{Fail, RedisFleet, ShareStore};
use support::{ms, ChildProcess, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set for a child"))
}

fn env_u64(name: &str) -> u64 {
    env(name).parse().unwrap()
}

/// The dependency: each byte read on a connection is one call, served for `took`, answered
/// with one byte. It counts the calls in service itself.
#[derive(Default)]
struct Counter {
    now: AtomicUsize,
    peak: AtomicUsize,
    calls: AtomicUsize,
    /// Microseconds in service, summed over calls.
    busy_micros: AtomicUsize,
}

async fn dependency(took: Duration) -> (String, Arc<Counter>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let counter = Arc::new(Counter::default());
    tokio::spawn({
        let counter = counter.clone();
        async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut byte = [0u8; 1];
                    while conn.read_exact(&mut byte).await.is_ok() {
                        let began = Instant::now();
                        let n = counter.now.fetch_add(1, Relaxed) + 1;
                        counter.peak.fetch_max(n, Relaxed);
                        counter.calls.fetch_add(1, Relaxed);
                        tokio::time::sleep(took).await;
                        counter.now.fetch_sub(1, Relaxed);
                        counter
                            .busy_micros
                            .fetch_add(began.elapsed().as_micros() as usize, Relaxed);
                        if conn.write_all(&byte).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
    });
    (address, counter)
}

/// `tasks` callers, each on its own connection to the dependency, calling through `budget`
/// back to back until the process ends.
async fn call_forever(budget: Budget, address: String, tasks: usize) {
    for _ in 0..tasks {
        let (budget, address) = (budget.clone(), address.clone());
        tokio::spawn(async move {
            let mut conn = TcpStream::connect(&address).await.unwrap();
            loop {
                let Ok(_permit) = budget.acquire().await else {
                    tokio::time::sleep(ms(5)).await;
                    continue;
                };
                let mut byte = [1u8];
                conn.write_all(&byte).await.unwrap();
                conn.read_exact(&mut byte).await.unwrap();
            }
        });
    }
}

fn share_budget(store: &ShareStore, local: usize) -> Budget {
    Budget::builder("search")
        .max_concurrent(local)
        .permit_timeout(ms(2000))
        .store(Arc::new(store.clone()))
        .build()
        .unwrap()
}

/// The body of a child process; a no-op when the test harness runs it as a test.
#[test]
fn child() {
    let Ok(role) = std::env::var("INFLIGHT_REDIS_CHILD") else {
        return;
    };
    assert_eq!(role, "shares", "unknown role");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // `TASKS` callers of the dependency at `DEP` through a share budget of `LIMIT`; on
        // `leave`, gives its share back and ends.
        let fleet = RedisFleet::builder(&env("URL"))
            .lease(ms(env_u64("LEASE_MS")))
            .build()
            .unwrap();
        let store = fleet.shares(env_u64("LIMIT") as usize, Fail::Closed);
        let tasks = env_u64("TASKS") as usize;
        call_forever(share_budget(&store, tasks), env("DEP"), tasks).await;
        println!("child: started");
        let mut lines =
            tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(tokio::io::stdin()));
        while let Ok(Some(line)) = lines.next_line().await {
            if line == "leave" {
                fleet.shutdown().await;
                println!("child: left");
                return;
            }
        }
    });
}

/// Samples the calls in service at the dependency every millisecond for `window`: the mean
/// and the most.
async fn sample(counter: &Counter, window: Duration) -> (f64, usize) {
    let start = Instant::now();
    let (mut sum, mut n, mut most) = (0usize, 0usize, 0usize);
    while start.elapsed() < window {
        let now = counter.now.load(Relaxed);
        sum += now;
        n += 1;
        most = most.max(now);
        tokio::time::sleep(ms(1)).await;
    }
    (sum as f64 / n.max(1) as f64, most)
}

/// The heavy tests run one at a time: each wants the machine's two cores.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_holds_at_the_dependency_as_processes_join_leave_and_are_killed() {
    let _one_at_a_time = HEAVY.lock().await;
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (address, counter) = dependency(ms(5)).await;
    let (limit, lease) = (40usize, 800u64);
    let spawn = |tasks: usize| {
        let child = ChildProcess::spawn(
            "shares",
            &[
                ("URL", server.url()),
                ("DEP", address.clone()),
                ("LIMIT", limit.to_string()),
                ("TASKS", tasks.to_string()),
                ("LEASE_MS", lease.to_string()),
            ],
        );
        assert_eq!(child.expect_line(Duration::from_secs(60)), "started");
        child
    };
    // Two processes wanting 30 each of 40, then two more wanting 20 each.
    let mut first = spawn(30);
    let killed = spawn(30);
    let (settled, most_two) = sample(&counter, ms(1500)).await;
    let mut joined = vec![spawn(20), spawn(20)];
    let (_, most_four) = sample(&counter, ms(1500)).await;
    // One leaves with its shutdown, one is killed with SIGKILL mid-call.
    first.say("leave");
    assert_eq!(first.expect_line(Duration::from_secs(10)), "left");
    killed.signal(libc::SIGKILL);
    let (_, most_moving) = sample(&counter, ms(lease + 200)).await;
    // The survivors want 40 together: the killed share is theirs one lease after its last
    // report, and the whole limit is in use again.
    let (after, most_after) = sample(&counter, ms(1500)).await;
    let peak = counter.peak.load(Relaxed);
    eprintln!(
        "two: mean {settled:.1}; after the kill: mean {after:.1}; most {most_two} {most_four} \
         {most_moving} {most_after}; peak {peak}; calls {}",
        counter.calls.load(Relaxed)
    );
    assert!(peak <= limit, "{peak} calls at once at the dependency");
    // The killed and the departed are gone from the server, and the two survivors, wanting 20
    // each, hold the whole limit between them.
    let entries: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg("inflight:{search}:shares")
        .query(&mut server.conn())
        .unwrap();
    let reserved: Vec<usize> = entries
        .values()
        .map(|v| v.split(':').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(reserved, [20, 20], "{entries:?}");
    for child in joined.drain(..) {
        drop(child);
    }
    assert!(first.wait(Duration::from_secs(10)));
}

/// The calls of every command the server ran so far (scripts' own commands included), and of
/// `EVALSHA`/`EVAL` alone.
fn commands(conn: &mut redis::Connection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let (mut all, mut scripts) = (0, 0);
    for line in info.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let Some(calls) = rest
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        all += calls;
        if matches!(name, "cmdstat_evalsha" | "cmdstat_eval") {
            scripts += calls;
        }
    }
    (all, scripts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wants_of_100_and_900_of_512_get_about_100_and_412_for_few_commands_a_call() {
    let _one_at_a_time = HEAVY.lock().await;
    let Some(server) = RedisServer::start() else {
        return;
    };
    // 50 ms calls keep the load of 1000 callers modest on a small machine.
    let (address, counter) = dependency(ms(50)).await;
    let fleets: Vec<RedisFleet> = (0..2)
        .map(|_| {
            RedisFleet::builder(&server.url())
                .lease(ms(1500))
                .build()
                .unwrap()
        })
        .collect();
    let small = fleets[0].shares(512, Fail::Closed);
    let large = fleets[1].shares(512, Fail::Closed);
    call_forever(share_budget(&small, 100), address.clone(), 100).await;
    call_forever(share_budget(&large, 900), address.clone(), 900).await;
    let mut conn = server.conn();
    tokio::time::sleep(ms(2000)).await;
    let (before, scripts_before) = commands(&mut conn);
    let calls_before = counter.calls.load(Relaxed);
    let (mean, most) = sample(&counter, ms(3000)).await;
    let (after, scripts_after) = commands(&mut conn);
    let calls = counter.calls.load(Relaxed) - calls_before;
    // The INFO call that read `before` is counted in `after`.
    let per_call = (after - before - 1) as f64 / calls as f64;
    let (s, l) = (small.snapshot(), large.snapshot());
    eprintln!(
        "small {s:?}\nlarge {l:?}\nmean {mean:.1} most {most} calls {calls} commands {} \
         scripts {} per call {per_call:.4}",
        after - before - 1,
        scripts_after - scripts_before
    );
    assert_eq!((s.target, l.target), (100, 412));
    assert!(s.share.abs_diff(100) <= 5 && l.share.abs_diff(412) <= 5);
    assert!(counter.peak.load(Relaxed) <= 512);
    assert!(calls > 1000, "{calls} calls");
    assert!(per_call <= 0.05, "{per_call:.4} commands a call");
    for fleet in &fleets {
        fleet.shutdown().await;
    }
    let left: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg("inflight:{search}:shares")
        .query(&mut conn)
        .unwrap();
    assert!(left.is_empty(), "shut down, nothing is left: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budgets_file_picks_shares_with_lease_mode_and_per_call_leases_by_default() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let budgets = inflight::Budgets::from_toml_str(&format!(
        r#"
        [fleet]
        url = "{}"
        lease = "2s"

        [budgets.search]
        max_concurrent = 64
        scope = "fleet"
        lease_mode = "shares"

        [budgets.records]
        max_concurrent = 4
        scope = "fleet"
        "#,
        server.url()
    ))
    .unwrap();
    let budgets = inflight_redis::attach(budgets).unwrap();
    let search = budgets.get("search").unwrap().acquire().await.unwrap();
    let records = budgets.get("records").unwrap().acquire().await.unwrap();
    let shares: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg("inflight:{search}:shares")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(shares.len(), 1, "one process holds a share of search");
    assert!(server.holders("search").is_empty(), "no per-call lease");
    assert_eq!(
        server.holders("records").len(),
        1,
        "records takes a lease per call"
    );
    drop((search, records));
}

#[test]
fn lease_mode_is_refused_on_a_local_budget_with_a_message_naming_the_key() {
    let err = inflight::Budgets::from_toml_str(
        r#"
        [budgets.search]
        max_concurrent = 64
        lease_mode = "shares"
        "#,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "budgets.search.lease_mode: only a fleet budget takes this (add scope = \"fleet\")"
    );
    let err = inflight::Budgets::from_toml_str(
        r#"
        [fleet]
        url = "redis://127.0.0.1:6379"

        [budgets.search]
        max_concurrent = 64
        scope = "fleet"
        lease_mode = 3
        "#,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "budgets.search.lease_mode: must be \"per_call\" or \"shares\", got integer 3"
    );
}

#[test]
fn shares_are_refused_next_to_a_fleet_rate_which_they_would_not_keep() {
    let err = inflight::Budgets::from_toml_str(
        r#"
        [fleet]
        url = "redis://127.0.0.1:6379"

        [budgets.llm]
        max_concurrent = 64
        rate = "10/s"
        scope = "fleet"
        lease_mode = "shares"
        "#,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "budgets.llm.lease_mode: \"shares\" keeps no fleet rate: a fleet budget with a rate holds its permits per call (leave lease_mode out)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_rotate_when_every_fair_share_is_below_one_permit() {
    let _one_at_a_time = HEAVY.lock().await;
    let Some(server) = RedisServer::start() else {
        return;
    };
    // 12 processes of 2 callers each on a limit of 4: every fair share is a third of a permit,
    // so no process has a base, and the 4 permits go in turns (a term is a sixth of the 600 ms
    // lease). Without turns, the first four to ask keep them.
    let (limit, processes) = (4, 12);
    let (address, counter) = dependency(ms(20)).await;
    let fleets: Vec<RedisFleet> = (0..processes)
        .map(|_| {
            RedisFleet::builder(&server.url())
                .lease(ms(600))
                .build()
                .unwrap()
        })
        .collect();
    let calls: Vec<Arc<AtomicUsize>> = (0..processes).map(|_| Arc::default()).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (fleet, made) in fleets.iter().zip(&calls) {
        let budget = share_budget(&fleet.shares(limit, Fail::Closed), 2);
        for _ in 0..2 {
            let (budget, made, stop, address) =
                (budget.clone(), made.clone(), stop.clone(), address.clone());
            tasks.push(tokio::spawn(async move {
                let mut conn = TcpStream::connect(&address).await.unwrap();
                while !stop.load(Relaxed) {
                    let Ok(permit) = budget.acquire().await else {
                        continue;
                    };
                    conn.write_all(b"c").await.unwrap();
                    let mut byte = [0u8; 1];
                    conn.read_exact(&mut byte).await.unwrap();
                    made.fetch_add(1, Relaxed);
                    drop(permit);
                }
            }));
        }
    }
    tokio::time::sleep(ms(4000)).await;
    stop.store(true, Relaxed);
    for task in tasks {
        let _ = tokio::time::timeout(ms(3000), task).await;
    }
    let made: Vec<f64> = calls.iter().map(|c| c.load(Relaxed) as f64).collect();
    let (sum, squares): (f64, f64) = (made.iter().sum(), made.iter().map(|c| c * c).sum());
    let jain = sum * sum / (made.len() as f64 * squares);
    eprintln!(
        "calls per process {made:?}, Jain {jain:.3}, peak {}",
        counter.peak.load(Relaxed)
    );
    assert!(
        counter.peak.load(Relaxed) <= limit,
        "the limit held at the dependency"
    );
    assert!(
        made.iter().all(|&c| c > 0.0),
        "every process had its turns: {made:?}"
    );
    assert!(jain >= 0.8, "Jain {jain:.3} over {made:?}");
    for fleet in &fleets {
        fleet.shutdown().await;
    }
}
