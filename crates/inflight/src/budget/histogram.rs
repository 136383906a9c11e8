//! [`Histogram`]: a lock-free latency histogram behind the wait and call summaries of a
//! [`BudgetSnapshot`](super::BudgetSnapshot).
//!
//! Recording must stay cheap (one relaxed `fetch_add` on the uncontended path, on a line no other
//! core writes), so the histogram is striped per thread, and each stripe is a fixed array of
//! atomic buckets: exact below 8 ns, then 8 linear sub-buckets per power of two (relative error
//! under 12.5%), which is plenty for p50/p99 of waits and calls.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use super::LatencySummary;

const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
const BUCKETS: usize = SUB + (64 - SUB_BITS as usize) * SUB;

/// Stripes per histogram: each thread records into one, so that threads on different cores do
/// not fight over the same cache lines; a summary adds the stripes up.
const STRIPES: usize = 4;

pub(crate) struct Histogram {
    stripes: Box<[Stripe]>,
}

#[repr(align(128))]
struct Stripe {
    buckets: Box<[AtomicU64]>,
    /// The low 64 bits of the sum of the recorded nanoseconds; it wraps, and `sum_carries` counts
    /// the wraps, so that the sum stays exact (2^64 ns is only 584 years, which a long-lived,
    /// busy budget can add up to) at the cost of one `fetch_add`.
    sum_ns: AtomicU64,
    sum_carries: AtomicU64,
    max_ns: AtomicU64,
}

fn stripe_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

impl Histogram {
    pub(crate) fn new() -> Self {
        let stripe = || Stripe {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
            sum_carries: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
        };
        Histogram {
            stripes: (0..STRIPES).map(|_| stripe()).collect(),
        }
    }

    #[inline]
    fn stripe(&self) -> &Stripe {
        &self.stripes[stripe_index()]
    }

    /// Records a zero, the common case of a permit granted without waiting.
    #[inline]
    pub(crate) fn record_zero(&self) {
        self.stripe().buckets[0].fetch_add(1, Relaxed);
    }

    pub(crate) fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let stripe = self.stripe();
        stripe.buckets[index(ns)].fetch_add(1, Relaxed);
        if ns > 0 {
            let before = stripe.sum_ns.fetch_add(ns, Relaxed);
            if before.checked_add(ns).is_none() {
                stripe.sum_carries.fetch_add(1, Relaxed);
            }
            if ns > stripe.max_ns.load(Relaxed) {
                stripe.max_ns.fetch_max(ns, Relaxed);
            }
        }
    }

    /// How many zeros were recorded (waits that did not wait).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn zeros(&self) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.buckets[0].load(Relaxed))
            .sum()
    }

    /// The sum of every duration recorded, in nanoseconds (exact; no bucket is read).
    pub(crate) fn sum_ns(&self) -> u128 {
        self.stripes.iter().map(|s| s.sum()).sum()
    }

    pub(crate) fn summary(&self) -> LatencySummary {
        let mut counts = vec![0u64; BUCKETS];
        let (mut sum, mut max) = (0u128, 0u64);
        for stripe in self.stripes.iter() {
            for (total, b) in counts.iter_mut().zip(stripe.buckets.iter()) {
                *total += b.load(Relaxed);
            }
            sum += stripe.sum();
            max = max.max(stripe.max_ns.load(Relaxed));
        }
        let count: u64 = counts.iter().sum();
        if count == 0 {
            return LatencySummary::default();
        }
        let quantile = |q: f64| -> Duration {
            let rank = ((q * count as f64).ceil() as u64).clamp(1, count);
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return Duration::from_nanos(representative(i).min(max));
                }
            }
            Duration::from_nanos(max)
        };
        LatencySummary {
            count,
            mean: Duration::from_nanos(u64::try_from(sum / u128::from(count)).unwrap_or(u64::MAX)),
            p50: quantile(0.50),
            p99: quantile(0.99),
            max: Duration::from_nanos(max),
        }
    }
}

impl Stripe {
    /// The sum of the recorded nanoseconds. Exact once recording stops; a read that races the
    /// very `record` that wraps the low word may see the wrap before its carry, as any snapshot
    /// taken while calls run may be a moment apart between fields.
    fn sum(&self) -> u128 {
        let carries = self.sum_carries.load(Relaxed);
        let low = self.sum_ns.load(Relaxed);
        (u128::from(carries) << 64) | u128::from(low)
    }
}

#[inline]
fn index(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let power = 63 - ns.leading_zeros();
    let sub = ((ns >> (power - SUB_BITS)) as usize) & (SUB - 1);
    SUB + (power - SUB_BITS) as usize * SUB + sub
}

/// The middle of bucket `i`'s range.
fn representative(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let power = ((i - SUB) / SUB) as u32 + SUB_BITS;
    let sub = ((i - SUB) % SUB) as u64;
    let width = 1u64 << (power - SUB_BITS);
    let low = (SUB as u64 + sub) << (power - SUB_BITS);
    low.saturating_add(width / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_is_monotonic_and_in_range() {
        let mut values: Vec<u64> = (0..64)
            .flat_map(|shift| {
                let p = 1u64 << shift;
                [
                    p - 1,
                    p,
                    p + 1,
                    p.saturating_add(p / 2),
                    p.saturating_add(p - 1),
                ]
            })
            .collect();
        values.sort_unstable();
        let mut last = 0;
        for v in values {
            let i = index(v);
            assert!(i < BUCKETS, "index {i} out of range for {v}");
            assert!(i >= last, "index fell at {v}");
            last = i;
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn representative_is_within_its_bucket() {
        for v in [
            0u64,
            1,
            7,
            8,
            9,
            15,
            16,
            100,
            1_000,
            123_456_789,
            u64::MAX / 3,
        ] {
            let r = representative(index(v));
            assert_eq!(index(r), index(v), "value {v} representative {r}");
        }
    }

    #[test]
    fn summary_quantiles_are_close() {
        let h = Histogram::new();
        for ms in 1..=100u64 {
            h.record(Duration::from_millis(ms));
        }
        let s = h.summary();
        assert_eq!(s.count, 100);
        assert_eq!(s.max, Duration::from_millis(100));
        assert_eq!(s.mean, Duration::from_micros(50_500));
        let p50 = s.p50.as_secs_f64() * 1e3;
        let p99 = s.p99.as_secs_f64() * 1e3;
        assert!((p50 - 50.0).abs() / 50.0 < 0.125, "p50 {p50}");
        assert!((p99 - 99.0).abs() / 99.0 < 0.125, "p99 {p99}");
    }

    #[test]
    fn the_sum_does_not_wrap() {
        // Two waits of 2^63 ns (about 292 years each, reachable only in total over a long-lived
        // budget) must not wrap the sum back to zero and report a mean of zero.
        let h = Histogram::new();
        let half = Duration::from_nanos(1 << 63);
        h.record(half);
        h.record(half);
        let s = h.summary();
        assert_eq!(s.count, 2);
        assert_eq!(s.mean, half);
        assert_eq!(s.max, half);
    }

    #[test]
    fn empty_summary_is_zero() {
        assert_eq!(Histogram::new().summary(), LatencySummary::default());
        let h = Histogram::new();
        h.record_zero();
        assert_eq!(h.summary().p99, Duration::ZERO);
        assert_eq!(h.summary().count, 1);
    }
}
