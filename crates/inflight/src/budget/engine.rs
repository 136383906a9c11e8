//! The engine behind [`Budget`](super::Budget): the gates a caller passes in order, the queue
//! bound, the permit deadline, and the accounting of every outcome.
//!
//! The gates, in order:
//!
//! 1. **Local permit.** Free and nobody waiting: granted at once (the fast path: no clock read
//!    unless the limit learns, no lock). Otherwise the caller joins the queue if `max_queued`
//!    allows, and waits until the permit deadline. A budget with classes queues in its
//!    [`ClassQueue`] instead (its class's lane, its class's deadline, evictions from a full
//!    queue), which takes each waiter's permit from the same semaphore.
//! 2. **Pause**, when the dependency asked for one (an overload with a retry-after): the caller
//!    holding its local permit sleeps until the pause ends, or is refused at once if it ends
//!    after the deadline. A caller whose deadline falls inside the pause is refused before it
//!    even queues, and one already queued is refused as soon as the pause starts. Held after the
//!    permit, like the rate slot below, so that the queue's order holds through the pause. Then,
//!    while the pace (`pace.rs`) that the first retry-after started is in force, the caller
//!    waits for its start slot (refused at once if the slot comes after the deadline), so that
//!    the end of a pause lets one call through, not every waiter. An adaptive budget starts
//!    with a cold start in the same place: until its first answer, the calls after a short
//!    burst are spaced a little apart.
//! 3. **Rate slot**, when the budget has a rate limit: the next slot the GCRA allows, reserved
//!    in arrival order; the caller sleeps until it, or is refused at once if it comes after the
//!    deadline. Taken *after* the permit, so that a call starts exactly at its slot: a slot taken
//!    first and followed by a wait for a permit would let several calls whose permits freed
//!    together start at once, a burst the rate limit promised not to send. The cost is a permit
//!    held while its caller waits for its slot; when the rate is what binds, permits are not.
//!    A store that keeps the rate itself ([`Store::keeps_rate`]) replaces this gate.
//! 4. **Shared lease**, when the budget has a [`Store`]: taken while holding the local permit,
//!    so that a process never asks the store for more than its own share, within the same
//!    deadline.
//!
//! A pause's start or move wakes every caller waiting at the first two gates to weigh its
//! deadline against the pause's end (a queued caller keeps its place in the queue meanwhile).
//!
//! A gate that fails gives back what the earlier ones took. When a permit goes back, the limit
//! learns from its sample (if it learns) and resizes the local permits before the permit itself
//! is returned, so a shrink takes effect before anyone else is admitted.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::class_queue::{ClassQueue, Turn};
use super::error::{AcquireError, TryAcquireError};
use super::pace::{Slot as PaceSlot, Turn as PaceTurn};
use super::pause::Pause;
use super::stats::Stats;
use super::BudgetConfig;
use crate::limit::{Limit, LimitChange, Outcome, Sample, Verdict};
use crate::padded::CachePadded;
#[cfg(feature = "rate")]
use crate::rate::gcra::{Gcra, Slot};
use crate::store::local::LocalPermits;
use crate::store::{Lease, Store, StoreError};

pub(crate) struct Engine {
    /// No gate beyond the local permit (no rate, no store): a free permit is granted at once.
    plain_gates: bool,
    /// A plain return: no lease to give back and no limit to teach.
    plain_release: bool,
    pub(crate) name: Arc<str>,
    pub(crate) config: BudgetConfig,
    pub(crate) permits: LocalPermits,
    /// The limit, when it learns from samples; a fixed limit needs no state beyond the permits.
    learner: Option<Mutex<Learner>>,
    pub(crate) store: Option<Arc<dyn Store>>,
    #[cfg(feature = "rate")]
    pub(crate) rate: Option<Gcra>,
    waiting: CachePadded<AtomicUsize>,
    /// Calls holding their store's lease too (a budget with a store): the calls at the
    /// dependency, as opposed to local permits held while a lease is awaited.
    leased: AtomicUsize,
    /// The queue that ranks priority classes, for a budget with them; one without queues in the
    /// semaphore.
    class_queue: Option<ClassQueue>,
    /// The class of a call that names none.
    default_class: usize,
    /// Set by a dependency's retry-after; read on the fast path.
    pause: CachePadded<Pause>,
    pub(crate) stats: Stats,
}

impl Engine {
    /// How long the pause in force now lasts, if there is one (set by a dependency's
    /// retry-after), and whether grants are paced (after a pause, or an adaptive budget's cold
    /// start).
    pub(crate) fn pause_state(&self) -> (Option<Duration>, bool) {
        let now = Instant::now();
        let left = self.pause.until(now).map(|until| until - now);
        (left, self.pause.is_paced())
    }
}

/// A limit that learns, and the changes it made.
struct Learner {
    limit: Box<dyn Limit>,
    changes: Vec<LimitChange>,
}

/// The most limit changes kept; later ones replace the oldest half, so the record always covers
/// the most recent stretch.
const MAX_CHANGES: usize = 65_536;

/// What a caller holds with its local permit.
#[derive(Debug)]
pub(crate) struct Grant {
    /// When the permit was granted, if the clock was read for it (after a wait, or because the
    /// limit learns from latencies).
    pub(crate) granted: Option<Instant>,
    /// Permits held when this one was granted, itself included.
    in_flight: usize,
    /// The caller's priority class (0 for a budget without classes).
    class: usize,
    /// Boxed: most budgets have no store, and a small permit is cheap to hand around.
    lease: Option<Box<Lease>>,
}

impl Grant {
    /// The lease taken from the budget's store, if it has one.
    pub(crate) fn lease(&self) -> Option<&Lease> {
        self.lease.as_deref()
    }
}

impl Engine {
    pub(crate) fn new(
        name: &str,
        config: BudgetConfig,
        limit: Box<dyn Limit>,
        store: Option<Arc<dyn Store>>,
    ) -> Engine {
        let initial = limit.current().clamp(1, limit.max().max(1));
        let learner = limit.learns().then(|| {
            Mutex::new(Learner {
                limit,
                changes: vec![LimitChange {
                    at: Instant::now(),
                    limit: initial,
                }],
            })
        });
        let name: Arc<str> = Arc::from(name);
        #[cfg(feature = "rate")]
        // A store that keeps the rate itself (shared by a fleet) is the only rate gate.
        let rate = config
            .rate
            .filter(|_| !store.as_ref().is_some_and(|s| s.keeps_rate()));
        #[cfg(feature = "rate")]
        let rate = rate.map(|r| {
            let interval = r.interval().unwrap_or(Duration::from_secs(1));
            Gcra::new(interval, config.burst.unwrap_or(1))
        });
        #[cfg(feature = "rate")]
        let plain_gates = store.is_none() && rate.is_none();
        #[cfg(not(feature = "rate"))]
        let plain_gates = store.is_none();
        let plain_release = store.is_none() && learner.is_none();
        // A budget with classes takes its permits through its class queue, never the plain way.
        let class_queue = config.classes.as_ref().map(ClassQueue::new);
        let (plain_gates, plain_release) = match class_queue {
            Some(_) => (false, false),
            None => (plain_gates, plain_release),
        };
        let default_class = config
            .classes
            .as_ref()
            .and_then(|c| c.default_index())
            .unwrap_or(0);
        let stats = Stats::new(name.clone(), config.classes.as_ref());
        let pause = CachePadded(Pause::new());
        #[cfg(feature = "adaptive")]
        if let Some(spacing) = learner
            .as_ref()
            .and(config.adaptive.as_ref())
            .and_then(|a| a.cold_start_spacing(initial))
        {
            pause.cold_start(spacing, crate::limit::Adaptive::COLD_START_BURST);
        }
        Engine {
            plain_gates,
            plain_release,
            name: name.clone(),
            permits: LocalPermits::new(initial),
            learner,
            store,
            #[cfg(feature = "rate")]
            rate,
            config,
            waiting: CachePadded(AtomicUsize::new(0)),
            leased: AtomicUsize::new(0),
            class_queue,
            default_class,
            pause,
            stats,
        }
    }

    /// The limit now.
    pub(crate) fn limit(&self) -> usize {
        self.permits.limit()
    }

    /// Callers waiting for a local permit now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Relaxed)
    }

    /// Calls that passed every gate and run now: permits held, less (for a budget with a
    /// store) those still waiting for their store's lease.
    pub(crate) fn in_flight(&self) -> usize {
        if self.store.is_some() {
            self.leased.load(Relaxed)
        } else {
            self.permits.in_flight()
        }
    }

    /// Local permits held by callers still waiting for their store's lease (0 for a budget
    /// without a store).
    pub(crate) fn awaiting_store(&self) -> usize {
        if self.store.is_some() {
            self.permits
                .in_flight()
                .saturating_sub(self.leased.load(Relaxed))
        } else {
            0
        }
    }

    /// Whether every caller must pass a gate beyond the local permit.
    #[inline]
    fn has_more_gates(&self) -> bool {
        !self.plain_gates
    }

    /// Grants a permit now if one is free and nobody waits; never waits.
    #[inline]
    pub(crate) fn try_grant(&self) -> Result<Grant, TryAcquireError> {
        if self.pause.is_set() {
            self.try_pass_pause()?;
        }
        if self.plain_gates {
            return match self.grant_at_once() {
                Some(grant) => Ok(grant),
                None => Err(self.refused_at_once()),
            };
        }
        if self.store.is_some() {
            self.stats.rejected();
            return Err(TryAcquireError::WouldWait);
        }
        #[cfg(feature = "rate")]
        if let Some(rate) = &self.rate {
            if !self.permits.try_take() {
                self.stats.rejected();
                return Err(TryAcquireError::NoPermits);
            }
            let now = Instant::now();
            return match rate.reserve(now, Some(now)) {
                Ok(_) => Ok(self.admitted_at_once(Some(now))),
                Err(_) => {
                    self.give_back();
                    self.stats.rate_limited();
                    Err(TryAcquireError::RateLimited)
                }
            };
        }
        match self.grant_at_once() {
            Some(grant) => Ok(grant),
            None => {
                self.stats.rejected();
                Err(TryAcquireError::NoPermits)
            }
        }
    }

    #[cold]
    fn refused_at_once(&self) -> TryAcquireError {
        self.stats.rejected();
        TryAcquireError::NoPermits
    }

    #[inline]
    fn grant_at_once(&self) -> Option<Grant> {
        if !self.permits.try_take() {
            return None;
        }
        Some(self.admitted_at_once(None))
    }

    /// Counts a permit taken without waiting; `now` if the clock was read already.
    #[inline]
    fn admitted_at_once(&self, now: Option<Instant>) -> Grant {
        let in_flight = self.permits.in_flight();
        self.stats.admitted_at_once(in_flight);
        Grant {
            granted: now.or_else(|| self.learner.is_some().then(Instant::now)),
            in_flight,
            class: 0,
            lease: None,
        }
    }

    /// Passes every gate, waiting where the budget allows.
    ///
    /// Cancel safe: a future dropped at any point holds nothing afterwards, and a caller dropped
    /// while waiting is counted as cancelled.
    pub(crate) async fn grant(&self) -> Result<Grant, AcquireError> {
        if let Some(grant) = self.grant_fast() {
            return Ok(grant);
        }
        self.grant_slow().await
    }

    /// The fast path: a permit free now, nobody waiting, and no other gate.
    #[inline]
    pub(crate) fn grant_fast(&self) -> Option<Grant> {
        if self.has_more_gates() || self.pause.is_set() {
            return None;
        }
        self.grant_at_once()
    }

    /// Every gate, waiting where the budget allows (after the fast path failed).
    pub(crate) async fn grant_slow(&self) -> Result<Grant, AcquireError> {
        match &self.class_queue {
            None => self.grant_by(None).await,
            Some(queue) => self.grant_with_classes(queue, self.default_class).await,
        }
    }

    /// Every gate, with a permit deadline no later than `by` (besides the budget's own), in the
    /// default class.
    pub(crate) async fn grant_by(&self, by: Option<Instant>) -> Result<Grant, AcquireError> {
        match &self.class_queue {
            None => self.grant_traced(None, by).await,
            Some(_) => self.grant_classed(self.default_class, by).await,
        }
    }

    async fn grant_traced(
        &self,
        class: Option<usize>,
        by: Option<Instant>,
    ) -> Result<Grant, AcquireError> {
        #[cfg(feature = "tracing")]
        {
            use tracing::Instrument;
            let span = tracing::debug_span!("inflight.permit_wait", budget = %self.name);
            self.grant_after_wait(class, by).instrument(span).await
        }
        #[cfg(not(feature = "tracing"))]
        self.grant_after_wait(class, by).await
    }

    /// Every gate for a caller of `class` in a budget with classes, counting its outcome for the
    /// class as well.
    async fn grant_classed(
        &self,
        class: usize,
        by: Option<Instant>,
    ) -> Result<Grant, AcquireError> {
        let stats = self.stats.class(class);
        let mut pending = ClassPending {
            stats,
            ended: false,
        };
        let result = self.grant_traced(Some(class), by).await;
        pending.ended = true;
        if let Err(e) = &result {
            stats.refused(e);
        }
        result
    }

    /// `class`'s own permit deadline, else the budget's.
    fn permit_timeout(&self, class: Option<usize>) -> Option<Duration> {
        let own = match (class, &self.config.classes) {
            (Some(i), Some(classes)) => classes.classes.get(i).and_then(|c| c.permit_timeout),
            _ => None,
        };
        own.or(self.config.permit_timeout)
    }

    /// Takes a free permit for a caller that did not wait, unless someone waits for one.
    #[inline]
    fn take_now(&self) -> bool {
        match &self.class_queue {
            Some(queue) if queue.has_waiters() => false,
            _ => self.permits.try_take(),
        }
    }

    /// Gives back a permit that was taken: to the semaphore, then to the next waiter of a class
    /// queue if anyone waits there.
    #[inline]
    fn give_back(&self) {
        self.permits.give_back();
        if let Some(queue) = &self.class_queue {
            queue.returned(&self.permits);
        }
    }

    async fn grant_after_wait(
        &self,
        class: Option<usize>,
        by: Option<Instant>,
    ) -> Result<Grant, AcquireError> {
        let start = Instant::now();
        // A deadline too far to represent is no deadline.
        let own = self
            .permit_timeout(class)
            .and_then(|t| start.checked_add(t));
        let deadline = match (own, by) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut attempt = Attempt {
            engine: self,
            holds_local: false,
            ended: false,
        };
        // A pause that outlasts the deadline refuses before the queue.
        self.check_pause(start, deadline, &mut attempt)?;
        if !self.take_now() {
            self.wait_in_queue(class, deadline, &mut attempt).await?;
        }
        attempt.holds_local = true;
        let in_flight = self.permits.in_flight();
        if self.pause.is_set() {
            self.wait_out_pause(deadline, &mut attempt).await?;
        }
        #[cfg(feature = "rate")]
        if let Some(rate) = &self.rate {
            self.wait_for_slot(rate, deadline, &mut attempt).await?;
        }
        let mut lease = None;
        if let Some(store) = &self.store {
            match store.acquire(&self.name, deadline).await {
                Ok(l) => {
                    self.leased.fetch_add(1, Relaxed);
                    lease = Some(Box::new(l));
                }
                Err(StoreError::Timeout) => {
                    attempt.ended = true;
                    self.stats.permit_timed_out();
                    return Err(AcquireError::PermitTimeout);
                }
                Err(StoreError::RateLimited { retry_after }) => {
                    attempt.ended = true;
                    self.stats.rate_limited();
                    return Err(AcquireError::RateLimited { retry_after });
                }
                Err(e) => {
                    attempt.ended = true;
                    self.stats.unavailable(&e);
                    return Err(AcquireError::Unavailable(e));
                }
            }
        }
        attempt.holds_local = false;
        attempt.ended = true;
        let granted = Instant::now();
        self.stats.admitted_after(granted - start);
        if let Some(class) = class {
            self.stats.class(class).admitted_after(granted - start);
        }
        Ok(Grant {
            granted: Some(granted),
            in_flight,
            class: class.unwrap_or(0),
            lease,
        })
    }

    /// The index of the class a call names: its place among the budget's classes, or the
    /// default class's for a name it does not have (0 for a budget without classes).
    pub(crate) fn class_of(&self, name: &str) -> usize {
        match &self.config.classes {
            Some(classes) => classes
                .index_of(name)
                .or_else(|| classes.default_index())
                .unwrap_or(0),
            None => 0,
        }
    }

    /// Every gate, for a caller in class `class` (an index from [`Engine::class_of`]).
    pub(crate) async fn grant_in(&self, class: usize) -> Result<Grant, AcquireError> {
        match &self.class_queue {
            None => self.grant().await,
            Some(queue) => self.grant_with_classes(queue, class).await,
        }
    }

    async fn grant_with_classes(
        &self,
        queue: &ClassQueue,
        class: usize,
    ) -> Result<Grant, AcquireError> {
        // The fast path of a budget with classes: a free permit, nobody waiting in any class,
        // no other gate.
        if self.plain_classed_gates() && !queue.has_waiters() && self.permits.try_take() {
            return Ok(self.admitted_in_at_once(class, None));
        }
        self.grant_classed(class, None).await
    }

    /// Whether a caller of a budget with classes passes no gate beyond the local permit now.
    #[inline]
    fn plain_classed_gates(&self) -> bool {
        #[cfg(feature = "rate")]
        let rate = self.rate.is_some();
        #[cfg(not(feature = "rate"))]
        let rate = false;
        !rate && self.store.is_none() && !self.pause.is_set()
    }

    /// Counts a permit taken without waiting by a caller of `class`.
    #[inline]
    fn admitted_in_at_once(&self, class: usize, now: Option<Instant>) -> Grant {
        let mut grant = self.admitted_at_once(now);
        grant.class = class;
        self.stats.class(class).admitted_at_once();
        grant
    }

    /// [`Engine::try_grant`] for a caller in class `class`; it never overtakes a waiter of any
    /// class.
    pub(crate) fn try_grant_in(&self, class: usize) -> Result<Grant, TryAcquireError> {
        let Some(queue) = &self.class_queue else {
            return self.try_grant();
        };
        let stats = self.stats.class(class);
        let result = if queue.has_waiters() {
            self.stats.rejected();
            Err(TryAcquireError::NoPermits)
        } else {
            self.try_grant()
        };
        match result {
            Ok(mut grant) => {
                grant.class = class;
                stats.admitted_at_once();
                Ok(grant)
            }
            Err(e) => {
                stats.refused_at_once(&e);
                Err(e)
            }
        }
    }

    /// The class of a call that names none.
    pub(crate) fn default_class(&self) -> usize {
        self.default_class
    }

    /// Per class, for the snapshot; empty for a budget without classes.
    pub(crate) fn class_snapshots(&self) -> Vec<super::ClassSnapshot> {
        match &self.config.classes {
            Some(classes) => classes
                .iter()
                .zip(self.stats.classes())
                .map(|(class, stats)| stats.snapshot(class))
                .collect(),
            None => Vec::new(),
        }
    }

    /// Joins the queue (if its bound allows) and waits for a local permit until `deadline`.
    async fn wait_in_queue(
        &self,
        class: Option<usize>,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<(), AcquireError> {
        // try_take just failed, so every permit was held (or callers of some class wait).
        let limit = self.permits.limit();
        self.stats.all_held(limit);
        if let Some(queue) = &self.class_queue {
            return self
                .wait_in_class(
                    queue,
                    class.unwrap_or(self.default_class),
                    limit,
                    deadline,
                    attempt,
                )
                .await;
        }
        let ahead = match self.config.max_queued {
            // An unbounded queue always has a place: one plain add, no compare-and-swap loop.
            None => self.waiting.fetch_add(1, Relaxed),
            // Take a place only if one is free: an unconditional add (undone on rejection) would
            // let `waiting` show more than `max_queued` for a moment to anyone reading it.
            Some(max_queued) => match self
                .waiting
                .fetch_update(Relaxed, Relaxed, |n| (n < max_queued).then_some(n + 1))
            {
                Ok(ahead) => ahead,
                Err(ahead) => {
                    attempt.ended = true;
                    self.stats.rejected();
                    return Err(AcquireError::QueueFull {
                        retry_after: self.queue_estimate(ahead, limit),
                    });
                }
            },
        };
        self.stats.queued(ahead + 1);
        let _place = QueuePlace(&self.waiting);
        // One place in the semaphore's queue for the whole wait: a pause that moves wakes the
        // caller to check its deadline against it, and must not cost it its place.
        let take = std::pin::pin!(async {
            self.permits.take().await;
            Woke::Granted
        });
        // The semaphore's queue never evicts: its only turn is a grant.
        self.wait_in_line(take, deadline, attempt).await.map(drop)
    }

    /// Waits for `turn` (a place in a queue, kept for the whole wait) until `deadline`, waking
    /// to weigh the deadline against the pause whenever it moves; returns how the turn came
    /// ([`Woke::Granted`] or [`Woke::Evicted`]).
    async fn wait_in_line<F: Future<Output = Woke>>(
        &self,
        mut turn: std::pin::Pin<&mut F>,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<Woke, AcquireError> {
        let mut timer = std::pin::pin!(deadline.map(tokio::time::sleep_until));
        loop {
            let changed = self.pause.changed();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            self.check_pause(Instant::now(), deadline, attempt)?;
            let woke = std::future::poll_fn(|cx| {
                use std::task::Poll;
                if let Poll::Ready(woke) = turn.as_mut().poll(cx) {
                    return Poll::Ready(woke);
                }
                if let Some(timer) = timer.as_mut().as_pin_mut() {
                    if timer.poll(cx).is_ready() {
                        return Poll::Ready(Woke::Deadline);
                    }
                }
                match changed.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Woke::PauseMoved),
                    Poll::Pending => Poll::Pending,
                }
            })
            .await;
            match woke {
                Woke::Deadline => {
                    attempt.ended = true;
                    self.stats.permit_timed_out();
                    return Err(AcquireError::PermitTimeout);
                }
                Woke::PauseMoved => {}
                turned => return Ok(turned),
            }
        }
    }

    /// [`Engine::wait_in_queue`] for a budget with classes: the caller waits in `class`'s lane
    /// of `queue`, until its turn, its deadline, or a heavier caller takes its place.
    async fn wait_in_class(
        &self,
        queue: &ClassQueue,
        class: usize,
        limit: usize,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<(), AcquireError> {
        let class_waiting = &self.stats.class(class).waiting;
        let joined = queue.join(
            class,
            &self.permits,
            &self.waiting,
            class_waiting,
            self.config.max_queued,
        );
        let (ticket, ahead) = match joined {
            Ok(joined) => joined,
            Err(full) => {
                attempt.ended = true;
                self.stats.rejected();
                return Err(AcquireError::QueueFull {
                    retry_after: self.queue_estimate(full.ahead, limit),
                });
            }
        };
        self.stats.queued(ahead + 1);
        // As in the semaphore's queue: one place for the whole wait, whatever the pause does.
        let turn = std::pin::pin!(async move {
            match ticket.await {
                Turn::Granted => Woke::Granted,
                Turn::Evicted => Woke::Evicted,
            }
        });
        match self.wait_in_line(turn, deadline, attempt).await? {
            Woke::Evicted => {
                attempt.ended = true;
                self.stats.evicted();
                Err(AcquireError::Evicted {
                    retry_after: self.queue_estimate(self.waiting(), limit),
                })
            }
            _ => Ok(()),
        }
    }

    /// Refuses the caller if a pause in force at `now` ends after its `deadline`.
    fn check_pause(
        &self,
        now: Instant,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<(), AcquireError> {
        if !self.pause.is_set() {
            return Ok(());
        }
        match (self.pause.until(now), deadline) {
            (Some(until), Some(d)) if until > d => {
                attempt.ended = true;
                self.stats.paused();
                Err(AcquireError::Paused {
                    retry_after: until - now,
                })
            }
            _ => Ok(()),
        }
    }

    /// Sleeps, holding the local permit, until the pause in force ends (however often it
    /// moves), then until the pace's slot if a pace is in force; refuses at once when either
    /// would end after `deadline`.
    async fn wait_out_pause(
        &self,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<(), AcquireError> {
        loop {
            self.sleep_out_pause(deadline, attempt).await?;
            if !self.pause.is_paced() {
                return Ok(());
            }
            let slot = self.wait_for_turn(deadline, attempt).await?;
            // A cold start's slot, reached after a refusal started the pace: a slot in the pace.
            if !slot.is_some_and(|s| self.pause.pace().superseded(&s)) {
                break;
            }
        }
        // A pause begun during the wait for the slot is waited out too (with no second slot).
        if self.pause.until(Instant::now()).is_some() {
            self.sleep_out_pause(deadline, attempt).await?;
        }
        Ok(())
    }

    /// Waits for the pace's slot, holding the local permit; the slot once reached (`None` when
    /// the pace had lapsed).
    async fn wait_for_turn(
        &self,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<Option<PaceSlot>, AcquireError> {
        let pace = self.pause.pace();
        let now = Instant::now();
        let slot = match self.pause.reserve(now, deadline) {
            Ok(PaceTurn::Free) => return Ok(None),
            Ok(PaceTurn::At(slot)) => slot,
            Err(wait) => {
                attempt.ended = true;
                self.stats.paused();
                return Err(AcquireError::Paused { retry_after: wait });
            }
        };
        // A caller dropped while it sleeps gives its slot back if nobody lined up behind it.
        let held = HeldTurn {
            pause: &self.pause,
            slot: Some(slot),
        };
        let at = held.slot.as_ref().map_or(now, |s| s.at);
        let mut sleep = std::pin::pin!(tokio::time::sleep_until(at));
        loop {
            let changed = self.pause.changed();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            // A pause begun meanwhile that ends past the deadline refuses at once.
            self.check_pause(Instant::now(), deadline, attempt)?;
            let slept = std::future::poll_fn(|cx| {
                if sleep.as_mut().poll(cx).is_ready() {
                    std::task::Poll::Ready(true)
                } else if changed.as_mut().poll(cx).is_ready() {
                    std::task::Poll::Ready(false)
                } else {
                    std::task::Poll::Pending
                }
            })
            .await;
            if slept || held.slot.as_ref().is_some_and(|s| pace.cold_ended(s)) {
                break;
            }
        }
        Ok(held.used())
    }

    /// Sleeps until the pause in force ends (however often it moves), or refuses at once when
    /// it would end after `deadline`.
    async fn sleep_out_pause(
        &self,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<(), AcquireError> {
        loop {
            let changed = self.pause.changed();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            let now = Instant::now();
            self.check_pause(now, deadline, attempt)?;
            let Some(until) = self.pause.until(now) else {
                return Ok(());
            };
            let mut sleep = std::pin::pin!(tokio::time::sleep_until(until));
            std::future::poll_fn(|cx| {
                if sleep.as_mut().poll(cx).is_ready() || changed.as_mut().poll(cx).is_ready() {
                    std::task::Poll::Ready(())
                } else {
                    std::task::Poll::Pending
                }
            })
            .await;
        }
    }

    /// The pause gate for a caller that will not wait: refused while a pause is in force, or
    /// while a pace is and its next slot is not now.
    #[cold]
    fn try_pass_pause(&self) -> Result<(), TryAcquireError> {
        let now = Instant::now();
        if self.pause.until(now).is_some() {
            self.stats.paused();
            return Err(TryAcquireError::Paused);
        }
        if self.pause.is_paced() && self.pause.reserve(now, Some(now)).is_err() {
            self.stats.paused();
            return Err(TryAcquireError::Paused);
        }
        Ok(())
    }

    /// When a place in the queue may free, for a caller refused with `ahead` queued before it
    /// and `limit` permits: (ahead + 1) x the mean call time / limit; at least the pause in
    /// force. `None` before any call was measured (and no pause is in force).
    fn queue_estimate(&self, ahead: usize, limit: usize) -> Option<Duration> {
        let now = Instant::now();
        let pause = self.pause.until(now).map(|until| until - now);
        let estimate = self.stats.mean_call().map(|mean| {
            let turns = u32::try_from(ahead.saturating_add(1)).unwrap_or(u32::MAX);
            let limit = u32::try_from(limit.max(1)).unwrap_or(u32::MAX);
            mean.saturating_mul(turns) / limit
        });
        match (estimate, pause) {
            (Some(e), Some(p)) => Some(e.max(p)),
            (e, p) => e.or(p),
        }
    }

    /// Pauses the budget for `delay` from now (no new permit before then), for an overload
    /// reported by a call granted at `granted`, and starts or cuts the pace.
    pub(crate) fn pause_for(&self, delay: Duration, granted: Option<Instant>) {
        let now = Instant::now();
        if now.checked_add(delay).is_some() {
            self.pause.refused(now, granted, delay);
            self.stats.paused_by_dependency();
        }
    }

    /// Reserves the next rate slot and sleeps until it, or refuses at once if it comes after
    /// `deadline`.
    #[cfg(feature = "rate")]
    async fn wait_for_slot(
        &self,
        rate: &Gcra,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<(), AcquireError> {
        let now = Instant::now();
        let slot = match rate.reserve(now, deadline) {
            Ok(slot) => slot,
            Err(wait) => {
                attempt.ended = true;
                self.stats.rate_limited();
                return Err(AcquireError::RateLimited { retry_after: wait });
            }
        };
        if slot.at > now {
            let at = slot.at;
            // A caller dropped while it sleeps gives its slot back if nobody queued behind it.
            let held = HeldSlot {
                rate,
                slot: Some(slot),
            };
            tokio::time::sleep_until(at).await;
            held.used();
        }
        Ok(())
    }

    /// Takes back a permit: the lease goes back to the store, the limit learns from the call,
    /// then the local permit is returned.
    #[inline]
    pub(crate) fn release(&self, grant: &mut Grant, verdict: Verdict) {
        if let Some(delay) = verdict.pause() {
            // Before the permit goes back: the pause holds for whoever it would have gone to.
            self.pause_for(delay, grant.granted);
        } else if self.pause.is_set() {
            // The first answer ends a cold start; a success may grow the pace.
            self.pause
                .answered(grant.granted, verdict.outcome() == Outcome::Success);
        }
        if self.plain_release {
            self.permits.give_back();
            return;
        }
        self.release_learning(grant, verdict);
    }

    fn release_learning(&self, grant: &mut Grant, verdict: Verdict) {
        let outcome = verdict.outcome();
        if let (Some(lease), Some(store)) = (grant.lease.take(), &self.store) {
            self.leased.fetch_sub(1, Relaxed);
            store.release(&self.name, *lease);
        }
        if let (Some(learner), Some(granted)) = (&self.learner, grant.granted) {
            let now = Instant::now();
            let sample = Sample::new(now - granted, grant.in_flight, outcome);
            let mut learner = learner.lock().unwrap_or_else(PoisonError::into_inner);
            learner.limit.on_sample(&sample);
            let new = learner.limit.current().clamp(1, learner.limit.max().max(1));
            if new != self.permits.limit() {
                self.permits.resize(new);
                if learner.changes.len() >= MAX_CHANGES {
                    learner.changes.drain(..MAX_CHANGES / 2);
                }
                learner.changes.push(LimitChange {
                    at: now,
                    limit: new,
                });
            }
        }
        if self.class_queue.is_some() {
            self.stats.class(grant.class).released();
        }
        // After a resize: a grown limit's new permits go to the class queue's waiters with this
        // one.
        self.give_back();
    }

    /// The limit's changes so far, oldest first, starting with its initial value; empty for a
    /// limit that does not learn.
    pub(crate) fn limit_changes(&self) -> Vec<LimitChange> {
        match &self.learner {
            Some(learner) => learner
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .changes
                .clone(),
            None => Vec::new(),
        }
    }
}

/// What woke a caller waiting in the queue.
enum Woke {
    Granted,
    Evicted,
    Deadline,
    PauseMoved,
}

/// One pass through the gates after the fast path failed: gives back a local permit it took and
/// counts a caller dropped before any outcome as cancelled.
struct Attempt<'a> {
    engine: &'a Engine,
    holds_local: bool,
    ended: bool,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if self.holds_local {
            self.engine.give_back();
        }
        if !self.ended {
            self.engine.stats.cancelled();
        }
    }
}

/// A caller of a budget with classes before its outcome: counts it as cancelled for its class
/// if it is dropped first.
struct ClassPending<'a> {
    stats: &'a super::stats::ClassStats,
    ended: bool,
}

impl Drop for ClassPending<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.stats.cancelled();
        }
    }
}

/// A reserved rate slot not yet reached; given back if its caller leaves first.
#[cfg(feature = "rate")]
struct HeldSlot<'a> {
    rate: &'a Gcra,
    slot: Option<Slot>,
}

#[cfg(feature = "rate")]
impl HeldSlot<'_> {
    fn used(mut self) {
        self.slot = None;
    }
}

#[cfg(feature = "rate")]
impl Drop for HeldSlot<'_> {
    fn drop(&mut self) {
        if let Some(slot) = &self.slot {
            self.rate.cancel(slot);
        }
    }
}

/// A pace slot not yet reached; given back if its caller leaves first.
struct HeldTurn<'a> {
    pause: &'a Pause,
    slot: Option<PaceSlot>,
}

impl HeldTurn<'_> {
    fn used(mut self) -> Option<PaceSlot> {
        self.slot.take()
    }
}

impl Drop for HeldTurn<'_> {
    fn drop(&mut self) {
        if let Some(slot) = &self.slot {
            self.pause.pace().cancel(slot);
        }
    }
}

/// A caller's place in the queue; leaving it, by any path, lowers `waiting`.
struct QueuePlace<'a>(&'a AtomicUsize);

impl Drop for QueuePlace<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}
