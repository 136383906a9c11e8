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
}
