//! An upstream's answer body: read from a pooled HTTP/1.1 connection by the task that serves the
//! request, or hyper's (HTTP/2 and TLS upstreams).

use std::error::Error as StdError;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::io::AsyncRead;

use super::wire::{self, Chunks, Framing, Step};
use super::{Http1Pool, Link, Socket};

/// The error an answer's body ends with.
pub(crate) type AnswerError = Box<dyn StdError + Send + Sync>;

/// An upstream's answer body.
pub(crate) enum AnswerBody {
    /// From a pooled HTTP/1.1 connection.
    Pooled(Pooled),
    /// From hyper's client.
    Hyper(Incoming),
}

impl AnswerBody {
    /// What shuts its connection at once, for a call that ends early while its body is not
    /// being read: `None` for hyper's (dropping the body closes its connection or stream).
    pub(crate) fn socket(&self) -> Option<Arc<Socket>> {
        match self {
            AnswerBody::Pooled(p) => p.link.as_ref().map(|l| Arc::clone(&l.io)),
            AnswerBody::Hyper(_) => None,
        }
    }

    /// The body was read to its end and its call ended as it went: its connection may carry
    /// another request.
    pub(crate) fn reusable(&mut self) {
        if let AnswerBody::Pooled(p) = self {
            p.reusable = true;
        }
    }
}

impl Body for AnswerBody {
    type Data = Bytes;
    type Error = AnswerError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, AnswerError>>> {
        match self.get_mut() {
            AnswerBody::Pooled(p) => p.poll_frame(cx).map_err(Into::into),
            AnswerBody::Hyper(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            AnswerBody::Pooled(p) => p.reading == Reading::Done,
            AnswerBody::Hyper(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            AnswerBody::Pooled(p) => match p.reading {
                Reading::Done => SizeHint::with_exact(0),
                Reading::Length(left) => SizeHint::with_exact(left),
                _ => SizeHint::default(),
            },
            AnswerBody::Hyper(b) => b.size_hint(),
        }
    }
}

/// Where the body of a pooled connection's answer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    Length(u64),
    Chunks(Chunks),
    Close,
    Done,
}

/// The body of an answer on a pooled connection, read from the connection's buffer and socket
/// as the client takes it. Its connection goes back to the pool when the body is dropped after
/// it was read to its end, its connection stays open, and [`AnswerBody::reusable`] said so.
pub(crate) struct Pooled {
    link: Option<Box<Link>>,
    pool: Weak<Http1Pool>,
    reading: Reading,
    keep_alive: bool,
    reusable: bool,
}

impl Pooled {
    pub(super) fn new(
        link: Box<Link>,
        pool: Weak<Http1Pool>,
        framing: Framing,
        keep_alive: bool,
    ) -> Pooled {
        let reading = match framing {
            Framing::Empty | Framing::Length(0) => Reading::Done,
            Framing::Length(n) => Reading::Length(n),
            Framing::Chunked => Reading::Chunks(Chunks::Size),
            Framing::Close => Reading::Close,
        };
        Pooled {
            link: Some(link),
            pool,
            reading,
            keep_alive,
            reusable: false,
        }
    }

    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Frame<Bytes>>>> {
        let polled = self.poll_inner(cx);
        if let Poll::Ready(Some(Err(_))) = &polled {
            // A connection whose answer failed carries nothing more.
            self.link = None;
            self.reading = Reading::Done;
        }
        polled
    }

    fn poll_inner(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Frame<Bytes>>>> {
        loop {
            let Some(link) = self.link.as_mut() else {
                return Poll::Ready(None);
            };
            match &mut self.reading {
                Reading::Done => return Poll::Ready(None),
                Reading::Length(left) => {
                    if !link.buf.is_empty() {
                        let n = usize::try_from(*left)
                            .unwrap_or(usize::MAX)
                            .min(link.buf.len());
                        let data = link.buf.split_to(n).freeze();
                        *left -= n as u64;
                        if *left == 0 {
                            self.reading = Reading::Done;
                        }
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                Reading::Chunks(state) => match wire::step(state, &mut link.buf) {
                    Ok(Step::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Ok(Step::End(trailers)) => {
                        self.reading = Reading::Done;
                        return Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))));
                    }
                    Ok(Step::More) => {}
                    Err(malformed) => {
                        return Poll::Ready(Some(Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            malformed,
                        ))))
                    }
                },
                Reading::Close => {
                    if !link.buf.is_empty() {
                        let data = link.buf.split().freeze();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
            }
            match ready!(link.poll_fill(cx)) {
                Ok(0) if self.reading == Reading::Close => {
                    self.reading = Reading::Done;
                    self.keep_alive = false;
                    return Poll::Ready(None);
                }
                Ok(0) => {
                    return Poll::Ready(Some(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the upstream closed the connection before the answer's end",
                    ))))
                }
                Ok(_) => {}
                Err(e) => return Poll::Ready(Some(Err(e))),
            }
        }
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if !(self.reusable && self.keep_alive && self.reading == Reading::Done) {
            return;
        }
        if let (Some(link), Some(pool)) = (self.link.take(), self.pool.upgrade()) {
            pool.put(link);
        }
    }
}

impl Link {
    /// Reads what the socket has into the buffer: the bytes read, 0 at the upstream's end.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        poll_fill(&mut self.stream, &mut self.buf, cx)
    }
}

/// Reads what `rd` has into `buf`, grown when little room is left: the bytes read, 0 at the
/// upstream's end. A read from a socket that fills less than the room it had tells tokio the
/// socket is drained: no read that would find nothing follows (see `Link::alive`).
pub(super) fn poll_fill<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    if buf.capacity() - buf.len() < super::MIN_READ {
        buf.reserve(super::READ_BUF);
    }
    tokio_util::io::poll_read_buf(Pin::new(rd), cx, buf)
}
