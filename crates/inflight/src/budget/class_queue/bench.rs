//! A class queue and its budget's counters with one permit, held: what the queue's tests and its
//! loom models drive.

use std::sync::atomic::AtomicUsize;

use super::*;

pub(super) struct Bench {
    pub(super) q: ClassQueue,
    pub(super) permits: LocalPermits,
    pub(super) waiting: AtomicUsize,
    pub(super) class_waiting: AtomicUsize,
}

impl Bench {
    pub(super) fn new(classes: &Classes) -> Bench {
        let b = Bench {
            q: ClassQueue::new(classes),
            permits: LocalPermits::new(1),
            waiting: AtomicUsize::new(0),
            class_waiting: AtomicUsize::new(0),
        };
        assert!(b.permits.try_take());
        b
    }

    pub(super) fn join(&self, class: usize) -> Ticket<'_> {
        self.q
            .join(
                class,
                &self.permits,
                &self.waiting,
                &self.class_waiting,
                None,
            )
            .ok()
            .expect("an unbounded queue has room")
            .0
    }
}
