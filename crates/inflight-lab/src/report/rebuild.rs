//! A stored results document made whole again for `inflight lab report`: its runs checked, and
//! its summary and hypotheses computed again from them, so the report never shows figures its runs
//! do not hold.

use std::fmt::Write as _;

use crate::hypothesis::{evaluate_one, Hypothesis};
use crate::results::{cpus_words, ResultsDoc, SummaryRow};

/// At most this many problems are listed in an error; the rest are counted.
const LISTED: usize = 10;

/// Why a stored document cannot be reported.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// Its runs contradict each other or its settings ([`ResultsDoc::problems`]).
    #[error("its runs are inconsistent:{}", list(.0))]
    InconsistentRuns(Vec<String>),
    /// Its stored summary has cells, or repeats, that its runs do not.
    #[error("its summary does not match its runs:{}", list(.0))]
    SummaryMismatch(Vec<String>),
}

fn list(items: &[String]) -> String {
    let mut out = String::new();
    for item in items.iter().take(LISTED) {
        let _ = write!(out, "\n  - {item}");
    }
    if items.len() > LISTED {
        let _ = write!(out, "\n  - and {} more", items.len() - LISTED);
    }
    out
}

/// A document rebuilt from its runs, and what changed on the way.
#[derive(Debug, Clone)]
pub struct Rebuilt {
    pub doc: ResultsDoc,
    /// Hypotheses whose outcome differs from the one stored, and stored ones no longer in the
    /// hypotheses file (kept as they were), in words.
    pub changes: Vec<String>,
}

/// `stored` rebuilt from its runs: checked, labelled, summarised again, and the hypotheses it
/// recorded evaluated again from `hypotheses` (the ones preregistered for it; a hypothesis added
/// to the file since is not). A stored summary is only compared with the new one: a cell, or a
/// repeat count, that the runs do not hold refuses the document.
pub fn rebuild(stored: &ResultsDoc, hypotheses: &[Hypothesis]) -> Result<Rebuilt, RebuildError> {
    let problems = stored.problems();
    if !problems.is_empty() {
        return Err(RebuildError::InconsistentRuns(problems));
    }
    let mut doc = ResultsDoc::from_runs(stored.meta.clone(), stored.runs.clone())
        .with_measured(stored.measured.clone());
    if !stored.summary.is_empty() {
        let mismatches = summary_mismatches(&stored.summary, &doc.summary);
        if !mismatches.is_empty() {
            return Err(RebuildError::SummaryMismatch(mismatches));
        }
    }
    let mut changes = Vec::new();
    for recorded in &stored.hypotheses {
        let Some(h) = hypotheses.iter().find(|h| h.id == recorded.id) else {
            changes.push(format!(
                "{} is not in the hypotheses file: kept as recorded ({})",
                recorded.id, recorded.outcome
            ));
            doc.hypotheses.push(recorded.clone());
            continue;
        };
        let now = evaluate_one(h, &doc);
        if now.outcome != recorded.outcome {
            changes.push(format!(
                "{}: {} in the file, {} from its runs",
                recorded.id, recorded.outcome, now.outcome
            ));
        }
        doc.hypotheses.push(now);
    }
    Ok(Rebuilt { doc, changes })
}

/// Cells whose repeats differ between a stored summary and one computed from the runs.
fn summary_mismatches(stored: &[SummaryRow], computed: &[SummaryRow]) -> Vec<String> {
    let same = |a: &SummaryRow, b: &SummaryRow| {
        a.strategy == b.strategy && a.scenario == b.scenario && (a.cpus - b.cpus).abs() < 1e-9
    };
    let name = |r: &SummaryRow| {
        format!(
            "{} {} at {}",
            r.strategy,
            r.scenario,
            cpus_words(r.cpus, !r.unlimited)
        )
    };
    let mut out = Vec::new();
    for s in stored {
        match computed.iter().find(|c| same(s, c)) {
            None => out.push(format!(
                "{}: {} repeats in the summary, no runs",
                name(s),
                s.repeats
            )),
            Some(c) if c.repeats != s.repeats => out.push(format!(
                "{}: {} repeats in the summary, {} runs",
                name(s),
                s.repeats,
                c.repeats
            )),
            Some(_) => {}
        }
    }
    for c in computed {
        if !stored.iter().any(|s| same(s, c)) {
            out.push(format!(
                "{}: {} runs, not in the summary",
                name(c),
                c.repeats
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hypothesis;
    use crate::results::{sample_run as run, HypothesisResult, RunMeta};

    fn doc(runs: Vec<crate::results::RunResult>) -> ResultsDoc {
        let meta = RunMeta {
            records: 10,
            repeats: 2,
            time_scale: 1.0,
            enforcement: inflight_cpu::Enforcement::CgroupV1,
            ..RunMeta::default()
        };
        ResultsDoc::from_runs(meta, runs)
    }

    fn c4_runs() -> Vec<crate::results::RunResult> {
        vec![
            run("c4", "slow-write", 1.0, 1, 5.0),
            run("c4", "slow-write", 1.0, 2, 6.0),
        ]
    }

    #[test]
    fn the_summary_and_hypotheses_come_from_the_runs() {
        let hs = hypothesis::builtin();
        let mut stored = doc(c4_runs());
        // H3: C4 offers at most 6 writes at once. The runs peak at 6 and 7: it fails.
        let recorded = |outcome: &str| HypothesisResult {
            id: "H3".into(),
            outcome: outcome.into(),
            ..HypothesisResult::default()
        };
        stored.hypotheses = vec![recorded("pass")];
        stored.summary[0].peak_writes_offered.max = 6.0;
        let rebuilt = rebuild(&stored, &hs).unwrap();
        assert_eq!(rebuilt.doc.summary[0].peak_writes_offered.max, 7.0);
        let ids: Vec<&str> = rebuilt
            .doc
            .hypotheses
            .iter()
            .map(|h| h.id.as_str())
            .collect();
        assert_eq!(ids, ["H3"], "only the hypotheses the run recorded");
        assert_eq!(rebuilt.doc.hypotheses[0].outcome, "fail");
        assert_eq!(
            rebuilt.changes,
            ["H3: pass in the file, fail from its runs"]
        );

        stored.hypotheses = vec![
            recorded("fail"),
            HypothesisResult {
                id: "H0".into(),
                outcome: "pass".into(),
                ..HypothesisResult::default()
            },
        ];
        let rebuilt = rebuild(&stored, &hs).unwrap();
        assert_eq!(
            rebuilt.changes,
            ["H0 is not in the hypotheses file: kept as recorded (pass)"]
        );
        assert_eq!(rebuilt.doc.hypotheses.len(), 2);
    }

    #[test]
    fn a_summary_the_runs_do_not_hold_is_refused() {
        let mut stored = doc(c4_runs());
        stored.runs.clear();
        let err = rebuild(&stored, &[]).unwrap_err().to_string();
        assert!(
            err.contains("its summary does not match its runs")
                && err.contains("c4 slow-write at 1 CPU: 2 repeats in the summary, no runs"),
            "{err}"
        );
        let mut stored = doc(c4_runs());
        stored.summary.clear();
        assert!(rebuild(&stored, &[]).is_ok(), "no stored summary: computed");
        stored.summary = doc(vec![run("c2", "healthy", 1.0, 1, 1.0)]).summary;
        let err = rebuild(&stored, &[]).unwrap_err().to_string();
        assert!(
            err.contains("c4 slow-write at 1 CPU: 2 runs, not in the summary"),
            "{err}"
        );
    }

    #[test]
    fn inconsistent_runs_are_refused_with_each_problem() {
        let mut runs = c4_runs();
        runs[1].failed += 1;
        runs.push(run("c4", "slow-write", 1.0, 2, 6.0));
        runs.push(run("c2", "slow-write", 1.0, 3, 6.0));
        let err = rebuild(&doc(runs), &[]).unwrap_err().to_string();
        for needle in [
            "its runs are inconsistent:",
            "c4 slow-write repeat 2: 10 records started but",
            "c4 slow-write at 1 CPU repeat 2 appears twice",
            "c2 slow-write at 1 CPU: repeat 3 is outside the settings' 1..=2",
            "c2 slow-write at 1 CPU: 1 of the settings' 2 repeats",
        ] {
            assert!(err.contains(needle), "{needle:?} in {err}");
        }
    }

    #[test]
    fn long_lists_are_cut() {
        let items: Vec<String> = (0..13).map(|i| format!("p{i}")).collect();
        let text = list(&items);
        assert_eq!(text.lines().count(), 1 + LISTED + 1);
        assert!(text.ends_with("- and 3 more"), "{text}");
    }
}
