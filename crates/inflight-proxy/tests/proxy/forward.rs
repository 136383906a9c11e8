//! Forwarding: paths, bodies and headers reach the upstream as they should.

use crate::support::{budget, client, proxy, send, Upstream};

#[tokio::test]
async fn requests_reach_the_upstream_with_their_path_body_and_rewritten_headers() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget("records", &upstream.url(), "max_concurrent = 4")).await;
    let addr = proxy.local_addr("records").unwrap();
    let client = client();

    let (status, headers, body) = send(
        &client,
        addr,
        "POST",
        "/records/7?fields=a,b",
        &[
            ("connection", "x-client-hop"),
            ("x-client-hop", "drop me"),
            ("keep-alive", "timeout=5"),
            ("x-forwarded-for", "10.1.2.3"),
            ("x-end-to-end", "keep me"),
        ],
        "the record",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body, "POST /records/7?fields=a,b");
    assert_eq!(headers["x-upstream"], "yes");
    assert!(
        !headers.contains_key("x-upstream-hop"),
        "the upstream's hop-by-hop header came through: {headers:?}"
    );

    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    let seen = &seen[0];
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.uri, "/records/7?fields=a,b");
    assert_eq!(seen.body, "the record");
    assert_eq!(seen.headers["host"], upstream.addr.to_string());
    assert_eq!(seen.headers["x-forwarded-for"], "10.1.2.3, 127.0.0.1");
    assert_eq!(seen.headers["x-end-to-end"], "keep me");
    for hop in ["x-client-hop", "keep-alive"] {
        assert!(!seen.headers.contains_key(hop), "{hop} was forwarded");
    }
    assert!(
        seen.headers
            .get("connection")
            .is_none_or(|v| !v.to_str().unwrap().contains("x-client-hop")),
        "the client's Connection header was forwarded: {:?}",
        seen.headers
    );
}

#[tokio::test]
async fn preserve_host_forwards_the_clients_host() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "records",
        &upstream.url(),
        "max_concurrent = 4\npreserve_host = true",
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    let (status, _, _) = send(
        &client(),
        addr,
        "GET",
        "/",
        &[("host", "records.example")],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(upstream.seen()[0].headers["host"], "records.example");
}

#[tokio::test]
async fn keep_alive_connections_to_the_upstream_are_reused() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget("records", &upstream.url(), "max_concurrent = 1")).await;
    let addr = proxy.local_addr("records").unwrap();
    let client = client();
    for i in 0..20 {
        let (status, _, body) = send(&client, addr, "GET", &format!("/n/{i}"), &[], "").await;
        assert_eq!((status, body), (200, format!("GET /n/{i}")));
    }
    // Every request came over the one pooled connection: the upstream saw one peer port.
    let peers: std::collections::HashSet<_> = upstream.seen().iter().map(|s| s.peer).collect();
    assert_eq!(peers.len(), 1, "{peers:?}");
    assert_eq!(upstream.seen().len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_through_a_budget_of_six_see_six_at_the_upstream() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget("records", &upstream.url(), "max_concurrent = 6")).await;
    let addr = proxy.local_addr("records").unwrap();
    let per_client = 10;
    let started = std::time::Instant::now();
    let clients: Vec<_> = (0..64)
        .map(|_| {
            tokio::spawn(async move {
                let client = client();
                let mut ok = 0;
                for _ in 0..per_client {
                    if crate::support::get(&client, addr, "/sleep/20").await.0 == 200 {
                        ok += 1;
                    }
                }
                ok
            })
        })
        .collect();
    let mut ok = 0;
    for c in clients {
        ok += c.await.unwrap();
    }
    let elapsed = started.elapsed();
    assert_eq!(
        ok,
        64 * per_client,
        "every request succeeds: none is refused"
    );
    assert_eq!(
        upstream.peak(),
        6,
        "the upstream saw more or fewer than 6 at once"
    );
    // Six at a time, 20 ms each: the requests cannot all be through sooner than this.
    let floor = std::time::Duration::from_millis(20) * (64 * per_client / 6);
    assert!(elapsed >= floor, "{elapsed:?} < {floor:?}");
    // The same work sent straight to the upstream by 6 clients, for comparison.
    let started = std::time::Instant::now();
    let direct: Vec<_> = (0..6)
        .map(|i| {
            let upstream = upstream.addr;
            tokio::spawn(async move {
                let client = client();
                let n = 64 * per_client / 6 + u32::from(i < 64 * per_client % 6);
                for _ in 0..n {
                    crate::support::get(&client, upstream, "/sleep/20").await;
                }
            })
        })
        .collect();
    for d in direct {
        d.await.unwrap();
    }
    let direct = started.elapsed();
    let total = f64::from(64 * per_client);
    eprintln!(
        "{total} requests: through the proxy (64 clients, budget 6) {:.0}/s in {elapsed:.2?}; \
         direct (6 clients) {:.0}/s in {direct:.2?}; Little's law: 6 / 20 ms = 300/s",
        total / elapsed.as_secs_f64(),
        total / direct.as_secs_f64(),
    );
}

/// A plain-TCP upstream that answers each request on a connection with `200` and a body that
/// names the connection (`conn N`), and closes each connection after `per_connection` answers.
/// Returns its address and the count of connections it accepted.
async fn counting_upstream(
    per_connection: usize,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::spawn(async move {
                let mut buf = Vec::new();
                for _ in 0..per_connection {
                    // One request head (the tests send no bodies).
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        let mut chunk = [0u8; 1024];
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => buf.extend_from_slice(&chunk[..k]),
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    buf.drain(..end);
                    let body = format!("conn {n}");
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if socket.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
                // Closed without a word, as an upstream whose keep-alive timeout passed.
            });
        }
    });
    (addr, accepted)
}

#[tokio::test]
async fn requests_in_turn_share_one_upstream_connection() {
    let (upstream, accepted) = counting_upstream(usize::MAX).await;
    let (_proxy, addr) = crate::support::proxied(upstream).await;
    let client = client();
    for _ in 0..5 {
        let (status, _, body) = crate::support::get(&client, addr, "/").await;
        assert_eq!((status, body.as_str()), (200, "conn 1"));
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_pooled_connection_the_upstream_closed_is_replaced_without_a_502() {
    let (upstream, accepted) = counting_upstream(1).await;
    let (_proxy, addr) = crate::support::proxied(upstream).await;
    let client = client();
    for n in 1..=3 {
        let (status, _, body) = crate::support::get(&client, addr, "/").await;
        assert_eq!((status, body), (200, format!("conn {n}")));
        // The upstream's close reaches the pooled connection before the next request.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_connection_whose_answer_was_cut_is_not_used_again() {
    use tokio::io::AsyncWriteExt;
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget("records", &upstream.url(), "max_concurrent = 4")).await;
    let addr = proxy.local_addr("records").unwrap();
    // A streamed answer whose client leaves before its end.
    let body = upstream.next_stream();
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"GET /stream HTTP/1.1\r\nhost: proxy\r\n\r\n")
        .await
        .unwrap();
    body.send(bytes::Bytes::from_static(b"part")).await.unwrap();
    crate::support::until("the answer to start", || {
        crate::support::metrics(&proxy)["inflight_budget_in_flight{budget=records}"] == 1.0
    })
    .await;
    drop(socket);
    crate::support::until("the call to end", || {
        crate::support::metrics(&proxy)["inflight_budget_in_flight{budget=records}"] == 0.0
    })
    .await;
    // The next request is answered in full, on another connection.
    let (status, _, text) = crate::support::get(&client(), addr, "/after").await;
    assert_eq!((status, text.as_str()), (200, "GET /after"));
    drop(body);
}
