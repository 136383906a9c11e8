//! [`CallGuard`]: the call timeout's start, call accounting and outcome reporting around one
//! call that holds a permit, shared by [`Budget::call`](super::Budget::call) and any wrapper
//! that runs calls through a budget.

use std::time::Duration;

use tokio::time::Instant;

use super::engine::Engine;
use super::{OwnedPermit, Permit};
use crate::limit::Outcome;

/// A permit a call runs under.
pub(crate) trait Held {
    fn engine(&self) -> &Engine;
    fn granted_at(&self) -> Option<Instant>;
    fn set_outcome(&mut self, outcome: Outcome);
}

impl Held for Permit<'_> {
    fn engine(&self) -> &Engine {
        Permit::engine(self)
    }

    fn granted_at(&self) -> Option<Instant> {
        Permit::granted_at(self)
    }

    fn set_outcome(&mut self, outcome: Outcome) {
        Permit::set_outcome(self, outcome)
    }
}

impl Held for OwnedPermit {
    fn engine(&self) -> &Engine {
        self.budget().engine()
    }

    fn granted_at(&self) -> Option<Instant> {
        OwnedPermit::granted_at(self)
    }

    fn set_outcome(&mut self, outcome: Outcome) {
        OwnedPermit::set_outcome(self, outcome)
    }
}

/// One call under a permit. Ending it with [`CallGuard::finish`] or [`CallGuard::timed_out`]
/// counts the call and reports its outcome; dropping it unended (the call's future was dropped)
/// gives the permit back as [`Outcome::Ignore`] and counts nothing.
pub(crate) struct CallGuard<P: Held> {
    permit: P,
    start: Instant,
    ended: bool,
}

impl<P: Held> CallGuard<P> {
    /// Starts the call's clock: when the permit was granted if that is known (after a wait it
    /// is, and reading the clock again would cost a read), else now.
    pub(crate) fn start(permit: P) -> CallGuard<P> {
        let start = permit.granted_at().unwrap_or_else(Instant::now);
        CallGuard {
            permit,
            start,
            ended: false,
        }
    }

    /// The call's timeout, if the budget has one.
    pub(crate) fn timeout(&self) -> Option<Duration> {
        self.permit.engine().config.call_timeout
    }

    /// The call returned (`ok`, or with an error), with this outcome for the limit.
    pub(crate) fn finish(mut self, ok: bool, outcome: Outcome) {
        self.ended = true;
        self.permit
            .engine()
            .stats
            .call_ended(self.start.elapsed(), ok);
        self.permit.set_outcome(outcome);
    }

    /// The call ran past its timeout and was dropped: an overload signal.
    pub(crate) fn timed_out(mut self) {
        self.ended = true;
        self.permit
            .engine()
            .stats
            .call_timed_out(self.start.elapsed());
        self.permit.set_outcome(Outcome::Overload);
    }
}

impl<P: Held> Drop for CallGuard<P> {
    fn drop(&mut self) {
        if !self.ended {
            self.permit.engine().stats.call_cancelled();
        }
    }
}
