//! The sweep against an in-process HTTP server on loopback that serves 3 calls at once, queues
//! 3 more and refuses the rest with 503: the knee, the caps and a shutdown mid-run.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use inflight_bench::shutdown::Shutdown;
use inflight_capacity::knee::Verdict;
use inflight_capacity::{Levels, Progress, Stop, Sweep, Target};
use tokio::sync::Semaphore;

const CAPACITY: usize = 3;
const QUEUE: u64 = 3;
const SERVICE: Duration = Duration::from_millis(40);

struct Server {
    url: String,
    calls: Arc<AtomicU64>,
}

async fn serve() -> Server {
    let slots = Arc::new(Semaphore::new(CAPACITY));
    let inside = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    let counted = calls.clone();
    let app = Router::new().route(
        "/work",
        get(move || {
            let (slots, inside, calls) = (slots.clone(), inside.clone(), counted.clone());
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                let status = if now > CAPACITY as u64 + QUEUE {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    let _slot = slots.acquire().await.unwrap();
                    tokio::time::sleep(SERVICE).await;
                    StatusCode::OK
                };
                inside.fetch_sub(1, Ordering::SeqCst);
                status
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/work", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server { url, calls }
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
