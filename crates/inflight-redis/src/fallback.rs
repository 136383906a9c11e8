//! [`Fallback`]: the calls a fleet store admits on its own while Redis cannot be asked
//! ([`Fail::Local`]), with lease ids of their own; shared by per-call leases and shares.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

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
///
/// It admits nothing for the first [`hold`](Fallback::hold) of an outage: the leases and shares
/// other processes took before it may still be running, and this process cannot see them. A
/// lease is lost on its holder's clock at most a lease and a third after its last confirmation
/// was sent (before the outage began, so before this process first failed to reach Redis); a
/// call under it then ends if its budget cancels such calls (`on_lost = "cancel"`). Past the
/// hold, the fleet runs at most `processes x n` (plus calls of lost leases kept running).
#[derive(Debug)]
pub(crate) struct Fallback {
    size: usize,
    /// How long after its first failure to reach Redis an outage's local admissions wait.
    hold: Duration,
    /// Taken while a caller checks the limit and takes a local permit.
    admitting: Mutex<()>,
    /// Local leases held now; read without the lock.
    held: AtomicUsize,
    next: AtomicU64,
    /// Woken when a call of the store ends (local or not): a waiter may fit now.
    ended: Notify,
}

impl Fallback {
    /// The fallback of `fail` for leases of `lease`.
    pub(crate) fn new(fail: Fail, lease: Duration) -> Fallback {
        let size = match fail {
            Fail::Local(n) => n,
            Fail::Closed => 0,
        };
        Fallback {
            size,
            hold: lease + lease / 3,
            admitting: Mutex::new(()),
            held: AtomicUsize::new(0),
            next: AtomicU64::new(0),
            ended: Notify::new(),
        }
    }

    /// How long after an outage's first failure the fallback admits nothing: a lease and a
    /// third, by when every lease confirmed before the outage is lost on its holder's clock.
    pub(crate) fn hold(&self) -> Duration {
        self.hold
    }

    /// A local lease once the outage that began (this process's first failure to reach Redis)
    /// at `since` is older than the hold, and fewer than the limit run, counting `running()`
    /// (the store's other calls still running). `None` once `ask_again` comes first: the
    /// caller asks Redis again. [`StoreError::Timeout`] once `deadline` comes first.
    pub(crate) async fn lease(
        &self,
        since: Instant,
        ask_again: Instant,
        deadline: Option<Instant>,
        running: impl Fn() -> usize,
    ) -> Result<Option<Lease>, StoreError> {
        let opens = since + self.hold;
        let until = deadline.map_or(ask_again, |d| d.min(ask_again));
        loop {
            let now = Instant::now();
            if now >= until {
                return match deadline {
                    Some(d) if now >= d => Err(StoreError::Timeout),
                    _ => Ok(None),
                };
            }
            if now < opens {
                tokio::time::sleep_until(opens.min(until)).await;
                continue;
            }
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
                    return Ok(Some(Lease::new(format!("{LOCAL_PREFIX}{n}"))));
                }
            }
            let _ = tokio::time::timeout_at(until, ended).await;
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
    /// under fleet leases still running included (`fail = "local"`, `local_limit`), once the
    /// outage is a lease and a third old: until then, the calls others began under leases
    /// before it may still run, and calls wait (asking Redis again every
    /// [`retry_after`](crate::FleetBuilder::retry_after)). Once Redis answers again, the calls
    /// admitted so are registered there and count against the fleet's limit until they end.
    ///
    /// So the dependency sees at most max(limit, processes x n), when the calls of leases lost
    /// in the outage end (always with `on_lost = "cancel"`); a call kept running on a lost
    /// lease adds itself.
    Local(usize),
}
