//! [`BudgetSnapshot`]: what a budget has seen, as plain data.

use std::time::Duration;

/// A budget's counters and latency summaries at one moment, from [`Budget::snapshot`](super::Budget::snapshot).
///
/// Every `acquire` (and `try_acquire`) ends in exactly one of `admitted`, `rejected`,
/// `permit_timeouts`, `rate_limited`, `paused`, `evicted`, `cancelled` or `unavailable`, or is
/// still in progress (and, in a budget with classes, in exactly one of its class's, in
/// `classes`); every call through the budget that got its permit ends in exactly one of
/// `calls_ok`, `calls_error`, `call_timeouts` or `calls_cancelled` (by what the call returned),
/// and in exactly one of the `outcomes_*` fields or `calls_cancelled` (by its classifier's
/// verdict); see [`Budget`](super::Budget#guarantees).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BudgetSnapshot {
    /// The budget's name.
    pub name: String,
    /// The configured limit: for a limit that learns, its maximum.
    pub max_concurrent: usize,
    /// The limit now: `max_concurrent` for a fixed limit.
    pub limit: usize,
    /// Calls running under a permit now: for a budget with a store (a fleet budget), those that
    /// hold their store's lease too, the calls at the dependency.
    pub in_flight: usize,
    /// Callers holding a local permit while they wait for their store's lease (a fleet lease);
    /// 0 for a budget without a store.
    pub awaiting_store: usize,
    /// The most permits held at once since the budget was created.
    pub peak_in_flight: usize,
    /// Callers waiting for a permit now, counting one whose permit was handed over but whose
    /// task has not run yet to take it.
    pub waiting: usize,
    /// The most callers waiting at once.
    pub peak_waiting: usize,
    /// Callers granted a permit.
    pub admitted: u64,
    /// Callers turned away without waiting: the queue was full (or `try_acquire` found no free
    /// permit).
    pub rejected: u64,
    /// Callers that waited their whole `permit_timeout`.
    pub permit_timeouts: u64,
    /// Callers the rate limit refused because their turn would have come after their deadline
    /// (or, for `try_acquire`, not at once).
    pub rate_limited: u64,
    /// Callers that stopped waiting (their future was dropped) before an outcome.
    pub cancelled: u64,
    /// Callers refused because the budget's shared store could not be asked.
    pub unavailable: u64,
    /// Calls through the budget ([`Budget::call`](super::Budget::call),
    /// [`Budget::call_with`](super::Budget::call_with), a `BudgetLayer`) that ran past
    /// `call_timeout`.
    pub call_timeouts: u64,
    /// Calls through the budget that returned `Ok`, however they were classified (an `Ok(503)`
    /// classified as an overload is counted here, and in `outcomes_overload`).
    pub calls_ok: u64,
    /// Calls through the budget that returned an error, however they were classified.
    pub calls_error: u64,
    /// Calls through the budget dropped while they ran.
    pub calls_cancelled: u64,
    /// Callers refused at once because a pause the dependency asked for (an overload with a
    /// retry-after) would outlast their permit deadline.
    pub paused: u64,
    /// Overloads reported with a retry-after, each of which paused the budget (or moved its
    /// pause).
    pub pauses: u64,
    /// Calls through the budget that returned and were classified as a success.
    pub outcomes_success: u64,
    /// Calls through the budget that returned and were classified as an overload (not a
    /// failure).
    pub outcomes_overload: u64,
    /// Calls through the budget that returned and were classified as saying nothing of the
    /// dependency's load ([`Outcome::Ignore`](crate::limit::Outcome::Ignore)).
    pub outcomes_ignored: u64,
    /// Calls through the budget that returned and were classified as a failure
    /// ([`Verdict::failure`](crate::limit::Verdict::failure); with `Budget::call`, every `Err`).
    pub outcomes_error: u64,
    /// Calls through the budget that ran past `call_timeout` (the same count as
    /// `call_timeouts`, in this family).
    pub outcomes_timeout: u64,
    /// Retries made by [`Budget::call_with_retry`](super::Budget::call_with_retry): attempts
    /// after the first. Each is also counted as an acquire and, if it got its permit, a call.
    pub retries: u64,
    /// Retries not made because the retry budget was spent.
    pub retries_denied: u64,
    /// Retries not made because their wait would have ended past the caller's permit deadline.
    pub retries_past_deadline: u64,
    /// Retries not made because the call had made its most attempts.
    pub retries_out_of_attempts: u64,
    /// Callers refused at once, while they waited, to make room in the full queue for a caller
    /// of a heavier class ([`AcquireError::Evicted`](crate::AcquireError::Evicted)).
    pub evicted: u64,
    /// Time admitted callers waited for their permit (zero when one was free).
    pub wait: LatencySummary,
    /// Time calls through the budget held their permit, timeouts included.
    pub call: LatencySummary,
    /// Per class, in the order the classes were declared, for a budget with
    /// [`Classes`](crate::Classes); empty for one without. The budget-wide fields count every
    /// class.
    pub classes: Vec<ClassSnapshot>,
}

impl BudgetSnapshot {
    /// Adds the counts of `earlier`, a budget this one took over from (as a reloaded
    /// configuration replaces one), so that counters published from the sum go on from where
    /// the earlier budget's stopped instead of starting again at zero.
    ///
    /// Every `u64` counter is added, and each class's counters to those of the earlier budget's
    /// class of the same name (a class the earlier budget had and this one has not is left
    /// out). Gauges (`in_flight`, `waiting`, `limit` and the peaks) and the latency summaries
    /// stay this budget's.
    ///
    /// ```
    /// use inflight::{Budget, BudgetConfig};
    ///
    /// let old = Budget::new("records", BudgetConfig::new(6)).unwrap();
    /// drop(old.try_acquire().unwrap());
    /// let new = Budget::new("records", BudgetConfig::new(8)).unwrap();
    /// drop(new.try_acquire().unwrap());
    /// let mut counts = new.snapshot();
    /// counts.add_counts(&old.snapshot());
    /// assert_eq!((counts.admitted, counts.limit), (2, 8));
    /// ```
    pub fn add_counts(&mut self, earlier: &BudgetSnapshot) {
        // Taken apart field by field, so that a counter added to the struct cannot be missed.
        let BudgetSnapshot {
            name: _,
            max_concurrent: _,
            limit: _,
            in_flight: _,
            awaiting_store: _,
            peak_in_flight: _,
            waiting: _,
            peak_waiting: _,
            admitted,
            rejected,
            permit_timeouts,
            rate_limited,
            cancelled,
            unavailable,
            call_timeouts,
            calls_ok,
            calls_error,
            calls_cancelled,
            paused,
            pauses,
            outcomes_success,
            outcomes_overload,
            outcomes_ignored,
            outcomes_error,
            outcomes_timeout,
            retries,
            retries_denied,
            retries_past_deadline,
            retries_out_of_attempts,
            evicted,
            wait: _,
            call: _,
            classes,
        } = earlier;
        for (mine, theirs) in [
            (&mut self.admitted, admitted),
            (&mut self.rejected, rejected),
            (&mut self.permit_timeouts, permit_timeouts),
            (&mut self.rate_limited, rate_limited),
            (&mut self.cancelled, cancelled),
            (&mut self.unavailable, unavailable),
            (&mut self.call_timeouts, call_timeouts),
            (&mut self.calls_ok, calls_ok),
            (&mut self.calls_error, calls_error),
            (&mut self.calls_cancelled, calls_cancelled),
            (&mut self.paused, paused),
            (&mut self.pauses, pauses),
            (&mut self.outcomes_success, outcomes_success),
            (&mut self.outcomes_overload, outcomes_overload),
            (&mut self.outcomes_ignored, outcomes_ignored),
            (&mut self.outcomes_error, outcomes_error),
            (&mut self.outcomes_timeout, outcomes_timeout),
            (&mut self.retries, retries),
            (&mut self.retries_denied, retries_denied),
            (&mut self.retries_past_deadline, retries_past_deadline),
            (&mut self.retries_out_of_attempts, retries_out_of_attempts),
            (&mut self.evicted, evicted),
        ] {
            *mine += *theirs;
        }
        for class in &mut self.classes {
            if let Some(earlier) = classes.iter().find(|e| e.name == class.name) {
                class.add_counts(earlier);
            }
        }
    }
}

impl ClassSnapshot {
    /// Adds the counts of `earlier`, the same class of a budget this one took over from (see
    /// [`BudgetSnapshot::add_counts`]); the gauges and the wait summary stay this class's.
    pub fn add_counts(&mut self, earlier: &ClassSnapshot) {
        let ClassSnapshot {
            name: _,
            weight: _,
            in_flight: _,
            waiting: _,
            admitted,
            rejected,
            permit_timeouts,
            rate_limited,
            paused,
            evicted,
            cancelled,
            unavailable,
            wait: _,
        } = earlier;
        for (mine, theirs) in [
            (&mut self.admitted, admitted),
            (&mut self.rejected, rejected),
            (&mut self.permit_timeouts, permit_timeouts),
            (&mut self.rate_limited, rate_limited),
            (&mut self.paused, paused),
            (&mut self.evicted, evicted),
            (&mut self.cancelled, cancelled),
            (&mut self.unavailable, unavailable),
        ] {
            *mine += *theirs;
        }
    }
}

/// One priority class's share of a [`BudgetSnapshot`].
///
/// Every acquire in the class ends in exactly one of `admitted`, `rejected`, `permit_timeouts`,
/// `rate_limited`, `paused`, `evicted`, `cancelled` or `unavailable`, or is still in progress.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ClassSnapshot {
    /// The class's name.
    pub name: String,
    /// Its weight.
    pub weight: u32,
    /// Permits held now by callers of this class.
    pub in_flight: usize,
    /// Callers of this class waiting for a permit now.
    pub waiting: usize,
    /// Callers of this class granted a permit.
    pub admitted: u64,
    /// Turned away without waiting: the queue was full of heavier or equal classes (or
    /// `try_acquire` found no free permit).
    pub rejected: u64,
    /// Waited their whole permit deadline (the class's own, or the budget's).
    pub permit_timeouts: u64,
    /// Refused by the rate limit.
    pub rate_limited: u64,
    /// Refused because a pause the dependency asked for outlasted their deadline.
    pub paused: u64,
    /// Refused while waiting, to make room for a heavier class.
    pub evicted: u64,
    /// Stopped waiting before an outcome.
    pub cancelled: u64,
    /// Refused because the shared store could not be asked.
    pub unavailable: u64,
    /// Time this class's admitted callers waited for their permit.
    pub wait: LatencySummary,
}

/// Count, mean, median, 99th percentile and maximum of a set of durations.
///
/// Percentiles come from a log-linear histogram and are within 12.5% of the exact value; `count`,
/// `mean` and `max` are exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LatencySummary {
    /// How many durations were recorded.
    pub count: u64,
    /// Their mean (exact, to the nanosecond).
    pub mean: Duration,
    /// The median, from the histogram.
    pub p50: Duration,
    /// The 99th percentile, from the histogram.
    pub p99: Duration,
    /// The longest (exact).
    pub max: Duration,
}
