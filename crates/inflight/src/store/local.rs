//! The permits every budget keeps in its own process: a fair semaphore that can grow and shrink.
//!
//! Underneath is a [`tokio::sync::Semaphore`]: its wait queue is fair and cancel safe. Permits are
//! taken with `forget` and given back by hand, so that a shrink can keep a permit that comes back
//! instead of handing it on: the limit never takes a permit from a caller that holds one. (Under
//! loom, a model of it with the same memory orderings: see `crate::sync`.)

use std::sync::atomic::Ordering::Relaxed;

use crate::padded::CachePadded;
use crate::sync::atomic::AtomicUsize;
use crate::sync::Semaphore;

pub(crate) struct LocalPermits {
    semaphore: CachePadded<Semaphore>,
    /// Permits the semaphore owns, held or not: the limit plus the debt.
    total: AtomicUsize,
    /// Held permits to drop, not give back, when they come back (after a shrink below the number
    /// held).
    debt: AtomicUsize,
}

impl LocalPermits {
    pub(crate) fn new(n: usize) -> LocalPermits {
        LocalPermits {
            semaphore: CachePadded(Semaphore::new(n)),
            total: AtomicUsize::new(n),
            debt: AtomicUsize::new(0),
        }
    }

    /// Takes a permit if one is free. tokio hands released permits to queued waiters first, so
    /// this never overtakes anyone who is waiting.
    #[inline]
    pub(crate) fn try_take(&self) -> bool {
        match self.semaphore.try_acquire() {
            Ok(permit) => {
                permit.forget();
                true
            }
            Err(_) => false,
        }
    }

    /// Waits in the queue for a permit.
    ///
    /// Cancel safe: a future dropped while it waits leaves the queue and holds nothing.
    pub(crate) async fn take(&self) {
        self.semaphore
            .acquire()
            .await
            .expect("a budget's semaphore is never closed")
            .forget();
    }

    /// Gives one permit back, or drops it to pay a shrink's debt.
    #[inline]
    pub(crate) fn give_back(&self) {
        if self.debt.load(Relaxed) > 0
            && self
                .debt
                .fetch_update(Relaxed, Relaxed, |d| d.checked_sub(1))
                .is_ok()
        {
            self.total.fetch_sub(1, Relaxed);
            return;
        }
        self.semaphore.add_permits(1);
    }

    /// Permits held now.
    #[inline]
    pub(crate) fn in_flight(&self) -> usize {
        self.total
            .load(Relaxed)
            .saturating_sub(self.semaphore.available_permits())
    }

    /// Permits not held right now.
    pub(crate) fn available(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// The limit now.
    pub(crate) fn limit(&self) -> usize {
        self.total
            .load(Relaxed)
            .saturating_sub(self.debt.load(Relaxed))
    }

    /// Moves the limit to `new`. Callers serialise resizes (a budget resizes under its limit's
    /// lock); permits going back may race with it.
    pub(crate) fn resize(&self, new: usize) {
        let now = self.limit();
        if new > now {
            let mut grow = new - now;
            // Pay off the debt first: those permits are still held, and simply stay.
            let paid = self
                .debt
                .fetch_update(Relaxed, Relaxed, |d| Some(d - d.min(grow)))
                .map(|d| d.min(grow))
                .unwrap_or(0);
            grow -= paid;
            if grow > 0 {
                self.total.fetch_add(grow, Relaxed);
                self.semaphore.add_permits(grow);
            }
        } else if new < now {
            let shrink = now - new;
            let forgotten = self.semaphore.forget_permits(shrink);
            self.total.fetch_sub(forgotten, Relaxed);
            self.debt.fetch_add(shrink - forgotten, Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn shrinking_below_the_held_permits_keeps_them_until_they_come_back() {
        let p = LocalPermits::new(4);
        assert!(p.try_take() && p.try_take() && p.try_take());
        p.resize(1);
        assert_eq!(p.limit(), 1);
        assert_eq!(p.in_flight(), 3);
        assert!(!p.try_take(), "three held against a limit of one");
        p.give_back();
        p.give_back();
        assert_eq!(p.in_flight(), 1);
        assert!(!p.try_take());
        p.give_back();
        assert_eq!(p.in_flight(), 0);
        assert!(p.try_take());
        assert!(!p.try_take());
    }

    #[test]
    fn growing_pays_the_debt_before_adding_permits() {
        let p = LocalPermits::new(4);
        for _ in 0..4 {
            assert!(p.try_take());
        }
        p.resize(2);
        p.resize(3);
        assert_eq!(p.limit(), 3);
        assert!(!p.try_take(), "four still held against a limit of three");
        p.give_back();
        assert!(!p.try_take());
        p.resize(6);
        assert_eq!(p.limit(), 6);
        assert_eq!(p.in_flight(), 3);
        assert!(p.try_take() && p.try_take() && p.try_take());
        assert!(!p.try_take());
    }
}
