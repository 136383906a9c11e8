//! The proxy's own HTTP/1.1 client against an upstream that writes its answers byte by byte as
//! a test scripts them: how answers are framed (chunks with trailers, an end by close, a 1xx
//! first, `HEAD`), what is refused, and how a client's body goes out.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::scripted::{need, upstream, Act, Seen};
use crate::support::{client, get, proxied, send, within};

/// An upstream that answers each request with `answer(request)` (the request's head and body as
/// they came; the answer written as is), and closes the connection after an answer that says
/// `connection: close` or has no length, or instead of an empty answer.
async fn scripted(answer: fn(&str) -> Vec<u8>) -> (SocketAddr, Arc<Seen>) {
    upstream(move |request| {
        let answer = answer(&String::from_utf8_lossy(&request.raw));
        if answer.is_empty() {
            return vec![Act::Close];
        }
        let text = String::from_utf8_lossy(&answer).to_ascii_lowercase();
        let framed = text.contains("content-length") || text.contains("transfer-encoding");
        let close = text.contains("connection: close") || !framed;
        let mut acts = vec![Act::Write(answer)];
        if close {
            acts.push(Act::Close);
        }
        acts
    })
    .await
}

#[tokio::test]
async fn a_chunked_answer_passes_through_and_its_connection_is_used_again() {
    let (upstream, script) = scripted(|_| {
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n4\r\ndefg\r\n0\r\nx-sum: 7\r\n\r\n"
            .to_vec()
    })
    .await;
    let (_proxy, addr) = proxied(upstream).await;
    let client = client();
    for _ in 0..3 {
        let (status, _, body) = get(&client, addr, "/chunks").await;
        assert_eq!((status, body.as_str()), (200, "abcdefg"));
    }
    assert_eq!(script.accepted(), 1);
}

#[tokio::test]
async fn an_answer_ended_by_close_passes_through_on_a_connection_of_its_own() {
    let (upstream, script) =
        scripted(|_| b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end".to_vec())
            .await;
    let (_proxy, addr) = proxied(upstream).await;
    let client = client();
    for _ in 0..2 {
        let (status, _, body) = get(&client, addr, "/old").await;
        assert_eq!((status, body.as_str()), (200, "until the end"));
    }
    assert_eq!(script.accepted(), 2);
}

#[tokio::test]
async fn informational_answers_before_the_answer_are_passed_over() {
    let (upstream, _) = scripted(|_| {
        b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
            .to_vec()
    })
    .await;
    let (_proxy, addr) = proxied(upstream).await;
    let (status, headers, body) = get(&client(), addr, "/hints").await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    assert!(headers.get("link").is_none());
}

#[tokio::test]
async fn an_answer_to_head_has_its_length_and_no_body() {
    let (upstream, script) =
        scripted(|_| b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n".to_vec()).await;
    let (_proxy, addr) = proxied(upstream).await;
    let client = client();
    for _ in 0..2 {
        let (status, headers, body) = send(&client, addr, "HEAD", "/size", &[], "").await;
        assert_eq!((status, body.as_str()), (200, ""));
        assert_eq!(headers["content-length"], "9");
    }
    assert_eq!(script.accepted(), 1);
}

#[tokio::test]
async fn a_malformed_answer_is_a_502_and_its_connection_is_not_used_again() {
    let (upstream, script) = scripted(|head| {
        if head.contains("/two-lengths") {
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok".to_vec()
        } else if head.contains("/garbage") {
            b"SSH-2.0-OpenSSH_9.2\r\n\r\n".to_vec()
        } else {
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec()
        }
    })
    .await;
    let (_proxy, addr) = proxied(upstream).await;
    let client = client();
    for path in ["/two-lengths", "/garbage"] {
        let (status, _, _) = get(&client, addr, path).await;
        assert_eq!(status, 502, "{path}");
    }
    let (status, _, body) = get(&client, addr, "/fine").await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    assert_eq!(script.accepted(), 3);
}

#[tokio::test]
async fn a_body_without_a_length_goes_in_chunks_and_one_with_a_length_as_it_is() {
    let (upstream, script) =
        scripted(|_| b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n".to_vec()).await;
    let (_proxy, addr) = proxied(upstream).await;
    // A client's chunked body: its length is not known.
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(
            b"POST /chunked HTTP/1.1\r\nhost: p\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        )
        .await
        .unwrap();
    let mut answer = [0u8; 64];
    let n = within(socket.read(&mut answer)).await.unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 201"));
    // One with a length, and one without a body.
    let client = client();
    let (status, _, _) = send(&client, addr, "POST", "/sized", &[], "twelve bytes").await;
    assert_eq!(status, 201);
    let (status, _, _) = send(&client, addr, "POST", "/empty", &[], "").await;
    assert_eq!(status, 201);

    let text: Vec<String> = script
        .requests()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.raw).into_owned())
        .collect();
    let chunked = text
        .iter()
        .find(|r| r.starts_with("POST /chunked "))
        .unwrap();
    assert!(
        chunked.contains("transfer-encoding: chunked\r\n"),
        "{chunked}"
    );
    let (_, body) = chunked.split_once("\r\n\r\n").unwrap();
    assert_eq!(dechunk(body), "hello world", "{chunked}");
    let sized = text.iter().find(|r| r.starts_with("POST /sized ")).unwrap();
    assert!(sized.contains("content-length: 12\r\n"), "{sized}");
    assert!(sized.ends_with("\r\n\r\ntwelve bytes"), "{sized}");
    let empty = text.iter().find(|r| r.starts_with("POST /empty ")).unwrap();
    assert!(empty.contains("content-length: 0\r\n"), "{empty}");
}

/// The data of a chunked body (without extensions or trailers, as the proxy writes it).
fn dechunk(mut body: &str) -> String {
    let mut data = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").expect("a chunk size line");
        let size = usize::from_str_radix(size, 16).expect("a chunk size");
        if size == 0 {
            assert_eq!(rest, "\r\n", "the last chunk ends the body");
            return data;
        }
        data.push_str(&rest[..size]);
        body = rest[size..]
            .strip_prefix("\r\n")
            .expect("a chunk's line end");
    }
}

#[tokio::test]
async fn gets_sent_as_the_upstream_closes_each_connection_are_all_answered() {
    // Each answer says nothing of a close, and the upstream closes after it: the next request
    // may find its pooled connection closed, seen or not yet seen. A GET is sent again on a
    // new connection when nothing of its answer came.
    let (upstream, script) =
        scripted(|_| b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec()).await;
    let (_proxy, addr) = proxied(upstream).await;
    let client = client();
    for n in 0..20 {
        let (status, _, body) = get(&client, addr, &format!("/{n}")).await;
        assert_eq!((status, body.as_str()), (200, "ok"), "request {n}");
        // The scripted upstream keeps connections open: close the last one by hand.
        script.close_all();
    }
}

#[tokio::test]
async fn a_get_whose_pooled_connection_closes_unanswered_is_sent_again_and_a_post_is_not() {
    // Every second request the upstream reads, it closes the connection without answering: an
    // upstream whose keep-alive timeout ran out as the request came.
    static SEEN: AtomicUsize = AtomicUsize::new(0);
    let (upstream, script) = scripted(|_| {
        if SEEN.fetch_add(1, Ordering::SeqCst) % 2 == 1 {
            return Vec::new();
        }
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec()
    })
    .await;
    let (_proxy, addr) = proxied(upstream).await;
    let client = client();
    for n in 0..5 {
        let (status, _, body) = get(&client, addr, &format!("/get/{n}")).await;
        assert_eq!((status, body.as_str()), (200, "ok"), "GET {n}");
    }
    // The first GET, then each one twice: on its pooled connection, then on a new one.
    assert_eq!(script.requests().len(), 9);
    assert_eq!(script.accepted(), 5);

    // A POST is not sent twice: the upstream may have acted on it.
    let (status, _, _) = send(&client, addr, "POST", "/post", &[], "once").await;
    assert_eq!(status, 502);
    let posts = script
        .requests()
        .iter()
        .filter(|r| r.raw.starts_with(b"POST "))
        .count();
    assert_eq!(posts, 1);
}

#[tokio::test]
async fn an_answer_with_both_lengths_is_read_in_chunks_and_its_connection_not_used_again() {
    let (upstream, script) = scripted(|_| {
        b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n7\r\nabcdefg\r\n0\r\n\r\n"
            .to_vec()
    })
    .await;
    let (_proxy, addr) = proxied(upstream).await;
    let client = client();
    for _ in 0..2 {
        let (status, headers, body) = get(&client, addr, "/both").await;
        assert_eq!((status, body.as_str()), (200, "abcdefg"));
        assert!(headers.get("content-length").is_none());
    }
    assert_eq!(script.accepted(), 2);
}

#[tokio::test]
async fn an_upstreams_own_reason_phrase_reaches_the_client() {
    let (upstream, _) =
        scripted(|_| b"HTTP/1.1 200 Fine Thanks\r\ncontent-length: 0\r\n\r\n".to_vec()).await;
    let (_proxy, addr) = proxied(upstream).await;
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"GET / HTTP/1.1\r\nhost: p\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0u8; 256];
    let n = within(socket.read(&mut answer)).await.unwrap();
    let text = String::from_utf8_lossy(&answer[..n]);
    assert!(text.starts_with("HTTP/1.1 200 Fine Thanks\r\n"), "{text}");
}

#[tokio::test]
async fn an_upstream_that_answers_before_taking_the_body_is_heard() {
    // It reads the head, answers 413 and then neither reads nor closes: the proxy, still
    // sending the body, must read the answer meanwhile (else it waits for the upstream forever).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = Vec::new();
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                let len = buf.len();
                if need(&mut socket, &mut buf, len + 1).await.is_none() {
                    break;
                }
            }
            let answer = b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 4\r\n\r\nbig!";
            let _ = socket.write_all(answer).await;
            keep.lock().unwrap().push(socket);
        }
    });
    let (_proxy, addr) = proxied(upstream).await;
    // More than loopback's socket buffers hold, so that the proxy's writes stop.
    let body = "x".repeat(32 << 20);
    let (status, _, text) = send(&client(), addr, "POST", "/upload", &[], &body).await;
    assert_eq!((status, text.as_str()), (413, "big!"));
    assert_eq!(held.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn an_http2_get_whose_stream_ends_with_an_empty_frame_goes_without_a_body() {
    use http_body_util::StreamBody;
    let (upstream, script) =
        scripted(|_| b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec()).await;
    let (_proxy, addr) = proxied(upstream).await;
    // A body that is not known to be empty: hyper sends HEADERS, then an empty DATA frame
    // that ends the stream.
    type Frames = futures::stream::Empty<Result<hyper::body::Frame<bytes::Bytes>, std::io::Error>>;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<StreamBody<Frames>>();
    let request = hyper::Request::get(format!("http://{addr}/h2"))
        .body(StreamBody::new(futures::stream::empty()))
        .unwrap();
    let response = within(client.request(request)).await.unwrap();
    assert_eq!(response.status(), 200);
    let head = script.requests()[0].head.clone();
    assert!(head.starts_with("GET /h2 HTTP/1.1\r\n"), "{head}");
    assert!(!head.contains("transfer-encoding"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "{head}");
}
