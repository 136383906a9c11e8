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
//!
//! Nothing is recorded on the call path: [`publish`] reads the store's counters (call it before
//! each scrape, or on a timer).
//!
//! ```
//! use inflight_redis::{Fail, RedisFleet};
//!
//! let store = RedisFleet::new("redis://127.0.0.1:6379").unwrap().store(6, Fail::Closed);
//! inflight_redis::metrics::describe();
//! inflight_redis::metrics::publish("records", &store);
//! ```

use ::metrics::{counter, describe_counter, describe_gauge, gauge, Unit};

use crate::RedisStore;

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
}

/// Publishes `store`'s counters, labelled `budget = name`.
pub fn publish(name: &str, store: &RedisStore) {
    let s = store.snapshot();
    let name = name.to_string();
    gauge!(LEASES_HELD, "budget" => name.clone()).set(s.held as f64);
    gauge!(HOLDERS, "budget" => name.clone()).set(s.fleet_holders as f64);
    counter!(RECLAIMED, "budget" => name.clone()).absolute(s.reclaimed);
    counter!(LOST, "budget" => name.clone()).absolute(s.lost);
    counter!(FALLBACKS, "budget" => name.clone()).absolute(s.fallbacks);
    counter!(UNAVAILABLE, "budget" => name.clone()).absolute(s.unavailable);
    gauge!(ROUND_TRIP, "budget" => name).set(s.mean_round_trip.as_secs_f64());
}
