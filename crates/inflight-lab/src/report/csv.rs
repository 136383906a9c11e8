//! `runs.csv`: one line per run.
//!
//! `cpus` is the CPU quota the runner had; `unlimited` is `true` when none was enforced
//! (`lab run --no-limit`), and `cpus` is then only what the plan asked for.

use crate::results::{ResultsDoc, RunResult};

/// The columns of `runs.csv`, in order.
pub const CSV_COLUMNS: &[&str] = &[
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
];

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv_row(run: &RunResult) -> Vec<String> {
    let kinds = run
        .failed_by_kind
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";");
    vec![
        run.strategy.clone(),
        run.scenario.clone(),
        run.repeat.to_string(),
        run.cpus.to_string(),
        run.runner_available_parallelism.to_string(),
        run.records.to_string(),
        run.complete.to_string(),
        run.incomplete.to_string(),
        run.rejected.to_string(),
        run.failed.to_string(),
        kinds,
        format!("{:.4}", run.completion_s),
        format!("{:.4}", run.accepted_per_s),
        run.write_503s.to_string(),
        run.peak_writes_offered.to_string(),
        run.peak_enrichment_in_flight.to_string(),
        run.peak_writes_in_flight.to_string(),
        run.enrichment_timeouts.to_string(),
        run.unlimited.to_string(),
    ]
}

/// `runs.csv`: one line per run, columns [`CSV_COLUMNS`].
pub fn runs_csv(doc: &ResultsDoc) -> String {
    let mut out = CSV_COLUMNS.join(",") + "\n";
    for run in &doc.runs {
        let row: Vec<String> = csv_row(run).iter().map(|f| csv_field(f)).collect();
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        }
    }

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
    }
}
