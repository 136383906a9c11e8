//! A real Rust gRPC server and client, both `tonic`, through the proxy on 127.0.0.1: unary and
//! server-streaming methods, a light and a heavy method with budgets of their own on one
//! listener, a server that refuses beyond its capacity with `RESOURCE_EXHAUSTED` (which an
//! adaptive budget learns from), and the proxy's own refusals as gRPC statuses with messages.
//!
//! The messages are written out with `prost`'s derive and the services with tonic's `Grpc`
//! helpers, as tonic's generated code does, so that no `protoc` is needed.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::Stream;
use tonic::codegen::http;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

use crate::support::{metrics, proxy, until, within};

/// `inflight_proxy_grpc_calls_total` of one budget, method and status (0 when absent).
fn grpc_calls(proxy: &inflight_proxy::Proxy, budget: &str, method: &str, status: &str) -> u64 {
    metrics(proxy)
        .get(&format!(
            "inflight_proxy_grpc_calls_total{{budget={budget},grpc_status={status},method={method}}}"
        ))
        .map_or(0, |n| *n as u64)
}

#[derive(Clone, PartialEq, prost::Message)]
struct Ask {
    #[prost(uint32, tag = "1")]
    n: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Answer {
    #[prost(uint32, tag = "1")]
    n: u32,
}

/// What the server saw: the most calls of each method inside at once.
#[derive(Default)]
struct Seen {
    get_inside: AtomicUsize,
    get_peak: AtomicUsize,
    export_inside: AtomicUsize,
    export_peak: AtomicUsize,
}

/// `demo.Records`: `Get` takes 20 ms and serves at most `capacity` at once, refusing the rest
/// at once with `RESOURCE_EXHAUSTED` "busy" (no queue); `Export` takes 300 ms; `Watch` streams
/// three answers 10 ms apart.
#[derive(Clone)]
struct Records {
    capacity: usize,
    seen: Arc<Seen>,
}

impl tonic::server::NamedService for Records {
    const NAME: &'static str = "demo.Records";
}

/// Counts a call in while it lives.
struct Inside<'a>(&'a AtomicUsize);

impl<'a> Inside<'a> {
    fn enter(inside: &'a AtomicUsize, peak: &AtomicUsize) -> (Inside<'a>, usize) {
        let now = inside.fetch_add(1, SeqCst) + 1;
        peak.fetch_max(now, SeqCst);
        (Inside(inside), now)
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

type Answers = Pin<Box<dyn Stream<Item = Result<Answer, Status>> + Send>>;

impl tower::Service<http::Request<tonic::body::Body>> for Records {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let this = self.clone();
        let codec = ProstCodec::<Answer, Ask>::default();
        match req.uri().path() {
            "/demo.Records/Get" => Box::pin(async move {
                let get = tower::service_fn(move |ask: tonic::Request<Ask>| {
                    let this = this.clone();
                    async move {
                        let seen = &this.seen;
                        let (_inside, now) = Inside::enter(&seen.get_inside, &seen.get_peak);
                        if now > this.capacity {
                            return Err(Status::resource_exhausted("busy"));
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Ok(tonic::Response::new(Answer {
                            n: ask.into_inner().n,
                        }))
                    }
                });
                Ok(tonic::server::Grpc::new(codec).unary(get, req).await)
            }),
            "/demo.Records/Export" => Box::pin(async move {
                let export = tower::service_fn(move |ask: tonic::Request<Ask>| {
                    let this = this.clone();
                    async move {
                        let seen = &this.seen;
                        let _inside = Inside::enter(&seen.export_inside, &seen.export_peak);
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        Ok::<_, Status>(tonic::Response::new(Answer {
                            n: ask.into_inner().n,
                        }))
                    }
                });
                Ok(tonic::server::Grpc::new(codec).unary(export, req).await)
            }),
            "/demo.Records/Watch" => Box::pin(async move {
                let watch = tower::service_fn(|ask: tonic::Request<Ask>| async move {
                    let n = ask.into_inner().n;
                    let answers = futures::stream::unfold(0, move |i| async move {
                        if i == 3 {
                            return None;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        Some((Ok(Answer { n: n + i }), i + 1))
                    });
                    Ok::<_, Status>(tonic::Response::new(Box::pin(answers) as Answers))
                });
                Ok(tonic::server::Grpc::new(codec)
                    .server_streaming(watch, req)
                    .await)
            }),
            _ => Box::pin(async move { Ok(Status::unimplemented("no such method").into_http()) }),
        }
    }
}

/// Starts the tonic server on 127.0.0.1; it stops when the test's runtime does.
async fn server(capacity: usize) -> (SocketAddr, Arc<Seen>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming: tonic::transport::server::TcpIncoming =
        tokio::net::TcpListener::from_std(listener).unwrap().into();
    let seen = Arc::new(Seen::default());
    let records = Records {
        capacity,
        seen: seen.clone(),
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(records)
            .serve_with_incoming(incoming),
    );
    (addr, seen)
}

type Client = tonic::client::Grpc<tonic::transport::Channel>;

async fn client(target: SocketAddr) -> Client {
    let channel = tonic::transport::Channel::from_shared(format!("http://{target}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    tonic::client::Grpc::new(channel)
}

async fn unary(mut client: Client, method: &'static str, n: u32) -> Result<u32, Status> {
    client
        .ready()
        .await
        .map_err(|e| Status::unknown(e.to_string()))?;
    let path = PathAndQuery::from_static(method);
    let answer = client
        .unary(
            tonic::Request::new(Ask { n }),
            path,
            ProstCodec::<Ask, Answer>::default(),
        )
        .await?;
    Ok(answer.into_inner().n)
}

/// The statuses of `tasks` x `calls` calls of `method`, each task on a clone of one channel.
async fn statuses(
    client: &Client,
    method: &'static str,
    tasks: u32,
    calls: u32,
) -> Vec<Result<u32, Status>> {
    let all = (0..tasks).map(|t| {
        let client = client.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            for c in 0..calls {
                seen.push(unary(client.clone(), method, t * calls + c).await);
            }
            seen
        })
    });
    let mut out = Vec::new();
    for task in futures::future::join_all(all).await {
        out.extend(task.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tonic_server_and_client_through_the_proxy_with_a_budget_per_method() {
    let (upstream, seen) = server(6).await;
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
        protocol = "grpc"

        [budgets.export]
        max_concurrent = 1
        max_queued = 0
        upstream = "http://{upstream}"
        protocol = "grpc"

        [[proxy.routes]]
        listen = "127.0.0.1:0"
        prefix = "/demo.Records/Export"
        budget = "export"
        "#
    ))
    .await;
    let target = proxy.local_addr("get").unwrap();
    let client = within(client(target)).await;

    // The light method: a server that refuses beyond 6, an adaptive budget that starts at 16.
    let gets = within(statuses(&client, "/demo.Records/Get", 32, 10)).await;
    let mut ok = 0;
    let mut busy = 0;
    for (i, seen) in gets.iter().enumerate() {
        match seen {
            Ok(n) => {
                assert_eq!(*n as usize, i, "each answer is its own call's");
                ok += 1;
            }
            Err(s) if s.code() == Code::ResourceExhausted => {
                assert_eq!(s.message(), "busy", "the server's message, unchanged");
                busy += 1;
            }
            Err(s) => panic!("a status the server never sent reached the client: {s:?}"),
        }
    }
    assert!(
        ok >= 160,
        "most calls pass once the limit has learned: {ok} ok, {busy} busy"
    );
    let m = metrics(&proxy);
    assert!(
        m["inflight_budget_limit{budget=get}"] < 16.0,
        "the adaptive limit learned of the overload"
    );
    assert_eq!(
        m["inflight_budget_outcomes_total{budget=get,outcome=overload}"] as u64, busy,
        "every RESOURCE_EXHAUSTED told the limit"
    );
    // Each call counted once under its method, by the status the client saw.
    let get = "/demo.Records/Get";
    until("every Get counted", || {
        grpc_calls(&proxy, "get", get, "OK") == ok
            && grpc_calls(&proxy, "get", get, "RESOURCE_EXHAUSTED") == busy
    })
    .await;

    // The heavy method, on the same listener, has a budget of 1 and no queue: the server never
    // sees two exports at once, and the client sees the proxy's refusals as UNAVAILABLE naming
    // the budget.
    let exports = within(statuses(&client, "/demo.Records/Export", 4, 2)).await;
    assert_eq!(
        seen.export_peak.load(SeqCst),
        1,
        "exports at the server at once"
    );
    let done = exports.iter().filter(|s| s.is_ok()).count();
    let refused: Vec<&Status> = exports.iter().filter_map(|s| s.as_ref().err()).collect();
    assert!(done >= 1 && !refused.is_empty(), "{exports:?}");
    for status in refused {
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(
            status.message().contains("budget \"export\"")
                && status.message().contains("(queue_full)"),
            "{status:?}"
        );
    }
    until("the export refusals counted", || {
        metrics(&proxy)
            .get("inflight_budget_rejections_total{budget=export,reason=queue_full}")
            .is_some_and(|n| *n as usize == 8 - done)
    })
    .await;
    let export = "/demo.Records/Export";
    until("every Export counted", || {
        grpc_calls(&proxy, "export", export, "OK") == done as u64
            && grpc_calls(&proxy, "export", export, "UNAVAILABLE") == 8 - done as u64
    })
    .await;

    // A server-streaming call streams through whole, on the light method's budget.
    let mut watch = client.clone();
    within(watch.ready()).await.unwrap();
    let mut stream = within(watch.server_streaming(
        tonic::Request::new(Ask { n: 40 }),
        PathAndQuery::from_static("/demo.Records/Watch"),
        ProstCodec::<Ask, Answer>::default(),
    ))
    .await
    .unwrap()
    .into_inner();
    let mut got = Vec::new();
    while let Some(answer) = within(stream.message()).await.unwrap() {
        got.push(answer.n);
    }
    assert_eq!(got, [40, 41, 42]);
    // Its status came in its trailers, after the three answers.
    let watch = "/demo.Records/Watch";
    until("the stream counted", || {
        grpc_calls(&proxy, "get", watch, "OK") == 1
    })
    .await;
    assert_eq!(grpc_calls(&proxy, "get", watch, "none"), 0);
    assert!(
        seen.get_peak.load(SeqCst) >= 6,
        "the server was driven to its capacity"
    );
}
