//! [`assess`]: what a budget's settings imply, and the settings that contradict each other.

use std::fmt;
use std::time::Duration;

use super::{in_flight_for, max_rate, Rate};
use crate::budget::BudgetConfig;

/// The sizing hints of one budget: its limit, the typical time per call and the throughput wanted.
///
/// Hints change nothing a budget enforces; they feed Little's law.
///
/// ```
/// use std::time::Duration;
/// use inflight::{BudgetConfig, Rate};
/// use inflight::sizing::Hints;
///
/// let config = BudgetConfig::new(6)
///     .service_time(Duration::from_millis(150))
///     .target_rate(Rate::per_second(100.0));
/// let hints = Hints::of(&config);
/// assert_eq!(hints.ceiling(), Some(Rate::per_second(40.0)));
/// assert_eq!(hints.needed_concurrency(), Some(15.0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Hints {
    /// The most calls at once (for an adaptive limit, its maximum).
    pub max_concurrent: usize,
    /// The typical time one call takes, if given.
    pub service_time: Option<Duration>,
    /// The throughput wanted through the budget, if given.
    pub target_rate: Option<Rate>,
    /// The budget's rate limit and burst, if it has one.
    pub rate_limit: Option<(Rate, u32)>,
}

impl Hints {
    /// The hints a budget configuration carries.
    pub fn of(config: &BudgetConfig) -> Hints {
        Hints {
            max_concurrent: config.max_concurrent(),
            service_time: config.service_time_hint(),
            target_rate: config.target_rate_hint(),
            rate_limit: config.rate_limit(),
        }
    }

    /// The calls in flight the rate limit needs to be reached, `rate x service_time`, if the
    /// budget has a rate limit and a service time is given: a rate of 100/s at 150 ms needs 15.
    pub fn rate_in_flight(&self) -> Option<f64> {
        match (self.rate_limit, self.service_time) {
            (Some((rate, _)), Some(t)) => Some(in_flight_for(rate.events_per_second(), t)),
            _ => None,
        }
    }

    /// The most the limit lets through, `max_concurrent / service_time`, if a service time is given.
    pub fn ceiling(&self) -> Option<Rate> {
        self.service_time.map(|t| max_rate(self.max_concurrent, t))
    }

    /// The calls in flight the target rate needs, `target_rate x service_time`, if both are given.
    pub fn needed_concurrency(&self) -> Option<f64> {
        match (self.target_rate, self.service_time) {
            (Some(rate), Some(t)) => Some(in_flight_for(rate.events_per_second(), t)),
            _ => None,
        }
    }
}

/// What a budget's settings imply, from [`assess`]: the Little's-law figures and the settings that
/// contradict each other.
#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    /// The most the budget lets through, `max_concurrent / service_time`, if a service time is given.
    pub max_rate: Option<Rate>,
    /// The calls in flight `target_rate` needs, `target_rate x service_time`, if both are given.
    pub needed_concurrency: Option<f64>,
    /// The calls in flight the rate limit needs to be reached, `rate x service_time`, if both are
    /// given.
    pub rate_in_flight: Option<f64>,
    /// Settings that no single-field check catches but that cannot all hold.
    pub warnings: Vec<Warning>,
}

impl Assessment {
    /// Whether [`target_rate`](BudgetConfig::target_rate) needs more calls in flight than
    /// `max_concurrent` allows, if both it and a service time are given: the verdict behind
    /// [`Warning::TargetExceedsBudget`], which is in `warnings` exactly when this is `Some(true)`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{BudgetConfig, Rate};
    /// use inflight::sizing::assess;
    ///
    /// let records = BudgetConfig::new(6).service_time(Duration::from_millis(150));
    /// assert_eq!(assess(&records).target_exceeds_budget(), None, "no target");
    /// let fits = records.clone().target_rate(Rate::per_second(40.0)); // needs 6.0
    /// assert_eq!(assess(&fits).target_exceeds_budget(), Some(false));
    /// let exceeds = records.target_rate(Rate::per_second(100.0)); // needs 15.0
    /// assert_eq!(assess(&exceeds).target_exceeds_budget(), Some(true));
    /// ```
    pub fn target_exceeds_budget(&self) -> Option<bool> {
        self.needed_concurrency.map(|_| {
            self.warnings
                .iter()
                .any(|w| matches!(w, Warning::TargetExceedsBudget { .. }))
        })
    }

    /// Whether the budget's rate limit needs more calls in flight than `max_concurrent` allows
    /// (so that the rate limit never binds), if it has one and a service time is given: the
    /// verdict behind [`Warning::RateNeedsMoreThanBudget`], which is in `warnings` exactly when
    /// this is `Some(true)`.
    pub fn rate_exceeds_budget(&self) -> Option<bool> {
        self.rate_in_flight.map(|_| {
            self.warnings
                .iter()
                .any(|w| matches!(w, Warning::RateNeedsMoreThanBudget { .. }))
        })
    }
}

/// Whether `needed` calls in flight are more than `max_concurrent`, with room for the rounding
/// of `rate x service_time` (100/s x 70 ms is 7.000000000000001 in floating point, and fits
/// within 7).
fn exceeds(needed: f64, max_concurrent: usize) -> bool {
    needed > max_concurrent as f64 + 1e-9
}

/// A budget setting that contradicts another, or a target the budget cannot meet.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Warning {
    /// `target_rate x service_time` exceeds `max_concurrent`: the target cannot be met within the budget.
    TargetExceedsBudget {
        needed: f64,
        max_concurrent: usize,
        max_rate: Rate,
        target_rate: Rate,
    },
    /// `max_queued x service_time / max_concurrent > permit_timeout`: the queue cannot drain within the
    /// permit deadline, so the last waiters in a full queue would always time out.
    QueueCannotDrain {
        max_queued: usize,
        drain_time: Duration,
        permit_timeout: Duration,
    },
    /// `call_timeout < service_time`: a typical call would time out.
    CallTimeoutBelowServiceTime {
        call_timeout: Duration,
        service_time: Duration,
    },
    /// `permit_timeout` is set but `max_queued = 0`: nobody ever waits, so the deadline never applies.
    PermitTimeoutWithoutQueue { permit_timeout: Duration },
    /// `rate x service_time` exceeds `max_concurrent`: the concurrency limit caps the budget below
    /// its rate limit, which never binds.
    RateNeedsMoreThanBudget {
        needed: f64,
        max_concurrent: usize,
        rate: Rate,
        max_rate: Rate,
    },
    /// `target_rate` is above the rate limit: the target cannot be met.
    TargetAboveRateLimit { target_rate: Rate, rate: Rate },
    /// `call_timeout` or `permit_timeout` (`field`) is under a millisecond: every call would
    /// time out, or every caller that waits be refused (`"1ns"` written for `"1s"`, say).
    TimeoutUnderAMillisecond {
        field: &'static str,
        timeout: Duration,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::TargetExceedsBudget { needed, max_concurrent, max_rate, target_rate } => write!(
                f,
                "target_rate {target_rate} needs {needed:.1} calls in flight but max_concurrent is {max_concurrent} \
                 (at most {max_rate}): lower the target, or raise the budget after measuring that the service can take it"
            ),
            Warning::QueueCannotDrain { max_queued, drain_time, permit_timeout } => write!(
                f,
                "a full queue of {max_queued} takes about {} to drain, longer than permit_timeout {}: \
                 the last waiters would always time out (lower max_queued or raise permit_timeout)",
                humantime::format_duration(round_ms(*drain_time)),
                humantime::format_duration(*permit_timeout)
            ),
            Warning::CallTimeoutBelowServiceTime { call_timeout, service_time } => write!(
                f,
                "call_timeout {} is shorter than service_time {}: a typical call would time out",
                humantime::format_duration(*call_timeout),
                humantime::format_duration(*service_time)
            ),
            Warning::RateNeedsMoreThanBudget { needed, max_concurrent, rate, max_rate } => write!(
                f,
                "rate {rate} needs {needed:.1} calls in flight but max_concurrent is {max_concurrent}: \
                 the budget passes at most {max_rate}, so the rate limit never binds \
                 (lower the rate, or raise max_concurrent after measuring)"
            ),
            Warning::TargetAboveRateLimit { target_rate, rate } => write!(
                f,
                "target_rate {target_rate} is above the rate limit {rate}: the target cannot be met"
            ),
            Warning::TimeoutUnderAMillisecond { field, timeout } => write!(
                f,
                "{field} {} is under a millisecond: {} (a unit typed wrong, \"1ns\" for \"1s\"?)",
                humantime::format_duration(*timeout),
                if *field == "call_timeout" {
                    "every call would time out"
                } else {
                    "every caller that waits would be refused"
                }
            ),
            Warning::PermitTimeoutWithoutQueue { permit_timeout } => write!(
                f,
                "permit_timeout {} never applies with max_queued = 0 (callers are turned away instead of waiting)",
                humantime::format_duration(*permit_timeout)
            ),
        }
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_secs_f64().mul_add(1e3, 0.5) as u64)
}

/// Works out what `config` implies: its Little's-law figures and the settings that contradict each
/// other.
///
/// ```
/// use std::time::Duration;
/// use inflight::{BudgetConfig, Rate};
/// use inflight::sizing::{assess, Warning};
///
/// let config = BudgetConfig::new(6)
///     .max_queued(6)
///     .permit_timeout(Duration::from_millis(100))
///     .service_time(Duration::from_millis(150))
///     .target_rate(Rate::per_second(80.0));
/// let a = assess(&config);
/// assert_eq!(a.max_rate, Some(Rate::per_second(40.0)));
/// assert_eq!(a.needed_concurrency, Some(12.0));
/// assert!(matches!(a.warnings[0], Warning::TargetExceedsBudget { .. }));
/// assert!(matches!(a.warnings[1], Warning::QueueCannotDrain { .. }));
/// ```
pub fn assess(config: &BudgetConfig) -> Assessment {
    let hints = Hints::of(config);
    let max_concurrent = hints.max_concurrent;
    let service_time = hints.service_time;
    let max_rate = hints.ceiling();
    let needed_concurrency = hints.needed_concurrency();
    let mut warnings = Vec::new();
    if let (Some(needed), Some(max_rate), Some(target_rate)) =
        (needed_concurrency, max_rate, hints.target_rate)
    {
        if exceeds(needed, max_concurrent) {
            warnings.push(Warning::TargetExceedsBudget {
                needed,
                max_concurrent,
                max_rate,
                target_rate,
            });
        }
    }
    if let (Some(max_queued), Some(service_time), Some(permit_timeout)) = (
        config.max_queued_limit(),
        service_time,
        config.permit_timeout_limit(),
    ) {
        // A queue so long that its drain time overflows a Duration certainly cannot drain in time.
        let drain_time = Duration::try_from_secs_f64(
            service_time.as_secs_f64() * max_queued as f64 / max_concurrent as f64,
        )
        .unwrap_or(Duration::MAX);
        if max_queued > 0 && drain_time > permit_timeout {
            warnings.push(Warning::QueueCannotDrain {
                max_queued,
                drain_time,
                permit_timeout,
            });
        }
    }
    if let (Some(call_timeout), Some(service_time)) = (config.call_timeout_limit(), service_time) {
        if call_timeout < service_time {
            warnings.push(Warning::CallTimeoutBelowServiceTime {
                call_timeout,
                service_time,
            });
        }
    }
    for (field, timeout) in [
        ("call_timeout", config.call_timeout_limit()),
        ("permit_timeout", config.permit_timeout_limit()),
    ] {
        if let Some(timeout) = timeout.filter(|t| *t < Duration::from_millis(1)) {
            warnings.push(Warning::TimeoutUnderAMillisecond { field, timeout });
        }
    }
    if let (Some(0), Some(permit_timeout)) =
        (config.max_queued_limit(), config.permit_timeout_limit())
    {
        warnings.push(Warning::PermitTimeoutWithoutQueue { permit_timeout });
    }
    let rate_in_flight = hints.rate_in_flight();
    if let (Some(needed), Some((rate, _)), Some(max_rate)) =
        (rate_in_flight, hints.rate_limit, max_rate)
    {
        if exceeds(needed, max_concurrent) {
            warnings.push(Warning::RateNeedsMoreThanBudget {
                needed,
                max_concurrent,
                rate,
                max_rate,
            });
        }
    }
    if let (Some(target_rate), Some((rate, _))) = (hints.target_rate, hints.rate_limit) {
        if target_rate.events_per_second() > rate.events_per_second() * (1.0 + 1e-9) {
            warnings.push(Warning::TargetAboveRateLimit { target_rate, rate });
        }
    }
    Assessment {
        max_rate,
        needed_concurrency,
        rate_in_flight,
        warnings,
    }
}

#[cfg(test)]
mod assess_tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_consistent_budget_has_no_warnings() {
        let c = BudgetConfig::new(6)
            .max_queued(6)
            .permit_timeout(ms(500))
            .call_timeout(ms(2000))
            .service_time(ms(150))
            .target_rate(Rate::per_second(40.0));
        let a = assess(&c);
        assert_eq!(a.max_rate, Some(Rate::per_second(40.0)));
        assert_eq!(a.needed_concurrency, Some(6.0));
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    }

    #[test]
    fn each_contradiction_is_flagged() {
        let c = BudgetConfig::new(2)
            .max_queued(10)
            .permit_timeout(ms(100))
            .call_timeout(ms(50))
            .service_time(ms(150))
            .target_rate(Rate::per_second(100.0));
        let a = assess(&c);
        assert_eq!(a.warnings.len(), 3, "{:?}", a.warnings);
        match &a.warnings[1] {
            Warning::QueueCannotDrain { drain_time, .. } => assert_eq!(*drain_time, ms(750)),
            w => panic!("{w:?}"),
        }
        assert!(
            a.warnings[1].to_string().contains("750ms"),
            "{}",
            a.warnings[1]
        );
        assert!(matches!(
            a.warnings[2],
            Warning::CallTimeoutBelowServiceTime { .. }
        ));
        let c = BudgetConfig::new(2).max_queued(0).permit_timeout(ms(100));
        assert!(matches!(
            assess(&c).warnings[..],
            [Warning::PermitTimeoutWithoutQueue { .. }]
        ));
    }

    #[test]
    fn a_timeout_under_a_millisecond_is_a_typo_warned_of() {
        let c = BudgetConfig::new(2)
            .call_timeout(Duration::from_nanos(1))
            .permit_timeout(Duration::from_micros(500));
        let said: Vec<String> = assess(&c).warnings.iter().map(|w| w.to_string()).collect();
        assert_eq!(
            said,
            [
                "call_timeout 1ns is under a millisecond: every call would time out (a unit typed wrong, \"1ns\" for \"1s\"?)",
                "permit_timeout 500us is under a millisecond: every caller that waits would be refused (a unit typed wrong, \"1ns\" for \"1s\"?)",
            ]
        );
        let fine = BudgetConfig::new(2)
            .call_timeout(ms(1))
            .permit_timeout(ms(1));
        assert!(assess(&fine).warnings.is_empty());
    }

    #[cfg(feature = "rate")]
    #[test]
    fn a_rate_limit_is_sized_next_to_the_concurrency() {
        // A rate of 100/s at 150 ms needs 15 in flight: within 32, beyond 6.
        let c = BudgetConfig::new(32)
            .rate(Rate::per_second(100.0))
            .service_time(ms(150));
        let a = assess(&c);
        assert_eq!(a.rate_in_flight, Some(15.0));
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        let c = BudgetConfig::new(6)
            .rate(Rate::per_second(100.0))
            .service_time(ms(150))
            .target_rate(Rate::per_second(120.0));
        let a = assess(&c);
        assert!(matches!(
            a.warnings[..],
            [
                Warning::TargetExceedsBudget { .. },
                Warning::RateNeedsMoreThanBudget { .. },
                Warning::TargetAboveRateLimit { .. }
            ]
        ));
        assert!(
            a.warnings[1].to_string().contains("at most 40/s"),
            "{}",
            a.warnings[1]
        );
    }

    #[test]
    fn the_verdicts_agree_with_the_warnings() {
        // 100/s x 70 ms is 7.000000000000001 in floating point: it fits within 7.
        let at_the_limit = BudgetConfig::new(7)
            .service_time(ms(70))
            .target_rate(Rate::per_second(100.0));
        let a = assess(&at_the_limit);
        assert!(a.needed_concurrency.unwrap() > 7.0);
        assert_eq!(a.target_exceeds_budget(), Some(false));
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        let above = at_the_limit.clone().target_rate(Rate::per_second(101.0));
        assert_eq!(assess(&above).target_exceeds_budget(), Some(true));
        let without_service_time = BudgetConfig::new(7).target_rate(Rate::per_second(100.0));
        assert_eq!(assess(&without_service_time).target_exceeds_budget(), None);
        assert_eq!(assess(&without_service_time).rate_exceeds_budget(), None);
    }

    #[cfg(feature = "rate")]
    #[test]
    fn the_rate_verdict_agrees_with_its_warning() {
        let c = BudgetConfig::new(7)
            .rate(Rate::per_second(100.0))
            .service_time(ms(70));
        let a = assess(&c);
        assert_eq!(a.rate_exceeds_budget(), Some(false));
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        let a = assess(&c.clone().rate(Rate::per_second(101.0)));
        assert_eq!(a.rate_exceeds_budget(), Some(true));
        assert!(matches!(
            a.warnings[..],
            [Warning::RateNeedsMoreThanBudget { .. }]
        ));
        assert_eq!(
            assess(&BudgetConfig::new(7).rate(Rate::per_second(1.0))).rate_exceeds_budget(),
            None
        );
    }

    #[test]
    fn without_hints_nothing_is_derived() {
        let a = assess(&BudgetConfig::new(3));
        assert_eq!(a.max_rate, None);
        assert_eq!(a.needed_concurrency, None);
        assert!(a.warnings.is_empty());
    }
}
