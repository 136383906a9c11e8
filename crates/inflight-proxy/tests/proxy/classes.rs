//! Priority classes through the proxy: a request's `class_header` names its class, queued
//! interactive requests reach the upstream ahead of queued batch ones, and a header that is
//! missing, unknown or malformed is the default class, never an error.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::HeaderValue;

use crate::support::{budget, client, metrics, proxy, until, within, TestClient, Upstream};

const CLASSES: &str = "max_concurrent = 1\nmax_queued = 20\nclasses = { interactive = 4, batch = 1 }\nclass_header = \"x-priority\"";

/// A GET of `path` with `x-priority: value` (none for `None`), answered in full.
async fn get_with(
    client: &TestClient,
    addr: std::net::SocketAddr,
    path: &str,
    value: Option<&[u8]>,
) -> (u16, String) {
    let mut request = hyper::Request::builder().uri(format!("http://{addr}{path}"));
    if let Some(value) = value {
        request = request.header("x-priority", HeaderValue::from_bytes(value).unwrap());
    }
    let response = within(client.request(request.body(Full::new(Bytes::new())).unwrap()))
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = within(response.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn waiting(proxy: &inflight_proxy::Proxy) -> f64 {
    metrics(proxy)
        .get("inflight_budget_waiting{budget=records}")
        .copied()
        .unwrap_or(0.0)
}

#[tokio::test]
async fn queued_interactive_requests_reach_the_upstream_before_queued_batch_ones() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget("records", &upstream.url(), CLASSES)).await;
    let addr = proxy.local_addr("records").unwrap();
    // A slow request holds the one permit.
    let holder = tokio::spawn(async move { get_with(&client(), addr, "/hold?holder", None).await });
    until("the holder upstream", || upstream.seen().len() == 1).await;
    // Four batch requests queue first, then four interactive ones, one after the other.
    let mut queued = Vec::new();
    for (i, class) in ["batch"; 4]
        .into_iter()
        .chain(["interactive"; 4])
        .enumerate()
    {
        let path = format!("/hold?{class}{i}");
        queued.push(tokio::spawn(async move {
            get_with(&client(), addr, &path, Some(class.as_bytes())).await
        }));
        until("the request queued", || waiting(&proxy) == (i + 1) as f64).await;
    }
    // One answer at a time: the upstream sees them in the order the budget admits them.
    for n in 2..=9 {
        upstream.release(1);
        until("the next request upstream", || upstream.seen().len() == n).await;
    }
    upstream.release(1);
    assert_eq!(holder.await.unwrap().0, 200);
    for r in queued {
        assert_eq!(r.await.unwrap().0, 200);
    }
    let seen = upstream.seen();
    let order: Vec<&str> = seen[1..]
        .iter()
        .map(|s| s.headers["x-priority"].to_str().unwrap())
        .collect();
    for s in &seen[1..] {
        let class = s.headers["x-priority"].to_str().unwrap();
        assert!(s.uri.contains(class), "forwarded unchanged: {s:?}");
    }
    // 4:1 while both wait: the four interactive requests among the first five admitted, though
    // every batch request queued before them.
    let first_five = &order[..5];
    let interactive = first_five.iter().filter(|c| **c == "interactive").count();
    assert_eq!(interactive, 4, "admitted in this order: {order:?}");
    // The admin /metrics text has the figures per class, the holder in the default class.
    let m = metrics(&proxy);
    for (class, admitted) in [("interactive", 4.0), ("batch", 5.0)] {
        let key = |name: &str| format!("{name}{{budget=records,class={class}}}");
        assert_eq!(
            m[&key("inflight_class_admitted_total")],
            admitted,
            "{class}"
        );
        assert_eq!(m[&key("inflight_class_waiting")], 0.0, "{class}");
        assert_eq!(m[&key("inflight_class_in_flight")], 0.0, "{class}");
        assert_eq!(
            m[&key("inflight_class_permit_wait_seconds")],
            admitted,
            "{class}: one wait per admitted request"
        );
    }
    assert_eq!(m["inflight_budget_admitted_total{budget=records}"], 9.0);
}

#[tokio::test]
async fn an_interactive_request_takes_the_place_of_the_newest_batch_one_in_a_full_queue() {
    let upstream = Upstream::start().await;
    let file = budget(
        "records",
        &upstream.url(),
        &CLASSES.replace("max_queued = 20", "max_queued = 2"),
    );
    let (proxy, _) = proxy(&file).await;
    let addr = proxy.local_addr("records").unwrap();
    let holder = tokio::spawn(async move { get_with(&client(), addr, "/hold?holder", None).await });
    until("the holder upstream", || upstream.seen().len() == 1).await;
    let mut batch = Vec::new();
    for i in 0..2 {
        let path = format!("/hold?batch{i}");
        batch.push(tokio::spawn(async move {
            get_with(&client(), addr, &path, Some(b"batch")).await
        }));
        until("the batch request queued", || {
            waiting(&proxy) == (i + 1) as f64
        })
        .await;
    }
    // The queue is full: another batch request is refused, an interactive one gets a place.
    let (status, body) = get_with(&client(), addr, "/hold?batch2", Some(b"batch")).await;
    assert_eq!(status, 503, "{body}");
    let interactive = tokio::spawn(async move {
        get_with(&client(), addr, "/hold?interactive", Some(b"interactive")).await
    });
    let (status, body) = within(batch.pop().unwrap()).await.unwrap();
    assert_eq!(status, 503);
    assert!(body.contains("(evicted)"), "{body}");
    upstream.release(3);
    assert_eq!(holder.await.unwrap().0, 200);
    assert_eq!(interactive.await.unwrap().0, 200);
    assert_eq!(batch.pop().unwrap().await.unwrap().0, 200);
    let order: Vec<String> = upstream.seen().iter().map(|s| s.uri.clone()).collect();
    assert_eq!(
        order,
        ["/hold?holder", "/hold?interactive", "/hold?batch0"],
        "the newest batch request gave its place, the older one kept its own"
    );
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_proxy_replies_total{budget=records,reason=evicted}"],
        1.0
    );
    assert_eq!(
        m["inflight_proxy_replies_total{budget=records,reason=queue_full}"],
        1.0
    );
    assert_eq!(
        m["inflight_class_rejections_total{budget=records,class=batch,reason=evicted}"],
        1.0
    );
}

#[tokio::test]
async fn a_missing_unknown_or_malformed_class_header_is_the_default_class_never_an_error() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget("records", &upstream.url(), CLASSES)).await;
    let addr = proxy.local_addr("records").unwrap();
    let long = "interactive".repeat(6);
    let values: [Option<&[u8]>; 6] = [
        None,
        Some(b"urgent"),
        Some(b"Interactive"),
        Some(long.as_bytes()),
        Some(b"\xffinteractive"),
        Some(b"interactive"),
    ];
    let client = client();
    for (i, value) in values.iter().enumerate() {
        let (status, body) = get_with(&client, addr, &format!("/echo?{i}"), *value).await;
        assert_eq!(status, 200, "{value:?}: {body}");
    }
    let seen = upstream.seen();
    assert_eq!(seen.len(), values.len());
    for (s, value) in seen.iter().zip(values) {
        // The header reaches the upstream as the client sent it, byte for byte.
        assert_eq!(
            s.headers.get("x-priority").map(HeaderValue::as_bytes),
            value,
            "{s:?}"
        );
    }
    let m = metrics(&proxy);
    assert_eq!(m["inflight_budget_admitted_total{budget=records}"], 6.0);
    // Only the one exact "interactive" is in that class; the others are in the default, batch.
    assert_eq!(
        m["inflight_class_admitted_total{budget=records,class=interactive}"],
        1.0
    );
    assert_eq!(
        m["inflight_class_admitted_total{budget=records,class=batch}"],
        5.0
    );
}

#[tokio::test]
async fn a_reload_can_start_reading_the_class_header_and_change_the_classes() {
    let upstream = Upstream::start().await;
    let without = CLASSES.replace("\nclass_header = \"x-priority\"", "");
    let (proxy, _) = proxy(&budget("records", &upstream.url(), &without)).await;
    let addr = proxy.local_addr("records").unwrap();
    let class_admitted = |class: &str| {
        metrics(&proxy)[&format!("inflight_class_admitted_total{{budget=records,class={class}}}")]
    };
    let client = client();
    assert_eq!(
        get_with(&client, addr, "/", Some(b"interactive")).await.0,
        200
    );
    assert_eq!(class_admitted("interactive"), 0.0, "no class_header yet");
    assert_eq!(class_admitted("batch"), 1.0);
    // The header alone changes the route, not the budget; the route reads it from now on.
    let reloaded = proxy
        .reload(&budget("records", &upstream.url(), CLASSES))
        .unwrap();
    assert_eq!(reloaded.changed, ["records"]);
    assert_eq!(
        get_with(&client, addr, "/", Some(b"interactive")).await.0,
        200
    );
    assert_eq!(class_admitted("interactive"), 1.0);
    assert_eq!(class_admitted("batch"), 1.0);
    // New classes: a new budget, whose classes the header now names.
    let renamed = CLASSES.replace("interactive = 4", "urgent = 4");
    let reloaded = proxy
        .reload(&budget("records", &upstream.url(), &renamed))
        .unwrap();
    assert_eq!(reloaded.changed, ["records"]);
    assert_eq!(get_with(&client, addr, "/", Some(b"urgent")).await.0, 200);
    assert_eq!(
        get_with(&client, addr, "/", Some(b"interactive")).await.0,
        200
    );
    assert_eq!(class_admitted("urgent"), 1.0);
}
