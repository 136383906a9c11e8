//! [`ProxyBody`]: what the proxy sends a client, either a small body of its own (a refusal) or
//! the upstream's body streamed through, holding the request's permit until it ends.

use std::error::Error as StdError;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use inflight::limit::Outcome;
use tokio::task::JoinHandle;

use crate::call::{CallSlot, Early, Held, Upstream};
use crate::detached::Detached;
use crate::grpc::{grpc_ended, GrpcTally};
use crate::sweep::Watch;
use crate::upstream::answer::AnswerBody;

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
    /// The upstream's body; `None` when its call's slot holds it (see [`Upstream::Body`]),
    /// which drops it when the call ends early.
    inner: Option<AnswerBody>,
    /// The call still under way, if this body holds one.
    call: Option<Arc<CallSlot>>,
    /// The call's place in its budget's sweeper, which ends it at its deadline. Not a timer
    /// polled with the body: hyper stops polling a body while the client does not read (its
    /// write buffer full, or an HTTP/2 stream without window), and a client that never reads
    /// must not keep the permit.
    deadline: Option<Watch>,
    /// Ends the call when its fleet lease is lost (`on_lost = "cancel"`).
    lease_watch: Option<JoinHandle<()>>,
    ended: bool,
    /// For a gRPC call: the status codes that mean overload, read from the trailers.
    grpc: Option<Arc<[u32]>>,
    /// For a gRPC call whose status is still to come: its method's counters, which count it
    /// once, at its trailers or, without them, as it ends.
    tally: Option<GrpcTally>,
    /// Read without its client already (`read_without_client`): dropped before its end (cut by
    /// a drain, or as the runtime shuts down), its call is cancelled, not handed on again.
    without_client: bool,
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

/// The body was cut because its client took no byte of it for the proxy's `idle_timeout`.
#[derive(Debug)]
struct ClientStopped;

impl fmt::Display for ClientStopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the client took no byte of the response body for idle_timeout")
    }
}

impl StdError for ClientStopped {}

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
    pub(crate) fn streamed(inner: AnswerBody, tally: Option<GrpcTally>) -> ProxyBody {
        ProxyBody {
            kind: Kind::Streamed(Box::new(Streamed {
                inner: Some(inner),
                call: None,
                deadline: None,
                lease_watch: None,
                ended: false,
                grpc: None,
                tally,
                without_client: false,
            })),
        }
    }

    /// The upstream's body, holding the call in `slot` (and its permit) until the body has been
    /// sent in full; the call then ends as decided in the slot. Past the call's deadline
    /// (`deadline`, its place in the budget's sweeper) the body is cut and the call counted as
    /// timed out; with a lease that `lease` names lost, it is cut and the call cancelled. For
    /// a gRPC call (`grpc`: the codes that mean overload), a `grpc-status` in the trailers
    /// decides instead, and `tally` counts it. A call ended early stops its upstream at once:
    /// the slot shuts a pooled connection down, or drops another upstream's body. For an
    /// HTTP/2 client (`http2`), whose stream hyper may stop polling for good (its client gives
    /// it no room), a pooled connection's body goes to the slot too, which drops it: its
    /// connection is closed then, not kept for as long as the stream is.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn holding(
        inner: AnswerBody,
        slot: Arc<CallSlot>,
        deadline: Option<Watch>,
        lease: Option<inflight::store::Lease>,
        grpc: Option<Arc<[u32]>>,
        tally: Option<GrpcTally>,
        http2: bool,
    ) -> ProxyBody {
        let lease_watch = lease.map(|lease| {
            let slot = Arc::clone(&slot);
            tokio::spawn(async move {
                lease.lost().await;
                slot.expire(Early::LeaseLost);
            })
        });
        // A pooled connection is shut down by the slot, and the body stays here (polled without
        // a lock), except for an HTTP/2 client; another upstream's body goes to the slot, which
        // drops it.
        let inner = match (inner.socket(), inner) {
            (Some(socket), inner) if http2 => {
                slot.stops(Upstream::Pooled(socket, inner));
                None
            }
            (Some(socket), inner) => {
                slot.stops(Upstream::Connection(socket));
                Some(inner)
            }
            (None, AnswerBody::Hyper(inner)) => {
                slot.stops(Upstream::Body(inner));
                None
            }
            // A pooled answer whose body has ended: nothing left to stop.
            (None, inner) => Some(inner),
        };
        ProxyBody {
            kind: Kind::Streamed(Box::new(Streamed {
                inner,
                call: Some(slot),
                deadline,
                lease_watch,
                ended: false,
                grpc,
                tally,
                without_client: false,
            })),
        }
    }

    /// The call this body holds, if any: what ends it when its client stops reading.
    pub(crate) fn call(&self) -> Option<&Arc<CallSlot>> {
        match &self.kind {
            Kind::Streamed(s) => s.call.as_ref(),
            Kind::Full(_) => None,
        }
    }
}

/// A frame of the upstream's body, or its error.
type UpstreamFrame = Result<Frame<Bytes>, BodyError>;

impl Streamed {
    /// Polls the upstream's body; `None` once its call ended early and dropped it.
    fn poll_upstream(&mut self, cx: &mut Context<'_>) -> Option<Poll<Option<UpstreamFrame>>> {
        match (&mut self.inner, &self.call) {
            (Some(inner), _) => Some(Pin::new(inner).poll_frame(cx)),
            (None, Some(slot)) => match slot.upstream().as_mut() {
                Some(Upstream::Body(inner)) => Some(
                    Pin::new(inner)
                        .poll_frame(cx)
                        .map(|f| f.map(|f| f.map_err(BodyError::from))),
                ),
                Some(Upstream::Pooled(_, inner)) => Some(Pin::new(inner).poll_frame(cx)),
                _ => None,
            },
            (None, None) => None,
        }
    }

    /// Whether the upstream's body has nothing more to send (false once it was dropped early:
    /// the client is then told of the cut, not of an end).
    fn upstream_ended(&self) -> bool {
        match (&self.inner, &self.call) {
            (Some(inner), _) => inner.is_end_stream(),
            (None, Some(slot)) => match slot.upstream().as_ref() {
                Some(Upstream::Body(b)) => b.is_end_stream(),
                Some(Upstream::Pooled(_, b)) => b.is_end_stream(),
                _ => false,
            },
            (None, None) => false,
        }
    }

    fn upstream_size_hint(&self) -> SizeHint {
        match (&self.inner, &self.call) {
            (Some(inner), _) => inner.size_hint(),
            (None, Some(slot)) => match slot.upstream().as_ref() {
                Some(Upstream::Body(b)) => b.size_hint(),
                Some(Upstream::Pooled(_, b)) => b.size_hint(),
                _ => SizeHint::default(),
            },
            (None, None) => SizeHint::default(),
        }
    }

    /// Why the body was cut: the call ended early.
    fn cut(&mut self) -> BodyError {
        self.ended = true;
        if self.lease_lost() {
            Box::new(LeaseLost)
        } else if self.client_stopped() {
            Box::new(ClientStopped)
        } else {
            Box::new(CallTimeout)
        }
    }

    /// The body was sent in full: the call ends as it went, and the pooled connection it came
    /// on may carry another request, unless the call had ended early (its connection may have
    /// been shut down).
    fn end(&mut self) {
        self.ended = true;
        self.count(None);
        let held = self.take();
        let ours = self.call.is_none() || held.is_some();
        if let Some(held) = held {
            held.call.finish(held.ok, held.outcome);
        }
        if !ours {
            return;
        }
        if let Some(inner) = &mut self.inner {
            inner.reusable();
        } else if let Some(slot) = &self.call {
            if let Some(Upstream::Pooled(_, inner)) = slot.upstream().as_mut() {
                inner.reusable();
            }
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
            slot.decide(ok, outcome);
        }
    }

    /// The call, if it is still under way (not ended, not timed out); nothing watches it any
    /// more.
    fn take(&mut self) -> Option<Held> {
        if let Some(task) = self.lease_watch.take() {
            task.abort();
        }
        let held = self.call.as_ref().and_then(|slot| slot.take());
        self.deadline = None;
        held
    }

    fn timed_out(&self) -> bool {
        self.call.as_ref().is_some_and(|slot| slot.timed_out())
    }

    fn lease_lost(&self) -> bool {
        self.call.as_ref().is_some_and(|slot| slot.lease_lost())
    }

    fn client_stopped(&self) -> bool {
        self.call.as_ref().is_some_and(|slot| slot.client_stopped())
    }

    /// Whether the call was ended early: at its deadline, for its lost lease, or because its
    /// client stopped reading.
    fn ended_early(&self) -> bool {
        self.timed_out() || self.lease_lost() || self.client_stopped()
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
        if let Some(slot) = &streamed.call {
            slot.wake_on_expiry(cx.waker());
        }
        if streamed.ended_early() {
            // The sweeper ended the call at its deadline (and gave the permit back), or its
            // lease was lost and the budget drops such calls; the body is cut.
            return Poll::Ready(Some(Err(streamed.cut())));
        }
        let Some(polled) = streamed.poll_upstream(cx) else {
            return Poll::Ready(Some(Err(streamed.cut())));
        };
        match polled {
            Poll::Pending => Poll::Pending,
            // Ended early between the look above and the read: the read's end may be the
            // upstream's connection shut down, not the body's end (one framed by the close).
            Poll::Ready(None) if streamed.ended_early() => Poll::Ready(Some(Err(streamed.cut()))),
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
                Poll::Ready(Some(Err(e)))
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
            Kind::Streamed(s) => s.ended || s.upstream_ended(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Kind::Full(None) => SizeHint::with_exact(0),
            Kind::Streamed(s) => s.upstream_size_hint(),
        }
    }
}

impl Streamed {
    /// What is left of a body whose rest went to a task of its own: nothing.
    fn moved() -> Streamed {
        Streamed {
            inner: None,
            call: None,
            deadline: None,
            lease_watch: None,
            ended: true,
            grpc: None,
            tally: None,
            without_client: true,
        }
    }

    /// Where the body, dropped now with more to come, goes on being read without its client
    /// (`on_client_gone = "finish"`), if it does: its call still holds its permit and ends as
    /// it goes.
    fn outlives_client(&self) -> Option<Detached> {
        if self.ended || self.without_client {
            return None;
        }
        let slot = self.call.as_ref().filter(|slot| slot.holds())?;
        slot.outlives_client().cloned()
    }
}

/// Reads what is left of `rest`, a body whose client left, to its end (or its call's deadline,
/// or a lost lease), and drops it: its call ends as it goes, as if the client had read it all.
async fn read_without_client(rest: Streamed) {
    use http_body_util::BodyExt;
    let mut body = ProxyBody {
        kind: Kind::Streamed(Box::new(rest)),
    };
    while let Some(frame) = body.frame().await {
        if frame.is_err() {
            break;
        }
    }
}

impl Drop for Streamed {
    fn drop(&mut self) {
        // A body with nothing left to send (a HEAD response, a 204) may be dropped unpolled;
        // one dropped with more to come lost its client, and the call counts as cancelled,
        // unless it goes on without its client.
        if !self.ended && self.upstream_ended() {
            self.end();
        }
        if let Some(detached) = self.outlives_client() {
            if tokio::runtime::Handle::try_current().is_ok() {
                if self.call.as_ref().is_some_and(|slot| slot.left_now()) {
                    detached.client_left();
                }
                let mut rest = std::mem::replace(self, Streamed::moved());
                // Said before it goes: a task dropped unpolled drops it as it is.
                rest.without_client = true;
                detached.spawn(read_without_client(rest));
                return;
            }
        }
        if let Some(slot) = &self.call {
            // Not kept with the slot, which the sweeper may hold a while longer.
            drop(slot.upstream().take());
        }
        // Otherwise the call, if still held, is dropped here and counted as cancelled; the
        // sweeper must not keep it (and its permit) until the deadline.
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
