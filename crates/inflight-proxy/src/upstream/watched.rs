//! A request's body as it goes to the upstream (the proxy's own HTTP/1.1 client and hyper's),
//! watched: it fails a body that goes the proxy's `idle_timeout` without a frame before the
//! upstream answers, and says how the body comes in its [`ClientBody`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

use super::UpstreamError;
use crate::client_body::ClientBody;

/// A request's body on its way to the upstream: the client's, failed as
/// [`UpstreamError::ClientBodyStalled`] when it goes `stall` without a frame before the upstream
/// answers. A request without a body is passed as it is, with no timer.
pub(crate) struct WatchedBody {
    body: Incoming,
    watch: Option<Watch>,
}

struct Watch {
    sending: Arc<ClientBody>,
    stall: Duration,
    /// Armed while a frame is waited for; made at the first wait.
    timer: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl WatchedBody {
    /// `body`, watched through `sending` (`None`: a request without a body) for `stall`.
    pub(crate) fn new(body: Incoming, sending: Option<Arc<ClientBody>>, stall: Duration) -> Self {
        WatchedBody {
            body,
            watch: sending.map(|sending| Watch {
                sending,
                stall,
                timer: None,
                armed: false,
            }),
        }
    }
}

impl Drop for WatchedBody {
    /// Not waited for any more: the request went (or the upstream answered, and the rest of
    /// the body is not sent to an HTTP/1.1 upstream).
    fn drop(&mut self) {
        if let Some(watch) = &self.watch {
            watch.sending.set_waiting(false);
        }
    }
}

impl Body for WatchedBody {
    type Data = Bytes;
    type Error = UpstreamError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, UpstreamError>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        let Some(watch) = &mut this.watch else {
            return polled.map_err(UpstreamError::ClientBody);
        };
        match polled {
            Poll::Ready(frame) => {
                watch.armed = false;
                watch.sending.set_waiting(false);
                if let Some(Err(_)) = &frame {
                    watch.sending.fail();
                }
                Poll::Ready(frame.map(|f| f.map_err(UpstreamError::ClientBody)))
            }
            Poll::Pending => {
                watch.sending.set_waiting(true);
                if watch.sending.is_answered() {
                    return Poll::Pending;
                }
                let deadline = Instant::now() + watch.stall;
                let timer = watch
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if !watch.armed {
                    timer.as_mut().reset(deadline);
                    watch.armed = true;
                }
                match timer.as_mut().poll(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(()) if watch.sending.is_answered() => Poll::Pending,
                    Poll::Ready(()) => {
                        watch.sending.fail();
                        Poll::Ready(Some(Err(UpstreamError::ClientBodyStalled(watch.stall))))
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
