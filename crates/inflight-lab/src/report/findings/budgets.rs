//! What budgets told the capacity are worth: C5, adaptive and told nothing, against C4 and C4-64,
//! told the capacity; without C5, what C4's fixed budgets cost against C2.

use super::{fmt_ratio, list, pair, ratio, scenario_phrase};
use crate::report::{fmt_num, scenarios};
use crate::results::ResultsDoc;

/// C5, adaptive and told nothing, against C4 and C4-64, which were told the capacity.
pub(super) fn answer(doc: &ResultsDoc) -> Option<String> {
    // (ratio, scenario) of C5's accepted/s over the other's, per scenario both ran.
    let against = |other: &str| -> Vec<(String, String)> {
        scenarios(doc)
            .iter()
            .filter_map(|scenario| {
                let (c5, o) = pair(doc, scenario, "c5", other)?;
                let r = ratio(c5.accepted_per_s.median, o.accepted_per_s.median)?;
                Some((
                    format!("{}x", fmt_ratio(r)),
                    scenario_phrase(scenario, c5.cpus, c5.unlimited),
                ))
            })
            .collect()
    };
    // `2.06x C4's records/s in healthy, 1.00x in slow-write and 2.29x in slow-enrichment`
    let each = |pairs: &[(String, String)], whose: &str| -> String {
        let items: Vec<String> = pairs
            .iter()
            .enumerate()
            .map(|(i, (r, place))| match i {
                0 => format!("{r} {whose} in {place}"),
                _ => format!("{r} in {place}"),
            })
            .collect();
        list(&items)
    };
    let (c4, c4_64) = (against("c4"), against("c4-64"));
    let told = "C4-64's (told the capacity)";
    let parts = match (c4.is_empty(), c4_64.is_empty()) {
        (true, true) => return None,
        (false, true) => each(&c4, "C4's records/s"),
        (true, false) => each(&c4_64, &format!("{told} records/s")),
        (false, false) => {
            let same_places = c4.iter().map(|p| &p.1).eq(c4_64.iter().map(|p| &p.1));
            let second = if same_places {
                let ratios: Vec<String> = c4_64.iter().map(|p| p.0.clone()).collect();
                format!(
                    "{} those of C4-64, which was told the capacity",
                    list(&ratios)
                )
            } else {
                each(&c4_64, told)
            };
            format!("{}, and {second}", each(&c4, "C4's records/s"))
        }
    };
    let refused: Vec<String> = doc
        .summary
        .iter()
        .filter(|r| r.strategy.eq_ignore_ascii_case("c5") && r.write_503s.max > 0.0)
        .map(|r| {
            let place = scenario_phrase(&r.scenario, r.cpus, r.unlimited);
            if r.write_503s.median > 0.0 {
                format!(
                    "{} a run in {place} (median, at most {})",
                    fmt_num(r.write_503s.median),
                    fmt_num(r.write_503s.max)
                )
            } else {
                // A median of 0: refusals in some repeats only, said as such.
                format!(
                    "none in most repeats of {place}, at most {} in one",
                    fmt_num(r.write_503s.max)
                )
            }
        })
        .collect();
    let writes = if refused.is_empty() {
        "with no write refused (503) in any repeat".to_string()
    } else {
        format!("with writes refused (503): {}", list(&refused))
    };
    Some(format!(
        "Told nothing about capacity, C5 accepts {parts}, {writes}."
    ))
}

/// Without C5: what C4's fixed budgets cost against C2 where nothing is overloaded.
pub(super) fn fixed_budget_cost(doc: &ResultsDoc) -> Option<String> {
    let (c4, c2) = pair(doc, "healthy", "c4", "c2")?;
    let (a, b) = (c4.accepted_per_s.median, c2.accepted_per_s.median);
    let r = ratio(a, b)?;
    let place = scenario_phrase("healthy", c4.cpus, c4.unlimited);
    Some(if r < 1.0 {
        format!(
            "In {place}, C4's fixed budgets give up {:.1}% of C2's accepted/s ({} against {}).",
            (1.0 - r) * 100.0,
            fmt_num(a),
            fmt_num(b)
        )
    } else {
        format!(
            "In {place}, C4 accepts {}x C2's records/s ({} against {}).",
            fmt_ratio(r),
            fmt_num(a),
            fmt_num(b)
        )
    })
}
