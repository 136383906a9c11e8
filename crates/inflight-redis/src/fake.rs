//! An in-memory [`Server`] on tokio's clock, with the scripts' semantics (the fleet's queue
//! included), for testing the engine on paused time: waits, deadlines, hand-offs, loss, fallback.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::grants::Grants;
use crate::server::{Acquired, Server, ServerError, ShareReply, ShareReport, Terms};
use crate::shares::alloc;

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
        while self.holders.len() < terms.limit && !self.queue.is_empty() {
            let (id, _) = self.queue.remove(0);
            self.holders.insert(id.clone(), now + terms.lease);
            granted.push(id);
        }
        (granted, reclaimed)
    }
}

impl FakeServer {
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
        if mine.is_some_and(|m| r.seq <= m.seq) {
            let reply = ShareReply {
                applied: false,
                cap: 0,
                has: 0,
                target: 0,
                processes: others.len() + 1,
            };
            return (reply, Vec::new());
        }
        let (holding, wants) = if r.leaving {
            (r.holding, 0)
        } else {
            (r.holding, r.wants)
        };
        let entries: Vec<alloc::Entry> = others.iter().map(|(_, e)| *e).collect();
        let out = alloc::report(r.limit, &entries, holding, wants);
        if r.leaving && holding == 0 {
            b.remove(&*r.process);
        } else {
            b.insert(
                r.process.to_string(),
                ShareEntry {
                    has: out.has,
                    wants,
                    expiry: now + r.lease,
                    seq: r.seq,
                },
            );
        }
        let mut all_wants: Vec<usize> = entries.iter().map(|e| e.wants).collect();
        all_wants.push(wants);
        let targets = alloc::targets(r.limit, &all_wants);
        let before = mine.map_or(0, |m| m.has);
        let tell = others
            .iter()
            .zip(&targets)
            .filter(|((_, e), &t)| {
                (out.cap < out.target && e.has > t) || (out.has < before && e.has < t)
            })
            .map(|((id, _), _)| id.clone())
            .collect();
        let reply = ShareReply {
            applied: true,
            cap: out.cap,
            has: out.has,
            target: out.target,
            processes: others.len() + 1,
        };
        (reply, tell)
    }

    fn remove(&self, budget: &str, ids: &[Arc<str>], terms: Terms) -> u64 {
        let granted = {
            let mut all = self.budgets.lock().unwrap();
            let b = all.entry(budget.to_string()).or_default();
            let mut removed = 0;
            for id in ids {
                removed += u64::from(b.holders.remove(&**id).is_some());
                b.queue.retain(|(q, _)| **q != **id);
            }
            self.released.fetch_add(removed, Relaxed);
            let (granted, _) = b.promote(Instant::now(), terms);
            (granted, removed)
        };
        for id in &granted.0 {
            self.grants.grant(id);
        }
        granted.1
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
        terms: Terms,
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
                let (promoted, reclaimed) = b.promote(now, terms);
                let granted = b.holders.contains_key(&id) || b.holders.len() < terms.limit;
                if granted {
                    b.holders.insert(id.clone(), now + terms.lease);
                } else {
                    match b.queue.iter_mut().find(|(q, _)| *q == id) {
                        Some(entry) => entry.1 = now + terms.queue_lease,
                        None => b.queue.push((id.clone(), now + terms.queue_lease)),
                    }
                }
                let retry_in = b
                    .holders
                    .values()
                    .min()
                    .map_or(Duration::ZERO, |e| e.duration_since(now));
                let ahead = b.queue.iter().position(|(q, _)| *q == id).unwrap_or(0);
                let acquired = Acquired {
                    granted,
                    holders: b.holders.len() as u64,
                    reclaimed,
                    retry_in: if granted { Duration::ZERO } else { retry_in },
                    ahead: ahead as u64,
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
        lease: Duration,
    ) -> BoxFuture<'static, Result<Vec<String>, ServerError>> {
        let (server, budget) = (self.0.clone(), budget.to_string());
        Box::pin(async move {
            server.call()?;
            if server.stalled.load(Relaxed) {
                return std::future::pending().await;
            }
            let now = Instant::now();
            let mut all = server.budgets.lock().unwrap();
            let holders = &mut all.entry(budget).or_default().holders;
            let mut lost = Vec::new();
            for id in ids {
                match holders.get_mut(&*id) {
                    Some(expiry) if *expiry > now => *expiry = now + lease,
                    _ => {
                        holders.remove(&*id);
                        lost.push(id.to_string());
                    }
                }
            }
            Ok(lost)
        })
    }

    fn release(
        &self,
        budget: &str,
        ids: Vec<Arc<str>>,
        terms: Terms,
    ) -> BoxFuture<'static, Result<u64, ServerError>> {
        let (server, budget) = (self.0.clone(), budget.to_string());
        Box::pin(async move {
            server.call()?;
            Ok(server.remove(&budget, &ids, terms))
        })
    }

    fn release_blocking(
        &self,
        budget: &str,
        ids: &[Arc<str>],
        terms: Terms,
        _timeout: Duration,
    ) -> Result<u64, ServerError> {
        self.0.call()?;
        self.0.blocking_releases.fetch_add(1, Relaxed);
        Ok(self.0.remove(budget, ids, terms))
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
