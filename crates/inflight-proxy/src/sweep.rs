//! [`Sweeper`]: one task per budget that ends every call still held at its deadline, in place
//! of a timer per call.
//!
//! A budget's call timeout is one duration, so its calls' deadlines come in the order the
//! calls start (give or take the moment between a permit's grant and its request's next
//! poll). They wait in a queue in that order: a call adds itself at its start and takes itself
//! out as it ends, and the sweeper sleeps until the first deadline of a call still running.
//! A call's entry is a deadline and a pointer: a few instructions to add and to take out,
//! where a timer of the runtime costs its registration, a poll on each wake-up and its removal.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::call::{CallSlot, Early};

/// The calls of one budget that have a deadline, and the task that ends them at it.
pub(crate) struct Sweeper {
    inner: Arc<Inner>,
}

/// A call's place in its sweeper's queue, taken out when dropped (as the call ends).
pub(crate) struct Watch {
    inner: Arc<Inner>,
    seq: u64,
}

struct Inner {
    queue: Mutex<Queue>,
    /// Told when the queue gains its first entry, or the sweeper is no longer needed.
    changed: Notify,
}

struct Queue {
    /// Each call still running, in the order they started, with ended ones not yet dropped.
    entries: VecDeque<Entry>,
    /// The number the next call's entry gets: a [`Watch`] finds its entry by its number.
    next: u64,
    /// How many entries hold a call still running.
    live: usize,
    /// Whether the task runs.
    running: bool,
    /// Whether the [`Sweeper`] was dropped: its task ends once the calls still queued have.
    closed: bool,
}

struct Entry {
    seq: u64,
    at: Instant,
    /// `None` once the call has ended.
    slot: Option<Arc<CallSlot>>,
}

/// Below this many entries the ended ones wait to reach the front.
const COMPACT_FROM: usize = 64;

impl Sweeper {
    pub(crate) fn new() -> Sweeper {
        Sweeper {
            inner: Arc::new(Inner {
                queue: Mutex::new(Queue {
                    entries: VecDeque::new(),
                    next: 0,
                    live: 0,
                    running: false,
                    closed: false,
                }),
                changed: Notify::new(),
            }),
        }
    }

    /// Ends the call in `slot` at `at` if it is still held then and its [`Watch`] was not
    /// dropped. The sweeper's task starts with its first call, on the current runtime.
    pub(crate) fn watch(&self, at: Instant, slot: &Arc<CallSlot>) -> Watch {
        let mut queue = self.inner.lock();
        let seq = queue.next;
        queue.next += 1;
        let was_empty = queue.entries.is_empty();
        queue.entries.push_back(Entry {
            seq,
            at,
            slot: Some(Arc::clone(slot)),
        });
        queue.live += 1;
        if !queue.running {
            queue.running = true;
            tokio::spawn(sweep(Arc::clone(&self.inner)));
        } else if was_empty {
            self.inner.changed.notify_one();
        }
        Watch {
            inner: Arc::clone(&self.inner),
            seq,
        }
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.inner.lock().closed = true;
        self.inner.changed.notify_one();
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Queue {
    /// The call numbered `seq`, if it is still queued. Entries are in the order of their
    /// numbers; with none dropped from the middle yet, it is at its offset from the front.
    fn find(&mut self, seq: u64) -> Option<&mut Entry> {
        let front = self.entries.front()?.seq;
        let at = usize::try_from(seq.checked_sub(front)?).ok()?;
        let index = match self.entries.get(at) {
            Some(entry) if entry.seq == seq => at,
            _ => self.entries.binary_search_by_key(&seq, |e| e.seq).ok()?,
        };
        self.entries.get_mut(index)
    }

    /// Drops the ended calls at the front; and, once ended calls are most of a long queue
    /// (all behind one long call, say), every ended one, so that the queue stays within a
    /// few times the calls still running.
    fn trim(&mut self) {
        while self.entries.front().is_some_and(|e| e.slot.is_none()) {
            self.entries.pop_front();
        }
        if self.entries.len() > COMPACT_FROM && self.entries.len() > 4 * self.live {
            self.entries.retain(|e| e.slot.is_some());
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut queue = self.inner.lock();
        if let Some(entry) = queue.find(self.seq) {
            if entry.slot.take().is_some() {
                queue.live -= 1;
            }
        }
        queue.trim();
        if queue.closed && queue.entries.is_empty() {
            self.inner.changed.notify_one();
        }
    }
}

/// Ends each call whose deadline has passed, then sleeps until the next deadline (or until a
/// call comes). Ends once the sweeper is dropped and no call is left.
async fn sweep(inner: Arc<Inner>) {
    let mut due = Vec::new();
    loop {
        let (next, running) = {
            let mut queue = inner.lock();
            let now = Instant::now();
            queue.trim();
            while let Some(entry) = queue.entries.front() {
                if entry.at > now {
                    break;
                }
                if let Some(Entry {
                    slot: Some(slot), ..
                }) = queue.entries.pop_front()
                {
                    queue.live -= 1;
                    due.push(slot);
                }
                queue.trim();
            }
            let next = queue.entries.front().map(|e| e.at);
            if next.is_none() && queue.closed {
                queue.running = false;
            }
            (next, queue.running)
        };
        // Outside the lock: ending a call gives its permit back, which may grant a waiter.
        for slot in due.drain(..) {
            slot.expire(Early::Deadline);
        }
        match next {
            _ if !running => return,
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = inner.changed.notified() => {}
                }
            }
            None => inner.changed.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use inflight::limit::Outcome;
    use inflight::tower::HeldCall;
    use inflight::{Budget, BudgetConfig};

    use super::*;

    fn budget(limit: usize, timeout_ms: u64) -> Budget {
        Budget::new(
            "sweep",
            BudgetConfig::new(limit).call_timeout(Duration::from_millis(timeout_ms)),
        )
        .unwrap()
    }

    async fn held(budget: &Budget) -> (Arc<CallSlot>, Instant) {
        let call = HeldCall::start(budget).await.unwrap();
        let at = call.deadline().unwrap();
        (CallSlot::new(call, Outcome::Ignore), at)
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_still_held_at_its_deadline_is_ended_then_and_gives_its_permit_back() {
        let budget = budget(2, 100);
        let sweeper = Sweeper::new();
        let (slot, at) = held(&budget).await;
        let _watch = sweeper.watch(at, &slot);
        tokio::time::sleep(Duration::from_millis(99)).await;
        assert!(slot.holds());
        assert_eq!(budget.in_flight(), 1);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(!slot.holds());
        assert!(slot.timed_out());
        assert_eq!(budget.in_flight(), 0);
        assert_eq!(budget.snapshot().call_timeouts, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_that_end_first_are_not_touched_and_leave_the_queue() {
        let budget = budget(8, 100);
        let sweeper = Sweeper::new();
        let mut slots = Vec::new();
        for _ in 0..4 {
            let (slot, at) = held(&budget).await;
            let watch = sweeper.watch(at, &slot);
            slots.push((slot, watch));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The first and third end as they went; the others run on.
        for i in [0, 2] {
            assert!(slots[i].0.end(true, Outcome::Success));
        }
        let (_, first_watch) = slots.remove(0);
        drop(first_watch);
        assert_eq!(
            sweeper.inner.lock().entries.len(),
            3,
            "the ended front left"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(budget.snapshot().call_timeouts, 2);
        assert_eq!(budget.in_flight(), 0);
        for (slot, _) in &slots {
            assert!(!slot.holds());
        }
        assert!(!slots[1].0.timed_out(), "an ended call is not timed out");
        drop(slots);
        assert!(sweeper.inner.lock().entries.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_sweeper_sleeps_while_idle_and_wakes_for_a_new_call() {
        let budget = budget(2, 50);
        let sweeper = Sweeper::new();
        let (slot, at) = held(&budget).await;
        drop(sweeper.watch(at, &slot));
        assert!(slot.end(true, Outcome::Success));
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (slot, at) = held(&budget).await;
        let _watch = sweeper.watch(at, &slot);
        tokio::time::sleep(Duration::from_millis(51)).await;
        assert!(slot.timed_out());
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_sweeper_still_ends_the_calls_it_holds_and_then_stops() {
        let budget = budget(2, 50);
        let sweeper = Sweeper::new();
        let (slot, at) = held(&budget).await;
        let watch = sweeper.watch(at, &slot);
        let inner = Arc::clone(&sweeper.inner);
        drop(sweeper);
        tokio::time::sleep(Duration::from_millis(51)).await;
        assert!(slot.timed_out());
        drop(watch);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(!inner.lock().running, "the task ended");
        assert_eq!(Arc::strong_count(&inner), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn calls_ended_behind_a_long_one_do_not_pile_up_and_the_rest_are_still_found() {
        let budget = budget(2048, 60_000);
        let sweeper = Sweeper::new();
        let (long, at) = held(&budget).await;
        let _long = sweeper.watch(at, &long);
        let mut kept = Vec::new();
        for i in 0..1000 {
            let (slot, at) = held(&budget).await;
            let watch = sweeper.watch(at, &slot);
            if i % 100 == 0 {
                kept.push((slot, watch));
            } else {
                assert!(slot.end(true, Outcome::Success));
                drop(watch);
            }
            let (len, live) = {
                let queue = sweeper.inner.lock();
                (queue.entries.len(), queue.live)
            };
            // At most 11 calls run at once here.
            assert!(len <= 65, "{len} entries, {live} live");
        }
        assert_eq!(sweeper.inner.lock().live, 11);
        // One kept call ends as it went: its entry is found after the compactions.
        let (slot, watch) = kept.remove(5);
        assert!(slot.end(true, Outcome::Success));
        drop(watch);
        assert_eq!(sweeper.inner.lock().live, 10);
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert!(long.timed_out());
        for (slot, _) in &kept {
            assert!(slot.timed_out());
        }
        assert!(!slot.timed_out());
        assert_eq!(budget.in_flight(), 0);
        assert_eq!(budget.snapshot().call_timeouts, 10);
    }
}
