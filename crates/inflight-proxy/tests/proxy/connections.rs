//! The limits on client connections (`[proxy]` `first_byte_timeout`, `idle_timeout`,
//! `http2_keepalive_interval` and `_timeout`, `max_connections`) and the drain's cut, each
//! against real sockets on 127.0.0.1, each counted in `/metrics`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{budget, client, get, metrics, proxy, until, within, Upstream};

/// How many connections of listener `r` the proxy closed for `reason`.
fn closed(proxy: &inflight_proxy::Proxy, reason: &str) -> f64 {
    metrics(proxy)
        .get(&format!(
            "inflight_proxy_connections_closed_total{{listener=r,reason={reason}}}"
        ))
        .copied()
        .unwrap_or(0.0)
}

/// Budget `r`'s calls in flight, once it has any figure.
fn in_flight(proxy: &inflight_proxy::Proxy) -> Option<f64> {
    metrics(proxy)
        .get("inflight_budget_in_flight{budget=r}")
        .copied()
}

/// Reads until the proxy closes `stream`; how long that took. Panics after 10 s.
async fn closed_within(stream: &mut TcpStream) -> Duration {
    let start = Instant::now();
    let mut sink = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut sink)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return start.elapsed(),
            Ok(Ok(_)) => continue,
            Err(_) => panic!("the proxy left the connection open for 10 s"),
        }
    }
}

fn file(upstream: &str, proxy_keys: &str, extra: &str) -> String {
    format!(
        "[proxy]\n{proxy_keys}\n\n{}",
        budget("r", upstream, &format!("max_concurrent = 4\n{extra}"))
    )
}

#[tokio::test]
async fn a_connection_that_sends_nothing_or_stalls_in_the_preface_is_closed_at_first_byte_timeout()
{
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&file(&upstream.url(), "first_byte_timeout = \"300ms\"", "")).await;
    let addr = proxy.local_addr("r").unwrap();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let waited = closed_within(&mut silent).await;
    assert!(
        waited >= Duration::from_millis(250),
        "closed after {waited:?}"
    );
    // A part of the HTTP/2 preface, then nothing: still no protocol, still closed.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled.write_all(b"PRI * HTTP/2").await.unwrap();
    closed_within(&mut stalled).await;
    assert_eq!(closed(&proxy, "first_byte_timeout"), 2.0);
    // A normal client is served all along.
    assert_eq!(get(&client(), addr, "/").await.0, 200);
}

#[tokio::test]
async fn an_idle_or_slow_http1_client_is_closed_at_idle_timeout() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&file(&upstream.url(), "idle_timeout = \"300ms\"", "")).await;
    let addr = proxy.local_addr("r").unwrap();
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0u8; 12];
    within(idle.read_exact(&mut answer)).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200");
    let waited = closed_within(&mut idle).await;
    assert!(
        waited >= Duration::from_millis(200),
        "closed after {waited:?}"
    );
    // Headers that never end are cut at the same deadline.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    closed_within(&mut slow).await;
    until("both counted", || closed(&proxy, "idle_timeout") == 2.0).await;
}

#[tokio::test]
async fn an_idle_http2_client_is_closed_at_idle_timeout_but_not_while_a_stream_is_open() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&file(&upstream.url(), "idle_timeout = \"300ms\"", "")).await;
    let addr = proxy.local_addr("r").unwrap();
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let ended = tokio::spawn(connection);
    // A stream open for twice the idle timeout is not cut.
    let request = hyper::Request::get(format!("http://{addr}/sleep/600"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = within(sender.send_request(request)).await.unwrap();
    assert_eq!(response.status(), 200);
    within(response.into_body().collect()).await.unwrap();
    assert_eq!(closed(&proxy, "idle_timeout"), 0.0);
    // Then, with no stream open, the connection ends.
    let start = Instant::now();
    within(ended).await.unwrap().ok();
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert_eq!(closed(&proxy, "idle_timeout"), 1.0);
}

#[tokio::test]
async fn an_http2_client_that_answers_no_ping_is_closed() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&file(
        &upstream.url(),
        "http2_keepalive_interval = \"100ms\"\nhttp2_keepalive_timeout = \"200ms\"",
        "",
    ))
    .await;
    let addr = proxy.local_addr("r").unwrap();
    // The HTTP/2 preface and an empty SETTINGS frame, then silence: no ACK, no PING answered.
    let mut mute = TcpStream::connect(addr).await.unwrap();
    mute.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    let waited = closed_within(&mut mute).await;
    assert!(
        waited >= Duration::from_millis(250),
        "closed after {waited:?}"
    );
    until("counted", || closed(&proxy, "keepalive_timeout") == 1.0).await;
    assert_eq!(closed(&proxy, "idle_timeout"), 0.0);
}

#[tokio::test]
async fn a_full_listener_closes_the_connection_idle_longest_and_serves_a_new_client() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&file(
        &upstream.url(),
        "max_connections = 3",
        "permit_timeout = \"2s\"",
    ))
    .await;
    let addr = proxy.local_addr("r").unwrap();
    let mut idle = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = [0u8; 12];
        within(s.read_exact(&mut answer)).await.unwrap();
        idle.push(s);
    }
    until("3 open", || {
        metrics(&proxy).get("inflight_proxy_connections{listener=r}") == Some(&3.0)
    })
    .await;
    // A fourth client is served at once, well within its permit deadline.
    let start = Instant::now();
    assert_eq!(get(&client(), addr, "/").await.0, 200);
    assert!(start.elapsed() < Duration::from_secs(2));
    // The first of the idle ones made room.
    closed_within(&mut idle[0]).await;
    assert_eq!(closed(&proxy, "max_connections"), 1.0);
}

#[tokio::test]
async fn the_drain_cuts_what_still_runs_when_its_time_is_over() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&file(&upstream.url(), "drain = \"300ms\"", "")).await;
    let addr = proxy.local_addr("r").unwrap();
    let mut hung = TcpStream::connect(addr).await.unwrap();
    hung.write_all(b"GET /sleep/30000 HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    until("in flight", || in_flight(&proxy) == Some(1.0)).await;
    let drained = within(proxy.drain()).await;
    assert!(!drained.in_time);
    // The client sees its connection end soon after, not after the upstream's 30 s.
    let waited = closed_within(&mut hung).await;
    assert!(waited < Duration::from_secs(5), "cut after {waited:?}");
}

/// How many connections of listener `r` are parked.
fn parked(proxy: &inflight_proxy::Proxy) -> f64 {
    metrics(proxy)
        .get("inflight_proxy_connections_parked{listener=r}")
        .copied()
        .unwrap_or(0.0)
}

/// Reads one HTTP/1.1 answer with a `content-length` from `stream`: its status and body.
async fn answer(stream: &mut TcpStream, pending: &mut Vec<u8>) -> (u16, String) {
    let head_end = loop {
        if let Some(i) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = within(stream.read(&mut chunk)).await.unwrap();
        assert!(n > 0, "the proxy closed the connection");
        pending.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&pending[..head_end]).to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap();
    while pending.len() < head_end + length {
        let mut chunk = [0u8; 4096];
        let n = within(stream.read(&mut chunk)).await.unwrap();
        assert!(n > 0, "the proxy closed the connection");
        pending.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&pending[head_end..head_end + length]).into_owned();
    pending.drain(..head_end + length);
    (status, body)
}

#[tokio::test]
async fn an_idle_http1_connection_is_parked_and_serves_its_next_requests_as_before() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&file(&upstream.url(), "idle_timeout = \"30s\"", "")).await;
    let addr = proxy.local_addr("r").unwrap();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut pending = Vec::new();
    stream
        .write_all(b"GET /one HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        answer(&mut stream, &mut pending).await,
        (200, "GET /one".into())
    );
    until("the idle connection to be parked", || parked(&proxy) == 1.0).await;
    // Parked, it is served again at its next request, on the same connection.
    stream
        .write_all(b"GET /two HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        answer(&mut stream, &mut pending).await,
        (200, "GET /two".into())
    );
    until("parked again", || parked(&proxy) == 1.0).await;
    // Two requests in one write (pipelined): both answered, in order.
    stream
        .write_all(b"GET /three HTTP/1.1\r\nHost: x\r\n\r\nGET /four HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        answer(&mut stream, &mut pending).await,
        (200, "GET /three".into())
    );
    assert_eq!(
        answer(&mut stream, &mut pending).await,
        (200, "GET /four".into())
    );
    until("parked once more", || parked(&proxy) == 1.0).await;
    // A parked connection is closed at a drain, and counted no more.
    drop(stream);
    until("the closed connection no longer parked", || {
        parked(&proxy) == 0.0
    })
    .await;
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /five HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut pending = Vec::new();
    assert_eq!(answer(&mut idle, &mut pending).await.0, 200);
    until("parked", || parked(&proxy) == 1.0).await;
    let drained = within(proxy.drain()).await;
    assert!(drained.in_time);
    closed_within(&mut idle).await;
}

/// A connection that answered two requests or more is a client in steady use: it stays in hyper
/// for 100 ms of quiet, not 10 ms, before it is parked (a bound from below, which a slow
/// machine cannot break).
#[tokio::test]
async fn a_connection_in_steady_use_is_parked_only_after_a_longer_quiet() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&file(&upstream.url(), "idle_timeout = \"30s\"", "")).await;
    let addr = proxy.local_addr("r").unwrap();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut pending = Vec::new();
    // Two requests in one write: one hyper connection answers both, whatever the machine's
    // pauses. Timed from before the write: the proxy's quiet starts after its last answer.
    let quiet = Instant::now();
    stream
        .write_all(b"GET /one HTTP/1.1\r\nHost: x\r\n\r\nGET /two HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(answer(&mut stream, &mut pending).await.0, 200);
    }
    until("the connection to be parked", || parked(&proxy) == 1.0).await;
    let waited = quiet.elapsed();
    // 100 ms, counted by the proxy in whole milliseconds.
    assert!(
        waited >= Duration::from_millis(95),
        "parked after {waited:?}"
    );
    // Served again, it is parked after its one request as any new connection is.
    stream
        .write_all(b"GET /three HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(answer(&mut stream, &mut pending).await.0, 200);
    until("parked again", || parked(&proxy) == 1.0).await;
}

/// An answer larger than the socket's buffers, read slowly: hyper still holds its last bytes
/// when the answer's call has ended, and the connection must not be parked (which drops them)
/// before they are out.
#[tokio::test]
async fn a_large_answer_read_slowly_arrives_whole_before_its_connection_is_parked() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&file(&upstream.url(), "idle_timeout = \"30s\"", "")).await;
    let addr = proxy.local_addr("r").unwrap();
    let body = upstream.next_stream();
    let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
    // More than loopback's socket buffers hold (several MiB each way).
    const CHUNKS: usize = 256; // 16 MiB
    let feeder = tokio::spawn(async move {
        for _ in 0..CHUNKS {
            body.send(chunk.clone()).await.unwrap();
        }
    });
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // Not read at first, then slowly: the upstream's body ends while hyper still queues bytes
    // the socket cannot take.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut received = Vec::new();
    let mut buf = vec![0u8; 256 * 1024];
    let started = Instant::now();
    while !received.ends_with(b"\r\n0\r\n\r\n") {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the answer stalled"
        );
        let n = within(stream.read(&mut buf)).await.unwrap();
        assert!(
            n > 0,
            "the proxy closed the connection before the answer's end"
        );
        received.extend_from_slice(&buf[..n]);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    feeder.await.unwrap();
    let head_end = received.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let x = received[head_end..].iter().filter(|b| **b == b'x').count();
    assert_eq!(x, CHUNKS * 64 * 1024, "bytes of the answer were lost");
    // Then, idle, the connection is parked, and serves its next request.
    until("parked", || parked(&proxy) == 1.0).await;
    stream
        .write_all(b"GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut pending = Vec::new();
    assert_eq!(
        answer(&mut stream, &mut pending).await,
        (200, "GET /after".into())
    );
}

/// A client that asks and then takes no byte of the answer: with no call timeout, only the
/// connection's own limit ends it. At `idle_timeout` without a byte taken it is cut, and with
/// it the call: its permit goes back and the upstream stops serving it.
#[tokio::test]
async fn an_http1_client_that_stops_reading_is_cut_at_idle_timeout() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&file(&upstream.url(), "idle_timeout = \"500ms\"", "")).await;
    let addr = proxy.local_addr("r").unwrap();
    let feeder = upstream.flood_next_stream();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    until("the call to start", || in_flight(&proxy) == Some(1.0)).await;
    until("the connection cut", || {
        closed(&proxy, "send_timeout") == 1.0
    })
    .await;
    until("the permit back", || in_flight(&proxy) == Some(0.0)).await;
    let body = within(feeder).await.unwrap();
    assert!(body.is_closed(), "the upstream still serves the call");
    assert_eq!(closed(&proxy, "idle_timeout"), 0.0);
    // The client reads what was sent, then the connection's end.
    let waited = closed_within(&mut stream).await;
    assert!(waited < Duration::from_secs(10));
}

/// How many HTTP/2 streams of listener `r` the proxy cut for `reason`.
fn streams_cut(proxy: &inflight_proxy::Proxy, reason: &str) -> f64 {
    metrics(proxy)
        .get(&format!(
            "inflight_proxy_streams_cut_total{{listener=r,reason={reason}}}"
        ))
        .copied()
        .unwrap_or(0.0)
}

/// An HTTP/2 connection to `addr` whose streams' windows are HTTP/2's smallest (64 KiB), so a
/// stream not read fills soon; the task that drives it.
async fn h2_small_window(
    addr: std::net::SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(65_535)
        .handshake::<_, Empty<Bytes>>(TokioIo::new(tcp))
        .await
        .unwrap();
    (sender, tokio::spawn(connection))
}

fn get_request(addr: std::net::SocketAddr, path: &str) -> hyper::Request<Empty<Bytes>> {
    hyper::Request::get(format!("http://{addr}{path}"))
        .body(Empty::new())
        .unwrap()
}

/// An HTTP/2 client that asks on one stream and then takes no byte of its answer (its stream's
/// window spent): with no call timeout, at `idle_timeout` without a byte taken the stream's
/// call ends: its permit goes back and the upstream stops serving it. The connection's other
/// streams are served; once only such streams are left, it is closed.
#[tokio::test]
async fn an_http2_client_that_stops_reading_a_stream_loses_its_call_at_idle_timeout() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&file(&upstream.url(), "idle_timeout = \"500ms\"", "")).await;
    let addr = proxy.local_addr("r").unwrap();
    let feeder = upstream.flood_next_stream();
    let (mut sender, connection) = h2_small_window(addr).await;
    let request = |path: &str| get_request(addr, path);
    // The answer's head, and then nothing taken.
    let stalled = within(sender.send_request(request("/stream")))
        .await
        .unwrap();
    assert_eq!(stalled.status(), 200);
    until("the call to start", || in_flight(&proxy) == Some(1.0)).await;
    until("the stream's call cut", || {
        streams_cut(&proxy, "send_timeout") == 1.0
    })
    .await;
    until("the permit back", || in_flight(&proxy) == Some(0.0)).await;
    let body = within(feeder).await.unwrap();
    assert!(body.is_closed(), "the upstream still serves the call");
    assert_eq!(
        metrics(&proxy)["inflight_budget_calls_total{budget=r,outcome=cancelled}"],
        1.0
    );
    // Another stream of the same connection is served meanwhile.
    let other = within(sender.send_request(request("/other")))
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
    let other = within(other.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(other, "GET /other");
    // Then only the stalled stream is left: the connection is closed.
    until("the connection closed", || {
        closed(&proxy, "send_timeout") == 1.0
    })
    .await;
    within(connection).await.unwrap().ok();
    assert_eq!(closed(&proxy, "idle_timeout"), 0.0);
    drop(stalled);
}

/// The pooled HTTP/1.1 connection of a stream cut for its client is closed, not half-closed
/// for as long as the stream stays open: an upstream that only writes (and would block for
/// ever on a socket nobody reads) sees its writes fail, and the next calls, as many as the
/// budget allows, are served.
#[tokio::test]
async fn a_stream_cut_for_its_client_closes_its_upstream_connection() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    // An upstream that answers each request with an endless body, and counts the connections
    // whose writes failed.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = listener.local_addr().unwrap();
    let failed = Arc::new(AtomicUsize::new(0));
    let counted = failed.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(8) {
            let Ok(mut conn) = conn else { return };
            let counted = counted.clone();
            std::thread::spawn(move || {
                let mut head = [0u8; 4096];
                let _ = conn.read(&mut head);
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000000000\r\n\r\n");
                let chunk = vec![b'x'; 64 * 1024];
                for _ in 0..16_000 {
                    if conn.write_all(&chunk).is_err() {
                        counted.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                }
            });
        }
    });
    let (proxy, _) = proxy(&format!(
        "[proxy]\nidle_timeout = \"500ms\"\n\n{}",
        budget("r", &format!("http://{upstream}"), "max_concurrent = 5")
    ))
    .await;
    let addr = proxy.local_addr("r").unwrap();
    let (mut sender, _connection) = h2_small_window(addr).await;
    // Four streams whose answers are never read, and one read steadily, which keeps the
    // connection open.
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let answer = within(sender.send_request(get_request(addr, "/endless")))
            .await
            .unwrap();
        stalled.push(answer);
    }
    let mut read = within(sender.send_request(get_request(addr, "/endless")))
        .await
        .unwrap();
    let reader = tokio::spawn(async move {
        while let Some(Ok(_)) = read.body_mut().frame().await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    until("the four calls cut", || {
        streams_cut(&proxy, "send_timeout") == 4.0
    })
    .await;
    until(
        "the upstream's writes failed on the four connections",
        || failed.load(Ordering::SeqCst) == 4,
    )
    .await;
    assert_eq!(in_flight(&proxy), Some(1.0), "the stream read goes on");
    assert_eq!(closed(&proxy, "send_timeout"), 0.0);
    reader.abort();
    drop(stalled);
}

/// An HTTP/2 client that reads slowly but steadily is not cut, nor is one whose upstream pauses
/// between frames for longer than `idle_timeout` (a stream of events): only a stream waiting
/// for its client's room counts.
#[tokio::test]
async fn an_http2_client_that_reads_slowly_or_waits_on_a_slow_upstream_is_not_cut() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&file(&upstream.url(), "idle_timeout = \"500ms\"", "")).await;
    let addr = proxy.local_addr("r").unwrap();
    let (mut sender, _connection) = h2_small_window(addr).await;
    let stream = || get_request(addr, "/stream");
    // A slow upstream: two frames 1.5 s apart.
    let events = upstream.next_stream();
    events.send(Bytes::from("first ")).await.unwrap();
    let mut response = within(sender.send_request(stream())).await.unwrap();
    let first = within(response.body_mut().frame()).await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), "first ");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    events.send(Bytes::from("second")).await.unwrap();
    drop(events);
    let rest = within(response.into_body().collect()).await.unwrap();
    assert_eq!(rest.to_bytes(), "second");
    // A slow reader: 16 KiB every 250 ms (64 KiB a second) for 3 s, of a flood whose frames
    // are 64 KiB: one takes the reader a second, twice the idle timeout, and only the pieces
    // the proxy hands hyper are asked for in time.
    let feeder = upstream.flood_next_stream();
    let mut response = within(sender.send_request(stream())).await.unwrap();
    let start = Instant::now();
    let mut read = 0;
    while start.elapsed() < Duration::from_secs(3) {
        let frame = within(response.body_mut().frame()).await;
        let data = frame
            .unwrap_or_else(|| panic!("ended after {read} bytes"))
            .unwrap_or_else(|e| panic!("cut after {read} bytes, {:?}: {e}", start.elapsed()))
            .into_data()
            .unwrap();
        read += data.len();
        tokio::time::sleep(Duration::from_millis(250 * data.len() as u64 / 16_384)).await;
    }
    assert_eq!(streams_cut(&proxy, "send_timeout"), 0.0);
    assert_eq!(closed(&proxy, "send_timeout"), 0.0);
    assert_eq!(in_flight(&proxy), Some(1.0));
    feeder.abort();
}

/// A client that reads an answer slowly but steadily is not cut, though its socket (whose send
/// buffer the kernel grows to megabytes on loopback) takes no write for longer than
/// `idle_timeout`: what it reads counts.
#[tokio::test]
async fn an_http1_client_that_reads_slowly_is_not_cut() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&file(&upstream.url(), "idle_timeout = \"500ms\"", "")).await;
    let addr = proxy.local_addr("r").unwrap();
    let feeder = upstream.flood_next_stream();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // 16 KiB every 50 ms for 3 s (320 KiB/s): far less than a third of the socket's buffer
    // within each idle_timeout.
    let mut buf = vec![0u8; 16 * 1024];
    let mut read = 0;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        let n = within(stream.read(&mut buf)).await.unwrap();
        assert!(n > 0, "cut after {read} bytes, {:?}", start.elapsed());
        read += n;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(closed(&proxy, "send_timeout"), 0.0);
    assert_eq!(in_flight(&proxy), Some(1.0));
    feeder.abort();
}
