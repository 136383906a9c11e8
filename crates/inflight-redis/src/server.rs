//! The server a fleet store talks to: [`Server`], the lease operations as the store's engine
//! sees them, implemented over Redis by [`RedisServer`] (and by an in-memory double in the unit
//! tests).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Client;

use crate::grants::Grants;
use crate::scripts;

/// Why the server could not be asked (unreachable, or it answered with an error).
pub(crate) type ServerError = Arc<dyn std::error::Error + Send + Sync>;

/// What an acquire script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Acquired {
    pub(crate) granted: bool,
    /// Leases held across the fleet after the script ran.
    pub(crate) holders: u64,
    /// Expired leases the script took back.
    pub(crate) reclaimed: u64,
    /// When refused: time until the earliest lease expires.
    pub(crate) retry_in: Duration,
    /// When refused: waiters ahead of this one in the fleet's queue.
    pub(crate) ahead: u64,
}

/// A report of one process of a share budget: see [`scripts::SHARES`].
#[derive(Debug, Clone)]
pub(crate) struct ShareReport {
    /// The process's id; its first [`PROCESS_TOKEN_LEN`](scripts::PROCESS_TOKEN_LEN)
    /// characters name the grants channel it is told on.
    pub(crate) process: Arc<str>,
    pub(crate) wants: usize,
    /// The most calls it may run until it hears back.
    pub(crate) holding: usize,
    /// Numbers its reports: a late one is ignored.
    pub(crate) seq: u64,
    pub(crate) limit: usize,
    pub(crate) lease: Duration,
    /// It gives its share back and goes.
    pub(crate) leaving: bool,
}

/// What a share report answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShareReply {
    /// Whether the report was applied (not a late duplicate).
    pub(crate) applied: bool,
    /// The most calls the process may run until its next report.
    pub(crate) cap: usize,
    /// Permits reserved for it, counted against the limit.
    pub(crate) has: usize,
    /// Its max-min fair share.
    pub(crate) target: usize,
    /// Processes in the budget, itself included.
    pub(crate) processes: usize,
}

/// What a lease operation needs to know of the budget besides its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Terms {
    pub(crate) limit: usize,
    pub(crate) lease: Duration,
    /// How long a queued waiter keeps its place without asking again.
    pub(crate) queue_lease: Duration,
}

/// The lease operations, each one round trip, each returning a `'static` future so it can run
/// in the background.
pub(crate) trait Server: fmt::Debug + Send + Sync + 'static {
    /// Takes lease `id` of `budget` if a permit is free and nobody waits; otherwise queues it
    /// (or keeps its place), to be granted in its turn and told through [`Server::grants`].
    fn acquire(
        &self,
        budget: &str,
        id: &str,
        terms: Terms,
    ) -> BoxFuture<'static, Result<Acquired, ServerError>>;

    /// Renews leases `ids` of `budget`; returns those no longer held.
    fn renew(
        &self,
        budget: &str,
        ids: Vec<Arc<str>>,
        lease: Duration,
    ) -> BoxFuture<'static, Result<Vec<String>, ServerError>>;

    /// Gives back leases `ids` of `budget`, held or queued, and hands the freed permits to the
    /// earliest waiters; returns how many were held.
    fn release(
        &self,
        budget: &str,
        ids: Vec<Arc<str>>,
        terms: Terms,
    ) -> BoxFuture<'static, Result<u64, ServerError>>;

    /// Gives back leases `ids` of `budget` without a runtime, blocking the calling thread for
    /// at most about `timeout` per step (connect, then the script): what a store dropped with
    /// releases still on the way sends last.
    fn release_blocking(
        &self,
        budget: &str,
        ids: &[Arc<str>],
        terms: Terms,
        timeout: Duration,
    ) -> Result<u64, ServerError>;

    /// Lets one event of rate limit `name` through if its GCRA allows; otherwise says how long
    /// until it would.
    fn gcra(
        &self,
        name: &str,
        interval: Duration,
        burst: u32,
    ) -> BoxFuture<'static, Result<Result<(), Duration>, ServerError>>;

    /// Applies a share budget's report: see [`scripts::SHARES`].
    fn shares(
        &self,
        budget: &str,
        report: ShareReport,
    ) -> BoxFuture<'static, Result<ShareReply, ServerError>>;

    /// Reserves the next slot of rate limit `name` (its GCRA, on the server's clock) if it
    /// comes within `max_wait`: `Ok(wait)`, how long until the slot. Otherwise reserves nothing:
    /// `Err(wait)`, how long the caller would have had to wait.
    fn reserve_rate(
        &self,
        name: &str,
        interval: Duration,
        burst: u32,
        max_wait: Duration,
    ) -> BoxFuture<'static, Result<Result<Duration, Duration>, ServerError>>;

    /// A new lease id: the first [`PROCESS_TOKEN_LEN`](scripts::PROCESS_TOKEN_LEN)
    /// characters name the grants channel of this server's listener.
    fn lease_id(&self) -> Arc<str>;

    /// The leases waiting in the queue from here, and the word that one was granted; the
    /// listener starts on first call.
    fn grants(&self) -> Arc<Grants>;

    /// The server's address, for errors and logs.
    fn address(&self) -> &str;
}

/// A Redis server (or Cluster node) reached through one multiplexed, reconnecting connection,
/// plus one pub/sub connection subscribed to this server's own grants channel, opened on first
/// need.
pub(crate) struct RedisServer {
    address: String,
    client: Client,
    config: ConnectionManagerConfig,
    /// Made on first use, inside the runtime (it spawns its reconnect task there).
    conn: OnceLock<Result<ConnectionManager, ServerError>>,
    /// Starts every lease id asked for here: grants to them are told on its channel.
    token: String,
    grants: Arc<Grants>,
    listening: AtomicBool,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn server_error(e: redis::RedisError) -> ServerError {
    Arc::new(e)
}

impl RedisServer {
    pub(crate) fn new(client: Client, config: ConnectionManagerConfig) -> RedisServer {
        RedisServer {
            address: client.get_connection_info().addr().to_string(),
            client,
            config,
            conn: OnceLock::new(),
            token: format!(
                "{:0width$x}",
                rand::random::<u64>(),
                width = scripts::PROCESS_TOKEN_LEN
            ),
            grants: Arc::default(),
            listening: AtomicBool::new(false),
        }
    }

    fn conn(&self) -> Result<ConnectionManager, ServerError> {
        self.conn
            .get_or_init(|| {
                ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone())
                    .map_err(server_error)
            })
            .clone()
    }
}

/// A call of a lease script with `budget`'s keys.
fn lease_call(script: &'static redis::Script, budget: &str) -> redis::ScriptInvocation<'static> {
    let mut call = script.prepare_invoke();
    for key in scripts::lease_keys(budget) {
        call.key(key);
    }
    call
}

/// The release script for leases `ids` of `budget`.
fn release_call(budget: &str, ids: &[Arc<str>], terms: Terms) -> redis::ScriptInvocation<'static> {
    let mut call = lease_call(&scripts::RELEASE, budget);
    call.arg(terms.limit).arg(millis(terms.lease));
    for id in ids {
        call.arg(&**id);
    }
    call
}

impl Server for RedisServer {
    fn acquire(
        &self,
        budget: &str,
        id: &str,
        terms: Terms,
    ) -> BoxFuture<'static, Result<Acquired, ServerError>> {
        let conn = self.conn();
        let mut call = lease_call(&scripts::ACQUIRE, budget);
        call.arg(id)
            .arg(terms.limit)
            .arg(millis(terms.lease))
            .arg(millis(terms.queue_lease));
        Box::pin(async move {
            let mut conn = conn?;
            let (granted, holders, reclaimed, wait, ahead): (u8, u64, u64, i64, u64) =
                call.invoke_async(&mut conn).await.map_err(server_error)?;
            Ok(Acquired {
                granted: granted == 1,
                holders,
                reclaimed,
                retry_in: Duration::from_millis(wait.max(0).unsigned_abs()),
                ahead,
            })
        })
    }

    fn renew(
        &self,
        budget: &str,
        ids: Vec<Arc<str>>,
        lease: Duration,
    ) -> BoxFuture<'static, Result<Vec<String>, ServerError>> {
        let conn = self.conn();
        let mut call = scripts::RENEW.key(scripts::holders_key(budget));
        call.arg(millis(lease));
        for id in &ids {
            call.arg(&**id);
        }
        Box::pin(async move { call.invoke_async(&mut conn?).await.map_err(server_error) })
    }

    fn release(
        &self,
        budget: &str,
        ids: Vec<Arc<str>>,
        terms: Terms,
    ) -> BoxFuture<'static, Result<u64, ServerError>> {
        let conn = self.conn();
        let call = release_call(budget, &ids, terms);
        Box::pin(async move { call.invoke_async(&mut conn?).await.map_err(server_error) })
    }

    fn release_blocking(
        &self,
        budget: &str,
        ids: &[Arc<str>],
        terms: Terms,
        timeout: Duration,
    ) -> Result<u64, ServerError> {
        let mut conn = self
            .client
            .get_connection_with_timeout(timeout)
            .map_err(server_error)?;
        conn.set_read_timeout(Some(timeout)).map_err(server_error)?;
        conn.set_write_timeout(Some(timeout))
            .map_err(server_error)?;
        release_call(budget, ids, terms)
            .invoke(&mut conn)
            .map_err(server_error)
    }

    fn gcra(
        &self,
        name: &str,
        interval: Duration,
        burst: u32,
    ) -> BoxFuture<'static, Result<Result<(), Duration>, ServerError>> {
        let conn = self.conn();
        let mut call = scripts::GCRA.key(scripts::rate_key(name));
        let micros = u64::try_from(interval.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        call.arg(micros).arg(burst.max(1));
        Box::pin(async move {
            let (allowed, wait): (u8, i64) =
                call.invoke_async(&mut conn?).await.map_err(server_error)?;
            Ok(if allowed == 1 {
                Ok(())
            } else {
                Err(Duration::from_micros(wait.max(1).unsigned_abs()))
            })
        })
    }

    fn shares(
        &self,
        budget: &str,
        report: ShareReport,
    ) -> BoxFuture<'static, Result<ShareReply, ServerError>> {
        let conn = self.conn();
        let mut call = scripts::SHARES.key(scripts::shares_key(budget));
        call.arg(&*report.process)
            .arg(report.wants)
            .arg(report.holding)
            .arg(report.seq)
            .arg(report.limit)
            .arg(millis(report.lease))
            .arg(u8::from(report.leaving));
        Box::pin(async move {
            let (applied, cap, has, target, processes): (u8, usize, usize, usize, usize) =
                call.invoke_async(&mut conn?).await.map_err(server_error)?;
            Ok(ShareReply {
                applied: applied == 1,
                cap,
                has,
                target,
                processes,
            })
        })
    }

    fn reserve_rate(
        &self,
        name: &str,
        interval: Duration,
        burst: u32,
        max_wait: Duration,
    ) -> BoxFuture<'static, Result<Result<Duration, Duration>, ServerError>> {
        let conn = self.conn();
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let mut call = scripts::GCRA.key(scripts::rate_key(name));
        call.arg(micros(interval).max(1))
            .arg(burst.max(1))
            // Far beyond any deadline, and exact in Lua's doubles.
            .arg(micros(max_wait).min(1 << 52));
        Box::pin(async move {
            let (allowed, wait): (u8, i64) =
                call.invoke_async(&mut conn?).await.map_err(server_error)?;
            let wait = Duration::from_micros(wait.unsigned_abs());
            Ok(if allowed == 1 { Ok(wait) } else { Err(wait) })
        })
    }

    fn lease_id(&self) -> Arc<str> {
        Arc::from(format!("{}{:016x}", self.token, rand::random::<u64>()))
    }

    fn grants(&self) -> Arc<Grants> {
        if !self.listening.load(Relaxed) && !self.listening.swap(true, Relaxed) {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(listen(
                        Arc::downgrade(&self.grants),
                        self.client.clone(),
                        scripts::grants_channel(&self.token),
                    ));
                }
                Err(_) => self.listening.store(false, Relaxed),
            }
        }
        self.grants.clone()
    }

    fn address(&self) -> &str {
        &self.address
    }
}

/// Subscribes to this process's grants channel and tells each grant to its waiter; says when
/// grants are heard and when not; reconnects with a pause after a failure, and ends once
/// nobody holds the grants.
async fn listen(grants: Weak<Grants>, client: Client, channel: String) {
    let mut pause = Duration::from_millis(100);
    loop {
        if grants.strong_count() == 0 {
            return;
        }
        if let Ok(mut pubsub) = client.get_async_pubsub().await {
            if pubsub.subscribe(&channel).await.is_ok() {
                pause = Duration::from_millis(100);
                let mut messages = pubsub.on_message();
                match grants.upgrade() {
                    Some(grants) => grants.set_live(true),
                    None => return,
                }
                loop {
                    // A quiet channel still lets the task notice that its store is gone.
                    let next = tokio::time::timeout(Duration::from_secs(1), messages.next()).await;
                    let Some(grants) = grants.upgrade() else {
                        return;
                    };
                    match next {
                        Ok(Some(message)) => {
                            if let Ok(id) = message.get_payload::<String>() {
                                grants.grant(&id);
                            }
                        }
                        Ok(None) => {
                            grants.set_live(false);
                            break;
                        }
                        Err(_quiet) => {}
                    }
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}
