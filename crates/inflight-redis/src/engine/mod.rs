//! The engine behind [`RedisStore`](crate::RedisStore): the wait for a fleet lease, the leases
//! held by this process and their renewal, the fallback when the server cannot be asked, and the
//! counters.
//!
//! An acquire is one script call when a permit is free; a release is one more, sent in the
//! background. While the fleet is full, the script puts the caller in the fleet's queue; a
//! release (or an expiry) hands the permit to the head of the queue inside the server and tells
//! its process on that process's grants channel, so the caller learns of its grant without
//! asking. It still asks again every third of a queue lease (or at the earliest lease expiry),
//! which keeps its entry alive and catches a grant the channel dropped; while the channel is not
//! heard, it asks after jittered pauses instead. A reply that never came leaves the outcome
//! unknown: the lease id is the caller's own, so a retry with it is granted at most once, and an
//! abandoned id (held or queued) is released in the background (its expiry is the backstop).
//!
//! Every reply carries the budget's epoch (see [`scripts`](crate::scripts)). When it moves on
//! from one this process had seen, Redis lost the state this process's leases were granted in:
//! a renewal round goes at once, adding back the leases still running and registering the calls
//! the local fallback admitted, while the budget learns and grants nothing new.
//!
//! One file per job: this one holds the engine's state, the acquire, the release and what reads
//! the state; `renew` the renewal of the leases held, and what it finds lost.

mod renew;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use inflight::store::{Lease, LeaseWatch, StoreError};
use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::error::FleetUnavailable;
use crate::fallback::Fail;
use crate::fallback::Fallback;
use crate::server::{shown_error, Fence, Seen, Server, ServerError, Terms};
use crate::snapshot::FleetSnapshot;

/// How often a fleet budget that keeps running on its fallback says so again.
pub(crate) const DOWN_LOG_EVERY: Duration = Duration::from_secs(10);

/// How a store is set up.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) limit: usize,
    pub(crate) lease: Duration,
    pub(crate) fail: Fail,
    /// The longest one round trip may take when the caller has no nearer deadline.
    pub(crate) op_timeout: Duration,
    /// After a failure, how long calls skip the server before it is asked again.
    pub(crate) retry_after: Duration,
    pub(crate) first_pause: Duration,
    pub(crate) max_pause: Duration,
    /// How long a waiter keeps its place in the fleet's queue without asking again: a waiter
    /// killed while queued is skipped after this. Waiters ask every third of it.
    pub(crate) queue_lease: Duration,
}

pub(crate) struct Engine {
    server: Arc<dyn Server>,
    settings: Settings,
    fallback: Fallback,
    held: Mutex<HashMap<Arc<str>, Held>>,
    /// Calls the fallback admitted, running now, by their local lease id.
    locals: Mutex<HashMap<Arc<str>, Local>>,
    /// What this process has seen of each budget's state.
    seen: Mutex<HashMap<Arc<str>, Seen>>,
    down: Mutex<Option<Down>>,
    renewing: AtomicBool,
    /// Wakes the renewal task for a round now (an epoch moved, Redis is back).
    renew_now: Arc<Notify>,
    runtime: OnceLock<Handle>,
    counters: Counters,
    outstanding: Arc<Outstanding>,
    /// Releases not sent yet, by budget: the next acquire of the budget from here takes them
    /// along in its script (a call that follows another costs one script, not two); those no
    /// acquire took go in a script of their own as soon as the runtime runs their task.
    unsent: Arc<Mutex<Unsent>>,
    /// Set by [`Engine::shutdown`]: acquires are refused from then on.
    closed: AtomicBool,
    /// Wakes waiters when the store shuts down.
    closing: Notify,
}

/// Releases sent in the background whose answer has not come yet, by lease id: what a shutdown
/// sends again and waits for, and what the last handle's drop sends before the process can end.
#[derive(Default)]
struct Outstanding {
    ids: Mutex<HashMap<Arc<str>, Arc<str>>>,
}

impl Outstanding {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Arc<str>>> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A fleet lease held by this process.
struct Held {
    budget: Arc<str>,
    watch: LeaseWatch,
    /// When the last ask that the server confirmed was sent: the server holds the lease until
    /// at least one lease after this.
    confirmed: Instant,
}

/// A call admitted by the fallback, and its id as a holder in Redis once registered.
struct Local {
    budget: Arc<str>,
    id: Arc<str>,
    registered: bool,
}

/// An outage as a caller meets it: why, since when, and until when calls skip the server.
struct Outage {
    reason: ServerError,
    since: Instant,
    until: Instant,
}

/// The server failed: skip it until `until`.
struct Down {
    until: Instant,
    reason: ServerError,
    /// The first failure of this outage: the fallback's hold counts from it.
    since: Instant,
    /// When the fallback state was last logged.
    logged: Instant,
}

#[derive(Default)]
struct Counters {
    acquired: AtomicU64,
    released: AtomicU64,
    reclaimed: AtomicU64,
    lost: AtomicU64,
    fallbacks: AtomicU64,
    unavailable: AtomicU64,
    timeouts: AtomicU64,
    fleet_holders: AtomicU64,
    round_trips: AtomicU64,
    round_trip_micros: AtomicU64,
    readded: AtomicU64,
    registered: AtomicU64,
    epochs: AtomicU64,
    learning_until_ms: AtomicU64,
    rate_limited: AtomicU64,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("address", &self.server.address())
            .field("limit", &self.settings.limit)
            .field("lease", &self.settings.lease)
            .field("fail", &self.settings.fail)
            .finish_non_exhaustive()
    }
}

impl Engine {
    pub(crate) fn new(server: Arc<dyn Server>, settings: Settings) -> Engine {
        let fallback = Fallback::new(settings.fail, settings.lease);
        Engine {
            server,
            fallback,
            settings,
            held: Mutex::new(HashMap::new()),
            locals: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashMap::new()),
            down: Mutex::new(None),
            renewing: AtomicBool::new(false),
            renew_now: Arc::default(),
            runtime: OnceLock::new(),
            counters: Counters::default(),
            outstanding: Arc::default(),
            unsent: Arc::default(),
            closed: AtomicBool::new(false),
            closing: Notify::new(),
        }
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The budgets this store has served (one, from a budgets file).
    pub(crate) fn budgets(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .map(|b| b.to_string())
            .collect()
    }

    pub(crate) fn address(&self) -> &str {
        self.server.address()
    }

    pub(crate) fn server(&self) -> &Arc<dyn Server> {
        &self.server
    }

    /// Whether `lease` was given by the fallback, not by the server.
    pub(crate) fn is_fallback(lease: &Lease) -> bool {
        Fallback::gave(lease)
    }

    fn seen(&self, budget: &str) -> Seen {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(budget)
            .copied()
            .unwrap_or_default()
    }

    /// Takes in the state a reply of `budget` carried; when its epoch moved on from one seen
    /// here, a renewal round goes at once (leases still running are added back, local calls
    /// registered).
    fn saw(&self, budget: &Arc<str>, fence: Fence) {
        let moved = self
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(budget.clone())
            .or_default()
            .update(fence);
        if !fence.learning.is_zero() {
            let until = u64::try_from(fence.learning.as_millis()).unwrap_or(u64::MAX);
            self.counters
                .learning_until_ms
                .store(now_ms().saturating_add(until), Relaxed);
        }
        if moved {
            self.counters.epochs.fetch_add(1, Relaxed);
            tracing::warn!(
                budget = %budget,
                address = self.server.address(),
                epoch = fence.epoch,
                learning_ms = u64::try_from(fence.learning.as_millis()).unwrap_or(u64::MAX),
                "fleet budget: redis lost the budget's state (a restart, a flush or a failover); \
                 registering the calls this process runs again, nothing new is granted while \
                 the fleet does"
            );
            self.renew_now.notify_one();
        }
    }

    pub(crate) async fn acquire(
        self: &Arc<Self>,
        budget: &str,
        deadline: Option<Instant>,
    ) -> Result<Lease, StoreError> {
        loop {
            if let Some(lease) = self.try_acquire(budget, deadline).await? {
                return Ok(lease);
            }
        }
    }

    /// One try: the server's answer, or the fail policy's. `None` when a caller waiting on the
    /// fallback should ask the server again.
    async fn try_acquire(
        self: &Arc<Self>,
        budget: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>, StoreError> {
        if self.closed.load(Relaxed) {
            return Err(self.shut_down(budget));
        }
        self.start_renewing();
        if let Some(down) = self.skipping() {
            return self.when_down(budget, deadline, down).await;
        }
        let grants = self.server.grants();
        // The limit this process asks under goes with the id: a permit handed to it from the
        // queue by a process of another limit (a rolling change) respects it.
        let id: Arc<str> = Arc::from(format!(
            "{}/{}",
            self.server.lease_id(),
            self.settings.limit
        ));
        let budget: Arc<str> = Arc::from(budget);
        // Registered before the first ask, so that a grant told before the answer counts.
        let ticket = grants.register(&id);
        let mut pending = Pending {
            engine: self,
            budget: budget.clone(),
            id: id.clone(),
            armed: false,
        };
        let terms = self.terms();
        // Pauses between asks while grants are not heard (the listener is not subscribed yet,
        // or reconnecting): the fallback is to ask again, as often as this allows.
        let mut backoff = Backoff::new(self.settings.first_pause, self.settings.max_pause);
        // Releases of this budget not sent yet go with the first ask.
        let mut releasing = self.take_unsent(&budget);
        // The id's first ask: the server holds nothing of it yet (skips two lookups there).
        let mut first = true;
        // A failure of a server believed up is asked again once, at once: the connection may
        // have been closed while this process was idle (a restart it did not see), and the
        // ask again goes on a new one.
        let mut may_retry = !self.is_down();
        loop {
            let live = grants.is_live();
            let asked = Instant::now();
            let op_deadline = min_deadline(deadline, asked + self.settings.op_timeout);
            // From the first ask on, the id may be queued or granted: given back if the caller
            // leaves before it is granted here.
            pending.armed = true;
            let carried = Carried {
                engine: self,
                budget: &budget,
                ids: std::mem::take(&mut releasing),
            };
            let answer = tokio::time::timeout_at(
                op_deadline,
                self.server.acquire(
                    &budget,
                    &id,
                    first,
                    terms,
                    self.seen(&budget),
                    carried.ids.clone(),
                ),
            )
            .await;
            first = false;
            let answered = Instant::now();
            if matches!(answer, Ok(Ok(_))) {
                carried.answered();
            } else {
                drop(carried);
            }
            let acquired = match answer {
                Ok(Ok(acquired)) => acquired,
                Ok(Err(_)) if std::mem::take(&mut may_retry) => continue,
                Ok(Err(error)) => return self.failed(&budget, deadline, error).await,
                Err(_) if deadline.is_some_and(|d| answered >= d) => {
                    self.counters.timeouts.fetch_add(1, Relaxed);
                    return Err(StoreError::Timeout);
                }
                Err(_) => {
                    let error: ServerError = Arc::new(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer within {:?}", self.settings.op_timeout),
                    ));
                    return self.failed(&budget, deadline, error).await;
                }
            };
            self.round_trip(answered - asked);
            self.recovered();
            self.saw(&budget, acquired.fence);
            self.counters
                .reclaimed
                .fetch_add(acquired.reclaimed, Relaxed);
            self.counters.fleet_holders.store(acquired.holders, Relaxed);
            if acquired.granted {
                return Ok(Some(self.granted(&mut pending, asked)));
            }
            // Grants went live during this ask (this ask made the connection): the channel is
            // subscribed before a connection serves a script, so this answer covers the time
            // before it, and the wake that going live gave every waiter asks for nothing more.
            let live = live || (grants.is_live() && ticket.settle());
            if ticket.is_granted() {
                // Told on the channel before this answer: the grant left no later than it.
                return Ok(Some(self.granted(&mut pending, asked)));
            }
            // Queued. The grant is told on this process's channel the moment a release (or an
            // expiry) hands the permit over; asking again is the backstop: it keeps the queue
            // entry alive, and catches a grant the channel dropped.
            let mut pause = if live {
                terms.queue_lease / 3
            } else {
                backoff.pause()
            };
            if !acquired.retry_in.is_zero() {
                // An expiry frees a permit when nobody releases, and learning ends: asking then
                // hands it over.
                pause = pause.min(acquired.retry_in + Duration::from_millis(1));
            }
            let wake = min_deadline(deadline, answered + pause);
            let closing = self.closing.notified();
            tokio::pin!(closing);
            closing.as_mut().enable();
            if self.closed.load(Relaxed) {
                return Err(self.shut_down(&budget));
            }
            tokio::select! {
                () = tokio::time::sleep_until(wake) => {}
                () = ticket.changed() => {
                    if ticket.is_granted() {
                        // The grant was made after this waiter's last ask reached the server.
                        return Ok(Some(self.granted(&mut pending, asked)));
                    }
                    // Grants were not heard for a while, or stopped being heard: ask again.
                }
                // Grants are heard from now on: ask again, so that the answer covers the gap.
                () = grants.until_live(), if !live => {}
                () = closing => return Err(self.shut_down(&budget)),
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                self.counters.timeouts.fetch_add(1, Relaxed);
                return Err(StoreError::Timeout);
            }
        }
    }

    /// The lease operations' terms for this store.
    fn terms(&self) -> Terms {
        Terms {
            limit: self.settings.limit,
            lease: self.settings.lease,
            queue_lease: self.settings.queue_lease,
        }
    }

    /// Lease `pending` was granted, no earlier than `confirmed`: it is held here.
    fn granted(&self, pending: &mut Pending<'_>, confirmed: Instant) -> Lease {
        pending.armed = false;
        self.counters.acquired.fetch_add(1, Relaxed);
        let watch = LeaseWatch::new();
        self.lock_held().insert(
            pending.id.clone(),
            Held {
                budget: pending.budget.clone(),
                watch: watch.clone(),
                confirmed,
            },
        );
        Lease::watched(&*pending.id, watch)
    }

    /// The server failed a call: skip it for a while, then apply the fail policy.
    async fn failed(
        &self,
        budget: &str,
        deadline: Option<Instant>,
        error: ServerError,
    ) -> Result<Option<Lease>, StoreError> {
        let outage = self.mark_down(budget, &error);
        self.when_down(budget, deadline, outage).await
    }

    /// The server failed a call (an acquire, or a renewal): new calls skip it for
    /// `retry_after` and go to the fail policy. Logged when it starts, and every
    /// [`DOWN_LOG_EVERY`] while it lasts.
    fn mark_down(&self, budget: &str, error: &ServerError) -> Outage {
        let now = Instant::now();
        let (say, outage) = {
            let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
            let say = match &*down {
                None => true,
                Some(d) => now >= d.logged + DOWN_LOG_EVERY,
            };
            let logged = match &*down {
                Some(d) if !say => d.logged,
                _ => now,
            };
            let since = down.as_ref().map_or(now, |d| d.since);
            let until = now + self.settings.retry_after;
            *down = Some(Down {
                until,
                reason: error.clone(),
                since,
                logged,
            });
            let outage = Outage {
                reason: error.clone(),
                since,
                until,
            };
            (say, outage)
        };
        if say {
            tracing::warn!(
                budget,
                address = self.server.address(),
                error = %error,
                fail = ?self.settings.fail,
                local_after = ?self.fallback.hold(),
                fallbacks = self.counters.fallbacks.load(Relaxed),
                refused = self.counters.unavailable.load(Relaxed),
                "fleet budget: redis cannot be reached; calls go to the fail policy"
            );
        }
        outage
    }

    /// Whether the server was last found down (until a call or a renewal gets an answer).
    fn is_down(&self) -> bool {
        self.down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// The last failure, if calls should skip the server for now.
    fn skipping(&self) -> Option<Outage> {
        let down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        down.as_ref()
            .filter(|d| Instant::now() < d.until)
            .map(|d| Outage {
                reason: d.reason.clone(),
                since: d.since,
                until: d.until,
            })
    }

    /// The server answered: if it had failed, say so, and register the local calls now.
    fn recovered(&self) {
        let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        if down.take().is_some() {
            tracing::info!(
                address = self.server.address(),
                fallbacks = self.counters.fallbacks.load(Relaxed),
                refused = self.counters.unavailable.load(Relaxed),
                "fleet budget: redis is back"
            );
            self.renew_now.notify_one();
        }
    }

    /// Applies the fail policy while the server cannot be asked; `None` when the caller should
    /// ask the server again.
    async fn when_down(
        &self,
        budget: &str,
        deadline: Option<Instant>,
        outage: Outage,
    ) -> Result<Option<Lease>, StoreError> {
        // Known as this store's budget even if Redis never answered (for metrics and health).
        self.register(budget);
        match self.settings.fail {
            Fail::Closed => {
                self.counters.unavailable.fetch_add(1, Relaxed);
                Err(StoreError::unavailable(FleetUnavailable::new(
                    budget,
                    (self.server.address(), self.server.slot_of(budget)),
                    outage.reason,
                )))
            }
            Fail::Local(_) => {
                // The local limit counts this process's fleet calls still running: it is what
                // the process may run while Redis is away, not a grant on top of its leases.
                let Some(lease) = self
                    .fallback
                    .lease(outage.since, outage.until, deadline, || {
                        self.lock_held().len()
                    })
                    .await?
                else {
                    return Ok(None);
                };
                self.counters.fallbacks.fetch_add(1, Relaxed);
                let id: Arc<str> = Arc::from(format!(
                    "{}L{:015x}",
                    &self.server.lease_id()[..crate::scripts::PROCESS_TOKEN_LEN],
                    rand::random::<u64>() >> 4
                ));
                self.locals
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(
                        Arc::from(lease.id()),
                        Local {
                            budget: Arc::from(budget),
                            id,
                            registered: false,
                        },
                    );
                Ok(Some(lease))
            }
        }
    }

    /// A caller was refused by the fleet's rate (its slot came after its deadline).
    pub(crate) fn rate_limited(&self) {
        self.counters.rate_limited.fetch_add(1, Relaxed);
    }

    /// Fleet leases this process holds and still counts as valid.
    fn running_fleet(&self) -> usize {
        self.lock_held()
            .values()
            .filter(|h| !h.watch.is_lost())
            .count()
    }

    pub(crate) fn release(&self, budget: &str, lease: Lease) {
        if self.fallback.take_back(&lease) {
            let local = self
                .locals
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(lease.id());
            if let Some(local) = local.filter(|l| l.registered) {
                self.send_release(&local.budget, &local.id);
            }
            return;
        }
        // A lease already lost is someone else's now, or nobody's: nothing to give back.
        let Some(held) = self.lock_held().remove(lease.id()) else {
            return;
        };
        self.fallback.call_ended();
        if held.watch.is_lost() {
            return;
        }
        self.counters.released.fetch_add(1, Relaxed);
        self.send_release(budget, lease.id());
    }

    /// Sends a release in the background; if it fails, the lease's expiry frees it. Until its
    /// answer comes, a shutdown or the store's drop sends it again (see [`Outstanding`]).
    ///
    /// The release waits in [`Engine::unsent`] until its task runs: an acquire of the same
    /// budget from here that starts before then (a caller going on to its next call) takes it
    /// along in its own script.
    fn send_release(&self, budget: &str, id: &str) {
        let id: Arc<str> = Arc::from(id);
        let budget: Arc<str> = Arc::from(budget);
        self.outstanding.lock().insert(id.clone(), budget.clone());
        self.unsent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(budget.clone())
            .or_default()
            .push(id);
        let unsent = self.unsent.clone();
        let server = self.server.clone();
        let (terms, seen) = (self.terms(), self.seen(&budget));
        let timeout = self.settings.op_timeout;
        let outstanding = self.outstanding.clone();
        let task = async move {
            let ids = unsent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&budget)
                .unwrap_or_default();
            if ids.is_empty() {
                return; // an acquire took them along
            }
            let release = server.release(&budget, ids.clone(), terms, seen);
            let _ = tokio::time::timeout(timeout, release).await;
            let mut outstanding = outstanding.lock();
            for id in &ids {
                outstanding.remove(id);
            }
        };
        if let Ok(runtime) = Handle::try_current() {
            runtime.spawn(task);
        } else if let Some(runtime) = self.runtime.get() {
            runtime.spawn(task);
        }
    }

    /// The releases of `budget` not sent yet, for an acquire to take along.
    fn take_unsent(&self, budget: &str) -> Vec<Arc<str>> {
        self.unsent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(budget)
            .unwrap_or_default()
    }

    /// The error of an acquire after [`Engine::shutdown`].
    fn shut_down(&self, budget: &str) -> StoreError {
        StoreError::unavailable(format!("fleet budget {budget:?}: the store is shut down"))
    }

    /// Refuses acquires from now on (waiters included), gives back every lease this store holds
    /// (their holders see them lost) and every release still on the way, and waits for Redis to
    /// answer, up to one round-trip timeout.
    pub(crate) async fn shutdown(&self) {
        self.closed.store(true, Relaxed);
        self.closing.notify_waiters();
        let mut by_budget: HashMap<Arc<str>, Vec<Arc<str>>> = HashMap::new();
        for (id, held) in self.lock_held().drain() {
            if held.watch.is_lost() {
                continue; // someone else's now, or nobody's
            }
            // Its call may still run, but its permit is the fleet's again.
            held.watch.mark_lost();
            self.counters.released.fetch_add(1, Relaxed);
            by_budget.entry(held.budget).or_default().push(id);
        }
        for local in self
            .locals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values_mut()
        {
            if std::mem::take(&mut local.registered) {
                by_budget
                    .entry(local.budget.clone())
                    .or_default()
                    .push(local.id.clone());
            }
        }
        for (id, budget) in self.outstanding.lock().iter() {
            by_budget
                .entry(budget.clone())
                .or_default()
                .push(id.clone());
        }
        let timeout = self.settings.op_timeout;
        let sends = by_budget.into_iter().map(|(budget, ids)| {
            let release =
                self.server
                    .release(&budget, ids.clone(), self.terms(), self.seen(&budget));
            async move {
                let answer = tokio::time::timeout(timeout, release).await;
                (budget, ids, matches!(answer, Ok(Ok(_))))
            }
        });
        for (budget, ids, answered) in futures::future::join_all(sends).await {
            if answered {
                let mut outstanding = self.outstanding.lock();
                for id in &ids {
                    outstanding.remove(id);
                }
            } else {
                tracing::warn!(
                    budget = %budget,
                    address = self.server.address(),
                    leases = ids.len(),
                    "fleet budget: releases unanswered at shutdown; their leases expire instead"
                );
            }
        }
    }

    fn round_trip(&self, took: Duration) {
        self.counters.round_trips.fetch_add(1, Relaxed);
        self.counters
            .round_trip_micros
            .fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Relaxed);
    }

    fn lock_held(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn snapshot(&self) -> FleetSnapshot {
        let c = &self.counters;
        let round_trips = c.round_trips.load(Relaxed);
        let learning_until = c.learning_until_ms.load(Relaxed);
        let down = self
            .down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|d| shown_error(&d.reason));
        FleetSnapshot {
            held: self.running_fleet(),
            local_held: self.fallback.held(),
            fleet_holders: c.fleet_holders.load(Relaxed),
            acquired: c.acquired.load(Relaxed),
            released: c.released.load(Relaxed),
            reclaimed: c.reclaimed.load(Relaxed),
            lost: c.lost.load(Relaxed),
            fallbacks: c.fallbacks.load(Relaxed),
            unavailable: c.unavailable.load(Relaxed),
            timeouts: c.timeouts.load(Relaxed),
            round_trips,
            mean_round_trip: Duration::from_micros(
                c.round_trip_micros
                    .load(Relaxed)
                    .checked_div(round_trips)
                    .unwrap_or(0),
            ),
            redis_down: down.is_some(),
            redis_error: down,
            epoch: self
                .seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
                .map(|s| s.epoch)
                .max()
                .unwrap_or(0),
            epochs_moved: c.epochs.load(Relaxed),
            readded: c.readded.load(Relaxed),
            locals_registered: c.registered.load(Relaxed),
            rate_limited: c.rate_limited.load(Relaxed),
            learning: learning_until > now_ms(),
        }
    }
}

/// Releases not sent yet: lease ids by budget.
type Unsent = HashMap<Arc<str>, Vec<Arc<str>>>;

/// The wall clock in milliseconds, for the learning deadline a snapshot shows.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Drop for Engine {
    /// The last handle is gone: releases still on the way (their tasks may never run again, as
    /// when the runtime is shutting down with the process) are sent once more, blocking for at
    /// most about two round-trip timeouts, so that a process that ends leaves no lease behind.
    fn drop(&mut self) {
        let mut by_budget: HashMap<Arc<str>, Vec<Arc<str>>> = HashMap::new();
        for (id, budget) in self.outstanding.lock().drain() {
            by_budget.entry(budget).or_default().push(id);
        }
        for (id, held) in self.lock_held().drain() {
            if !held.watch.is_lost() {
                by_budget.entry(held.budget).or_default().push(id);
            }
        }
        for (_, local) in self
            .locals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
        {
            if local.registered {
                by_budget.entry(local.budget).or_default().push(local.id);
            }
        }
        for (budget, ids) in by_budget {
            let seen = self.seen(&budget);
            if let Err(error) = self.server.release_blocking(
                &budget,
                &ids,
                self.terms(),
                seen,
                self.settings.op_timeout,
            ) {
                tracing::warn!(
                    budget = %budget,
                    address = self.server.address(),
                    leases = ids.len(),
                    error = %error,
                    "fleet budget: releases unsent when the store was dropped; their leases expire instead"
                );
            }
        }
    }
}

/// Releases an acquire took along: answered, they are done; otherwise (no answer, an error,
/// the caller gone) they are sent again on their own, which is harmless if the script ran.
struct Carried<'a> {
    engine: &'a Engine,
    budget: &'a str,
    ids: Vec<Arc<str>>,
}

impl Carried<'_> {
    fn answered(mut self) {
        let mut outstanding = self.engine.outstanding.lock();
        for id in self.ids.drain(..) {
            outstanding.remove(&id);
        }
    }
}

impl Drop for Carried<'_> {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            self.engine.send_release(self.budget, &id);
        }
    }
}

/// A lease id asked for whose outcome is not known yet; released in the background if the
/// caller leaves (or fails) before learning it.
struct Pending<'a> {
    engine: &'a Engine,
    budget: Arc<str>,
    id: Arc<str>,
    armed: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.engine.send_release(&self.budget, &self.id);
        }
    }
}

fn min_deadline(deadline: Option<Instant>, other: Instant) -> Instant {
    match deadline {
        Some(d) => d.min(other),
        None => other,
    }
}
