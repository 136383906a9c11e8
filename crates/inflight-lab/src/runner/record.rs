//! A record's way through the dependencies, and the tasks that take records until none are
//! left.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::calls::{gated, Calls};
use super::gates::Gates;
use super::tally::{Outcome, Tally};
use super::ENRICHMENT_CALLS;
use crate::gate::CallFailure;
use crate::scenario::RecordClasses;

/// What the record tasks share.
pub(super) struct Shared {
    pub(super) client: reqwest::Client,
    /// The sim's base URL, for the warm-up.
    pub(super) base: String,
    /// Where enrichment calls and writes go: the sim, or the proxy in front of it.
    pub(super) enrichment_base: String,
    pub(super) records_base: String,
    /// Whether a proxy enforces the budgets, so that its 504 is the call timeout.
    pub(super) proxied: bool,
    pub(super) gates: Gates,
    pub(super) call_timeout: Duration,
    pub(super) enrichment: Calls,
    pub(super) writes: Calls,
    pub(super) enrichment_timeouts: AtomicU64,
    pub(super) next_id: AtomicU64,
    /// One past the last record id this runner takes.
    pub(super) end_id: u64,
    pub(super) tally: Mutex<Tally>,
    /// The records' classes and the run's seed they are drawn from.
    pub(super) classes: Option<(RecordClasses, u64)>,
    /// Per class: the records started, and the completion times of those accepted.
    pub(super) by_class: Mutex<BTreeMap<String, (u64, Vec<f64>)>>,
}

/// Processes record `id`, of priority class `class` if the scenario gives it one.
async fn process(shared: &Shared, id: u64, class: Option<&str>) -> Outcome {
    let mut timed_out = false;
    for _ in 0..ENRICHMENT_CALLS {
        let url = format!("{}/enrich/{id}", shared.enrichment_base);
        let client = shared.client.clone();
        let result = gated(
            shared,
            shared.gates.enrichment.as_ref(),
            class,
            &shared.enrichment,
            move || client.get(&url),
        )
        .await;
        match result {
            Ok(200) => {}
            Ok(code) => return Outcome::Failed(CallFailure::Status(code).kind("enrich")),
            Err(CallFailure::Timeout) => {
                // As in the reference experiment: the record is still written, marked incomplete.
                shared.enrichment_timeouts.fetch_add(1, Ordering::Relaxed);
                timed_out = true;
            }
            Err(other) => return Outcome::Failed(other.kind("enrich")),
        }
    }
    let body = serde_json::json!({ "id": id, "complete": !timed_out });
    let url = format!("{}/records", shared.records_base);
    let client = shared.client.clone();
    let result = gated(
        shared,
        shared.gates.records.as_ref(),
        class,
        &shared.writes,
        move || client.post(&url).json(&body),
    )
    .await;
    match result {
        Ok(200) if timed_out => Outcome::Incomplete,
        Ok(200) => Outcome::Complete,
        Ok(503) => Outcome::Rejected,
        Ok(code) => Outcome::Failed(CallFailure::Status(code).kind("write")),
        Err(failure) => Outcome::Failed(failure.kind("write")),
    }
}

/// Takes record ids until none are left, like one slot of `Parallel.ForEachAsync`.
pub(super) async fn worker(shared: Arc<Shared>) {
    loop {
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        if id >= shared.end_id {
            return;
        }
        let class = shared
            .classes
            .as_ref()
            .map(|(classes, seed)| classes.class_of(*seed, id));
        // The record's own clock: the run's (`completion_s`), from when the record is taken.
        let taken = Instant::now();
        shared.tally.lock().expect("tally lock").start();
        let outcome = process(&shared, id, class).await;
        let took = taken.elapsed().as_secs_f64();
        if let Some(class) = class {
            let mut by_class = shared.by_class.lock().expect("class lock");
            let (started, accepted) = by_class.entry(class.to_string()).or_default();
            *started += 1;
            if matches!(outcome, Outcome::Complete | Outcome::Incomplete) {
                accepted.push(took);
            }
        }
        shared.tally.lock().expect("tally lock").end(outcome);
    }
}
