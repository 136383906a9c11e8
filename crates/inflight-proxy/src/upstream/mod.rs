//! The connections to one plain-HTTP/1.1 upstream: a pool of sockets, taken last-in first-out,
//! on which the task that serves a request writes it and reads its answer itself
//! ([`wire`] the format, [`answer`] the body). There is no task per connection, no channel to
//! one, and nothing per request but the request's own future: an idle pooled connection is its
//! socket (with a second descriptor of it, for a call ended early) and its two buffers.

pub(crate) mod answer;
mod http2;
mod replay;
mod watched;
mod wire;

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame};
use hyper::{Method, Request, Response};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use answer::AnswerBody;
pub(crate) use http2::Http2Upstream;
pub(crate) use watched::WatchedBody;
use wire::Sending;
pub(crate) use wire::{chunked_alone, Malformed};

/// A pooled connection's read buffer: what it starts with, and what it grows by.
const READ_BUF: usize = 8 * 1024;

/// The room a read asks for at least, else the buffer grows by [`READ_BUF`].
const MIN_READ: usize = 1024;

/// How long a request that expects `100 Continue` waits for the upstream's before its body
/// goes anyway (RFC 9110, 10.1.1: an upstream may not know the expectation); curl waits as
/// long.
const CONTINUE_WAIT: Duration = Duration::from_secs(1);

/// An HTTP/1.1 upstream's pooled connections.
pub(crate) struct Http1Pool {
    host: String,
    port: u16,
    idle: Mutex<Vec<Idle>>,
    /// Whether the task that closes connections idle past [`Http1Pool::idle_timeout`] runs.
    reaping: std::sync::atomic::AtomicBool,
    idle_timeout: Duration,
    connect_timeout: Duration,
}

/// The client's next frame of `body`; `None` at its end.
async fn next_frame(body: &mut WatchedBody) -> Result<Option<Frame<Bytes>>, UpstreamError> {
    std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx))
        .await
        .transpose()
}

/// What ends a connection's call early shuts it down with ([`Socket::shut`]): a second
/// descriptor of the connection's socket, made once per connection.
#[derive(Debug)]
pub(crate) struct Socket {
    fd: std::os::fd::OwnedFd,
}

impl Socket {
    /// Shuts the connection down at once, both ways: the upstream sees it close, and whatever
    /// reads its answer sees it end. The connection is not pooled again (its answer is not read
    /// to its end).
    pub(crate) fn shut(&self) {
        let _ = socket2::SockRef::from(&self.fd).shutdown(std::net::Shutdown::Both);
    }
}

/// A connection: its socket, what was read from it and not yet taken, its [`Socket`] for a
/// call that ends early, and the room its requests' heads are written in. Boxed once, when it
/// is made: a request's future moves a pointer, not the connection.
pub(crate) struct Link {
    stream: TcpStream,
    buf: BytesMut,
    io: Arc<Socket>,
    /// Where the next request's head is written: kept from the last one's.
    out: Vec<u8>,
}

impl Link {
    /// Whether the connection, idle in the pool, is still open and quiet. Without a system
    /// call while the socket is not readable: a read that filled less than its buffer (the
    /// last answer's) told tokio the socket was drained, and a close makes it readable again.
    fn alive(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self.stream.poll_read_ready(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            Poll::Ready(Ok(())) => match self.stream.try_read_buf(&mut self.buf) {
                Err(e) => e.kind() == io::ErrorKind::WouldBlock,
                // Closed, or it sent what nobody asked for.
                Ok(_) => false,
            },
        }
    }

    /// Reads the head of the answer to a request of `method`.
    async fn read_head(&mut self, method: &Method) -> Result<wire::Head, Failed> {
        read_head(&mut self.stream, &mut self.buf, method).await
    }

    /// For a request whose client expects `100 Continue`: waits for the upstream's (or
    /// [`CONTINUE_WAIT`]), then sends the body as [`Link::send_body_and_read_head`] does. An
    /// upstream that answers first (a 413, a 401) gets no body, and its connection carries
    /// nothing more. The client's body is not read before then, so hyper's server tells the
    /// client to go on only once the upstream did: a body the upstream refuses is not sent.
    async fn send_body_when_asked(
        &mut self,
        body: (Option<Frame<Bytes>>, WatchedBody),
        sending: Sending,
        method: &Method,
    ) -> Result<wire::Head, Failed> {
        let until = Instant::now() + CONTINUE_WAIT;
        let mut read_any = !self.buf.is_empty();
        loop {
            match wire::continued(&mut self.buf) {
                Ok(Some(true)) => break,
                Ok(Some(false)) => {
                    let mut head = self.read_head(method).await?;
                    head.keep_alive = false;
                    return Ok(head);
                }
                Ok(None) => {}
                Err(malformed) => {
                    return Err(Failed::answered(UpstreamError::Malformed(malformed)))
                }
            }
            let (stream, buf) = (&mut self.stream, &mut self.buf);
            let fill = std::future::poll_fn(|cx| answer::poll_fill(stream, buf, cx));
            match tokio::time::timeout_at(until, fill).await {
                // No word from the upstream: the body goes all the same.
                Err(_) => break,
                Ok(filled) => head_bytes(filled, &mut read_any)?,
            }
        }
        self.send_body_and_read_head(body, sending, method).await
    }

    /// Sends a request's body as it comes from the client, framed as `sending` says, while the
    /// head of its answer is read: an upstream may answer before it has read the whole body (a
    /// 413, say, or an answer that streams while the request still does), and is heard then.
    /// A connection whose request's body did not all go out carries nothing more.
    async fn send_body_and_read_head(
        &mut self,
        (first, body): (Option<Frame<Bytes>>, WatchedBody),
        sending: Sending,
        method: &Method,
    ) -> Result<wire::Head, Failed> {
        let (mut rd, mut wr) = self.stream.split();
        let sent = send_body(&mut wr, first, body, sending);
        let read = read_head(&mut rd, &mut self.buf, method);
        tokio::pin!(sent, read);
        let mut sending_done = false;
        let mut all_sent = false;
        let mut write_failed = None;
        loop {
            tokio::select! {
                biased;
                head = &mut read => {
                    return match head {
                        Ok(mut head) => {
                            head.keep_alive &= all_sent;
                            Ok(head)
                        }
                        // The write's error says more than the read's that followed it.
                        Err(failed) => Err(write_failed.map_or(failed, Failed::answered)),
                    };
                }
                done = &mut sent, if !sending_done => {
                    sending_done = true;
                    match done {
                        Ok(()) => all_sent = true,
                        Err(e @ (UpstreamError::ClientBody(_)
                        | UpstreamError::ClientBodyStalled(_))) => {
                            return Err(Failed::answered(e))
                        }
                        // The upstream stopped taking it: its answer may still come.
                        Err(e) => write_failed = Some(e),
                    }
                }
            }
        }
    }
}

/// Sends a request's body to `wr` as it comes from the client (`first`, if its first frame was
/// read already, then the rest), framed as `sending` says.
async fn send_body<W: AsyncWrite + Unpin>(
    wr: &mut W,
    mut first: Option<Frame<Bytes>>,
    mut body: WatchedBody,
    sending: Sending,
) -> Result<(), UpstreamError> {
    let chunked = sending == Sending::Chunked;
    let mut out = Vec::new();
    loop {
        let frame = match first.take() {
            Some(frame) => Some(frame),
            None => next_frame(&mut body).await?,
        };
        out.clear();
        let Some(frame) = frame else {
            if chunked {
                wire::last_chunk(&mut out, None);
                wr.write_all(&out).await.map_err(UpstreamError::Io)?;
            }
            return Ok(());
        };
        match frame.into_data() {
            Ok(data) if data.is_empty() => {}
            Ok(data) if chunked => {
                wire::chunk_size(&mut out, data.len());
                out.extend_from_slice(&data);
                out.extend_from_slice(b"\r\n");
                wr.write_all(&out).await.map_err(UpstreamError::Io)?;
            }
            Ok(data) => wr.write_all(&data).await.map_err(UpstreamError::Io)?,
            Err(frame) => {
                // Trailers end the body; they go out only in chunks.
                if let (true, Ok(trailers)) = (chunked, frame.into_trailers()) {
                    wire::last_chunk(&mut out, Some(&trailers));
                    wr.write_all(&out).await.map_err(UpstreamError::Io)?;
                    return Ok(());
                }
            }
        }
    }
}

/// Reads the head of the answer to a request of `method` from `rd`, through `buf`.
async fn read_head<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    method: &Method,
) -> Result<wire::Head, Failed> {
    let mut read_any = !buf.is_empty();
    loop {
        match wire::read_head(buf, method) {
            Ok(Some(head)) => return Ok(head),
            Ok(None) => {}
            Err(malformed) => return Err(Failed::answered(UpstreamError::Malformed(malformed))),
        }
        let fill = std::future::poll_fn(|cx| answer::poll_fill(rd, buf, cx)).await;
        head_bytes(fill, &mut read_any)?;
    }
}

/// A read while an answer's head is awaited: bytes came (`read_any` says so from then on), or
/// the upstream closed or failed, with nothing of an answer yet unless `read_any`.
fn head_bytes(fill: io::Result<usize>, read_any: &mut bool) -> Result<(), Failed> {
    match fill {
        Ok(0) => {
            let e = io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the upstream closed the connection before its answer's head",
            );
            Err(Failed::new(UpstreamError::Io(e), !*read_any))
        }
        Ok(_) => {
            *read_any = true;
            Ok(())
        }
        Err(e) => Err(Failed::new(UpstreamError::Io(e), !*read_any)),
    }
}

/// A connection waiting for its next request.
struct Idle {
    link: Box<Link>,
    since: Instant,
}

/// Why a request on one connection got no answer, and whether the upstream sent nothing of one
/// (a request that may be sent again could then be, on another connection).
struct Failed {
    error: UpstreamError,
    unanswered: bool,
}

impl Failed {
    fn new(error: UpstreamError, unanswered: bool) -> Failed {
        Failed { error, unanswered }
    }

    fn answered(error: UpstreamError) -> Failed {
        Failed::new(error, false)
    }
}

/// What a request sent on the pool comes back with.
pub(crate) type Pooled = Result<Response<AnswerBody>, UpstreamError>;

/// Why a request got no answer from the upstream.
#[derive(Debug)]
pub(crate) enum UpstreamError {
    /// No connection could be made (or none within the connect timeout).
    Connect(io::Error),
    /// The connection failed.
    Io(io::Error),
    /// The upstream's answer is not HTTP/1.1.
    Malformed(wire::Malformed),
    /// The client's request body failed as it was read.
    ClientBody(hyper::Error),
    /// The client sent no more of its request body for this long (the proxy's
    /// `idle_timeout`).
    ClientBodyStalled(Duration),
    /// From hyper-util's client (HTTP/1.1 over TLS).
    Client(hyper_util::client::legacy::Error),
    /// No connection could be made to an HTTP/2 upstream: the attempt's failure (shared by
    /// the requests that waited for it).
    Connecting(Arc<Box<dyn StdError + Send + Sync>>),
    /// From hyper's HTTP/2 client, on the connection.
    Http2(hyper::Error),
    /// The HTTP/2 connection a request went on closed, and hyper's client never answered the
    /// request (for a method that may not be repeated).
    Http2Lost,
}

impl UpstreamError {
    /// Whether no connection could be made.
    pub(crate) fn is_connect(&self) -> bool {
        match self {
            UpstreamError::Connect(_) => true,
            UpstreamError::Client(e) => e.is_connect(),
            UpstreamError::Connecting(_) => true,
            _ => false,
        }
    }
}

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamError::Connect(_) => f.write_str("tcp connect error"),
            UpstreamError::Io(_) | UpstreamError::Malformed(_) => f.write_str("request failed"),
            UpstreamError::ClientBody(_) => f.write_str("the client's request body failed"),
            UpstreamError::ClientBodyStalled(d) => write!(
                f,
                "the client sent no more of its request body within {d:?}"
            ),
            UpstreamError::Client(e) => e.fmt(f),
            UpstreamError::Connecting(_) => f.write_str("cannot connect"),
            UpstreamError::Http2(e) => e.fmt(f),
            UpstreamError::Http2Lost => {
                f.write_str("the connection closed and the request got no answer on it")
            }
        }
    }
}

impl StdError for UpstreamError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            UpstreamError::Connect(e) | UpstreamError::Io(e) => Some(e),
            UpstreamError::Malformed(e) => Some(e),
            UpstreamError::ClientBody(e) => Some(e),
            UpstreamError::ClientBodyStalled(_) => None,
            UpstreamError::Client(e) => e.source(),
            UpstreamError::Connecting(e) => Some(&***e),
            UpstreamError::Http2(e) => e.source(),
            UpstreamError::Http2Lost => None,
        }
    }
}

impl Http1Pool {
    /// The pool of `authority` (`host[:port]`, port 80 when not given).
    pub(crate) fn new(
        authority: &hyper::http::uri::Authority,
        idle_timeout: Duration,
        connect_timeout: Duration,
    ) -> Http1Pool {
        let host = authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        Http1Pool {
            host: host.to_string(),
            port: authority.port_u16().unwrap_or(80),
            idle: Mutex::new(Vec::new()),
            reaping: std::sync::atomic::AtomicBool::new(false),
            idle_timeout,
            connect_timeout,
        }
    }

    /// Sends `request` (its target in origin form) on an idle connection, or on a new one, and
    /// returns the answer's head with its body, which reads the rest from the connection.
    ///
    /// The request's head is written out before the future begins, so the future holds bytes,
    /// not the request. A request without a body whose method may be sent twice (RFC 9110,
    /// 9.2.2) is sent again, once, on a new connection when a pooled one closes before any of
    /// its answer came: the upstream closed it meanwhile.
    ///
    /// The body is read as [`WatchedBody`] says: one that stops coming fails as the client's
    /// ([`UpstreamError::ClientBodyStalled`]).
    pub(crate) fn request(
        self: &Arc<Self>,
        request: Request<WatchedBody>,
        continues: bool,
    ) -> impl Future<Output = Pooled> + Send + '_ {
        let (mut parts, body) = request.into_parts();
        let mut taken = self.take();
        // Written into the buffer the connection keeps for it, or a new one.
        let mut head = taken
            .as_mut()
            .map(|link| std::mem::take(&mut link.out))
            .unwrap_or_default();
        head.clear();
        let empty = body.is_end_stream();
        // The upstream is asked for `100 Continue` again, for a body it may refuse unread.
        let expects = continues && !empty && !wire::bodiless(&parts.method);
        if expects {
            parts.headers.insert(
                hyper::header::EXPECT,
                hyper::header::HeaderValue::from_static("100-continue"),
            );
        }
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let sending = wire::write_head(&mut head, &parts.method, target, &parts.headers, empty);
        let method = parts.method;
        async move {
            let (mut sending, mut empty, mut body) = (sending, empty, body);
            let mut first = None;
            if sending == Sending::Chunked && wire::bodiless(&method) {
                // A GET (say) whose body's end has not come yet: most such bodies are empty
                // (an HTTP/2 stream ended by an empty DATA frame), and go without chunks.
                loop {
                    match next_frame(&mut body).await? {
                        None => {
                            wire::without_body(&mut head);
                            (sending, empty) = (Sending::Empty, true);
                        }
                        Some(frame) if frame.data_ref().is_some_and(|d| d.is_empty()) => continue,
                        Some(frame) => first = Some(frame),
                    }
                    break;
                }
            }
            let again = empty && wire::idempotent(&method);
            let body = (sending != Sending::Empty).then_some((first, body));
            let (link, pooled) = match taken {
                Some(link) => (link, true),
                None => (Box::pin(self.connect()).await?, false),
            };
            match exchange(link, &head, body, sending, &method, expects).await {
                Ok((answer, mut link)) => {
                    link.out = head;
                    Ok(self.answer(answer, link))
                }
                Err(failed) if failed.unanswered && pooled && again => {
                    Box::pin(async {
                        let link = self.connect().await?;
                        let (answer, link) = exchange(link, &head, None, sending, &method, false)
                            .await
                            .map_err(|f| f.error)?;
                        Ok(self.answer(answer, link))
                    })
                    .await
                }
                Err(failed) => Err(failed.error),
            }
        }
    }

    /// The answer `head` came on `link`: the response, whose body reads the rest.
    fn answer(self: &Arc<Self>, head: wire::Head, link: Box<Link>) -> Response<AnswerBody> {
        let body = answer::Pooled::new(link, Arc::downgrade(self), head.framing, head.keep_alive);
        let mut response = Response::new(AnswerBody::Pooled(body));
        // The proxy's own version goes to the client, not the upstream's (RFC 9110, 6.2): an
        // HTTP/1.1 client told HTTP/1.0 would drop its connection.
        *response.status_mut() = head.status;
        *response.headers_mut() = head.headers;
        if let Some(reason) = head.reason {
            response.extensions_mut().insert(reason);
        }
        response
    }

    /// The connection given back last that is still open, if any.
    fn take(&self) -> Option<Box<Link>> {
        loop {
            let idle = self
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            let mut link = idle?.link;
            if link.alive() {
                return Some(link);
            }
        }
    }

    /// Gives `link` back, its answer read to its end.
    fn put(self: Arc<Self>, link: Box<Link>) {
        if !link.buf.is_empty() {
            // The upstream sent more than its answer.
            return;
        }
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Idle {
                link,
                since: Instant::now(),
            });
    }

    /// A new connection.
    async fn connect(self: &Arc<Self>) -> Result<Box<Link>, UpstreamError> {
        let stream = tokio::time::timeout(self.connect_timeout, self.open())
            .await
            .unwrap_or_else(|_| {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no connection within {:?}", self.connect_timeout),
                ))
            })
            .map_err(UpstreamError::Connect)?;
        let _ = stream.set_nodelay(true);
        let fd = std::os::fd::AsFd::as_fd(&stream)
            .try_clone_to_owned()
            .map_err(UpstreamError::Connect)?;
        self.reap();
        Ok(Box::new(Link {
            stream,
            buf: BytesMut::with_capacity(READ_BUF),
            io: Arc::new(Socket { fd }),
            out: Vec::new(),
        }))
    }

    /// A TCP connection to the first of the upstream's addresses that takes one.
    async fn open(&self) -> io::Result<TcpStream> {
        let mut last = None;
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await?
            .collect();
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(stream) => return Ok(stream),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} has no address", self.host),
            )
        }))
    }

    /// Starts, once, the task that closes connections idle past the idle timeout (or closed
    /// by the upstream); it ends with the pool.
    fn reap(self: &Arc<Self>) {
        if self
            .reaping
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        let pool = Arc::downgrade(self);
        let every = self.idle_timeout / 2;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(pool) = pool.upgrade() else { return };
                let now = Instant::now();
                pool.idle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .retain_mut(|i| now - i.since < pool.idle_timeout && i.link.alive());
            }
        });
    }
}

/// Sends a request (its head, then its body if it has one) on `link`, and reads its answer's
/// head. If the upstream stops taking the body, its answer (a 413, say) is still read.
async fn exchange(
    mut link: Box<Link>,
    head: &[u8],
    body: Option<(Option<Frame<Bytes>>, WatchedBody)>,
    sending: Sending,
    method: &Method,
    expects: bool,
) -> Result<(wire::Head, Box<Link>), Failed> {
    let written = link.stream.write_all(head).await;
    if let Err(e) = written {
        return Err(Failed::new(UpstreamError::Io(e), true));
    }
    let answer = match body {
        // Boxed apart: most requests have no body, and their future stays small.
        Some(body) if expects => Box::pin(link.send_body_when_asked(body, sending, method)).await?,
        Some(body) => Box::pin(link.send_body_and_read_head(body, sending, method)).await?,
        None => link.read_head(method).await?,
    };
    Ok((answer, link))
}

impl fmt::Debug for Http1Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Http1Pool")
            .field("host", &self.host)
            .field("port", &self.port)
            .finish()
    }
}
