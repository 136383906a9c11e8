//! What a run found, in a few sentences built from its medians: what the terminal, `summary.md`
//! and `index.html` open with.
//!
//! Each sentence is about cells the run has, and says only what its numbers bear out: a strategy
//! "protects" the system of record only if it drew no 503 in any repeat while another had at
//! least a tenth of its writes refused; C1 "follows the CPU quota" only if its time scales with
//! the CPUs. Otherwise the sentence gives the numbers alone. Numbers are the summary's medians,
//! written as the tables write them; ratios are of medians.
//!
//! Each kind of sentence is built in a file of its own: `cpu` (the CPU-derived default),
//! `protection` (who protects the system of record), `budgets` (budgets told the capacity against
//! an adaptive one) and `leaders` (when nothing else can be said). This file orders them, and
//! writes the lead line and the hypotheses' sentence.

use super::table::{hypotheses_tally, lacks_cells};
use super::{cpu_limited, fmt_num, scale_note, wrap};
use crate::hypothesis::find_row;
use crate::results::{cpus_words, ResultsDoc, SummaryRow};

mod budgets;
mod cpu;
mod leaders;
mod protection;

use self::budgets::{answer, fixed_budget_cost};
use self::cpu::cpu_default;
use self::leaders::leaders;
use self::protection::protection;

/// Failed hypotheses named in the summary; more are counted.
const NAMED_FAILURES: usize = 4;

/// The sentences, in the order they are shown; empty when the run has no summary rows.
pub fn findings(doc: &ResultsDoc) -> Vec<String> {
    if doc.summary.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    out.extend(cpu_default(doc));
    out.extend(protection(doc));
    match answer(doc) {
        Some(sentence) => out.push(sentence),
        None => out.extend(fixed_budget_cost(doc)),
    }
    if out.is_empty() {
        out.extend(leaders(doc));
    }
    out.extend(hypotheses(doc));
    out
}

/// The line above the sentences: what their numbers are.
pub(crate) fn findings_lead(doc: &ResultsDoc) -> String {
    let repeats = doc.summary.iter().map(|r| r.repeats).max().unwrap_or(0);
    let over = if repeats == 1 {
        "1 repeat".to_string()
    } else {
        format!("{repeats} repeats")
    };
    let mut lead = format!("Medians over {over}");
    if doc.meta.partial {
        lead.push_str(&format!(
            ", from the {} of {} planned runs that finished",
            doc.runs.len(),
            doc.meta.runs_planned
        ));
    }
    if scale_note(doc).is_some() {
        lead.push_str(&format!(
            "; times scaled by {s}, so rates are about {r}x and seconds {s}x a full-time run's",
            s = fmt_num(doc.meta.time_scale),
            r = fmt_num(1.0 / doc.meta.time_scale)
        ));
    }
    if !cpu_limited(doc) {
        lead.push_str("; no CPU limit was enforced");
    }
    if doc.meta.replicas > 1 {
        lead.push_str(&format!(
            "; each run split between {} replicas",
            doc.meta.replicas
        ));
    }
    lead.push('.');
    lead
}

/// The findings for the terminal: a heading, the lead line, and one wrapped item per sentence, at
/// most `width` characters wide; empty when there are none.
pub(crate) fn findings_text(doc: &ResultsDoc, width: usize) -> String {
    let sentences = findings(doc);
    if sentences.is_empty() {
        return String::new();
    }
    let mut out = String::from("What this run found\n");
    out.push_str(&wrap(&findings_lead(doc), width, "", 0));
    for s in &sentences {
        out.push_str(&wrap(s, width, "- ", 2));
    }
    out
}

/// How a row's CPUs read in a sentence: `at 1 CPU`, or `with no CPU limit`.
fn cpus_phrase(row: &SummaryRow) -> String {
    if row.unlimited {
        "with no CPU limit".to_string()
    } else {
        format!("at {}", cpus_words(row.cpus, true))
    }
}

/// `healthy`, or `healthy at 2 CPUs` for cells at another CPU count than 1.
fn scenario_phrase(scenario: &str, cpus: f64, unlimited: bool) -> String {
    if unlimited || (cpus - 1.0).abs() < 1e-9 {
        scenario.to_string()
    } else {
        format!("{scenario} at {}", cpus_words(cpus, true))
    }
}

/// The CPU counts `strategy` ran at in `scenario`, lowest first.
fn cpu_counts(doc: &ResultsDoc, scenario: &str, strategy: &str) -> Vec<f64> {
    let mut cpus: Vec<f64> = doc
        .summary
        .iter()
        .filter(|r| r.scenario == scenario && r.strategy.eq_ignore_ascii_case(strategy))
        .map(|r| r.cpus)
        .collect();
    cpus.sort_by(f64::total_cmp);
    cpus
}

/// The rows of `a` and `b` in `scenario` at the lowest CPU count both ran at.
fn pair<'a>(
    doc: &'a ResultsDoc,
    scenario: &str,
    a: &str,
    b: &str,
) -> Option<(&'a SummaryRow, &'a SummaryRow)> {
    cpu_counts(doc, scenario, a).into_iter().find_map(|cpus| {
        Some((
            find_row(doc, scenario, a, cpus)?,
            find_row(doc, scenario, b, cpus)?,
        ))
    })
}

/// `a / b`, if it is a number.
fn ratio(a: f64, b: f64) -> Option<f64> {
    let r = a / b;
    (b != 0.0 && r.is_finite()).then_some(r)
}

/// `a`, `a and b`, `a, b and c`.
fn list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// A ratio as the sentences write it: `2.06`, `1.00`, `29`.
fn fmt_ratio(r: f64) -> String {
    if r >= 10.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.2}")
    }
}

/// The hypotheses' outcomes, the failures named.
fn hypotheses(doc: &ResultsDoc) -> Option<String> {
    if doc.hypotheses.is_empty() {
        return None;
    }
    let failed: Vec<&str> = doc
        .hypotheses
        .iter()
        .filter(|h| h.outcome == "fail")
        .map(|h| h.id.as_str())
        .collect();
    let named = if failed.is_empty() {
        String::new()
    } else {
        let mut ids: Vec<String> = failed
            .iter()
            .take(NAMED_FAILURES)
            .map(|s| s.to_string())
            .collect();
        if failed.len() > NAMED_FAILURES {
            ids.push(format!("{} more", failed.len() - NAMED_FAILURES));
        }
        format!(
            "; failed: {} (a failed hypothesis is a finding)",
            list(&ids)
        )
    };
    let tally = hypotheses_tally(doc);
    if !doc.hypotheses.iter().any(|h| !lacks_cells(h)) {
        return Some(match doc.hypotheses.len() {
            1 => "The one preregistered hypothesis does not apply to this run's cells.".into(),
            n => format!("None of the {n} preregistered hypotheses apply to this run's cells."),
        });
    }
    Some(format!("Preregistered hypotheses: {tally}{named}."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::strategy_label;
    use crate::results::{sample_run, HypothesisResult, RunMeta, SkipReason, Spread};

    fn spread(median: f64, min: f64, max: f64) -> Spread {
        Spread { median, min, max }
    }

    /// A summary row: accepted/s, completion s and write 503s as (median, max); every repeat
    /// alike otherwise.
    fn row(
        strategy: &str,
        scenario: &str,
        cpus: f64,
        accepted: f64,
        completion: f64,
        (refused, refused_max): (f64, f64),
    ) -> SummaryRow {
        SummaryRow {
            strategy: strategy.into(),
            scenario: scenario.into(),
            cpus,
            repeats: 5,
            accepted_per_s: spread(accepted, accepted * 0.98, accepted * 1.02),
            completion_s: spread(completion, completion, completion),
            write_503s: spread(refused, 0.0, refused_max),
            ..SummaryRow::default()
        }
    }

    fn doc(summary: Vec<SummaryRow>) -> ResultsDoc {
        ResultsDoc {
            meta: RunMeta {
                time_scale: 1.0,
                repeats: 5,
                records: 200,
                enforcement: inflight_cpu::Enforcement::CgroupV1,
                ..RunMeta::default()
            },
            summary,
            ..ResultsDoc::default()
        }
    }

    /// The default matrix with the medians of the kept full and adaptive runs.
    fn default_run() -> ResultsDoc {
        let none = (0.0, 0.0);
        doc(vec![
            row("c1", "healthy", 1.0, 2.45, 81.66, none),
            row("c1", "healthy", 2.0, 4.85, 41.26, none),
            row("c2", "healthy", 1.0, 71.07, 2.81, (0.0, 2.0)),
            row("c3", "healthy", 1.0, 67.69, 2.95, none),
            row("c4", "healthy", 1.0, 59.5, 3.36, none),
            row("c4-64", "healthy", 1.0, 121.0, 1.65, none),
            row("c5", "healthy", 1.0, 122.3, 1.63, none),
            row("c2", "slow-write", 1.0, 34.78, 3.85, (68.0, 70.0)),
            row("c3", "slow-write", 1.0, 34.43, 4.06, (58.0, 64.0)),
            row("c4", "slow-write", 1.0, 36.05, 5.55, none),
            row("c4-64", "slow-write", 1.0, 36.3, 5.5, none),
            row("c5", "slow-write", 1.0, 36.0, 5.55, none),
            row("c2", "slow-enrichment", 1.0, 7.49, 26.71, none),
            row("c3", "slow-enrichment", 1.0, 7.02, 28.49, none),
            row("c4", "slow-enrichment", 1.0, 5.83, 34.32, none),
            row("c4-64", "slow-enrichment", 1.0, 13.34, 15.0, none),
            row("c5", "slow-enrichment", 1.0, 13.48, 15.0, none),
        ])
    }

    #[test]
    fn a_default_run_states_the_problem_and_the_answer_from_its_medians() {
        let found = findings(&default_run());
        assert_eq!(
            found,
            [
                "The CPU-derived default starves this I/O-bound work: in healthy, C1 (records in flight = its CPU count) accepts 2.45 records/s at 1 CPU and C2 71.07/s, 29x as many; its completion time follows the CPU quota, 81.66 s at 1 CPU and 41.26 s at 2 CPUs (1.98x).",
                "In slow-write, C4, C4-64 and C5 protect the system of record: no write refused (503) in any repeat, against 68 for C2 and 58 for C3 (medians per run), at 1.04x, 1.04x and 1.04x C2's accepted/s.",
                "Told nothing about capacity, C5 accepts 2.06x C4's records/s in healthy, 1.00x in slow-write and 2.31x in slow-enrichment, and 1.01x, 0.99x and 1.01x those of C4-64, which was told the capacity, with no write refused (503) in any repeat.",
            ]
        );
        let lead = findings_lead(&default_run());
        assert_eq!(lead, "Medians over 5 repeats.");
    }

    #[test]
    fn a_strategy_that_drew_503s_is_never_said_to_protect() {
        let mut d = default_run();
        // C4 refused writes in slow-write; C4-64 only in one repeat (median 0).
        for r in &mut d.summary {
            match (r.strategy.as_str(), r.scenario.as_str()) {
                ("c4", "slow-write") => r.write_503s = spread(3.0, 1.0, 5.0),
                ("c4-64", "slow-write") => r.write_503s = spread(0.0, 0.0, 1.0),
                _ => {}
            }
        }
        let found = findings(&d);
        let slow_write = found
            .iter()
            .find(|s| s.starts_with("In slow-write"))
            .unwrap();
        assert_eq!(
            slow_write,
            "In slow-write, C5 protects the system of record: no write refused (503) in any repeat, against 68 for C2, 58 for C3 and 3 for C4 (medians per run), at 1.00x C4's accepted/s."
        );
        // Every strategy refused: none protects.
        for r in &mut d.summary {
            if r.scenario == "slow-write" {
                r.write_503s = spread(2.0, 1.0, 4.0);
            }
        }
        let found = findings(&d);
        assert!(!found.iter().any(|s| s.contains("protect")), "{found:#?}");
        assert!(
            found.contains(&"In slow-write, no strategy kept the system of record from refusing writes: 503s per run (median) were 2 for C2, 2 for C3, 2 for C4, 2 for C4-64 and 2 for C5.".to_string()),
            "{found:#?}"
        );
        assert!(
            found.iter().any(|s| s.ends_with(
                "with writes refused (503): 2 a run in slow-write (median, at most 4)."
            )),
            "C5's own sentence says so: {found:#?}"
        );
    }

    #[test]
    fn refusals_in_some_repeats_only_are_said_as_such() {
        let mut d = default_run();
        for r in &mut d.summary {
            if (r.strategy.as_str(), r.scenario.as_str()) == ("c5", "slow-write") {
                r.write_503s = spread(0.0, 0.0, 2.0);
            }
        }
        let found = findings(&d);
        assert!(
            found.iter().any(|s| s.starts_with("Told nothing about capacity")
                && s.ends_with("with writes refused (503): none in most repeats of slow-write, at most 2 in one.")),
            "{found:#?}"
        );
    }

    #[test]
    fn drawing_no_503_by_sending_little_is_not_protection() {
        let none = (0.0, 0.0);
        // C1 at 1 CPU in slow-write: no 503, because it has one record in flight.
        let d = doc(vec![
            row("c1", "slow-write", 1.0, 2.45, 81.7, none),
            row("c2", "slow-write", 1.0, 34.78, 3.85, (68.0, 70.0)),
            row("c4", "slow-write", 1.0, 36.05, 5.55, none),
        ]);
        let found = findings(&d);
        let slow_write = found
            .iter()
            .find(|s| s.starts_with("In slow-write"))
            .unwrap();
        assert_eq!(
            slow_write,
            "In slow-write, C4 protects the system of record: no write refused (503) in any repeat, against 68 for C2 (medians per run), at 1.04x C2's accepted/s; C1 drew none too, but only at 0.07x C2's accepted/s."
        );
        let d = doc(vec![
            row("c1", "slow-write", 1.0, 2.45, 81.7, none),
            row("c2", "slow-write", 1.0, 34.78, 3.85, (68.0, 70.0)),
        ]);
        let found = findings(&d);
        assert!(!found.iter().any(|s| s.contains("protect")), "{found:#?}");
        assert!(
            found.contains(&"In slow-write, C1 drew no 503 in any repeat, against 68 for C2 (medians per run), but only at 0.07x C2's accepted/s.".to_string()),
            "{found:#?}"
        );
    }

    #[test]
    fn a_few_refused_writes_are_counted_without_a_claim() {
        let mut d = default_run();
        for r in &mut d.summary {
            if (r.strategy.as_str(), r.scenario.as_str()) == ("c3", "healthy") {
                r.write_503s = spread(2.0, 0.0, 3.0);
            }
        }
        let found = findings(&d);
        // 2 of 200 writes: a tail event, not an overload that the others were kept from.
        assert_eq!(
            found[1],
            "In healthy, the system of record refused a few writes: 2 for C3 (503s per run, medians); C1, C4, C4-64 and C5 drew none in any repeat."
        );
        assert!(found[2].starts_with("In slow-write, C4, C4-64 and C5 protect"));
    }

    #[test]
    fn numbers_that_contradict_a_claim_leave_only_the_numbers() {
        let none = (0.0, 0.0);
        // C1 as fast as C2, its time not following the quota; C5 slower than C4.
        let d = doc(vec![
            row("c1", "healthy", 1.0, 60.0, 3.4, none),
            row("c1", "healthy", 2.0, 61.0, 3.3, none),
            row("c2", "healthy", 1.0, 70.0, 2.9, none),
            row("c4", "healthy", 1.0, 59.0, 3.4, none),
            row("c5", "healthy", 1.0, 29.5, 6.8, none),
        ]);
        let found = findings(&d);
        assert_eq!(
            found[0],
            "In healthy, C1 (records in flight = its CPU count) accepts 60 records/s at 1 CPU and C2 70/s, 1.17x as many; its completion time is 3.4 s at 1 CPU and 3.3 s at 2 CPUs (1.03x)."
        );
        assert_eq!(
            found[1],
            "Told nothing about capacity, C5 accepts 0.50x C4's records/s in healthy, with no write refused (503) in any repeat."
        );
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(!found
            .iter()
            .any(|s| s.contains("starves") || s.contains("follows")));
    }

    #[test]
    fn without_a_cpu_limit_nothing_is_said_about_cpu_counts() {
        let mut d = default_run();
        d.meta.enforcement = inflight_cpu::Enforcement::None;
        d.summary.iter_mut().for_each(|r| r.unlimited = true);
        let found = findings(&d);
        assert_eq!(
            found[0],
            "The CPU-derived default starves this I/O-bound work: in healthy, C1 (records in flight = its CPU count) accepts 2.45 records/s with no CPU limit and C2 71.07/s, 29x as many."
        );
        assert!(findings_lead(&d).ends_with("; no CPU limit was enforced."));
        d.meta.replicas = 3;
        assert!(findings_lead(&d).ends_with("; each run split between 3 replicas."));
    }

    #[test]
    fn a_run_of_one_cell_says_what_that_cell_did() {
        let d = doc(vec![row("c2", "healthy", 1.0, 71.07, 2.81, (0.0, 2.0))]);
        assert_eq!(
            findings(&d),
            ["In healthy, C2 accepts 71.07 records/s at 1 CPU, with 0 writes refused (503) per run (median)."]
        );
        let d = doc(vec![
            row("c2", "slow-enrichment", 2.0, 7.0, 27.0, (0.0, 0.0)),
            row("mine", "slow-enrichment", 2.0, 9.0, 22.0, (0.0, 0.0)),
        ]);
        assert_eq!(
            findings(&d),
            ["In slow-enrichment, MINE accepts the most records/s, 9 at 2 CPUs, with no write refused (503) in any repeat."]
        );
        assert!(findings(&ResultsDoc::default()).is_empty());
    }

    /// The strategy labels a sentence names: `C4`, `C4-64`, `MINE`...
    fn named(sentence: &str, labels: &[String]) -> Vec<String> {
        let words: Vec<&str> = sentence
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .collect();
        labels
            .iter()
            .filter(|l| {
                words
                    .iter()
                    .any(|w| w == l || w.strip_suffix("-s") == Some(l))
            })
            .cloned()
            .collect()
    }

    #[test]
    fn every_subset_of_the_default_run_names_only_what_ran() {
        let full = default_run();
        let all: Vec<String> = ["c1", "c2", "c3", "c4", "c4-64", "c5"]
            .map(String::from)
            .to_vec();
        let labels: Vec<String> = all.iter().map(|s| strategy_label(s)).collect();
        let scenario_names = ["healthy", "slow-write", "slow-enrichment"];
        for strategies_mask in 1..(1u32 << all.len()) {
            for scenarios_mask in 1..(1u32 << scenario_names.len()) {
                let keep = |r: &SummaryRow| {
                    let s = all.iter().position(|s| *s == r.strategy).unwrap();
                    let c = scenario_names
                        .iter()
                        .position(|c| *c == r.scenario)
                        .unwrap();
                    strategies_mask & (1 << s) != 0 && scenarios_mask & (1 << c) != 0
                };
                let mut d = full.clone();
                d.summary.retain(keep);
                if d.summary.is_empty() {
                    continue;
                }
                let found = findings(&d);
                assert!(!found.is_empty(), "something is said");
                let ran: Vec<String> = d
                    .summary
                    .iter()
                    .map(|r| strategy_label(&r.strategy))
                    .collect();
                for sentence in &found {
                    for label in named(sentence, &labels) {
                        assert!(ran.contains(&label), "{label} did not run: {sentence}");
                    }
                    for scenario in scenario_names {
                        if sentence.contains(&format!(" {scenario}")) {
                            assert!(
                                d.summary.iter().any(|r| r.scenario == scenario),
                                "{scenario} did not run: {sentence}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_hypotheses_are_counted_and_the_failures_named() {
        let mut d = default_run();
        let h = |id: &str, outcome: &str, skip: Option<SkipReason>| HypothesisResult {
            id: id.into(),
            outcome: outcome.into(),
            skip_reason: skip,
            ..HypothesisResult::default()
        };
        d.hypotheses = vec![
            h("H1", "pass", None),
            h("H7", "fail", None),
            h("H17", "fail", None),
            h("H12", "skipped", Some(SkipReason::MissingCells)),
        ];
        let found = findings(&d);
        assert_eq!(
            found.last().unwrap(),
            "Preregistered hypotheses: 1 pass, 2 fail, 0 skipped (of the 3 that apply to this run's cells; 1 more do not); failed: H7 and H17 (a failed hypothesis is a finding)."
        );
        d.hypotheses.drain(..3);
        assert_eq!(
            findings(&d).last().unwrap(),
            "The one preregistered hypothesis does not apply to this run's cells."
        );
    }

    #[test]
    fn the_terminal_text_opens_with_the_findings_within_its_width() {
        let mut run = sample_run("c2", "healthy", 1.0, 1, 0.5);
        run.write_503s = 0;
        let d = ResultsDoc::from_runs(
            RunMeta {
                time_scale: 0.2,
                repeats: 1,
                records: 10,
                enforcement: inflight_cpu::Enforcement::CgroupV2,
                ..RunMeta::default()
            },
            vec![run],
        );
        let text = findings_text(&d, 60);
        assert!(
            text.starts_with("What this run found\nMedians over 1 repeat; times scaled by 0.2,"),
            "{text}"
        );
        assert!(
            text.contains("\n- In healthy, C2 accepts 16 records/s at 1 CPU, with no\n  write"),
            "{text}"
        );
        assert!(text.lines().all(|l| l.chars().count() <= 60), "{text}");
    }
}
