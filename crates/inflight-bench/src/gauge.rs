//! [`PeakGauge`]: a count of work in progress with the most it ever reached, and the guard that
//! counts one piece of work in and, when dropped, out again.

use std::sync::atomic::{AtomicU64, Ordering};

/// How many calls (requests, tasks) are inside something right now, and the most there were at
/// once.
///
/// Work is counted in with [`PeakGauge::enter`] and out when the returned [`GaugeGuard`] drops, so
/// a future cancelled mid-call (a timeout, a dropped `select!` branch) is counted out too. All
/// counts are sequentially consistent: a peak read after the guards have dropped is the true
/// maximum of the count.
///
/// ```
/// use inflight_bench::gauge::PeakGauge;
///
/// let gauge = PeakGauge::new();
/// let a = gauge.enter();
/// let b = gauge.enter();
/// assert_eq!(b.count(), 2);
/// drop(a);
/// assert_eq!((gauge.current(), gauge.peak()), (1, 2));
/// drop(b);
/// gauge.reset_peak();
/// assert_eq!((gauge.current(), gauge.peak()), (0, 0));
/// ```
#[derive(Debug, Default)]
pub struct PeakGauge {
    current: AtomicU64,
    peak: AtomicU64,
}

impl PeakGauge {
    /// A gauge at zero.
    pub const fn new() -> PeakGauge {
        PeakGauge {
            current: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        }
    }

    /// Counts one in (raising the peak if need be) until the guard is dropped.
    pub fn enter(&self) -> GaugeGuard<'_> {
        let count = self.current.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(count, Ordering::SeqCst);
        GaugeGuard { gauge: self, count }
    }

    /// How many are inside now.
    pub fn current(&self) -> u64 {
        self.current.load(Ordering::SeqCst)
    }

    /// The most that were inside at once (since the last [`PeakGauge::reset_peak`]).
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::SeqCst)
    }

    /// Restarts the peak from how many are inside now, so it stays true for work already in
    /// progress.
    pub fn reset_peak(&self) {
        self.peak.store(self.current(), Ordering::SeqCst);
    }
}

/// One piece of work counted in a [`PeakGauge`]; counted out when dropped.
#[derive(Debug)]
#[must_use = "the work is counted out as soon as the guard is dropped"]
pub struct GaugeGuard<'a> {
    gauge: &'a PeakGauge,
    count: u64,
}

impl GaugeGuard<'_> {
    /// How many were inside when this one entered, itself included.
    pub fn count(&self) -> u64 {
        self.count
    }
}

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.gauge.current.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_in_and_out_and_keeps_the_peak() {
        let g = PeakGauge::new();
        let guards: Vec<_> = (0..5).map(|_| g.enter()).collect();
        assert_eq!(guards.last().map(GaugeGuard::count), Some(5));
        assert_eq!((g.current(), g.peak()), (5, 5));
        drop(guards);
        assert_eq!((g.current(), g.peak()), (0, 5));
    }

    #[test]
    fn a_reset_peak_restarts_from_the_work_inside() {
        let g = PeakGauge::default();
        let a = g.enter();
        let b = g.enter();
        drop(b);
        g.reset_peak();
        assert_eq!(g.peak(), 1);
        drop(a);
        assert_eq!((g.current(), g.peak()), (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_call_is_counted_out() {
        let g = PeakGauge::new();
        let call = async {
            let _inside = g.enter();
            tokio::time::sleep(std::time::Duration::from_secs(10)).await;
        };
        let timed_out = tokio::time::timeout(std::time::Duration::from_millis(5), call).await;
        assert!(timed_out.is_err());
        assert_eq!((g.current(), g.peak()), (0, 1));
    }
}
