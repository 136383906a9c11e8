//! gRPC through the proxy, over real HTTP/2 connections on 127.0.0.1: the proxy's own refusals
//! reach a gRPC client as trailers-only gRPC statuses with a message (and a pushback where a
//! `Retry-After` would go), and an upstream's `grpc-status`, in a trailers-only answer or in
//! trailers, tells an adaptive budget of overload, its `grpc-retry-pushback-ms` pausing it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Empty, Full, StreamBody};
use hyper::body::{Body, Frame};
use hyper::{Request, Response};
use tokio::sync::Semaphore;

use crate::support::{h2_client, metrics, proxy, until, within, TestClient};

type Frames = futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>;

/// A gRPC-like HTTP/2 upstream: `/pkg.S/Busy` refuses trailers-only (`RESOURCE_EXHAUSTED`,
/// pushback 300 ms); `/pkg.S/Down` answers a message, then `UNAVAILABLE` in its trailers;
/// `/pkg.S/Hold` waits for a permit of `release`; `/pkg.S/HoldBusy` waits, then refuses as
/// `Busy` does; anything else answers a message and `OK`.
async fn upstream(release: Arc<Semaphore>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let release = release.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<_>| {
                    let release = release.clone();
                    async move {
                        let path = request.uri().path().to_string();
                        if path == "/pkg.S/Hold" || path == "/pkg.S/HoldBusy" {
                            release.acquire().await.unwrap().forget();
                        }
                        let response: Response<Either<Empty<Bytes>, StreamBody<Frames>>> =
                            if path == "/pkg.S/Busy" || path == "/pkg.S/HoldBusy" {
                                Response::builder()
                                    .header("content-type", "application/grpc")
                                    .header("grpc-status", "8")
                                    .header("grpc-message", "busy")
                                    .header("grpc-retry-pushback-ms", "300")
                                    .body(Either::Left(Empty::new()))
                                    .unwrap()
                            } else {
                                let code = if path == "/pkg.S/Down" { "14" } else { "0" };
                                let mut trailers = hyper::HeaderMap::new();
                                trailers.insert("grpc-status", code.parse().unwrap());
                                let frames = vec![
                                    Ok(Frame::data(Bytes::from_static(b"\0\0\0\0\x02hi"))),
                                    Ok(Frame::trailers(trailers)),
                                ];
                                Response::builder()
                                    .header("content-type", "application/grpc")
                                    .body(Either::Right(StreamBody::new(futures::stream::iter(
                                        frames,
                                    ))))
                                    .unwrap()
                            };
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
            });
        }
    });
    addr
}

/// What a gRPC client sees of one unary call: the HTTP status, the headers, whether the
/// answer ended with its headers (trailers-only), and the trailers if any.
struct Seen {
    status: u16,
    headers: hyper::HeaderMap,
    trailers_only: bool,
    trailers: Option<hyper::HeaderMap>,
}

async fn call(client: &TestClient, addr: SocketAddr, method: &str, grpc: bool) -> Seen {
    let mut request = Request::post(format!("http://{addr}/pkg.S/{method}"));
    if grpc {
        request = request
            .header("content-type", "application/grpc")
            .header("te", "trailers");
    }
    let request = request
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
        .unwrap();
    let response = within(client.request(request)).await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let trailers_only = response.body().is_end_stream();
    let collected = within(response.into_body().collect()).await.unwrap();
    Seen {
        status,
        headers,
        trailers_only,
        trailers: collected.trailers().cloned(),
    }
}

fn text(value: Option<&hyper::header::HeaderValue>) -> &str {
    value.map_or("", |v| v.to_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxys_refusals_reach_a_grpc_client_as_grpc_statuses() {
    let release = Arc::new(Semaphore::new(0));
    let addr = upstream(release.clone()).await;
    let (proxy, _) = proxy(&format!(
        r#"
        [budgets.records]
        max_concurrent = 1
        max_queued = 0
        upstream = "http://{addr}"
        listen = "127.0.0.1:0"
        upstream_http2 = true

        [budgets.quota]
        max_concurrent = 4
        rate = "1/s"
        permit_timeout = "10ms"
        upstream = "http://{addr}"
        listen = "127.0.0.1:0"
        upstream_http2 = true
        "#
    ))
    .await;
    let records = proxy.local_addr("records").unwrap();
    let client = h2_client();
    let held = {
        let client = client.clone();
        tokio::spawn(async move { call(&client, records, "Hold", true).await })
    };
    until("one held", || {
        metrics(&proxy).get("inflight_budget_in_flight{budget=records}") == Some(&1.0)
    })
    .await;
    let refused = call(&client, records, "Get", true).await;
    assert_eq!(refused.status, 200, "a gRPC refusal is HTTP 200");
    assert!(refused.trailers_only, "and trailers-only");
    assert_eq!(
        text(refused.headers.get("grpc-status")),
        "14",
        "UNAVAILABLE"
    );
    let message = text(refused.headers.get("grpc-message"));
    assert!(
        message.contains("budget \"records\"") && message.contains("(queue_full)"),
        "{message}"
    );
    assert_eq!(
        text(refused.headers.get("x-inflight-refused")),
        "queue_full"
    );
    // A plain HTTP request to the same budget still gets a plain 503.
    let plain = call(&client, records, "Get", false).await;
    assert_eq!(plain.status, 503);
    release.add_permits(1);
    assert_eq!(
        text(
            held.await
                .unwrap()
                .trailers
                .as_ref()
                .unwrap()
                .get("grpc-status")
        ),
        "0"
    );

    // Rate limited: RESOURCE_EXHAUSTED, with the time until the rate admits a call.
    let quota = proxy.local_addr("quota").unwrap();
    assert_eq!(call(&client, quota, "Get", true).await.status, 200);
    let limited = call(&client, quota, "Get", true).await;
    assert!(limited.trailers_only);
    assert_eq!(
        text(limited.headers.get("grpc-status")),
        "8",
        "RESOURCE_EXHAUSTED"
    );
    let pushback: u64 = text(limited.headers.get("grpc-retry-pushback-ms"))
        .parse()
        .unwrap();
    assert!((1..=1000).contains(&pushback), "{pushback} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_grpc_status_tells_an_adaptive_budget_of_overload() {
    let addr = upstream(Arc::new(Semaphore::new(0))).await;
    let (proxy, _) = proxy(&format!(
        r#"
        [budgets.records]
        limit = "adaptive"
        algorithm = "aimd"
        initial = 8
        max = 16
        upstream = "http://{addr}"
        listen = "127.0.0.1:0"
        upstream_http2 = true
        "#
    ))
    .await;
    let records = proxy.local_addr("records").unwrap();
    let client = h2_client();
    let outcome = |which: &str| {
        metrics(&proxy)
            .get(&format!(
                "inflight_budget_outcomes_total{{budget=records,outcome={which}}}"
            ))
            .copied()
            .unwrap_or(0.0)
    };
    // A trailers-only RESOURCE_EXHAUSTED passes through as it is, is overload, and its
    // pushback pauses the budget.
    let busy = call(&client, records, "Busy", true).await;
    assert!(busy.trailers_only);
    assert_eq!(text(busy.headers.get("grpc-status")), "8");
    // The call ends as the proxy drops the answer's (empty) body, just after the client has it.
    until("the overload counted", || outcome("overload") == 1.0).await;
    let m = metrics(&proxy);
    assert_eq!(m["inflight_budget_pauses_total{budget=records}"], 1.0);
    assert!(
        m["inflight_budget_limit{budget=records}"] < 8.0,
        "the limit backed off"
    );
    // UNAVAILABLE in the trailers is overload too, once the body has ended.
    tokio::time::sleep(std::time::Duration::from_millis(350)).await;
    let down = call(&client, records, "Down", true).await;
    assert_eq!(
        text(down.trailers.as_ref().unwrap().get("grpc-status")),
        "14"
    );
    until("the trailers judged", || outcome("overload") == 2.0).await;
    // OK is a success; and a request that is not gRPC is judged by its HTTP status alone.
    call(&client, records, "Get", true).await;
    call(&client, records, "Busy", false).await;
    until("both successes", || outcome("success") == 2.0).await;
    assert_eq!(outcome("overload"), 2.0);
}

/// Whether Python's `grpcio` can be imported here (`scripts/test.sh` installs it from PyPI).
fn grpcio() -> bool {
    std::process::Command::new("python3")
        .args(["-c", "import grpc"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn script(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("clients")
        .join(name)
}

/// The statuses an unmodified `grpcio` client saw for `threads` x `calls` calls of `method`.
async fn grpcio_client(
    target: SocketAddr,
    method: &str,
    threads: u32,
    calls: u32,
) -> serde_json::Value {
    let finished = crate::support::run_bounded(
        tokio::process::Command::new("python3")
            .arg(script("grpc_client.py"))
            .arg(target.to_string())
            .arg(method)
            .arg(threads.to_string())
            .arg(calls.to_string()),
        std::time::Duration::from_secs(120),
    )
    .await;
    assert!(finished.status.success(), "{}", finished.stderr);
    serde_json::from_str(finished.stdout.trim()).unwrap()
}

/// A real gRPC server and client (Python's `grpcio`, no generated code) through the proxy: a
/// server that serves 6 calls at once and refuses the rest with `RESOURCE_EXHAUSTED`, no queue;
/// an adaptive budget for its cheap method learns that capacity from the statuses, every status
/// reaching the client as the server sent it; its heavy method has a budget of 1 of its own on
/// the same listener, whose refusals the client sees as `UNAVAILABLE` naming the budget; and a
/// server-streaming call streams through whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_grpcio_server_and_client_through_the_proxy() {
    if !grpcio() {
        eprintln!("skipping: Python's grpcio is not installed (scripts/test.sh installs it)");
        return;
    }
    let mut server = tokio::process::Command::new("python3")
        .arg(script("grpc_server.py"))
        .arg("6")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = tokio::io::BufReader::new(server.stdout.take().unwrap());
    let mut port = String::new();
    within(tokio::io::AsyncBufReadExt::read_line(&mut out, &mut port))
        .await
        .unwrap();
    let upstream: SocketAddr = format!("127.0.0.1:{}", port.trim()).parse().unwrap();
    let (proxy, _) = proxy(&format!(
        r#"
        [budgets.get]
        limit = "adaptive"
        algorithm = "aimd"
        initial = 16
        max = 32
        permit_timeout = "2s"
        upstream = "http://{upstream}"
        listen = "127.0.0.1:0"
        upstream_http2 = true

        [budgets.export]
        max_concurrent = 1
        max_queued = 0
        upstream = "http://{upstream}"
        upstream_http2 = true

        [[proxy.routes]]
        listen = "127.0.0.1:0"
        prefix = "/demo.Records/Export"
        budget = "export"
        "#
    ))
    .await;
    let target = proxy.local_addr("get").unwrap();

    let get = grpcio_client(target, "Get", 32, 10).await;
    let statuses = get["statuses"].as_object().unwrap();
    for code in statuses.keys() {
        assert!(
            ["OK", "RESOURCE_EXHAUSTED"].contains(&code.as_str()),
            "a status the server never sent reached the client: {get}"
        );
    }
    let ok = statuses["OK"].as_u64().unwrap();
    assert!(
        ok >= 160,
        "most calls pass once the limit has learned: {get}"
    );
    if let Some(busy) = statuses.get("RESOURCE_EXHAUSTED") {
        assert_eq!(get["messages"]["RESOURCE_EXHAUSTED"], "busy", "{busy}");
    }
    let m = metrics(&proxy);
    assert!(
        m["inflight_budget_limit{budget=get}"] < 16.0,
        "the adaptive limit learned of the overload: {get}"
    );
    assert_eq!(
        m["inflight_budget_outcomes_total{budget=get,outcome=overload}"] as u64,
        statuses
            .get("RESOURCE_EXHAUSTED")
            .map_or(0, |n| n.as_u64().unwrap()),
        "every RESOURCE_EXHAUSTED told the limit"
    );

    let export = grpcio_client(target, "Export", 4, 2).await;
    assert!(export["statuses"]["OK"].as_u64().unwrap() >= 1, "{export}");
    assert!(
        export["statuses"]["UNAVAILABLE"].as_u64().unwrap() >= 1,
        "{export}"
    );
    let message = export["messages"]["UNAVAILABLE"].as_str().unwrap();
    assert!(
        message.contains("budget \"export\"") && message.contains("(queue_full)"),
        "{message}"
    );

    let watch = grpcio_client(target, "Watch", 2, 2).await;
    assert_eq!(watch["statuses"]["OK"], 4, "{watch}");
    assert_eq!(watch["streamed"]["3"], 4, "every stream whole: {watch}");
    drop(server.stdin.take());
}

/// With `on_client_gone = "finish"`, a call whose client left goes on, and the gRPC status of
/// its trailers-only answer is counted for its method as if the client had stayed.
#[tokio::test]
async fn a_trailers_only_status_is_counted_for_a_client_that_left() {
    let release = Arc::new(Semaphore::new(0));
    let addr = upstream(release.clone()).await;
    let (proxy, _) = proxy(&format!(
        r#"
        [budgets.records]
        max_concurrent = 1
        call_timeout = "10s"
        on_client_gone = "finish"
        upstream = "http://{addr}"
        listen = "127.0.0.1:0"
        protocol = "grpc"
        "#
    ))
    .await;
    let records = proxy.local_addr("records").unwrap();
    let client = h2_client();
    let asked = tokio::spawn(async move { call(&client, records, "HoldBusy", true).await.status });
    until("the call holds its permit", || {
        metrics(&proxy)["inflight_budget_in_flight{budget=records}"] == 1.0
    })
    .await;
    asked.abort();
    // The stream's reset reaches the proxy; were the answer first, it would count it too.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    release.add_permits(1);
    until("the call ends", || {
        metrics(&proxy)["inflight_budget_in_flight{budget=records}"] == 0.0
    })
    .await;
    let counted = "inflight_proxy_grpc_calls_total{budget=records,grpc_status=RESOURCE_EXHAUSTED,method=/pkg.S/HoldBusy}";
    until("the status counted", || {
        metrics(&proxy).get(counted) == Some(&1.0)
    })
    .await;
}
