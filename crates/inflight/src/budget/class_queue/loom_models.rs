//! Loom models of the class queue's "no waiter is lost" pairing: a permit that comes back
//! (`LocalPermits::give_back`, then `ClassQueue::returned`, as `Engine::give_back` does) while a
//! waiter joins or leaves reaches a waiter in every interleaving loom explores, and is never left
//! free next to one. They run the queue's and the permits' own code over `crate::sync`'s loom
//! types. scripts/test.sh runs them in release mode, as tokio runs its own:
//!
//! ```text
//! RUSTFLAGS="--cfg loom -C debug_assertions" \
//!     cargo test -p inflight --lib --release --no-default-features -- loom_models
//! ```
//!
//! and again with `--cfg inflight_planted_lost_waiter`, which puts a plain load in `returned`,
//! where they must fail. They are small enough for loom to try every interleaving it can reach
//! (some 13,000 over the three, in seconds), so they need no `LOOM_MAX_PREEMPTIONS` bound.
//!
//! Loom treats a `SeqCst` access as `AcqRel` (its README, "Unsupported features"): weaker than
//! the real thing, so it may report a bug that `SeqCst` rules out, but it misses none that
//! `AcqRel` allows (load buffering aside, which loom does not explore; the pairing has the other
//! shape, a write then a read on each side). The pairing needs no more than `AcqRel`: the writes to `queued` are
//! read-modify-writes, so one of the two reads the other's, and a read-modify-write that reads
//! the releaser's synchronizes with it (see `ClassQueue::join`). So these models check the
//! argument the code rests on, not a weaker one. Nor is the planted bug's failure an artefact of
//! that treatment: the semaphore's side is `Release` and `Acquire`, outside any `SeqCst` order,
//! so the language's memory model lets both threads read the other's old value there too. It
//! only never happens on x86, where every read-modify-write is a full fence, which is why stress
//! tests there cannot catch it.

use std::sync::atomic::Ordering::Relaxed;
use std::task::Waker;

use loom::thread;

use super::bench::Bench;
use super::*;

/// A queue and its budget's counters, with one permit, held (see `bench`). Leaked, as loom's own
/// tests do, so that tickets (which borrow it) can move between threads.
fn leaked(classes: Classes) -> &'static Bench {
    Box::leak(Box::new(Bench::new(&classes)))
}

impl Bench {
    /// The end of a call that held a permit: what `Engine::give_back` does.
    fn give_back(&self) {
        self.permits.give_back();
        self.q.returned(&self.permits);
    }

    /// Once every ticket is dropped: nobody counted as waiting, whatever the interleaving.
    fn assert_nobody_waits(&self) {
        assert!(!self.q.has_waiters(), "a waiter stayed in a lane");
        assert_eq!(self.waiting.load(Relaxed), 0, "waiting");
        assert_eq!(self.class_waiting.load(Relaxed), 0, "class waiting");
    }
}

fn granted(ticket: &mut Ticket<'_>) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    Pin::new(ticket).poll(&mut cx) == Poll::Ready(Turn::Granted)
}

#[test]
fn a_waiter_that_joins_as_the_permit_comes_back_is_granted() {
    loom::model(|| {
        let b = leaked(Classes::new().class("a", 1));
        let holder = thread::spawn(move || b.give_back());
        let mut ticket = b.join(0);
        holder.join().unwrap();
        assert!(
            granted(&mut ticket),
            "a waiter was left next to a free permit ({} free)",
            b.permits.available()
        );
        assert_eq!(b.permits.in_flight(), 1, "the waiter holds the permit");
        drop(ticket);
        b.assert_nobody_waits();
    });
}

#[test]
fn one_permit_back_reaches_two_waiters_of_different_classes_in_turn() {
    loom::model(|| {
        let b = leaked(Classes::new().class("light", 1).class("heavy", 2));
        let joiners = [0, 1].map(|class| thread::spawn(move || b.join(class)));
        b.give_back();
        let mut tickets = joiners.map(|j| j.join().unwrap());
        let first = tickets.iter_mut().map(granted).collect::<Vec<_>>();
        assert_eq!(
            first.iter().filter(|&&g| g).count(),
            1,
            "one permit came back to two waiters: granted {first:?}, {} free (a waiter was left \
             next to a free permit if none was granted)",
            b.permits.available()
        );
        // The call granted ends: its permit goes on to the other waiter.
        b.give_back();
        assert!(
            tickets.iter_mut().all(granted),
            "the second waiter was left next to a free permit ({} free)",
            b.permits.available()
        );
        assert_eq!(b.permits.in_flight(), 1);
        drop(tickets);
        b.assert_nobody_waits();
    });
}

#[test]
fn a_waiter_that_leaves_as_the_permit_comes_back_passes_it_on() {
    loom::model(|| {
        let b = leaked(Classes::new().class("light", 1).class("heavy", 2));
        let mut stays = b.join(0);
        // Heavier: the permit goes to it first if both wait when it comes back, and its ticket,
        // dropped before it took its turn, must hand the permit on.
        let leaver = thread::spawn(move || drop(b.join(1)));
        b.give_back();
        leaver.join().unwrap();
        assert!(
            granted(&mut stays),
            "the waiter that stayed was left next to a free permit ({} free)",
            b.permits.available()
        );
        assert_eq!(
            b.permits.in_flight(),
            1,
            "the waiter that stayed holds the permit"
        );
        drop(stays);
        b.assert_nobody_waits();
    });
}
