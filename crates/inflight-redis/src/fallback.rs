//! [`Fallback`]: the calls a fleet store admits on its own while Redis cannot be asked
//! ([`Fail::Local`]), with lease ids of their own; shared by per-call leases and shares.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};

use inflight::store::{Lease, StoreError};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Lease ids given by the fallback start with this; the server's never do.
const LOCAL_PREFIX: &str = "local:";

/// The local limit of a fail policy: `n` for [`Fail::Local(n)`](Fail::Local), none for
/// [`Fail::Closed`].
///
/// The limit is what the process may run while Redis is away, its calls under fleet permits
/// still running included: a process running 5 fleet calls with `Fail::Local(2)` admits nothing
/// locally until fewer than 2 of them run.
#[derive(Debug)]
pub(crate) struct Fallback {
    size: usize,
    /// Taken while a caller checks the limit and takes a local permit.
    admitting: Mutex<()>,
    /// Local leases held now; read without the lock.
    held: AtomicUsize,
    next: AtomicU64,
    /// Woken when a call of the store ends (local or not): a waiter may fit now.
    ended: Notify,
}

impl Fallback {
    pub(crate) fn new(fail: Fail) -> Fallback {
        let size = match fail {
            Fail::Local(n) => n,
            Fail::Closed => 0,
        };
        Fallback {
            size,
            admitting: Mutex::new(()),
            held: AtomicUsize::new(0),
            next: AtomicU64::new(0),
            ended: Notify::new(),
        }
    }

    /// A local lease once fewer than the limit run, counting `running()` (the store's other
    /// calls still running), waiting until `deadline` at most.
    pub(crate) async fn lease(
        &self,
        deadline: Option<Instant>,
        running: impl Fn() -> usize,
    ) -> Result<Lease, StoreError> {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            {
                let _one = self
                    .admitting
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if running().saturating_add(self.held()) < self.size {
                    self.held.fetch_add(1, Relaxed);
                    let n = self.next.fetch_add(1, Relaxed);
                    return Ok(Lease::new(format!("{LOCAL_PREFIX}{n}")));
                }
            }
            match deadline {
                Some(at) => tokio::time::timeout_at(at, ended)
                    .await
                    .map_err(|_| StoreError::Timeout)?,
                None => ended.await,
            }
        }
    }

    /// A call of the store that the fallback did not admit ended.
    pub(crate) fn call_ended(&self) {
        self.ended.notify_waiters();
    }

    /// Whether `lease` was given by a fallback, not by the server.
    pub(crate) fn gave(lease: &Lease) -> bool {
        lease.id().starts_with(LOCAL_PREFIX)
    }

    /// Takes back a lease it gave; false (and nothing done) for any other.
    pub(crate) fn take_back(&self, lease: &Lease) -> bool {
        if Fallback::gave(lease) {
            let _ = self
                .held
                .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
            self.ended.notify_waiters();
            true
        } else {
            false
        }
    }

    /// Local leases held now.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Relaxed)
    }
}

/// What a fleet budget does while Redis cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fail {
    /// Refuse calls with [`AcquireError::Unavailable`](inflight::AcquireError::Unavailable),
    /// whose error names the budget and the Redis address (`fail = "closed"`).
    Closed,
    /// Admit calls without Redis while fewer than this many run in this process, its calls
    /// under fleet leases still running included (`fail = "local"`, `local_limit`). Once Redis
    /// answers again, the calls admitted so are registered there and count against the fleet's
    /// limit until they end.
    Local(usize),
}
