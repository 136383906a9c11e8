//! [`HeldCall`]: a call under a permit whose end comes after its future, such as an HTTP
//! response whose body is still streaming when its headers are returned.

use std::fmt;

use tokio::time::Instant;

use crate::budget::CallGuard;
use crate::limit::{Outcome, Verdict};
use crate::{AcquireError, Budget, OwnedPermit};

/// A call holding a permit of its budget until it is ended by hand: with [`HeldCall::finish`],
/// with [`HeldCall::timed_out`], or by being dropped (counted as cancelled).
///
/// [`BudgetService`](super::BudgetService) gives the permit back when the inner service's
/// future returns. A response that keeps its dependency busy after that (a body streamed after
/// the headers) can keep the permit instead: take a `HeldCall`, move it into the body, and end
/// it when the body ends. The call is counted, timed and fed to the budget's limit exactly as a
/// call through [`Budget::call`] is; the call timeout starts once the permit is held, and
/// [`HeldCall::deadline`] says when it runs out.
///
/// # Examples
///
/// ```
/// use inflight::limit::Outcome;
/// use inflight::tower::HeldCall;
/// use inflight::{Budget, BudgetConfig};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let budget = Budget::new("downloads", BudgetConfig::new(1)).unwrap();
/// let call = HeldCall::start(&budget).await.unwrap();
/// // ... the headers went out, the body streams: the permit is still held.
/// assert_eq!(budget.in_flight(), 1);
/// call.finish(true, Outcome::Success); // the body ended
/// assert_eq!(budget.in_flight(), 0);
/// assert_eq!(budget.snapshot().calls_ok, 1);
/// # }
/// ```
pub struct HeldCall {
    guard: CallGuard<OwnedPermit>,
    deadline: Option<Instant>,
    budget: Budget,
}

impl HeldCall {
    /// Waits for a permit of `budget` and starts the call (and its call timeout).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Budget::acquire`].
    ///
    /// # Errors
    ///
    /// As [`Budget::acquire`].
    pub async fn start(budget: &Budget) -> Result<HeldCall, AcquireError> {
        let permit = budget.acquire_owned().await?;
        Ok(HeldCall::started(budget, permit))
    }

    /// [`HeldCall::start`] in a priority class of the budget (see
    /// [`Budget::acquire_in`]): a name the budget has no class for is its default class.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Budget::acquire`].
    ///
    /// # Errors
    ///
    /// As [`Budget::acquire_in`].
    pub async fn start_in(budget: &Budget, class: &str) -> Result<HeldCall, AcquireError> {
        let permit = budget.acquire_owned_in(class).await?;
        Ok(HeldCall::started(budget, permit))
    }

    /// The call under `permit`, taken with [`Budget::acquire_owned`] (or `_in`): its call
    /// timeout runs from the grant. For a caller that looks at something else between the
    /// grant and the call's start: a permit dropped before it became a call is given back
    /// without being counted as a call (a call dropped unended counts as cancelled).
    ///
    /// ```
    /// use inflight::limit::Outcome;
    /// use inflight::tower::HeldCall;
    /// use inflight::{Budget, BudgetConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let budget = Budget::new("records", BudgetConfig::new(1)).unwrap();
    /// let permit = budget.acquire_owned().await.unwrap();
    /// drop(permit); // not wanted after all: not a call
    /// let call = HeldCall::from_permit(budget.acquire_owned().await.unwrap());
    /// call.finish(true, Outcome::Success);
    /// let counted = budget.snapshot();
    /// assert_eq!((counted.calls_ok, counted.calls_cancelled), (1, 0));
    /// # }
    /// ```
    pub fn from_permit(permit: OwnedPermit) -> HeldCall {
        let budget = permit.budget().clone();
        HeldCall::started(&budget, permit)
    }

    /// The call under `permit`, just granted.
    fn started(budget: &Budget, permit: OwnedPermit) -> HeldCall {
        let start = permit.granted_at().unwrap_or_else(Instant::now);
        let deadline = budget.call_timeout().and_then(|t| start.checked_add(t));
        HeldCall {
            guard: CallGuard::start_at(permit, start),
            deadline,
            budget: budget.clone(),
        }
    }

    /// When the budget's call timeout runs out for this call, if it has one.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The budget the permit is from.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The lease the call holds in the budget's store, if the budget has one (see
    /// [`Permit::lease`](crate::Permit::lease)).
    pub fn lease(&self) -> Option<&crate::store::Lease> {
        self.guard.permit().lease()
    }

    /// The lease to watch, when the budget drops a call whose lease is lost
    /// ([`OnLost::Cancel`](crate::OnLost::Cancel)): a caller that holds the call past its
    /// future (a streamed body) ends it when [`Lease::lost`](crate::store::Lease::lost)
    /// returns.
    pub fn cancels_on(&self) -> Option<crate::store::Lease> {
        match self.budget.config().on_lost_policy() {
            crate::OnLost::Cancel => self.lease().cloned(),
            _ => None,
        }
    }

    /// Ends the call: it succeeded (`ok`) or failed, and `outcome` is what it tells the
    /// budget's limit (a [`Verdict`] with a retry-after also pauses the budget). The permit
    /// goes back.
    pub fn finish(self, ok: bool, outcome: impl Into<Verdict>) {
        self.guard.finish(ok, outcome.into());
    }

    /// Ends the call as having run past its call timeout: counted as a call timeout and an
    /// overload signal. The permit goes back.
    pub fn timed_out(self) {
        self.guard.timed_out();
    }

    /// Ends the call as having run past its call timeout, counted as a call timeout, with
    /// `outcome` for the budget's limit: [`Outcome::Ignore`] for a dependency whose slow calls
    /// say nothing of its load. The permit goes back.
    pub fn timed_out_as(self, outcome: Outcome) {
        self.guard.timed_out_as(outcome);
    }
}

impl fmt::Debug for HeldCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldCall")
            .field("budget", &self.budget.name())
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::HeldCall;
    #[cfg(feature = "adaptive")]
    use crate::limit::Adaptive;
    use crate::limit::Outcome;
    use crate::{AcquireError, Budget, BudgetConfig};

    #[tokio::test(start_paused = true)]
    async fn the_permit_is_held_until_the_call_ends_and_its_time_is_recorded() {
        let budget = Budget::new("b", BudgetConfig::new(1).max_queued(0)).unwrap();
        let call = HeldCall::start(&budget).await.unwrap();
        assert_eq!(
            HeldCall::start(&budget).await.unwrap_err(),
            AcquireError::QueueFull { retry_after: None },
            "no call measured yet: no estimate"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        call.finish(true, Outcome::Success);
        let s = budget.snapshot();
        assert_eq!((s.in_flight, s.calls_ok, s.rejected), (0, 1, 1));
        assert_eq!(s.call.max, Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_starts_once_the_permit_is_held() {
        let budget = Budget::new(
            "b",
            BudgetConfig::new(1).call_timeout(Duration::from_millis(250)),
        )
        .unwrap();
        let first = budget.acquire_owned().await.unwrap();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            drop(first);
        });
        let asked = tokio::time::Instant::now();
        let call = HeldCall::start(&budget).await.unwrap();
        assert_eq!(call.deadline().unwrap() - asked, Duration::from_millis(650));
        call.timed_out();
        let s = budget.snapshot();
        assert_eq!((s.in_flight, s.call_timeouts), (0, 1));
    }

    #[cfg(feature = "adaptive")]
    #[tokio::test(start_paused = true)]
    async fn a_dropped_call_is_cancelled_and_an_overload_cuts_the_limit() {
        let budget = Budget::new("b", BudgetConfig::new(8).adaptive(Adaptive::aimd())).unwrap();
        drop(HeldCall::start(&budget).await.unwrap());
        assert_eq!(budget.snapshot().calls_cancelled, 1);
        let before = budget.limit();
        HeldCall::start(&budget)
            .await
            .unwrap()
            .finish(true, Outcome::Overload);
        assert!(budget.limit() < before, "{} -> {}", before, budget.limit());
    }
}
