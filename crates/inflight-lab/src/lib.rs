//! The inflight lab: the experiments behind `inflight sim` and `inflight lab run`. The fan-out and
//! pool benchmarks live in `inflight-bench`.
//!
//! - [`results`]: the results document (`results.json`), its types and the [`results::Metric`]s.
//! - [`scenario`]: the scenarios file (`lab/scenarios.toml`): latencies and capacities.
//! - [`sim`]: the simulated dependencies served over HTTP on loopback.
//! - [`strategy`]: the strategies file (`lab/strategies.toml`): records in flight and budgets.
//! - [`runner`]: processes records against the sim with one strategy; runs inside a CPU quota.
//! - [`hypothesis`]: preregistered hypotheses (`lab/hypotheses.toml`) and their evaluation.
//! - [`report`]: `summary.md`, `runs.csv`, SVG figures and `index.html` from a results document,
//!   next to an earlier experiment's figures (`lab/reference.toml`).
//! - [`run`]: `inflight lab run`: starts the sim, runs the matrix (`lab/matrix.toml`), saves each
//!   run as it finishes (so an interrupted run keeps them and can be resumed), summarises, reports,
//!   and shows progress.
//! - [`metrics`]: Prometheus text at `/metrics` for the sim and the runner.
//! - [`files`]: the lab folder and its files, with built-in copies for runs elsewhere.

pub mod files;
mod gate;
pub mod hypothesis;
pub mod metrics;
pub mod report;
pub mod results;
pub mod run;
pub mod runner;
pub mod scenario;
pub mod sim;
pub mod strategy;
