//! [`Pacer`]: one task's sleeps on a `timerfd` in tokio's own reactor, so a deadline wakes the
//! thread that runs the task, with nanosecond resolution and no hand-off between threads.
//!
//! tokio's timer wheel rounds up to the next millisecond, and [`PreciseTimer`] parks a thread
//! of its own that then wakes the runtime's: two wake-ups per deadline. An open-loop load
//! generator sends each request at its scheduled time, and the delay from that time to the
//! send (its send lag) is part of every latency it reports; on a virtual machine each thread
//! wake-up costs tens of microseconds. A timerfd registered with the runtime's reactor
//! expires into the `epoll_wait` the runtime's thread is already parked in.
//!
//! [`PreciseTimer`]: crate::timer::PreciseTimer

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Sleeps of one task on a timer of its own (Linux `timerfd`). Must be made and used inside a
/// tokio runtime with I/O enabled.
pub struct Pacer {
    fd: AsyncFd<OwnedFd>,
}

impl Pacer {
    /// A timer for one task.
    ///
    /// # Errors
    ///
    /// When the kernel refuses a timerfd (out of file descriptors) or the runtime's reactor
    /// refuses to watch it.
    pub fn new() -> io::Result<Pacer> {
        // SAFETY: timerfd_create takes a clock id and flags, and returns a new descriptor or -1.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor just created and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: an OwnedFd holds one open descriptor for as long as it lives and always
        // returns that one; the AsyncFd owns it and closes it only after deregistering.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(io::Error::from)?;
        Ok(Pacer { fd })
    }

    /// Completes at `deadline`, or at once if it has passed.
    ///
    /// # Errors
    ///
    /// When the kernel refuses to arm the timer or the reactor fails.
    pub async fn sleep_until(&self, deadline: Instant) -> io::Result<()> {
        let Some(left) = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        else {
            return Ok(());
        };
        self.arm(left)?;
        loop {
            let mut ready = self.fd.readable().await?;
            let mut expirations = [0u8; 8];
            // SAFETY: reads at most 8 bytes into a buffer of 8 from a descriptor this owns.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    expirations.as_mut_ptr().cast(),
                    expirations.len(),
                )
            };
            if n == 8 {
                // Read out: the next sleep waits for the next expiry, not a stale readiness.
                ready.clear_ready();
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(e);
            }
            ready.clear_ready();
        }
    }

    fn arm(&self, after: Duration) -> io::Result<()> {
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: libc::c_long::from(after.subsec_nanos() as i32),
            },
        };
        // SAFETY: a relative, one-shot expiry on a timerfd this owns; no old value asked for.
        let rc =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_sleep_ends_at_its_deadline_and_one_past_ends_at_once() {
        let pacer = Pacer::new().unwrap();
        for ms in [3, 1, 7] {
            let deadline = Instant::now() + Duration::from_millis(ms);
            pacer.sleep_until(deadline).await.unwrap();
            let now = Instant::now();
            assert!(now >= deadline, "woke {:?} early", deadline - now);
            // Generous: a loaded machine may run this thread late, never a whole second.
            assert!(now - deadline < Duration::from_secs(1));
        }
        let started = Instant::now();
        pacer
            .sleep_until(started - Duration::from_millis(5))
            .await
            .unwrap();
        pacer.sleep_until(started).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
