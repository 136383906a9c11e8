//! [`BudgetConfig`], the limits and deadlines of one budget, and [`BudgetBuilder`], which builds a
//! budget from them with a limit or store of its own.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{Budget, BuildError};
use crate::limit::{Fixed, Limit};
use crate::rate::Rate;
use crate::store::Store;

/// The limits and deadlines of one [`Budget`](super::Budget).
///
/// Built with [`BudgetConfig::new`] and builder methods; checked by
/// [`Budget::new`](super::Budget::new) (or when a budgets file is loaded).
///
/// ```
/// use std::time::Duration;
/// use inflight::BudgetConfig;
///
/// // The system of record: 6 calls at once, 6 more may wait up to 500 ms for a permit,
/// // and each call gets 2 s from the moment it holds its permit.
/// let records = BudgetConfig::new(6)
///     .max_queued(6)
///     .permit_timeout(Duration::from_millis(500))
///     .call_timeout(Duration::from_secs(2));
/// assert_eq!(records.max_concurrent(), 6);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetConfig {
    pub(crate) max_concurrent: usize,
    pub(crate) max_queued: Option<usize>,
    pub(crate) permit_timeout: Option<Duration>,
    pub(crate) call_timeout: Option<Duration>,
    pub(crate) service_time: Option<Duration>,
    pub(crate) target_rate: Option<Rate>,
    #[cfg(feature = "adaptive")]
    pub(crate) adaptive: Option<crate::limit::Adaptive>,
    pub(crate) rate: Option<Rate>,
    pub(crate) burst: Option<u32>,
    pub(crate) classes: Option<super::Classes>,
    pub(crate) on_lost: OnLost,
}

/// What a call does when its permit's lease is lost while it runs (a fleet store could not
/// renew it in time, or gave it back at shutdown): its permit may then be someone else's.
///
/// ```
/// use std::time::Duration;
/// use inflight::{BudgetConfig, OnLost};
///
/// // A fleet budget whose calls stop once their lease is gone, so that a process cut off
/// // from Redis never runs past its share for longer than a lease.
/// let records = BudgetConfig::new(6).on_lost(OnLost::Cancel);
/// assert_eq!(records.on_lost_policy(), OnLost::Cancel);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnLost {
    /// The call runs on to its end (`on_lost = "keep"`, the default); the holder can see the
    /// loss through [`Lease::is_lost`](crate::store::Lease::is_lost).
    #[default]
    Keep,
    /// The call is dropped the moment its lease is lost (`on_lost = "cancel"`), and
    /// [`Budget::call`](super::Budget::call) returns
    /// [`CallError::LeaseLost`](super::CallError::LeaseLost).
    Cancel,
}

impl BudgetConfig {
    /// A budget that lets at most `max_concurrent` calls run at once, with an unbounded queue and no
    /// deadlines.
    pub fn new(max_concurrent: usize) -> Self {
        BudgetConfig {
            max_concurrent,
            max_queued: None,
            permit_timeout: None,
            call_timeout: None,
            service_time: None,
            target_rate: None,
            #[cfg(feature = "adaptive")]
            adaptive: None,
            rate: None,
            burst: None,
            classes: None,
            on_lost: OnLost::Keep,
        }
    }

    /// Lets calls start at most at `rate`, next to the limit on calls at once (feature `rate`).
    ///
    /// A rate limit is a different thing from a concurrency limit: a provider's quota of 600
    /// calls per minute holds whether its calls take 50 ms or 5 s, while a concurrency limit lets
    /// through more calls per second the faster they are. Waiting for the rate counts against
    /// `permit_timeout`; a caller whose turn would come after its deadline is refused at once with
    /// [`AcquireError::RateLimited`](crate::AcquireError::RateLimited). Callers get their turns
    /// in the order they asked.
    ///
    /// The rate is enforced as GCRA (the generic cell rate algorithm): calls are spaced
    /// `1 / rate` apart, except that [`burst`](Self::burst) calls may go back to back after a
    /// quiet spell.
    #[cfg(feature = "rate")]
    pub fn rate(mut self, rate: Rate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// How many calls may start back to back after a quiet spell, with [`rate`](Self::rate);
    /// default 1 (calls are always spaced `1 / rate` apart).
    ///
    /// `burst` is **not** an allowance per second or per minute. With `rate = 100/s` and
    /// `burst = 10`, ten calls may start at once when the budget has been idle for 100 ms or
    /// more; after that, one every 10 ms. Over any stretch of time `t`, at most
    /// `burst + t x rate` calls start. A provider's quota of "600 per minute" is honoured by
    /// `rate = 10/s` with `burst = 1`; a larger burst lets more than 600 start within some
    /// minute-long windows (up to `600 + burst - 1`).
    ///
    /// ```
    /// use inflight::{BudgetConfig, Rate};
    ///
    /// let llm = BudgetConfig::new(32).rate(Rate::per_minute(600.0)).burst(5);
    /// assert_eq!(llm.rate_limit(), Some((Rate::per_second(10.0), 5)));
    /// ```
    #[cfg(feature = "rate")]
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// The rate limit and its burst, if the budget has one.
    pub fn rate_limit(&self) -> Option<(Rate, u32)> {
        self.rate.map(|r| (r, self.burst.unwrap_or(1)))
    }

    /// Lets the limit learn from how calls end, between the adaptive settings' `min` and
    /// `max_concurrent` (see [`crate::limit`]). Default: a fixed limit of `max_concurrent`.
    #[cfg(feature = "adaptive")]
    pub fn adaptive(mut self, adaptive: crate::limit::Adaptive) -> Self {
        self.adaptive = Some(adaptive);
        self
    }

    /// Priority classes: when every permit is held, grants go to the classes with waiters in
    /// proportion to their weights (or strictly by weight), and a full queue makes room for a
    /// heavier class by refusing the newest waiter of the lightest (see [`Classes`](super::Classes)).
    /// Default: one class, first come first served.
    pub fn classes(mut self, classes: super::Classes) -> Self {
        self.classes = Some(classes);
        self
    }

    /// The priority classes, if the budget has them.
    pub fn priority_classes(&self) -> Option<&super::Classes> {
        self.classes.as_ref()
    }

    /// The adaptive limit's settings, if the limit learns.
    #[cfg(feature = "adaptive")]
    pub fn adaptive_limit(&self) -> Option<&crate::limit::Adaptive> {
        self.adaptive.as_ref()
    }

    /// The limit these settings describe.
    pub(crate) fn build_limit(&self) -> Box<dyn Limit> {
        #[cfg(feature = "adaptive")]
        if let Some(adaptive) = &self.adaptive {
            return adaptive.build(self.max_concurrent);
        }
        Box::new(Fixed::new(self.max_concurrent))
    }

    /// Turns callers away at once, with [`AcquireError::QueueFull`](crate::AcquireError::QueueFull),
    /// when this many are already waiting. `0` fails fast whenever all permits are held.
    /// Default: unbounded.
    ///
    /// A caller counts as waiting until its own task takes the permit handed to it. In the moment
    /// between a release and the woken waiter's task running, the queue still counts that waiter,
    /// so a newcomer arriving right then is turned away as if the queue were full: the bound
    /// never lets more than `max_queued` callers be waiting or about to take a handed permit.
    /// (The permit itself never goes to the newcomer: it belongs to the waiter.)
    pub fn max_queued(mut self, max_queued: usize) -> Self {
        self.max_queued = Some(max_queued);
        self
    }

    /// The deadline for waiting for a permit. A caller still waiting after it gets
    /// [`AcquireError::PermitTimeout`](crate::AcquireError::PermitTimeout). Default: none.
    pub fn permit_timeout(mut self, timeout: Duration) -> Self {
        self.permit_timeout = Some(timeout);
        self
    }

    /// The deadline for the call itself in [`Budget::call`](super::Budget::call) and
    /// [`Budget::call_with`](super::Budget::call_with) (and for each request through a
    /// `BudgetLayer`, feature `tower`). It starts only once the permit is held, so time spent
    /// queueing never eats into it. Default: none.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// The typical time one call takes: a sizing hint, used by [`BudgetConfig::max_rate`] and by
    /// `inflight check-config`. It does not change what the budget enforces.
    pub fn service_time(mut self, service_time: Duration) -> Self {
        self.service_time = Some(service_time);
        self
    }

    /// What [`Budget::call`](super::Budget::call) and
    /// [`Budget::call_with`](super::Budget::call_with) do with a call whose lease is lost
    /// while it runs: see [`OnLost`]. Default: [`OnLost::Keep`].
    ///
    /// With a fleet store, [`OnLost::Cancel`] bounds how long a process cut off from Redis
    /// (or stalled) runs calls the fleet may have handed to others: a lease is lost one lease
    /// after its last renewal was sent (up to a third of a lease later while a renewal hangs),
    /// and renewals go every third of a lease. With `Fail::Local`, it is also what holds the
    /// fleet to max(limit, processes x local limit) through an outage.
    pub fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.on_lost = on_lost;
        self
    }

    /// The throughput wanted through this budget: a sizing hint, see [`BudgetConfig::needed_concurrency`].
    pub fn target_rate(mut self, rate: Rate) -> Self {
        self.target_rate = Some(rate);
        self
    }

    /// The most calls at once.
    pub fn max_concurrent(&self) -> usize {
        self.max_concurrent
    }

    /// The most callers that may wait for a permit; `None` is unbounded.
    pub fn max_queued_limit(&self) -> Option<usize> {
        self.max_queued
    }

    /// The deadline for waiting for a permit, if any.
    pub fn permit_timeout_limit(&self) -> Option<Duration> {
        self.permit_timeout
    }

    /// The deadline for a call once its permit is held, if any.
    pub fn call_timeout_limit(&self) -> Option<Duration> {
        self.call_timeout
    }

    /// What a call does when its lease is lost while it runs.
    pub fn on_lost_policy(&self) -> OnLost {
        self.on_lost
    }

    /// The typical service time, if given.
    pub fn service_time_hint(&self) -> Option<Duration> {
        self.service_time
    }

    /// The target rate, if given.
    pub fn target_rate_hint(&self) -> Option<Rate> {
        self.target_rate
    }

    /// The most this budget lets through (`max_concurrent / service_time`, Little's law), if a
    /// service time is given. The same figure as
    /// [`Hints::ceiling`](crate::sizing::Hints::ceiling), which names it better now that a
    /// budget can carry a rate limit of its own.
    pub fn max_rate(&self) -> Option<Rate> {
        self.service_time
            .map(|t| Rate::per_second(self.max_concurrent as f64 / t.as_secs_f64()))
    }

    /// The calls in flight the target rate needs (`target_rate x service_time`), if both are given.
    pub fn needed_concurrency(&self) -> Option<f64> {
        match (self.target_rate, self.service_time) {
            (Some(rate), Some(t)) => Some(rate.events_per_second() * t.as_secs_f64()),
            _ => None,
        }
    }

    /// Checks each field; `name` is the budget's, for the messages.
    pub(crate) fn validate(&self, name: &str) -> Result<(), BuildError> {
        let invalid = |field, message: String| Err(BuildError::new(name, field, message));
        if name.trim().is_empty() {
            return invalid("name", "a budget name must not be empty or blank".into());
        }
        if self.max_concurrent == 0 {
            return invalid("max_concurrent", "must be at least 1, got 0".into());
        }
        if self.max_concurrent > tokio::sync::Semaphore::MAX_PERMITS {
            return invalid(
                "max_concurrent",
                format!(
                    "must be at most {}, got {}",
                    tokio::sync::Semaphore::MAX_PERMITS,
                    self.max_concurrent
                ),
            );
        }
        for (field, value) in [
            ("permit_timeout", self.permit_timeout),
            ("call_timeout", self.call_timeout),
            ("service_time", self.service_time),
        ] {
            if value == Some(Duration::ZERO) {
                return invalid(field, "must be greater than zero, got 0s".into());
            }
            if let Some(d) = value.filter(|d| *d > MAX_DURATION) {
                return invalid(
                    field,
                    format!(
                        "must be at most 7 days, got {}",
                        humantime::format_duration(d)
                    ),
                );
            }
        }
        if let Some(rate) = self.target_rate {
            if !(rate.events_per_second() > 0.0 && rate.events_per_second().is_finite()) {
                return invalid(
                    "target_rate",
                    format!("must be a positive finite rate, got {rate}"),
                );
            }
            if rate.events_per_second() > MAX_RATE_PER_SECOND {
                return invalid(
                    "target_rate",
                    format!("must be at most {MAX_RATE_PER_SECOND}/s, got {rate}"),
                );
            }
        }
        #[cfg(feature = "adaptive")]
        if let Some(adaptive) = &self.adaptive {
            if let Err((field, message)) = adaptive.check(self.max_concurrent) {
                return invalid(field, message);
            }
        }
        if let Some(rate) = self.rate {
            let per_second = rate.events_per_second();
            if !(per_second.is_finite() && per_second > 0.0) {
                return invalid(
                    "rate",
                    format!("must be a positive finite rate, got {rate}"),
                );
            }
            if per_second > MAX_RATE_PER_SECOND {
                return invalid(
                    "rate",
                    format!("must be at most {MAX_RATE_PER_SECOND}/s, got {rate}"),
                );
            }
            if per_second < MIN_RATE_PER_SECOND {
                return invalid(
                    "rate",
                    format!("must be at least one call a day, got {rate}"),
                );
            }
        }
        match self.burst {
            Some(_) if self.rate.is_none() => {
                return invalid(
                    "burst",
                    "only a rate limit takes a burst (add a rate)".into(),
                )
            }
            Some(0) => return invalid("burst", "must be at least 1, got 0".into()),
            Some(b) if b > MAX_BURST => {
                return invalid("burst", format!("must be at most {MAX_BURST}, got {b}"))
            }
            _ => {}
        }
        if let Some(classes) = &self.classes {
            if let Err((field, message)) = classes.check() {
                return invalid(field, message);
            }
            for class in classes.iter() {
                if let Some(d) = class.permit_timeout.filter(|d| *d > MAX_DURATION) {
                    return invalid(
                        "classes",
                        format!(
                            "class {:?}: permit_timeout must be at most 7 days, got {}",
                            class.name(),
                            humantime::format_duration(d)
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}

/// The longest timeout or service time a budget takes: a week.
const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);
/// The fastest rate a budget enforces: a million calls a second, one per microsecond.
const MAX_RATE_PER_SECOND: f64 = 1e6;
/// The slowest: one call a day.
const MIN_RATE_PER_SECOND: f64 = 1.0 / 86_400.0;
/// The largest burst.
const MAX_BURST: u32 = 1_000_000;

/// Builds a [`Budget`] step by step, from [`Budget::builder`]: the settings of [`BudgetConfig`],
/// plus a [`Limit`] or a shared [`Store`] of its own.
///
/// ```
/// use std::time::Duration;
/// use inflight::Budget;
///
/// let records = Budget::builder("records")
///     .max_concurrent(6)
///     .max_queued(6)
///     .permit_timeout(Duration::from_millis(500))
///     .call_timeout(Duration::from_secs(2))
///     .build()
///     .unwrap();
/// assert_eq!(records.max_queued(), Some(6));
///
/// let err = Budget::builder("records").build().unwrap_err();
/// assert_eq!(err.field(), "max_concurrent");
/// ```
#[must_use = "a builder does nothing until build() is called"]
pub struct BudgetBuilder {
    name: String,
    max_concurrent: Option<usize>,
    config: BudgetConfig,
    limit: Option<Box<dyn Limit>>,
    store: Option<Arc<dyn Store>>,
}

impl BudgetBuilder {
    pub(crate) fn new(name: &str) -> BudgetBuilder {
        BudgetBuilder {
            name: name.to_string(),
            max_concurrent: None,
            config: BudgetConfig::new(0),
            limit: None,
            store: None,
        }
    }

    /// Starts from a whole configuration (its `max_concurrent` included).
    pub fn config(mut self, config: BudgetConfig) -> Self {
        self.max_concurrent = Some(config.max_concurrent);
        self.config = config;
        self
    }

    /// The most calls at once: a fixed limit. Required unless a [`limit`](Self::limit) is given.
    pub fn max_concurrent(mut self, n: usize) -> Self {
        self.max_concurrent = Some(n);
        self
    }

    /// See [`BudgetConfig::max_queued`].
    pub fn max_queued(mut self, n: usize) -> Self {
        self.config.max_queued = Some(n);
        self
    }

    /// See [`BudgetConfig::permit_timeout`].
    pub fn permit_timeout(mut self, timeout: Duration) -> Self {
        self.config.permit_timeout = Some(timeout);
        self
    }

    /// See [`BudgetConfig::call_timeout`].
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.config.call_timeout = Some(timeout);
        self
    }

    /// See [`BudgetConfig::service_time`].
    pub fn service_time(mut self, service_time: Duration) -> Self {
        self.config.service_time = Some(service_time);
        self
    }

    /// See [`BudgetConfig::on_lost`].
    pub fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.config.on_lost = on_lost;
        self
    }

    /// See [`BudgetConfig::target_rate`].
    pub fn target_rate(mut self, rate: Rate) -> Self {
        self.config.target_rate = Some(rate);
        self
    }

    /// See [`BudgetConfig::adaptive`].
    #[cfg(feature = "adaptive")]
    pub fn adaptive(mut self, adaptive: crate::limit::Adaptive) -> Self {
        self.config.adaptive = Some(adaptive);
        self
    }

    /// See [`BudgetConfig::rate`].
    #[cfg(feature = "rate")]
    pub fn rate(mut self, rate: Rate) -> Self {
        self.config.rate = Some(rate);
        self
    }

    /// See [`BudgetConfig::burst`].
    #[cfg(feature = "rate")]
    pub fn burst(mut self, burst: u32) -> Self {
        self.config.burst = Some(burst);
        self
    }

    /// See [`BudgetConfig::classes`].
    pub fn classes(mut self, classes: super::Classes) -> Self {
        self.config.classes = Some(classes);
        self
    }

    /// A limit that decides how many calls may be in flight (see [`crate::limit`]); its
    /// [`Limit::max`] becomes the budget's `max_concurrent`.
    pub fn limit(mut self, limit: impl Limit) -> Self {
        self.limit = Some(Box::new(limit));
        self
    }

    /// Permits shared through a [`Store`], taken after the budget's own (see [`crate::store`]).
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Checks the settings and builds the budget.
    ///
    /// # Errors
    ///
    /// [`BuildError`] naming the field, as [`Budget::new`]; also when neither `max_concurrent` nor
    /// a limit is given, or both are and they disagree.
    pub fn build(self) -> Result<Budget, BuildError> {
        let BudgetBuilder {
            name,
            max_concurrent,
            mut config,
            limit,
            store,
        } = self;
        let limit: Box<dyn Limit> = match (limit, max_concurrent) {
            (Some(limit), Some(n)) if n != limit.max() => {
                return Err(BuildError::new(
                    &name,
                    "max_concurrent",
                    format!("is {n} but the limit's maximum is {}", limit.max()),
                ))
            }
            (Some(limit), _) => limit,
            (None, Some(n)) => {
                config.max_concurrent = n;
                config.build_limit()
            }
            (None, None) => {
                return Err(BuildError::new(
                    &name,
                    "max_concurrent",
                    "missing (give max_concurrent or a limit)",
                ))
            }
        };
        config.max_concurrent = limit.max();
        Budget::assemble(&name, config, limit, store)
    }
}

impl fmt::Debug for BudgetBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetBuilder")
            .field("name", &self.name)
            .field("max_concurrent", &self.max_concurrent)
            .field("config", &self.config)
            .field("limit", &self.limit)
            .field("store", &self.store)
            .finish()
    }
}
