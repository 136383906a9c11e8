//! [`find_knee`]: where throughput stops growing with concurrency, from level data alone.
//!
//! A dependency that serves `K` calls at once, each in time `S`, passes `c / S` calls per second
//! at `c <= K` calls in flight and `K / S` beyond (Little's law: in flight = throughput x time per
//! call); beyond `K` the extra calls wait, so latency grows, or are refused. Two ratios tell the
//! levels apart:
//!
//! - **plateau share** `throughput(c) / max throughput`: below 1 while throughput still grows;
//! - **efficiency** `throughput(c) / (c x throughput per call at the lowest level)`: below 1 once
//!   calls wait (latency grew with the queue).
//!
//! Only `c = K` has both near 1. The capacity is the level with the best of the two ratios, the
//! smallest on a tie: the smallest concurrency whose throughput is within the tolerance of the
//! plateau before latency grows or errors appear. A knee is only reported when something shows
//! saturation above it (a level whose efficiency fell below `1 - tolerance`, or a level with too
//! many errors); otherwise throughput kept growing and there is "no knee up to" the top level.
//!
//! Levels are measured coarsely (1, 2, 4, 8, ...), so [`Knee::probe`] names the next level
//! worth measuring: halfway across a gap next to the best level, until both neighbours are
//! one apart.

use serde::{Deserialize, Serialize};

/// One measured level, as the knee needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub concurrency: u32,
    /// Successful calls per second.
    pub throughput_per_s: f64,
    /// Median latency of successful calls, in milliseconds (`None` if there were none).
    pub p50_ms: Option<f64>,
    /// Share of calls that failed, 0 to 1.
    pub error_rate: f64,
}

impl From<&crate::level::Level> for Point {
    fn from(l: &crate::level::Level) -> Point {
        Point {
            concurrency: l.concurrency,
            throughput_per_s: l.throughput_per_s,
            p50_ms: l.p50_ms,
            error_rate: l.error_rate(),
        }
    }
}

/// The thresholds the knee is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KneeRules {
    /// How close to the plateau (and to full efficiency) counts as "on" it, 0 to 1: 0.1 = 10%.
    pub tolerance: f64,
    /// The share of failed calls above which a level counts as refused and the climb stops.
    pub stop_on_errors: f64,
}

impl Default for KneeRules {
    /// 10% tolerance; stop above 5% errors.
    fn default() -> KneeRules {
        KneeRules {
            tolerance: 0.10,
            stop_on_errors: 0.05,
        }
    }
}

/// What showed that the dependency saturates above the capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Evidence {
    /// A higher level gained no throughput: its calls waited.
    Queueing,
    /// A higher level had more failed calls than the threshold.
    Errors,
}

/// What the levels say.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// Throughput stops growing at `capacity`.
    Knee { capacity: u32, evidence: Evidence },
    /// Throughput kept growing with concurrency up to the highest clean level.
    NoKnee { up_to: u32 },
    /// Every level measured had too many failed calls, from the lowest (`first`) up.
    AllRefused { first: u32 },
    /// No level finished a call.
    NoData,
}

/// The knee of a set of levels, from [`find_knee`].
#[derive(Debug, Clone, PartialEq)]
pub struct Knee {
    pub verdict: Verdict,
    /// Median latency at the lowest clean level, in milliseconds: the time per call at low load.
    pub service_time_ms: Option<f64>,
    /// The highest throughput of a clean level, calls per second.
    pub max_rate_per_s: Option<f64>,
    /// The best level's plateau share and efficiency, the smaller of the two (1 = a sharp knee).
    pub fit: Option<f64>,
    /// The next level worth measuring to pin the knee down to one step, if any.
    pub probe: Option<u32>,
}

impl Knee {
    /// The capacity, when there is a knee.
    pub fn capacity(&self) -> Option<u32> {
        match self.verdict {
            Verdict::Knee { capacity, .. } => Some(capacity),
            _ => None,
        }
    }
}

/// Finds the knee of `points` (any order; levels where no call ended are ignored).
///
/// ```
/// use inflight_capacity::knee::{find_knee, KneeRules, Point, Verdict};
///
/// // 6 at once, 100 ms each: 10/s per call in flight, at most 60/s; 503s beyond 12.
/// let level = |c: u32, rate: f64, errors: f64| Point {
///     concurrency: c,
///     throughput_per_s: rate,
///     p50_ms: Some(100.0 * (c.max(6) as f64) / 6.0),
///     error_rate: errors,
/// };
/// let points = [
///     level(1, 10.0, 0.0), level(2, 20.0, 0.0), level(4, 40.0, 0.0),
///     level(5, 50.0, 0.0), level(6, 60.0, 0.0), level(7, 60.0, 0.0),
///     level(8, 60.0, 0.0), level(16, 40.0, 0.6),
/// ];
/// let knee = find_knee(&points, &KneeRules::default());
/// assert_eq!(knee.capacity(), Some(6));
/// assert_eq!(knee.service_time_ms, Some(100.0));
/// assert_eq!(knee.probe, None);
/// ```
pub fn find_knee(points: &[Point], rules: &KneeRules) -> Knee {
    let mut points: Vec<Point> = points
        .iter()
        .copied()
        .filter(|p| {
            p.throughput_per_s.is_finite() && (p.throughput_per_s > 0.0 || p.error_rate > 0.0)
        })
        .collect();
    points.sort_by_key(|p| p.concurrency);
    points.dedup_by_key(|p| p.concurrency);
    let clean_len = points
        .iter()
        .position(|p| p.error_rate > rules.stop_on_errors || p.throughput_per_s <= 0.0)
        .unwrap_or(points.len());
    let (clean, rest) = points.split_at(clean_len);
    let first_refused = rest.first().map(|p| p.concurrency);
    let Some(base) = clean.first() else {
        return Knee {
            verdict: match first_refused {
                Some(first) => Verdict::AllRefused { first },
                None => Verdict::NoData,
            },
            service_time_ms: None,
            max_rate_per_s: None,
            fit: None,
            probe: None,
        };
    };
    let per_call = base.throughput_per_s / f64::from(base.concurrency);
    let plateau = clean
        .iter()
        .map(|p| p.throughput_per_s)
        .fold(0.0f64, f64::max);
    let efficiency = |p: &Point| p.throughput_per_s / (f64::from(p.concurrency) * per_call);
    let score = |p: &Point| (p.throughput_per_s / plateau).min(efficiency(p));
    let mut best = 0;
    for (i, p) in clean.iter().enumerate() {
        if score(p) > score(&clean[best]) + 1e-12 {
            best = i;
        }
    }
    let capacity = clean[best].concurrency;
    let queueing = clean[best + 1..]
        .iter()
        .any(|p| efficiency(p) < 1.0 - rules.tolerance);
    let evidence = if queueing {
        Some(Evidence::Queueing)
    } else if first_refused.is_some() {
        Some(Evidence::Errors)
    } else {
        None
    };
    let verdict = match evidence {
        Some(evidence) => Verdict::Knee { capacity, evidence },
        None => Verdict::NoKnee {
            up_to: clean[clean.len() - 1].concurrency,
        },
    };
    let probe = evidence.and_then(|_| {
        let below = best.checked_sub(1).map(|i| clean[i].concurrency);
        let above = points.get(best + 1).map(|p| p.concurrency);
        let halfway = |lo: u32, hi: u32| (hi - lo > 1).then(|| lo + (hi - lo) / 2);
        let left = below.and_then(|lo| halfway(lo, capacity));
        let right = above.and_then(|hi| halfway(capacity, hi));
        // Look first on the side of the weaker ratio: calls already wait at the best level
        // (low efficiency), so the knee is below it; or throughput is still short of the
        // plateau, so it is above.
        let p = &clean[best];
        if efficiency(p) < p.throughput_per_s / plateau {
            left.or(right)
        } else {
            right.or(left)
        }
    });
    Knee {
        verdict,
        service_time_ms: base.p50_ms,
        max_rate_per_s: Some(plateau),
        fit: Some(score(&clean[best])),
        probe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service taking `capacity` calls at once in `service_ms` each, queueing up to `queue`
    /// more and refusing the rest, as a closed loop of `c` callers measures it.
    fn ideal(c: u32, capacity: u32, queue: u32, service_ms: f64) -> Point {
        let served = c.min(capacity) as f64;
        let refused = c.saturating_sub(capacity + queue);
        let waiting = c.min(capacity + queue);
        Point {
            concurrency: c,
            throughput_per_s: served * 1000.0 / service_ms,
            p50_ms: Some(service_ms * (waiting.max(capacity) as f64) / capacity as f64),
            // A refused caller waits about one service time before it calls again (the sweep
            // paces it), so the failed share of calls is the share of callers refused.
            error_rate: f64::from(refused) / f64::from(c),
        }
    }

    fn sweep(levels: &[u32], f: impl Fn(u32) -> Point) -> (Knee, Vec<u32>) {
        let rules = KneeRules::default();
        let mut points: Vec<Point> = levels.iter().map(|&c| f(c)).collect();
        let mut probed = Vec::new();
        for _ in 0..20 {
            let knee = find_knee(&points, &rules);
            match knee.probe {
                Some(c) => {
                    assert!(!points.iter().any(|p| p.concurrency == c), "{c} again");
                    probed.push(c);
                    points.push(f(c));
                }
                None => return (knee, probed),
            }
        }
        panic!("the probes did not end: {probed:?}");
    }

    fn noisy(p: Point, factor: f64) -> Point {
        Point {
            throughput_per_s: p.throughput_per_s * factor,
            ..p
        }
    }

    #[test]
    fn the_sims_system_of_record_has_its_knee_at_6() {
        let (knee, probed) = sweep(&[1, 2, 4, 8, 16, 32, 64], |c| ideal(c, 6, 6, 150.0));
        assert_eq!(knee.capacity(), Some(6));
        assert_eq!(knee.service_time_ms, Some(150.0));
        assert_eq!(knee.max_rate_per_s, Some(40.0));
        assert_eq!(knee.fit, Some(1.0));
        assert_eq!(probed, [6, 7, 5]);
        assert!(matches!(
            knee.verdict,
            Verdict::Knee {
                evidence: Evidence::Queueing,
                ..
            }
        ));
    }

    #[test]
    fn a_refusal_without_a_queue_is_found_by_errors() {
        let (knee, probed) = sweep(&[1, 2, 4, 8, 16], |c| ideal(c, 6, 0, 30.0));
        assert_eq!(knee.capacity(), Some(6));
        assert_eq!(probed, [6, 7, 5]);
        assert!(matches!(
            knee.verdict,
            Verdict::Knee {
                evidence: Evidence::Errors,
                ..
            }
        ));
        let (knee, _) = sweep(&[1, 2, 4, 8, 16, 32], |c| ideal(c, 12, 0, 30.0));
        assert_eq!(knee.capacity(), Some(12));
    }

    #[test]
    fn capacities_between_levels_are_pinned_to_one_step() {
        for capacity in 1..=40 {
            let (knee, _) = sweep(&[1, 2, 4, 8, 16, 32, 64], |c| {
                ideal(c, capacity, capacity, 20.0)
            });
            assert_eq!(knee.capacity(), Some(capacity), "capacity {capacity}");
        }
    }

    #[test]
    fn noise_within_a_few_percent_does_not_move_the_knee() {
        // Deterministic wobble of up to +-4% per level.
        let wobble = |c: u32| 1.0 + 0.04 * ((c as f64 * 2.3).sin());
        let (knee, _) = sweep(&[1, 2, 4, 8, 16, 32], |c| {
            noisy(ideal(c, 6, 6, 150.0), wobble(c))
        });
        assert_eq!(knee.capacity(), Some(6));
    }

    #[test]
    fn no_knee_when_throughput_keeps_growing() {
        let (knee, probed) = sweep(&[1, 2, 4, 8, 16, 32], |c| ideal(c, 1000, 0, 120.0));
        assert_eq!(knee.verdict, Verdict::NoKnee { up_to: 32 });
        assert_eq!(knee.capacity(), None);
        assert!(probed.is_empty());
        assert_eq!(knee.service_time_ms, Some(120.0));
        // A client-side wobble of a few percent is not a knee either.
        let (knee, _) = sweep(&[1, 2, 4, 8, 16, 32], |c| {
            noisy(ideal(c, 1000, 0, 120.0), if c == 32 { 0.95 } else { 1.0 })
        });
        assert_eq!(knee.capacity(), None);
    }

    #[test]
    fn all_refused_and_no_data() {
        let refused = |c: u32| Point {
            concurrency: c,
            throughput_per_s: 0.0,
            p50_ms: None,
            error_rate: 1.0,
        };
        let knee = find_knee(&[refused(1)], &KneeRules::default());
        assert_eq!(knee.verdict, Verdict::AllRefused { first: 1 });
        assert_eq!((knee.probe, knee.service_time_ms), (None, None));
        assert_eq!(
            find_knee(&[], &KneeRules::default()).verdict,
            Verdict::NoData
        );
    }

    #[test]
    fn a_level_with_errors_below_the_threshold_still_counts() {
        let mut points: Vec<Point> = [1, 2, 4, 5, 6, 7, 8]
            .iter()
            .map(|&c| ideal(c, 6, 6, 30.0))
            .collect();
        points[2].error_rate = 0.01;
        let knee = find_knee(&points, &KneeRules::default());
        assert_eq!(knee.capacity(), Some(6));
    }
}
