//! [`Aimd`]: a loss-based limit. It grows while the limit is in use and cuts itself on overload.

use super::round_trip::Cuts;
use super::{Limit, Outcome, Sample};

/// A loss-based limit: additive increase, multiplicative decrease, with a slow start.
///
/// - **Grows only while in use.** A success whose call found at least half the limit in use
///   raises the limit: by one per success until the first overload (slow start: the limit
///   doubles per round trip, so one starting low reaches the demand in a few round trips), then
///   by one per limit's worth of successes, about one per round trip. A limit the work never
///   fills to half does not grow, so it settles at no more than twice the demand. (Half, not all:
///   a call granted before the last raise found the limit at its old value.)
/// - **Cuts on overload.** An [`Outcome::Overload`] (a 503 or 429, a call timeout) multiplies the
///   limit by `backoff`, at most once per round trip: overloads from calls granted before the
///   last cut were already answered by it, so a burst of 503s costs one cut, not one each.
/// - **Ignores latency.** A dependency that slows down without refusing does not move it.
///
/// Pick it when the dependency says plainly when it is full (503, 429, timeouts) and its latency
/// says little (it varies by request, or a queue in front of it hides overload until it refuses).
///
/// ```
/// use std::time::Duration;
/// use inflight::limit::{Aimd, Limit, Outcome, Sample};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut limit = Aimd::new(1, 4, 32);
/// let ms = Duration::from_millis(30);
/// limit.on_sample(&Sample::new(ms, 4, Outcome::Success)); // the limit was in use: grow
/// assert_eq!(limit.current(), 5);
/// limit.on_sample(&Sample::new(ms, 2, Outcome::Success)); // under half in use: stay
/// assert_eq!(limit.current(), 5);
/// limit.on_sample(&Sample::new(ms, 5, Outcome::Overload));
/// assert_eq!(limit.current(), 3); // 5 x 0.75, rounded down
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Aimd {
    limit: f64,
    min: usize,
    max: usize,
    backoff: f64,
    slow_start: bool,
    cuts: Cuts,
}

impl Aimd {
    /// The default cut on overload: to three quarters.
    pub const DEFAULT_BACKOFF: f64 = 0.75;

    /// A limit between `min` and `max` (both at least 1), starting at `initial`.
    pub fn new(min: usize, initial: usize, max: usize) -> Aimd {
        let min = min.max(1);
        let max = max.max(min);
        Aimd {
            limit: initial.clamp(min, max) as f64,
            min,
            max,
            backoff: Aimd::DEFAULT_BACKOFF,
            slow_start: true,
            cuts: Cuts::default(),
        }
    }

    /// Multiplies the limit by `backoff` on overload; kept within 0.5 to 0.95.
    pub fn backoff(mut self, backoff: f64) -> Aimd {
        self.backoff = if backoff.is_finite() {
            backoff.clamp(0.5, 0.95)
        } else {
            Aimd::DEFAULT_BACKOFF
        };
        self
    }
}

impl Limit for Aimd {
    fn current(&self) -> usize {
        (self.limit.floor() as usize).clamp(self.min, self.max)
    }

    fn max(&self) -> usize {
        self.max
    }

    fn on_sample(&mut self, sample: &Sample) {
        match sample.outcome {
            // The guard records the cut it allows.
            Outcome::Overload if self.cuts.allow(sample.latency).is_some() => {
                self.limit = (self.limit * self.backoff).max(self.min as f64);
                self.slow_start = false;
            }
            Outcome::Success if sample.in_flight * 2 >= self.current() => {
                let step = if self.slow_start {
                    1.0
                } else {
                    1.0 / self.limit
                };
                self.limit = (self.limit + step).min(self.max as f64);
            }
            _ => {}
        }
    }
}
