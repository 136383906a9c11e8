//! The results document a lab run produces (`results.json`) and the types in it.
//!
//! Durations are in seconds (`*_s`) or milliseconds (`*_ms`) as the field name says.
//!
//! The summary is computed from the runs ([`ResultsDoc::from_runs`]), never taken as given, and
//! [`ResultsDoc::problems`] lists what makes a stored document's runs inconsistent.
//!
//! The document and its checks are here; a run in `run`, the settings and plan in `meta`, the
//! metrics of the summary in `registry` (each defined once; what a definition holds in `metric`),
//! the summary computed in [`summary`], and the classes' summary in `class`.

use std::collections::BTreeMap;

use inflight_cpu::Enforcement;
use serde::{Deserialize, Serialize};

use crate::numbers::fmt_num;

mod class;
mod meta;
mod metric;
mod registry;
mod run;
pub mod summary;

pub use self::class::{ClassMetric, ClassSummary};
pub use self::meta::{RunMeta, RunPlan};
pub use self::metric::{Chart, MetricDef, Shown, Terminal, Unit};
pub use self::registry::{Metric, SummaryRow};
pub(crate) use self::run::unix_now_s;
pub use self::run::{ClassResult, RunResult, Timeline};
pub use self::summary::summarize;
/// Median, min and max of one metric over the repeats (the benchmarks' type, one definition).
pub use inflight_bench::spread::Spread;

/// Everything one `inflight lab run` measured: written to `results.json`, read by the report.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ResultsDoc {
    /// What was run: the command's settings, the machine, the time.
    pub meta: RunMeta,
    /// One entry per (strategy, scenario, cpus, repeat).
    pub runs: Vec<RunResult>,
    /// Median, min and max per (strategy, scenario, cpus).
    pub summary: Vec<SummaryRow>,
    /// Each preregistered hypothesis, evaluated against the medians.
    pub hypotheses: Vec<HypothesisResult>,
    /// The budgets measured before the runs (strategies with `{ measure = "capacity" }`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measured: Vec<MeasuredBudget>,
}

/// A budget the lab measured before the runs: a capacity sweep of one dependency against the
/// sim in one scenario (as `inflight capacity` does), and the size the runs then used.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MeasuredBudget {
    pub scenario: String,
    /// `records` or `enrichment`.
    pub dependency: String,
    /// The budget in the scenario's runs: the capacity at the knee, or (with no knee) the
    /// highest level swept.
    pub max_concurrent: usize,
    /// What `max_concurrent` rests on: `knee` or `lower_bound`.
    pub basis: String,
    /// The knee, if there was one.
    pub capacity: Option<u32>,
    /// Median latency at the lowest level, in milliseconds, at the sweep's time scale.
    pub service_time_ms: Option<f64>,
    /// The highest throughput of a clean level, calls per second.
    pub max_rate_per_s: Option<f64>,
    /// The sweep's verdict in one sentence.
    pub conclusion: String,
    /// Each level swept.
    pub levels: Vec<inflight_capacity::Level>,
    /// The time scale the sim ran the sweep at: the runs' or, if lower,
    /// [`MIN_SWEEP_TIME_SCALE`](crate::run::MIN_SWEEP_TIME_SCALE).
    pub sweep_time_scale: f64,
    /// Wall time of the sweep, in seconds.
    pub sweep_s: f64,
}

impl ResultsDoc {
    /// The document of `runs`: each run labelled [`RunResult::unlimited`] when `meta` says no CPU
    /// quota was enforced, and the summary computed from them. Hypotheses are evaluated
    /// afterwards ([`crate::hypothesis::evaluate`]).
    pub fn from_runs(meta: RunMeta, mut runs: Vec<RunResult>) -> ResultsDoc {
        let unlimited = meta.enforcement == Enforcement::None;
        for run in &mut runs {
            run.unlimited = unlimited;
        }
        let summary = summarize(&runs);
        ResultsDoc {
            meta,
            runs,
            summary,
            hypotheses: Vec::new(),
            measured: Vec::new(),
        }
    }

    /// The document with the budgets measured before its runs.
    pub fn with_measured(mut self, measured: Vec<MeasuredBudget>) -> ResultsDoc {
        self.measured = measured;
        self
    }

    /// What makes this document's runs inconsistent with each other or with its settings, one
    /// sentence each; empty when there is nothing wrong. Checks that each run's outcomes add up
    /// to its records, that its records and repeat match the settings, that no run appears twice
    /// and that every cell has one run per repeat (unless the document is partial).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let meta = &self.meta;
        let mut per_cell: BTreeMap<(&str, &str, u64), Vec<u32>> = BTreeMap::new();
        let mut cells = Vec::new();
        for run in &self.runs {
            let name = format!(
                "{} {} at {}",
                run.strategy,
                run.scenario,
                cpus_words(run.cpus, !run.unlimited)
            );
            if let Err(e) = check_outcomes(run) {
                problems.push(e);
            }
            if !(run.cpus.is_finite() && run.cpus > 0.0) {
                problems.push(format!("{name}: cpus must be above 0"));
            }
            if meta.records != 0 && run.records != meta.records {
                problems.push(format!(
                    "{name} repeat {}: {} records, the settings say {}",
                    run.repeat, run.records, meta.records
                ));
            }
            if run.repeat == 0 || run.repeat > meta.repeats {
                problems.push(format!(
                    "{name}: repeat {} is outside the settings' 1..={}",
                    run.repeat, meta.repeats
                ));
            }
            let key = (
                run.strategy.as_str(),
                run.scenario.as_str(),
                run.cpus.to_bits(),
            );
            let repeats = per_cell.entry(key).or_insert_with(|| {
                cells.push((key, name.clone()));
                Vec::new()
            });
            if repeats.contains(&run.repeat) {
                problems.push(format!("{name} repeat {} appears twice", run.repeat));
            }
            repeats.push(run.repeat);
        }
        for (key, name) in cells {
            let mut repeats = per_cell[&key].clone();
            repeats.sort_unstable();
            repeats.dedup();
            // A partial run (interrupted; `lab run --resume` finishes it) lacks repeats.
            if repeats.len() != meta.repeats as usize && !meta.partial {
                problems.push(format!(
                    "{name}: {} of the settings' {} repeats",
                    repeats.len(),
                    meta.repeats
                ));
            }
        }
        problems
    }
}

/// Checks a run's outcome counts add up; the message says what is off.
pub fn check_outcomes(run: &RunResult) -> Result<(), String> {
    let sum = run.complete + run.incomplete + run.rejected + run.failed;
    if sum != run.records {
        return Err(format!(
            "{} {} repeat {}: {} records started but complete {} + incomplete {} + rejected {} + failed {} = {sum}",
            run.strategy, run.scenario, run.repeat, run.records, run.complete, run.incomplete,
            run.rejected, run.failed
        ));
    }
    Ok(())
}

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// A cell's CPUs in words: `1 CPU`, `0.5 CPUs`, or `unlimited (1 planned)` when `limited` is
/// false.
pub fn cpus_words(cpus: f64, limited: bool) -> String {
    if !limited {
        return cpus_cell(cpus, limited);
    }
    let unit = if (cpus - 1.0).abs() < 1e-9 {
        "CPU"
    } else {
        "CPUs"
    };
    format!("{} {unit}", fmt_num(cpus))
}

/// A cell's CPUs in a column headed `CPUs`: `1`, `0.5`, or `unlimited (1 planned)` when
/// `limited` is false.
pub fn cpus_cell(cpus: f64, limited: bool) -> String {
    if limited {
        fmt_num(cpus)
    } else {
        format!("unlimited ({} planned)", fmt_num(cpus))
    }
}

/// A run with made-up figures, for tests of what is computed from runs.
#[cfg(test)]
pub(crate) fn sample_run(
    strategy: &str,
    scenario: &str,
    cpus: f64,
    repeat: u32,
    secs: f64,
) -> RunResult {
    RunResult {
        strategy: strategy.into(),
        scenario: scenario.into(),
        cpus,
        repeat,
        records: 10,
        complete: 6,
        incomplete: 2,
        rejected: 1,
        failed: 1,
        completion_s: secs,
        accepted_per_s: 8.0 / secs,
        write_503s: 1,
        peak_writes_offered: repeat as u64 + 5,
        replicas: 1,
        ..RunResult::default()
    }
}

/// A preregistered hypothesis and what the run found.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HypothesisResult {
    pub id: String,
    /// The claim in words, from `lab/hypotheses.toml`.
    pub claim: String,
    /// `pass`, `fail`, or `skipped` (see `skip_reason`).
    pub outcome: String,
    /// The observed values, in words with numbers, e.g. `C1 1 CPU 78.2 s / 2 CPUs 39.9 s = 1.96x`;
    /// for a skipped hypothesis, why.
    pub observed: String,
    /// Why a skipped hypothesis was not evaluated; absent otherwise. Documents written before
    /// this field skipped only for missing cells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_reason: Option<SkipReason>,
}

/// Why a hypothesis was not evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SkipReason {
    /// The run did not include the cells it is about.
    MissingCells,
    /// It compares CPU counts, and no CPU quota was enforced: every cell had the host's CPUs.
    NoCpuLimit,
    /// It is about runs split between another number of replicas (`lab run --replicas`).
    Replicas,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_from_runs_is_summarised_and_labelled_with_its_limit() {
        let runs = vec![
            sample_run("c1", "healthy", 1.0, 1, 4.0),
            sample_run("c1", "healthy", 1.0, 2, 6.0),
        ];
        let meta = |enforcement| RunMeta {
            enforcement,
            records: 10,
            repeats: 2,
            ..RunMeta::default()
        };
        let doc = ResultsDoc::from_runs(meta(Enforcement::CgroupV1), runs.clone());
        assert_eq!((doc.summary.len(), doc.summary[0].repeats), (1, 2));
        assert_eq!(doc.summary[0].completion_s.median, 5.0);
        assert!(!doc.runs[0].unlimited && !doc.summary[0].unlimited);
        assert!(doc.problems().is_empty(), "{:?}", doc.problems());
        let json = serde_json::to_value(&doc).unwrap();
        assert!(
            json["runs"][0].get("unlimited").is_none(),
            "written only when true"
        );

        let doc = ResultsDoc::from_runs(meta(Enforcement::None), runs);
        assert!(doc.runs.iter().all(|r| r.unlimited) && doc.summary[0].unlimited);
        let json = serde_json::to_value(&doc).unwrap();
        assert_eq!(json["summary"][0]["unlimited"], true);
        assert_eq!(cpus_cell(1.0, false), "unlimited (1 planned)");
        assert_eq!(cpus_words(2.0, true), "2 CPUs");
        assert_eq!(cpus_words(1.0, true), "1 CPU");
    }

    #[test]
    fn outcome_check_names_the_run() {
        let mut r = sample_run("c2", "slow-write", 1.0, 4, 1.0);
        assert!(check_outcomes(&r).is_ok());
        r.failed = 0;
        let e = check_outcomes(&r).unwrap_err();
        assert!(
            e.contains("c2 slow-write repeat 4") && e.contains("= 9"),
            "{e}"
        );
    }
}
