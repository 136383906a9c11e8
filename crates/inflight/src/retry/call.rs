//! [`Budget::call_with_retry`]: [`Budget::call_with`] with retries of overloads and failures,
//! within a [`RetryBudget`](crate::RetryBudget) and the caller's deadline.

use std::future::Future;

use tokio::time::Instant;

use super::{Retry, RetryError, RetryStop};
use crate::budget::{call, Budget, CallError, Permit, RetryRefusal};
use crate::limit::{Outcome, Verdict};

impl Budget {
    /// [`Budget::call_with`], retrying the results `classify` calls an overload or a failure
    /// (and call timeouts) within `retry`'s [`RetryBudget`](crate::RetryBudget).
    ///
    /// Each attempt is a call through the budget: it takes a permit (so a retry waits in the
    /// queue like anyone else, and is counted as an acquire and a call), and `classify` sees
    /// its result. Between attempts it waits for the dependency's retry-after, if the verdict
    /// carried one (the budget is paused for that long anyway), else for `retry`'s jittered
    /// backoff. Every call deposits in the retry budget once; every retry withdraws.
    ///
    /// The deadline is [`Retry::within`], or else the budget's `permit_timeout`, counted from
    /// the first ask. No attempt waits for its permit past it, and a retry whose wait would end
    /// past it is not made ([`RetryStop::PastDeadline`]). Retries, and the retries not made, are
    /// counted in [`BudgetSnapshot`](crate::BudgetSnapshot) (`retries`, `retries_denied`,
    /// `retries_past_deadline`, `retries_out_of_attempts`).
    ///
    /// `call` makes a new attempt each time it is called; `classify` may be any classifier of
    /// [`Budget::call_with`] that can be called more than once.
    ///
    /// # Cancel safety
    ///
    /// As [`Budget::call`]: dropping the future drops the attempt in progress (or its wait).
    ///
    /// # Errors
    ///
    /// [`RetryError`] with the last attempt's result (an `Ok` classified as an overload, a
    /// [`CallError`]) and why no further attempt was made.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use inflight::limit::{Outcome, Verdict};
    /// use inflight::{Budget, BudgetConfig, Retry, RetryBudget};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let budget = Budget::new("llm", BudgetConfig::new(4).permit_timeout(Duration::from_secs(5))).unwrap();
    /// let retry = Retry::new(RetryBudget::default());
    /// let asked = AtomicU32::new(0);
    /// let status = budget
    ///     .call_with_retry(
    ///         &retry,
    ///         |r: &Result<u16, std::io::Error>| match r {
    ///             // A 429 that says when: the budget pauses, and the retry waits it out.
    ///             Ok(429) => Outcome::Overload.with_retry_after(Duration::from_secs(1)),
    ///             Ok(_) => Outcome::Success.into(),
    ///             Err(_) => Verdict::failure(),
    ///         },
    ///         || async {
    ///             let n = asked.fetch_add(1, Ordering::Relaxed);
    ///             Ok(if n == 0 { 429 } else { 200 })
    ///         },
    ///     )
    ///     .await
    ///     .unwrap();
    /// assert_eq!(status, 200);
    /// let s = budget.snapshot();
    /// assert_eq!((s.retries, s.outcomes_overload, s.outcomes_success), (1, 1, 1));
    /// # }
    /// ```
    pub async fn call_with_retry<C, V, F, Fut, T, E>(
        &self,
        retry: &Retry,
        mut classify: C,
        mut call: F,
    ) -> Result<T, RetryError<T, E>>
    where
        C: FnMut(&Result<T, E>) -> V,
        V: Into<Verdict>,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let start = Instant::now();
        let deadline = retry
            .deadline()
            .or(self.permit_timeout())
            .and_then(|d| start.checked_add(d));
        retry.retry_budget().deposit();
        let engine = self.engine();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let grant = match engine.grant_fast() {
                Some(grant) => Ok(grant),
                None => engine.grant(engine.default_class(), deadline).await,
            };
            let permit = match grant {
                Ok(grant) => Permit::new(engine, grant),
                Err(e) => {
                    return Err(RetryError {
                        retry_after: e.retry_after(),
                        last: Err(CallError::Rejected(e)),
                        stop: RetryStop::Rejected,
                        attempts,
                    })
                }
            };
            let mut seen: Option<Verdict> = None;
            let result = call::run(
                permit,
                |r: &Result<T, E>| {
                    let v: Verdict = classify(r).into();
                    seen = Some(v);
                    v
                },
                call(),
            )
            .await;
            // A timeout is an overload signal; it never reached the classifier.
            let verdict = seen.unwrap_or(Verdict::from(Outcome::Overload));
            let give_up = |stop, last| RetryError {
                retry_after: verdict.retry_after(),
                last,
                stop,
                attempts,
            };
            if !verdict.is_retryable() {
                return match result {
                    Ok(value) => Ok(value),
                    Err(e) => Err(give_up(RetryStop::NotRetryable, Err(e))),
                };
            }
            if attempts >= retry.attempts() {
                engine.stats.retry_refused(RetryRefusal::OutOfAttempts);
                return Err(give_up(RetryStop::OutOfAttempts, result));
            }
            let wait = verdict
                .retry_after()
                .unwrap_or_else(|| retry.backoff_for(attempts));
            let wake = Instant::now().checked_add(wait);
            if let (Some(d), Some(w)) = (deadline, wake) {
                if w > d {
                    engine.stats.retry_refused(RetryRefusal::PastDeadline);
                    return Err(give_up(RetryStop::PastDeadline { wait }, result));
                }
            }
            if !retry.retry_budget().withdraw() {
                engine.stats.retry_refused(RetryRefusal::Denied);
                return Err(give_up(RetryStop::Denied, result));
            }
            engine.stats.retried();
            drop(result);
            if let Some(wake) = wake {
                tokio::time::sleep_until(wake).await;
            }
        }
    }
}
