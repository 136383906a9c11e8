//! An HTTP/1.1 client connection: served by hyper while it is in use, and parked once it has
//! idled for [`PARK_AFTER`]: hyper's state and its read and write buffers (8 KiB and more)
//! are freed, and the socket alone is watched for the next request, which a new hyper
//! connection then serves. An idle keep-alive connection costs its socket and a small task.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper::service::HttpService;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::{run, Conn, Protocol, Shut, Timing};
use crate::config::ClientLimits;
use crate::metrics::ConnMetrics;

/// How long an HTTP/1.1 connection idles inside hyper before it is parked. Long enough that a
/// client sending requests back to back stays in hyper (parking and serving again cost a new
/// hyper connection), short enough that idle clients hold no buffers.
pub(crate) const PARK_AFTER: Duration = Duration::from_millis(10);

/// How long an HTTP/1.1 connection that has answered two requests or more since it was served
/// idles inside hyper before it is parked. A client in steady use (a request every few
/// milliseconds on each of its connections, say) then stays in hyper: parking it after each
/// answer and serving it again with a new hyper connection cost, at 8,800 requests a second
/// over 64 connections, half again the CPU time per answer. A connection that made one request
/// and went quiet is still parked after [`PARK_AFTER`], so idle clients hold no buffers.
pub(crate) const PARK_AFTER_BUSY: Duration = Duration::from_millis(100);

/// How long a connection whose client sends a head in pieces is left as it is between looks:
/// one whose client sent nothing more for this long, inside a head, is then parked (and so
/// closes after its request). A client that stalls in its head costs one more look, not one
/// every [`PARK_AFTER`].
pub(crate) const HEAD_PIECES: Duration = Duration::from_secs(1);

/// The most hyper buffers of a connection's reads (and queues of its writes): a request's head
/// (its request line and headers) must fit, or it is answered 431. A head of up to 32 KiB is
/// always taken; one that arrives in a single read may take up to twice that (48 KiB was
/// taken, 50 KiB refused, on loopback), so each slow or idle client that sends part of a head
/// holds at most about 64 KiB (hyper's default, about 400 KiB, let 500 such clients take
/// 200 MB). nginx takes 32 KiB of headers by default (`large_client_header_buffers 4 8k`),
/// HAProxy about 15 KiB (`tune.bufsize`), Envoy 60 KiB.
pub(crate) const MAX_HEAD: usize = 32 * 1024;

/// Serves an HTTP/1.1 connection with hyper until hyper gives it back, idle for
/// [`PARK_AFTER`] (`Some`, with the bytes read ahead in front, if any), or it closes (`None`:
/// at the idle timeout, when the proxy drains, or when the accept loop asks).
pub(super) async fn serve<S, B>(
    io: Rewound,
    conn: &Conn,
    limits: &ClientLimits,
    stop: &mut watch::Receiver<bool>,
    metrics: &ConnMetrics,
    service: S,
) -> Option<Rewound>
where
    S: HttpService<Incoming, ResBody = B> + Unpin,
    S::Future: Unpin,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let read_ahead = io.read_ahead();
    let connection = {
        // No header timer of hyper's: it costs a timer made, polled and dropped per request.
        // A request whose head never ends is cut at the idle timeout by the listener's sweep
        // instead (see `run`).
        let mut builder = http1::Builder::new();
        builder.header_read_timeout(None).max_buf_size(MAX_HEAD);
        Served {
            inner: Some(builder.serve_connection(TokioIo::new(io), service)),
            keep_io: false,
        }
    };
    let timing = Timing {
        protocol: Protocol::Http1,
        idle: None,
        park: Some(PARK_AFTER),
        park_busy: PARK_AFTER_BUSY,
        park_needs_answer: read_ahead,
        pinged: Duration::MAX,
        linger: limits.idle_timeout,
    };
    let shut = |c: Pin<&mut Served<S>>, how: Shut| c.shut(how);
    let (mut io, read) = run(connection, shut, conn, stop, metrics, timing).await??;
    io.front = join(read, std::mem::take(&mut io.front));
    Some(io)
}

/// Whether `io` is readable (`Ready(false)`) or `conn` was asked to close (`Ready(true)`);
/// while neither, `cx` is woken by either.
pub(super) fn until_readable(io: &Rewound, conn: &Conn, cx: &mut Context<'_>) -> Poll<bool> {
    if conn.asked_to_close() {
        return Poll::Ready(true);
    }
    *conn.parked.lock().unwrap_or_else(|e| e.into_inner()) = Some(cx.waker().clone());
    // Asked between the look above and the waker's registration: seen now.
    if conn.asked_to_close() {
        return Poll::Ready(true);
    }
    io.stream.poll_read_ready(cx).map(|_| false)
}

/// `first` then `then`, in one buffer.
fn join(first: Bytes, then: Bytes) -> Bytes {
    // An empty part is dropped, not kept: it may be a slice of hyper's whole read buffer,
    // which a parked connection would then hold.
    match (first.is_empty(), then.is_empty()) {
        (true, true) => return Bytes::new(),
        (true, false) => return then,
        (false, true) => return first,
        (false, false) => {}
    }
    let mut both = BytesMut::with_capacity(first.len() + then.len());
    both.extend_from_slice(&first);
    both.extend_from_slice(&then);
    both.freeze()
}

/// hyper's HTTP/1.1 connection. It ends as hyper ends it (its last bytes flushed, the socket
/// shut down: `None`), or, once asked to park ([`Shut::Park`]), by giving back its socket and
/// the bytes read past its last request without closing it.
struct Served<S: HttpService<Incoming>> {
    inner: Option<http1::Connection<TokioIo<Rewound>, S>>,
    /// Whether it gives its socket back when it ends.
    keep_io: bool,
}

impl<S, B> Served<S>
where
    S: HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    /// Asks hyper to finish what it serves: keep-alive off, so that an idle connection ends
    /// at once and a busy one after its request.
    fn shut(mut self: Pin<&mut Self>, how: Shut) {
        self.keep_io = how == Shut::Park;
        if let Some(inner) = self.inner.as_mut() {
            Pin::new(inner).graceful_shutdown();
        }
    }
}

impl<S, B> Future for Served<S>
where
    S: HttpService<Incoming, ResBody = B> + Unpin,
    S::Future: Unpin,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Output = Result<Option<(Rewound, Bytes)>, hyper::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let keep_io = self.keep_io;
        let inner = self
            .inner
            .as_mut()
            .expect("a served connection is not polled after it ends");
        if !keep_io {
            return Pin::new(inner).poll(cx).map_ok(|()| None);
        }
        match inner.poll_without_shutdown(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Ready(Ok(())) => {
                let parts = self
                    .inner
                    .take()
                    .expect("taken once, as it ends")
                    .into_parts();
                Poll::Ready(Ok(Some((parts.io.into_inner(), parts.read_buf))))
            }
        }
    }
}

/// A client's socket with the bytes read from it before, but not yet served, in front.
pub(crate) struct Rewound {
    front: Bytes,
    stream: TcpStream,
    /// Told whether the socket last refused bytes ([`Conn`]'s `write_blocked`).
    conn: Arc<Conn>,
}

impl Rewound {
    /// `stream`, nothing read ahead, telling `conn` when the socket refuses bytes.
    pub(super) fn new(stream: TcpStream, conn: Arc<Conn>) -> Rewound {
        Rewound {
            front: Bytes::new(),
            stream,
            conn,
        }
    }

    /// Whether bytes of the client's next request were read already.
    pub(super) fn read_ahead(&self) -> bool {
        !self.front.is_empty()
    }

    fn wrote<T>(&self, written: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        self.conn.wrote(written.is_pending());
        written
    }
}

impl Drop for Rewound {
    fn drop(&mut self) {
        // As hyper ends a connection: the client reads what was sent and then its end, not a
        // reset for bytes of its own that were not read.
        let _ = socket2::SockRef::from(&self.stream).shutdown(std::net::Shutdown::Write);
    }
}

impl AsyncRead for Rewound {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.front.is_empty() {
            let n = self.front.len().min(buf.remaining());
            buf.put_slice(&self.front[..n]);
            self.front.advance(n);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            // The client spoke: a connection that idles with a head coming in pieces is not
            // parked (see `run` in the `conn` module).
            self.conn.spoke.store(true, Ordering::Relaxed);
        }
        read
    }
}

impl AsyncWrite for Rewound {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.wrote(written)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.wrote(written)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
