//! [`Permit`] and [`OwnedPermit`]: a held place in a budget, given back when dropped, that can
//! report how its call ended.

use std::fmt;

use tokio::time::Instant;

use super::engine::{Engine, Grant};
use super::Budget;
use crate::limit::{Outcome, Verdict};
use crate::store::Lease;

/// A permit from a [`Budget`]; the permit goes back when this is dropped.
///
/// Borrowed from the budget, like tokio's `SemaphorePermit`. To move a permit into another task,
/// use [`Budget::acquire_owned`].
///
/// A budget whose limit learns from calls (see [`crate::limit`]) learns from each permit when it
/// goes back: report how the call ended with [`Permit::report`]. A permit dropped without a
/// report counts as [`Outcome::Ignore`].
#[must_use = "the permit is released as soon as it is dropped"]
pub struct Permit<'a> {
    engine: &'a Engine,
    grant: Grant,
    outcome: Verdict,
}

/// A permit that owns a handle to its [`Budget`], for moving into spawned tasks.
///
/// Reports outcomes as [`Permit`] does.
#[must_use = "the permit is released as soon as it is dropped"]
pub struct OwnedPermit {
    budget: Budget,
    grant: Grant,
    outcome: Verdict,
}

impl<'a> Permit<'a> {
    pub(crate) fn new(engine: &'a Engine, grant: Grant) -> Permit<'a> {
        Permit {
            engine,
            grant,
            outcome: Verdict::from(Outcome::Ignore),
        }
    }

    /// Gives the permit back, reporting how its call ended: the time since the permit was
    /// granted, with this outcome, is the sample its budget's limit learns from.
    ///
    /// ```
    /// use inflight::limit::Outcome;
    /// use inflight::{Budget, BudgetConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let budget = Budget::new("api", BudgetConfig::new(2)).unwrap();
    /// let permit = budget.acquire().await.unwrap();
    /// let status = 503; // the dependency's answer
    /// permit.report(if status == 503 { Outcome::Overload } else { Outcome::Success });
    /// assert_eq!(budget.snapshot().in_flight, 0);
    /// # }
    /// ```
    ///
    /// A [`Verdict`] with a retry-after (an overload the dependency said to wait out) also
    /// pauses the budget; see [`Verdict`].
    pub fn report(mut self, outcome: impl Into<Verdict>) {
        self.outcome = outcome.into();
    }

    /// When the permit was granted, if the budget read the clock for it: it does after a wait,
    /// and always when its limit learns from latencies. The fast path of a fixed limit does not.
    pub fn granted_at(&self) -> Option<Instant> {
        self.grant.granted
    }

    /// The lease this permit holds in the budget's shared [`Store`](crate::store::Store), if the
    /// budget has one: [`Lease::is_lost`] says whether the store took it back early.
    pub fn lease(&self) -> Option<&Lease> {
        self.grant.lease()
    }

    pub(crate) fn set_outcome(&mut self, outcome: Verdict) {
        self.outcome = outcome;
    }

    pub(crate) fn engine(&self) -> &Engine {
        self.engine
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.engine.release(&mut self.grant, self.outcome);
    }
}

impl OwnedPermit {
    pub(crate) fn new(budget: Budget, grant: Grant) -> OwnedPermit {
        OwnedPermit {
            budget,
            grant,
            outcome: Verdict::from(Outcome::Ignore),
        }
    }

    /// Gives the permit back, reporting how its call ended (see [`Permit::report`]).
    pub fn report(mut self, outcome: impl Into<Verdict>) {
        self.outcome = outcome.into();
    }

    /// When the permit was granted, if the budget read the clock for it (see
    /// [`Permit::granted_at`]).
    pub fn granted_at(&self) -> Option<Instant> {
        self.grant.granted
    }

    /// The lease this permit holds in the budget's shared store, if it has one (see
    /// [`Permit::lease`]).
    pub fn lease(&self) -> Option<&Lease> {
        self.grant.lease()
    }

    /// The budget this permit is from.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    #[cfg(feature = "tower")]
    pub(crate) fn set_outcome(&mut self, outcome: Verdict) {
        self.outcome = outcome;
    }
}

impl Drop for OwnedPermit {
    fn drop(&mut self) {
        self.budget.engine().release(&mut self.grant, self.outcome);
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("budget", &self.engine.name)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for OwnedPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedPermit")
            .field("budget", &self.budget.name())
            .finish()
    }
}
