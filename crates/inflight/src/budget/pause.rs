//! [`Pause`]: the moment before which a budget grants no new permit, set by a dependency's
//! retry-after, and the signal that wakes waiters when it moves.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tokio::time::Instant;

pub(crate) struct Pause {
    epoch: Instant,
    /// Nanoseconds after `epoch` at which the pause ends, plus one; 0 when there is none. One
    /// relaxed load on the fast path says whether to look further.
    until: AtomicU64,
    changed: Notify,
}

impl Pause {
    pub(crate) fn new() -> Pause {
        Pause {
            epoch: Instant::now(),
            until: AtomicU64::new(0),
            changed: Notify::new(),
        }
    }

    /// Whether a pause may be in force (it may have ended without being cleared yet).
    #[inline]
    pub(crate) fn is_set(&self) -> bool {
        self.until.load(Relaxed) != 0
    }

    /// When the pause in force at `now` ends; `None` (and the pause cleared) if there is none.
    pub(crate) fn until(&self, now: Instant) -> Option<Instant> {
        let raw = self.until.load(Relaxed);
        if raw == 0 {
            return None;
        }
        let until = self.epoch + std::time::Duration::from_nanos(raw - 1);
        if until > now {
            return Some(until);
        }
        // Ended: clear it, unless it was moved meanwhile, so the fast path is free again.
        let _ = self.until.compare_exchange(raw, 0, Relaxed, Relaxed);
        None
    }

    /// Extends the pause to `until` (never shortens it); wakes every waiter if it moved.
    pub(crate) fn extend(&self, until: Instant) {
        let nanos = u64::try_from(until.saturating_duration_since(self.epoch).as_nanos())
            .unwrap_or(u64::MAX - 1);
        let raw = nanos.saturating_add(1);
        if self.until.fetch_max(raw, Relaxed) < raw {
            self.changed.notify_waiters();
        }
    }

    /// A future that completes when the pause next moves; enable it before reading the pause, so
    /// that a move in between is not missed.
    pub(crate) fn changed(&self) -> Notified<'_> {
        self.changed.notified()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
