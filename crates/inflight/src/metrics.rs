//! Prometheus-style metrics of every budget through the `metrics` facade (feature
//! `metrics`).
//!
//! One set of names, prefixed `inflight_`, in Prometheus units, labelled with the budget's name
//! (`budget`) and, on the counters that split by kind, `reason` or `outcome`:
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `inflight_budget_in_flight` | gauge | budget | calls running under a permit now; for a fleet budget (a budget with a store), those holding their fleet lease: the calls at the dependency |
//! | `inflight_budget_peak_in_flight` | gauge | budget | the most calls in flight at once since the budget was built: whether it ever bound, without sampling |
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

use ::metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Unit};

pub use crate::metric_names::*;
use crate::Budget;

/// Describes every metric (help text and unit) to the installed recorder.
pub fn describe() {
    describe_gauge!(
        IN_FLIGHT,
        Unit::Count,
        "Calls running under a permit now, per budget; for a fleet budget, those holding their fleet lease (the calls at the dependency)."
    );
    describe_gauge!(
        PEAK_IN_FLIGHT,
        Unit::Count,
        "The most calls in flight at once since the budget was built, per budget."
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
    publish_with(budget, &budget.snapshot());
}

/// Publishes `snapshot` as `budget`'s gauges and counters, and the budget's zero waits since
/// the last publish: [`publish`] with a snapshot of the caller's.
///
/// For a budget that replaced another of the same name (a reloaded configuration), give its
/// snapshot with the replaced budget's counts added
/// ([`BudgetSnapshot::add_counts`](crate::BudgetSnapshot::add_counts)): the counters are
/// published as absolute values and never go down, so the new budget's own counts would
/// leave them where the old one stopped until it passed them.
pub fn publish_with(budget: &Budget, snapshot: &crate::BudgetSnapshot) {
    publish_snapshot(snapshot);
    budget.engine().stats.publish_zero_waits();
    for class in budget.engine().stats.classes() {
        class.publish_zero_waits();
    }
}

/// The gauges and counters of `s`, under its budget's name.
fn publish_snapshot(s: &crate::BudgetSnapshot) {
    let name = s.name.clone();
    gauge!(IN_FLIGHT, "budget" => name.clone()).set(s.in_flight as f64);
    gauge!(PEAK_IN_FLIGHT, "budget" => name.clone()).set(s.peak_in_flight as f64);
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
}

/// Publishes every budget in `budgets`.
pub fn publish_all<'a>(budgets: impl IntoIterator<Item = &'a Budget>) {
    for budget in budgets {
        publish(budget);
    }
}
