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
    assert!(!service_time.is_zero(), "service_time must be greater than zero");
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
        if (v - v.round()).abs() < 1e-9 {
            write!(f, "{}/s", v.round())
        } else {
            write!(f, "{:.2}/s", v)
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
        assert_eq!(" 12.5 / s ".parse::<Rate>().unwrap(), Rate::per_second(12.5));
        for bad in ["40", "40/", "/s", "x/s", "-1/s", "40/fortnight", "inf/s", ""] {
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
        assert_eq!(max_rate(6, Duration::from_millis(150)), Rate::per_second(40.0));
        assert_eq!(in_flight_for(40.0, Duration::from_millis(150)), 6.0);
    }
}
