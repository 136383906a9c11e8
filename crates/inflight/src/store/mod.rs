//! Where a budget's permits live: [`Store`], the seam for permits kept outside the process (shared
//! by every replica of a service), and the local permits every budget has.
//!
//! A budget always takes a local permit first, so that a process never asks a shared store for
//! more than its own share; with a store, it then takes a [`Lease`] from the store before the call
//! may start, and gives the lease back when the permit is dropped. Both waits count against the
//! budget's `permit_timeout`.
//!
//! [`MemoryStore`] keeps the shared permits in this process: one limit over several budgets, and
//! the double that tests of a store-backed budget use.
//!
//! ```
//! use std::sync::Arc;
//! use inflight::store::MemoryStore;
//! use inflight::Budget;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! // Two budgets of 4, sharing at most 5 calls in flight between them.
//! let shared = Arc::new(MemoryStore::new(5));
//! let a = Budget::builder("a").max_concurrent(4).store(shared.clone()).build().unwrap();
//! let b = Budget::builder("b").max_concurrent(4).store(shared.clone()).build().unwrap();
//! let held: Vec<_> = futures::future::join_all((0..4).map(|_| a.acquire())).await;
//! let first_b = b.acquire().await.unwrap();
//! assert_eq!(shared.available(), 0);
//! drop(first_b);
//! drop(held);
//! assert_eq!(shared.available(), 5);
//! # }
//! ```

pub(crate) mod local;
mod memory;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub use memory::MemoryStore;

/// A future returned by a [`Store`].
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Permits kept outside a budget's own process-local ones, taken after the local permit.
///
/// # Contract
///
/// - `acquire` returns a lease or an error no later than `deadline` (when there is one), and is
///   cancel safe: a future dropped before it returns holds nothing afterwards (a remote store
///   makes that true with a lease that expires).
/// - `release` gives back a lease acquired from this store, at most once; it must not block (a
///   remote store sends the release in the background).
pub trait Store: fmt::Debug + Send + Sync + 'static {
    /// Takes a lease for budget `budget`, waiting until `deadline` at most.
    fn acquire<'a>(
        &'a self,
        budget: &'a str,
        deadline: Option<Instant>,
    ) -> StoreFuture<'a, Result<Lease, StoreError>>;

    /// Gives a lease back.
    fn release(&self, budget: &str, lease: Lease);

    /// Whether the store enforces a rate limit of its own within `acquire` (one shared by every
    /// process that uses it): the budget then passes no rate gate of its own, and a caller whose
    /// turn comes after its deadline is refused with [`StoreError::RateLimited`]. Default: no.
    fn keeps_rate(&self) -> bool {
        false
    }

    /// For a store that keeps a rate ([`Store::keeps_rate`]): how long from now until its rate
    /// would let a new caller of budget `budget` start within `permit_timeout`, as far as the
    /// store knows (zero when it knows of no wait); `None` for a store without a rate. What
    /// [`Budget::rate_limited_for`](crate::Budget::rate_limited_for) answers for such a budget.
    fn rate_limited_for(&self, budget: &str, permit_timeout: Option<Duration>) -> Option<Duration> {
        let _ = (budget, permit_timeout);
        None
    }
}

/// A permit held in a [`Store`], named by an id the store chose.
///
/// A remote store's lease can end before its holder gives it back: it expired while the holder
/// was stalled, or the store lost it. Such a store hands out leases made with
/// [`Lease::watched`] and marks them lost through the [`LeaseWatch`] it keeps; the holder sees
/// it with [`Lease::is_lost`] (through [`Permit::lease`](crate::Permit::lease)).
///
/// ```
/// use inflight::store::{Lease, LeaseWatch};
///
/// let watch = LeaseWatch::new();
/// let lease = Lease::watched("7f3a", watch.clone());
/// assert!(!lease.is_lost());
/// watch.mark_lost();
/// assert!(lease.is_lost());
/// ```
#[derive(Debug, Clone)]
pub struct Lease {
    id: Box<str>,
    watch: Option<LeaseWatch>,
}

impl Lease {
    /// A lease with this id, that is never lost.
    pub fn new(id: impl Into<Box<str>>) -> Lease {
        Lease {
            id: id.into(),
            watch: None,
        }
    }

    /// A lease with this id, that the store can mark lost through `watch`.
    pub fn watched(id: impl Into<Box<str>>, watch: LeaseWatch) -> Lease {
        Lease {
            id: id.into(),
            watch: Some(watch),
        }
    }

    /// The lease's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the store has said this lease ended before it was given back: its permit may now
    /// be someone else's.
    pub fn is_lost(&self) -> bool {
        self.watch.as_ref().is_some_and(LeaseWatch::is_lost)
    }

    /// Waits until the store says this lease was lost; never returns for a lease that cannot be.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future loses nothing.
    ///
    /// # Examples
    ///
    /// Stop a long call once its lease is gone, since its permit may now be someone else's:
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::store::{Lease, LeaseWatch};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let watch = LeaseWatch::new();
    /// let lease = Lease::watched("7f3a", watch.clone());
    /// tokio::spawn(async move {
    ///     tokio::time::sleep(Duration::from_secs(5)).await;
    ///     watch.mark_lost(); // the store saw the lease expire
    /// });
    /// let long_call = tokio::time::sleep(Duration::from_secs(60));
    /// tokio::select! {
    ///     _ = long_call => unreachable!("the lease is lost first"),
    ///     _ = lease.lost() => assert!(lease.is_lost()),
    /// }
    /// # }
    /// ```
    pub async fn lost(&self) {
        match &self.watch {
            Some(watch) => watch.lost().await,
            None => std::future::pending().await,
        }
    }
}

impl PartialEq for Lease {
    fn eq(&self, other: &Lease) -> bool {
        self.id == other.id
    }
}

impl Eq for Lease {}

impl std::hash::Hash for Lease {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

/// The store's side of a [`Lease`] that can be lost: cloned into the lease, kept by the store.
#[derive(Debug, Clone, Default)]
pub struct LeaseWatch(Arc<WatchState>);

#[derive(Debug, Default)]
struct WatchState {
    lost: AtomicBool,
    notify: Notify,
}

impl LeaseWatch {
    /// A watch of a lease not lost.
    pub fn new() -> LeaseWatch {
        LeaseWatch::default()
    }

    /// Says the lease was lost, to its holder and to anyone waiting in [`Lease::lost`].
    pub fn mark_lost(&self) {
        self.0.lost.store(true, Ordering::Release);
        self.0.notify.notify_waiters();
    }

    /// Whether [`mark_lost`](Self::mark_lost) was called.
    pub fn is_lost(&self) -> bool {
        self.0.lost.load(Ordering::Acquire)
    }

    async fn lost(&self) {
        loop {
            let notified = self.0.notify.notified();
            if self.is_lost() {
                return;
            }
            notified.await;
        }
    }
}

/// Why a [`Store`] gave no lease.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No lease came before the deadline.
    #[error("no lease before the permit deadline")]
    Timeout,
    /// The store could not be asked (it is unreachable, or answered with an error).
    #[error("{0}")]
    Unavailable(Arc<dyn std::error::Error + Send + Sync>),
    /// The store's own rate limit (see [`Store::keeps_rate`]) would let the call start only
    /// after the deadline; refused at once, without waiting.
    #[error("the store's rate limit lets the next call start only after the permit deadline")]
    RateLimited {
        /// How long until the slot the caller would have had.
        retry_after: std::time::Duration,
    },
}

impl StoreError {
    /// A store that could not be asked, for this reason.
    pub fn unavailable(reason: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
        StoreError::Unavailable(Arc::from(reason.into()))
    }
}

impl PartialEq for StoreError {
    fn eq(&self, other: &StoreError) -> bool {
        match (self, other) {
            (StoreError::Timeout, StoreError::Timeout) => true,
            (
                StoreError::RateLimited { retry_after: a },
                StoreError::RateLimited { retry_after: b },
            ) => a == b,
            (StoreError::Unavailable(a), StoreError::Unavailable(b)) => {
                Arc::ptr_eq(a, b) || a.to_string() == b.to_string()
            }
            _ => false,
        }
    }
}

impl Eq for StoreError {}
