//! The connections to one plain-HTTP/1.1 upstream: a pool of hyper's `client::conn` senders,
//! taken last-in first-out, each given back when the answer it carried has been read to its
//! end. A request goes out on a connection's sender directly, with its origin-form target, not
//! through a general client's boxed future, pool keys and hand-off task.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::client::conn::TrySendError;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

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

/// A connection: its sender, and its task (aborted to close it at once).
struct Link {
    sender: SendRequest<Incoming>,
    task: tokio::task::AbortHandle,
}

/// A connection waiting for its next request.
struct Idle {
    link: Link,
    since: Instant,
}

/// A connection taken from the pool for one request; given back on drop if the answer was read
/// to its end ([`Checkout::reusable`]), else closed.
pub(crate) struct Checkout {
    pool: Weak<Http1Pool>,
    link: Option<Link>,
    reusable: bool,
}

impl Checkout {
    /// The answer was read to its end: the connection can carry another request.
    pub(crate) fn reusable(&mut self) {
        self.reusable = true;
    }

    /// What closes the connection at once (its task aborted): for a call that ends early while
    /// its answer's body is not being read.
    pub(crate) fn closer(&self) -> Option<tokio::task::AbortHandle> {
        self.link.as_ref().map(|l| l.task.clone())
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if let (true, Some(link), Some(pool)) =
            (self.reusable, self.link.take(), self.pool.upgrade())
        {
            pool.put(link);
        }
    }
}

impl fmt::Debug for Checkout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checkout")
            .field("reusable", &self.reusable)
            .finish()
    }
}

/// How a request's first try went.
enum First {
    Answered(Response<Incoming>),
    Failed(hyper::Error),
    /// It did not go out: the connection had closed.
    Unsent(Request<Incoming>),
}

/// What a request sent on the pool comes back with: the answer's head and the connection it
/// came on.
pub(crate) type Pooled = Result<(Response<Incoming>, Checkout), UpstreamError>;

impl First {
    /// What `try_send_request` came back with.
    fn of(tried: Result<Response<Incoming>, TrySendError<Request<Incoming>>>) -> First {
        match tried {
            Ok(response) => First::Answered(response),
            Err(mut e) => match e.take_message() {
                Some(request) => First::Unsent(request),
                None => First::Failed(e.into_error()),
            },
        }
    }
}

/// Why a request got no answer from the upstream.
#[derive(Debug)]
pub(crate) enum UpstreamError {
    /// No connection could be made (or none within the connect timeout).
    Connect(std::io::Error),
    /// The connection failed, or the request's body did.
    Http(hyper::Error),
    /// From hyper-util's client (HTTP/2 and TLS upstreams).
    Client(hyper_util::client::legacy::Error),
}

impl UpstreamError {
    /// Whether no connection could be made.
    pub(crate) fn is_connect(&self) -> bool {
        match self {
            UpstreamError::Connect(_) => true,
            UpstreamError::Http(_) => false,
            UpstreamError::Client(e) => e.is_connect(),
        }
    }
}

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamError::Connect(_) => f.write_str("tcp connect error"),
            UpstreamError::Http(_) => f.write_str("request failed"),
            UpstreamError::Client(e) => e.fmt(f),
        }
    }
}

impl StdError for UpstreamError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            UpstreamError::Connect(e) => Some(e),
            UpstreamError::Http(e) => Some(e),
            UpstreamError::Client(e) => e.source(),
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

    /// Sends `request` on an idle connection, or on a new one, and returns the answer's head
    /// with the connection it came on.
    ///
    /// A connection given back is ready once its last answer's end has been read; a new one
    /// once its handshake is done. One that closed while idle, or that closes before the
    /// request goes out on it, is replaced by a new one, once. An idle connection is handed
    /// the request at once, and what a new connection takes is boxed apart: the future of the
    /// common case holds hyper's answer future alone.
    pub(crate) fn request(
        self: &Arc<Self>,
        request: Request<Incoming>,
    ) -> impl Future<Output = Pooled> + Send + '_ {
        let taken = match self.take() {
            Some(mut link) => {
                let answer = link.sender.try_send_request(request);
                Ok((link, answer))
            }
            None => Err(request),
        };
        async move {
            let (link, answer) = match taken {
                Ok(taken) => taken,
                Err(request) => return Box::pin(self.on_new(request)).await,
            };
            match First::of(answer.await) {
                First::Answered(response) => Ok((response, self.checkout(link))),
                First::Failed(e) => Err(UpstreamError::Http(e)),
                First::Unsent(request) => Box::pin(self.again(request)).await,
            }
        }
    }

    /// [`Http1Pool::request`] on a new connection.
    async fn on_new(self: &Arc<Self>, request: Request<Incoming>) -> Pooled {
        let mut link = self.connect().await?;
        let first = match link.sender.ready().await {
            Ok(()) => First::of(link.sender.try_send_request(request).await),
            Err(_) => First::Unsent(request),
        };
        match first {
            First::Answered(response) => Ok((response, self.checkout(link))),
            First::Failed(e) => Err(UpstreamError::Http(e)),
            First::Unsent(request) => self.again(request).await,
        }
    }

    /// A request that did not go out, sent on a new connection.
    async fn again(self: &Arc<Self>, request: Request<Incoming>) -> Pooled {
        let mut link = self.connect().await?;
        link.sender.ready().await.map_err(UpstreamError::Http)?;
        let response = link
            .sender
            .send_request(request)
            .await
            .map_err(UpstreamError::Http)?;
        Ok((response, self.checkout(link)))
    }

    /// The connection `link`, to be given back to the pool once its answer is read.
    fn checkout(self: &Arc<Self>, link: Link) -> Checkout {
        Checkout {
            pool: Arc::downgrade(self),
            link: Some(link),
            reusable: false,
        }
    }

    /// The connection given back last that can take a request now, if any. One whose last
    /// request is still being sent (its answer came first, and the request's body still
    /// streams) waits in the pool until it can; closed ones wait for the reaper.
    fn take(&self) -> Option<Link> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let ready = idle.iter().rposition(|i| i.link.sender.is_ready())?;
        Some(idle.remove(ready).link)
    }

    fn put(self: Arc<Self>, link: Link) {
        if link.sender.is_closed() {
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

    /// A new connection, its task spawned.
    async fn connect(self: &Arc<Self>) -> Result<Link, UpstreamError> {
        let stream = tokio::time::timeout(self.connect_timeout, self.open())
            .await
            .unwrap_or_else(|_| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {:?}", self.connect_timeout),
                ))
            })
            .map_err(UpstreamError::Connect)?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(UpstreamError::Http)?;
        let task = tokio::spawn(async move {
            // Its errors reach the request it carried.
            let _ = connection.await;
        })
        .abort_handle();
        self.reap();
        Ok(Link { sender, task })
    }

    /// A TCP connection to the first of the upstream's addresses that takes one.
    async fn open(&self) -> std::io::Result<TcpStream> {
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
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} has no address", self.host),
            )
        }))
    }

    /// Starts, once, the task that closes connections idle past the idle timeout; it ends with
    /// the pool.
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
                    .retain(|i| !i.link.sender.is_closed() && now - i.since < pool.idle_timeout);
            }
        });
    }
}

impl fmt::Debug for Http1Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Http1Pool")
            .field("host", &self.host)
            .field("port", &self.port)
            .finish()
    }
}
