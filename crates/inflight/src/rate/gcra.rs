//! [`Gcra`]: the rate gate of a budget, a generic cell rate algorithm that reserves slots in
//! arrival order on tokio's clock.
//!
//! A small GCRA of our own rather than governor's: governor's async waits sleep on a real-time
//! timer thread and poll without reserving, so tokio's paused time cannot drive them, waiters are
//! not served in order, and a wait cannot be refused up front when it would overrun a deadline.
//! Here a caller reserves the next conforming slot under a lock (so callers are served in the
//! order they asked, and nobody herds), and sleeps on tokio's timer until it; a slot past the
//! caller's deadline is refused at once without being reserved.
//!
//! State is the theoretical arrival time (TAT) of the next cell. With emission interval `T`
//! (`1 / rate`) and burst `b`, a call at `now` conforms from `max(now, TAT - (b - 1) x T)`, and
//! reserving it moves TAT to `max(TAT, slot) + T`.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

pub(crate) struct Gcra {
    interval: Duration,
    tolerance: Duration,
    /// The theoretical arrival time of the next cell; `None` until the first call.
    tat: Mutex<Option<Instant>>,
}

/// A slot reserved in a [`Gcra`]: the moment the call may start.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) at: Instant,
    /// TAT after this reservation, to undo it if it is still the last one.
    tat_after: Instant,
}

impl Gcra {
    /// A gate letting `burst` calls through back to back, then one per `interval`.
    pub(crate) fn new(interval: Duration, burst: u32) -> Gcra {
        Gcra {
            interval,
            tolerance: interval.saturating_mul(burst.max(1) - 1),
            tat: Mutex::new(None),
        }
    }

    /// Reserves the next conforming slot if it comes no later than `deadline`; otherwise
    /// reserves nothing and says how long the caller would have had to wait.
    pub(crate) fn reserve(
        &self,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Result<Slot, Duration> {
        let mut tat = self.tat.lock().unwrap_or_else(PoisonError::into_inner);
        let current = tat.unwrap_or(now);
        let conforming = current.checked_sub(self.tolerance).unwrap_or(now);
        let at = conforming.max(now);
        if deadline.is_some_and(|d| at > d) {
            return Err(at - now);
        }
        let tat_after = current.max(at) + self.interval;
        *tat = Some(tat_after);
        Ok(Slot { at, tat_after })
    }

    /// The earliest slot a caller asking at `now` would get, reserving nothing.
    pub(crate) fn earliest(&self, now: Instant) -> Instant {
        let tat = self.tat.lock().unwrap_or_else(PoisonError::into_inner);
        let current = tat.unwrap_or(now);
        current.checked_sub(self.tolerance).unwrap_or(now).max(now)
    }

    /// Gives back a slot whose caller left before using it, if no later slot was reserved since;
    /// a slot in the middle of the line stays used (the gate never lets more through than its
    /// rate, at the cost of a gap).
    pub(crate) fn cancel(&self, slot: &Slot) {
        let mut tat = self.tat.lock().unwrap_or_else(PoisonError::into_inner);
        if *tat == Some(slot.tat_after) {
            *tat = Some(slot.tat_after - self.interval);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_burst_goes_through_then_one_per_interval() {
        let g = Gcra::new(ms(100), 3);
        let t0 = Instant::now();
        let slots: Vec<_> = (0..6)
            .map(|_| g.reserve(t0, None).unwrap().at - t0)
            .collect();
        assert_eq!(slots, [ms(0), ms(0), ms(0), ms(100), ms(200), ms(300)]);
    }

    #[test]
    fn an_idle_gate_refills_its_burst_and_no_more() {
        let g = Gcra::new(ms(100), 2);
        let t0 = Instant::now();
        g.reserve(t0, None).unwrap();
        g.reserve(t0, None).unwrap();
        let later = t0 + ms(1000);
        let slots: Vec<_> = (0..3)
            .map(|_| g.reserve(later, None).unwrap().at - later)
            .collect();
        assert_eq!(slots, [ms(0), ms(0), ms(100)]);
    }

    #[test]
    fn a_slot_past_the_deadline_is_refused_and_not_reserved() {
        let g = Gcra::new(ms(100), 1);
        let t0 = Instant::now();
        g.reserve(t0, None).unwrap();
        assert_eq!(g.reserve(t0, Some(t0 + ms(50))).unwrap_err(), ms(100));
        // The refusal reserved nothing: the next caller still gets the 100 ms slot.
        assert_eq!(g.reserve(t0, None).unwrap().at - t0, ms(100));
    }

    #[test]
    fn cancelling_the_last_slot_gives_it_back() {
        let g = Gcra::new(ms(100), 1);
        let t0 = Instant::now();
        g.reserve(t0, None).unwrap();
        let second = g.reserve(t0, None).unwrap();
        g.cancel(&second);
        assert_eq!(g.reserve(t0, None).unwrap().at - t0, ms(100));
        let third = g.reserve(t0, None).unwrap();
        let fourth = g.reserve(t0, None).unwrap();
        g.cancel(&third); // not the last: stays used
        assert_eq!(third.at - t0, ms(200));
        assert_eq!(fourth.at - t0, ms(300));
        assert_eq!(g.reserve(t0, None).unwrap().at - t0, ms(400));
    }
}
