//! The sentence of last resort: per scenario, the strategy that accepted the most records/s.

use super::cpus_phrase;
use crate::report::{fmt_num, scenarios, strategies, strategy_label};
use crate::results::{ResultsDoc, SummaryRow};

/// When nothing else can be said: per scenario, who accepted the most records/s, and whether
/// writes were refused.
pub(super) fn leaders(doc: &ResultsDoc) -> Vec<String> {
    let order = strategies(doc);
    let mut out = Vec::new();
    for scenario in scenarios(doc) {
        let best = doc
            .summary
            .iter()
            .filter(|r| r.scenario == scenario)
            .max_by(|a, b| {
                a.accepted_per_s
                    .median
                    .total_cmp(&b.accepted_per_s.median)
                    // The first in the run's order wins a tie.
                    .then_with(|| position(&order, b).cmp(&position(&order, a)))
            });
        let Some(best) = best else { continue };
        let others = doc
            .summary
            .iter()
            .filter(|r| r.scenario == scenario)
            .count()
            - 1;
        let refused = if best.write_503s.max == 0.0 {
            "no write refused (503) in any repeat".to_string()
        } else {
            format!(
                "{} writes refused (503) per run (median)",
                fmt_num(best.write_503s.median)
            )
        };
        let who = if others == 0 {
            format!(
                "{} accepts {} records/s {}",
                strategy_label(&best.strategy),
                fmt_num(best.accepted_per_s.median),
                cpus_phrase(best)
            )
        } else {
            format!(
                "{} accepts the most records/s, {} {}",
                strategy_label(&best.strategy),
                fmt_num(best.accepted_per_s.median),
                cpus_phrase(best)
            )
        };
        out.push(format!("In {scenario}, {who}, with {refused}."));
    }
    out
}

fn position(order: &[String], row: &SummaryRow) -> usize {
    order
        .iter()
        .position(|s| *s == row.strategy)
        .unwrap_or(usize::MAX)
}
