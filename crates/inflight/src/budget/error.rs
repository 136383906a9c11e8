//! Errors: one type per operation ([`Budget::new`](super::Budget::new),
//! [`Budget::acquire`](super::Budget::acquire), [`Budget::try_acquire`](super::Budget::try_acquire),
//! [`Budget::call`](super::Budget::call)).

use std::fmt;
use std::time::Duration;

use crate::store::StoreError;

/// Why a budget could not be built: the field (as the builder names it) and what is wrong.
///
/// ```
/// use inflight::{Budget, BudgetConfig};
///
/// let err = Budget::new("records", BudgetConfig::new(0)).unwrap_err();
/// assert_eq!(err.field(), "max_concurrent");
/// assert_eq!(err.to_string(), "budget \"records\": max_concurrent: must be at least 1, got 0");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("budget {budget:?}: {field}: {message}")]
pub struct BuildError {
    budget: String,
    field: &'static str,
    message: String,
}

impl BuildError {
    pub(crate) fn new(budget: &str, field: &'static str, message: impl Into<String>) -> BuildError {
        BuildError {
            budget: budget.to_string(),
            field,
            message: message.into(),
        }
    }

    /// The budget's name.
    pub fn budget(&self) -> &str {
        &self.budget
    }

    /// The field that is wrong, as the builder names it (`max_concurrent`, `permit_timeout`, ...;
    /// `name` for the budget's name).
    pub fn field(&self) -> &str {
        self.field
    }

    /// What is wrong with it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Why a permit was not granted.
///
/// [`AcquireError::retry_after`] says when trying again may succeed, where an honest estimate
/// exists (an HTTP refusal's `Retry-After`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError {
    /// All permits were held and `max_queued` callers were already waiting, so the caller was
    /// turned away at once instead of joining the queue.
    #[error("all permits are held and the wait queue is full (max_queued)")]
    QueueFull {
        /// An estimate of when a place frees: the callers queued ahead, plus this one, times the
        /// mean call time measured so far, divided by the limit (at least the pause in force, if
        /// any); `None` before any call through the budget was measured.
        retry_after: Option<Duration>,
    },
    /// The caller waited its whole `permit_timeout` without getting a permit.
    #[error("no permit within permit_timeout")]
    PermitTimeout,
    /// The budget's rate limit would let the call start only after `permit_timeout`: refused at
    /// once, without waiting.
    #[error("the rate limit would let the call start only after permit_timeout")]
    RateLimited {
        /// How long until the rate slot the caller would have had.
        retry_after: Duration,
    },
    /// The budget keeps its permits in a shared [`Store`](crate::store::Store) that could not be
    /// asked.
    #[error("the permit store is unavailable: {0}")]
    Unavailable(StoreError),
    /// The dependency asked for a pause (an overload with a retry-after, see
    /// [`Verdict`](crate::limit::Verdict)) that ends after the caller's permit deadline, or the
    /// pace that follows it has no start slot for the caller before then: refused at once,
    /// without sleeping through it.
    #[error("the dependency asked to retry after {retry_after:?}, past permit_timeout")]
    Paused {
        /// How long until the pause ends (or until the caller's slot in the pace).
        retry_after: Duration,
    },
    /// The caller was waiting in a budget with [`Classes`](crate::Classes) when the queue was
    /// full and a caller of a heavier class arrived: as the newest waiter of the lightest class
    /// with waiters, it gave up its place and was refused at once.
    #[error("evicted from the full wait queue by a caller of a heavier class")]
    Evicted {
        /// An estimate of when a place frees, as for [`QueueFull`](AcquireError::QueueFull).
        retry_after: Option<Duration>,
    },
}

/// Why [`Budget::try_acquire`](super::Budget::try_acquire) granted no permit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TryAcquireError {
    /// Every permit is held, or callers are already waiting for one (a newcomer never overtakes
    /// them).
    #[error("no permit is free")]
    NoPermits,
    /// The budget keeps its permits in a shared store, which cannot be asked without waiting.
    #[error("the budget's permits are in a shared store; use acquire")]
    WouldWait,
    /// The budget's rate limit lets the next call start only later:
    /// [`Budget::rate_ready_in`](super::Budget::rate_ready_in) says when.
    #[error("the rate limit lets the next call start only later")]
    RateLimited,
    /// The dependency asked for a pause (see [`Verdict`](crate::limit::Verdict)) that is still
    /// in force, or the pace that follows it has no start slot free now.
    #[error("the dependency asked for a pause that is still in force")]
    Paused,
}

impl TryAcquireError {
    /// Whether every permit was held (or others were waiting).
    pub fn is_no_permits(&self) -> bool {
        matches!(self, TryAcquireError::NoPermits)
    }
}

impl AcquireError {
    /// When trying again may succeed, from the moment of the refusal: the next rate slot for
    /// [`RateLimited`](AcquireError::RateLimited), the pause's end for
    /// [`Paused`](AcquireError::Paused), an estimate from the measured call time for
    /// [`QueueFull`](AcquireError::QueueFull); `None` where nothing honest exists (a permit
    /// timeout, a store that could not be asked, a full queue before any call was measured).
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{AcquireError, Budget, BudgetConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let budget = Budget::new("api", BudgetConfig::new(2).max_queued(2)).unwrap();
    /// let slow = || async {
    ///     tokio::time::sleep(Duration::from_millis(100)).await;
    ///     Ok::<_, std::io::Error>(())
    /// };
    /// budget.call(slow).await.unwrap(); // one call measured: 100 ms
    /// let calls = futures::future::join_all((0..5).map(|_| budget.call(slow))).await;
    /// let refused = calls[4].as_ref().unwrap_err();
    /// // Two queued ahead, plus this caller, at 100 ms a call, two at a time.
    /// let AcquireError::QueueFull { retry_after } = refused.rejected().unwrap() else { panic!() };
    /// assert_eq!(*retry_after, Some(Duration::from_millis(150)));
    /// # }
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            AcquireError::QueueFull { retry_after } | AcquireError::Evicted { retry_after } => {
                *retry_after
            }
            AcquireError::RateLimited { retry_after } | AcquireError::Paused { retry_after } => {
                Some(*retry_after)
            }
            AcquireError::PermitTimeout | AcquireError::Unavailable(_) => None,
        }
    }

    /// Whether the caller was turned away without waiting.
    pub fn is_queue_full(&self) -> bool {
        matches!(self, AcquireError::QueueFull { .. })
    }

    /// Whether the caller lost its place in a full queue to a caller of a heavier class.
    pub fn is_evicted(&self) -> bool {
        matches!(self, AcquireError::Evicted { .. })
    }

    /// Whether the caller waited for its whole permit deadline.
    pub fn is_permit_timeout(&self) -> bool {
        matches!(self, AcquireError::PermitTimeout)
    }

    /// Whether the rate limit refused the caller.
    pub fn is_rate_limited(&self) -> bool {
        matches!(self, AcquireError::RateLimited { .. })
    }

    /// Whether a pause the dependency asked for refused the caller.
    pub fn is_paused(&self) -> bool {
        matches!(self, AcquireError::Paused { .. })
    }
}

/// Why [`Budget::call`](super::Budget::call) did not return the call's value.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallError<E> {
    /// No permit was granted; the call was never started.
    Rejected(AcquireError),
    /// The call held its permit for the whole `call_timeout` and was dropped.
    Timeout,
    /// The call ran and returned this error.
    Inner(E),
    /// The call's lease was lost while it ran (its permit may be someone else's now), and the
    /// budget drops such calls ([`OnLost::Cancel`](crate::OnLost::Cancel)).
    LeaseLost,
}

impl<E> CallError<E> {
    /// The call's own error, if that is what this is.
    pub fn into_inner(self) -> Option<E> {
        match self {
            CallError::Inner(e) => Some(e),
            _ => None,
        }
    }

    /// Whether the call timed out after acquiring its permit.
    pub fn is_timeout(&self) -> bool {
        matches!(self, CallError::Timeout)
    }

    /// Whether the call was never started because no permit was granted.
    pub fn is_rejected(&self) -> bool {
        matches!(self, CallError::Rejected(_))
    }

    /// Why no permit was granted, if none was.
    pub fn rejected(&self) -> Option<&AcquireError> {
        match self {
            CallError::Rejected(e) => Some(e),
            _ => None,
        }
    }

    /// When trying again may succeed, if the call was refused a permit (see
    /// [`AcquireError::retry_after`]).
    pub fn retry_after(&self) -> Option<Duration> {
        self.rejected().and_then(AcquireError::retry_after)
    }
}

impl<E: fmt::Display> fmt::Display for CallError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Rejected(e) => e.fmt(f),
            CallError::Timeout => f.write_str("call did not finish within call_timeout"),
            CallError::Inner(e) => e.fmt(f),
            CallError::LeaseLost => f.write_str(
                "the call's lease was lost while it ran (its permit may be someone else's), so it was dropped",
            ),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for CallError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::Rejected(e) => Some(e),
            CallError::Timeout | CallError::LeaseLost => None,
            CallError::Inner(e) => Some(e),
        }
    }
}

impl<E> From<AcquireError> for CallError<E> {
    fn from(e: AcquireError) -> Self {
        CallError::Rejected(e)
    }
}
