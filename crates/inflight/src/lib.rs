//! Per-dependency concurrency budgets for I/O-bound work.
//!
//! A batch job or service that calls other services needs an explicit answer, per dependency, to
//! "how many calls may be in flight to it at once?". Deriving that number from the CPU count makes a
//! loop serial in a one-CPU container; one global limit floods the weakest dependency. `inflight`
//! gives each dependency its own [`Budget`]: a fair, cancel-safe limit with a bounded queue, a
//! deadline for waiting for a permit that is separate from the call's own timeout (which starts only
//! once the permit is held), and counters you can export.
//!
#![cfg_attr(feature = "toml", doc = "```")]
#![cfg_attr(not(feature = "toml"), doc = "```ignore")]
//! use std::time::Duration;
//! use inflight::Budgets;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let budgets = Budgets::from_toml_str(r#"
//!     [budgets.enrichment]
//!     max_concurrent = 24
//!     call_timeout = "2s"
//!
//!     [budgets.records]
//!     max_concurrent = 6
//!     max_queued = 6
//!     permit_timeout = "500ms"
//!     call_timeout = "2s"
//! "#)?;
//! let records = budgets.get("records").unwrap().clone();
//!
//! let id = records
//!     .call(|| async {
//!         tokio::time::sleep(Duration::from_millis(30)).await; // write to the system of record
//!         Ok::<_, std::io::Error>(7)
//!     })
//!     .await?;
//! assert_eq!(id, 7);
//! assert_eq!(records.snapshot().peak_in_flight, 1);
//! # Ok(())
//! # }
//! ```
//!
//! # Modules
//!
//! - [`budget`]: [`Budget`], [`BudgetConfig`], [`BudgetBuilder`], [`Permit`], errors and
//!   [`BudgetSnapshot`].
//! - [`limit`]: how many calls a budget lets in flight now: [`limit::Fixed`], or a [`limit::Limit`]
//!   that learns from how calls end.
//! - [`store`]: where permits live beyond the process: the [`store::Store`] seam for permits
//!   shared by every replica of a service.
//! - [`config`] (feature `toml`, on by default): [`Budgets`], a set of budgets loaded and checked
//!   from a TOML file.
//! - [`sizing`]: Little's law helpers for choosing limits, and what a budget's settings imply.
//! - `tower` (feature `tower`): `BudgetLayer`, a budget around any `tower::Service`.
//! - `metrics` (feature `metrics`): every budget's gauges, counters and histograms through the
//!   `metrics` facade, with Prometheus names and units.
//! - [`Rate`]: a throughput, as budgets files, rate limits and sizing write it.
//! - Back-pressure: [`limit::Verdict`] (an outcome with the dependency's retry-after, which
//!   pauses a budget), [`RetryAfter`] (the `Retry-After` and `retry-after-ms` parser),
//!   [`AcquireError::retry_after`] (when a refused caller may try again) and [`retry`]:
//!   [`Budget::call_with_retry`] within a [`RetryBudget`].
//!
//! With the feature `tracing`, permit waits and calls run in `tracing` spans (`inflight.permit_wait`,
//! `inflight.call`, at debug level) and refusals and call timeouts are events; all silent unless a
//! subscriber is installed.
//!
//! Dependencies point one way: `budget` uses `limit`, `store` and `rate`; `sizing`, `config`,
//! `retry` and `metrics` use `budget`, never the reverse (the layers below). The CPU budget of a process (cores, affinity, cgroup quotas)
//! is the `inflight-cpu` crate's.
//!
//! # Layers
//!
//! From the top down: a module uses only modules on lower lines (`scripts/check-layers.py`
//! checks it in CI).
//!
//! - `tower`
//! - `config`, `metrics`, `retry`, `sizing`
//! - `budget`
//! - `store`
//! - `limit`
//! - `metric_names`, `padded`, `rate`, `retry_after`, `sync`

pub mod budget;
#[cfg(feature = "toml")]
pub mod config;
pub mod limit;
#[cfg(feature = "metrics")]
mod metric_names;
#[cfg(feature = "metrics")]
pub mod metrics;
mod padded;
mod rate;
pub mod retry;
mod retry_after;
pub mod sizing;
pub mod store;
mod sync;
#[cfg(feature = "tower")]
pub mod tower;

pub use budget::{
    AcquireError, Budget, BudgetBuilder, BudgetConfig, BudgetSnapshot, BuildError, CallError,
    Class, ClassSnapshot, Classes, LatencySummary, OnLost, OwnedPermit, Permit, TryAcquireError,
};
#[cfg(feature = "toml")]
pub use config::{Budgets, ConfigError};
pub use rate::{ParseRateError, Rate};
pub use retry::{Retry, RetryBudget, RetryError};
pub use retry_after::{ParseRetryAfterError, RetryAfter};
