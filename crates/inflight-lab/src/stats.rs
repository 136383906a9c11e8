//! What the sim counts, as `GET /stats` reports it: the sim serves it, its `/metrics` renders it.

use serde::{Deserialize, Serialize};

/// The counters of one endpoint as `GET /stats` reports them.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct EndpointStats {
    /// Requests that reached the handler (malformed ones included).
    pub seen: u64,
    /// Requests answered 200.
    pub accepted: u64,
    /// Requests answered 503 because capacity and queue were full.
    pub rejected_503: u64,
    /// Requests answered 429 because they came faster than the scenario's quota.
    #[serde(default)]
    pub rejected_429: u64,
    /// Requests being served right now (for records: holding one of the `capacity` slots).
    pub in_service: u64,
    /// Most requests in service at once.
    pub peak_in_service: u64,
    /// Most requests inside the server at once, counting waiting ones and those about to be refused.
    pub peak_offered: u64,
}

/// The body of `GET /stats`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SimStats {
    pub scenario: String,
    pub time_scale: f64,
    pub enrich: EndpointStats,
    pub records: EndpointStats,
}
