//! Cases of hyper's own HTTP/1 client test suite (`tests/client.rs`, the response decoder tests
//! of `src/proto/h1/role.rs` and the chunk decoder tests of `src/proto/h1/decode.rs`), ported
//! end to end: a client, the proxy, and a raw-TCP upstream that answers with scripted bytes.
//! Each test says what a proxy must do with the upstream's answer (RFC 9112 / RFC 9110): pass
//! it through, answer 502, cut the body, and whether the upstream connection may carry another
//! request.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::fetched::{bounded, fetch, get};
use crate::scripted::{echo, line, need, upstream, wr, Act};
use crate::support::{client, proxied};

// ---------------------------------------------------------------------------------------------
// Clients.

/// A raw answer read off a client's socket: its head, and its body (by `content-length`, in
/// chunks, or none for a 1xx, 204 or 304).
async fn read_answer(socket: &mut TcpStream, buf: &mut Vec<u8>) -> (String, Vec<u8>) {
    bounded("an answer from the proxy", async {
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let len = buf.len();
            need(socket, buf, len + 1).await.expect("the proxy closed");
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let lower = head.to_ascii_lowercase();
        let status: u16 = head[9..12].parse().unwrap();
        let length = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|n| n.trim().parse::<usize>().unwrap());
        let mut body = Vec::new();
        let end = if status < 200 || status == 204 || status == 304 {
            head_end
        } else if let Some(length) = length {
            need(socket, buf, head_end + length).await.expect("closed");
            body.extend_from_slice(&buf[head_end..head_end + length]);
            head_end + length
        } else if lower.contains("transfer-encoding: chunked") {
            let mut at = head_end;
            loop {
                let eol = line(socket, buf, at).await.expect("closed");
                let text = String::from_utf8_lossy(&buf[at..eol]).into_owned();
                let size = usize::from_str_radix(text.trim(), 16).unwrap();
                at = eol + 2;
                if size == 0 {
                    loop {
                        let eol = line(socket, buf, at).await.expect("closed");
                        let empty = eol == at;
                        at = eol + 2;
                        if empty {
                            break;
                        }
                    }
                    break at;
                }
                need(socket, buf, at + size + 2).await.expect("closed");
                body.extend_from_slice(&buf[at..at + size]);
                at += size + 2;
            }
        } else {
            // Until the proxy closes.
            while need(socket, buf, buf.len() + 1).await.is_some() {}
            buf.len()
        };
        buf.drain(..end);
        (head, body)
    })
    .await
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

// ---------------------------------------------------------------------------------------------
// Chunked answers.

#[tokio::test]
async fn chunk_extensions_uppercase_hex_and_zero_size_forms_pass_and_the_connection_is_reused() {
    // decode.rs `test_read_chunk_size`: all of these are valid chunk size lines.
    let (up, seen) = upstream(|req| {
        let body: &[u8] = match req.path() {
            "/ext" => b"5;name=value\r\nhello\r\na;ext name=value\r\n0123456789\r\n3   ; extension=123\r\nabc\r\n1;;;  ;\r\nx\r\n2; extension...\r\nyz\r\n0;last=1\r\n\r\n",
            "/hex" => b"A\r\n0123456789\r\n00B\r\nabcdefghijk\r\n1F\r\n0123456789012345678901234567890\r\n00\r\n\r\n",
            "/blanks" => b"5   \r\nhello\r\n3\t\r\nabc\r\n000 \r\n\r\n",
            "/upper" => b"2\r\nUP\r\n0\r\n\r\n",
            _ => b"0\r\n\r\n",
        };
        let coding = if req.path() == "/upper" { "CHUNKED" } else { "chunked" };
        let mut answer =
            format!("HTTP/1.1 200 OK\r\ntransfer-encoding: {coding}\r\n\r\n").into_bytes();
        answer.extend_from_slice(body);
        vec![Act::Write(answer)]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for _ in 0..2 {
        let got = get(&client, addr, "/ext").await;
        assert_eq!(
            (got.status, got.text().as_str()),
            (200, "hello0123456789abcxyz")
        );
        let got = get(&client, addr, "/hex").await;
        assert_eq!(
            (got.status, got.text().as_str()),
            (200, "0123456789abcdefghijk0123456789012345678901234567890")
        );
        let got = get(&client, addr, "/blanks").await;
        assert_eq!((got.status, got.text().as_str()), (200, "helloabc"));
        let got = get(&client, addr, "/empty").await;
        assert_eq!((got.status, got.text().as_str()), (200, ""));
        let got = get(&client, addr, "/upper").await;
        assert_eq!((got.status, got.text().as_str()), (200, "UP"));
    }
    assert_eq!(seen.accepted(), 1, "every answer was read to its end");
}

#[tokio::test]
async fn a_chunk_size_padded_with_zeros_past_16_digits_is_read() {
    // RFC 9112 7.1: chunk-size = 1*HEXDIG, with no bound on its digits; hyper reads any number
    // of leading zeros (it bounds the value, not the digits).
    let (up, _) = upstream(|_| {
        vec![wr(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n00000000000000000005\r\nhello\r\n00000000000000000000\r\n\r\n",
        )]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let got = get(&client(), addr, "/padded").await;
    assert_eq!(
        got.body.as_deref().map_err(|e| e.as_str()),
        Ok(&b"hello"[..])
    );
    assert_eq!(got.status, 200);
}

#[tokio::test]
async fn large_chunks_written_in_pieces_pass_whole_and_the_connection_is_reused() {
    let (up, seen) = upstream(|_| {
        let mega = vec![b'm'; 0x10_0000];
        let big = vec![b'f'; 0xFFFF];
        let mut acts = vec![wr(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n100000\r\n",
        )];
        for piece in mega.chunks(300_000) {
            acts.push(Act::Write(piece.to_vec()));
            acts.push(Act::Sleep(5));
        }
        acts.push(wr("\r\nFFFF\r\n"));
        acts.push(Act::Write(big));
        acts.push(wr("\r\n0\r\n\r\n"));
        acts
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for _ in 0..2 {
        let got = get(&client, addr, "/large").await;
        assert_eq!(got.status, 200);
        let body = got.body.unwrap();
        assert_eq!(body.len(), 0x10_0000 + 0xFFFF);
        assert!(body[..0x10_0000].iter().all(|b| *b == b'm'));
        assert!(body[0x10_0000..].iter().all(|b| *b == b'f'));
    }
    assert_eq!(seen.accepted(), 1);
}

#[tokio::test]
async fn a_malformed_chunk_cuts_the_body_and_the_connection_is_not_reused() {
    // decode.rs `test_read_chunk_size` errors; the head (200, chunked) is passed on before the
    // bad chunk comes, so the client must see its body fail, not end.
    const BAD: [&str; 9] = [
        "X\r\n",
        "1X\r\nx\r\n",
        "-1\r\n",
        "1 A\r\nA\r\n",
        "f0000000000000003\r\n",
        "1;reject\nnewlines\r\nx\r\n",
        "\r\n",
        "1\r\nxAB",
        " 1\r\nx\r\n",
    ];
    let (up, seen) = upstream(|req| {
        let Some(n) = req.path().strip_prefix("/bad/") else {
            return vec![Act::Write(echo(req))];
        };
        let bad = BAD[n.parse::<usize>().unwrap()];
        vec![wr(format!(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n{bad}"
        ))]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for (n, bad) in BAD.iter().enumerate() {
        let got = get(&client, addr, &format!("/bad/{n}")).await;
        // The head may have gone out (200), or not yet (the connection closed instead).
        assert!(matches!(got.status, 0 | 200), "{bad:?}: {}", got.status);
        assert!(
            got.body.is_err(),
            "{bad:?}: body ended cleanly: {:?}",
            got.body
        );
    }
    let got = get(&client, addr, "/fine").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/fine"));
    assert_eq!(seen.accepted(), BAD.len() + 1);
}

#[tokio::test]
async fn a_chunked_answers_trailers_reach_a_client_that_takes_them() {
    // client.rs `client_res_body_chunked_with_trailer`: hyper's client hands the trailers over.
    // A client that sent `TE: trailers` must get them from the proxy too.
    let (up, seen) = upstream(|_| {
        vec![wr(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: chunky-trailer\r\n\r\n5\r\nhello\r\n0\r\nchunky-trailer: header data\r\n\r\n",
        )]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    // An HTTP/2 client gets them: the proxy's client read them.
    let got = fetch(
        &crate::support::h2_client(),
        addr,
        "GET",
        "/",
        &[("te", "trailers")],
        b"",
    )
    .await;
    assert_eq!((got.status, got.text().as_str()), (200, "hello"));
    let trailers = got.trailers.expect("the upstream's trailers, over HTTP/2");
    assert_eq!(trailers["chunky-trailer"], "header data");
    // An HTTP/1.1 client must get them too.
    let got = fetch(&client(), addr, "GET", "/", &[("te", "trailers")], b"").await;
    assert_eq!((got.status, got.text().as_str()), (200, "hello"));
    let head = &seen.requests()[1].head.to_ascii_lowercase();
    assert!(head.contains("te: trailers\r\n"), "{head}");
    let trailers = got
        .trailers
        .expect("the upstream's trailers, over HTTP/1.1");
    assert_eq!(trailers["chunky-trailer"], "header data");
}

#[tokio::test]
async fn pathological_trailers_change_nothing_of_the_framing() {
    // client.rs `client_res_body_chunked_with_pathological_trailers`: trailers that name
    // framing headers are trailers, nothing more.
    let (up, seen) = upstream(|req| {
        if req.path() != "/" {
            return vec![Act::Write(echo(req))];
        }
        vec![wr(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: chunky-trailer1\r\n\r\n5\r\nhello\r\n0\r\nchunky-trailer1: header data1\r\nsneaky-trailer: not in trailer header\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\ntrailer: foo\r\n\r\n",
        )]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    let got = fetch(&client, addr, "GET", "/", &[("te", "trailers")], b"").await;
    assert_eq!((got.status, got.text().as_str()), (200, "hello"));
    assert!(got.headers.get("content-length").is_none());
    let got = get(&client, addr, "/next").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/next"));
    assert_eq!(seen.accepted(), 1);
}

#[tokio::test]
async fn trailers_of_twelve_kib_are_read() {
    // decode.rs `TRAILER_LIMIT`: hyper reads trailer sections of up to 16 KiB (a gRPC
    // `grpc-status-details-bin` can be several KiB).
    let (up, _) = upstream(|_| {
        // In two writes: the section is not all there when the first part is read.
        let big = "a".repeat(12 * 1024);
        let answer = format!(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nx-big: {big}\r\n\r\n"
        );
        let (first, rest) = answer.split_at(answer.len() - 2 * 1024);
        vec![wr(first), Act::Sleep(50), wr(rest)]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let got = get(&client(), addr, "/big-trailers").await;
    assert_eq!(
        got.body.as_deref().map_err(|e| e.as_str()),
        Ok(&b"hello"[..])
    );
    assert_eq!(got.status, 200);
}

// ---------------------------------------------------------------------------------------------
// Content-Length.

#[tokio::test]
async fn the_same_length_twice_frames_the_body_and_the_client_sees_one_length() {
    // role.rs `test_decoder_response`: two equal Content-Length fields are one length.
    let (up, seen) = upstream(|_| {
        vec![wr(
            "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 3\r\n\r\nabc",
        )]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for _ in 0..2 {
        let got = get(&client, addr, "/twice").await;
        assert_eq!((got.status, got.text().as_str()), (200, "abc"));
        assert_eq!(got.values("content-length"), ["3"]);
    }
    assert_eq!(seen.accepted(), 1);
}

#[tokio::test]
async fn a_length_listed_twice_on_one_line_is_forwarded_as_one_number() {
    // client.rs `client_handles_contentlength_values_on_same_line`. RFC 9110 8.6: a sender
    // MUST NOT forward a Content-Length that is not one number; a list of one value repeated
    // may be taken, replaced by that value (or the answer refused, 502).
    let (up, _) = upstream(|req| {
        if req.path() != "/foo" {
            return vec![Act::Write(echo(req))];
        }
        vec![wr(
            "HTTP/1.1 200 OK\r\nContent-Length: 3,3\r\nContent-Length: 3,3\r\n\r\nabc\r\n",
        )]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    let got = get(&client, addr, "/foo").await;
    // The `\r\n` after the body is more than the answer: not the start of the next one.
    let next = get(&client, addr, "/next").await;
    assert_eq!((next.status, next.text().as_str()), (200, "/next"));
    if got.status != 502 {
        assert_eq!((got.status, got.text().as_str()), (200, "abc"));
        assert_eq!(got.values("content-length"), ["3"], "forwarded as it came");
    }
}

#[tokio::test]
async fn a_length_with_leading_zeros_or_blanks_frames_the_body() {
    let (up, seen) = upstream(|req| {
        let length = match req.path() {
            "/zeros" => "0003",
            _ => "   3  ",
        };
        vec![wr(format!(
            "HTTP/1.1 200 OK\r\ncontent-length:{length}\r\n\r\nabc"
        ))]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for path in ["/zeros", "/blanks", "/zeros"] {
        let got = get(&client, addr, path).await;
        assert_eq!((got.status, got.text().as_str()), (200, "abc"), "{path}");
    }
    assert_eq!(seen.accepted(), 1);
}

#[tokio::test]
async fn an_invalid_length_is_a_502_and_the_connection_is_not_reused() {
    // role.rs `test_decoder_response` (`+8`, 8 and 9) and headers.rs `from_digits`. RFC 9112
    // 6.3: a proxy MUST close the connection, discard the answer and send 502.
    const BAD: [&str; 9] = [
        "content-length: +3\r\n",
        "content-length: 3a\r\n",
        "content-length: -3\r\n",
        "content-length:\r\n",
        "content-length: 3 4\r\n",
        "content-length: 0x3\r\n",
        "content-length: 99999999999999999999\r\n",
        "content-length: 3\r\ncontent-length: 4\r\n",
        "content-length: 3, 4\r\n",
    ];
    let (up, seen) = upstream(|req| {
        let Some(n) = req.path().strip_prefix("/bad/") else {
            return vec![Act::Write(echo(req))];
        };
        let bad = BAD[n.parse::<usize>().unwrap()];
        vec![wr(format!("HTTP/1.1 200 OK\r\n{bad}\r\nabcd"))]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for (n, bad) in BAD.iter().enumerate() {
        let got = get(&client, addr, &format!("/bad/{n}")).await;
        assert_eq!(got.status, 502, "{bad:?}");
    }
    let got = get(&client, addr, "/fine").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/fine"));
    assert_eq!(seen.accepted(), BAD.len() + 1);
}

// ---------------------------------------------------------------------------------------------
// HEAD, 204, 304.

#[tokio::test]
async fn a_body_after_an_answer_that_has_none_is_not_taken_as_the_next_answer() {
    // client.rs `client_head_ignores_body`; role.rs: 204 and 304 never have a body. What the
    // upstream sent after such an answer must not be read as the answer to the next request.
    let (up, seen) = upstream(|req| match (req.method(), req.path()) {
        ("HEAD", _) => vec![wr("HTTP/1.1 200 OK\r\ncontent-Length: 11\r\n\r\nHello World")],
        (_, "/204") => vec![wr(
            "HTTP/1.1 204 No Content\r\ncontent-length: 11\r\n\r\nHTTP/1.1 200 OK\r\n",
        )],
        (_, "/304") => vec![wr(
            "HTTP/1.1 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        )],
        _ => vec![Act::Write(echo(req))],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    let got = fetch(&client, addr, "HEAD", "/head", &[], b"").await;
    assert_eq!((got.status, got.text().as_str()), (200, ""));
    assert_eq!(got.values("content-length"), ["11"]);
    let got = get(&client, addr, "/after-head").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/after-head"));
    let got = get(&client, addr, "/204").await;
    assert_eq!((got.status, got.text().as_str()), (204, ""));
    let got = get(&client, addr, "/after-204").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/after-204"));
    let got = get(&client, addr, "/304").await;
    assert_eq!((got.status, got.text().as_str()), (304, ""));
    let got = get(&client, addr, "/after-304").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/after-304"));
    // Each connection that carried more than its answer was left.
    assert_eq!(seen.accepted(), 4);
}

#[tokio::test]
async fn answers_without_a_body_leave_the_connection_reusable() {
    let (up, seen) = upstream(|req| match (req.method(), req.path()) {
        ("HEAD", _) => vec![wr("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")],
        (_, "/204") => vec![wr("HTTP/1.1 204 No Content\r\n\r\n")],
        (_, "/304") => vec![wr(
            "HTTP/1.1 304 Not Modified\r\ncontent-length: 99\r\netag: \"x\"\r\n\r\n",
        )],
        _ => vec![Act::Write(echo(req))],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for _ in 0..2 {
        let got = fetch(&client, addr, "HEAD", "/head", &[], b"").await;
        assert_eq!((got.status, got.text().as_str()), (200, ""));
        let got = get(&client, addr, "/204").await;
        assert_eq!((got.status, got.text().as_str()), (204, ""));
        let got = get(&client, addr, "/304").await;
        assert_eq!((got.status, got.text().as_str()), (304, ""));
        let got = get(&client, addr, "/x").await;
        assert_eq!((got.status, got.text().as_str()), (200, "/x"));
    }
    assert_eq!(seen.accepted(), 1);
}

// ---------------------------------------------------------------------------------------------
// Informational answers.

#[tokio::test]
async fn informational_answers_before_the_answer_are_passed_over_however_they_come() {
    // role.rs: 100 and 102..=199 are skipped; client.rs `client_100_continue`.
    let (up, seen) = upstream(|_| {
        vec![
            wr("HTTP/1.1 100 Continue\r\n\r\n"),
            Act::Sleep(5),
            wr("HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early"),
            Act::Sleep(5),
            wr(" Hints\r\nlink: </a.css>\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </b.css>\r\n\r\nHTTP/1.1 199 Whatever\r\n\r\n"),
            Act::Sleep(5),
            Act::Write(OK.to_vec()),
        ]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for _ in 0..2 {
        let got = get(&client, addr, "/hints").await;
        assert_eq!((got.status, got.text().as_str()), (200, "ok"));
    }
    assert_eq!(seen.accepted(), 1);
}

#[tokio::test]
async fn an_informational_answer_without_a_final_one_or_an_unasked_switch_is_a_502() {
    // client.rs `client_100_then_http09`; role.rs: 101 is an upgrade, which the proxy did not
    // ask for.
    let (up, _) = upstream(|req| match req.path() {
        "/then-close" => vec![wr("HTTP/1.1 100 Continue\r\n\r\n"), Act::Close],
        "/then-http09" => vec![
            wr("HTTP/1.1 100 Continue\r\n\r\nMmmmh, baguettes."),
            Act::Close,
        ],
        "/101" => vec![wr(
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
        )],
        _ => vec![Act::Write(echo(req))],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for path in ["/then-close", "/then-http09", "/101"] {
        let got = get(&client, addr, path).await;
        assert_eq!(got.status, 502, "{path}");
    }
    let got = get(&client, addr, "/fine").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/fine"));
}

// ---------------------------------------------------------------------------------------------
// Connection: close, HTTP/1.0.

#[tokio::test]
async fn connection_close_is_honoured_though_the_upstream_keeps_the_connection_open() {
    // role.rs: "connection close is always close". The upstream here does not close: the
    // proxy must not send another request on the connection.
    const CLOSING: [&str; 3] = [
        "connection: close\r\n",
        "Connection: keep-alive, CLOSE\r\n",
        "connection: foo\r\nconnection: bar, close\r\n",
    ];
    let (up, seen) = upstream(|req| {
        let n: usize = req.path()[1..].parse().unwrap();
        vec![wr(format!(
            "HTTP/1.1 200 OK\r\n{}content-length: 2\r\n\r\nok",
            CLOSING[n % CLOSING.len()]
        ))]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for n in 0..CLOSING.len() * 2 {
        let got = get(&client, addr, &format!("/{n}")).await;
        assert_eq!((got.status, got.text().as_str()), (200, "ok"), "{n}");
    }
    assert_eq!(seen.accepted(), CLOSING.len() * 2);
    assert!(seen.requests().iter().all(|r| r.nth == 0));
}

#[tokio::test]
async fn an_http10_answer_without_keep_alive_ends_its_connections_use() {
    // role.rs: "HTTP/1.0 close is default" (the upstream here keeps the connection open).
    let (up, seen) = upstream(|_| vec![wr("HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok")]).await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for _ in 0..3 {
        let got = get(&client, addr, "/old").await;
        assert_eq!((got.status, got.text().as_str()), (200, "ok"));
    }
    assert_eq!(seen.accepted(), 3);
}

#[tokio::test]
async fn an_http10_answer_with_keep_alive_leaves_its_connection_reusable() {
    // role.rs: "connection keep-alive is always keep-alive".
    let (up, seen) = upstream(|_| {
        vec![wr(
            "HTTP/1.0 200 OK\r\nconnection: foo, Keep-Alive, bar\r\ncontent-length: 2\r\n\r\nok",
        )]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for _ in 0..3 {
        let got = get(&client, addr, "/old-ka").await;
        assert_eq!((got.status, got.text().as_str()), (200, "ok"));
    }
    assert_eq!(seen.accepted(), 1);
    assert!(seen.requests().iter().all(|r| r.conn == 0));
}

#[tokio::test]
async fn an_http10_answer_reaches_an_http11_client_as_the_proxys_own_http11() {
    // RFC 9110 6.2 / 2.5: an intermediary MUST send its own HTTP-version in forwarded
    // messages. An HTTP/1.1 client told "HTTP/1.0" (without keep-alive) drops its connection.
    let (up, _) = upstream(|_| {
        vec![
            wr("HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok"),
            Act::Close,
        ]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let mut buf = Vec::new();
    for n in 0..2 {
        socket
            .write_all(format!("GET /old/{n} HTTP/1.1\r\nhost: p\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let (head, body) = read_answer(&mut socket, &mut buf).await;
        assert_eq!(body, b"ok");
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    }
}

#[tokio::test]
async fn an_http10_answer_with_a_transfer_encoding_is_a_502() {
    // role.rs: "1.0 doesn't understand chunked".
    let (up, _) = upstream(|_| {
        vec![wr(
            "HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        )]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    assert_eq!(get(&client(), addr, "/old-chunks").await.status, 502);
}

// ---------------------------------------------------------------------------------------------
// Transfer codings other than chunked.

#[tokio::test]
async fn an_answer_in_a_coding_other_than_chunked_keeps_its_coding_or_is_refused() {
    // client.rs `client_response_transfer_encoding_not_chunked`: hyper's client reads such a
    // body to the close and hands it over with its `transfer-encoding: yolo`. A proxy that
    // passes the bytes on must say how they are coded (RFC 9112 6.1), or refuse them (502):
    // passed on without it, the client takes coded bytes for the content.
    let (up, _) = upstream(|_| {
        vec![
            wr("HTTP/1.1 200 OK\r\ntransfer-encoding: yolo\r\n\r\nhallo"),
            Act::Close,
        ]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let got = get(&client(), addr, "/te-not-chunked").await;
    if got.status != 502 {
        let codings = got.values("transfer-encoding").join(", ");
        assert!(
            codings.contains("yolo"),
            "status {}, transfer-encoding {codings:?}, body {:?}",
            got.status,
            got.body
        );
    }
}

#[tokio::test]
async fn an_answer_coded_gzip_then_chunked_keeps_its_gzip_or_is_refused() {
    // Chunked is decoded; the gzip coding under it is the message's, and must not be dropped
    // (RFC 9112 6.1), or the answer refused.
    let (up, _) = upstream(|_| {
        vec![wr(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n5\r\n\x1f\x8b\x08\x00\x00\r\n0\r\n\r\n",
        )]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let got = get(&client(), addr, "/gzip-chunked").await;
    if got.status != 502 {
        let codings = got.values("transfer-encoding").join(", ");
        assert!(
            codings.contains("gzip"),
            "status {}, transfer-encoding {codings:?}",
            got.status
        );
    }
}

#[tokio::test]
async fn a_request_coded_gzip_then_chunked_keeps_its_gzip_or_is_refused() {
    // The request side of the case above: hyper's server decodes the chunks and leaves
    // `transfer-encoding: gzip, chunked` in the headers. The upstream must be told of the
    // gzip coding, or the proxy must refuse the request (RFC 9112 6.1: 501).
    let (up, seen) = upstream(|req| vec![Act::Write(echo(req))]).await;
    let (_proxy, addr) = proxied(up).await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"POST /gz HTTP/1.1\r\nhost: p\r\ntransfer-encoding: gzip, chunked\r\n\r\n5\r\n\x1f\x8b\x08\x00\x00\r\n0\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let (head, _) = read_answer(&mut socket, &mut buf).await;
    if head.starts_with("HTTP/1.1 200") {
        let sent = seen.requests()[0].head.to_ascii_lowercase();
        let te = sent
            .lines()
            .find_map(|l| l.strip_prefix("transfer-encoding:"))
            .unwrap_or("");
        assert!(te.contains("gzip"), "the upstream got:\n{sent}");
    } else {
        assert!(
            head.starts_with("HTTP/1.1 501") || head.starts_with("HTTP/1.1 400"),
            "{head}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Header fields.

#[tokio::test]
async fn an_obs_folded_header_is_unfolded_or_the_answer_is_a_502() {
    // client.rs `client_obs_fold_headers`; RFC 9112 5.2: a proxy MUST either discard the
    // message and answer 502 or replace each obs-fold with SP before forwarding.
    let (up, _) = upstream(|_| {
        vec![wr(
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nFold: just\r\n some\r\n\t folding\r\n\r\n",
        )]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let got = get(&client(), addr, "/fold").await;
    if got.status != 502 {
        assert_eq!(got.status, 200);
        let fold = got.values("fold");
        assert_eq!(fold.len(), 1, "{fold:?}");
        assert_eq!(
            fold[0].split_whitespace().collect::<Vec<_>>(),
            ["just", "some", "folding"]
        );
    }
}

#[tokio::test]
async fn a_blank_before_a_colon_is_removed_or_the_answer_is_a_502() {
    // role.rs `test_parse_reject_response_with_spaces_before_colons`; RFC 9112 5.1: a proxy
    // MUST remove such whitespace from a response before forwarding it.
    let (up, _) = upstream(|_| {
        vec![wr("HTTP/1.1 200 OK\r\nAccess-Control-Allow-Credentials : true\r\ncontent-length: 0\r\n\r\n")]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let got = get(&client(), addr, "/colon").await;
    if got.status != 502 {
        assert_eq!(got.values("access-control-allow-credentials"), ["true"]);
    }
}

#[tokio::test]
async fn unusual_but_valid_header_bytes_pass_through() {
    let (up, seen) = upstream(|_| {
        let mut answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n".to_vec();
        answer.extend_from_slice(b"x-obs-text: caf\xe9 cr\xe8me\r\n");
        answer.extend_from_slice(b"x!#$%&'*+-.^_`|~y: tchar\r\n");
        answer.extend_from_slice(b"x-empty:\r\n");
        answer.extend_from_slice(b"x-tab: a\tb\r\n");
        answer.extend_from_slice(b"X-UPPER: Case\r\n");
        answer.extend_from_slice(b"x-dup: 1\r\nx-dup: 2\r\n");
        answer.extend_from_slice(format!("x-long: {}\r\n", "v".repeat(32 * 1024)).as_bytes());
        answer.extend_from_slice(b"\r\nok");
        vec![Act::Write(answer)]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for _ in 0..2 {
        let got = get(&client, addr, "/odd").await;
        assert_eq!((got.status, got.text().as_str()), (200, "ok"));
        assert_eq!(got.headers["x-obs-text"].as_bytes(), b"caf\xe9 cr\xe8me");
        assert_eq!(got.headers["x!#$%&'*+-.^_`|~y"], "tchar");
        assert_eq!(got.headers["x-empty"], "");
        assert_eq!(got.headers["x-tab"], "a\tb");
        assert_eq!(got.headers["x-upper"], "Case");
        assert_eq!(got.values("x-dup"), ["1", "2"]);
        assert_eq!(got.headers["x-long"].len(), 32 * 1024);
    }
    assert_eq!(seen.accepted(), 1);
}

#[tokio::test]
async fn invalid_header_bytes_are_a_502() {
    // RFC 9110 5.5: a field value with CR, LF or NUL is rejected (or those bytes replaced).
    const BAD: [&[u8]; 6] = [
        b"x-nul: a\0b\r\n",
        b"x-cr: a\rb\r\n",
        b"x y: 1\r\n",
        b"x\"y: 1\r\n",
        b": no-name\r\n",
        b"x-del\x7f: 1\r\n",
    ];
    let (up, seen) = upstream(|req| {
        let Some(n) = req.path().strip_prefix("/bad/") else {
            return vec![Act::Write(echo(req))];
        };
        let mut answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n".to_vec();
        answer.extend_from_slice(BAD[n.parse::<usize>().unwrap()]);
        answer.extend_from_slice(b"\r\nok");
        vec![Act::Write(answer)]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for (n, bad) in BAD.iter().enumerate() {
        let got = get(&client, addr, &format!("/bad/{n}")).await;
        assert_eq!(got.status, 502, "{:?}", String::from_utf8_lossy(bad));
    }
    let got = get(&client, addr, "/fine").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/fine"));
    assert_eq!(seen.accepted(), BAD.len() + 1);
}

#[tokio::test]
async fn a_hundred_headers_pass_and_more_are_a_502() {
    // hyper's default `h1_max_headers` is 100.
    let (up, _) = upstream(|req| {
        let count: usize = req.path()[1..].parse().unwrap();
        let mut answer = String::from("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n");
        for n in 0..count - 1 {
            answer.push_str(&format!("x-h-{n}: {n}\r\n"));
        }
        answer.push_str("\r\nok");
        vec![wr(answer)]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    // A raw client: hyper's would refuse the proxy's answer, which adds `date` to the 100.
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let mut buf = Vec::new();
    socket
        .write_all(b"GET /100 HTTP/1.1\r\nhost: p\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = read_answer(&mut socket, &mut buf).await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert!(head.contains("x-h-98: 98\r\n"), "{head}");
    assert_eq!(body, b"ok");
    socket
        .write_all(b"GET /101 HTTP/1.1\r\nhost: p\r\n\r\n")
        .await
        .unwrap();
    let (head, _) = read_answer(&mut socket, &mut buf).await;
    assert!(head.starts_with("HTTP/1.1 502 "), "{head}");
}

#[tokio::test]
async fn an_answer_head_too_large_is_a_502() {
    // client.rs `client_error_parse_too_large`.
    let (up, _) = upstream(|_| {
        let long = "A".repeat(500_000);
        vec![wr(format!("HTTP/1.1 200 OK\r\n{long}: {long}\r\n\r\n"))]
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    assert_eq!(get(&client(), addr, "/huge").await.status, 502);
}

#[tokio::test]
async fn a_status_line_that_is_not_http11_is_a_502_and_an_odd_but_valid_one_passes() {
    // client.rs `client_error_parse_version`, `..._status_out_of_range`,
    // `..._status_syntactically_invalid`, `client_always_rejects_http09`, `client_h1_rejects_http2`.
    let (up, _) = upstream(|req| match req.path() {
        "/heat" => vec![wr("HEAT/1.1 200 OK\r\n\r\n")],
        "/001" => vec![wr("HTTP/1.1 001 OK\r\n\r\n")],
        "/1" => vec![wr("HTTP/1.1 1 OK\r\n\r\n")],
        "/h2" => vec![wr("HTTP/2 200\r\ncontent-length: 0\r\n\r\n")],
        "/h12" => vec![wr("HTTP/1.2 200 OK\r\ncontent-length: 0\r\n\r\n")],
        "/h09" => vec![wr("Mmmmh, baguettes."), Act::Close],
        "/lower" => vec![wr("http/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")],
        "/no-reason" => vec![wr("HTTP/1.1 200\r\ncontent-length: 2\r\n\r\nok")],
        "/599" => vec![wr("HTTP/1.1 599 Odd\r\ncontent-length: 2\r\n\r\nok")],
        _ => vec![Act::Write(echo(req))],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for path in ["/heat", "/001", "/1", "/h2", "/h12", "/h09", "/lower"] {
        assert_eq!(get(&client, addr, path).await.status, 502, "{path}");
    }
    let got = get(&client, addr, "/no-reason").await;
    assert_eq!((got.status, got.text().as_str()), (200, "ok"));
    let got = get(&client, addr, "/599").await;
    assert_eq!((got.status, got.text().as_str()), (599, "ok"));
}

// ---------------------------------------------------------------------------------------------
// An upstream that closes early, or says more than its answer.

#[tokio::test]
async fn an_upstream_that_closes_in_the_head_is_a_502() {
    // client.rs `client_error_unexpected_eof`.
    let (up, _) = upstream(|req| match req.path() {
        "/cut" => vec![wr("HTTP/1.1 200 OK\r\ncontent-le"), Act::Close],
        "/cut-line" => vec![wr("HTTP/1.1 200 OK\r\n"), Act::Close],
        _ => vec![Act::Write(echo(req))],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    // On a new connection, then on a pooled one.
    assert_eq!(get(&client, addr, "/cut").await.status, 502);
    let got = get(&client, addr, "/fine").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/fine"));
    assert_eq!(get(&client, addr, "/cut-line").await.status, 502);
    let got = get(&client, addr, "/fine").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/fine"));
}

#[tokio::test]
async fn an_upstream_that_closes_in_the_body_cuts_the_clients_body() {
    // role.rs / decode.rs `test_read_sized_early_eof`, `test_read_chunked_early_eof`: an
    // incomplete body is an error, never a shorter body that ends well.
    let (up, seen) = upstream(|req| match req.path() {
        "/sized" => vec![
            wr("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello"),
            Act::Close,
        ],
        "/chunked" => vec![
            wr("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"),
            Act::Close,
        ],
        "/in-chunk" => vec![
            wr("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\na\r\nhello"),
            Act::Close,
        ],
        "/last-chunk" => vec![
            wr("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"),
            Act::Close,
        ],
        _ => vec![Act::Write(echo(req))],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    for path in ["/sized", "/chunked", "/in-chunk", "/last-chunk"] {
        let got = get(&client, addr, path).await;
        assert!(matches!(got.status, 0 | 200), "{path}: {}", got.status);
        assert!(
            got.body.is_err(),
            "{path}: the body ended well: {:?}",
            got.body
        );
    }
    let got = get(&client, addr, "/fine").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/fine"));
    assert_eq!(seen.accepted(), 5);
}

#[tokio::test]
async fn a_second_answer_in_the_same_write_is_not_the_next_requests() {
    // client.rs `client_pipeline_responses_extra`: the upstream answers once more than asked,
    // and keeps the connection open. The next request must not get the extra answer.
    let (up, seen) = upstream(|req| match req.path() {
        "/pipe" => vec![wr(
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nWRONG",
        )],
        "/chunked-pipe" => vec![wr(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nWRONG",
        )],
        _ => vec![Act::Write(echo(req))],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    let got = get(&client, addr, "/pipe").await;
    assert_eq!((got.status, got.text().as_str()), (200, ""));
    let got = get(&client, addr, "/next").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/next"));
    let got = get(&client, addr, "/chunked-pipe").await;
    assert_eq!((got.status, got.text().as_str()), (200, "ok"));
    let got = get(&client, addr, "/next-2").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/next-2"));
    assert_eq!(seen.accepted(), 3);
}

#[tokio::test]
async fn bytes_the_upstream_sends_after_its_answer_later_are_not_the_next_answer() {
    // The extra answer comes a while after the first, while the connection is idle in the pool.
    let (up, _) = upstream(|req| match req.path() {
        "/late" => vec![
            Act::Write(OK.to_vec()),
            Act::Sleep(100),
            wr("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nWRONG"),
        ],
        _ => vec![Act::Write(echo(req))],
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    let got = get(&client, addr, "/late").await;
    assert_eq!((got.status, got.text().as_str()), (200, "ok"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let got = get(&client, addr, "/next").await;
    assert_eq!((got.status, got.text().as_str()), (200, "/next"));
}

// ---------------------------------------------------------------------------------------------
// Reuse under load, pipelined clients.

#[tokio::test]
async fn concurrent_requests_each_get_their_own_answer_whatever_its_framing() {
    let (up, _) = upstream(|req| {
        let path = req.path().to_string();
        let n: usize = path.rsplit('/').next().unwrap().parse().unwrap();
        match n % 3 {
            0 => vec![Act::Write(echo(req))],
            1 => {
                let (a, b) = path.split_at(path.len() / 2);
                vec![
                    wr(format!(
                        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n",
                        a.len()
                    )),
                    Act::Sleep(2),
                    wr(format!("{:X};x=y\r\n{b}\r\n0\r\nx-t: 1\r\n\r\n", b.len())),
                ]
            }
            _ => vec![wr(format!("HTTP/1.1 200 OK\r\n\r\n{path}")), Act::Close],
        }
    })
    .await;
    let (_proxy, addr) = proxied(up).await;
    let client = client();
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let client = client.clone();
            tokio::spawn(async move {
                for n in 0..15 {
                    let path = format!("/t{t}/{n}");
                    let got = get(&client, addr, &path).await;
                    assert_eq!((got.status, got.text()), (200, path.clone()));
                }
            })
        })
        .collect();
    for task in tasks {
        bounded("a client task", task).await.unwrap();
    }
}

#[tokio::test]
async fn pipelined_client_requests_are_answered_in_order() {
    let (up, _) = upstream(|req| vec![Act::Sleep(5), Act::Write(echo(req))]).await;
    let (_proxy, addr) = proxied(up).await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(
            b"GET /one HTTP/1.1\r\nhost: p\r\n\r\nHEAD /two HTTP/1.1\r\nhost: p\r\n\r\nGET /three HTTP/1.1\r\nhost: p\r\n\r\n",
        )
        .await
        .unwrap();
    let mut buf = Vec::new();
    let (head, body) = read_answer(&mut socket, &mut buf).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"/one");
    // The answer to HEAD: its length, no body (read_answer would take "/three"'s answer
    // as its body if the proxy sent one).
    let head_end = bounded("the HEAD answer", async {
        loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let len = buf.len();
            need(&mut socket, &mut buf, len + 1).await.expect("closed");
        }
    })
    .await;
    let head: String = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("content-length: 4\r\n"),
        "{head}"
    );
    buf.drain(..head_end);
    let (head, body) = read_answer(&mut socket, &mut buf).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"/three");
}

// ---------------------------------------------------------------------------------------------
// Request bodies.

#[tokio::test]
async fn expect_100_continue_is_answered_and_the_body_then_forwarded() {
    // The client waits for 100 Continue before it sends its body. The upstream is asked for
    // it too; this one reads the body first (so the proxy sends it after a second without a
    // word), and its 100 then comes before its answer, passed over.
    let (up, seen) =
        upstream(|_| vec![wr("HTTP/1.1 100 Continue\r\n\r\n"), Act::Write(OK.to_vec())]).await;
    let (_proxy, addr) = proxied(up).await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"POST /expect HTTP/1.1\r\nhost: p\r\ncontent-length: 5\r\nexpect: 100-continue\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let (head, _) = read_answer(&mut socket, &mut buf).await;
    assert!(head.starts_with("HTTP/1.1 100"), "{head}");
    socket.write_all(b"hello").await.unwrap();
    let (head, body) = read_answer(&mut socket, &mut buf).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"ok");
    let sent = &seen.requests()[0];
    assert_eq!(sent.body, b"hello");
    assert_eq!(sent.values("expect"), ["100-continue"], "{}", sent.head);
}

#[tokio::test]
async fn request_bodies_go_with_their_length_or_in_chunks_with_their_trailers() {
    // client.rs `client_post_sized`, `client_post_chunked`, `client_get_req_body_sized`,
    // `client_post_req_body_chunked_with_trailer`.
    let (up, seen) = upstream(|req| vec![Act::Write(echo(req))]).await;
    let (_proxy, addr) = proxied(up).await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let mut buf = Vec::new();
    for request in [
        &b"POST /length HTTP/1.1\r\nhost: p\r\ncontent-length: 7\r\n\r\nfoo bar"[..],
        b"GET /get-body HTTP/1.1\r\nhost: p\r\ncontent-length: 5\r\n\r\nhello",
        b"POST /chunks HTTP/1.1\r\nhost: p\r\ntransfer-encoding: chunked\r\n\r\nB\r\nfoo bar baz\r\n0\r\n\r\n",
        b"POST /trailers HTTP/1.1\r\nhost: p\r\ntransfer-encoding: chunked\r\ntrailer: chunky-trailer\r\n\r\n5\r\nhello\r\n0\r\nchunky-trailer: header data\r\n\r\n",
    ] {
        socket.write_all(request).await.unwrap();
        let (head, _) = read_answer(&mut socket, &mut buf).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    let sent = seen.requests();
    let text = |n: usize| String::from_utf8_lossy(&sent[n].raw).to_ascii_lowercase();
    assert!(
        text(0).contains("content-length: 7\r\n") && text(0).ends_with("\r\n\r\nfoo bar"),
        "{}",
        text(0)
    );
    assert!(
        text(1).contains("content-length: 5\r\n") && text(1).ends_with("\r\n\r\nhello"),
        "{}",
        text(1)
    );
    assert_eq!(sent[2].body, b"foo bar baz");
    assert!(
        text(2).contains("transfer-encoding: chunked\r\n"),
        "{}",
        text(2)
    );
    assert_eq!(
        text(2).matches("transfer-encoding").count(),
        1,
        "{}",
        text(2)
    );
    assert_eq!(sent[3].body, b"hello");
    assert!(
        text(3).ends_with("0\r\nchunky-trailer: header data\r\n\r\n"),
        "{}",
        text(3)
    );
}

#[tokio::test]
async fn request_trailers_that_may_not_be_trailers_are_not_forwarded() {
    // encode.rs `is_valid_trailer_field`: hyper's client never sends Content-Length,
    // Transfer-Encoding, Host, Authorization, Content-Type, Trailer, TE, ... as trailers (RFC
    // 9110 6.5.1: framing, routing and authentication fields are never trailers). An
    // upstream that merges trailers into the header section must not get them from the proxy.
    let (up, seen) = upstream(|req| vec![Act::Write(echo(req))]).await;
    let (_proxy, addr) = proxied(up).await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(
            b"POST /trailers HTTP/1.1\r\nhost: p\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nx-checksum: 1\r\ncontent-length: 99\r\ntransfer-encoding: chunked\r\nhost: elsewhere\r\nauthorization: Basic eA==\r\n\r\n",
        )
        .await
        .unwrap();
    let mut buf = Vec::new();
    let (head, _) = read_answer(&mut socket, &mut buf).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let sent = &seen.requests()[0];
    assert_eq!(sent.body, b"hello");
    let raw = String::from_utf8_lossy(&sent.raw).to_ascii_lowercase();
    let (_, trailers) = raw.rsplit_once("\r\n0\r\n").expect("a last chunk");
    for field in [
        "content-length:",
        "transfer-encoding:",
        "host:",
        "authorization:",
    ] {
        assert!(
            !trailers.contains(field),
            "{field} forwarded as a trailer:\n{trailers}"
        );
    }
}
