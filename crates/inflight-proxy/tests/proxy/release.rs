//! When the permit goes back: at the end of the body by default, at the headers on request.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use inflight_proxy::Proxy;

use crate::support::{
    assert_client_body, budget, client, get, metrics, proxy, stalled_post, within, TestClient,
    Upstream,
};

/// Starts a GET of `/stream` and returns the response once its headers and first chunk came.
async fn first_chunk(client: &TestClient, addr: SocketAddr) -> (hyper::Response<Incoming>, Bytes) {
    let request = hyper::Request::get(format!("http://{addr}/stream"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let mut response = within(client.request(request)).await.unwrap();
    assert_eq!(response.status(), 200);
    let frame = within(response.body_mut().frame()).await.unwrap().unwrap();
    (response, frame.into_data().unwrap())
}

#[tokio::test]
async fn a_streamed_body_holds_its_permit_to_the_end() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "downloads",
        &upstream.url(),
        "max_concurrent = 1\nmax_queued = 0",
    ))
    .await;
    let addr = proxy.local_addr("downloads").unwrap();
    let client = client();
    let body = upstream.next_stream();
    body.send(Bytes::from("first ")).await.unwrap();
    let (response, first) = first_chunk(&client, addr).await;
    assert_eq!(first, "first ");

    // Headers sent, body still streaming: the one permit is held, the next request refused.
    let (status, headers, _) = get(&client, addr, "/other").await;
    assert_eq!(
        status, 503,
        "a request got through while a body was streaming"
    );
    assert_eq!(headers["x-inflight-refused"], "queue_full");
    assert_eq!(
        metrics(&proxy)["inflight_budget_in_flight{budget=downloads}"],
        1.0
    );

    body.send(Bytes::from("second")).await.unwrap();
    drop(body);
    let rest = within(response.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(rest, "second");

    // The body ended: the permit is back.
    crate::support::until("the permit comes back", || {
        metrics(&proxy)["inflight_budget_in_flight{budget=downloads}"] == 0.0
    })
    .await;
    assert_eq!(get(&client, addr, "/other").await.0, 200);
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_budget_calls_total{budget=downloads,outcome=ok}"],
        2.0
    );
    assert_eq!(upstream.peak(), 1);
}

#[tokio::test]
async fn release_headers_gives_the_permit_back_before_the_body() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "downloads",
        &upstream.url(),
        "max_concurrent = 1\nmax_queued = 0\nrelease = \"headers\"",
    ))
    .await;
    let addr = proxy.local_addr("downloads").unwrap();
    let client = client();
    let body = upstream.next_stream();
    body.send(Bytes::from("first")).await.unwrap();
    let (response, _) = first_chunk(&client, addr).await;
    assert_eq!(
        get(&client, addr, "/other").await.0,
        200,
        "the permit was still held after the headers"
    );
    drop(body);
    within(response.into_body().collect()).await.unwrap();
}

#[tokio::test]
async fn a_body_still_streaming_at_the_call_timeout_is_cut_and_counted() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "downloads",
        &upstream.url(),
        "max_concurrent = 1\ncall_timeout = \"200ms\"",
    ))
    .await;
    let addr = proxy.local_addr("downloads").unwrap();
    let client = client();
    let body = upstream.next_stream();
    body.send(Bytes::from("first")).await.unwrap();
    let (response, _) = first_chunk(&client, addr).await;
    let rest = within(response.into_body().collect()).await;
    assert!(rest.is_err(), "a cut body must not look complete");
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_budget_calls_total{budget=downloads,outcome=timeout}"],
        1.0
    );
    assert_eq!(m["inflight_budget_in_flight{budget=downloads}"], 0.0);
    drop(body);
}

/// A proxy with the budget `downloads` of 1 (and `extra`) in front of a streaming upstream,
/// whose client left after the answer's first chunk; the sender of the answer's rest.
async fn left_mid_body(extra: &str) -> (Proxy, tokio::sync::mpsc::Sender<Bytes>) {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "downloads",
        &upstream.url(),
        &format!("max_concurrent = 1\n{extra}"),
    ))
    .await;
    let addr = proxy.local_addr("downloads").unwrap();
    let body = upstream.next_stream();
    body.send(Bytes::from("first")).await.unwrap();
    let client = client();
    let (response, _) = first_chunk(&client, addr).await;
    drop(response);
    drop(client);
    (proxy, body)
}

/// Waits until the budget `downloads` holds no permit; then its calls that ended `outcome`.
async fn ended(proxy: &Proxy, what: &str, outcome: &str) -> f64 {
    crate::support::until(what, || {
        metrics(proxy)["inflight_budget_in_flight{budget=downloads}"] == 0.0
    })
    .await;
    metrics(proxy)[&format!("inflight_budget_calls_total{{budget=downloads,outcome={outcome}}}")]
}

#[tokio::test]
async fn a_client_that_leaves_mid_body_frees_the_permit() {
    let (proxy, body) = left_mid_body("").await;
    assert_eq!(
        ended(&proxy, "the permit comes back", "cancelled").await,
        1.0
    );
    drop(body);
}

/// A client that asks and never reads: hyper stops polling the body once the socket's buffers
/// are full, and the call timeout must still end the call, give the permit back, and stop the
/// upstream serving it (its connection closed: it would otherwise go on past the limit).
#[tokio::test]
async fn a_client_that_never_reads_loses_the_permit_at_the_call_timeout() {
    never_read("").await;
}

/// The same through an HTTP/2 upstream (one connection, a stream per call): the call's stream
/// is reset.
#[tokio::test]
async fn a_client_that_never_reads_loses_the_permit_at_the_call_timeout_over_http2() {
    never_read("upstream_http2 = true").await;
}

async fn never_read(extra: &str) {
    use tokio::io::AsyncWriteExt;

    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "downloads",
        &upstream.url(),
        &format!("max_concurrent = 1\ncall_timeout = \"300ms\"\n{extra}"),
    ))
    .await;
    let addr = proxy.local_addr("downloads").unwrap();
    let feeder = upstream.flood_next_stream();
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"GET /stream HTTP/1.1\r\nhost: proxy\r\n\r\n")
        .await
        .unwrap();
    crate::support::until("the call to start", || {
        metrics(&proxy)["inflight_budget_in_flight{budget=downloads}"] == 1.0
    })
    .await;
    crate::support::until("the permit comes back at the call timeout", || {
        metrics(&proxy)["inflight_budget_in_flight{budget=downloads}"] == 0.0
    })
    .await;
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_budget_calls_total{budget=downloads,outcome=timeout}"],
        1.0
    );
    // The upstream's body stops: its connection was closed while the client still reads
    // nothing.
    let body = within(feeder).await.unwrap();
    assert!(
        body.is_closed(),
        "the upstream took 64 MiB for a client that reads nothing"
    );
    drop(socket);
}

/// A client that stops sending its request body holds no permit past the proxy's
/// `idle_timeout`: the request is answered 400 (`client_body`), the client's failure, and the
/// next request is served.
#[tokio::test]
async fn a_request_body_that_stalls_gives_the_permit_back_at_the_idle_timeout() {
    let upstream = Upstream::start().await;
    let text = format!(
        "[proxy]\nidle_timeout = \"300ms\"\n\n{}",
        budget(
            "uploads",
            &upstream.url(),
            "max_concurrent = 1\nmax_queued = 0"
        )
    );
    let (proxy, _) = proxy(&text).await;
    let addr = proxy.local_addr("uploads").unwrap();
    let answer = stalled_post(addr).await;
    assert_client_body(&answer);
    let (status, _, _) = get(&client(), addr, "/next").await;
    assert_eq!(status, 200, "the permit came back");
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_proxy_replies_total{budget=uploads,reason=client_body}"],
        1.0
    );
    assert_eq!(m["inflight_budget_in_flight{budget=uploads}"], 0.0);
}

/// A body that stalls past the call timeout is the client's failure too: 400 (`client_body`),
/// not 504, and an adaptive limit learns nothing from it.
#[tokio::test]
async fn a_request_body_stalled_past_the_call_timeout_teaches_an_adaptive_limit_nothing() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "uploads",
        &upstream.url(),
        "limit = \"adaptive\"\nalgorithm = \"aimd\"\ninitial = 4\nmax = 20\ncall_timeout = \"300ms\"",
    ))
    .await;
    let addr = proxy.local_addr("uploads").unwrap();
    for _ in 0..3 {
        let answer = stalled_post(addr).await;
        assert_client_body(&answer);
    }
    let m = metrics(&proxy);
    assert_eq!(m["inflight_budget_limit{budget=uploads}"], 4.0);
    assert_eq!(
        m["inflight_proxy_replies_total{budget=uploads,reason=call_timeout}"],
        0.0
    );
    assert_eq!(
        m["inflight_proxy_replies_total{budget=uploads,reason=client_body}"],
        3.0
    );
}

/// The same to an HTTP/2 upstream (hyper's client sends the body there): a body that stalls
/// gives its permit back at the proxy's `idle_timeout`, as the client's failure (400
/// `client_body`), even with no call timeout, and an adaptive limit learns nothing from it.
#[tokio::test]
async fn a_request_body_to_an_http2_upstream_that_stalls_gives_the_permit_back_at_the_idle_timeout()
{
    let upstream = Upstream::start().await;
    let text = format!(
        "[proxy]\nidle_timeout = \"300ms\"\n\n{}",
        budget(
            "uploads",
            &upstream.url(),
            "limit = \"adaptive\"\nalgorithm = \"aimd\"\ninitial = 2\nmin = 1\nmax = 20\n\
             max_queued = 0\nupstream_http2 = true"
        )
    );
    let (proxy, _) = proxy(&text).await;
    let addr = proxy.local_addr("uploads").unwrap();
    for _ in 0..2 {
        let answer = stalled_post(addr).await;
        assert_client_body(&answer);
    }
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_proxy_replies_total{budget=uploads,reason=client_body}"],
        2.0
    );
    assert_eq!(
        m.get("inflight_proxy_replies_total{budget=uploads,reason=upstream_unreachable}")
            .copied()
            .unwrap_or(0.0),
        0.0
    );
    assert_eq!(
        m["inflight_budget_limit{budget=uploads}"], 2.0,
        "nothing learned"
    );
    assert_eq!(m["inflight_budget_in_flight{budget=uploads}"], 0.0);
    let (status, _, _) = get(&client(), addr, "/next").await;
    assert_eq!(status, 200);
    let seen = upstream.seen();
    assert_eq!(
        seen.len(),
        1,
        "only the last request reached the upstream whole"
    );
    assert_eq!(seen[0].version, hyper::Version::HTTP_2);
}

/// A request body that pauses longer than the `idle_timeout` after the upstream's answer
/// began (a stream fed at the client's pace, as a gRPC client stream is) is not cut.
#[tokio::test]
async fn a_request_body_that_pauses_after_the_http2_upstream_answered_is_not_cut() {
    use http_body_util::channel::Channel;

    let echo = h2_echo_upstream().await;
    let text = format!(
        "[proxy]\nidle_timeout = \"300ms\"\n\n{}",
        budget(
            "streams",
            &format!("http://{echo}"),
            "max_concurrent = 1\nmax_queued = 0\nupstream_http2 = true"
        )
    );
    let (proxy, _) = proxy(&text).await;
    let addr = proxy.local_addr("streams").unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Channel<Bytes>>();
    let (mut tx, body) = Channel::<Bytes>::new(1);
    let request = hyper::Request::post(format!("http://{addr}/stream"))
        .body(body)
        .unwrap();
    tx.send_data(Bytes::from("first ")).await.unwrap();
    let mut response = within(client.request(request)).await.unwrap();
    assert_eq!(response.status(), 200);
    let first = within(response.body_mut().frame()).await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), "first ");
    // Three idle timeouts without a frame of the request's body.
    tokio::time::sleep(std::time::Duration::from_millis(900)).await;
    tx.send_data(Bytes::from("second")).await.unwrap();
    drop(tx);
    let rest = within(response.into_body().collect()).await.unwrap();
    assert_eq!(rest.to_bytes(), "second");
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_proxy_replies_total{budget=streams,reason=client_body}"],
        0.0
    );
    assert_eq!(m["inflight_budget_in_flight{budget=streams}"], 0.0);
}

/// A request body that breaks off on the client's side (malformed chunks) on its way to an
/// HTTP/2 upstream is the client's failure: 400 (`client_body`), and an adaptive limit learns
/// nothing (it was a 502 `upstream_unreachable` counted as overload).
#[tokio::test]
async fn a_malformed_request_body_to_an_http2_upstream_is_the_clients_failure() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "uploads",
        &upstream.url(),
        "limit = \"adaptive\"\nalgorithm = \"aimd\"\ninitial = 4\nmin = 1\nmax = 20\n\
         upstream_http2 = true",
    ))
    .await;
    let addr = proxy.local_addr("uploads").unwrap();
    for _ in 0..3 {
        let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        socket
            .write_all(
                b"POST /post HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\
                  connection: close\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
            )
            .await
            .unwrap();
        let mut answer = Vec::new();
        within(socket.read_to_end(&mut answer)).await.unwrap();
        assert_client_body(&String::from_utf8_lossy(&answer));
    }
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_budget_limit{budget=uploads}"], 4.0,
        "nothing learned"
    );
    assert_eq!(
        m.get("inflight_proxy_replies_total{budget=uploads,reason=upstream_unreachable}")
            .copied()
            .unwrap_or(0.0),
        0.0
    );
}

/// An HTTP/2 upstream on 127.0.0.1 that answers at once, echoing the request's body as it
/// comes.
async fn h2_echo_upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let echo = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|request: hyper::Request<Incoming>| {
                    std::future::ready(Ok::<_, std::convert::Infallible>(hyper::Response::new(
                        request.into_body(),
                    )))
                });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                        .await;
            });
        }
    });
    echo
}

/// A stream whose client pauses its request body past the call timeout after the upstream
/// answered is cut there, but teaches an adaptive limit nothing: the call waited for its
/// client, not for the upstream.
#[tokio::test]
async fn a_call_timeout_while_the_client_owes_its_streamed_body_teaches_an_adaptive_limit_nothing()
{
    use http_body_util::channel::Channel;

    let echo = h2_echo_upstream().await;
    let (proxy, _) = proxy(&budget(
        "streams",
        &format!("http://{echo}"),
        "limit = \"adaptive\"\nalgorithm = \"aimd\"\ninitial = 4\nmin = 1\nmax = 20\n\
         call_timeout = \"400ms\"\nupstream_http2 = true",
    ))
    .await;
    let addr = proxy.local_addr("streams").unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Channel<Bytes>>();
    for _ in 0..2 {
        let (mut tx, body) = Channel::<Bytes>::new(1);
        let request = hyper::Request::post(format!("http://{addr}/stream"))
            .body(body)
            .unwrap();
        tx.send_data(Bytes::from("first")).await.unwrap();
        let mut response = within(client.request(request)).await.unwrap();
        assert_eq!(response.status(), 200);
        let first = within(response.body_mut().frame()).await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "first");
        // The body pauses past the call timeout: the answer is cut there.
        let rest = within(response.into_body().collect()).await;
        assert!(rest.is_err(), "not cut at the call timeout: {rest:?}");
        drop(tx);
    }
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_budget_limit{budget=streams}"], 4.0,
        "nothing learned"
    );
    assert_eq!(
        m["inflight_budget_calls_total{budget=streams,outcome=timeout}"],
        0.0
    );
}

/// Two clients ask, and give up once the upstream works on their calls; two more ask then. The
/// upstream works on every request to its end whatever becomes of its connection (`/work`, as
/// a threaded server that never reads its socket again does). By default the calls of the
/// clients that left are cancelled and their permits go back at once: the upstream has 4 at
/// once under a limit of 2. With `on_client_gone = "finish"` they go on and hold their permits
/// until the upstream answers: it never has more than 2, and the calls count as they went
/// (over HTTP/1.1 or HTTP/2, from the client and to the upstream).
#[tokio::test]
async fn calls_whose_clients_left_hold_their_permits_until_answered_with_finish() {
    let cases = [
        (false, false, false),
        (true, false, false),
        (false, true, false),
        (true, true, false),
        (false, true, true),
        (true, true, true),
    ];
    for (http2, finish, upstream_http2) in cases {
        let upstream = Upstream::start().await;
        let gone = match (finish, upstream_http2) {
            (false, _) => "",
            (true, false) => "on_client_gone = \"finish\"",
            (true, true) => "on_client_gone = \"finish\"\nupstream_http2 = true",
        };
        let (proxy, _) = proxy(&budget(
            "records",
            &upstream.url(),
            &format!(
                "max_concurrent = 2\nmax_queued = 8\npermit_timeout = \"10s\"\n\
                 call_timeout = \"10s\"\n{gone}"
            ),
        ))
        .await;
        let addr = proxy.local_addr("records").unwrap();
        let leaving = leave_after_asking(&upstream, addr, http2, "/work/1500").await;
        let client = client();
        let staying: Vec<_> = (0..2)
            .map(|_| {
                let client = client.clone();
                tokio::spawn(async move { get(&client, addr, "/work/100").await.0 })
            })
            .collect();
        for call in staying {
            assert_eq!(within(call).await.unwrap(), 200);
        }
        drop(leaving);
        let case = format!("http2 client {http2}, finish {finish}, to http2 {upstream_http2}");
        if !finish {
            assert_eq!(
                upstream.peak(),
                4,
                "{case}: the upstream should have had the calls of the clients that left too"
            );
            assert_eq!(
                metrics(&proxy)["inflight_proxy_calls_without_client_total{budget=records}"],
                0.0
            );
            continue;
        }
        assert_eq!(
            upstream.peak(),
            2,
            "{case}: more than the limit at the upstream"
        );
        crate::support::until("the calls of the clients that left end", || {
            metrics(&proxy)["inflight_budget_in_flight{budget=records}"] == 0.0
        })
        .await;
        let m = metrics(&proxy);
        assert_eq!(
            m["inflight_budget_calls_total{budget=records,outcome=ok}"], 4.0,
            "{case}: {m:?}"
        );
        assert_eq!(
            m.get("inflight_budget_calls_total{budget=records,outcome=cancelled}"),
            Some(&0.0),
            "{case}"
        );
        assert_eq!(
            m["inflight_proxy_calls_without_client_total{budget=records}"], 2.0,
            "{case}"
        );
    }
}

/// Sends two requests for `path` to the proxy at `addr` and gives them up (HTTP/1.1: closes
/// their connections; HTTP/2: resets their streams) once the upstream works on both. Returns
/// what keeps an HTTP/2 client's connection open.
async fn leave_after_asking(
    upstream: &Upstream,
    addr: SocketAddr,
    http2: bool,
    path: &str,
) -> Option<TestClient> {
    use tokio::io::AsyncWriteExt;

    let in_service = || {
        upstream
            .state
            .in_service
            .load(std::sync::atomic::Ordering::SeqCst)
    };
    if http2 {
        let client = crate::support::h2_client();
        let asks: Vec<_> = (0..2)
            .map(|_| {
                let (client, path) = (client.clone(), path.to_string());
                tokio::spawn(async move { get(&client, addr, &path).await })
            })
            .collect();
        crate::support::until("the upstream works on both", || in_service() == 2).await;
        for ask in asks {
            ask.abort();
        }
        return Some(client);
    }
    let mut sockets = Vec::new();
    for _ in 0..2 {
        let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        socket
            .write_all(format!("GET {path} HTTP/1.1\r\nhost: proxy\r\n\r\n").as_bytes())
            .await
            .unwrap();
        sockets.push(socket);
    }
    crate::support::until("the upstream works on both", || in_service() == 2).await;
    drop(sockets);
    None
}

/// With `on_client_gone = "finish"`, a client that leaves mid-body leaves its call to go on: the
/// rest of the answer is read (and dropped) and the permit held until it ends, when the call
/// counts as it went.
#[tokio::test]
async fn with_finish_a_client_that_leaves_mid_body_leaves_its_call_to_end() {
    let (proxy, body) = left_mid_body("call_timeout = \"10s\"\non_client_gone = \"finish\"").await;
    // The rest still comes, and is taken: the upstream's stream is not closed.
    for i in 0..20 {
        within(body.send(Bytes::from(format!("chunk {i}"))))
            .await
            .expect("the upstream's stream was closed for a client that left");
    }
    assert_eq!(
        metrics(&proxy)["inflight_budget_in_flight{budget=downloads}"],
        1.0
    );
    drop(body);
    let what = "the permit comes back as the answer ends";
    assert_eq!(ended(&proxy, what, "ok").await, 1.0);
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_budget_calls_total{budget=downloads,outcome=cancelled}"],
        0.0
    );
    assert_eq!(
        m["inflight_proxy_calls_without_client_total{budget=downloads}"],
        1.0
    );
}

/// A drain waits for the calls that went on without their client, within its time, and cuts
/// those still running when its time is over (they count among the permits still held).
#[tokio::test]
async fn a_drain_waits_for_calls_whose_clients_left_and_cuts_them_at_its_end() {
    for (drain, in_time, in_flight) in [("5s", true, 0), ("300ms", false, 2)] {
        let upstream = Upstream::start().await;
        let (proxy, _) = proxy(&format!(
            "[proxy]\ndrain = \"{drain}\"\n{}",
            budget(
                "records",
                &upstream.url(),
                "max_concurrent = 2\ncall_timeout = \"10s\"\non_client_gone = \"finish\"",
            )
        ))
        .await;
        let addr = proxy.local_addr("records").unwrap();
        leave_after_asking(&upstream, addr, false, "/work/1500").await;
        let drained = within(proxy.drain()).await;
        assert_eq!(
            (drained.in_time, drained.in_flight),
            (in_time, in_flight),
            "drain {drain}"
        );
    }
}

/// A drain that runs out while the answer of a client that left is still read cuts it: the
/// upstream's connection closes (it was read on, handed from task to task, before).
#[tokio::test]
async fn a_drain_that_runs_out_cuts_the_answer_read_for_a_client_that_left() {
    let (proxy, body) = left_mid_body(
        "call_timeout = \"60s\"\non_client_gone = \"finish\"\n[proxy]\ndrain = \"300ms\"",
    )
    .await;
    until_left(&proxy).await;
    let drained = within(proxy.drain()).await;
    assert_eq!((drained.in_time, drained.in_flight), (false, 1));
    within(body.closed()).await;
}

/// A runtime that shuts down while the answer of a client that left is still read ends: the
/// task reading it is dropped once (it was handed on to a new task as each was dropped, until
/// the stack overflowed).
#[test]
fn a_runtime_that_shuts_down_while_an_answer_is_read_for_a_client_that_left_ends() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (proxy, body) = runtime.block_on(async {
        let (proxy, body) =
            left_mid_body("call_timeout = \"10s\"\non_client_gone = \"finish\"").await;
        until_left(&proxy).await;
        (proxy, body)
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(10));
    drop((proxy, body));
}

/// Waits until the client of `downloads` has left and its call goes on.
async fn until_left(proxy: &Proxy) {
    crate::support::until("the call goes on without its client", || {
        metrics(proxy)["inflight_proxy_calls_without_client_total{budget=downloads}"] == 1.0
    })
    .await;
}
