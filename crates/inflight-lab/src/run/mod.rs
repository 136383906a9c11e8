//! `inflight lab run`: starts the sim, runs the matrix of strategies x scenarios x CPU counts x
//! repeats (each run in its own runner process inside a fresh CPU-quota cgroup), summarises the
//! repeats, evaluates the hypotheses and writes the report.
//!
//! Every process started here is stopped when the lab ends, fails or is interrupted (Ctrl-C,
//! SIGTERM), and every cgroup made here is removed: the runner is killed and reaped before its
//! cgroup is dropped, and the sim also exits by itself when our end of its stdin closes.
//!
//! - [`matrix`]: the cells to run and the matrix file (`lab/matrix.toml`).
//! - [`scheduler`]: runs the cells one after another, each in a runner process.
//! - [`summary`]: the repeats of each cell summarised.
//! - [`progress`]: what a run reports while it runs, and how it is shown.
//! - [`out_dir`]: the report folder, made before the runs start.
//! - [`replicas`]: a run split between several runner processes (`--replicas`).
//! - [`redis`]: the Redis that fleet budgets keep their permits in.
//! - `measure`: budgets measured by a capacity sweep before the runs.
//! - `runner_process`: one runner process in its cgroup.

use std::path::{Path, PathBuf};

use inflight_cpu::Enforcement;

use crate::report::Reference;
use crate::results::{ResultsDoc, RunMeta};
use crate::runner::loopback_base;
use crate::sim::client::SimClientError;
use crate::sim::process::{SimCommand, SimProcess, SimProcessError};

use self::redis::LabRedis;

pub mod matrix;
mod measure;
pub mod out_dir;
pub mod progress;
pub mod redis;
pub mod replicas;
mod runner_process;
pub mod scheduler;
pub mod summary;

pub use self::matrix::{cross_product, Cell, Matrix};
pub use self::measure::{MIN_SWEEP_TIME_SCALE, STOP_ON_ERRORS};
pub use self::out_dir::{default_out_dir, OutDir};
pub use self::progress::{Progress, ProgressReporter};
pub use self::scheduler::{check_outcomes, probe_enforcement, run_deadline, run_seed};
pub use self::summary::summarize;
pub use inflight_bench::shutdown::Shutdown;

use self::scheduler::run_cells;

/// Everything `inflight lab run` needs, resolved and checked by the command line.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// The `inflight` binary, run as `inflight sim` and `inflight lab runner`.
    pub exe: PathBuf,
    pub cells: Vec<Cell>,
    pub repeats: u32,
    pub records: u64,
    pub time_scale: f64,
    /// The base RNG seed; each (scenario, repeat) gets one derived from it ([`run_seed`]).
    pub seed: u64,
    /// The strategies file the runners read; their built-in copy when `None`.
    pub strategies_file: Option<PathBuf>,
    /// The scenarios file the sim reads; its built-in copy when `None`.
    pub scenarios_file: Option<PathBuf>,
    /// Use this running sim instead of starting one.
    pub sim_url: Option<String>,
    /// Run without a CPU quota when none can be enforced.
    pub no_limit: bool,
    /// Each runner serves its budgets' metrics here (`inflight lab runner --metrics-addr`);
    /// replica i of a run on the port i - 1 above it.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Runner processes per run, each in its own CPU quota, splitting the records (at least 1).
    pub replicas: u32,
    /// The Redis that fleet budgets keep their permits in; when `None` and a strategy needs one,
    /// the lab starts a `redis-server` of its own.
    pub redis_url: Option<String>,
}

/// Why the lab stopped.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("interrupted; stopped the runner and the sim and removed the cgroups")]
    Interrupted,
    #[error("cannot enforce a CPU limit of {cpus} CPUs: {message}")]
    NoLimit { cpus: f64, message: String },
    #[error("cannot start `{what}`")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the sim did not start: {0}")]
    SimStart(String),
    #[error(transparent)]
    Sim(#[from] SimClientError),
    #[error("run {run}: the runner failed: {message}")]
    Runner { run: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

impl From<SimProcessError> for LabError {
    fn from(e: SimProcessError) -> LabError {
        match e {
            SimProcessError::Interrupted => LabError::Interrupted,
            SimProcessError::Spawn { what, source } => LabError::Spawn { what, source },
            SimProcessError::Start(message) => LabError::SimStart(message),
        }
    }
}

/// Runs the whole matrix and returns the results document with summaries (hypotheses are
/// evaluated by [`evaluate_hypotheses`]). `progress` hears about each run.
pub async fn run_matrix(
    opts: &LabOptions,
    shutdown: &Shutdown,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<ResultsDoc, LabError> {
    if opts.cells.is_empty() || opts.repeats == 0 || opts.records == 0 {
        return Err(LabError::Invalid(
            "nothing to run: need at least one cell, one repeat and one record".to_string(),
        ));
    }
    if opts.replicas == 0 || u64::from(opts.replicas) > opts.records {
        return Err(LabError::Invalid(format!(
            "--replicas must be at least 1 and at most the records per run ({}), got {}",
            opts.records, opts.replicas
        )));
    }
    let started_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();

    let mut cpus: Vec<f64> = Vec::new();
    for cell in &opts.cells {
        if !cpus.contains(&cell.cpus) {
            cpus.push(cell.cpus);
        }
    }
    let enforcement = match probe_enforcement(&cpus) {
        Ok(e) => e,
        Err((_, message)) if opts.no_limit => {
            progress(Progress::NoLimit { message: &message });
            Enforcement::None
        }
        Err((c, message)) => return Err(LabError::NoLimit { cpus: c, message }),
    };
    let limited = enforcement != Enforcement::None;

    let (sim, url) = match &opts.sim_url {
        Some(url) => {
            let url = loopback_base(url).map_err(|e| LabError::Invalid(e.to_string()))?;
            (None, url)
        }
        None => {
            let command = SimCommand {
                exe: opts.exe.clone(),
                scenarios_file: opts.scenarios_file.clone(),
                time_scale: opts.time_scale,
                seed: opts.seed,
            };
            let sim = SimProcess::start(&command, shutdown.wait()).await?;
            let url = sim.url().to_string();
            (Some(sim), url)
        }
    };
    progress(Progress::SimReady {
        url: &url,
        started: sim.is_some(),
    });

    let strategies = match &opts.strategies_file {
        Some(path) => crate::strategy::load(path).map_err(|e| LabError::Invalid(e.to_string())),
        None => Ok(crate::strategy::builtin()),
    };
    let prepared = match strategies {
        Ok(strategies) => prepare(opts, &strategies, shutdown, progress, &url).await,
        Err(e) => Err(e),
    };
    let (redis, measured) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => {
            if let Some(sim) = sim {
                sim.stop().await;
            }
            return Err(e);
        }
    };
    let result = run_cells(
        opts,
        shutdown,
        progress,
        &url,
        limited,
        redis.as_ref(),
        &measured,
    )
    .await;
    if let Some(redis) = redis {
        redis.stop().await;
    }
    if let Some(sim) = sim {
        sim.stop().await;
    }
    let runs = result?;
    Ok(ResultsDoc::from_runs(
        RunMeta {
            started_at,
            records: opts.records,
            repeats: opts.repeats,
            time_scale: opts.time_scale,
            seed: opts.seed,
            enforcement,
            host_cpus: crate::strategy::available_parallelism(),
            inflight_version: env!("CARGO_PKG_VERSION").to_string(),
            replicas: opts.replicas,
        },
        runs,
    )
    .with_measured(measured))
}

/// What the runs need besides the sim: the Redis of fleet budgets, started or reached, and the
/// budgets measured against the sim.
async fn prepare(
    opts: &LabOptions,
    strategies: &crate::strategy::Strategies,
    shutdown: &Shutdown,
    progress: &mut dyn FnMut(Progress<'_>),
    url: &str,
) -> Result<(Option<LabRedis>, Vec<crate::results::MeasuredBudget>), LabError> {
    let redis = start_redis(opts, strategies).await?;
    if let Some(redis) = &redis {
        progress(Progress::RedisReady {
            url: redis.url(),
            started: redis.started_here(),
        });
    }
    let control = crate::sim::client::SimClient::new(url.to_string())?;
    match measure::measure_budgets(opts, strategies, shutdown, &control, progress).await {
        Ok(measured) => Ok((redis, measured)),
        Err(e) => {
            if let Some(redis) = redis {
                redis.stop().await;
            }
            Err(e)
        }
    }
}

/// The Redis the run's fleet budgets need: `opts.redis_url`, or one started here; `None` when no
/// strategy of the run keeps a budget in Redis.
async fn start_redis(
    opts: &LabOptions,
    strategies: &crate::strategy::Strategies,
) -> Result<Option<LabRedis>, LabError> {
    let mut needed = false;
    for cell in &opts.cells {
        let strategy = strategies
            .get(&cell.strategy)
            .map_err(|e| LabError::Invalid(e.to_string()))?;
        needed |= strategy.uses_fleet();
    }
    match (&opts.redis_url, needed) {
        (_, false) => Ok(None),
        (Some(url), true) => LabRedis::connect(url).await.map(Some),
        (None, true) => LabRedis::start().await.map(Some),
    }
}

/// Evaluates the preregistered hypotheses against the document's summary and stores the results
/// in the document. A failed hypothesis is a finding, not an error.
pub fn evaluate_hypotheses(doc: &mut ResultsDoc, hypotheses: &[crate::hypothesis::Hypothesis]) {
    doc.hypotheses = crate::hypothesis::evaluate(hypotheses, doc);
}

/// Writes `results.json` and the report (`runs.csv`, `summary.md`, figures, `index.html`) into
/// `dir`, comparing with `reference`.
pub fn write_outputs(doc: &ResultsDoc, reference: &Reference, dir: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("results.json");
    let json = serde_json::to_string_pretty(doc).context("cannot serialise the results")?;
    std::fs::write(&path, json).with_context(|| format!("cannot write {}", path.display()))?;
    crate::report::write_report_with(doc, reference, dir)
        .with_context(|| format!("cannot write the report into {}", dir.display()))?;
    Ok(())
}
