//! [`ClassQueue`]: the wait queue of a budget with priority classes: one FIFO lane per class,
//! a stride scheduler (weighted fair queuing) or strict priority across the lanes with waiters,
//! and eviction of the newest waiter of the lightest class when the queue is full.
//!
//! The permits themselves stay in [`LocalPermits`]: a waiter is granted a permit only by taking
//! one from there, under the queue's lock, so the limit is the semaphore's and no count kept here
//! can let more than the limit in (the check-then-act race of a limiter that counts partitions
//! apart from its global limit). A permit that goes back lands in [`LocalPermits`] first; whoever
//! returns it then hands free permits to the waiters, in the scheduler's order, while any wait.
//! A newcomer takes a free permit directly only while nobody waits, so it never overtakes one.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::PoisonError;
use std::task::{Context, Poll};

use super::classes::Classes;
use crate::padded::CachePadded;
use crate::store::local::LocalPermits;
use crate::sync::{atomic, oneshot, Mutex, MutexGuard};

#[cfg(test)]
mod bench;
#[cfg(all(test, loom))]
mod loom_models;

/// The virtual time one grant costs a class of weight 1; a class of weight `w` pays `STRIDE / w`.
/// A power of two well above [`MAX_WEIGHT`](super::MAX_WEIGHT): the rounding of `STRIDE / w` is
/// under 0.1% for every weight, and exact for the powers of two.
const STRIDE: u64 = 1 << 20;

/// Passes are moved back by the virtual time when it passes this, so that they never overflow.
const REBASE: u64 = 1 << 62;

/// How a waiter's wait ended, sent by whoever ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// A permit was taken for the waiter: it holds it now.
    Granted,
    /// A caller of a heavier class took the waiter's place in the full queue.
    Evicted,
}

/// Why a caller could not join.
pub(crate) struct Full {
    /// Callers waiting ahead of it.
    pub(crate) ahead: usize,
}

pub(crate) struct ClassQueue {
    /// Waiters in the lanes (not yet granted nor evicted). Read without the lock by newcomers
    /// and by whoever gives a permit back. (The callers' `waiting` counts are std's even under
    /// loom: no handing over of a permit rests on them.)
    queued: CachePadded<atomic::AtomicUsize>,
    lanes: Mutex<Lanes>,
    weights: Box<[u32]>,
    strides: Box<[u64]>,
    strict: bool,
}

struct Lanes {
    lanes: Box<[Lane]>,
    /// The pass of the last class granted: a class that starts waiting again starts no earlier,
    /// so time spent idle banks no credit.
    vtime: u64,
    next_id: u64,
}

struct Lane {
    waiters: VecDeque<Waiter>,
    /// The virtual time of this class's next grant.
    pass: u64,
}

struct Waiter {
    /// Increasing in each lane, so a lane is sorted by it.
    id: u64,
    turn: oneshot::Sender<Turn>,
}

impl ClassQueue {
    pub(crate) fn new(classes: &Classes) -> ClassQueue {
        let weights: Box<[u32]> = classes.iter().map(|c| c.weight().max(1)).collect();
        let strides = weights.iter().map(|&w| STRIDE / u64::from(w)).collect();
        let lanes = weights
            .iter()
            .map(|_| Lane {
                waiters: VecDeque::new(),
                pass: 0,
            })
            .collect();
        ClassQueue {
            queued: CachePadded(atomic::AtomicUsize::new(0)),
            lanes: Mutex::new(Lanes {
                lanes,
                vtime: 0,
                next_id: 0,
            }),
            weights,
            strides,
            strict: classes.is_strict(),
        }
    }

    /// Whether anyone waits in a lane; a newcomer that sees nobody may take a free permit.
    #[inline]
    pub(crate) fn has_waiters(&self) -> bool {
        self.queued.load(Relaxed) != 0
    }

    fn lock(&self) -> MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Joins `class`'s lane, taking a place in `waiting` (at most `max_queued`): when the queue
    /// is full, the newest waiter of the lightest class with waiters gives up its place if that
    /// class is lighter than `class`. Free permits are handed out before returning, possibly to
    /// this caller.
    pub(crate) fn join<'a>(
        &'a self,
        class: usize,
        permits: &'a LocalPermits,
        waiting: &'a AtomicUsize,
        class_waiting: &'a AtomicUsize,
        max_queued: Option<usize>,
    ) -> Result<(Ticket<'a>, usize), Full> {
        let mut lanes = self.lock();
        // Under the lock, so that a full queue is full when the victim is chosen.
        let ahead = match max_queued {
            None => waiting.fetch_add(1, Relaxed),
            Some(max) => {
                match waiting.fetch_update(Relaxed, Relaxed, |n| (n < max).then_some(n + 1)) {
                    Ok(ahead) => ahead,
                    Err(ahead) => {
                        if !self.evict_for(&mut lanes, class) {
                            return Err(Full { ahead });
                        }
                        // The victim's place is this caller's now: `waiting` does not move.
                        ahead.saturating_sub(1)
                    }
                }
            }
        };
        let id = lanes.next_id;
        lanes.next_id += 1;
        let vtime = lanes.vtime;
        let lane = &mut lanes.lanes[class];
        if lane.waiters.is_empty() {
            lane.pass = lane.pass.max(vtime);
        }
        let (tx, rx) = oneshot::channel();
        lane.waiters.push_back(Waiter { id, turn: tx });
        class_waiting.fetch_add(1, Relaxed);
        // A read-modify-write, paired with the one in `returned`: either that one sees this
        // waiter, or this caller's dispatch below sees the permit it gave back. Read-modify-writes
        // of `queued` are ordered, each reading the one before: if `returned`'s comes first, this
        // one reads it and so synchronizes with it, and `try_take` below sees the permit given
        // back before it; if this one comes first, `returned`'s reads a count with this waiter in
        // it. That needs acquire-release, no more. A plain load in `returned` would break it
        // (each side could read the other's old value: store buffering); the loom models
        // (`loom_models`) fail when that bug is planted.
        self.queued.fetch_add(1, SeqCst);
        self.dispatch(&mut lanes, permits);
        drop(lanes);
        Ok((
            Ticket {
                queue: self,
                permits,
                waiting,
                class_waiting,
                class,
                id,
                turn: rx,
                ended: None,
            },
            ahead,
        ))
    }

    /// Refuses the newest waiter of the lightest class with waiters, if it is lighter than
    /// `class`, so that a caller of `class` can take its place.
    fn evict_for(&self, lanes: &mut Lanes, class: usize) -> bool {
        let mut victim: Option<(usize, u32, u64)> = None;
        for (i, lane) in lanes.lanes.iter().enumerate() {
            let Some(newest) = lane.waiters.back() else {
                continue;
            };
            let w = self.weights[i];
            let better = match victim {
                None => true,
                Some((_, vw, vid)) => w < vw || (w == vw && newest.id > vid),
            };
            if better {
                victim = Some((i, w, newest.id));
            }
        }
        match victim {
            Some((i, w, _)) if w < self.weights[class] => {
                let evicted = lanes.lanes[i]
                    .waiters
                    .pop_back()
                    .expect("a lane with a waiter");
                self.queued.fetch_sub(1, SeqCst);
                // Its ticket is alive (it leaves the lane under this lock), so this arrives.
                let _ = evicted.turn.send(Turn::Evicted);
                true
            }
            _ => false,
        }
    }

    /// After a permit went back to `permits`: hands free permits to waiters, if any wait.
    #[inline]
    pub(crate) fn returned(&self, permits: &LocalPermits) {
        // A read-modify-write, not a load: see `join`.
        #[cfg(not(inflight_planted_lost_waiter))]
        let queued = self.queued.fetch_add(0, SeqCst);
        // The bug the loom models must catch, planted by `--cfg inflight_planted_lost_waiter`
        // (scripts/test.sh checks that they do).
        #[cfg(inflight_planted_lost_waiter)]
        let queued = self.queued.load(SeqCst);
        if queued == 0 {
            return;
        }
        self.dispatch_now(permits);
    }

    #[cold]
    fn dispatch_now(&self, permits: &LocalPermits) {
        let mut lanes = self.lock();
        self.dispatch(&mut lanes, permits);
    }

    /// While anyone waits and a permit is free, takes it for the next waiter in order.
    fn dispatch(&self, lanes: &mut Lanes, permits: &LocalPermits) {
        while self.queued.load(Relaxed) > 0 {
            let Some(class) = self.next_class(lanes) else {
                return;
            };
            if !permits.try_take() {
                return;
            }
            let lane = &mut lanes.lanes[class];
            let waiter = lane
                .waiters
                .pop_front()
                .expect("the class chosen has a waiter");
            let pass = lane.pass;
            lane.pass = pass.saturating_add(self.strides[class]);
            lanes.vtime = pass;
            if lanes.vtime > REBASE {
                let base = lanes.vtime;
                for lane in lanes.lanes.iter_mut() {
                    lane.pass = lane.pass.saturating_sub(base);
                }
                lanes.vtime = 0;
            }
            self.queued.fetch_sub(1, SeqCst);
            if waiter.turn.send(Turn::Granted).is_err() {
                // Unreachable while tickets leave their lane under the lock; never lose it.
                permits.give_back();
            }
        }
    }

    /// The class whose waiter goes next: the earliest virtual finish time (its pass plus its
    /// stride) among the classes with waiters, the heavier then the first declared on a tie;
    /// with strict priority, the heaviest such class (the earliest among equally heavy ones).
    /// Finish times rather than start times: a heavier class goes first when classes start
    /// waiting together, as its share says.
    fn next_class(&self, lanes: &Lanes) -> Option<usize> {
        let mut best: Option<(usize, u32, u64)> = None;
        for (i, lane) in lanes.lanes.iter().enumerate() {
            if lane.waiters.is_empty() {
                continue;
            }
            let (w, finish) = (self.weights[i], lane.pass.saturating_add(self.strides[i]));
            let better = match best {
                None => true,
                Some((_, bw, bfinish)) if self.strict => w > bw || (w == bw && finish < bfinish),
                Some((_, bw, bfinish)) => finish < bfinish || (finish == bfinish && w > bw),
            };
            if better {
                best = Some((i, w, finish));
            }
        }
        best.map(|(i, _, _)| i)
    }

    /// Takes a waiter out of its lane; `false` if it had left already (granted or evicted).
    fn leave(&self, class: usize, id: u64) -> bool {
        let mut lanes = self.lock();
        let lane = &mut lanes.lanes[class].waiters;
        match lane.binary_search_by_key(&id, |w| w.id) {
            Ok(at) => {
                lane.remove(at);
                self.queued.fetch_sub(1, SeqCst);
                true
            }
            Err(_) => false,
        }
    }
}

/// A caller's place in a class's lane, and later its turn. Dropped before its turn came, it
/// leaves the lane; dropped after a permit was taken for it but before it took the permit, it
/// gives the permit to the next waiter. Its place in `waiting` goes with it, unless a heavier
/// caller took it over.
pub(crate) struct Ticket<'a> {
    queue: &'a ClassQueue,
    permits: &'a LocalPermits,
    waiting: &'a AtomicUsize,
    /// This class's waiters, which always lose this one when it goes.
    class_waiting: &'a AtomicUsize,
    class: usize,
    id: u64,
    turn: oneshot::Receiver<Turn>,
    /// The turn, once this ticket's future returned it.
    ended: Option<Turn>,
}

impl Future for Ticket<'_> {
    type Output = Turn;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Turn> {
        if let Some(turn) = self.ended {
            return Poll::Ready(turn);
        }
        match Pin::new(&mut self.turn).poll(cx) {
            Poll::Ready(turn) => {
                // The sender lives in the lane until it sends; the queue outlives the ticket.
                let turn = turn.unwrap_or(Turn::Evicted);
                self.ended = Some(turn);
                Poll::Ready(turn)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let turn = match self.ended {
            Some(turn) => Some(turn),
            None if self.queue.leave(self.class, self.id) => None,
            // Out of the lane, so its turn was sent: take it to know what it was.
            None => self.turn.try_recv().ok(),
        };
        if turn != Some(Turn::Evicted) {
            self.waiting.fetch_sub(1, Relaxed);
        }
        self.class_waiting.fetch_sub(1, Relaxed);
        if self.ended.is_none() && turn == Some(Turn::Granted) {
            self.permits.give_back();
            self.queue.returned(self.permits);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::bench::Bench;
    use super::*;

    /// One permit, held; the queue's waiters are `tickets`.
    impl Bench {
        /// Gives the permit back `grants` times; each time, the waiter granted keeps it. The
        /// classes granted, in order.
        fn grant(&self, tickets: &mut Vec<(usize, Ticket<'_>)>, grants: usize) -> Vec<usize> {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let mut order = Vec::new();
            for _ in 0..grants {
                self.permits.give_back();
                self.q.returned(&self.permits);
                let at = tickets
                    .iter_mut()
                    .position(|(_, t)| Pin::new(t).poll(&mut cx) == Poll::Ready(Turn::Granted))
                    .expect("one waiter granted");
                order.push(tickets.remove(at).0);
            }
            order
        }
    }

    #[test]
    fn grants_follow_the_weights() {
        let b = Bench::new(&Classes::new().class("a", 3).class("b", 1));
        let mut tickets: Vec<_> = (0..60).map(|i| (i % 2, b.join(i % 2))).collect();
        let got = b.grant(&mut tickets, 20);
        assert_eq!(got.iter().filter(|&&c| c == 0).count(), 15, "{got:?}");
    }

    #[test]
    fn classes_that_start_waiting_together_go_heaviest_first() {
        let b = Bench::new(&Classes::new().class("batch", 1).class("interactive", 4));
        let mut tickets: Vec<_> = (0..20).map(|i| (i % 2, b.join(i % 2))).collect();
        assert_eq!(b.grant(&mut tickets, 10), [1, 1, 1, 1, 0, 1, 1, 1, 1, 0]);
    }

    #[test]
    fn strict_serves_the_heaviest_first() {
        let b = Bench::new(&Classes::new().class("a", 1).class("b", 2).strict(true));
        let mut tickets: Vec<_> = (0..10).map(|i| (i % 2, b.join(i % 2))).collect();
        assert_eq!(b.grant(&mut tickets, 10), [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_class_that_was_idle_banks_no_credit() {
        let b = Bench::new(&Classes::new().class("a", 1).class("b", 1));
        // Class a is served alone 10 times while b has nobody waiting.
        for _ in 0..10 {
            let mut alone = vec![(0, b.join(0))];
            b.grant(&mut alone, 1);
        }
        // Then both wait: b must not get 10 turns in a row for the time it was idle.
        let mut tickets: Vec<_> = (0..20).map(|i| (i % 2, b.join(i % 2))).collect();
        let got = b.grant(&mut tickets, 6);
        assert_eq!(got.iter().filter(|&&c| c == 1).count(), 3, "{got:?}");
    }

    #[test]
    fn a_full_queue_evicts_the_newest_of_the_lightest() {
        let classes = Classes::new().class("a", 4).class("b", 1).class("c", 1);
        let b = Bench::new(&classes);
        let join = |class| {
            b.q.join(class, &b.permits, &b.waiting, &b.class_waiting, Some(3))
        };
        let (mut b1, _) = join(1).ok().unwrap();
        let (mut c1, _) = join(2).ok().unwrap();
        let (mut b2, _) = join(1).ok().unwrap();
        assert!(join(1).is_err(), "no heavier than the lightest waiter");
        let (_a1, _) = join(0).ok().unwrap();
        assert_eq!(b.waiting.load(Relaxed), 3, "the place changed hands");
        // b and c weigh the same: the newest waiter of either, b2, gave up its place.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert_eq!(Pin::new(&mut b2).poll(&mut cx), Poll::Ready(Turn::Evicted));
        assert_eq!(Pin::new(&mut b1).poll(&mut cx), Poll::Pending);
        assert_eq!(Pin::new(&mut c1).poll(&mut cx), Poll::Pending);
        drop(b2);
        assert_eq!(
            b.waiting.load(Relaxed),
            3,
            "an evicted ticket's place is not its own"
        );
        assert_eq!(b.q.queued.load(Relaxed), 3);
    }

    #[test]
    fn a_waiter_that_joins_as_the_last_permit_comes_back_is_served() {
        // The race of a check-then-act queue: one thread joins while another gives the only
        // permit back. Whichever goes first, the waiter must end up granted, never left waiting
        // next to a free permit.
        let classes = Classes::new().class("a", 1).class("b", 2);
        let q = ClassQueue::new(&classes);
        let permits = LocalPermits::new(1);
        let (waiting, class_waiting) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let barrier = std::sync::Barrier::new(2);
        let rounds = 20_000;
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..rounds {
                    barrier.wait();
                    permits.give_back();
                    q.returned(&permits);
                    barrier.wait();
                }
            });
            let mut cx = Context::from_waker(std::task::Waker::noop());
            // Counted, not asserted here: a panic would leave the other thread at the barrier.
            let (mut stranded, mut lost) = (0, 0);
            for round in 0..rounds {
                // Free at the start of every round: given back at the end of the last one, or
                // left free next to a stranded waiter.
                if !permits.try_take() {
                    lost += 1;
                }
                barrier.wait();
                let (mut ticket, _) = q
                    .join(round % 2, &permits, &waiting, &class_waiting, None)
                    .ok()
                    .unwrap();
                barrier.wait();
                if Pin::new(&mut ticket).poll(&mut cx) != Poll::Ready(Turn::Granted) {
                    stranded += 1;
                    // Leaves the lane; the free permit is taken at the next round's start.
                    drop(ticket);
                    continue;
                }
                drop(ticket);
                permits.give_back();
                q.returned(&permits);
            }
            assert_eq!(
                (stranded, lost),
                (0, 0),
                "of {rounds} rounds, waiters left next to a free permit, permits lost"
            );
        });
    }
}
