//! The server a fleet store talks to: [`Server`], the three lease operations as the store's
//! engine sees them, implemented over Redis by [`RedisServer`] (and by an in-memory double in
//! the unit tests).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Client;
use tokio::sync::Notify;

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
}

/// The lease operations, each one round trip, each returning a `'static` future so it can run
/// in the background.
pub(crate) trait Server: fmt::Debug + Send + Sync + 'static {
    /// Takes lease `id` of `budget` if fewer than `limit` are held.
    fn acquire(
        &self,
        budget: &str,
        id: &str,
        limit: usize,
        lease: Duration,
    ) -> BoxFuture<'static, Result<Acquired, ServerError>>;

    /// Renews leases `ids` of `budget`; returns those no longer held.
    fn renew(
        &self,
        budget: &str,
        ids: Vec<Arc<str>>,
        lease: Duration,
    ) -> BoxFuture<'static, Result<Vec<String>, ServerError>>;

    /// Gives back leases `ids` of `budget`; returns how many were held.
    fn release(
        &self,
        budget: &str,
        ids: Vec<Arc<str>>,
    ) -> BoxFuture<'static, Result<u64, ServerError>>;

    /// Gives back leases `ids` of `budget` without a runtime, blocking the calling thread for
    /// at most about `timeout` per step (connect, then the script): what a store dropped with
    /// releases still on the way sends last.
    fn release_blocking(
        &self,
        budget: &str,
        ids: &[Arc<str>],
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

    /// Notified (as a hint, possibly lost) when a lease of `budget` is released anywhere.
    fn releases(&self, budget: &str) -> Arc<Notify>;

    /// The server's address, for errors and logs.
    fn address(&self) -> &str;
}

/// A Redis server (or Cluster node) reached through one multiplexed, reconnecting connection,
/// plus one pub/sub connection for release notifications, opened on first need.
pub(crate) struct RedisServer {
    address: String,
    client: Client,
    config: ConnectionManagerConfig,
    /// Made on first use, inside the runtime (it spawns its reconnect task there).
    conn: OnceLock<Result<ConnectionManager, ServerError>>,
    wakers: Arc<Wakers>,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// How long a refusal marks a budget as waited for: longer than the longest pause between two
/// asks of a waiter, so the flag stays up while anyone still waits.
const WAITING_FLAG_MS: u64 = 2_000;

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
            wakers: Arc::new(Wakers::default()),
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

/// The release script for leases `ids` of `budget`.
fn release_call(budget: &str, ids: &[Arc<str>]) -> redis::ScriptInvocation<'static> {
    let mut call = scripts::RELEASE.key(scripts::holders_key(budget));
    call.key(scripts::waiting_key(budget))
        .arg(scripts::released_channel(budget));
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
        limit: usize,
        lease: Duration,
    ) -> BoxFuture<'static, Result<Acquired, ServerError>> {
        let conn = self.conn();
        let mut call = scripts::ACQUIRE.key(scripts::holders_key(budget));
        call.key(scripts::waiting_key(budget))
            .arg(id)
            .arg(limit)
            .arg(millis(lease))
            .arg(WAITING_FLAG_MS);
        Box::pin(async move {
            let mut conn = conn?;
            let (granted, holders, reclaimed, wait): (u8, u64, u64, i64) =
                call.invoke_async(&mut conn).await.map_err(server_error)?;
            Ok(Acquired {
                granted: granted == 1,
                holders,
                reclaimed,
                retry_in: Duration::from_millis(wait.max(0).unsigned_abs()),
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
    ) -> BoxFuture<'static, Result<u64, ServerError>> {
        let conn = self.conn();
        let call = release_call(budget, &ids);
        Box::pin(async move { call.invoke_async(&mut conn?).await.map_err(server_error) })
    }

    fn release_blocking(
        &self,
        budget: &str,
        ids: &[Arc<str>],
        timeout: Duration,
    ) -> Result<u64, ServerError> {
        let mut conn = self
            .client
            .get_connection_with_timeout(timeout)
            .map_err(server_error)?;
        conn.set_read_timeout(Some(timeout)).map_err(server_error)?;
        conn.set_write_timeout(Some(timeout))
            .map_err(server_error)?;
        release_call(budget, ids)
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

    fn releases(&self, budget: &str) -> Arc<Notify> {
        let notify = self.wakers.get(budget);
        self.wakers.listen(&self.client);
        notify
    }

    fn address(&self) -> &str {
        &self.address
    }
}

/// One [`Notify`] per budget, woken by a background task subscribed to every budget's release
/// channel. Notifications are only hints: waiters always look again after a bounded pause.
#[derive(Default)]
struct Wakers {
    by_budget: Mutex<HashMap<Box<str>, Arc<Notify>>>,
    listening: std::sync::atomic::AtomicBool,
}

impl Wakers {
    fn get(&self, budget: &str) -> Arc<Notify> {
        let mut map = self
            .by_budget
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.entry(budget.into()).or_default().clone()
    }

    fn wake(&self, budget: &str) {
        let map = self
            .by_budget
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(notify) = map.get(budget) {
            notify.notify_waiters();
        }
    }

    /// Starts the listener once, on the current runtime (if there is one).
    fn listen(self: &Arc<Self>, client: &Client) {
        use std::sync::atomic::Ordering::Relaxed;
        if self.listening.load(Relaxed) || self.listening.swap(true, Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.listening.store(false, Relaxed);
            return;
        };
        runtime.spawn(listen(Arc::downgrade(self), client.clone()));
    }
}

/// Subscribes to every budget's release channel and wakes that budget's waiters; reconnects
/// with a pause after a failure, and ends once nobody holds the wakers.
async fn listen(wakers: Weak<Wakers>, client: Client) {
    let mut pause = Duration::from_millis(100);
    loop {
        if wakers.strong_count() == 0 {
            return;
        }
        if let Ok(mut pubsub) = client.get_async_pubsub().await {
            if pubsub.psubscribe(scripts::RELEASED_PATTERN).await.is_ok() {
                pause = Duration::from_millis(100);
                let mut messages = pubsub.on_message();
                loop {
                    // A quiet channel still lets the task notice that its store is gone.
                    let next = tokio::time::timeout(Duration::from_secs(1), messages.next()).await;
                    let Some(wakers) = wakers.upgrade() else {
                        return;
                    };
                    match next {
                        Ok(Some(message)) => {
                            if let Some(budget) =
                                scripts::budget_of_channel(message.get_channel_name())
                            {
                                wakers.wake(budget);
                            }
                        }
                        Ok(None) => break,
                        Err(_quiet) => {}
                    }
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}
