//! The permits every budget keeps in its own process: a fair semaphore that can grow and shrink.
//!
//! Two lanes hold the free permits. While nobody waits, they sit in the fast lane, a count in
//! one atomic word that also counts the callers waiting: taking one and giving it back is a
//! single compare-and-swap each, with no lock. A caller that has to wait registers in that same
//! word, which moves every free permit of the fast lane into the slow lane in the same step: a
//! [`tokio::sync::Semaphore`], whose wait queue is fair and cancel safe. While anyone waits,
//! permits go back through the semaphore, which hands them to its waiters in order, and a
//! newcomer takes one only from the semaphore, which never lets it overtake them. Both
//! decisions read the one word, so a permit can never land in the fast lane while a waiter
//! sleeps in the slow one.
//!
//! Permits are taken with `forget` and given back by hand, so that a shrink can keep a permit
//! that comes back instead of handing it on: the limit never takes a permit from a caller that
//! holds one. (Under loom, the word is loom's and the semaphore a model of tokio's with the same
//! memory orderings: see `crate::sync`.)

use std::sync::atomic::Ordering::{AcqRel, Relaxed};

use crate::padded::CachePadded;
use crate::sync::atomic::{AtomicU64, AtomicUsize};
use crate::sync::Semaphore;

/// The fast lane's word: free permits in the low half, callers waiting in the semaphore in the
/// high half.
const FREE: u64 = u32::MAX as u64;
const WAITER: u64 = 1 << 32;

pub(crate) struct LocalPermits {
    /// The fast lane: see [`FREE`] and [`WAITER`]. While the high half is not zero, the low half
    /// is zero: every free permit is in the semaphore.
    lane: CachePadded<AtomicU64>,
    /// The slow lane, and the queue of those who wait.
    semaphore: CachePadded<Semaphore>,
    /// Permits the two lanes own, held or not: the limit plus the debt.
    total: AtomicUsize,
    /// Held permits to drop, not give back, when they come back (after a shrink below the number
    /// held).
    debt: AtomicUsize,
}

impl LocalPermits {
    pub(crate) fn new(n: usize) -> LocalPermits {
        let fast = n.min(FREE as usize);
        LocalPermits {
            lane: CachePadded(AtomicU64::new(fast as u64)),
            semaphore: CachePadded(Semaphore::new(n - fast)),
            total: AtomicUsize::new(n),
            debt: AtomicUsize::new(0),
        }
    }

    /// Takes a permit if one is free and nobody waits for one: it never overtakes a waiter.
    #[inline]
    pub(crate) fn try_take(&self) -> bool {
        let mut lane = self.lane.load(Relaxed);
        while lane & FREE != 0 {
            // A free permit in the fast lane means nobody waits.
            match self
                .lane
                .compare_exchange_weak(lane, lane - 1, AcqRel, Relaxed)
            {
                Ok(_) => return true,
                Err(now) => lane = now,
            }
        }
        self.try_take_slow()
    }

    /// The semaphore's free permits: those put there while someone waited, or by a resize. tokio
    /// hands a permit that goes back to its queued waiters first, so this never overtakes them.
    #[cold]
    fn try_take_slow(&self) -> bool {
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
        // Registers, and moves the fast lane's free permits to the semaphore, in one step.
        let before = self
            .lane
            .fetch_update(AcqRel, Relaxed, |lane| Some((lane & !FREE) + WAITER))
            .unwrap_or_else(|lane| lane);
        let _registered = Registered(&self.lane);
        let moved = (before & FREE) as usize;
        if moved > 0 {
            self.semaphore.add_permits(moved);
        }
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
        let mut lane = self.lane.load(Relaxed);
        // Nobody waits, and the fast lane has room (it holds up to `FREE`).
        while lane < FREE {
            match self
                .lane
                .compare_exchange_weak(lane, lane + 1, AcqRel, Relaxed)
            {
                Ok(_) => return,
                Err(now) => lane = now,
            }
        }
        self.semaphore.add_permits(1);
    }

    /// Permits held now.
    #[inline]
    pub(crate) fn in_flight(&self) -> usize {
        self.total.load(Relaxed).saturating_sub(self.available())
    }

    /// Permits not held right now.
    pub(crate) fn available(&self) -> usize {
        (self.lane.load(Relaxed) & FREE) as usize + self.semaphore.available_permits()
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
                // To the semaphore, which hands them to any waiter; a newcomer takes them from
                // there, and they move to the fast lane as they come back.
                self.semaphore.add_permits(grow);
            }
        } else if new < now {
            let shrink = now - new;
            let mut forgotten = self.forget_fast(shrink);
            forgotten += self.semaphore.forget_permits(shrink - forgotten);
            self.total.fetch_sub(forgotten, Relaxed);
            self.debt.fetch_add(shrink - forgotten, Relaxed);
        }
    }

    /// Takes up to `n` free permits out of the fast lane for good; returns how many.
    fn forget_fast(&self, n: usize) -> usize {
        let n = n.min(FREE as usize) as u64;
        match self.lane.fetch_update(AcqRel, Relaxed, |lane| {
            let free = lane & FREE;
            (free > 0).then(|| lane - free.min(n))
        }) {
            Ok(lane) => (lane & FREE).min(n) as usize,
            Err(_) => 0,
        }
    }
}

/// A caller's registration as a waiter in the fast lane's word, taken back when its wait ends,
/// however it ends.
struct Registered<'a>(&'a AtomicU64);

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(WAITER, AcqRel);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::pin::pin;

    use futures::poll;

    use super::*;

    fn waiters(p: &LocalPermits) -> u64 {
        p.lane.load(Relaxed) / WAITER
    }

    #[tokio::test(start_paused = true)]
    async fn a_permit_given_back_while_someone_waits_goes_to_the_waiter_not_a_newcomer() {
        let p = LocalPermits::new(2);
        assert!(p.try_take() && p.try_take());
        let mut first = pin!(p.take());
        let mut second = pin!(p.take());
        assert!(poll!(first.as_mut()).is_pending());
        assert!(poll!(second.as_mut()).is_pending());
        assert_eq!(waiters(&p), 2);
        p.give_back();
        assert!(!p.try_take(), "a newcomer overtook a waiter");
        assert!(poll!(first.as_mut()).is_ready());
        assert!(
            poll!(second.as_mut()).is_pending(),
            "the second waits its turn"
        );
        p.give_back();
        assert!(poll!(second.as_mut()).is_ready());
        assert_eq!(waiters(&p), 0);
        assert_eq!(p.in_flight(), 2);
        p.give_back();
        p.give_back();
        assert_eq!(p.available(), 2);
        assert!(p.try_take() && p.try_take() && !p.try_take());
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_moves_the_free_permits_to_the_semaphore_and_a_cancelled_one_leaves() {
        let p = LocalPermits::new(3);
        {
            // Registered while two permits are free (a caller that raced a release): it takes
            // one at once, and the other stays free for anyone.
            let mut wait = pin!(p.take());
            assert!(poll!(wait.as_mut()).is_ready());
        }
        assert_eq!((p.in_flight(), p.available(), waiters(&p)), (1, 2, 0));
        assert!(p.try_take() && p.try_take() && !p.try_take());
        {
            let mut wait = pin!(p.take());
            assert!(poll!(wait.as_mut()).is_pending());
            assert_eq!(waiters(&p), 1);
        }
        assert_eq!(waiters(&p), 0, "a cancelled waiter is still counted");
        p.give_back();
        assert_eq!(
            p.lane.load(Relaxed),
            1,
            "back in the fast lane once nobody waits"
        );
        assert_eq!(p.in_flight(), 2);
    }

    /// Tasks on two threads race for two permits, taking them at once when free and waiting
    /// otherwise: no permit is lost between the lanes (a lost one would leave a waiter asleep
    /// for good), and never more than two are held.
    #[test]
    fn permits_racing_between_the_lanes_are_never_lost_nor_doubled() {
        use std::sync::atomic::AtomicUsize;
        use std::sync::Arc;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let p = Arc::new(LocalPermits::new(2));
        let held = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        rt.block_on(async {
            let tasks: Vec<_> = (0..6)
                .map(|_| {
                    let (p, held, most) = (p.clone(), held.clone(), most.clone());
                    tokio::spawn(async move {
                        for _ in 0..2_000 {
                            if !p.try_take() {
                                p.take().await;
                            }
                            most.fetch_max(held.fetch_add(1, Relaxed) + 1, Relaxed);
                            tokio::task::yield_now().await;
                            held.fetch_sub(1, Relaxed);
                            p.give_back();
                        }
                    })
                })
                .collect();
            let all = futures::future::join_all(tasks);
            tokio::time::timeout(std::time::Duration::from_secs(60), all)
                .await
                .expect("a waiter was left asleep");
        });
        assert!(most.load(Relaxed) <= 2);
        assert_eq!((p.in_flight(), p.available(), waiters(&p)), (0, 2, 0));
    }

    #[test]
    fn a_limit_above_the_fast_lane_keeps_the_rest_in_the_semaphore() {
        let n = FREE as usize + 5;
        let p = LocalPermits::new(n);
        assert_eq!((p.available(), p.in_flight(), p.limit()), (n, 0, n));
        assert!(p.try_take());
        p.give_back();
        assert_eq!(
            p.lane.load(Relaxed),
            FREE,
            "the fast lane holds at most FREE"
        );
        assert_eq!(p.available(), n);
    }

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

/// Loom models of the two lanes (see `budget::class_queue::loom_models` for how they run): a
/// permit given back while a caller registers to wait reaches it in every interleaving, never
/// left in the fast lane beside a sleeping waiter.
#[cfg(all(test, loom))]
mod loom_models {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    use loom::thread;

    use super::*;

    /// Polls `f` to its end, letting the other threads run between polls.
    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
                return out;
            }
            thread::yield_now();
        }
    }

    #[test]
    fn a_permit_given_back_as_a_caller_starts_waiting_reaches_it() {
        loom::model(|| {
            let p: &'static LocalPermits = Box::leak(Box::new(LocalPermits::new(1)));
            assert!(p.try_take());
            let waiter = thread::spawn(move || block_on(p.take()));
            p.give_back();
            waiter.join().unwrap();
            assert_eq!((p.in_flight(), p.available()), (1, 0));
            assert_eq!(p.lane.load(Relaxed), 0, "nobody waits and nothing is free");
        });
    }

    #[test]
    fn a_newcomer_racing_a_waiter_takes_the_permit_once() {
        loom::model(|| {
            let p: &'static LocalPermits = Box::leak(Box::new(LocalPermits::new(1)));
            assert!(p.try_take());
            let waiter = thread::spawn(move || block_on(p.take()));
            let newcomer = thread::spawn(move || p.try_take());
            p.give_back();
            let took = newcomer.join().unwrap();
            if took {
                // The newcomer came before the waiter registered; it hands the permit on.
                p.give_back();
            }
            waiter.join().unwrap();
            assert_eq!((p.in_flight(), p.available()), (1, 0));
        });
    }
}
