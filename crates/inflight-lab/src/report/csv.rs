//! `runs.csv`: one line per run.
//!
//! `cpus` is the CPU quota the runner had; `unlimited` is `true` when none was enforced
//! (`lab run --no-limit`), and `cpus` is then only what the plan asked for.
//!
//! Scripts read the file by position as well as by column name, so its columns keep their places:
//! the run's own fields and the metrics they were first written with, in `PLACED`; then every
//! other metric the registry shows in `runs.csv` ([`Shown::csv`](crate::results::Shown::csv)), in
//! the registry's order; and `unlimited`, last.

use crate::results::{Metric, ResultsDoc, RunResult, Unit};

/// A column of `runs.csv`.
#[derive(Clone, Copy)]
enum Column {
    /// A field of the run that is not a summary metric.
    Run(&'static str, fn(&RunResult) -> String),
    /// A metric's value in the run.
    Metric(Metric),
}

/// The columns in the places they had before metrics were defined in one place.
const PLACED: &[Column] = &[
    Column::Run("strategy", |r| r.strategy.clone()),
    Column::Run("scenario", |r| r.scenario.clone()),
    Column::Run("repeat", |r| r.repeat.to_string()),
    Column::Run("cpus", |r| r.cpus.to_string()),
    Column::Run("runner_available_parallelism", |r| {
        r.runner_available_parallelism.to_string()
    }),
    Column::Run("records", |r| r.records.to_string()),
    Column::Metric(Metric::Complete),
    Column::Metric(Metric::Incomplete),
    Column::Metric(Metric::Rejected),
    Column::Metric(Metric::Failed),
    Column::Run("failed_by_kind", failed_by_kind),
    Column::Metric(Metric::CompletionS),
    Column::Metric(Metric::AcceptedPerS),
    Column::Metric(Metric::Write503s),
    Column::Metric(Metric::PeakWritesOffered),
    Column::Metric(Metric::PeakEnrichmentInFlight),
    Column::Run("peak_writes_in_flight", |r| {
        r.peak_writes_in_flight.to_string()
    }),
    Column::Run("enrichment_timeouts", |r| r.enrichment_timeouts.to_string()),
];

/// The last column, after every metric.
const LAST: Column = Column::Run("unlimited", |r| r.unlimited.to_string());

/// Whether `metric` is a column between [`PLACED`] and [`LAST`].
const fn follows(metric: Metric) -> bool {
    if !metric.def().shown.csv {
        return false;
    }
    let mut i = 0;
    while i < PLACED.len() {
        if let Column::Metric(placed) = PLACED[i] {
            if placed as usize == metric as usize {
                return false;
            }
        }
        i += 1;
    }
    true
}

const fn column_count() -> usize {
    let mut n = PLACED.len() + 1;
    let mut i = 0;
    while i < Metric::ALL.len() {
        if follows(Metric::ALL[i]) {
            n += 1;
        }
        i += 1;
    }
    n
}

const COLUMN_NAMES: [&str; column_count()] = {
    let mut names = [""; column_count()];
    let mut n = 0;
    while n < PLACED.len() {
        names[n] = match PLACED[n] {
            Column::Run(name, _) => name,
            Column::Metric(metric) => metric.name(),
        };
        n += 1;
    }
    let mut i = 0;
    while i < Metric::ALL.len() {
        if follows(Metric::ALL[i]) {
            names[n] = Metric::ALL[i].name();
            n += 1;
        }
        i += 1;
    }
    if let Column::Run(name, _) = LAST {
        names[n] = name;
    }
    names
};

/// The columns of `runs.csv`, in order.
pub const CSV_COLUMNS: &[&str] = &COLUMN_NAMES;

/// Every column, in the order of [`CSV_COLUMNS`].
fn columns() -> impl Iterator<Item = Column> {
    let following = Metric::ALL.into_iter().filter(|m| follows(*m));
    PLACED
        .iter()
        .copied()
        .chain(following.map(Column::Metric))
        .chain([LAST])
}

fn failed_by_kind(run: &RunResult) -> String {
    run.failed_by_kind
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// A metric's value in a run as `runs.csv` writes it: counts whole, the others to 4 places.
fn metric_value(metric: Metric, run: &RunResult) -> String {
    let value = metric.read(run);
    match metric.def().unit {
        Unit::Count => value.to_string(),
        Unit::Seconds | Unit::PerSecond | Unit::Fraction => format!("{value:.4}"),
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// `runs.csv`: one line per run, columns [`CSV_COLUMNS`].
pub fn runs_csv(doc: &ResultsDoc) -> String {
    let mut out = CSV_COLUMNS.join(",") + "\n";
    for run in &doc.runs {
        let row: Vec<String> = columns()
            .map(|column| match column {
                Column::Run(_, value) => value(run),
                Column::Metric(metric) => metric_value(metric, run),
            })
            .map(|f| csv_field(&f))
            .collect();
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_columns_keep_their_places() {
        let placed = &CSV_COLUMNS[..PLACED.len()];
        assert_eq!(
            [placed, &["unlimited"]].concat(),
            [
                "strategy",
                "scenario",
                "repeat",
                "cpus",
                "runner_available_parallelism",
                "records",
                "complete",
                "incomplete",
                "rejected",
                "failed",
                "failed_by_kind",
                "completion_s",
                "accepted_per_s",
                "write_503s",
                "peak_writes_offered",
                "peak_enrichment_in_flight",
                "peak_writes_in_flight",
                "enrichment_timeouts",
                "unlimited",
            ]
        );
        assert_eq!(CSV_COLUMNS.last(), Some(&"unlimited"));
        for column in PLACED {
            if let Column::Metric(metric) = column {
                assert!(metric.def().shown.csv, "{metric} is placed in runs.csv");
            }
        }
        let metrics: Vec<&str> = Metric::ALL
            .into_iter()
            .filter(|m| m.def().shown.csv)
            .map(|m| m.name())
            .collect();
        for name in metrics {
            assert_eq!(CSV_COLUMNS.iter().filter(|c| **c == name).count(), 1);
        }
        assert_eq!(columns().count(), CSV_COLUMNS.len());
    }

    #[test]
    fn runs_without_a_cpu_limit_say_so() {
        use crate::results::{sample_run, RunMeta};
        let runs = vec![sample_run("c1", "healthy", 1.0, 1, 4.0)];
        let limited = RunMeta {
            enforcement: inflight_cpu::Enforcement::CgroupV2,
            ..RunMeta::default()
        };
        for (meta, last) in [(limited, "false"), (RunMeta::default(), "true")] {
            let csv = runs_csv(&ResultsDoc::from_runs(meta, runs.clone()));
            let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
            let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
            let at = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
            assert_eq!((at("cpus"), at("unlimited")), ("1", last), "{csv}");
            assert_eq!((at("complete"), at("completion_s")), ("6", "4.0000"));
        }
    }

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
    }
}
