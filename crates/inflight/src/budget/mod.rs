//! [`Budget`]: a named limit on the calls in flight to one dependency, with its settings
//! ([`BudgetConfig`], [`BudgetBuilder`]), its permits, its errors and its [`BudgetSnapshot`].
//!
//! The idea, the guarantees (limit, fairness, cancel safety, ordering, accounting) and examples
//! are on [`Budget`]. Underneath is a [`tokio::sync::Semaphore`]: its wait queue is fair and
//! cancel-safe; a crate-private engine adds the queue bound, the deadlines, the limit (fixed, or
//! one that learns: see [`crate::limit`]), an optional rate limit, an optional shared store (see
//! [`crate::store`]) and the counters. A budget with [`Classes`] queues in a lane per class
//! instead, ranked by weight, and still takes every permit from the semaphore.

mod builder;
pub(crate) mod call;
mod class_queue;
mod classes;
mod engine;
mod error;
#[cfg(feature = "metrics")]
mod exported;
mod histogram;
mod pace;
mod pause;
mod permit;
#[cfg(feature = "rate")]
mod rate_wait;
mod snapshot;
mod stats;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use builder::{BudgetBuilder, BudgetConfig, OnLost};
#[cfg(feature = "tower")]
pub(crate) use call::CallGuard;
pub use classes::{Class, Classes, MAX_CLASSES, MAX_WEIGHT};
pub use error::{AcquireError, BuildError, CallError, TryAcquireError};
pub use permit::{OwnedPermit, Permit};
pub use snapshot::{BudgetSnapshot, ClassSnapshot, LatencySummary};
pub(crate) use stats::RetryRefusal;

use crate::limit::{Limit, LimitChange, Outcome, Verdict};
use crate::store::Store;
use engine::Engine;

/// A named limit on the calls in flight to one dependency.
///
/// A budget holds a set of permits, `max_concurrent` of them (or, with a limit that learns, its
/// current value). A caller takes one with [`acquire`](Budget::acquire) (or lets
/// [`call`](Budget::call) take it around a future) and gives it back by dropping the [`Permit`].
/// When every permit is held, callers wait in a queue that can be bounded
/// ([`BudgetConfig::max_queued`]) and given a deadline ([`BudgetConfig::permit_timeout`]); a
/// call made through the budget then gets its own deadline ([`BudgetConfig::call_timeout`]),
/// started only once its permit is held, so time spent queueing never eats into it.
///
/// Cloning a `Budget` is cheap and every clone shares the same permits and counters: create one per
/// dependency at startup and hand clones to the work it constrains. A new budget per request would
/// give each request its own allowance.
///
/// # Guarantees
///
/// - **Limit.** At most `max_concurrent` permits are held at once, counting every clone of the
///   budget; with a limit that learns, at most its current value, except that lowering it never
///   takes a permit back from a caller that holds one. With [`Classes`], the same one limit
///   holds for all classes together, whatever their mix and cancellations: a class has no
///   count of its own that could admit a caller past it, only a share of the grants.
/// - **Fairness.** Waiters are served in the order they started waiting (FIFO), as by tokio's
///   [`Semaphore`](tokio::sync::Semaphore). A newcomer never takes a permit ahead of a caller
///   that is already waiting: [`try_acquire`](Budget::try_acquire) fails while anyone waits.
///   With a rate limit, turns are reserved in the order callers ask for them, once they hold
///   their permits.
/// - **Classes.** A budget with [`Classes`] serves its waiters FIFO within each class, and
///   across the classes that have waiters in proportion to their weights (weighted fair
///   queuing: with `interactive = 4, batch = 1` under constant contention, four grants in five
///   go to interactive, and batch is never passed over more than about four times in a row).
///   A class with nobody waiting leaves its share to the others, and banks no credit for the
///   time it was idle. With [`strict`](Classes::strict), the heaviest class with a waiter
///   always goes first. When the queue is full, a caller of a heavier class takes the place of
///   the newest waiter of the lightest class with waiters, which is refused at once with
///   [`AcquireError::Evicted`]; a caller no heavier than every waiter's class is refused with
///   [`AcquireError::QueueFull`]. Each class may have its own permit deadline. The later gates
///   (pause, rate slot, lease) are passed in the order the permits were granted. A budget with
///   one class behaves as one without.
/// - **Cancel safety.** A permit goes back when its `Permit` is dropped: on success, on error,
///   when the task holding it is cancelled, and when it panics. A caller that stops waiting (its
///   future is dropped, or its deadline passes) leaves the queue, frees its place and gives back
///   whatever it had taken (its local permit, its rate slot when nobody reserved one after it,
///   its store lease); like tokio's semaphore, a caller that is cancelled loses its place in the
///   queue.
/// - **Ordering.** A caller passes the gates in one order: a local permit, then the end of a
///   pause (if the dependency asked for one), then a rate slot (if the budget has a rate limit),
///   then a lease from the shared store (if it has one), all
///   within one `permit_timeout`. A gate that refuses gives back what the earlier ones took.
///   [`call`](Budget::call) invokes its closure only once every gate is passed, so a refused
///   caller never starts work.
/// - **Accounting.** Every `acquire`, `acquire_owned`, `try_acquire` and `try_acquire_owned`
///   ends in exactly one outcome, and [`BudgetSnapshot`] counts each: `admitted`; `rejected`
///   (the queue was full, or `try_acquire` found no free permit or a shared store);
///   `permit_timeouts`; `rate_limited`; `paused` (a pause the dependency asked for outlasted
///   the caller's deadline); `unavailable` (the shared store could not be asked); `evicted`
///   (a caller of a heavier class took its place in the full queue); or `cancelled` (the
///   future was dropped while it waited). With [`Classes`], each acquire is also counted in
///   exactly one outcome of its class ([`ClassSnapshot`]), with its class's permits in flight,
///   waiters and waits; the budget-wide fields count every class. Every call through
///   [`call`](Budget::call) or [`call_with`](Budget::call_with) that got its permit then ends in
///   exactly one of `calls_ok`, `calls_error`, `call_timeouts` or `calls_cancelled`, and, by
///   its classifier's [`Verdict`], in exactly one of `outcomes_success`, `outcomes_overload`,
///   `outcomes_ignored`, `outcomes_error`, `outcomes_timeout`, or `calls_cancelled`.
/// - **Back-pressure.** An overload reported with the dependency's retry-after (a
///   [`Verdict`]) pauses the budget: no new permit is granted before it ends. Permits held are
///   untouched. A caller whose permit deadline falls inside the pause is refused at once with
///   [`AcquireError::Paused`], never after sleeping through it; the others wait, in their
///   order, and are granted when it ends. [`AcquireError::retry_after`] says when a refused
///   caller may try again, and [`call_with_retry`](Budget::call_with_retry) retries within a
///   [`RetryBudget`](crate::RetryBudget).
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
///
/// Fan out over many items with spawned tasks, never more than 4 in flight: each task takes an
/// [`OwnedPermit`] before it is spawned, so the loop itself waits when the budget is full.
///
/// ```
/// use std::time::Duration;
/// use inflight::{Budget, BudgetConfig};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let enrichment = Budget::new("enrichment", BudgetConfig::new(4)).unwrap();
/// let mut tasks = tokio::task::JoinSet::new();
/// for item in 0..20u64 {
///     let permit = enrichment.acquire_owned().await.unwrap();
///     tasks.spawn(async move {
///         tokio::time::sleep(Duration::from_millis(10 * item)).await; // the call
///         drop(permit);
///     });
/// }
/// tasks.join_all().await;
/// let s = enrichment.snapshot();
/// assert_eq!((s.admitted, s.peak_in_flight, s.in_flight), (20, 4, 0));
/// # }
/// ```
///
/// Shed load at once instead of queueing: with `max_queued(0)`, a caller that finds every permit
/// held is turned away (a server answers 503), and the snapshot counts it.
///
/// ```
/// use std::time::Duration;
/// use inflight::{AcquireError, Budget, BudgetConfig, CallError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let api = Budget::new("api", BudgetConfig::new(2).max_queued(0)).unwrap();
/// let slow = || async {
///     tokio::time::sleep(Duration::from_secs(1)).await;
///     Ok::<_, std::io::Error>(200)
/// };
/// let (a, b, c) = tokio::join!(api.call(slow), api.call(slow), api.call(slow));
/// assert_eq!((a.unwrap(), b.unwrap()), (200, 200));
/// assert!(matches!(c, Err(CallError::Rejected(AcquireError::QueueFull { .. }))));
/// let s = api.snapshot();
/// assert_eq!((s.admitted, s.rejected, s.calls_ok), (2, 1, 2));
/// # }
/// ```
///
/// Give up on a permit that takes too long: a caller waits at most `permit_timeout`, and a
/// caller whose future is dropped while it waits is counted as cancelled.
///
/// ```
/// use std::time::Duration;
/// use inflight::{AcquireError, Budget, BudgetConfig};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let budget = Budget::new(
///     "records",
///     BudgetConfig::new(1).permit_timeout(Duration::from_millis(500)),
/// )
/// .unwrap();
/// let held = budget.acquire().await.unwrap();
/// assert_eq!(budget.acquire().await.unwrap_err(), AcquireError::PermitTimeout);
/// let gave_up = tokio::time::timeout(Duration::from_millis(100), budget.acquire()).await;
/// assert!(gave_up.is_err());
/// drop(held);
/// let s = budget.snapshot();
/// assert_eq!((s.admitted, s.permit_timeouts, s.cancelled), (1, 1, 1));
/// assert!(budget.try_acquire().is_ok(), "the permit went back");
/// # }
/// ```
#[derive(Clone)]
pub struct Budget {
    engine: Arc<Engine>,
}

impl Budget {
    /// Creates a budget named `name` (used in errors, snapshots and metrics) with a fixed limit of
    /// `config.max_concurrent()`.
    ///
    /// # Errors
    ///
    /// [`BuildError`] when `max_concurrent` is zero (or above tokio's semaphore maximum), a
    /// timeout or service time is zero, the target rate is not positive, or the name is empty or
    /// blank. It names the field: `budget "records": max_concurrent: must be at least 1, got 0`.
    pub fn new(name: &str, config: BudgetConfig) -> Result<Budget, BuildError> {
        let limit = config.build_limit();
        Budget::assemble(name, config, limit, None)
    }

    /// Starts building a budget named `name`, for settings beyond a [`BudgetConfig`]: a limit
    /// that learns, or permits shared through a store.
    pub fn builder(name: &str) -> BudgetBuilder {
        BudgetBuilder::new(name)
    }

    pub(crate) fn assemble(
        name: &str,
        config: BudgetConfig,
        limit: Box<dyn Limit>,
        store: Option<Arc<dyn Store>>,
    ) -> Result<Budget, BuildError> {
        config.validate(name)?;
        Ok(Budget {
            engine: Arc::new(Engine::new(name, config, limit, store)),
        })
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The budget's name.
    pub fn name(&self) -> &str {
        &self.engine.name
    }

    /// The configuration the budget was created with.
    pub fn config(&self) -> &BudgetConfig {
        &self.engine.config
    }

    /// The limit now: `max_concurrent` for a fixed limit; for a limit that learns, its current
    /// value.
    pub fn limit(&self) -> usize {
        self.engine.limit()
    }

    /// The most callers that may wait for a permit; `None` is unbounded.
    pub fn max_queued(&self) -> Option<usize> {
        self.engine.config.max_queued
    }

    /// The deadline for waiting for a permit, if any.
    pub fn permit_timeout(&self) -> Option<Duration> {
        self.engine.config.permit_timeout
    }

    /// The deadline for a call once its permit is held, if any.
    pub fn call_timeout(&self) -> Option<Duration> {
        self.engine.config.call_timeout
    }

    /// How long the pause in force now lasts, if a dependency's retry-after paused the budget
    /// (no new permit is granted before it ends); `None` when there is none.
    pub fn paused_for(&self) -> Option<Duration> {
        self.engine.pause_state().0
    }

    /// Whether grants are spaced out now: after a pause ends, or during an adaptive budget's
    /// cold start, one call at a time instead of every waiter at once.
    pub fn is_paced(&self) -> bool {
        self.engine.pause_state().1
    }

    /// The limit's changes so far, oldest first, starting with its initial value (the most recent
    /// 65,536 at most); empty for a fixed limit.
    pub fn limit_changes(&self) -> Vec<LimitChange> {
        self.engine.limit_changes()
    }

    /// Calls running under a permit now. For a budget with a store (a fleet budget), only those
    /// that hold their store's lease too: the calls at the dependency; a caller holding its
    /// local permit while it waits for a fleet lease is counted in
    /// [`BudgetSnapshot::awaiting_store`] instead.
    pub fn in_flight(&self) -> usize {
        self.engine.in_flight()
    }

    /// Permits not held right now.
    pub fn available_permits(&self) -> usize {
        self.engine.permits.available()
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
    /// - [`AcquireError::PermitTimeout`] when no permit came within `permit_timeout` (nor, with a
    ///   shared store, a lease from it).
    /// - [`AcquireError::RateLimited`] when the budget's rate limit would let the call start only
    ///   after `permit_timeout`: refused as soon as the permit is held, without waiting for the
    ///   turn.
    /// - [`AcquireError::Unavailable`] when the budget's shared store could not be asked.
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
    /// assert!(matches!(budget.acquire().await, Err(AcquireError::QueueFull { .. })));
    /// drop(held);
    /// assert!(budget.acquire().await.is_ok());
    /// # }
    /// ```
    pub async fn acquire(&self) -> Result<Permit<'_>, AcquireError> {
        // The fast path stays out of the waiting future, so a free permit costs no await.
        let grant = match self.engine.grant_fast() {
            Some(grant) => grant,
            None => self.engine.grant(self.engine.default_class(), None).await?,
        };
        Ok(Permit::new(&self.engine, grant))
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
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use inflight::{Budget, BudgetConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let budget = Budget::new("records", BudgetConfig::new(1)).unwrap();
    /// let permit = budget.acquire_owned().await.unwrap();
    /// let write = tokio::spawn(async move {
    ///     tokio::time::sleep(Duration::from_millis(30)).await; // the write, under the permit
    ///     drop(permit);
    /// });
    /// assert_eq!(budget.in_flight(), 1);
    /// write.await.unwrap();
    /// assert_eq!(budget.in_flight(), 0);
    /// # }
    /// ```
    pub async fn acquire_owned(&self) -> Result<OwnedPermit, AcquireError> {
        let grant = self.engine.grant(self.engine.default_class(), None).await?;
        Ok(OwnedPermit::new(self.clone(), grant))
    }

    /// Takes a permit if one is free and nobody is waiting for one, without waiting.
    ///
    /// A caller turned away is counted as `rejected`, or as `rate_limited` when the budget's rate
    /// limit turned it away.
    ///
    /// # Errors
    ///
    /// - [`TryAcquireError::NoPermits`] when every permit is held or callers are waiting.
    /// - [`TryAcquireError::RateLimited`] when the budget's rate limit lets the next call start
    ///   only later (counted as `rate_limited`).
    /// - [`TryAcquireError::WouldWait`] when the budget keeps its permits in a shared store.
    ///
    /// # Examples
    ///
    /// ```
    /// use inflight::{Budget, BudgetConfig, TryAcquireError};
    ///
    /// let budget = Budget::new("cache", BudgetConfig::new(1)).unwrap();
    /// let held = budget.try_acquire().unwrap();
    /// assert_eq!(budget.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
    /// drop(held);
    /// assert!(budget.try_acquire().is_ok());
    /// ```
    pub fn try_acquire(&self) -> Result<Permit<'_>, TryAcquireError> {
        let grant = self.engine.try_grant(self.engine.default_class())?;
        Ok(Permit::new(&self.engine, grant))
    }

    /// Like [`Budget::try_acquire`], but the permit holds a clone of the budget.
    ///
    /// # Errors
    ///
    /// As [`Budget::try_acquire`].
    pub fn try_acquire_owned(&self) -> Result<OwnedPermit, TryAcquireError> {
        let grant = self.engine.try_grant(self.engine.default_class())?;
        Ok(OwnedPermit::new(self.clone(), grant))
    }

    /// The budget's priority classes, if it has them (see [`BudgetConfig::classes`]).
    pub fn classes(&self) -> Option<&Classes> {
        self.engine.config.classes.as_ref()
    }

    /// [`Budget::acquire`] in a priority class: when every permit is held, the caller waits in
    /// its class's queue, and grants go to the classes with waiters by weight (see
    /// [`Classes`]). A name the budget has no class for, and any name for a budget without
    /// classes, is the default class.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Budget::acquire`].
    ///
    /// # Errors
    ///
    /// As [`Budget::acquire`], with the class's own permit deadline if it has one; also
    /// [`AcquireError::Evicted`] when the queue was full and a caller of a heavier class took
    /// this caller's place.
    ///
    /// # Examples
    ///
    /// ```
    /// use inflight::{Budget, BudgetConfig, Classes};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let classes = Classes::new().class("interactive", 4).class("batch", 1);
    /// let records = Budget::new("records", BudgetConfig::new(6).classes(classes)).unwrap();
    /// let permit = records.acquire_in("interactive").await.unwrap();
    /// assert_eq!(records.in_flight(), 1);
    /// drop(permit);
    /// let s = records.snapshot();
    /// assert_eq!((s.classes[0].name.as_str(), s.classes[0].admitted), ("interactive", 1));
    /// # }
    /// ```
    ///
    /// Under contention, interactive callers go before batch callers that queued first:
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use inflight::{Budget, BudgetConfig, Classes};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let classes = Classes::new().class("interactive", 4).class("batch", 1);
    /// let records = Budget::new("records", BudgetConfig::new(1).classes(classes)).unwrap();
    /// let held = records.acquire_owned().await.unwrap();
    /// let order = Arc::new(Mutex::new(Vec::new()));
    /// let mut tasks = Vec::new();
    /// for class in ["batch", "batch", "interactive", "interactive", "interactive", "interactive"] {
    ///     let (records, order) = (records.clone(), order.clone());
    ///     tasks.push(tokio::spawn(async move {
    ///         let _permit = records.acquire_in(class).await.unwrap();
    ///         order.lock().unwrap().push(class);
    ///     }));
    ///     tokio::task::yield_now().await; // queued in this order
    /// }
    /// drop(held);
    /// for task in tasks {
    ///     task.await.unwrap();
    /// }
    /// let order = order.lock().unwrap();
    /// assert_eq!(order[..4], ["interactive"; 4]);
    /// assert_eq!(order[4..], ["batch"; 2]);
    /// # }
    /// ```
    pub async fn acquire_in(&self, class: &str) -> Result<Permit<'_>, AcquireError> {
        let class = self.engine.class_of(class);
        let grant = self.engine.grant(class, None).await?;
        Ok(Permit::new(&self.engine, grant))
    }

    /// [`Budget::acquire_owned`] in a priority class (see [`Budget::acquire_in`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Budget::acquire`].
    ///
    /// # Errors
    ///
    /// As [`Budget::acquire_in`].
    pub async fn acquire_owned_in(&self, class: &str) -> Result<OwnedPermit, AcquireError> {
        let class = self.engine.class_of(class);
        let grant = self.engine.grant(class, None).await?;
        Ok(OwnedPermit::new(self.clone(), grant))
    }

    /// [`Budget::try_acquire`] in a priority class (see [`Budget::acquire_in`]).
    ///
    /// # Errors
    ///
    /// As [`Budget::try_acquire`].
    pub fn try_acquire_in(&self, class: &str) -> Result<Permit<'_>, TryAcquireError> {
        let grant = self.engine.try_grant(self.engine.class_of(class))?;
        Ok(Permit::new(&self.engine, grant))
    }

    /// [`Budget::try_acquire_owned`] in a priority class (see [`Budget::acquire_in`]).
    ///
    /// # Errors
    ///
    /// As [`Budget::try_acquire`].
    pub fn try_acquire_owned_in(&self, class: &str) -> Result<OwnedPermit, TryAcquireError> {
        let grant = self.engine.try_grant(self.engine.class_of(class))?;
        Ok(OwnedPermit::new(self.clone(), grant))
    }

    /// [`Budget::call`] in a priority class (see [`Budget::acquire_in`]).
    ///
    /// # Errors
    ///
    /// As [`Budget::call`]; the refusals of [`Budget::acquire_in`].
    pub async fn call_in<F, Fut, T, E>(&self, class: &str, call: F) -> Result<T, CallError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.call_with_in(class, classify_result, call).await
    }

    /// [`Budget::call_with`] in a priority class (see [`Budget::acquire_in`]).
    ///
    /// # Errors
    ///
    /// As [`Budget::call_with`]; the refusals of [`Budget::acquire_in`].
    pub async fn call_with_in<C, V, F, Fut, T, E>(
        &self,
        class: &str,
        classify: C,
        call: F,
    ) -> Result<T, CallError<E>>
    where
        C: FnOnce(&Result<T, E>) -> V,
        V: Into<Verdict>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let permit = self.acquire_in(class).await.map_err(CallError::Rejected)?;
        call::run(permit, classify, call()).await
    }

    /// Runs `call` while holding a permit, with the budget's `call_timeout` started once the permit
    /// is held, and returns its result.
    ///
    /// `call` is only invoked after the permit is granted, so a rejected caller never starts work.
    /// The time from permit to result is recorded in [`BudgetSnapshot::call`]. For the budget's
    /// limit, an `Ok` is a success, and an `Err` or a timeout an overload signal; an `Err` is
    /// counted as a failure ([`Verdict::failure`], `outcomes_error`).
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
        self.call_with(classify_result, call).await
    }

    /// [`Budget::call`], with `classify` deciding what each result tells the budget's limit.
    ///
    /// A call timeout is always [`Outcome::Overload`]. Use it when a dependency answers overload
    /// with a value rather than an error (an HTTP 503 or 429 returned as a response), or when some
    /// errors say nothing about load (a 404, a client error).
    ///
    /// `classify` returns an [`Outcome`], or a [`Verdict`] that also carries the dependency's
    /// retry-after (an overload with one pauses the budget) or calls the result a failure.
    /// The snapshot counts the call twice over: by what the call returned (`calls_ok` for an
    /// `Ok`, even one classified as an overload; `calls_error` for an `Err`), and by its verdict
    /// (`outcomes_success`, `outcomes_overload`, `outcomes_ignored`, `outcomes_error`,
    /// `outcomes_timeout`).
    ///
    /// # Cancel safety
    ///
    /// As [`Budget::call`]; a call dropped while it runs reports [`Outcome::Ignore`].
    ///
    /// # Errors
    ///
    /// As [`Budget::call`].
    ///
    /// # Examples
    ///
    #[cfg_attr(feature = "adaptive", doc = "```")]
    #[cfg_attr(not(feature = "adaptive"), doc = "```ignore")]
    /// use inflight::limit::{Adaptive, Outcome};
    /// use inflight::{Budget, BudgetConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let budget = Budget::new("records", BudgetConfig::new(32).adaptive(Adaptive::aimd())).unwrap();
    /// let status = budget
    ///     .call_with(
    ///         |r: &Result<u16, std::io::Error>| match r {
    ///             Ok(503 | 429) | Err(_) => Outcome::Overload,
    ///             Ok(s) if *s >= 500 => Outcome::Overload,
    ///             Ok(s) if *s >= 400 => Outcome::Ignore,
    ///             Ok(_) => Outcome::Success,
    ///         },
    ///         || async { Ok(503) },
    ///     )
    ///     .await
    ///     .unwrap();
    /// assert_eq!(status, 503);
    /// assert_eq!(budget.limit(), 3, "one overload cut the limit from 4");
    /// # }
    /// ```
    pub async fn call_with<C, V, F, Fut, T, E>(
        &self,
        classify: C,
        call: F,
    ) -> Result<T, CallError<E>>
    where
        C: FnOnce(&Result<T, E>) -> V,
        V: Into<Verdict>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let permit = self.acquire().await.map_err(CallError::Rejected)?;
        call::run(permit, classify, call()).await
    }

    /// The budget's counters and latency summaries now.
    ///
    /// Counters are read one by one without a lock, so a snapshot taken while calls run may be a
    /// moment apart between fields; each field is exact on its own.
    pub fn snapshot(&self) -> BudgetSnapshot {
        let engine = &*self.engine;
        let wait = engine.stats.wait().summary();
        let counts = engine.stats.counts();
        BudgetSnapshot {
            name: engine.name.to_string(),
            max_concurrent: engine.config.max_concurrent,
            limit: engine.limit(),
            in_flight: engine.in_flight(),
            awaiting_store: engine.awaiting_store(),
            peak_in_flight: counts.peak_in_flight,
            waiting: engine.waiting(),
            peak_waiting: counts.peak_waiting,
            admitted: wait.count,
            rejected: counts.rejected,
            permit_timeouts: counts.permit_timeouts,
            rate_limited: counts.rate_limited,
            cancelled: counts.cancelled,
            unavailable: counts.unavailable,
            call_timeouts: counts.call_timeouts,
            calls_ok: counts.calls_ok,
            calls_error: counts.calls_error,
            calls_cancelled: counts.calls_cancelled,
            paused: counts.paused,
            pauses: counts.pauses,
            outcomes_success: counts.outcomes_success,
            outcomes_overload: counts.outcomes_overload,
            outcomes_ignored: counts.outcomes_ignored,
            outcomes_error: counts.outcomes_error,
            outcomes_timeout: counts.outcomes_timeout,
            retries: counts.retries,
            retries_denied: counts.retries_denied,
            retries_past_deadline: counts.retries_past_deadline,
            retries_out_of_attempts: counts.retries_out_of_attempts,
            evicted: counts.evicted,
            wait,
            call: engine.stats.call().summary(),
            classes: engine.class_snapshots(),
        }
    }
}

/// What [`Budget::call`] tells the limit: an `Ok` is a success, an `Err` a failure (an overload
/// signal, counted as an error).
pub(crate) fn classify_result<T, E>(result: &Result<T, E>) -> Verdict {
    match result {
        Ok(_) => Outcome::Success.into(),
        Err(_) => Verdict::failure(),
    }
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Budget")
            .field("name", &self.engine.name)
            .field("max_concurrent", &self.engine.config.max_concurrent)
            .field("limit", &self.engine.limit())
            .field("in_flight", &self.engine.in_flight())
            .field("waiting", &self.engine.waiting())
            .finish()
    }
}
