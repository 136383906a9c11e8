//! [`Budget`]: a named limit on the calls in flight to one dependency.
//!
//! A budget holds `max_concurrent` permits. A caller takes one with [`Budget::acquire`] (or lets
//! [`Budget::call`] do it around a future) and gives it back when the [`Permit`] is dropped. When all
//! permits are held, callers wait in a queue, which can be bounded ([`BudgetConfig::max_queued`])
//! and given a deadline ([`BudgetConfig::permit_timeout`]). The call itself gets its own deadline
//! ([`BudgetConfig::call_timeout`]) that starts only once the permit is held.
//!
//! Underneath is a [`tokio::sync::Semaphore`]: its wait queue is fair and cancel-safe, and this
//! module only adds the bounds, the deadlines and the counters around it.
//!
//! # Guarantees
//!
//! - **Limit.** At most `max_concurrent` permits are held at once, counting every clone of the budget.
//! - **Fairness.** Waiters are served in the order they started waiting (FIFO). A newcomer never takes
//!   a permit ahead of a caller that is already waiting.
//! - **Nothing is lost.** A permit goes back when its `Permit` is dropped: on success, on error, when
//!   the task holding it is cancelled, and when it panics. A caller that stops waiting (its future is
//!   dropped, or its deadline passes) leaves the queue and frees its place.
//! - **Accounting.** Every call to `acquire` ends in exactly one of: admitted, rejected (queue full),
//!   permit timeout, or cancelled while waiting; [`BudgetSnapshot`] counts each.

mod config;
mod error;
mod snapshot;
mod stats;

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

pub use config::BudgetConfig;
pub use error::{AcquireError, CallError};
pub use snapshot::{BudgetSnapshot, LatencySummary};

use crate::config::ConfigError;
use stats::{raise_peak, Histogram};

/// A named limit on the calls in flight to one dependency.
///
/// Cloning a `Budget` is cheap and every clone shares the same permits and counters: create one per
/// dependency at startup and hand clones to the work it constrains. A new budget per request would
/// give each request its own allowance.
///
/// # Examples
///
/// Limit a system of record to 6 writes at once, with a bounded queue and both deadlines:
///
/// ```
/// use std::time::Duration;
/// use inflight::{Budget, BudgetConfig, CallError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let records = Budget::new(
///     "records",
///     BudgetConfig::new(6)
///         .max_queued(6)
///         .permit_timeout(Duration::from_millis(500))
///         .call_timeout(Duration::from_secs(2)),
/// )?;
///
/// let written = records
///     .call(|| async {
///         tokio::time::sleep(Duration::from_millis(30)).await; // the write
///         Ok::<_, std::io::Error>(42)
///     })
///     .await;
/// assert_eq!(written.unwrap(), 42);
///
/// let snapshot = records.snapshot();
/// assert_eq!(snapshot.admitted, 1);
/// assert_eq!(snapshot.in_flight, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Budget {
    inner: Arc<Inner>,
}

// Each group of atomics sits on its own cache line: counters written on every wait must not
// bounce the line holding the semaphore's own state between cores.
struct Inner {
    name: Arc<str>,
    config: BudgetConfig,
    semaphore: CachePadded<Semaphore>,
    waiting: CachePadded<AtomicUsize>,
    peak_waiting: CachePadded<AtomicUsize>,
    peak_in_flight: CachePadded<AtomicUsize>,
    rejected: AtomicU64,
    permit_timeouts: AtomicU64,
    cancelled: AtomicU64,
    call_timeouts: AtomicU64,
    /// Time from `acquire` to permit for every admitted caller; its count is `admitted`.
    wait: CachePadded<Histogram>,
    /// Time from permit to result for every call made through [`Budget::call`].
    call: CachePadded<Histogram>,
}

/// Aligns `T` to 128 bytes (two 64-byte lines, as adjacent-line prefetchers pair them).
#[repr(align(128))]
struct CachePadded<T>(T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// A permit from a [`Budget`]; the permit goes back when this is dropped.
///
/// Borrowed from the budget, like tokio's `SemaphorePermit`. To move a permit into another task,
/// use [`Budget::acquire_owned`].
#[must_use = "the permit is released as soon as it is dropped"]
pub struct Permit<'a> {
    _permit: SemaphorePermit<'a>,
}

/// A permit that owns a handle to its [`Budget`], for moving into spawned tasks.
#[must_use = "the permit is released as soon as it is dropped"]
pub struct OwnedPermit {
    budget: Budget,
}

impl Drop for OwnedPermit {
    fn drop(&mut self) {
        self.budget.inner.semaphore.add_permits(1);
    }
}

impl Budget {
    /// Creates a budget named `name` (used in errors, snapshots and metrics).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] when `max_concurrent` is zero (or above tokio's semaphore maximum), a
    /// timeout or service time is zero, the target rate is not positive, or the name is empty. The
    /// message names the field, e.g. `budgets.records.max_concurrent: must be at least 1, got 0`.
    pub fn new(name: &str, config: BudgetConfig) -> Result<Budget, ConfigError> {
        config.validate(name)?;
        Ok(Budget {
            inner: Arc::new(Inner {
                name: Arc::from(name),
                semaphore: CachePadded(Semaphore::new(config.max_concurrent)),
                config,
                waiting: CachePadded(AtomicUsize::new(0)),
                peak_waiting: CachePadded(AtomicUsize::new(0)),
                peak_in_flight: CachePadded(AtomicUsize::new(0)),
                rejected: AtomicU64::new(0),
                permit_timeouts: AtomicU64::new(0),
                cancelled: AtomicU64::new(0),
                call_timeouts: AtomicU64::new(0),
                wait: CachePadded(Histogram::new()),
                call: CachePadded(Histogram::new()),
            }),
        })
    }

    /// The budget's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The configuration the budget was created with.
    pub fn config(&self) -> &BudgetConfig {
        &self.inner.config
    }

    /// Permits not held right now.
    pub fn available_permits(&self) -> usize {
        self.inner.semaphore.available_permits()
    }

    /// Waits for a permit and returns it; the permit goes back when the [`Permit`] is dropped.
    ///
    /// If a permit is free and nobody is waiting, it is granted at once. Otherwise the caller joins
    /// the queue, unless `max_queued` callers are already waiting, and is served in arrival order.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: dropping the future while it waits gives up the caller's place
    /// in the queue (counted as `cancelled`) and never leaks a permit. Like tokio's semaphore, a
    /// caller that is cancelled loses its place; a new call joins at the back.
    ///
    /// # Errors
    ///
    /// - [`AcquireError::QueueFull`] at once when all permits are held and `max_queued` callers are
    ///   already waiting (with `max_queued(0)`, whenever all permits are held).
    /// - [`AcquireError::PermitTimeout`] when no permit came within `permit_timeout`.
    ///
    /// # Examples
    ///
    /// ```
    /// use inflight::{AcquireError, Budget, BudgetConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let budget = Budget::new("enrichment", BudgetConfig::new(1).max_queued(0)).unwrap();
    /// let held = budget.acquire().await.unwrap();
    /// // Fail fast: the only permit is held and nobody may queue.
    /// assert!(matches!(budget.acquire().await, Err(AcquireError::QueueFull)));
    /// drop(held);
    /// assert!(budget.acquire().await.is_ok());
    /// # }
    /// ```
    pub async fn acquire(&self) -> Result<Permit<'_>, AcquireError> {
        Ok(self.acquire_timed().await?.0)
    }

    /// [`Budget::acquire`], also returning the moment the permit was granted when finding that
    /// out took a wait (and so a clock read already); `None` when a permit was free at once.
    async fn acquire_timed(&self) -> Result<(Permit<'_>, Option<Instant>), AcquireError> {
        let inner = &*self.inner;
        // Fast path: tokio hands released permits to queued waiters first, so a successful
        // try_acquire never overtakes anyone who is waiting.
        if let Ok(permit) = inner.semaphore.try_acquire() {
            inner.wait.record_zero();
            inner.note_in_flight();
            return Ok((Permit { _permit: permit }, None));
        }
        let (permit, granted) = self.acquire_slow().await?;
        Ok((Permit { _permit: permit }, Some(granted)))
    }

    /// Like [`Budget::acquire`], but the permit holds a clone of the budget and so can be moved
    /// into a spawned task.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Budget::acquire`].
    ///
    /// # Errors
    ///
    /// As [`Budget::acquire`].
    pub async fn acquire_owned(&self) -> Result<OwnedPermit, AcquireError> {
        self.acquire().await?._permit.forget();
        Ok(OwnedPermit {
            budget: self.clone(),
        })
    }

    async fn acquire_slow(&self) -> Result<(SemaphorePermit<'_>, Instant), AcquireError> {
        let inner = &*self.inner;
        // try_acquire just failed, so every permit was held: in flight reached the limit. Noting
        // it here spares a read of the semaphore's (contended) state after the wait.
        raise_peak(&inner.peak_in_flight, inner.config.max_concurrent);
        let ahead = match inner.config.max_queued {
            // An unbounded queue always has a place: one plain add, no compare-and-swap loop.
            None => inner.waiting.fetch_add(1, Relaxed),
            // Take a place only if one is free: an unconditional add (undone on rejection) would
            // let `waiting` show more than `max_queued` for a moment to anyone reading it.
            Some(max_queued) => match inner
                .waiting
                .fetch_update(Relaxed, Relaxed, |n| (n < max_queued).then_some(n + 1))
            {
                Ok(ahead) => ahead,
                Err(_) => {
                    inner.rejected.fetch_add(1, Relaxed);
                    return Err(AcquireError::QueueFull);
                }
            },
        };
        raise_peak(&inner.peak_waiting, ahead + 1);
        let mut place = QueuePlace {
            inner,
            ended: false,
        };
        let start = Instant::now();
        let acquired = match inner.config.permit_timeout {
            Some(deadline) => match tokio::time::timeout(deadline, inner.semaphore.acquire()).await
            {
                Ok(acquired) => acquired,
                Err(_) => {
                    place.ended = true;
                    inner.permit_timeouts.fetch_add(1, Relaxed);
                    return Err(AcquireError::PermitTimeout);
                }
            },
            None => inner.semaphore.acquire().await,
        };
        place.ended = true;
        drop(place);
        // The semaphore is owned by this budget and never closed.
        let permit = acquired.expect("a budget's semaphore is never closed");
        let granted = Instant::now();
        inner.wait.record(granted - start);
        Ok((permit, granted))
    }

    /// Runs `call` while holding a permit, with the budget's `call_timeout` started once the permit
    /// is held, and returns its result.
    ///
    /// `call` is only invoked after the permit is granted, so a rejected caller never starts work.
    /// The time from permit to result is recorded in [`BudgetSnapshot::call`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops the call's future and releases the permit (or the place in
    /// the queue). Whether the call's side effects happened is up to the call.
    ///
    /// # Errors
    ///
    /// - [`CallError::Rejected`] when no permit was granted (see [`Budget::acquire`]).
    /// - [`CallError::Timeout`] when the call did not finish within `call_timeout`; its future is
    ///   dropped.
    /// - [`CallError::Inner`] with the call's own error.
    ///
    /// # Examples
    ///
    /// A call that waited 400 ms for its permit still gets its whole 250 ms call timeout:
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{Budget, BudgetConfig};
    /// use tokio::time::sleep;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let budget = Budget::new("api", BudgetConfig::new(1).call_timeout(Duration::from_millis(250))).unwrap();
    /// let held = budget.acquire_owned().await.unwrap();
    /// tokio::spawn(async move {
    ///     sleep(Duration::from_millis(400)).await;
    ///     drop(held);
    /// });
    /// let result = budget
    ///     .call(|| async {
    ///         sleep(Duration::from_millis(200)).await;
    ///         Ok::<_, std::io::Error>("done")
    ///     })
    ///     .await;
    /// assert_eq!(result.unwrap(), "done");
    /// # }
    /// ```
    pub async fn call<F, Fut, T, E>(&self, call: F) -> Result<T, CallError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let (_permit, granted) = self.acquire_timed().await.map_err(CallError::Rejected)?;
        let inner = &*self.inner;
        // The call timeout starts once the permit is held; after a wait, that moment is known.
        let start = granted.unwrap_or_else(Instant::now);
        let result = match inner.config.call_timeout {
            Some(deadline) => match tokio::time::timeout(deadline, call()).await {
                Ok(result) => result,
                Err(_) => {
                    inner.call_timeouts.fetch_add(1, Relaxed);
                    inner.call.record(start.elapsed());
                    return Err(CallError::Timeout);
                }
            },
            None => call().await,
        };
        inner.call.record(start.elapsed());
        result.map_err(CallError::Inner)
    }

    /// The budget's counters and latency summaries now.
    ///
    /// Counters are read one by one without a lock, so a snapshot taken while calls run may be a
    /// moment apart between fields; each field is exact on its own.
    pub fn snapshot(&self) -> BudgetSnapshot {
        let inner = &*self.inner;
        let wait = inner.wait.summary();
        BudgetSnapshot {
            name: inner.name.to_string(),
            max_concurrent: inner.config.max_concurrent,
            in_flight: inner.in_flight(),
            peak_in_flight: inner.peak_in_flight.load(Relaxed),
            waiting: inner.waiting.load(Relaxed),
            peak_waiting: inner.peak_waiting.load(Relaxed),
            admitted: wait.count,
            rejected: inner.rejected.load(Relaxed),
            permit_timeouts: inner.permit_timeouts.load(Relaxed),
            cancelled: inner.cancelled.load(Relaxed),
            call_timeouts: inner.call_timeouts.load(Relaxed),
            wait,
            call: inner.call.summary(),
        }
    }
}

impl Inner {
    fn in_flight(&self) -> usize {
        self.config.max_concurrent - self.semaphore.available_permits()
    }

    #[inline]
    fn note_in_flight(&self) {
        raise_peak(&self.peak_in_flight, self.in_flight());
    }
}

/// A caller's place in the queue; leaving it (by any path) lowers `waiting`, and leaving it
/// without an outcome (the future was dropped) counts as `cancelled`.
struct QueuePlace<'a> {
    inner: &'a Inner,
    ended: bool,
}

impl Drop for QueuePlace<'_> {
    fn drop(&mut self) {
        self.inner.waiting.fetch_sub(1, Relaxed);
        if !self.ended {
            self.inner.cancelled.fetch_add(1, Relaxed);
        }
    }
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Budget")
            .field("name", &self.inner.name)
            .field("max_concurrent", &self.inner.config.max_concurrent)
            .field("in_flight", &self.inner.in_flight())
            .field("waiting", &self.inner.waiting.load(Relaxed))
            .finish()
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit").finish_non_exhaustive()
    }
}

impl fmt::Debug for OwnedPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedPermit")
            .field("budget", &self.budget.name())
            .finish()
    }
}
