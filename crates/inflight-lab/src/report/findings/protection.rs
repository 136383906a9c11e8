//! Who protects the system of record: the strategies that drew no 503 in any repeat, against those
//! that did, and at what rate.

use super::{fmt_ratio, list, ratio, scenario_phrase};
use crate::report::{fmt_num, scenarios, strategy_label};
use crate::results::{ResultsDoc, SummaryRow};

/// The share of its writes a strategy must have had refused (median) before a sentence says the
/// others, which had none refused, protect the system of record: below it, a refusal is a tail
/// event (C2 in healthy), and the sentence only gives the counts.
const OVERLOAD_SHARE: f64 = 0.1;

/// The least share of the best refused strategy's accepted/s at which a strategy that drew no
/// 503 is said to protect the system of record (rather than to have sent it little).
const PROTECT_RATE_SHARE: f64 = 0.8;

/// Per scenario and CPU count where some strategy drew 503s: which strategies drew none in any
/// repeat, against which did, and at what rate.
pub(super) fn protection(doc: &ResultsDoc) -> Vec<String> {
    let mut out = Vec::new();
    for scenario in scenarios(doc) {
        let rows: Vec<&SummaryRow> = doc
            .summary
            .iter()
            .filter(|r| r.scenario == scenario)
            .collect();
        let mut groups: Vec<f64> = rows.iter().map(|r| r.cpus).collect();
        groups.sort_by(f64::total_cmp);
        groups.dedup();
        for cpus in groups {
            let group: Vec<&&SummaryRow> = rows.iter().filter(|r| r.cpus == cpus).collect();
            // A median of 0 with a 503 in some repeat is neither: no claim is made about it.
            let refused: Vec<&&SummaryRow> = group
                .iter()
                .copied()
                .filter(|r| r.write_503s.median > 0.0)
                .collect();
            let clean: Vec<&&SummaryRow> = group
                .iter()
                .copied()
                .filter(|r| r.write_503s.max == 0.0)
                .collect();
            if refused.is_empty() {
                continue;
            }
            let unlimited = group.iter().any(|r| r.unlimited);
            let place = scenario_phrase(&scenario, cpus, unlimited);
            let refused_counts: Vec<String> = refused
                .iter()
                .map(|r| {
                    format!(
                        "{} for {}",
                        fmt_num(r.write_503s.median),
                        strategy_label(&r.strategy)
                    )
                })
                .collect();
            if clean.is_empty() {
                out.push(format!(
                    "In {place}, no strategy kept the system of record from refusing writes: 503s per run (median) were {}.",
                    list(&refused_counts)
                ));
                continue;
            }
            let clean_names: Vec<String> =
                clean.iter().map(|r| strategy_label(&r.strategy)).collect();
            if !refused
                .iter()
                .any(|r| refused_share(doc, r) >= OVERLOAD_SHARE)
            {
                out.push(format!(
                    "In {place}, the system of record refused a few writes: {} (503s per run, medians); {} drew none in any repeat.",
                    list(&refused_counts),
                    list(&clean_names)
                ));
                continue;
            }
            let best = refused
                .iter()
                .max_by(|a, b| a.accepted_per_s.median.total_cmp(&b.accepted_per_s.median))
                .expect("refused is not empty");
            let share = |r: &SummaryRow| ratio(r.accepted_per_s.median, best.accepted_per_s.median);
            // Drawing no 503 by doing little (a starved strategy) is not protection: only a
            // strategy that kept most of the rate of the best refused one is said to protect.
            let (protect, slow): (Vec<&&SummaryRow>, Vec<&&SummaryRow>) = clean
                .iter()
                .copied()
                .partition(|r| share(r).is_some_and(|s| s >= PROTECT_RATE_SHARE));
            let at = |rows: &[&&SummaryRow]| -> String {
                let ratios: Vec<String> = rows
                    .iter()
                    .filter_map(|r| share(r))
                    .map(|r| format!("{}x", fmt_ratio(r)))
                    .collect();
                if ratios.len() == rows.len() {
                    format!(
                        ", at {} {}'s accepted/s",
                        list(&ratios),
                        strategy_label(&best.strategy)
                    )
                } else {
                    String::new()
                }
            };
            let names = |rows: &[&&SummaryRow]| -> Vec<String> {
                rows.iter().map(|r| strategy_label(&r.strategy)).collect()
            };
            if protect.is_empty() {
                out.push(format!(
                    "In {place}, {} drew no 503 in any repeat, against {} (medians per run), but only{}.",
                    list(&names(&slow)),
                    list(&refused_counts),
                    at(&slow).trim_start_matches(','),
                ));
                continue;
            }
            let verb = if protect.len() == 1 {
                "protects"
            } else {
                "protect"
            };
            let also = if slow.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} drew none too, but only{}",
                    list(&names(&slow)),
                    at(&slow).trim_start_matches(',')
                )
            };
            out.push(format!(
                "In {place}, {} {verb} the system of record: no write refused (503) in any repeat, against {} (medians per run){}{also}.",
                list(&names(&protect)),
                list(&refused_counts),
                at(&protect),
            ));
        }
    }
    out
}

/// The share of a row's writes refused (503), median over its repeats; from the run's records
/// for documents written before the summary kept it.
fn refused_share(doc: &ResultsDoc, row: &SummaryRow) -> f64 {
    if row.write_503_fraction.median > 0.0 || doc.meta.records == 0 {
        row.write_503_fraction.median
    } else {
        row.write_503s.median / doc.meta.records as f64
    }
}
