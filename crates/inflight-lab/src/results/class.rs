//! Each priority class's records summarised over a cell's repeats ([`ClassSummary`]), and the
//! metrics a hypothesis with `class = "NAME"` reads of them ([`ClassMetric`]).

use serde::{Deserialize, Serialize};

use super::{Spread, Unit};

/// The repeats of one priority class in one cell, summarised.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClassSummary {
    pub records: Spread,
    pub accepted: Spread,
    /// Accepted records as a fraction of the class's records.
    pub accepted_fraction: Spread,
    /// `null` when some repeat accepted no record of the class (its percentiles are undefined).
    pub completion_p50_s: Option<Spread>,
    pub completion_p99_s: Option<Spread>,
}

impl ClassSummary {
    /// The spread of `metric`, `None` when it is undefined in some repeat.
    pub fn get(&self, metric: ClassMetric) -> Option<Spread> {
        match metric {
            ClassMetric::Records => Some(self.records),
            ClassMetric::Accepted => Some(self.accepted),
            ClassMetric::AcceptedFraction => Some(self.accepted_fraction),
            ClassMetric::CompletionP50S => self.completion_p50_s,
            ClassMetric::CompletionP99S => self.completion_p99_s,
        }
    }
}

/// A metric of one priority class's records (a [`ClassSummary`] field), as a hypothesis with
/// `class = "NAME"` names it: `class_` and the field's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClassMetric {
    Records,
    Accepted,
    AcceptedFraction,
    CompletionP50S,
    CompletionP99S,
}

impl ClassMetric {
    /// Every class metric, in the order of the [`ClassSummary`] fields.
    pub const ALL: [ClassMetric; 5] = [
        ClassMetric::Records,
        ClassMetric::Accepted,
        ClassMetric::AcceptedFraction,
        ClassMetric::CompletionP50S,
        ClassMetric::CompletionP99S,
    ];

    /// The name a hypothesis gives it, e.g. `class_completion_p99_s`.
    pub fn name(self) -> &'static str {
        match self {
            ClassMetric::Records => "class_records",
            ClassMetric::Accepted => "class_accepted",
            ClassMetric::AcceptedFraction => "class_accepted_fraction",
            ClassMetric::CompletionP50S => "class_completion_p50_s",
            ClassMetric::CompletionP99S => "class_completion_p99_s",
        }
    }

    /// The [`ClassSummary`] field it reads.
    pub fn field(self) -> &'static str {
        &self.name()["class_".len()..]
    }

    /// The class metric called `name`, if there is one.
    pub fn from_name(name: &str) -> Option<ClassMetric> {
        ClassMetric::ALL.into_iter().find(|m| m.name() == name)
    }

    /// As [`Metric::to_full_time`](super::Metric::to_full_time): seconds shrink with the time
    /// scale, counts do not change.
    pub fn to_full_time(self, time_scale: f64) -> f64 {
        match self {
            ClassMetric::CompletionP50S | ClassMetric::CompletionP99S => {
                Unit::Seconds.to_full_time(time_scale)
            }
            _ => 1.0,
        }
    }
}

impl std::fmt::Display for ClassMetric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Metric;

    #[test]
    fn class_metric_names_are_the_class_summary_fields() {
        let summary = serde_json::to_value(ClassSummary::default()).unwrap();
        for metric in ClassMetric::ALL {
            assert!(summary.get(metric.field()).is_some(), "{metric}");
            assert_eq!(ClassMetric::from_name(metric.name()), Some(metric));
            assert!(Metric::from_name(metric.name()).is_none(), "{metric}");
        }
        assert_eq!(ClassMetric::from_name("completion_p99_s"), None);
        assert_eq!(ClassMetric::CompletionP99S.to_full_time(0.2), 5.0);
        assert_eq!(ClassMetric::AcceptedFraction.to_full_time(0.2), 1.0);
    }
}
