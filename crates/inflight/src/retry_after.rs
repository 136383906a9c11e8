//! [`RetryAfter`]: when a dependency that refused a call says to come back, parsed from an HTTP
//! `Retry-After` header (RFC 9110 section 10.2.3) or the `retry-after-ms` extension.
//!
//! `Retry-After` is either delay-seconds (`120`) or an HTTP-date (`Fri, 31 Dec 1999 23:59:59
//! GMT`, and the obsolete RFC 850 and asctime forms a recipient must accept). `retry-after-ms`
//! is milliseconds, possibly with a fraction, as several LLM providers send it beside a
//! `Retry-After` in whole seconds. Every delay is capped at [`RetryAfter::MAX`]: one answer of a
//! misbehaving dependency must not stall a budget for a day.

use std::fmt;
use std::time::{Duration, SystemTime};

/// A dependency's word on when to try again: a delay, or a moment.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use inflight::RetryAfter;
///
/// assert_eq!(RetryAfter::parse("120").unwrap(), RetryAfter::Delay(Duration::from_secs(120)));
/// assert_eq!(RetryAfter::parse_ms("1500").unwrap().delay(), Duration::from_millis(1500));
///
/// let date = RetryAfter::parse("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_767); // 10 s before it
/// assert_eq!(date.delay_from(now), Duration::from_secs(10));
///
/// let err = RetryAfter::parse("soon").unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "Retry-After \"soon\": expected delay-seconds (such as 120) or an HTTP-date"
/// );
/// // Absurd values are capped.
/// assert_eq!(RetryAfter::parse("99999999999999999999999").unwrap().delay(), RetryAfter::MAX);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    /// Come back after this long (delay-seconds, or `retry-after-ms`); at most [`RetryAfter::MAX`].
    Delay(Duration),
    /// Come back at this moment (an HTTP-date).
    At(SystemTime),
}

/// The longest a value in a header can be and still be read: an HTTP-date is 29 bytes.
const MAX_LEN: usize = 64;

impl RetryAfter {
    /// The longest delay taken from a dependency: 10 minutes. Longer ones are cut to it.
    pub const MAX: Duration = Duration::from_secs(600);

    /// The header names read: `Retry-After` and `retry-after-ms`, lowercase as in HTTP/2.
    pub const HEADER: &'static str = "retry-after";
    /// The millisecond extension's header name.
    pub const HEADER_MS: &'static str = "retry-after-ms";

    /// Parses a `Retry-After` value: delay-seconds or an HTTP-date (surrounding spaces allowed).
    ///
    /// # Errors
    ///
    /// [`ParseRetryAfterError`] for anything else (a negative or fractional number, a date in no
    /// HTTP form, an empty or overlong value), naming the value.
    pub fn parse(value: &str) -> Result<RetryAfter, ParseRetryAfterError> {
        let v = checked(value, Expected::SecondsOrDate)?;
        if v.bytes().all(|b| b.is_ascii_digit()) {
            // All digits but too many for a u64 is a valid, absurd delay: capped.
            let secs = v.parse::<u64>().unwrap_or(u64::MAX);
            return Ok(RetryAfter::Delay(
                Duration::from_secs(secs).min(RetryAfter::MAX),
            ));
        }
        httpdate::parse_http_date(v)
            .map(RetryAfter::At)
            .map_err(|_| ParseRetryAfterError::new(value, Expected::SecondsOrDate))
    }

    /// Parses a `retry-after-ms` value: milliseconds, a fraction allowed (`20`, `1500.5`).
    ///
    /// # Errors
    ///
    /// [`ParseRetryAfterError`] for a value that is not a non-negative decimal number.
    pub fn parse_ms(value: &str) -> Result<RetryAfter, ParseRetryAfterError> {
        let v = checked(value, Expected::Millis)?;
        let decimal = v.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && v.bytes().filter(|b| *b == b'.').count() <= 1
            && v.bytes().any(|b| b.is_ascii_digit());
        let ms: f64 = match v.parse() {
            Ok(ms) if decimal => ms,
            _ => return Err(ParseRetryAfterError::new(value, Expected::Millis)),
        };
        let capped = (ms / 1e3).min(RetryAfter::MAX.as_secs_f64());
        Ok(RetryAfter::Delay(Duration::from_secs_f64(capped)))
    }

    /// How long from `now` to come back: the delay, or the time until the date (zero for a date
    /// already past); at most [`RetryAfter::MAX`].
    pub fn delay_from(self, now: SystemTime) -> Duration {
        let d = match self {
            RetryAfter::Delay(d) => d,
            RetryAfter::At(at) => at.duration_since(now).unwrap_or(Duration::ZERO),
        };
        d.min(RetryAfter::MAX)
    }

    /// How long from now to come back (see [`RetryAfter::delay_from`]); a date is compared with
    /// the system clock.
    pub fn delay(self) -> Duration {
        self.delay_from(SystemTime::now())
    }

    /// The delay a response's headers ask for: `retry-after-ms` if present (it is the finer),
    /// else `Retry-After`; `Ok(None)` when neither is there.
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::RetryAfter;
    ///
    /// let mut headers = http::HeaderMap::new();
    /// headers.insert("retry-after", "2".parse().unwrap());
    /// assert_eq!(RetryAfter::from_headers(&headers), Ok(Some(Duration::from_secs(2))));
    /// headers.insert("retry-after-ms", "250".parse().unwrap());
    /// assert_eq!(RetryAfter::from_headers(&headers), Ok(Some(Duration::from_millis(250))));
    /// ```
    ///
    /// # Errors
    ///
    /// [`ParseRetryAfterError`] when the header present is malformed (or not text).
    #[cfg(feature = "http")]
    pub fn from_headers(
        headers: &http::HeaderMap,
    ) -> Result<Option<Duration>, ParseRetryAfterError> {
        fn text(v: &http::HeaderValue, expected: Expected) -> Result<&str, ParseRetryAfterError> {
            v.to_str()
                .map_err(|_| ParseRetryAfterError::new("(not text)", expected))
        }
        if let Some(v) = headers.get(RetryAfter::HEADER_MS) {
            return RetryAfter::parse_ms(text(v, Expected::Millis)?).map(|r| Some(r.delay()));
        }
        match headers.get(RetryAfter::HEADER) {
            Some(v) => {
                RetryAfter::parse(text(v, Expected::SecondsOrDate)?).map(|r| Some(r.delay()))
            }
            None => Ok(None),
        }
    }
}

/// Trims `value` and refuses it if empty or too long to be a header value of its kind.
fn checked(value: &str, expected: Expected) -> Result<&str, ParseRetryAfterError> {
    let v = value.trim_matches([' ', '\t']);
    if v.is_empty() || v.len() > MAX_LEN {
        return Err(ParseRetryAfterError::new(value, expected));
    }
    Ok(v)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expected {
    SecondsOrDate,
    Millis,
}

/// Why a `Retry-After` or `retry-after-ms` value could not be read; names the value (its first
/// 64 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseRetryAfterError {
    value: String,
    expected: Expected,
}

impl ParseRetryAfterError {
    fn new(value: &str, expected: Expected) -> ParseRetryAfterError {
        let mut end = value.len().min(MAX_LEN);
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        let mut shown = value[..end].to_string();
        if end < value.len() {
            shown.push_str("...");
        }
        ParseRetryAfterError {
            value: shown,
            expected,
        }
    }
}

impl fmt::Display for ParseRetryAfterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.expected {
            Expected::SecondsOrDate => write!(
                f,
                "Retry-After {:?}: expected delay-seconds (such as 120) or an HTTP-date",
                self.value
            ),
            Expected::Millis => write!(
                f,
                "retry-after-ms {:?}: expected milliseconds (such as 1500)",
                self.value
            ),
        }
    }
}

impl std::error::Error for ParseRetryAfterError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn delay_seconds() {
        assert_eq!(RetryAfter::parse("0").unwrap(), RetryAfter::Delay(secs(0)));
        assert_eq!(
            RetryAfter::parse(" 120 ").unwrap(),
            RetryAfter::Delay(secs(120))
        );
        assert_eq!(RetryAfter::parse("600").unwrap().delay(), secs(600));
        assert_eq!(RetryAfter::parse("601").unwrap().delay(), RetryAfter::MAX);
        assert_eq!(
            RetryAfter::parse(&"9".repeat(40)).unwrap().delay(),
            RetryAfter::MAX
        );
    }

    #[test]
    fn http_dates_in_all_three_forms() {
        let at = SystemTime::UNIX_EPOCH + secs(784_111_777);
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(
                RetryAfter::parse(form).unwrap(),
                RetryAfter::At(at),
                "{form}"
            );
        }
        let before = at - secs(30);
        assert_eq!(
            RetryAfter::parse("Sun, 06 Nov 1994 08:49:37 GMT")
                .unwrap()
                .delay_from(before),
            secs(30)
        );
        // Past dates mean now; far ones are capped.
        assert_eq!(RetryAfter::At(at).delay_from(at + secs(5)), Duration::ZERO);
        assert_eq!(
            RetryAfter::At(at).delay_from(at - secs(86_400)),
            RetryAfter::MAX
        );
    }

    #[test]
    fn milliseconds() {
        assert_eq!(
            RetryAfter::parse_ms("20").unwrap().delay(),
            Duration::from_millis(20)
        );
        assert_eq!(
            RetryAfter::parse_ms("1500.5").unwrap().delay(),
            Duration::from_micros(1_500_500)
        );
        assert_eq!(
            RetryAfter::parse_ms("1e99").unwrap_err().to_string(),
            "retry-after-ms \"1e99\": expected milliseconds (such as 1500)"
        );
        assert_eq!(
            RetryAfter::parse_ms(&"9".repeat(60)).unwrap().delay(),
            RetryAfter::MAX
        );
        for bad in ["", "-5", "1.2.3", ".", "NaN", "inf", "5ms"] {
            assert!(RetryAfter::parse_ms(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn garbage_is_refused_with_a_bounded_message() {
        for bad in [
            "",
            "  ",
            "-1",
            "1.5",
            "soon",
            "Sun, 06 Nov 1994",
            "120s",
            "0x10",
        ] {
            let err = RetryAfter::parse(bad).unwrap_err();
            assert!(err.to_string().starts_with("Retry-After "), "{err}");
        }
        let long = "x".repeat(10_000);
        let err = RetryAfter::parse(&long).unwrap_err().to_string();
        assert!(err.len() < 200, "{}", err.len());
        assert!(err.contains("..."), "{err}");
        // A multi-byte character at the cut is not split.
        let wide = "é".repeat(100);
        assert!(RetryAfter::parse(&wide).unwrap_err().to_string().len() < 200);
    }
}
