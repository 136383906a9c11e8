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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::client::conn::http2::{Builder, SendRequest};
use hyper::{Request, Response, Uri};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::sync::Notify;
use tokio::time::Instant;
use tower_service::Service;

use super::replay::{Replay, Replayable};
use super::{UpstreamError, WatchedBody};

type BoxError = Box<dyn StdError + Send + Sync>;

/// The HTTP/2 connection to one upstream, made by `C` (TCP, or TCP and TLS), for requests
/// with bodies `B`.
pub(crate) struct Http2Upstream<C, B = WatchedBody> {
    /// The upstream's `scheme://authority/`, what the connector is given.
    target: Uri,
    connector: C,
    builder: Builder<TokioExecutor>,
    /// The connection, once made and until it closes or is forgotten.
    current: Mutex<Option<Open<B>>>,
    /// A connection no request took for this long is not used again (a middlebox may have
    /// dropped it without a word); it closes once the requests still on it end.
    idle: Duration,
    /// One connection is made at a time; a request that waited for another's attempt shares
    /// its failure rather than trying again on its own (an upstream that takes no connection
    /// would hold each waiter for a connect timeout, one after the other).
    connecting: tokio::sync::Mutex<Option<Arc<BoxError>>>,
    /// Connection attempts finished, for a waiter to tell whether one ended while it waited.
    attempts: AtomicU64,
}

/// The connection requests go on.
struct Open<B> {
    sender: SendRequest<Replayable<B>>,
    /// When a request last took it.
    used: Instant,
    /// Which connection attempt made it.
    number: u64,
    /// Told when it has closed.
    ended: Arc<Ended>,
}

/// Whether a connection has closed (its socket let go), and who waits for it to.
#[derive(Default)]
struct Ended {
    ended: AtomicBool,
    told: Notify,
}

impl Ended {
    fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.told.notify_waiters();
    }

    /// Returns `LOST_AFTER` after the connection closed.
    async fn lost(&self) {
        let told = self.told.notified();
        tokio::pin!(told);
        told.as_mut().enable();
        if !self.ended.load(Ordering::Acquire) {
            told.await;
        }
        tokio::time::sleep(LOST_AFTER).await;
    }
}

/// How long after its connection closed (its socket let go by hyper's client: every stream on
/// it is over) a request hyper's client has not answered is taken as lost: the close tells
/// every request it held at once. One in about 300,000 requests through an upstream that
/// closes its connection every 100 requests was never told (hyper 1.12, h2 0.4.20: the
/// connection's dispatch task ended, its sender closed, the request's answer never came) and
/// waited for its call timeout. (The dispatch task's end is not the connection's: at a
/// graceful GOAWAY it ends while the connection still serves the streams the upstream took.)
const LOST_AFTER: Duration = Duration::from_millis(500);

/// A connection's socket, which says the connection closed when hyper lets it go.
struct Closing<T> {
    io: T,
    ended: Arc<Ended>,
}

impl<T> Drop for Closing<T> {
    fn drop(&mut self) {
        self.ended.end();
    }
}

impl<T: hyper::rt::Read + Unpin> hyper::rt::Read for Closing<T> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: hyper::rt::Write + Unpin> hyper::rt::Write for Closing<T> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

/// The body of a request to send again: none for a request without one (nothing to wait for
/// from hyper), else what hyper gives back of the last sending ([`Replay::take`]).
async fn again<B>(bodiless: bool, replay: &Arc<Replay<B>>) -> Option<Replayable<B>> {
    if bodiless {
        Some(Replayable::ended())
    } else {
        replay.take().await
    }
}

/// A connection's sender, its number and its end.
type Sender<B> = (SendRequest<Replayable<B>>, u64, Arc<Ended>);

/// How many times a request goes to the upstream at most (see [`Http2Upstream::request`]).
const MAX_SENDS: usize = 64;

/// Whether a request that failed with `e` may go again: the upstream did not process it (its
/// stream was refused, `REFUSED_STREAM`, or above the last stream of the upstream's GOAWAY:
/// RFC 9113, 8.7), or, for an `idempotent` method (RFC 9110, 9.2.2), the connection's task
/// ended holding it (hyper's "dispatch gone", a user error without the body's failure in
/// it): its stream may have been opened, so the upstream may have it, and only a request
/// that may be repeated goes again then. (A request hyper never took is given back instead.)
fn may_go_again(e: &hyper::Error, idempotent: bool) -> bool {
    let mut source = e.source();
    let mut from_body = false;
    while let Some(s) = source {
        if let Some(h2) = s.downcast_ref::<h2::Error>() {
            return h2.is_remote()
                && (h2.is_go_away() || h2.reason() == Some(h2::Reason::REFUSED_STREAM));
        }
        from_body |= s.is::<UpstreamError>();
        source = s.source();
    }
    idempotent && e.is_user() && !from_body
}

impl<C, B> Http2Upstream<C, B>
where
    C: Service<Uri> + Clone + Send + Sync + 'static,
    C::Response: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    C::Future: Send,
    C::Error: Into<BoxError>,
    B: hyper::body::Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<BoxError>,
{
    /// A client of the upstream at `target` (`scheme://authority`), connected by `connector`,
    /// whose connection is not used again after `idle` without a request.
    pub(crate) fn new(target: Uri, connector: C, idle: Duration) -> Http2Upstream<C, B> {
        let mut builder = Builder::new(TokioExecutor::new());
        builder.timer(TokioTimer::new());
        Http2Upstream {
            target,
            connector,
            builder,
            current: Mutex::new(None),
            idle,
            connecting: tokio::sync::Mutex::new(None),
            attempts: AtomicU64::new(0),
        }
    }

    /// Sends `request` (an absolute URI: its authority is the request's `:authority`) on the
    /// connection, made first if there is none. A request the upstream did not process goes
    /// again on a new connection, up to [`MAX_SENDS`] times in all: one the closed connection
    /// did not take, one whose stream the upstream refused (`REFUSED_STREAM`, or above the
    /// last stream of its GOAWAY: RFC 9113, 8.7), and one of an idempotent method that the
    /// connection's task ended holding ([`may_go_again`]), its body sent again from what was
    /// kept of it ([`Replayable`]; a body past [`REPLAY_LIMIT`](super::replay::REPLAY_LIMIT)
    /// gets the upstream's refusal).
    pub(crate) async fn request(
        &self,
        request: Request<B>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let (head, body) = request.into_parts();
        let bodiless = body.is_end_stream();
        let mut body = Replayable::new(body);
        let mut sends = 0;
        loop {
            sends += 1;
            let replay = body.replay();
            let mut request = Request::new(body);
            *request.method_mut() = head.method.clone();
            *request.uri_mut() = head.uri.clone();
            *request.version_mut() = head.version;
            *request.headers_mut() = head.headers.clone();
            let (mut sender, connection, ended) = self.sender().await?;
            let sent = tokio::select! {
                biased;
                sent = sender.try_send_request(request) => sent,
                () = ended.lost() => {
                    // Never to be answered: hyper's client dropped it unsaid. It may have
                    // reached the upstream: only a request that may be repeated goes again,
                    // without a body, or with the body hyper gives back (it may not: it holds
                    // it where it lost the request).
                    self.forget(connection);
                    if sends >= MAX_SENDS || !head.method.is_idempotent() {
                        return Err(UpstreamError::Http2Lost);
                    }
                    body = again(bodiless, &replay)
                        .await
                        .ok_or(UpstreamError::Http2Lost)?;
                    continue;
                }
            };
            let failed = match sent {
                Ok(response) => {
                    // Answered: what is kept of the body will not be sent again.
                    replay.answered();
                    return Ok(response);
                }
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) if sends < MAX_SENDS => {
                        // The connection would not take it: it closed meanwhile.
                        self.forget(connection);
                        body = unsent.into_body();
                        continue;
                    }
                    _ => failed.into_error(),
                },
            };
            if sends >= MAX_SENDS || !may_go_again(&failed, head.method.is_idempotent()) {
                return Err(UpstreamError::Http2(failed));
            }
            // Not processed: the connection goes (it is closing), the request again.
            self.forget(connection);
            match again(bodiless, &replay).await {
                Some(again) => body = again,
                None => return Err(UpstreamError::Http2(failed)),
            }
        }
    }

    /// The open connection's sender, number and end, if there is one that was not left idle
    /// too long.
    fn open(&self) -> Option<Sender<B>> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        match current.as_mut() {
            Some(open) if !open.sender.is_closed() && now - open.used <= self.idle => {
                open.used = now;
                Some((open.sender.clone(), open.number, open.ended.clone()))
            }
            Some(_) => {
                *current = None;
                None
            }
            None => None,
        }
    }

    /// Forgets connection `number`, which would not take a request or refused one: the next
    /// request makes a new one.
    fn forget(&self, number: u64) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|open| open.number == number) {
            *current = None;
        }
    }

    /// The connection's sender, number and end: the open one, or a new connection's.
    async fn sender(&self) -> Result<Sender<B>, UpstreamError> {
        if let Some(open) = self.open() {
            return Ok(open);
        }
        let seen = self.attempts.load(Ordering::Acquire);
        let mut failed = self.connecting.lock().await;
        if let Some(open) = self.open() {
            return Ok(open);
        }
        if let Some(error) = failed.as_ref() {
            if self.attempts.load(Ordering::Acquire) != seen {
                // The attempt this request waited for failed: so does the request.
                return Err(UpstreamError::Connecting(error.clone()));
            }
        }
        let connected = self.connect().await;
        let number = self.attempts.fetch_add(1, Ordering::AcqRel) + 1;
        match connected {
            Ok((sender, ended)) => {
                *failed = None;
                *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(Open {
                    sender: sender.clone(),
                    used: Instant::now(),
                    number,
                    ended: ended.clone(),
                });
                Ok((sender, number, ended))
            }
            Err(error) => {
                let error = Arc::new(error);
                *failed = Some(error.clone());
                Err(UpstreamError::Connecting(error))
            }
        }
    }

    /// A new connection: the connector's, then the HTTP/2 handshake; its task runs on the
    /// runtime until the connection ends. Its [`Ended`] is told when hyper lets its socket go.
    async fn connect(&self) -> Result<(SendRequest<Replayable<B>>, Arc<Ended>), BoxError> {
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(Into::into)?;
        let io = connector
            .call(self.target.clone())
            .await
            .map_err(Into::into)?;
        let ended = Arc::new(Ended::default());
        let io = Closing {
            io,
            ended: ended.clone(),
        };
        let (mut sender, connection) = self.builder.handshake(io).await?;
        tokio::spawn(async move {
            // A connection's failure is the failure of the requests on it, told to them.
            let _ = connection.await;
        });
        sender.ready().await?;
        Ok((sender, ended))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::Full;
    use hyper_util::client::legacy::connect::HttpConnector;
    use std::sync::atomic::AtomicUsize;

    /// An HTTP/2 server on loopback that answers every request with its connection's number.
    async fn numbering_server() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let n = connections.fetch_add(1, Ordering::SeqCst) + 1;
                let service = hyper::service::service_fn(move |_| async move {
                    Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                        n.to_string(),
                    ))))
                });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
                );
            }
        });
        addr
    }

    async fn connection_of(client: &Http2Upstream<HttpConnector, Full<Bytes>>, to: &str) -> String {
        let request = Request::get(format!("http://{to}/"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = client.request(request).await.unwrap();
        let body = http_body_util::BodyExt::collect(answer.into_body()).await;
        String::from_utf8(body.unwrap().to_bytes().to_vec()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_is_lost_only_some_time_after_its_connection_ended() {
        let ended = Arc::new(Ended::default());
        let lost = tokio::spawn({
            let ended = ended.clone();
            async move { ended.lost().await }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!lost.is_finished(), "lost while its connection was open");
        ended.end();
        tokio::time::sleep(LOST_AFTER - Duration::from_millis(1)).await;
        assert!(!lost.is_finished(), "lost before LOST_AFTER");
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(lost.is_finished());
        // Asked after the end, at once the same.
        let at = Instant::now();
        ended.lost().await;
        assert_eq!(at.elapsed(), LOST_AFTER);
    }

    #[tokio::test]
    async fn requests_share_one_connection_until_it_sits_idle_too_long() {
        let addr = numbering_server().await;
        let target: Uri = format!("http://{addr}/").parse().unwrap();
        let client = Http2Upstream::new(target, HttpConnector::new(), Duration::from_millis(300));
        // Whatever authority a request names, it goes on the one connection to the upstream.
        assert_eq!(connection_of(&client, &addr.to_string()).await, "1");
        assert_eq!(connection_of(&client, "records.example").await, "1");
        let shared = futures::future::join_all((0..8).map(|_| connection_of(&client, "a.example")));
        assert!(shared.await.iter().all(|n| n == "1"));
        // Idle past its time, the connection is not used again.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(connection_of(&client, "records.example").await, "2");
        assert_eq!(connection_of(&client, "records.example").await, "2");
    }

    /// An upstream that closes its connection gracefully (a GOAWAY naming the streams it
    /// processes) while a slow request is on it answers that request on the closing
    /// connection: the request is not taken as lost, nor sent again. (hyper's client ends the
    /// connection's dispatch task at the GOAWAY; the connection itself serves on.)
    #[tokio::test]
    async fn a_slow_request_on_a_connection_closing_gracefully_is_answered_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = Arc::new(AtomicUsize::new(0));
        let counted = served.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counted = counted.clone();
                let service = hyper::service::service_fn(move |_| {
                    let counted = counted.clone();
                    async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(LOST_AFTER * 3).await;
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                            "slow",
                        ))))
                    }
                });
                tokio::spawn(async move {
                    let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                    tokio::pin!(connection);
                    // Closes gracefully once its first request is under way.
                    let _ =
                        tokio::time::timeout(Duration::from_millis(100), connection.as_mut()).await;
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                });
            }
        });
        let target: Uri = format!("http://{addr}/").parse().unwrap();
        let client = Http2Upstream::new(target, HttpConnector::new(), Duration::from_secs(90));
        let to = addr.to_string();
        let first = connection_of(&client, &to);
        // Another request after the GOAWAY: it goes on a new connection (and wakes the closing
        // connection's dispatch task, which ends).
        let second = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            connection_of(&client, &to).await
        };
        let (first, second) = tokio::join!(first, second);
        assert_eq!((first.as_str(), second.as_str()), ("slow", "slow"));
        assert_eq!(served.load(Ordering::SeqCst), 2, "a request was sent again");
    }

    /// An upstream that refuses a request's stream unprocessed (`REFUSED_STREAM`) twenty times
    /// in a row, on twenty connections, then answers: the request is answered (it went up to
    /// ten times before, and got the refusal).
    #[tokio::test]
    async fn a_request_refused_twenty_times_unprocessed_is_answered() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let counted = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let Ok(mut connection) = h2::server::handshake(stream).await else {
                        return;
                    };
                    while let Some(Ok((_, mut respond))) = connection.accept().await {
                        if counted.fetch_add(1, Ordering::SeqCst) < 20 {
                            respond.send_reset(h2::Reason::REFUSED_STREAM);
                        } else {
                            let _ = respond.send_response(Response::new(()), true);
                        }
                    }
                });
            }
        });
        let target: Uri = format!("http://{addr}/").parse().unwrap();
        let client: Http2Upstream<HttpConnector, Full<Bytes>> =
            Http2Upstream::new(target, HttpConnector::new(), Duration::from_secs(90));
        let request = Request::get(format!("http://{addr}/"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let answer = client.request(request).await.expect("answered in the end");
        assert_eq!(answer.status(), 200);
        assert_eq!(seen.load(Ordering::SeqCst), 21);
    }

    #[tokio::test]
    async fn requests_that_waited_for_a_failed_attempt_share_its_failure() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let target: Uri = format!("http://{addr}/").parse().unwrap();
        let client: Http2Upstream<HttpConnector, Full<Bytes>> =
            Http2Upstream::new(target, HttpConnector::new(), Duration::from_secs(90));
        let tries = (0..6).map(|_| {
            client.request(
                Request::get(format!("http://{addr}/"))
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            )
        });
        let failed = futures::future::join_all(tries).await;
        assert!(failed.iter().all(|f| matches!(f, Err(e) if e.is_connect())));
        // The first tried and the others waited for it: one attempt in all, or a few if
        // some came after it ended; never one each.
        let attempts = client.attempts.load(Ordering::SeqCst);
        assert!(attempts < 6, "{attempts} attempts for 6 requests");
    }
}
