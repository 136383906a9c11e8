//! [`FleetSnapshot`]: a fleet store's counters at one moment.

use std::time::Duration;

/// A [`RedisStore`](crate::RedisStore)'s counters, since it was made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetSnapshot {
    /// Fleet leases this process holds now.
    pub held: usize,
    /// Permits of the local fallback held now (`fail = "local"`).
    pub local_held: usize,
    /// Leases held across the fleet, as the last acquire saw them.
    pub fleet_holders: u64,
    /// Fleet leases granted here.
    pub acquired: u64,
    /// Fleet leases given back from here.
    pub released: u64,
    /// Expired leases (of any holder) that acquires from here took back.
    pub reclaimed: u64,
    /// Leases of this process that ended before they were given back (expired during a stall,
    /// or gone with a Redis restart).
    pub lost: u64,
    /// Acquires served by the local fallback because Redis could not be asked.
    pub fallbacks: u64,
    /// Acquires refused because Redis could not be asked (`fail = "closed"`).
    pub unavailable: u64,
    /// Acquires that reached their deadline while the fleet was full.
    pub timeouts: u64,
    /// Round trips to Redis timed (acquires and renewals).
    pub round_trips: u64,
    /// Their mean time.
    pub mean_round_trip: Duration,
    /// Whether the last call to Redis failed (calls skip it for a while, then ask again).
    pub redis_down: bool,
    /// Why, while `redis_down`: the error of the last failed call, cut to 200 characters.
    pub redis_error: Option<String>,
    /// The budget's epoch as this process last saw it (0 before its first reply): it moves
    /// when Redis loses the budget's state (a restart without persistence, a flush, a failover
    /// that lost writes).
    pub epoch: u64,
    /// How often the epoch moved on from one this process had seen.
    pub epochs_moved: u64,
    /// Leases this process still ran that Redis had lost, added back.
    pub readded: u64,
    /// Calls of the local fallback registered in Redis once it answered again (they count
    /// against the fleet's limit until they end).
    pub locals_registered: u64,
    /// Callers refused by the fleet's rate: their slot came after their permit deadline.
    pub rate_limited: u64,
    /// Whether the budget is learning (after a loss of state, nothing new is granted until
    /// every process has registered what it runs), as the last reply said.
    pub learning: bool,
}
