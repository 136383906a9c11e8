//! Cases of hyper's own HTTP/1 server test suite (hyper 1.x `tests/server.rs`) that matter for
//! the proxy's client side, ported end to end: a raw TCP client on 127.0.0.1 speaks to
//! `inflight proxy`, which forwards to a real upstream. Each test says what a correct proxy must
//! do (RFC 9112 / RFC 9110, and what hyper's test expects of hyper's server), including across
//! the proxy's own connection handling: an idle HTTP/1.1 connection is parked after 10 ms of
//! quiet (100 ms once it answered two requests), and served by a new hyper connection when the
//! client sends again, so pauses of 15, 120 and 250 ms are put where parking may happen.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::fetched::{bounded, BOUND};
use crate::scripted::{upstream as scripted, wr};
use crate::support::{h2_client, metrics, proxied, send, until, Upstream};

async fn pause(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

// ---------------------------------------------------------------------------------------------
// A raw HTTP/1 client.

/// How an answer's body was framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body (a 1xx, 204 or 304, or an answer to `HEAD`).
    None,
    Length,
    Chunked,
    /// Ended by the connection's close.
    Close,
}

/// One answer, as read off the socket.
#[derive(Debug)]
struct Answer {
    /// `HTTP/1.1` or `HTTP/1.0`.
    version: String,
    status: u16,
    /// The head as sent, for messages.
    head: String,
    /// Header names in lower case, values trimmed.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    framing: Framing,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the `connection` header lists `option` (case-insensitive).
    fn connection_has(&self, option: &str) -> bool {
        self.headers
            .iter()
            .filter(|(n, _)| n == "connection")
            .flat_map(|(_, v)| v.split(','))
            .any(|o| o.trim().eq_ignore_ascii_case(option))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

struct Raw {
    socket: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    async fn connect(addr: SocketAddr) -> Raw {
        Raw {
            socket: bounded("connect", TcpStream::connect(addr)).await.unwrap(),
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: impl AsRef<[u8]>) {
        bounded("a write", self.socket.write_all(bytes.as_ref()))
            .await
            .expect("the proxy took the bytes");
    }

    /// Writes `bytes` `piece` bytes at a time, pausing `gap(i)` ms after the i-th piece.
    async fn send_in_pieces(&mut self, bytes: &[u8], piece: usize, gap: impl Fn(usize) -> u64) {
        for (i, part) in bytes.chunks(piece).enumerate() {
            self.send(part).await;
            let ms = gap(i);
            if ms > 0 {
                pause(ms).await;
            }
        }
    }

    /// Reads more bytes; `false` at the connection's end (a FIN, or a reset).
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        match self.socket.read(&mut chunk).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    async fn need(&mut self, n: usize, what: &str) {
        while self.buf.len() < n {
            assert!(
                self.fill().await,
                "the proxy closed the connection inside {what}; read so far: {:?}",
                String::from_utf8_lossy(&self.buf)
            );
        }
    }

    async fn line(&mut self, from: usize) -> usize {
        loop {
            if let Some(at) = self.buf[from..].windows(2).position(|w| w == b"\r\n") {
                return from + at;
            }
            let len = self.buf.len();
            self.need(len + 1, "a chunk line").await;
        }
    }

    /// The next answer; `head_request` says whether it answers a `HEAD` (no body whatever its
    /// headers say).
    async fn answer_to(&mut self, head_request: bool) -> Answer {
        bounded("an answer from the proxy", self.read_answer(head_request)).await
    }

    async fn answer(&mut self) -> Answer {
        self.answer_to(false).await
    }

    async fn read_answer(&mut self, head_request: bool) -> Answer {
        let head_end = loop {
            if let Some(at) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let len = self.buf.len();
            self.need(len + 1, "an answer's head").await;
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap().to_string();
        let version = status_line.split(' ').next().unwrap().to_string();
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not a status line: {status_line:?}"));
        let headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (n, v) = l.split_once(':').unwrap_or((l, ""));
                (n.trim().to_ascii_lowercase(), v.trim().to_string())
            })
            .collect();
        let find = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let chunked =
            find("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().ends_with("chunked"));
        let length = find("content-length").map(|v| v.parse::<usize>().unwrap());
        let mut body = Vec::new();
        let (framing, end) = if head_request || status < 200 || status == 204 || status == 304 {
            (Framing::None, head_end)
        } else if chunked {
            let mut at = head_end;
            loop {
                let eol = self.line(at).await;
                let text = String::from_utf8_lossy(&self.buf[at..eol]).into_owned();
                let size = usize::from_str_radix(text.split(';').next().unwrap().trim(), 16)
                    .unwrap_or_else(|_| panic!("not a chunk size: {text:?}"));
                at = eol + 2;
                if size == 0 {
                    loop {
                        let eol = self.line(at).await;
                        let empty = eol == at;
                        at = eol + 2;
                        if empty {
                            break;
                        }
                    }
                    break (Framing::Chunked, at);
                }
                self.need(at + size + 2, "a chunk").await;
                body.extend_from_slice(&self.buf[at..at + size]);
                at += size + 2;
            }
        } else if let Some(length) = length {
            self.need(head_end + length, "a body of known length").await;
            body.extend_from_slice(&self.buf[head_end..head_end + length]);
            (Framing::Length, head_end + length)
        } else {
            while self.fill().await {}
            body.extend_from_slice(&self.buf[head_end..]);
            (Framing::Close, self.buf.len())
        };
        self.buf.drain(..end);
        Answer {
            version,
            status,
            head,
            headers,
            body,
            framing,
        }
    }

    /// Waits for the proxy to close the connection; panics if it does not within the bound, or
    /// if it sends anything more first.
    async fn expect_closed(&mut self, after: &str) {
        let ended = tokio::time::timeout(BOUND, async { while self.fill().await {} }).await;
        assert!(
            ended.is_ok(),
            "after {after}: the proxy kept the connection open for {BOUND:?}"
        );
        assert!(
            self.buf.is_empty(),
            "after {after}: bytes past the last answer: {:?}",
            String::from_utf8_lossy(&self.buf)
        );
    }

    /// Whether the proxy closed the connection within `ms`, with nothing more sent.
    async fn closed_within(&mut self, ms: u64) -> bool {
        match tokio::time::timeout(Duration::from_millis(ms), self.fill()).await {
            Ok(false) => true,
            Ok(true) => panic!(
                "bytes nobody asked for: {:?}",
                String::from_utf8_lossy(&self.buf)
            ),
            Err(_) => false,
        }
    }
}

/// An upstream (the axum one of `support`) and a proxy in front of it: both live as long as
/// the returned values.
async fn setup() -> (Upstream, inflight_proxy::Proxy, SocketAddr) {
    let upstream = Upstream::start().await;
    let (proxy, addr) = proxied(upstream.addr).await;
    (upstream, proxy, addr)
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: example.domain\r\n\r\n")
}

fn in_flight(proxy: &inflight_proxy::Proxy) -> f64 {
    metrics(proxy)
        .get("inflight_budget_in_flight{budget=records}")
        .copied()
        .unwrap_or(0.0)
}

// ---------------------------------------------------------------------------------------------
// Keep-alive and `Connection: close` from the client.

/// `keep_alive`, `get_chunked_response_with_ka`: an HTTP/1.1 connection persists (RFC 9112
/// section 9.3), whatever the framing of the answer before; a request with `Connection:
/// close` is answered with `connection: close` and the connection then closed (RFC 9112
/// section 9.6).
#[tokio::test]
async fn keep_alive_then_connection_close_from_the_client() {
    let (upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send(get("/one")).await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /one"),
        "{}",
        a.head
    );
    assert_eq!(a.framing, Framing::Length, "{}", a.head);
    assert!(!a.connection_has("close"), "{}", a.head);
    // A chunked answer (a body of unknown length), then another request.
    let body = upstream.next_stream();
    c.send("GET /stream HTTP/1.1\r\nHost: example.domain\r\nConnection: keep-alive\r\n\r\n")
        .await;
    body.send(Bytes::from_static(b"foo bar baz")).await.unwrap();
    drop(body);
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "foo bar baz"),
        "{}",
        a.head
    );
    assert_eq!(a.framing, Framing::Chunked, "{}", a.head);
    c.send("GET /quux HTTP/1.1\r\nHost: example.domain\r\nConnection: close\r\n\r\n")
        .await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /quux"),
        "{}",
        a.head
    );
    assert!(a.connection_has("close"), "{}", a.head);
    c.expect_closed("the answer to a request with Connection: close")
        .await;
    assert_eq!(upstream.seen().len(), 3);
}

/// `get_should_ignore_body`: a GET without a length has no body (RFC 9112 section 6.3): bytes
/// after its head are not its body, and after `Connection: close` they are not a request
/// either.
#[tokio::test]
async fn bytes_after_a_get_without_length_and_with_close_are_not_its_body() {
    let (upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send("GET / HTTP/1.1\r\nHost: example.domain\r\nConnection: close\r\n\r\nI shouldn't be read.\r\n")
        .await;
    let a = c.answer().await;
    assert_eq!(a.status, 200, "{}", a.head);
    c.expect_closed("the answer").await;
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].body, "");
}

/// `get_with_body`: a GET with `Content-Length` has that many bytes of body, forwarded.
#[tokio::test]
async fn a_get_with_a_length_forwards_its_body() {
    let (upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send(
        "GET / HTTP/1.1\r\nHost: example.domain\r\nContent-Length: 19\r\n\r\nI'm a good request.",
    )
    .await;
    let a = c.answer().await;
    assert_eq!(a.status, 200, "{}", a.head);
    assert_eq!(upstream.seen()[0].body, "I'm a good request.");
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.0 clients.

/// `http_10_request_receives_http_10_response`: an HTTP/1.0 request (no `Host` needed) is
/// answered in a version it reads (HTTP/1.0 as hyper's server does, or HTTP/1.1, RFC 9110
/// section 6.2), framed by its length, and, without keep-alive asked for, the connection is
/// closed after the answer (RFC 9112 section 9.3).
#[tokio::test]
async fn an_http10_request_is_answered_for_http10_and_its_connection_closed() {
    let (_upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send("GET /old HTTP/1.0\r\n\r\n").await;
    let a = c.answer().await;
    assert!(
        a.version == "HTTP/1.0" || a.version == "HTTP/1.1",
        "{}",
        a.head
    );
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /old"),
        "{}",
        a.head
    );
    assert_eq!(a.framing, Framing::Length, "{}", a.head);
    assert!(!a.connection_has("keep-alive"), "{}", a.head);
    c.expect_closed("an HTTP/1.0 answer without keep-alive")
        .await;
}

/// `http_10_keep_alive`: an HTTP/1.0 client that asks for keep-alive is answered with
/// `connection: keep-alive` when the answer has a length, and the connection then serves its
/// next request; that one, without keep-alive, ends it.
#[tokio::test]
async fn an_http10_client_with_keep_alive_keeps_its_connection() {
    let (upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send("GET /one HTTP/1.0\r\nHost: example.domain\r\nConnection: keep-alive\r\n\r\n")
        .await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /one"),
        "{}",
        a.head
    );
    assert!(a.connection_has("keep-alive"), "{}", a.head);
    // Past the time an idle connection is parked.
    pause(50).await;
    c.send("GET /quux HTTP/1.0\r\nHost: example.domain\r\n\r\n")
        .await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /quux"),
        "{}",
        a.head
    );
    c.expect_closed("the second HTTP/1.0 answer, without keep-alive")
        .await;
    assert_eq!(upstream.seen().len(), 2);
}

/// `http10_auto_response_with_unknown_length`, `http10_chunked_response`, `http_10_close_on_no_ka`:
/// a body of unknown length goes to an HTTP/1.0 client without chunks (RFC 9112 section 7: it
/// cannot read them) and ended by the connection's close (RFC 9112 section 6.3), with or
/// without keep-alive asked for; the answer does not claim `keep-alive` then.
#[tokio::test]
async fn a_body_of_unknown_length_to_an_http10_client_is_ended_by_close() {
    let (upstream, _proxy, addr) = setup().await;
    for ask in ["", "Connection: keep-alive\r\n"] {
        let mut c = Raw::connect(addr).await;
        let body = upstream.next_stream();
        c.send(format!(
            "GET /stream HTTP/1.0\r\nHost: example.domain\r\n{ask}\r\n"
        ))
        .await;
        body.send(Bytes::from_static(b"foo bar ")).await.unwrap();
        body.send(Bytes::from_static(b"baz")).await.unwrap();
        drop(body);
        let a = c.answer().await;
        assert_eq!(a.status, 200, "{ask:?}: {}", a.head);
        assert!(
            a.version == "HTTP/1.0" || a.version == "HTTP/1.1",
            "{}",
            a.head
        );
        assert!(
            a.header("transfer-encoding").is_none(),
            "{ask:?}: {}",
            a.head
        );
        assert!(a.header("content-length").is_none(), "{ask:?}: {}", a.head);
        assert_eq!(a.framing, Framing::Close, "{ask:?}: {}", a.head);
        assert_eq!(a.text(), "foo bar baz", "{ask:?}");
        assert!(!a.connection_has("keep-alive"), "{ask:?}: {}", a.head);
    }
}

/// RFC 9112 section 6.1: an HTTP/1.0 request with `Transfer-Encoding` has faulty framing; it
/// is refused (hyper's server answers 400), and the connection is closed.
#[tokio::test]
async fn an_http10_request_with_transfer_encoding_is_refused_and_its_connection_closed() {
    let (upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send("POST / HTTP/1.0\r\nHost: example.domain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        .await;
    let a = c.answer().await;
    assert_eq!(a.status, 400, "{}", a.head);
    c.expect_closed("the 400").await;
    assert!(upstream.seen().is_empty());
}

/// `expect_continue_but_http_10_is_ignored`: RFC 9110 section 10.1.1: a server MUST ignore a
/// 100-continue expectation in an HTTP/1.0 request: no 100, the final answer first.
#[tokio::test]
async fn expect_100_continue_from_an_http10_client_is_ignored() {
    let (upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send("POST /foo HTTP/1.0\r\nHost: example.domain\r\nExpect: 100-Continue\r\nContent-Length: 5\r\nConnection: Close\r\n\r\n")
        .await;
    c.send("hello").await;
    let a = c.answer().await;
    assert_eq!(a.status, 200, "{}", a.head);
    c.expect_closed("the answer").await;
    assert_eq!(upstream.seen()[0].body, "hello");
}

// ---------------------------------------------------------------------------------------------
// Pipelining, and parking between requests.

/// `pipeline_enabled`: requests sent back to back on one connection are answered in order
/// (RFC 9112 section 9.3.2), including across pauses in which the proxy parks the connection
/// (10 ms, or 100 ms once it answered two) and serves it again with a new hyper connection;
/// the upstream takes a varying time, so that answers would come out of order if the proxy
/// forwarded pipelined requests at once.
#[tokio::test]
async fn pipelined_groups_are_answered_in_order_across_parking() {
    let (upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    let mut expected: Vec<(bool, String)> = Vec::new();
    for (g, gap) in [50u64, 150, 300, 20, 120].into_iter().enumerate() {
        let mut group = String::new();
        for i in 0..4 {
            let path = format!("/g{g}/r{i}");
            match (g + i) % 4 {
                0 => {
                    group.push_str(&format!("GET {path} HTTP/1.1\r\nHost: p\r\n\r\n"));
                    expected.push((false, format!("GET {path}")));
                }
                1 => {
                    group.push_str(&format!(
                        "POST {path} HTTP/1.1\r\nHost: p\r\nContent-Length: 3\r\n\r\nabc"
                    ));
                    expected.push((false, format!("POST {path}")));
                }
                2 => {
                    group.push_str(&format!("HEAD {path} HTTP/1.1\r\nHost: p\r\n\r\n"));
                    expected.push((true, String::new()));
                }
                _ => {
                    let ms = 5 + 7 * i;
                    group.push_str(&format!("GET /sleep/{ms} HTTP/1.1\r\nHost: p\r\n\r\n"));
                    expected.push((false, "slept\n".into()));
                }
            }
        }
        c.send(&group).await;
        pause(gap).await;
    }
    for (n, (head, body)) in expected.iter().enumerate() {
        let a = c.answer_to(*head).await;
        assert_eq!(a.status, 200, "answer {n}: {}", a.head);
        assert_eq!(&a.text(), body, "answer {n} out of order: {}", a.head);
    }
    // Nothing more.
    assert!(
        !c.closed_within(200).await,
        "closed after pipelined answers"
    );
    assert_eq!(upstream.seen().len(), expected.len());
}

/// `pipeline_enabled`: the last request of a pipelined group says `Connection: close`: every
/// request before it is answered, it is answered with `connection: close`, and the connection
/// then closes; nothing sent after it is served.
#[tokio::test]
async fn a_pipelined_group_ending_in_close_is_answered_then_closed() {
    let (upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send("GET /a HTTP/1.1\r\nHost: p\r\n\r\nGET /b HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\nGET /never HTTP/1.1\r\nHost: p\r\n\r\n")
        .await;
    let a = c.answer().await;
    assert_eq!((a.status, a.text().as_str()), (200, "GET /a"));
    let a = c.answer().await;
    assert_eq!((a.status, a.text().as_str()), (200, "GET /b"));
    assert!(a.connection_has("close"), "{}", a.head);
    c.expect_closed("the answer to the closing request").await;
    let paths: Vec<_> = upstream.seen().iter().map(|s| s.uri.clone()).collect();
    assert_eq!(paths, ["/a", "/b"]);
}

/// A pipelined group whose last request's head is cut in two by a pause past the park times:
/// the requests before it are answered, then the rest of its head completes it.
#[tokio::test]
async fn a_pipelined_group_whose_last_head_is_split_by_a_pause() {
    let (_upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    for gap in [15u64, 150, 300] {
        c.send("GET /a HTTP/1.1\r\nHost: p\r\n\r\nGET /b HTTP/1.1\r\nHost: p\r\n\r\nGET /c HTTP/1.1\r\nHo")
            .await;
        let a = c.answer().await;
        assert_eq!((a.status, a.text().as_str()), (200, "GET /a"), "gap {gap}");
        let a = c.answer().await;
        assert_eq!((a.status, a.text().as_str()), (200, "GET /b"), "gap {gap}");
        pause(gap).await;
        c.send("st: p\r\n\r\n").await;
        let a = c.answer().await;
        assert_eq!(
            (a.status, a.text().as_str()),
            (200, "GET /c"),
            "gap {gap}: {}",
            a.head
        );
        assert!(
            !a.connection_has("close"),
            "gap {gap}: the connection is closed: {}",
            a.head
        );
        pause(gap).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Slow clients: a head in many small writes, a body that comes slowly.

/// A request head split across many small writes with pauses, some past the park times
/// (10 ms, 100 ms): the request is answered whole and correctly.
#[tokio::test]
async fn a_head_in_small_writes_with_pauses_is_answered() {
    let (upstream, _proxy, addr) = setup().await;
    let request =
        b"GET /slow/head?q=1 HTTP/1.1\r\nHost: example.domain\r\nX-One: 1\r\nX-Two: two\r\n\r\n";
    let mut c = Raw::connect(addr).await;
    c.send_in_pieces(request, 3, |i| match i {
        2 => 15,
        5 => 120,
        9 => 250,
        _ => 1,
    })
    .await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /slow/head?q=1"),
        "{}",
        a.head
    );
    let seen = upstream.seen();
    assert_eq!(seen[0].headers["x-two"], "two");
    // If the proxy ends the connection, it says so (RFC 9112 section 9.6).
    if !a.connection_has("close") {
        c.send(get("/next")).await;
        let a = c.answer().await;
        assert_eq!(
            (a.status, a.text().as_str()),
            (200, "GET /next"),
            "{}",
            a.head
        );
    }
}

/// The same, and the connection stays usable: nothing asked for its close, and hyper's server
/// alone keeps it (RFC 9112 section 9.3: HTTP/1.1 connections persist; the proxy should not
/// close a keep-alive connection because its client sent a head slowly). The first request of
/// a connection, its head in pieces 15 ms apart.
#[tokio::test]
async fn a_first_head_in_small_writes_with_pauses_keeps_the_connection() {
    let (_upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    let request = "GET /slow/first HTTP/1.1\r\nHost: example.domain\r\nX-Pad: padding\r\n\r\n";
    c.send_in_pieces(request.as_bytes(), 4, |i| if i % 4 == 1 { 15 } else { 1 })
        .await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /slow/first"),
        "{}",
        a.head
    );
    assert!(
        !a.connection_has("close"),
        "a head sent in pieces 15 ms apart: the proxy closes the connection: {}",
        a.head
    );
    c.send(get("/next")).await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /next"),
        "{}",
        a.head
    );
}

/// A head whose client stalls inside it for longer than a second (the proxy looks again after
/// one): the connection is parked then, and so is answered with `connection: close` and closed
/// once the head comes whole. A stalled head costs no look every 10 ms (the 20,000-client test
/// in `inflight-cli` measures what those cost).
#[tokio::test]
async fn a_head_that_stalls_for_seconds_is_answered_then_its_connection_closed() {
    let (_upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send("GET /stalled HTTP/1.1\r\nHost: exam").await;
    pause(2_500).await;
    c.send("ple.domain\r\n\r\n").await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /stalled"),
        "{}",
        a.head
    );
    assert!(a.connection_has("close"), "{}", a.head);
    c.expect_closed("the answer to a head that stalled").await;
}

/// The same for a request after the connection idled (and was parked): its head in pieces
/// 15 ms apart is answered, and the connection stays usable.
#[tokio::test]
async fn a_head_in_small_writes_after_an_idle_time_keeps_the_connection() {
    let (_upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send(get("/first")).await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /first"),
        "{}",
        a.head
    );
    for gap in [50u64, 250] {
        // Idle past the park times before the next request.
        pause(gap).await;
        let request =
            format!("GET /slow/{gap} HTTP/1.1\r\nHost: example.domain\r\nX-Pad: padding\r\n\r\n");
        c.send_in_pieces(request.as_bytes(), 4, |i| if i % 4 == 1 { 15 } else { 1 })
            .await;
        let a = c.answer().await;
        assert_eq!(a.status, 200, "after {gap} ms: {}", a.head);
        assert_eq!(a.text(), format!("GET /slow/{gap}"));
        assert!(
            !a.connection_has("close"),
            "after {gap} ms idle, a head sent in pieces 15 ms apart: the proxy closes the connection: {}",
            a.head
        );
    }
}

/// A request body that arrives slowly, in pieces with pauses past the park times: forwarded
/// whole, answered, and the connection kept (the request is in progress: it is never parked
/// inside it). By length, then in chunks with a trailer.
#[tokio::test]
async fn a_body_that_arrives_slowly_is_forwarded_whole() {
    let (upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send("POST /slow-body HTTP/1.1\r\nHost: p\r\nContent-Length: 26\r\n\r\n")
        .await;
    c.send_in_pieces(b"abcdefghijklmnopqrstuvwxyz", 5, |i| {
        [15, 120, 250, 1, 30][i % 5]
    })
    .await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "POST /slow-body"),
        "{}",
        a.head
    );
    assert!(!a.connection_has("close"), "{}", a.head);
    c.send("POST /slow-chunks HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await;
    c.send_in_pieces(
        b"5\r\nhello\r\n6\r\n world\r\n0\r\nx-sum: 1\r\n\r\n",
        4,
        |i| [120, 1, 15, 250, 1][i % 5],
    )
    .await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "POST /slow-chunks"),
        "{}",
        a.head
    );
    let seen = upstream.seen();
    assert_eq!(seen[0].body, "abcdefghijklmnopqrstuvwxyz");
    assert_eq!(seen[1].body, "hello world");
}

// ---------------------------------------------------------------------------------------------
// Expect: 100-continue.

/// `expect_continue_sends_100`, `expect_continue_accepts_upper_cased_expectation`: a client
/// that waits for 100 Continue gets it, then sends its body, which is forwarded.
#[tokio::test]
async fn expect_100_continue_gets_100_then_the_body_is_forwarded() {
    let (upstream, _proxy, addr) = setup().await;
    for (n, expect) in ["100-continue", "100-Continue"].into_iter().enumerate() {
        let mut c = Raw::connect(addr).await;
        c.send(format!("POST /foo HTTP/1.1\r\nHost: example.domain\r\nExpect: {expect}\r\nContent-Length: 5\r\nConnection: Close\r\n\r\n"))
            .await;
        let a = c.answer().await;
        assert_eq!(a.status, 100, "{expect}: {}", a.head);
        assert_eq!(a.head, "HTTP/1.1 100 Continue\r\n\r\n");
        c.send("hello").await;
        let a = c.answer().await;
        assert_eq!(a.status, 200, "{expect}: {}", a.head);
        c.expect_closed("the answer").await;
        assert_eq!(upstream.seen()[n].body, "hello");
    }
}

/// `expect_continue_but_no_body_is_ignored`: RFC 9110 section 10.1.1: no content, no 100 to
/// wait for: the final answer comes first.
#[tokio::test]
async fn expect_100_continue_without_a_body_gets_the_final_answer_first() {
    let (_upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send("POST /foo HTTP/1.1\r\nHost: example.domain\r\nExpect: 100-continue\r\nConnection: Close\r\n\r\n")
        .await;
    let a = c.answer().await;
    assert_eq!(a.status, 200, "{}", a.head);
    c.expect_closed("the answer").await;
}

/// A client that sends its body with its head, without waiting: answered once, correctly. A
/// server MAY omit the 100 then (RFC 9110 section 10.1.1); if it sends one, it comes before the
/// final answer, once.
#[tokio::test]
async fn expect_100_continue_with_the_body_already_sent_is_answered_once() {
    let (upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send("POST /eager HTTP/1.1\r\nHost: example.domain\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello")
        .await;
    let mut a = c.answer().await;
    if a.status == 100 {
        eprintln!("a 100 Continue was sent though the body had come with the head");
        a = c.answer().await;
    }
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "POST /eager"),
        "{}",
        a.head
    );
    // Nothing more (no late 100), and the connection serves the next request.
    c.send(get("/after")).await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /after"),
        "{}",
        a.head
    );
    assert_eq!(upstream.seen()[0].body, "hello");
}

/// An upstream that reads a request's head and answers 413 at once, without its body, then
/// closes.
async fn refusing_upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let _ = socket
                    .write_all(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 8\r\nconnection: close\r\n\r\ntoo big\n")
                    .await;
                let _ = socket.shutdown().await;
                let drain =
                    async { while matches!(socket.read(&mut chunk).await, Ok(n) if n > 0) {} };
                let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
            });
        }
    });
    up
}

const UPLOAD: &str = "POST /upload HTTP/1.1\r\nHost: example.domain\r\nExpect: 100-continue\r\nContent-Length: 1000000\r\n\r\n";

/// `expect_continue_waits_for_body_poll`: the upstream answers (413) without taking the body:
/// the client that waits for 100 Continue gets the final answer, and since its body was never
/// read the connection is then closed (the proxy cannot tell its next bytes from a request).
#[tokio::test]
async fn an_early_answer_to_expect_100_continue_reaches_the_client_and_closes() {
    let (_proxy, addr) = proxied(refusing_upstream().await).await;
    let mut c = Raw::connect(addr).await;
    c.send(UPLOAD).await;
    let mut a = c.answer().await;
    if a.status == 100 {
        a = c.answer().await;
    }
    assert_eq!(
        (a.status, a.text().as_str()),
        (413, "too big\n"),
        "{}",
        a.head
    );
    c.expect_closed("a final answer to a request whose body was not read")
        .await;
}

/// `expect_continue_waits_for_body_poll`, as hyper's server does it: no 100 Continue before
/// the final answer of an upstream that refused the request without asking for its body. The
/// point of `Expect: 100-continue` is that a client does not send a body that will be refused;
/// RFC 9110 section 10.1.1 has a proxy forward the request's head and let the origin decide. The
/// proxy asks the upstream for its `100 Continue` and reads the client's body only once it has
/// come, so the client gets the 413 alone.
#[tokio::test]
async fn no_100_continue_comes_before_an_upstream_that_refuses_the_body() {
    let (_proxy, addr) = proxied(refusing_upstream().await).await;
    let mut c = Raw::connect(addr).await;
    c.send(UPLOAD).await;
    let a = c.answer().await;
    assert_eq!(
        a.status, 413,
        "the proxy sent {:?} before the upstream's refusal",
        a.head
    );
}

/// An upstream that says nothing to `Expect: 100-continue` (it does not know the expectation)
/// gets the body all the same, once the proxy has waited a second for its word (RFC 9110 section
/// 10.1.1; curl waits as long): the client's 100 comes then, and the answer after its body.
#[tokio::test]
async fn an_upstream_silent_on_expect_gets_the_body_after_a_second() {
    let (up, seen) = scripted(|req| {
        let n = req.body.len();
        vec![wr(format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{n}",
            n.to_string().len()
        ))]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let mut c = Raw::connect(addr).await;
    let asked = std::time::Instant::now();
    c.send("POST /quiet HTTP/1.1\r\nHost: example.domain\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        .await;
    let a = c.answer().await;
    assert_eq!(a.status, 100, "{}", a.head);
    assert!(
        asked.elapsed() >= Duration::from_millis(900),
        "{:?}",
        asked.elapsed()
    );
    c.send("hello").await;
    let a = c.answer().await;
    assert_eq!((a.status, a.text().as_str()), (200, "5"), "{}", a.head);
    let sent = &seen.requests()[0];
    assert_eq!(sent.values("expect"), ["100-continue"], "{}", sent.head);
    assert_eq!(sent.body, b"hello");
}

// ---------------------------------------------------------------------------------------------
// Answers without a body, and framing of answers.

/// `head_response_can_send_content_length`, `head_response_doesnt_send_body`: an answer to
/// HEAD has the length a GET would have and no body (RFC 9110 section 9.3.2); the connection
/// then serves its next request (no stray body bytes in front of it). For an answer of unknown
/// length too.
#[tokio::test]
async fn an_answer_to_head_has_its_length_and_no_body() {
    let (upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send("HEAD /head HTTP/1.1\r\nHost: example.domain\r\n\r\n")
        .await;
    let a = c.answer_to(true).await;
    assert_eq!(a.status, 200, "{}", a.head);
    assert_eq!(a.header("content-length"), Some("10"), "{}", a.head);
    let body = upstream.next_stream();
    c.send("HEAD /stream HTTP/1.1\r\nHost: example.domain\r\n\r\n")
        .await;
    let _ = body.send(Bytes::from_static(b"never sent")).await;
    drop(body);
    let a = c.answer_to(true).await;
    assert_eq!(a.status, 200, "{}", a.head);
    c.send(get("/after-head")).await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /after-head"),
        "bytes of a body after a HEAD answer: {}",
        a.head
    );
    c.send("HEAD /last HTTP/1.1\r\nHost: example.domain\r\nConnection: close\r\n\r\n")
        .await;
    let a = c.answer_to(true).await;
    assert_eq!(a.status, 200, "{}", a.head);
    c.expect_closed("the answer to HEAD").await;
}

/// `response_does_not_set_chunked_if_body_not_allowed`, `skips_content_length_and_body_for_304_responses`:
/// 204 and 304 answers have no body, a 204 no `Content-Length` and neither a
/// `Transfer-Encoding` (RFC 9110 sections 8.6, 15.3.5, 15.4.5; RFC 9112 section 6.1), even
/// when the upstream's answer says chunked; the connection serves its next request.
#[tokio::test]
async fn answers_204_and_304_have_no_body() {
    let (up, _) = scripted(|req| {
        let answer = match req.path() {
            "/204" => "HTTP/1.1 204 No Content\r\nx-up: 1\r\n\r\n",
            "/304-chunked" => "HTTP/1.1 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\n",
            "/304" => "HTTP/1.1 304 Not Modified\r\netag: \"x\"\r\n\r\n",
            _ => "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        };
        vec![wr(answer)]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let mut c = Raw::connect(addr).await;
    for path in ["/204", "/304-chunked", "/304"] {
        c.send(get(path)).await;
        let a = c.answer().await;
        assert_eq!(a.status, path[1..4].parse::<u16>().unwrap(), "{}", a.head);
        assert!(
            a.header("transfer-encoding").is_none(),
            "{path}: {}",
            a.head
        );
        if path == "/204" {
            assert!(a.header("content-length").is_none(), "{path}: {}", a.head);
        }
        c.send(get("/ok")).await;
        let a = c.answer().await;
        assert_eq!(
            (a.status, a.text().as_str()),
            (200, "ok"),
            "after {path}: {}",
            a.head
        );
    }
    // The same from the axum upstream.
    let (_upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    for code in [204u16, 304] {
        c.send(get(&format!("/status/{code}"))).await;
        let a = c.answer().await;
        assert_eq!(a.status, code, "{}", a.head);
        assert!(a.header("transfer-encoding").is_none(), "{}", a.head);
    }
    c.send(get("/end")).await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /end"),
        "{}",
        a.head
    );
}

/// `response_body_lengths`: an answer of known length goes with `Content-Length` (0 for an
/// empty one), one of unknown length in chunks to an HTTP/1.1 client (never both headers);
/// `get_response_custom_reason_phrase`: the upstream's reason phrase is kept.
#[tokio::test]
async fn answer_framing_to_an_http11_client() {
    let (up, _) = scripted(|req| {
        let answer = match req.path() {
            "/empty" => "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            "/chunked-empty" => "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
            "/chunked" => {
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nb\r\nfoo bar baz\r\n0\r\n\r\n"
            }
            "/cool" => "HTTP/1.1 200 Cool\r\ncontent-length: 0\r\n\r\n",
            _ => "HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\nfoo bar baz",
        };
        vec![wr(answer)]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let mut c = Raw::connect(addr).await;
    for (path, body) in [
        ("/known", "foo bar baz"),
        ("/empty", ""),
        ("/chunked", "foo bar baz"),
        ("/chunked-empty", ""),
    ] {
        c.send(get(path)).await;
        let a = c.answer().await;
        assert_eq!(
            (a.status, a.text().as_str()),
            (200, body),
            "{path}: {}",
            a.head
        );
        assert!(
            a.header("content-length").is_none() || a.header("transfer-encoding").is_none(),
            "{path}: both lengths: {}",
            a.head
        );
        assert!(
            matches!(a.framing, Framing::Length | Framing::Chunked),
            "{path}: {:?}",
            a.framing
        );
    }
    c.send(get("/cool")).await;
    let a = c.answer().await;
    assert!(a.head.starts_with("HTTP/1.1 200 Cool\r\n"), "{}", a.head);
}

// ---------------------------------------------------------------------------------------------
// Request bodies from the client.

/// `post_with_content_length_body`, `post_with_chunked_body`, `http1_trailer_recv_fields`,
/// `http1_trailer_recv_keep_alive`: bodies by length, in chunks, and in chunks with a trailer,
/// forwarded whole on one kept-alive connection, the trailer with them.
#[tokio::test]
async fn request_bodies_by_length_in_chunks_and_with_trailers() {
    let (up, seen) = scripted(|_| vec![wr("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")]).await;
    let (_proxy, addr) = proxied(up).await;
    let mut c = Raw::connect(addr).await;
    for request in [
        "POST /length HTTP/1.1\r\nHost: p\r\nContent-Length: 5\r\n\r\nhello",
        "POST /chunks HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nq\r\n2\r\nwe\r\n2\r\nrt\r\n0\r\n\r\n",
        "POST /trailers HTTP/1.1\r\ntrailer: chunky-trailer\r\nHost: p\r\nTE: trailers\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nchunky-trailer: header data\r\n\r\n",
    ] {
        c.send(request).await;
        let a = c.answer().await;
        assert_eq!((a.status, a.text().as_str()), (200, "ok"), "{}", a.head);
    }
    c.send("GET /quux HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n")
        .await;
    let a = c.answer().await;
    assert_eq!(a.status, 200);
    c.expect_closed("the last answer").await;
    let requests = seen.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(requests[0].body, b"hello");
    assert_eq!(requests[1].body, b"qwert");
    assert_eq!(requests[2].body, b"hello");
    let raw = String::from_utf8_lossy(&requests[2].raw).to_ascii_lowercase();
    assert!(
        raw.contains("\r\n0\r\nchunky-trailer: header data\r\n\r\n"),
        "the trailer was not forwarded: {raw:?}"
    );
}

/// `post_with_invalid_prefix_content_length`, `illegal_request_length_returns_400_response`, and
/// two different lengths (RFC 9112 section 6.3): 400, nothing forwarded, the connection closed.
#[tokio::test]
async fn invalid_request_lengths_get_400_and_nothing_is_forwarded() {
    let (upstream, _proxy, addr) = setup().await;
    for lengths in [
        "Content-Length: +5\r\n",
        "Content-Length: foo\r\n",
        "Content-Length: 5\r\nContent-Length: 6\r\n",
        "Content-Length: 5, 6\r\n",
    ] {
        let mut c = Raw::connect(addr).await;
        c.send(format!(
            "POST / HTTP/1.1\r\nHost: p\r\n{lengths}\r\nhello\r\n"
        ))
        .await;
        let a = c.answer().await;
        assert_eq!(a.status, 400, "{lengths:?}: {}", a.head);
        c.expect_closed("a 400").await;
    }
    assert!(upstream.seen().is_empty(), "{:?}", upstream.seen());
}

/// `post_with_chunked_overflow`, `post_with_chunked_missing_final_digit`: a chunked body that
/// cannot be read is never forwarded as a complete request (a truncated body with a last chunk
/// added would be a different request), no answer says it succeeded, and the bytes after it
/// (`GET /sneaky`) are not served as a request.
#[tokio::test]
async fn an_unreadable_chunked_body_is_not_forwarded_whole_and_nothing_after_it_is_served() {
    let (up, seen) = scripted(|_| vec![wr("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")]).await;
    let (_proxy, addr) = proxied(up).await;
    for bad in [
        "f0000000000000003\r\nabc\r\n0\r\n\r\nGET /sneaky HTTP/1.1\r\nHost: p\r\n\r\n",
        "1\r\nZ\r\n\r\n\r\nGET /sneaky HTTP/1.1\r\nHost: p\r\n\r\n",
        "3\r\nabcGET /sneaky HTTP/1.1\r\nHost: p\r\n\r\n",
    ] {
        let mut c = Raw::connect(addr).await;
        c.send(format!(
            "POST /bad HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n{bad}"
        ))
        .await;
        // An error answer, or the end of the connection: never a 2xx.
        let got = tokio::time::timeout(BOUND, async {
            let mut answers = Vec::new();
            loop {
                if c.buf.is_empty() && !c.fill().await {
                    return answers;
                }
                let a = c.read_answer(false).await;
                answers.push((a.status, a.head));
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{bad:?}: the connection stayed open"));
        assert!(
            got.iter().all(|(status, _)| *status >= 400),
            "{bad:?}: {got:?}"
        );
    }
    pause(200).await;
    let requests = seen.requests();
    assert!(
        requests.iter().all(|r| r.path() != "/sneaky"),
        "a request smuggled in a chunked body was served"
    );
    assert!(
        requests.is_empty(),
        "a request whose body could not be read reached the upstream whole: {:?}",
        String::from_utf8_lossy(&requests[0].raw)
    );
}

/// `post_with_incomplete_body`: a body shorter than its length, then the client's end of
/// sending: never forwarded whole; the client gets an error answer or the connection's end,
/// not a 2xx; no permit stays held.
#[tokio::test]
async fn a_body_cut_short_by_a_half_close_is_not_forwarded_whole() {
    let (upstream, proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send("POST / HTTP/1.1\r\nHost: example.domain\r\nContent-Length: 10\r\n\r\n12345")
        .await;
    c.socket.shutdown().await.unwrap();
    let got = bounded("an answer or the end", async {
        if !c.fill().await {
            return None;
        }
        Some(c.read_answer(false).await.status)
    })
    .await;
    assert!(got.is_none_or(|s| s >= 400), "{got:?}");
    until("no permit held", || in_flight(&proxy) == 0.0).await;
    pause(100).await;
    assert!(upstream.seen().is_empty(), "{:?}", upstream.seen());
}

/// A client that closes its connection in the middle of a body: the upstream never gets the
/// request whole, the permit goes back, and the proxy serves the next client as before.
#[tokio::test]
async fn a_client_that_closes_mid_body_leaves_nothing_behind() {
    let (upstream, proxy, addr) = setup().await;
    for _ in 0..3 {
        let mut c = Raw::connect(addr).await;
        c.send(
            "POST /cut HTTP/1.1\r\nHost: example.domain\r\nContent-Length: 100\r\n\r\n0123456789",
        )
        .await;
        pause(30).await;
        drop(c);
    }
    // A chunked one too.
    let mut c = Raw::connect(addr).await;
    c.send("POST /cut HTTP/1.1\r\nHost: example.domain\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n")
        .await;
    pause(30).await;
    drop(c);
    until("no permit held", || in_flight(&proxy) == 0.0).await;
    pause(100).await;
    assert!(upstream.seen().is_empty(), "{:?}", upstream.seen());
    let mut c = Raw::connect(addr).await;
    c.send(get("/next")).await;
    let a = c.answer().await;
    assert_eq!((a.status, a.text().as_str()), (200, "GET /next"));
}

// ---------------------------------------------------------------------------------------------
// Request heads: size limits, malformed ones, target forms.

/// `header_name_too_long`, `max_buf_size_split_header_boundary`: a head of 64 KiB or more gets
/// 431 (RFC 6585 section 5) and the connection is closed, whether it comes in one write or in
/// two with a pause past the park times between; a head well under the limit sent the same way
/// is answered.
#[tokio::test]
async fn a_request_head_too_large_gets_431() {
    let (upstream, _proxy, addr) = setup().await;
    // One long header name, in one write.
    let mut c = Raw::connect(addr).await;
    let mut request = b"GET / HTTP/1.1\r\nHost: p\r\n".to_vec();
    request.extend(vec![b'x'; 64 * 1024]);
    request.extend(b": foo\r\n\r\n");
    c.send(&request).await;
    let a = c.answer().await;
    assert_eq!(a.status, 431, "{}", a.head);
    c.expect_closed("a 431").await;
    // A long value, in two writes 120 ms apart.
    let mut c = Raw::connect(addr).await;
    c.send(format!(
        "GET / HTTP/1.1\r\nHost: p\r\nConnection: close\r\nX: {}",
        "a".repeat(40 * 1024)
    ))
    .await;
    pause(120).await;
    c.send(format!("{}\r\n\r\n", "a".repeat(30 * 1024))).await;
    let a = c.answer().await;
    assert_eq!(a.status, 431, "{}", a.head);
    c.expect_closed("a 431").await;
    assert!(upstream.seen().is_empty());
    // 16 KiB of headers, in two writes 120 ms apart: answered.
    let mut c = Raw::connect(addr).await;
    c.send(format!(
        "GET /big HTTP/1.1\r\nHost: p\r\nX: {}",
        "a".repeat(8 * 1024)
    ))
    .await;
    pause(120).await;
    c.send(format!("\r\nY: {}\r\n\r\n", "b".repeat(8 * 1024)))
        .await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /big"),
        "{}",
        a.head
    );
}

/// `http_11_uri_too_long`: a request line of 64 KiB is refused (hyper's server: 414, or 431 for
/// a head past its buffer), the connection closed, nothing forwarded.
#[tokio::test]
async fn a_request_target_too_long_is_refused() {
    let (upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send(format!(
        "GET /{} HTTP/1.1\r\nHost: p\r\n\r\n",
        "a".repeat(65534)
    ))
    .await;
    let a = c.answer().await;
    assert!(a.status == 414 || a.status == 431, "{}", a.head);
    c.expect_closed("the refusal").await;
    assert!(upstream.seen().is_empty());
}

/// `parse_errors_send_4xx_response`: a malformed request line gets 400 (RFC 9112 section 3:
/// 400, or a close), the connection is closed, and nothing is forwarded. A version other than
/// HTTP/1.x may get 505 instead.
#[tokio::test]
async fn malformed_request_lines_get_400() {
    let (upstream, _proxy, addr) = setup().await;
    for (line, may_505) in [
        ("GE T / HTTP/1.1", false),
        ("GET / HTTX/1.1", true),
        ("GET /a\x01b HTTP/1.1", false),
        ("GET / HTTP/1.1 trailing", true),
        ("GET", false),
        ("/ HTTP/1.1", false),
        ("GET / HTTP/9.9", true),
    ] {
        let mut c = Raw::connect(addr).await;
        c.send(format!("{line}\r\nHost: p\r\n\r\n")).await;
        let a = c.answer().await;
        assert!(
            a.status == 400 || (may_505 && a.status == 505),
            "{line:?}: {}",
            a.head
        );
        c.expect_closed("a 400").await;
    }
    // A good request on a fresh connection is still served.
    let mut c = Raw::connect(addr).await;
    c.send(get("/fine")).await;
    assert_eq!(c.answer().await.status, 200);
    assert_eq!(upstream.seen().len(), 1);
}

/// RFC 9112 section 3.2: an HTTP/1.1 request without `Host`, or with two, gets 400.
#[tokio::test]
async fn a_request_without_one_host_gets_400() {
    let (upstream, _proxy, addr) = setup().await;
    for request in [
        "GET / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "GET http://example.com/abs HTTP/1.1\r\n\r\n",
    ] {
        let mut c = Raw::connect(addr).await;
        c.send(request).await;
        let a = c.answer().await;
        assert_eq!(a.status, 400, "{request:?}: {}", a.head);
    }
    assert!(upstream.seen().is_empty());
}

/// RFC 9112 section 3.2.2: a server MUST accept the absolute form of a target; the upstream,
/// an origin server, gets the origin form (path and query), whatever `Host` said.
#[tokio::test]
async fn an_absolute_form_target_reaches_the_upstream_in_origin_form() {
    let (upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send("GET http://example.com/abs/path?q=1 HTTP/1.1\r\nHost: example.com\r\n\r\n")
        .await;
    let a = c.answer().await;
    assert_eq!(a.status, 200, "{}", a.head);
    c.send("POST http://other.example:8080/two HTTP/1.1\r\nHost: example.com\r\nContent-Length: 2\r\n\r\nhi")
        .await;
    let a = c.answer().await;
    assert_eq!(a.status, 200, "{}", a.head);
    let seen = upstream.seen();
    assert_eq!(seen[0].uri, "/abs/path?q=1");
    assert_eq!(seen[1].uri, "/two");
    assert_eq!(seen[1].body, "hi");
    assert_eq!(a.text(), "POST /two");
}

// ---------------------------------------------------------------------------------------------
// Half-close, many requests, a slow reader.

/// `http1_allow_half_close` (an option of hyper's, off by default) expects a client that shuts
/// down its sending side after its request to still get the answer, as RFC 9112 section 9.6
/// allows. The proxy takes the end of what a client sends as the client gone: its call is
/// cancelled and its permit goes back at once, as for a client that closed its socket, which
/// looks the same on the wire until a write fails. A budget's permits are then not held for
/// clients that left. The guide says so; this pins it.
#[tokio::test]
async fn a_client_that_half_closes_after_its_request_is_taken_as_gone() {
    let (_upstream, _proxy, addr) = setup().await;
    for request in [
        "GET /sleep/300 HTTP/1.1\r\nHost: example.domain\r\n\r\n",
        "POST /sleep/300 HTTP/1.1\r\nHost: example.domain\r\nContent-Length: 5\r\n\r\nhello",
    ] {
        let mut c = Raw::connect(addr).await;
        c.send(request).await;
        c.socket.shutdown().await.unwrap();
        let answered = bounded("the end of the connection", c.fill()).await;
        assert!(
            !answered,
            "{request:?}: answered a client that had ended its side"
        );
    }
}

/// Many small requests on one connection (150), sent one after the other, with pauses now and
/// then past the park times: each answered, in order, on the same connection.
#[tokio::test]
async fn a_hundred_and_fifty_requests_on_one_connection() {
    let (upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    for i in 0..150 {
        c.send(get(&format!("/n/{i}"))).await;
        let a = c.answer().await;
        assert_eq!(a.status, 200, "request {i}: {}", a.head);
        assert_eq!(a.text(), format!("GET /n/{i}"), "request {i}");
        assert!(!a.connection_has("close"), "request {i}: {}", a.head);
        match i % 25 {
            3 => pause(15).await,
            11 => pause(120).await,
            _ => {}
        }
    }
    assert_eq!(upstream.seen().len(), 150);
}

/// `streaming_body`, a large one: 4 MiB of unknown length (chunked), read slowly by the
/// client (16 KiB every 2 ms), arrives whole, and the connection then serves its next request.
#[tokio::test]
async fn a_large_answer_read_slowly_arrives_whole() {
    const CHUNK: usize = 64 * 1024;
    const CHUNKS: usize = 64;
    let (upstream, _proxy, addr) = setup().await;
    let body = upstream.next_stream();
    let feeder = tokio::spawn(async move {
        for i in 0..CHUNKS {
            let chunk = Bytes::from(vec![b'a' + (i % 26) as u8; CHUNK]);
            if body.send(chunk).await.is_err() {
                return;
            }
        }
    });
    let mut c = Raw::connect(addr).await;
    c.send(get("/stream")).await;
    let slow = async {
        let mut raw = Vec::new();
        let mut piece = vec![0u8; 16 * 1024];
        // Head and body until the last chunk.
        loop {
            let n = c.socket.read(&mut piece).await.unwrap();
            assert!(n > 0, "the proxy closed the connection inside the answer");
            raw.extend_from_slice(&piece[..n]);
            if raw.ends_with(b"\r\n0\r\n\r\n") {
                break;
            }
            pause(2).await;
        }
        raw
    };
    let raw = tokio::time::timeout(Duration::from_secs(30), slow)
        .await
        .expect("the large answer within 30 s");
    feeder.await.unwrap();
    c.buf = raw;
    let a = c.answer().await;
    assert_eq!(a.status, 200, "{}", a.head);
    assert_eq!(a.body.len(), CHUNK * CHUNKS);
    for (i, chunk) in a.body.chunks(CHUNK).enumerate() {
        assert!(
            chunk.iter().all(|b| *b == b'a' + (i % 26) as u8),
            "chunk {i} damaged"
        );
    }
    c.send(get("/after")).await;
    let a = c.answer().await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (200, "GET /after"),
        "{}",
        a.head
    );
}

// ---------------------------------------------------------------------------------------------
// HTTP/2 with prior knowledge.

/// `http2_auto_response_with_known_length` and the basics: on the same port, an HTTP/2 client
/// with prior knowledge gets GET, POST (its body forwarded) and HEAD answered, with the
/// answer's length, and many streams of one connection each get their own answer.
#[tokio::test]
async fn http2_prior_knowledge_basics() {
    let (upstream, _proxy, addr) = setup().await;
    let client = h2_client();
    let (status, headers, body) = send(&client, addr, "GET", "/h2", &[], "").await;
    assert_eq!((status, body.as_str()), (200, "GET /h2"));
    assert_eq!(headers["content-length"], "7");
    let (status, _, body) = send(&client, addr, "POST", "/h2-post", &[], "payload").await;
    assert_eq!((status, body.as_str()), (200, "POST /h2-post"));
    let (status, headers, body) = send(&client, addr, "HEAD", "/h2-head", &[], "").await;
    assert_eq!((status, body.as_str()), (200, ""));
    assert_eq!(headers["content-length"], "13");
    let all: Vec<_> = (0..20)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let (status, _, body) =
                    send(&client, addr, "GET", &format!("/s/{i}"), &[], "").await;
                assert_eq!((status, body), (200, format!("GET /s/{i}")));
            })
        })
        .collect();
    for task in all {
        bounded("a stream", task).await.unwrap();
    }
    let seen = upstream.seen();
    assert_eq!(seen.len(), 23);
    assert_eq!(seen[1].body, "payload");
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HTTP/2 client whose preface comes in pieces, with pauses, is still told apart from an
/// HTTP/1.1 one and served: raw frames, a GET on stream 1.
#[tokio::test]
async fn http2_with_its_preface_in_pieces_is_served() {
    let (_upstream, _proxy, addr) = setup().await;
    let mut c = Raw::connect(addr).await;
    c.send(b"PRI * HTTP").await;
    pause(30).await;
    c.send(b"/2.0\r\n\r\nSM").await;
    pause(3).await;
    c.send(b"\r\n\r\n").await;
    c.send(frame(4, 0, 0, &[])).await;
    // :method GET, :scheme http, :path /split (literal, indexed name 4), :authority p.
    let mut block = vec![0x82, 0x86, 0x44, 6];
    block.extend_from_slice(b"/split");
    block.extend_from_slice(&[0x41, 1, b'p']);
    c.send(frame(1, 0x4 | 0x1, 1, &block)).await;
    let (mut status, mut data) = (None, Vec::new());
    bounded("the answer on stream 1", async {
        loop {
            c.need(9, "a frame header").await;
            let len = (usize::from(c.buf[0]) << 16)
                | (usize::from(c.buf[1]) << 8)
                | usize::from(c.buf[2]);
            c.need(9 + len, "a frame").await;
            let (kind, flags) = (c.buf[3], c.buf[4]);
            let stream = u32::from_be_bytes([c.buf[5], c.buf[6], c.buf[7], c.buf[8]]) & 0x7fff_ffff;
            let payload: Vec<u8> = c.buf[9..9 + len].to_vec();
            c.buf.drain(..9 + len);
            match (kind, stream) {
                (4, 0) if flags & 1 == 0 => c.send(frame(4, 1, 0, &[])).await,
                (1, 1) => status = payload.first().copied(),
                (0, 1) => data.extend_from_slice(&payload),
                (3, 1) | (7, _) => panic!("stream reset or GOAWAY: {kind} {payload:?}"),
                _ => {}
            }
            if stream == 1 && flags & 1 == 1 && (kind == 0 || kind == 1) {
                return;
            }
        }
    })
    .await;
    // 0x88: `:status 200`, indexed.
    assert_eq!(status, Some(0x88));
    assert_eq!(data, b"GET /split");
}
