//! [`Rate`]: a throughput, events per unit of time, as budgets files, rate limits and sizing use
//! it; and the rate gate behind a budget's `rate` (feature `rate`).

#[cfg(feature = "rate")]
pub(crate) mod gcra;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

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

    /// The time between two events at this rate (`1 / rate`); `None` for a rate that is not
    /// positive and finite.
    pub fn interval(self) -> Option<Duration> {
        if self.0 > 0.0 && self.0.is_finite() {
            Duration::try_from_secs_f64(1.0 / self.0).ok()
        } else {
            None
        }
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
}
