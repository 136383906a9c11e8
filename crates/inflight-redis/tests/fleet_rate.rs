//! A fleet budget's rate against a real `redis-server` on loopback: three replicas (each its own
//! `RedisFleet`, so its own connections) call one counting HTTP server on 127.0.0.1, which
//! stamps every request it receives; the starts it counts never exceed `burst + rate x t` over
//! any window, however many replicas ask. Budgets files with `rate` and `scope = "fleet"` too.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use inflight::{AcquireError, Budget, Budgets, Rate};
use inflight_redis::{Fail, RedisFleet};
use support::{ms, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// An HTTP server on 127.0.0.1 that answers every request `200 ok` and keeps the moment each
/// one arrived: the dependency's own count of starts.
struct CountingServer {
    port: u16,
    arrivals: Arc<Mutex<Vec<Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingServer {
    async fn start() -> CountingServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let seen = arrivals.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 512];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                        if request.len() > 8192 {
                            return;
                        }
                    }
                    seen.lock().unwrap().push(Instant::now());
                    let _ = conn
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        )
                        .await;
                });
            }
        });
        CountingServer {
            port,
            arrivals,
            task,
        }
    }

    /// One request, as a client of the dependency makes it; the status line back.
    async fn call(port: u16) -> String {
        let mut conn = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        conn.write_all(b"GET / HTTP/1.1\r\nhost: dependency\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        conn.read_to_string(&mut response).await.unwrap();
        response.lines().next().unwrap_or_default().to_string()
    }

    fn arrivals(&self) -> Vec<Instant> {
        let mut a = self.arrivals.lock().unwrap().clone();
        a.sort();
        a
    }
}

impl Drop for CountingServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The largest excess of arrivals over `burst + rate x (t + late)` in any window, for arrivals
/// each up to `late` after its slot (connect and send, on a busy machine); 0 when none exceeds.
fn worst_excess(arrivals: &[Instant], rate: f64, burst: u32, late: Duration) -> f64 {
    let mut worst = 0.0f64;
    for (i, first) in arrivals.iter().enumerate() {
        for (j, last) in arrivals.iter().enumerate().skip(i) {
            let t = (*last - *first + late).as_secs_f64();
            let count = (j - i + 1) as f64;
            worst = worst.max(count - (f64::from(burst) + rate * t));
        }
    }
    worst
}

fn fleet(server: &RedisServer) -> RedisFleet {
    RedisFleet::builder(&server.url())
        .op_timeout(ms(1000))
        .build()
        .unwrap()
}

/// Runs `calls` calls through each of `budgets` from `tasks` tasks each, every call a request
/// to the counting server; the outcome of each.
async fn drive(
    budgets: &[Budget],
    tasks: usize,
    calls: usize,
    port: u16,
) -> Vec<Result<String, AcquireError>> {
    let mut handles = Vec::new();
    for budget in budgets {
        for _ in 0..tasks {
            let budget = budget.clone();
            handles.push(tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for _ in 0..calls {
                    outcomes.push(match budget.acquire().await {
                        Ok(permit) => {
                            let status = CountingServer::call(port).await;
                            drop(permit);
                            Ok(status)
                        }
                        Err(e) => Err(e),
                    });
                }
                outcomes
            }));
        }
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

/// A request reaches the dependency up to this long after its slot: the permit's wake-up, a
/// connect and a write on a loaded 2-core machine. The bound is checked with this slack.
const LATE: Duration = Duration::from_millis(150);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_one_rate_counted_at_the_dependency() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let dependency = CountingServer::start().await;
    let (rate, burst) = (20.0, 3);
    // Three replicas, each with 4 callers of 5 calls: 60 calls, 3 s of the fleet's rate. Three
    // local gates of 20/s would let 60/s through.
    let budgets: Vec<Budget> = (0..3)
        .map(|_| {
            let store = fleet(&server)
                .store(16, Fail::Closed)
                .rate(Rate::per_second(rate), burst)
                .unwrap();
            Budget::builder("llm")
                .max_concurrent(8)
                .permit_timeout(Duration::from_secs(30))
                .store(Arc::new(store))
                .build()
                .unwrap()
        })
        .collect();
    let start = Instant::now();
    let outcomes = drive(&budgets, 4, 5, dependency.port).await;
    let took = start.elapsed();
    assert!(
        outcomes
            .iter()
            .all(|o| o.as_deref() == Ok("HTTP/1.1 200 OK")),
        "every call admitted and answered: {outcomes:?}"
    );
    let arrivals = dependency.arrivals();
    assert_eq!(arrivals.len(), 60);
    let excess = worst_excess(&arrivals, rate, burst, LATE);
    assert!(
        excess <= 0.0,
        "a window saw {excess:.1} starts more than burst + rate x (t + {LATE:?})"
    );
    // Not a bound met by letting nothing through: the run took about (60 - burst) / rate.
    let least = Duration::from_secs_f64((60.0 - f64::from(burst) - 1.0) / rate);
    assert!(took >= least, "60 calls in {took:?}, faster than the rate");
    let limited: u64 = budgets.iter().map(|b| b.snapshot().rate_limited).sum();
    assert_eq!(limited, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_rate_refusal_is_counted_by_the_store_and_says_how_long() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = fleet(&server)
        .store(8, Fail::Closed)
        .rate(Rate::per_second(2.0), 1)
        .unwrap();
    let budget = Budget::builder("slow")
        .max_concurrent(8)
        .permit_timeout(ms(100))
        .store(Arc::new(store.clone()))
        .build()
        .unwrap();
    assert_eq!(
        budget.rate_limited_for(),
        Some(Duration::ZERO),
        "nothing known yet"
    );
    drop(budget.acquire().await.unwrap());
    assert!(budget.acquire().await.unwrap_err().is_rate_limited());
    assert_eq!(store.snapshot().rate_limited, 1);
    // The next slot is about 500 ms away; 100 ms of it may be waited for.
    let wait = budget.rate_limited_for().unwrap();
    assert!(
        wait > ms(250) && wait <= ms(400),
        "about 400 ms past the deadline: {wait:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budgets_file_keeps_a_fleet_budgets_rate_for_every_replica() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let dependency = CountingServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("budgets.toml");
    // A turn more than 300 ms away is refused: with 10/s and a burst of 2, at most 2 + 3 (+1
    // for the slot at exactly 300 ms) of the 30 callers below start; the rest are refused.
    std::fs::write(
        &path,
        format!(
            r#"
[fleet]
url = "{}"

[budgets.llm]
max_concurrent = 32
permit_timeout = "300ms"
rate = "10/s"
burst = 2
scope = "fleet"
"#,
            server.url()
        ),
    )
    .unwrap();
    let replicas: Vec<Budgets> = (0..3)
        .map(|_| inflight_redis::load(&path).unwrap())
        .collect();
    let budgets: Vec<Budget> = replicas
        .iter()
        .map(|b| b.get("llm").unwrap().clone())
        .collect();
    // Warm up each replica's connection, so that every caller below reaches Redis at once;
    // then let the burst refill.
    for b in &budgets {
        drop(b.acquire().await.unwrap());
    }
    tokio::time::sleep(ms(500)).await;
    let _ = dependency.arrivals.lock().unwrap().drain(..);
    let outcomes = drive(&budgets, 10, 1, dependency.port).await;
    let admitted = outcomes.iter().filter(|o| o.is_ok()).count();
    let refused = outcomes
        .iter()
        .filter(|o| o.as_ref().is_err_and(AcquireError::is_rate_limited))
        .count();
    assert_eq!(admitted + refused, 30, "{outcomes:?}");
    assert!(
        (2..=6).contains(&admitted),
        "{admitted} of 30 admitted across three replicas: one fleet rate, not three"
    );
    let limited: u64 = budgets.iter().map(|b| b.snapshot().rate_limited).sum();
    assert_eq!(
        limited, refused as u64,
        "each refusal counted as rate_limited"
    );
    // Each budget has an answer for how long a new caller would wait past its deadline (a
    // refusal's Retry-After): its store keeps the rate.
    let waits: Vec<_> = budgets.iter().map(Budget::rate_limited_for).collect();
    assert!(
        waits.iter().all(|w| w.is_some()),
        "a fleet rate says how long: {waits:?}"
    );

    let arrivals = dependency.arrivals();
    assert_eq!(arrivals.len(), admitted);
    assert!(worst_excess(&arrivals, 10.0, 2, LATE) <= 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_rate_refused_while_redis_is_down_under_fail_closed() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let store = fleet(&server)
        .store(4, Fail::Closed)
        .rate(Rate::per_second(10.0), 1)
        .unwrap();
    let llm = Budget::builder("llm")
        .max_concurrent(4)
        .permit_timeout(ms(500))
        .store(Arc::new(store))
        .build()
        .unwrap();
    drop(llm.acquire().await.unwrap());
    server.stop();
    let err = llm.acquire().await.unwrap_err();
    assert!(
        matches!(err, AcquireError::Unavailable(_)) && err.to_string().contains("\"llm\""),
        "{err}"
    );
}

#[test]
fn bad_rate_settings_on_a_fleet_budget_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("budgets.toml");
    let write = |budget: &str| {
        std::fs::write(
            &path,
            format!(
                "[fleet]\nurl = \"redis://127.0.0.1:6379\"\n\n[budgets.llm]\nmax_concurrent = 8\nscope = \"fleet\"\n{budget}\n"
            ),
        )
        .unwrap();
    };
    for (budget, expected) in [
        (
            "burst = 5",
            "budgets.llm.burst: only a rate limit takes a burst (add a rate)",
        ),
        (
            "rate = \"0/s\"",
            "budgets.llm.rate: must be greater than zero, got \"0/s\"",
        ),
        (
            "rate = \"10/s\"\nburst = 0",
            "budgets.llm.burst: must be at least 1, got 0",
        ),
        ("rate = \"fast\"", "budgets.llm.rate"),
    ] {
        write(budget);
        let err = inflight_redis::load(&path).unwrap_err().to_string();
        assert!(err.contains(expected), "{budget}: {err}");
    }
    // And in code.
    let fleet = RedisFleet::new("redis://127.0.0.1:6379").unwrap();
    let err = fleet
        .store(8, Fail::Closed)
        .rate(Rate::per_second(0.0), 1)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "rate must be a positive finite rate of at most 1000000/s, got 0/s"
    );
    assert!(fleet
        .store(8, Fail::Closed)
        .rate(Rate::per_second(10.0), 0)
        .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_rates_burst_is_not_handed_out_again_after_redis_lost_its_state() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let fleet = RedisFleet::builder(&server.url())
        .lease(ms(300))
        .op_timeout(ms(300))
        .retry_after(ms(50))
        .build()
        .unwrap();
    let store = fleet
        .store(8, Fail::Closed)
        .rate(Rate::per_second(2.0), 4)
        .unwrap();
    let budget = Budget::builder("burst")
        .max_concurrent(8)
        .permit_timeout(ms(100))
        .store(Arc::new(store))
        .build()
        .unwrap();
    // A call that runs across the restart (its renewals meet the new, empty Redis), and the
    // rest of the burst of 4 spent just before it.
    let running = budget.acquire_owned().await.unwrap();
    for _ in 0..3 {
        drop(budget.acquire().await.unwrap());
    }
    let _server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .unwrap();
    // The running call's renewal finds the state gone: the budget learns for one lease.
    tokio::time::sleep(ms(700)).await;
    let tries = futures::future::join_all((0..4).map(|_| budget.acquire())).await;
    let granted = tries.iter().filter(|t| t.is_ok()).count();
    let limited = tries
        .iter()
        .filter(|t| t.as_ref().is_err_and(AcquireError::is_rate_limited))
        .count();
    assert!(
        (1..=2).contains(&granted) && granted + limited == 4,
        "the burst refills from the loss at 2/s, not all at once: {tries:?}"
    );
    drop(running);
}
