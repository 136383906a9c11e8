//! The CPU-bound pool benchmark behind `inflight pool-bench`: a fixed arithmetic task run by
//! thread pools of several sizes, each pool in its own child process inside a cgroup with a CPU
//! quota, with per-task latency percentiles and the cgroup's throttling counters.
//!
//! The child process is whatever command the caller builds for a [`ChildSpec`] (the CLI
//! re-executes itself with a hidden flag that calls [`run_pool`] and prints its [`PoolRun`] as one
//! JSON line); [`sweep()`] drives the rest.
//!
//! - [`sweep`](mod@sweep): [`sweep`](fn@sweep), the driver: cgroup, calibration, one child per
//!   pool size, cleanup.
//! - [`task`](mod@task): the [`task()`] and [`calibrate`], which sizes it.
//! - [`worker`]: [`run_pool`], the child side, and its [`PoolRun`].
//! - [`child`]: [`run_child`], one pool size in a child process.
//! - [`report`]: [`BenchReport`], its table and its reading.
//! - [`error`]: [`BenchError`], why a sweep stopped.

pub mod child;
pub mod error;
pub mod report;
pub mod sweep;
pub mod task;
pub mod worker;

pub use child::run_child;
pub use error::BenchError;
pub use report::{
    enforcement_of, interpret, render_table, BenchReport, PoolResult, CFS_PERIOD_MS,
    PLATEAU_TOLERANCE,
};
pub use sweep::{sweep, ChildSpec, Cleanup, SweepConfig, SweepEvent, SweepOutcome};
pub use task::{calibrate, task};
pub use worker::{run_pool, PoolRun};
