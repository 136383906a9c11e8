//! [`Pause`]: the moment before which a budget grants no new permit, set by a dependency's
//! retry-after, the signal that wakes waiters when it moves, and the [`Pace`] that spaces the
//! permits granted after it (or, before an adaptive budget's first answer, its cold start).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::pace::{Pace, Turn};

/// The bit of the pause's word that says a pace is in force.
const PACED: u64 = 1 << 63;

pub(crate) struct Pause {
    epoch: Instant,
    /// Nanoseconds after `epoch` at which the pause ends, plus one (0 when there is none), with
    /// [`PACED`] set while a pace is in force. One relaxed load on the fast path says whether to
    /// look further.
    until: AtomicU64,
    changed: Notify,
    pace: Pace,
}

impl Pause {
    pub(crate) fn new() -> Pause {
        Pause {
            epoch: Instant::now(),
            until: AtomicU64::new(0),
            changed: Notify::new(),
            pace: Pace::new(),
        }
    }

    /// Whether a pause may be in force (it may have ended without being cleared yet), or a pace.
    #[inline]
    pub(crate) fn is_set(&self) -> bool {
        self.until.load(Relaxed) != 0
    }

    /// Whether a pace may be in force (it may have lapsed without being cleared yet).
    pub(crate) fn is_paced(&self) -> bool {
        self.until.load(Relaxed) & PACED != 0
    }

    /// When the pause in force at `now` ends; `None` (and the pause cleared) if there is none.
    pub(crate) fn until(&self, now: Instant) -> Option<Instant> {
        let raw = self.until.load(Relaxed);
        let end = raw & !PACED;
        if end == 0 {
            return None;
        }
        let until = self.epoch + Duration::from_nanos(end - 1);
        if until > now {
            return Some(until);
        }
        // Ended: clear it, unless it was moved meanwhile, so the fast path is free again (if no
        // pace is in force).
        let _ = self
            .until
            .compare_exchange(raw, raw & PACED, Relaxed, Relaxed);
        None
    }

    /// Extends the pause to `until` (never shortens it); wakes every waiter if it moved.
    pub(crate) fn extend(&self, until: Instant) {
        let nanos = u64::try_from(until.saturating_duration_since(self.epoch).as_nanos())
            .unwrap_or(u64::MAX - 1);
        let end = nanos.saturating_add(1).min(PACED - 1);
        let moved = self.until.fetch_update(Relaxed, Relaxed, |raw| {
            (raw & !PACED < end).then_some(end | (raw & PACED))
        });
        if moved.is_ok() {
            self.changed.notify_waiters();
        }
    }

    /// An overload reported at `now`, by a call granted at `granted`, asked for `delay`: pauses
    /// until then, and starts or cuts the pace.
    pub(crate) fn refused(&self, now: Instant, granted: Option<Instant>, delay: Duration) {
        let Some(until) = now.checked_add(delay) else {
            return;
        };
        // The flag moves under the pace's lock, so that a lapse and a start cannot cross.
        self.pace.refused(now, granted, delay, until, || {
            self.until.fetch_or(PACED, Relaxed);
        });
        self.extend(until);
    }

    /// Starts a cold start (see [`Pace::cold`]): until the first answer, the calls after the
    /// first `burst` are `spacing` apart.
    #[cfg(feature = "adaptive")]
    pub(crate) fn cold_start(&self, spacing: Duration, burst: u32) {
        self.pace.cold(Instant::now(), spacing, burst, || {
            self.until.fetch_or(PACED, Relaxed);
        });
    }

    /// A call granted at `granted` ended without a retry-after (`success` if it succeeded): a
    /// cold start ends; the pace, if one is in force, may grow.
    pub(crate) fn answered(&self, granted: Option<Instant>, success: bool) {
        if self.is_paced() {
            let mut lapsed = false;
            self.pace.answered(Instant::now(), granted, success, || {
                self.until.fetch_and(!PACED, Relaxed);
                lapsed = true;
            });
            // Callers waiting for a cold start's slots go now.
            if lapsed {
                self.changed.notify_waiters();
            }
        }
    }

    /// The pace's slot for a caller asking at `now` (see [`Pace::reserve`]); clears the flag
    /// when the pace has lapsed.
    pub(crate) fn reserve(
        &self,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Result<Turn, Duration> {
        self.pace.reserve(now, deadline, || {
            self.until.fetch_and(!PACED, Relaxed);
        })
    }

    /// The pace itself, to give back a slot.
    pub(crate) fn pace(&self) -> &Pace {
        &self.pace
    }

    /// A future that completes when the pause next moves; enable it before reading the pause, so
    /// that a move in between is not missed.
    pub(crate) fn changed(&self) -> Notified<'_> {
        self.changed.notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_pause_ends_clears_itself_and_never_shortens() {
        let p = Pause::new();
        let t0 = Instant::now();
        assert!(!p.is_set() && p.until(t0).is_none());
        p.extend(t0 + Duration::from_secs(2));
        p.extend(t0 + Duration::from_secs(1));
        assert_eq!(p.until(t0), Some(t0 + Duration::from_secs(2)));
        assert!(p.is_set());
        assert_eq!(p.until(t0 + Duration::from_secs(2)), None);
        assert!(!p.is_set(), "cleared once it ended");
    }
}
