//! The runner: processes records against the sim with one strategy and measures what happened.
//!
//! Each record makes three enrichment calls one after another (`GET /enrich/{id}`), then one write
//! (`POST /records`). A strategy decides how many records are in flight and which budgets
//! ([`inflight::Budget`]) gate the calls. `inflight lab run` starts this in its own process inside
//! a CPU quota (`inflight lab runner`), so the CPU-derived default sees the limit as a container
//! would. The run's clock starts once a connection per record in flight is open, so that a run's
//! time is its calls' and not their set-up's, at any time scale.
//!
//! [`run`] here starts the tasks and measures the run; around it, one file per job: `record`
//! (a record's way through the dependencies, and the tasks that take records), `calls` (one call
//! through a dependency's gate, counted), `gates` (the gates built from the strategy's budgets),
//! `tally` (each record's [`Outcome`], counted and checked), `timeline` (the calls in flight,
//! sampled) and `args` (the `inflight lab runner` command line).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod args;
mod calls;
mod gates;
mod record;
mod tally;
mod timeline;

pub use self::args::{RunnerArgs, RUNNER_SUBCOMMAND};
pub use self::tally::{Outcome, Tally};

use self::calls::Calls;
use self::gates::Gates;
use self::record::{worker, Shared};
use self::timeline::sample_timeline;

use crate::results::{ClassResult, RunResult};
use crate::scenario::{time_scale_ok, RecordClasses, MAX_TIME_SCALE};
use crate::strategy::{available_parallelism, BudgetPlan, Strategy};

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
                    crate::stderr::line(format_args!("{line}"));
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
                crate::stderr::line(format_args!(
                    "fleet budget {}: {} calls on the local fallback, {} refused while redis could not be reached, redis lost its state {} times",
                    h.budget, h.fallbacks, h.refused, h.epochs_moved
                ));
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

#[cfg(test)]
mod tests {
    use super::*;

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
