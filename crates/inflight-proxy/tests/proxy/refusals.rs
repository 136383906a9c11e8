//! The proxy's own answers: refusals never reach the upstream; timeouts and unreachable
//! upstreams are told apart; overload answers teach an adaptive limit.

use crate::support::{budget, client, get, metrics, proxy, until, Upstream};

#[tokio::test]
async fn a_full_queue_is_refused_with_503_and_never_forwarded() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "records",
        &upstream.url(),
        "max_concurrent = 2\nmax_queued = 0",
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async move { get(&client(), addr, "/hold").await }))
        .collect();
    until("two requests held upstream", || upstream.seen().len() == 2).await;

    for _ in 0..5 {
        let (status, headers, body) = get(&client(), addr, "/hold").await;
        assert_eq!(status, 503);
        assert_eq!(headers["x-inflight-refused"], "queue_full");
        assert!(!headers.contains_key("retry-after"), "{headers:?}");
        assert!(body.contains("\"records\""), "names the budget: {body}");
        assert!(body.contains("queue is full"), "names the reason: {body}");
    }
    assert_eq!(upstream.seen().len(), 2, "a refused request was forwarded");

    upstream.release(2);
    for h in held {
        assert_eq!(h.await.unwrap().0, 200);
    }
    assert_eq!(upstream.peak(), 2);
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_proxy_replies_total{budget=records,reason=queue_full}"],
        5.0
    );
    assert_eq!(
        m["inflight_proxy_requests_total{budget=records,status_class=5xx}"],
        5.0
    );
    assert_eq!(
        m["inflight_proxy_requests_total{budget=records,status_class=2xx}"],
        2.0
    );
    assert_eq!(
        m["inflight_budget_rejections_total{budget=records,reason=queue_full}"],
        5.0
    );
}

#[tokio::test]
async fn a_missed_permit_deadline_is_503() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "records",
        &upstream.url(),
        "max_concurrent = 1\npermit_timeout = \"50ms\"",
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    let held = tokio::spawn(async move { get(&client(), addr, "/hold").await });
    until("one request held upstream", || upstream.seen().len() == 1).await;
    let (status, headers, body) = get(&client(), addr, "/hold").await;
    assert_eq!(status, 503);
    assert_eq!(headers["x-inflight-refused"], "permit_timeout");
    assert!(!headers.contains_key("retry-after"));
    assert!(body.contains("permit_timeout"), "{body}");
    assert_eq!(upstream.seen().len(), 1);
    upstream.release(1);
    assert_eq!(held.await.unwrap().0, 200);
}

#[tokio::test]
async fn a_rate_limited_request_is_429_with_the_seconds_to_the_next_slot() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "llm",
        &upstream.url(),
        "max_concurrent = 4\nrate = \"1/min\"\npermit_timeout = \"10ms\"",
    ))
    .await;
    let addr = proxy.local_addr("llm").unwrap();
    let client = client();
    assert_eq!(get(&client, addr, "/").await.0, 200);
    let (status, headers, body) = get(&client, addr, "/").await;
    assert_eq!(status, 429);
    assert_eq!(headers["x-inflight-refused"], "rate_limited");
    // The next slot is a minute after the first call, 10 ms of which may be waited for.
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((59..=60).contains(&retry), "Retry-After: {retry}");
    assert!(
        body.contains("\"llm\"") && body.contains("rate limit"),
        "{body}"
    );
    assert_eq!(upstream.seen().len(), 1);
}

#[tokio::test]
async fn an_upstream_slower_than_the_call_timeout_gets_504_and_frees_its_permit() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "records",
        &upstream.url(),
        "max_concurrent = 1\ncall_timeout = \"100ms\"",
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    let (status, headers, body) = get(&client(), addr, "/hold").await;
    assert_eq!(status, 504);
    assert_eq!(headers["x-inflight-refused"], "call_timeout");
    assert!(body.contains("call_timeout"), "{body}");
    // The permit came back: the next request is forwarded.
    assert_eq!(get(&client(), addr, "/fast").await.0, 200);
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_budget_calls_total{budget=records,outcome=timeout}"],
        1.0
    );
    assert_eq!(m["inflight_budget_in_flight{budget=records}"], 0.0);
    upstream.release(1);
}

#[tokio::test]
async fn an_unreachable_upstream_gets_502_logged_and_counted() {
    let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", gone.local_addr().unwrap());
    drop(gone);
    let (proxy, log) = proxy(&budget(
        "records",
        &url,
        "max_concurrent = 8\nlimit = \"adaptive\"\nalgorithm = \"aimd\"\ninitial = 8",
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    let (status, headers, body) = get(&client(), addr, "/").await;
    assert_eq!(status, 502);
    assert_eq!(headers["x-inflight-refused"], "upstream_unreachable");
    assert!(body.contains("cannot be reached"), "{body}");
    let lines = log.lock().unwrap().clone();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("records") && l.contains("cannot connect") && l.contains(&url)),
        "{lines:?}"
    );
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_proxy_replies_total{budget=records,reason=upstream_unreachable}"],
        1.0
    );
    assert!(
        m["inflight_budget_limit{budget=records}"] < 8.0,
        "a connect failure is an overload signal: {}",
        m["inflight_budget_limit{budget=records}"]
    );
}

#[tokio::test]
async fn overload_statuses_cut_an_adaptive_limit_and_others_do_not() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "records",
        &upstream.url(),
        "max_concurrent = 8\nlimit = \"adaptive\"\nalgorithm = \"aimd\"\ninitial = 8\noverload_status = [503, 529]",
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    let client = client();
    let limit = |p: &inflight_proxy::Proxy| metrics(p)["inflight_budget_limit{budget=records}"];
    for code in [200, 404, 500, 429] {
        let (status, _, _) = get(&client, addr, &format!("/status/{code}")).await;
        assert_eq!(status, code, "the upstream's answer is passed through");
    }
    assert_eq!(limit(&proxy), 8.0, "none of 200, 404, 500, 429 is listed");
    let (status, headers, _) = get(&client, addr, "/status/529").await;
    assert_eq!(status, 529);
    assert!(!headers.contains_key("x-inflight-refused"));
    let after_529 = limit(&proxy);
    assert!(after_529 < 8.0, "529 is listed: {after_529}");
    get(&client, addr, "/status/503").await;
    assert!(limit(&proxy) < after_529);
}

/// A call past its call timeout is an overload signal by default; `overload_on_timeout = false`
/// keeps it from the limit (an upstream whose slow calls come whatever its load), while the
/// client still gets its 504 and the timeout is still counted.
#[tokio::test]
async fn a_timeout_cuts_an_adaptive_limit_unless_overload_on_timeout_is_false() {
    let upstream = Upstream::start().await;
    for (setting, cut) in [("", true), ("\noverload_on_timeout = false", false)] {
        let (proxy, _) = proxy(&budget(
            "records",
            &upstream.url(),
            &format!(
                "max_concurrent = 8\nlimit = \"adaptive\"\nalgorithm = \"aimd\"\ninitial = 8\ncall_timeout = \"50ms\"{setting}"
            ),
        ))
        .await;
        let addr = proxy.local_addr("records").unwrap();
        let (status, headers, _) = get(&client(), addr, "/sleep/2000").await;
        assert_eq!(status, 504);
        assert_eq!(headers["x-inflight-refused"], "call_timeout");
        let m = metrics(&proxy);
        let limit = m["inflight_budget_limit{budget=records}"];
        assert_eq!(limit < 8.0, cut, "{setting:?}: the limit is {limit}");
        assert_eq!(
            m["inflight_proxy_replies_total{budget=records,reason=call_timeout}"],
            1.0
        );
    }
}
