//! Little's law helpers: how many calls must be in flight for a rate, and the most a limit lets
//! through.
//!
//! Little's law relates three long-run averages: **items in flight = throughput x time per item**.
//! A dependency that takes 150 ms per call and may hold 6 calls at once can pass at most
//! 6 / 0.150 s = 40 calls per second; wanting 100 calls per second through it would need 15 in flight.
//!
//! ```
//! use std::time::Duration;
//! use inflight::sizing::{in_flight_for, max_rate};
//!
//! assert_eq!(max_rate(6, Duration::from_millis(150)).events_per_second(), 40.0);
//! assert_eq!(in_flight_for(100.0, Duration::from_millis(150)), 15.0);
//! // The seed's illustration: 0.39 s per record at 100 records/s needs about 39 in flight.
//! assert!((in_flight_for(100.0, Duration::from_millis(390)) - 39.0).abs() < 1e-9);
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Calls in flight needed to sustain `rate_per_s` when each takes `latency` (rate x latency).
pub fn in_flight_for(rate_per_s: f64, latency: Duration) -> f64 {
    rate_per_s * latency.as_secs_f64()
}

/// The most a budget of `capacity` calls at once can pass when each takes `service_time`
/// (capacity / service time).
///
/// # Panics
///
/// Panics if `service_time` is zero: a call that takes no time has no rate bound.
pub fn max_rate(capacity: usize, service_time: Duration) -> Rate {
    assert!(
        !service_time.is_zero(),
        "service_time must be greater than zero"
    );
    Rate::per_second(capacity as f64 / service_time.as_secs_f64())
}

/// A throughput: events per unit of time, stored as events per second.
///
/// Parsed from `"40/s"`, `"2400/min"` (also `/m`), `"10/ms"` or `"3600/h"`; printed per second.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Rate(f64);

impl Rate {
    /// `n` events per second.
    pub fn per_second(n: f64) -> Rate {
        Rate(n)
    }

    /// `n` events per minute.
    pub fn per_minute(n: f64) -> Rate {
        Rate(n / 60.0)
    }

    /// Events per second.
    pub fn events_per_second(self) -> f64 {
        self.0
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if !v.is_finite() || (v - v.round()).abs() < 1e-9 && v.abs() >= 1.0 {
            write!(f, "{}/s", v.round())
        } else if v.abs() >= 1.0 {
            write!(f, "{v:.2}/s")
        } else if v.abs() >= 1e-9 {
            // Two significant digits, so that a slow budget (1 call per 5 minutes) does not
            // show as "0/s".
            let decimals = (1 - v.abs().log10().floor() as i32).max(2) as usize;
            write!(f, "{v:.decimals$}/s")
        } else if v == 0.0 {
            f.write_str("0/s")
        } else {
            write!(f, "{v:.1e}/s")
        }
    }
}

/// Why a rate string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected a rate like \"40/s\", \"2400/min\" or \"10/ms\", got {0:?}")]
pub struct ParseRateError(String);

impl FromStr for Rate {
    type Err = ParseRateError;

    fn from_str(s: &str) -> Result<Rate, ParseRateError> {
        let err = || ParseRateError(s.to_string());
        let (count, unit) = s.trim().split_once('/').ok_or_else(err)?;
        let count: f64 = count.trim().parse().map_err(|_| err())?;
        if !count.is_finite() || count < 0.0 {
            return Err(err());
        }
        let seconds = match unit.trim() {
            "ms" => 0.001,
            "s" | "sec" | "second" => 1.0,
            "m" | "min" | "minute" => 60.0,
            "h" | "hour" => 3600.0,
            _ => return Err(err()),
        };
        Ok(Rate(count / seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates() {
        assert_eq!("40/s".parse::<Rate>().unwrap(), Rate::per_second(40.0));
        assert_eq!("2400/min".parse::<Rate>().unwrap(), Rate::per_second(40.0));
        assert_eq!("2400/m".parse::<Rate>().unwrap(), Rate::per_second(40.0));
        assert_eq!("1/ms".parse::<Rate>().unwrap(), Rate::per_second(1000.0));
        assert_eq!("7200/h".parse::<Rate>().unwrap(), Rate::per_second(2.0));
        assert_eq!(
            " 12.5 / s ".parse::<Rate>().unwrap(),
            Rate::per_second(12.5)
        );
        for bad in [
            "40",
            "40/",
            "/s",
            "x/s",
            "-1/s",
            "40/fortnight",
            "inf/s",
            "",
        ] {
            assert!(bad.parse::<Rate>().is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn displays_per_second() {
        assert_eq!(Rate::per_second(40.0).to_string(), "40/s");
        assert_eq!(Rate::per_minute(100.0).to_string(), "1.67/s");
    }

    #[test]
    fn littles_law() {
        assert_eq!(
            max_rate(6, Duration::from_millis(150)),
            Rate::per_second(40.0)
        );
        assert_eq!(in_flight_for(40.0, Duration::from_millis(150)), 6.0);
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
    /// Settings that no single-field check catches but that cannot all hold.
    pub warnings: Vec<Warning>,
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
pub fn assess(config: &crate::BudgetConfig) -> Assessment {
    let max_concurrent = config.max_concurrent();
    let service_time = config.service_time_hint();
    let max_rate = config.max_rate();
    let needed_concurrency = config.needed_concurrency();
    let mut warnings = Vec::new();
    if let (Some(needed), Some(max_rate), Some(target_rate)) =
        (needed_concurrency, max_rate, config.target_rate_hint())
    {
        if needed > max_concurrent as f64 + 1e-9 {
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
    if let (Some(0), Some(permit_timeout)) =
        (config.max_queued_limit(), config.permit_timeout_limit())
    {
        warnings.push(Warning::PermitTimeoutWithoutQueue { permit_timeout });
    }
    Assessment {
        max_rate,
        needed_concurrency,
        warnings,
    }
}

#[cfg(test)]
mod assess_tests {
    use super::*;
    use crate::BudgetConfig;

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
    fn without_hints_nothing_is_derived() {
        let a = assess(&BudgetConfig::new(3));
        assert_eq!(a.max_rate, None);
        assert_eq!(a.needed_concurrency, None);
        assert!(a.warnings.is_empty());
    }
}
