//! [`SpinClock`]: sleeps of many tasks ended by a task that keeps their thread busy, with no
//! kernel timer at all.
//!
//! An open-loop load generator sends each request at its scheduled time, and the delay from
//! that time to the send (its send lag) is part of every latency it reports. tokio's timer
//! wheel rounds up to the next millisecond; [`PreciseTimer`] parks a thread of its own that
//! then wakes the runtime's, two wake-ups per deadline, and on a virtual machine each thread
//! wake-up costs tens of microseconds; a `timerfd` per task in the runtime's reactor (this
//! module's first version) still cost a kernel timer per send.
//!
//! [`PreciseTimer`]: crate::timer::PreciseTimer

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Poll, Waker};
use std::time::Instant;

use crate::deadlines::Deadlines;

/// Sleeps of many tasks on one thread that never sleeps itself, ended by whoever calls
/// [`SpinClock::wake_due`] as it spins: no kernel timer per sleep.
///
/// A `timerfd` per sleep costs the kernel two system calls and a timer interrupt per deadline,
/// and on a virtual machine each timer armed and fired also exits to the host: the proxy
/// benchmark's open loop, sending tens of thousands of requests a second from one thread, was
/// late by more than its rate allows from about 25,000/s on, although the same generator's
/// closed loop sent 220,000 a second. The open loop's thread spins anyway (see
/// `proxy_bench::load`); here the spin also ends the sleeps that are due. A sleep ends no
/// earlier than its deadline, and as late as the spinning task's next turn.
#[derive(Clone, Default)]
pub struct SpinClock {
    due: Arc<Mutex<Deadlines<Waker>>>,
}

impl SpinClock {
    /// A clock with no sleeper.
    pub fn new() -> SpinClock {
        SpinClock::default()
    }

    /// Completes at `deadline` (at once if it has passed), once [`SpinClock::wake_due`] has
    /// been called at or after it.
    pub fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send + '_ {
        let mut waiting = false;
        std::future::poll_fn(move |cx| {
            if Instant::now() >= deadline {
                return Poll::Ready(());
            }
            if !waiting {
                waiting = true;
                self.due
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(deadline, cx.waker().clone());
            }
            Poll::Pending
        })
    }

    /// Wakes every sleeper whose deadline has passed; returns how many.
    pub fn wake_due(&self) -> usize {
        let now = Instant::now();
        let mut woken = Vec::new();
        {
            let mut due = self.due.lock().unwrap_or_else(PoisonError::into_inner);
            while let Some(waker) = due.pop_due(now) {
                woken.push(waker);
            }
        }
        let n = woken.len();
        for waker in woken {
            waker.wake();
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "current_thread")]
    async fn a_spin_clocks_sleeps_end_in_deadline_order_never_early() {
        let clock = SpinClock::new();
        let start = Instant::now();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (i, ms) in [(0, 6u64), (1, 2), (2, 4), (3, 0)] {
            let clock = clock.clone();
            let order = Arc::clone(&order);
            tasks.push(tokio::spawn(async move {
                let deadline = start + Duration::from_millis(ms);
                clock.sleep_until(deadline).await;
                assert!(Instant::now() >= deadline, "sleeper {i} woke early");
                order.lock().unwrap().push(i);
            }));
        }
        // The spinning task: bounded in time, a second at most.
        let mut woken = 0;
        while tasks.iter().any(|t| !t.is_finished()) && start.elapsed() < Duration::from_secs(1) {
            woken += clock.wake_due();
            tokio::task::yield_now().await;
        }
        for t in tasks {
            t.await.unwrap();
        }
        // The one already due never slept; the others each slept once and were woken once.
        assert_eq!(woken, 3);
        assert_eq!(*order.lock().unwrap(), vec![3, 1, 2, 0]);
    }
}
