//! Operations: the admin server, reloads, draining, bad input and startup errors.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use inflight_proxy::{Proxy, ReloadError, StartError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{budget, client, get, metrics, proxy, until, within, Upstream};

#[tokio::test]
async fn the_admin_server_serves_metrics_health_and_readiness() {
    let upstream = Upstream::start().await;
    let text = format!(
        "[proxy]\nadmin = \"127.0.0.1:0\"\n{}",
        budget("records", &upstream.url(), "max_concurrent = 3")
    );
    let (proxy, _) = proxy(&text).await;
    let addr = proxy.local_addr("records").unwrap();
    let admin = proxy.admin_addr().unwrap();
    let client = client();
    for i in 0..7 {
        assert_eq!(get(&client, addr, &format!("/{i}")).await.0, 200);
    }
    let (status, headers, body) = get(&client, admin, "/metrics").await;
    assert_eq!(status, 200);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let lines = body.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
    let value = |name: &str, label: (&str, &str)| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && s.labels.get(label.0) == Some(label.1))
            .map(|s| s.value.clone())
    };
    assert_eq!(
        value("inflight_proxy_requests_total", ("status_class", "2xx")),
        Some(prometheus_parse::Value::Counter(7.0))
    );
    match value(
        "inflight_proxy_request_duration_seconds",
        ("budget", "records"),
    ) {
        Some(prometheus_parse::Value::Histogram(buckets)) => {
            assert_eq!(buckets.last().unwrap().count, 7.0, "{buckets:?}");
        }
        other => panic!("no latency histogram: {other:?}"),
    }
    assert_eq!(
        value("inflight_budget_admitted_total", ("budget", "records")),
        Some(prometheus_parse::Value::Counter(7.0))
    );
    assert_eq!(
        value("inflight_budget_limit", ("budget", "records")),
        Some(prometheus_parse::Value::Gauge(3.0))
    );
    // Each counter by reason names every reason it counts in its HELP.
    for name in [
        "inflight_proxy_connections_closed_total",
        "inflight_proxy_replies_total",
    ] {
        let help = &scrape.docs[name];
        for sample in scrape.samples.iter().filter(|s| s.metric == name) {
            let reason = sample.labels.get("reason").unwrap();
            assert!(help.contains(reason), "{name}: {reason:?} not in {help:?}");
        }
    }
    assert_eq!(get(&client, admin, "/healthz").await.0, 200);
    assert_eq!(get(&client, admin, "/readyz").await.0, 200);
    assert_eq!(get(&client, admin, "/nothing").await.0, 404);
}

#[tokio::test]
async fn a_reload_applies_new_limits_to_new_permits_and_keeps_held_ones() {
    let upstream = Upstream::start().await;
    let file = |extra: &str| budget("records", &upstream.url(), extra);
    let (proxy, _) = proxy(&file("max_concurrent = 2\nmax_queued = 0")).await;
    let addr = proxy.local_addr("records").unwrap();
    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async move { get(&client(), addr, "/hold").await }))
        .collect();
    until("two requests held upstream", || upstream.seen().len() == 2).await;

    let reloaded = proxy
        .reload(&file("max_concurrent = 3\nmax_queued = 0"))
        .unwrap();
    assert_eq!(reloaded.changed, ["records"]);
    assert_eq!(
        metrics(&proxy)["inflight_budget_limit{budget=records}"],
        3.0
    );
    // The held requests keep their permits, and count against the new limit of 3: one more
    // gets in, the next is refused.
    let third = tokio::spawn(async move { get(&client(), addr, "/hold").await });
    until("a third request held upstream", || {
        upstream.seen().len() == 3
    })
    .await;
    let (status, headers, _) = get(&client(), addr, "/").await;
    assert_eq!(
        status, 503,
        "admitted on top of the requests held before the reload"
    );
    assert_eq!(headers["x-inflight-refused"], "queue_full");
    assert_eq!(upstream.seen().len(), 3);
    upstream.release(3);
    for h in held {
        assert_eq!(h.await.unwrap().0, 200);
    }
    assert_eq!(third.await.unwrap().0, 200);
    // Once they are done, the new limit is all there is: three at once again.
    until("the held permits come back", || {
        metrics(&proxy)["inflight_budget_in_flight{budget=records}"] == 0.0
    })
    .await;
    let three: Vec<_> = (0..3)
        .map(|_| tokio::spawn(async move { get(&client(), addr, "/hold").await }))
        .collect();
    until("three requests held upstream", || {
        upstream.seen().len() == 6
    })
    .await;
    upstream.release(3);
    for h in three {
        assert_eq!(h.await.unwrap().0, 200);
    }

    // An invalid file keeps the running configuration.
    let err = proxy.reload(&file("max_concurrent = 0")).unwrap_err();
    assert!(matches!(err, ReloadError::Config(_)), "{err:?}");
    assert!(
        err.to_string().contains("budgets.records.max_concurrent"),
        "{err}"
    );
    assert_eq!(
        metrics(&proxy)["inflight_budget_limit{budget=records}"],
        3.0
    );
    // So does one that moves the listener.
    let moved = "[budgets.records]\nmax_concurrent = 1\nupstream = \"http://127.0.0.1:1\"\nlisten = \"127.0.0.1:2\"\n";
    let err = proxy.reload(moved).unwrap_err();
    assert!(
        err.to_string().starts_with("budgets.records.listen: "),
        "{err}"
    );
    let fleet = format!(
        "[fleet]\nurl = \"redis://127.0.0.1:1\"\n{}",
        file("max_concurrent = 3\nmax_queued = 0")
    );
    let err = proxy.reload(&fleet).unwrap_err();
    assert!(err.to_string().starts_with("fleet: "), "{err}");
    assert_eq!(get(&client(), addr, "/").await.0, 200);

    // An unchanged file changes nothing, and keeps the budget's counters.
    let before = metrics(&proxy)["inflight_budget_admitted_total{budget=records}"];
    let reloaded = proxy
        .reload(&file("max_concurrent = 3\nmax_queued = 0"))
        .unwrap();
    assert!(reloaded.changed.is_empty(), "{reloaded:?}");
    assert_eq!(
        metrics(&proxy)["inflight_budget_admitted_total{budget=records}"],
        before
    );
}

/// A reload that replaces a budget (new settings) carries its counts on: the counters in
/// `/metrics` and `/budgets.json` go on from the old budget's, instead of standing still until
/// the new budget's own counts pass them (the Prometheus counters never go down).
#[tokio::test]
async fn a_reload_that_replaces_a_budget_carries_its_counters_on() {
    let upstream = Upstream::start().await;
    let file = |extra: &str| {
        format!(
            "[proxy]\nadmin = \"127.0.0.1:0\"\n{}",
            budget("records", &upstream.url(), extra)
        )
    };
    let (proxy, _) = proxy(&file("max_concurrent = 2")).await;
    let addr = proxy.local_addr("records").unwrap();
    let admin = proxy.admin_addr().unwrap();
    let client = client();
    let calls = |n: usize| {
        let client = client.clone();
        async move {
            for i in 0..n {
                assert_eq!(get(&client, addr, &format!("/{i}")).await.0, 200);
            }
        }
    };
    let counted = |proxy: &Proxy| {
        let m = metrics(proxy);
        (
            m["inflight_budget_admitted_total{budget=records}"],
            m["inflight_budget_calls_total{budget=records,outcome=ok}"],
            m["inflight_budget_limit{budget=records}"],
        )
    };
    let json = || {
        let client = client.clone();
        async move {
            let (status, _, body) = get(&client, admin, "/budgets.json").await;
            assert_eq!(status, 200);
            let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
            let b = doc["budgets"][0].clone();
            (b["admitted"].as_u64(), b["calls"]["ok"].as_u64())
        }
    };
    calls(5).await;
    assert_eq!(counted(&proxy), (5.0, 5.0, 2.0));
    let reloaded = proxy.reload(&file("max_concurrent = 3")).unwrap();
    assert_eq!(reloaded.changed, ["records"]);
    calls(2).await;
    assert_eq!(counted(&proxy), (7.0, 7.0, 3.0));
    assert_eq!(json().await, (Some(7), Some(7)));
    // Again, with the first budget long unused: its counts stay in.
    proxy.reload(&file("max_concurrent = 4")).unwrap();
    calls(1).await;
    assert_eq!(counted(&proxy), (8.0, 8.0, 4.0));
    assert_eq!(json().await, (Some(8), Some(8)));
}

/// Lowering a limit holds for requests that were already waiting: the old budget's queue does
/// not go on admitting up to the old limit.
#[tokio::test]
async fn a_lowered_limit_holds_for_requests_queued_before_the_reload() {
    let upstream = Upstream::start().await;
    let file = |extra: &str| {
        format!(
            "[proxy]\nadmin = \"127.0.0.1:0\"\n{}",
            budget("records", &upstream.url(), extra)
        )
    };
    let (proxy, _) = proxy(&file("max_concurrent = 3\nmax_queued = 10")).await;
    let addr = proxy.local_addr("records").unwrap();
    let requests: Vec<_> = (0..9)
        .map(|_| tokio::spawn(async move { get(&client(), addr, "/hold").await }))
        .collect();
    until("three held upstream and six waiting", || {
        upstream.seen().len() == 3
            && metrics(&proxy)["inflight_budget_waiting{budget=records}"] == 6.0
    })
    .await;
    proxy
        .reload(&file("max_concurrent = 1\nmax_queued = 10"))
        .unwrap();
    // The gauge counts the calls at the upstream, the three of the replaced budget (not the
    // one permit of the new held for them).
    assert_eq!(
        metrics(&proxy)["inflight_budget_in_flight{budget=records}"],
        3.0
    );
    let admin = proxy.admin_addr().unwrap();
    let (_, _, doc) = get(&client(), admin, "/budgets.json").await;
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(doc["budgets"][0]["in_flight"], 3, "{doc}");
    // The three held requests end; of the six that waited, one at a time reaches the upstream.
    upstream.release(3);
    until("a fourth request upstream", || upstream.seen().len() == 4).await;
    until("the gauge at the one call upstream", || {
        metrics(&proxy)["inflight_budget_in_flight{budget=records}"] == 1.0
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        upstream.seen().len(),
        4,
        "requests queued before the reload were admitted beside each other"
    );
    for n in 5..=9 {
        upstream.release(1);
        until("the next request upstream", || upstream.seen().len() == n).await;
    }
    upstream.release(1);
    for r in requests {
        assert_eq!(r.await.unwrap().0, 200);
    }
    // Each counted once, as it went: a permit the replaced budget granted a request that
    // then waited again under the new one was not a call, and is not counted cancelled.
    until("every call ended", || {
        metrics(&proxy)["inflight_budget_in_flight{budget=records}"] == 0.0
    })
    .await;
    let m = metrics(&proxy);
    let calls = |outcome: &str| {
        m.get(&format!(
            "inflight_budget_calls_total{{budget=records,outcome={outcome}}}"
        ))
        .copied()
        .unwrap_or(0.0)
    };
    assert_eq!((calls("ok"), calls("cancelled")), (9.0, 0.0), "{m:?}");
}

#[tokio::test]
async fn draining_finishes_what_is_in_flight_and_refuses_new_connections() {
    let upstream = Upstream::start().await;
    let text = format!(
        "[proxy]\nadmin = \"127.0.0.1:0\"\ndrain = \"20s\"\n{}",
        budget("records", &upstream.url(), "max_concurrent = 4")
    );
    let (proxy, _) = proxy(&text).await;
    let addr = proxy.local_addr("records").unwrap();
    let admin = proxy.admin_addr().unwrap();
    let body = upstream.next_stream();
    let streaming = tokio::spawn(async move { get(&client(), addr, "/stream").await });
    until("the stream started upstream", || upstream.seen().len() == 1).await;

    let drain = tokio::spawn(proxy.drain());
    let mut readyz = 0;
    for _ in 0..200 {
        readyz = get(&client(), admin, "/readyz").await.0;
        if readyz == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(readyz, 503, "readyz while draining");
    // New connections are refused once the listener is closed.
    let mut refused = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "the listener still accepts while draining");
    assert!(
        !drain.is_finished(),
        "the drain ended with a body still streaming"
    );

    body.send(Bytes::from("the end")).await.unwrap();
    drop(body);
    let (status, _, text) = streaming.await.unwrap();
    assert_eq!((status, text.as_str()), (200, "the end"));
    let drained = within(drain).await.unwrap();
    assert!(drained.in_time);
    assert_eq!(drained.in_flight, 0);
}

#[tokio::test]
async fn a_drain_stops_waiting_at_its_limit() {
    let upstream = Upstream::start().await;
    let text = |drain: &str| {
        format!(
            "[proxy]\ndrain = \"{drain}\"\n{}",
            budget("records", &upstream.url(), "max_concurrent = 4")
        )
    };
    let (proxy, _) = proxy(&text("10s")).await;
    // A reload sets the drain time, and says so.
    let reloaded = proxy.reload(&text("100ms")).unwrap();
    assert_eq!(reloaded.proxy_changed, ["proxy.drain"], "{reloaded:?}");
    assert!(reloaded.changed.is_empty(), "{reloaded:?}");
    let addr = proxy.local_addr("records").unwrap();
    let _held = tokio::spawn(async move { get(&client(), addr, "/hold").await });
    until("one request held upstream", || upstream.seen().len() == 1).await;
    let drained = within(proxy.drain()).await;
    assert!(!drained.in_time);
    assert_eq!(drained.in_flight, 1);
}

async fn raw(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may answer and close before reading all of a huge request.
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    within(stream.read_to_end(&mut answer)).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn malformed_requests_get_400_and_oversized_headers_431() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget("records", &upstream.url(), "max_concurrent = 2")).await;
    let addr = proxy.local_addr("records").unwrap();

    let answer = raw(addr, b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let answer = raw(addr, b"\x16\x03\x01\x02\x00garbage\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // HTTP/1.1 asks for exactly one Host (RFC 9112, 3.2); HTTP/1.0 for none.
    for request in [
        &b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n",
    ] {
        let answer = raw(addr, request).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains("exactly one Host header"), "{answer}");
    }
    let answer = raw(addr, b"GET / HTTP/1.0\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(1024 * 1024)
    );
    let answer = raw(addr, huge.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    // A head of 64 KiB is refused by the proxy, not forwarded (each slow client sending one
    // would hold that much); one of 24 KiB is served.
    let large = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let answer = raw(addr, large.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    let fits = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: {}\r\n\r\n",
        "a".repeat(24 * 1024)
    );
    let answer = raw(addr, fits.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // More than 100 fields, however short, are refused too; 100 are served.
    let fields = |n: usize| {
        let mut head = String::from("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
        for i in 0..n - 2 {
            head.push_str(&format!("X-F{i}: v\r\n"));
        }
        head + "\r\n"
    };
    let answer = raw(addr, fields(101).as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    let answer = raw(addr, fields(100).as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let answer = raw(
        addr,
        b"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // The HTTP/1.0 request, the head of 24 KiB and the one of 100 fields.
    assert_eq!(upstream.seen().len(), 3, "bad input was forwarded");
    // The proxy is still serving.
    assert_eq!(get(&client(), addr, "/").await.0, 200);
}

#[tokio::test]
async fn startup_errors_name_what_is_wrong() {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = taken.local_addr().unwrap();
    let text = format!(
        "[budgets.records]\nmax_concurrent = 1\nupstream = \"http://127.0.0.1:1\"\nlisten = \"{port}\"\n"
    );
    let err = Proxy::builder().start(&text).await.err().unwrap();
    assert!(matches!(err, StartError::Bind { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with(&format!(
            "budgets.records.listen: cannot listen on {port}: "
        )),
        "{err}"
    );
    let admin = format!(
        "[proxy]\nadmin = \"{port}\"\n{}",
        budget("r", "http://127.0.0.1:1", "max_concurrent = 1")
    );
    let err = Proxy::builder().start(&admin).await.err().unwrap();
    assert!(
        err.to_string().starts_with("proxy.admin: cannot listen on"),
        "{err}"
    );

    let err = Proxy::builder()
        .start("[budgets.records]\nmax_concurrent = 1\n")
        .await
        .err()
        .unwrap();
    assert!(matches!(err, StartError::NoProxiedBudget), "{err:?}");

    let fleet = format!(
        "[fleet]\nurl = \"http://127.0.0.1:1\"\n{}",
        budget(
            "records",
            "http://127.0.0.1:1",
            "max_concurrent = 1\nscope = \"fleet\""
        )
    );
    let err = Proxy::builder().start(&fleet).await.err().unwrap();
    assert!(matches!(err, StartError::Fleet(_)), "{err:?}");
    assert!(err.to_string().starts_with("fleet: "), "{err}");
}
