//! [`ProxyBody`]: what the proxy sends a client, either a small body of its own (a refusal) or
//! the upstream's body streamed through, holding the request's permit until it ends.

use std::error::Error as StdError;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use inflight::limit::{Outcome, Verdict};
use inflight::tower::HeldCall;
use tokio::task::JoinHandle;

use crate::grpc::{grpc_ended, GrpcTally};
use crate::upstream::Checkout;

/// The error a streamed body ends with: the upstream's, or the call timeout.
pub type BodyError = Box<dyn StdError + Send + Sync>;

/// A response body from the proxy.
pub struct ProxyBody {
    kind: Kind,
}

enum Kind {
    Full(Option<Bytes>),
    Streamed(Box<Streamed>),
}

struct Streamed {
    inner: Incoming,
    /// The call still under way, if this body holds one.
    call: Option<Arc<CallSlot>>,
    /// Ends the call at its deadline, or when its fleet lease is lost. Not a timer polled with
    /// the body: hyper stops polling a body while the client does not read (its write buffer
    /// full, or an HTTP/2 stream without window), and a client that never reads must not keep
    /// the permit. Run by the body's connection ([`ProxyBody::take_timer`]) or, if no one took
    /// it by the body's first poll, by a task of its own.
    timer: Option<Timer>,
    ended: bool,
    /// For a gRPC call: the status codes that mean overload, read from the trailers.
    grpc: Option<Arc<[u32]>>,
    /// For a gRPC call whose status is still to come: its method's counters, which count it
    /// once, at its trailers or, without them, as it ends.
    tally: Option<GrpcTally>,
    /// The pooled connection the body comes on, given back once the body has been read to its
    /// end.
    checkout: Option<Checkout>,
}

/// A body's call timer: not started yet, or running in a task of its own.
enum Timer {
    Waiting(CallTimer),
    Spawned(JoinHandle<()>),
}

/// What ends a streamed body's call at its deadline (or when its fleet lease is lost), if the
/// body has not ended it first.
pub(crate) struct CallTimer {
    deadline: Option<tokio::time::Instant>,
    watched: Option<inflight::store::Lease>,
    slot: Arc<CallSlot>,
}

impl CallTimer {
    /// When the call's time is up; `None` when only a lost lease ends it.
    pub(crate) fn deadline(&self) -> Option<tokio::time::Instant> {
        self.deadline
    }

    /// Whether a lost fleet lease ends the call too (then only [`CallTimer::run`] serves).
    fn watches_lease(&self) -> bool {
        self.watched.is_some()
    }

    /// Waits for the deadline or the lease's loss, and ends the call then.
    pub(crate) async fn run(self) {
        let until_deadline = async {
            match self.deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let lost = async {
            match &self.watched {
                Some(lease) => lease.lost().await,
                None => std::future::pending().await,
            }
        };
        let timed_out = tokio::select! {
            () = until_deadline => true,
            () = lost => false,
        };
        self.expire(timed_out);
    }

    /// Ends the call, if the body has not: as timed out (`timed_out`), or as cancelled for a
    /// lost lease. The body, if it waits, is woken to be cut.
    pub(crate) fn expire(&self, timed_out: bool) {
        let slot = &self.slot;
        if let Some(held) = slot.take() {
            if timed_out {
                slot.timed_out.store(true, Ordering::Release);
                held.call.timed_out_as(held.on_timeout);
            } else {
                // Counted as cancelled: nothing is learned of the upstream.
                slot.lease_lost.store(true, Ordering::Release);
                drop(held);
            }
            let waker = slot.waker.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

/// The call a streamed body holds, shared with the timer that ends it at its deadline.
struct CallSlot {
    held: Mutex<Option<Held>>,
    timed_out: AtomicBool,
    /// The call's fleet lease was lost and the budget drops such calls (`on_lost = "cancel"`).
    lease_lost: AtomicBool,
    /// The task that last polled the body: woken at the deadline, so that a body waiting on the
    /// upstream is cut then.
    waker: Mutex<Option<Waker>>,
}

impl CallSlot {
    fn take(&self) -> Option<Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn holds(&self) -> bool {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}

/// The request's call, still holding its permit while the body streams.
struct Held {
    call: HeldCall,
    ok: bool,
    outcome: Verdict,
    /// What the call tells the limit if the body outlasts the call timeout.
    on_timeout: Outcome,
}

/// The body was cut because the call held its permit for its whole `call_timeout`.
#[derive(Debug)]
struct CallTimeout;

impl fmt::Display for CallTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the response body did not end within call_timeout")
    }
}

impl StdError for CallTimeout {}

/// The body was cut because the call's fleet lease was lost (`on_lost = "cancel"`).
#[derive(Debug)]
struct LeaseLost;

impl fmt::Display for LeaseLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the call's fleet lease was lost while the response body streamed")
    }
}

impl StdError for LeaseLost {}

impl ProxyBody {
    /// A body of the proxy's own.
    pub(crate) fn full(bytes: impl Into<Bytes>) -> ProxyBody {
        ProxyBody {
            kind: Kind::Full(Some(bytes.into())),
        }
    }

    /// An empty body: the response ends with its headers (a gRPC trailers-only answer).
    pub(crate) fn empty() -> ProxyBody {
        ProxyBody {
            kind: Kind::Full(None),
        }
    }

    /// The upstream's body, passed through as it comes; `tally` counts a gRPC call's status
    /// from its trailers.
    pub(crate) fn streamed(inner: Incoming, tally: Option<GrpcTally>) -> ProxyBody {
        ProxyBody {
            kind: Kind::Streamed(Box::new(Streamed {
                inner,
                call: None,
                timer: None,
                ended: false,
                grpc: None,
                tally,
                checkout: None,
            })),
        }
    }

    /// The upstream's body, holding `call` (and its permit) until the body has been sent in
    /// full; it then ends the call with `ok` and `outcome`. Past the call's deadline the body is
    /// cut and the call counted as timed out, telling the limit `on_timeout`. For a gRPC call
    /// (`grpc`: the codes that mean overload), a `grpc-status` in the trailers decides instead,
    /// and `tally` counts it.
    pub(crate) fn holding(
        inner: Incoming,
        call: HeldCall,
        ok: bool,
        outcome: Verdict,
        on_timeout: Outcome,
        grpc: Option<Arc<[u32]>>,
        tally: Option<GrpcTally>,
    ) -> ProxyBody {
        let deadline = call.deadline();
        let watched = call.cancels_on();
        let slot = Arc::new(CallSlot {
            held: Mutex::new(Some(Held {
                call,
                ok,
                outcome,
                on_timeout,
            })),
            timed_out: AtomicBool::new(false),
            lease_lost: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        let timer = (deadline.is_some() || watched.is_some()).then(|| {
            Timer::Waiting(CallTimer {
                deadline,
                watched,
                slot: Arc::clone(&slot),
            })
        });
        ProxyBody {
            kind: Kind::Streamed(Box::new(Streamed {
                inner,
                call: Some(slot),
                timer,
                ended: false,
                grpc,
                tally,
                checkout: None,
            })),
        }
    }
}

impl ProxyBody {
    /// This body, with the pooled connection it comes on (`None`: not pooled), given back once
    /// the body has been read to its end.
    pub(crate) fn on_connection(mut self, checkout: Option<Checkout>) -> ProxyBody {
        if let Kind::Streamed(streamed) = &mut self.kind {
            streamed.checkout = checkout;
        }
        self
    }

    /// The timer that ends this body's call at its deadline, for the caller to run (an
    /// HTTP/1.1 connection's loop); `None` if the body holds no call with a deadline, or its
    /// timer runs already. A timer that also watches a fleet lease is started in a task of its
    /// own instead, stopped when the body ends.
    pub(crate) fn take_timer(&mut self) -> Option<CallTimer> {
        let Kind::Streamed(streamed) = &mut self.kind else {
            return None;
        };
        match streamed.timer.take() {
            Some(Timer::Waiting(timer)) if !timer.watches_lease() => Some(timer),
            Some(Timer::Waiting(timer)) => {
                streamed.timer = Some(Timer::Spawned(tokio::spawn(timer.run())));
                None
            }
            other => {
                streamed.timer = other;
                None
            }
        }
    }

    /// Starts this body's timer, if it has one not yet running, in a task of its own, stopped
    /// when the body ends (an HTTP/2 stream's, whose connection answers many at once).
    pub(crate) fn start_timer(&mut self) {
        if let Kind::Streamed(streamed) = &mut self.kind {
            streamed.start_timer();
        }
    }
}

impl Streamed {
    /// Starts a timer not yet running in a task of its own.
    fn start_timer(&mut self) {
        if let Some(Timer::Waiting(_)) = &self.timer {
            if let Some(Timer::Waiting(timer)) = self.timer.take() {
                self.timer = Some(Timer::Spawned(tokio::spawn(timer.run())));
            }
        }
    }

    /// The body was sent in full: the call ends as it went.
    fn end(&mut self) {
        self.ended = true;
        if let Some(checkout) = &mut self.checkout {
            checkout.reusable();
        }
        self.count(None);
        if let Some(held) = self.take() {
            held.call.finish(held.ok, held.outcome);
        }
    }

    /// Counts a gRPC call's status, once: the first count wins.
    fn count(&mut self, status: Option<u32>) {
        if let Some(tally) = self.tally.take() {
            grpc_ended(&tally, status);
        }
    }

    /// A gRPC call's status, from its trailers, decides how the call ended.
    fn judge(&mut self, trailers: &hyper::HeaderMap) {
        self.count(crate::grpc::status(trailers));
        let (Some(overload), Some(slot)) = (&self.grpc, &self.call) else {
            return;
        };
        if let Some((ok, outcome)) = crate::grpc::judge(trailers, overload) {
            let mut held = slot.held.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(held) = held.as_mut() {
                held.ok = ok;
                held.outcome = outcome;
            }
        }
    }

    /// The call, if it is still under way (not ended, not timed out); its timer stops.
    fn take(&mut self) -> Option<Held> {
        if let Some(Timer::Spawned(task)) = self.timer.take() {
            task.abort();
        }
        self.call.as_ref().and_then(|slot| slot.take())
    }

    fn timed_out(&self) -> bool {
        self.call
            .as_ref()
            .is_some_and(|slot| slot.timed_out.load(Ordering::Acquire))
    }

    fn lease_lost(&self) -> bool {
        self.call
            .as_ref()
            .is_some_and(|slot| slot.lease_lost.load(Ordering::Acquire))
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let streamed = match &mut self.kind {
            Kind::Full(bytes) => return Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Streamed(s) => s,
        };
        if streamed.ended {
            return Poll::Ready(None);
        }
        streamed.start_timer();
        if streamed.timed_out() {
            // The timer ended the call (and gave the permit back); the body is cut.
            streamed.ended = true;
            return Poll::Ready(Some(Err(Box::new(CallTimeout))));
        }
        if streamed.lease_lost() {
            // The call's lease was lost and the budget drops such calls; the body is cut.
            streamed.ended = true;
            return Poll::Ready(Some(Err(Box::new(LeaseLost))));
        }
        if let Some(slot) = &streamed.call {
            let mut waker = slot.waker.lock().unwrap_or_else(|e| e.into_inner());
            if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *waker = Some(cx.waker().clone());
            }
        }
        match Pin::new(&mut streamed.inner).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                streamed.end();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(frame))) => {
                // Trailers are a body's last frame: hyper may drop the body without polling
                // it again, and the call has ended as it went.
                if let Some(trailers) = frame.trailers_ref() {
                    streamed.judge(trailers);
                    streamed.end();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                streamed.ended = true;
                streamed.count(None);
                if let Some(held) = streamed.take() {
                    held.call.finish(false, Outcome::Overload);
                }
                Poll::Ready(Some(Err(Box::new(e))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(bytes) => bytes.is_none(),
            // The upstream's end is the client's: an answer that ended with its headers (a
            // gRPC trailers-only answer, a 204) goes out as headers that end the stream, not
            // as headers and then an empty DATA frame. Such a body is dropped unpolled; its
            // drop ends the call as it went and gives the permit back.
            Kind::Streamed(s) => s.ended || s.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Kind::Full(None) => SizeHint::with_exact(0),
            Kind::Streamed(s) => s.inner.size_hint(),
        }
    }
}

impl Drop for Streamed {
    fn drop(&mut self) {
        // A body with nothing left to send (a HEAD response, a 204) may be dropped unpolled;
        // one dropped with more to come lost its client, and the call counts as cancelled.
        if !self.ended && self.inner.is_end_stream() {
            self.end();
        }
        // Otherwise the call, if still held, is dropped here and counted as cancelled; the
        // timer must not keep it (and its permit) until the deadline.
        drop(self.take());
        self.count(None);
    }
}

impl fmt::Debug for ProxyBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Full(_) => f.write_str("ProxyBody::Full"),
            Kind::Streamed(s) => f
                .debug_struct("ProxyBody::Streamed")
                .field("holds_permit", &s.call.as_ref().is_some_and(|c| c.holds()))
                .finish(),
        }
    }
}
