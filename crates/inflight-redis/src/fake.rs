//! An in-memory [`Server`] on tokio's clock, with the scripts' semantics, for testing the
//! engine on paused time: waits, deadlines, wake-ups, loss, fallback.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::server::{Acquired, Server, ServerError};

#[derive(Debug, Default)]
pub(crate) struct FakeServer {
    /// Lease id to expiry, per budget.
    holders: Mutex<HashMap<String, HashMap<String, Instant>>>,
    releases: Mutex<HashMap<String, Arc<Notify>>>,
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
}

impl FakeServer {
    pub(crate) fn holders(&self, budget: &str) -> usize {
        let now = Instant::now();
        self.holders
            .lock()
            .unwrap()
            .get(budget)
            .map_or(0, |h| h.values().filter(|e| **e > now).count())
    }

    /// Drops every lease, as a restart does.
    pub(crate) fn wipe(&self) {
        self.holders.lock().unwrap().clear();
    }

    fn remove(&self, budget: &str, ids: &[Arc<str>]) -> u64 {
        let mut all = self.holders.lock().unwrap();
        let Some(holders) = all.get_mut(budget) else {
            return 0;
        };
        let removed = ids
            .iter()
            .filter(|id| holders.remove(&***id).is_some())
            .count() as u64;
        self.released.fetch_add(removed, Relaxed);
        removed
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
        limit: usize,
        lease: Duration,
    ) -> BoxFuture<'static, Result<Acquired, ServerError>> {
        let (server, budget, id) = (self.0.clone(), budget.to_string(), id.to_string());
        Box::pin(async move {
            let delay = server.call()?;
            // The server acts at once; only its answer is slow, so a caller that gives up
            // waiting may hold a lease it never heard of.
            let (granted, holders, reclaimed, retry_in) = {
                let now = Instant::now();
                let mut all = server.holders.lock().unwrap();
                let holders = all.entry(budget).or_default();
                let before = holders.len();
                holders.retain(|_, expiry| *expiry > now);
                let reclaimed = (before - holders.len()) as u64;
                let granted = holders.contains_key(&id) || holders.len() < limit;
                if granted {
                    holders.insert(id, now + lease);
                }
                let retry_in = holders
                    .values()
                    .min()
                    .map_or(Duration::ZERO, |e| e.duration_since(now));
                (granted, holders.len() as u64, reclaimed, retry_in)
            };
            tokio::time::sleep(delay).await;
            Ok(Acquired {
                granted,
                holders,
                reclaimed,
                retry_in: if granted { Duration::ZERO } else { retry_in },
            })
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
            let mut all = server.holders.lock().unwrap();
            let holders = all.entry(budget).or_default();
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
    ) -> BoxFuture<'static, Result<u64, ServerError>> {
        let (server, budget) = (self.0.clone(), budget.to_string());
        let notify = self.releases(&budget);
        Box::pin(async move {
            server.call()?;
            let removed = server.remove(&budget, &ids);
            if removed > 0 {
                notify.notify_waiters();
            }
            Ok(removed)
        })
    }

    fn release_blocking(
        &self,
        budget: &str,
        ids: &[Arc<str>],
        _timeout: Duration,
    ) -> Result<u64, ServerError> {
        self.0.call()?;
        self.0.blocking_releases.fetch_add(1, Relaxed);
        let removed = self.0.remove(budget, ids);
        if removed > 0 {
            self.releases(budget).notify_waiters();
        }
        Ok(removed)
    }

    fn gcra(
        &self,
        _name: &str,
        _interval: Duration,
        _burst: u32,
    ) -> BoxFuture<'static, Result<Result<(), Duration>, ServerError>> {
        Box::pin(async { Ok(Ok(())) })
    }

    fn releases(&self, budget: &str) -> Arc<Notify> {
        self.0
            .releases
            .lock()
            .unwrap()
            .entry(budget.to_string())
            .or_default()
            .clone()
    }

    fn address(&self) -> &str {
        "fake:0"
    }
}
