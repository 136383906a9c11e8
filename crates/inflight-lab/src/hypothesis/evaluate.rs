//! A hypothesis evaluated against a run's summary: each cell's value (or its ratio to, or
//! difference from, another cell's) put to the test, at time scale 1 where the threshold is in
//! seconds or per second.

use super::{fmt_num, Hypothesis, Test, Threshold, EPSILON};
use crate::results::{cpus_words, HypothesisResult, ResultsDoc, SkipReason, SummaryRow};

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
    use super::super::file::parse_one as one;
    use super::*;
    use crate::hypothesis::{builtin, parse};
    use crate::results::Spread;

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
}
