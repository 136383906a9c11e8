//! Cases of Go's `net/http/httputil` ReverseProxy test suite (`reverseproxy_test.go`) that apply
//! to a reverse proxy with one fixed upstream, ported end to end: a client (hyper's, or raw
//! bytes on a socket), the proxy, and an upstream (the axum one of `support`, or a raw-TCP one
//! that answers with scripted bytes and tells the test what it saw).
//!
//! Each test names the Go test it comes from and says what a correct proxy must do (RFC 9110 /
//! RFC 9112, and what Go's ReverseProxy does). Go cases about its own hooks (`Director`,
//! `Rewrite`, `ModifyResponse`, `ErrorHandler`, `BufferPool`, `FlushInterval` selection), about
//! its in-process request objects (`TestClonesRequestHeaders`, `TestServeHTTPDeepCopy`), or
//! about joining a base path (`TestJoinURLPath`: an upstream here is scheme, host and port)
//! have nothing to port. WebSocket upgrades are not proxied: what the proxy does with one is
//! pinned below.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use crate::fetched::{bounded, fetch, get, Got};
use crate::scripted::{echo, need, read_chunks, upstream, values_in, wr, Act, Seen};
use crate::support::{budget, client, h2_client, proxied, proxy, TestClient, Upstream};

// ---------------------------------------------------------------------------------------------
// Clients.

/// An answer read off a raw client socket.
#[derive(Debug)]
struct Answer {
    head: String,
    status: u16,
    body: Vec<u8>,
    trailers: String,
}

impl Answer {
    fn values(&self, name: &str) -> Vec<String> {
        values_in(&self.head, name)
    }
}

/// A client that writes raw bytes to the proxy and reads its answers one by one (a 1xx is an
/// answer of its own).
struct Raw {
    socket: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    async fn connect(addr: SocketAddr) -> Raw {
        Raw {
            socket: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.socket.write_all(bytes.as_ref()).await.unwrap();
    }

    /// The next answer, to a request of `method`; `None` if the proxy closed first.
    async fn answer(&mut self, method: &str) -> Option<Answer> {
        let (socket, buf) = (&mut self.socket, &mut self.buf);
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let len = buf.len();
            need(socket, buf, len + 1).await?;
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let status: u16 = head.get(9..12)?.parse().ok()?;
        let length = values_in(&head, "content-length")
            .first()
            .map(|n| n.parse::<usize>().unwrap());
        let chunked = values_in(&head, "transfer-encoding")
            .iter()
            .any(|v| v.eq_ignore_ascii_case("chunked"));
        let (body, trailers, end) =
            if status < 200 || status == 204 || status == 304 || method == "HEAD" {
                (Vec::new(), String::new(), head_end)
            } else if chunked {
                read_chunks(socket, buf, head_end).await?
            } else if let Some(length) = length {
                need(socket, buf, head_end + length).await?;
                (
                    buf[head_end..head_end + length].to_vec(),
                    String::new(),
                    head_end + length,
                )
            } else {
                while need(socket, buf, buf.len() + 1).await.is_some() {}
                (buf[head_end..].to_vec(), String::new(), buf.len())
            };
        buf.drain(..end);
        Some(Answer {
            head,
            status,
            body,
            trailers,
        })
    }

    /// The next answer, within the bound.
    async fn answer_within(&mut self, method: &str) -> Answer {
        bounded("an answer from the proxy", self.answer(method))
            .await
            .expect("the proxy closed the connection without an answer")
    }
}

// ---------------------------------------------------------------------------------------------
// Hop-by-hop headers (TestReverseProxy, TestReverseProxyStripHeadersPresentInConnection,
// TestReverseProxyStripEmptyConnection).

#[tokio::test]
async fn hop_by_hop_request_headers_and_those_connection_names_do_not_reach_the_upstream() {
    // TestReverseProxy: the backend gets no Connection, Proxy-Connection, Upgrade or
    // Transfer-Encoding, and `Te: trailers` as it was. TestReverseProxyStripHeadersPresentIn-
    // Connection: headers the Connection header names (over several lines) are gone too.
    // RFC 9110 7.6.1: a proxy removes Connection, the fields it names, and Proxy-Connection,
    // Keep-Alive, TE, Transfer-Encoding and Upgrade (RFC 9112 for the last).
    let (up, seen) = upstream(|req| vec![Act::Write(echo(req))]).await;
    let (_proxy, addr) = proxied(up).await;
    let mut raw = Raw::connect(addr).await;
    raw.send(
        "GET /hop HTTP/1.1\r\n\
         Host: some-name\r\n\
         Connection: Upgrade, X-Fake-Connection-Token\r\n\
         Connection: X-Some-Conn-Header\r\n\
         X-Some-Conn-Header: should be deleted\r\n\
         X-Fake-Connection-Token: should be deleted\r\n\
         Proxy-Connection: should be deleted\r\n\
         Keep-Alive: timeout=5\r\n\
         Te: trailers\r\n\
         Upgrade: foo\r\n\
         X-End-To-End: kept\r\n\
         Transfer-Encoding: chunked\r\n\
         \r\n\
         0\r\n\r\n",
    )
    .await;
    let answer = raw.answer_within("GET").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let req = &seen.requests()[0];
    for hop in [
        "connection",
        "x-some-conn-header",
        "x-fake-connection-token",
        "proxy-connection",
        "keep-alive",
        "upgrade",
        "transfer-encoding",
    ] {
        assert!(!req.has(hop), "{hop} reached the upstream:\n{}", req.head);
    }
    assert_eq!(req.values("te"), ["trailers"], "{}", req.head);
    assert_eq!(req.values("x-end-to-end"), ["kept"]);
    assert!(req.body.is_empty());
}

#[tokio::test]
async fn hop_by_hop_answer_headers_and_those_connection_names_do_not_reach_the_client() {
    // TestReverseProxy: the client gets X-Foo, both X-Multi-Value, the Set-Cookie, and
    // `Trailers` (not a special name), but not Upgrade or a hop-by-hop header.
    // TestReverseProxyStripHeadersPresentInConnection: nor what the answer's Connection names.
    let (up, _) = upstream(|_| {
        vec![wr("HTTP/1.1 404 Not Found\r\n\
                 Connection: Upgrade, X-Fake-Connection-Token\r\n\
                 Connection: X-Some-Conn-Header\r\n\
                 X-Some-Conn-Header: should be deleted\r\n\
                 X-Fake-Connection-Token: should be deleted\r\n\
                 Keep-Alive: timeout=5\r\n\
                 Proxy-Connection: keep-alive\r\n\
                 Upgrade: foo\r\n\
                 Trailers: not a special header field name\r\n\
                 X-Foo: bar\r\n\
                 X-Multi-Value: foo\r\n\
                 X-Multi-Value: bar\r\n\
                 Set-Cookie: flavor=chocolateChip\r\n\
                 Content-Length: 16\r\n\
                 \r\n\
                 I am the backend")]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    for client in [client(), h2_client()] {
        let got = get(&client, addr, "/").await;
        assert_eq!((got.status, got.text().as_str()), (404, "I am the backend"));
        for hop in [
            "x-some-conn-header",
            "x-fake-connection-token",
            "keep-alive",
            "proxy-connection",
            "upgrade",
        ] {
            assert!(
                got.values(hop).is_empty(),
                "{hop} reached the client: {:?}",
                got.headers
            );
        }
        for connection in got.values("connection") {
            assert!(
                !connection.to_ascii_lowercase().contains("x-"),
                "the upstream's Connection reached the client: {connection}"
            );
        }
        assert_eq!(got.values("x-foo"), ["bar"]);
        assert_eq!(got.values("x-multi-value"), ["foo", "bar"]);
        assert_eq!(got.values("set-cookie"), ["flavor=chocolateChip"]);
        assert_eq!(got.values("trailers"), ["not a special header field name"]);
    }
}

#[tokio::test]
async fn an_empty_connection_header_beside_others_still_has_their_names_removed() {
    // TestReverseProxyStripEmptyConnection: `Connection:` with an empty value, then one naming
    // a header, in the request and in the answer; odd blanks and commas around the names.
    let (up, seen) = upstream(|_| {
        vec![wr("HTTP/1.1 200 OK\r\n\
                 Connection:\r\n\
                 Connection: ,  X-Some-Conn-Header ,\r\n\
                 X-Some-Conn-Header: should be deleted\r\n\
                 Content-Length: 2\r\n\
                 \r\n\
                 ok")]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let mut raw = Raw::connect(addr).await;
    raw.send(
        "GET / HTTP/1.1\r\n\
         Host: some-name\r\n\
         Connection:\r\n\
         Connection: ,  X-Some-Conn-Header ,\r\n\
         X-Some-Conn-Header: should be deleted\r\n\
         \r\n",
    )
    .await;
    let answer = raw.answer_within("GET").await;
    assert_eq!((answer.status, answer.body.as_slice()), (200, &b"ok"[..]));
    assert!(
        answer.values("x-some-conn-header").is_empty(),
        "{}",
        answer.head
    );
    let req = &seen.requests()[0];
    assert!(!req.has("x-some-conn-header"), "{}", req.head);
    assert!(!req.has("connection"), "{}", req.head);
}

// ---------------------------------------------------------------------------------------------
// X-Forwarded-For (TestXForwardedFor, TestReverseProxy).

#[tokio::test]
async fn x_forwarded_for_names_the_client_after_any_earlier_hops() {
    let upstream = Upstream::start().await;
    let (_proxy, addr) = proxied(upstream.addr).await;
    let client = client();
    let got = fetch(&client, addr, "GET", "/none", &[], b"").await;
    assert_eq!(got.status, 200);
    let got = fetch(
        &client,
        addr,
        "GET",
        "/one",
        &[("x-forwarded-for", "client ip")],
        b"",
    )
    .await;
    assert_eq!(got.status, 200);
    let got = fetch(
        &client,
        addr,
        "GET",
        "/two",
        &[
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-for", "10.0.0.2, 10.0.0.3"),
        ],
        b"",
    )
    .await;
    assert_eq!(got.status, 200);
    let seen = upstream.seen();
    let forwarded = |i: usize| -> Vec<String> {
        seen[i]
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(forwarded(0), ["127.0.0.1"]);
    assert_eq!(forwarded(1), ["client ip, 127.0.0.1"]);
    assert_eq!(forwarded(2), ["10.0.0.1, 10.0.0.2, 10.0.0.3, 127.0.0.1"]);
}

#[tokio::test]
async fn x_forwarded_for_keeps_an_earlier_value_with_bytes_past_ascii() {
    // TestXForwardedFor: "X-Forwarded-For didn't contain prior data". A field value may hold
    // obs-text (RFC 9110 5.5); the earlier hops must not be dropped for it.
    let (up, seen) = upstream(|req| vec![Act::Write(echo(req))]).await;
    let (_proxy, addr) = proxied(up).await;
    let mut raw = Raw::connect(addr).await;
    raw.send(b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: caf\xe9 proxy\r\n\r\n")
        .await;
    assert_eq!(raw.answer_within("GET").await.status, 200);
    let req = &seen.requests()[0];
    assert_eq!(
        req.values("x-forwarded-for"),
        ["caf\u{fffd} proxy, 127.0.0.1"],
        "{}",
        req.head
    );
}

// ---------------------------------------------------------------------------------------------
// Query strings (TestReverseProxyQuery, TestReverseProxyQueryParameterSmuggling*).

/// Targets whose every byte RFC 3986 allows where it is (but for Go's `%zz`), some of them odd:
/// each must reach the upstream as it was sent. RFC 9110 7.7: "A proxy MUST NOT modify the
/// absolute-path and query parts of the received target URI when forwarding it to the next
/// inbound server except as required by that forwarding protocol"; and a proxy that reads a
/// query otherwise than its upstream lets a request smuggle parameters past it.
const VERBATIM: [&str; 12] = [
    "/",
    "/?us=er",
    "/p?",
    "/p?&&",
    "/p?a=1&a=%zz&b=3",
    "/p?a=1;b=2",
    "/p?a=1;b=2&c=3;",
    "/p?x=%41%2f%2F&y=/?:@!$'()*+,;=",
    "/p??double",
    "/a%2Fb//c/./d/../e?q=.%2e",
    "/p?sp=a+b&sp2=a%20b",
    "/p;matrix=1/q;x?y;z",
];

#[tokio::test]
async fn odd_queries_and_paths_reach_the_upstream_verbatim_from_an_http11_client() {
    let (up, seen) = upstream(|req| vec![Act::Write(echo(req))]).await;
    let (_proxy, addr) = proxied(up).await;
    let mut raw = Raw::connect(addr).await;
    for target in VERBATIM {
        raw.send(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n"))
            .await;
        let answer = raw.answer_within("GET").await;
        assert_eq!(answer.status, 200, "{target}: {answer:?}");
        assert_eq!(seen.requests().last().unwrap().path(), target);
    }
}

#[tokio::test]
async fn odd_queries_and_paths_reach_the_upstream_verbatim_from_an_http2_client() {
    let (up, seen) = upstream(|req| vec![Act::Write(echo(req))]).await;
    let (_proxy, addr) = proxied(up).await;
    let client = h2_client();
    for target in VERBATIM {
        let got = get(&client, addr, target).await;
        assert_eq!(got.status, 200, "{target}");
        assert_eq!(seen.requests().last().unwrap().path(), target);
    }
}

#[tokio::test]
async fn bytes_a_target_may_not_hold_are_refused_or_forwarded_verbatim() {
    // A `%` without two hex digits after it, unescaped `"`, `{`, `}`, `|`, `^`, `` ` ``, `[`, `]`, `\` and bytes past ASCII are not
    // allowed in a query by RFC 3986, but many clients send them. A proxy may refuse the request
    // (400, RFC 9112 3.2) or pass the target on as it is; it must not rewrite it.
    let (up, seen) = upstream(|req| vec![Act::Write(echo(req))]).await;
    let (_proxy, addr) = proxied(up).await;
    let targets: [&[u8]; 7] = [
        b"/p?%00=%0d%0a&%=%%",
        b"/p?q=\"quoted\"",
        b"/p?json={\"a\":[1,2]}",
        b"/p?pipe=a|b&caret=^&tick=`",
        b"/p?arr[]=1&arr[]=2",
        b"/p?back=\\slash",
        b"/p?utf8=\xc3\xa9t\xc3\xa9",
    ];
    for target in targets {
        let before = seen.requests().len();
        let mut raw = Raw::connect(addr).await;
        let mut request = b"GET ".to_vec();
        request.extend_from_slice(target);
        request.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
        raw.send(&request).await;
        let answer = raw.answer_within("GET").await;
        let shown = String::from_utf8_lossy(target);
        match answer.status {
            400 => assert_eq!(
                seen.requests().len(),
                before,
                "{shown}: refused, yet forwarded"
            ),
            200 => {
                let got = seen.requests().last().unwrap().head.clone();
                let line = got.split("\r\n").next().unwrap().to_string();
                assert_eq!(
                    line.as_bytes(),
                    [b"GET ".as_slice(), target, b" HTTP/1.1"].concat(),
                    "{shown}: rewritten"
                );
            }
            other => panic!("{shown}: {other}: {answer:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Trailers (TestReverseProxy, TestUnannouncedTrailer).

/// An answer with the trailer `X-Trailer`, announced by `Trailer`, and, with `unannounced`,
/// `X-Unannounced-Trailer` too, which it does not announce.
fn with_trailers(announced: bool, unannounced: bool) -> Vec<u8> {
    let mut answer = String::from("HTTP/1.1 200 OK\r\n");
    if announced {
        answer.push_str("Trailer: X-Trailer\r\n");
    }
    answer.push_str("Transfer-Encoding: chunked\r\n\r\n10\r\nI am the backend\r\n0\r\n");
    if announced {
        answer.push_str("X-Trailer: trailer_value\r\n");
    }
    if unannounced {
        answer.push_str("X-Unannounced-Trailer: unannounced_trailer_value\r\n");
    }
    answer.push_str("\r\n");
    answer.into_bytes()
}

#[tokio::test]
async fn announced_trailers_reach_an_http11_client_that_takes_trailers() {
    let (up, _) = upstream(|_| vec![Act::Write(with_trailers(true, false))]).await;
    let (_proxy, addr) = proxied(up).await;
    let got = fetch(&client(), addr, "GET", "/", &[("te", "trailers")], b"").await;
    assert_eq!((got.status, got.text().as_str()), (200, "I am the backend"));
    assert_eq!(
        got.values("trailer"),
        ["X-Trailer"],
        "the Trailer header is passed on"
    );
    assert_eq!(got.trailer("x-trailer").as_deref(), Some("trailer_value"));
    // On the wire: the trailer section after the last chunk.
    let mut raw = Raw::connect(addr).await;
    raw.send("GET / HTTP/1.1\r\nHost: x\r\nTE: trailers\r\n\r\n")
        .await;
    let answer = raw.answer_within("GET").await;
    assert_eq!(answer.body, b"I am the backend");
    assert_eq!(
        values_in(&format!("\r\n{}", answer.trailers), "x-trailer"),
        ["trailer_value"],
        "{answer:?}"
    );
}

#[tokio::test]
async fn trailers_reach_an_http11_client_only_announced_and_only_if_it_sent_te_trailers() {
    // TestReverseProxy and TestUnannouncedTrailer expect more than the proxy does: Go's
    // client, which sends no `TE: trailers`, gets the trailers, announced or not. The proxy's
    // clients are served by hyper's HTTP/1.1 server, which writes a trailer section only to a
    // client that sent `TE: trailers`, and in it only the fields the answer's `Trailer` header
    // names (RFC 9112 7.1.2 lets an intermediary discard trailers). HTTP/2 clients get them
    // all (below). The guide says so; this pins it.
    let (up, _) = upstream(|_| vec![Act::Write(with_trailers(true, true))]).await;
    let (_proxy, addr) = proxied(up).await;
    let got = get(&client(), addr, "/").await;
    assert_eq!((got.status, got.text().as_str()), (200, "I am the backend"));
    assert_eq!(got.values("trailer"), ["X-Trailer"]);
    assert_eq!(got.trailer("x-trailer"), None, "{:?}", got.trailers);
    let got = fetch(&client(), addr, "GET", "/", &[("te", "trailers")], b"").await;
    assert_eq!((got.status, got.text().as_str()), (200, "I am the backend"));
    assert_eq!(got.trailer("x-trailer").as_deref(), Some("trailer_value"));
    assert_eq!(
        got.trailer("x-unannounced-trailer"),
        None,
        "{:?}",
        got.trailers
    );
}

#[tokio::test]
async fn trailers_announced_or_not_reach_an_http2_client() {
    let (up, _) = upstream(|req| match req.path() {
        "/none-announced" => vec![Act::Write(with_trailers(false, true))],
        _ => vec![Act::Write(with_trailers(true, true))],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = h2_client();
    let got = get(&client, addr, "/").await;
    assert_eq!((got.status, got.text().as_str()), (200, "I am the backend"));
    assert_eq!(got.trailer("x-trailer").as_deref(), Some("trailer_value"));
    assert_eq!(
        got.trailer("x-unannounced-trailer").as_deref(),
        Some("unannounced_trailer_value"),
        "trailers: {:?}",
        got.trailers
    );
    let got = get(&client, addr, "/none-announced").await;
    assert_eq!(
        got.trailer("x-unannounced-trailer").as_deref(),
        Some("unannounced_trailer_value"),
        "trailers: {:?}",
        got.trailers
    );
}

// ---------------------------------------------------------------------------------------------
// Informational answers (Test1xxResponses).

#[tokio::test]
async fn a_103_early_hints_answer_is_not_passed_on_and_the_final_answer_is() {
    // Test1xxResponses expects the 103 with its links before the 200, and RFC 9110 15.2 says a
    // proxy MUST forward 1xx answers. The proxy does not: its clients are served by hyper's
    // server, which can send no informational answer but `100 Continue`, so the 103 is passed
    // over and the final answer goes out alone, without the 103's links. The guide says so;
    // this pins it.
    let (up, seen) = upstream(move |_| {
        vec![
            wr("HTTP/1.1 103 Early Hints\r\n\
                Link: </style.css>; rel=preload; as=style\r\n\
                Link: </script.js>; rel=preload; as=script\r\n\r\n"),
            Act::Sleep(20),
            wr("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        ]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let mut raw = Raw::connect(addr).await;
    raw.send("GET /hints HTTP/1.1\r\nHost: x\r\n\r\n").await;
    seen.arrival().await;
    let first = raw.answer_within("GET").await;
    assert_eq!((first.status, first.body.as_slice()), (200, &b"ok"[..]));
    assert!(first.values("link").is_empty(), "{}", first.head);
}

// ---------------------------------------------------------------------------------------------
// Streaming (TestReverseProxyFlushInterval, TestReverseProxyFlushIntervalHeaders,
// TestSelectFlushInterval: an answer of unknown length, or a text/event-stream, is flushed as
// it comes).

/// A head, then three chunks of a body, each written only once the test says the client has
/// had the one before: a proxy that buffers the body (or the head) never passes the step.
async fn stepwise_upstream(
    head: &'static str,
    pieces: [&'static str; 3],
    end: &'static str,
) -> (SocketAddr, Arc<Seen>, Arc<Semaphore>) {
    let go = Arc::new(Semaphore::new(0));
    let hold = go.clone();
    let (up, seen) = upstream(move |_| {
        let mut acts = vec![wr(head)];
        for piece in pieces {
            acts.push(Act::Wait(hold.clone()));
            acts.push(wr(piece));
        }
        acts.push(Act::Wait(hold.clone()));
        if end == "close" {
            acts.push(Act::Close);
        } else {
            acts.push(wr(end));
        }
        acts
    })
    .await;
    (up, seen, go)
}

/// Reads the answer of `/stream` step by step: its head before any body was written, then each
/// piece before the next was.
async fn read_stepwise(client: &TestClient, addr: SocketAddr, go: &Semaphore, want: [&str; 3]) {
    let request = hyper::Request::get(format!("http://{addr}/stream"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let mut response = bounded(
        "the answer's head, before any of its body was written",
        client.request(request),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-head"], "early");
    for piece in want {
        go.add_permits(1);
        let mut got = Vec::new();
        while got.len() < piece.len() {
            let frame = bounded(
                &format!("{piece:?}, before the next piece was written"),
                response.body_mut().frame(),
            )
            .await
            .expect("the body ended early")
            .expect("the body failed");
            if let Ok(data) = frame.into_data() {
                got.extend_from_slice(&data);
            }
        }
        assert_eq!(String::from_utf8_lossy(&got), piece);
    }
    go.add_permits(1);
    let rest = bounded("the body's end", response.into_body().collect())
        .await
        .expect("the body ended cleanly")
        .to_bytes();
    assert!(rest.is_empty(), "{rest:?}");
}

#[tokio::test]
async fn a_chunked_answer_reaches_the_client_chunk_by_chunk() {
    for client in [client(), h2_client()] {
        let (up, _, go) = stepwise_upstream(
            "HTTP/1.1 200 OK\r\nX-Head: early\r\nTransfer-Encoding: chunked\r\n\r\n",
            ["5\r\nfirst\r\n", "6\r\nsecond\r\n", "5\r\nthird\r\n"],
            "0\r\n\r\n",
        )
        .await;
        let (_proxy, addr) = proxied(up).await;
        read_stepwise(&client, addr, &go, ["first", "second", "third"]).await;
    }
}

#[tokio::test]
async fn a_server_sent_event_stream_reaches_the_client_event_by_event() {
    for client in [client(), h2_client()] {
        let (up, _, go) = stepwise_upstream(
            "HTTP/1.1 200 OK\r\nX-Head: early\r\nContent-Type: text/event-stream\r\n\
             Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n",
            [
                "9\r\ndata: 1\n\n\r\n",
                "9\r\ndata: 2\n\n\r\n",
                "9\r\ndata: 3\n\n\r\n",
            ],
            "0\r\n\r\n",
        )
        .await;
        let (_proxy, addr) = proxied(up).await;
        read_stepwise(
            &client,
            addr,
            &go,
            ["data: 1\n\n", "data: 2\n\n", "data: 3\n\n"],
        )
        .await;
    }
}

#[tokio::test]
async fn an_answer_of_known_length_reaches_the_client_as_it_comes() {
    for client in [client(), h2_client()] {
        let (up, _, go) = stepwise_upstream(
            "HTTP/1.1 200 OK\r\nX-Head: early\r\nContent-Length: 16\r\n\r\n",
            ["first", "second", "third"],
            "",
        )
        .await;
        let (_proxy, addr) = proxied(up).await;
        read_stepwise(&client, addr, &go, ["first", "second", "third"]).await;
    }
}

#[tokio::test]
async fn an_answer_framed_by_the_close_reaches_the_client_as_it_comes() {
    for client in [client(), h2_client()] {
        let (up, _, go) = stepwise_upstream(
            "HTTP/1.1 200 OK\r\nX-Head: early\r\n\r\n",
            ["first", "second", "third"],
            "close",
        )
        .await;
        let (_proxy, addr) = proxied(up).await;
        read_stepwise(&client, addr, &go, ["first", "second", "third"]).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Upstreams that fail (TestReverseProxy's hangup, TestReverseProxy_CopyBuffer,
// TestReverseProxy_PanicBodyError, TestReverseProxy_PanicClosesIncomingBody,
// TestReverseProxyErrorHandler's default).

#[tokio::test]
async fn an_upstream_that_hangs_up_without_answering_is_a_502() {
    let (up, _) = upstream(|_| vec![Act::Close]).await;
    let (_proxy, addr) = proxied(up).await;
    for client in [client(), h2_client()] {
        let got = get(&client, addr, "/?mode=hangup").await;
        assert_eq!(got.status, 502);
    }
}

#[tokio::test]
async fn an_upstream_that_cannot_be_reached_is_a_502() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = listener.local_addr().unwrap();
    drop(listener);
    let (_proxy, addr) = proxied(gone).await;
    for client in [client(), h2_client()] {
        let got = get(&client, addr, "/test").await;
        assert_eq!(got.status, 502);
    }
}

/// The client must learn that the body was cut: a body that ends cleanly, short, is taken for
/// the whole (RFC 9112 6.3 and 8: an incomplete message must not be presented as complete; a
/// proxy closes the connection, or resets the HTTP/2 stream). Either the answer's head came and
/// its body failed, or no answer came at all (hyper's server drops the connection without the
/// head when the body fails before the head was written out): both tell the client.
fn assert_cut(got: &Got, what: &str) {
    assert!(
        got.status == 200 || got.status == 0,
        "{what}: {}",
        got.status
    );
    match &got.body {
        Err(_) => {}
        Ok(body) => panic!("{what}: the cut body ended cleanly, as {body:?}"),
    }
}

#[tokio::test]
async fn an_upstream_that_breaks_off_midway_cuts_the_clients_body() {
    // TestReverseProxy_CopyBuffer / PanicBodyError: the backend says twice the length it
    // sends, then ends; the client gets an error, not a short body.
    let out = "this call was relayed by the reverse proxy\n";
    let (up, _) = upstream(move |req| match req.path() {
        "/length" => vec![
            wr(format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{out}",
                out.len() * 2
            )),
            Act::Close,
        ],
        _ => vec![
            wr(format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{out}\r\n",
                out.len()
            )),
            Act::Close,
        ],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    for (name, client) in [("HTTP/1.1", client()), ("HTTP/2", h2_client())] {
        let got = get(&client, addr, "/length").await;
        assert_cut(&got, &format!("{name}, a length not met"));
        let got = get(&client, addr, "/chunks").await;
        assert_cut(&got, &format!("{name}, chunks without the last"));
    }
}

#[tokio::test]
async fn answers_that_break_off_while_large_uploads_go_out_leave_the_proxy_serving() {
    // TestReverseProxy_PanicClosesIncomingBody: two clients post 1 MiB bodies, ten times each,
    // to a backend that answers with a short body at once and hangs up; the proxy survives and
    // answers the next request.
    let (up, _) = upstream(|req| match req.path() {
        "/ok" => vec![Act::Write(echo(req))],
        _ => vec![
            wr("HTTP/1.1 200 OK\r\nContent-Length: 84\r\n\r\nthis call was relayed by the reverse proxy\n"),
            Act::Close,
        ],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let body = vec![b'x'; 1 << 20];
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let client = client();
            for _ in 0..10 {
                let _ = fetch(&client, addr, "POST", "/upload", &[], &body).await;
            }
        }));
    }
    for task in tasks {
        bounded("the uploads", task).await.unwrap();
    }
    let got = get(&client(), addr, "/ok").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/ok"));
}

// ---------------------------------------------------------------------------------------------
// Clients that go away (TestReverseProxyCancellation).

#[tokio::test]
async fn an_http11_client_that_goes_away_before_the_answer_closes_the_upstreams_request() {
    let (up, seen) = upstream(|_| vec![Act::AwaitClose]).await;
    let (_proxy, addr) = proxied(up).await;
    let mut raw = Raw::connect(addr).await;
    raw.send("GET /cancel HTTP/1.1\r\nHost: x\r\n\r\n").await;
    seen.arrival().await;
    drop(raw);
    bounded(
        "the upstream's connection closed after the client went away",
        seen.closes.acquire(),
    )
    .await
    .unwrap()
    .forget();
}

#[tokio::test]
async fn an_http2_client_that_cancels_before_the_answer_closes_the_upstreams_request() {
    let (up, seen) = upstream(|req| match req.path() {
        "/cancel" => vec![Act::AwaitClose],
        _ => vec![Act::Write(echo(req))],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = h2_client();
    let request = {
        let client = client.clone();
        tokio::spawn(async move { get(&client, addr, "/cancel").await.status })
    };
    seen.arrival().await;
    request.abort();
    bounded(
        "the upstream's connection closed after the client's stream was reset",
        seen.closes.acquire(),
    )
    .await
    .unwrap()
    .forget();
    // The client's connection serves on.
    let got = get(&client, addr, "/after").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/after"));
}

#[tokio::test]
async fn a_client_that_goes_away_mid_body_closes_the_upstreams_connection() {
    for h2 in [false, true] {
        let (up, seen) = upstream(|_| {
            vec![
                wr("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n"),
                Act::AwaitClose,
            ]
        })
        .await;
        let (_proxy, addr) = proxied(up).await;
        let client = if h2 { h2_client() } else { client() };
        let request = hyper::Request::get(format!("http://{addr}/mid-body"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let mut response = bounded("the head", client.request(request)).await.unwrap();
        let frame = bounded("the first chunk", response.body_mut().frame())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(frame.into_data().unwrap(), "first");
        drop(response);
        drop(client);
        bounded(
            "the upstream's connection closed after the client left mid-body",
            seen.closes.acquire(),
        )
        .await
        .unwrap()
        .forget();
    }
}

#[tokio::test]
async fn a_client_that_goes_away_mid_upload_closes_the_upstreams_request() {
    // The upstream has the request's head and part of its body when the client leaves: it must
    // not be left waiting for the rest.
    let (up, seen) = upstream(|req| vec![Act::Write(echo(req))]).await;
    let (_proxy, addr) = proxied(up).await;
    let mut raw = Raw::connect(addr).await;
    raw.send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nfirst bytes")
        .await;
    bounded("the request's head at the upstream", seen.heads.acquire())
        .await
        .unwrap()
        .forget();
    drop(raw);
    bounded(
        "the upstream's connection closed after the client left mid-upload",
        seen.closes.acquire(),
    )
    .await
    .unwrap()
    .forget();
}

// ---------------------------------------------------------------------------------------------
// Bodies: none, empty, large (TestReverseProxy_NilBody, TestNilBody, TestReverseProxy_Post).

#[tokio::test]
async fn a_get_without_a_body_reaches_the_upstream_without_one() {
    // TestReverseProxy_NilBody: the outgoing request has no body: no Content-Length, no
    // Transfer-Encoding (RFC 9110 8.6: a GET without content sends no Content-Length).
    let (up, seen) = upstream(|req| vec![Act::Write(echo(req))]).await;
    let (_proxy, addr) = proxied(up).await;
    for client in [client(), h2_client()] {
        let got = get(&client, addr, "/nil").await;
        assert_eq!((got.status, got.text().as_str()), (200, "/nil"));
        let req = seen.requests().pop().unwrap();
        assert!(!req.has("content-length"), "{}", req.head);
        assert!(!req.has("transfer-encoding"), "{}", req.head);
    }
}

#[tokio::test]
async fn an_http10_request_without_host_or_body_is_answered() {
    // TestNilBody: `GET / HTTP/1.0` with nothing else.
    let (up, seen) = upstream(|_| vec![wr("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi")]).await;
    let (_proxy, addr) = proxied(up).await;
    let mut raw = Raw::connect(addr).await;
    raw.send("GET / HTTP/1.0\r\n\r\n").await;
    let answer = raw.answer_within("GET").await;
    assert_eq!((answer.status, answer.body.as_slice()), (200, &b"hi"[..]));
    let req = &seen.requests()[0];
    assert_eq!(req.values("host"), [up.to_string()]);
}

#[tokio::test]
async fn empty_answers_stay_empty_and_an_empty_post_says_its_length() {
    let (up, seen) = upstream(|req| match req.path() {
        "/zero" => vec![wr("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")],
        "/no-chunks" => vec![wr(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        )],
        _ => vec![Act::Write(echo(req))],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    for client in [client(), h2_client()] {
        let got = get(&client, addr, "/zero").await;
        assert_eq!((got.status, got.text().as_str()), (200, ""));
        assert_eq!(got.values("content-length"), ["0"]);
        let got = get(&client, addr, "/no-chunks").await;
        assert_eq!((got.status, got.text().as_str()), (200, ""));
        let got = fetch(&client, addr, "POST", "/empty-post", &[], b"").await;
        assert_eq!((got.status, got.text().as_str()), (200, "/empty-post"));
        let req = seen.requests().pop().unwrap();
        assert_eq!(req.values("content-length"), ["0"], "{}", req.head);
        assert!(!req.has("transfer-encoding"), "{}", req.head);
    }
}

#[tokio::test]
async fn a_one_mebibyte_post_reaches_the_upstream_whole() {
    // TestReverseProxy_Post.
    let upstream = Upstream::start().await;
    let (_proxy, addr) = proxied(upstream.addr).await;
    let body: Vec<u8> = (0..1 << 20).map(|i| b'a' + (i % 26) as u8).collect();
    for client in [client(), h2_client()] {
        let got = fetch(&client, addr, "POST", "/post", &[], &body).await;
        assert_eq!((got.status, got.text().as_str()), (200, "POST /post"));
        let seen = upstream.seen().pop().unwrap();
        assert_eq!(seen.body.len(), body.len());
        assert!(seen.body == body, "the upstream read another body");
    }
}

// ---------------------------------------------------------------------------------------------
// HEAD, 204 and 304.

#[tokio::test]
async fn a_head_answer_keeps_its_length_and_headers_and_has_no_body() {
    let (up, seen) = upstream(|req| match req.method() {
        "HEAD" => vec![wr(
            "HTTP/1.1 200 OK\r\nContent-Length: 16\r\nContent-Type: text/plain\r\nETag: \"v1\"\r\n\r\n",
        )],
        _ => vec![Act::Write(echo(req))],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    // HTTP/1.1, on one connection: no body bytes are left to be taken for the next answer.
    let mut raw = Raw::connect(addr).await;
    raw.send("HEAD /doc HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let answer = raw.answer_within("HEAD").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.values("content-length"), ["16"], "{}", answer.head);
    assert_eq!(answer.values("content-type"), ["text/plain"]);
    assert_eq!(answer.values("etag"), ["\"v1\""]);
    assert!(answer.values("transfer-encoding").is_empty());
    raw.send("GET /after-head HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let answer = raw.answer_within("GET").await;
    assert_eq!(
        (answer.status, answer.body.as_slice()),
        (200, &b"/after-head"[..])
    );
    assert_eq!(seen.requests()[0].method(), "HEAD");
    // HTTP/2.
    let got = fetch(&h2_client(), addr, "HEAD", "/doc", &[], b"").await;
    assert_eq!((got.status, got.text().as_str()), (200, ""));
    assert_eq!(got.values("content-length"), ["16"]);
    assert_eq!(got.values("etag"), ["\"v1\""]);
}

#[tokio::test]
async fn no_content_and_not_modified_answers_pass_without_a_body() {
    let (up, _) = upstream(|req| match req.path() {
        "/204" => vec![wr("HTTP/1.1 204 No Content\r\nX-Kept: 204\r\n\r\n")],
        "/304" => vec![wr(
            "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=60\r\n\r\n",
        )],
        _ => vec![Act::Write(echo(req))],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let mut raw = Raw::connect(addr).await;
    raw.send("GET /204 HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let answer = raw.answer_within("GET").await;
    assert_eq!(answer.status, 204);
    assert_eq!(answer.values("x-kept"), ["204"]);
    // RFC 9110 8.6 and 6.4.1: a 204 has no content, and no Content-Length or
    // Transfer-Encoding.
    assert!(
        answer.values("content-length").is_empty(),
        "{}",
        answer.head
    );
    assert!(
        answer.values("transfer-encoding").is_empty(),
        "{}",
        answer.head
    );
    raw.send("GET /304 HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"v1\"\r\n\r\n")
        .await;
    let answer = raw.answer_within("GET").await;
    assert_eq!(answer.status, 304);
    assert_eq!(answer.values("etag"), ["\"v1\""]);
    assert_eq!(answer.values("cache-control"), ["max-age=60"]);
    assert!(
        answer.values("transfer-encoding").is_empty(),
        "{}",
        answer.head
    );
    raw.send("GET /after HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let answer = raw.answer_within("GET").await;
    assert_eq!(
        (answer.status, answer.body.as_slice()),
        (200, &b"/after"[..])
    );
    let client = h2_client();
    let got = get(&client, addr, "/204").await;
    assert_eq!((got.status, got.text().as_str()), (204, ""));
    assert_eq!(got.values("x-kept"), ["204"]);
    let got = get(&client, addr, "/304").await;
    assert_eq!((got.status, got.text().as_str()), (304, ""));
    assert_eq!(got.values("etag"), ["\"v1\""]);
}

// ---------------------------------------------------------------------------------------------
// Headers kept as they are (TestUserAgentHeader, TestReverseProxy).

#[tokio::test]
async fn a_user_agent_is_neither_added_nor_changed() {
    // TestUserAgentHeader: a request without User-Agent reaches the backend without one (Go's
    // transport would add its own), one with it, with it as it was. For both upstream clients.
    for extra in ["", "upstream_http2 = true"] {
        let upstream = Upstream::start().await;
        let (running, _) = proxy(&budget(
            "records",
            &upstream.url(),
            &format!("max_concurrent = 4\n{extra}"),
        ))
        .await;
        let addr = running.local_addr("records").unwrap();
        let client = client();
        let got = fetch(
            &client,
            addr,
            "GET",
            "/ua",
            &[("user-agent", "explicit UA")],
            b"",
        )
        .await;
        assert_eq!(got.status, 200);
        let got = fetch(&client, addr, "GET", "/noua", &[], b"").await;
        assert_eq!(got.status, 200);
        let seen = upstream.seen();
        assert_eq!(seen[0].headers["user-agent"], "explicit UA", "{extra}");
        assert!(
            !seen[1].headers.contains_key("user-agent"),
            "{extra}: a User-Agent was added: {:?}",
            seen[1].headers
        );
    }
}

#[tokio::test]
async fn repeated_answer_headers_keep_every_value_in_order() {
    // TestReverseProxy: every Set-Cookie, every value of a repeated header, in order (RFC 9110
    // 5.3: their order is significant; Set-Cookie cannot be joined into one line).
    let (up, _) = upstream(|_| {
        vec![wr("HTTP/1.1 200 OK\r\n\
                 Set-Cookie: a=1; Path=/\r\n\
                 X-Multi-Value: foo\r\n\
                 Set-Cookie: b=2; Expires=Wed, 21 Oct 2015 07:28:00 GMT\r\n\
                 X-Multi-Value: bar\r\n\
                 Set-Cookie: c=3; HttpOnly\r\n\
                 Vary: Accept\r\n\
                 Vary: Accept-Encoding\r\n\
                 Content-Length: 2\r\n\
                 \r\n\
                 ok")]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    for client in [client(), h2_client()] {
        let got = get(&client, addr, "/cookies").await;
        assert_eq!((got.status, got.text().as_str()), (200, "ok"));
        assert_eq!(
            got.values("set-cookie"),
            [
                "a=1; Path=/",
                "b=2; Expires=Wed, 21 Oct 2015 07:28:00 GMT",
                "c=3; HttpOnly"
            ]
        );
        assert_eq!(got.values("x-multi-value"), ["foo", "bar"]);
        assert_eq!(got.values("vary"), ["Accept", "Accept-Encoding"]);
    }
}

#[tokio::test]
async fn a_known_length_is_kept_and_an_unknown_one_is_not_made_up() {
    let (up, _) = upstream(|req| match req.path() {
        "/length" => vec![wr("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world")],
        _ => vec![wr(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        )],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let mut raw = Raw::connect(addr).await;
    raw.send("GET /length HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let answer = raw.answer_within("GET").await;
    assert_eq!(answer.values("content-length"), ["11"], "{}", answer.head);
    assert!(
        answer.values("transfer-encoding").is_empty(),
        "{}",
        answer.head
    );
    assert_eq!(answer.body, b"hello world");
    raw.send("GET /chunks HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let answer = raw.answer_within("GET").await;
    assert!(
        answer.values("content-length").is_empty(),
        "{}",
        answer.head
    );
    assert_eq!(answer.values("transfer-encoding"), ["chunked"]);
    assert_eq!(answer.body, b"hello world");
    let got = get(&h2_client(), addr, "/length").await;
    assert_eq!((got.status, got.text().as_str()), (200, "hello world"));
    assert_eq!(got.values("content-length"), ["11"]);
}

#[tokio::test]
async fn very_large_headers_pass_both_ways() {
    // A request head of 24 KiB (under the 32 KiB the proxy always takes) and an answer head of
    // 48 KiB (under the 64 KiB it reads), each header whole.
    let big_request = "r".repeat(24 * 1024);
    let big_answer = "a".repeat(48 * 1024);
    let small_answer = "s".repeat(12 * 1024);
    let (answer_value, small_value) = (big_answer.clone(), small_answer.clone());
    let (up, seen) = upstream(move |req| {
        let value = if req.path() == "/small" {
            &small_value
        } else {
            &answer_value
        };
        vec![wr(format!(
            "HTTP/1.1 200 OK\r\nX-Big: {value}\r\nContent-Length: 2\r\n\r\nok"
        ))]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let got = fetch(
        &client(),
        addr,
        "GET",
        "/big",
        &[("x-big", big_request.as_str())],
        b"",
    )
    .await;
    assert_eq!((got.status, got.text().as_str()), (200, "ok"));
    assert_eq!(
        seen.requests()[0].values("x-big"),
        std::slice::from_ref(&big_request)
    );
    assert_eq!(got.values("x-big"), [big_answer]);
    // HTTP/2 (hyper's client takes header lists of 16 KiB).
    let got = get(&h2_client(), addr, "/small").await;
    assert_eq!((got.status, got.text().as_str()), (200, "ok"));
    assert_eq!(got.values("x-big"), [small_answer]);
}

#[tokio::test]
async fn unusual_status_codes_and_the_upstreams_date_pass_through() {
    // TestReverseProxyErrorHandler's `modifyresponse_noerr`: a status of 345 reaches the client
    // (RFC 9110 15: a recipient understands an unknown code by its class). The upstream's Date
    // is the message's (RFC 9110 6.6.1); a proxy adds one only when there is none.
    let (up, _) = upstream(|req| {
        let code = &req.path()[1..];
        vec![wr(format!(
            "HTTP/1.1 {code} Whatever\r\nDate: Tue, 15 Nov 1994 08:12:31 GMT\r\n\
             Server: backend/1.0\r\nContent-Length: 3\r\n\r\n{code}"
        ))]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    for client in [client(), h2_client()] {
        for code in ["345", "299", "418", "599"] {
            let got = get(&client, addr, &format!("/{code}")).await;
            assert_eq!(got.status.to_string(), code);
            assert_eq!(got.text(), code);
            assert_eq!(got.values("date"), ["Tue, 15 Nov 1994 08:12:31 GMT"]);
            assert_eq!(got.values("server"), ["backend/1.0"]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Host (TestReverseProxy: the backend gets the client's Host, as `NewSingleHostReverseProxy`
// keeps it; here that is `preserve_host = true`, and the default names the upstream).

#[tokio::test]
async fn host_names_the_upstream_unless_preserve_host_keeps_the_clients() {
    let (up, seen) = upstream(|req| vec![Act::Write(echo(req))]).await;
    let (_plain, plain) = proxied(up).await;
    let (keeping_proxy, _) = proxy(&budget(
        "records",
        &format!("http://{up}"),
        "max_concurrent = 4\npreserve_host = true",
    ))
    .await;
    let keeping = keeping_proxy.local_addr("records").unwrap();

    let mut raw = Raw::connect(plain).await;
    raw.send("GET /h HTTP/1.1\r\nHost: some-name\r\n\r\n").await;
    assert_eq!(raw.answer_within("GET").await.status, 200);
    assert_eq!(
        seen.requests().pop().unwrap().values("host"),
        [up.to_string()]
    );

    let mut raw = Raw::connect(keeping).await;
    raw.send("GET /h HTTP/1.1\r\nHost: some-name\r\n\r\n").await;
    assert_eq!(raw.answer_within("GET").await.status, 200);
    assert_eq!(seen.requests().pop().unwrap().values("host"), ["some-name"]);

    // An HTTP/2 client names the host in `:authority`.
    let got = get(&h2_client(), keeping, "/h2").await;
    assert_eq!(got.status, 200);
    assert_eq!(
        seen.requests().pop().unwrap().values("host"),
        [keeping.to_string()]
    );
    let got = get(&h2_client(), plain, "/h2").await;
    assert_eq!(got.status, 200);
    assert_eq!(
        seen.requests().pop().unwrap().values("host"),
        [up.to_string()]
    );
}

// ---------------------------------------------------------------------------------------------
// Upgrades (TestReverseProxyWebSocket, TestReverseProxyWebSocketCancellation). Go's proxy
// switches protocols; this one does not proxy upgrades. What it does instead: it forwards the
// request as a plain one, without `Upgrade` (a hop-by-hop header, RFC 9110 7.8: a proxy that
// does not take part in the upgrade removes it), and an upstream that switches anyway gets
// the client a 502, never a 101 on a connection that goes on as HTTP.

#[tokio::test]
async fn a_websocket_upgrade_is_forwarded_as_a_plain_request_and_a_switch_is_a_502() {
    let (up, seen) = upstream(|req| match req.path() {
        "/switch" => vec![wr(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: WebSocket\r\n\r\n",
        )],
        _ => vec![wr(
            "HTTP/1.1 400 Bad Request\r\nContent-Length: 18\r\n\r\nunexpected request",
        )],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let upgrade = "Host: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
                   Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    let mut raw = Raw::connect(addr).await;
    raw.send(format!("GET /plain HTTP/1.1\r\n{upgrade}")).await;
    let answer = raw.answer_within("GET").await;
    assert_eq!(
        (answer.status, answer.body.as_slice()),
        (400, &b"unexpected request"[..])
    );
    let req = seen.requests().pop().unwrap();
    assert!(!req.has("upgrade"), "{}", req.head);
    assert!(!req.has("connection"), "{}", req.head);

    let mut raw = Raw::connect(addr).await;
    raw.send(format!("GET /switch HTTP/1.1\r\n{upgrade}")).await;
    let answer = raw.answer_within("GET").await;
    assert_eq!(answer.status, 502, "{answer:?}");
}
