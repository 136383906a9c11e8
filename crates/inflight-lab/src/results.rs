//! The results document a lab run produces (`results.json`) and the types in it.
//!
//! Durations are in seconds (`*_s`) or milliseconds (`*_ms`) as the field name says.

use inflight_cpu::Enforcement;
use serde::{Deserialize, Serialize};

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
    pub cells: Vec<crate::run::Cell>,
    /// Where the strategies came from: a file's path, or `built-in`.
    pub strategies_origin: String,
    /// The strategies file's text, as the runners read it.
    pub strategies_toml: String,
    /// Where the scenarios came from: a file's path, or `built-in`.
    pub scenarios_origin: String,
    /// The scenarios file's text, as the sim read it.
    pub scenarios_toml: String,
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
    /// The CPU quota the runner ran under (whole or fractional CPUs).
    pub cpus: f64,
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
    /// 503 answers from the system of record, as counted by the runner.
    pub write_503s: u64,
    /// Most writes inside the system of record at once, counting those about to be refused (sim stats).
    pub peak_writes_offered: u64,
    /// Most enrichment calls the runner had in flight at once.
    pub peak_enrichment_in_flight: u64,
    /// Most writes the runner had in flight at once.
    #[serde(default)]
    pub peak_writes_in_flight: u64,
    /// Enrichment calls that hit the client timeout.
    #[serde(default)]
    pub enrichment_timeouts: u64,
    /// Enrichment calls answered 429 (over the enrichment API's quota).
    #[serde(default)]
    pub enrichment_429s: u64,
    /// Calls in flight per dependency, sampled every `timeline_interval_ms`.
    #[serde(default)]
    pub timeline: Timeline,
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
        ..RunResult::default()
    }
}

/// Median, min and max of one metric over the repeats (the benchmarks' type, one definition).
pub use inflight_bench::spread::Spread;

/// The repeats of one (strategy, scenario, cpus) cell, summarised.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SummaryRow {
    pub strategy: String,
    pub scenario: String,
    pub cpus: f64,
    pub repeats: u32,
    pub completion_s: Spread,
    pub accepted_per_s: Spread,
    pub complete: Spread,
    pub incomplete: Spread,
    pub rejected: Spread,
    pub failed: Spread,
    pub write_503s: Spread,
    pub peak_writes_offered: Spread,
    pub peak_enrichment_in_flight: Spread,
    /// Fraction of records marked incomplete (median over repeats).
    pub incomplete_fraction: Spread,
    /// Writes answered 503, as a fraction of the records started.
    #[serde(default)]
    pub write_503_fraction: Spread,
    /// Enrichment calls answered 429 (over the enrichment API's quota).
    #[serde(default)]
    pub enrichment_429s: Spread,
}

impl SummaryRow {
    /// The spread of `metric` in this row.
    pub fn get(&self, metric: Metric) -> Spread {
        match metric {
            Metric::CompletionS => self.completion_s,
            Metric::AcceptedPerS => self.accepted_per_s,
            Metric::Complete => self.complete,
            Metric::Incomplete => self.incomplete,
            Metric::Rejected => self.rejected,
            Metric::Failed => self.failed,
            Metric::Write503s => self.write_503s,
            Metric::PeakWritesOffered => self.peak_writes_offered,
            Metric::PeakEnrichmentInFlight => self.peak_enrichment_in_flight,
            Metric::IncompleteFraction => self.incomplete_fraction,
            Metric::Write503Fraction => self.write_503_fraction,
            Metric::Enrichment429s => self.enrichment_429s,
        }
    }
}

/// A summary metric: the name of a [`SummaryRow`] field, as hypotheses, reference figures and
/// charts name it (`completion_s`, `write_503s`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    CompletionS,
    AcceptedPerS,
    Complete,
    Incomplete,
    Rejected,
    Failed,
    #[serde(rename = "write_503s")]
    Write503s,
    PeakWritesOffered,
    PeakEnrichmentInFlight,
    IncompleteFraction,
    #[serde(rename = "write_503_fraction")]
    Write503Fraction,
    #[serde(rename = "enrichment_429s")]
    Enrichment429s,
}

impl Metric {
    /// Every metric, in the order of the [`SummaryRow`] fields.
    pub const ALL: [Metric; 12] = [
        Metric::CompletionS,
        Metric::AcceptedPerS,
        Metric::Complete,
        Metric::Incomplete,
        Metric::Rejected,
        Metric::Failed,
        Metric::Write503s,
        Metric::PeakWritesOffered,
        Metric::PeakEnrichmentInFlight,
        Metric::IncompleteFraction,
        Metric::Write503Fraction,
        Metric::Enrichment429s,
    ];

    /// The field name, e.g. `accepted_per_s`.
    pub fn name(self) -> &'static str {
        match self {
            Metric::CompletionS => "completion_s",
            Metric::AcceptedPerS => "accepted_per_s",
            Metric::Complete => "complete",
            Metric::Incomplete => "incomplete",
            Metric::Rejected => "rejected",
            Metric::Failed => "failed",
            Metric::Write503s => "write_503s",
            Metric::PeakWritesOffered => "peak_writes_offered",
            Metric::PeakEnrichmentInFlight => "peak_enrichment_in_flight",
            Metric::IncompleteFraction => "incomplete_fraction",
            Metric::Write503Fraction => "write_503_fraction",
            Metric::Enrichment429s => "enrichment_429s",
        }
    }

    /// The metric called `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == name)
    }
}

impl std::fmt::Display for Metric {
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
    /// `pass`, `fail`, or `skipped` (the run did not include the cells it needs).
    pub outcome: String,
    /// The observed values, in words with numbers, e.g. `C1 1 CPU 78.2 s / 2 CPUs 39.9 s = 1.96x`.
    pub observed: String,
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
    fn metric_names_are_the_summary_field_names() {
        let row = serde_json::to_value(SummaryRow::default()).unwrap();
        for metric in Metric::ALL {
            assert!(row.get(metric.name()).is_some(), "{metric}");
            let json = serde_json::to_value(metric).unwrap();
            assert_eq!(json, metric.name());
            assert_eq!(Metric::from_name(metric.name()), Some(metric));
        }
        assert_eq!(Metric::from_name("nope"), None);
    }
}
