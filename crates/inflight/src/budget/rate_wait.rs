//! [`Budget::rate_limited_for`](crate::Budget::rate_limited_for) and
//! [`Budget::rate_ready_in`](crate::Budget::rate_ready_in): how long a budget's rate gate would
//! keep a new caller out, for a refusal's `Retry-After`.

use std::time::Duration;

use tokio::time::Instant;

use super::Budget;

impl Budget {
    /// How long from now until the budget's rate limit would let a new caller start within its
    /// `permit_timeout`, if nobody else asks meanwhile: zero when a caller asking now would get
    /// its turn in time; `None` when the budget has no rate limit.
    ///
    /// A caller refused with [`AcquireError::RateLimited`](crate::AcquireError::RateLimited)
    /// may try again after this long (an HTTP refusal's `Retry-After`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{AcquireError, Budget, BudgetConfig, Rate};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let budget = Budget::new(
    ///     "llm",
    ///     BudgetConfig::new(8)
    ///         .rate(Rate::per_second(1.0))
    ///         .permit_timeout(Duration::from_millis(100)),
    /// )
    /// .unwrap();
    /// assert_eq!(budget.rate_limited_for(), Some(Duration::ZERO));
    /// drop(budget.acquire().await.unwrap()); // takes the slot of this second
    /// assert!(budget.acquire().await.unwrap_err().is_rate_limited());
    /// // The next slot is 1 s away; 100 ms of it may be waited for.
    /// assert_eq!(budget.rate_limited_for(), Some(Duration::from_millis(900)));
    /// # }
    /// ```
    pub fn rate_limited_for(&self) -> Option<Duration> {
        let Some(rate) = self.engine().rate.as_ref() else {
            // A rate kept by the budget's store (a fleet's): as far as the store knows.
            let store = self.engine().store.as_ref().filter(|s| s.keeps_rate())?;
            return store.rate_limited_for(self.name(), self.permit_timeout());
        };
        let now = Instant::now();
        let wait = rate.earliest(now) - now;
        Some(match self.permit_timeout() {
            Some(deadline) => wait.saturating_sub(deadline),
            None => Duration::ZERO,
        })
    }

    /// How long from now until the budget's rate limit would let a caller start at once, as
    /// [`try_acquire`](Budget::try_acquire) asks, if nobody else asks meanwhile: zero when a
    /// slot is free now; `None` when the budget has no rate limit. A caller refused with
    /// [`TryAcquireError::RateLimited`](crate::TryAcquireError::RateLimited) gets in after this
    /// long (governor's `NotUntil::wait_time_from`); [`rate_limited_for`](Budget::rate_limited_for)
    /// is the same less what the `permit_timeout` of an [`acquire`](Budget::acquire) waits.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{Budget, BudgetConfig, Rate, TryAcquireError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let budget = Budget::new("llm", BudgetConfig::new(8).rate(Rate::per_second(4.0))).unwrap();
    /// drop(budget.try_acquire().unwrap()); // takes the slot of this quarter second
    /// assert_eq!(budget.try_acquire().unwrap_err(), TryAcquireError::RateLimited);
    /// let wait = budget.rate_ready_in().unwrap();
    /// assert_eq!(wait, Duration::from_millis(250));
    /// tokio::time::sleep(wait).await;
    /// assert!(budget.try_acquire().is_ok());
    /// # }
    /// ```
    pub fn rate_ready_in(&self) -> Option<Duration> {
        let Some(rate) = self.engine().rate.as_ref() else {
            let store = self.engine().store.as_ref().filter(|s| s.keeps_rate())?;
            return store.rate_limited_for(self.name(), Some(Duration::ZERO));
        };
        let now = Instant::now();
        Some(rate.earliest(now) - now)
    }
}
