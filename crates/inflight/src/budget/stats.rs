//! [`Stats`]: what a budget counts, with one method per event, so that every event is counted in
//! one place and an exporter can hook in there.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use super::histogram::Histogram;
use crate::limit::{Outcome, Verdict};
use crate::padded::CachePadded;

// Each group of atomics sits on its own cache lines: counters written on every wait must not
// bounce the lines of the semaphore's own state between cores.
pub(crate) struct Stats {
    /// The budget's name, for events.
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    name: std::sync::Arc<str>,
    peak_waiting: CachePadded<AtomicUsize>,
    peak_in_flight: CachePadded<AtomicUsize>,
    rejected: AtomicU64,
    permit_timeouts: AtomicU64,
    rate_limited: AtomicU64,
    unavailable: AtomicU64,
    cancelled: AtomicU64,
    call_timeouts: AtomicU64,
    calls_ok: AtomicU64,
    calls_error: AtomicU64,
    calls_cancelled: AtomicU64,
    paused: AtomicU64,
    pauses: AtomicU64,
    outcomes_success: AtomicU64,
    outcomes_overload: AtomicU64,
    outcomes_ignored: AtomicU64,
    outcomes_error: AtomicU64,
    outcomes_timeout: AtomicU64,
    retries: AtomicU64,
    retries_denied: AtomicU64,
    retries_past_deadline: AtomicU64,
    retries_out_of_attempts: AtomicU64,
    evicted: AtomicU64,
    #[cfg(feature = "metrics")]
    exported: super::exported::Handles,
    /// Time from `acquire` to permit for every admitted caller; its count is `admitted`.
    wait: CachePadded<Histogram>,
    /// Time from permit to result for every call made through `Budget::call`.
    call: CachePadded<Histogram>,
    /// Per priority class, in declaration order; empty for a budget without classes.
    classes: Box<[CachePadded<ClassStats>]>,
}

/// What one priority class counts. The budget-wide [`Stats`] count every class as well; these
/// are counted next to them, by the engine that knows the caller's class.
pub(crate) struct ClassStats {
    in_flight: AtomicUsize,
    /// Callers of the class waiting, as the budget's `waiting` counts them.
    pub(crate) waiting: AtomicUsize,
    rejected: AtomicU64,
    permit_timeouts: AtomicU64,
    rate_limited: AtomicU64,
    paused: AtomicU64,
    evicted: AtomicU64,
    cancelled: AtomicU64,
    unavailable: AtomicU64,
    /// Time from `acquire` to permit for every admitted caller of the class; its count is the
    /// class's `admitted`.
    wait: Histogram,
    #[cfg(feature = "metrics")]
    exported: super::exported::ClassHandles,
}

/// The counters at one moment, for a snapshot.
pub(crate) struct Counts {
    pub(crate) peak_waiting: usize,
    pub(crate) peak_in_flight: usize,
    pub(crate) rejected: u64,
    pub(crate) permit_timeouts: u64,
    pub(crate) rate_limited: u64,
    pub(crate) unavailable: u64,
    pub(crate) cancelled: u64,
    pub(crate) call_timeouts: u64,
    pub(crate) calls_ok: u64,
    pub(crate) calls_error: u64,
    pub(crate) calls_cancelled: u64,
    pub(crate) paused: u64,
    pub(crate) pauses: u64,
    pub(crate) outcomes_success: u64,
    pub(crate) outcomes_overload: u64,
    pub(crate) outcomes_ignored: u64,
    pub(crate) outcomes_error: u64,
    pub(crate) outcomes_timeout: u64,
    pub(crate) retries: u64,
    pub(crate) retries_denied: u64,
    pub(crate) retries_past_deadline: u64,
    pub(crate) retries_out_of_attempts: u64,
    pub(crate) evicted: u64,
}

impl Stats {
    pub(crate) fn new(name: std::sync::Arc<str>, classes: Option<&super::Classes>) -> Stats {
        let classes = classes
            .map(|classes| {
                classes
                    .iter()
                    .map(|_class| {
                        CachePadded(ClassStats {
                            in_flight: AtomicUsize::new(0),
                            waiting: AtomicUsize::new(0),
                            rejected: AtomicU64::new(0),
                            permit_timeouts: AtomicU64::new(0),
                            rate_limited: AtomicU64::new(0),
                            paused: AtomicU64::new(0),
                            evicted: AtomicU64::new(0),
                            cancelled: AtomicU64::new(0),
                            unavailable: AtomicU64::new(0),
                            wait: Histogram::new(),
                            #[cfg(feature = "metrics")]
                            exported: super::exported::ClassHandles::new(&name, _class.name()),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Stats {
            classes,
            #[cfg(feature = "metrics")]
            exported: super::exported::Handles::new(&name),
            name,
            peak_waiting: CachePadded(AtomicUsize::new(0)),
            peak_in_flight: CachePadded(AtomicUsize::new(0)),
            rejected: AtomicU64::new(0),
            permit_timeouts: AtomicU64::new(0),
            rate_limited: AtomicU64::new(0),
            unavailable: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            call_timeouts: AtomicU64::new(0),
            calls_ok: AtomicU64::new(0),
            calls_error: AtomicU64::new(0),
            calls_cancelled: AtomicU64::new(0),
            paused: AtomicU64::new(0),
            pauses: AtomicU64::new(0),
            outcomes_success: AtomicU64::new(0),
            outcomes_overload: AtomicU64::new(0),
            outcomes_ignored: AtomicU64::new(0),
            outcomes_error: AtomicU64::new(0),
            outcomes_timeout: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            retries_denied: AtomicU64::new(0),
            retries_past_deadline: AtomicU64::new(0),
            retries_out_of_attempts: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            wait: CachePadded(Histogram::new()),
            call: CachePadded(Histogram::new()),
        }
    }

    /// A caller got a permit without waiting; `in_flight` permits are held now.
    #[inline]
    pub(crate) fn admitted_at_once(&self, in_flight: usize) {
        self.wait.record_zero();
        raise_peak(&self.peak_in_flight, in_flight);
    }

    /// A caller got a permit after waiting `waited`.
    pub(crate) fn admitted_after(&self, waited: Duration) {
        self.wait.record(waited);
        // A zero is published with the fast path's zeros, from the histogram's count of them.
        #[cfg(feature = "metrics")]
        if !waited.is_zero() {
            self.exported.waited(waited);
        }
    }

    /// Every permit was held: in flight reached `limit`. Noting it when a caller has to wait
    /// spares a read of the semaphore's contended state after the wait.
    pub(crate) fn all_held(&self, limit: usize) {
        raise_peak(&self.peak_in_flight, limit);
    }

    /// A caller joined the queue; `waiting` callers wait now, itself included.
    pub(crate) fn queued(&self, waiting: usize) {
        raise_peak(&self.peak_waiting, waiting);
    }

    /// A caller was refused after it asked to wait, for the reason `err` gives: the one place
    /// a budget counts its refusals (each kind on its own counter).
    pub(crate) fn refused(&self, err: &super::AcquireError) {
        use super::AcquireError as E;
        let (counter, why) = match err {
            E::QueueFull { .. } => (&self.rejected, "permit refused: the queue is full"),
            E::PermitTimeout => (&self.permit_timeouts, "no permit within permit_timeout"),
            E::RateLimited { .. } => (
                &self.rate_limited,
                "permit refused: the rate limit's next turn is past the deadline",
            ),
            E::Paused { .. } => (
                &self.paused,
                "permit refused: the dependency's pause outlasts the deadline",
            ),
            E::Evicted { .. } => (
                &self.evicted,
                "permit refused: evicted from the full queue by a heavier class",
            ),
            E::Unavailable(_) => (
                &self.unavailable,
                "permit refused: the permit store is unavailable",
            ),
        };
        counter.fetch_add(1, Relaxed);
        #[cfg(feature = "tracing")]
        match err {
            E::Unavailable(reason) => tracing::warn!(budget = %self.name, %reason, "{why}"),
            _ => tracing::info!(budget = %self.name, "{why}"),
        }
        #[cfg(not(feature = "tracing"))]
        let _ = why;
    }

    /// A caller that would not wait was refused, for the reason `err` gives.
    pub(crate) fn refused_at_once(&self, err: &super::TryAcquireError) {
        use super::TryAcquireError as E;
        let (counter, why) = match err {
            E::NoPermits | E::WouldWait => (&self.rejected, "permit refused: none free now"),
            E::RateLimited => (
                &self.rate_limited,
                "permit refused: the rate limit's next turn is not now",
            ),
            E::Paused => (
                &self.paused,
                "permit refused: the dependency asked for a pause",
            ),
        };
        counter.fetch_add(1, Relaxed);
        #[cfg(feature = "tracing")]
        tracing::info!(budget = %self.name, "{why}");
        #[cfg(not(feature = "tracing"))]
        let _ = why;
    }

    /// An overload with a retry-after paused the budget (or moved its pause).
    pub(crate) fn paused_by_dependency(&self) {
        self.pauses.fetch_add(1, Relaxed);
    }

    /// A retry was made.
    pub(crate) fn retried(&self) {
        self.retries.fetch_add(1, Relaxed);
    }

    /// A retry was not made, for `why`.
    pub(crate) fn retry_refused(&self, why: RetryRefusal) {
        let counter = match why {
            RetryRefusal::Denied => &self.retries_denied,
            RetryRefusal::PastDeadline => &self.retries_past_deadline,
            RetryRefusal::OutOfAttempts => &self.retries_out_of_attempts,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// The mean time calls through the budget held their permit, timeouts included; `None`
    /// before the first. Cheap: a few counters, no histogram bucket.
    pub(crate) fn mean_call(&self) -> Option<Duration> {
        let n = self.calls_ok.load(Relaxed)
            + self.calls_error.load(Relaxed)
            + self.call_timeouts.load(Relaxed);
        if n == 0 {
            return None;
        }
        let mean = self.call.sum_ns() / u128::from(n);
        Some(Duration::from_nanos(
            u64::try_from(mean).unwrap_or(u64::MAX),
        ))
    }

    /// A caller stopped waiting (its future was dropped) before an outcome.
    pub(crate) fn cancelled(&self) {
        self.cancelled.fetch_add(1, Relaxed);
    }

    /// A call through the budget returned (`ok` or with an error) after holding its permit for
    /// `took`, and its classifier gave it `verdict`.
    pub(crate) fn call_ended(&self, took: Duration, ok: bool, verdict: Verdict) {
        if ok {
            self.calls_ok.fetch_add(1, Relaxed);
        } else {
            self.calls_error.fetch_add(1, Relaxed);
        }
        let by_verdict = if verdict.is_failure() {
            &self.outcomes_error
        } else {
            match verdict.outcome() {
                Outcome::Success => &self.outcomes_success,
                Outcome::Overload => &self.outcomes_overload,
                Outcome::Ignore => &self.outcomes_ignored,
            }
        };
        by_verdict.fetch_add(1, Relaxed);
        self.call.record(took);
        #[cfg(feature = "metrics")]
        self.exported.called(took);
    }

    /// A call through the budget ran past its call timeout after holding its permit for `took`.
    pub(crate) fn call_timed_out(&self, took: Duration) {
        self.call_timeouts.fetch_add(1, Relaxed);
        self.outcomes_timeout.fetch_add(1, Relaxed);
        self.call.record(took);
        #[cfg(feature = "metrics")]
        self.exported.called(took);
        #[cfg(feature = "tracing")]
        tracing::warn!(budget = %self.name, took_ms = took.as_secs_f64() * 1e3, "call timed out");
    }

    /// A call through the budget was dropped while it ran.
    pub(crate) fn call_cancelled(&self) {
        self.calls_cancelled.fetch_add(1, Relaxed);
    }

    /// Adds the zero waits since the last publish to the exported wait histogram.
    #[cfg(feature = "metrics")]
    pub(crate) fn publish_zero_waits(&self) {
        self.exported.zero_waits(self.wait.zeros());
    }

    pub(crate) fn counts(&self) -> Counts {
        Counts {
            peak_waiting: self.peak_waiting.load(Relaxed),
            peak_in_flight: self.peak_in_flight.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            permit_timeouts: self.permit_timeouts.load(Relaxed),
            rate_limited: self.rate_limited.load(Relaxed),
            unavailable: self.unavailable.load(Relaxed),
            cancelled: self.cancelled.load(Relaxed),
            call_timeouts: self.call_timeouts.load(Relaxed),
            calls_ok: self.calls_ok.load(Relaxed),
            calls_error: self.calls_error.load(Relaxed),
            calls_cancelled: self.calls_cancelled.load(Relaxed),
            paused: self.paused.load(Relaxed),
            pauses: self.pauses.load(Relaxed),
            outcomes_success: self.outcomes_success.load(Relaxed),
            outcomes_overload: self.outcomes_overload.load(Relaxed),
            outcomes_ignored: self.outcomes_ignored.load(Relaxed),
            outcomes_error: self.outcomes_error.load(Relaxed),
            outcomes_timeout: self.outcomes_timeout.load(Relaxed),
            retries: self.retries.load(Relaxed),
            retries_denied: self.retries_denied.load(Relaxed),
            retries_past_deadline: self.retries_past_deadline.load(Relaxed),
            retries_out_of_attempts: self.retries_out_of_attempts.load(Relaxed),
            evicted: self.evicted.load(Relaxed),
        }
    }

    pub(crate) fn wait(&self) -> &Histogram {
        &self.wait
    }

    /// The counters of class `class` (an index from `Engine::class_of`).
    #[inline]
    pub(crate) fn class(&self, class: usize) -> &ClassStats {
        &self.classes[class]
    }

    /// Per class, in declaration order.
    pub(crate) fn classes(&self) -> impl Iterator<Item = &ClassStats> {
        self.classes.iter().map(|c| &c.0)
    }

    pub(crate) fn call(&self) -> &Histogram {
        &self.call
    }
}

impl ClassStats {
    /// A caller of the class got a permit without waiting.
    #[inline]
    pub(crate) fn admitted_at_once(&self) {
        self.wait.record_zero();
        self.in_flight.fetch_add(1, Relaxed);
    }

    /// A caller of the class got a permit after waiting `waited`.
    pub(crate) fn admitted_after(&self, waited: Duration) {
        self.wait.record(waited);
        self.in_flight.fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        if !waited.is_zero() {
            self.exported.waited(waited);
        }
    }

    /// A permit of the class went back.
    #[inline]
    pub(crate) fn released(&self) {
        self.in_flight.fetch_sub(1, Relaxed);
    }

    /// A caller of the class was refused, for the reason `err` gives.
    pub(crate) fn refused(&self, err: &super::AcquireError) {
        use super::AcquireError as E;
        let counter = match err {
            E::QueueFull { .. } => &self.rejected,
            E::PermitTimeout => &self.permit_timeouts,
            E::RateLimited { .. } => &self.rate_limited,
            E::Unavailable(_) => &self.unavailable,
            E::Paused { .. } => &self.paused,
            E::Evicted { .. } => &self.evicted,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// A caller of the class was refused without waiting, for the reason `err` gives.
    pub(crate) fn refused_at_once(&self, err: &super::TryAcquireError) {
        use super::TryAcquireError as E;
        let counter = match err {
            E::NoPermits | E::WouldWait => &self.rejected,
            E::RateLimited => &self.rate_limited,
            E::Paused => &self.paused,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// A caller of the class stopped waiting before an outcome.
    pub(crate) fn cancelled(&self) {
        self.cancelled.fetch_add(1, Relaxed);
    }

    /// Adds the zero waits since the last publish to the class's exported wait histogram.
    #[cfg(feature = "metrics")]
    pub(crate) fn publish_zero_waits(&self) {
        self.exported.zero_waits(self.wait.zeros());
    }

    /// The class's share of a snapshot.
    pub(crate) fn snapshot(&self, class: &super::Class) -> super::ClassSnapshot {
        let wait = self.wait.summary();
        super::ClassSnapshot {
            name: class.name().to_string(),
            weight: class.weight(),
            in_flight: self.in_flight.load(Relaxed),
            waiting: self.waiting.load(Relaxed),
            admitted: wait.count,
            rejected: self.rejected.load(Relaxed),
            permit_timeouts: self.permit_timeouts.load(Relaxed),
            rate_limited: self.rate_limited.load(Relaxed),
            paused: self.paused.load(Relaxed),
            evicted: self.evicted.load(Relaxed),
            cancelled: self.cancelled.load(Relaxed),
            unavailable: self.unavailable.load(Relaxed),
            wait,
        }
    }
}

/// Why a retry was not made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryRefusal {
    /// The retry budget was spent.
    Denied,
    /// Its wait would have ended past the caller's deadline.
    PastDeadline,
    /// The call had made its most attempts.
    OutOfAttempts,
}

/// Raises `peak` to `now` if `now` is higher; a plain load first keeps the common case free of
/// read-modify-write traffic.
#[inline]
fn raise_peak(peak: &AtomicUsize, now: usize) {
    if now > peak.load(Relaxed) {
        peak.fetch_max(now, Relaxed);
    }
}
