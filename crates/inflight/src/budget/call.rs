//! [`run`]: one call under a held permit: the call timeout, started once the permit is held, the
//! call's accounting and the outcome its limit learns from. [`Budget::call`](super::Budget::call),
//! [`Budget::call_with`](super::Budget::call_with) and every wrapper that runs calls through a
//! budget end here.

use std::future::Future;

use tokio::time::Instant;

use super::engine::Engine;
#[cfg(feature = "tower")]
use super::OwnedPermit;
use super::{CallError, OnLost, Permit};
use crate::limit::{Outcome, Verdict};

/// Runs `call` under `permit`: within the budget's `call_timeout` if it has one, with `classify`
/// deciding what its result tells the limit (a timeout is always [`Outcome::Overload`]).
///
/// Cancel safe: dropped while the call runs, it drops the call, counts it as cancelled and gives
/// the permit back as [`Outcome::Ignore`].
pub(crate) async fn run<C, V, Fut, T, E>(
    permit: Permit<'_>,
    classify: C,
    call: Fut,
) -> Result<T, CallError<E>>
where
    C: FnOnce(&Result<T, E>) -> V,
    V: Into<Verdict>,
    Fut: Future<Output = Result<T, E>>,
{
    let guard = CallGuard::start(permit);
    #[cfg(feature = "tracing")]
    let call = tracing::Instrument::instrument(
        call,
        tracing::debug_span!("inflight.call", budget = %guard.permit.engine().name),
    );
    // A call whose lease is lost is dropped, when the budget says so: `None`.
    let lease = match guard.permit.engine().config.on_lost {
        OnLost::Cancel => guard.permit.lease().cloned(),
        OnLost::Keep => None,
    };
    let call = async move {
        match lease {
            Some(lease) => first_of(call, lease.lost()).await,
            None => Some(call.await),
        }
    };
    let result = match guard.permit.engine().config.call_timeout {
        Some(limit) => match tokio::time::timeout(limit, call).await {
            Ok(result) => result,
            Err(_) => {
                guard.timed_out();
                return Err(CallError::Timeout);
            }
        },
        None => call.await,
    };
    let Some(result) = result else {
        // Dropped unended: counted as cancelled, and the permit goes back as `Ignore` (the
        // store lost the lease; nothing is learned of the dependency).
        drop(guard);
        return Err(CallError::LeaseLost);
    };
    guard.finish(result.is_ok(), classify(&result).into());
    result.map_err(CallError::Inner)
}

/// `call`'s output, or `None` if `stop` completes first (`call` is polled first).
async fn first_of<T>(call: impl Future<Output = T>, stop: impl Future<Output = ()>) -> Option<T> {
    let (mut call, mut stop) = (std::pin::pin!(call), std::pin::pin!(stop));
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(out) = call.as_mut().poll(cx) {
            return std::task::Poll::Ready(Some(out));
        }
        stop.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// A permit a call runs under: borrowed by [`run`], owned by a call that outlives its future
/// ([`HeldCall`](crate::tower::HeldCall)).
pub(crate) trait Held {
    fn engine(&self) -> &Engine;
    fn granted_at(&self) -> Option<Instant>;
    fn set_outcome(&mut self, verdict: Verdict);
}

impl Held for Permit<'_> {
    fn engine(&self) -> &Engine {
        Permit::engine(self)
    }

    fn granted_at(&self) -> Option<Instant> {
        Permit::granted_at(self)
    }

    fn set_outcome(&mut self, verdict: Verdict) {
        Permit::set_outcome(self, verdict)
    }
}

#[cfg(feature = "tower")]
impl Held for OwnedPermit {
    fn engine(&self) -> &Engine {
        self.budget().engine()
    }

    fn granted_at(&self) -> Option<Instant> {
        OwnedPermit::granted_at(self)
    }

    fn set_outcome(&mut self, verdict: Verdict) {
        OwnedPermit::set_outcome(self, verdict)
    }
}

/// One call under a permit. Ending it with [`CallGuard::finish`] or [`CallGuard::timed_out`]
/// counts the call and reports its outcome; dropping it unended (the call's future was dropped)
/// gives the permit back as [`Outcome::Ignore`] and counts the call as cancelled.
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
        CallGuard::start_at(permit, start)
    }

    /// Starts the call's clock at `start`, read by the caller already.
    pub(crate) fn start_at(permit: P, start: Instant) -> CallGuard<P> {
        CallGuard {
            permit,
            start,
            ended: false,
        }
    }

    /// The permit the call runs under.
    #[cfg(feature = "tower")]
    pub(crate) fn permit(&self) -> &P {
        &self.permit
    }

    /// The call returned (`ok`, or with an error), with this verdict for the limit.
    pub(crate) fn finish(mut self, ok: bool, verdict: Verdict) {
        self.ended = true;
        self.permit
            .engine()
            .stats
            .call_ended(self.start.elapsed(), ok, verdict);
        self.permit.set_outcome(verdict);
    }

    /// The call ran past its timeout and was dropped: an overload signal.
    pub(crate) fn timed_out(self) {
        self.timed_out_as(Outcome::Overload);
    }

    /// The call ran past its timeout and was dropped; `outcome` is what that tells the limit.
    pub(crate) fn timed_out_as(mut self, outcome: Outcome) {
        self.ended = true;
        self.permit
            .engine()
            .stats
            .call_timed_out(self.start.elapsed());
        self.permit.set_outcome(outcome.into());
    }
}

impl<P: Held> Drop for CallGuard<P> {
    fn drop(&mut self) {
        if !self.ended {
            self.permit.engine().stats.call_cancelled();
        }
    }
}
