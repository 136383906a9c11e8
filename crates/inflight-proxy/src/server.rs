//! The accept loop: HTTP/1.1 and HTTP/2 (prior knowledge, told apart by the connection's first
//! bytes) served by hyper until told to stop, then drained.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::body::ProxyBody;
use crate::Log;

/// How long a client may take to send a request's headers: a slow or silent client must not
/// hold a connection open for ever.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// After an accept error (out of file descriptors), how long to wait before accepting again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `listener` with `handle` until `stop` turns true; then stops accepting, lets each
/// connection finish the request it is serving, and returns when all have closed.
///
/// Malformed requests are answered by hyper itself: 400, or 431 for headers too large.
pub(crate) fn spawn<F, Fut>(
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
    log: Log,
    handle: F,
) -> JoinHandle<()>
where
    F: Fn(Request<Incoming>, SocketAddr) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<ProxyBody>> + Send + 'static,
{
    tokio::spawn(async move {
        let graceful = GracefulShutdown::new();
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT);
        builder.http2().timer(TokioTimer::new());
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stop.wait_for(|stop| *stop) => break,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    log(&format!("cannot accept a connection: {e}"));
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let handle = handle.clone();
            let service = service_fn(move |request| {
                let response = handle(request, peer);
                async move { Ok::<_, Infallible>(response.await) }
            });
            let watcher = graceful.watcher();
            let builder = builder.clone();
            tokio::spawn(async move {
                let connection = builder.serve_connection(TokioIo::new(stream), service);
                // A client that goes away, or sends garbage, ends its own connection only.
                let _ = watcher.watch(connection).await;
            });
        }
        drop(listener);
        graceful.shutdown().await;
    })
}
