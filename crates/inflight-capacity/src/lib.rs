//! Find a dependency's capacity and service time by measurement, and turn them into a budget.
//!
//! Load tools run at one concurrency you pick. A capacity sweep climbs concurrency levels
//! against one endpoint (1, 2, 4, 8, ...), measures throughput and latency at each, and finds
//! the knee: the smallest concurrency at which throughput reaches its plateau before latency
//! grows with a queue or calls start failing. By Little's law (calls in flight = throughput x
//! time per call), that is how many calls the dependency serves at once; the latency at low
//! load is its service time. Both go into a `[budgets.NAME]` table that `inflight check-config`
//! takes without warnings.
//!
//! ```no_run
//! use inflight_bench::shutdown::Shutdown;
//! use inflight_capacity::{Levels, Sweep, Target};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let target = Target::new("http://127.0.0.1:8080/records")?
//!     .method("POST")?
//!     .body(r#"{"id": {n}, "complete": true}"#)?;
//! let report = Sweep::new(target, Levels::doubling(32)?)
//!     .run(&Shutdown::never(), |_| {})
//!     .await?;
//! print!("{}", report.render());
//! if let Some(budget) = &report.suggested {
//!     std::fs::write("budgets.toml", &budget.toml)?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Modules
//!
//! - [`Target`] (`target`): the endpoint, method, headers and a JSON body template with `{n}`.
//! - [`Levels`] (`levels`): the concurrency levels to climb.
//! - [`Caps`], [`Stop`] (`bounds`): what bounds a run in all, and why a climb ended early.
//! - [`InFlightSource`] (`in_flight`): where the target reports its own calls in flight (a JSON
//!   endpoint and a pointer), polled during each level into a [`TargetInFlight`].
//! - [`Sweep`] (`sweep`): the measurement, bounded per level and in total, stopped by errors
//!   or Ctrl-C; [`Level`] (`level`) is what one level measured.
//! - [`knee`]: the knee of level data, a pure function.
//! - [`suggest`]: the budget a knee implies, checked by [`inflight::sizing::assess`].
//! - [`CapacityReport`] (`report`): all of it, as JSON or a table; [`svg::figure`] draws it.
//! - [`CapacityError`] (`error`): why a sweep could not start.
//! - `call` sends one call and sorts its outcome; `duration` writes durations in messages.
//!
//! # Layers
//!
//! From the top down: a module uses only modules on lower lines (`scripts/check-layers.py`
//! checks it).
//!
//! - `sweep`, `svg`
//! - `report`
//! - `error`, `knee`
//! - `suggest`, `level`
//! - `in_flight`
//! - `call`
//! - `target`, `levels`, `bounds`
//! - `duration`

mod bounds;
mod call;
mod duration;
mod error;
mod in_flight;
pub mod knee;
mod level;
mod levels;
mod report;
pub mod suggest;
pub mod svg;
mod sweep;
mod target;

pub use bounds::{Caps, Stop, MIN_CALLS_PER_CALLER};
pub use error::CapacityError;
pub use in_flight::{InFlightSource, ReadError, SourceError, TargetInFlight, READ_TIMEOUT};
pub use level::{ErrorCounts, Level};
pub use levels::{Levels, LevelsError, MAX_CONCURRENCY};
pub use report::CapacityReport;
pub use sweep::{Progress, Sweep, MAX_PROBES, MIN_PACE};
pub use target::{BodyTemplate, Target, TargetError};
