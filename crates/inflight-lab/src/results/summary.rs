//! The repeats of each cell summarised: median, min and max of every metric (each read from a
//! run as its definition says, `registry.rs`).

use std::collections::{BTreeMap, BTreeSet};

use crate::results::{ClassResult, ClassSummary, Metric, RunResult, Spread, SummaryRow};

/// One summary row per (strategy, scenario, cpus), in the order the cells first appear.
pub fn summarize(runs: &[RunResult]) -> Vec<SummaryRow> {
    let mut order: Vec<(String, String, u64)> = Vec::new();
    let mut groups: BTreeMap<(String, String, u64), Vec<&RunResult>> = BTreeMap::new();
    for run in runs {
        let key = (
            run.strategy.clone(),
            run.scenario.clone(),
            run.cpus.to_bits(),
        );
        if !groups.contains_key(&key) {
            order.push(key.clone());
        }
        groups.entry(key).or_default().push(run);
    }
    order
        .into_iter()
        .map(|key| {
            let group = &groups[&key];
            let mut row = SummaryRow {
                strategy: key.0.clone(),
                scenario: key.1.clone(),
                cpus: f64::from_bits(key.2),
                unlimited: group.iter().any(|r| r.unlimited),
                repeats: group.len() as u32,
                classes: classes(group),
                ..SummaryRow::default()
            };
            for metric in Metric::ALL {
                let values: Vec<f64> = group.iter().map(|r| metric.read(r)).collect();
                *row.get_mut(metric) = Spread::of(&values);
            }
            row
        })
        .collect()
}

/// Each class of the runs' records summarised over the repeats (a run without the class counts
/// as none of its records); a percentile is kept only if every repeat has it.
fn classes(group: &[&RunResult]) -> BTreeMap<String, ClassSummary> {
    let names: BTreeSet<&String> = group.iter().flat_map(|r| r.classes.keys()).collect();
    names
        .into_iter()
        .map(|name| {
            let of: Vec<ClassResult> = group
                .iter()
                .map(|r| r.classes.get(name).cloned().unwrap_or_default())
                .collect();
            let spread =
                |f: &dyn Fn(&ClassResult) -> f64| Spread::of(&of.iter().map(f).collect::<Vec<_>>());
            let percentile = |f: &dyn Fn(&ClassResult) -> Option<f64>| {
                of.iter()
                    .map(f)
                    .collect::<Option<Vec<f64>>>()
                    .map(|v| Spread::of(&v))
            };
            let summary = ClassSummary {
                records: spread(&|c| c.records as f64),
                accepted: spread(&|c| c.accepted as f64),
                accepted_fraction: spread(&|c| c.accepted_fraction()),
                completion_p50_s: percentile(&|c| c.completion_p50_s),
                completion_p99_s: percentile(&|c| c.completion_p99_s),
            };
            (name.clone(), summary)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::results::sample_run as run;

    #[test]
    fn summary_groups_by_strategy_scenario_and_cpus_in_order() {
        let runs = vec![
            run("c1", "healthy", 1.0, 1, 4.0),
            run("c1", "healthy", 2.0, 1, 2.0),
            run("c1", "healthy", 1.0, 2, 8.0),
            run("c1", "healthy", 2.0, 2, 2.2),
            run("c1", "healthy", 1.0, 3, 5.0),
        ];
        let rows = summarize(&runs);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].cpus, rows[0].repeats), (1.0, 3));
        assert_eq!((rows[1].cpus, rows[1].repeats), (2.0, 2));
        assert_eq!(
            rows[0].completion_s,
            Spread {
                median: 5.0,
                min: 4.0,
                max: 8.0
            }
        );
        assert_eq!(rows[0].accepted_per_s.median, 8.0 / 5.0);
        assert!((rows[1].completion_s.median - 2.1).abs() < 1e-12);
        assert_eq!(rows[0].peak_writes_offered.max, 8.0);
        assert_eq!(rows[0].incomplete_fraction.median, 0.2);
        assert!(rows[0].classes.is_empty(), "no classes, none summarised");
    }

    #[test]
    fn classes_are_summarised_apart_and_an_undefined_percentile_stays_undefined() {
        let with = |accepted_s: Vec<f64>, records| {
            let mut r = run("c5", "priority", 1.0, 1, 4.0);
            r.classes
                .insert("interactive".into(), ClassResult::of(records, accepted_s));
            r.classes
                .insert("batch".into(), ClassResult::of(8, vec![1.0, 2.0, 3.0, 4.0]));
            r
        };
        let runs = vec![
            with(vec![0.5, 0.25], 2),
            with(vec![0.75], 2),
            with(vec![0.25, 1.0], 2),
        ];
        let row = &summarize(&runs)[0];
        let interactive = &row.classes["interactive"];
        assert_eq!(interactive.records.median, 2.0);
        assert_eq!(interactive.accepted_fraction.min, 0.5);
        assert_eq!(interactive.accepted_fraction.median, 1.0);
        // p99 of each repeat: 0.5, 0.75, 1.0.
        let p99 = interactive.completion_p99_s.unwrap();
        assert_eq!((p99.min, p99.median, p99.max), (0.5, 0.75, 1.0));
        assert_eq!(row.classes["batch"].completion_p50_s.unwrap().median, 2.0);
        let mut none = runs.clone();
        none[1]
            .classes
            .insert("interactive".into(), ClassResult::of(2, Vec::new()));
        let row = &summarize(&none)[0];
        assert_eq!(row.classes["interactive"].completion_p99_s, None);
        assert_eq!(row.classes["interactive"].accepted.min, 0.0);
    }
}
