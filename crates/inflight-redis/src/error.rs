//! Errors: [`FleetUnavailable`], what a call refused under `fail = "closed"` carries, and
//! [`FleetError`], why a fleet could not be set up.

use std::fmt;
use std::sync::Arc;

/// Redis could not be asked for a fleet lease, so the call was refused (`fail = "closed"`).
///
/// It is the source of [`AcquireError::Unavailable`](inflight::AcquireError::Unavailable)'s
/// [`StoreError`](inflight::store::StoreError), and names the budget and the server:
/// `fleet budget "records": redis at redis://127.0.0.1:6379 cannot be reached: ...`.
#[derive(Debug, Clone)]
pub struct FleetUnavailable {
    budget: String,
    address: String,
    /// On a cluster, the budget's slot.
    slot: Option<u16>,
    reason: Arc<dyn std::error::Error + Send + Sync>,
}

/// Where a budget lives, as messages say it: `redis at URL`, or on a cluster (`slot`) the node
/// of the budget's slot, reached through the URL (which may name another node).
pub(crate) fn place(address: &str, slot: Option<u16>) -> String {
    match slot {
        Some(slot) => {
            format!("the redis cluster node of slot {slot} (the cluster reached through {address})")
        }
        None => format!("redis at {address}"),
    }
}

impl FleetUnavailable {
    /// `slot`: the budget's, on a cluster.
    pub(crate) fn new(
        budget: &str,
        (address, slot): (&str, Option<u16>),
        reason: Arc<dyn std::error::Error + Send + Sync>,
    ) -> FleetUnavailable {
        FleetUnavailable {
            budget: budget.to_string(),
            address: address.to_string(),
            slot,
            reason,
        }
    }

    /// The budget whose call was refused.
    pub fn budget(&self) -> &str {
        &self.budget
    }

    /// The Redis address that could not be reached.
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl fmt::Display for FleetUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fleet budget {:?}: {} cannot be reached: {}",
            self.budget,
            place(&self.address, self.slot),
            self.reason
        )
    }
}

impl std::error::Error for FleetUnavailable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.reason)
    }
}

/// Why a [`RedisFleet`](crate::RedisFleet) could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// The URL is not a fleet URL (`redis://`, `rediss://`, `redis+cluster://`,
    /// `redis+sentinel://`, ...); the URL is shown without its password.
    #[error(
        "invalid redis url {url:?}: {}",
        source.detail().map_or_else(|| source.to_string(), str::to_string)
    )]
    Url {
        url: String,
        #[source]
        source: redis::RedisError,
    },
    /// A setting is out of range.
    #[error("{0}")]
    Invalid(String),
    /// Redis could not be asked (unreachable, or it answered with an error); the message
    /// names the address, without its password.
    #[error("{0}")]
    Unreachable(String),
}
