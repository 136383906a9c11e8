//! A run split between replicas (`lab run --replicas N`): N runner processes, each in its own CPU
//! quota, against one sim, as N replicas of a service share its dependencies. Here: which records
//! each replica takes, and how their results make the run's one result.

use std::collections::BTreeMap;

use crate::results::{ClassResult, RunResult, Timeline};

/// The records one replica processes: ids `first_id .. first_id + records`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    pub first_id: u64,
    pub records: u64,
}

/// Splits `records` between `replicas` as evenly as they go, in consecutive id ranges; the first
/// `records % replicas` replicas take one more. Replicas left without a record are left out.
pub fn shares(records: u64, replicas: u32) -> Vec<Share> {
    let n = u64::from(replicas.max(1));
    let mut first_id = 0;
    (0..n)
        .map(|i| {
            let records = records / n + u64::from(i < records % n);
            let share = Share { first_id, records };
            first_id += records;
            share
        })
        .filter(|s| s.records > 0)
        .collect()
}

/// What the sim saw of a run, where the replicas' own counts cannot simply be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimPeaks {
    /// Most enrichment calls inside the enrichment API at once.
    pub enrichment: u64,
    /// Most writes inside the system of record at once.
    pub writes: u64,
}

/// One result from the replicas' results: counts added up, the run as long as its slowest
/// replica, peaks of calls in flight as the sim measured them (a sum of each replica's peak would
/// count peaks that never met), timelines added sample by sample, each class's percentiles
/// taken again over all its accepted records. One replica's result is returned as it is. The
/// result keeps no completion times ([`RunResult::class_completions_s`]).
pub fn merge(mut parts: Vec<RunResult>, sim: SimPeaks) -> RunResult {
    if parts.len() == 1 {
        let mut only = parts.pop().expect("one part");
        only.replicas = 1;
        only.class_completions_s.clear();
        return only;
    }
    let classes = merge_classes(&mut parts);
    let replicas = parts.len() as u32;
    let mut iter = parts.into_iter();
    let mut run = iter.next().unwrap_or_default();
    for part in iter {
        run.records += part.records;
        run.complete += part.complete;
        run.incomplete += part.incomplete;
        run.rejected += part.rejected;
        run.failed += part.failed;
        for (kind, n) in part.failed_by_kind {
            *run.failed_by_kind.entry(kind).or_default() += n;
        }
        run.completion_s = run.completion_s.max(part.completion_s);
        run.write_503s += part.write_503s;
        run.enrichment_timeouts += part.enrichment_timeouts;
        run.enrichment_429s += part.enrichment_429s;
        run.enrichment_calls += part.enrichment_calls;
        run.write_calls += part.write_calls;
        run.enrichment_retries += part.enrichment_retries;
        run.enrichment_retries_denied += part.enrichment_retries_denied;
        run.write_retries += part.write_retries;
        run.write_retries_denied += part.write_retries_denied;
        run.runner_available_parallelism = run
            .runner_available_parallelism
            .max(part.runner_available_parallelism);
        add_timeline(&mut run.timeline, &part.timeline);
    }
    let accepted = run.complete + run.incomplete;
    run.accepted_per_s = if run.completion_s > 0.0 {
        accepted as f64 / run.completion_s
    } else {
        0.0
    };
    run.peak_enrichment_in_flight = sim.enrichment;
    run.peak_writes_in_flight = sim.writes;
    run.replicas = replicas;
    run.classes = classes;
    run.class_completions_s.clear();
    run
}

/// Each class's records across the replicas, its percentiles over all their accepted records'
/// completion times (taken out of the parts).
fn merge_classes(parts: &mut [RunResult]) -> BTreeMap<String, ClassResult> {
    let mut all: BTreeMap<String, (u64, Vec<f64>)> = BTreeMap::new();
    for part in parts.iter_mut() {
        for (name, class) in &part.classes {
            all.entry(name.clone()).or_default().0 += class.records;
        }
        for (name, times) in std::mem::take(&mut part.class_completions_s) {
            all.entry(name).or_default().1.extend(times);
        }
    }
    all.into_iter()
        .map(|(name, (records, times))| (name, ClassResult::of(records, times)))
        .collect()
}

fn add_timeline(sum: &mut Timeline, part: &Timeline) {
    for (a, b) in [
        (&mut sum.enrichment, &part.enrichment),
        (&mut sum.records, &part.records),
        (&mut sum.enrichment_limit, &part.enrichment_limit),
        (&mut sum.records_limit, &part.records_limit),
    ] {
        // A replica that ended early adds nothing from then on.
        if a.len() < b.len() {
            a.resize(b.len(), 0);
        }
        for (x, y) in a.iter_mut().zip(b) {
            *x = x.saturating_add(*y);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::sample_run;

    #[test]
    fn records_are_split_evenly_in_consecutive_ranges() {
        let s = shares(200, 3);
        assert_eq!(
            s,
            vec![
                Share {
                    first_id: 0,
                    records: 67
                },
                Share {
                    first_id: 67,
                    records: 67
                },
                Share {
                    first_id: 134,
                    records: 66
                },
            ]
        );
        assert_eq!(s.iter().map(|s| s.records).sum::<u64>(), 200);
        assert_eq!(
            shares(200, 1),
            vec![Share {
                first_id: 0,
                records: 200
            }]
        );
        // More replicas than records: the spare ones are left out.
        assert_eq!(shares(2, 3).len(), 2);
    }

    #[test]
    fn merged_counts_add_up_and_peaks_come_from_the_sim() {
        let mut a = sample_run("c4", "slow-write", 1.0, 1, 2.0);
        a.peak_enrichment_in_flight = 24;
        a.peak_writes_in_flight = 6;
        a.failed_by_kind.insert("write_timeout".into(), 1);
        a.timeline.records = vec![1, 2, 3];
        let mut b = sample_run("c4", "slow-write", 1.0, 1, 4.0);
        b.failed_by_kind.insert("write_timeout".into(), 1);
        b.timeline.records = vec![5];
        let run = merge(
            vec![a, b],
            SimPeaks {
                enrichment: 30,
                writes: 11,
            },
        );
        assert_eq!(run.replicas, 2);
        assert_eq!(run.records, 20);
        assert_eq!(
            run.complete + run.incomplete + run.rejected + run.failed,
            run.records
        );
        assert_eq!(run.failed_by_kind["write_timeout"], 2);
        assert_eq!(run.completion_s, 4.0);
        assert_eq!(run.accepted_per_s, 16.0 / 4.0);
        assert_eq!(run.peak_enrichment_in_flight, 30);
        assert_eq!(run.peak_writes_in_flight, 11);
        assert_eq!(run.timeline.records, vec![6, 2, 3]);
    }

    #[test]
    fn each_class_is_merged_over_every_replicas_records() {
        let part = |times: Vec<f64>, records: u64| {
            let mut r = sample_run("c5-priority", "priority", 1.0, 1, 2.0);
            r.classes.insert(
                "interactive".into(),
                ClassResult::of(records, times.clone()),
            );
            r.class_completions_s.insert("interactive".into(), times);
            r
        };
        let (a, b) = (part(vec![0.1, 0.2, 0.3], 4), part(vec![0.9, 1.0], 2));
        // Each replica's own p50: 0.2 and 0.9; all five records' is 0.3.
        assert_eq!(a.classes["interactive"].completion_p50_s, Some(0.2));
        let peaks = SimPeaks {
            enrichment: 1,
            writes: 1,
        };
        let run = merge(vec![a.clone(), b], peaks);
        let c = &run.classes["interactive"];
        assert_eq!((c.records, c.accepted), (6, 5));
        assert_eq!(
            (c.completion_p50_s, c.completion_p99_s),
            (Some(0.3), Some(1.0))
        );
        assert!(run.class_completions_s.is_empty(), "none kept");
        let json = serde_json::to_value(&run).unwrap();
        assert!(json.get("class_completions_s").is_none(), "{json}");
        let one = merge(vec![a.clone()], peaks);
        assert_eq!(one.classes, a.classes);
        assert!(one.class_completions_s.is_empty());
    }

    #[test]
    fn one_replica_is_its_own_result() {
        let a = sample_run("c4", "healthy", 1.0, 1, 2.0);
        let run = merge(
            vec![a.clone()],
            SimPeaks {
                enrichment: 99,
                writes: 99,
            },
        );
        assert_eq!(run, a);
    }
}
