//! The simulated dependencies served over HTTP/1.1 on 127.0.0.1: the enrichment API and the system of record.
//!
//! - `GET /enrich/{id}`: answers after the scenario's enrichment latency; takes any number at once.
//!   Beyond the scenario's quota, if any: 429 at once, with `Retry-After` (whole seconds) and
//!   `retry-after-ms` saying when the quota would admit a call.
//! - `POST /records` (`{"id": <int>, "complete": <bool>}`): at most `capacity` in service, at most
//!   `queue` more waiting, 503 at once beyond that.
//! - `GET /stats`, `POST /stats/reset`, `GET /scenario`, `POST /scenario` (switch, reseed, reset).
//!
//! Latencies come from a seeded [`StdRng`] so runs can be repeated; every duration is multiplied
//! by the time scale. A call's latency is slept on a [`PreciseTimer`], not on tokio's timer:
//! tokio rounds every deadline up to its next 1 ms tick, a cost per call that does not shrink with
//! the time scale, so a run at time scale 0.1 would come out slower, scaled back, than the same run
//! at 1. Counters are kept by drop guards so a client that gives up mid-request never leaves
//! `in_service` high.
//!
//! - [`client`]: an HTTP client for the control endpoints, as a lab run uses them.
//! - [`process`]: a sim started as a child process.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use inflight_bench::gauge::PeakGauge;
use inflight_bench::timer::PreciseTimer;
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::oneshot;

use crate::scenario::{time_scale_ok, Scenario, ScenarioError, ScenarioSet, MAX_TIME_SCALE};
pub use crate::stats::{EndpointStats, SimStats};

pub mod client;
mod gates;
pub mod process;

use gates::{QuotaGate, RecordsGate};

/// How long the server waits for requests in progress after a shutdown signal before it stops anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// How long a connection may take to send a request's headers, and a request its body: a client
/// that opens connections and sends nothing must not hold them open.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest request body the sim reads.
const MAX_BODY: usize = 64 * 1024;

/// Why the sim could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("time scale must be a number above 0 and at most {MAX_TIME_SCALE}, got {0}")]
    TimeScale(f64),
    #[error("cannot listen on 127.0.0.1:{port}")]
    Bind {
        port: u16,
        #[source]
        source: std::io::Error,
    },
}

/// What the sim serves and how: the scenarios it knows, the one it starts with, the seed and time scale.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub scenarios: ScenarioSet,
    pub scenario: String,
    pub seed: u64,
    pub time_scale: f64,
}

impl SimConfig {
    /// The built-in scenarios, starting in `healthy`, seed 1, time scale 1.
    pub fn builtin() -> Self {
        Self {
            scenarios: ScenarioSet::builtin(),
            scenario: "healthy".to_string(),
            seed: 1,
            time_scale: 1.0,
        }
    }
}

fn check_time_scale(time_scale: f64) -> Result<f64, SimError> {
    if time_scale_ok(time_scale) {
        Ok(time_scale)
    } else {
        Err(SimError::TimeScale(time_scale))
    }
}

/// The body of `GET /scenario`: the current scenario with its parameters.
#[derive(Debug, Clone, Serialize)]
pub struct CurrentScenario {
    #[serde(flatten)]
    pub scenario: Scenario,
    pub seed: u64,
    pub time_scale: f64,
}

/// The body of `POST /scenario`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioSwitch {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_scale: Option<f64>,
}

#[derive(Debug, Default)]
struct Counters {
    seen: AtomicU64,
    accepted: AtomicU64,
    rejected_503: AtomicU64,
    rejected_429: AtomicU64,
    /// Requests being served now, and the most at once.
    in_service: PeakGauge,
    /// Requests inside the server now (served, waiting, or about to be refused), and the most.
    inside: PeakGauge,
}

impl Counters {
    fn snapshot(&self) -> EndpointStats {
        EndpointStats {
            seen: self.seen.load(Ordering::SeqCst),
            accepted: self.accepted.load(Ordering::SeqCst),
            rejected_503: self.rejected_503.load(Ordering::SeqCst),
            rejected_429: self.rejected_429.load(Ordering::SeqCst),
            in_service: self.in_service.current(),
            peak_in_service: self.in_service.peak(),
            peak_offered: self.inside.peak(),
        }
    }

    /// Zeroes the totals; peaks restart from what is inside now, so they stay true.
    fn reset(&self) {
        self.seen.store(0, Ordering::SeqCst);
        self.accepted.store(0, Ordering::SeqCst);
        self.rejected_503.store(0, Ordering::SeqCst);
        self.rejected_429.store(0, Ordering::SeqCst);
        self.in_service.reset_peak();
        self.inside.reset_peak();
    }
}

struct Current {
    scenario: Scenario,
    seed: u64,
    time_scale: f64,
    rng: StdRng,
    /// Replaced on a scenario switch so a new capacity takes effect for new requests.
    records_gate: Arc<RecordsGate>,
    /// The enrichment quota, if the scenario has one; replaced on a switch.
    quota: Option<Arc<QuotaGate>>,
}

struct Inner {
    scenarios: ScenarioSet,
    current: Mutex<Current>,
    enrich: Counters,
    records: Counters,
    /// What every call's latency is slept on.
    timer: PreciseTimer,
}

/// The sim's shared state, cheap to clone.
#[derive(Clone)]
pub struct SimState(Arc<Inner>);

impl SimState {
    /// Validates the config (scenario known, time scale sane) and builds the state.
    pub fn new(config: SimConfig) -> Result<Self, SimError> {
        let time_scale = check_time_scale(config.time_scale)?;
        let scenario = config.scenarios.get(&config.scenario)?.clone();
        let current = Current {
            records_gate: RecordsGate::new(&scenario.records, time_scale),
            quota: scenario
                .enrichment
                .quota
                .map(|q| Arc::new(QuotaGate::new(q, time_scale))),
            scenario,
            seed: config.seed,
            time_scale,
            rng: StdRng::seed_from_u64(config.seed),
        };
        Ok(Self(Arc::new(Inner {
            scenarios: config.scenarios,
            current: Mutex::new(current),
            enrich: Counters::default(),
            records: Counters::default(),
            timer: PreciseTimer::new(),
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        // A panic while holding the lock cannot leave `Current` half-updated in a way that matters.
        self.0.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The counters as `GET /stats` reports them.
    pub fn stats(&self) -> SimStats {
        let current = self.lock();
        SimStats {
            scenario: current.scenario.name.clone(),
            time_scale: current.time_scale,
            enrich: self.0.enrich.snapshot(),
            records: self.0.records.snapshot(),
        }
    }

    /// Zeroes counters and restarts peaks from what is inside now.
    pub fn reset_stats(&self) {
        self.0.enrich.reset();
        self.0.records.reset();
    }

    /// The current scenario with its seed and time scale.
    pub fn current(&self) -> CurrentScenario {
        let current = self.lock();
        CurrentScenario {
            scenario: current.scenario.clone(),
            seed: current.seed,
            time_scale: current.time_scale,
        }
    }

    /// Switches scenario, reseeds the RNG (same seed again if none given) and resets the stats.
    pub fn switch(&self, switch: &ScenarioSwitch) -> Result<CurrentScenario, SimError> {
        let scenario = self.0.scenarios.get(&switch.name)?.clone();
        {
            let mut current = self.lock();
            let time_scale = match switch.time_scale {
                Some(t) => check_time_scale(t)?,
                None => current.time_scale,
            };
            let seed = switch.seed.unwrap_or(current.seed);
            current.records_gate = RecordsGate::new(&scenario.records, time_scale);
            current.quota = scenario
                .enrichment
                .quota
                .map(|q| Arc::new(QuotaGate::new(q, time_scale)));
            current.scenario = scenario;
            current.seed = seed;
            current.time_scale = time_scale;
            current.rng = StdRng::seed_from_u64(seed);
        }
        self.reset_stats();
        Ok(self.current())
    }
}

/// The sim's routes over `state`.
pub fn router(state: SimState) -> Router {
    Router::new()
        .route("/enrich/{id}", get(enrich))
        .route("/records", post(write_record))
        .route("/stats", get(stats))
        .route("/stats/reset", post(reset_stats))
        .route("/scenario", get(get_scenario).post(post_scenario))
        .route("/metrics", get(metrics_text))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

async fn not_found(uri: axum::http::Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!(
            "no such path {}; the sim serves GET /enrich/{{id}}, POST /records, GET /stats, POST /stats/reset, GET|POST /scenario, GET /metrics",
            uri.path()
        ),
    )
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{method} is not served on {}; the sim serves GET /enrich/{{id}}, POST /records, GET /stats, POST /stats/reset, GET|POST /scenario, GET /metrics",
            uri.path()
        ),
    )
}

async fn enrich(State(state): State<SimState>, Path(id): Path<String>) -> Response {
    let counters = &state.0.enrich;
    counters.seen.fetch_add(1, Ordering::SeqCst);
    let Ok(id) = id.parse::<i64>() else {
        let shown: String = id.chars().take(40).collect();
        let why = if !id.is_empty()
            && id
                .trim_start_matches('-')
                .bytes()
                .all(|b| b.is_ascii_digit())
        {
            format!(
                "enrichment id must fit a 64-bit integer ({} to {}), got `{shown}`",
                i64::MIN,
                i64::MAX
            )
        } else {
            format!("enrichment id must be an integer, got `{shown}`")
        };
        return error(StatusCode::BAD_REQUEST, why);
    };
    let (delay, quota) = {
        let mut current = state.lock();
        current.records_gate.start_schedule();
        let Current {
            scenario,
            rng,
            time_scale,
            quota,
            ..
        } = &mut *current;
        let (latency, _hang) = scenario.enrichment.sample(rng);
        (latency.mul_f64(*time_scale), quota.clone())
    };
    if let Some(Err(wait)) = quota.map(|q| q.admit()) {
        counters.rejected_429.fetch_add(1, Ordering::SeqCst);
        return quota_exceeded(wait);
    }
    // Every enrichment call is in service at once: there is no queue and no refusal.
    let _in_service = counters.in_service.enter();
    let _inside = counters.inside.enter();
    state.0.timer.sleep(delay).await;
    counters.accepted.fetch_add(1, Ordering::SeqCst);
    Json(json!({ "id": id, "score": score(id) })).into_response()
}

/// A 429 for a call beyond the quota, with the wait until the quota admits one: `Retry-After` in
/// whole seconds rounded up (RFC 9110's delta-seconds, at least 1), and `retry-after-ms` in whole
/// milliseconds rounded up, as LLM providers send it. A caller that waits either is not early.
fn quota_exceeded(wait: Duration) -> Response {
    let round_up =
        |unit: u128| u64::try_from(wait.as_nanos().div_ceil(unit).max(1)).unwrap_or(u64::MAX);
    let (seconds, millis) = (round_up(1_000_000_000), round_up(1_000_000));
    let mut response = error(
        StatusCode::TOO_MANY_REQUESTS,
        format!("enrichment quota exceeded: retry in {millis} ms"),
    );
    let headers = response.headers_mut();
    headers.insert(axum::http::header::RETRY_AFTER, seconds.into());
    headers.insert(RETRY_AFTER_MS, millis.into());
    response
}

/// The header with the exact wait in milliseconds.
const RETRY_AFTER_MS: axum::http::HeaderName =
    axum::http::HeaderName::from_static("retry-after-ms");

/// A stable made-up enrichment value per id, so answers are checkable.
fn score(id: i64) -> f64 {
    let h = (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    (h % 1000) as f64 / 1000.0
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordBody {
    id: i64,
    complete: bool,
}

/// The record of a `POST /records` body, which must be a JSON object: serde would also take the
/// array `[1, true]` for the struct.
fn parse_record(body: &[u8]) -> Result<RecordBody, String> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if !value.is_object() {
        return Err(format!("expected an object, got `{value}`"));
    }
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// Reads a request body within [`READ_TIMEOUT`] and [`MAX_BODY`]; a JSON error otherwise.
async fn read_body(body: axum::body::Body) -> Result<Bytes, Response> {
    use http_body_util::BodyExt;
    let limited = http_body_util::Limited::new(body, MAX_BODY);
    match tokio::time::timeout(READ_TIMEOUT, limited.collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("body must be at most {MAX_BODY} bytes"),
        )),
        Ok(Err(e)) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("cannot read the body: {e}"),
        )),
        Err(_) => Err(error(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the body did not arrive within {}",
                humantime::format_duration(READ_TIMEOUT)
            ),
        )),
    }
}

async fn write_record(State(state): State<SimState>, body: axum::body::Body) -> Response {
    let counters = &state.0.records;
    counters.seen.fetch_add(1, Ordering::SeqCst);
    let body = match read_body(body).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let record = match parse_record(&body) {
        Ok(record) => record,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("body must be JSON {{\"id\": <int>, \"complete\": <bool>}}: {e}"),
            )
        }
    };
    let (delay, gate) = {
        let mut current = state.lock();
        current.records_gate.start_schedule();
        let Current {
            scenario,
            rng,
            time_scale,
            records_gate,
            ..
        } = &mut *current;
        let (latency, _hang) = scenario.records.latency.sample(rng);
        (latency.mul_f64(*time_scale), records_gate.clone())
    };
    let (capacity, queue) = gate.limits();
    let slots = gate.slots();
    let _inside = counters.inside.enter();
    let inside_now = _inside.count();
    if inside_now > capacity + queue {
        counters.rejected_503.fetch_add(1, Ordering::SeqCst);
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("system of record is full: {capacity} in service and {queue} waiting"),
        );
    }
    let Ok(_slot) = slots.acquire_owned().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "system of record closed");
    };
    let _in_service = counters.in_service.enter();
    state.0.timer.sleep(delay).await;
    counters.accepted.fetch_add(1, Ordering::SeqCst);
    Json(json!({ "id": record.id, "accepted": true, "complete": record.complete })).into_response()
}

async fn stats(State(state): State<SimState>) -> Json<SimStats> {
    Json(state.stats())
}

async fn metrics_text(State(state): State<SimState>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            crate::metrics::CONTENT_TYPE,
        )],
        crate::metrics::render_sim(&state.stats()),
    )
        .into_response()
}

async fn reset_stats(State(state): State<SimState>) -> Json<SimStats> {
    state.reset_stats();
    Json(state.stats())
}

async fn get_scenario(State(state): State<SimState>) -> Json<CurrentScenario> {
    Json(state.current())
}

async fn post_scenario(State(state): State<SimState>, body: axum::body::Body) -> Response {
    let body = match read_body(body).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let switch: ScenarioSwitch = match serde_json::from_slice(&body) {
        Ok(switch) => switch,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "body must be JSON {{\"name\": <scenario>, \"seed\": <u64, optional>, \"time_scale\": <number, optional>}}: {e}"
                ),
            )
        }
    };
    match state.switch(&switch) {
        Ok(current) => Json(current).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

/// A sim bound to a port on 127.0.0.1, not yet serving.
pub struct Sim {
    listener: tokio::net::TcpListener,
    state: SimState,
    addr: SocketAddr,
}

impl Sim {
    /// Validates `config` and binds 127.0.0.1:`port` (0 picks a free port).
    pub async fn bind(config: SimConfig, port: u16) -> Result<Self, SimError> {
        let state = SimState::new(config)?;
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .await
            .map_err(|source| SimError::Bind { port, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| SimError::Bind { port, source })?;
        Ok(Self {
            listener,
            state,
            addr,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn state(&self) -> SimState {
        self.state.clone()
    }

    /// Serves until `shutdown` completes, then waits at most a second for requests in progress.
    pub async fn serve<F>(self, shutdown: F) -> std::io::Result<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let app = router(self.state);
        let open = Arc::new(PeakGauge::new());
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = self.listener.accept() => {
                    let stream = match accepted {
                        Ok((stream, _)) => stream,
                        // Out of file descriptors or a connection reset before accept: go on.
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    };
                    let service = hyper_util::service::TowerToHyperService::new(app.clone());
                    let open = open.clone();
                    tokio::spawn(async move {
                        let _open = open.enter();
                        let mut http = hyper::server::conn::http1::Builder::new();
                        http.timer(hyper_util::rt::TokioTimer::new())
                            .header_read_timeout(READ_TIMEOUT);
                        let _ = http
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    });
                }
                _ = &mut shutdown => break,
            }
        }
        // Hanging calls (8 s each) would hold a graceful stop; wait a little, then stop anyway.
        let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        while open.current() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Serves in a background task of the current runtime; the returned handle stops it.
    pub fn spawn(self) -> SimHandle {
        let (tx, rx) = oneshot::channel::<()>();
        let url = self.url();
        let addr = self.addr;
        let state = self.state.clone();
        let task = tokio::spawn(self.serve(async move {
            let _ = rx.await;
        }));
        SimHandle {
            url,
            addr,
            state,
            stop: Some(tx),
            task: Some(task),
        }
    }
}

/// A sim serving in the background; dropping it stops the server.
pub struct SimHandle {
    url: String,
    addr: SocketAddr,
    state: SimState,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl SimHandle {
    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn state(&self) -> SimState {
        self.state.clone()
    }

    /// Stops the server and waits for it (at most about a second for requests in progress).
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.unwrap_or_else(|e| Err(std::io::Error::other(e))),
            None => Ok(()),
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_reset_keeps_peaks_true_to_what_is_inside() {
        let c = Counters::default();
        let g1 = c.in_service.enter();
        let g2 = c.in_service.enter();
        c.seen.store(5, Ordering::SeqCst);
        drop(g2);
        assert_eq!(c.snapshot().peak_in_service, 2);
        c.reset();
        let s = c.snapshot();
        assert_eq!((s.seen, s.in_service, s.peak_in_service), (0, 1, 1));
        drop(g1);
        assert_eq!(c.snapshot().in_service, 0);
    }

    #[test]
    fn bad_time_scale_and_scenario_are_refused() {
        let mut config = SimConfig::builtin();
        config.time_scale = 0.0;
        assert!(matches!(
            SimState::new(config.clone()),
            Err(SimError::TimeScale(_))
        ));
        config.time_scale = f64::NAN;
        assert!(SimState::new(config.clone()).is_err());
        config.time_scale = 1.0;
        config.scenario = "nope".into();
        let err = SimState::new(config).err().unwrap().to_string();
        assert!(
            err.contains("known scenarios: degrading, hard-limit, healthy"),
            "{err}"
        );
    }

    /// A 30 ms call at time scale 0.05 must last 1.5 ms. On tokio's timer, which rounds each
    /// deadline up to its next 1 ms tick, it lasts 2.3-3.2 ms (median over 100 calls; 1.5-2.2x):
    /// a cost per call that does not shrink with the time scale, so a quick run would come out
    /// slower, scaled back, than a full one. On the sim's timer the median is 1.65-1.75 ms in a
    /// debug build, on a 2-core machine with four other busy processes too. The median, not the
    /// mean: a busy host stalls a few calls by 10-20 ms whatever the timer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_at_a_small_time_scale_lasts_its_scaled_latency() {
        let scenarios = ScenarioSet::parse(
            r#"
            [scenarios.exact]
            description = "every call takes 30 ms"
            enrichment = { median = "30ms" }
            records = { median = "30ms", capacity = 6, queue = 6 }
            "#,
            "test",
        )
        .unwrap();
        let state = SimState::new(SimConfig {
            scenarios,
            scenario: "exact".into(),
            seed: 1,
            time_scale: 0.05,
        })
        .unwrap();
        let ideal = Duration::from_micros(1500);
        for endpoint in ["enrich", "records"] {
            let mut took = Vec::new();
            for id in 0..100 {
                let start = std::time::Instant::now();
                let response = match endpoint {
                    "enrich" => enrich(State(state.clone()), Path(id.to_string())).await,
                    _ => {
                        let body = format!(r#"{{"id": {id}, "complete": true}}"#);
                        write_record(State(state.clone()), body.into()).await
                    }
                };
                took.push(start.elapsed());
                assert_eq!(response.status(), StatusCode::OK);
            }
            took.sort();
            let median = took[took.len() / 2];
            assert!(took[0] >= ideal, "{endpoint}: a call took {:?}", took[0]);
            assert!(
                median <= ideal.mul_f64(1.3),
                "{endpoint}: calls of {ideal:?} took {median:?} (median)"
            );
        }
    }

    /// The quota's 429s say when to come back, from the quota's own state: a call made after
    /// `retry-after-ms` is admitted, and `Retry-After` is that wait in whole seconds, rounded up.
    #[tokio::test]
    async fn a_429_carries_the_wait_until_the_quota_admits() {
        let scenarios = ScenarioSet::parse(
            r#"
            [scenarios.q]
            description = "10 calls/s, no burst"
            enrichment = { median = "1ms", quota = "10/s", quota_burst = 1 }
            records = { median = "1ms", capacity = 1, queue = 0 }
            "#,
            "test",
        )
        .unwrap();
        let state = SimState::new(SimConfig {
            scenarios,
            scenario: "q".into(),
            seed: 1,
            time_scale: 1.0,
        })
        .unwrap();
        let call = || enrich(State(state.clone()), Path("7".into()));
        assert_eq!(call().await.status(), StatusCode::OK);
        let refused = call().await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        let header =
            |name: &str| -> u64 { refused.headers()[name].to_str().unwrap().parse().unwrap() };
        let (seconds, millis) = (header("retry-after"), header("retry-after-ms"));
        assert_eq!(seconds, 1, "100 ms or less, rounded up to a whole second");
        assert!((1..=100).contains(&millis), "retry-after-ms: {millis}");
        assert_eq!(state.stats().enrich.rejected_429, 1);
        tokio::time::sleep(Duration::from_millis(millis)).await;
        assert_eq!(call().await.status(), StatusCode::OK, "waited {millis} ms");
    }

    #[test]
    fn switch_reseeds_and_resets() {
        let state = SimState::new(SimConfig::builtin()).unwrap();
        state.0.records.seen.store(3, Ordering::SeqCst);
        let current = state
            .switch(&ScenarioSwitch {
                name: "slow-write".into(),
                seed: Some(9),
                time_scale: Some(0.5),
            })
            .unwrap();
        assert_eq!(current.scenario.name, "slow-write");
        assert_eq!((current.seed, current.time_scale), (9, 0.5));
        assert_eq!(state.stats().records.seen, 0);
        let err = state
            .switch(&ScenarioSwitch {
                name: "x".into(),
                seed: None,
                time_scale: None,
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown scenario `x`"), "{err}");
    }
}
