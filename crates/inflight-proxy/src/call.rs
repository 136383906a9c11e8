//! [`CallSlot`]: a request's call while the proxy holds it, shared by the request's future,
//! the answer's body, and what ends the call early (the budget's [`Sweeper`](crate::sweep) at
//! the call's deadline, a lost fleet lease).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Waker;

use hyper::body::Incoming;
use inflight::limit::{Outcome, Verdict};
use inflight::tower::HeldCall;

use crate::client_body::ClientBody;
use crate::detached::Detached;
use crate::upstream::answer::AnswerBody;
use crate::upstream::Socket;

/// The call of one request, with its permit, until it ends: as it went (its answer read to
/// its end, or refused), or early (its deadline passed, its lease was lost).
pub(crate) struct CallSlot {
    held: Mutex<Option<Held>>,
    timed_out: AtomicBool,
    /// The call's fleet lease was lost and the budget drops such calls (`on_lost = "cancel"`).
    lease_lost: AtomicBool,
    /// Its client took no byte of the answer for the proxy's `idle_timeout` (HTTP/2).
    client_stopped: AtomicBool,
    /// The task that last waited on the call (for its answer, or to send its body): woken when
    /// the call ends early, so that it is cut then.
    waker: Mutex<Option<Waker>>,
    /// What stops the upstream when the call ends early, at once, whether or not the client
    /// is reading: hyper stops polling a body while the client takes no bytes, and the upstream
    /// must not go on serving a call whose permit was given back.
    upstream: Mutex<Option<Upstream>>,
    /// How the client's request body comes (set by whoever reads it).
    client_sending: Option<Arc<ClientBody>>,
    /// Whether the call timed out while it waited for the client's body: the client's doing,
    /// not the upstream's.
    client_stalled: AtomicBool,
    /// Where the call goes on to its end if its client leaves (`on_client_gone = "finish"`).
    outlives_client: Option<Detached>,
    /// Its client left (counted once, by whoever saw it first).
    left: AtomicBool,
}

/// Why a call ends early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Early {
    /// Its call timeout was reached: timed out (or the client's doing, while it still owed its
    /// request's body).
    Deadline,
    /// Its fleet lease was lost, and the budget drops such calls: cancelled.
    LeaseLost,
    /// Its client took no byte of the answer for the proxy's `idle_timeout`: cancelled.
    ClientStopped,
}

/// How a call that ends early stops its upstream.
pub(crate) enum Upstream {
    /// Its pooled HTTP/1.1 connection, shut down.
    Connection(Arc<Socket>),
    /// Its pooled HTTP/1.1 connection, shut down, and its answer's body, held here for an
    /// HTTP/2 client (whose stream hyper may stop polling for good) and dropped: the
    /// connection closes, its descriptors with it.
    Pooled(Arc<Socket>, AnswerBody),
    /// Its answer's body (from a client that multiplexes or encrypts: HTTP/2, TLS), held here
    /// while it streams and dropped: that connection closes, or that HTTP/2 stream is reset.
    Body(Incoming),
}

/// The call, and how it will end if it ends as it goes.
pub(crate) struct Held {
    pub(crate) call: HeldCall,
    pub(crate) ok: bool,
    pub(crate) outcome: Verdict,
    /// What the call tells the limit if it outlasts the call timeout.
    on_timeout: Outcome,
}

impl CallSlot {
    /// `call`, which tells the limit `on_timeout` if it outlasts its call timeout; until a
    /// verdict is given it would end as a failure that teaches the limit nothing.
    #[cfg(test)]
    pub(crate) fn new(call: HeldCall, on_timeout: Outcome) -> Arc<CallSlot> {
        Self::watching_client(call, on_timeout, None, None)
    }

    /// [`CallSlot::new`], for a call whose sender sets `client_sending` while it waits for
    /// more of the client's request body: a call that outlasts its timeout then ends as the
    /// client's doing (teaching the limit nothing), not as the upstream's timeout.
    /// `outlives_client`: where the call goes on to its end if its client leaves (see
    /// [`CallSlot::outlives_client`]).
    pub(crate) fn watching_client(
        call: HeldCall,
        on_timeout: Outcome,
        client_sending: Option<Arc<ClientBody>>,
        outlives_client: Option<Detached>,
    ) -> Arc<CallSlot> {
        Arc::new(CallSlot {
            held: Mutex::new(Some(Held {
                call,
                ok: false,
                outcome: Outcome::Ignore.into(),
                on_timeout,
            })),
            timed_out: AtomicBool::new(false),
            lease_lost: AtomicBool::new(false),
            client_stopped: AtomicBool::new(false),
            waker: Mutex::new(None),
            upstream: Mutex::new(None),
            client_sending,
            client_stalled: AtomicBool::new(false),
            outlives_client,
            left: AtomicBool::new(false),
        })
    }

    /// What stops the upstream if the call ends early (see [`Upstream`]).
    pub(crate) fn stops(&self, upstream: Upstream) {
        *self.upstream() = Some(upstream);
    }

    /// What stops the upstream: `None` once the call ended early (or it was taken back as the
    /// answer ended).
    pub(crate) fn upstream(&self) -> MutexGuard<'_, Option<Upstream>> {
        self.upstream.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The call, if it has not ended; it is the caller's to end (dropped unended, it counts as
    /// cancelled).
    pub(crate) fn take(&self) -> Option<Held> {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Whether the call is still under way.
    pub(crate) fn holds(&self) -> bool {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Ends the call now (`ok`, with `outcome` for the limit); false if it had ended already.
    pub(crate) fn end(&self, ok: bool, outcome: impl Into<Verdict>) -> bool {
        match self.take() {
            Some(held) => {
                held.call.finish(ok, outcome);
                true
            }
            None => false,
        }
    }

    /// Sets how the call ends when it ends as it goes; false if it has ended already.
    pub(crate) fn decide(&self, ok: bool, outcome: Verdict) -> bool {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        match held.as_mut() {
            Some(held) => {
                held.ok = ok;
                held.outcome = outcome;
                true
            }
            None => false,
        }
    }

    /// Ends the call early, if it has not ended, for `why`. The task that waits on it, if any,
    /// is woken to cut it.
    pub(crate) fn expire(&self, why: Early) {
        let Some(held) = self.take() else {
            return;
        };
        match why {
            Early::Deadline => {
                // Whether the call waited for the client's body (before the upstream answered,
                // or after, in a stream the client feeds): then nothing is learned of the
                // upstream. Said before `timed_out`, which those who read it look at first.
                let stalled = self.client_sending.as_ref().is_some_and(|s| s.owes_body());
                self.client_stalled.store(stalled, Ordering::Release);
                self.timed_out.store(true, Ordering::Release);
                if stalled {
                    held.call.finish(false, Outcome::Ignore);
                } else {
                    held.call.timed_out_as(held.on_timeout);
                }
            }
            Early::LeaseLost | Early::ClientStopped => {
                // Counted as cancelled: nothing is learned of the upstream.
                let flag = if why == Early::LeaseLost {
                    &self.lease_lost
                } else {
                    &self.client_stopped
                };
                flag.store(true, Ordering::Release);
                drop(held);
            }
        }
        // After the flags: a body found gone is found ended early.
        let upstream = self.upstream().take();
        if let Some(Upstream::Connection(socket) | Upstream::Pooled(socket, _)) = &upstream {
            socket.shut();
        }
        drop(upstream);
        let waker = self
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Wakes `waker` when the call ends early. Registered before [`CallSlot::timed_out`] and
    /// [`CallSlot::lease_lost`] are read, so that an end between the two is not missed.
    pub(crate) fn wake_on_expiry(&self, waker: &Waker) {
        let mut slot = self.waker.lock().unwrap_or_else(PoisonError::into_inner);
        if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *slot = Some(waker.clone());
        }
    }

    /// Whether the call was ended at its deadline.
    pub(crate) fn timed_out(&self) -> bool {
        self.timed_out.load(Ordering::Acquire)
    }

    /// The upstream's answer has begun: the client's body, if it still comes, may pause as
    /// long as it likes (only the call timeout bounds it).
    pub(crate) fn answered(&self) {
        if let Some(sending) = &self.client_sending {
            sending.answered();
        }
    }

    /// Whether the client's request body failed or stalled: what failed the request after it
    /// (an HTTP/2 stream reset for it, say) is the client's doing.
    pub(crate) fn client_body_failed(&self) -> bool {
        self.client_sending.as_ref().is_some_and(|s| s.failed())
    }

    /// Whether the call was ended at its deadline while the client had not sent its whole
    /// request body.
    pub(crate) fn client_stalled(&self) -> bool {
        self.client_stalled.load(Ordering::Acquire)
    }

    /// Whether the call was dropped for its lost lease.
    pub(crate) fn lease_lost(&self) -> bool {
        self.lease_lost.load(Ordering::Acquire)
    }

    /// Where the call goes on to its end, its answer read and dropped, once its client has
    /// left (`on_client_gone = "finish"`), holding its permit until then (or its deadline).
    pub(crate) fn outlives_client(&self) -> Option<&Detached> {
        self.outlives_client.as_ref()
    }

    /// Its client left: true the first time it is said.
    pub(crate) fn left_now(&self) -> bool {
        !self.left.swap(true, Ordering::AcqRel)
    }

    /// Whether the call was dropped because its client took no byte of the answer for the
    /// proxy's `idle_timeout`.
    pub(crate) fn client_stopped(&self) -> bool {
        self.client_stopped.load(Ordering::Acquire)
    }
}
