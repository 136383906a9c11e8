//! [`PreciseTimer`]: sleeps that complete within tens of microseconds of their deadline.
//!
//! tokio's timer wheel ticks every millisecond and rounds deadlines up to the next tick, so a
//! 20 ms sleep lasts about 21 ms, and a benchmark of many short waves comes out a few percent over
//! its ideal time. This timer parks one thread with a nanosecond timeout instead. The fan-out
//! benchmark's stand-in dependency sleeps on it, and so does the lab's sim, where a fixed cost per
//! call would weigh ten times more in a run at time scale 0.1 than at 1.
//!
//! On Linux the thread also asks for no timer slack: by default the kernel may wake a thread up
//! to 50 µs after its timeout, to batch wake-ups. Measured on a 2-CPU VM, a 12 ms sleep of a
//! thread overshot by 0.16 ms (median) with the default slack and 0.11 ms without.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::deadlines::Deadlines;

/// A timer thread that completes sleeps close to their deadline (parks with a nanosecond
/// timeout instead of ticking every millisecond). Cheap to clone; the thread stops when the last
/// clone is dropped.
pub struct PreciseTimer {
    shared: Arc<TimerShared>,
}

struct TimerShared {
    state: Mutex<TimerState>,
    thread: Mutex<Option<JoinHandle<()>>>,
    handles: AtomicUsize,
}

#[derive(Default)]
struct TimerState {
    due: Deadlines<oneshot::Sender<()>>,
    shutdown: bool,
}

impl PreciseTimer {
    /// Starts the timer thread.
    ///
    /// # Panics
    ///
    /// If the operating system cannot start a thread.
    pub fn new() -> PreciseTimer {
        let shared = Arc::new(TimerShared {
            state: Mutex::new(TimerState::default()),
            thread: Mutex::new(None),
            handles: AtomicUsize::new(1),
        });
        let worker = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("precise-timer".into())
            .spawn(move || timer_loop(&worker))
            .expect("spawn the timer thread");
        *shared.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        PreciseTimer { shared }
    }

    /// Completes at `deadline` (or just after).
    pub fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        let wake = {
            let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            let earliest = state.due.earliest().is_none_or(|e| deadline < e);
            state.due.push(deadline, tx);
            earliest
        };
        if wake {
            self.unpark();
        }
        async move {
            let _ = rx.await;
        }
    }

    /// Completes after `delay`.
    pub fn sleep(&self, delay: Duration) -> impl Future<Output = ()> + Send + 'static {
        self.sleep_until(Instant::now() + delay)
    }

    fn unpark(&self) {
        if let Some(h) = self
            .shared
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            h.thread().unpark();
        }
    }
}

impl Default for PreciseTimer {
    fn default() -> Self {
        PreciseTimer::new()
    }
}

impl Clone for PreciseTimer {
    fn clone(&self) -> Self {
        self.shared.handles.fetch_add(1, Ordering::SeqCst);
        PreciseTimer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for PreciseTimer {
    fn drop(&mut self) {
        if self.shared.handles.fetch_sub(1, Ordering::SeqCst) != 1 {
            return;
        }
        self.shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shutdown = true;
        let handle = self
            .shared
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(h) = handle {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

/// Asks the kernel to end this thread's timeouts on time rather than up to 50 µs late.
#[cfg(target_os = "linux")]
fn no_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer and changes only the calling thread's slack;
    // 1 ns is the least (0 would restore the default).
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

#[cfg(not(target_os = "linux"))]
fn no_timer_slack() {}

fn timer_loop(shared: &TimerShared) {
    no_timer_slack();
    loop {
        let next = {
            let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.shutdown {
                // Pending sleeps complete (their senders drop) rather than hang.
                state.due.clear();
                return;
            }
            let now = Instant::now();
            while let Some(tx) = state.due.pop_due(now) {
                let _ = tx.send(());
            }
            state.due.earliest()
        };
        match next {
            Some(deadline) => {
                let now = Instant::now();
                if deadline > now {
                    std::thread::park_timeout(deadline - now);
                }
            }
            None => std::thread::park(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn precise_timer_orders_and_completes_sleeps() {
        let timer = PreciseTimer::new();
        let start = Instant::now();
        let a = timer.sleep(Duration::from_millis(30));
        let b = timer.sleep(Duration::from_millis(5));
        b.await;
        let after_b = start.elapsed();
        a.await;
        let after_a = start.elapsed();
        assert!(after_b >= Duration::from_millis(5));
        assert!(after_a >= Duration::from_millis(30));
    }

    /// tokio's timer would take 2 ms or more for each of these (its 1 ms ticks); the median is
    /// the measure, as a busy host stalls a few sleeps by milliseconds whatever the timer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn precise_timer_ends_sleeps_close_to_their_deadline() {
        let timer = PreciseTimer::new();
        let delay = Duration::from_micros(1500);
        let mut took = Vec::new();
        for _ in 0..100 {
            let start = Instant::now();
            timer.sleep(delay).await;
            took.push(start.elapsed());
        }
        took.sort();
        assert!(took[0] >= delay, "a sleep ended early: {:?}", took[0]);
        let median = took[took.len() / 2];
        assert!(
            median <= delay.mul_f64(1.2),
            "median {median:?} for {delay:?}"
        );
    }

    #[tokio::test]
    async fn precise_timer_thread_stops_with_the_last_handle() {
        let timer = PreciseTimer::new();
        let clone = timer.clone();
        let shared = Arc::clone(&timer.shared);
        drop(timer);
        clone.sleep(Duration::from_millis(1)).await;
        drop(clone);
        assert!(shared.thread.lock().unwrap().is_none());
    }
}
