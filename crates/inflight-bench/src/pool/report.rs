//! [`BenchReport`]: what the pool benchmark measured (the JSON `inflight pool-bench --json`
//! prints), its table, and one sentence that reads it.

use inflight_cpu::{Enforcement, QuotaGroup, ThrottleStats};
use serde::{Deserialize, Serialize};

use super::worker::PoolRun;

/// The CFS period the reading of the results refers to (the kernel default).
pub const CFS_PERIOD_MS: f64 = 100.0;

/// How far below the best throughput a pool may be and still count as on the plateau, 0 to 1:
/// the plateau starts at the smallest pool within this share of the best. The reading states it.
pub const PLATEAU_TOLERANCE: f64 = 0.05;

/// One row of the results: a pool size with its throughput, latency and throttling.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PoolResult {
    pub pool: usize,
    pub tasks: u64,
    pub tasks_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Periods in which the cgroup was throttled while this pool ran (`None`: not readable).
    pub nr_throttled: Option<u64>,
    pub throttled_ms: Option<f64>,
    pub available_parallelism: usize,
}

impl PoolResult {
    pub fn new(run: &PoolRun, throttle: Option<ThrottleStats>) -> PoolResult {
        PoolResult {
            pool: run.pool,
            tasks: run.tasks,
            tasks_per_s: if run.elapsed_s > 0.0 {
                run.tasks as f64 / run.elapsed_s
            } else {
                0.0
            },
            p50_ms: run.p50_ms,
            p99_ms: run.p99_ms,
            max_ms: run.max_ms,
            nr_throttled: throttle.map(|t| t.nr_throttled),
            throttled_ms: throttle.map(|t| t.throttled.as_secs_f64() * 1e3),
            available_parallelism: run.available_parallelism,
        }
    }
}

/// The whole benchmark: `inflight pool-bench --json` prints this.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BenchReport {
    /// The quota asked for with `--cpus`, if any.
    pub cpus: Option<f64>,
    /// `cgroup-v1`, `cgroup-v2` or `none`.
    pub enforcement: Enforcement,
    /// The cgroup the pools ran in, when the tool created one.
    pub cgroup: Option<String>,
    pub duration_s: f64,
    pub task_iters: u64,
    /// The median time of one task on an idle CPU, measured before the sweep.
    pub task_us: f64,
    pub results: Vec<PoolResult>,
}

/// How the quota was enforced, for the report.
pub fn enforcement_of(group: Option<&QuotaGroup>) -> Enforcement {
    group.map(|g| g.enforcement()).unwrap_or(Enforcement::None)
}

/// One sentence that reads the results: where throughput plateaus (the smallest pool within
/// [`PLATEAU_TOLERANCE`] of the best, stated in the sentence) and what the tail does past it.
pub fn interpret(report: &BenchReport) -> String {
    let rs = &report.results;
    if rs.is_empty() {
        return "no pool sizes were run".to_string();
    }
    let best = rs.iter().map(|r| r.tasks_per_s).fold(0.0, f64::max);
    if best <= 0.0 {
        return "no task completed: each pool ran for less than one task takes".to_string();
    }
    // The smallest pool within the tolerance of the best throughput is where the plateau starts.
    let knee = rs
        .iter()
        .filter(|r| r.tasks_per_s >= (1.0 - PLATEAU_TOLERANCE) * best)
        .min_by_key(|r| r.pool)
        .unwrap_or(&rs[0]);
    let best_row = rs
        .iter()
        .max_by(|a, b| a.tasks_per_s.total_cmp(&b.tasks_per_s))
        .unwrap_or(&rs[0]);
    let tolerance = format!("{:.0}%", PLATEAU_TOLERANCE * 100.0);
    let biggest = rs.iter().max_by_key(|r| r.pool).unwrap_or(&rs[0]);
    let mut s = String::new();
    let limit = match report.cpus {
        Some(c) if report.enforcement != Enforcement::None => format!("the {c} CPU quota"),
        _ => "the CPUs available".to_string(),
    };
    if rs.len() == 1 {
        s.push_str(&format!(
            "one pool size only: {:.0} tasks/s, p99 {:.2} ms, max {:.2} ms",
            knee.tasks_per_s, knee.p99_ms, knee.max_ms
        ));
    } else if biggest.pool == knee.pool {
        s.push_str(&format!(
            "throughput still grows up to the largest pool ({}, {:.0} tasks/s): no smaller pool comes within {tolerance} of it, so no plateau within {limit}",
            biggest.pool, biggest.tasks_per_s
        ));
    } else {
        s.push_str(&format!(
            "throughput plateaus at pool {} ({:.0} tasks/s, {limit}; the smallest pool within {tolerance} of the best, {:.0} tasks/s at pool {}); pool {} changes throughput by {:+.0}% while p99 goes {:.2} -> {:.2} ms and max {:.2} -> {:.2} ms",
            knee.pool,
            knee.tasks_per_s,
            best_row.tasks_per_s,
            best_row.pool,
            biggest.pool,
            (biggest.tasks_per_s / knee.tasks_per_s - 1.0) * 100.0,
            knee.p99_ms,
            biggest.p99_ms,
            knee.max_ms,
            biggest.max_ms,
        ));
        if report.enforcement != Enforcement::None {
            s.push_str(&format!(" (the CFS period is {CFS_PERIOD_MS:.0} ms)"));
        }
    }
    if report.enforcement == Enforcement::None {
        s.push_str("; no quota was enforced by this tool, so throttling comes only from limits already on this process");
    } else {
        let throttled: u64 = rs.iter().filter_map(|r| r.nr_throttled).sum();
        if throttled == 0 {
            s.push_str("; the cgroup was never throttled, so the tail here comes from threads sharing CPUs (other load on this machine), not from the quota");
        } else {
            let worst = rs
                .iter()
                .max_by(|a, b| {
                    a.throttled_ms
                        .unwrap_or(0.0)
                        .total_cmp(&b.throttled_ms.unwrap_or(0.0))
                })
                .unwrap_or(&rs[0]);
            s.push_str(&format!(
                "; the quota throttled the group most at pool {} ({} periods, {:.0} ms); throttled time adds up over every CPU's run queue, so it can exceed the wall time",
                worst.pool,
                worst.nr_throttled.unwrap_or(0),
                worst.throttled_ms.unwrap_or(0.0)
            ));
        }
    }
    s
}

/// The human table, one row per pool size.
pub fn render_table(report: &BenchReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:>5}  {:>12}  {:>9}  {:>9}  {:>9}  {:>12}  {:>12}\n",
        "pool", "tasks/s", "p50 ms", "p99 ms", "max ms", "nr_throttled", "throttled ms"
    ));
    for r in &report.results {
        let throttled = r
            .nr_throttled
            .map(|n| n.to_string())
            .unwrap_or_else(|| "-".into());
        let throttled_ms = r
            .throttled_ms
            .map(|n| format!("{n:.0}"))
            .unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "{:>5}  {:>12}  {:>9.3}  {:>9.3}  {:>9.2}  {:>12}  {:>12}\n",
            r.pool,
            group_thousands(r.tasks_per_s.round() as u64),
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            throttled,
            throttled_ms
        ));
    }
    out
}

fn group_thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pool: usize, tps: f64, p99: f64, max: f64) -> PoolResult {
        PoolResult {
            pool,
            tasks: 1,
            tasks_per_s: tps,
            p50_ms: 0.05,
            p99_ms: p99,
            max_ms: max,
            nr_throttled: Some(pool as u64 * 10),
            throttled_ms: Some(pool as f64 * 100.0),
            available_parallelism: 1,
        }
    }

    #[test]
    fn interpretation_names_the_plateau_and_the_tail() {
        let report = BenchReport {
            cpus: Some(1.0),
            enforcement: Enforcement::CgroupV1,
            cgroup: None,
            duration_s: 5.0,
            task_iters: 1,
            task_us: 50.0,
            results: vec![
                row(1, 19_000.0, 0.1, 0.5),
                row(2, 19_500.0, 40.0, 55.0),
                row(4, 19_200.0, 60.0, 80.0),
                row(8, 19_100.0, 80.0, 98.0),
            ],
        };
        let s = interpret(&report);
        assert!(s.contains("plateaus at pool 1"), "{s}");
        assert!(s.contains("0.10 -> 80.00"), "{s}");
        assert!(s.contains("CFS period"), "{s}");
        assert!(s.contains("most at pool 8 (80 periods, 800 ms)"), "{s}");
        let table = render_table(&report);
        assert!(table.contains("19,500"), "{table}");
        assert_eq!(table.lines().count(), 5);
    }

    /// A 10% gain from pool 1 to 8 is more than the tolerance: the plateau is not at pool 1, and
    /// the sentence says what "plateau" means.
    #[test]
    fn a_gain_beyond_the_tolerance_is_not_a_plateau() {
        let report = BenchReport {
            cpus: None,
            enforcement: Enforcement::None,
            cgroup: None,
            duration_s: 5.0,
            task_iters: 1,
            task_us: 50.0,
            results: vec![
                row(1, 10_000.0, 0.1, 0.5),
                row(2, 10_300.0, 0.2, 0.6),
                row(4, 10_600.0, 0.3, 0.7),
                row(8, 11_000.0, 0.4, 0.8),
            ],
        };
        let s = interpret(&report);
        assert!(!s.contains("plateaus at pool 1"), "{s}");
        assert!(s.contains("plateaus at pool 4 (10600 tasks/s"), "{s}");
        assert!(
            s.contains("the smallest pool within 5% of the best, 11000 tasks/s at pool 8"),
            "{s}"
        );
        // Only the largest pool is within the tolerance: no plateau, and the tolerance is named.
        let mut steep = report.clone();
        steep.results[2].tasks_per_s = 10_400.0;
        let s = interpret(&steep);
        assert!(
            s.contains("throughput still grows up to the largest pool (8"),
            "{s}"
        );
        assert!(s.contains("within 5% of it"), "{s}");
    }

    #[test]
    fn interpretation_of_runs_without_tasks_has_no_nan() {
        let mut empty = row(1, 0.0, 0.0, 0.0);
        empty.tasks = 0;
        let report = BenchReport {
            cpus: None,
            enforcement: Enforcement::None,
            cgroup: None,
            duration_s: 1e-9,
            task_iters: 1,
            task_us: 50.0,
            results: vec![empty.clone(), PoolResult { pool: 2, ..empty }],
        };
        let s = interpret(&report);
        assert!(s.contains("no task completed"), "{s}");
        assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
    }

    #[test]
    fn thousands_grouping() {
        assert_eq!(group_thousands(0), "0");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1_000), "1,000");
        assert_eq!(group_thousands(1_234_567), "1,234,567");
    }
}
