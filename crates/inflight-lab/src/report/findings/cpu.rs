//! The seed's problem: C1, the CPU-derived default, against C2 and against itself at more CPUs.

use super::{cpu_counts, cpus_phrase, fmt_ratio, pair, ratio};
use crate::hypothesis::find_row;
use crate::report::{cpu_limited, fmt_num, scenarios};
use crate::results::{cpus_words, ResultsDoc};

/// What C2/C1 accepted/s must reach before a sentence says the CPU-derived default starves the
/// work: below it, the two are only compared.
const STARVED_RATIO: f64 = 2.0;

/// The share of the ideal speed-up (2x for twice the CPUs) C1 must reach before a sentence says
/// its time follows the CPU quota; H1 asks 1.8x of 2x.
const FOLLOWS_SHARE: f64 = 0.9;

/// C1, the CPU-derived default, against C2 and against itself at more CPUs: the seed's problem.
pub(super) fn cpu_default(doc: &ResultsDoc) -> Option<String> {
    let names = scenarios(doc);
    let ran = |s: &&String| !cpu_counts(doc, s, "c1").is_empty();
    let scenario = names
        .iter()
        .filter(ran)
        .find(|s| *s == "healthy")
        .or_else(|| names.iter().find(ran))?;
    let mut clauses = Vec::new();
    let mut starved = false;
    if let Some((c1, c2)) = pair(doc, scenario, "c1", "c2") {
        let (a, b) = (c1.accepted_per_s.median, c2.accepted_per_s.median);
        if let Some(r) = ratio(b, a) {
            starved = r >= STARVED_RATIO;
            clauses.push(format!(
                "C1 (records in flight = its CPU count) accepts {} records/s {} and C2 {}/s, {}x as many",
                fmt_num(a),
                cpus_phrase(c1),
                fmt_num(b),
                fmt_ratio(r)
            ));
        }
    }
    let counts = cpu_counts(doc, scenario, "c1");
    if let (true, [lo, .., hi]) = (cpu_limited(doc), counts.as_slice()) {
        let rows = (
            find_row(doc, scenario, "c1", *lo),
            find_row(doc, scenario, "c1", *hi),
        );
        if let (Some(slow), Some(fast)) = rows {
            let (a, b) = (slow.completion_s.median, fast.completion_s.median);
            if let Some(r) = ratio(a, b) {
                let subject = if clauses.is_empty() {
                    "C1's completion time (records in flight = its CPU count)"
                } else {
                    "its completion time"
                };
                let verb = if r >= FOLLOWS_SHARE * hi / lo {
                    "follows the CPU quota,"
                } else {
                    "is"
                };
                clauses.push(format!(
                    "{subject} {verb} {} s at {} and {} s at {} ({}x)",
                    fmt_num(a),
                    cpus_words(*lo, true),
                    fmt_num(b),
                    cpus_words(*hi, true),
                    fmt_ratio(r)
                ));
            }
        }
    }
    if clauses.is_empty() {
        return None;
    }
    let (lead, in_) = if starved {
        (
            "The CPU-derived default starves this I/O-bound work: ",
            "in",
        )
    } else {
        ("", "In")
    };
    Some(format!("{lead}{in_} {scenario}, {}.", clauses.join("; ")))
}
