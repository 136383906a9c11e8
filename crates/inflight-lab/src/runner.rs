//! The runner: processes records against the sim with one strategy and measures what happened.
//!
//! Each record makes three enrichment calls one after another (`GET /enrich/{id}`), then one write
//! (`POST /records`). A strategy decides how many records are in flight and which budgets
//! ([`inflight::Budget`]) gate the calls. `inflight lab run` starts this in its own process inside
//! a CPU quota (`inflight lab runner`), so the CPU-derived default sees the limit as a container
//! would. The run's clock starts once a connection per record in flight is open, so that a run's
//! time is its calls' and not their set-up's, at any time scale.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inflight_bench::gauge::PeakGauge;
use serde::Serialize;

mod args;

pub use self::args::{RunnerArgs, RUNNER_SUBCOMMAND};

use crate::gate::{Answer, CallFailure, Gate, MakeCall, RetryCounts, Retrying};
use crate::results::{ClassResult, RunResult, Timeline};
use crate::scenario::{time_scale_ok, RecordClasses, MAX_TIME_SCALE};
use crate::strategy::{available_parallelism, BudgetPlan, GateSpec, Strategy};

/// The client's timeout for each call at time scale 1, as in the reference experiment's lab.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// Enrichment calls per record, made one after another.
pub const ENRICHMENT_CALLS: u32 = 3;
/// How much longer than the call timeout the runner waits for an answer when a proxy enforces
/// the budgets: the proxy holds the call in its queue (with no deadline, as the runner's own
/// budgets do) and ends it with a 504 at the call timeout, so the runner's own timeout only
/// guards against a proxy that never answers.
pub const PROXIED_TIMEOUT_FACTOR: u32 = 30;
/// How often the calls in flight are sampled for the timeline (wall time, not scaled).
pub const TIMELINE_INTERVAL: Duration = Duration::from_millis(10);
/// The timeline keeps at most this many samples (an hour at 10 ms), so memory stays bounded.
pub const MAX_TIMELINE_SAMPLES: usize = 360_000;
/// The longest the connections to the sim may take to open before the run starts anyway.
const WARM_UP_LIMIT: Duration = Duration::from_secs(5);

/// What a runner is asked to do.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    pub strategy: Strategy,
    /// Base URL of the sim, e.g. `http://127.0.0.1:40123`.
    pub sim_url: String,
    pub records: u64,
    /// Multiplies the client timeout (the sim scales its own latencies).
    pub time_scale: f64,
    /// The run's seed, as the sim was given it (the runner draws nothing); kept in the result.
    pub seed: u64,
    /// Serve the budgets' metrics as Prometheus text at `GET /metrics` here while the run lasts.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The id of the first record; records are numbered on from it (replicas of a run each take
    /// their own range).
    pub first_id: u64,
    /// The Redis that fleet budgets (`scope = "fleet"`) keep their permits in.
    pub redis_url: Option<String>,
    /// The sizes the lab measured for budgets given as `{ measure = "capacity" }`, by dependency.
    pub measured: BTreeMap<String, usize>,
    /// Where enrichment calls go instead of the sim (the proxy of a strategy with
    /// `enforce = "proxy"`).
    pub enrichment_url: Option<String>,
    /// Where writes go instead of the sim.
    pub records_url: Option<String>,
    /// The priority class of each record, if the scenario gives records classes: each
    /// record's class, drawn from `seed` and its id, is named to the budgets that declare
    /// classes, and the result reports each class apart.
    pub classes: Option<RecordClasses>,
}

/// Why a run could not be carried out (as opposed to records that failed, which are counted).
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("sim url `{0}` must be http://127.0.0.1:<port> or http://localhost:<port> (the lab talks to loopback only)")]
    NotLoopback(String),
    #[error("time scale must be a number above 0 and at most {MAX_TIME_SCALE}, got {0}")]
    BadTimeScale(f64),
    #[error("{0}")]
    Metrics(String),
    #[error("cannot build a budget: {0}")]
    Budget(String),
    #[error("cannot build the HTTP client")]
    Client(#[source] reqwest::Error),
    #[error("outcome accounting is off: {0}")]
    Accounting(String),
    #[error("strategy `{0}` is enforced by a proxy (enforce = \"proxy\"): give the runner --enrichment-url and --records-url of the proxy (`inflight lab run` starts one)")]
    NoProxy(String),
}

/// How one record ended. Every record started ends in exactly one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// All enrichment calls answered and the write was accepted.
    Complete,
    /// At least one enrichment call timed out; the record was written, marked incomplete, and the
    /// write was accepted.
    Incomplete,
    /// The system of record answered 503.
    Rejected,
    /// Any other error; the string is its kind (`enrich_status_500`, `write_timeout`, ...).
    Failed(String),
}

/// The outcome counts of a run, kept so they can be checked against the records started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub started: u64,
    pub complete: u64,
    pub incomplete: u64,
    pub rejected: u64,
    pub failed: u64,
    pub failed_by_kind: BTreeMap<String, u64>,
}

impl Tally {
    pub fn start(&mut self) {
        self.started += 1;
    }

    pub fn end(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Complete => self.complete += 1,
            Outcome::Incomplete => self.incomplete += 1,
            Outcome::Rejected => self.rejected += 1,
            Outcome::Failed(kind) => {
                self.failed += 1;
                *self.failed_by_kind.entry(kind).or_default() += 1;
            }
        }
    }

    /// Records that ended, whatever the outcome.
    pub fn ended(&self) -> u64 {
        self.complete + self.incomplete + self.rejected + self.failed
    }

    /// Checks that the four outcomes add up to the records started and the failures by kind add
    /// up to the failures.
    pub fn check(&self) -> Result<(), String> {
        if self.ended() != self.started {
            return Err(format!(
                "{} records started but complete {} + incomplete {} + rejected {} + failed {} = {}",
                self.started,
                self.complete,
                self.incomplete,
                self.rejected,
                self.failed,
                self.ended()
            ));
        }
        let by_kind: u64 = self.failed_by_kind.values().sum();
        if by_kind != self.failed {
            return Err(format!(
                "{} records failed but the failures by kind add up to {by_kind}",
                self.failed
            ));
        }
        Ok(())
    }
}

/// The gates of each dependency; with a shared budget both are clones of one budget. Each
/// budget's call timeout is the client's, so it starts once the permit is held. A strategy with
/// a `retry` table retries through each dependency's gate.
#[derive(Clone)]
struct Gates {
    enrichment: Option<Retrying>,
    records: Option<Retrying>,
}

impl Gates {
    fn new(
        strategy: &Strategy,
        budgets: &BudgetPlan,
        call_timeout: Duration,
        time_scale: f64,
        fleet: Option<&inflight_redis::RedisFleet>,
        measured: &BTreeMap<String, usize>,
    ) -> Result<Gates, RunnerError> {
        let make = |name: &str, spec: &GateSpec| {
            let spec = match (spec, measured.get(name)) {
                (GateSpec::Measured, Some(&n)) => GateSpec::Fixed(n),
                _ => spec.clone(),
            };
            let gate = Gate::new(name, &spec, call_timeout, time_scale, fleet)
                .map_err(RunnerError::Budget)?;
            Retrying::new(gate, strategy.retry.as_ref(), time_scale)
                .map_err(|e| RunnerError::Budget(format!("{name}: {e}")))
        };
        Ok(match budgets {
            BudgetPlan::None => Gates {
                enrichment: None,
                records: None,
            },
            BudgetPlan::Shared(n) => {
                let shared = make("shared", &GateSpec::Fixed(*n))?;
                Gates {
                    enrichment: Some(shared.clone()),
                    records: Some(shared),
                }
            }
            BudgetPlan::PerDependency {
                enrichment,
                records,
            } => Gates {
                enrichment: enrichment
                    .as_ref()
                    .map(|g| make("enrichment", g))
                    .transpose()?,
                records: records.as_ref().map(|g| make("records", g)).transpose()?,
            },
        })
    }
}

impl Gates {
    /// The distinct `inflight` budgets among the gates (a shared budget once).
    fn budgets(&self) -> Vec<inflight::Budget> {
        let mut out: Vec<inflight::Budget> = Vec::new();
        for gate in [&self.enrichment, &self.records].into_iter().flatten() {
            if let Gate::Budget(b) = gate.gate() {
                if !out.iter().any(|o| o.name() == b.name()) {
                    out.push(b.clone());
                }
            }
        }
        out
    }

    /// The retries each dependency's gate made and was denied.
    fn retries(gate: &Option<Retrying>) -> RetryCounts {
        gate.as_ref().map(Retrying::retries).unwrap_or_default()
    }
}

/// The calls to one dependency, counted attempt by attempt.
#[derive(Default)]
struct Calls {
    /// Attempts in flight.
    gauge: Arc<PeakGauge>,
    /// Attempts made (a retry is one more).
    made: Arc<AtomicU64>,
    /// Answers by status, for the overload answers: 429 and 503.
    status_429: Arc<AtomicU64>,
    status_503: Arc<AtomicU64>,
}

impl Calls {
    fn peak(&self) -> u64 {
        self.gauge.peak()
    }

    fn current(&self) -> u64 {
        self.gauge.current()
    }

    fn count(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::SeqCst)
    }
}

/// What the record tasks share.
struct Shared {
    client: reqwest::Client,
    /// The sim's base URL, for the warm-up.
    base: String,
    /// Where enrichment calls and writes go: the sim, or the proxy in front of it.
    enrichment_base: String,
    records_base: String,
    /// Whether a proxy enforces the budgets, so that its 504 is the call timeout.
    proxied: bool,
    gates: Gates,
    call_timeout: Duration,
    enrichment: Calls,
    writes: Calls,
    enrichment_timeouts: AtomicU64,
    next_id: AtomicU64,
    /// One past the last record id this runner takes.
    end_id: u64,
    tally: Mutex<Tally>,
    /// The records' classes and the run's seed they are drawn from.
    classes: Option<(RecordClasses, u64)>,
    /// Per class: the records started, and the completion times of those accepted.
    by_class: Mutex<BTreeMap<String, (u64, Vec<f64>)>>,
}

fn transport_kind(err: &reqwest::Error) -> &'static str {
    if err.is_connect() {
        "connect"
    } else if err.is_body() || err.is_decode() {
        "body"
    } else if err.is_request() {
        "request"
    } else {
        "transport"
    }
}

/// Runs the call through the dependency's gate (permit or peer limiter, then the client timeout,
/// which starts only once the call is admitted; retried if the strategy says so), or under the
/// client timeout alone when the dependency has no gate. `request` makes each attempt's request;
/// every attempt is counted in `calls`, and its answer's `Retry-After` (or `retry-after-ms`) read
/// with `inflight::RetryAfter` for the gate.
async fn gated<R>(
    shared: &Shared,
    gate: Option<&Retrying>,
    class: Option<&str>,
    calls: &Calls,
    request: R,
) -> Result<u16, CallFailure>
where
    R: Fn() -> reqwest::RequestBuilder + Send + Sync + 'static,
{
    let (gauge, made) = (calls.gauge.clone(), calls.made.clone());
    let (status_429, status_503) = (calls.status_429.clone(), calls.status_503.clone());
    let make = MakeCall::new(move || {
        let sent = request().send();
        let (gauge, made) = (gauge.clone(), made.clone());
        let (status_429, status_503) = (status_429.clone(), status_503.clone());
        Box::pin(async move {
            let _in_flight = gauge.enter();
            made.fetch_add(1, Ordering::Relaxed);
            let response = sent
                .await
                .map_err(|e| CallFailure::Transport(transport_kind(&e)))?;
            let status = response.status().as_u16();
            match status {
                429 => status_429.fetch_add(1, Ordering::Relaxed),
                503 => status_503.fetch_add(1, Ordering::Relaxed),
                _ => 0,
            };
            // A malformed value is no retry-after: the answer is still an overload.
            let retry_after = inflight::RetryAfter::from_headers(response.headers())
                .ok()
                .flatten();
            // Read the whole answer so the call counts as done only when the server is done
            // with it.
            response
                .bytes()
                .await
                .map_err(|e| CallFailure::Transport(transport_kind(&e)))?;
            Ok(Answer {
                status,
                retry_after,
            })
        })
    });
    let timeout = shared.call_timeout;
    match gate {
        Some(gate) => gate.call(make, timeout, class).await,
        // The proxy ends a call at its call timeout with a 504 (it never forwards before it
        // holds a permit, so the wait in its queue is not part of the timeout).
        None if shared.proxied => {
            match tokio::time::timeout(timeout * PROXIED_TIMEOUT_FACTOR, make.attempt()).await {
                Ok(Ok(Answer { status: 504, .. })) | Err(_) => Err(CallFailure::Timeout),
                Ok(answer) => answer.map(|a| a.status),
            }
        }
        None => tokio::time::timeout(timeout, make.attempt())
            .await
            .map_err(|_| CallFailure::Timeout)?
            .map(|a| a.status),
    }
}

/// Processes record `id`, of priority class `class` if the scenario gives it one.
async fn process(shared: &Shared, id: u64, class: Option<&str>) -> Outcome {
    let mut timed_out = false;
    for _ in 0..ENRICHMENT_CALLS {
        let url = format!("{}/enrich/{id}", shared.enrichment_base);
        let client = shared.client.clone();
        let result = gated(
            shared,
            shared.gates.enrichment.as_ref(),
            class,
            &shared.enrichment,
            move || client.get(&url),
        )
        .await;
        match result {
            Ok(200) => {}
            Ok(code) => return Outcome::Failed(CallFailure::Status(code).kind("enrich")),
            Err(CallFailure::Timeout) => {
                // As in the reference experiment: the record is still written, marked incomplete.
                shared.enrichment_timeouts.fetch_add(1, Ordering::Relaxed);
                timed_out = true;
            }
            Err(other) => return Outcome::Failed(other.kind("enrich")),
        }
    }
    let body = serde_json::json!({ "id": id, "complete": !timed_out });
    let url = format!("{}/records", shared.records_base);
    let client = shared.client.clone();
    let result = gated(
        shared,
        shared.gates.records.as_ref(),
        class,
        &shared.writes,
        move || client.post(&url).json(&body),
    )
    .await;
    match result {
        Ok(200) if timed_out => Outcome::Incomplete,
        Ok(200) => Outcome::Complete,
        Ok(503) => Outcome::Rejected,
        Ok(code) => Outcome::Failed(CallFailure::Status(code).kind("write")),
        Err(failure) => Outcome::Failed(failure.kind("write")),
    }
}

/// Takes record ids until none are left, like one slot of `Parallel.ForEachAsync`.
async fn worker(shared: Arc<Shared>) {
    loop {
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        if id >= shared.end_id {
            return;
        }
        let class = shared
            .classes
            .as_ref()
            .map(|(classes, seed)| classes.class_of(*seed, id));
        // The record's own clock: the run's (`completion_s`), from when the record is taken.
        let taken = Instant::now();
        shared.tally.lock().expect("tally lock").start();
        let outcome = process(&shared, id, class).await;
        let took = taken.elapsed().as_secs_f64();
        if let Some(class) = class {
            let mut by_class = shared.by_class.lock().expect("class lock");
            let (started, accepted) = by_class.entry(class.to_string()).or_default();
            *started += 1;
            if matches!(outcome, Outcome::Complete | Outcome::Incomplete) {
                accepted.push(took);
            }
        }
        shared.tally.lock().expect("tally lock").end(outcome);
    }
}

/// Checks that the sim URL is on loopback and returns it without a trailing slash.
pub fn loopback_base(url: &str) -> Result<String, RunnerError> {
    let base = url.trim_end_matches('/');
    let rest = base
        .strip_prefix("http://")
        .ok_or_else(|| RunnerError::NotLoopback(url.to_string()))?;
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| RunnerError::NotLoopback(url.to_string()))?;
    let loopback = matches!(host, "127.0.0.1" | "localhost" | "[::1]");
    if !loopback || port.parse::<u16>().is_err() {
        return Err(RunnerError::NotLoopback(url.to_string()));
    }
    // Always talk to the IPv4 loopback address, which is where the sim listens.
    Ok(format!("http://127.0.0.1:{port}"))
}

/// Runs all records of one strategy against the sim and measures the run. Needs a tokio runtime
/// with the time and I/O drivers.
pub async fn run(config: &RunnerConfig) -> Result<RunResult, RunnerError> {
    if !time_scale_ok(config.time_scale) {
        return Err(RunnerError::BadTimeScale(config.time_scale));
    }
    let base = loopback_base(&config.sim_url)?;
    let proxied = config.strategy.proxied();
    let (enrichment_base, records_base) = match (&config.enrichment_url, &config.records_url) {
        (Some(e), Some(r)) => (loopback_base(e)?, loopback_base(r)?),
        _ if proxied => return Err(RunnerError::NoProxy(config.strategy.name.clone())),
        (e, r) => (
            e.as_deref().map_or(Ok(base.clone()), loopback_base)?,
            r.as_deref().map_or(Ok(base.clone()), loopback_base)?,
        ),
    };
    // The proxy enforces the budgets: the runner has none of its own.
    let budgets = if proxied {
        &BudgetPlan::None
    } else {
        &config.strategy.budgets
    };
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(RunnerError::Client)?;
    let in_flight = config.strategy.records_in_flight.resolve();
    let call_timeout = CLIENT_TIMEOUT.mul_f64(config.time_scale);
    let fleet = match &config.redis_url {
        Some(url) => Some(
            inflight_redis::RedisFleet::new(url).map_err(|e| RunnerError::Budget(e.to_string()))?,
        ),
        None => None,
    };
    // The recorder first: budgets take their histogram handles from it when they are built.
    let metrics_listener = match config.metrics_addr {
        Some(addr) => {
            crate::metrics::runner_recorder();
            Some(
                crate::metrics::bind_loopback(addr)
                    .await
                    .map_err(RunnerError::Metrics)?,
            )
        }
        None => None,
    };
    let shared = Arc::new(Shared {
        client,
        base,
        enrichment_base,
        records_base,
        proxied,
        gates: Gates::new(
            &config.strategy,
            budgets,
            call_timeout,
            config.time_scale,
            fleet.as_ref(),
            &config.measured,
        )?,
        call_timeout,
        enrichment: Calls::default(),
        writes: Calls::default(),
        enrichment_timeouts: AtomicU64::new(0),
        next_id: AtomicU64::new(config.first_id),
        end_id: config.first_id.saturating_add(config.records),
        tally: Mutex::new(Tally::default()),
        classes: config.classes.clone().map(|c| (c, config.seed)),
        by_class: Mutex::new(BTreeMap::new()),
    });

    let metrics_server = metrics_listener.map(|listener| {
        let budgets = shared.gates.budgets();
        crate::metrics::serve(listener, move || {
            inflight::metrics::publish_all(&budgets);
            crate::metrics::runner_recorder().render()
        })
    });

    let tasks = in_flight.min(config.records as usize);
    warm_up(&shared.client, &shared.base, tasks).await;

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(sample_timeline(shared.clone(), stop.clone()));
    // A fleet budget that loses Redis (or gets it back, or learns after Redis lost its state)
    // is said on stderr, which the lab shows after the run.
    let watcher = fleet.clone().map(|fleet| {
        let mut health = inflight_redis::HealthLog::new(Duration::from_secs(10));
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                every.tick().await;
                for line in health.lines(&fleet) {
                    eprintln!("{line}");
                }
            }
        })
    });

    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        workers.spawn(worker(shared.clone()));
    }
    let mut panicked = 0;
    while let Some(joined) = workers.join_next().await {
        if joined.is_err() {
            panicked += 1;
        }
    }
    let completion = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let timeline = sampler.await.unwrap_or_default();
    if let Some(watcher) = watcher {
        watcher.abort();
    }
    if let Some(fleet) = &fleet {
        // What the fleet's budgets went through, in one last look (the watcher may not have
        // seen a short outage).
        for h in fleet.health() {
            if h.fallbacks > 0 || h.refused > 0 || h.epochs_moved > 0 {
                eprintln!(
                    "fleet budget {}: {} calls on the local fallback, {} refused while redis could not be reached, redis lost its state {} times",
                    h.budget, h.fallbacks, h.refused, h.epochs_moved
                );
            }
        }
    }
    if let Some(server) = metrics_server {
        server.abort();
    }

    let tally = shared.tally.lock().expect("tally lock").clone();
    tally.check().map_err(|m| {
        RunnerError::Accounting(if panicked > 0 {
            format!("{m} ({panicked} record tasks panicked)")
        } else {
            m
        })
    })?;
    if tally.started != config.records {
        return Err(RunnerError::Accounting(format!(
            "{} records asked for but {} started",
            config.records, tally.started
        )));
    }

    let completion_s = completion.as_secs_f64();
    let accepted = tally.complete + tally.incomplete;
    let mut by_class = std::mem::take(&mut *shared.by_class.lock().expect("class lock"));
    let mut classes = BTreeMap::new();
    let mut class_completions_s = BTreeMap::new();
    if let Some((record_classes, _)) = &shared.classes {
        // Every class of the scenario, those this runner drew no record of too.
        for name in record_classes.names() {
            let (records, accepted_s) = by_class.remove(name).unwrap_or_default();
            classes.insert(
                name.to_string(),
                ClassResult::of(records, accepted_s.clone()),
            );
            class_completions_s.insert(name.to_string(), accepted_s);
        }
        let by_class_records: u64 = classes.values().map(|c| c.records).sum();
        if by_class_records != tally.started {
            return Err(RunnerError::Accounting(format!(
                "{} records started but the classes hold {by_class_records}",
                tally.started
            )));
        }
    }
    let enrichment_retries = Gates::retries(&shared.gates.enrichment);
    let write_retries = Gates::retries(&shared.gates.records);
    Ok(RunResult {
        strategy: config.strategy.name.clone(),
        scenario: String::new(),
        repeat: 0,
        cpus: 0.0,
        // The lab knows whether it put the runner under a quota (`ResultsDoc::from_runs`).
        unlimited: false,
        seed: config.seed,
        runner_available_parallelism: available_parallelism(),
        records: tally.started,
        complete: tally.complete,
        incomplete: tally.incomplete,
        rejected: tally.rejected,
        failed: tally.failed,
        failed_by_kind: tally.failed_by_kind,
        completion_s,
        accepted_per_s: if completion_s > 0.0 {
            accepted as f64 / completion_s
        } else {
            0.0
        },
        write_503s: Calls::count(&shared.writes.status_503),
        peak_writes_offered: 0,
        peak_enrichment_in_flight: shared.enrichment.peak(),
        peak_writes_in_flight: shared.writes.peak(),
        enrichment_timeouts: shared.enrichment_timeouts.load(Ordering::SeqCst),
        enrichment_429s: Calls::count(&shared.enrichment.status_429),
        enrichment_calls: Calls::count(&shared.enrichment.made),
        write_calls: Calls::count(&shared.writes.made),
        enrichment_retries: enrichment_retries.made,
        enrichment_retries_denied: enrichment_retries.denied,
        write_retries: write_retries.made,
        write_retries_denied: write_retries.denied,
        timeline,
        replicas: 1,
        classes,
        class_completions_s,
    })
}

/// Opens about `connections` connections to the sim (one per record in flight) before the clock
/// starts, with as many `GET /stats` at once, so that the run measures calls and not connection
/// set-up: opening 32 connections under a 1-CPU quota made the first 32 calls end 4-6 ms later, a
/// fixed cost that weighs ten times more in a run at time scale 0.1 than at 1. Errors are left to
/// the run to count.
async fn warm_up(client: &reqwest::Client, base: &str, connections: usize) {
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let request = client.get(format!("{base}/stats")).send();
        opening.spawn(async move {
            if let Ok(response) = request.await {
                let _ = response.bytes().await;
            }
        });
    }
    let _ = tokio::time::timeout(WARM_UP_LIMIT, async {
        while opening.join_next().await.is_some() {}
    })
    .await;
}

/// Samples the calls in flight every [`TIMELINE_INTERVAL`] until told to stop or full.
async fn sample_timeline(shared: Arc<Shared>, stop: Arc<AtomicBool>) -> Timeline {
    let mut timeline = Timeline {
        interval_ms: TIMELINE_INTERVAL.as_secs_f64() * 1000.0,
        ..Timeline::default()
    };
    let limit_of = |gate: &Option<Retrying>| gate.as_ref().and_then(|g| g.gate().limit());
    let mut ticks = tokio::time::interval(TIMELINE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::SeqCst) && timeline.enrichment.len() < MAX_TIMELINE_SAMPLES {
        ticks.tick().await;
        let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        timeline.enrichment.push(clamp(shared.enrichment.current()));
        timeline.records.push(clamp(shared.writes.current()));
        if let Some(limit) = limit_of(&shared.gates.enrichment) {
            timeline.enrichment_limit.push(clamp(limit as u64));
        }
        if let Some(limit) = limit_of(&shared.gates.records) {
            timeline.records_limit.push(clamp(limit as u64));
        }
    }
    timeline
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_adds_up_and_notices_when_it_does_not() {
        let mut t = Tally::default();
        for outcome in [
            Outcome::Complete,
            Outcome::Incomplete,
            Outcome::Rejected,
            Outcome::Failed("write_timeout".into()),
            Outcome::Failed("write_timeout".into()),
            Outcome::Failed("enrich_status_500".into()),
        ] {
            t.start();
            t.end(outcome);
        }
        assert_eq!(t.check(), Ok(()));
        assert_eq!(
            (t.complete, t.incomplete, t.rejected, t.failed),
            (1, 1, 1, 3)
        );
        assert_eq!(t.failed_by_kind["write_timeout"], 2);
        t.start();
        let err = t.check().unwrap_err();
        assert!(
            err.contains("7 records started") && err.contains("= 6"),
            "{err}"
        );
    }

    #[test]
    fn only_loopback_sim_urls() {
        assert_eq!(
            loopback_base("http://127.0.0.1:8080/").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            loopback_base("http://localhost:9").unwrap(),
            "http://127.0.0.1:9"
        );
        for bad in [
            "http://10.0.0.1:80",
            "https://127.0.0.1:80",
            "http://127.0.0.1",
            "127.0.0.1:80",
            "http://example.com:80",
        ] {
            assert!(loopback_base(bad).is_err(), "{bad}");
        }
    }
}
