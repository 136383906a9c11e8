//! [`ShareStore`]: a fleet budget whose processes hold shares of the limit for a lease, so that
//! Redis is asked when shares move, not on every call; and [`ShareSnapshot`], its counters.

mod engine;

use std::sync::{Arc, Weak};
use std::time::Duration;

use inflight::store::{Lease, Store, StoreError, StoreFuture};
use tokio::time::Instant;

pub(crate) use engine::{Settings, ShareEngine};

use crate::fallback::Fail;

/// A [`Store`] that keeps a fleet's limit as shares, one per process, held for a lease: a call
/// is admitted against the process's own share, with no round trip, and the process reports to
/// Redis only to renew its share and when its demand moves. Made by
/// [`RedisFleet::shares`](crate::RedisFleet::shares).
///
/// Each process reports what it wants (its callers running and waiting) and what it may still
/// be running; a Lua script on the server's clock splits the limit max-min fairly among the
/// wants of the processes whose reports are less than a lease old (two processes wanting 100
/// and 900 of 512 get 100 and 412), and answers each its share. What the whole permits of those
/// fair shares leave over (all of the limit when there are more processes than permits: 200
/// processes on a budget of 40) goes in turns: a process that wants more than its base queues,
/// and a process that has held a permit beyond its base for a sixth of a lease while others
/// wait gives it back as its calls end and queues again, so that over a run every process gets
/// its part. The report that gives a permit back hands it to the head of the queue on the
/// server, and tells that process on its grants channel what it now holds and when its term
/// ends: the turn moves in that one report, and the process it goes to asks nothing. A report
/// costs a few commands whatever the number of processes (about 50 µs of Redis time at 5,000;
/// see the scale bench).
///
/// # Guarantees
///
/// - **Limit.** The shares reserved on the server never sum past the limit at any instant: a
///   share grows only from permits no other process holds. A process told its share shrank
///   admits nothing above the new share at once, and gives the rest back as its running calls
///   end. Before a report leaves, the process lowers its own cap to what the report says it
///   holds, and raises it only from the reply, or from a turn handed over to it when no report
///   of its own is out and the turn is newer than every answer it heard (a report sent without
///   knowing of a turn keeps it on the server), so it never runs more calls than the server
///   reserves for it.
/// - **Expiry.** A process that stops reporting (killed, stalled) keeps its share one lease
///   after its last report reached the server; then the first report to see it expired hands
///   it on as a share given back is (or the others take it up at their next report). A process
///   that holds nothing and only waits for a turn keeps its entry three leases, and renews it
///   every two; a turn is not handed to a process nobody listens for on its grants channel
///   (`PUBSUB NUMSUB`: one killed, whose connection closed), and such a waiter is dropped once
///   its last report is a lease old. One stalled while it waits, or whose host vanished
///   without closing its connection (Redis keeps it until `tcp-keepalive` tells), may be
///   handed a turn: that permit idles until its entry expires, three leases after its last
///   report at most; so does a turn held by a process killed before it reported again (a
///   handed turn keeps the waiter's entry, and its holder reports within two thirds of a
///   lease of taking it). A process stalled past its lease (`SIGSTOP`,
///   a long pause) may still be running the calls it admitted before the stall, at most its
///   share, while that share is handed to others: for as long as those calls run, the fleet
///   can run up to that share above the limit. Its own clock ends its share when the server's
///   entry may end at the soonest: its entry's life (a lease; three for a waiter's entry, and a
///   turn handed over keeps it) after its last answered report *left*, and no later than a
///   lease after any report left since, before the server's expiry, so a process that is merely cut off
///   from Redis stops admitting in time, and its running calls see their leases lost
///   ([`Lease::is_lost`]).
/// - **Cost.** Redis is asked once per process per third of a lease while it holds a share
///   (the renewal; every two thirds while it holds nothing below its base, every two leases
///   while it only waits for a turn, and a turn handed over to it renews with the report that
///   gives it back, two thirds of a lease after it was taken at the latest), once when a caller
///   finds the share full and the demand is above what was last reported, once when a shrunk
///   share has drained (which also hands a turn on), and once when the server says others are
///   short: the number of Redis commands follows the moves of the shares, not the calls. A word
///   on the grants channel carries the budget's state it was told at, and a process whose own
///   last answer came from later skips it. A process with nothing held and nobody waiting does
///   not renew.
/// - **Deadlines.** An acquire returns by the budget's permit deadline.
/// - **After Redis lost the state** (a restart without persistence, a flush, a failover that
///   lost writes), a process's next report keeps what it runs whole, and no share grows while
///   the budget learns (one lease); calls its local fallback admitted count in what it runs.
/// - **When Redis is down**, calls already admitted under an unexpired share go on, new ones
///   are admitted under it while it lasts; a caller that finds it full gets the [`Fail`]
///   policy ([`Fail::Closed`] refuses with an error naming the budget and the address,
///   [`Fail::Local`] admits up to its own limit), and Redis is asked again after the fleet's
///   `retry_after`.
///
/// # When to choose it
///
/// A share store pays off when the limit is large against the number of processes (at least a
/// few permits per process; 512 over 16 processes is 32 each) and calls are many: per-call
/// leases ([`RedisFleet::store`](crate::RedisFleet::store)) cost two scripts a call, so one
/// Redis caps the fleet's calls a second. With small limits, per-call leases are the better
/// fit: a process's share rounds to few permits, a share cannot move while its calls run, and
/// per-call leases keep the fleet's queue in arrival order, which shares do not (waiters queue
/// in their own process).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use inflight::Budget;
/// use inflight_redis::{Fail, RedisFleet};
///
/// let fleet = RedisFleet::builder("redis://127.0.0.1:6379")
///     .lease(Duration::from_secs(5))
///     .build()
///     .unwrap();
/// let search = Budget::builder("search")
///     .max_concurrent(64) // this process's own bound: it never wants more than 64
///     .permit_timeout(Duration::from_millis(500))
///     .store(Arc::new(fleet.shares(512, Fail::Local(32))))
///     .build()
///     .unwrap();
/// // At most 512 searches at once across the fleet; Redis is asked about every 1.7 s per
/// // process, and when the process's demand moves, not on every call.
/// assert_eq!(search.limit(), 64);
/// ```
#[derive(Debug, Clone)]
pub struct ShareStore {
    engine: Arc<ShareEngine>,
}

/// A [`ShareStore`]'s state and counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShareSnapshot {
    /// The most calls this process admits at once now.
    pub share: usize,
    /// Permits the server reserves for this process, as its last reply said (above `share`
    /// while calls of a shrunk share drain).
    pub reserved: usize,
    /// This process's max-min fair share, as the last reply said.
    pub target: usize,
    /// Processes in the budget, as the last reply said.
    pub processes: usize,
    /// Calls running under the share now.
    pub running: usize,
    /// Callers waiting for the share now.
    pub waiting: usize,
    /// Calls admitted under the share.
    pub acquired: u64,
    /// Calls given back.
    pub released: u64,
    /// Calls told their lease was lost (the share expired while they ran).
    pub lost: u64,
    /// Acquires served by the local fallback because Redis could not be asked.
    pub fallbacks: u64,
    /// Acquires refused because Redis could not be asked (`fail = "closed"`).
    pub unavailable: u64,
    /// Acquires that reached their deadline while the share was full.
    pub timeouts: u64,
    /// Reports Redis answered.
    pub reports: u64,
    /// Their mean round trip.
    pub mean_round_trip: Duration,
    /// Whether the last report failed.
    pub redis_down: bool,
    /// Why, while `redis_down`: the error of the last failed report, cut to 200 characters.
    pub redis_error: Option<String>,
    /// The budget's epoch as this process last saw it (0 before its first reply): it moves
    /// when Redis loses the budget's state.
    pub epoch: u64,
    /// How often the epoch moved on from one this process had seen.
    pub epochs_moved: u64,
    /// Whether the budget is learning (after a loss of state, no share grows), as the last
    /// reply said.
    pub learning: bool,
    /// Calls the local fallback admitted, running now.
    pub local_held: usize,
}

impl ShareStore {
    /// Makes this store serve `budget` before any call (see [`RedisFleet::check`]).
    ///
    /// [`RedisFleet::check`]: crate::RedisFleet::check
    pub(crate) fn register(&self, budget: &str) {
        self.engine.register(budget);
    }

    /// Asks Redis once for this store's budget (see [`RedisFleet::check`]).
    ///
    /// [`RedisFleet::check`]: crate::RedisFleet::check
    pub(crate) async fn check(&self) {
        self.engine.check().await;
    }

    pub(crate) fn from_arc(engine: Arc<ShareEngine>) -> ShareStore {
        ShareStore { engine }
    }

    pub(crate) fn from_engine(engine: ShareEngine) -> ShareStore {
        ShareStore {
            engine: Arc::new(engine),
        }
    }

    /// The permits shared by the fleet.
    pub fn limit(&self) -> usize {
        self.engine.settings().limit
    }

    /// How long a share lasts without a report.
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

    /// The store's share and counters now.
    pub fn snapshot(&self) -> ShareSnapshot {
        self.engine.snapshot()
    }

    /// Refuses acquires from now on, waits up to one round-trip timeout for the running calls
    /// to end, then gives this process's share back and waits up to one more for Redis to
    /// answer. Calls still running then see their leases lost, and their permits stay reserved
    /// on the server until one lease after this last report: never handed to another process
    /// while they may run.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the store is shut down from the first poll on; a share whose give-back was
    /// not answered expires one lease after the last report.
    pub async fn shutdown(&self) {
        self.engine.shutdown().await;
    }

    pub(crate) fn downgrade(&self) -> Weak<ShareEngine> {
        Arc::downgrade(&self.engine)
    }
}

impl Store for ShareStore {
    fn acquire<'a>(
        &'a self,
        budget: &'a str,
        deadline: Option<Instant>,
    ) -> StoreFuture<'a, Result<Lease, StoreError>> {
        Box::pin(self.engine.acquire(budget, deadline))
    }

    fn release(&self, _budget: &str, lease: Lease) {
        self.engine.release(lease);
    }
}
