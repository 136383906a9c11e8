//! The value helpers every reader of a budgets file shares, so that its messages read alike:
//! whole numbers, durations and rates checked with the field's path, and values shown back
//! short. A leaf: it uses no other module of `config`.
//!
//! A crate that reads keys of its own in a budgets file (see [`Keys`](super::Keys)) takes its
//! values through these, and the TOML types from here, so that both sides agree on them.

use std::time::Duration;

pub use toml::{Table, Value};

use super::error::{capped, ConfigError, MAX_ECHOED_LINE};
use crate::rate::{ParseRateError, Rate};

/// A whole number of at least `min` at `field`.
///
/// ```
/// use inflight::config::value::{integer, Value};
///
/// assert_eq!(integer("budgets.r.max_queued", &Value::Integer(6), 0).unwrap(), 6);
/// let e = integer("budgets.r.max_queued", &Value::Integer(-1), 0).unwrap_err();
/// assert_eq!(e.to_string(), "budgets.r.max_queued: must not be negative, got -1");
/// ```
pub fn integer(field: &str, value: &Value, min: i64) -> Result<usize, ConfigError> {
    let n = value.as_integer().ok_or_else(|| {
        ConfigError::invalid(
            field,
            format!("must be a whole number, got {}", shown(value)),
        )
    })?;
    if n < min {
        let message = if min == 0 {
            format!("must not be negative, got {n}")
        } else {
            format!("must be at least {min}, got {n}")
        };
        return Err(ConfigError::invalid(field, message));
    }
    usize::try_from(n).map_err(|_| ConfigError::invalid(field, format!("is too large: {n}")))
}

/// A duration greater than zero at `field`, written like `"500ms"` or `"2s"`.
///
/// ```
/// use std::time::Duration;
/// use inflight::config::value::{duration, Value};
///
/// let d = duration("proxy.drain", &Value::String("10s".into())).unwrap();
/// assert_eq!(d, Duration::from_secs(10));
/// let e = duration("proxy.drain", &Value::Integer(10)).unwrap_err();
/// assert_eq!(e.to_string(), "proxy.drain: must be a duration string like \"500ms\" or \"2s\", got integer 10");
/// ```
pub fn duration(field: &str, value: &Value) -> Result<Duration, ConfigError> {
    let text = value.as_str().ok_or_else(|| {
        ConfigError::invalid(
            field,
            format!(
                "must be a duration string like \"500ms\" or \"2s\", got {}",
                shown(value)
            ),
        )
    })?;
    if text.trim_start().starts_with('-') {
        return Err(ConfigError::invalid(
            field,
            format!("must not be negative, got {text:?}"),
        ));
    }
    let shown_text = short(text);
    let number_end = text
        .trim_start()
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '+'))
        .unwrap_or(text.trim_start().len());
    let number = &text.trim_start()[..number_end];
    if number.contains(['e', 'E']) && number.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(ConfigError::invalid(
            field,
            format!(
                "write the number without an exponent, like \"500ms\" or \"2s\", got {shown_text}"
            ),
        ));
    }
    let d = humantime::parse_duration(text).map_err(|e| {
        // A fraction too fine for nanoseconds reads as "too large" to humantime.
        let below_a_nanosecond = number.parse::<f64>().is_ok_and(|n| n > 0.0 && n < 1.0)
            && matches!(e, humantime::DurationError::NumberOverflow);
        let why = if below_a_nanosecond {
            "must be at least 1ns".to_string()
        } else {
            format!("cannot parse {shown_text} as a duration like \"500ms\" or \"2s\": {e}")
        };
        ConfigError::invalid(field, why)
    })?;
    if d.is_zero() {
        return Err(ConfigError::invalid(
            field,
            format!("must be greater than zero, got {text:?}"),
        ));
    }
    Ok(d)
}

/// A rate greater than zero at `field`, written like `"40/s"`.
pub(crate) fn rate(field: &str, value: &Value) -> Result<Rate, ConfigError> {
    let text = value.as_str().ok_or_else(|| {
        ConfigError::invalid(
            field,
            format!("must be a rate string like \"40/s\", got {}", shown(value)),
        )
    })?;
    if text.trim_start().starts_with('-') {
        return Err(ConfigError::invalid(
            field,
            format!("must not be negative, got {text:?}"),
        ));
    }
    let rate: Rate = text
        .parse()
        .map_err(|e: ParseRateError| ConfigError::invalid(field, e.to_string()))?;
    if rate.events_per_second() == 0.0 {
        return Err(ConfigError::invalid(
            field,
            format!("must be greater than zero, got {text:?}"),
        ));
    }
    Ok(rate)
}

/// `text` quoted for a message, cut to 200 characters (a value of 5 MB must not fill a terminal).
pub fn short(text: &str) -> String {
    if text.chars().count() > MAX_ECHOED_LINE {
        let cut: String = text.chars().take(MAX_ECHOED_LINE).collect();
        format!("{cut:?}... ({} characters in all)", text.chars().count())
    } else {
        format!("{text:?}")
    }
}

/// A value of the wrong type, for a message: its type and its text as written (`integer 500`,
/// `datetime 1979-05-27`; toml would show a datetime as its internal table), cut to 200
/// characters ([`capped`]).
pub fn shown(value: &Value) -> String {
    capped(&match value {
        Value::Datetime(d) => format!("datetime {d}"),
        other => format!("{} {other}", other.type_str()),
    })
}
