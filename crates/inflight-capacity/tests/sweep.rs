//! The sweep against an in-process HTTP server on loopback that serves 3 calls at once, queues
//! 3 more and refuses the rest with 503, and reports the calls it serves at `/stats`: the knee,
//! the caps, a shutdown mid-run, and the server's own count of calls in flight; and against one
//! that refuses at once (an HTML page) every call beyond its capacity: refused callers are paced.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use inflight_bench::shutdown::Shutdown;
use inflight_capacity::knee::Verdict;
use inflight_capacity::{InFlightSource, Levels, Progress, Stop, Sweep, Target};
use tokio::sync::Semaphore;

const CAPACITY: usize = 3;
const QUEUE: u64 = 3;
const SERVICE: Duration = Duration::from_millis(40);

struct Server {
    url: String,
    /// `GET` answers `{"work": {"in_service": N}}`.
    stats: String,
    calls: Arc<AtomicU64>,
    stats_calls: Arc<AtomicU64>,
}

async fn serve() -> Server {
    let slots = Arc::new(Semaphore::new(CAPACITY));
    let inside = Arc::new(AtomicU64::new(0));
    let in_service = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    let stats_calls = Arc::new(AtomicU64::new(0));
    let counted = calls.clone();
    let serving = in_service.clone();
    let stats_counted = stats_calls.clone();
    let app = Router::new()
        .route(
            "/work",
            get(move || {
                let (slots, inside, calls) = (slots.clone(), inside.clone(), counted.clone());
                let serving = serving.clone();
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    let status = if now > CAPACITY as u64 + QUEUE {
                        StatusCode::SERVICE_UNAVAILABLE
                    } else {
                        let _slot = slots.acquire().await.unwrap();
                        serving.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(SERVICE).await;
                        serving.fetch_sub(1, Ordering::SeqCst);
                        StatusCode::OK
                    };
                    inside.fetch_sub(1, Ordering::SeqCst);
                    status
                }
            }),
        )
        .route(
            "/flaky",
            get({
                let readings = Arc::new(AtomicU64::new(0));
                move || {
                    // Every other reading fails, the first one not.
                    let n = readings.fetch_add(1, Ordering::SeqCst);
                    async move {
                        if n.is_multiple_of(2) {
                            (StatusCode::OK, "{\"n\": 1}")
                        } else {
                            (StatusCode::INTERNAL_SERVER_ERROR, "busy")
                        }
                    }
                }
            }),
        )
        .route(
            "/stats",
            get(move || {
                stats_counted.fetch_add(1, Ordering::SeqCst);
                let n = in_service.load(Ordering::SeqCst);
                async move { axum::Json(serde_json::json!({"work": {"in_service": n}})) }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server {
        url: format!("http://{addr}/work"),
        stats: format!("http://{addr}/stats"),
        calls,
        stats_calls,
    }
}

fn sweep(url: &str, levels: &str) -> Sweep {
    Sweep::new(Target::new(url).unwrap(), Levels::parse(levels).unwrap())
        .requests_per_level(NonZeroU64::new(60).unwrap())
        .duration_per_level(Duration::from_secs(10))
        .name("work")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_knee_is_the_servers_capacity() {
    let server = serve().await;
    let mut seen = Vec::new();
    let report = sweep(&server.url, "1,2,4,8,16")
        .run(&Shutdown::never(), |p| {
            if let Progress::Measured(l) = p {
                seen.push(l.concurrency);
            }
        })
        .await
        .unwrap();
    assert_eq!(report.capacity, Some(3), "{}", report.render());
    assert!(matches!(report.verdict, Verdict::Knee { .. }));
    let service = report.service_time_ms.unwrap();
    assert!((40.0..60.0).contains(&service), "{service}");
    assert!(matches!(
        report.stopped,
        Some(Stop::Errors { concurrency: 8, .. })
    ));
    // The climb stops at 8 (3 served + 3 queued < 8), then probes next to the knee.
    assert_eq!(&seen[..4], [1, 2, 4, 8]);
    assert!(seen[4..].contains(&3), "{seen:?}");
    let suggested = report.suggested.unwrap();
    assert_eq!(suggested.max_concurrent, 3);
    assert!(suggested.toml.contains("[budgets.work]"));
    // Every call the server saw was counted by a level, plus the first check call.
    let counted: u64 = report.levels.iter().map(|l| l.requests).sum();
    assert_eq!(server.calls.load(Ordering::SeqCst), counted + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_total_request_cap_holds() {
    let server = serve().await;
    let report = sweep(&server.url, "1,2,3")
        .total_requests(100)
        .run(&Shutdown::never(), |_| {})
        .await
        .unwrap();
    assert_eq!(report.caps.total_requests, 100);
    assert_eq!(server.calls.load(Ordering::SeqCst), 100);
    assert_eq!(report.stopped, Some(Stop::RequestCap));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_stops_at_once_with_what_was_measured() {
    let server = serve().await;
    let (tx, rx) = tokio::sync::watch::channel(false);
    let shutdown = Shutdown::from_channel(rx);
    let slow = Sweep::new(
        Target::new(&server.url).unwrap(),
        Levels::parse("1,2").unwrap(),
    )
    .requests_per_level(NonZeroU64::new(10_000).unwrap())
    .duration_per_level(Duration::from_secs(60));
    let started = std::time::Instant::now();
    let fire = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        tx.send(true).unwrap();
    });
    let report = slow.run(&shutdown, |_| {}).await.unwrap();
    fire.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(report.stopped, Some(Stop::Interrupted));
    assert_eq!(report.levels.len(), 1);
    assert!(report.levels[0].interrupted);
    assert!(report.levels[0].ok > 0);
    assert!(report.suggested.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_total_time_cap_cuts_the_level_in_flight() {
    let server = serve().await;
    let started = std::time::Instant::now();
    let report = Sweep::new(
        Target::new(&server.url).unwrap(),
        Levels::parse("1,2").unwrap(),
    )
    .requests_per_level(NonZeroU64::new(10_000).unwrap())
    .duration_per_level(Duration::from_secs(60))
    .total_time(Duration::from_secs(1))
    .run(&Shutdown::never(), |_| {})
    .await
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(report.caps.total_time, Duration::from_secs(1));
    assert_eq!(report.stopped, Some(Stop::TimeCap));
    assert!(report.levels[0].interrupted);
    assert!(report.suggested.is_none());
}

#[tokio::test]
async fn nothing_listening_is_an_error_before_any_level() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = sweep(&format!("http://127.0.0.1:{port}/"), "1")
        .run(&Shutdown::never(), |_| {})
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("cannot reach"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_own_count_of_calls_in_flight_stops_at_its_capacity() {
    let server = serve().await;
    let source = InFlightSource::new(&server.stats, "/work/in_service").unwrap();
    let report = sweep(&server.url, "1,2,4,8")
        .target_in_flight(source)
        .run(&Shutdown::never(), |_| {})
        .await
        .unwrap();
    let text = report.render();
    for level in &report.levels {
        let seen = level.target_in_flight.as_ref().unwrap();
        let max = seen.max.unwrap();
        assert!(seen.samples > 0 && seen.failed == 0, "{text}");
        // The server never serves more than the client sent, nor more than its capacity.
        assert!(
            max <= f64::from(level.concurrency.min(CAPACITY as u32)),
            "{text}"
        );
        assert!(seen.mean.unwrap() <= max, "{text}");
    }
    let at_8 = report.levels.iter().find(|l| l.concurrency == 8).unwrap();
    assert_eq!(
        at_8.target_in_flight.as_ref().unwrap().max,
        Some(3.0),
        "{text}"
    );
    assert!(text.contains("target max  target mean"), "{text}");
    // The readings went to /stats on their own; every /work call was counted by a level.
    let counted: u64 = report.levels.iter().map(|l| l.requests).sum();
    assert_eq!(server.calls.load(Ordering::SeqCst), counted + 1);
    assert!(server.stats_calls.load(Ordering::SeqCst) > 0);
    let polled = report.target_in_flight_source.unwrap();
    assert_eq!(
        (polled.pointer.as_str(), polled.every_ms),
        ("/work/in_service", 10.0)
    );
}

#[tokio::test]
async fn a_source_that_cannot_be_read_stops_the_run_before_any_call() {
    let server = serve().await;
    for (pointer, needle) in [
        (
            "/work/in_sevice",
            "its answer has nothing at /work/in_sevice (/work has keys in_service)",
        ),
        (
            "/work",
            "/work is an object (keys in_service), not a number of calls",
        ),
    ] {
        let err = sweep(&server.url, "1")
            .target_in_flight(InFlightSource::new(&server.stats, pointer).unwrap())
            .run(&Shutdown::never(), |_| {})
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("cannot read calls in flight from http://127.0.0.1:"),
            "{text}"
        );
        assert!(text.ends_with(needle), "{text}");
    }
    // Not JSON: the work endpoint answers 200 with an empty body.
    let err = sweep(&server.url, "1")
        .target_in_flight(InFlightSource::new(&server.url, "/n").unwrap())
        .run(&Shutdown::never(), |_| {})
        .await
        .unwrap_err();
    assert!(err.to_string().contains("its answer is not JSON"), "{err}");
    let missing = server.url.replace("/work", "/nothing");
    let err = sweep(&server.url, "1")
        .target_in_flight(InFlightSource::new(&missing, "/n").unwrap())
        .run(&Shutdown::never(), |_| {})
        .await
        .unwrap_err();
    assert!(
        err.to_string().ends_with("it answered 404 Not Found"),
        "{err}"
    );
    // Only the /work call of the not-JSON check reached the target: it was the source.
    assert_eq!(server.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_failed_readings_are_counted_not_fatal() {
    let server = serve().await;
    let flaky = server.stats.replace("/stats", "/flaky");
    let report = sweep(&server.url, "1,2")
        .target_in_flight(InFlightSource::new(&flaky, "/n").unwrap())
        .target_in_flight_every(Duration::from_millis(20))
        .run(&Shutdown::never(), |_| {})
        .await
        .unwrap();
    assert_eq!(report.levels.len(), 2);
    for level in &report.levels {
        let seen = level.target_in_flight.as_ref().unwrap();
        assert!(seen.failed > 0 && seen.samples > 0, "{seen:?}");
        assert_eq!(seen.max, Some(1.0));
        assert_eq!(
            seen.first_failure.as_deref(),
            Some("it answered 500 Internal Server Error: busy")
        );
    }
    let text = report.render();
    assert!(
        text.contains(
            "readings of the target's calls in flight failed; the first: it answered 500"
        ),
        "{text}"
    );
}

/// A server on loopback that serves `REFUSING_CAPACITY` calls at once, each in `SERVICE`, and
/// answers every call beyond them at once with 503 and a multi-line HTML page, as nginx does.
async fn serve_refusing() -> String {
    let inside = Arc::new(AtomicU64::new(0));
    let app = Router::new().route(
        "/work",
        get(move || {
            let inside = inside.clone();
            async move {
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                let answer = if now > REFUSING_CAPACITY {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        [("content-type", "text/html")],
                        "<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n<body>\r\n<center><h1>503 Service Temporarily Unavailable</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n",
                    )
                } else {
                    tokio::time::sleep(SERVICE).await;
                    (StatusCode::OK, [("content-type", "text/plain")], "ok")
                };
                inside.fetch_sub(1, Ordering::SeqCst);
                answer
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/work")
}

const REFUSING_CAPACITY: u64 = 3;

/// Above the capacity a refused caller waits about one service time before calling again, so it
/// sends about as many calls as a served one: the level's calls stay near callers x level time /
/// service time, and its failures near the share of callers refused (1 of 4), instead of one
/// caller's tight loop of refusals using up the level in a few milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_caller_waits_about_a_service_time() {
    let url = serve_refusing().await;
    let report = sweep(&url, "1,2,4")
        .run(&Shutdown::never(), |_| {})
        .await
        .unwrap();
    let text = report.render();
    let at_4 = report.levels.iter().find(|l| l.concurrency == 4).unwrap();
    assert!(at_4.errors.status_503 > 0, "{text}");
    // Three callers served, one refused at a time: about a third as many failures as 2xx.
    assert!(at_4.errors.total <= at_4.ok, "{text}");
    let service_s = SERVICE.as_secs_f64();
    let bound = 2.0 * 4.0 * at_4.elapsed_s / service_s + 4.0;
    assert!(
        (at_4.requests as f64) <= bound,
        "{} calls in {:.3}s, more than {bound:.0}: {text}",
        at_4.requests,
        at_4.elapsed_s
    );
    assert!(!at_4.thin, "{text}");
    assert_eq!(report.capacity, Some(3), "{text}");
    // The first failure is one line: the page's title, not the page.
    let first = text
        .lines()
        .find(|l| l.starts_with("first failure: "))
        .unwrap();
    assert_eq!(
        first,
        "first failure: 503 Service Unavailable: 503 Service Temporarily Unavailable (an HTML page)",
        "{text}"
    );
}
