//! [`Deadlines`]: things due at given instants, taken earliest first (among equal instants, in
//! the order they were put in). The queue behind [`PreciseTimer`](crate::timer::PreciseTimer)'s
//! thread and [`SpinClock`](crate::pace::SpinClock).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// Items due at instants.
pub(crate) struct Deadlines<T> {
    heap: BinaryHeap<Reverse<Due<T>>>,
    /// The number of the next item put in: the order among equal instants.
    next: u64,
}

struct Due<T> {
    at: Instant,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Due<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl<T> Eq for Due<T> {}

impl<T> PartialOrd for Due<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Due<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl<T> Default for Deadlines<T> {
    fn default() -> Self {
        Deadlines {
            heap: BinaryHeap::new(),
            next: 0,
        }
    }
}

impl<T> Deadlines<T> {
    /// Puts in `item`, due at `at`.
    pub(crate) fn push(&mut self, at: Instant, item: T) {
        let seq = self.next;
        self.next += 1;
        self.heap.push(Reverse(Due { at, seq, item }));
    }

    /// When the earliest item is due.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(d)| d.at)
    }

    /// The earliest item, if it is due at `now` or before.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<T> {
        if self.earliest()? > now {
            return None;
        }
        self.heap.pop().map(|Reverse(d)| d.item)
    }

    /// Drops every item.
    pub(crate) fn clear(&mut self) {
        self.heap.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn items_come_out_when_due_earliest_first_and_in_order_among_equals() {
        let t = Instant::now();
        let mut d = Deadlines::default();
        d.push(t + Duration::from_millis(5), "late");
        d.push(t, "first");
        d.push(t, "second");
        assert_eq!(d.earliest(), Some(t));
        assert_eq!(d.pop_due(t), Some("first"));
        assert_eq!(d.pop_due(t), Some("second"));
        assert_eq!(d.pop_due(t), None, "not due yet");
        assert_eq!(d.pop_due(t + Duration::from_millis(5)), Some("late"));
        assert_eq!(d.earliest(), None);
    }
}
