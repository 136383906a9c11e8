//! The proxy's HTTP/2 client to one upstream (`upstream_http2`, over plain TCP or TLS): one
//! connection whose streams every request shares, made again once it has closed.
//!
//! Each request's `:authority` is its own target's authority, whatever the connection's: the
//! connection always goes to the upstream, by the connector given the upstream's URI. So a
//! route with `preserve_host` sends the client's host as `:authority` (RFC 9113, 8.3.1: an
//! intermediary builds it from the original request, and a `Host` beside it must not differ)
//! on the same connection as any other request. hyper-util's pooled client could not: it
//! connects to each request's authority, with a pool for each.

use std::error::Error as StdError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use hyper::body::Incoming;
use hyper::client::conn::http2::{Builder, SendRequest};
use hyper::{Request, Response, Uri};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_service::Service;

use super::{UpstreamError, WatchedBody};

type BoxError = Box<dyn StdError + Send + Sync>;

/// The HTTP/2 connection to one upstream, made by `C` (TCP, or TCP and TLS).
pub(crate) struct Http2Upstream<C> {
    /// The upstream's `scheme://authority/`, what the connector is given.
    target: Uri,
    connector: C,
    builder: Builder<TokioExecutor>,
    /// The connection's sender, once made and until it closes.
    current: Mutex<Option<SendRequest<WatchedBody>>>,
    /// One connection is made at a time; a request that waited for another's attempt shares
    /// its failure rather than trying again on its own (an upstream that takes no connection
    /// would hold each waiter for a connect timeout, one after the other).
    connecting: tokio::sync::Mutex<Option<Arc<BoxError>>>,
    /// Connection attempts finished, for a waiter to tell whether one ended while it waited.
    attempts: AtomicU64,
}

impl<C> Http2Upstream<C>
where
    C: Service<Uri> + Clone + Send + Sync + 'static,
    C::Response: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    C::Future: Send,
    C::Error: Into<BoxError>,
{
    /// A client of the upstream at `target` (`scheme://authority`), connected by `connector`.
    pub(crate) fn new(target: Uri, connector: C) -> Http2Upstream<C> {
        let mut builder = Builder::new(TokioExecutor::new());
        builder.timer(TokioTimer::new());
        Http2Upstream {
            target,
            connector,
            builder,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(None),
            attempts: AtomicU64::new(0),
        }
    }

    /// Sends `request` (an absolute URI: its authority is the request's `:authority`) on the
    /// connection, made first if there is none. A request the connection closed on before it
    /// was sent goes once more, on a new connection.
    pub(crate) async fn request(
        &self,
        mut request: Request<WatchedBody>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let mut again = true;
        loop {
            let mut sender = self.sender().await?;
            match sender.try_send_request(request).await {
                Ok(response) => return Ok(response),
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) if again => {
                        again = false;
                        self.forget(&sender);
                        request = unsent;
                    }
                    _ => return Err(UpstreamError::Http2(failed.into_error())),
                },
            }
        }
    }

    /// The open connection's sender, if there is one.
    fn open(&self) -> Option<SendRequest<WatchedBody>> {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current.as_ref().filter(|s| !s.is_closed()).cloned()
    }

    /// Forgets the connection of `sender`, which would not take a request.
    fn forget(&self, sender: &SendRequest<WatchedBody>) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current
            .as_ref()
            .is_some_and(|c| c.is_closed() || sender.is_closed())
        {
            *current = None;
        }
    }

    /// The connection's sender: the open one, or a new connection's.
    async fn sender(&self) -> Result<SendRequest<WatchedBody>, UpstreamError> {
        if let Some(sender) = self.open() {
            return Ok(sender);
        }
        let seen = self.attempts.load(Ordering::Acquire);
        let mut failed = self.connecting.lock().await;
        if let Some(sender) = self.open() {
            return Ok(sender);
        }
        if let Some(error) = failed.as_ref() {
            if self.attempts.load(Ordering::Acquire) != seen {
                // The attempt this request waited for failed: so does the request.
                return Err(UpstreamError::Connecting(error.clone()));
            }
        }
        let connected = self.connect().await;
        self.attempts.fetch_add(1, Ordering::AcqRel);
        match connected {
            Ok(sender) => {
                *failed = None;
                *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender.clone());
                Ok(sender)
            }
            Err(error) => {
                let error = Arc::new(error);
                *failed = Some(error.clone());
                Err(UpstreamError::Connecting(error))
            }
        }
    }

    /// A new connection: the connector's, then the HTTP/2 handshake; its task runs on the
    /// runtime until the connection ends.
    async fn connect(&self) -> Result<SendRequest<WatchedBody>, BoxError> {
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(Into::into)?;
        let io = connector
            .call(self.target.clone())
            .await
            .map_err(Into::into)?;
        let (mut sender, connection) = self.builder.handshake(io).await?;
        tokio::spawn(async move {
            // A connection's failure is the failure of the requests on it, told to them.
            let _ = connection.await;
        });
        sender.ready().await?;
        Ok(sender)
    }
}
