//! The measurements of a run ([`Record`], one per step and attempt) and what they sum up to
//! ([`Summary`]): per case and target, the median and the spread (min-max) over the repeats,
//! the added latency (proxy minus direct in the same repeat, then the median), and how many
//! open-loop runs were discarded for the generator's send lag.

use std::collections::BTreeSet;

use serde::Serialize;

use super::idle::IdleReport;
use super::instructions::CallgrindReport;
use super::load::LoadReport;
use super::plan::{Who, BUDGET_SERVICE_MS};
use super::UpstreamStats;
use crate::spread::Spread;

/// The cases of a run, in the order they are tabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Case {
    /// Closed loop: the most each target answers, and each proxy's CPU per answer.
    Saturation,
    /// Open loop at a load point: the latency from each request's scheduled send.
    Latency,
    /// A budget of 6 over the 20 ms upstream, closed loop.
    Budget,
    /// Idle keep-alive connections: each proxy's memory.
    Idle,
    /// A fixed number of requests to a proxy under callgrind: its instructions per answer.
    Instructions,
}

/// How a proxy's CPU quota group throttled it over a load step's measured time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Throttled {
    /// Periods (100 ms) in which it had work to run.
    pub periods: u64,
    /// Of those, periods in which it ran out of quota.
    pub throttled_periods: u64,
    /// The time its threads waited for quota, seconds.
    pub throttled_s: f64,
}

/// One step of a run: one target, one case, one attempt.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// The repeat, from 1.
    pub repeat: usize,
    /// Who was measured.
    pub target: Who,
    /// What was measured.
    pub case: Case,
    /// The load point (`10%`, or `2000/s` with `--rate`), for the latency case.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub point: Option<String>,
    /// The attempt, from 1: a latency run discarded for its send lag is run again.
    pub attempt: usize,
    /// Why this run is left out of the summary, when it is.
    pub discarded: Option<String>,
    /// The load step's measurement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadReport>,
    /// The upstream's counters after the load step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<UpstreamStats>,
    /// The proxy's quota group over the load step, where there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttled: Option<Throttled>,
    /// The idle step's measurement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleReport>,
    /// The callgrind step's count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callgrind: Option<CallgrindReport>,
}

impl Record {
    /// A record of `case` for `target` in `repeat`, first attempt, nothing measured yet.
    pub fn new(repeat: usize, target: Who, case: Case) -> Record {
        Record {
            repeat,
            target,
            case,
            point: None,
            attempt: 1,
            discarded: None,
            load: None,
            upstream: None,
            throttled: None,
            idle: None,
            callgrind: None,
        }
    }

    fn kept(&self) -> bool {
        self.discarded.is_none()
    }
}

/// The medians and spreads of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Closed loop, per target.
    pub saturation: Vec<SaturationRow>,
    /// Open loop, per load point.
    pub latency: Vec<PointSummary>,
    /// The budget case, per proxy.
    pub budget: Vec<BudgetRow>,
    /// Idle connections, per proxy.
    pub idle: Vec<IdleRow>,
    /// Instructions counted by callgrind, per proxy.
    pub callgrind: Vec<CallgrindRow>,
}

/// One target at saturation, over the repeats.
#[derive(Debug, Clone, Serialize)]
pub struct SaturationRow {
    pub target: Who,
    /// Runs summed up.
    pub runs: usize,
    /// 2xx answers per second.
    pub ok_per_s: Option<Spread>,
    /// Latency p50 and p99, milliseconds.
    pub p50_ms: Option<Spread>,
    pub p99_ms: Option<Spread>,
    /// The proxy's CPU time per answer, microseconds.
    pub cpu_us_per_answer: Option<Spread>,
    /// The proxy's CPU time over the measured time, in CPUs (1.0: its whole quota).
    pub cpu_used: Option<Spread>,
    /// The proxy's instructions per answer, where counted.
    pub instructions_per_answer: Option<Spread>,
    /// Non-2xx answers and requests with no answer, summed over the runs.
    pub non_2xx: u64,
    pub errors: u64,
}

/// One load point of the latency case.
#[derive(Debug, Clone, Serialize)]
pub struct PointSummary {
    /// `10%`, or `2000/s`.
    pub point: String,
    pub rows: Vec<LatencyRow>,
}

/// One target at one load point, over the repeats.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyRow {
    pub target: Who,
    /// Runs kept (the generator kept to its schedule).
    pub runs: usize,
    /// Runs discarded for the generator's send lag.
    pub discarded: usize,
    /// Repeats with no run kept.
    pub repeats_without_a_run: usize,
    /// The rate offered, per second.
    pub offered_per_s: Option<Spread>,
    /// Latency from the scheduled send, milliseconds.
    pub p50_ms: Option<Spread>,
    pub p99_ms: Option<Spread>,
    /// This target's percentile minus direct's in the same repeat, milliseconds (proxies only;
    /// repeats where either has no run kept are left out).
    pub added_p50_ms: Option<Spread>,
    pub added_p99_ms: Option<Spread>,
    /// The generator's send lag p99 in the runs kept, milliseconds.
    pub send_lag_p99_ms: Option<Spread>,
    /// And in the runs discarded: why they were.
    pub discarded_send_lag_p99_ms: Option<Spread>,
    /// Non-2xx answers and requests with no answer in the runs kept.
    pub non_2xx: u64,
    pub errors: u64,
}

/// One proxy in the budget case, over the repeats.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetRow {
    pub target: Who,
    pub runs: usize,
    pub ok_per_s: Option<Spread>,
    /// The most requests the upstream served at once.
    pub upstream_peak: Option<Spread>,
    /// 2xx latency p99, and that minus the upstream's 20 ms: the wait in front of it.
    pub ok_p99_ms: Option<Spread>,
    pub wait_p99_ms: Option<Spread>,
    pub non_2xx: u64,
    pub errors: u64,
}

/// One proxy's memory with idle connections, over the repeats.
#[derive(Debug, Clone, Serialize)]
pub struct IdleRow {
    pub target: Who,
    pub runs: usize,
    /// Connections asked for.
    pub connections: usize,
    /// The fewest that were opened, and that were still open when the memory was read.
    pub opened_min: usize,
    pub still_open_min: usize,
    /// The most processes measured (nginx: master and worker).
    pub processes: usize,
    pub rss_before_kib: Option<Spread>,
    pub rss_after_kib: Option<Spread>,
    pub kib_per_connection: Option<Spread>,
}

/// One proxy's instructions under callgrind, over the repeats.
#[derive(Debug, Clone, Serialize)]
pub struct CallgrindRow {
    pub target: Who,
    pub runs: usize,
    /// Requests counted in each run.
    pub requests: usize,
    /// Instructions (user space) per 2xx answer.
    pub per_answer: Option<Spread>,
    /// Level-1 data cache misses (callgrind's simulation) per 2xx answer.
    pub l1d_misses_per_answer: Option<Spread>,
    /// Requests that got no 2xx answer, summed over the runs.
    pub failed: u64,
}

/// Median, min and max of `values`; `None` when there are none.
pub fn spread_of(values: &[f64]) -> Option<Spread> {
    (!values.is_empty()).then(|| Spread::of(values))
}

fn non_2xx(load: &LoadReport) -> u64 {
    load.statuses
        .iter()
        .filter(|(s, _)| !(200..300).contains(*s))
        .map(|(_, n)| n)
        .sum()
}

fn loads<'a>(
    records: &'a [Record],
    case: Case,
    target: Who,
    point: Option<&'a str>,
) -> impl Iterator<Item = (&'a Record, &'a LoadReport)> + 'a {
    records.iter().filter_map(move |r| {
        let hit = r.case == case && r.target == target && r.kept() && r.point.as_deref() == point;
        hit.then_some(())?;
        Some((r, r.load.as_ref()?))
    })
}

impl Summary {
    /// Sums up `records` for `targets`, with the latency case at `points` (labels, in order).
    pub fn of(records: &[Record], targets: &[Who], points: &[String]) -> Summary {
        let saturation = targets
            .iter()
            .filter(|w| {
                records
                    .iter()
                    .any(|r| r.case == Case::Saturation && r.target == **w)
            })
            .map(|&target| saturation_row(records, target))
            .collect();
        let latency = points
            .iter()
            .map(|point| PointSummary {
                point: point.clone(),
                rows: targets
                    .iter()
                    .filter(|w| {
                        records.iter().any(|r| {
                            r.case == Case::Latency
                                && r.target == **w
                                && r.point.as_deref() == Some(point)
                        })
                    })
                    .map(|&target| latency_row(records, target, point))
                    .collect(),
            })
            .filter(|p| !p.rows.is_empty())
            .collect();
        let budget = targets
            .iter()
            .filter(|w| {
                records
                    .iter()
                    .any(|r| r.case == Case::Budget && r.target == **w)
            })
            .map(|&target| budget_row(records, target))
            .collect();
        let idle = targets
            .iter()
            .filter(|w| {
                records
                    .iter()
                    .any(|r| r.case == Case::Idle && r.target == **w)
            })
            .map(|&target| idle_row(records, target))
            .collect();
        let callgrind = targets
            .iter()
            .filter(|w| {
                records
                    .iter()
                    .any(|r| r.case == Case::Instructions && r.target == **w)
            })
            .map(|&target| callgrind_row(records, target))
            .collect();
        Summary {
            saturation,
            latency,
            budget,
            idle,
            callgrind,
        }
    }

    /// The saturation row of `target`, if measured.
    pub fn saturation_of(&self, target: Who) -> Option<&SaturationRow> {
        self.saturation.iter().find(|r| r.target == target)
    }

    /// The latency row of `target` at `point`, if measured.
    pub fn latency_of(&self, target: Who, point: &str) -> Option<&LatencyRow> {
        self.latency
            .iter()
            .find(|p| p.point == point)?
            .rows
            .iter()
            .find(|r| r.target == target)
    }

    /// The budget row of `target`, if measured.
    pub fn budget_of(&self, target: Who) -> Option<&BudgetRow> {
        self.budget.iter().find(|r| r.target == target)
    }

    /// The idle row of `target`, if measured.
    pub fn idle_of(&self, target: Who) -> Option<&IdleRow> {
        self.idle.iter().find(|r| r.target == target)
    }

    /// The callgrind row of `target`, if measured.
    pub fn callgrind_of(&self, target: Who) -> Option<&CallgrindRow> {
        self.callgrind.iter().find(|r| r.target == target)
    }
}

fn saturation_row(records: &[Record], target: Who) -> SaturationRow {
    let runs: Vec<_> = loads(records, Case::Saturation, target, None).collect();
    let pick = |f: &dyn Fn(&LoadReport) -> Option<f64>| {
        spread_of(&runs.iter().filter_map(|(_, l)| f(l)).collect::<Vec<_>>())
    };
    SaturationRow {
        target,
        runs: runs.len(),
        ok_per_s: pick(&|l| Some(l.ok_per_s)),
        p50_ms: pick(&|l| (l.latency_ms.count > 0).then_some(l.latency_ms.p50)),
        p99_ms: pick(&|l| (l.latency_ms.count > 0).then_some(l.latency_ms.p99)),
        cpu_us_per_answer: pick(&|l| l.proxy_cpu_us_per_answer),
        cpu_used: pick(&|l| l.proxy_cpu_s.map(|c| c / l.duration_s)),
        instructions_per_answer: pick(&|l| l.proxy_instructions_per_answer),
        non_2xx: runs.iter().map(|(_, l)| non_2xx(l)).sum(),
        errors: runs.iter().map(|(_, l)| l.errors).sum(),
    }
}

fn latency_row(records: &[Record], target: Who, point: &str) -> LatencyRow {
    let kept: Vec<_> = loads(records, Case::Latency, target, Some(point)).collect();
    let all: Vec<&Record> = records
        .iter()
        .filter(|r| {
            r.case == Case::Latency && r.target == target && r.point.as_deref() == Some(point)
        })
        .collect();
    let repeats: BTreeSet<usize> = all.iter().map(|r| r.repeat).collect();
    let kept_repeats: BTreeSet<usize> = kept.iter().map(|(r, _)| r.repeat).collect();
    let pick = |f: &dyn Fn(&LoadReport) -> Option<f64>| {
        spread_of(&kept.iter().filter_map(|(_, l)| f(l)).collect::<Vec<_>>())
    };
    let (added_p50_ms, added_p99_ms) = if target.is_proxy() {
        let direct: Vec<_> = loads(records, Case::Latency, Who::Direct, Some(point)).collect();
        let mut p50 = Vec::new();
        let mut p99 = Vec::new();
        for (r, l) in &kept {
            if let Some((_, d)) = direct.iter().find(|(dr, _)| dr.repeat == r.repeat) {
                if l.latency_ms.count > 0 && d.latency_ms.count > 0 {
                    p50.push(l.latency_ms.p50 - d.latency_ms.p50);
                    p99.push(l.latency_ms.p99 - d.latency_ms.p99);
                }
            }
        }
        (spread_of(&p50), spread_of(&p99))
    } else {
        (None, None)
    };
    LatencyRow {
        target,
        runs: kept.len(),
        discarded: all.iter().filter(|r| !r.kept()).count(),
        repeats_without_a_run: repeats.difference(&kept_repeats).count(),
        offered_per_s: pick(&|l| l.offered_per_s),
        p50_ms: pick(&|l| (l.latency_ms.count > 0).then_some(l.latency_ms.p50)),
        p99_ms: pick(&|l| (l.latency_ms.count > 0).then_some(l.latency_ms.p99)),
        added_p50_ms,
        added_p99_ms,
        send_lag_p99_ms: pick(&|l| l.send_lag_ms.map(|s| s.p99)),
        discarded_send_lag_p99_ms: spread_of(
            &all.iter()
                .filter(|r| !r.kept())
                .filter_map(|r| Some(r.load.as_ref()?.send_lag_ms?.p99))
                .collect::<Vec<_>>(),
        ),
        non_2xx: kept.iter().map(|(_, l)| non_2xx(l)).sum(),
        errors: kept.iter().map(|(_, l)| l.errors).sum(),
    }
}

fn budget_row(records: &[Record], target: Who) -> BudgetRow {
    let runs: Vec<_> = loads(records, Case::Budget, target, None).collect();
    let pick = |f: &dyn Fn(&Record, &LoadReport) -> Option<f64>| {
        spread_of(&runs.iter().filter_map(|(r, l)| f(r, l)).collect::<Vec<_>>())
    };
    let ok_p99 = |l: &LoadReport| (l.ok_latency_ms.count > 0).then_some(l.ok_latency_ms.p99);
    BudgetRow {
        target,
        runs: runs.len(),
        ok_per_s: pick(&|_, l| Some(l.ok_per_s)),
        upstream_peak: pick(&|r, _| r.upstream.map(|u| u.peak as f64)),
        ok_p99_ms: pick(&|_, l| ok_p99(l)),
        wait_p99_ms: pick(&|_, l| ok_p99(l).map(|p| p - BUDGET_SERVICE_MS)),
        non_2xx: runs.iter().map(|(_, l)| non_2xx(l)).sum(),
        errors: runs.iter().map(|(_, l)| l.errors).sum(),
    }
}

fn idle_row(records: &[Record], target: Who) -> IdleRow {
    let runs: Vec<&IdleReport> = records
        .iter()
        .filter(|r| r.case == Case::Idle && r.target == target && r.kept())
        .filter_map(|r| r.idle.as_ref())
        .collect();
    let pick =
        |f: &dyn Fn(&IdleReport) -> f64| spread_of(&runs.iter().map(|i| f(i)).collect::<Vec<_>>());
    IdleRow {
        target,
        runs: runs.len(),
        connections: runs.iter().map(|i| i.connections).max().unwrap_or(0),
        opened_min: runs.iter().map(|i| i.opened).min().unwrap_or(0),
        still_open_min: runs.iter().map(|i| i.still_open).min().unwrap_or(0),
        processes: runs.iter().map(|i| i.processes).max().unwrap_or(0),
        rss_before_kib: pick(&|i| i.rss_before_kib as f64),
        rss_after_kib: pick(&|i| i.rss_after_kib as f64),
        kib_per_connection: pick(&|i| i.kib_per_connection),
    }
}

fn callgrind_row(records: &[Record], target: Who) -> CallgrindRow {
    let runs: Vec<&CallgrindReport> = records
        .iter()
        .filter(|r| r.case == Case::Instructions && r.target == target && r.kept())
        .filter_map(|r| r.callgrind.as_ref())
        .collect();
    CallgrindRow {
        target,
        runs: runs.len(),
        requests: runs.iter().map(|c| c.requests).max().unwrap_or(0),
        per_answer: spread_of(&runs.iter().filter_map(|c| c.per_answer).collect::<Vec<_>>()),
        l1d_misses_per_answer: spread_of(
            &runs
                .iter()
                .filter_map(|c| c.l1d_misses_per_answer)
                .collect::<Vec<_>>(),
        ),
        failed: runs
            .iter()
            .map(|c| c.requests as u64 - c.ok.min(c.requests as u64))
            .sum(),
    }
}
