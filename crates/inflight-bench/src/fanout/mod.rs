//! The fan-out benchmark behind `inflight fanout`: a stand-in downstream that counts the callers
//! inside it and keeps the peak, and five ways to send it many jobs: unbounded, `buffer_unordered`,
//! a semaphore around a join of all jobs, a `JoinSet` with a semaphore, and an `inflight::Budget`.
//!
//! The downstream's delay needs a finer timer than tokio's: tokio's timer wheel ticks every
//! millisecond and rounds deadlines up to the next tick, so a 20 ms call lasts about 21 ms and a
//! bounded run of 63 waves comes out ~5% over the ideal. [`PreciseTimer`](crate::timer::PreciseTimer)
//! (one thread parked with a nanosecond timeout) wakes within tens of microseconds; `--timer tokio`
//! measures the difference.
//!
//! - [`strategy`]: [`FanoutStrategy`], the ways to send the jobs, and [`run_once`].
//! - [`downstream`]: [`Downstream`], the stand-in dependency, and [`Delay`], the timer it sleeps on.
//! - [`config`]: [`FanoutConfig`], the settings, and how long a run is planned to take.
//! - [`run`](mod@run): [`run`](fn@run), the timer readings, the warm-up and the measured rounds.
//! - [`report`]: [`FanoutReport`] (the JSON output) and its human table.
//! - [`error`]: [`FanoutError`], why a round failed.

pub mod config;
pub mod downstream;
pub mod error;
pub mod report;
pub mod run;
pub mod strategy;

pub use config::{ideal_bounded_ms, FanoutConfig, TIMER_SAMPLES, WAVE_OVERHEAD};
pub use downstream::{Delay, Downstream};
pub use error::FanoutError;
pub use report::{render, FanoutReport, StrategyResult, TimerReading};
pub use run::{measure_timer, run};
pub use strategy::{run_once, FanoutStrategy};
