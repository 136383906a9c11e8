//! [`RedisFleet`]: the Redis shared by every replica (one server, a Cluster, or a primary
//! found through Sentinel), and the settings its stores share.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use crate::engine::{Engine, Settings};
use crate::error::FleetError;
use crate::link::{Link, Topology};
use crate::server::{RedisServer, Server};
use crate::shares::{ShareEngine, ShareStore};
use crate::{Fail, RedisStore};

/// The Redis where budgets keep the permits that every replica of a service shares.
///
/// Building one does not connect: the connection is opened on first use and reopened after a
/// failure, so a process can start while Redis is down (and serve under [`Fail::Local`]).
/// Clones share the connection.
///
/// # Topologies
///
/// The URL says which Redis:
///
/// | URL | reaches |
/// | --- | --- |
/// | `redis://host:6379/0` | one server; or, if that node is part of a Redis Cluster, the whole cluster (any node's address will do) |
/// | `redis+cluster://h1:7000,h2:7001` | a Redis Cluster, from the first seed that answers |
/// | `redis+sentinel://s1:26379,s2:26379/mymaster/0` | the primary the sentinels name `mymaster`, followed through failovers |
/// | `rediss://...`, `rediss+cluster://...`, `rediss+sentinel://...` | the same over TLS; see [`FleetBuilder::ca_file`] |
///
/// A user and password (`redis://user:secret@host:6379`, ACL or `requirepass`) go to the data
/// nodes, not to the sentinels. A budget's keys share one hash tag (`inflight:{records}:...`),
/// so each budget lives on one slot of a cluster, and the word that a permit was handed over
/// goes on a sharded channel of that slot (`SPUBLISH`, Redis 7).
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
#[derive(Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct FleetBuilder {
    url: String,
    ca_file: Option<PathBuf>,
    lease: Duration,
    op_timeout: Duration,
    retry_after: Duration,
}

/// Shows the URL without its password, as [`RedisFleet::address`] does.
impl std::fmt::Debug for FleetBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetBuilder")
            .field("url", &inflight::config::shown_url(&self.url))
            .field("ca_file", &self.ca_file)
            .field("lease", &self.lease)
            .field("op_timeout", &self.op_timeout)
            .field("retry_after", &self.retry_after)
            .finish()
    }
}

impl RedisFleet {
    /// The lease of a fleet permit when none is given: a process killed while holding a permit
    /// frees it within this time.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(5);

    /// Starts setting up a fleet on the Redis at `url`: `redis://host:port/db`, a cluster's
    /// node or seeds, or sentinels (see [Topologies](RedisFleet#topologies)).
    pub fn builder(url: &str) -> FleetBuilder {
        FleetBuilder {
            url: url.to_string(),
            ca_file: None,
            lease: RedisFleet::DEFAULT_LEASE,
            op_timeout: Duration::from_secs(1),
            retry_after: Duration::from_secs(1),
        }
    }

    /// A fleet on the Redis at `url` with the default settings.
    ///
    /// # Errors
    ///
    /// [`FleetError::Url`] when `url` is not a fleet URL.
    pub fn new(url: &str) -> Result<RedisFleet, FleetError> {
        RedisFleet::builder(url).build()
    }

    /// The fleet a budgets file's `[fleet]` table names (its URL, lease and CA file): checked,
    /// and the CA file read, without connecting. `inflight check-config` uses it to find what
    /// `inflight proxy` would refuse.
    ///
    /// ```
    /// let budgets = inflight::Budgets::from_toml_str(r#"
    ///     [fleet]
    ///     url = "redis+sentinel://127.0.0.1:26379"   # no primary's name
    ///
    ///     [budgets.records]
    ///     max_concurrent = 6
    ///     scope = "fleet"
    /// "#).unwrap();
    /// let err = inflight_redis::RedisFleet::from_config(budgets.fleet().unwrap()).unwrap_err();
    /// assert!(err.to_string().contains("names the primary after the sentinels"), "{err}");
    /// ```
    ///
    /// # Errors
    ///
    /// As [`FleetBuilder::build`].
    pub fn from_config(config: &inflight::config::FleetConfig) -> Result<RedisFleet, FleetError> {
        let mut builder = RedisFleet::builder(config.url());
        if let Some(lease) = config.lease() {
            builder = builder.lease(lease);
        }
        if let Some(ca_file) = config.ca_file() {
            builder = builder.ca_file(ca_file);
        }
        builder.build()
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

    /// Asks Redis once for each budget that this fleet's stores know (those
    /// [`attach`](crate::attach) made, and those that made a call), in either lease mode: a
    /// budget whose Redis does not answer is marked down at once, as a failed call would mark
    /// it, so that its [`health`](RedisFleet::health) and metrics say so before any call, and
    /// it is asked again every third of a lease until it answers. Returns once each has
    /// answered or timed out. A shares budget's ask is a report of this process wanting
    /// nothing yet.
    pub async fn check(&self) {
        for (budget, store) in self.stores() {
            store.engine().check(&budget).await;
        }
        for (_, store) in self.share_stores() {
            store.check().await;
        }
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

    /// What this fleet's Redis holds of budget `budget` now: the node that owns it, the leases
    /// held and waiting, shares, the epoch and whether it is learning (see
    /// [`FleetStatus`](crate::FleetStatus)). One round trip, within the round-trip timeout; it
    /// changes nothing. What `inflight fleet status` shows.
    ///
    /// # Errors
    ///
    /// [`FleetError::Unreachable`] when Redis cannot be asked.
    pub async fn status(&self, budget: &str) -> Result<crate::FleetStatus, FleetError> {
        let unreachable = |reason: String| {
            FleetError::Unreachable(format!(
                "fleet budget {budget:?}: {} cannot be reached: {reason}",
                self.place_of(budget)
            ))
        };
        match tokio::time::timeout(self.op_timeout, self.server.status(budget)).await {
            Ok(Ok(status)) => Ok(status),
            Ok(Err(e)) => Err(unreachable(e.to_string())),
            Err(_) => Err(unreachable(format!(
                "no answer within {:?}",
                self.op_timeout
            ))),
        }
    }

    /// A fleet rate limit named `name`: see [`FleetRate`](crate::FleetRate).
    pub fn rate(&self, name: &str, interval: Duration, burst: u32) -> crate::FleetRate {
        crate::rate::FleetRate::new(self.server.clone(), self.op_timeout, name, interval, burst)
    }

    /// The per-call stores of this fleet (and its clones) still in use, each with the budget it
    /// serves (stores that have served no call yet are left out).
    pub(crate) fn stores(&self) -> Vec<(String, RedisStore)> {
        self.stores
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(Weak::upgrade)
            .flat_map(|engine| {
                engine
                    .budgets()
                    .into_iter()
                    .map(move |name| (name, RedisStore::from_arc(engine.clone())))
            })
            .collect()
    }

    /// The share stores of this fleet (and its clones) still in use, each with its budget.
    pub(crate) fn share_stores(&self) -> Vec<(String, ShareStore)> {
        self.shares
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(Weak::upgrade)
            .filter_map(|engine| {
                let name = engine.budget_name()?;
                Some((name, ShareStore::from_arc(engine)))
            })
            .collect()
    }

    /// The lease of each permit.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The Redis address, as errors and logs show it: the URL without its password.
    pub fn address(&self) -> &str {
        self.server.address()
    }

    /// Where budget `budget` lives, as messages say it: `redis at URL`, or on a cluster the
    /// node of the budget's slot (the URL names the node the cluster was reached through,
    /// which may not be the one that failed).
    pub(crate) fn place_of(&self, budget: &str) -> String {
        crate::error::place(self.address(), self.server.slot_of(budget))
    }

    /// What the fleet's connection found at its address: `"standalone"`, `"cluster"` or
    /// `"sentinel"`; `None` until it first connected.
    pub fn topology(&self) -> Option<&'static str> {
        self.server.topology()
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

    /// The certificate authorities (a PEM file) that a `rediss` server's certificate must chain
    /// to, in place of the system's roots; read when [`build`](FleetBuilder::build) runs.
    pub fn ca_file(mut self, path: impl AsRef<Path>) -> Self {
        self.ca_file = Some(path.as_ref().to_path_buf());
        self
    }

    /// Checks the settings and reads the CA file; does not connect.
    ///
    /// # Errors
    ///
    /// [`FleetError::Url`] when the URL is not a fleet URL; [`FleetError::Invalid`] when the
    /// lease is under 3 ms, the round-trip timeout is zero, or the CA file cannot be read,
    /// holds no certificate, or is given for a URL without TLS.
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
        let topology = Topology::parse(&self.url).map_err(|bad| FleetError::Url {
            url: inflight::config::shown_url(&self.url),
            source: redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "invalid fleet url",
                inflight::config::capped(&bad.0),
            )),
        })?;
        let certs = match &self.ca_file {
            Some(path) if !topology.uses_tls() => {
                return Err(FleetError::Invalid(format!(
                    "ca_file {} is for a TLS URL (rediss://, rediss+cluster:// or \
                     rediss+sentinel://), and {} is not one",
                    path.display(),
                    inflight::config::shown_url(&self.url)
                )))
            }
            Some(path) => {
                let pem = std::fs::read(path)
                    .map_err(|e| FleetError::Invalid(format!("ca_file {}: {e}", path.display())))?;
                if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                    return Err(FleetError::Invalid(format!(
                        "ca_file {}: no PEM certificate in it",
                        path.display()
                    )));
                }
                Some(pem)
            }
            None => None,
        };
        Ok(RedisFleet {
            server: Arc::new(RedisServer::new(Link::new(
                topology,
                certs,
                self.op_timeout,
            ))),
            lease: self.lease,
            op_timeout: self.op_timeout,
            retry_after: self.retry_after,
            stores: Arc::default(),
            shares: Arc::default(),
        })
    }
}
