//! [`Vegas`]: a latency-based limit. It estimates the queue at the dependency from how much
//! slower calls run than without load, and keeps that queue short.

use std::time::Duration;

use tokio::time::Instant;

use super::round_trip::{granted_by, Cuts};
use super::{Limit, Outcome, Sample};

/// A latency-based limit: keeps the queue it builds at the dependency between `alpha` and `beta`
/// calls, and also cuts on overload.
///
/// Calls are taken in windows of `max(limit, 8)` successes (`limit` in slow start, below),
/// counting only calls granted after the window began, so that a window measures the limit it was
/// opened under. At the end of each window:
///
/// - **The window's mean latency** is compared with the **baseline**, the latency without load.
///   The estimated queue is `limit x (1 - baseline / mean)`: the calls waiting at the dependency
///   rather than being served. A dependency that serves 6 at once and is sent 8 shows a queue of
///   about 2. (A mean, not a median: when a quarter of the calls queue, the median does not
///   move, the mean does.)
/// - Queue under `alpha`, and the limit was full during the window: grow by one. Queue over
///   `beta`: shrink by half the excess (at least one). In between: stay.
/// - The baseline is the lowest window mean seen. It is the mean of a window, never a single
///   sample, so one lucky fast call cannot set it. It may rise, by 2% a window, only in windows
///   that did not fill the limit: there the calls in flight were fewer than the limit allows, so
///   a slower mean says the dependency got slower, not that this budget queued calls at it. In
///   windows that fill the limit it never rises, so a queue that persists stays a queue instead
///   of becoming the new normal. The cost: a dependency that gets slower for good while demand
///   keeps the limit full is read as queueing, and the limit settles lower than it could (never
///   higher) until demand next falls below it.
///
/// Until a window first shows a queue (or an overload arrives), the limit grows by half at the
/// end of each window that found it full (slow start), so a limit that starts low reaches a
/// dependency's capacity in a few round trips without overshooting far past it. An [`Outcome::Overload`] (a 503 or 429, a call
/// timeout) cuts the limit to `backoff` times itself at once, at most once per round trip, as
/// [`Aimd`](super::Aimd) does.
///
/// Pick it when the dependency queues before it refuses: the queue shows up as latency long
/// before the 503s, so Vegas holds the limit near the capacity with few or no refusals. Keep one
/// budget per kind of call: a mix of fast and slow operations makes a median that says little.
///
/// ```
/// use std::time::Duration;
/// use inflight::limit::{Limit, Outcome, Sample, Vegas};
/// use tokio::time::sleep;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut limit = Vegas::new(1, 8, 32);
/// let ms = Duration::from_millis;
/// // A window of calls at no load, 30 ms each, sets the baseline.
/// sleep(ms(30)).await;
/// for _ in 0..8 {
///     limit.on_sample(&Sample::new(ms(30), 8, Outcome::Success));
/// }
/// assert_eq!(limit.baseline(), Some(ms(30)));
/// let grown = limit.current();
/// assert_eq!(grown, 12, "slow start: the full window grew it by half");
/// // Calls granted since then take twice as long: half of what is in flight queues. Shrink.
/// sleep(ms(70)).await; // granted 10 ms after the window opened, 60 ms each
/// for _ in 0..grown {
///     limit.on_sample(&Sample::new(ms(60), grown, Outcome::Success));
/// }
/// assert!(limit.current() < grown);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Vegas {
    limit: usize,
    min: usize,
    max: usize,
    alpha: f64,
    beta: f64,
    backoff: f64,
    slow_start: bool,
    baseline: Option<Duration>,
    window: Vec<Duration>,
    window_full: bool,
    window_start: Option<Instant>,
    cuts: Cuts,
}

/// Successes per window, at the least.
const MIN_WINDOW: usize = 8;
/// How far the baseline may rise per window that did not fill the limit.
const BASELINE_RISE: f64 = 0.02;

impl Vegas {
    /// The default queue bounds: grow under 1 queued call, shrink over 3.
    pub const DEFAULT_QUEUE: (f64, f64) = (1.0, 3.0);
    /// The default cut on overload: to three quarters.
    pub const DEFAULT_BACKOFF: f64 = 0.75;

    /// A limit between `min` and `max` (both at least 1), starting at `initial`.
    pub fn new(min: usize, initial: usize, max: usize) -> Vegas {
        let min = min.max(1);
        let max = max.max(min);
        Vegas {
            limit: initial.clamp(min, max),
            min,
            max,
            alpha: Vegas::DEFAULT_QUEUE.0,
            beta: Vegas::DEFAULT_QUEUE.1,
            backoff: Vegas::DEFAULT_BACKOFF,
            slow_start: true,
            baseline: None,
            window: Vec::with_capacity(MIN_WINDOW),
            window_full: false,
            window_start: None,
            cuts: Cuts::default(),
        }
    }

    /// Grows while the estimated queue is under `alpha` calls, shrinks while it is over `beta`.
    /// Negative or non-finite values, or `alpha > beta`, leave the defaults.
    pub fn queue(mut self, alpha: f64, beta: f64) -> Vegas {
        if alpha.is_finite() && beta.is_finite() && 0.0 <= alpha && alpha <= beta {
            self.alpha = alpha;
            self.beta = beta;
        }
        self
    }

    /// Multiplies the limit by `backoff` on overload; kept within 0.5 to 0.95.
    pub fn backoff(mut self, backoff: f64) -> Vegas {
        self.backoff = if backoff.is_finite() {
            backoff.clamp(0.5, 0.95)
        } else {
            Vegas::DEFAULT_BACKOFF
        };
        self
    }

    /// The latency without load, once a window has set it.
    pub fn baseline(&self) -> Option<Duration> {
        self.baseline
    }

    fn restart_window(&mut self, now: Instant) {
        self.window.clear();
        self.window_full = false;
        self.window_start = Some(now);
    }

    fn end_window(&mut self, now: Instant) {
        let mean = mean(&self.window);
        let full = self.window_full;
        self.restart_window(now);
        let baseline = match self.baseline {
            Some(b) if full => mean.min(b),
            Some(b) => mean.min(b.mul_f64(1.0 + BASELINE_RISE)),
            None => mean,
        };
        self.baseline = Some(baseline);
        if mean.is_zero() {
            return;
        }
        let queue = self.limit as f64 * (1.0 - baseline.as_secs_f64() / mean.as_secs_f64());
        if queue > self.beta {
            self.slow_start = false;
            let cut = ((queue - self.beta) / 2.0).floor().max(1.0) as usize;
            self.limit = self.limit.saturating_sub(cut).max(self.min);
        } else if queue > self.alpha {
            self.slow_start = false;
        } else if full {
            let grown = if self.slow_start {
                self.limit + self.limit.div_ceil(2)
            } else {
                self.limit + 1
            };
            self.limit = grown.min(self.max);
        }
    }
}

impl Limit for Vegas {
    fn current(&self) -> usize {
        self.limit
    }

    fn max(&self) -> usize {
        self.max
    }

    fn on_sample(&mut self, sample: &Sample) {
        match sample.outcome {
            Outcome::Overload => {
                if let Some(now) = self.cuts.allow(sample.latency) {
                    self.limit = ((self.limit as f64 * self.backoff) as usize).max(self.min);
                    self.slow_start = false;
                    self.restart_window(now);
                }
            }
            Outcome::Success => {
                let now = Instant::now();
                if granted_by(self.window_start, now, sample.latency) {
                    // Granted before this window began: it measured an earlier limit.
                    return;
                }
                self.window_full |= sample.in_flight >= self.limit;
                self.window.push(sample.latency);
                // Slow start only decides whether to grow, and a queue shows at once: one round
                // trip's worth of calls is enough there.
                let size = if self.slow_start {
                    self.limit
                } else {
                    self.limit.max(MIN_WINDOW)
                };
                if self.window.len() >= size {
                    self.end_window(now);
                }
            }
            Outcome::Ignore => {}
        }
    }
}

fn mean(samples: &[Duration]) -> Duration {
    let total: Duration = samples.iter().sum();
    total / samples.len().max(1) as u32
}
