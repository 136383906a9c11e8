//! One run as the runner measured it ([`RunResult`]): its outcomes, times, peaks and calls, each
//! priority class's records apart ([`ClassResult`]), and the calls in flight over time
//! ([`Timeline`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::is_false;
use super::meta::one;

/// One run of one strategy in one scenario at one CPU count.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RunResult {
    pub strategy: String,
    pub scenario: String,
    pub repeat: u32,
    /// The CPU quota the runner ran under (whole or fractional CPUs), or, when `unlimited`, the
    /// quota the plan asked for.
    pub cpus: f64,
    /// No CPU quota was enforced (`lab run --no-limit`): the runner had all the host's CPUs, so
    /// `cpus` is only what the plan asked for. Written only when true.
    #[serde(default, skip_serializing_if = "is_false")]
    pub unlimited: bool,
    /// The run's RNG seed ([`crate::run::run_seed`] of the base seed, scenario and repeat); 0 in
    /// documents written before it was kept.
    #[serde(default)]
    pub seed: u64,
    /// `std::thread::available_parallelism()` as the runner process saw it.
    pub runner_available_parallelism: usize,
    pub records: u64,
    pub complete: u64,
    pub incomplete: u64,
    pub rejected: u64,
    pub failed: u64,
    /// Failed records by error kind (`timeout`, `connect`, `status_500`, ...).
    #[serde(default)]
    pub failed_by_kind: std::collections::BTreeMap<String, u64>,
    /// Wall time from the first record started to the last record ended.
    pub completion_s: f64,
    /// (complete + incomplete) / completion_s.
    pub accepted_per_s: f64,
    /// 503 answers from the system of record, as counted by the runner (every attempt's: with
    /// retries, a record may get more than one).
    pub write_503s: u64,
    /// Most writes inside the system of record at once, counting those about to be refused (sim stats).
    pub peak_writes_offered: u64,
    /// Most enrichment calls the runner had in flight at once (with several replicas: the most
    /// the enrichment API had in service at once, as the sim counted them).
    pub peak_enrichment_in_flight: u64,
    /// Most writes the runner had in flight at once (with several replicas: the most writes the
    /// system of record held at once, as the sim counted them).
    #[serde(default)]
    pub peak_writes_in_flight: u64,
    /// Enrichment calls that hit the client timeout.
    #[serde(default)]
    pub enrichment_timeouts: u64,
    /// Enrichment calls answered 429 (over the enrichment API's quota), every attempt's.
    #[serde(default)]
    pub enrichment_429s: u64,
    /// Enrichment calls made, every attempt counted (a retry is one more call).
    #[serde(default)]
    pub enrichment_calls: u64,
    /// Writes made, every attempt counted.
    #[serde(default)]
    pub write_calls: u64,
    /// Retries of enrichment calls (a strategy with `retry`).
    #[serde(default)]
    pub enrichment_retries: u64,
    /// Retries of enrichment calls the retry budget refused.
    #[serde(default)]
    pub enrichment_retries_denied: u64,
    /// Retries of writes.
    #[serde(default)]
    pub write_retries: u64,
    /// Retries of writes the retry budget refused.
    #[serde(default)]
    pub write_retries_denied: u64,
    /// Calls in flight per dependency, sampled every `timeline_interval_ms` (with several
    /// replicas: the sum of their samples, each replica sampling from its own start).
    #[serde(default)]
    pub timeline: Timeline,
    /// The runner processes this run was split between (1 unless `lab run --replicas`).
    #[serde(default = "one")]
    pub replicas: u32,
    /// The records of each priority class apart, by class name, in a scenario whose records
    /// have classes (whatever the strategy's budgets make of them); empty otherwise.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub classes: BTreeMap<String, ClassResult>,
    /// Each class's accepted records' completion times, in seconds: what a runner sends the lab
    /// so that the percentiles of a run split between replicas are those of all its records.
    /// The lab drops them once it has merged the replicas' results, so a kept run has none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub class_completions_s: BTreeMap<String, Vec<f64>>,
}

/// The records of one priority class in one run.
///
/// A record's completion time is from when the runner took it to when it ended, on the clock
/// of the run's `completion_s` (the runner's monotonic wall clock); the percentiles are of the
/// accepted records (complete or incomplete: the write was accepted), by nearest rank.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClassResult {
    /// Records of this class started.
    pub records: u64,
    /// Of them, records whose write was accepted (complete + incomplete).
    pub accepted: u64,
    /// Median completion time of the accepted records; `null` when none was accepted.
    pub completion_p50_s: Option<f64>,
    /// 99th percentile completion time of the accepted records; `null` when none was accepted.
    pub completion_p99_s: Option<f64>,
}

impl ClassResult {
    /// The class's result from its records started and the completion times of those accepted.
    pub fn of(records: u64, mut accepted_s: Vec<f64>) -> ClassResult {
        accepted_s.sort_by(f64::total_cmp);
        ClassResult {
            records,
            accepted: accepted_s.len() as u64,
            completion_p50_s: nearest_rank(&accepted_s, 0.50),
            completion_p99_s: nearest_rank(&accepted_s, 0.99),
        }
    }

    /// Accepted records as a fraction of the records started (0 when none started).
    pub fn accepted_fraction(&self) -> f64 {
        if self.records == 0 {
            0.0
        } else {
            self.accepted as f64 / self.records as f64
        }
    }
}

/// The `q` quantile of `sorted` by nearest rank: the smallest value with at least `q` of the
/// values at or below it; `None` for no values.
fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Calls in flight per dependency over time.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Timeline {
    pub interval_ms: f64,
    /// Enrichment calls in flight at each sample.
    pub enrichment: Vec<u32>,
    /// Writes in flight at each sample.
    pub records: Vec<u32>,
    /// The enrichment gate's limit at each sample, when it moves (an adaptive limit).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enrichment_limit: Vec<u32>,
    /// The records gate's limit at each sample, when it moves (an adaptive limit).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records_limit: Vec<u32>,
    /// For a strategy whose budgets a proxy enforces (`enforce = "proxy"`), whose limits the lab
    /// reads from the proxy's `/budgets.json` every `interval_ms`: the reads that failed or took
    /// too long, over which the limit read before is kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub limit_samples_failed: u64,
    /// When the runner took the first sample, in seconds since the Unix epoch: what a runner
    /// sends the lab, so that limits sampled elsewhere (a proxy's) are lined up with its
    /// samples. The lab drops it once it has, so a kept run has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix_s: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The wall clock now, in seconds since the Unix epoch, as [`Timeline::started_unix_s`] holds
/// it: one clock for the runner and the lab, which run on one host.
pub(crate) fn unix_now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::sample_run;

    #[test]
    fn a_class_result_takes_percentiles_of_the_accepted_by_nearest_rank() {
        let times: Vec<f64> = (1..=40).rev().map(f64::from).collect();
        let c = ClassResult::of(42, times);
        assert_eq!((c.records, c.accepted), (42, 40));
        assert_eq!(c.completion_p50_s, Some(20.0));
        assert_eq!(c.completion_p99_s, Some(40.0), "p99 of 40 is the slowest");
        assert!((c.accepted_fraction() - 40.0 / 42.0).abs() < 1e-12);
        let hundred = ClassResult::of(100, (1..=100).map(f64::from).collect());
        assert_eq!(
            (hundred.completion_p50_s, hundred.completion_p99_s),
            (Some(50.0), Some(99.0))
        );
        let none = ClassResult::of(3, Vec::new());
        assert_eq!((none.completion_p50_s, none.completion_p99_s), (None, None));
        assert_eq!(none.accepted_fraction(), 0.0);
        let json = serde_json::to_value(&c).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "records",
                "accepted",
                "completion_p50_s",
                "completion_p99_s"
            ]
        );
        let run = serde_json::to_value(sample_run("c5", "healthy", 1.0, 1, 2.0)).unwrap();
        assert!(
            run.get("classes").is_none(),
            "written only when records have classes"
        );
    }
}
