//! [`BudgetConfig`]: the limits and deadlines of one budget.

use std::time::Duration;

use crate::config::ConfigError;
use crate::sizing::Rate;

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
        }
    }

    /// Turns callers away at once, with [`AcquireError::QueueFull`](crate::AcquireError::QueueFull),
    /// when this many are already waiting. `0` fails fast whenever all permits are held.
    /// Default: unbounded.
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

    /// The deadline for the call itself in [`Budget::call`](super::Budget::call). It starts only once
    /// the permit is held, so time spent queueing never eats into it. Default: none.
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

    /// The typical service time, if given.
    pub fn service_time_hint(&self) -> Option<Duration> {
        self.service_time
    }

    /// The target rate, if given.
    pub fn target_rate_hint(&self) -> Option<Rate> {
        self.target_rate
    }

    /// The most this budget lets through (`max_concurrent / service_time`, Little's law), if a
    /// service time is given.
    pub fn max_rate(&self) -> Option<Rate> {
        self.service_time
            .map(|t| crate::sizing::max_rate(self.max_concurrent, t))
    }

    /// The calls in flight the target rate needs (`target_rate x service_time`), if both are given.
    pub fn needed_concurrency(&self) -> Option<f64> {
        match (self.target_rate, self.service_time) {
            (Some(rate), Some(t)) => {
                Some(crate::sizing::in_flight_for(rate.events_per_second(), t))
            }
            _ => None,
        }
    }

    /// Checks each field; `name` is used in the messages (`budgets.<name>.<field>: ...`).
    pub(crate) fn validate(&self, name: &str) -> Result<(), ConfigError> {
        let path = crate::config::budget_path(name);
        let field = |f: &str| format!("{path}.{f}");
        if name.is_empty() {
            return Err(ConfigError::invalid(
                path,
                "a budget name must not be empty",
            ));
        }
        if self.max_concurrent == 0 {
            return Err(ConfigError::invalid(
                field("max_concurrent"),
                "must be at least 1, got 0",
            ));
        }
        if self.max_concurrent > tokio::sync::Semaphore::MAX_PERMITS {
            return Err(ConfigError::invalid(
                field("max_concurrent"),
                format!(
                    "must be at most {}, got {}",
                    tokio::sync::Semaphore::MAX_PERMITS,
                    self.max_concurrent
                ),
            ));
        }
        for (f, value) in [
            ("permit_timeout", self.permit_timeout),
            ("call_timeout", self.call_timeout),
            ("service_time", self.service_time),
        ] {
            if value == Some(Duration::ZERO) {
                return Err(ConfigError::invalid(
                    field(f),
                    "must be greater than zero, got 0s",
                ));
            }
        }
        if let Some(rate) = self.target_rate {
            if !(rate.events_per_second() > 0.0 && rate.events_per_second().is_finite()) {
                return Err(ConfigError::invalid(
                    field("target_rate"),
                    format!("must be a positive finite rate, got {rate}"),
                ));
            }
        }
        Ok(())
    }
}
