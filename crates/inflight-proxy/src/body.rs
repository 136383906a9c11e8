//! [`ProxyBody`]: what the proxy sends a client, either a small body of its own (a refusal) or
//! the upstream's body streamed through, holding the request's permit until it ends.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use inflight::limit::Outcome;
use inflight::tower::HeldCall;
use tokio::time::Sleep;

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
    held: Option<Held>,
    ended: bool,
}

/// The request's call, still holding its permit while the body streams.
struct Held {
    call: HeldCall,
    ok: bool,
    outcome: Outcome,
    deadline: Option<Pin<Box<Sleep>>>,
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

impl ProxyBody {
    /// A body of the proxy's own.
    pub(crate) fn full(bytes: impl Into<Bytes>) -> ProxyBody {
        ProxyBody {
            kind: Kind::Full(Some(bytes.into())),
        }
    }

    /// The upstream's body, passed through as it comes.
    pub(crate) fn streamed(inner: Incoming) -> ProxyBody {
        ProxyBody {
            kind: Kind::Streamed(Box::new(Streamed {
                inner,
                held: None,
                ended: false,
            })),
        }
    }

    /// The upstream's body, holding `call` (and its permit) until the body has been sent in
    /// full; it then ends the call with `ok` and `outcome`. Past the call's deadline the body is
    /// cut and the call counted as timed out.
    pub(crate) fn holding(
        inner: Incoming,
        call: HeldCall,
        ok: bool,
        outcome: Outcome,
    ) -> ProxyBody {
        let deadline = call
            .deadline()
            .map(|at| Box::pin(tokio::time::sleep_until(at)));
        ProxyBody {
            kind: Kind::Streamed(Box::new(Streamed {
                inner,
                held: Some(Held {
                    call,
                    ok,
                    outcome,
                    deadline,
                }),
                ended: false,
            })),
        }
    }
}

impl Streamed {
    /// The body was sent in full: the call ends as it went.
    fn end(&mut self) {
        self.ended = true;
        if let Some(held) = self.held.take() {
            held.call.finish(held.ok, held.outcome);
        }
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
        if let Some(held) = &mut streamed.held {
            if let Some(deadline) = &mut held.deadline {
                if deadline.as_mut().poll(cx).is_ready() {
                    if let Some(held) = streamed.held.take() {
                        held.call.timed_out();
                    }
                    return Poll::Ready(Some(Err(Box::new(CallTimeout))));
                }
            }
        }
        match Pin::new(&mut streamed.inner).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                streamed.end();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
            Poll::Ready(Some(Err(e))) => {
                if let Some(held) = streamed.held.take() {
                    held.call.finish(false, Outcome::Overload);
                }
                Poll::Ready(Some(Err(Box::new(e))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(bytes) => bytes.is_none(),
            // While the permit is held, the end is seen by polling, so that it is the poll
            // that gives the permit back.
            Kind::Streamed(s) => s.held.is_none() && s.inner.is_end_stream(),
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
    }
}

impl fmt::Debug for ProxyBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Full(_) => f.write_str("ProxyBody::Full"),
            Kind::Streamed(s) => f
                .debug_struct("ProxyBody::Streamed")
                .field("holds_permit", &s.held.is_some())
                .finish(),
        }
    }
}
