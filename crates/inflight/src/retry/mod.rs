//! Retries within a budget: [`Retry`], the policy of
//! [`Budget::call_with_retry`](crate::Budget::call_with_retry) (how many attempts, how long to
//! wait between them, by when to give up), its [`RetryBudget`], and [`RetryError`], which says
//! why a call was not retried further.
//!
//! A call is retried only when its classifier calls it an overload or a failure (see
//! [`Verdict`](crate::limit::Verdict)) or it ran past its call timeout; never when its budget
//! refused it a permit (that is this process's own limit speaking). Before each retry it waits
//! for the dependency's retry-after if it gave one, else for a jittered exponential backoff. A
//! retry is not made when its wait would end past the caller's deadline (the budget's
//! `permit_timeout` from the first ask, or [`Retry::within`]), when the [`RetryBudget`] is
//! spent, or after [`Retry::max_attempts`]; the error says which.

mod budget;
mod call;
mod error;

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

pub use budget::{RetryBudget, RetryBudgetError};
pub use error::{RetryError, RetryStop};

/// How [`Budget::call_with_retry`](crate::Budget::call_with_retry) retries: a [`RetryBudget`],
/// the most attempts, the backoff between them and an optional deadline.
///
/// Cloning shares the retry budget: make one per dependency, next to its
/// [`Budget`](crate::Budget), and pass it to every call.
///
/// ```
/// use std::time::Duration;
/// use inflight::{Retry, RetryBudget};
///
/// let retry = Retry::new(RetryBudget::default())
///     .max_attempts(4)
///     .backoff(Duration::from_millis(50), Duration::from_secs(1))
///     .within(Duration::from_secs(5));
/// assert_eq!(retry.attempts(), 4);
/// ```
#[derive(Debug, Clone)]
pub struct Retry {
    budget: RetryBudget,
    max_attempts: u32,
    base: Duration,
    max_backoff: Duration,
    within: Option<Duration>,
}

impl Retry {
    /// Retries within `budget`: at most 3 attempts in all, backoff from 50 ms doubling up to
    /// 2 s, and no deadline beyond the budget's `permit_timeout`.
    pub fn new(budget: RetryBudget) -> Retry {
        Retry {
            budget,
            max_attempts: 3,
            base: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            within: None,
        }
    }

    /// At most `n` attempts in all, the first included (at least 1: 1 never retries).
    pub fn max_attempts(mut self, n: u32) -> Retry {
        self.max_attempts = n.max(1);
        self
    }

    /// The backoff before the `n`th retry, when the dependency gave no retry-after: between half
    /// and all of `base` x 2^(n-1), capped at `max` (equal jitter, so that clients that failed
    /// together do not retry together).
    pub fn backoff(mut self, base: Duration, max: Duration) -> Retry {
        self.base = base;
        self.max_backoff = max.max(base);
        self
    }

    /// Gives up on retrying once `deadline` has passed since the first ask for a permit: no
    /// retry is made whose wait would end after it, and no attempt waits for its permit past
    /// it. Without it, the budget's `permit_timeout` from the first ask is the deadline (and
    /// a budget with neither retries up to `max_attempts`).
    pub fn within(mut self, deadline: Duration) -> Retry {
        self.within = Some(deadline);
        self
    }

    /// The most attempts, the first included.
    pub fn attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The retry budget.
    pub fn retry_budget(&self) -> &RetryBudget {
        &self.budget
    }

    pub(crate) fn deadline(&self) -> Option<Duration> {
        self.within
    }

    /// The wait before retry number `n` (1 for the first retry).
    pub(crate) fn backoff_for(&self, n: u32) -> Duration {
        let doubled = self
            .base
            .saturating_mul(1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX));
        let full = doubled.min(self.max_backoff);
        let half = full / 2;
        half + half.mul_f64(unit_random())
    }
}

impl Default for Retry {
    /// [`Retry::new`] with [`RetryBudget::default`].
    fn default() -> Retry {
        Retry::new(RetryBudget::default())
    }
}

/// A number in [0, 1), different for each call, from the standard library's random hasher keys
/// (no random number crate for one jitter).
fn unit_random() -> f64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Relaxed));
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_equal_jitter_up_to_its_cap() {
        let r = Retry::default().backoff(Duration::from_millis(100), Duration::from_millis(500));
        for _ in 0..200 {
            for (n, full) in [(1, 100), (2, 200), (3, 400), (4, 500), (40, 500)] {
                let d = r.backoff_for(n);
                let full = Duration::from_millis(full);
                assert!(d >= full / 2 && d <= full, "retry {n}: {d:?}");
            }
        }
        let waits: std::collections::HashSet<_> = (0..50).map(|_| r.backoff_for(3)).collect();
        assert!(waits.len() > 25, "jittered: {} distinct of 50", waits.len());
    }
}
