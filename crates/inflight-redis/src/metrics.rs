//! A fleet store's gauges and counters through the [`metrics`] facade (feature
//! `metrics`), next to the budget's own (`inflight::metrics`).
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `inflight_fleet_leases_held` | gauge | budget | fleet leases this process holds now |
//! | `inflight_fleet_holders` | gauge | budget | leases held across the fleet, as last seen |
//! | `inflight_fleet_reclaimed_total` | counter | budget | expired leases taken back from here |
//! | `inflight_fleet_lost_total` | counter | budget | leases of this process that ended early |
//! | `inflight_fleet_fallbacks_total` | counter | budget | acquires served by the local fallback |
//! | `inflight_fleet_unavailable_total` | counter | budget | acquires refused, Redis unreachable |
//! | `inflight_fleet_redis_round_trip_seconds` | gauge | budget | mean Redis round trip so far |
//! | `inflight_fleet_redis_down` | gauge | budget | 1 while Redis cannot be reached (calls go to the fail policy) |
//! | `inflight_fleet_local_held` | gauge | budget | calls the local fallback admitted, running now |
//! | `inflight_fleet_learning` | gauge | budget | 1 while the budget learns after Redis lost its state (nothing new granted) |
//! | `inflight_fleet_epochs_moved_total` | counter | budget | times Redis lost the budget's state, as this process saw |
//! | `inflight_fleet_readded_total` | counter | budget | leases still running that Redis had lost, added back |
//! | `inflight_fleet_share` | gauge | budget | a share store's calls admitted at once now |
//! | `inflight_fleet_share_reserved` | gauge | budget | permits Redis reserves for this process's share |
//! | `inflight_fleet_share_target` | gauge | budget | this process's max-min fair share |
//! | `inflight_fleet_share_processes` | gauge | budget | processes in the share budget |
//! | `inflight_fleet_share_reports_total` | counter | budget | share reports Redis answered |
//!
//! Nothing is recorded on the call path: [`publish`] and [`publish_shares`] read a store's
//! counters, and [`publish_fleet`] those of every store of a fleet (call one before each scrape,
//! or on a timer).
//!
//! ```
//! use inflight_redis::{Fail, RedisFleet};
//!
//! let store = RedisFleet::new("redis://127.0.0.1:6379").unwrap().store(6, Fail::Closed);
//! inflight_redis::metrics::describe();
//! inflight_redis::metrics::publish("records", &store);
//! ```

use ::metrics::{counter, describe_counter, describe_gauge, gauge, Unit};

use crate::{FleetHealth, RedisFleet, RedisStore, ShareStore};

/// Fleet leases this process holds now (gauge).
pub const LEASES_HELD: &str = "inflight_fleet_leases_held";
/// Leases held across the fleet, as the last acquire saw them (gauge).
pub const HOLDERS: &str = "inflight_fleet_holders";
/// Expired leases taken back by acquires from here (counter).
pub const RECLAIMED: &str = "inflight_fleet_reclaimed_total";
/// Leases of this process that ended before they were given back (counter).
pub const LOST: &str = "inflight_fleet_lost_total";
/// Acquires served by the local fallback while Redis could not be reached (counter).
pub const FALLBACKS: &str = "inflight_fleet_fallbacks_total";
/// Acquires refused because Redis could not be reached (counter).
pub const UNAVAILABLE: &str = "inflight_fleet_unavailable_total";
/// The mean Redis round trip so far (gauge, seconds).
pub const ROUND_TRIP: &str = "inflight_fleet_redis_round_trip_seconds";
/// 1 while Redis cannot be reached (gauge).
pub const REDIS_DOWN: &str = "inflight_fleet_redis_down";
/// Calls the local fallback admitted, running now (gauge).
pub const LOCAL_HELD: &str = "inflight_fleet_local_held";
/// 1 while the budget learns after Redis lost its state (gauge).
pub const LEARNING: &str = "inflight_fleet_learning";
/// Times Redis lost the budget's state, as this process saw (counter).
pub const EPOCHS_MOVED: &str = "inflight_fleet_epochs_moved_total";
/// Leases still running that Redis had lost, added back (counter).
pub const READDED: &str = "inflight_fleet_readded_total";
/// A share store's calls admitted at once now (gauge).
pub const SHARE: &str = "inflight_fleet_share";
/// Permits Redis reserves for this process's share (gauge).
pub const SHARE_RESERVED: &str = "inflight_fleet_share_reserved";
/// This process's max-min fair share (gauge).
pub const SHARE_TARGET: &str = "inflight_fleet_share_target";
/// Processes in the share budget (gauge).
pub const SHARE_PROCESSES: &str = "inflight_fleet_share_processes";
/// Share reports Redis answered (counter).
pub const SHARE_REPORTS: &str = "inflight_fleet_share_reports_total";

/// Describes every metric to the installed recorder (names, units, help).
pub fn describe() {
    describe_gauge!(
        LEASES_HELD,
        Unit::Count,
        "Fleet leases this process holds now."
    );
    describe_gauge!(
        HOLDERS,
        Unit::Count,
        "Leases held across the fleet, as last seen."
    );
    describe_counter!(
        RECLAIMED,
        Unit::Count,
        "Expired leases taken back from here."
    );
    describe_counter!(
        LOST,
        Unit::Count,
        "Leases of this process that ended early."
    );
    describe_counter!(
        FALLBACKS,
        Unit::Count,
        "Acquires served by the local fallback."
    );
    describe_counter!(
        UNAVAILABLE,
        Unit::Count,
        "Acquires refused: Redis unreachable."
    );
    describe_gauge!(ROUND_TRIP, Unit::Seconds, "Mean Redis round trip so far.");
    describe_gauge!(
        REDIS_DOWN,
        Unit::Count,
        "1 while Redis cannot be reached: calls go to the fail policy."
    );
    describe_gauge!(
        LOCAL_HELD,
        Unit::Count,
        "Calls the local fallback admitted, running now."
    );
    describe_gauge!(
        LEARNING,
        Unit::Count,
        "1 while the budget learns after Redis lost its state: nothing new is granted."
    );
    describe_counter!(
        EPOCHS_MOVED,
        Unit::Count,
        "Times Redis lost the budget's state, as this process saw."
    );
    describe_counter!(
        READDED,
        Unit::Count,
        "Leases still running that Redis had lost, added back."
    );
    describe_gauge!(SHARE, Unit::Count, "Calls the share admits at once now.");
    describe_gauge!(
        SHARE_RESERVED,
        Unit::Count,
        "Permits Redis reserves for this process's share."
    );
    describe_gauge!(
        SHARE_TARGET,
        Unit::Count,
        "This process's max-min fair share."
    );
    describe_gauge!(
        SHARE_PROCESSES,
        Unit::Count,
        "Processes in the share budget."
    );
    describe_counter!(SHARE_REPORTS, Unit::Count, "Share reports Redis answered.");
}

/// Publishes `store`'s counters, labelled `budget = name`.
pub fn publish(name: &str, store: &RedisStore) {
    let s = store.snapshot();
    gauge!(LEASES_HELD, "budget" => name.to_string()).set(s.held as f64);
    gauge!(HOLDERS, "budget" => name.to_string()).set(s.fleet_holders as f64);
    counter!(RECLAIMED, "budget" => name.to_string()).absolute(s.reclaimed);
    counter!(READDED, "budget" => name.to_string()).absolute(s.readded);
    publish_health(
        &s.health(name.to_string(), store.fail()),
        s.lost,
        s.mean_round_trip,
    );
}

/// Publishes a share store's state and counters, labelled `budget = name`.
pub fn publish_shares(name: &str, store: &ShareStore) {
    let s = store.snapshot();
    gauge!(SHARE, "budget" => name.to_string()).set(s.share as f64);
    gauge!(SHARE_RESERVED, "budget" => name.to_string()).set(s.reserved as f64);
    gauge!(SHARE_TARGET, "budget" => name.to_string()).set(s.target as f64);
    gauge!(SHARE_PROCESSES, "budget" => name.to_string()).set(s.processes as f64);
    counter!(SHARE_REPORTS, "budget" => name.to_string()).absolute(s.reports);
    publish_health(
        &s.health(name.to_string(), store.fail()),
        s.lost,
        s.mean_round_trip,
    );
}

/// What both kinds of store publish: whether Redis is reached, the fallback, the epoch.
fn publish_health(h: &FleetHealth, lost: u64, round_trip: std::time::Duration) {
    let name = h.budget.clone();
    counter!(LOST, "budget" => name.clone()).absolute(lost);
    counter!(FALLBACKS, "budget" => name.clone()).absolute(h.fallbacks);
    counter!(UNAVAILABLE, "budget" => name.clone()).absolute(h.refused);
    gauge!(ROUND_TRIP, "budget" => name.clone()).set(round_trip.as_secs_f64());
    gauge!(REDIS_DOWN, "budget" => name.clone()).set(f64::from(u8::from(h.redis_down)));
    gauge!(LOCAL_HELD, "budget" => name.clone()).set(h.local_held as f64);
    gauge!(LEARNING, "budget" => name.clone()).set(f64::from(u8::from(h.learning)));
    counter!(EPOCHS_MOVED, "budget" => name).absolute(h.epochs_moved);
}

/// Publishes every store of `fleet` (and its clones) that has served a budget, under that
/// budget's name: what `inflight proxy` shows on `/metrics` for its fleet budgets.
pub fn publish_fleet(fleet: &RedisFleet) {
    for (name, store) in fleet.stores() {
        publish(&name, &store);
    }
    for (name, store) in fleet.share_stores() {
        publish_shares(&name, &store);
    }
}
