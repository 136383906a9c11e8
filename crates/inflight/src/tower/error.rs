//! [`BudgetError`]: why a request through a [`BudgetService`](super::BudgetService) did not get the
//! inner service's response.

use std::error::Error;
use std::fmt;

use crate::{AcquireError, CallError};

/// Why a request through a [`BudgetService`](super::BudgetService) failed.
///
/// The same cases as [`CallError`], but an error whenever the inner error can be shown, so that
/// it converts into tower's `BoxError` even when the inner service's error is itself a `BoxError`
/// (which `CallError` cannot do while it hands out the inner error as its `source`).
#[derive(Debug)]
#[non_exhaustive]
pub enum BudgetError<E> {
    /// No permit was granted (queue full, permit timeout, rate limit, store unavailable); the
    /// request never reached the inner service.
    Rejected(AcquireError),
    /// The request held its permit for the whole `call_timeout`; its future was dropped.
    Timeout,
    /// The inner service failed (in readiness or in the call).
    Inner(E),
    /// The request's lease was lost while it ran, and the budget drops such calls
    /// ([`OnLost::Cancel`](crate::OnLost::Cancel)); its future was dropped.
    LeaseLost,
}

impl<E> BudgetError<E> {
    /// The inner service's error, if that is what this is.
    pub fn into_inner(self) -> Option<E> {
        match self {
            BudgetError::Inner(e) => Some(e),
            _ => None,
        }
    }

    /// Why no permit was granted, if none was.
    pub fn rejected(&self) -> Option<&AcquireError> {
        match self {
            BudgetError::Rejected(e) => Some(e),
            _ => None,
        }
    }

    /// When trying again may succeed, if the budget refused the request (see
    /// [`AcquireError::retry_after`]): for a server's `Retry-After`.
    ///
    /// ```
    /// use inflight::tower::BudgetError;
    /// use inflight::AcquireError;
    ///
    /// let e = BudgetError::<std::io::Error>::Rejected(AcquireError::PermitTimeout);
    /// assert_eq!(e.retry_after(), None);
    /// ```
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.rejected().and_then(AcquireError::retry_after)
    }

    /// Whether the request timed out after taking its permit.
    pub fn is_timeout(&self) -> bool {
        matches!(self, BudgetError::Timeout)
    }
}

impl<E: fmt::Display> fmt::Display for BudgetError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetError::Rejected(e) => write!(f, "rejected by the budget: {e}"),
            BudgetError::Timeout => f.write_str("call did not finish within call_timeout"),
            BudgetError::Inner(e) => e.fmt(f),
            BudgetError::LeaseLost => f.write_str(
                "the call's lease was lost while it ran (its permit may be someone else's), so it was dropped",
            ),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> Error for BudgetError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            BudgetError::Rejected(e) => Some(e),
            _ => None,
        }
    }
}

impl<E> From<CallError<E>> for BudgetError<E> {
    fn from(e: CallError<E>) -> Self {
        match e {
            CallError::Rejected(e) => BudgetError::Rejected(e),
            CallError::Timeout => BudgetError::Timeout,
            CallError::Inner(e) => BudgetError::Inner(e),
            CallError::LeaseLost => BudgetError::LeaseLost,
        }
    }
}
