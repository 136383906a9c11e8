//! The name of every metric a budget exports (see [`crate::metrics`], which re-exports them):
//! one source for the exporter and for the histogram handles a budget takes when it is built.

/// Calls running under a permit now; for a fleet budget, those holding their fleet lease (gauge).
pub const IN_FLIGHT: &str = "inflight_budget_in_flight";
/// The most calls that ran under a permit at once since the budget was built (gauge).
pub const PEAK_IN_FLIGHT: &str = "inflight_budget_peak_in_flight";
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
