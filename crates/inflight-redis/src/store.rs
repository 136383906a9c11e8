//! [`RedisStore`]: a budget's permits shared through Redis, and [`Fail`], what happens while
//! Redis cannot be reached.

use std::sync::Arc;
use std::time::Duration;

use inflight::store::{Lease, Store, StoreError, StoreFuture};
use inflight::Rate;
use tokio::time::Instant;

pub(crate) use crate::engine::Engine;
use crate::fallback::Fail;
use crate::rate::RateGate;
use crate::snapshot::FleetSnapshot;
use crate::FleetError;

/// A [`Store`] whose permits live in Redis, shared by every process that uses a budget of the
/// same name on the same Redis: one limit for a dependency across a whole fleet.
///
/// Made by [`RedisFleet::store`](crate::RedisFleet::store) and given to a budget with
/// [`BudgetBuilder::store`](inflight::BudgetBuilder::store). The budget takes its local permit
/// first, so a process never asks Redis for more than its own share; then a fleet lease.
///
/// # Guarantees
///
/// - **Limit.** At most `limit` leases of a budget are held at once across the fleet, counted
///   on the server's clock. A holder that stops renewing (killed, stalled) loses its lease one
///   lease time after its last renewal, and the next acquirer reclaims it.
/// - **Lost leases are told.** A holder whose lease ended early learns it through
///   [`Lease::is_lost`] (see [`Permit::lease`](inflight::Permit::lease)), and giving it back
///   never removes anyone else's lease.
/// - **Deadlines.** An acquire returns by the budget's permit deadline, and no later than one
///   round-trip timeout when Redis does not answer.
/// - **Cost.** One script to acquire when a permit is free, and one to release, sent in the
///   background; a release not sent yet when the process's next acquire of the budget starts
///   (a caller going on to its next call) goes in that acquire's script, so calls that follow
///   each other cost about one script each. Renewal costs one round trip per budget per third of
///   a lease, whatever the number of calls; a queued waiter asks once per third of a lease. The
///   scripts and the grants share one connection per process (per node on a cluster).
/// - **Nothing left behind.** A release is sent in the background when a permit drops; a
///   process that ends right after its last call would end before it went out, and its lease
///   would hold a permit of the next run for up to a lease. [`RedisStore::shutdown`] (or
///   [`RedisFleet::shutdown`](crate::RedisFleet::shutdown)) waits until Redis has every lease
///   back; and when the last handle of a store is dropped with releases still unanswered, it
///   sends them once more on a connection of its own, blocking the dropping thread for at most
///   about two round-trip timeouts.
///
/// # Order
///
/// Waiters are served in the order they reached Redis, across every process: a caller that
/// finds every permit held joins a queue in Redis (a sorted set by arrival), and no permit is
/// granted to a newcomer while anyone waits. A release hands its permit to the head of the queue
/// in the same script and publishes the grant on the head's process channel
/// (`inflight:grants:<process>`, one subscription per [`RedisFleet`](crate::RedisFleet)), so the
/// waiter starts about one round trip after the release left its holder; the tests measure it
/// against a plain `PING`. A process with one waiter is not overtaken by one with sixty: each
/// process brings at most its local `max_concurrent` to the queue, in turn.
///
/// Queue entries have a lease too: a waiter asks again every third of a lease (or when the
/// earliest lease expires), and one that stopped asking, killed in the queue, is skipped one
/// lease after its last ask. Such a waiter that reached the head before its entry lapsed is
/// handed the permit and holds it, like a killed holder, for one lease. A waiter that gives up
/// (its deadline, or its future dropped) leaves the queue with its release. A grant the channel
/// dropped (a reconnect) is found by the next ask; when the channel is heard again, every
/// waiter of the process asks at once, which also queues them again after a Redis restart.
///
/// # Rate
///
/// With [`RedisStore::rate`], the store also keeps the budget's rate limit for the whole fleet:
/// see there.
#[derive(Debug, Clone)]
pub struct RedisStore {
    engine: Arc<Engine>,
    rate: Option<Arc<RateGate>>,
}

impl RedisStore {
    pub(crate) fn from_engine(engine: Engine) -> RedisStore {
        RedisStore {
            engine: Arc::new(engine),
            rate: None,
        }
    }

    /// The same store, also keeping a rate limit for the whole fleet: calls start at most at
    /// `rate` across every process that uses a budget of this name on this Redis, with up to
    /// `burst` back to back after a quiet spell (as a budget's own
    /// [`rate`](inflight::BudgetConfig::rate) and [`burst`](inflight::BudgetConfig::burst) do
    /// in one process). In a budgets file: `rate` and `burst` on a budget with
    /// `scope = "fleet"` (see [`load`](crate::load)).
    ///
    /// - **One gate.** The rate is one GCRA in Redis (`inflight:{name}:rate`), on the server's
    ///   clock. The budget passes no rate gate of its own: a `rate` set on the budget too is not
    ///   applied per process (the store's is the one that counts; give both the same value, or
    ///   leave the budget's out).
    /// - **Order and deadlines.** Each caller takes its fleet lease, then reserves the next slot
    ///   in one round trip; slots go in the order callers reach Redis. The caller sleeps until
    ///   its slot and starts then, holding its lease meanwhile. A caller whose slot would come
    ///   after its `permit_timeout` reserves nothing and is refused at once with
    ///   [`AcquireError::RateLimited`](inflight::AcquireError::RateLimited) (counted as
    ///   `rate_limited` in the budget's snapshot); its lease goes back. Over any stretch of time
    ///   `t`, at most `burst + t x rate` slots start across the fleet. A caller that gives up
    ///   while it sleeps leaves its slot used.
    /// - **While Redis cannot be reached**, [`Fail::Closed`] refuses (with
    ///   [`AcquireError::Unavailable`](inflight::AcquireError::Unavailable)), and
    ///   [`Fail::Local`] applies the same rate in each process on its own: up to N times the
    ///   rate across N replicas, until Redis answers again.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use inflight::{Budget, Rate};
    /// use inflight_redis::{Fail, RedisFleet};
    ///
    /// let fleet = RedisFleet::new("redis://127.0.0.1:6379").unwrap();
    /// // The provider's quota, 10 calls a second for every replica together, 5 at once after a
    /// // pause; and at most 6 calls in flight across the fleet.
    /// let llm = Budget::builder("llm")
    ///     .max_concurrent(6)
    ///     .permit_timeout(Duration::from_secs(2))
    ///     .store(Arc::new(fleet.store(6, Fail::Closed).rate(Rate::per_second(10.0), 5).unwrap()))
    ///     .build()
    ///     .unwrap();
    /// # drop(llm);
    /// ```
    ///
    /// # Errors
    ///
    /// [`FleetError::Invalid`] for a rate that is not positive and finite or is above a million
    /// a second, or a burst of 0.
    pub fn rate(mut self, rate: Rate, burst: u32) -> Result<RedisStore, FleetError> {
        self.rate = Some(Arc::new(RateGate::new(rate, burst)?));
        Ok(self)
    }

    /// The fleet's rate limit and its burst, if the store keeps one (see [`RedisStore::rate`]).
    pub fn rate_limit(&self) -> Option<(Rate, u32)> {
        self.rate.as_ref().map(|r| r.rate_limit())
    }

    /// The permits shared by the fleet.
    pub fn limit(&self) -> usize {
        self.engine.settings().limit
    }

    /// How long a lease lasts without renewal.
    pub fn lease(&self) -> Duration {
        self.engine.settings().lease
    }

    /// What happens while Redis cannot be reached.
    pub fn fail(&self) -> Fail {
        self.engine.settings().fail
    }

    /// The Redis address.
    pub fn address(&self) -> &str {
        self.engine.address()
    }

    /// The store's counters now.
    pub fn snapshot(&self) -> FleetSnapshot {
        self.engine.snapshot()
    }

    /// Gives back every lease this store holds before the process ends, and refuses acquires
    /// from now on; see [`RedisFleet::shutdown`](crate::RedisFleet::shutdown), which does this
    /// for every store of a fleet.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the store is shut down from the first poll on, and releases not answered
    /// yet are sent again when its last handle is dropped.
    pub async fn shutdown(&self) {
        self.engine.shutdown().await;
    }

    /// Makes `budget` known to the store before any call (see [`RedisFleet::check`]).
    ///
    /// [`RedisFleet::check`]: crate::RedisFleet::check
    pub(crate) fn register(&self, budget: &str) {
        self.engine.register(budget);
    }

    /// The store's engine.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// A handle on a store's engine, without the fleet rate its budget may keep.
    pub(crate) fn from_arc(engine: Arc<Engine>) -> RedisStore {
        RedisStore { engine, rate: None }
    }

    pub(crate) fn downgrade(&self) -> std::sync::Weak<Engine> {
        Arc::downgrade(&self.engine)
    }
}

impl Store for RedisStore {
    fn acquire<'a>(
        &'a self,
        budget: &'a str,
        deadline: Option<Instant>,
    ) -> StoreFuture<'a, Result<Lease, StoreError>> {
        let Some(rate) = &self.rate else {
            return Box::pin(self.engine.acquire(budget, deadline));
        };
        Box::pin(async move {
            let lease = self.engine.acquire(budget, deadline).await?;
            // Given back if the caller is refused its slot, or leaves while it waits for it.
            let mut held = HeldLease {
                engine: &self.engine,
                budget,
                lease: Some(lease),
            };
            let fleet_lease = held.lease.as_ref().is_some_and(|l| !Engine::is_fallback(l));
            rate.take(&self.engine, budget, deadline, fleet_lease)
                .await?;
            Ok(held.lease.take().expect("taken once"))
        })
    }

    fn release(&self, budget: &str, lease: Lease) {
        self.engine.release(budget, lease);
    }

    fn keeps_rate(&self) -> bool {
        self.rate.is_some()
    }

    fn rate_limited_for(
        &self,
        _budget: &str,
        permit_timeout: Option<Duration>,
    ) -> Option<Duration> {
        self.rate.as_ref().map(|r| r.limited_for(permit_timeout))
    }
}

/// A lease taken before the rate slot: released on drop unless the slot came.
struct HeldLease<'a> {
    engine: &'a Arc<Engine>,
    budget: &'a str,
    lease: Option<Lease>,
}

impl Drop for HeldLease<'_> {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.engine.release(self.budget, lease);
        }
    }
}

#[cfg(test)]
mod engine_tests;
#[cfg(test)]
mod rate_tests;
#[cfg(test)]
mod test_support;
