//! [`RetryBudget`]: how many retries a client may make, as a share of its recent calls plus a
//! small floor per second, as Finagle's `RetryBudget` and tower's `TpsBudget` do.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Slots the window is cut into: a deposit expires between `ttl` and `ttl` + one slot after it
/// was made.
const SLOTS: usize = 10;

/// A budget for retries: over any stretch of `ttl`, at most `retry_percent` of the calls
/// deposited in it, plus `min_per_sec` x `ttl` (in seconds), may be retried.
///
/// Every first attempt [`deposit`](RetryBudget::deposit)s; every retry must
/// [`withdraw`](RetryBudget::withdraw) first, and is not made when that fails. Deposits and
/// withdrawals expire after `ttl` (in ten steps), so the budget follows the recent traffic: a
/// dependency that fails every call gets `retry_percent` more calls from its clients, not the
/// three or four times as many that "retry each call three times" sends when it is least able
/// to take them. The floor lets a client that makes few calls retry at all.
///
/// The same semantics and defaults as tower's `TpsBudget` and Finagle's: `ttl` 10 s (between
/// 1 s and 60 s), `min_per_sec` 10, `retry_percent` 0.2 (up to 1000: 2.0 allows two retries per
/// call). Cloning is cheap and every clone shares the same counts: make one per dependency.
/// Time is tokio's clock, so tests can drive it on paused time.
///
/// ```
/// use std::time::Duration;
/// use inflight::RetryBudget;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // 10% of calls, no floor.
/// let budget = RetryBudget::new(Duration::from_secs(10), 0, 0.1).unwrap();
/// for _ in 0..20 {
///     budget.deposit();
/// }
/// assert!(budget.withdraw() && budget.withdraw());
/// assert!(!budget.withdraw(), "two retries for twenty calls");
/// tokio::time::sleep(Duration::from_secs(11)).await;
/// budget.deposit();
/// assert!(!budget.withdraw(), "the old deposits expired");
/// # }
/// ```
#[derive(Clone)]
pub struct RetryBudget {
    inner: Arc<Inner>,
}

struct Inner {
    ttl: Duration,
    min_per_sec: u32,
    retry_percent: f64,
    /// `min_per_sec` x `ttl`: retries allowed in any window whatever the deposits.
    reserve: u64,
    slot_width: Duration,
    window: Mutex<Window>,
}

struct Window {
    epoch: Instant,
    /// The number of the newest slot, counted from `epoch`.
    newest: u64,
    deposits: [u64; SLOTS],
    withdrawals: [u64; SLOTS],
}

/// Why a [`RetryBudget`] could not be made: the setting and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("retry budget: {field}: {message}")]
pub struct RetryBudgetError {
    field: &'static str,
    message: String,
}

impl RetryBudgetError {
    /// The setting that is wrong: `ttl`, `min_per_sec` or `retry_percent`.
    pub fn field(&self) -> &str {
        self.field
    }
}

impl RetryBudget {
    /// A budget allowing `retry_percent` of the calls of the last `ttl` to be retried, plus
    /// `min_per_sec` retries a second.
    ///
    /// # Errors
    ///
    /// [`RetryBudgetError`] when `ttl` is outside 1 s to 60 s, or `retry_percent` is not a number
    /// between 0 and 1000, or `min_per_sec` is above 1,000,000.
    pub fn new(
        ttl: Duration,
        min_per_sec: u32,
        retry_percent: f64,
    ) -> Result<RetryBudget, RetryBudgetError> {
        let invalid = |field, message: String| Err(RetryBudgetError { field, message });
        if ttl < Duration::from_secs(1) || ttl > Duration::from_secs(60) {
            return invalid("ttl", format!("must be between 1s and 60s, got {ttl:?}"));
        }
        if !(0.0..=1000.0).contains(&retry_percent) {
            return invalid(
                "retry_percent",
                format!("must be between 0 and 1000, got {retry_percent}"),
            );
        }
        if min_per_sec > 1_000_000 {
            return invalid(
                "min_per_sec",
                format!("must be at most 1000000, got {min_per_sec}"),
            );
        }
        let reserve = (u64::from(min_per_sec) as f64 * ttl.as_secs_f64()).floor() as u64;
        Ok(RetryBudget {
            inner: Arc::new(Inner {
                ttl,
                min_per_sec,
                retry_percent,
                reserve,
                slot_width: ttl / SLOTS as u32,
                window: Mutex::new(Window {
                    epoch: Instant::now(),
                    newest: 0,
                    deposits: [0; SLOTS],
                    withdrawals: [0; SLOTS],
                }),
            }),
        })
    }

    /// Counts a call that may later be retried (a first attempt).
    pub fn deposit(&self) {
        let mut w = self.window();
        let i = w.slot();
        w.deposits[i] += 1;
    }

    /// Takes one retry from the budget if it has one; `false` (taking nothing) if retrying now
    /// would exceed the share.
    pub fn withdraw(&self) -> bool {
        let mut w = self.window();
        let i = w.slot();
        if self.left(&w) == 0 {
            return false;
        }
        w.withdrawals[i] += 1;
        true
    }

    /// Retries the budget would allow now.
    pub fn remaining(&self) -> u64 {
        let mut w = self.window();
        w.slot();
        self.left(&w)
    }

    /// The window deposits count in.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// Retries a second allowed whatever the traffic.
    pub fn min_per_sec(&self) -> u32 {
        self.inner.min_per_sec
    }

    /// The share of calls that may be retried.
    pub fn retry_percent(&self) -> f64 {
        self.inner.retry_percent
    }

    fn left(&self, w: &Window) -> u64 {
        let deposits: u64 = w.deposits.iter().sum();
        let withdrawals: u64 = w.withdrawals.iter().sum();
        let share = (deposits as f64 * self.inner.retry_percent).floor() as u64;
        (share + self.inner.reserve).saturating_sub(withdrawals)
    }

    /// The window, its slots moved on to now.
    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        let mut w = self
            .inner
            .window
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let elapsed = Instant::now().saturating_duration_since(w.epoch);
        let now_slot = (elapsed.as_nanos() / self.inner.slot_width.as_nanos().max(1)) as u64;
        let expired = now_slot.saturating_sub(w.newest).min(SLOTS as u64);
        for k in 1..=expired {
            let i = ((w.newest + k) % SLOTS as u64) as usize;
            w.deposits[i] = 0;
            w.withdrawals[i] = 0;
        }
        w.newest = w.newest.max(now_slot);
        w
    }
}

impl Window {
    /// The index of the newest slot.
    fn slot(&mut self) -> usize {
        (self.newest % SLOTS as u64) as usize
    }
}

impl Default for RetryBudget {
    /// `ttl` 10 s, `min_per_sec` 10, `retry_percent` 0.2: tower's and Finagle's defaults.
    fn default() -> RetryBudget {
        RetryBudget::new(Duration::from_secs(10), 10, 0.2).expect("the defaults are valid")
    }
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudget")
            .field("ttl", &self.inner.ttl)
            .field("min_per_sec", &self.inner.min_per_sec)
            .field("retry_percent", &self.inner.retry_percent)
            .field("remaining", &self.remaining())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[tokio::test(start_paused = true)]
    async fn the_floor_allows_min_per_sec_times_ttl_then_refills_as_withdrawals_expire() {
        let b = RetryBudget::new(secs(2), 3, 0.0).unwrap();
        for _ in 0..6 {
            assert!(b.withdraw());
        }
        assert!(!b.withdraw());
        tokio::time::sleep(Duration::from_millis(2_300)).await;
        assert_eq!(b.remaining(), 6);
    }

    #[tokio::test(start_paused = true)]
    async fn deposits_expire_after_ttl() {
        let b = RetryBudget::new(secs(1), 0, 1.0).unwrap();
        b.deposit();
        tokio::time::sleep(Duration::from_millis(901)).await;
        assert_eq!(b.remaining(), 1, "still within the window");
        tokio::time::sleep(secs(3)).await;
        assert!(!b.withdraw(), "expired");
    }

    #[test]
    fn bad_settings_name_the_field() {
        let e = RetryBudget::new(Duration::from_millis(10), 1, 0.2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "retry budget: ttl: must be between 1s and 60s, got 10ms"
        );
        assert_eq!(
            RetryBudget::new(secs(1), 1, f64::NAN).unwrap_err().field(),
            "retry_percent"
        );
        assert_eq!(
            RetryBudget::new(secs(1), 1, -0.1).unwrap_err().field(),
            "retry_percent"
        );
        assert_eq!(
            RetryBudget::new(secs(1), u32::MAX, 0.1)
                .unwrap_err()
                .field(),
            "min_per_sec"
        );
    }
}
