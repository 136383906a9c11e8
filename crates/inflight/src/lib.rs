//! Per-dependency concurrency budgets for I/O-bound work.
//!
//! A batch job or service that calls other services needs an explicit answer, per dependency, to
//! "how many calls may be in flight to it at once?". Deriving that number from the CPU count makes a
//! loop serial in a one-CPU container; one global limit floods the weakest dependency. `inflight`
//! gives each dependency its own [`Budget`]: a fair, cancel-safe limit with a bounded queue, a
//! deadline for waiting for a permit that is separate from the call's own timeout (which starts only
//! once the permit is held), and counters you can export.
//!
//! ```
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
//! - [`budget`]: [`Budget`], [`BudgetConfig`], [`Permit`], errors and [`BudgetSnapshot`].
//! - [`config`]: [`Budgets`], a set of budgets loaded and checked from a TOML file.
//! - [`sizing`]: Little's law helpers for choosing limits.

pub mod budget;
pub mod config;
pub mod sizing;

pub use budget::{
    AcquireError, Budget, BudgetConfig, BudgetSnapshot, CallError, LatencySummary, OwnedPermit,
    Permit,
};
pub use config::{Budgets, ConfigError};
pub use sizing::Rate;
