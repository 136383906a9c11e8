//! HTTP/2 with prior knowledge on either side.

use crate::support::{budget, client, get, h2_client, proxy, Upstream};

#[tokio::test]
async fn http2_clients_share_a_connection_and_still_pass_the_budget_one_stream_at_a_time() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget("records", &upstream.url(), "max_concurrent = 2")).await;
    let addr = proxy.local_addr("records").unwrap();
    let client = h2_client();
    let (status, _, body) = get(&client, addr, "/first?x=1").await;
    assert_eq!((status, body.as_str()), (200, "GET /first?x=1"));
    let streams: Vec<_> = (0..12)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { get(&client, addr, "/sleep/30").await.0 })
        })
        .collect();
    for s in streams {
        assert_eq!(s.await.unwrap(), 200);
    }
    assert_eq!(
        upstream.peak(),
        2,
        "streams of one connection passed the budget together"
    );
    let seen = upstream.seen();
    assert_eq!(seen.len(), 13);
    assert_eq!(seen[0].version, hyper::Version::HTTP_11);
    assert_eq!(seen[0].headers["host"], upstream.addr.to_string());
}

#[tokio::test]
async fn upstream_http2_sends_every_request_as_a_stream_of_one_connection() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "records",
        &upstream.url(),
        "max_concurrent = 3\nupstream_http2 = true\npreserve_host = true",
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    let calls: Vec<_> = (0..9)
        .map(|_| tokio::spawn(async move { get(&client(), addr, "/sleep/30").await.0 }))
        .collect();
    for c in calls {
        assert_eq!(c.await.unwrap(), 200);
    }
    assert!(upstream.peak() <= 3, "peak {}", upstream.peak());
    let seen = upstream.seen();
    assert_eq!(seen.len(), 9);
    assert!(seen.iter().all(|s| s.version == hyper::Version::HTTP_2));
    let peers: std::collections::HashSet<_> = seen.iter().map(|s| s.peer).collect();
    assert_eq!(peers.len(), 1, "more than one connection: {peers:?}");
    // An HTTP/2 client's host, from its request target, is preserved too.
    get(&h2_client(), addr, "/").await;
    let last = upstream.seen().pop().unwrap();
    assert_eq!(last.headers["host"], addr.to_string());
}

/// An HTTP/2 request head of 33 to 64 KiB gets 431, as over HTTP/1.1; one past 64 KiB is
/// refused by the HTTP/2 layer without a status (the stream refused, or the connection ended).
/// Neither reaches the upstream, and the proxy goes on serving.
#[tokio::test]
async fn http2_request_heads_past_32_kib_are_refused() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget("records", &upstream.url(), "max_concurrent = 2")).await;
    let addr = proxy.local_addr("records").unwrap();
    let big = |kib: usize| {
        hyper::Request::get(format!("http://{addr}/"))
            .header("x-big", "a".repeat(kib * 1024))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap()
    };
    let answer = crate::support::within(h2_client().request(big(40)))
        .await
        .expect("an answer to a head of 40 KiB");
    assert_eq!(answer.status(), 431);
    let refused = crate::support::within(h2_client().request(big(80))).await;
    assert!(
        refused.is_err(),
        "no answer to a head of 80 KiB: {refused:?}"
    );
    assert!(upstream.seen().is_empty(), "{:?}", upstream.seen().len());
    assert_eq!(get(&h2_client(), addr, "/").await.0, 200);
}
