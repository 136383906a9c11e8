//! One client connection: its protocol told from its first bytes within `first_byte_timeout`,
//! served by hyper's HTTP/1.1 or HTTP/2 server, and closed when it idles past `idle_timeout`,
//! fails its HTTP/2 pings, is the one idle longest when its listener is full, or the proxy
//! drains.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::task::AtomicWaker;
use futures::FutureExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::body::{BodyError, ProxyBody};
use crate::config::ClientLimits;
use crate::headers::Peer;
use crate::metrics::{Closed, ConnMetrics};
use streams::{StreamWait, Streams};

mod http1;
mod streams;

/// What hyper serves an HTTP/1.1 or HTTP/2 request with: the proxy's answer, boxed.
type Answer = Pin<Box<dyn Future<Output = Result<Response<Tracked>, Infallible>> + Send + 'static>>;

/// The first bytes of every HTTP/2 connection with prior knowledge (RFC 9113 section 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// While a client's first bytes are a part of the HTTP/2 preface, how often to look again.
const SNIFF_AGAIN: Duration = Duration::from_millis(5);

/// The protocol a client speaks, from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http1,
    Http2,
}

/// A listener's open connections, by the order they were accepted in.
pub(crate) type Open = Arc<std::sync::Mutex<std::collections::BTreeMap<u64, Arc<Conn>>>>;

/// A connection's place among the listener's open ones, its slot under `max_connections`, and
/// its count in the metrics: given up when its task ends, however it ends (aborted when a drain
/// runs out included).
pub(crate) struct Accounted {
    open: Open,
    id: u64,
    metrics: Arc<ConnMetrics>,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Accounted {
    /// Connection `id` of `open`, holding `slot`, counted in `metrics` (as opened already).
    pub(crate) fn new(
        open: Open,
        id: u64,
        metrics: Arc<ConnMetrics>,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) -> Accounted {
        Accounted {
            open,
            id,
            metrics,
            _slot: slot,
        }
    }
}

impl Drop for Accounted {
    fn drop(&mut self) {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.id);
        self.metrics.ended();
    }
}

/// [`Conn::close`]'s code for a drain.
const DRAIN: u8 = u8::MAX;

/// What the accept loop and a connection share: whether a request is in progress, since when
/// the connection idles, and the word to close.
pub(crate) struct Conn {
    busy: AtomicUsize,
    /// Milliseconds since `epoch` at which the connection last became idle.
    idle_since: AtomicU64,
    epoch: Instant,
    close: Notify,
    /// Whether the client ended its side of the connection (a read of 0 bytes).
    client_ended: AtomicBool,
    /// Milliseconds since `epoch` at which the client's last bytes were read (HTTP/2).
    last_read: AtomicU64,
    /// HTTP/1.1: whether the client sent bytes since the connection last became idle (the start
    /// of a head, which parking would lose the connection for).
    spoke: AtomicBool,
    /// Whether the connection was asked to close, or is closing on its own.
    closing: AtomicBool,
    /// How many requests it has answered (their answers sent, or dropped).
    answered: AtomicU64,
    /// HTTP/1.1: whether the socket last refused bytes (the client is not reading), so that
    /// hyper holds some it has yet to send.
    write_blocked: AtomicBool,
    /// Milliseconds since `epoch` at which the socket began to refuse bytes (while
    /// `write_blocked`).
    write_blocked_at: AtomicU64,
    /// The socket's descriptor (-1 until served), to read how much it still has to send.
    fd: std::sync::atomic::AtomicI32,
    /// How many bytes the socket last had to send, while it refuses more (`u64::MAX`: not read
    /// since it began to).
    unsent: AtomicU64,
    /// Whether its protocol is known: until then `first_byte_timeout`, not `idle_timeout`,
    /// bounds it.
    told: AtomicBool,
    /// Why the connection was asked to close (a [`Closed`] as `u8`, [`DRAIN`] for a drain;
    /// 0 until then): the first reason given wins.
    reason: std::sync::atomic::AtomicU8,
    /// The task of a parked HTTP/1.1 connection, woken when it is asked to close.
    parked: std::sync::Mutex<Option<std::task::Waker>>,
    /// HTTP/2: its answers still being sent (made at its first).
    streams: std::sync::OnceLock<Box<Streams>>,
}

impl Conn {
    pub(crate) fn new(epoch: Instant) -> Conn {
        Conn {
            busy: AtomicUsize::new(0),
            idle_since: AtomicU64::new(epoch.elapsed().as_millis() as u64),
            epoch,
            close: Notify::new(),
            client_ended: AtomicBool::new(false),
            last_read: AtomicU64::new(0),
            spoke: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            answered: AtomicU64::new(0),
            write_blocked: AtomicBool::new(false),
            write_blocked_at: AtomicU64::new(0),
            fd: std::sync::atomic::AtomicI32::new(-1),
            unsent: AtomicU64::new(u64::MAX),
            told: AtomicBool::new(false),
            reason: std::sync::atomic::AtomicU8::new(0),
            parked: std::sync::Mutex::new(None),
            streams: std::sync::OnceLock::new(),
        }
    }

    /// HTTP/2: its answers still being sent.
    fn streams(&self) -> &Streams {
        self.streams.get_or_init(Box::default)
    }

    /// Milliseconds since the connection's epoch.
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The socket refused bytes (`blocked`), or took them: since when it refuses them is kept.
    pub(crate) fn wrote(&self, blocked: bool) {
        if self.write_blocked.swap(blocked, Ordering::Relaxed) != blocked && blocked {
            self.write_blocked_at
                .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
            self.unsent.store(u64::MAX, Ordering::Relaxed);
        }
    }

    /// While the socket refuses bytes: whether the client took some since the last look (the
    /// bytes the socket has to send went down). The kernel says a socket is writable again
    /// only once a third of its send buffer is free, megabytes on loopback, so a client that
    /// reads slowly can go long without a write taken while it does read.
    fn took_bytes(&self) -> bool {
        let fd = self.fd.load(Ordering::Relaxed);
        if fd < 0 {
            return false;
        }
        let mut unsent: libc::c_int = 0;
        // SAFETY: SIOCOUTQ (TIOCOUTQ's number) writes one int to the pointer given; `fd` is
        // this connection's socket, open while its task (which calls this) runs.
        if unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut unsent) } != 0 {
            return false;
        }
        let unsent = u64::try_from(unsent).unwrap_or(0);
        unsent < self.unsent.swap(unsent, Ordering::Relaxed)
    }

    /// For how many milliseconds the socket has refused bytes; `None` while it takes them.
    fn blocked_for(&self) -> Option<u64> {
        self.write_blocked.load(Ordering::Relaxed).then(|| {
            (self.epoch.elapsed().as_millis() as u64)
                .saturating_sub(self.write_blocked_at.load(Ordering::Relaxed))
        })
    }

    /// Since when the connection has had no request in progress; `None` while it has one.
    fn idle_since(&self) -> Option<u64> {
        (self.busy.load(Ordering::Acquire) == 0).then(|| self.idle_since.load(Ordering::Relaxed))
    }

    /// For how many milliseconds the connection has had no request in progress; `None` while it
    /// has one, or once it is closing.
    pub(crate) fn idle_for(&self) -> Option<u64> {
        if self.closing.load(Ordering::Relaxed) {
            return None;
        }
        let since = self.idle_since()?;
        Some((self.epoch.elapsed().as_millis() as u64).saturating_sub(since))
    }

    /// For how many milliseconds the connection has had no request in progress, once its
    /// protocol is known (`idle_timeout` applies then); `None` before, while it has a request,
    /// or once it is closing.
    pub(crate) fn idle_after_first_bytes(&self) -> Option<u64> {
        self.told
            .load(Ordering::Relaxed)
            .then(|| self.idle_for())
            .flatten()
    }

    /// Whether the client is still there and has sent nothing for at least `long`.
    fn silent_for(&self, long: Duration) -> bool {
        let now = self.epoch.elapsed().as_millis() as u64;
        !self.client_ended.load(Ordering::Relaxed)
            && now.saturating_sub(self.last_read.load(Ordering::Relaxed)) >= long.as_millis() as u64
    }

    /// Asks the connection to close once its request in progress, if any, is answered, for
    /// `why` (counted when it closes), or for a drain (`None`: not counted).
    pub(crate) fn close(&self, why: Option<Closed>) {
        let code = why.map_or(DRAIN, Closed::code);
        let _ = self
            .reason
            .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
        self.closing.store(true, Ordering::Relaxed);
        self.close.notify_one();
        let parked = self.parked.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(waker) = parked {
            waker.wake();
        }
    }

    /// Whether the connection was asked to close.
    fn asked_to_close(&self) -> bool {
        self.reason.load(Ordering::Acquire) != 0
    }

    /// Counts the connection, asked to close, as closed for the reason it was given (a drain
    /// is not counted).
    fn count_close(&self, metrics: &ConnMetrics) {
        match self.reason.load(Ordering::Acquire) {
            0 | DRAIN => {}
            code => {
                if let Some(why) = Closed::from_code(code) {
                    metrics.closed(why);
                }
            }
        }
    }

    fn started(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }
}

/// A request in progress on a connection, from its arrival until its response body is sent (or
/// dropped).
struct Busy(Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        let now = self.0.epoch.elapsed().as_millis() as u64;
        self.0.spoke.store(false, Ordering::Relaxed);
        self.0.idle_since.store(now, Ordering::Relaxed);
        self.0.answered.fetch_add(1, Ordering::AcqRel);
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// HTTP/2: the largest frame of an answer handed to hyper at once (HTTP/2's smallest frame
/// limit, so the frames on the wire are the same). hyper asks for the next one once this one
/// is sent, so a stream whose client takes this much within `idle_timeout` is asked again in
/// time, and is not cut as stalled.
const H2_PIECE: usize = 16 * 1024;

/// A response body that keeps its connection busy until it is sent; over HTTP/2, watched for a
/// client that gives its stream no room ([`streams`]), and handed out in [`H2_PIECE`]s.
pub(crate) struct Tracked {
    body: ProxyBody,
    busy: Busy,
    wait: Option<Arc<StreamWait>>,
    /// HTTP/2: what is left of the last frame, past the piece handed out.
    rest: Bytes,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        let Some(wait) = &this.wait else {
            return Pin::new(&mut this.body).poll_frame(cx);
        };
        wait.asked();
        let mut data = if this.rest.is_empty() {
            match ready!(Pin::new(&mut this.body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if !data.is_empty() => data,
                    Ok(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                other => return Poll::Ready(other),
            }
        } else {
            std::mem::take(&mut this.rest)
        };
        if data.len() > H2_PIECE {
            this.rest = data.split_off(H2_PIECE);
        }
        // hyper asks for the next frame only once the stream has had room for this one.
        wait.handed(this.busy.0.now());
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let hint = self.body.size_hint();
        if self.rest.is_empty() {
            return hint;
        }
        let rest = self.rest.len() as u64;
        let mut more = SizeHint::new();
        more.set_lower(hint.lower() + rest);
        if let Some(upper) = hint.upper() {
            more.set_upper(upper + rest);
        }
        more
    }
}

/// An HTTP/2 client's socket that notes when the client last spoke and whether it ended its
/// side, so that a connection that ends without it is known to have been ended by the server
/// (a ping left unanswered).
struct Watched {
    stream: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) {
            if buf.filled().len() == before {
                self.conn.client_ended.store(true, Ordering::Relaxed);
            } else {
                let now = self.conn.epoch.elapsed().as_millis() as u64;
                self.conn.last_read.store(now, Ordering::Relaxed);
            }
        }
        read
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
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

/// Serves one accepted connection until it closes (see the module docs): the task's future.
///
/// It holds what a parked HTTP/1.1 connection needs, and no more: telling the protocol and
/// serving (hyper's connection, its buffers) run in a boxed future that exists only while they
/// do. A parked connection's task is this and its socket (a few hundred bytes, not the
/// kilobyte an `async fn` holding every state's room took).
pub(crate) struct Serve<F> {
    conn: Arc<Conn>,
    peer: SocketAddr,
    limits: ClientLimits,
    stop: watch::Receiver<bool>,
    accounted: Accounted,
    handle: F,
    state: State,
}

/// Where a connection is.
enum State {
    /// Telling its protocol, or served by hyper.
    Busy(Pin<Box<dyn Future<Output = Next> + Send>>),
    /// HTTP/1.1, idle between requests: its socket alone, watched for the next one.
    Parked(http1::Rewound),
    Done,
}

/// What a busy connection turns into.
enum Next {
    Told(TcpStream, Protocol),
    /// HTTP/1.1, given back by hyper: parked, or served again at once if bytes were read
    /// ahead.
    GivenBack(http1::Rewound),
    Closed,
}

/// Serves `stream`, accepted from `peer`, with `handle` until it closes; `accounted` is given
/// up when it ends, however it ends.
pub(crate) fn serve<F, Fut>(
    stream: TcpStream,
    peer: SocketAddr,
    conn: Arc<Conn>,
    limits: ClientLimits,
    stop: watch::Receiver<bool>,
    accounted: Accounted,
    handle: F,
) -> Serve<F>
where
    F: Fn(Request<Incoming>, Peer) -> Fut + Clone + Send + Sync + Unpin + 'static,
    Fut: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    conn.fd
        .store(std::os::fd::AsRawFd::as_raw_fd(&stream), Ordering::Relaxed);
    let mut serve = Serve {
        conn,
        peer,
        limits,
        stop,
        accounted,
        handle,
        state: State::Done,
    };
    let Owned(conn, mut stop, metrics, limits) = serve.owned();
    serve.state = State::Busy(Box::pin(async move {
        match first_bytes(&stream, &conn, &limits, &mut stop, &metrics).await {
            Some(protocol) => Next::Told(stream, protocol),
            None => Next::Closed,
        }
    }));
    serve
}

/// What a busy stretch's boxed future owns of its connection's: the `Conn`, the drain's
/// receiver, the metrics and the limits.
struct Owned(
    Arc<Conn>,
    watch::Receiver<bool>,
    Arc<ConnMetrics>,
    ClientLimits,
);

impl<F, Fut> Serve<F>
where
    F: Fn(Request<Incoming>, Peer) -> Fut + Clone + Send + Sync + Unpin + 'static,
    Fut: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    /// Handles of its own on what a busy stretch needs (see [`Owned`]).
    fn owned(&self) -> Owned {
        Owned(
            self.conn.clone(),
            self.stop.clone(),
            self.accounted.metrics.clone(),
            self.limits,
        )
    }

    /// The hyper service of one stretch of serving: each request handled, its connection busy
    /// until its answer is sent.
    fn service(
        &self,
        http2: bool,
    ) -> impl hyper::service::HttpService<
        Incoming,
        ResBody = Tracked,
        Error = Infallible,
        Future = Answer,
    > + Clone
           + Send
           + Unpin
           + 'static {
        let (conn, handle, peer) = (self.conn.clone(), self.handle.clone(), Peer::new(self.peer));
        service_fn(move |request| {
            let busy = conn.started();
            // Boxed: hyper keeps an HTTP/1.1 connection's request future in place while it
            // serves, and hands the connection back (to park it) only with an `Unpin` one. A
            // combinator, not an `async` block: a block would hold the handler's future twice
            // (as captured, and as awaited), and the box is copied whole when it is made.
            let answer: Answer = Box::pin(handle(request, peer.clone()).map(move |response| {
                Ok::<_, Infallible>(response.map(|body| {
                    let wait = http2.then(|| busy.0.streams().watch(body.call().cloned()));
                    Tracked {
                        body,
                        busy,
                        wait,
                        rest: Bytes::new(),
                    }
                }))
            }));
            answer
        })
    }

    /// Served by hyper's HTTP/1.1 server until it is given back or closes.
    fn http1(&self, io: http1::Rewound) -> State {
        let service = self.service(false);
        let Owned(conn, mut stop, metrics, limits) = self.owned();
        State::Busy(Box::pin(async move {
            match http1::serve(io, &conn, &limits, &mut stop, &metrics, service).await {
                Some(io) => Next::GivenBack(io),
                None => Next::Closed,
            }
        }))
    }

    /// Served by hyper's HTTP/2 server until it closes.
    fn http2(&self, stream: TcpStream) -> State {
        let service = self.service(true);
        let Owned(conn, mut stop, metrics, limits) = self.owned();
        State::Busy(Box::pin(async move {
            serve_http2(stream, &conn, &limits, &mut stop, &metrics, service).await;
            Next::Closed
        }))
    }
}

impl<F, Fut> Future for Serve<F>
where
    F: Fn(Request<Incoming>, Peer) -> Fut + Clone + Send + Sync + Unpin + 'static,
    Fut: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Busy(busy) => {
                    let next = std::task::ready!(busy.as_mut().poll(cx));
                    this.state = match next {
                        Next::Told(stream, Protocol::Http1) => {
                            this.conn.told.store(true, Ordering::Relaxed);
                            this.http1(http1::Rewound::new(stream, this.conn.clone()))
                        }
                        Next::Told(stream, Protocol::Http2) => {
                            this.conn.told.store(true, Ordering::Relaxed);
                            this.http2(stream)
                        }
                        // The client has sent more already: served again at once.
                        Next::GivenBack(io) if io.read_ahead() => this.http1(io),
                        Next::GivenBack(io) => {
                            this.accounted.metrics.parked(true);
                            State::Parked(io)
                        }
                        Next::Closed => State::Done,
                    };
                }
                State::Parked(io) => {
                    // Parked: the socket is watched until it is readable or the connection
                    // is asked to close (at the idle timeout, from the listener's sweep; to
                    // make room; to drain).
                    let asked = match http1::until_readable(io, &this.conn, cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(asked) => asked,
                    };
                    this.accounted.metrics.parked(false);
                    let State::Parked(io) = std::mem::replace(&mut this.state, State::Done) else {
                        unreachable!("matched as parked above")
                    };
                    if asked {
                        this.conn.count_close(&this.accounted.metrics);
                        drop(io);
                    } else {
                        this.state = this.http1(io);
                    }
                }
                State::Done => return Poll::Ready(()),
            }
        }
    }
}

impl<F> Drop for Serve<F> {
    fn drop(&mut self) {
        // Aborted while parked (a drain that ran out): no longer counted as parked.
        if matches!(self.state, State::Parked(_)) {
            self.accounted.metrics.parked(false);
        }
    }
}

/// Serves an HTTP/2 connection until it closes.
async fn serve_http2<S, B>(
    stream: TcpStream,
    conn: &Arc<Conn>,
    limits: &ClientLimits,
    stop: &mut watch::Receiver<bool>,
    metrics: &ConnMetrics,
    service: S,
) where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // Only HTTP/2 needs to know when the client last spoke: to tell an unanswered ping.
    let io = TokioIo::new(Watched {
        stream,
        conn: conn.clone(),
    });
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    // The head an HTTP/1.1 client may send, not hyper's 16 KiB: a client gets the same limit
    // whichever protocol it speaks.
    builder
        .timer(TokioTimer::new())
        .max_header_list_size(http1::MAX_HEAD as u32)
        .keep_alive_interval(Some(limits.http2_keepalive_interval))
        .keep_alive_timeout(limits.http2_keepalive_timeout);
    let connection = builder.serve_connection(io, service);
    let shut =
        |c: Pin<&mut _>, _: Shut| hyper::server::conn::http2::Connection::graceful_shutdown(c);
    let timing = Timing {
        protocol: Protocol::Http2,
        idle: Some(limits.idle_timeout),
        park: None,
        park_busy: Duration::ZERO,
        park_needs_answer: false,
        pinged: limits.http2_keepalive_timeout,
        linger: limits.idle_timeout,
    };
    run(connection, shut, conn, stop, metrics, timing).await;
}

/// The protocol of a new connection, told within `first_byte_timeout`; `None` when it closed
/// first, sent nothing in time (counted), or was asked to close.
async fn first_bytes(
    stream: &TcpStream,
    conn: &Conn,
    limits: &ClientLimits,
    stop: &mut watch::Receiver<bool>,
    metrics: &ConnMetrics,
) -> Option<Protocol> {
    tokio::select! {
        sniffed = tokio::time::timeout(limits.first_byte_timeout, sniff(stream)) => match sniffed {
            Ok(Some(protocol)) => Some(protocol),
            // Closed, or an error, before a byte: nothing to serve.
            Ok(None) => None,
            Err(_) => {
                metrics.closed(Closed::FirstByteTimeout);
                None
            }
        },
        _ = stop.wait_for(|stop| *stop) => None,
        _ = conn.close.notified() => {
            conn.count_close(metrics);
            None
        }
    }
}

/// How a connection's protocol is timed: the idle timeout the proxy keeps itself (HTTP/2; hyper
/// keeps HTTP/1.1's while it serves), how long an HTTP/1.1 connection idles before it is
/// parked, and how long an unanswered HTTP/2 ping waits.
#[derive(Debug, Clone, Copy)]
struct Timing {
    protocol: Protocol,
    idle: Option<Duration>,
    park: Option<Duration>,
    /// How long a connection idles before it is parked once it has answered two requests or
    /// more since it was served: a client that sends again within this is not made to pay for
    /// a new hyper connection at each request.
    park_busy: Duration,
    /// Whether the connection may be parked only after it has answered a request (it was
    /// served again with bytes read ahead).
    park_needs_answer: bool,
    pinged: Duration,
    /// HTTP/1.1: how long a connection asked to close with no request in progress goes on
    /// sending its last answer to a client that does not take it (the socket refuses bytes)
    /// before it is cut.
    linger: Duration,
}

/// How a connection is asked to finish: to close once what it serves is done, or (HTTP/1.1,
/// idle) to give its socket back without closing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shut {
    Close,
    Park,
}

/// Why a connection that ended on its own was closed by the proxy, if it was.
fn why_ended(
    ended: Result<(), &hyper::Error>,
    protocol: Protocol,
    conn: &Conn,
    pinged: Duration,
) -> Option<Closed> {
    match (ended, protocol) {
        // hyper times a request's headers: a client too slow with them ends here.
        (Err(e), Protocol::Http1) if e.is_timeout() => Some(Closed::IdleTimeout),
        (Err(e), Protocol::Http2) if e.is_timeout() => Some(Closed::KeepaliveTimeout),
        // hyper ends an HTTP/2 connection whose ping went unanswered with a GOAWAY and no
        // error: ended, with the client still there, by the server.
        (Ok(()), Protocol::Http2) if conn.silent_for(pinged) => Some(Closed::KeepaliveTimeout),
        _ => None,
    }
}

/// Polls `connection` to its end (`shut` asks it to finish what it serves): closed gracefully
/// when the proxy drains, when the accept loop asks, or (with `idle`, for HTTP/2) when no
/// stream has been open for that long. With `park` (HTTP/1.1), a connection idle that long is
/// asked to give its socket back, and what it gives back is returned: `Some` only then.
async fn run<C, T>(
    connection: C,
    shut: impl Fn(Pin<&mut C>, Shut),
    conn: &Conn,
    stop: &mut watch::Receiver<bool>,
    metrics: &ConnMetrics,
    timing: Timing,
) -> Option<T>
where
    C: Future<Output = Result<T, hyper::Error>>,
{
    let Timing {
        protocol,
        idle,
        park,
        park_busy,
        park_needs_answer,
        pinged,
        linger,
    } = timing;
    let mut connection = std::pin::pin!(connection);
    // A connection served again with a part of a request read ahead (slow headers, say) is
    // parked only once it has answered a request here, not given back again and again: it is
    // served until that request is answered, or the idle sweep ends it.
    let answered_before = conn.answered.load(Ordering::Acquire);
    // `closing`: asked to finish (no branch asks again); `asked`: by a drain, the accept
    // loop or the idle watchdog, and counted then, rather than after a park that could not be
    // (which closes a connection inside a request once it is answered).
    let mut closing = false;
    let mut asked = false;
    let mut parking = false;
    // HTTP/1.1, asked to close with no request in progress: cut at the watchdog's next turn
    // if hyper has not ended by then (`Some`: at the latest by then). hyper ends an idle
    // connection at once when asked, but waits for the rest of a request's head that has begun
    // (a slow client's, say), and for its last answer's bytes to go out: those are given
    // `linger`, while the client does not take them.
    let mut cut: Option<Instant> = None;
    // How long the connection may idle before the watchdog acts: it closes an idle HTTP/2
    // connection, and parks an idle HTTP/1.1 one (the listener's sweep closes it later).
    let idle_limit = idle.or(park);
    let watchdog = tokio::time::sleep(idle_limit.unwrap_or(Duration::from_secs(3600)));
    let mut watchdog = std::pin::pin!(watchdog);
    let mut stopped = std::pin::pin!(stop.wait_for(|stop| *stop));
    let mut close = std::pin::pin!(conn.close.notified());
    // The drain, a close and the watchdog are polled with a waker of their own, and only after
    // it rang: most wake-ups are the connection's, and polling the three on each of them
    // (registering a waker with each) cost about 700 instructions per proxied answer (2%).
    let alarm = Arc::new(Alarm::default());
    let alarm_waker = std::task::Waker::from(Arc::clone(&alarm));
    loop {
        let event = std::future::poll_fn(|cx| {
            // The connection first: most wake-ups are for it.
            if let Poll::Ready(ended) = connection.as_mut().poll(cx) {
                return Poll::Ready(Event::Ended(ended));
            }
            // A connection closing on its own (a park that found a request begun) still
            // heeds a drain or a close, which cut it if that request has not yet begun.
            if (asked && cut.is_none()) || !alarm.rang(cx.waker()) {
                return Poll::Pending;
            }
            let mut rare = Context::from_waker(&alarm_waker);
            let event = if !asked && stopped.as_mut().poll(&mut rare).is_ready() {
                Event::Stop
            } else if !asked && close.as_mut().poll(&mut rare).is_ready() {
                Event::Close
            } else if (cut.is_some() || (!closing && idle_limit.is_some()))
                && watchdog.as_mut().poll(&mut rare).is_ready()
            {
                Event::Watchdog
            } else {
                return Poll::Pending;
            };
            // The others are polled again on the next pass (their waker may have rung too).
            alarm.ring();
            Poll::Ready(event)
        })
        .await;
        match event {
            Event::Ended(ended) => {
                // Closed as asked: counted then.
                let why = if asked {
                    None
                } else {
                    why_ended(ended.as_ref().map(|_| ()), protocol, conn, pinged)
                };
                if let Some(why) = why {
                    metrics.closed(why);
                }
                return None;
            }
            Event::Stop | Event::Close => {
                closing = true;
                asked = true;
                if matches!(event, Event::Stop) {
                    conn.closing.store(true, Ordering::Relaxed);
                } else {
                    conn.count_close(metrics);
                }
                shut(connection.as_mut(), Shut::Close);
                if protocol == Protocol::Http1 && conn.idle_since().is_some() {
                    // Looked at on the next pass, which also waits while the answer goes out.
                    let now = Instant::now();
                    cut = Some(now + linger);
                    watchdog.as_mut().reset(now);
                }
            }
            Event::Watchdog if cut.is_some() => {
                let by = cut.expect("the branch runs only with a cut due");
                if conn.idle_since().is_none() {
                    // A request began after all: it is answered, then hyper ends the
                    // connection.
                    cut = None;
                } else if conn.write_blocked.load(Ordering::Relaxed) && Instant::now() < by {
                    watchdog.as_mut().reset(by);
                } else {
                    return None;
                }
            }
            Event::Watchdog => {
                let mut idle = idle_limit.expect("the branch runs only with an idle limit");
                let answered = conn.answered.load(Ordering::Acquire);
                if park.is_some() && answered.wrapping_sub(answered_before) >= 2 {
                    idle = park_busy;
                }
                let now = conn.epoch.elapsed().as_millis() as u64;
                match conn.idle_since() {
                    Some(_)
                        if park.is_some()
                            && park_needs_answer
                            && conn.answered.load(Ordering::Acquire) == answered_before =>
                    {
                        watchdog.as_mut().reset(Instant::now() + idle);
                    }
                    // hyper still holds bytes of the last answer that the client has not
                    // taken: parked once they are out, since a connection given back drops
                    // them.
                    Some(_) if park.is_some() && conn.write_blocked.load(Ordering::Relaxed) => {
                        watchdog.as_mut().reset(Instant::now() + idle);
                    }
                    // The client spoke since the connection became idle (or since the last
                    // look): hyper holds the start of a head. Parked now, the connection would
                    // close after that request (a head begun is not given back), so it is
                    // looked at again later; the idle timeout still bounds a head that never
                    // ends (the listener's sweep).
                    Some(_) if park.is_some() && conn.spoke.swap(false, Ordering::Relaxed) => {
                        watchdog.as_mut().reset(Instant::now() + http1::HEAD_PIECES);
                    }
                    Some(since) if now.saturating_sub(since) >= idle.as_millis() as u64 => {
                        if park.is_none() {
                            closing = true;
                            asked = true;
                            conn.closing.store(true, Ordering::Relaxed);
                            metrics.closed(Closed::IdleTimeout);
                            shut(connection.as_mut(), Shut::Close);
                            continue;
                        }
                        shut(connection.as_mut(), Shut::Park);
                        parking = true;
                    }
                    Some(since) => {
                        let left = idle.as_millis() as u64 - now.saturating_sub(since);
                        watchdog
                            .as_mut()
                            .reset(Instant::now() + Duration::from_millis(left));
                    }
                    // HTTP/2, inside requests: the call of an answer whose stream the client
                    // gave no room for `linger` (`idle_timeout`) ends (its permit goes back,
                    // the upstream stops). A connection left with only such streams, cut at an
                    // earlier look, is closed.
                    None if protocol == Protocol::Http2 => {
                        let stalled = conn.streams().cut_stalled(now, linger.as_millis() as u64);
                        metrics.streams_cut(stalled.calls_ended);
                        if stalled.cut_before > 0
                            && stalled.cut_before >= conn.busy.load(Ordering::Acquire)
                        {
                            metrics.closed(Closed::SendTimeout);
                            return None;
                        }
                        watchdog.as_mut().reset(Instant::now() + idle);
                    }
                    // Inside a request whose answer the client has taken no byte of for
                    // `linger` (`idle_timeout`): it is not reading, and is cut (the call ends,
                    // its permit goes back and the upstream stops).
                    None if conn.blocked_for().is_some() => {
                        if conn.took_bytes() {
                            conn.write_blocked_at.store(now, Ordering::Relaxed);
                        } else if conn
                            .blocked_for()
                            .is_some_and(|ms| ms >= linger.as_millis() as u64)
                        {
                            metrics.closed(Closed::SendTimeout);
                            return None;
                        }
                        watchdog.as_mut().reset(Instant::now() + idle);
                    }
                    None => watchdog.as_mut().reset(Instant::now() + idle),
                }
            }
        }
        if parking {
            parking = false;
            // Given back only if hyper was between requests, and so finishes in this very
            // poll. Else it is inside a request (its body still coming after the answer went
            // out, or its head begun): it closes once that request is done, and no byte of the
            // request is taken for a request of its own. A head that never ends is cut when
            // the listener's sweep asks, at the idle timeout.
            let polled = std::future::poll_fn(|cx| Poll::Ready(connection.as_mut().poll(cx))).await;
            match polled {
                Poll::Ready(Ok(given_back)) => return Some(given_back),
                Poll::Ready(Err(e)) => {
                    if let Some(why) = why_ended(Err(&e), protocol, conn, pinged) {
                        metrics.closed(why);
                    }
                    return None;
                }
                Poll::Pending => {
                    closing = true;
                    shut(connection.as_mut(), Shut::Close);
                }
            }
        }
    }
}

/// What a served connection's loop acts on.
enum Event<T> {
    /// hyper ended the connection (or gave it back).
    Ended(Result<T, hyper::Error>),
    /// The proxy drains.
    Stop,
    /// The listener asked the connection to close.
    Close,
    /// The idle watchdog's time came.
    Watchdog,
}

/// The waker of a connection's rare events: it remembers that it rang, and wakes the
/// connection's task.
struct Alarm {
    rang: AtomicBool,
    task: AtomicWaker,
}

impl Default for Alarm {
    /// Rung: the rare events are polled on the first pass, which registers their waker.
    fn default() -> Alarm {
        Alarm {
            rang: AtomicBool::new(true),
            task: AtomicWaker::new(),
        }
    }
}

impl Alarm {
    /// Whether it rang since the last look; `task` is woken when it next does.
    fn rang(&self, task: &std::task::Waker) -> bool {
        self.task.register(task);
        self.rang.swap(false, Ordering::AcqRel)
    }

    fn ring(&self) {
        self.rang.store(true, Ordering::Release);
    }
}

impl std::task::Wake for Alarm {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.ring();
        self.task.wake();
    }
}

/// The protocol of a new connection, from its first bytes: HTTP/2 when they are the HTTP/2
/// preface, HTTP/1.1 as soon as they cannot be. `None` when the client closes (or the socket
/// fails) first.
async fn sniff(stream: &TcpStream) -> Option<Protocol> {
    let mut first = [0u8; PREFACE.len()];
    loop {
        let n = stream.peek(&mut first).await.ok()?;
        if n == 0 {
            return None;
        }
        if first[..n] != PREFACE[..n] {
            return Some(Protocol::Http1);
        }
        if n == PREFACE.len() {
            return Some(Protocol::Http2);
        }
        // A part of the preface: look again once more may have come.
        tokio::time::sleep(SNIFF_AGAIN).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over HTTP/2 an answer's frame larger than [`H2_PIECE`] goes to hyper in pieces, each
    /// noted as handed, and the body ends only after the last one.
    #[test]
    fn an_http2_answer_goes_to_hyper_in_pieces() {
        let conn = Arc::new(Conn::new(Instant::now()));
        let busy = conn.started();
        let wait = conn.streams().watch(None);
        let mut tracked = Tracked {
            body: ProxyBody::full(vec![7u8; 3 * H2_PIECE + 10]),
            busy,
            wait: Some(wait),
            rest: Bytes::new(),
        };
        assert_eq!(tracked.size_hint().exact(), Some(3 * H2_PIECE as u64 + 10));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut sizes = Vec::new();
        while let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut tracked).poll_frame(&mut cx) {
            sizes.push(frame.into_data().unwrap().len());
            if tracked.is_end_stream() {
                break;
            }
        }
        assert_eq!(sizes, [H2_PIECE, H2_PIECE, H2_PIECE, 10]);
        assert!(tracked.is_end_stream());
    }

    /// What every parked HTTP/1.1 connection's task holds besides its socket: `Serve` itself
    /// (272 bytes with a handler of two pointers, as the proxy's). It was a 920-byte future
    /// when it was an `async fn`, which kept room for every state it could be in.
    #[test]
    fn a_parked_connection_holds_a_small_task() {
        let (a, b) = (Arc::new(1u64), Arc::new(2u64));
        let handle = move |_: Request<Incoming>, _: Peer| {
            let _ = (&a, &b);
            std::future::ready(Response::new(ProxyBody::empty()))
        };
        fn size_with<F>(_: &F) -> usize {
            std::mem::size_of::<Serve<F>>()
        }
        let size = size_with(&handle);
        assert!(size <= 320, "{size} bytes");
    }

    /// A drain that finds an HTTP/1.1 connection between requests while hyper still holds most
    /// of its last answer (the client does not read, and the socket takes little): the answer
    /// goes out whole, then the connection closes. Cut at once, the client would lose what
    /// hyper held. The server's send buffer is made small here: on loopback the kernel grows
    /// it to megabytes, so hyper holds the end of an answer only rarely.
    #[tokio::test]
    async fn a_drain_lets_the_last_answer_to_a_slow_reader_go_out_whole() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const SIZE: usize = 1 << 20;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        socket2::SockRef::from(&stream)
            .set_send_buffer_size(4096)
            .unwrap();
        let conn = Arc::new(Conn::new(Instant::now()));
        let registry = crate::metrics::Registry::new();
        let accounted = Accounted::new(
            Open::default(),
            0,
            Arc::new(ConnMetrics::new(&registry, "t")),
            Arc::new(tokio::sync::Semaphore::new(1))
                .try_acquire_owned()
                .unwrap(),
        );
        let (stop, stopped) = watch::channel(false);
        let handle = |_: Request<Incoming>, _: Peer| {
            std::future::ready(Response::new(ProxyBody::full(vec![b'x'; SIZE])))
        };
        let served = tokio::spawn(serve(
            stream,
            peer,
            conn.clone(),
            ClientLimits::default(),
            stopped,
            accounted,
            handle,
        ));
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let within = |what: &'static str| {
            let started = std::time::Instant::now();
            move || assert!(started.elapsed() < Duration::from_secs(20), "{what}")
        };
        let waiting = within("the answer was not handed to hyper");
        while conn.idle_since().is_none() || conn.answered.load(Ordering::Acquire) == 0 {
            waiting();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(conn.write_blocked.load(Ordering::Relaxed));
        // The drain, while the client still reads nothing: the connection's next pass looks.
        stop.send(true).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut received = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let reading = within("the answer stalled");
        loop {
            reading();
            let read = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buf));
            match read.await.expect("no byte and no end within 10 s") {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
        let body = received.iter().filter(|b| **b == b'x').count();
        assert_eq!(
            body, SIZE,
            "bytes of the last answer were lost at the drain"
        );
        tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .expect("the connection ended once its answer was out")
            .unwrap();
    }
}
