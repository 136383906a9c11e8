//! Benchmarks of concurrency limits, and the pieces experiments share.
//!
//! Two benchmarks back the `inflight` command: [`fanout`] sends many jobs to a stand-in
//! dependency in five ways (unbounded, `buffer_unordered`, a semaphore, a `JoinSet`, an
//! `inflight::Budget`) and measures the peak in flight and the wall time against the ideal;
//! [`pool`] runs a CPU-bound task on thread pools of several sizes under a real cgroup CPU quota
//! and measures throughput, tail latency and throttling. What both need, and the lab reuses, sits
//! next to them: a count of work in flight with its peak, a timer finer than tokio's, a shutdown
//! on Ctrl-C, the median of repeats, and the axes of the figures.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use inflight_bench::fanout::{run_once, Delay, Downstream, FanoutStrategy};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), inflight_bench::fanout::FanoutError> {
//! let downstream = Arc::new(Downstream::new(Duration::from_millis(20), Delay::Tokio));
//! run_once(FanoutStrategy::Budget, &downstream, 40, 8).await?;
//! assert_eq!(downstream.calls(), 40);
//! assert_eq!(downstream.peak(), 8); // the budget held the limit
//! # Ok(())
//! # }
//! ```
//!
//! # Modules
//!
//! - [`fanout`]: the fan-out benchmark (`inflight fanout`).
//! - [`pool`]: the CPU-bound pool benchmark (`inflight pool-bench`).
//! - [`proxy_bench`]: `inflight proxy` against HAProxy and nginx (`proxy-bench run`, or
//!   `scripts/bench-proxy.sh`): the whole run (processes pinned and under quotas, interleaved
//!   repeats, medians and goals), the upstream, the load generator, idle connections.
//! - [`gauge`]: [`PeakGauge`](gauge::PeakGauge), calls in flight and the most at once.
//! - [`timer`]: [`PreciseTimer`](timer::PreciseTimer), sleeps that end within microseconds of
//!   their deadline.
//! - [`pace`]: [`SpinClock`](pace::SpinClock), sleeps of many tasks ended by a task that
//!   keeps their thread busy, for the proxy benchmark's open loop.
//! - [`shutdown`]: [`Shutdown`](shutdown::Shutdown), fired by Ctrl-C, SIGTERM or SIGHUP.
//! - [`spread`]: [`Spread`](spread::Spread), median, min and max of repeated measurements.
//! - [`axis`]: [`nice_step`](axis::nice_step) and [`ticks`](axis::ticks), the value axes of
//!   the SVG figures.
//!
//! # Layers
//!
//! From the top down: a module uses only modules on lower lines (`scripts/check-layers.py`
//! checks it in CI).
//!
//! - `fanout`, `pool`, `proxy_bench`
//! - `axis`, `gauge`, `pace`, `shutdown`, `spread`, `timer`
//! - `deadlines`

pub mod axis;
mod deadlines;
pub mod fanout;
pub mod gauge;
pub mod pace;
pub mod pool;
pub mod proxy_bench;
pub mod shutdown;
pub mod spread;
pub mod timer;
