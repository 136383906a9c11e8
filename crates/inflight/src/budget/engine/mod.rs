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
//!
//! One file per job: this one holds the engine's state and what reads it; `grant` the fast
//! paths and the grants with and without classes; `wait` the waits at each gate and the guards
//! that undo a wait that ends early; `release` a permit going back and what its limit learns.

mod grant;
mod release;
mod wait;

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
    /// The queue that ranks priority classes, for a budget with them; one without queues in
    /// [`LocalPermits`]' semaphore.
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
