//! The engine behind [`ShareStore`](super::ShareStore): the calls this process admits under its
//! share, and the reporter that tells the server what the process wants and learns its share.
//!
//! Admission is local: a semaphore of `cap` permits, no round trip per call. The reporter runs
//! one report at a time: every third of a lease while it holds a share, every two thirds while
//! it holds nothing below its base, and every two leases while it only waits for a turn (the
//! server keeps such an entry three leases), at once when a caller waits and the demand is above what
//! was last reported, when the calls of a shrunk share have drained (to give the rest back),
//! and when the server tells this process on its grants channel that others are short (unless
//! its own last answer came from a later state of the budget than the word). At a turn's term
//! (the answer said when) the cap goes down to the base without asking, and the report once
//! the calls have drained gives the turn back. Before a report leaves, the cap is lowered to
//! the `holding` it names, and it only grows again from the reply, or from a turn another
//! process's report handed over on the channel, taken when no report is out and newer than
//! every answer heard; so the process never runs more calls than the server reserves for it.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

use inflight::store::{Lease, LeaseWatch, StoreError};
use tokio::runtime::Handle;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use crate::error::FleetUnavailable;
use crate::fallback::Fail;
use crate::fallback::Fallback;
use crate::grants::Handed;
use crate::server::{shown_error, Fence, Seen, Server, ServerError, ShareReport};

use super::ShareSnapshot;

/// Ids of calls under the share start with this (the fallback's have their own).
const SHARE_PREFIX: &str = "share:";

/// How a share store is set up.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) limit: usize,
    pub(crate) lease: Duration,
    pub(crate) fail: Fail,
    pub(crate) op_timeout: Duration,
    pub(crate) retry_after: Duration,
    /// The shortest time between two reports asked for by demand: callers that arrive together
    /// are asked for in one report.
    pub(crate) min_gap: Duration,
}

/// Wakes the reporter; kept apart from the engine so that the reporter does not keep the
/// engine alive while it sleeps.
#[derive(Debug, Default)]
struct Signals {
    kick: Notify,
    closing: Notify,
}

pub(crate) struct ShareEngine {
    server: Arc<dyn Server>,
    settings: Settings,
    /// This store's id in the budget; its first characters name this server's grants channel.
    process: Arc<str>,
    budget: OnceLock<Arc<str>>,
    /// The calls admitted under the share: `cap` permits, with a debt when it shrank below the
    /// calls running.
    permits: Semaphore,
    fallback: Fallback,
    state: Mutex<State>,
    signals: Arc<Signals>,
    /// Wakes waiters when the server cannot be asked: they turn to the fail policy.
    went_down: Notify,
    /// Wakes a shutdown when the last running call ends.
    drained: Notify,
    closed: AtomicBool,
    started: AtomicBool,
    runtime: OnceLock<Handle>,
    next_id: AtomicU64,
    counters: Counters,
}

#[derive(Default)]
struct State {
    /// The most calls admitted at once now.
    cap: usize,
    /// Permits out beyond `cap` (the share shrank while they ran): releases pay it first.
    debt: usize,
    /// Calls running under the share.
    in_use: usize,
    /// Callers waiting for a permit under the share.
    waiting: usize,
    /// The highest demand (running + waiting) since the last report.
    peak: usize,
    /// The wants of the last report.
    reported: usize,
    /// What the server reserves for this process, as its last reply said.
    has: usize,
    target: usize,
    processes: usize,
    seq: u64,
    last_sent: Option<Instant>,
    /// Until when the server holds this process's entry at least, on this clock: the entry's
    /// life (a lease, or three while it reserves nothing and only waits) after the last applied
    /// report left. A turn handed over keeps it (the server keeps the entry's expiry).
    holds_until: Option<Instant>,
    down: Option<Down>,
    /// When the fallback state was last logged.
    down_logged: Option<Instant>,
    watches: HashMap<u64, LeaseWatch>,
    /// What this process has seen of the budget's state.
    seen: Seen,
    /// The budget's state as of the last applied answer (or turn handed over): a word told
    /// before it is covered.
    answered: Seen,
    /// Reports sent and not answered yet: a turn handed over meanwhile waits for their answers.
    in_flight: usize,
    /// A turn handed over on the channel while a report was out.
    handed: Option<Handed>,
    /// When the share's last move was a turn handed over on the channel (not an answer): its
    /// renewal waits for the report that gives it back (see [`ShareEngine::renew_due`]).
    turn_handed: Option<Instant>,
    /// Until when the budget learns (its state was lost), as the last reply said: nothing new
    /// is granted meanwhile. Read against the clock, so a budget idle since says it no more
    /// once the time is past.
    learning_until: Option<Instant>,
    /// When to report again to give back a turn (others wait), as the last reply said.
    recheck_at: Option<Instant>,
}

impl State {
    /// Whether the budget learns now, as the last reply said.
    fn learns(&self) -> bool {
        self.learning_until.is_some_and(|t| Instant::now() < t)
    }
}

/// The server failed a report: callers beyond the share go to the fail policy until `until`.
struct Down {
    until: Instant,
    reason: ServerError,
    /// The first failure of this outage: the fallback's hold counts from it.
    since: Instant,
}

#[derive(Default)]
struct Counters {
    acquired: AtomicU64,
    released: AtomicU64,
    lost: AtomicU64,
    fallbacks: AtomicU64,
    unavailable: AtomicU64,
    timeouts: AtomicU64,
    reports: AtomicU64,
    round_trip_micros: AtomicU64,
    epochs: AtomicU64,
}

impl fmt::Debug for ShareEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShareStore")
            .field("address", &self.server.address())
            .field("limit", &self.settings.limit)
            .field("lease", &self.settings.lease)
            .field("fail", &self.settings.fail)
            .finish_non_exhaustive()
    }
}

impl ShareEngine {
    pub(crate) fn new(server: Arc<dyn Server>, settings: Settings) -> ShareEngine {
        let fallback = Fallback::new(settings.fail, settings.lease);
        ShareEngine {
            process: server.lease_id(),
            server,
            settings,
            budget: OnceLock::new(),
            permits: Semaphore::new(0),
            fallback,
            state: Mutex::default(),
            signals: Arc::default(),
            went_down: Notify::new(),
            drained: Notify::new(),
            closed: AtomicBool::new(false),
            started: AtomicBool::new(false),
            runtime: OnceLock::new(),
            next_id: AtomicU64::new(0),
            counters: Counters::default(),
        }
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The budget this store serves, once a call has named it.
    pub(crate) fn budget_name(&self) -> Option<String> {
        self.budget.get().map(|b| b.to_string())
    }

    pub(crate) fn address(&self) -> &str {
        self.server.address()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
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

    /// One try: a permit of the share, or the fail policy's answer. `None` when a caller
    /// waiting on the fallback should try again (Redis may be back).
    async fn try_acquire(
        self: &Arc<Self>,
        budget: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>, StoreError> {
        if self.closed.load(Relaxed) {
            return Err(self.shut_down(budget));
        }
        let name = self.budget.get_or_init(|| Arc::from(budget));
        if **name != *budget {
            return Err(StoreError::unavailable(format!(
                "fleet budget {budget:?}: this share store serves budget {name:?}; make one store per budget"
            )));
        }
        self.start();
        let went_down = self.went_down.notified();
        tokio::pin!(went_down);
        went_down.as_mut().enable();
        let down = {
            let mut state = self.lock();
            self.expire_if_stale(&mut state, Instant::now());
            state.waiting += 1;
            state.peak = state.peak.max(state.in_use + state.waiting);
            if let Ok(permit) = self.permits.try_acquire() {
                permit.forget();
                return Ok(Some(self.admitted(&mut state)));
            }
            let mut ask = state.in_use + state.waiting > state.reported;
            let mut down = None;
            if let Some(d) = &state.down {
                if Instant::now() < d.until {
                    down = Some((d.since, d.until, d.reason.clone()));
                    state.waiting -= 1;
                } else {
                    // Time to ask the server again: this caller waits for the answer.
                    ask = true;
                }
            }
            if ask && down.is_none() {
                self.signals.kick.notify_one();
            }
            down
        };
        if let Some((since, until, reason)) = down {
            return self.when_down(budget, deadline, since, until, reason).await;
        }
        let mut waiting = Waiting {
            engine: self,
            armed: true,
        };
        let closing = self.signals.closing.notified();
        tokio::pin!(closing);
        closing.as_mut().enable();
        if self.closed.load(Relaxed) {
            return Err(self.shut_down(budget));
        }
        let sleep = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            permit = self.permits.acquire() => {
                let Ok(permit) = permit else {
                    return Err(self.shut_down(budget));
                };
                permit.forget();
                waiting.armed = false;
                let mut state = self.lock();
                Ok(Some(self.admitted(&mut state)))
            }
            () = went_down => {
                drop(waiting);
                let down = self.lock().down.as_ref().map(|d| (d.since, d.until, d.reason.clone()));
                let Some((since, until, reason)) = down else {
                    return Ok(None);
                };
                self.when_down(budget, deadline, since, until, reason).await
            }
            () = closing => Err(self.shut_down(budget)),
            () = sleep => {
                self.counters.timeouts.fetch_add(1, Relaxed);
                Err(StoreError::Timeout)
            }
        }
    }

    /// A caller waiting in `state` took a permit of the share.
    fn admitted(&self, state: &mut State) -> Lease {
        state.waiting -= 1;
        state.in_use += 1;
        self.counters.acquired.fetch_add(1, Relaxed);
        let n = self.next_id.fetch_add(1, Relaxed);
        let watch = LeaseWatch::new();
        state.watches.insert(n, watch.clone());
        Lease::watched(format!("{SHARE_PREFIX}{n}"), watch)
    }

    pub(crate) fn release(&self, lease: Lease) {
        if self.fallback.take_back(&lease) {
            // The share's cap counts the local calls still running: one fewer now.
            self.signals.kick.notify_one();
            return;
        }
        let Some(n) = lease
            .id()
            .strip_prefix(SHARE_PREFIX)
            .and_then(|n| n.parse::<u64>().ok())
        else {
            return;
        };
        let mut state = self.lock();
        if state.watches.remove(&n).is_none() {
            return; // given back twice, or not ours
        }
        self.counters.released.fetch_add(1, Relaxed);
        state.in_use -= 1;
        self.fallback.call_ended();
        if state.in_use == 0 {
            self.drained.notify_waiters();
        }
        if state.debt > 0 {
            state.debt -= 1;
        } else {
            self.permits.add_permits(1);
        }
        // The share shrank and its calls have drained to it: give the rest back now, so that
        // the processes short of their share get it.
        if state.has > state.cap && self.held_out(&state) <= state.cap {
            self.signals.kick.notify_one();
        }
    }

    /// Permits out under the share: running calls, and permits a waiter took but has not
    /// counted yet.
    fn held_out(&self, state: &State) -> usize {
        (state.cap + state.debt).saturating_sub(self.permits.available_permits())
    }

    /// Sets the most calls admitted at once; calls running above it are paid for by releases.
    fn set_cap(&self, state: &mut State, cap: usize) {
        let cap = cap.min(Semaphore::MAX_PERMITS);
        if cap > state.cap {
            let grow = cap - state.cap;
            let paid = grow.min(state.debt);
            state.debt -= paid;
            self.permits.add_permits(grow - paid);
        } else if cap < state.cap {
            let shrink = state.cap - cap;
            let forgotten = self.permits.forget_permits(shrink);
            state.debt += shrink - forgotten;
        }
        state.cap = cap;
    }

    /// The share ends one lease after the last applied report left (the server's expiry is
    /// no earlier): past that, nothing more is admitted under it and its running calls are told
    /// their leases are lost.
    fn expire_if_stale(&self, state: &mut State, now: Instant) {
        let stale = state.holds_until.is_some_and(|until| now >= until);
        if !stale {
            return;
        }
        state.holds_until = None;
        state.has = 0;
        state.target = 0;
        self.set_cap(state, 0);
        let lost = state.watches.len();
        for watch in state.watches.values() {
            watch.mark_lost();
        }
        if lost > 0 {
            self.counters.lost.fetch_add(lost as u64, Relaxed);
            tracing::warn!(
                budget = self.budget.get().map(|b| &**b),
                calls = lost,
                "fleet budget: share lost: not renewed within its lease"
            );
        }
    }

    /// Applies the fail policy while the server cannot be asked (since `since`, asked again at
    /// `until`); `None` when the caller should try again.
    async fn when_down(
        &self,
        budget: &str,
        deadline: Option<Instant>,
        since: Instant,
        until: Instant,
        reason: ServerError,
    ) -> Result<Option<Lease>, StoreError> {
        match self.settings.fail {
            Fail::Closed => {
                self.counters.unavailable.fetch_add(1, Relaxed);
                Err(StoreError::unavailable(FleetUnavailable::new(
                    budget,
                    (self.server.address(), self.server.slot_of(budget)),
                    reason,
                )))
            }
            Fail::Local(_) => {
                // The local limit counts the calls still running under the share: it is what
                // the process may run while Redis is away, not a grant on top of its share.
                let lease = self
                    .fallback
                    .lease(since, until, deadline, || self.lock().in_use)
                    .await?;
                if lease.is_some() {
                    self.counters.fallbacks.fetch_add(1, Relaxed);
                    // The reporter may sleep as if idle: once Redis is back, this call is reported.
                    self.signals.kick.notify_one();
                }
                Ok(lease)
            }
        }
    }

    fn shut_down(&self, budget: &str) -> StoreError {
        StoreError::unavailable(format!("fleet budget {budget:?}: the store is shut down"))
    }

    /// Starts the reporter once, on the runtime of the first acquire.
    fn start(self: &Arc<Self>) {
        if self.started.load(Relaxed) || self.started.swap(true, Relaxed) {
            return;
        }
        let Ok(runtime) = Handle::try_current() else {
            self.started.store(false, Relaxed);
            return;
        };
        let _ = self.runtime.set(runtime.clone());
        runtime.spawn(reporter(Arc::downgrade(self), self.signals.clone()));
    }

    /// Makes this store serve `budget` before any call, so that its health and metrics are
    /// published from the start. A store that serves another budget keeps it (its calls for
    /// `budget` are refused, naming both).
    pub(crate) fn register(&self, budget: &str) {
        let _ = self.budget.get_or_init(|| Arc::from(budget));
    }

    /// Asks Redis once, with a report of what this process runs and wants (nothing, before
    /// any call): a failure marks the budget down as a call's would, and the reporter asks
    /// again every third of a lease until it answers. Nothing for a store that serves no
    /// budget yet.
    pub(crate) async fn check(self: &Arc<Self>) {
        if self.budget.get().is_none() {
            return;
        }
        self.start();
        self.report_once(false).await;
    }

    /// What the reporter waits for before its next report: the renewal, the share's end, or
    /// the end of a pause after a failure.
    fn next_wake(&self, state: &State) -> Instant {
        let now = Instant::now();
        // Nothing to renew: the next report is asked for by a caller. While Redis is down,
        // it is asked again every third of a lease all the same, to see it back.
        let renew = if self.idle(state) && state.down.is_none() {
            now + Duration::from_secs(3600)
        } else {
            self.renew_due(state)
        };
        let mut wake = renew;
        if let Some(at) = state.recheck_at {
            wake = wake.min(at);
        }
        if let Some(down) = &state.down {
            wake = wake.max(down.until);
        }
        // A pause after a failure does not put off the share's end: its calls are told then.
        if let Some(until) = state.holds_until {
            wake = wake.min(until);
        }
        wake
    }

    /// A turn handed over on the grants channel by another process's report: the server now
    /// reserves `handed.holds` for this process. Taken when no report is out and it is newer
    /// than every answer heard (a report that ran after it answered for it); while a report is
    /// out, kept for its answer, and dropped if that report fails (the server keeps the turn
    /// for the next report if the failed one had not seen it, and its answer tells).
    pub(crate) fn hand_over(&self, handed: Handed) {
        let mut state = self.lock();
        if state.in_flight > 0 {
            if state.handed.is_none_or(|h| h.at < handed.at) {
                state.handed = Some(handed);
            }
            return;
        }
        self.take_turn(&mut state, handed);
    }

    fn take_turn(&self, state: &mut State, handed: Handed) {
        // Newer than every answer this process heard, applied or not: one from later came from
        // a report of its own that ran after the turn was handed, and said what it ran without
        // the turn (the server then kept the turn only if the report had not seen it).
        let newer = handed.at > (state.seen.epoch, state.seen.version);
        self.expire_if_stale(state, Instant::now());
        if !newer
            || handed.at.0 != state.seen.epoch
            || self.closed.load(Relaxed)
            || state.learns()
            || state.holds_until.is_none()
        {
            return;
        }
        state.answered = Seen {
            epoch: handed.at.0,
            version: handed.at.1,
        };
        // Seen: the next report says it knows of the turn (the server keeps a turn for a
        // report sent without knowing of it).
        state.seen.update(Fence {
            epoch: handed.at.0,
            version: handed.at.1,
            learning: Duration::ZERO,
        });
        state.has = handed.holds;
        state.turn_handed = Some(Instant::now());
        state.recheck_at = (!handed.term.is_zero()).then(|| Instant::now() + handed.term);
        // The server reserves for the calls the fallback admitted too, as in an answer.
        self.set_cap(state, handed.holds.saturating_sub(self.fallback.held()));
    }

    /// When the next renewal is due. A process that holds any of a share (or while Redis is
    /// down, to see it back) renews every third of a lease after its last report left: its own
    /// clock ends the share one lease after that. A turn handed over on the channel renews
    /// two thirds of a lease after it was taken, or a third of a lease before its entry's end
    /// on this clock if that comes first, so that the report giving the turn back at its term's
    /// end is its renewal (and a holder reports within a lease of taking it, as the budget's
    /// learning after a loss of state needs). A process that holds nothing and only waits
    /// renews a lease before its entry's end (the server keeps such an entry three leases), and
    /// two thirds of a lease after its last report at the soonest.
    fn renew_due(&self, state: &State) -> Instant {
        let Some(sent) = state.last_sent else {
            return Instant::now();
        };
        let lease = self.settings.lease;
        let waits = self.waits_only(state);
        match (state.holds_until, state.turn_handed) {
            (Some(until), Some(taken)) => (until - lease / 3).min(taken + lease * 2 / 3),
            (Some(until), None) if waits => (until - lease).max(sent + lease * 2 / 3),
            _ if waits => sent + lease * 2 / 3,
            _ => sent + lease / 3,
        }
    }

    /// Whether this process holds nothing and only waits (Redis answering).
    fn waits_only(&self, state: &State) -> bool {
        state.has == 0
            && state.cap == 0
            && state.debt == 0
            && state.in_use == 0
            && state.down.is_none()
            && self.fallback.held() == 0
    }

    /// Whether a report is worth sending now: a renewal is skipped while this process holds
    /// nothing, wants nothing and runs no call its fallback admitted while Redis was away (its
    /// entry may lapse; it asks again when a caller comes). The fallback's count is an atomic
    /// read, safe under the state's lock.
    fn idle(&self, state: &State) -> bool {
        state.has == 0
            && state.cap == 0
            && state.in_use + state.waiting == 0
            && self.fallback.held() == 0
    }

    /// One report: tells the server what this process may run and wants, and takes the share
    /// it answers.
    async fn report_once(&self, leaving: bool) {
        let Some(budget) = self.budget.get().cloned() else {
            return;
        };
        // Calls the fallback admitted while Redis was away count too, until they end (read
        // before the state's lock: the fallback takes its own lock first).
        let local = self.fallback.held();
        let sent = Instant::now();
        let report = {
            let mut state = self.lock();
            if self.closed.load(Relaxed) && !leaving {
                return; // shut down: its give-back is the last report
            }
            let demand = state.in_use + state.waiting;
            let peak = state.peak.max(demand);
            let holding = if leaving {
                // Calls still running keep their permits: the server holds them until they
                // expire with this process's entry.
                self.held_out(&state) + local
            } else {
                (self.held_out(&state) + local).max(state.cap.min(peak))
            };
            // Until the reply, no more than `holding` run: the server reserves that much. And
            // until then, the entry is only known to last a lease from now: applied, this
            // report may have made it a holder's (one lease) where it was a waiter's (three).
            state.holds_until = state
                .holds_until
                .map(|until| until.min(sent + self.settings.lease));
            let cap = state.cap.min(holding);
            self.set_cap(&mut state, cap);
            state.in_flight += 1;
            state.seq += 1;
            state.reported = peak;
            state.peak = demand;
            state.last_sent = Some(sent);
            ShareReport {
                process: self.process.clone(),
                wants: if leaving { 0 } else { peak },
                holding,
                seq: state.seq,
                limit: self.settings.limit,
                lease: self.settings.lease,
                leaving,
                seen: state.seen,
            }
        };
        let seq = report.seq;
        let answer = tokio::time::timeout(
            self.settings.op_timeout.min(self.settings.lease / 3),
            self.server.shares(&budget, report),
        )
        .await;
        let answered = Instant::now();
        let error: ServerError = match answer {
            Ok(Ok(reply)) => {
                self.counters.reports.fetch_add(1, Relaxed);
                self.counters.round_trip_micros.fetch_add(
                    u64::try_from((answered - sent).as_micros()).unwrap_or(u64::MAX),
                    Relaxed,
                );
                let mut state = self.lock();
                state.in_flight -= 1;
                if state.down.take().is_some() {
                    state.down_logged = None;
                    tracing::info!(
                        address = self.server.address(),
                        fallbacks = self.counters.fallbacks.load(Relaxed),
                        refused = self.counters.unavailable.load(Relaxed),
                        "fleet budget: redis is back"
                    );
                }
                state.learning_until =
                    (!reply.fence.learning.is_zero()).then(|| answered + reply.fence.learning);
                if state.seen.update(reply.fence) {
                    self.counters.epochs.fetch_add(1, Relaxed);
                    tracing::warn!(
                        budget = %budget,
                        address = self.server.address(),
                        epoch = reply.fence.epoch,
                        "fleet budget: redis lost the budget's state (a restart, a flush or a \
                         failover); this process's running calls are registered again, and no \
                         share grows while the fleet does"
                    );
                    // This report counted what the process runs; the next one (asked for now)
                    // takes its share in the new epoch.
                    self.signals.kick.notify_one();
                }
                if reply.applied && state.seq == seq && !self.closed.load(Relaxed) {
                    state.has = reply.has;
                    state.target = reply.target;
                    state.processes = reply.processes;
                    state.holds_until = Some(sent + reply.life);
                    state.answered = Seen {
                        epoch: reply.fence.epoch,
                        version: reply.fence.version,
                    };
                    state.turn_handed = None;
                    state.recheck_at = reply.recheck.map(|d| answered + d);
                    // The server reserves for the calls admitted locally too (they were in the
                    // report's holding): the share admits that many fewer while they run. Those
                    // that ended since the report left stay counted until the next report (their
                    // end asked for one): the server may have kept their permits only because
                    // they ran (while the budget learns, past the limit), not because any was
                    // free for a new call.
                    let local = local.max(self.fallback.held());
                    self.set_cap(&mut state, reply.cap.saturating_sub(local));
                }
                if state.in_flight == 0 {
                    if let Some(handed) = state.handed.take() {
                        self.take_turn(&mut state, handed);
                    }
                }
                return;
            }
            Ok(Err(error)) => error,
            Err(_) => Arc::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {:?}", self.settings.op_timeout),
            )),
        };
        let say = {
            let mut state = self.lock();
            state.in_flight -= 1;
            // Whether this report ran before or after a turn handed over meanwhile is not
            // known: the turn is left to the server (the next report says what runs).
            state.handed = None;
            let since = state.down.as_ref().map_or(answered, |d| d.since);
            state.down = Some(Down {
                until: answered + self.settings.retry_after,
                reason: error.clone(),
                since,
            });
            let say = state
                .down_logged
                .is_none_or(|at| answered >= at + crate::engine::DOWN_LOG_EVERY);
            if say {
                state.down_logged = Some(answered);
            }
            say
        };
        if say {
            tracing::warn!(
                budget = %budget,
                address = self.server.address(),
                error = %error,
                fail = ?self.settings.fail,
                local_after = ?self.fallback.hold(),
                fallbacks = self.counters.fallbacks.load(Relaxed),
                refused = self.counters.unavailable.load(Relaxed),
                "fleet budget: redis cannot be reached; calls beyond the share go to the fail policy"
            );
        }
        self.went_down.notify_waiters();
    }

    /// Refuses acquires from now on, waits up to one round-trip timeout for the running calls
    /// to end, and gives the share back, waiting up to one more for the answer. The permits of
    /// calls still running then stay reserved on the server until one lease after this last
    /// report (their holders see their leases lost): never handed to others while they run.
    pub(crate) async fn shutdown(&self) {
        self.closed.store(true, Relaxed);
        self.signals.closing.notify_waiters();
        self.permits.close();
        {
            let mut state = self.lock();
            self.set_cap(&mut state, 0);
        }
        let deadline = Instant::now() + self.settings.op_timeout;
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.lock().in_use == 0 {
                break;
            }
            tokio::select! {
                () = drained => {}
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        {
            let state = self.lock();
            for watch in state.watches.values() {
                watch.mark_lost();
            }
        }
        let holds = {
            let state = self.lock();
            state.has > 0 || state.holds_until.is_some()
        };
        if holds {
            self.report_once(true).await;
        }
        let mut state = self.lock();
        state.has = 0;
        state.holds_until = None;
    }

    pub(crate) fn snapshot(&self) -> ShareSnapshot {
        let state = self.lock();
        let c = &self.counters;
        let reports = c.reports.load(Relaxed);
        ShareSnapshot {
            share: state.cap,
            reserved: state.has,
            target: state.target,
            processes: state.processes,
            running: state.in_use,
            waiting: state.waiting,
            acquired: c.acquired.load(Relaxed),
            released: c.released.load(Relaxed),
            lost: c.lost.load(Relaxed),
            fallbacks: c.fallbacks.load(Relaxed),
            unavailable: c.unavailable.load(Relaxed),
            timeouts: c.timeouts.load(Relaxed),
            reports,
            mean_round_trip: Duration::from_micros(
                c.round_trip_micros
                    .load(Relaxed)
                    .checked_div(reports)
                    .unwrap_or(0),
            ),
            redis_down: state.down.is_some(),
            redis_error: state.down.as_ref().map(|d| shown_error(&d.reason)),
            epoch: state.seen.epoch,
            epochs_moved: c.epochs.load(Relaxed),
            learning: state.learns(),
            local_held: self.fallback.held(),
        }
    }
}

impl Drop for ShareEngine {
    /// The last handle is gone: the reporter stops, and the share is given back in the
    /// background if a runtime is at hand (otherwise it expires one lease after its last
    /// report).
    fn drop(&mut self) {
        self.signals.closing.notify_waiters();
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if self.closed.load(Relaxed) || (state.has == 0 && state.holds_until.is_none()) {
            return;
        }
        let Some(budget) = self.budget.get() else {
            return;
        };
        let leave = self.server.shares(
            budget,
            ShareReport {
                process: self.process.clone(),
                wants: 0,
                holding: 0,
                seq: state.seq + 1,
                limit: self.settings.limit,
                lease: self.settings.lease,
                leaving: true,
                seen: state.seen,
            },
        );
        let timeout = self.settings.op_timeout;
        let task = async move {
            let _ = tokio::time::timeout(timeout, leave).await;
        };
        if let Ok(runtime) = Handle::try_current() {
            runtime.spawn(task);
        } else if let Some(runtime) = self.runtime.get() {
            runtime.spawn(task);
        }
    }
}

/// A caller counted as waiting; uncounted when it leaves without a permit.
struct Waiting<'a> {
    engine: &'a ShareEngine,
    armed: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.engine.lock().waiting -= 1;
        }
    }
}

/// Sends this process's reports until the store is dropped or shut down.
async fn reporter(engine: Weak<ShareEngine>, signals: Arc<Signals>) {
    let (grants, process) = match engine.upgrade() {
        Some(e) => (e.server.grants(), e.process.clone()),
        None => return,
    };
    // The server tells this process on its grants channel, by its id, when others are short
    // of their share or permits were freed for it.
    let told = grants.register(&process);
    loop {
        let (wake, gap_end) = {
            let Some(e) = engine.upgrade() else {
                return;
            };
            if e.closed.load(Relaxed) {
                return;
            }
            let state = e.lock();
            let gap_end = state
                .last_sent
                .map(|at| at + e.settings.min_gap)
                .filter(|_| state.down.is_none());
            (e.next_wake(&state), gap_end)
        };
        let closing = signals.closing.notified();
        tokio::pin!(closing);
        closing.as_mut().enable();
        let (asked, by_word) = tokio::select! {
            () = tokio::time::sleep_until(wake) => (false, false),
            () = signals.kick.notified() => (true, false),
            () = told.changed() => (true, true),
            () = closing => return,
        };
        if by_word {
            if let Some(handed) = told.take_handed() {
                let Some(e) = engine.upgrade() else {
                    return;
                };
                e.hand_over(handed);
            }
        }
        if asked {
            // Callers arriving together are asked for in one report.
            if let Some(at) = gap_end {
                tokio::time::sleep_until(at).await;
            }
        }
        let Some(e) = engine.upgrade() else {
            return;
        };
        let send = {
            let mut state = e.lock();
            let now = Instant::now();
            e.expire_if_stale(&mut state, now);
            let paused = state.down.as_ref().is_some_and(|d| now < d.until);
            let mut renewal_due = now >= e.renew_due(&state);
            if state.recheck_at.is_some_and(|at| now >= at) {
                // The turn's term is over, and others waited at the last answer: what is
                // beyond the base goes back as its calls end, without asking first (the report
                // that gives it back asks for a turn again, and takes one at once if nobody
                // waits any more; the server does not tell a holder that knows its term).
                state.recheck_at = None;
                let cap = state.cap.min(state.target);
                e.set_cap(&mut state, cap);
                renewal_due |= state.has > state.cap && e.held_out(&state) <= state.cap;
            }
            let probe = state.down.is_some();
            // A word told at a state of the budget this process's last answer came after (its
            // own report ran later, and its answer took the change in) asks for nothing.
            let covered = by_word
                && !told.take_gap()
                && told.told_at().is_some_and(|(epoch, version)| {
                    (epoch, version) <= (state.answered.epoch, state.answered.version)
                });
            let asked = asked && !covered;
            !paused
                && !e.closed.load(Relaxed)
                && (asked || (renewal_due && (probe || !e.idle(&state))))
        };
        if send {
            // A kick that came before this report is answered by it (the report says the
            // demand as it is when it leaves): forgotten, so that it asks for no second one.
            {
                let answered = signals.kick.notified();
                tokio::pin!(answered);
                answered.as_mut().enable();
            }
            e.report_once(false).await;
        }
    }
}

#[cfg(test)]
mod tests;
