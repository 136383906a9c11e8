//! The server a fleet store talks to: [`Server`], the lease operations as the store's engine
//! sees them, implemented over Redis by [`RedisServer`] (and by an in-memory double in the unit
//! tests).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::grants::Grants;
use crate::link::{Conn, Link};
use crate::scripts::{self, Scripts};
use crate::status::{self, FleetStatus, StatusReply};

/// Why the server could not be asked (unreachable, or it answered with an error).
pub(crate) type ServerError = Arc<dyn std::error::Error + Send + Sync>;

/// A server's error as logs, snapshots and `fleet status` show it: cut to 200 characters a
/// line (an error of a pipeline may quote the scripts it sent).
pub(crate) fn shown_error(error: &ServerError) -> String {
    inflight::config::capped(&error.to_string())
}

/// The state of a budget a process has seen: the epoch and the highest version (see
/// [`scripts`]'s docs). Zero for none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) epoch: u64,
    pub(crate) version: u64,
}

/// The budget's state as one script answered it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Fence {
    pub(crate) epoch: u64,
    pub(crate) version: u64,
    /// How long the budget goes on learning (granting nothing new).
    pub(crate) learning: Duration,
}

impl Seen {
    /// Takes in what a reply said; true when the epoch moved on from one this process had seen
    /// (its running calls must be registered again).
    pub(crate) fn update(&mut self, fence: Fence) -> bool {
        if fence.epoch == self.epoch {
            self.version = self.version.max(fence.version);
            false
        } else if fence.epoch > self.epoch {
            let moved = self.epoch != 0;
            *self = Seen {
                epoch: fence.epoch,
                version: fence.version,
            };
            moved
        } else {
            // A late reply from before the last move: nothing new.
            false
        }
    }
}

/// What an acquire script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Acquired {
    pub(crate) granted: bool,
    /// Leases held across the fleet after the script ran.
    pub(crate) holders: u64,
    /// Expired leases the script took back.
    pub(crate) reclaimed: u64,
    /// When refused: time until the earliest lease expires, or learning ends.
    pub(crate) retry_in: Duration,
    /// When refused: waiters ahead of this one in the fleet's queue.
    pub(crate) ahead: u64,
    pub(crate) fence: Fence,
}

/// What a renewal answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Renewed {
    /// Leases no longer held: their holders lost them.
    pub(crate) lost: Vec<String>,
    /// Leases added back, the state they were granted in being gone.
    pub(crate) readded: u64,
    pub(crate) fence: Fence,
}

/// A report of one process of a share budget: see the shares script in [`scripts`].
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
    pub(crate) seen: Seen,
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
    pub(crate) fence: Fence,
    /// When to report again to give back a turn (others wait), if at all.
    pub(crate) recheck: Option<Duration>,
    /// How long the server keeps the process's entry (and what it reserves) from the report:
    /// a lease, or three for a process that reserves nothing and only waits.
    pub(crate) life: Duration,
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
/// in the background. Each is told what the process has seen of the budget's state, and
/// answers the state it found.
pub(crate) trait Server: fmt::Debug + Send + Sync + 'static {
    /// Gives back leases `releasing` of `budget` (as [`Server::release`]), then takes lease `id`
    /// if a permit is free and nobody waits; otherwise queues it (or keeps its place), to be
    /// granted in its turn and told through [`Server::grants`]. `first`: this is the id's first
    /// ask, so the server holds nothing of it yet (a retry, or an ask again, is never first).
    fn acquire(
        &self,
        budget: &str,
        id: &str,
        first: bool,
        terms: Terms,
        seen: Seen,
        releasing: Vec<Arc<str>>,
    ) -> BoxFuture<'static, Result<Acquired, ServerError>>;

    /// Renews leases `ids` of `budget` (added back if the state they were granted in is gone),
    /// and registers the calls `locals` admitted on the local fallback as holders.
    fn renew(
        &self,
        budget: &str,
        ids: Vec<Arc<str>>,
        locals: Vec<Arc<str>>,
        terms: Terms,
        seen: Seen,
    ) -> BoxFuture<'static, Result<Renewed, ServerError>>;

    /// Gives back leases `ids` of `budget`, held or queued, and hands the freed permits to the
    /// earliest waiters; returns how many were held.
    fn release(
        &self,
        budget: &str,
        ids: Vec<Arc<str>>,
        terms: Terms,
        seen: Seen,
    ) -> BoxFuture<'static, Result<(u64, Fence), ServerError>>;

    /// Gives back leases `ids` of `budget` without a runtime, blocking the calling thread for
    /// at most about `timeout` per step (connect, then the script): what a store dropped with
    /// releases still on the way sends last.
    fn release_blocking(
        &self,
        budget: &str,
        ids: &[Arc<str>],
        terms: Terms,
        seen: Seen,
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

    /// Applies a share budget's report: see the shares script in [`scripts`].
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
    /// characters name this process's grants channel.
    fn lease_id(&self) -> Arc<str>;

    /// The leases waiting in the queue from here, and the word that one was granted.
    fn grants(&self) -> Arc<Grants>;

    /// The server's address, for errors and logs: never a password.
    fn address(&self) -> &str;

    /// What the connection found (`standalone`, `cluster`, `sentinel`), once it was made.
    fn topology(&self) -> Option<&'static str> {
        None
    }

    /// On a cluster, the slot of `budget`'s keys: where errors say the budget lives (the node
    /// the URL names may not be the one that failed).
    fn slot_of(&self, budget: &str) -> Option<u16> {
        (self.topology() == Some("cluster")).then(|| scripts::cluster_slot(budget))
    }

    /// What the server holds of `budget` now, read without changing it.
    fn status(&self, budget: &str) -> BoxFuture<'static, Result<FleetStatus, ServerError>> {
        let _ = budget;
        Box::pin(async {
            Err(Arc::new(std::io::Error::other("this server has no status")) as ServerError)
        })
    }
}

/// A fleet's Redis, whatever its topology (see [`Link`]).
pub(crate) struct RedisServer {
    link: Arc<Link>,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("address", &self.link.shown())
            .finish_non_exhaustive()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn server_error(e: redis::RedisError) -> ServerError {
    Arc::new(e)
}

fn fence(epoch: i64, version: i64, learning: i64) -> Fence {
    Fence {
        epoch: epoch.max(0).unsigned_abs(),
        version: version.max(0).unsigned_abs(),
        learning: Duration::from_millis(learning.max(0).unsigned_abs()),
    }
}

/// A call of a lease script with `budget`'s keys and the arguments every one starts with.
fn lease_call(
    script: &'static redis::Script,
    budget: &str,
    terms: Terms,
    seen: Seen,
) -> redis::ScriptInvocation<'static> {
    let mut call = script.prepare_invoke();
    for key in scripts::lease_keys(budget) {
        call.key(key);
    }
    call.arg(seen.epoch)
        .arg(seen.version)
        .arg(terms.limit)
        .arg(millis(terms.lease));
    call
}

/// The release script for leases `ids` of `budget`.
fn release_call(
    scripts: &'static Scripts,
    budget: &str,
    ids: &[Arc<str>],
    terms: Terms,
    seen: Seen,
) -> redis::ScriptInvocation<'static> {
    let mut call = lease_call(&scripts.release, budget, terms, seen);
    for id in ids {
        call.arg(&**id);
    }
    call
}

impl RedisServer {
    pub(crate) fn new(link: Link) -> RedisServer {
        RedisServer {
            link: Arc::new(link),
        }
    }

    /// Runs the script `make` builds on the connection for `budget`; a failure that a new
    /// connection may cure (a moved primary) drops the connection.
    fn run<T: redis::FromRedisValue + Send + 'static>(
        &self,
        budget: &str,
        make: impl FnOnce(&'static Scripts) -> redis::ScriptInvocation<'static> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, ServerError>> {
        let link = self.link.clone();
        let budget = budget.to_string();
        Box::pin(async move {
            let mut conn: Conn = link.conn(&budget).await.map_err(server_error)?;
            let call = make(conn.scripts());
            match call.invoke_async(&mut conn).await {
                Ok(reply) => Ok(reply),
                Err(e) => {
                    link.failed(&e);
                    Err(server_error(e))
                }
            }
        })
    }
}

impl Server for RedisServer {
    fn acquire(
        &self,
        budget: &str,
        id: &str,
        first: bool,
        terms: Terms,
        seen: Seen,
        releasing: Vec<Arc<str>>,
    ) -> BoxFuture<'static, Result<Acquired, ServerError>> {
        let (name, id) = (budget.to_string(), id.to_string());
        let reply = self.run::<(i64, i64, i64, u8, u64, u64, i64, u64)>(budget, move |s| {
            let mut call = lease_call(&s.acquire, &name, terms, seen);
            call.arg(id)
                .arg(millis(terms.queue_lease))
                .arg(u8::from(first));
            for id in &releasing {
                call.arg(&**id);
            }
            call
        });
        Box::pin(async move {
            let (epoch, version, learning, granted, holders, reclaimed, wait, ahead) =
                reply.await?;
            Ok(Acquired {
                granted: granted == 1,
                holders,
                reclaimed,
                retry_in: Duration::from_millis(wait.max(0).unsigned_abs()),
                ahead,
                fence: fence(epoch, version, learning),
            })
        })
    }

    fn renew(
        &self,
        budget: &str,
        ids: Vec<Arc<str>>,
        locals: Vec<Arc<str>>,
        terms: Terms,
        seen: Seen,
    ) -> BoxFuture<'static, Result<Renewed, ServerError>> {
        let name = budget.to_string();
        let reply = self.run::<(i64, i64, i64, u64, Vec<String>)>(budget, move |s| {
            let mut call = lease_call(&s.renew, &name, terms, seen);
            call.arg(ids.len());
            for id in ids.iter().chain(&locals) {
                call.arg(&**id);
            }
            call
        });
        Box::pin(async move {
            let (epoch, version, learning, readded, lost) = reply.await?;
            Ok(Renewed {
                lost,
                readded,
                fence: fence(epoch, version, learning),
            })
        })
    }

    fn release(
        &self,
        budget: &str,
        ids: Vec<Arc<str>>,
        terms: Terms,
        seen: Seen,
    ) -> BoxFuture<'static, Result<(u64, Fence), ServerError>> {
        let name = budget.to_string();
        let reply = self.run::<(i64, i64, i64, u64)>(budget, move |s| {
            release_call(s, &name, &ids, terms, seen)
        });
        Box::pin(async move {
            let (epoch, version, learning, removed) = reply.await?;
            Ok((removed, fence(epoch, version, learning)))
        })
    }

    fn release_blocking(
        &self,
        budget: &str,
        ids: &[Arc<str>],
        terms: Terms,
        seen: Seen,
        timeout: Duration,
    ) -> Result<u64, ServerError> {
        let (_, _, _, removed): (i64, i64, i64, u64) = self
            .link
            .run_blocking(&|s| release_call(s, budget, ids, terms, seen), timeout)
            .map_err(server_error)?;
        Ok(removed)
    }

    fn gcra(
        &self,
        name: &str,
        interval: Duration,
        burst: u32,
    ) -> BoxFuture<'static, Result<Result<(), Duration>, ServerError>> {
        let key = scripts::rate_key(name);
        let micros = u64::try_from(interval.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        let reply = self.run::<(u8, i64)>(name, move |_| {
            let mut call = scripts::GCRA.key(key);
            call.arg(micros).arg(burst.max(1));
            call
        });
        Box::pin(async move {
            let (allowed, wait) = reply.await?;
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
        let name = budget.to_string();
        let reply = self.run::<(u8, usize, usize, usize, usize, i64, i64, i64, u64, u64)>(
            budget,
            move |s| {
                let mut call = s.shares.prepare_invoke();
                for key in scripts::share_keys(&name) {
                    call.key(key);
                }
                call.arg(&*report.process)
                    .arg(report.wants)
                    .arg(report.holding)
                    .arg(report.seq)
                    .arg(report.limit)
                    .arg(millis(report.lease))
                    .arg(u8::from(report.leaving))
                    .arg(report.seen.epoch)
                    .arg(report.seen.version);
                call
            },
        );
        Box::pin(async move {
            let (applied, cap, has, target, processes, epoch, version, learning, recheck, life) =
                reply.await?;
            Ok(ShareReply {
                applied: applied == 1,
                cap,
                has,
                target,
                processes,
                fence: fence(epoch, version, learning),
                recheck: (recheck > 0).then(|| Duration::from_millis(recheck)),
                life: Duration::from_millis(life),
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
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let (key, epoch) = (scripts::rate_key(name), scripts::epoch_key(name));
        let (interval, max_wait) = (micros(interval).max(1), micros(max_wait).min(1 << 52));
        let reply = self.run::<(u8, i64)>(name, move |_| {
            let mut call = scripts::GCRA.key(key);
            call.key(epoch);
            // The longest wait: far beyond any deadline, and exact in Lua's doubles.
            call.arg(interval).arg(burst.max(1)).arg(max_wait);
            call
        });
        Box::pin(async move {
            let (allowed, wait) = reply.await?;
            let wait = Duration::from_micros(wait.unsigned_abs());
            Ok(if allowed == 1 { Ok(wait) } else { Err(wait) })
        })
    }

    fn lease_id(&self) -> Arc<str> {
        Arc::from(format!(
            "{}{:016x}",
            self.link.token(),
            rand::random::<u64>()
        ))
    }

    fn grants(&self) -> Arc<Grants> {
        self.link.grants().clone()
    }

    fn address(&self) -> &str {
        self.link.shown()
    }

    fn topology(&self) -> Option<&'static str> {
        self.link.kind().map(|k| k.as_str())
    }

    fn status(&self, budget: &str) -> BoxFuture<'static, Result<FleetStatus, ServerError>> {
        let name = budget.to_string();
        let reply = self.run::<StatusReply>(budget, move |_| {
            let mut call = status::STATUS.prepare_invoke();
            for key in scripts::lease_keys(&name) {
                call.key(key);
            }
            call.key(scripts::shares_key(&name));
            call
        });
        let link = self.link.clone();
        Box::pin(async move {
            let mut status = status::from_reply(reply.await?);
            // The script knows its own port only: the host is the one this process reached.
            if status.node.starts_with(':') {
                if let Some(addr) = link.node_addr() {
                    status.node = addr;
                }
            }
            Ok(status)
        })
    }
}
