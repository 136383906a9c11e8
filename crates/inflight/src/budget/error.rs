//! Errors returned by [`Budget::acquire`](super::Budget::acquire) and [`Budget::call`](super::Budget::call).

use std::fmt;

/// Why a permit was not granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError {
    /// All permits were held and `max_queued` callers were already waiting, so the caller was
    /// turned away at once instead of joining the queue.
    #[error("all permits are held and the wait queue is full (max_queued)")]
    QueueFull,
    /// The caller waited its whole `permit_timeout` without getting a permit.
    #[error("no permit within permit_timeout")]
    PermitTimeout,
}

impl AcquireError {
    /// Whether the caller was turned away without waiting.
    pub fn is_queue_full(&self) -> bool {
        matches!(self, AcquireError::QueueFull)
    }

    /// Whether the caller waited for its whole permit deadline.
    pub fn is_permit_timeout(&self) -> bool {
        matches!(self, AcquireError::PermitTimeout)
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
}

impl<E: fmt::Display> fmt::Display for CallError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Rejected(e) => e.fmt(f),
            CallError::Timeout => f.write_str("call did not finish within call_timeout"),
            CallError::Inner(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for CallError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::Rejected(e) => Some(e),
            CallError::Timeout => None,
            CallError::Inner(e) => Some(e),
        }
    }
}

impl<E> From<AcquireError> for CallError<E> {
    fn from(e: AcquireError) -> Self {
        CallError::Rejected(e)
    }
}
