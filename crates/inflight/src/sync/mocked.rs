//! Models of tokio's `Semaphore` and `oneshot` over loom, as far as `store::local` and the class
//! queue use them.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};

use loom::sync::atomic::AtomicUsize;
use loom::sync::Mutex;

/// tokio's `Semaphore` with the memory orderings of tokio's own, `tokio/src/sync/batch_semaphore.rs`
/// (tokio 1.54): `try_acquire` loads the free permits with `Acquire` and takes one with a
/// `compare_exchange(AcqRel, Acquire)`; `add_permits` takes the wait list's lock and, with
/// nobody in the list, adds with `fetch_add(Release)`; `forget_permits` is a
/// `compare_exchange_weak(AcqRel, Acquire)` loop; `available_permits` an `Acquire` load. tokio
/// keeps the count shifted left by one, its low bit the closed flag; a budget's semaphore is
/// never closed, so the model keeps the count alone.
///
/// The wait list itself is not modelled: a budget with classes never waits in the semaphore
/// (its waiters wait in the class queue), so tokio's list stays empty on the paths the models
/// check, and `add_permits` never hands a permit to it.
pub(crate) struct Semaphore {
    permits: AtomicUsize,
    /// tokio's wait list's lock: `add_permits` holds it while it adds.
    waiters: Mutex<()>,
}

/// A permit taken; given back when dropped, unless forgotten.
pub(crate) struct SemaphorePermit<'a> {
    semaphore: &'a Semaphore,
}

#[derive(Debug)]
pub(crate) struct TryAcquireError;

#[derive(Debug)]
pub(crate) struct AcquireError;

impl Semaphore {
    pub(crate) fn new(permits: usize) -> Semaphore {
        Semaphore {
            permits: AtomicUsize::new(permits),
            waiters: Mutex::new(()),
        }
    }

    pub(crate) fn available_permits(&self) -> usize {
        self.permits.load(Acquire)
    }

    pub(crate) fn try_acquire(&self) -> Result<SemaphorePermit<'_>, TryAcquireError> {
        let mut curr = self.permits.load(Acquire);
        loop {
            if curr == 0 {
                return Err(TryAcquireError);
            }
            match self
                .permits
                .compare_exchange(curr, curr - 1, AcqRel, Acquire)
            {
                Ok(_) => return Ok(SemaphorePermit { semaphore: self }),
                Err(actual) => curr = actual,
            }
        }
    }

    /// Waits until a permit is free. tokio queues the caller; the model tries again each time
    /// loom lets another thread run. Not on the paths the models check.
    pub(crate) async fn acquire(&self) -> Result<SemaphorePermit<'_>, AcquireError> {
        loop {
            if let Ok(permit) = self.try_acquire() {
                return Ok(permit);
            }
            loom::thread::yield_now();
        }
    }

    pub(crate) fn add_permits(&self, n: usize) {
        if n == 0 {
            return;
        }
        let _waiters = self.waiters.lock().unwrap();
        self.permits.fetch_add(n, Release);
    }

    pub(crate) fn forget_permits(&self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let mut curr = self.permits.load(Acquire);
        loop {
            let new = curr.saturating_sub(n);
            match self
                .permits
                .compare_exchange_weak(curr, new, AcqRel, Acquire)
            {
                Ok(_) => return curr.min(n),
                Err(actual) => curr = actual,
            }
        }
    }
}

impl SemaphorePermit<'_> {
    pub(crate) fn forget(self) {
        std::mem::forget(self);
    }
}

impl Drop for SemaphorePermit<'_> {
    fn drop(&mut self) {
        self.semaphore.add_permits(1);
    }
}

/// tokio's `oneshot` as a slot under a loom lock: a value sent is there for the receiver, a
/// send to a dropped receiver fails and hands the value back, a receiver whose sender went
/// without sending gets an error. A lock orders the two sides at least as strongly as tokio's
/// `AcqRel` state word does; the models check the permit's walk, not the channel.
pub(crate) mod oneshot {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    use loom::sync::{Arc, Mutex};

    struct Slot<T> {
        value: Option<T>,
        sender_gone: bool,
        receiver_gone: bool,
        waker: Option<Waker>,
    }

    pub(crate) struct Sender<T> {
        slot: Arc<Mutex<Slot<T>>>,
    }

    pub(crate) struct Receiver<T> {
        slot: Arc<Mutex<Slot<T>>>,
    }

    #[derive(Debug)]
    pub(crate) struct RecvError;

    #[derive(Debug)]
    pub(crate) struct TryRecvError;

    pub(crate) fn channel<T>() -> (Sender<T>, Receiver<T>) {
        let slot = Arc::new(Mutex::new(Slot {
            value: None,
            sender_gone: false,
            receiver_gone: false,
            waker: None,
        }));
        (Sender { slot: slot.clone() }, Receiver { slot })
    }

    impl<T> Sender<T> {
        pub(crate) fn send(self, value: T) -> Result<(), T> {
            let mut slot = self.slot.lock().unwrap();
            if slot.receiver_gone {
                return Err(value);
            }
            slot.value = Some(value);
            let waker = slot.waker.take();
            drop(slot);
            if let Some(waker) = waker {
                waker.wake();
            }
            Ok(())
        }
    }

    impl<T> Drop for Sender<T> {
        fn drop(&mut self) {
            let mut slot = self.slot.lock().unwrap();
            slot.sender_gone = true;
            let waker = slot.waker.take();
            drop(slot);
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    impl<T> Receiver<T> {
        pub(crate) fn try_recv(&mut self) -> Result<T, TryRecvError> {
            self.slot.lock().unwrap().value.take().ok_or(TryRecvError)
        }
    }

    impl<T> Future for Receiver<T> {
        type Output = Result<T, RecvError>;

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            let mut slot = self.slot.lock().unwrap();
            if let Some(value) = slot.value.take() {
                return Poll::Ready(Ok(value));
            }
            if slot.sender_gone {
                return Poll::Ready(Err(RecvError));
            }
            slot.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    impl<T> Drop for Receiver<T> {
        fn drop(&mut self) {
            self.slot.lock().unwrap().receiver_gone = true;
        }
    }
}
