//! [`Shutdown`]: fires once Ctrl-C, SIGTERM or SIGHUP arrives, so a benchmark or an experiment can
//! stop its child processes and remove its cgroups before the process ends.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

/// Fires once Ctrl-C (SIGINT), SIGTERM or SIGHUP arrives; clones watch the same signal.
///
/// Async code waits for it with [`Shutdown::wait`] (in a `select!` next to the work); threads
/// that never await, such as CPU-bound workers, poll [`Shutdown::fired`]. The first signal fires
/// it; a second one, or any signal after [`Shutdown::exit_on_signal`], ends the process at once
/// with status 130, the shell's status for an interrupted command. Child processes do not inherit
/// the handlers (exec resets them).
///
/// ```
/// use inflight_bench::shutdown::Shutdown;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (tx, rx) = tokio::sync::watch::channel(false);
/// let shutdown = Shutdown::from_channel(rx);
/// assert!(!shutdown.fired());
/// tx.send(true).unwrap();
/// shutdown.wait().await;
/// assert!(shutdown.clone().fired());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
    exit_now: Arc<AtomicBool>,
    /// The signal that fired the shutdown (0 before one did, or when fired by a channel).
    signal: Arc<AtomicI32>,
}

impl Shutdown {
    /// Listens for SIGINT, SIGTERM and SIGHUP from now on, on the current tokio runtime.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, or in one built without its I/O driver (`enable_io`/`enable_all`).
    pub fn on_signals() -> Shutdown {
        let (tx, rx) = watch::channel(false);
        let exit_now = Arc::new(AtomicBool::new(false));
        let exit = Arc::clone(&exit_now);
        let signal_seen = Arc::new(AtomicI32::new(0));
        let seen = Arc::clone(&signal_seen);
        // Registered before returning, so a signal that arrives next is already caught.
        let mut interrupt = signal(SignalKind::interrupt()).ok();
        let mut terminate = signal(SignalKind::terminate()).ok();
        let mut hangup = signal(SignalKind::hangup()).ok();
        tokio::spawn(async move {
            loop {
                let signo = tokio::select! {
                    _ = next(&mut interrupt) => libc_signal::SIGINT,
                    _ = next(&mut terminate) => libc_signal::SIGTERM,
                    _ = next(&mut hangup) => libc_signal::SIGHUP,
                };
                if exit.load(Ordering::SeqCst) || *tx.borrow() {
                    std::process::exit(128 + signo);
                }
                seen.store(signo, Ordering::SeqCst);
                let _ = tx.send(true);
            }
        });
        Shutdown {
            rx,
            exit_now,
            signal: signal_seen,
        }
    }

    /// [`Shutdown::on_signals`] for a program without a tokio runtime: the signals are received
    /// on a helper thread running a small current-thread runtime.
    ///
    /// # Errors
    ///
    /// If the thread or its runtime cannot be started.
    pub fn on_signals_in_background() -> io::Result<Shutdown> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("shutdown-signals".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                runtime.block_on(async {
                    let _ = ready_tx.send(Ok(Shutdown::on_signals()));
                    std::future::pending::<()>().await
                });
            })?;
        ready_rx
            .recv()
            .map_err(|_| io::Error::other("the signal thread ended before it was ready"))?
    }

    /// A shutdown that fires when the channel's sender sends `true` (for tests and embedding).
    pub fn from_channel(rx: watch::Receiver<bool>) -> Shutdown {
        Shutdown {
            rx,
            exit_now: Arc::new(AtomicBool::new(false)),
            signal: Arc::new(AtomicI32::new(0)),
        }
    }

    /// A shutdown that never fires.
    pub fn never() -> Shutdown {
        let (_tx, rx) = watch::channel(false);
        Shutdown::from_channel(rx)
    }

    /// From now on a signal ends the process at once (nothing is left to clean up).
    pub fn exit_on_signal(&self) {
        self.exit_now.store(true, Ordering::SeqCst);
    }

    /// Whether the shutdown has fired.
    /// The exit status a shell gives a command ended by the signal that fired: 130 for Ctrl-C
    /// (SIGINT), 143 for SIGTERM, 129 for SIGHUP; 130 when the shutdown fired another way.
    pub fn exit_code(&self) -> u8 {
        match self.signal.load(Ordering::SeqCst) {
            0 => 130,
            signo => u8::try_from(128 + signo).unwrap_or(130),
        }
    }

    /// The name of the signal that fired, if one did.
    pub fn signal_name(&self) -> Option<&'static str> {
        match self.signal.load(Ordering::SeqCst) {
            libc_signal::SIGINT => Some("SIGINT"),
            libc_signal::SIGTERM => Some("SIGTERM"),
            libc_signal::SIGHUP => Some("SIGHUP"),
            _ => None,
        }
    }

    pub fn fired(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves when the shutdown fires (never, if its sender is gone without firing).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches a flag.
    pub async fn wait(&self) {
        let mut rx = self.rx.clone();
        if rx.wait_for(|&v| v).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The next delivery of `signal`; pending forever if it could not be registered or its stream
/// has ended.
/// The numbers of the signals a shutdown listens for (the same on every Linux architecture).
mod libc_signal {
    pub const SIGHUP: i32 = 1;
    pub const SIGINT: i32 = 2;
    pub const SIGTERM: i32 = 15;
}

async fn next(signal: &mut Option<Signal>) {
    if let Some(s) = signal {
        if s.recv().await.is_some() {
            return;
        }
    }
    std::future::pending::<()>().await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_that_never_fires_does_not_resolve() {
        let shutdown = Shutdown::never();
        assert!(!shutdown.fired());
        let waited = tokio::time::timeout(Duration::from_secs(60), shutdown.wait()).await;
        assert!(waited.is_err());
    }

    #[tokio::test]
    async fn clones_see_the_same_firing() {
        let (tx, rx) = watch::channel(false);
        let shutdown = Shutdown::from_channel(rx);
        let clone = shutdown.clone();
        let waiter = tokio::spawn(async move { clone.wait().await });
        tx.send(true).unwrap();
        waiter.await.unwrap();
        assert!(shutdown.fired());
    }
}
