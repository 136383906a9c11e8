//! [`Cuts`]: at most one cut of a limit per round trip, and the test behind it.

use std::time::Duration;

use tokio::time::Instant;

/// Remembers the last cut, so that overloads from calls granted before it (which the cut already
/// answered) do not cut again: a burst of 503s costs one cut, not one each.
#[derive(Debug, Clone, Default)]
pub(super) struct Cuts {
    last: Option<Instant>,
}

impl Cuts {
    /// Whether an overload from a call that took `latency`, ending now, may cut the limit; if so,
    /// the cut is counted as made now.
    pub(super) fn allow(&mut self, latency: Duration) -> Option<Instant> {
        let now = Instant::now();
        if granted_by(self.last, now, latency) {
            return None;
        }
        self.last = Some(now);
        Some(now)
    }
}

/// Whether a call that took `latency` and ended at `now` was granted no later than `mark`.
pub(super) fn granted_by(mark: Option<Instant>, now: Instant, latency: Duration) -> bool {
    match (mark, now.checked_sub(latency)) {
        (Some(mark), Some(granted)) => granted <= mark,
        (Some(_), None) => true,
        (None, _) => false,
    }
}
