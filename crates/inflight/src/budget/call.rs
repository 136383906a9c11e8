//! [`run`]: one call under a held permit: the call timeout, started once the permit is held, the
//! call's accounting and the outcome its limit learns from. [`Budget::call`](super::Budget::call),
//! [`Budget::call_with`](super::Budget::call_with) and every wrapper that runs calls through a
//! budget end here.

use std::future::Future;

use tokio::time::Instant;

use super::{CallError, Permit};
use crate::limit::Outcome;

/// Runs `call` under `permit`: within the budget's `call_timeout` if it has one, with `classify`
/// deciding what its result tells the limit (a timeout is always [`Outcome::Overload`]).
///
/// Cancel safe: dropped while the call runs, it drops the call, counts it as cancelled and gives
/// the permit back as [`Outcome::Ignore`].
pub(super) async fn run<C, Fut, T, E>(
    permit: Permit<'_>,
    classify: C,
    call: Fut,
) -> Result<T, CallError<E>>
where
    C: FnOnce(&Result<T, E>) -> Outcome,
    Fut: Future<Output = Result<T, E>>,
{
    let guard = CallGuard::start(permit);
    #[cfg(feature = "tracing")]
    let call = tracing::Instrument::instrument(
        call,
        tracing::debug_span!("inflight.call", budget = %guard.permit.engine().name),
    );
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
    guard.finish(result.is_ok(), classify(&result));
    result.map_err(CallError::Inner)
}

/// One call under a permit. Ending it with [`CallGuard::finish`] or [`CallGuard::timed_out`]
/// counts the call and reports its outcome; dropping it unended (the call's future was dropped)
/// gives the permit back as [`Outcome::Ignore`] and counts the call as cancelled.
struct CallGuard<'a> {
    permit: Permit<'a>,
    start: Instant,
    ended: bool,
}

impl<'a> CallGuard<'a> {
    /// Starts the call's clock: when the permit was granted if that is known (after a wait it
    /// is, and reading the clock again would cost a read), else now.
    fn start(permit: Permit<'a>) -> CallGuard<'a> {
        let start = permit.granted_at().unwrap_or_else(Instant::now);
        CallGuard {
            permit,
            start,
            ended: false,
        }
    }

    /// The call returned (`ok`, or with an error), with this outcome for the limit.
    fn finish(mut self, ok: bool, outcome: Outcome) {
        self.ended = true;
        self.permit
            .engine()
            .stats
            .call_ended(self.start.elapsed(), ok);
        self.permit.set_outcome(outcome);
    }

    /// The call ran past its timeout and was dropped: an overload signal.
    fn timed_out(mut self) {
        self.ended = true;
        self.permit
            .engine()
            .stats
            .call_timed_out(self.start.elapsed());
        self.permit.set_outcome(Outcome::Overload);
    }
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.permit.engine().stats.call_cancelled();
        }
    }
}
