//! The inflight lab: the experiments behind `inflight sim` and `inflight lab run`. The fan-out and
//! pool benchmarks live in `inflight-bench`.
//!
//! - [`results`]: the results document (`results.json`), its types and the [`results::Metric`]s,
//!   the repeats of each cell summarised, and the checks of a run's outcomes.
//! - [`matrix`]: the cells of a run (strategy, scenario, CPU count) and the matrix file
//!   (`lab/matrix.toml`).
//! - [`scenario`]: the scenarios file (`lab/scenarios.toml`): latencies and capacities.
//! - [`stats`]: what the sim counts, as `GET /stats` reports it.
//! - [`sim`]: the simulated dependencies served over HTTP on loopback.
//! - [`strategy`]: the strategies file (`lab/strategies.toml`): records in flight and budgets.
//! - [`runner`]: processes records against the sim with one strategy; runs inside a CPU quota.
//! - [`hypothesis`]: preregistered hypotheses (`lab/hypotheses.toml`) and their evaluation.
//! - [`report`]: `summary.md`, `runs.csv`, SVG figures and `index.html` from a results document,
//!   next to an earlier experiment's figures (`lab/reference.toml`).
//! - [`files`]: the lab folder and its files, with built-in copies for runs elsewhere.
//! - [`run`]: `inflight lab run`: resolves its options, starts the sim, runs the matrix, saves
//!   each run as it finishes (so an interrupted run keeps them and can be resumed), summarises,
//!   reports, and shows progress.
//! - [`metrics`]: Prometheus text at `/metrics` for the sim and the runner.
//! - `gate`: the gate a strategy puts in front of a dependency; `numbers`: numbers as the lab
//!   prints them; `stderr`: lines for the user that a closed stderr loses without a panic.
//!
//! # Layers
//!
//! From the top down: a module uses only modules on lower lines, so the results document and
//! the files it rests on are the floor that everything else reads (`scripts/check-layers.py`
//! checks it).
//!
//! - `run`
//! - `files`
//! - `report`
//! - `hypothesis`
//! - `sim`
//! - `runner`
//! - `gate`, `metrics`
//! - `results`
//! - `matrix`, `strategy`, `scenario`, `stats`
//! - `numbers`, `stderr`

pub mod files;
mod gate;
pub mod hypothesis;
pub mod matrix;
pub mod metrics;
mod numbers;
pub mod report;
pub mod results;
pub mod run;
pub mod runner;
pub mod scenario;
pub mod sim;
pub mod stats;
mod stderr;
pub mod strategy;

// The guide's chapter on the lab (`docs/guide/lab.md`) runs its Rust snippets as doctests here, the
// crate they use; the other chapters run in `inflight-redis`. The include reads a link under
// `tests/` (`tests/guide/lab.md`) rather than a path outside the crate, so that the packaged crate
// has the text.
#[cfg(doctest)]
#[doc = include_str!("../tests/guide/lab.md")]
pub struct GuideLabDoctests;
