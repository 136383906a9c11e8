//! An in-memory [`Server`] on tokio's clock, with the scripts' semantics (the fleet's queue
//! included), for testing the engine on paused time: waits, deadlines, hand-offs, loss, fallback.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::alloc;
use crate::grants::Grants;
use crate::server::{
    Acquired, Fence, Renewed, Seen, Server, ServerError, ShareReply, ShareReport, Terms,
};

#[derive(Debug, Default)]
pub(crate) struct FakeServer {
    budgets: Mutex<HashMap<String, Budget>>,
    /// Share budgets: process id to its entry, by budget.
    shares: Mutex<HashMap<String, HashMap<String, ShareEntry>>>,
    grants: Arc<Grants>,
    next_id: AtomicU64,
    /// Refuse every call, as an unreachable server would.
    pub(crate) down: AtomicBool,
    /// Ignore renewals, as if the holder were stalled.
    pub(crate) stalled: AtomicBool,
    /// Answer after this delay (ms).
    pub(crate) delay_ms: AtomicU64,
    pub(crate) calls: AtomicU64,
    pub(crate) released: AtomicU64,
    /// Calls of `release_blocking`.
    pub(crate) blocking_releases: AtomicU64,
    /// Each rate limit's theoretical arrival time, as the GCRA script keeps it.
    rates: Mutex<HashMap<String, Instant>>,
    /// Each share budget's epoch.
    share_meta: Mutex<HashMap<String, Meta>>,
    /// Numbers epochs, across wipes.
    epochs: AtomicU64,
}

/// A budget's epoch, version and learning deadline, as the scripts' `fence` keeps them.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Meta {
    epoch: u64,
    version: u64,
    learn: Option<Instant>,
}

impl Meta {
    /// The scripts' `fence`: whether the caller is behind.
    fn fence(&mut self, seen: Seen, lease: Duration, now: Instant, epochs: &AtomicU64) -> bool {
        if self.epoch == 0 {
            self.epoch = epochs.fetch_add(1, Relaxed) + 1_000;
            self.version = 0;
            self.learn = None;
            if seen.epoch != 0 {
                self.learn = Some(now + lease);
                return true;
            }
            return false;
        }
        if seen.epoch > self.epoch || (seen.epoch == self.epoch && seen.version > self.version) {
            self.epoch = (epochs.fetch_add(1, Relaxed) + 1_000).max(seen.epoch + 1);
            self.learn = Some(now + lease);
            return true;
        }
        seen.epoch != 0 && seen.epoch < self.epoch
    }

    fn learning(&self, now: Instant) -> bool {
        self.learn.is_some_and(|l| now < l)
    }

    fn out(&self, now: Instant) -> Fence {
        Fence {
            epoch: self.epoch,
            version: self.version,
            learning: self
                .learn
                .map_or(Duration::ZERO, |l| l.saturating_duration_since(now)),
        }
    }
}

/// A process's entry in a share budget, as the `SHARES` script keeps it.
#[derive(Debug, Clone, Copy)]
struct ShareEntry {
    has: usize,
    wants: usize,
    expiry: Instant,
    seq: u64,
}

#[derive(Debug, Default)]
struct Budget {
    /// Lease id to expiry.
    holders: HashMap<String, Instant>,
    /// Waiting lease ids by arrival, with the moment each counts as gone.
    queue: Vec<(String, Instant)>,
    meta: Meta,
}

impl Budget {
    /// The scripts' `promote`: drops gone waiters, reclaims expired leases when full, then
    /// grants the earliest waiters while there is room. Returns the ids granted, and how many
    /// leases were reclaimed.
    fn promote(&mut self, now: Instant, terms: Terms) -> (Vec<String>, u64) {
        self.queue.retain(|(_, gone)| *gone > now);
        let mut reclaimed = 0;
        if self.holders.len() >= terms.limit {
            let before = self.holders.len();
            self.holders.retain(|_, expiry| *expiry > now);
            reclaimed = (before - self.holders.len()) as u64;
        }
        let mut granted = Vec::new();
        if self.meta.learning(now) {
            return (granted, reclaimed);
        }
        while self.holders.len() < terms.limit && !self.queue.is_empty() {
            let (id, _) = self.queue.remove(0);
            self.holders.insert(id.clone(), now + terms.lease);
            granted.push(id);
        }
        if !granted.is_empty() {
            self.meta.version += 1;
        }
        (granted, reclaimed)
    }
}

impl FakeServer {
    /// What a renewal does on the server, at once.
    fn renew_now(
        &self,
        budget: String,
        ids: Vec<Arc<str>>,
        locals: Vec<Arc<str>>,
        terms: Terms,
        seen: Seen,
    ) -> Renewed {
        let now = Instant::now();
        let lease = terms.lease;
        let mut all = self.budgets.lock().unwrap();
        let b = all.entry(budget).or_default();
        let behind = b.meta.fence(seen, lease, now, &self.epochs);
        let mut lost = Vec::new();
        let mut readded = 0;
        for id in ids {
            match b.holders.get_mut(&*id) {
                Some(expiry) if *expiry > now || behind => *expiry = now + lease,
                None if behind => {
                    b.holders.insert(id.to_string(), now + lease);
                    readded += 1;
                }
                _ => {
                    b.holders.remove(&*id);
                    lost.push(id.to_string());
                }
            }
        }
        for id in locals {
            b.holders.insert(id.to_string(), now + lease);
        }
        if readded > 0 {
            let until = now + lease;
            b.meta.learn = Some(b.meta.learn.map_or(until, |l| l.max(until)));
        }
        b.meta.version += 1;
        Renewed {
            lost,
            readded,
            fence: b.meta.out(now),
        }
    }

    pub(crate) fn holders(&self, budget: &str) -> usize {
        let now = Instant::now();
        self.budgets
            .lock()
            .unwrap()
            .get(budget)
            .map_or(0, |b| b.holders.values().filter(|e| **e > now).count())
    }

    pub(crate) fn queued(&self, budget: &str) -> usize {
        self.budgets
            .lock()
            .unwrap()
            .get(budget)
            .map_or(0, |b| b.queue.len())
    }

    /// Drops every lease and waiter, as a restart does.
    pub(crate) fn wipe(&self) {
        self.budgets.lock().unwrap().clear();
        self.shares.lock().unwrap().clear();
        self.share_meta.lock().unwrap().clear();
    }

    /// Whether budget `budget` is learning now.
    pub(crate) fn learning(&self, budget: &str) -> bool {
        let now = Instant::now();
        self.budgets
            .lock()
            .unwrap()
            .get(budget)
            .is_some_and(|b| b.meta.learning(now))
            || self
                .share_meta
                .lock()
                .unwrap()
                .get(budget)
                .is_some_and(|m| m.learning(now))
    }

    /// The permits reserved for live processes of share budget `budget`, by process.
    pub(crate) fn shares_held(&self, budget: &str) -> HashMap<String, usize> {
        let now = Instant::now();
        self.shares
            .lock()
            .unwrap()
            .get(budget)
            .map_or_else(HashMap::new, |b| {
                b.iter()
                    .filter(|(_, e)| e.expiry > now)
                    .map(|(id, e)| (id.clone(), e.has))
                    .collect()
            })
    }

    /// The `SHARES` script on tokio's clock; returns the reply and the processes to tell.
    fn report(&self, budget: &str, r: &ShareReport) -> (ShareReply, Vec<String>) {
        let now = Instant::now();
        let (behind, learning, meta) = {
            let mut metas = self.share_meta.lock().unwrap();
            let meta = metas.entry(budget.to_string()).or_default();
            let behind = meta.fence(r.seen, r.lease, now, &self.epochs);
            (behind, meta.learning(now), *meta)
        };
        let mut all = self.shares.lock().unwrap();
        let b = all.entry(budget.to_string()).or_default();
        b.retain(|id, e| e.expiry > now || **id == *r.process);
        let mine = b.get(&*r.process).copied().filter(|e| e.expiry > now);
        let others: Vec<(String, alloc::Entry)> = b
            .iter()
            .filter(|(id, _)| **id != *r.process)
            .map(|(id, e)| {
                (
                    id.clone(),
                    alloc::Entry {
                        has: e.has,
                        wants: e.wants,
                    },
                )
            })
            .collect();
        if mine.is_some_and(|m| r.seq <= m.seq) && !behind {
            let reply = ShareReply {
                applied: false,
                cap: 0,
                has: 0,
                target: 0,
                processes: others.len() + 1,
                fence: meta.out(now),
                recheck: None,
                life: mine.map_or(Duration::ZERO, |m| m.expiry - now),
            };
            return (reply, Vec::new());
        }
        let (holding, wants) = if r.leaving {
            (r.holding, 0)
        } else {
            (r.holding, r.wants)
        };
        let entries: Vec<alloc::Entry> = others.iter().map(|(_, e)| *e).collect();
        let before = mine.map_or(0, |m| m.has);
        let mut out = alloc::report(r.limit, &entries, before, holding, wants);
        if learning || behind {
            // Its calls run: they count whole, and no share grows while the budget learns.
            out.has = holding;
            out.cap = out.has.min(out.target);
        }
        // As the script: an entry that reserves nothing and only waits for a turn (its base
        // is 0: more processes want than there are permits) lives three leases.
        let wanting = others.iter().filter(|(_, e)| e.wants > 0).count() + usize::from(wants > 0);
        let life = if r.leaving && holding == 0 {
            Duration::ZERO
        } else if out.has == 0 && wants > 0 && r.limit < wanting {
            r.lease * 3
        } else {
            r.lease
        };
        if r.leaving && holding == 0 {
            b.remove(&*r.process);
        } else {
            b.insert(
                r.process.to_string(),
                ShareEntry {
                    has: out.has,
                    wants,
                    expiry: now + life,
                    seq: r.seq,
                },
            );
        }
        let mut all_wants: Vec<usize> = entries.iter().map(|e| e.wants).collect();
        all_wants.push(wants);
        let targets = alloc::targets(r.limit, &all_wants);
        let tell = others
            .iter()
            .zip(&targets)
            .filter(|((_, e), &t)| {
                (out.cap < out.target && e.has > t) || (out.has < before && e.has < t)
            })
            .map(|((id, _), _)| id.clone())
            .collect();
        let meta = {
            let mut metas = self.share_meta.lock().unwrap();
            let meta = metas.entry(budget.to_string()).or_default();
            meta.version += 1;
            *meta
        };
        let reply = ShareReply {
            applied: true,
            cap: out.cap,
            has: out.has,
            target: out.target,
            processes: others.len() + 1,
            fence: meta.out(now),
            recheck: None,
            life,
        };
        (reply, tell)
    }

    fn remove(&self, budget: &str, ids: &[Arc<str>], terms: Terms, seen: Seen) -> (u64, Fence) {
        let now = Instant::now();
        let (granted, fence) = {
            let mut all = self.budgets.lock().unwrap();
            let b = all.entry(budget.to_string()).or_default();
            b.meta.fence(seen, terms.lease, now, &self.epochs);
            let mut removed = 0;
            for id in ids {
                removed += u64::from(b.holders.remove(&**id).is_some());
                b.queue.retain(|(q, _)| **q != **id);
            }
            self.released.fetch_add(removed, Relaxed);
            let (granted, _) = b.promote(now, terms);
            ((granted, removed), b.meta.out(now))
        };
        for id in &granted.0 {
            self.grants.grant(id);
        }
        (granted.1, fence)
    }

    fn call(&self) -> Result<Duration, ServerError> {
        self.calls.fetch_add(1, Relaxed);
        if self.down.load(Relaxed) {
            return Err(Arc::new(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "connection refused",
            )));
        }
        Ok(Duration::from_millis(self.delay_ms.load(Relaxed)))
    }
}

/// A server shared with the test that drives it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Shared(pub(crate) Arc<FakeServer>);

impl Server for Shared {
    fn acquire(
        &self,
        budget: &str,
        id: &str,
        first: bool,
        terms: Terms,
        seen: Seen,
        releasing: Vec<Arc<str>>,
    ) -> BoxFuture<'static, Result<Acquired, ServerError>> {
        let (server, budget, id) = (self.0.clone(), budget.to_string(), id.to_string());
        Box::pin(async move {
            let delay = server.call()?;
            // The server acts at once; only its answer is slow, so a caller that gives up
            // waiting may hold a lease it never heard of.
            let (acquired, promoted) = {
                let now = Instant::now();
                let mut all = server.budgets.lock().unwrap();
                let b = all.entry(budget).or_default();
                for gone in &releasing {
                    let held = b.holders.remove(&**gone).is_some();
                    server.released.fetch_add(u64::from(held), Relaxed);
                    b.queue.retain(|(q, _)| **q != **gone);
                }
                // The script skips its lookups of an id asked for the first time.
                assert!(
                    !first
                        || !(b.holders.contains_key(&id) || b.queue.iter().any(|(q, _)| *q == id)),
                    "lease {id} asked for as new, but the server holds it"
                );
                b.meta.fence(seen, terms.lease, now, &server.epochs);
                let (promoted, reclaimed) = b.promote(now, terms);
                let learning = b.meta.learning(now);
                let granted =
                    b.holders.contains_key(&id) || (b.holders.len() < terms.limit && !learning);
                if granted {
                    b.holders.insert(id.clone(), now + terms.lease);
                    b.meta.version += 1;
                } else {
                    match b.queue.iter_mut().find(|(q, _)| *q == id) {
                        Some(entry) => entry.1 = now + terms.queue_lease,
                        None => b.queue.push((id.clone(), now + terms.queue_lease)),
                    }
                }
                let retry_in = if learning {
                    b.meta.out(now).learning
                } else {
                    b.holders
                        .values()
                        .min()
                        .map_or(Duration::ZERO, |e| e.saturating_duration_since(now))
                };
                let ahead = b.queue.iter().position(|(q, _)| *q == id).unwrap_or(0);
                let acquired = Acquired {
                    granted,
                    holders: b.holders.len() as u64,
                    reclaimed,
                    retry_in: if granted { Duration::ZERO } else { retry_in },
                    ahead: ahead as u64,
                    fence: b.meta.out(now),
                };
                (acquired, promoted)
            };
            for id in &promoted {
                server.grants.grant(id);
            }
            tokio::time::sleep(delay).await;
            Ok(acquired)
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
        let (server, budget) = (self.0.clone(), budget.to_string());
        Box::pin(async move {
            // Slow as the acquires are: acts at once, answers late.
            let delay = server.call()?;
            if server.stalled.load(Relaxed) {
                return std::future::pending().await;
            }
            let renewed = server.renew_now(budget, ids, locals, terms, seen);
            tokio::time::sleep(delay).await;
            Ok(renewed)
        })
    }

    fn release(
        &self,
        budget: &str,
        ids: Vec<Arc<str>>,
        terms: Terms,
        seen: Seen,
    ) -> BoxFuture<'static, Result<(u64, Fence), ServerError>> {
        let (server, budget) = (self.0.clone(), budget.to_string());
        Box::pin(async move {
            server.call()?;
            Ok(server.remove(&budget, &ids, terms, seen))
        })
    }

    fn release_blocking(
        &self,
        budget: &str,
        ids: &[Arc<str>],
        terms: Terms,
        seen: Seen,
        _timeout: Duration,
    ) -> Result<u64, ServerError> {
        self.0.call()?;
        self.0.blocking_releases.fetch_add(1, Relaxed);
        Ok(self.0.remove(budget, ids, terms, seen).0)
    }

    fn gcra(
        &self,
        _name: &str,
        _interval: Duration,
        _burst: u32,
    ) -> BoxFuture<'static, Result<Result<(), Duration>, ServerError>> {
        Box::pin(async { Ok(Ok(())) })
    }

    fn shares(
        &self,
        budget: &str,
        report: ShareReport,
    ) -> BoxFuture<'static, Result<ShareReply, ServerError>> {
        let (server, budget) = (self.0.clone(), budget.to_string());
        Box::pin(async move {
            let delay = server.call()?;
            if server.stalled.load(Relaxed) {
                return std::future::pending().await;
            }
            let (reply, tell) = server.report(&budget, &report);
            for id in &tell {
                server.grants.grant(id);
            }
            tokio::time::sleep(delay).await;
            Ok(reply)
        })
    }

    fn reserve_rate(
        &self,
        name: &str,
        interval: Duration,
        burst: u32,
        max_wait: Duration,
    ) -> BoxFuture<'static, Result<Result<Duration, Duration>, ServerError>> {
        let (server, name) = (self.0.clone(), name.to_string());
        Box::pin(async move {
            let delay = server.call()?;
            // The script's arithmetic: the slot is `tat - (burst - 1) x interval`, or now.
            let reserved = {
                let now = Instant::now();
                let mut rates = server.rates.lock().unwrap();
                let tat = rates.get(&name).copied().unwrap_or(now).max(now);
                let tolerance = interval.saturating_mul(burst.max(1) - 1);
                let wait = tat.checked_sub(tolerance).unwrap_or(now).max(now) - now;
                if wait > max_wait {
                    Err(wait)
                } else {
                    rates.insert(name, tat + interval);
                    Ok(wait)
                }
            };
            tokio::time::sleep(delay).await;
            Ok(reserved)
        })
    }

    fn lease_id(&self) -> Arc<str> {
        let n = self.0.next_id.fetch_add(1, Relaxed);
        Arc::from(format!("{n:032x}"))
    }

    fn grants(&self) -> Arc<Grants> {
        self.0.grants.set_live(true);
        self.0.grants.clone()
    }

    fn address(&self) -> &str {
        "fake:0"
    }
}
