//! How a strategy retries its calls ([`RetrySpec`]), and who does ([`RetryBy`]).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Who retries a strategy's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RetryBy {
    /// `inflight`'s back-pressure: `Budget::call_with_retry` within an `inflight::RetryBudget`,
    /// with the dependency's `Retry-After` given to the budget, which pauses for it.
    Inflight,
    /// tower's retry layer (`tower::retry::Retry`) with a `TpsBudget` and tower's exponential
    /// backoff, around the same budgets; it does not read `Retry-After`.
    Tower,
}

impl RetryBy {
    /// The name a strategy file gives it.
    pub fn name(self) -> &'static str {
        match self {
            RetryBy::Inflight => "inflight",
            RetryBy::Tower => "tower",
        }
    }
}

/// How a strategy retries the overload answers (429, 503) and transport failures of its calls;
/// a call past its timeout is not retried (see `crate::gate`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RetrySpec {
    pub by: RetryBy,
    /// The most attempts per call, the first included.
    pub max_attempts: u32,
    /// The share of recent calls that may be retried (the retry budget's `retry_percent`); the
    /// budget's window (10 s) and floor (10 retries a second) are tower's and Finagle's defaults,
    /// scaled by the time scale.
    pub retry_percent: f64,
}

// `retry_percent` is checked to be a number when the file is read.
impl Eq for RetrySpec {}

/// The most attempts a strategy may give a call.
pub const MAX_ATTEMPTS: u32 = 10;

impl RetrySpec {
    /// The defaults of a retry table that names only `by`: 3 attempts, 20% of calls.
    pub fn new(by: RetryBy) -> RetrySpec {
        RetrySpec {
            by,
            max_attempts: 3,
            retry_percent: 0.2,
        }
    }
}

impl fmt::Display for RetrySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "retried by {} (up to {} attempts, {}% of calls)",
            self.by.name(),
            self.max_attempts,
            self.retry_percent * 100.0
        )
    }
}
