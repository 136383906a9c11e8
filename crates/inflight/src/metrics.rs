//! Prometheus-style metrics of every budget through the `metrics` facade (feature
//! `metrics`).
//!
//! One set of names, prefixed `inflight_`, in Prometheus units, labelled with the budget's name
//! (`budget`) and, on the counters that split by kind, `reason` or `outcome`:
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `inflight_budget_in_flight` | gauge | budget | calls running under a permit now; for a fleet budget (a budget with a store), those holding their fleet lease: the calls at the dependency |
//! | `inflight_budget_awaiting_store` | gauge | budget | callers holding a local permit while they wait for their fleet lease (0 without a store) |
//! | `inflight_budget_waiting` | gauge | budget | callers waiting for a permit now |
//! | `inflight_budget_limit` | gauge | budget | the limit now (moves if it learns) |
//! | `inflight_budget_admitted_total` | counter | budget | callers granted a permit |
//! | `inflight_budget_rejections_total` | counter | budget, reason | `queue_full`, `permit_timeout`, `rate_limited`, `paused`, `unavailable` |
//! | `inflight_budget_calls_total` | counter | budget, outcome | `ok`, `error`, `timeout`, `cancelled` (what the call returned) |
//! | `inflight_budget_outcomes_total` | counter | budget, outcome | `success`, `overload`, `ignored`, `error`, `timeout` (as the classifier said) |
//! | `inflight_budget_pauses_total` | counter | budget | overloads with a retry-after that paused the budget |
//! | `inflight_budget_retries_total` | counter | budget | retries made by `call_with_retry` |
//! | `inflight_budget_retries_refused_total` | counter | budget, reason | retries not made: `retry_budget`, `deadline`, `max_attempts` |
//! | `inflight_budget_permit_wait_seconds` | histogram | budget | time from asking to holding a permit |
//! | `inflight_budget_call_duration_seconds` | histogram | budget | time a call held its permit |
//!
//! A budget with [`Classes`](crate::Classes) also has one series per class, labelled `budget`
//! and `class`, under names of their own (so that summing a budget-wide series never counts a
//! caller twice); its budget-wide rejections gain the reason `evicted`:
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `inflight_class_in_flight` | gauge | budget, class | permits held now by the class |
//! | `inflight_class_waiting` | gauge | budget, class | the class's callers waiting now |
//! | `inflight_class_admitted_total` | counter | budget, class | the class's callers granted a permit |
//! | `inflight_class_rejections_total` | counter | budget, class, reason | as the budget's, and `evicted` |
//! | `inflight_class_cancelled_total` | counter | budget, class | the class's callers that stopped waiting |
//! | `inflight_class_permit_wait_seconds` | histogram | budget, class | the class's time from asking to holding a permit |
//!
//! # What the hot path pays
//!
//! Nothing on the fast path: a permit granted at once records no metric there. Gauges and
//! counters are read from the budget's own counters when [`publish`] runs (call it before each
//! scrape, or every few seconds), and the zero waits of the fast path are added to the wait
//! histogram then, in one call. Waits that did wait, and calls through the budget (`call`,
//! `call_with`, a `BudgetLayer`), are recorded as they end: they read the clock already.
//!
//! Install the recorder before building budgets: a budget takes its histogram handles from the
//! recorder installed when it is built (as every handle of the `metrics` crate does). With
//! `metrics-exporter-prometheus`, set buckets (`set_buckets`), or the histograms render as
//! summaries.
//!
//! ```
//! use inflight::{Budget, BudgetConfig};
//!
//! let records = Budget::new("records", BudgetConfig::new(6)).unwrap();
//! inflight::metrics::describe();
//! // Before each scrape (or on a timer):
//! inflight::metrics::publish(&records);
//! ```

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use ::metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Histogram,
    Unit,
};

use crate::Budget;

/// Calls running under a permit now; for a fleet budget, those holding their fleet lease (gauge).
pub const IN_FLIGHT: &str = "inflight_budget_in_flight";
/// Callers holding a local permit while they wait for their store's lease (gauge).
pub const AWAITING_STORE: &str = "inflight_budget_awaiting_store";
/// Callers waiting for a permit now (gauge).
pub const WAITING: &str = "inflight_budget_waiting";
/// The limit now (gauge).
pub const LIMIT: &str = "inflight_budget_limit";
/// Callers granted a permit (counter).
pub const ADMITTED: &str = "inflight_budget_admitted_total";
/// Callers refused a permit, by `reason` (counter).
pub const REJECTIONS: &str = "inflight_budget_rejections_total";
/// Calls through the budget, by `outcome` (counter).
pub const CALLS: &str = "inflight_budget_calls_total";
/// Calls through the budget, by the `outcome` their classifier gave (counter).
pub const OUTCOMES: &str = "inflight_budget_outcomes_total";
/// Overloads with a retry-after that paused the budget (counter).
pub const PAUSES: &str = "inflight_budget_pauses_total";
/// Retries made by `Budget::call_with_retry` (counter).
pub const RETRIES: &str = "inflight_budget_retries_total";
/// Retries not made, by `reason` (counter).
pub const RETRIES_REFUSED: &str = "inflight_budget_retries_refused_total";
/// Time from asking for a permit to holding it (histogram, seconds).
pub const PERMIT_WAIT: &str = "inflight_budget_permit_wait_seconds";
/// Time a call held its permit (histogram, seconds).
pub const CALL_DURATION: &str = "inflight_budget_call_duration_seconds";

/// Permits held now by one class of a budget (gauge).
pub const CLASS_IN_FLIGHT: &str = "inflight_class_in_flight";
/// One class's callers waiting for a permit now (gauge).
pub const CLASS_WAITING: &str = "inflight_class_waiting";
/// One class's callers granted a permit (counter).
pub const CLASS_ADMITTED: &str = "inflight_class_admitted_total";
/// One class's callers refused a permit, by `reason` (counter).
pub const CLASS_REJECTIONS: &str = "inflight_class_rejections_total";
/// One class's callers that stopped waiting before an outcome (counter).
pub const CLASS_CANCELLED: &str = "inflight_class_cancelled_total";
/// One class's time from asking for a permit to holding it (histogram, seconds).
pub const CLASS_PERMIT_WAIT: &str = "inflight_class_permit_wait_seconds";

/// Buckets (seconds) that suit both histograms, from 100 µs to 30 s; for an exporter's
/// `set_buckets`.
pub const BUCKETS: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0,
];

/// Describes every metric (help text and unit) to the installed recorder.
pub fn describe() {
    describe_gauge!(
        IN_FLIGHT,
        Unit::Count,
        "Calls running under a permit now, per budget; for a fleet budget, those holding their fleet lease (the calls at the dependency)."
    );
    describe_gauge!(
        AWAITING_STORE,
        Unit::Count,
        "Callers holding a local permit while they wait for their fleet lease, per budget."
    );
    describe_gauge!(
        WAITING,
        Unit::Count,
        "Callers waiting for a permit now, per budget."
    );
    describe_gauge!(
        LIMIT,
        Unit::Count,
        "The budget's limit now; it moves if the limit learns."
    );
    describe_counter!(ADMITTED, Unit::Count, "Callers granted a permit.");
    describe_counter!(
        REJECTIONS,
        Unit::Count,
        "Callers refused a permit, by reason: queue_full, permit_timeout, rate_limited, paused, unavailable, and evicted for a budget with priority classes."
    );
    describe_counter!(
        CALLS,
        Unit::Count,
        "Calls made through the budget, by outcome: ok, error, timeout, cancelled."
    );
    describe_counter!(
        OUTCOMES,
        Unit::Count,
        "Calls made through the budget, by the outcome their classifier gave: success, overload, ignored, error, timeout."
    );
    describe_counter!(
        PAUSES,
        Unit::Count,
        "Overloads with a retry-after that paused the budget."
    );
    describe_counter!(
        RETRIES,
        Unit::Count,
        "Retries made within the retry budget."
    );
    describe_counter!(
        RETRIES_REFUSED,
        Unit::Count,
        "Retries not made, by reason: retry_budget, deadline, max_attempts."
    );
    describe_histogram!(
        PERMIT_WAIT,
        Unit::Seconds,
        "Time from asking for a permit to holding it."
    );
    describe_histogram!(CALL_DURATION, Unit::Seconds, "Time a call held its permit.");
    describe_gauge!(
        CLASS_IN_FLIGHT,
        Unit::Count,
        "Permits held now, per budget and priority class."
    );
    describe_gauge!(
        CLASS_WAITING,
        Unit::Count,
        "Callers waiting for a permit now, per budget and priority class."
    );
    describe_counter!(
        CLASS_ADMITTED,
        Unit::Count,
        "Callers granted a permit, per priority class."
    );
    describe_counter!(
        CLASS_REJECTIONS,
        Unit::Count,
        "Callers refused a permit, per priority class, by reason: queue_full, permit_timeout, rate_limited, paused, unavailable, evicted."
    );
    describe_counter!(
        CLASS_CANCELLED,
        Unit::Count,
        "Callers that stopped waiting before an outcome, per priority class."
    );
    describe_histogram!(
        CLASS_PERMIT_WAIT,
        Unit::Seconds,
        "Time from asking for a permit to holding it, per priority class."
    );
}

/// Publishes `budget`'s gauges and counters, and the zero waits since the last publish.
pub fn publish(budget: &Budget) {
    let s = budget.snapshot();
    let name = s.name.clone();
    gauge!(IN_FLIGHT, "budget" => name.clone()).set(s.in_flight as f64);
    gauge!(AWAITING_STORE, "budget" => name.clone()).set(s.awaiting_store as f64);
    gauge!(WAITING, "budget" => name.clone()).set(s.waiting as f64);
    gauge!(LIMIT, "budget" => name.clone()).set(s.limit as f64);
    counter!(ADMITTED, "budget" => name.clone()).absolute(s.admitted);
    for (reason, n) in [
        ("queue_full", s.rejected),
        ("permit_timeout", s.permit_timeouts),
        ("rate_limited", s.rate_limited),
        ("paused", s.paused),
        ("unavailable", s.unavailable),
    ] {
        counter!(REJECTIONS, "budget" => name.clone(), "reason" => reason).absolute(n);
    }
    if !s.classes.is_empty() {
        counter!(REJECTIONS, "budget" => name.clone(), "reason" => "evicted").absolute(s.evicted);
    }
    for c in &s.classes {
        let class = c.name.clone();
        gauge!(CLASS_IN_FLIGHT, "budget" => name.clone(), "class" => class.clone())
            .set(c.in_flight as f64);
        gauge!(CLASS_WAITING, "budget" => name.clone(), "class" => class.clone())
            .set(c.waiting as f64);
        counter!(CLASS_ADMITTED, "budget" => name.clone(), "class" => class.clone())
            .absolute(c.admitted);
        counter!(CLASS_CANCELLED, "budget" => name.clone(), "class" => class.clone())
            .absolute(c.cancelled);
        for (reason, n) in [
            ("queue_full", c.rejected),
            ("permit_timeout", c.permit_timeouts),
            ("rate_limited", c.rate_limited),
            ("paused", c.paused),
            ("unavailable", c.unavailable),
            ("evicted", c.evicted),
        ] {
            counter!(CLASS_REJECTIONS, "budget" => name.clone(), "class" => class.clone(), "reason" => reason)
                .absolute(n);
        }
    }
    for (outcome, n) in [
        ("ok", s.calls_ok),
        ("error", s.calls_error),
        ("timeout", s.call_timeouts),
        ("cancelled", s.calls_cancelled),
    ] {
        counter!(CALLS, "budget" => name.clone(), "outcome" => outcome).absolute(n);
    }
    for (outcome, n) in [
        ("success", s.outcomes_success),
        ("overload", s.outcomes_overload),
        ("ignored", s.outcomes_ignored),
        ("error", s.outcomes_error),
        ("timeout", s.outcomes_timeout),
    ] {
        counter!(OUTCOMES, "budget" => name.clone(), "outcome" => outcome).absolute(n);
    }
    counter!(PAUSES, "budget" => name.clone()).absolute(s.pauses);
    counter!(RETRIES, "budget" => name.clone()).absolute(s.retries);
    for (reason, n) in [
        ("retry_budget", s.retries_denied),
        ("deadline", s.retries_past_deadline),
        ("max_attempts", s.retries_out_of_attempts),
    ] {
        counter!(RETRIES_REFUSED, "budget" => name.clone(), "reason" => reason).absolute(n);
    }
    budget.engine().stats.publish_zero_waits();
    for class in budget.engine().stats.classes() {
        class.publish_zero_waits();
    }
}

/// Publishes every budget in `budgets`.
pub fn publish_all<'a>(budgets: impl IntoIterator<Item = &'a Budget>) {
    for budget in budgets {
        publish(budget);
    }
}

/// A budget's histogram handles, taken from the recorder installed when it was built.
pub(crate) struct Handles {
    wait: Histogram,
    call: Histogram,
    /// Zero waits already added to the wait histogram.
    zero_waits_published: AtomicU64,
}

impl Handles {
    pub(crate) fn new(budget: &str) -> Handles {
        Handles {
            wait: histogram!(PERMIT_WAIT, "budget" => budget.to_string()),
            call: histogram!(CALL_DURATION, "budget" => budget.to_string()),
            zero_waits_published: AtomicU64::new(0),
        }
    }

    pub(crate) fn waited(&self, d: Duration) {
        self.wait.record(d.as_secs_f64());
    }

    pub(crate) fn called(&self, d: Duration) {
        self.call.record(d.as_secs_f64());
    }

    /// Adds the zero waits counted since the last call (`total` so far) to the wait histogram.
    pub(crate) fn zero_waits(&self, total: u64) {
        let before = self.zero_waits_published.swap(total, Relaxed);
        if total > before {
            self.wait.record_many(0.0, (total - before) as usize);
        }
    }
}

/// One class's histogram handle, taken from the recorder installed when its budget was built.
pub(crate) struct ClassHandles {
    wait: Histogram,
    zero_waits_published: AtomicU64,
}

impl ClassHandles {
    pub(crate) fn new(budget: &str, class: &str) -> ClassHandles {
        ClassHandles {
            wait: histogram!(CLASS_PERMIT_WAIT, "budget" => budget.to_string(), "class" => class.to_string()),
            zero_waits_published: AtomicU64::new(0),
        }
    }

    pub(crate) fn waited(&self, d: Duration) {
        self.wait.record(d.as_secs_f64());
    }

    /// As [`Handles::zero_waits`], for the class.
    pub(crate) fn zero_waits(&self, total: u64) {
        let before = self.zero_waits_published.swap(total, Relaxed);
        if total > before {
            self.wait.record_many(0.0, (total - before) as usize);
        }
    }
}
