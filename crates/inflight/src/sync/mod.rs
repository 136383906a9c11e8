//! The lock, atomics, semaphore and one-shot channel that a permit walks through on its way to a
//! class queue's waiter: std's and tokio's, or loom's under `cfg(all(test, loom))`, so that the
//! loom models check the code that runs (as tokio's `src/loom/` does for tokio).
//!
//! Outside loom this module only re-exports: `store::local` and the class queue use std's and
//! tokio's types themselves, with nothing in between. Under loom, tokio's `Semaphore` and
//! `oneshot`, which cannot be built over loom from outside tokio, are replaced by the models in
//! `mocked`.

#[cfg(not(all(test, loom)))]
pub(crate) use std::sync::{Mutex, MutexGuard};
#[cfg(not(all(test, loom)))]
pub(crate) use tokio::sync::{oneshot, Semaphore};

#[cfg(all(test, loom))]
mod mocked;
#[cfg(all(test, loom))]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(all(test, loom))]
pub(crate) use mocked::{oneshot, Semaphore};

pub(crate) mod atomic {
    #[cfg(all(test, loom))]
    pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize};
    #[cfg(not(all(test, loom)))]
    pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize};
}
