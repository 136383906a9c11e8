//! The proxy benchmark's parts against each other on loopback: the load generator against the
//! real upstream, the idle connections against this process's own memory.

use std::time::Duration;

use inflight_bench::proxy_bench::idle::{self, IdlePlan};
use inflight_bench::proxy_bench::load::{self, LoadPlan, Loop};
use inflight_bench::proxy_bench::upstream::Upstream;
use inflight_bench::proxy_bench::{reset_upstream, upstream_stats, Target};
use tokio::net::TcpListener;

async fn upstream(delay: Duration) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    Upstream::spawn(listener, delay).unwrap()
}

fn plan(url: &str, connections: usize, mode: Loop, duration: Duration) -> LoadPlan {
    LoadPlan {
        target: Target::parse(url).unwrap(),
        connections,
        mode,
        // Not a multiple of the open loop's spacing: no scheduled send falls on the boundary.
        warmup: Duration::from_millis(105),
        duration,
        request_timeout: Duration::from_secs(10),
        pids: Vec::new(),
        count_instructions: false,
        samples: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_loop_counts_what_the_upstream_served() {
    let up = upstream(Duration::from_millis(5)).await;
    let url = format!("http://{}/slow", up.local_addr());
    let report = load::run(plan(&url, 4, Loop::Closed, Duration::from_millis(400)))
        .await
        .unwrap();
    assert_eq!(report.errors, 0);
    assert!(report.ok > 0);
    assert_eq!(report.statuses.get(&200), Some(&report.ok));
    assert_eq!(report.latency_ms.count, report.ok);
    // The warm-up's requests are served too, but not counted.
    assert!(
        up.requests() >= report.sent,
        "{} < {}",
        up.requests(),
        report.sent
    );
    // Four connections, one request each at most at a time, each held 5 ms at the upstream.
    assert!((1..=4).contains(&up.peak()), "peak {}", up.peak());
    assert!(report.latency_ms.p50 >= 5.0, "{:?}", report.latency_ms);
    assert_eq!(report.proxy_cpu_s, None);
    let stats = upstream_stats(up.local_addr()).await.unwrap();
    assert_eq!((stats.requests, stats.peak), (up.requests(), up.peak()));
    reset_upstream(up.local_addr()).await.unwrap();
    assert_eq!((up.requests(), up.peak()), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_loop_sends_its_schedule_whatever_the_answers_do() {
    // 20 ms answers on 4 connections could carry 200/s at most in a closed loop; the schedule
    // asks 100/s, so every one of the 100 scheduled requests in the measured second is sent.
    let up = upstream(Duration::from_millis(20)).await;
    let url = format!("http://{}/slow", up.local_addr());
    let report = load::run(LoadPlan {
        samples: true,
        ..plan(&url, 4, Loop::Open { rate: 100.0 }, Duration::from_secs(1))
    })
    .await
    .unwrap();
    assert_eq!(report.sent, 100);
    assert_eq!(report.ok + report.errors, 100);
    assert_eq!(report.offered_per_s, Some(100.0));
    assert!(report.send_lag_ms.is_some());
    // Latency runs from the scheduled send, so it is never below the service time.
    assert!(report.latency_ms.p50 >= 20.0, "{:?}", report.latency_ms);
    // Every measured request kept, in the order scheduled, 10 ms apart over the 4 connections.
    let samples = &report.samples;
    assert_eq!(samples.len(), 100);
    assert!(samples.windows(2).all(|w| w[0].at_us <= w[1].at_us));
    assert!(samples.last().unwrap().at_us < 1_000_000);
    for connection in 0..4 {
        assert_eq!(
            samples
                .iter()
                .filter(|s| s.connection == connection)
                .count(),
            25
        );
    }
    let answered = samples.iter().filter(|s| s.latency_us >= 20_000).count() as u64;
    assert_eq!(answered, report.ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_a_busy_connection_is_the_targets_latency_not_the_generators_lag() {
    // One connection asked for a request every 10 ms by an upstream that takes 30: each request
    // after the first waits for the answer before it, 20 ms more each time. That wait is in
    // the latency (from the schedule) and in the connection wait, not in the generator's own
    // send lag, which a slow target must not inflate into a discarded run.
    let up = upstream(Duration::from_millis(30)).await;
    let url = format!("http://{}/slow", up.local_addr());
    let report = load::run(plan(
        &url,
        1,
        Loop::Open { rate: 100.0 },
        Duration::from_millis(300),
    ))
    .await
    .unwrap();
    let wait = report.connection_wait_ms.expect("an open loop reports it");
    let lag = report.send_lag_ms.expect("an open loop reports it");
    assert!(wait.p50 >= 20.0, "connection wait {wait:?}");
    assert!(
        report.latency_ms.p50 >= wait.p50 + 30.0,
        "{:?}",
        report.latency_ms
    );
    assert!(
        lag.p50 < 10.0,
        "send lag {lag:?} counts the wait for the connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_listening_is_counted_as_errors_not_a_hang() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let report = load::run(plan(
        &format!("http://{addr}/"),
        2,
        Loop::Closed,
        Duration::from_millis(200),
    ))
    .await
    .unwrap();
    assert_eq!(report.ok, 0);
    assert!(report.errors > 0);
    assert_eq!(report.errors, report.sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_plan_is_refused_before_anything_is_sent() {
    let up = upstream(Duration::ZERO).await;
    let url = format!("http://{}/", up.local_addr());
    for bad in [
        plan(&url, 0, Loop::Closed, Duration::from_millis(10)),
        plan(&url, 1, Loop::Open { rate: 0.0 }, Duration::from_millis(10)),
        plan(
            &url,
            1,
            Loop::Open { rate: f64::NAN },
            Duration::from_millis(10),
        ),
        plan(&url, 1, Loop::Closed, Duration::ZERO),
    ] {
        let e = load::run(bad).await.unwrap_err();
        assert!(e.to_string().starts_with("invalid plan: "), "{e}");
    }
    assert_eq!(up.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_stay_open_while_the_memory_is_read() {
    let up = upstream(Duration::ZERO).await;
    let report = idle::run(IdlePlan {
        target: Target::parse(&format!("http://{}/", up.local_addr())).unwrap(),
        connections: 50,
        pids: vec![std::process::id()],
        settle: Duration::from_millis(100),
        request_timeout: Duration::from_secs(10),
    })
    .await
    .unwrap();
    assert_eq!((report.opened, report.still_open), (50, 50));
    assert_eq!(up.requests(), 50);
    assert!(report.processes >= 1);
    assert!(report.rss_before_kib > 0 && report.rss_after_kib > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_to_nothing_are_an_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let e = idle::run(IdlePlan {
        target: Target::parse(&format!("http://{addr}/")).unwrap(),
        connections: 3,
        pids: vec![std::process::id()],
        settle: Duration::ZERO,
        request_timeout: Duration::from_secs(1),
    })
    .await
    .unwrap_err();
    assert!(e.to_string().contains("none of 3 connections"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cpu_time_of_the_named_processes_is_reported() {
    // This process is the upstream too, so it uses CPU time while it serves the load.
    let up = upstream(Duration::ZERO).await;
    let mut with_pid = plan(
        &format!("http://{}/", up.local_addr()),
        4,
        Loop::Closed,
        Duration::from_millis(500),
    );
    with_pid.pids = vec![std::process::id()];
    let report = load::run(with_pid).await.unwrap();
    let cpu = report.proxy_cpu_s.unwrap();
    assert!(cpu > 0.0, "{cpu}");
    assert!(report.proxy_cpu_us_per_answer.unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_count_sends_exactly_that_many() {
    let up = upstream(Duration::ZERO).await;
    let target = Target::parse(&format!("http://{}/", up.local_addr())).unwrap();
    let report = load::send_count(&target, 4, 103, Duration::from_secs(10)).await;
    assert_eq!(
        (report.sent, report.ok, report.other, report.errors),
        (103, 103, 0, 0)
    );
    assert_eq!(up.requests(), 103);
    // Four connections, one request at a time each.
    assert!(up.peak() <= 4, "peak {}", up.peak());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_writes_every_measured_request_to_its_samples_file() {
    let up = upstream(Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let (out, csv) = (dir.path().join("out.jsonl"), dir.path().join("s.csv"));
    let url = format!("http://{}/", up.local_addr());
    let load = |extra: &[&str]| {
        let mut cmd = tokio::process::Command::new(super::support::proxy_bench());
        cmd.args([
            "load",
            "--url",
            &url,
            "--connections",
            "2",
            "--duration",
            "0.5",
        ])
        .args([
            "--warmup", "0", "--case", "latency", "--proxy", "direct", "--out",
        ])
        .arg(&out)
        .args(extra)
        .arg("--samples")
        .arg(&csv);
        cmd.output()
    };
    let done = load(&["--rate", "100"]).await.unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("at_us,latency_us,connection"));
    let rows: Vec<Vec<u64>> = lines
        .map(|l| l.split(',').map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 50, "{text}");
    assert!(rows.iter().all(|r| r[1] > 0 && r[2] < 2), "{text}");
    // Without a rate (a closed loop) there is no schedule to sample: refused, as a usage error.
    let refused = load(&[]).await.unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--rate"));
}
