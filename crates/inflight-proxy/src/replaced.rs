//! The budgets reloads replaced under one route, so that the route's counters (in `/metrics`
//! and `/budgets.json`) go on from theirs instead of starting again at zero.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use inflight::{Budget, BudgetSnapshot};

/// A route's replaced budgets: shared by every state of the route, from reload to reload.
#[derive(Default)]
pub(crate) struct Replaced {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The counts of replaced budgets nothing uses any more, added up once.
    done: Option<BudgetSnapshot>,
    /// Replaced budgets that may still count: a request or a hand-over holds their state
    /// (its [`InUse`] token).
    live: Vec<(Weak<()>, Budget)>,
}

impl Inner {
    /// Adds the replaced budgets that can count no more into `done`, and forgets them: those
    /// whose state nothing holds and that run no call (an answer's body holds its permit after
    /// its request's state is let go) and have no caller waiting.
    fn fold_done(&mut self) {
        let Inner { done, live } = self;
        live.retain(|(in_use, budget)| {
            if in_use.strong_count() > 0 {
                return true;
            }
            let last = budget.snapshot();
            if last.in_flight > 0 || last.waiting > 0 {
                return true;
            }
            match done {
                Some(sum) => sum.add_counts(&last),
                None => *done = Some(last),
            }
            false
        });
    }
}

/// Held by a route's state: while any clone of it lives, the state's budget may still count.
pub(crate) type InUse = Arc<()>;

impl Replaced {
    /// Remembers `budget`, replaced by a reload, whose state holds `in_use`.
    pub(crate) fn push(&self, budget: &Budget, in_use: &InUse) {
        let mut inner = self.lock();
        // Those done by now go into the sum, so that a proxy reloaded often and never
        // scraped keeps no budget it replaced.
        inner.fold_done();
        inner.live.push((Arc::downgrade(in_use), budget.clone()));
    }

    /// `now`, the route's budget's snapshot, with the counts of every budget it replaced
    /// added. A replaced budget that can count no more is added into one sum once and
    /// forgotten.
    pub(crate) fn add_to(&self, now: &mut BudgetSnapshot) {
        let mut inner = self.lock();
        inner.fold_done();
        if let Some(sum) = &inner.done {
            now.add_counts(sum);
        }
        for (_, budget) in &inner.live {
            now.add_counts(&budget.snapshot());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use inflight::BudgetConfig;

    fn admit(budget: &Budget, n: usize) {
        for _ in 0..n {
            drop(budget.try_acquire().unwrap());
        }
    }

    #[test]
    fn counts_go_on_from_every_replaced_budget_in_use_or_not() {
        let replaced = Replaced::default();
        let first = Budget::new("r", BudgetConfig::new(2)).unwrap();
        let second = Budget::new("r", BudgetConfig::new(3)).unwrap();
        let now = Budget::new("r", BudgetConfig::new(4)).unwrap();
        let (first_in_use, second_in_use) = (InUse::default(), InUse::default());
        replaced.push(&first, &first_in_use);
        replaced.push(&second, &second_in_use);
        admit(&first, 5);
        admit(&second, 7);
        admit(&now, 1);
        let counts = |replaced: &Replaced| {
            let mut s = now.snapshot();
            replaced.add_to(&mut s);
            (s.admitted, s.limit)
        };
        assert_eq!(counts(&replaced), (13, 4));
        // The first is no longer used by a request, but a call still holds its permit (an
        // answer's body): it goes on counting until that ends.
        let held = first.try_acquire().unwrap();
        drop(first_in_use);
        assert_eq!(counts(&replaced), (14, 4));
        admit(&first, 1);
        assert_eq!(counts(&replaced), (15, 4));
        drop(held);
        // Then it is folded once, its later counts (none can come) ignored.
        assert_eq!(counts(&replaced), (15, 4));
        admit(&first, 100);
        assert_eq!(counts(&replaced), (15, 4));
        // The second still counts while in use.
        admit(&second, 1);
        assert_eq!(counts(&replaced), (16, 4));
        drop(second_in_use);
        assert_eq!(counts(&replaced), (16, 4));
        assert_eq!(replaced.lock().live.len(), 0);
        assert!(replaced.lock().done.is_some());
    }
}
