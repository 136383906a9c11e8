//! The options of a lab run, resolved and checked.

use std::path::PathBuf;

use crate::matrix::Cell;
use crate::sim::process::SimCommand;

/// Everything `inflight lab run` needs, resolved and checked by the command line.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// The `inflight` binary, run as `inflight sim` and `inflight lab runner`.
    pub exe: PathBuf,
    pub cells: Vec<Cell>,
    pub repeats: u32,
    pub records: u64,
    pub time_scale: f64,
    /// The base RNG seed; each (scenario, repeat) gets one derived from it ([`run_seed`](super::run_seed)).
    pub seed: u64,
    /// The strategies file the runners read; their built-in copy when `None`.
    pub strategies_file: Option<PathBuf>,
    /// The scenarios file the sim reads; its built-in copy when `None`.
    pub scenarios_file: Option<PathBuf>,
    /// The hypotheses file whose text a new run's plan keeps; their built-in copy when `None`. A
    /// resumed run evaluates the hypotheses its plan kept, not this file's.
    pub hypotheses_file: Option<PathBuf>,
    /// Use this running sim instead of starting one.
    pub sim_url: Option<String>,
    /// Run without a CPU quota when none can be enforced.
    pub no_limit: bool,
    /// Each runner serves its budgets' metrics here (`inflight lab runner --metrics-addr`).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Runner processes per run, each in its own CPU quota, splitting the records (at least 1).
    pub replicas: u32,
    /// The Redis that fleet budgets keep their permits in; when `None` and a strategy needs one,
    /// the lab starts a `redis-server` of its own.
    pub redis_url: Option<String>,
    /// Where the lab's files came from, in words ([`crate::files::Origin`]), kept in the plan.
    pub lab_files: String,
}

impl LabOptions {
    /// How the lab starts its sim for these options.
    pub fn sim_command(&self) -> SimCommand {
        SimCommand {
            exe: self.exe.clone(),
            scenarios_file: self.scenarios_file.clone(),
            time_scale: self.time_scale,
            seed: self.seed,
        }
    }
}
