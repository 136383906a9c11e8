//! The results document a lab run produces (`results.json`) and the types in it.
//!
//! Durations are in seconds (`*_s`) or milliseconds (`*_ms`) as the field name says.
//!
//! The summary is computed from the runs ([`ResultsDoc::from_runs`]), never taken as given, and
//! [`ResultsDoc::problems`] lists what makes a stored document's runs inconsistent.

use std::collections::BTreeMap;

use inflight_cpu::Enforcement;
use serde::{Deserialize, Serialize};

use crate::matrix::Cell;
use crate::numbers::fmt_num;

mod metric;
mod registry;
pub mod summary;

pub use self::metric::{Chart, MetricDef, Shown, Terminal, Unit};
pub use self::registry::{Metric, SummaryRow};
pub use self::summary::summarize;

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

/// The settings and environment of a lab run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunMeta {
    /// RFC 3339 time the run started.
    pub started_at: String,
    pub records: u64,
    pub repeats: u32,
    pub time_scale: f64,
    pub seed: u64,
    /// How the CPU quota was enforced; `cgroup-v1`, `cgroup-v2` or `none` in JSON.
    #[serde(with = "enforcement_name")]
    pub enforcement: Enforcement,
    pub host_cpus: usize,
    pub inflight_version: String,
    /// How that inflight was built: `release` or `debug` (whose sim and runners are slower, so
    /// the runs of two builds do not compare); empty in documents written before it was kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub inflight_build: String,
    /// Runner processes per run, each in its own CPU quota, splitting the records between them
    /// (`lab run --replicas`); 1 in documents written before replicas existed.
    #[serde(default = "one")]
    pub replicas: u32,
    /// Whether the document lacks runs of its plan, or its final report: the lab was interrupted
    /// (or killed) first. `inflight lab run --resume DIR` runs what is missing.
    #[serde(default)]
    pub partial: bool,
    /// The runs the plan holds (cells x repeats); 0 in documents written before plans were kept.
    #[serde(default)]
    pub runs_planned: usize,
    /// The runs in `runs`.
    #[serde(default)]
    pub runs_finished: usize,
    /// RFC 3339 times at which `--resume` continued the run, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed_at: Vec<String>,
    /// What the lab was asked to run, kept so that `--resume` runs exactly the missing runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<RunPlan>,
}

/// The plan of a lab run besides the settings already in [`RunMeta`] (records, repeats, time
/// scale, seed, enforcement): its cells, and the strategies and scenarios as the runs read them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RunPlan {
    /// The cells in the order they run; every repeat runs them all in this order.
    pub cells: Vec<Cell>,
    /// Where the strategies came from: a file's path, or `built-in`.
    pub strategies_origin: String,
    /// The strategies file's text, as the runners read it.
    pub strategies_toml: String,
    /// Where the scenarios came from: a file's path, or `built-in`.
    pub scenarios_origin: String,
    /// The scenarios file's text, as the sim read it.
    pub scenarios_toml: String,
    /// Where the lab's files came from: `--lab-dir DIR`, `lab/ in the current directory`, the
    /// lab folder of the workspace inflight was built in, or the copies built into inflight
    /// ([`crate::files::Origin`]); empty in documents written before it was kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lab_files: String,
    /// The `inflight` binary that ran the lab and started its sim and runners; empty in
    /// documents written before it was kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub exe: String,
}

fn one() -> u32 {
    1
}

impl Default for RunMeta {
    fn default() -> RunMeta {
        RunMeta {
            started_at: String::new(),
            records: 0,
            repeats: 0,
            time_scale: 0.0,
            seed: 0,
            enforcement: Enforcement::None,
            host_cpus: 0,
            inflight_version: String::new(),
            inflight_build: String::new(),
            replicas: 1,
            partial: false,
            runs_planned: 0,
            runs_finished: 0,
            resumed_at: Vec::new(),
            plan: None,
        }
    }
}

/// [`Enforcement`] as its name (`cgroup-v1`, `cgroup-v2`, `none`).
mod enforcement_name {
    use inflight_cpu::Enforcement;
    use serde::{de, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(e: &Enforcement, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(e.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Enforcement, D::Error> {
        let name = String::deserialize(d)?;
        [
            Enforcement::CgroupV1,
            Enforcement::CgroupV2,
            Enforcement::None,
        ]
        .into_iter()
        .find(|e| e.as_str() == name)
        .ok_or_else(|| {
            de::Error::custom(format!(
                "unknown enforcement `{name}` (expected cgroup-v1, cgroup-v2 or none)"
            ))
        })
    }
}

/// One run of one strategy in one scenario at one CPU count.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RunResult {
    pub strategy: String,
    pub scenario: String,
    pub repeat: u32,
    /// The CPU quota the runner ran under (whole or fractional CPUs), or, when `unlimited`, the
    /// quota the plan asked for.
    pub cpus: f64,
    /// No CPU quota was enforced (`lab run --no-limit`): the runner had all the host's CPUs, so
    /// `cpus` is only what the plan asked for. Written only when true.
    #[serde(default, skip_serializing_if = "is_false")]
    pub unlimited: bool,
    /// The run's RNG seed ([`crate::run::run_seed`] of the base seed, scenario and repeat); 0 in
    /// documents written before it was kept.
    #[serde(default)]
    pub seed: u64,
    /// `std::thread::available_parallelism()` as the runner process saw it.
    pub runner_available_parallelism: usize,
    pub records: u64,
    pub complete: u64,
    pub incomplete: u64,
    pub rejected: u64,
    pub failed: u64,
    /// Failed records by error kind (`timeout`, `connect`, `status_500`, ...).
    #[serde(default)]
    pub failed_by_kind: std::collections::BTreeMap<String, u64>,
    /// Wall time from the first record started to the last record ended.
    pub completion_s: f64,
    /// (complete + incomplete) / completion_s.
    pub accepted_per_s: f64,
    /// 503 answers from the system of record, as counted by the runner (every attempt's: with
    /// retries, a record may get more than one).
    pub write_503s: u64,
    /// Most writes inside the system of record at once, counting those about to be refused (sim stats).
    pub peak_writes_offered: u64,
    /// Most enrichment calls the runner had in flight at once (with several replicas: the most
    /// the enrichment API had in service at once, as the sim counted them).
    pub peak_enrichment_in_flight: u64,
    /// Most writes the runner had in flight at once (with several replicas: the most writes the
    /// system of record held at once, as the sim counted them).
    #[serde(default)]
    pub peak_writes_in_flight: u64,
    /// Enrichment calls that hit the client timeout.
    #[serde(default)]
    pub enrichment_timeouts: u64,
    /// Enrichment calls answered 429 (over the enrichment API's quota), every attempt's.
    #[serde(default)]
    pub enrichment_429s: u64,
    /// Enrichment calls made, every attempt counted (a retry is one more call).
    #[serde(default)]
    pub enrichment_calls: u64,
    /// Writes made, every attempt counted.
    #[serde(default)]
    pub write_calls: u64,
    /// Retries of enrichment calls (a strategy with `retry`).
    #[serde(default)]
    pub enrichment_retries: u64,
    /// Retries of enrichment calls the retry budget refused.
    #[serde(default)]
    pub enrichment_retries_denied: u64,
    /// Retries of writes.
    #[serde(default)]
    pub write_retries: u64,
    /// Retries of writes the retry budget refused.
    #[serde(default)]
    pub write_retries_denied: u64,
    /// Calls in flight per dependency, sampled every `timeline_interval_ms` (with several
    /// replicas: the sum of their samples, each replica sampling from its own start).
    #[serde(default)]
    pub timeline: Timeline,
    /// The runner processes this run was split between (1 unless `lab run --replicas`).
    #[serde(default = "one")]
    pub replicas: u32,
    /// The records of each priority class apart, by class name, in a scenario whose records
    /// have classes (whatever the strategy's budgets make of them); empty otherwise.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub classes: BTreeMap<String, ClassResult>,
    /// Each class's accepted records' completion times, in seconds: what a runner sends the lab
    /// so that the percentiles of a run split between replicas are those of all its records.
    /// The lab drops them once it has merged the replicas' results, so a kept run has none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub class_completions_s: BTreeMap<String, Vec<f64>>,
}

/// The records of one priority class in one run.
///
/// A record's completion time is from when the runner took it to when it ended, on the clock
/// of the run's `completion_s` (the runner's monotonic wall clock); the percentiles are of the
/// accepted records (complete or incomplete: the write was accepted), by nearest rank.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClassResult {
    /// Records of this class started.
    pub records: u64,
    /// Of them, records whose write was accepted (complete + incomplete).
    pub accepted: u64,
    /// Median completion time of the accepted records; `null` when none was accepted.
    pub completion_p50_s: Option<f64>,
    /// 99th percentile completion time of the accepted records; `null` when none was accepted.
    pub completion_p99_s: Option<f64>,
}

impl ClassResult {
    /// The class's result from its records started and the completion times of those accepted.
    pub fn of(records: u64, mut accepted_s: Vec<f64>) -> ClassResult {
        accepted_s.sort_by(f64::total_cmp);
        ClassResult {
            records,
            accepted: accepted_s.len() as u64,
            completion_p50_s: nearest_rank(&accepted_s, 0.50),
            completion_p99_s: nearest_rank(&accepted_s, 0.99),
        }
    }

    /// Accepted records as a fraction of the records started (0 when none started).
    pub fn accepted_fraction(&self) -> f64 {
        if self.records == 0 {
            0.0
        } else {
            self.accepted as f64 / self.records as f64
        }
    }
}

/// The `q` quantile of `sorted` by nearest rank: the smallest value with at least `q` of the
/// values at or below it; `None` for no values.
fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Calls in flight per dependency over time.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Timeline {
    pub interval_ms: f64,
    /// Enrichment calls in flight at each sample.
    pub enrichment: Vec<u32>,
    /// Writes in flight at each sample.
    pub records: Vec<u32>,
    /// The enrichment gate's limit at each sample, when it moves (an adaptive limit).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enrichment_limit: Vec<u32>,
    /// The records gate's limit at each sample, when it moves (an adaptive limit).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records_limit: Vec<u32>,
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

/// Median, min and max of one metric over the repeats (the benchmarks' type, one definition).
pub use inflight_bench::spread::Spread;

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

    /// As [`Metric::to_full_time`]: seconds shrink with the time scale, counts do not change.
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
    fn enforcement_is_written_by_name() {
        let meta = RunMeta {
            enforcement: Enforcement::CgroupV2,
            ..RunMeta::default()
        };
        let json = serde_json::to_value(&meta).unwrap();
        assert_eq!(json["enforcement"], "cgroup-v2");
        let back: RunMeta = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, meta);
        let mut bad = json;
        bad["enforcement"] = "cgroup-v3".into();
        let err = serde_json::from_value::<RunMeta>(bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown enforcement `cgroup-v3`"), "{err}");
    }

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
    fn a_class_result_takes_percentiles_of_the_accepted_by_nearest_rank() {
        let times: Vec<f64> = (1..=40).rev().map(f64::from).collect();
        let c = ClassResult::of(42, times);
        assert_eq!((c.records, c.accepted), (42, 40));
        assert_eq!(c.completion_p50_s, Some(20.0));
        assert_eq!(c.completion_p99_s, Some(40.0), "p99 of 40 is the slowest");
        assert!((c.accepted_fraction() - 40.0 / 42.0).abs() < 1e-12);
        let hundred = ClassResult::of(100, (1..=100).map(f64::from).collect());
        assert_eq!(
            (hundred.completion_p50_s, hundred.completion_p99_s),
            (Some(50.0), Some(99.0))
        );
        let none = ClassResult::of(3, Vec::new());
        assert_eq!((none.completion_p50_s, none.completion_p99_s), (None, None));
        assert_eq!(none.accepted_fraction(), 0.0);
        let json = serde_json::to_value(&c).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "records",
                "accepted",
                "completion_p50_s",
                "completion_p99_s"
            ]
        );
        let run = serde_json::to_value(sample_run("c5", "healthy", 1.0, 1, 2.0)).unwrap();
        assert!(
            run.get("classes").is_none(),
            "written only when records have classes"
        );
    }

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
