//! The inflight lab: the experiments behind `inflight sim` and `inflight lab run`. The fan-out and
//! pool benchmarks live in `inflight-bench`.
//!
//! - [`results`]: the results document (`results.json`) and its types.
//! - [`scenario`]: the scenarios file (`lab/scenarios.toml`): latencies and capacities.
//! - [`sim`]: the simulated dependencies served over HTTP on loopback.
//! - [`strategy`]: the strategies file (`lab/strategies.toml`): records in flight and budgets.
//! - [`runner`]: processes records against the sim with one strategy; runs inside a CPU quota.
//! - [`hypothesis`]: preregistered hypotheses (`lab/hypotheses.toml`) and their evaluation.
//! - [`report`]: `summary.md`, `runs.csv`, SVG figures and `index.html` from a results document.
//! - [`orchestrate`]: `inflight lab run`: starts the sim, runs the matrix, summarises, reports.

pub mod hypothesis;
pub mod orchestrate;
pub mod report;
pub mod results;
pub mod runner;
pub mod scenario;
pub mod sim;
pub mod strategy;
