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

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use crate::numbers::fmt_num;
use crate::results::{
    cpus_words, ClassMetric, HypothesisResult, Metric, ResultsDoc, SkipReason, Spread, SummaryRow,
};

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    hypothesis: Vec<RawHypothesis>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHypothesis {
    id: String,
    claim: String,
    metric: String,
    class: Option<String>,
    scenario: String,
    #[serde(default)]
    stat: Stat,
    strategies: Vec<String>,
    #[serde(default = "default_cpus")]
    cpus: Vec<f64>,
    #[serde(default = "default_replicas")]
    replicas: u32,
    ratio_to: Option<Baseline>,
    minus: Option<Baseline>,
    compare: Option<Compare>,
    threshold: Option<toml::Value>,
    between: Option<Vec<f64>>,
}

fn default_cpus() -> Vec<f64> {
    vec![1.0]
}

fn default_replicas() -> u32 {
    1
}

impl RawHypothesis {
    fn validate(self) -> Result<Hypothesis, String> {
        if self.id.trim().is_empty() {
            return Err("id must not be empty".into());
        }
        let metric = match (
            Metric::from_name(&self.metric),
            ClassMetric::from_name(&self.metric),
            self.class,
        ) {
            (Some(metric), _, None) => Measure::Summary(metric),
            (Some(_), _, Some(class)) => {
                return Err(format!(
                    "class = {class:?} takes a class metric ({}), not `{}`",
                    class_metric_names(),
                    self.metric
                ))
            }
            (_, Some(metric), Some(class)) if !class.trim().is_empty() => {
                Measure::Class { class, metric }
            }
            (_, Some(_), _) => {
                return Err(format!(
                    "metric `{}` is about one class's records: name it with class = \"NAME\"",
                    self.metric
                ))
            }
            (None, None, _) => {
                let known: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
                return Err(format!(
                    "unknown metric `{}`; known metrics: {}; with class = \"NAME\": {}",
                    self.metric,
                    known.join(", "),
                    class_metric_names()
                ));
            }
        };
        if self.strategies.is_empty() {
            return Err("strategies must name at least one strategy".into());
        }
        if self.cpus.is_empty() || self.cpus.iter().any(|c| !c.is_finite() || *c <= 0.0) {
            return Err(format!(
                "cpus must be a list of CPU counts above 0, got {:?}",
                self.cpus
            ));
        }
        for (field, cell) in [("ratio_to", &self.ratio_to), ("minus", &self.minus)] {
            if let Some(cell) = cell {
                if !cell.cpus.is_finite() || cell.cpus <= 0.0 {
                    return Err(format!("{field}.cpus must be above 0, got {}", cell.cpus));
                }
            }
        }
        if self.replicas == 0 {
            return Err("replicas must be at least 1".into());
        }
        if self.ratio_to.is_some() && self.minus.is_some() {
            return Err("give ratio_to or minus, not both".into());
        }
        let test = match (self.compare, self.threshold, self.between) {
            (Some(op), Some(threshold), None) => {
                let threshold = match threshold {
                    toml::Value::Integer(i) => Threshold::Value(i as f64),
                    toml::Value::Float(f) if f.is_finite() => Threshold::Value(f),
                    toml::Value::String(s) if s == "cpus" => Threshold::Cpus,
                    other => {
                        return Err(format!(
                            "threshold must be a number or \"cpus\", got {other}"
                        ))
                    }
                };
                Test::Compare(op, threshold)
            }
            (None, None, Some(range)) => match range.as_slice() {
                [lo, hi] if lo.is_finite() && hi.is_finite() && lo <= hi => Test::Between(*lo, *hi),
                _ => {
                    return Err(format!(
                        "between must be [lo, hi] with lo <= hi, got {range:?}"
                    ))
                }
            },
            (Some(_), None, None) => return Err("compare needs a threshold".into()),
            (None, Some(_), None) => return Err("threshold needs a compare".into()),
            _ => return Err(
                "give either compare + threshold, or between = [lo, hi] (not both, not neither)"
                    .into(),
            ),
        };
        Ok(Hypothesis {
            id: self.id,
            claim: self.claim,
            metric,
            scenario: self.scenario,
            stat: self.stat,
            strategies: self.strategies,
            cpus: self.cpus,
            replicas: self.replicas,
            ratio_to: self.ratio_to,
            minus: self.minus,
            test,
        })
    }
}

fn class_metric_names() -> String {
    let names: Vec<&str> = ClassMetric::ALL.iter().map(|m| m.name()).collect();
    names.join(", ")
}

/// Parses and validates a hypotheses file's text; `origin` names it in error messages.
pub fn parse(text: &str, origin: &str) -> Result<Vec<Hypothesis>, HypothesisError> {
    let raw: RawFile = toml::from_str(text).map_err(|e| HypothesisError::Parse {
        origin: origin.to_string(),
        message: e.to_string().trim().to_string(),
    })?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(raw.hypothesis.len());
    for h in raw.hypothesis {
        let id = h.id.clone();
        if !seen.insert(id.clone()) {
            return Err(HypothesisError::Invalid {
                origin: origin.to_string(),
                id,
                message: "the id is used twice".into(),
            });
        }
        out.push(h.validate().map_err(|message| HypothesisError::Invalid {
            origin: origin.to_string(),
            id,
            message,
        })?);
    }
    Ok(out)
}

/// Reads and validates a hypotheses file.
pub fn load(path: &Path) -> Result<Vec<Hypothesis>, HypothesisError> {
    let text = std::fs::read_to_string(path).map_err(|source| HypothesisError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, &path.display().to_string())
}

/// The hypotheses compiled into the binary (a copy of `lab/hypotheses.toml`).
pub fn builtin() -> Vec<Hypothesis> {
    parse(BUILTIN_HYPOTHESES, "built-in").expect("the built-in hypotheses file is valid")
}

/// The summary row of (`scenario`, `strategy`, `cpus`), the strategy matched case-insensitively.
pub(crate) fn find_row<'a>(
    doc: &'a ResultsDoc,
    scenario: &str,
    strategy: &str,
    cpus: f64,
) -> Option<&'a SummaryRow> {
    doc.summary.iter().find(|row| {
        row.scenario == scenario
            && row.strategy.eq_ignore_ascii_case(strategy)
            && (row.cpus - cpus).abs() < 1e-6
    })
}

/// `C4 @1 CPU`, `C1 @2 CPUs`, `C1 @unlimited (2 planned)`.
fn cell_name(strategy: &str, cpus: f64, limited: bool) -> String {
    format!("{} @{}", strategy.to_uppercase(), cpus_words(cpus, limited))
}

fn describe_test(test: Test, cpus: f64) -> String {
    // Thresholds print as written in the file (1.8, not 1.80).
    match test {
        Test::Compare(op, Threshold::Value(t)) => format!("{op} {t}"),
        Test::Compare(op, Threshold::Cpus) => format!("{op} {} (its CPUs)", fmt_num(cpus)),
        Test::Between(lo, hi) => format!("in [{lo}, {hi}]"),
    }
}

fn passes(test: Test, value: f64, cpus: f64) -> bool {
    match test {
        Test::Compare(op, Threshold::Value(t)) => op.holds(value, t),
        Test::Compare(op, Threshold::Cpus) => op.holds(value, cpus),
        Test::Between(lo, hi) => value >= lo - EPSILON && value <= hi + EPSILON,
    }
}

/// Evaluates one hypothesis against `doc.summary`.
pub fn evaluate_one(h: &Hypothesis, doc: &ResultsDoc) -> HypothesisResult {
    if doc.meta.replicas != h.replicas {
        let runs = |n: u32| {
            if n == 1 {
                "runs of one runner process".to_string()
            } else {
                format!("runs split between {n} replicas (--replicas {n})")
            }
        };
        return HypothesisResult {
            id: h.id.clone(),
            claim: h.claim.clone(),
            outcome: "skipped".to_string(),
            observed: format!(
                "needs {}; this run had {}",
                runs(h.replicas),
                runs(doc.meta.replicas)
            ),
            skip_reason: Some(SkipReason::Replicas),
        };
    }
    let what = format!("{} {} in {}", h.stat, h.metric, h.scenario);
    // The summary rows say whether a quota was enforced (they all agree: see `from_runs`).
    let limited = !doc.summary.iter().any(|r| r.unlimited);
    if h.needs_cpu_limit() && !limited {
        return HypothesisResult {
            id: h.id.clone(),
            claim: h.claim.clone(),
            outcome: "skipped".into(),
            observed: format!(
                "{what}: not evaluated: it compares CPU counts, and this run enforced no CPU limit (--no-limit), so every cell had all the host's CPUs"
            ),
            skip_reason: Some(SkipReason::NoCpuLimit),
        };
    }
    let cell_name = |strategy: &str, cpus: f64| cell_name(strategy, cpus, limited);
    let mut missing = Vec::new();
    let mut parts = Vec::new();
    let mut all_pass = true;
    let other = h.ratio_to.as_ref().or(h.minus.as_ref());
    let denominator = match other {
        Some(cell) => match find_row(doc, &h.scenario, &cell.strategy, cell.cpus) {
            Some(row) => Some((cell, row)),
            None => {
                missing.push(cell_name(&cell.strategy, cell.cpus));
                None
            }
        },
        None => None,
    };
    for strategy in &h.strategies {
        for &cpus in &h.cpus {
            let Some(row) = find_row(doc, &h.scenario, strategy, cpus) else {
                missing.push(cell_name(strategy, cpus));
                continue;
            };
            let test_text = describe_test(h.test, cpus);
            let name = cell_name(strategy, cpus);
            let Some(value) = h.metric.of(row).map(|s| h.stat.of(s)) else {
                all_pass = false;
                parts.push(format!("{name}: {} undefined (fail)", h.metric));
                continue;
            };
            let other_value = denominator
                .map(|(cell, other_row)| (cell, h.metric.of(other_row).map(|s| h.stat.of(s))));
            if let Some((cell, None)) = other_value {
                all_pass = false;
                parts.push(format!(
                    "{name} {}; {}: {} undefined (fail)",
                    fmt_num(value),
                    cell_name(&cell.strategy, cell.cpus),
                    h.metric
                ));
                continue;
            }
            match (other, other_value) {
                (Some(_), Some((cell, Some(subtrahend)))) if h.minus.is_some() => {
                    let other_name = cell_name(&cell.strategy, cell.cpus);
                    let difference = value - subtrahend;
                    // As for a single value below: compared at time scale 1.
                    let ok = passes(
                        h.test,
                        difference * h.metric.to_full_time(doc.meta.time_scale),
                        cpus,
                    );
                    all_pass &= ok;
                    parts.push(format!(
                        "{name} {} - {other_name} {} = {} ({test_text}: {})",
                        fmt_num(value),
                        fmt_num(subtrahend),
                        fmt_num(difference),
                        if ok { "ok" } else { "no" }
                    ));
                }
                (Some(_), Some((cell, Some(den)))) => {
                    let den_name = cell_name(&cell.strategy, cell.cpus);
                    if den == 0.0 || !den.is_finite() {
                        all_pass = false;
                        parts.push(format!(
                            "{name} {} / {den_name} {}: ratio undefined (fail)",
                            fmt_num(value),
                            fmt_num(den)
                        ));
                        continue;
                    }
                    let ratio = value / den;
                    let ok = passes(h.test, ratio, cpus);
                    all_pass &= ok;
                    parts.push(format!(
                        "{name} {} / {den_name} {} = {}x ({test_text}: {})",
                        fmt_num(value),
                        fmt_num(den),
                        fmt_num_ratio(ratio),
                        if ok { "ok" } else { "no" }
                    ));
                }
                // The missing denominator is already listed; an undefined one above.
                (Some(_), _) => {}
                (None, _) => {
                    // A threshold in seconds or records/s is the seed's, at time scale 1: a
                    // scaled run's value is compared scaled back (a ratio needs no such care).
                    let factor = h.metric.to_full_time(doc.meta.time_scale);
                    let full = value * factor;
                    let ok = passes(h.test, full, cpus);
                    all_pass &= ok;
                    let shown = if factor == 1.0 {
                        fmt_num(value)
                    } else {
                        format!("{} ({} at time scale 1)", fmt_num(value), fmt_num(full))
                    };
                    parts.push(format!(
                        "{name} {shown} ({test_text}: {})",
                        if ok { "ok" } else { "no" }
                    ));
                }
            }
        }
    }
    let (outcome, observed, skip_reason) = if !missing.is_empty() {
        (
            "skipped",
            format!("{what}: not in this run: {}", missing.join(", ")),
            Some(SkipReason::MissingCells),
        )
    } else {
        (
            if all_pass { "pass" } else { "fail" },
            format!("{what}: {}", parts.join("; ")),
            None,
        )
    };
    HypothesisResult {
        id: h.id.clone(),
        claim: h.claim.clone(),
        outcome: outcome.to_string(),
        observed,
        skip_reason,
    }
}

fn fmt_num_ratio(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3}")
    } else {
        v.to_string()
    }
}

/// Evaluates every hypothesis against `doc.summary`, in file order.
pub fn evaluate(hypotheses: &[Hypothesis], doc: &ResultsDoc) -> Vec<HypothesisResult> {
    hypotheses.iter().map(|h| evaluate_one(h, doc)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(v: f64) -> Spread {
        Spread {
            median: v,
            min: v,
            max: v,
        }
    }

    fn row(strategy: &str, scenario: &str, cpus: f64) -> SummaryRow {
        SummaryRow {
            strategy: strategy.into(),
            scenario: scenario.into(),
            cpus,
            repeats: 5,
            ..Default::default()
        }
    }

    fn summary_doc(summary: Vec<SummaryRow>) -> ResultsDoc {
        ResultsDoc {
            summary,
            ..Default::default()
        }
    }

    fn one(text: &str) -> Hypothesis {
        let mut hs = parse(text, "t.toml").unwrap();
        assert_eq!(hs.len(), 1);
        hs.remove(0)
    }

    #[test]
    fn builtin_file_is_valid_and_covers_the_reference_claims() {
        let hs = builtin();
        let ids: Vec<_> = hs.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(
            ids[..9],
            ["H1", "H2", "H3", "H4", "H5", "H6", "H7", "H8", "H9"]
        );
        for id in ["H12", "H13", "H17", "H20", "H21", "H22", "H23"] {
            assert!(ids.contains(&id), "{id} missing");
        }
    }

    #[test]
    fn ratio_threshold_passes_and_fails() {
        let h = one(r#"[[hypothesis]]
id = "r"
claim = "c"
metric = "completion_s"
scenario = "healthy"
strategies = ["c1"]
cpus = [1]
ratio_to = { strategy = "c1", cpus = 2 }
compare = ">="
threshold = 1.8
"#);
        let mut a = row("c1", "healthy", 1.0);
        a.completion_s = spread(80.0);
        let mut b = row("c1", "healthy", 2.0);
        b.completion_s = spread(40.0);
        let mut doc = summary_doc(vec![a, b]);
        let r = evaluate_one(&h, &doc);
        assert_eq!(r.outcome, "pass", "{r:?}");
        assert!(r.observed.contains("= 2.000x"), "{}", r.observed);
        doc.summary[1].completion_s = spread(50.0);
        assert_eq!(evaluate_one(&h, &doc).outcome, "fail");
        doc.summary.remove(1);
        let r = evaluate_one(&h, &doc);
        assert_eq!(r.outcome, "skipped");
        assert!(r.observed.contains("C1 @2 CPUs"), "{}", r.observed);
    }

    #[test]
    fn a_rate_threshold_is_compared_at_time_scale_one() {
        let h = one(r#"[[hypothesis]]
id = "abs"
claim = "c"
metric = "accepted_per_s"
scenario = "slow-write"
strategies = ["c5"]
cpus = [1]
compare = ">="
threshold = 36.19
"#);
        let mut a = row("c5", "slow-write", 1.0);
        // At time scale 0.2 rates run five times faster: 113.6/s is 22.72/s at full time.
        a.accepted_per_s = spread(113.6);
        let mut doc = summary_doc(vec![a]);
        doc.meta.time_scale = 0.2;
        let r = evaluate_one(&h, &doc);
        assert_eq!(r.outcome, "fail", "{r:?}");
        assert!(
            r.observed.contains("22.72 at time scale 1"),
            "{}",
            r.observed
        );
        doc.summary[0].accepted_per_s = spread(185.0);
        assert_eq!(evaluate_one(&h, &doc).outcome, "pass");
        doc.meta.time_scale = 1.0;
        doc.summary[0].accepted_per_s = spread(36.5);
        let r = evaluate_one(&h, &doc);
        assert_eq!(r.outcome, "pass", "{r:?}");
        assert!(!r.observed.contains("time scale"), "{}", r.observed);
    }

    #[test]
    fn a_class_metric_reads_that_class_in_each_cell_and_its_baseline() {
        use crate::results::ClassSummary;
        let h = one(r#"[[hypothesis]]
id = "p99"
claim = "c"
metric = "class_completion_p99_s"
class = "interactive"
scenario = "priority"
strategies = ["c5-priority"]
ratio_to = { strategy = "c5", cpus = 1 }
compare = "<="
threshold = 0.5
"#);
        assert_eq!(
            h.metric.to_string(),
            "class_completion_p99_s of interactive"
        );
        let with = |strategy: &str, p99: Option<f64>| {
            let mut r = row(strategy, "priority", 1.0);
            r.classes.insert(
                "interactive".into(),
                ClassSummary {
                    completion_p99_s: p99.map(spread),
                    ..ClassSummary::default()
                },
            );
            r.classes.insert(
                "batch".into(),
                ClassSummary {
                    completion_p99_s: Some(spread(100.0)),
                    ..ClassSummary::default()
                },
            );
            r
        };
        let mut doc = summary_doc(vec![with("c5-priority", Some(0.9)), with("c5", Some(2.0))]);
        let r = evaluate_one(&h, &doc);
        assert_eq!(r.outcome, "pass", "{r:?}");
        assert!(
            r.observed.contains("0.9 / C5 @1 CPU 2 = 0.450x"),
            "{}",
            r.observed
        );
        doc.summary[0] = with("c5-priority", Some(1.2));
        assert_eq!(evaluate_one(&h, &doc).outcome, "fail");
        // Undefined (no interactive record accepted in a repeat) fails, on either side.
        doc.summary[0] = with("c5-priority", None);
        let r = evaluate_one(&h, &doc);
        assert_eq!(r.outcome, "fail");
        assert!(r.observed.contains("undefined"), "{}", r.observed);
        doc.summary[0] = with("c5-priority", Some(0.9));
        doc.summary[1] = with("c5", None);
        assert_eq!(evaluate_one(&h, &doc).outcome, "fail");
        doc.summary[1] = row("c5", "priority", 1.0);
        assert_eq!(evaluate_one(&h, &doc).outcome, "fail", "no such class");

        // A threshold in seconds is at time scale 1; a fraction is not scaled.
        let seconds = one(r#"[[hypothesis]]
id = "s"
claim = "c"
metric = "class_completion_p99_s"
class = "interactive"
scenario = "priority"
strategies = ["c5-priority"]
compare = "<="
threshold = 1.0
"#);
        let mut doc = summary_doc(vec![with("c5-priority", Some(0.3))]);
        doc.meta.time_scale = 0.2;
        let r = evaluate_one(&seconds, &doc);
        assert_eq!(r.outcome, "fail", "0.3 s at 0.2 is 1.5 s: {r:?}");
        doc.meta.time_scale = 1.0;
        assert_eq!(evaluate_one(&seconds, &doc).outcome, "pass");
    }

    #[test]
    fn a_class_metric_and_a_class_go_together() {
        let text = |metric: &str, class: &str| {
            format!("[[hypothesis]]\nid = \"x\"\nclaim = \"c\"\nmetric = \"{metric}\"\n{class}\nscenario = \"s\"\nstrategies = [\"a\"]\ncompare = \">=\"\nthreshold = 1\n")
        };
        for (metric, class, says) in [
            (
                "class_accepted_fraction",
                "",
                "name it with class = \"NAME\"",
            ),
            (
                "class_accepted_fraction",
                "class = \" \"",
                "name it with class",
            ),
            (
                "accepted_per_s",
                "class = \"interactive\"",
                "takes a class metric (class_records",
            ),
            (
                "class_p99",
                "class = \"interactive\"",
                "with class = \"NAME\": class_records",
            ),
        ] {
            let e = parse(&text(metric, class), "t.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{metric} {class}: {e}");
        }
        let h = one(&text("class_accepted_fraction", "class = \"batch\""));
        assert_eq!(
            h.metric,
            Measure::Class {
                class: "batch".into(),
                metric: ClassMetric::AcceptedFraction
            }
        );
    }

    #[test]
    fn a_difference_works_where_a_ratio_is_undefined() {
        let h = one(r#"[[hypothesis]]
id = "m"
claim = "c"
metric = "write_503s"
scenario = "healthy"
strategies = ["c5"]
minus = { strategy = "peer", cpus = 1 }
compare = "<="
threshold = 0
"#);
        let mut a = row("c5", "healthy", 1.0);
        a.write_503s = spread(0.0);
        let mut b = row("peer", "healthy", 1.0);
        b.write_503s = spread(0.0);
        let mut doc = summary_doc(vec![a, b]);
        let r = evaluate_one(&h, &doc);
        assert_eq!(r.outcome, "pass", "{r:?}");
        assert!(
            r.observed.contains("C5 @1 CPU 0 - PEER @1 CPU 0 = 0"),
            "{}",
            r.observed
        );
        doc.summary[0].write_503s = spread(3.0);
        assert_eq!(evaluate_one(&h, &doc).outcome, "fail");
        let both = parse(
            r#"[[hypothesis]]
id = "b"
claim = "c"
metric = "write_503s"
scenario = "healthy"
strategies = ["c5"]
minus = { strategy = "peer", cpus = 1 }
ratio_to = { strategy = "peer", cpus = 1 }
compare = "<="
threshold = 0
"#,
            "t.toml",
        )
        .unwrap_err();
        assert!(both.to_string().contains("not both"), "{both}");
    }

    #[test]
    fn equals_cpus_uses_each_cells_cpu_count_and_the_chosen_stat() {
        let h = one(r#"[[hypothesis]]
id = "e"
claim = "c"
metric = "peak_enrichment_in_flight"
scenario = "healthy"
stat = "max"
strategies = ["c1"]
cpus = [1, 2]
compare = "=="
threshold = "cpus"
"#);
        let mut a = row("c1", "healthy", 1.0);
        a.peak_enrichment_in_flight = spread(1.0);
        let mut b = row("c1", "healthy", 2.0);
        b.peak_enrichment_in_flight = Spread {
            median: 2.0,
            min: 2.0,
            max: 3.0,
        };
        let mut doc = summary_doc(vec![a, b]);
        assert_eq!(evaluate_one(&h, &doc).outcome, "fail", "max 3 at 2 CPUs");
        doc.summary[1].peak_enrichment_in_flight.max = 2.0;
        assert_eq!(evaluate_one(&h, &doc).outcome, "pass");
    }

    #[test]
    fn every_strategy_must_pass_and_between_is_inclusive() {
        let h = one(r#"[[hypothesis]]
id = "b"
claim = "c"
metric = "incomplete_fraction"
scenario = "slow-enrichment"
strategies = ["c2", "c3"]
between = [0.1, 0.3]
"#);
        let mut a = row("c2", "slow-enrichment", 1.0);
        a.incomplete_fraction = spread(0.1);
        let mut b = row("c3", "slow-enrichment", 1.0);
        b.incomplete_fraction = spread(0.3);
        let mut doc = summary_doc(vec![a, b]);
        assert_eq!(evaluate_one(&h, &doc).outcome, "pass");
        doc.summary[1].incomplete_fraction = spread(0.31);
        let r = evaluate_one(&h, &doc);
        assert_eq!(r.outcome, "fail");
        assert!(r.observed.contains("C3 @1 CPU 0.31 "), "{}", r.observed);
    }

    #[test]
    fn zero_denominator_fails_rather_than_dividing() {
        let h = one(r#"[[hypothesis]]
id = "z"
claim = "c"
metric = "accepted_per_s"
scenario = "s"
strategies = ["c4"]
ratio_to = { strategy = "c3", cpus = 1 }
compare = "<="
threshold = 0.9
"#);
        let mut a = row("c4", "s", 1.0);
        a.accepted_per_s = spread(5.0);
        let doc = summary_doc(vec![a, row("c3", "s", 1.0)]);
        let r = evaluate_one(&h, &doc);
        assert_eq!(r.outcome, "fail");
        assert!(r.observed.contains("undefined"), "{}", r.observed);
    }

    #[test]
    fn hypotheses_comparing_cpu_counts_are_skipped_without_a_cpu_limit() {
        let hs = builtin();
        let needing: Vec<&str> = hs
            .iter()
            .filter(|h| h.needs_cpu_limit())
            .map(|h| h.id.as_str())
            .collect();
        assert_eq!(needing, ["H1", "H2"]);
        let (h1, h3) = (&hs[0], &hs[2]);
        // Without a quota, C1 "at 1 CPU" and "at 2 CPUs" ran alike: H1 would fail on nothing.
        let mut rows = Vec::new();
        for (strategy, scenario, cpus) in [
            ("c1", "healthy", 1.0),
            ("c1", "healthy", 2.0),
            ("c4", "slow-write", 1.0),
        ] {
            let mut r = row(strategy, scenario, cpus);
            r.completion_s = spread(40.0);
            r.peak_writes_offered = spread(6.0);
            rows.push(r);
        }
        let mut doc = summary_doc(rows);
        assert_eq!(evaluate_one(h1, &doc).outcome, "fail", "1.0x is below 1.8x");
        doc.summary.iter_mut().for_each(|r| r.unlimited = true);
        let r = evaluate_one(h1, &doc);
        assert_eq!(
            (r.outcome.as_str(), r.skip_reason),
            ("skipped", Some(SkipReason::NoCpuLimit))
        );
        assert!(r.observed.contains("no CPU limit"), "{}", r.observed);
        assert_eq!(evaluate_one(&hs[1], &doc).outcome, "skipped");
        // A claim at one CPU count is still evaluated, its cell named for what it had.
        let r = evaluate_one(h3, &doc);
        assert_eq!((r.outcome.as_str(), r.skip_reason), ("pass", None));
        assert!(
            r.observed.contains("C4 @unlimited (1 planned) 6"),
            "{}",
            r.observed
        );
        doc.summary.remove(2);
        let r = evaluate_one(h3, &doc);
        assert_eq!(r.skip_reason, Some(SkipReason::MissingCells));
    }

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

    #[test]
    fn bad_files_name_what_is_wrong() {
        let base =
            "[[hypothesis]]\nid = \"x\"\nclaim = \"c\"\nscenario = \"s\"\nstrategies = [\"c1\"]\n";
        let cases = [
            (format!("{base}metric = \"nope\"\ncompare = \"<\"\nthreshold = 1\n"), "unknown metric `nope`"),
            (format!("{base}metric = \"failed\"\ncompare = \"<\"\n"), "compare needs a threshold"),
            (format!("{base}metric = \"failed\"\ncompare = \"~\"\nthreshold = 1\n"), "compare"),
            (format!("{base}metric = \"failed\"\ncompare = \"<\"\nthreshold = \"x\"\n"), "threshold must be a number"),
            (format!("{base}metric = \"failed\"\nbetween = [2, 1]\n"), "lo <= hi"),
            (format!("{base}metric = \"failed\"\ncompare = \"<\"\nthreshold = 1\nbetween = [0, 1]\n"), "not both"),
            (format!("{base}metric = \"failed\"\ncompare = \"<\"\nthreshold = 1\ncpus = []\n"), "cpus"),
            (format!("{base}metric = \"failed\"\ncompare = \"<\"\nthreshold = 1\n{base}metric = \"failed\"\ncompare = \"<\"\nthreshold = 1\n"), "used twice"),
        ];
        for (text, needle) in cases {
            let err = parse(&text, "t.toml").unwrap_err().to_string();
            assert!(err.contains(needle), "{needle:?} not in {err:?}");
        }
    }
}
