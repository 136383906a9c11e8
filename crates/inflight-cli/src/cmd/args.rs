//! Parsers of flag values the subcommands share: [`duration_up_to`] for `--duration`,
//! `--delay`, `--timeout` and the like.

use std::time::Duration;

/// A clap value parser for a duration (`500ms`, `5s`, `1m`) above 0 and at most `max`; the
/// message for a bad value names the limit (`5h is longer than the 10m limit`).
pub(crate) fn duration_up_to(
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s: &str| parse_duration(s, max)
}

fn parse_duration(s: &str, max: Duration) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("{s:?} is not a duration (e.g. 500ms, 5s): {e}"))?;
    if d.is_zero() {
        return Err(format!("{s}: the duration must be greater than 0"));
    }
    if d > max {
        return Err(format!(
            "{s} is longer than the {} limit",
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_checked_against_their_limit() {
        let parse = duration_up_to(Duration::from_secs(10));
        assert_eq!(parse("20ms"), Ok(Duration::from_millis(20)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(
            parse("1m"),
            Err("1m is longer than the 10s limit".to_string())
        );
        assert_eq!(
            parse("0s"),
            Err("0s: the duration must be greater than 0".to_string())
        );
        assert!(parse("soon")
            .unwrap_err()
            .starts_with("\"soon\" is not a duration"));
        let parse = duration_up_to(Duration::from_secs(600));
        assert_eq!(
            parse("1h"),
            Err("1h is longer than the 10m limit".to_string())
        );
    }
}
