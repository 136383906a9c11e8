//! Prometheus text at `/metrics`: the sim's counters, and the runner's budgets (through
//! `inflight::metrics`), so that a real Prometheus can scrape a lab run.
//!
//! The sim's exposition is rendered from its counters at each scrape, through a recorder of its
//! own, so several sims in one process never mix their numbers. The runner installs one process-
//! wide recorder before it builds its budgets (their histogram handles come from it) and serves
//! it on `--metrics-addr`.

use std::net::SocketAddr;
use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics::{counter, gauge, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::stats::{EndpointStats, SimStats};

/// The content type of Prometheus text exposition 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Requests that reached a sim endpoint, by endpoint and outcome (counter).
pub const SIM_REQUESTS: &str = "inflight_sim_requests_total";
/// Requests a sim endpoint is serving now (gauge).
pub const SIM_IN_SERVICE: &str = "inflight_sim_in_service";
/// The most requests a sim endpoint served at once since the last reset (gauge).
pub const SIM_PEAK_IN_SERVICE: &str = "inflight_sim_peak_in_service";
/// The most requests inside a sim endpoint at once, waiting ones included (gauge).
pub const SIM_PEAK_OFFERED: &str = "inflight_sim_peak_offered";

/// The sim's counters as Prometheus text.
pub fn render_sim(stats: &SimStats) -> String {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        metrics::describe_counter!(
            SIM_REQUESTS,
            Unit::Count,
            "Requests that reached the sim, by endpoint and outcome (ok, rejected_503, rejected_429, other)."
        );
        metrics::describe_gauge!(SIM_IN_SERVICE, Unit::Count, "Requests being served now.");
        metrics::describe_gauge!(
            SIM_PEAK_IN_SERVICE,
            Unit::Count,
            "The most requests served at once since the last reset."
        );
        metrics::describe_gauge!(
            SIM_PEAK_OFFERED,
            Unit::Count,
            "The most requests inside at once since the last reset, waiting and refused ones included."
        );
        for (endpoint, e) in [("enrich", &stats.enrich), ("records", &stats.records)] {
            publish_endpoint(endpoint, &stats.scenario, e);
        }
    });
    handle.render()
}

fn publish_endpoint(endpoint: &'static str, scenario: &str, e: &EndpointStats) {
    let other = e
        .seen
        .saturating_sub(e.accepted + e.rejected_503 + e.rejected_429);
    for (outcome, n) in [
        ("ok", e.accepted),
        ("rejected_503", e.rejected_503),
        ("rejected_429", e.rejected_429),
        ("other", other),
    ] {
        counter!(SIM_REQUESTS, "endpoint" => endpoint, "outcome" => outcome).absolute(n);
    }
    let labels = [
        ("endpoint", endpoint.to_string()),
        ("scenario", scenario.to_string()),
    ];
    gauge!(SIM_IN_SERVICE, &labels).set(e.in_service as f64);
    gauge!(SIM_PEAK_IN_SERVICE, &labels).set(e.peak_in_service as f64);
    gauge!(SIM_PEAK_OFFERED, &labels).set(e.peak_offered as f64);
}

/// The process-wide recorder of the runner: installed once, with real histogram buckets.
pub fn runner_recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(inflight::metrics::BUCKETS)
            .expect("the bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        // Another recorder already installed (an embedding program's) keeps its place; the
        // budgets then report to it and this handle renders only what it saw.
        let _ = metrics::set_global_recorder(recorder);
        inflight::metrics::describe();
        handle
    })
}

/// Serves `render()` as Prometheus text at `GET /metrics` on `listener` until the task is
/// dropped or aborted.
pub fn serve(
    listener: tokio::net::TcpListener,
    render: impl Fn() -> String + Clone + Send + Sync + 'static,
) -> tokio::task::JoinHandle<()> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let render = render.clone();
            async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], render()).into_response() }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })
}

/// Binds `addr`, which must be a loopback address.
pub async fn bind_loopback(addr: SocketAddr) -> Result<tokio::net::TcpListener, String> {
    if !addr.ip().is_loopback() {
        return Err(format!(
            "--metrics-addr must be a loopback address (127.0.0.1 or [::1]), got {addr}"
        ));
    }
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} for metrics: {e}"))
}
