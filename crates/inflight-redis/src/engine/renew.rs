//! The renewal of the leases this process holds: a round every third of a lease (and at once
//! when an epoch moved or Redis came back), one script call per budget that renews the leases
//! still running and registers the calls the local fallback admitted; leases the server no
//! longer holds, or whose confirmation is older than a lease, are lost. While Redis was last
//! found down, a round with nothing to renew asks whether it is back.

use super::*;
use crate::server::Renewed;

/// One budget's part of a renewal round: the leases to renew, and the local calls to register.
type Round = (Vec<Arc<str>>, Vec<Arc<str>>);

impl Engine {
    /// Makes `budget` known (its health and metrics are published before any call).
    pub(crate) fn register(&self, budget: &str) {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(Arc::from(budget))
            .or_default();
    }

    /// Asks Redis once, for `budget`, whether it answers (an empty renewal): a failure marks
    /// it down as a call's would (its health says so, and the renewal task, started here,
    /// asks again every third of a lease until it answers).
    pub(crate) async fn check(self: &Arc<Self>, budget: &str) {
        self.register(budget);
        self.start_renewing();
        self.renew_budget(&Arc::from(budget), Vec::new(), Vec::new())
            .await;
    }

    /// One renewal of `budget`'s leases `ids` and local calls `locals`, within a round-trip
    /// timeout: answered, the server is up and the budget's state seen; otherwise it is marked
    /// down (`None`). With the answer, when it was asked.
    async fn renew_budget(
        &self,
        budget: &Arc<str>,
        ids: Vec<Arc<str>>,
        locals: Vec<Arc<str>>,
    ) -> Option<(Renewed, Instant)> {
        let asked = Instant::now();
        let within = self.settings.op_timeout.min(self.settings.lease / 3);
        let answer = tokio::time::timeout(
            within,
            self.server
                .renew(budget, ids, locals, self.terms(), self.seen(budget)),
        )
        .await;
        let answered = Instant::now();
        let renewed = match answer {
            Ok(Ok(renewed)) => renewed,
            Ok(Err(error)) => {
                self.mark_down(budget, &error);
                return None;
            }
            Err(_) => {
                // Also the look of a process that holds nothing, while Redis was down: said
                // without naming a renewal.
                let error: ServerError = Arc::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {within:?}"),
                ));
                self.mark_down(budget, &error);
                return None;
            }
        };
        self.round_trip(answered - asked);
        self.recovered();
        self.saw(budget, renewed.fence);
        Some((renewed, asked))
    }

    /// Starts the renewal task once, on the runtime of the first acquire.
    pub(super) fn start_renewing(self: &Arc<Self>) {
        if self.renewing.load(Relaxed) || self.renewing.swap(true, Relaxed) {
            return;
        }
        let Ok(runtime) = Handle::try_current() else {
            self.renewing.store(false, Relaxed);
            return;
        };
        let _ = self.runtime.set(runtime.clone());
        runtime.spawn(renew(Arc::downgrade(self), self.renew_now.clone()));
    }

    /// One renewal round: leases whose confirmation is older than a lease are lost without
    /// asking; the others are renewed, and the local calls registered, one script call per
    /// budget. Leases the server no longer holds (with its epoch unchanged) are lost.
    async fn renew_once(&self) {
        let now = Instant::now();
        // Per budget: the leases to renew, and the local calls to register.
        let mut by_budget: HashMap<Arc<str>, Round> = HashMap::new();
        {
            let held = self.lock_held();
            let mut expired = Vec::new();
            for (id, h) in held.iter() {
                if h.watch.is_lost() {
                    continue;
                }
                if now.duration_since(h.confirmed) >= self.settings.lease {
                    expired.push(id.clone());
                } else {
                    by_budget
                        .entry(h.budget.clone())
                        .or_default()
                        .0
                        .push(id.clone());
                }
            }
            for id in expired {
                if let Some(h) = held.get(&id) {
                    self.lose(h, &id, "its lease expired before it could be renewed");
                }
            }
        }
        if self.skipping().is_none() {
            for local in self
                .locals
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
            {
                by_budget
                    .entry(local.budget.clone())
                    .or_default()
                    .1
                    .push(local.id.clone());
            }
        }
        if by_budget.is_empty() && self.is_down() {
            // Nothing to renew, but Redis was last found down: one budget's empty renewal
            // asks whether it is back, so that an idle process does not say it is down (or
            // refuse its next calls) after it has returned.
            let known = self
                .seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .keys()
                .next()
                .cloned();
            if let Some(budget) = known {
                by_budget.insert(budget, Round::default());
            }
        }
        for (budget, (ids, locals)) in by_budget {
            let Some((renewed, asked)) = self
                .renew_budget(&budget, ids.clone(), locals.clone())
                .await
            else {
                continue;
            };
            if renewed.readded > 0 {
                self.counters.readded.fetch_add(renewed.readded, Relaxed);
                tracing::warn!(
                    budget = %budget,
                    leases = renewed.readded,
                    "fleet budget: leases this process still runs were gone from redis; added back"
                );
            }
            {
                let mut held = self.lock_held();
                for id in &ids {
                    if renewed.lost.iter().any(|l| **l == **id) {
                        if let Some(h) = held.get(id) {
                            self.lose(h, id, "the server no longer holds its lease");
                        }
                    } else if let Some(h) = held.get_mut(id) {
                        h.confirmed = h.confirmed.max(asked);
                    }
                }
            }
            let mut all = self.locals.lock().unwrap_or_else(PoisonError::into_inner);
            for local in all.values_mut() {
                if locals.contains(&local.id) && !local.registered {
                    local.registered = true;
                    self.counters.registered.fetch_add(1, Relaxed);
                }
            }
        }
    }

    /// When the first lease still counted valid expires on this process's clock.
    fn next_expiry(&self) -> Option<Instant> {
        self.lock_held()
            .values()
            .filter(|h| !h.watch.is_lost())
            .map(|h| h.confirmed + self.settings.lease)
            .min()
    }

    /// Tells the holder of `held` that its lease is lost. The entry stays until the call ends,
    /// so that its release is not sent and the fallback still counts it as running.
    fn lose(&self, held: &Held, id: &str, why: &str) {
        if held.watch.is_lost() {
            return;
        }
        held.watch.mark_lost();
        self.counters.lost.fetch_add(1, Relaxed);
        tracing::warn!(budget = %held.budget, lease = id, "fleet budget: lease lost: {why}");
    }
}

/// Renews this process's leases every third of a lease, and at once when asked (an epoch
/// moved, Redis is back), until the store is dropped.
async fn renew(engine: Weak<Engine>, now: Arc<Notify>) {
    let every = match engine.upgrade() {
        Some(e) => (e.settings.lease / 3).max(Duration::from_millis(1)),
        None => return,
    };
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let expiry = match engine.upgrade() {
            Some(e) => e.next_expiry(),
            None => return,
        };
        let expires = async {
            match expiry {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = ticks.tick() => {}
            () = now.notified() => {}
            // A lease not renewed in time is lost when it expires, not at the next round.
            () = expires => {}
        }
        let Some(engine) = engine.upgrade() else {
            return;
        };
        engine.renew_once().await;
    }
}
