//! [`Shutdown`]: fires once Ctrl-C or SIGTERM arrives, so a lab run can stop its children and
//! remove its cgroups before it exits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

/// Fires once Ctrl-C or SIGTERM arrives; clones watch the same signal.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
    exit_now: Arc<AtomicBool>,
}

impl Shutdown {
    /// Listens for Ctrl-C (SIGINT) and SIGTERM. Needs a tokio runtime. The first signal fires the
    /// shutdown so the lab can stop its children and remove its cgroups; a second one, or any
    /// after [`Shutdown::exit_on_signal`], ends the process at once with status 130.
    pub fn on_signals() -> Shutdown {
        let (tx, rx) = watch::channel(false);
        let exit_now = Arc::new(AtomicBool::new(false));
        let exit = exit_now.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let mut term = signal(SignalKind::terminate()).ok();
            loop {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    Some(_) = async {
                        match term.as_mut() {
                            Some(t) => t.recv().await,
                            None => std::future::pending().await,
                        }
                    } => {}
                }
                if exit.load(Ordering::SeqCst) || *tx.borrow() {
                    std::process::exit(130);
                }
                let _ = tx.send(true);
            }
        });
        Shutdown { rx, exit_now }
    }

    /// A shutdown that fires when the channel's sender sends `true` (for tests and embedding).
    pub fn from_channel(rx: watch::Receiver<bool>) -> Shutdown {
        Shutdown {
            rx,
            exit_now: Arc::new(AtomicBool::new(false)),
        }
    }

    /// From now on a signal ends the process at once (nothing is left to clean up).
    pub fn exit_on_signal(&self) {
        self.exit_now.store(true, Ordering::SeqCst);
    }

    pub fn fired(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves when the shutdown fires (never, if its sender is gone without firing).
    pub async fn wait(&self) {
        let mut rx = self.rx.clone();
        if rx.wait_for(|&v| v).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
