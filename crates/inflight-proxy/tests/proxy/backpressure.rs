//! Back-pressure through the proxy: an upstream's 503 with `Retry-After` pauses its budget, so
//! the proxy sends it nothing until the pause ends; the proxy's own refusals say when to come
//! back where an honest estimate exists.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get as route_get;
use axum::Router;

use crate::support::{budget, client, get, metrics, proxy};

/// An upstream on 127.0.0.1: `/busy` answers its first request 503 with `Retry-After: 1` and
/// later ones 200; `/slow` answers 200 after 300 ms. Records when each request arrived.
async fn upstream() -> (SocketAddr, Arc<Mutex<Vec<Instant>>>) {
    let seen: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let (a, b) = (seen.clone(), seen.clone());
    let app = Router::new()
        .route(
            "/busy",
            route_get(move || {
                let seen = a.clone();
                async move {
                    let mut seen = seen.lock().unwrap();
                    seen.push(Instant::now());
                    if seen.len() == 1 {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            [("retry-after", "1")],
                            "busy\n",
                        )
                            .into_response()
                    } else {
                        "ready\n".into_response()
                    }
                }
            }),
        )
        .route(
            "/slow",
            route_get(move || {
                let seen = b.clone();
                async move {
                    seen.lock().unwrap().push(Instant::now());
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    "slow\n"
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

#[tokio::test]
async fn an_upstreams_503_with_retry_after_pauses_the_budget_and_the_proxy_refuses_with_retry_after(
) {
    let (upstream, seen) = upstream().await;
    let (proxy, _) = proxy(&budget(
        "llm",
        &format!("http://{upstream}"),
        "max_concurrent = 4\npermit_timeout = \"300ms\"",
    ))
    .await;
    let addr = proxy.local_addr("llm").unwrap();
    let (status, headers, _) = get(&client(), addr, "/busy").await;
    assert_eq!(status, 503, "the upstream's own answer, passed on");
    assert_eq!(headers["retry-after"], "1");
    assert!(!headers.contains_key("x-inflight-refused"));

    // Paused for 1 s; a request with 300 ms to wait is refused by the proxy, never sent.
    let (status, headers, body) = get(&client(), addr, "/busy").await;
    assert_eq!(status, 503);
    assert_eq!(headers["x-inflight-refused"], "paused");
    assert_eq!(
        headers["retry-after"], "1",
        "the pause's end, in whole seconds"
    );
    assert!(body.contains("asked for a pause"), "{body}");
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "a refused request was forwarded"
    );

    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_proxy_replies_total{budget=llm,reason=paused}"],
        1.0
    );
    assert_eq!(
        m["inflight_budget_rejections_total{budget=llm,reason=paused}"],
        1.0
    );
    assert_eq!(m["inflight_budget_pauses_total{budget=llm}"], 1.0);
    assert_eq!(
        m["inflight_budget_outcomes_total{budget=llm,outcome=overload}"],
        1.0
    );
}

#[tokio::test]
async fn after_an_upstreams_503_with_retry_after_the_next_request_waits_it_out() {
    let (upstream, seen) = upstream().await;
    let (proxy, _) = proxy(&budget(
        "llm",
        &format!("http://{upstream}"),
        "max_concurrent = 4\npermit_timeout = \"10s\"",
    ))
    .await;
    let addr = proxy.local_addr("llm").unwrap();
    assert_eq!(get(&client(), addr, "/busy").await.0, 503);
    assert_eq!(get(&client(), addr, "/busy").await.0, 200);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    // The pause began once the 503 came back, after the upstream saw the first request: the
    // second reached it at least the second it asked for later (a lower bound only).
    let gap = seen[1] - seen[0];
    assert!(gap >= Duration::from_secs(1), "{gap:?}");
}

#[tokio::test]
async fn a_full_queue_says_when_to_come_back_once_calls_were_measured() {
    let (upstream, _) = upstream().await;
    let (proxy, _) = proxy(&budget(
        "records",
        &format!("http://{upstream}"),
        "max_concurrent = 1\nmax_queued = 0",
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    assert_eq!(get(&client(), addr, "/slow").await.0, 200); // one call measured: 300 ms
    let held = tokio::spawn(async move { get(&client(), addr, "/slow").await });
    let mut refused = None;
    for _ in 0..200 {
        let (status, headers, _) = get(&client(), addr, "/slow").await;
        if status == 503 {
            refused = Some(headers);
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let headers = refused.expect("a request refused while the only permit was held");
    assert_eq!(headers["x-inflight-refused"], "queue_full");
    // One turn of a ~300 ms call on one permit, rounded up to whole seconds.
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(held.await.unwrap().0, 200);
}
