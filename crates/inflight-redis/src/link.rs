//! [`Link`]: the way from this process to the Redis that keeps a fleet's permits, whatever its
//! topology, and the grants heard on it.
//!
//! - **One address** (`redis://host:port/db`, `rediss://...`): on connect, the node is asked
//!   whether it is part of a Redis Cluster (`INFO cluster`). A standalone server gets one
//!   multiplexed, reconnecting connection; a cluster node becomes the seed of a cluster
//!   connection, so a URL naming any node of a cluster reaches every slot.
//! - **Cluster seeds** (`redis+cluster://h1:p1,h2:p2`): a cluster connection from the first seed
//!   that answers. It follows `MOVED` and `ASK`, and finds the slots again after a resharding or
//!   a failover.
//! - **Sentinel** (`redis+sentinel://s1:p1,s2:p2/master[/db]`): the primary is the one the
//!   first sentinel that answers names, checked with `ROLE`. It is looked up again when a call
//!   fails on it (unreachable, `READONLY`, `MASTERDOWN`), when a sentinel announces
//!   `+switch-master`, and every second in the background, so a process follows a failover
//!   instead of writing to a primary the rest of the world has left.
//!
//! Grants come as pushes on the same connection (RESP3): `SUBSCRIBE` to the process's channel
//! on one server, `SSUBSCRIBE` to its channel in each budget's slot on a Cluster. One connection
//! per process (per node on a Cluster) carries the scripts and the grants; subscriptions are
//! made again after a reconnect.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use futures::StreamExt;
use redis::aio::{AsyncPushSender, ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{
    Client, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline, ProtocolVersion,
    PushInfo, PushKind, RedisError, RedisFuture, TlsCertificates, Value,
};

use crate::grants::Grants;
use crate::scripts::{self, Scripts};

/// Where the fleet's Redis is, as its URL says.
#[derive(Debug, Clone)]
pub(crate) enum Topology {
    /// One address: a standalone server, or any node of a Cluster (found out on connect).
    Node(ConnectionInfo),
    /// Seed nodes of a Cluster (`redis+cluster://`).
    Cluster(Vec<ConnectionInfo>),
    /// A primary found through Sentinel (`redis+sentinel://`).
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        master: String,
        /// The primary's settings (user, password, database); its address comes from the
        /// sentinels.
        node: redis::RedisConnectionInfo,
        tls: bool,
    },
}

/// What the link found at the other end, for logs and `fleet status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Standalone,
    Cluster,
    Sentinel,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Standalone => "standalone",
            Kind::Cluster => "cluster",
            Kind::Sentinel => "sentinel",
        }
    }
}

/// Why a fleet URL is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadUrl(pub(crate) String);

impl Topology {
    /// Whether its URL asks for TLS (`rediss://`, `rediss+cluster://`, `rediss+sentinel://`).
    pub(crate) fn uses_tls(&self) -> bool {
        match self {
            Topology::Node(info) => is_tls(info),
            Topology::Cluster(seeds) => seeds.iter().any(is_tls),
            Topology::Sentinel { tls, .. } => *tls,
        }
    }

    /// Reads a fleet URL: `redis://`, `rediss://`, `redis+cluster://`, `rediss+cluster://`,
    /// `redis+sentinel://` or `rediss+sentinel://`.
    pub(crate) fn parse(url: &str) -> Result<Topology, BadUrl> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(BadUrl(
                "expected redis://host:port, redis+cluster://host:port,... or \
                 redis+sentinel://host:port,.../master"
                    .to_string(),
            ));
        };
        // A raw `#` or `?` in a user name or password would end the user part where the URL
        // parser sees it, and turn the rest into a fragment or a query (and the start into a
        // host name).
        if url.contains('#') {
            return Err(BadUrl(
                "a fleet URL has no '#' part: write a '#' in a user name or password as %23"
                    .to_string(),
            ));
        }
        if let Some(query) = url.find('?') {
            if url[query..].contains('@') {
                return Err(BadUrl(
                    "an '@' after the '?': write a '?' in a user name or password as %3F"
                        .to_string(),
                ));
            }
        }
        let (base, form) = match scheme {
            "redis" | "rediss" => {
                let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
                let host = host.split(['/', '?']).next().unwrap_or_default();
                return Ok(Topology::Node(node_info(url, host)?));
            }
            "redis+cluster" => ("redis", "cluster"),
            "rediss+cluster" => ("rediss", "cluster"),
            "redis+sentinel" => ("redis", "sentinel"),
            "rediss+sentinel" => ("rediss", "sentinel"),
            other => {
                return Err(BadUrl(format!(
                    "unknown scheme {other:?} (expected redis, rediss, redis+cluster, \
                     rediss+cluster, redis+sentinel or rediss+sentinel)"
                )))
            }
        };
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((user, rest)) => (Some(user), rest),
            None => (None, rest),
        };
        let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
        let hosts: Vec<&str> = hosts.split(',').map(str::trim).collect();
        if hosts.iter().any(|h| h.is_empty()) {
            return Err(BadUrl(format!("empty host in {:?}", rest)));
        }
        let node_url = |host: &str, db: &str| {
            let user = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
            format!("{base}://{user}{host}/{db}")
        };
        let parse_node = |host: &str, db: &str| node_info(&node_url(host, db), host);
        if form == "cluster" {
            if !path.is_empty() {
                return Err(BadUrl(
                    "a cluster URL takes no path (a cluster has only database 0)".to_string(),
                ));
            }
            let seeds = hosts
                .iter()
                .map(|h| parse_node(h, ""))
                .collect::<Result<_, _>>()?;
            return Ok(Topology::Cluster(seeds));
        }
        let (master, db) = path.split_once('/').unwrap_or((path, ""));
        if master.is_empty() {
            return Err(BadUrl(
                "a sentinel URL names the primary after the sentinels: \
                 redis+sentinel://127.0.0.1:26379/mymaster"
                    .to_string(),
            ));
        }
        if !db.is_empty() && db.parse::<i64>().is_err() {
            return Err(BadUrl(format!("database {db:?} is not a number")));
        }
        // The sentinels take no user or password of the primary's.
        let sentinels = hosts
            .iter()
            .map(|h| node_info(&format!("{base}://{h}/"), h))
            .collect::<Result<_, _>>()?;
        let node = parse_node(hosts[0], db)?.redis_settings().clone();
        Ok(Topology::Sentinel {
            sentinels,
            master: master.to_string(),
            node,
            tls: base == "rediss",
        })
    }

    /// The address as logs and errors show it: never a password.
    pub(crate) fn shown(&self) -> String {
        match self {
            Topology::Node(info) => shown_node(info),
            Topology::Cluster(seeds) => format!(
                "redis cluster via {}",
                seeds.iter().map(addr).collect::<Vec<_>>().join(",")
            ),
            Topology::Sentinel {
                sentinels, master, ..
            } => format!(
                "sentinel primary {master:?} via {}",
                sentinels.iter().map(addr).collect::<Vec<_>>().join(",")
            ),
        }
    }
}

/// `host:port` of a node.
fn addr(info: &ConnectionInfo) -> String {
    info.addr().to_string()
}

/// A node's URL without its password.
fn shown_node(info: &ConnectionInfo) -> String {
    let scheme = match info.addr() {
        ConnectionAddr::TcpTls { .. } => "rediss",
        _ => "redis",
    };
    let settings = info.redis_settings();
    let user = match (settings.username(), settings.password()) {
        (Some(u), Some(_)) => format!("{u}:***@"),
        (None, Some(_)) => ":***@".to_string(),
        (Some(u), None) => format!("{u}@"),
        (None, None) => String::new(),
    };
    let db = if settings.db() == 0 {
        String::new()
    } else {
        format!("/{}", settings.db())
    };
    format!("{scheme}://{user}{}{db}", info.addr())
}

/// The connection scripts run on.
#[derive(Clone)]
pub(crate) enum Conn {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    pub(crate) fn scripts(&self) -> &'static Scripts {
        match self {
            Conn::Node(_) => Scripts::for_node(),
            Conn::Cluster(_) => Scripts::for_cluster(),
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Node(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Node(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Node(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The connection in use, and what it was made for.
#[derive(Clone)]
struct Current {
    conn: Conn,
    kind: Kind,
    /// The node it reaches (the primary, on Sentinel), for a blocking release.
    node: Option<ConnectionInfo>,
    generation: u64,
    /// Budgets whose sharded grants channel is subscribed on this connection, or being
    /// subscribed by a call that the others of the budget wait for (Cluster).
    subscribed: Arc<Mutex<HashMap<String, Arc<tokio::sync::OnceCell<()>>>>>,
}

/// The link to the fleet's Redis: see the module's docs.
pub(crate) struct Link {
    topology: Topology,
    shown: String,
    certs: Option<Vec<u8>>,
    op_timeout: Duration,
    token: String,
    grants: Arc<Grants>,
    current: RwLock<Option<Current>>,
    /// The connection being made, if one is: every caller awaits the same one.
    connecting: Mutex<Option<Connecting>>,
    generation: AtomicU64,
    watching: AtomicBool,
    /// What the last connection found, for status.
    kind: Mutex<Option<Kind>>,
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("address", &self.shown)
            .finish_non_exhaustive()
    }
}

/// A connection being made, awaited by every caller that needs one meanwhile.
type Connecting = Shared<BoxFuture<'static, Result<Current, RedisError>>>;

/// Tells grants (and whether they are heard) to the process's waiters, from the pushes of the
/// connection.
struct Heard(Weak<Grants>);

impl AsyncPushSender for Heard {
    fn send(&self, info: PushInfo) -> Result<(), redis::aio::SendError> {
        let Some(grants) = self.0.upgrade() else {
            return Err(redis::aio::SendError);
        };
        match info.kind {
            PushKind::Message | PushKind::SMessage => {
                if let Some(Value::BulkString(id)) = info.data.get(1) {
                    if let Ok(id) = std::str::from_utf8(id) {
                        grants.grant(id);
                    }
                }
            }
            PushKind::Subscribe | PushKind::SSubscribe => grants.set_live(true),
            PushKind::Disconnection => grants.set_live(false),
            _ => {}
        }
        Ok(())
    }
}

fn with_resp3(info: &ConnectionInfo) -> ConnectionInfo {
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    info.clone().set_redis_settings(settings)
}

fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

/// Makes sure rustls has a process-wide crypto provider before a TLS connection is made: redis
/// builds its TLS settings on the process's default provider, which rustls picks by itself only
/// when exactly one provider feature is on in the build. redis turns none on (this crate's own
/// `rustls` dependency turns on *ring*); with none, or with two (an application that also
/// turns on `aws-lc-rs`), the first `rediss` connection would panic, and a blocking release in
/// a store's drop abort the process. Installs *ring*'s unless the application installed one of
/// its own first; plain `redis://` fleets install nothing.
fn crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one first: a provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A read error for what a sentinel or node answered that makes no sense.
fn odd(what: String) -> RedisError {
    RedisError::from(std::io::Error::other(what))
}

impl Link {
    pub(crate) fn new(topology: Topology, certs: Option<Vec<u8>>, op_timeout: Duration) -> Link {
        Link {
            shown: topology.shown(),
            topology,
            certs,
            op_timeout,
            token: format!(
                "{:0width$x}",
                rand::random::<u64>(),
                width = scripts::PROCESS_TOKEN_LEN
            ),
            grants: Arc::default(),
            current: RwLock::new(None),
            connecting: Mutex::new(None),
            generation: AtomicU64::new(0),
            watching: AtomicBool::new(false),
            kind: Mutex::new(None),
        }
    }

    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    pub(crate) fn grants(&self) -> &Arc<Grants> {
        &self.grants
    }

    /// `host:port` of the node the connection in use reaches, on one server or a primary
    /// found through Sentinel (`None` on a Cluster, or before a connection is made).
    pub(crate) fn node_addr(&self) -> Option<String> {
        self.read()
            .and_then(|current| current.node)
            .map(|info| addr(&info))
    }

    /// What the last connection found, if one was made.
    pub(crate) fn kind(&self) -> Option<Kind> {
        *self.kind.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn client(&self, info: &ConnectionInfo) -> Result<Client, RedisError> {
        if is_tls(info) {
            crypto_provider();
        }
        match (&self.certs, info.addr()) {
            (Some(pem), ConnectionAddr::TcpTls { .. }) => Client::build_with_tls(
                info.clone(),
                TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            ),
            _ => Client::open(info.clone()),
        }
    }

    /// The connection for a call on `budget`, made (and its grants subscribed) if needed.
    pub(crate) async fn conn(self: &Arc<Self>, budget: &str) -> Result<Conn, RedisError> {
        let current = self.current_or_connect().await?;
        if let Conn::Cluster(conn) = &current.conn {
            // Every call of the budget waits for its channel: a script run before the
            // subscription could grant a waiter that never hears of it.
            let once = current
                .subscribed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(budget.to_string())
                .or_default()
                .clone();
            let subscribed = once
                .get_or_try_init(|| {
                    let mut conn = conn.clone();
                    let channel = scripts::sharded_grants_channel(budget, &self.token);
                    async move { conn.ssubscribe(&channel).await }
                })
                .await;
            if let Err(e) = subscribed {
                let mut all = current
                    .subscribed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if all.get(budget).is_some_and(|o| Arc::ptr_eq(o, &once)) {
                    all.remove(budget);
                }
                return Err(e);
            }
        }
        Ok(current.conn)
    }

    /// The connection in use, or one made now. It is made by a task of its own that every
    /// caller meanwhile awaits: a caller whose round-trip timeout ends first leaves it to finish
    /// for the next (a Cluster with a node that does not answer takes that node's connection
    /// timeout to be reached without it, which may be longer than one call's timeout).
    async fn current_or_connect(self: &Arc<Self>) -> Result<Current, RedisError> {
        if let Some(current) = self.read() {
            return Ok(current);
        }
        let connecting = {
            let mut slot = self
                .connecting
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // A connection made (or refused) is not awaited again.
            if slot.as_ref().is_some_and(|c| c.peek().is_some()) {
                *slot = None;
            }
            if let Some(current) = self.read() {
                return Ok(current);
            }
            slot.get_or_insert_with(|| {
                let link = self.clone();
                let task = tokio::spawn(async move { link.connect_and_keep().await });
                async move {
                    task.await
                        .unwrap_or_else(|e| Err(odd(format!("connecting ended: {e}"))))
                }
                .boxed()
                .shared()
            })
            .clone()
        };
        connecting.await
    }

    /// Connects, and keeps the connection as the one in use.
    async fn connect_and_keep(self: Arc<Self>) -> Result<Current, RedisError> {
        let current = self.connect().await?;
        *self.kind.lock().unwrap_or_else(PoisonError::into_inner) = Some(current.kind);
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(current.clone());
        if current.kind == Kind::Sentinel {
            self.watch_sentinels();
        }
        Ok(current)
    }

    fn read(&self) -> Option<Current> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A call failed with `error`: drops the connection when a new one may reach a better
    /// node (a primary the sentinels moved, a node that turned out to be a cluster's).
    pub(crate) fn failed(&self, error: &RedisError) {
        let Some(current) = self.read() else {
            return;
        };
        let drop_it = match current.kind {
            Kind::Cluster => false,
            Kind::Standalone => matches!(error.code(), Some("MOVED" | "ASK" | "CLUSTERDOWN")),
            Kind::Sentinel => {
                error.is_io_error()
                    || error.is_connection_dropped()
                    || error.is_connection_refusal()
                    || error.is_timeout()
                    || matches!(
                        error.code(),
                        Some("READONLY" | "MASTERDOWN" | "LOADING" | "MOVED")
                    )
            }
        };
        if drop_it {
            self.forget(current.generation);
        }
    }

    /// Drops the connection of `generation`, if it is still the one in use.
    fn forget(&self, generation: u64) {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|c| c.generation == generation) {
            *current = None;
            self.grants.set_live(false);
        }
    }

    async fn connect(self: &Arc<Self>) -> Result<Current, RedisError> {
        let generation = self.generation.fetch_add(1, Relaxed) + 1;
        match &self.topology {
            Topology::Node(info) => match self
                .node(info.clone(), Kind::Standalone, generation)
                .await?
            {
                Some(current) => Ok(current),
                None => self.cluster(vec![info.clone()], generation).await,
            },
            Topology::Cluster(seeds) => self.cluster(seeds.clone(), generation).await,
            Topology::Sentinel {
                sentinels,
                master,
                node,
                tls,
            } => {
                let primary = self.primary(sentinels, master, node, *tls).await?;
                self.node(primary, Kind::Sentinel, generation)
                    .await?
                    .ok_or_else(|| odd("the primary the sentinels name is a cluster node".into()))
            }
        }
    }

    /// A short-lived plain connection to `info`.
    async fn plain(
        &self,
        info: &ConnectionInfo,
    ) -> Result<redis::aio::MultiplexedConnection, RedisError> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.op_timeout))
            .set_response_timeout(Some(self.op_timeout));
        self.client(info)?
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// A connection to one node, with the scripts loaded and the process's grants channel
    /// subscribed; `None` when the node turns out to be part of a Cluster (for a standalone
    /// address) . In one round trip after the handshake: whether the node is a cluster's, its
    /// role (a primary named by the sentinels must be one), and the scripts loaded.
    async fn node(
        self: &Arc<Self>,
        info: ConnectionInfo,
        kind: Kind,
        generation: u64,
    ) -> Result<Option<Current>, RedisError> {
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.op_timeout))
            .set_connection_timeout(Some(self.op_timeout))
            // One attempt per reconnect: the store paces its own retries (`retry_after`), so a
            // refused connection fails the call at once instead of after a backoff.
            .set_number_of_retries(0)
            .set_push_sender(Heard(Arc::downgrade(&self.grants)))
            .set_automatic_resubscription();
        let client = self.client(&with_resp3(&info))?;
        let mut conn = ConnectionManager::new_with_config(client, config).await?;
        let mut pipe = redis::pipe();
        pipe.cmd("INFO").arg("cluster").cmd("ROLE");
        for source in Scripts::for_node().sources() {
            pipe.cmd("SCRIPT").arg("LOAD").arg(source).ignore();
        }
        // The grants channel is subscribed alongside (no round trip of its own): by the time
        // the connection serves a call, its grants are heard, so a caller queued by its first
        // ask need not ask again to cover the time before the subscription.
        let mut subscriber = conn.clone();
        let channel = scripts::grants_channel(&self.token);
        let (answer, subscribed) =
            tokio::join!(pipe.query_async(&mut conn), subscriber.subscribe(channel));
        let (cluster, role): (String, Vec<Value>) = answer.map_err(|e| {
            // A sentinel answers INFO and ROLE but runs no scripts; its error would quote them.
            if e.to_string().contains("unknown command 'SCRIPT'") {
                odd(format!(
                    "{} runs no scripts: a sentinel? Name the primary it watches as \
                     redis+sentinel://{}/<primary name>",
                    info.addr(),
                    info.addr()
                ))
            } else {
                e
            }
        })?;
        if cluster.lines().any(|l| l.trim() == "cluster_enabled:1") {
            return Ok(None);
        }
        let primary = matches!(role.first(), Some(Value::BulkString(r)) if r == b"master")
            || matches!(role.first(), Some(Value::SimpleString(r)) if r == "master");
        if kind == Kind::Sentinel && !primary {
            return Err(odd(format!(
                "{} is named the primary by the sentinels, but is not one (yet)",
                info.addr()
            )));
        }
        if !primary {
            // Its scripts would be refused (READONLY): said once, here, with what to do.
            return Err(odd(format!(
                "{} is a read-only replica: name its primary, or the sentinels that watch it as \
                 redis+sentinel://HOST:PORT/<primary name>",
                info.addr()
            )));
        }
        // Grants are heard once the subscription is confirmed (its push sets them live); if it
        // failed, waiters ask again after short pauses until a reconnect subscribes again.
        if subscribed.is_ok() {
            self.grants.set_live(true);
        }
        Ok(Some(Current {
            conn: Conn::Node(conn),
            kind,
            node: Some(info),
            generation,
            subscribed: Arc::default(),
        }))
    }

    async fn cluster(
        self: &Arc<Self>,
        seeds: Vec<ConnectionInfo>,
        generation: u64,
    ) -> Result<Current, RedisError> {
        if seeds.iter().any(is_tls) {
            crypto_provider();
        }
        let mut builder = ClusterClientBuilder::new(seeds.iter().map(with_resp3))
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(Heard(Arc::downgrade(&self.grants)))
            .connection_timeout(self.op_timeout)
            .response_timeout(self.op_timeout);
        if let Some(pem) = &self.certs {
            builder = builder.certs(TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.clone()),
            });
        }
        let conn = builder.build()?.get_async_connection().await?;
        // Until a budget's channel is subscribed, its grants are not heard: the first call of
        // each budget subscribes (see `conn`).
        self.grants.set_live(true);
        Ok(Current {
            conn: Conn::Cluster(conn),
            kind: Kind::Cluster,
            node: seeds.first().cloned(),
            generation,
            subscribed: Arc::default(),
        })
    }

    /// The primary the first sentinel that answers names (checked with `ROLE` once connected).
    async fn primary(
        &self,
        sentinels: &[ConnectionInfo],
        master: &str,
        node: &redis::RedisConnectionInfo,
        tls: bool,
    ) -> Result<ConnectionInfo, RedisError> {
        let mut last = None;
        for sentinel in sentinels {
            match self.ask_sentinel(sentinel, master).await {
                Ok(Some((host, port))) => {
                    let found = if tls {
                        ConnectionAddr::TcpTls {
                            host,
                            port,
                            insecure: false,
                            tls_params: None,
                        }
                    } else {
                        ConnectionAddr::Tcp(host, port)
                    };
                    return Ok(found
                        .into_connection_info()?
                        .set_redis_settings(node.clone()));
                }
                Ok(None) => {
                    last = Some(odd(format!(
                        "sentinel {} does not know a primary named {master:?}",
                        addr(sentinel)
                    )));
                }
                // A data node (or a cluster node) given as a sentinel refuses the command.
                Err(e) if e.code() == Some("ERR") && e.to_string().contains("SENTINEL") => {
                    last = Some(odd(format!(
                        "{} is not a sentinel (it does not know the SENTINEL command): \
                         name the sentinels in redis+sentinel://, or the primary itself in \
                         redis://",
                        addr(sentinel)
                    )));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| odd("no sentinel given".to_string())))
    }

    async fn ask_sentinel(
        &self,
        sentinel: &ConnectionInfo,
        master: &str,
    ) -> Result<Option<(String, u16)>, RedisError> {
        let mut conn = self.plain(sentinel).await?;
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(master)
            .query_async(&mut conn)
            .await
    }

    /// Follows the sentinels: a `+switch-master` of this primary, or (every second, as a
    /// backstop for a missed message) a primary address that changed, drops the connection so
    /// that the next call reaches the new primary. Ends when the link is dropped.
    fn watch_sentinels(self: &Arc<Self>) {
        if self.watching.swap(true, Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.watching.store(false, Relaxed);
            return;
        };
        runtime.spawn(watch(Arc::downgrade(self)));
    }

    /// Gives back `ids` of `budget` without a runtime, blocking for at most about `timeout` per
    /// step, on the node (or cluster) the link last reached.
    pub(crate) fn run_blocking<T: redis::FromRedisValue>(
        &self,
        invocation: &dyn Fn(&'static Scripts) -> redis::ScriptInvocation<'static>,
        timeout: Duration,
    ) -> Result<T, RedisError> {
        let current = self.read();
        let (kind, node) = match &current {
            Some(c) => (c.kind, c.node.clone()),
            None => match &self.topology {
                Topology::Node(info) => (Kind::Standalone, Some(info.clone())),
                Topology::Cluster(seeds) => (Kind::Cluster, seeds.first().cloned()),
                Topology::Sentinel { .. } => (Kind::Sentinel, None),
            },
        };
        let Some(node) = node else {
            return Err(odd("no primary known".to_string()));
        };
        if kind == Kind::Cluster {
            let seeds = match &self.topology {
                Topology::Cluster(seeds) => seeds.clone(),
                _ => vec![node],
            };
            if seeds.iter().any(is_tls) {
                crypto_provider();
            }
            let mut builder = ClusterClientBuilder::new(seeds)
                .connection_timeout(timeout)
                .response_timeout(timeout);
            if let Some(pem) = &self.certs {
                builder = builder.certs(TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                });
            }
            let mut conn = builder.build()?.get_connection()?;
            return invocation(Scripts::for_cluster()).invoke(&mut conn);
        }
        let mut conn = self.client(&node)?.get_connection_with_timeout(timeout)?;
        conn.set_read_timeout(Some(timeout))?;
        conn.set_write_timeout(Some(timeout))?;
        invocation(Scripts::for_node()).invoke(&mut conn)
    }
}

async fn watch(link: Weak<Link>) {
    let (sentinels, master) = match link.upgrade() {
        Some(l) => match &l.topology {
            Topology::Sentinel {
                sentinels, master, ..
            } => (sentinels.clone(), master.clone()),
            _ => return,
        },
        None => return,
    };
    // The announcements, from every sentinel that can be subscribed to.
    let (tx, mut switched) = tokio::sync::mpsc::unbounded_channel::<()>();
    for sentinel in &sentinels {
        let (tx, sentinel, master, link) =
            (tx.clone(), sentinel.clone(), master.clone(), link.clone());
        tokio::spawn(async move {
            loop {
                let client = match link.upgrade() {
                    Some(l) => l.client(&sentinel),
                    None => return,
                };
                if let Ok(client) = client {
                    if let Ok(mut pubsub) = client.get_async_pubsub().await {
                        if pubsub.subscribe("+switch-master").await.is_ok() {
                            let mut messages = pubsub.on_message();
                            loop {
                                let next =
                                    tokio::time::timeout(Duration::from_secs(1), messages.next())
                                        .await;
                                if link.strong_count() == 0 {
                                    return;
                                }
                                match next {
                                    Ok(Some(message)) => {
                                        let text: String =
                                            message.get_payload().unwrap_or_default();
                                        if text.split(' ').next() == Some(master.as_str())
                                            && tx.send(()).is_err()
                                        {
                                            return;
                                        }
                                    }
                                    Ok(None) => break,
                                    Err(_quiet) => {}
                                }
                            }
                        }
                    }
                }
                if link.strong_count() == 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
    }
    drop(tx);
    loop {
        let heard = tokio::select! {
            got = switched.recv() => got.is_some(),
            () = tokio::time::sleep(Duration::from_secs(1)) => false,
        };
        let Some(link) = link.upgrade() else {
            return;
        };
        let Some(current) = link.read() else {
            continue;
        };
        let moved = if heard {
            true
        } else {
            // The backstop: ask the first sentinel that answers where the primary is now.
            let mut now = None;
            for sentinel in &sentinels {
                if let Ok(Ok(Some(found))) =
                    tokio::time::timeout(link.op_timeout, link.ask_sentinel(sentinel, &master))
                        .await
                {
                    now = Some(found);
                    break;
                }
            }
            match (now, &current.node) {
                (Some((host, port)), Some(node)) => match node.addr() {
                    ConnectionAddr::Tcp(h, p)
                    | ConnectionAddr::TcpTls {
                        host: h, port: p, ..
                    } => *h != host || *p != port,
                    _ => false,
                },
                _ => false,
            }
        };
        if moved {
            tracing::warn!(
                address = link.shown(),
                "fleet budget: the sentinels moved the primary; reconnecting"
            );
            link.forget(current.generation);
        }
    }
}

/// The connection to node `host` (`HOST:PORT`, `[IPV6]:PORT`) that `url` names; refused,
/// naming the node, when its port is not a number from 1 to 65535 (the URL parser takes 0, and
/// says of a port it cannot read only that the URL did not parse).
fn node_info(url: &str, host: &str) -> Result<redis::ConnectionInfo, BadUrl> {
    if host.is_empty() || host.starts_with(':') {
        // Not the URL itself: it may hold a password (the caller shows it without).
        return Err(BadUrl(
            "no host: expected redis://HOST:PORT (for example redis://127.0.0.1:6379)".to_string(),
        ));
    }
    let port = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').and_then(|(_, p)| p.strip_prefix(':')),
        None => host.rsplit_once(':').map(|(_, p)| p),
    };
    if let Some(port) = port.filter(|p| !matches!(p.parse::<u16>(), Ok(1..))) {
        // Digits are shown; anything else may be a password whose '@' was left out.
        let digits = port.strip_prefix('-').unwrap_or(port);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(BadUrl(format!(
                "{host}: the port {port:?} is not a number from 1 to 65535"
            )));
        }
        let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
        return Err(BadUrl(format!(
            "{host}: what follows its ':' is not a port (a number from 1 to 65535); a password \
             goes before an '@': redis://user:password@host:port"
        )));
    }
    let info = url.into_connection_info().map_err(|e| {
        // The client's own words, without the name of its error kind.
        let text = e.to_string();
        let text = text.strip_suffix(" - InvalidClientConfig").unwrap_or(&text);
        BadUrl(format!("{host}: {text}"))
    })?;
    if info.redis_settings().db() < 0 {
        return Err(BadUrl(format!(
            "{host}: database {} is not a database number (0, 1, ... up to the server's \
             `databases` setting less one)",
            info.redis_settings().db()
        )));
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_without_a_host_or_with_a_negative_database_are_refused_in_plain_words() {
        for url in [
            "redis://",
            "redis://:6379",
            "redis://app:s3cret@",
            "rediss://:pw@:6380",
        ] {
            let BadUrl(why) = Topology::parse(url).unwrap_err();
            assert!(
                why.starts_with("no host: expected redis://HOST:PORT"),
                "{url}: {why}"
            );
            assert!(!why.contains("s3cret") && !why.contains("pw"), "{why}");
        }
        // A password without its '@' reads as a port: it is not shown.
        let BadUrl(why) = Topology::parse("redis://app:s3cret").unwrap_err();
        assert!(
            !why.contains("s3cret") && why.contains("is not a port"),
            "{why}"
        );
        let BadUrl(why) = Topology::parse("redis://127.0.0.1:99999").unwrap_err();
        assert!(why.contains("the port \"99999\" is not a number"), "{why}");
        let BadUrl(why) = Topology::parse("redis://127.0.0.1/-1").unwrap_err();
        assert!(
            why.contains("database -1 is not a database number"),
            "{why}"
        );
        let BadUrl(why) = Topology::parse("redis://127.0.0.1/abc").unwrap_err();
        assert_eq!(why, "127.0.0.1: Invalid database number");
    }

    #[test]
    fn urls_name_their_topology_and_never_show_a_password() {
        let node = Topology::parse("redis://app:s3cret@127.0.0.1:6379/2").unwrap();
        assert!(matches!(node, Topology::Node(_)));
        assert_eq!(node.shown(), "redis://app:***@127.0.0.1:6379/2");
        let cluster = Topology::parse("redis+cluster://127.0.0.1:7000,127.0.0.1:7001").unwrap();
        let Topology::Cluster(seeds) = &cluster else {
            panic!("{cluster:?}")
        };
        assert_eq!(seeds.len(), 2);
        assert_eq!(
            cluster.shown(),
            "redis cluster via 127.0.0.1:7000,127.0.0.1:7001"
        );
        let sentinel =
            Topology::parse("redis+sentinel://:pw@127.0.0.1:26379,127.0.0.1:26380/mymaster/3")
                .unwrap();
        let Topology::Sentinel {
            sentinels,
            master,
            node,
            tls,
        } = &sentinel
        else {
            panic!("{sentinel:?}")
        };
        assert_eq!(
            (sentinels.len(), master.as_str(), tls),
            (2, "mymaster", &false)
        );
        assert_eq!((node.db(), node.password()), (3, Some("pw")));
        assert_eq!(
            sentinels[0].redis_settings().password(),
            None,
            "the sentinels get no password of the primary's"
        );
        assert!(!sentinel.shown().contains("pw"));
        assert!(matches!(
            Topology::parse("rediss+sentinel://127.0.0.1:26379/m").unwrap(),
            Topology::Sentinel { tls: true, .. }
        ));
        for (bad, says) in [
            ("127.0.0.1:6379", "expected redis://"),
            ("http://127.0.0.1", "unknown scheme \"http\""),
            ("redis+sentinel://127.0.0.1:26379", "names the primary"),
            ("redis+sentinel://127.0.0.1:26379/m/x", "database \"x\""),
            ("redis+cluster://127.0.0.1:7000,/", "empty host"),
            ("redis+cluster://127.0.0.1:7000/1", "takes no path"),
            (
                "redis://app:pw@127.0.0.1:99999/0",
                "127.0.0.1:99999: the port \"99999\" is not a number from 1 to 65535",
            ),
            (
                "rediss://[::1]:70000",
                "[::1]:70000: the port \"70000\" is not a number",
            ),
            (
                "redis+cluster://127.0.0.1:7000,127.0.0.1:x",
                "127.0.0.1: what follows its ':' is not a port",
            ),
            ("redis+sentinel://127.0.0.1:-1/m", "the port \"-1\""),
            (
                "redis://127.0.0.1:0/0",
                "127.0.0.1:0: the port \"0\" is not a number",
            ),
            ("redis+cluster://127.0.0.1:0", "the port \"0\""),
        ] {
            let err = Topology::parse(bad).unwrap_err().0;
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
