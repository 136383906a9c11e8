//! `inflight lab run`: starts the sim, runs the matrix of strategies x scenarios x CPU counts x
//! repeats (each run in its own runner process inside a fresh CPU-quota cgroup), summarises the
//! repeats, evaluates the hypotheses and writes the report.
//!
//! Every process started here is stopped when the lab ends, fails or is interrupted (Ctrl-C,
//! SIGTERM), and every cgroup made here is removed: the runner is killed and reaped before its
//! cgroup is dropped, and the sim also exits by itself when our end of its stdin closes.
//!
//! - `request`: the flags of `inflight lab run` resolved and checked into a [`LabRequest`]: its
//!   [`LabOptions`] (with `--quick`'s defaults, or a resumed plan's), lab files and folder.
//! - [`matrix`]: the cells to run and the matrix file (`lab/matrix.toml`), from the crate's
//!   [`crate::matrix`].
//! - [`scheduler`]: runs the cells one after another, each in a runner process.
//! - [`summary`]: the repeats of each cell summarised, from [`crate::results`].
//! - [`progress`]: what a run reports while it runs, and how it is shown.
//! - [`out_dir`]: the report folder, made before the runs start, and `results.json` written
//!   into it durably.
//! - [`plan`]: the plan kept in `results.json`, and a partial folder to resume ([`Resume`]).
//! - [`replicas`]: a run split between several runner processes (`--replicas`).
//! - [`redis`]: the Redis that fleet budgets keep their permits in.
//! - `measure`: budgets measured by a capacity sweep before the runs.
//! - `runner_process`: one runner process in its cgroup.
//! - `sidecar`: the `inflight proxy` in front of the sim, in its own cgroup, for a strategy whose
//!   budgets a proxy enforces (`enforce = "proxy"`), and its budgets' limits read for the run's
//!   timeline.
//! - `rewrite`: `inflight lab report`, the report of a results document written again.
//! - `session`: [`LabRun`], which ties them together, and how a session ended ([`LabEnd`]).
//!
//! [`LabRun`] ties them together: it saves the plan before the first run and every run as it
//! finishes, so a lab stopped at any point (Ctrl-C, SIGTERM, even SIGKILL) keeps the runs that
//! finished, and `inflight lab run --resume DIR` runs only the missing ones, with the same seeds.

mod error;
mod measure;
mod options;
pub mod out_dir;
pub mod plan;
pub mod progress;
pub mod redis;
pub mod replicas;
mod request;
mod rewrite;
mod runner_process;
pub mod scheduler;
mod session;
mod sidecar;

pub use self::error::LabError;
pub use self::measure::{MIN_SWEEP_TIME_SCALE, STOP_ON_ERRORS};
pub use self::options::LabOptions;
pub use self::out_dir::{default_out_dir, write_outputs, OutDir, RESULTS_JSON};
pub use self::plan::{
    missing_runs, planned_runs, PlanFiles, PlannedRun, Resume, ResumeError, Setting, INFLIGHT_BUILD,
};
pub use self::progress::{Progress, ProgressReporter};
pub use self::request::{
    LabArgs, LabRequest, DEFAULT_RECORDS, DEFAULT_REPEATS, DEFAULT_SEED, MAX_CPUS, MAX_RECORDS,
    MAX_REPLICAS, MIN_CPUS, QUICK_REPEATS, QUICK_TIME_SCALE,
};
pub use self::rewrite::{rewrite_report, Rewritten};
pub use self::scheduler::{check_outcomes, probe_enforcement, run_deadline, run_seed};
pub use self::session::{evaluate_hypotheses, LabEnd, LabRun};
pub use crate::matrix::{self, cross_product, Cell, Matrix};
pub use crate::results::summarize;
pub use crate::results::summary;
pub use inflight_bench::shutdown::Shutdown;
