//! The bounds of a run: [`Caps`] (the total calls and time, shown before it starts),
//! [`MIN_CALLS_PER_CALLER`] (the fewest calls a level must allow each caller), and [`Stop`] (why
//! the climb ended before the last level).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::fmt_duration;

/// The fewest calls per caller a level's request bound must allow: the first call of each
/// caller warms up (connection, the target's first burst) and is not measured, so a level needs
/// a few more to measure a steady state.
pub const MIN_CALLS_PER_CALLER: u64 = 3;

/// What bounds a whole run, shown before it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caps {
    /// Calls sent in all, the first check call included.
    pub total_requests: u64,
    /// Wall time in all, in seconds.
    #[serde(with = "seconds")]
    pub total_time: Duration,
}

impl std::fmt::Display for Caps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "at most {} request{} and {}",
            self.total_requests,
            if self.total_requests == 1 { "" } else { "s" },
            fmt_duration(self.total_time)
        )
    }
}

mod seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

/// Why the climb ended before the last level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Stop {
    /// A level failed more calls than the threshold: the target is refusing load.
    Errors {
        concurrency: u32,
        error_rate: f64,
        errors: String,
    },
    /// Ctrl-C.
    Interrupted,
    /// The total request cap was reached.
    RequestCap,
    /// The total time cap was reached.
    TimeCap,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Errors {
                concurrency,
                error_rate,
                errors,
            } => write!(
                f,
                "stopped climbing at concurrency {concurrency}: {:.1}% of calls failed ({errors})",
                error_rate * 100.0
            ),
            Stop::Interrupted => {
                f.write_str("interrupted: the figures are from the levels measured so far")
            }
            Stop::RequestCap => f.write_str("stopped: the total request cap was reached"),
            Stop::TimeCap => f.write_str("stopped: the total time cap was reached"),
        }
    }
}
