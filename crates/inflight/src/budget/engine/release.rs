//! Releasing: a permit going back, the sample its limit learns from, and the pause a
//! retry-after starts.

use super::*;

impl Engine {
    /// Pauses the budget for `delay` from now (no new permit before then), for an overload
    /// reported by a call granted at `granted`, and starts or cuts the pace.
    pub(crate) fn pause_for(&self, delay: Duration, granted: Option<Instant>) {
        let now = Instant::now();
        if now.checked_add(delay).is_some() {
            self.pause.refused(now, granted, delay);
            self.stats.paused_by_dependency();
        }
    }

    /// Takes back a permit: the lease goes back to the store, the limit learns from the call,
    /// then the local permit is returned.
    #[inline]
    pub(crate) fn release(&self, grant: &mut Grant, verdict: Verdict) {
        if let Some(delay) = verdict.pause() {
            // Before the permit goes back: the pause holds for whoever it would have gone to.
            self.pause_for(delay, grant.granted);
        } else if self.pause.is_set() {
            // The first answer ends a cold start; a success may grow the pace.
            self.pause
                .answered(grant.granted, verdict.outcome() == Outcome::Success);
        }
        if self.plain_release {
            self.permits.give_back();
            return;
        }
        self.release_learning(grant, verdict);
    }

    pub(super) fn release_learning(&self, grant: &mut Grant, verdict: Verdict) {
        let outcome = verdict.outcome();
        if let (Some(lease), Some(store)) = (grant.lease.take(), &self.store) {
            self.leased.fetch_sub(1, Relaxed);
            store.release(&self.name, *lease);
        }
        if let (Some(learner), Some(granted)) = (&self.learner, grant.granted) {
            let now = Instant::now();
            let sample = Sample::new(now - granted, grant.in_flight, outcome);
            let mut learner = learner.lock().unwrap_or_else(PoisonError::into_inner);
            learner.limit.on_sample(&sample);
            let new = learner.limit.current().clamp(1, learner.limit.max().max(1));
            if new != self.permits.limit() {
                self.permits.resize(new);
                if learner.changes.len() >= MAX_CHANGES {
                    learner.changes.drain(..MAX_CHANGES / 2);
                }
                learner.changes.push(LimitChange {
                    at: now,
                    limit: new,
                });
            }
        }
        if self.class_queue.is_some() {
            self.stats.class(grant.class).released();
        }
        // After a resize: a grown limit's new permits go to the class queue's waiters with this
        // one.
        self.give_back();
    }
}
