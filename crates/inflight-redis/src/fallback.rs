//! [`Fallback`]: the permits a fleet store admits on its own while Redis cannot be asked
//! ([`Fail::Local`]), with lease ids of their own; shared by per-call leases and shares.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use inflight::store::{Lease, StoreError};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::Fail;

/// Lease ids given by the fallback start with this; the server's never do.
const LOCAL_PREFIX: &str = "local:";

/// The local permits of a fail policy: `n` for [`Fail::Local(n)`](Fail::Local), none for
/// [`Fail::Closed`].
#[derive(Debug)]
pub(crate) struct Fallback {
    permits: Semaphore,
    size: usize,
    next: AtomicU64,
}

impl Fallback {
    pub(crate) fn new(fail: Fail) -> Fallback {
        let size = match fail {
            Fail::Local(n) => n.min(Semaphore::MAX_PERMITS),
            Fail::Closed => 0,
        };
        Fallback {
            permits: Semaphore::new(size),
            size,
            next: AtomicU64::new(0),
        }
    }

    /// A local lease, waiting for a free permit until `deadline` at most.
    pub(crate) async fn lease(&self, deadline: Option<Instant>) -> Result<Lease, StoreError> {
        let permit = match deadline {
            Some(at) => tokio::time::timeout_at(at, self.permits.acquire())
                .await
                .map_err(|_| StoreError::Timeout)?,
            None => self.permits.acquire().await,
        };
        permit
            .map_err(|e| StoreError::unavailable(e.to_string()))?
            .forget();
        let n = self.next.fetch_add(1, Relaxed);
        Ok(Lease::new(format!("{LOCAL_PREFIX}{n}")))
    }

    /// Whether `lease` was given by a fallback, not by the server.
    pub(crate) fn gave(lease: &Lease) -> bool {
        lease.id().starts_with(LOCAL_PREFIX)
    }

    /// Takes back a lease it gave; false (and nothing done) for any other.
    pub(crate) fn take_back(&self, lease: &Lease) -> bool {
        if Fallback::gave(lease) {
            self.permits.add_permits(1);
            true
        } else {
            false
        }
    }

    /// Local leases held now.
    pub(crate) fn held(&self) -> usize {
        self.size.saturating_sub(self.permits.available_permits())
    }
}
