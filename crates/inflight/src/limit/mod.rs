//! [`Limit`]: how many calls a budget lets in flight right now, and how that number learns from
//! the calls that end.
//!
//! A budget asks its limit for the current number when it is built and after every sample it
//! feeds it. [`Fixed`] (the default) never changes. With the `adaptive` feature (on by default),
//! [`Aimd`] (loss-based) and [`Vegas`] (latency-based) learn the limit from how calls end, so a
//! budget needs no capacity figure: [`Adaptive`] chooses one in a [`BudgetConfig`] or a budgets
//! file.
//!
//! # Which to pick
//!
//! | dependency | pick |
//! |---|---|
//! | known capacity that does not move | [`Fixed`] at that capacity |
//! | queues before it refuses (latency climbs under load) | [`Vegas`] |
//! | refuses plainly when full (503/429), latency varies by request | [`Aimd`] |
//! | takes any load (a scalable API): the limit only guards against its failures | [`Aimd`] |
//!
//! Both cut on [`Outcome::Overload`] at most once per round trip, stay between their `min` and
//! `max`, grow only while the limit is in use, and read time from tokio's clock, so tests can
//! drive them on paused time.
//!
//! A limit that does change is applied at once: growing admits waiters straight away; shrinking
//! never takes a permit back from a caller that holds one, so new callers wait until the calls in
//! flight fall under the new limit.
//!
//! [`BudgetConfig`]: crate::BudgetConfig
//!
//! ```
//! use std::time::Duration;
//! use inflight::limit::{Limit, Outcome, Sample};
//! use inflight::Budget;
//!
//! /// Halves on an overload signal, grows by one on a success that found the limit in use.
//! #[derive(Debug)]
//! struct Halving { now: usize, max: usize }
//!
//! impl Limit for Halving {
//!     fn current(&self) -> usize { self.now }
//!     fn max(&self) -> usize { self.max }
//!     fn on_sample(&mut self, sample: &Sample) {
//!         match sample.outcome {
//!             Outcome::Overload => self.now = (self.now / 2).max(1),
//!             Outcome::Success if sample.in_flight >= self.now => {
//!                 self.now = (self.now + 1).min(self.max)
//!             }
//!             _ => {}
//!         }
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let budget = Budget::builder("records")
//!     .limit(Halving { now: 4, max: 8 })
//!     .build()
//!     .unwrap();
//! assert_eq!(budget.limit(), 4);
//! budget.acquire().await.unwrap().report(Outcome::Overload);
//! assert_eq!(budget.limit(), 2);
//! # }
//! ```

#[cfg(feature = "adaptive")]
mod adaptive;
#[cfg(feature = "adaptive")]
mod aimd;
#[cfg(feature = "adaptive")]
mod ceiling;
mod fixed;
#[cfg(feature = "adaptive")]
mod round_trip;
#[cfg(feature = "adaptive")]
mod vegas;

use std::fmt;
use std::time::Duration;

#[cfg(feature = "adaptive")]
pub use adaptive::{Adaptive, Algorithm};
#[cfg(feature = "adaptive")]
pub use aimd::Aimd;
pub use fixed::Fixed;
#[cfg(feature = "adaptive")]
pub use vegas::Vegas;

/// How a call that held a permit ended, as far as the limit should care.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The call was served; its latency is a measurement of the dependency.
    Success,
    /// The dependency signalled overload: an HTTP 503 or 429 answered as a normal response, a call
    /// timeout, a refused connection. A limit should back off.
    Overload,
    /// Says nothing about the dependency's load: a client error, a cancelled call, or a permit
    /// dropped without a report.
    Ignore,
}

impl Outcome {
    /// This outcome with the dependency's retry-after: on an [`Outcome::Overload`], the budget
    /// grants no new permit for `delay` (see [`Verdict`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::limit::{Outcome, Verdict};
    ///
    /// let v: Verdict = Outcome::Overload.with_retry_after(Duration::from_secs(2));
    /// assert_eq!(v.outcome(), Outcome::Overload);
    /// assert_eq!(v.retry_after(), Some(Duration::from_secs(2)));
    /// ```
    pub fn with_retry_after(self, delay: Duration) -> Verdict {
        Verdict::from(self).with_retry_after(delay)
    }
}

/// What a classifier says of one call: the [`Outcome`] the limit learns from, whether the call
/// failed before the dependency answered (a transport failure), and the dependency's
/// retry-after, if it gave one.
///
/// Every classifier that returns an [`Outcome`] returns a `Verdict` too (`Outcome` converts
/// into one). A budget counts each call through it by its verdict
/// ([`BudgetSnapshot::outcomes_success`](crate::BudgetSnapshot::outcomes_success) and the
/// fields after it), and an overload with a retry-after pauses the budget: no new permit is
/// granted until the delay has passed. Permits held are untouched; a caller whose permit
/// deadline falls inside the pause is refused at once with
/// [`AcquireError::Paused`](crate::AcquireError::Paused), and the others are granted when it
/// ends, one at a time: the first retry-after also starts a pace of one call per retry-after
/// (the dependency said when it takes *one* call), which grows while the calls it lets through
/// succeed, is cut by further refusals, and lapses after 10 s without one. A retry-after on any
/// other outcome is ignored.
///
/// [`Budget::call_with_retry`](crate::Budget::call_with_retry) retries overloads and failures,
/// and nothing else.
///
/// ```
/// use std::time::Duration;
/// use inflight::limit::{Outcome, Verdict};
///
/// let refused = Verdict::failure();
/// assert_eq!(refused.outcome(), Outcome::Overload);
/// assert!(refused.is_failure() && refused.is_retryable());
/// assert!(!Verdict::from(Outcome::Ignore).is_retryable());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    outcome: Outcome,
    failure: bool,
    retry_after: Option<Duration>,
}

impl Verdict {
    /// The call failed before the dependency answered it (a refused connection, a reset, an
    /// error the call returned): an overload signal to the limit, counted as an error, retried
    /// by [`Budget::call_with_retry`](crate::Budget::call_with_retry).
    pub const fn failure() -> Verdict {
        Verdict {
            outcome: Outcome::Overload,
            failure: true,
            retry_after: None,
        }
    }

    /// This verdict with the dependency's retry-after (capped at
    /// [`RetryAfter::MAX`](crate::RetryAfter::MAX)).
    pub fn with_retry_after(mut self, delay: Duration) -> Verdict {
        self.retry_after = Some(delay.min(crate::RetryAfter::MAX));
        self
    }

    /// What the budget's limit learns from the call.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// The dependency's retry-after, if it gave one.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Whether the call failed before the dependency answered.
    pub fn is_failure(&self) -> bool {
        self.failure
    }

    /// Whether a retry may help: an overload or a failure.
    pub fn is_retryable(&self) -> bool {
        self.outcome == Outcome::Overload
    }

    /// The retry-after that pauses a budget: only an overload's.
    pub(crate) fn pause(&self) -> Option<Duration> {
        self.retry_after
            .filter(|d| self.outcome == Outcome::Overload && !d.is_zero())
    }
}

impl From<Outcome> for Verdict {
    fn from(outcome: Outcome) -> Verdict {
        Verdict {
            outcome,
            failure: false,
            retry_after: None,
        }
    }
}

/// One finished call, as fed to [`Limit::on_sample`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sample {
    /// From the moment the permit was granted to the moment its outcome was reported (or the
    /// permit dropped).
    pub latency: Duration,
    /// Permits held when this one was granted, itself included.
    pub in_flight: usize,
    /// How the call ended.
    pub outcome: Outcome,
}

impl Sample {
    /// A sample, for feeding a limit by hand (in tests, or from another limiter).
    pub fn new(latency: Duration, in_flight: usize, outcome: Outcome) -> Sample {
        Sample {
            latency,
            in_flight,
            outcome,
        }
    }
}

/// A change of a budget's limit, as [`Budget::limit_changes`](crate::Budget::limit_changes)
/// records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitChange {
    /// When the limit changed (tokio's clock).
    pub at: tokio::time::Instant,
    /// The limit from then on.
    pub limit: usize,
}

/// The number of calls a budget lets in flight at once.
///
/// A budget calls [`Limit::on_sample`] once for every permit that goes back (under a lock shared
/// only by that budget's sample reports), then reads [`Limit::current`] and resizes itself. A
/// limit whose [`Limit::learns`] is false is never fed, and costs nothing on the permit path.
pub trait Limit: fmt::Debug + Send + 'static {
    /// The limit now; at least 1 and at most [`Limit::max`] (a budget clamps it to that range).
    fn current(&self) -> usize;

    /// The most this limit will ever allow: the budget's `max_concurrent` in snapshots and checks.
    fn max(&self) -> usize;

    /// Learns from one finished call.
    fn on_sample(&mut self, sample: &Sample);

    /// Whether samples can change this limit. A budget whose limit does not learn neither reads
    /// the clock when it grants a permit nor takes a lock when one goes back.
    fn learns(&self) -> bool {
        true
    }
}
