//! Preregistered hypotheses (`lab/hypotheses.toml`) and their evaluation against a run's summary.
//!
//! A hypothesis names a metric, a scenario, a statistic over the repeats (median, min or max), the
//! (strategy, cpus) cells it is about, and a test: a comparison with a threshold (a number or the
//! cell's CPU count) or an inclusive range, applied to the value itself or to its ratio to another
//! cell. Every cell must pass. Missing cells make the hypothesis `skipped`, never `fail`.
//!
//! A hypothesis that compares CPU counts ([`Hypothesis::needs_cpu_limit`]: its cells are at more
//! than one CPU count, or its threshold is the cell's CPU count) is `skipped` too when the run
//! enforced no CPU quota (`lab run --no-limit`): every cell then had all the host's CPUs.
//!
//! A [`Hypothesis`] and its parts are here; the file read and checked in `file`, the evaluation
//! in `evaluate`.

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;

mod evaluate;
mod file;

pub(crate) use self::evaluate::find_row;
pub use self::evaluate::{evaluate, evaluate_one};
pub use self::file::{builtin, load, parse};
pub use crate::numbers::fmt_num;
use crate::results::{ClassMetric, Metric, Spread, SummaryRow};

/// The hypotheses file the lab uses by default (relative to the working directory).
pub const DEFAULT_HYPOTHESES_PATH: &str = "lab/hypotheses.toml";

/// The hypotheses file shipped with the lab, compiled in for runs outside the repository.
pub const BUILTIN_HYPOTHESES: &str = include_str!("../lab/hypotheses.toml");

/// Equality tolerance: the metrics are counts and seconds, so this only absorbs float noise.
const EPSILON: f64 = 1e-9;

/// Why a hypotheses file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum HypothesisError {
    #[error("cannot read hypotheses file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid hypotheses file {origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("invalid hypotheses file {origin}: hypothesis `{id}`: {message}")]
    Invalid {
        origin: String,
        id: String,
        message: String,
    },
}

/// Which statistic over the repeats a hypothesis reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stat {
    #[default]
    Median,
    Min,
    Max,
}

impl Stat {
    fn of(self, spread: Spread) -> f64 {
        match self {
            Stat::Median => spread.median,
            Stat::Min => spread.min,
            Stat::Max => spread.max,
        }
    }
}

impl fmt::Display for Stat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stat::Median => "median",
            Stat::Min => "min",
            Stat::Max => "max",
        })
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Compare {
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = "==")]
    Eq,
    #[serde(rename = ">=")]
    Ge,
    #[serde(rename = ">")]
    Gt,
}

impl Compare {
    fn holds(self, value: f64, threshold: f64) -> bool {
        match self {
            Compare::Lt => value < threshold - EPSILON,
            Compare::Le => value <= threshold + EPSILON,
            Compare::Eq => (value - threshold).abs() <= EPSILON,
            Compare::Ge => value >= threshold - EPSILON,
            Compare::Gt => value > threshold + EPSILON,
        }
    }
}

impl fmt::Display for Compare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Compare::Lt => "<",
            Compare::Le => "<=",
            Compare::Eq => "==",
            Compare::Ge => ">=",
            Compare::Gt => ">",
        })
    }
}

/// What a value is compared with: a number, or the cell's own CPU count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    Value(f64),
    Cpus,
}

/// The test each cell must pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Test {
    Compare(Compare, Threshold),
    /// Inclusive range.
    Between(f64, f64),
}

/// The (strategy, cpus) cell of the summary a hypothesis divides each value by (`ratio_to`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    pub strategy: String,
    pub cpus: f64,
}

/// What a hypothesis reads from each summary row: a metric of the whole row, or a metric of
/// one priority class's records (`class = "interactive"` with a `class_` metric).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Measure {
    Summary(Metric),
    Class { class: String, metric: ClassMetric },
}

impl Measure {
    /// The spread in `row`; `None` when the row has no records of the class, or the class's
    /// percentile is undefined in some repeat (no record of it accepted).
    pub fn of(&self, row: &SummaryRow) -> Option<Spread> {
        match self {
            Measure::Summary(metric) => Some(row.get(*metric)),
            Measure::Class { class, metric } => row.classes.get(class)?.get(*metric),
        }
    }

    /// As [`Metric::to_full_time`].
    pub fn to_full_time(&self, time_scale: f64) -> f64 {
        match self {
            Measure::Summary(metric) => metric.to_full_time(time_scale),
            Measure::Class { metric, .. } => metric.to_full_time(time_scale),
        }
    }
}

impl fmt::Display for Measure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Measure::Summary(metric) => write!(f, "{metric}"),
            Measure::Class { class, metric } => write!(f, "{metric} of {class}"),
        }
    }
}

/// One preregistered hypothesis, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Hypothesis {
    pub id: String,
    pub claim: String,
    pub metric: Measure,
    pub scenario: String,
    pub stat: Stat,
    pub strategies: Vec<String>,
    pub cpus: Vec<f64>,
    /// The runner processes each run must have been split between (`lab run --replicas`).
    pub replicas: u32,
    /// If set, each cell's value is divided by this cell's value before the test.
    pub ratio_to: Option<Baseline>,
    /// If set, this cell's value is subtracted from each cell's value before the test (for
    /// counts that may be zero, where a ratio is undefined).
    pub minus: Option<Baseline>,
    pub test: Test,
}

impl Hypothesis {
    /// Whether the claim is about what a CPU quota does: its cells (with `ratio_to` or `minus`)
    /// are at more than one CPU count, or its threshold is the cell's CPU count. Such a claim
    /// means nothing in a run without a quota, and is skipped there.
    pub fn needs_cpu_limit(&self) -> bool {
        let mut counts: Vec<f64> = self.cpus.clone();
        counts.extend(self.ratio_to.iter().chain(&self.minus).map(|b| b.cpus));
        let first = counts[0];
        matches!(self.test, Test::Compare(_, Threshold::Cpus))
            || counts.iter().any(|c| (c - first).abs() > 1e-9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_hold_exactly_where_they_should() {
        assert!(Compare::Le.holds(6.0, 6.0));
        assert!(!Compare::Lt.holds(6.0, 6.0));
        assert!(Compare::Eq.holds(0.0, 0.0));
        assert!(!Compare::Gt.holds(0.0, 0.0));
        assert!(Compare::Gt.holds(1.0, 0.0));
        assert!(Compare::Ge.holds(1.8, 1.8));
        assert!(!Compare::Ge.holds(1.79, 1.8));
    }
}
