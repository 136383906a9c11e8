//! [`RedisFleet`]: one Redis server shared by every replica, and the settings its stores share.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;

use crate::engine::{Engine, Settings};
use crate::error::FleetError;
use crate::server::{RedisServer, Server};
use crate::shares::{ShareEngine, ShareStore};
use crate::{Fail, RedisStore};

/// A Redis server where budgets keep the permits that every replica of a service shares.
///
/// Building one does not connect: the connection is opened on first use and reopened after a
/// failure, so a process can start while Redis is down (and serve under [`Fail::Local`]).
/// Clones share the connection.
///
/// # Examples
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
/// // At most 6 writes at once across every replica; refused while Redis is unreachable.
/// let records = Budget::builder("records")
///     .max_concurrent(6)
///     .permit_timeout(Duration::from_millis(500))
///     .store(Arc::new(fleet.store(6, Fail::Closed)))
///     .build()
///     .unwrap();
/// assert_eq!(records.limit(), 6);
/// ```
#[derive(Debug, Clone)]
pub struct RedisFleet {
    server: Arc<dyn Server>,
    lease: Duration,
    op_timeout: Duration,
    retry_after: Duration,
    /// The stores made by this fleet (and its clones), for [`RedisFleet::shutdown`].
    stores: Arc<Mutex<Vec<Weak<Engine>>>>,
    /// The share stores made by this fleet (and its clones), for [`RedisFleet::shutdown`].
    shares: Arc<Mutex<Vec<Weak<ShareEngine>>>>,
}

/// Settings of a [`RedisFleet`]; see [`RedisFleet::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct FleetBuilder {
    url: String,
    lease: Duration,
    op_timeout: Duration,
    retry_after: Duration,
}

impl RedisFleet {
    /// The lease of a fleet permit when none is given: a process killed while holding a permit
    /// frees it within this time.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(5);

    /// Starts setting up a fleet on the Redis at `url` (`redis://host:port/db`).
    pub fn builder(url: &str) -> FleetBuilder {
        FleetBuilder {
            url: url.to_string(),
            lease: RedisFleet::DEFAULT_LEASE,
            op_timeout: Duration::from_secs(1),
            retry_after: Duration::from_secs(1),
        }
    }

    /// A fleet on the Redis at `url` with the default settings.
    ///
    /// # Errors
    ///
    /// [`FleetError::Url`] when `url` is not a Redis URL.
    pub fn new(url: &str) -> Result<RedisFleet, FleetError> {
        RedisFleet::builder(url).build()
    }

    /// A store of `limit` permits shared by every process that uses a budget of the same name
    /// on this Redis, with `fail` saying what happens while Redis cannot be reached.
    ///
    /// A limit of 0 grants nothing.
    pub fn store(&self, limit: usize, fail: Fail) -> RedisStore {
        let store = RedisStore::from_engine(Engine::new(
            self.server.clone(),
            Settings {
                limit,
                lease: self.lease,
                fail,
                op_timeout: self.op_timeout,
                retry_after: self.retry_after,
                first_pause: Duration::from_millis(5),
                max_pause: Duration::from_millis(200).min(self.lease / 2),
                queue_lease: self.lease,
            },
        ));
        let mut stores = self.stores.lock().unwrap_or_else(PoisonError::into_inner);
        stores.retain(|s| s.strong_count() > 0);
        stores.push(store.downgrade());
        store
    }

    /// A store of `limit` permits kept as shares, one per process, held for a lease: see
    /// [`ShareStore`]. Calls are admitted against the process's share without a round trip;
    /// Redis is asked when shares move. For limits large against the number of processes;
    /// [`RedisFleet::store`] (a lease per call) is the one for small limits.
    ///
    /// A limit of 0 grants nothing.
    pub fn shares(&self, limit: usize, fail: Fail) -> ShareStore {
        let store = ShareStore::from_engine(ShareEngine::new(
            self.server.clone(),
            crate::shares::Settings {
                limit,
                lease: self.lease,
                fail,
                op_timeout: self.op_timeout,
                retry_after: self.retry_after,
                min_gap: Duration::from_millis(2).min(self.lease / 3),
            },
        ));
        let mut shares = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
        shares.retain(|s| s.strong_count() > 0);
        shares.push(store.downgrade());
        store
    }

    /// Gives back every lease the stores of this fleet hold, and every release still on its
    /// way, and returns once Redis has answered (or after one round-trip timeout): call it
    /// before the process ends, so that the next run finds every permit free.
    ///
    /// Releases are sent in the background when a permit drops, so a process that ends right
    /// after its last call could end before they go out. A store dropped with releases still
    /// unanswered sends them again itself, blocking for a bounded time; `shutdown` is the way
    /// that does not block a thread. Leases still held by running calls are given back too,
    /// and their holders see them lost; the stores refuse acquires from then on.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the stores are shut down from the first poll on, and releases not answered
    /// yet are sent again when each store's last handle is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use inflight::Budget;
    /// use inflight_redis::{Fail, RedisFleet};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let fleet = RedisFleet::new("redis://127.0.0.1:6379").unwrap();
    /// let records = Budget::builder("records")
    ///     .max_concurrent(6)
    ///     .store(Arc::new(fleet.store(6, Fail::Closed)))
    ///     .build()
    ///     .unwrap();
    /// // ... the job's calls through `records` ...
    /// fleet.shutdown().await; // every lease is back in Redis
    /// assert!(records.acquire().await.is_err(), "the fleet store is shut down");
    /// # }
    /// ```
    pub async fn shutdown(&self) {
        let stores: Vec<Arc<Engine>> = self
            .stores
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let shares: Vec<Arc<ShareEngine>> = self
            .shares
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        futures::future::join(
            futures::future::join_all(stores.iter().map(|s| s.shutdown())),
            futures::future::join_all(shares.iter().map(|s| s.shutdown())),
        )
        .await;
    }

    /// A fleet rate limit named `name`: see [`FleetRate`](crate::FleetRate).
    pub fn rate(&self, name: &str, interval: Duration, burst: u32) -> crate::FleetRate {
        crate::FleetRate::new(self.clone(), name, interval, burst)
    }

    /// The lease of each permit.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The Redis address, as errors and logs show it.
    pub fn address(&self) -> &str {
        self.server.address()
    }

    pub(crate) fn server(&self) -> &Arc<dyn Server> {
        &self.server
    }

    pub(crate) fn op_timeout(&self) -> Duration {
        self.op_timeout
    }
}

impl FleetBuilder {
    /// How long a permit is held without renewal; holders renew every third of it while their
    /// call runs. A holder stalled longer than this loses its permit to the fleet. Default 5 s.
    ///
    /// A waiter's place in the fleet's queue lasts as long: waiters ask again every third of
    /// it, and one that stopped asking (killed while it waited) is skipped after it.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The longest one round trip to Redis may take before Redis counts as unreachable, when
    /// the caller's own deadline is not nearer. Default 1 s.
    pub fn op_timeout(mut self, timeout: Duration) -> Self {
        self.op_timeout = timeout;
        self
    }

    /// After Redis failed, how long calls go straight to the fail policy before Redis is asked
    /// again. Default 1 s.
    pub fn retry_after(mut self, pause: Duration) -> Self {
        self.retry_after = pause;
        self
    }

    /// Checks the settings; does not connect.
    ///
    /// # Errors
    ///
    /// [`FleetError::Url`] when the URL is not a Redis URL; [`FleetError::Invalid`] when the
    /// lease is under 3 ms or the round-trip timeout is zero.
    pub fn build(self) -> Result<RedisFleet, FleetError> {
        if self.lease < Duration::from_millis(3) {
            return Err(FleetError::Invalid(format!(
                "lease must be at least 3ms, got {:?}",
                self.lease
            )));
        }
        if self.op_timeout.is_zero() {
            return Err(FleetError::Invalid(
                "op_timeout must be greater than zero".to_string(),
            ));
        }
        let client = redis::Client::open(self.url.as_str()).map_err(|source| FleetError::Url {
            url: self.url.clone(),
            source,
        })?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.op_timeout))
            .set_connection_timeout(Some(self.op_timeout))
            // One attempt per reconnect: the store paces its own retries (`retry_after`), so
            // a refused connection fails the call at once instead of after a backoff.
            .set_number_of_retries(0);
        Ok(RedisFleet {
            server: Arc::new(RedisServer::new(client, config)),
            lease: self.lease,
            op_timeout: self.op_timeout,
            retry_after: self.retry_after,
            stores: Arc::default(),
            shares: Arc::default(),
        })
    }
}
