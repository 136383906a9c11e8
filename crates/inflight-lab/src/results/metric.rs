//! What a summary metric is: its name, unit and label, how it is read from a run, and where the
//! reports show it ([`MetricDef`]); and `metrics!`, which turns the list in `registry.rs` into
//! [`Metric`], [`SummaryRow`] and their accessors.
//!
//! Each metric is defined once, in `registry.rs`. The rest of the lab reads that definition: the
//! summary takes the metric's value in every run and its median, min and max over the repeats
//! (a field of [`SummaryRow`] named after it); hypotheses (`lab/hypotheses.toml`) and reference
//! figures name it; the tables, `runs.csv`, the figures and the progress line show it where its
//! [`Shown`] says, written as its [`Unit`] says.

use std::fmt;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use super::{Metric, RunResult};

/// What a metric's numbers are: says how the time scale changes them and how reports write them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// How many: records, calls, answers, calls at once. The time scale does not change them.
    Count,
    /// Seconds: they shrink with the time scale.
    Seconds,
    /// Per second: they grow with the time scale.
    PerSecond,
    /// A share from 0 to 1, shown in tables as a percentage.
    Fraction,
}

impl Unit {
    /// What a value in this unit measured at `time_scale` is multiplied by to give it at time
    /// scale 1: seconds shrink and rates grow with the time scale, counts and shares do not
    /// change. A `time_scale` that is not above 0 (an old document without one) is taken as 1.
    pub fn to_full_time(self, time_scale: f64) -> f64 {
        if !(time_scale.is_finite() && time_scale > 0.0) {
            return 1.0;
        }
        match self {
            Unit::Seconds => 1.0 / time_scale,
            Unit::PerSecond => time_scale,
            Unit::Count | Unit::Fraction => 1.0,
        }
    }

    /// Whether the time scale changes values in this unit (seconds and rates).
    pub fn scales_with_time(self) -> bool {
        matches!(self, Unit::Seconds | Unit::PerSecond)
    }
}

/// One metric of the summary, as `registry.rs` defines it.
#[derive(Debug, Clone, Copy)]
pub struct MetricDef {
    /// Its name: the summary's JSON field, what hypotheses and reference figures call it, its
    /// column in `runs.csv` and its figure's file (`NAME.svg`).
    pub name: &'static str,
    pub unit: Unit,
    /// Its column header in tables (`completion s`, `incomplete %`).
    pub label: &'static str,
    /// Its value in one run. The summary takes the median, min and max over a cell's repeats.
    pub read: fn(&RunResult) -> f64,
    /// Where the reports show it besides `results.json` and hypotheses, which have every metric.
    pub shown: Shown,
}

/// Where the reports show a metric besides `results.json`; [`Shown::NOWHERE`] for nowhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shown {
    /// A column of the summary's tables in `summary.md` and `index.html`, in the registry's order.
    pub table: bool,
    /// A column of the terminal's summary table.
    pub terminal: Option<Terminal>,
    /// A column of `runs.csv` with its value in each run. The columns `runs.csv` had before
    /// metrics were defined here keep their places (`report/csv.rs`); the others follow them, in
    /// the registry's order, and `unlimited` stays last.
    pub csv: bool,
    /// Its label on the line a finished run gets on stderr: `complete 8` for a count,
    /// `1.50 s` or `5.33 accepted/s` for seconds and rates.
    pub progress: Option<&'static str>,
    /// A bar chart of its medians per cell, with min-max whiskers (`NAME.svg`).
    pub chart: Option<Chart>,
}

impl Shown {
    /// Only in `results.json` and hypotheses.
    pub const NOWHERE: Shown = Shown {
        table: false,
        terminal: None,
        csv: false,
        progress: None,
        chart: None,
    };
}

/// A metric's column in the terminal's summary table, at most 100 characters wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminal {
    /// Where the column goes: the metrics' columns are in increasing order of it, after the
    /// strategy, CPUs and repeats.
    pub order: u8,
    /// Columns are left out when the table is too wide, highest rank first; 0 is never left out.
    pub drop_rank: u8,
}

/// The words of a metric's bar chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chart {
    /// The figure's title on the page and in `summary.md`.
    pub title: &'static str,
    /// The title drawn in the SVG.
    pub heading: &'static str,
    /// The y axis's label.
    pub axis: &'static str,
    /// What the figure shows, under it; a note on the time scale follows for seconds and rates.
    pub caption: &'static str,
}

/// Builds, from the list of metrics in `registry.rs`, the [`Metric`] enum with
/// [`Metric::ALL`] and [`Metric::def`], and [`SummaryRow`] with a [`Spread`](super::Spread) field
/// per metric (in the list's order, which is the order of its JSON fields) and
/// [`SummaryRow::get`].
macro_rules! metrics {
    ($(
        $(#[doc = $doc:literal])+
        $variant:ident => $name:ident {
            unit: $unit:expr,
            label: $label:literal,
            read: $read:expr,
            shown: $shown:expr $(,)?
        }
    )+) => {
        /// A summary metric: a field of [`SummaryRow`], named as hypotheses, reference figures
        /// and charts name it (`completion_s`, `write_503s`, ...). [`Metric::def`] says what it
        /// is.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Metric {
            $($(#[doc = $doc])+ $variant,)+
        }

        impl Metric {
            /// Every metric, in the order of the [`SummaryRow`] fields.
            pub const ALL: [Metric; [$(stringify!($name)),+].len()] = [$(Metric::$variant),+];

            /// The metric's definition.
            pub const fn def(self) -> &'static $crate::results::MetricDef {
                match self {
                    $(Metric::$variant => {
                        const DEF: $crate::results::MetricDef = $crate::results::MetricDef {
                            name: stringify!($name),
                            unit: $unit,
                            label: $label,
                            read: $read,
                            shown: $shown,
                        };
                        &DEF
                    })+
                }
            }
        }

        /// The repeats of one (strategy, scenario, cpus) cell, summarised: the median, min and
        /// max over the repeats of each [`Metric`], in a field named after it.
        #[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq)]
        pub struct SummaryRow {
            pub strategy: String,
            pub scenario: String,
            /// As in [`RunResult::cpus`](crate::results::RunResult::cpus).
            pub cpus: f64,
            /// No CPU quota was enforced for these runs
            /// ([`RunResult::unlimited`](crate::results::RunResult::unlimited)). Written only
            /// when true.
            #[serde(default, skip_serializing_if = "crate::results::is_false")]
            pub unlimited: bool,
            pub repeats: u32,
            $(
                $(#[doc = $doc])+
                #[serde(default)]
                pub $name: $crate::results::Spread,
            )+
            /// The records of each priority class apart, by class name
            /// ([`RunResult::classes`](crate::results::RunResult::classes)).
            #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
            pub classes: std::collections::BTreeMap<String, $crate::results::ClassSummary>,
        }

        impl SummaryRow {
            /// The spread of `metric` in this row.
            pub fn get(&self, metric: Metric) -> $crate::results::Spread {
                match metric {
                    $(Metric::$variant => self.$name,)+
                }
            }

            /// The spread of `metric` in this row, to set.
            pub fn get_mut(&mut self, metric: Metric) -> &mut $crate::results::Spread {
                match metric {
                    $(Metric::$variant => &mut self.$name,)+
                }
            }
        }
    };
}

pub(crate) use metrics;

impl Metric {
    /// The name, e.g. `accepted_per_s`: the summary's field, and what hypotheses call it.
    pub const fn name(self) -> &'static str {
        self.def().name
    }

    /// The metric called `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == name)
    }

    /// What a value of this metric measured at `time_scale` is multiplied by to give it at time
    /// scale 1 ([`Unit::to_full_time`]).
    pub fn to_full_time(self, time_scale: f64) -> f64 {
        self.def().unit.to_full_time(time_scale)
    }

    /// The metric's value in `run`.
    pub fn read(self, run: &RunResult) -> f64 {
        (self.def().read)(run)
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Metric {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Metric {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Metric, D::Error> {
        const NAMES: [&str; Metric::ALL.len()] = {
            let mut names = [""; Metric::ALL.len()];
            let mut i = 0;
            while i < names.len() {
                names[i] = Metric::ALL[i].name();
                i += 1;
            }
            names
        };
        let name = String::deserialize(d)?;
        Metric::from_name(&name).ok_or_else(|| de::Error::unknown_variant(&name, &NAMES))
    }
}

/// `part` as a fraction of `whole`; 0 when `whole` is 0.
pub(crate) fn fraction(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::SummaryRow;

    #[test]
    fn metric_names_are_the_summary_fields_in_order() {
        let row = serde_json::to_value(SummaryRow::default()).unwrap();
        let fields: Vec<&str> = row
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        let names: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(
            fields[..5],
            ["strategy", "scenario", "cpus", "repeats", names[0]]
        );
        assert_eq!(fields[4..], names[..]);
        for metric in Metric::ALL {
            let json = serde_json::to_value(metric).unwrap();
            assert_eq!(json, metric.name());
            assert_eq!(serde_json::from_value::<Metric>(json).unwrap(), metric);
            assert_eq!(Metric::from_name(metric.name()), Some(metric));
        }
        assert_eq!(Metric::from_name("nope"), None);
        let err = serde_json::from_value::<Metric>("nope".into()).unwrap_err();
        assert!(err.to_string().contains("unknown variant `nope`"), "{err}");
    }

    /// Hypotheses files, reference figures and scripts name these: a name once used is kept, in
    /// its place.
    #[test]
    fn the_names_in_use_are_kept() {
        let names: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(
            names[..16],
            [
                "completion_s",
                "accepted_per_s",
                "complete",
                "incomplete",
                "rejected",
                "failed",
                "write_503s",
                "peak_writes_offered",
                "peak_enrichment_in_flight",
                "incomplete_fraction",
                "write_503_fraction",
                "enrichment_429s",
                "complete_fraction",
                "enrichment_429_fraction",
                "enrichment_retries",
                "write_retries",
            ]
        );
    }

    #[test]
    fn each_metric_has_its_own_label_and_terminal_place() {
        let mut labels: Vec<&str> = Metric::ALL.iter().map(|m| m.def().label).collect();
        let mut orders: Vec<u8> = Metric::ALL
            .iter()
            .filter_map(|m| m.def().shown.terminal.map(|t| t.order))
            .collect();
        let (label_count, order_count) = (labels.len(), orders.len());
        labels.sort_unstable();
        labels.dedup();
        orders.sort_unstable();
        orders.dedup();
        assert_eq!((labels.len(), orders.len()), (label_count, order_count));
    }

    #[test]
    fn seconds_shrink_and_rates_grow_with_the_time_scale() {
        assert_eq!(Metric::CompletionS.to_full_time(0.2), 5.0);
        assert_eq!(Metric::AcceptedPerS.to_full_time(0.2), 0.2);
        assert_eq!(Metric::Write503s.to_full_time(0.2), 1.0);
        assert_eq!(Metric::IncompleteFraction.to_full_time(0.2), 1.0);
        assert_eq!(Metric::CompletionS.to_full_time(0.0), 1.0, "unknown scale");
    }
}
