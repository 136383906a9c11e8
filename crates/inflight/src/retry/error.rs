//! [`RetryError`]: why [`Budget::call_with_retry`](crate::Budget::call_with_retry) gave up, with
//! the last attempt's result.

use std::fmt;
use std::time::Duration;

use crate::CallError;

/// Why a call was not retried further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryStop {
    /// The last attempt's result is not one a retry helps with (its classifier said a success
    /// or nothing of the load for an `Err`).
    NotRetryable,
    /// The budget refused the attempt a permit (its own limit; never retried).
    Rejected,
    /// The retry budget was spent.
    Denied,
    /// The wait before the retry (the dependency's retry-after, or the backoff) would have
    /// ended past the caller's deadline.
    PastDeadline {
        /// The wait that was not made.
        wait: Duration,
    },
    /// The call had made [`Retry::max_attempts`](super::Retry::max_attempts) attempts.
    OutOfAttempts,
}

impl fmt::Display for RetryStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryStop::NotRetryable => f.write_str("not retryable"),
            RetryStop::Rejected => f.write_str("refused a permit"),
            RetryStop::Denied => f.write_str("the retry budget is spent"),
            RetryStop::PastDeadline { wait } => {
                write!(f, "a retry after {wait:?} would end past the deadline")
            }
            RetryStop::OutOfAttempts => f.write_str("out of attempts"),
        }
    }
}

/// What [`Budget::call_with_retry`](crate::Budget::call_with_retry) returns when it did not end
/// in a result its classifier was content with: the last attempt's result, why no further
/// attempt was made, and how many were.
///
/// The last result may be an `Ok`: a response classified as an overload (a 503) that was not
/// retried further. [`RetryError::retry_after`] is the dependency's (or the budget's) word on
/// when to try again, for passing on.
#[derive(Debug)]
pub struct RetryError<T, E> {
    pub(crate) last: Result<T, CallError<E>>,
    pub(crate) stop: RetryStop,
    pub(crate) attempts: u32,
    pub(crate) retry_after: Option<Duration>,
}

impl<T, E> RetryError<T, E> {
    /// Why no further attempt was made.
    pub fn stop(&self) -> RetryStop {
        self.stop
    }

    /// Attempts made, the first included; one refused a permit counts.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The last attempt's result.
    pub fn last(&self) -> &Result<T, CallError<E>> {
        &self.last
    }

    /// The last attempt's result, owned.
    pub fn into_last(self) -> Result<T, CallError<E>> {
        self.last
    }

    /// When trying again may help: the dependency's retry-after on the last attempt, or, for a
    /// refused permit, [`AcquireError::retry_after`](crate::AcquireError::retry_after).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl<T, E: fmt::Display> fmt::Display for RetryError<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gave up after {} attempt", self.attempts)?;
        if self.attempts != 1 {
            f.write_str("s")?;
        }
        write!(f, " ({})", self.stop)?;
        match &self.last {
            Ok(_) => f.write_str(": the last answer was classified as an overload"),
            Err(e) => write!(f, ": {e}"),
        }
    }
}

impl<T: fmt::Debug, E: std::error::Error + 'static> std::error::Error for RetryError<T, E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.last {
            Ok(_) => None,
            Err(e) => Some(e),
        }
    }
}
