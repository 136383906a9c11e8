//! [`Pace`]: the rate a budget learns from a dependency's retry-afters, and the line of start
//! slots it hands out while that rate holds.
//!
//! A retry-after says when the dependency will take *one* call. A pause that ends and lets every
//! waiter through at once sends the dependency a burst it has just said it cannot take, and a
//! rate quota (429 beyond N calls a second) refuses it again, with the same short wait. So the
//! first overload with a retry-after also starts a pace: one call per retry-after (the
//! dependency's own word), in arrival order, from the pause's end. From there the rate is an
//! AIMD of its own, as TCP's congestion window is, but on calls per second:
//!
//! - **Grows while it binds.** A call granted under the pace that succeeds, while callers are
//!   lined up for slots, raises the rate by [`GROWTH`] per second's worth of calls (3% a second
//!   when every slot is used, at most double per call).
//! - **Cut on refusal.** A further overload with a retry-after, from a call granted under the
//!   pace after the last cut, multiplies the rate by [`BACKOFF`]; overloads from calls granted
//!   before the last cut were answered by it already, so a burst of 429s costs one cut.
//! - **Lapses.** When the dependency has refused nothing for [`LAPSE`] (or twenty of its
//!   intervals, if longer), the pace is dropped and the budget is back to its fast path.
//!
//! A budget that never sees a retry-after never starts a pace: the flag that says one is in force
//! shares the pause's word, so the fast path still reads one atomic.
//!
//! **A cold start** is a pace too, of another kind: an adaptive budget that has had no answer yet
//! lets a few calls out at once (`Adaptive::COLD_START_BURST`) and spaces the rest of its initial limit over a few
//! milliseconds, so that a dependency that refuses at once (a rate quota's 429) is heard after a
//! handful of calls, not after the whole initial limit was sent blind. The first answer of any
//! kind ends it: a refusal with a retry-after replaces it with the pace above, anything else
//! drops it. It never lapses by time (a budget may wait long for its first call).

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The rate's cut on a further refusal.
pub(crate) const BACKOFF: f64 = 0.95;
/// The rate's growth, per second of calls at the pace.
pub(crate) const GROWTH: f64 = 0.03;
/// How long without a refusal before the pace lapses (at least twenty intervals).
pub(crate) const LAPSE: Duration = Duration::from_secs(10);
/// The shortest interval a pace keeps (a million calls a second: no pace at all).
const MIN_INTERVAL: Duration = Duration::from_micros(1);

pub(crate) struct Pace {
    line: Mutex<Option<Line>>,
}

/// A pace in force.
#[derive(Debug)]
struct Line {
    /// Time between two calls' starts.
    interval: Duration,
    /// The earliest slot not yet handed out.
    next: Instant,
    /// When the pace began: calls granted before it were not paced.
    since: Instant,
    /// The last cut: overloads from calls granted before it do not cut again.
    last_cut: Instant,
    last_refusal: Instant,
    /// A cold start's calls still to go at once; `None` for a pace learnt from retry-afters.
    cold: Option<u32>,
}

/// A start slot handed out by the pace: the moment the call may start.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) at: Instant,
    /// The line's `next` after this slot, to take the slot back if it is still the last.
    next_after: Instant,
    /// Handed out by a cold start.
    cold: bool,
}

/// What the pace says to a caller.
#[derive(Debug)]
pub(crate) enum Turn {
    /// No pace in force (it lapsed, or there was none).
    Free,
    /// Start at this slot.
    At(Slot),
}

impl Pace {
    pub(crate) fn new() -> Pace {
        Pace {
            line: Mutex::new(None),
        }
    }

    /// Starts a cold start at `now`: `burst` calls at once, then one per `spacing`; `flag` runs
    /// under the lock.
    #[cfg(feature = "adaptive")]
    pub(crate) fn cold(&self, now: Instant, spacing: Duration, burst: u32, flag: impl FnOnce()) {
        let mut line = self.line.lock().unwrap_or_else(PoisonError::into_inner);
        flag();
        *line = Some(Line {
            interval: spacing.max(MIN_INTERVAL),
            next: now,
            since: now,
            last_cut: now,
            last_refusal: now,
            cold: Some(burst),
        });
    }

    /// A call ended, at `now`, without a retry-after: a cold start ends (after running `lapsed`
    /// under the lock); a pace grows if the call succeeded (see [`Pace::succeeded`]).
    pub(crate) fn answered(
        &self,
        now: Instant,
        granted: Option<Instant>,
        success: bool,
        lapsed: impl FnOnce(),
    ) {
        let mut line = self.line.lock().unwrap_or_else(PoisonError::into_inner);
        match line.as_ref() {
            Some(l) if l.cold.is_some() => {
                *line = None;
                lapsed();
            }
            Some(_) if success => {
                drop(line);
                self.succeeded(now, granted);
            }
            _ => {}
        }
    }

    /// An overload with `retry_after` was reported at `now` by a call granted at `granted`; the
    /// pause now ends at `pause_until`. Starts the pace (one call per `retry_after`) or cuts it;
    /// `flag` runs under the lock, every time.
    pub(crate) fn refused(
        &self,
        now: Instant,
        granted: Option<Instant>,
        retry_after: Duration,
        pause_until: Instant,
        flag: impl FnOnce(),
    ) {
        let mut line = self.line.lock().unwrap_or_else(PoisonError::into_inner);
        flag();
        match line.as_mut() {
            // A cold start ends at its first answer; this one starts the pace.
            None | Some(Line { cold: Some(_), .. }) => {
                *line = Some(Line {
                    interval: retry_after.max(MIN_INTERVAL),
                    next: pause_until,
                    since: now,
                    last_cut: now,
                    last_refusal: now,
                    cold: None,
                });
            }
            Some(l) => {
                l.last_refusal = now;
                if granted.is_some_and(|g| g > l.last_cut) {
                    l.interval = l.interval.div_f64(BACKOFF).min(crate::RetryAfter::MAX);
                    l.last_cut = now;
                }
                l.next = l.next.max(pause_until);
            }
        }
    }

    /// A call granted at `granted` succeeded at `now`: the rate grows if the call was paced and
    /// the pace binds (the line reaches to now: callers take the slots as they come).
    pub(crate) fn succeeded(&self, now: Instant, granted: Option<Instant>) {
        let mut line = self.line.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(l) = line.as_mut() else { return };
        if l.cold.is_some() || granted.is_none_or(|g| g < l.since) || l.next + l.interval < now {
            return;
        }
        let step = (GROWTH * l.interval.as_secs_f64()).min(1.0);
        l.interval = l.interval.div_f64(1.0 + step).max(MIN_INTERVAL);
    }

    /// The slot of a caller asking at `now`, if it comes no later than `deadline`; otherwise
    /// hands out nothing and says how long the caller would have waited. [`Turn::Free`] once
    /// the pace has lapsed, after running `lapsed` under the lock.
    pub(crate) fn reserve(
        &self,
        now: Instant,
        deadline: Option<Instant>,
        lapsed: impl FnOnce(),
    ) -> Result<Turn, Duration> {
        let mut line = self.line.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(l) = line.as_mut() else {
            lapsed();
            return Ok(Turn::Free);
        };
        if let Some(burst) = l.cold.as_mut().filter(|b| **b > 0) {
            // Part of the burst: now, and the spacing starts after it.
            *burst -= 1;
            l.next = l.next.max(now + l.interval);
            return Ok(Turn::At(Slot {
                at: now,
                next_after: l.next,
                cold: true,
            }));
        }
        let quiet = LAPSE.max(l.interval.saturating_mul(20));
        if l.cold.is_none() && now.saturating_duration_since(l.last_refusal) >= quiet {
            *line = None;
            lapsed();
            return Ok(Turn::Free);
        }
        // A cold start keeps to its schedule from its first call (at most one call per spacing
        // since then), so that a caller who comes late goes at once; a pace, from now.
        let at = match l.cold {
            Some(_) => l.next,
            None => l.next.max(now),
        };
        if deadline.is_some_and(|d| at > d) {
            return Err(at - now);
        }
        l.next = at + l.interval;
        Ok(Turn::At(Slot {
            at,
            next_after: l.next,
            cold: l.cold.is_some(),
        }))
    }

    /// Whether `slot` came from a cold start that has ended since: its caller need not wait
    /// for it.
    pub(crate) fn cold_ended(&self, slot: &Slot) -> bool {
        let line = self.line.lock().unwrap_or_else(PoisonError::into_inner);
        slot.cold && line.as_ref().is_none_or(|l| l.cold.is_none())
    }

    /// Whether `slot` came from a cold start that a refusal has since replaced with a pace: its
    /// caller lines up in the pace, rather than join every other such caller at the pause's end.
    pub(crate) fn superseded(&self, slot: &Slot) -> bool {
        let line = self.line.lock().unwrap_or_else(PoisonError::into_inner);
        slot.cold && line.as_ref().is_some_and(|l| l.cold.is_none())
    }

    /// Takes back a slot whose caller left before using it, if no later one was handed out.
    pub(crate) fn cancel(&self, slot: &Slot) {
        let mut line = self.line.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = line.as_mut() {
            if l.next == slot.next_after {
                l.next = slot.at;
            }
        }
    }

    /// The pace's interval now, if one is in force (lapsed or not).
    #[cfg(test)]
    fn interval(&self) -> Option<Duration> {
        let line = self.line.lock().unwrap_or_else(PoisonError::into_inner);
        line.as_ref().map(|l| l.interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn at(turn: Turn) -> Instant {
        match turn {
            Turn::At(slot) => slot.at,
            Turn::Free => panic!("no pace"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_starts_a_pace_of_one_call_per_retry_after_from_the_pause_end() {
        let pace = Pace::new();
        let t0 = Instant::now();
        assert!(matches!(pace.reserve(t0, None, || {}), Ok(Turn::Free)));
        pace.refused(t0, None, ms(20), t0 + ms(20), || {});
        let slots: Vec<_> = (0..4)
            .map(|_| at(pace.reserve(t0, None, || {}).unwrap()) - t0)
            .collect();
        assert_eq!(slots, [ms(20), ms(40), ms(60), ms(80)]);
        // A slot past the deadline is refused and hands out nothing.
        assert_eq!(
            pace.reserve(t0, Some(t0 + ms(50)), || {}).unwrap_err(),
            ms(100)
        );
        assert_eq!(at(pace.reserve(t0, None, || {}).unwrap()) - t0, ms(100));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cut_once_per_round_trip_growth_only_while_it_binds_and_a_lapse() {
        let pace = Pace::new();
        let t0 = Instant::now();
        pace.refused(t0, None, ms(10), t0 + ms(10), || {});
        // Refused again by a call granted before the start: no cut.
        pace.refused(t0 + ms(1), Some(t0), ms(10), t0 + ms(11), || {});
        assert_eq!(pace.interval(), Some(ms(10)));
        // By a call granted after it: one cut; another from before that cut: none.
        pace.refused(t0 + ms(30), Some(t0 + ms(20)), ms(10), t0 + ms(40), || {});
        let cut = pace.interval().unwrap();
        assert_eq!(cut, ms(10).div_f64(BACKOFF));
        pace.refused(t0 + ms(31), Some(t0 + ms(25)), ms(10), t0 + ms(41), || {});
        assert_eq!(pace.interval(), Some(cut));
        // A paced success while nobody is lined up: no growth.
        pace.succeeded(t0 + ms(500), Some(t0 + ms(100)));
        assert_eq!(pace.interval(), Some(cut));
        // While the line reaches to now: growth, 3% over a second of slots.
        let t1 = t0 + ms(500);
        let mut now = t1;
        while now < t1 + Duration::from_secs(1) {
            now = at(pace.reserve(now, None, || {}).unwrap());
            pace.succeeded(now, Some(now));
        }
        let grown = pace.interval().unwrap();
        let ratio = cut.as_secs_f64() / grown.as_secs_f64();
        assert!((1.025..1.035).contains(&ratio), "grew {ratio}");
        // Ten seconds without a refusal: the pace lapses.
        assert!(matches!(
            pace.reserve(t0 + ms(31) + LAPSE, None, || {}),
            Ok(Turn::Free)
        ));
        assert_eq!(pace.interval(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_given_back_is_handed_out_again_only_if_it_was_the_last() {
        let pace = Pace::new();
        let t0 = Instant::now();
        pace.refused(t0, None, ms(10), t0, || {});
        let Turn::At(first) = pace.reserve(t0, None, || {}).unwrap() else {
            panic!()
        };
        let Turn::At(second) = pace.reserve(t0, None, || {}).unwrap() else {
            panic!()
        };
        pace.cancel(&first); // not the last: stays used, a gap
        pace.cancel(&second); // the last: handed out again
        assert_eq!(at(pace.reserve(t0, None, || {}).unwrap()) - t0, ms(10));
        assert_eq!(at(pace.reserve(t0, None, || {}).unwrap()) - t0, ms(20));
    }
}
