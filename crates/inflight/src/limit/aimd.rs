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
/// - **Probes less often where it failed, if asked** ([`Aimd::probe_hold`]). In front of a
///   dependency with no queue, every probe above its capacity is refused: the sawtooth costs one
///   refusal every few round trips. With a probe hold, an overload cuts the limit below the
///   number of calls in flight that drew it (or by `backoff`, if that is lower), and it stays
///   there for a round trip, then tries that level once;
///   each overload there doubles the hold, up to the most round trips given. A round trip's
///   worth of calls that succeed with that many in flight, and no overload, ends the hold: the
///   capacity moved.
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
    hold: Option<ProbeHold>,
}

/// The state of [`Aimd::probe_hold`].
#[derive(Debug, Clone)]
struct ProbeHold {
    /// The most round trips a hold lasts.
    max_rounds: u32,
    /// The calls in flight that last drew an overload: the limit stays below this while held.
    failed: Option<usize>,
    /// The hold's length in round trips: 1 after a first overload, doubled by each one after.
    rounds: u32,
    /// Successes below `failed` since the hold began: a round trip is about `failed` of them.
    seen: u64,
    /// Successes at `failed` or above since the hold began: a round trip's worth of them ends
    /// the hold.
    proven: u64,
}

impl ProbeHold {
    fn overloaded(&mut self, in_flight: usize) {
        self.rounds = match self.failed {
            None => 1,
            Some(_) => self.rounds.saturating_mul(2).clamp(1, self.max_rounds),
        };
        self.failed = Some(in_flight.max(1));
        self.seen = 0;
        self.proven = 0;
    }

    /// The highest the limit may go now, after a success with `in_flight` calls in flight.
    fn cap(&mut self, in_flight: usize) -> Option<f64> {
        let failed = self.failed?;
        if in_flight >= failed {
            // A round trip's worth of calls held at that level, with no overload between: the
            // capacity moved up, and the hold is over. (One success there is not enough: the
            // dependency's count of calls lags the budget's, so a level just above its capacity
            // passes now and then.)
            self.proven += 1;
            if self.proven >= failed as u64 {
                self.failed = None;
                self.rounds = 0;
            }
            return None;
        }
        self.seen += 1;
        let held = u64::from(self.rounds) * failed as u64;
        // Just below the level that failed, until the hold's round trips are over.
        (self.seen < held).then_some(failed as f64 - 0.5)
    }
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
            hold: None,
        }
    }

    /// The most round trips an overload holds the limit below the calls in flight that drew it;
    /// 0 (the default) holds nothing. See the probe hold above.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::limit::{Aimd, Limit, Outcome, Sample};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // A dependency that takes 6 at once and refuses the 7th.
    /// let mut limit = Aimd::new(1, 7, 32).probe_hold(64);
    /// let ms = Duration::from_millis(20);
    /// let ok = Sample::new(ms, 6, Outcome::Success);
    /// limit.on_sample(&Sample::new(ms, 7, Outcome::Overload));
    /// assert_eq!(limit.current(), 5); // 7 x 0.75
    /// for _ in 0..6 {
    ///     limit.on_sample(&ok);
    /// }
    /// assert_eq!(limit.current(), 6, "held below 7 for a round trip (7 calls)");
    /// for _ in 0..6 {
    ///     limit.on_sample(&ok);
    /// }
    /// assert_eq!(limit.current(), 7, "then it climbs to 7 again");
    /// tokio::time::sleep(ms * 2).await; // a call granted after the first cut
    /// limit.on_sample(&Sample::new(ms, 7, Outcome::Overload));
    /// for _ in 0..13 {
    ///     limit.on_sample(&ok);
    /// }
    /// assert_eq!(limit.current(), 6, "refused again: held for 2 round trips now");
    /// # }
    /// ```
    pub fn probe_hold(mut self, max_round_trips: u32) -> Aimd {
        self.hold = (max_round_trips > 0).then_some(ProbeHold {
            max_rounds: max_round_trips,
            failed: None,
            rounds: 0,
            seen: 0,
            proven: 0,
        });
        self
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
                let mut cut = self.limit * self.backoff;
                if let Some(hold) = &mut self.hold {
                    hold.overloaded(sample.in_flight);
                    // Below the level that drew it, at once: a limit far above the capacity
                    // (a high start) would otherwise take a cut per round trip to get there,
                    // each round trip's excess refused.
                    cut = cut.min(sample.in_flight.max(1) as f64 - 0.5);
                }
                self.limit = cut.max(self.min as f64);
                self.slow_start = false;
            }
            Outcome::Success if sample.in_flight * 2 >= self.current() => {
                let step = if self.slow_start {
                    1.0
                } else {
                    1.0 / self.limit
                };
                let cap = self
                    .hold
                    .as_mut()
                    .and_then(|h| h.cap(sample.in_flight))
                    .unwrap_or(f64::INFINITY);
                let grown = (self.limit + step).min(self.max as f64).min(cap);
                // A hold never cuts: a limit above its cap (from before the hold) stays.
                self.limit = self.limit.max(grown);
            }
            _ => {}
        }
    }
}
