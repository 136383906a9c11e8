//! Little's law helpers: how many calls must be in flight for a rate, and the most a limit lets
//! through.
//!
//! Little's law relates three long-run averages: **items in flight = throughput x time per item**.
//! A dependency that takes 150 ms per call and may hold 6 calls at once can pass at most
//! 6 / 0.150 s = 40 calls per second; wanting 100 calls per second through it would need 15 in flight.
//!
//! ```
//! use std::time::Duration;
//! use inflight::sizing::{in_flight_for, max_rate};
//!
//! assert_eq!(max_rate(6, Duration::from_millis(150)).events_per_second(), 40.0);
//! assert_eq!(in_flight_for(100.0, Duration::from_millis(150)), 15.0);
//! // The seed's illustration: 0.39 s per record at 100 records/s needs about 39 in flight.
//! assert!((in_flight_for(100.0, Duration::from_millis(390)) - 39.0).abs() < 1e-9);
//! ```

mod assess;

use std::time::Duration;

pub use crate::rate::{ParseRateError, Rate};
pub use assess::{assess, Assessment, Hints, Warning};

/// Calls in flight needed to sustain `rate_per_s` when each takes `latency` (rate x latency).
pub fn in_flight_for(rate_per_s: f64, latency: Duration) -> f64 {
    rate_per_s * latency.as_secs_f64()
}

/// The most a budget of `capacity` calls at once can pass when each takes `service_time`
/// (capacity / service time).
///
/// # Panics
///
/// Panics if `service_time` is zero: a call that takes no time has no rate bound.
pub fn max_rate(capacity: usize, service_time: Duration) -> Rate {
    assert!(
        !service_time.is_zero(),
        "service_time must be greater than zero"
    );
    Rate::per_second(capacity as f64 / service_time.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn littles_law() {
        assert_eq!(
            max_rate(6, Duration::from_millis(150)),
            Rate::per_second(40.0)
        );
        assert_eq!(in_flight_for(40.0, Duration::from_millis(150)), 6.0);
    }
}
