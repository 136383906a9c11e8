//! `BudgetLayer` against real HTTP on 127.0.0.1: a hyper client whose calls to a server that
//! holds 6 at once go through a budget, and an axum router that sheds load with 503 once its
//! budget's queue is full, and admits queued requests by the class an upstream middleware put
//! on them. Plus the layer's contract on paused time, classes included.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use inflight::limit::Outcome;
use inflight::tower::{BudgetError, BudgetLayer, RequestClass};
use inflight::{AcquireError, Budget, BudgetConfig, Classes};
use tokio::sync::Semaphore;
use tower::{service_fn, BoxError, Layer, Service, ServiceBuilder, ServiceExt};

/// A system of record on 127.0.0.1: serves 6 writes at once (50 ms each), lets 6 more wait,
/// answers 503 beyond that. Returns its address and its peak of writes in the building.
async fn system_of_record() -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let serving = Arc::new(Semaphore::new(6));
    let inside = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let (p, r) = (peak.clone(), refused.clone());
    let app = Router::new().route(
        "/records",
        post(move || {
            let (serving, inside, peak, refused) =
                (serving.clone(), inside.clone(), p.clone(), r.clone());
            async move {
                let now = inside.fetch_add(1, SeqCst) + 1;
                if now > 12 {
                    inside.fetch_sub(1, SeqCst);
                    refused.fetch_add(1, SeqCst);
                    return StatusCode::SERVICE_UNAVAILABLE;
                }
                peak.fetch_max(now, SeqCst);
                let _slot = serving.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
                inside.fetch_sub(1, SeqCst);
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/records"), peak, refused)
}

fn write_request(url: &str) -> axum::http::Request<Full<Bytes>> {
    axum::http::Request::post(url)
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_through_the_layer_never_floods_a_six_slot_server() {
    let (url, peak, refused) = system_of_record().await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let records = Budget::new("records", BudgetConfig::new(6)).unwrap();
    let svc = BudgetLayer::new(records.clone())
        .classify(
            |r: &Result<hyper::Response<hyper::body::Incoming>, _>| match r {
                Ok(resp) if resp.status() == 503 || resp.status() == 429 => Outcome::Overload,
                Ok(_) => Outcome::Success,
                Err(_) => Outcome::Overload,
            },
        )
        .layer(client);
    let calls: Vec<_> = (0..60)
        .map(|_| {
            let (svc, url) = (svc.clone(), url.clone());
            tokio::spawn(async move {
                let resp = svc.oneshot(write_request(&url)).await.unwrap();
                let status = resp.status();
                resp.into_body().collect().await.unwrap();
                status
            })
        })
        .collect();
    for c in calls {
        assert_eq!(c.await.unwrap(), StatusCode::OK);
    }
    assert!(
        peak.load(SeqCst) <= 6,
        "the server saw {}",
        peak.load(SeqCst)
    );
    assert_eq!(refused.load(SeqCst), 0);
    let s = records.snapshot();
    assert_eq!((s.admitted, s.peak_in_flight, s.in_flight), (60, 6, 0));

    // The same 60 calls without the layer draw 503s: the comparison that makes the above count.
    let raw = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let calls: Vec<_> = (0..60)
        .map(|_| {
            let (raw, url) = (raw.clone(), url.clone());
            tokio::spawn(async move { raw.request(write_request(&url)).await.unwrap().status() })
        })
        .collect();
    let mut unavailable = 0;
    for c in calls {
        if c.await.unwrap() == StatusCode::SERVICE_UNAVAILABLE {
            unavailable += 1;
        }
    }
    assert!(
        unavailable > 0,
        "an unbudgeted burst of 60 should overflow 6 + 6"
    );
}

/// A server's answer to a request its budget refused: 503, with `Retry-After` in whole seconds
/// (rounded up) where the refusal has an estimate.
async fn shed(err: BudgetError<Infallible>) -> (StatusCode, axum::http::HeaderMap, String) {
    let mut headers = axum::http::HeaderMap::new();
    if let Some(wait) = err.retry_after() {
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        headers.insert("retry-after", secs.max(1).into());
    }
    match err {
        BudgetError::Rejected(AcquireError::QueueFull { .. }) => (
            StatusCode::SERVICE_UNAVAILABLE,
            headers,
            "busy, try again".into(),
        ),
        BudgetError::Timeout => (StatusCode::GATEWAY_TIMEOUT, headers, "too slow".into()),
        other => (
            StatusCode::INTERNAL_SERVER_ERROR,
            headers,
            other.to_string(),
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_sheds_load_with_503_once_its_queue_is_full() {
    let budget = Budget::new("api", BudgetConfig::new(2).max_queued(2)).unwrap();
    let release = Arc::new(Semaphore::new(0));
    let gate = release.clone();
    let app = Router::new()
        .route(
            "/work",
            get(move || {
                let gate = gate.clone();
                async move {
                    gate.acquire().await.unwrap().forget();
                    "done"
                }
            }),
        )
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(shed))
                .layer(BudgetLayer::new(budget.clone())),
        )
        .route("/health", get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let get = |path: &str| {
        let req = axum::http::Request::get(format!("http://{addr}{path}"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        client.request(req)
    };
    let held: Vec<_> = (0..4)
        .map(|_| {
            let f = get("/work");
            tokio::spawn(f)
        })
        .collect();
    // Wait until two run and two wait.
    for _ in 0..200 {
        let s = budget.snapshot();
        if s.in_flight == 2 && s.waiting == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let s = budget.snapshot();
    assert_eq!((s.in_flight, s.waiting), (2, 2));
    for _ in 0..5 {
        let resp = get("/work").await.unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            !resp.headers().contains_key("retry-after"),
            "no call measured yet: no estimate"
        );
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"busy, try again");
    }
    // A route outside the layer is not budgeted.
    assert_eq!(get("/health").await.unwrap().status(), StatusCode::OK);
    release.add_permits(4);
    for h in held {
        assert_eq!(h.await.unwrap().unwrap().status(), StatusCode::OK);
    }
    let s = budget.snapshot();
    assert_eq!((s.admitted, s.rejected, s.in_flight), (4, 5, 0));

    // Calls were measured now: a full queue says when to come back.
    let held: Vec<_> = (0..4).map(|_| tokio::spawn(get("/work"))).collect();
    for _ in 0..200 {
        let s = budget.snapshot();
        if s.in_flight == 2 && s.waiting == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let resp = get("/work").await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    release.add_permits(4);
    for h in held {
        assert_eq!(h.await.unwrap().unwrap().status(), StatusCode::OK);
    }
}

#[tokio::test(start_paused = true)]
async fn idle_readiness_holds_nothing_and_a_timeout_is_an_error() {
    let budget = Budget::new(
        "api",
        BudgetConfig::new(1).call_timeout(Duration::from_millis(100)),
    )
    .unwrap();
    let slow = service_fn(|ms: u64| async move {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok::<_, Infallible>(ms)
    });
    let mut svc = BudgetLayer::new(budget.clone()).layer(slow);
    // Many services made ready and never called hold no permit.
    let mut idle: Vec<_> = (0..10).map(|_| svc.clone()).collect();
    for s in &mut idle {
        s.ready().await.unwrap();
    }
    assert_eq!(budget.in_flight(), 0);
    assert_eq!(svc.ready().await.unwrap().call(10).await.unwrap(), 10);
    let err = svc.ready().await.unwrap().call(500).await.unwrap_err();
    assert!(err.is_timeout());
    let boxed: BoxError = err.into();
    assert_eq!(boxed.to_string(), "call did not finish within call_timeout");
    let s = budget.snapshot();
    assert_eq!((s.call_timeouts, s.in_flight), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_response_future_gives_the_permit_back() {
    let budget = Budget::new("api", BudgetConfig::new(1)).unwrap();
    let slow = service_fn(|_: ()| async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, Infallible>(())
    });
    let mut svc = BudgetLayer::new(budget.clone()).layer(slow);
    let fut = svc.call(());
    let fut = tokio::spawn(fut);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(budget.in_flight(), 1);
    fut.abort();
    let _ = fut.await;
    assert_eq!(budget.in_flight(), 0);
    assert!(budget.try_acquire().is_ok());
}

/// How a request ends in the scenario below: the value is the service time in ms, and 0 is an
/// error from the dependency.
#[cfg(feature = "adaptive")]
const SCENARIO: [u64; 5] = [10, 0, 500, 20, 0];

/// Runs `SCENARIO` one request at a time through `run`, with a budget whose limit learns from
/// each outcome, then one request dropped while it runs and one turned away; returns the
/// budget's snapshot and limit changes.
#[cfg(feature = "adaptive")]
async fn run_scenario<R, Fut>(
    mut run: R,
) -> (inflight::BudgetSnapshot, Vec<inflight::limit::LimitChange>)
where
    R: FnMut(Budget, u64) -> Fut,
    Fut: std::future::Future<Output = Result<u64, &'static str>> + Send + 'static,
{
    let budget = Budget::new(
        "api",
        BudgetConfig::new(8)
            .max_queued(0)
            .call_timeout(Duration::from_millis(100))
            .adaptive(inflight::limit::Adaptive::aimd()),
    )
    .unwrap();
    for ms in SCENARIO {
        let _ = run(budget.clone(), ms).await;
    }
    let dropped = tokio::spawn(run(budget.clone(), 60_000));
    tokio::time::sleep(Duration::from_millis(10)).await;
    dropped.abort();
    let _ = dropped.await;
    let limit = budget.limit();
    let held: Vec<_> = (0..limit).map(|_| budget.try_acquire().unwrap()).collect();
    assert_eq!(run(budget.clone(), 10).await, Err("rejected"));
    drop(held);
    (budget.snapshot(), budget.limit_changes())
}

/// The dependency of the scenario: answers after `ms`, or fails for 0.
#[cfg(feature = "adaptive")]
async fn dependency(ms: u64) -> Result<u64, &'static str> {
    if ms == 0 {
        return Err("failed");
    }
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(ms)
}

#[cfg(feature = "adaptive")]
#[tokio::test(start_paused = true)]
async fn the_layer_counts_and_teaches_the_limit_as_budget_call_does() {
    let through_call = run_scenario(|budget, ms| async move {
        budget.call(|| dependency(ms)).await.map_err(|e| match e {
            inflight::CallError::Rejected(_) => "rejected",
            inflight::CallError::Timeout => "timeout",
            e => e.into_inner().unwrap(),
        })
    })
    .await;
    let through_layer = run_scenario(|budget, ms| async move {
        BudgetLayer::new(budget)
            .layer(service_fn(dependency))
            .oneshot(ms)
            .await
            .map_err(|e| match e {
                BudgetError::Rejected(_) => "rejected",
                BudgetError::Timeout => "timeout",
                e => e.into_inner().unwrap(),
            })
    })
    .await;
    let (call, layer) = (&through_call.0, &through_layer.0);
    assert_eq!(
        (call.calls_ok, call.calls_error, call.call_timeouts),
        (2, 2, 1)
    );
    assert_eq!((call.calls_cancelled, call.rejected), (1, 1));
    assert_eq!(
        (
            layer.admitted,
            layer.rejected,
            layer.calls_ok,
            layer.calls_error,
            layer.call_timeouts,
            layer.calls_cancelled,
            layer.limit,
        ),
        (
            call.admitted,
            call.rejected,
            call.calls_ok,
            call.calls_error,
            call.call_timeouts,
            call.calls_cancelled,
            call.limit,
        )
    );
    assert_eq!(layer.call, call.call, "the same call latencies");
    let limits = |changes: &[inflight::limit::LimitChange]| {
        changes.iter().map(|c| c.limit).collect::<Vec<_>>()
    };
    assert!(through_call.1.len() > 1, "the overloads moved the limit");
    assert_eq!(limits(&through_layer.1), limits(&through_call.1));
}

/// A dependency on 127.0.0.1 that answers its first request 429 with `Retry-After: 1`, and
/// every later one 200; records when each request arrived.
async fn busy_then_ready() -> (String, Arc<std::sync::Mutex<Vec<std::time::Instant>>>) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    let app = Router::new().route(
        "/complete",
        post(move || {
            let s = s.clone();
            async move {
                let mut seen = s.lock().unwrap();
                seen.push(std::time::Instant::now());
                if seen.len() == 1 {
                    (
                        StatusCode::TOO_MANY_REQUESTS,
                        [("retry-after", "1")],
                        "slow down",
                    )
                } else {
                    (StatusCode::OK, [("retry-after", "0")], "done")
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/complete"), seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_429_with_retry_after_pauses_the_budget_and_a_refusal_says_when() {
    let (url, seen) = busy_then_ready().await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let llm = Budget::new(
        "llm",
        BudgetConfig::new(4).permit_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let svc = BudgetLayer::http(llm.clone()).layer(client);
    let first = svc.clone().oneshot(write_request(&url)).await.unwrap();
    assert_eq!(first.status(), StatusCode::TOO_MANY_REQUESTS);
    // The dependency said 1 s; a request with 300 ms to wait is refused at once, unsent.
    let err = svc.clone().oneshot(write_request(&url)).await.unwrap_err();
    assert!(
        matches!(err.rejected(), Some(AcquireError::Paused { .. })),
        "{err}"
    );
    let hint = err.retry_after().expect("a pause says when it ends");
    assert!(
        hint > Duration::ZERO && hint <= Duration::from_secs(1),
        "{hint:?}"
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the refused request never reached it"
    );
    let s = llm.snapshot();
    assert_eq!(
        (s.pauses, s.paused, s.outcomes_overload, s.calls_ok),
        (1, 1, 1, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_real_429_with_retry_after_the_next_request_goes_out_when_the_pause_ends() {
    let (url, seen) = busy_then_ready().await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let llm = Budget::new(
        "llm",
        BudgetConfig::new(4).permit_timeout(Duration::from_secs(30)),
    )
    .unwrap();
    let svc = BudgetLayer::http(llm.clone()).layer(client);
    let first = svc.clone().oneshot(write_request(&url)).await.unwrap();
    assert_eq!(first.status(), StatusCode::TOO_MANY_REQUESTS);
    let second = svc.clone().oneshot(write_request(&url)).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    // The pause began when the 429 came back, after the server saw the first request: the
    // second arrived at least the second the dependency asked for later (a lower bound only).
    let gap = seen[1] - seen[0];
    assert!(gap >= Duration::from_secs(1), "{gap:?}");
    // A 200's retry-after is not an overload's: no second pause.
    assert_eq!(llm.snapshot().pauses, 1);
}

/// A service that notes the body of each request it serves (in the order served), then holds
/// its permit for 10 ms.
fn noting(
    served: Arc<std::sync::Mutex<Vec<String>>>,
) -> impl Service<
    http::Request<String>,
    Response = (),
    Error = Infallible,
    Future = impl Send + 'static,
> + Clone
       + Send
       + 'static {
    service_fn(move |req: http::Request<String>| {
        let served = served.clone();
        async move {
            served.lock().unwrap().push(req.into_body());
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok::<_, Infallible>(())
        }
    })
}

fn two_classes(n: usize) -> Budget {
    let classes = Classes::new().class("interactive", 4).class("batch", 1);
    Budget::new("records", BudgetConfig::new(n).classes(classes)).unwrap()
}

#[tokio::test(start_paused = true)]
async fn queued_requests_are_served_four_interactive_to_one_batch() {
    let budget = two_classes(1);
    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Interactive requests carry their class as an extension; batch ones are told by their path.
    let by_extension = BudgetLayer::new(budget.clone())
        .class_from_extension()
        .layer(noting(served.clone()));
    let by_path = BudgetLayer::new(budget.clone())
        .class_by(|req: &http::Request<String>| {
            req.uri().path().starts_with("/export").then_some("batch")
        })
        .layer(noting(served.clone()));
    let holder = budget.acquire_owned().await.unwrap();
    let mut calls = Vec::new();
    // The batch requests queue first: first come, first served would serve all of them first.
    for i in 0..10 {
        let request = http::Request::builder()
            .uri("/export")
            .body(format!("batch {i}"))
            .unwrap();
        calls.push(tokio::spawn(by_path.clone().oneshot(request)));
        tokio::task::yield_now().await;
    }
    for i in 0..10 {
        let mut request = http::Request::new(format!("interactive {i}"));
        request
            .extensions_mut()
            .insert(RequestClass::new("interactive"));
        calls.push(tokio::spawn(by_extension.clone().oneshot(request)));
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(budget.snapshot().waiting, 20);
    drop(holder);
    for call in calls {
        call.await.unwrap().unwrap();
    }
    let served = served.lock().unwrap().clone();
    assert_eq!(served.len(), 20);
    let first_ten = &served[..10];
    let interactive = first_ten
        .iter()
        .filter(|s| s.starts_with("interactive"))
        .count();
    // 4:1 while both classes wait: 8 of the first 10, give or take one.
    assert!(
        (7..=9).contains(&interactive),
        "{interactive} interactive of the first 10: {served:?}"
    );
    // First come, first served within each class.
    for class in ["interactive", "batch"] {
        let order: Vec<&String> = served.iter().filter(|s| s.starts_with(class)).collect();
        let expected: Vec<String> = (0..10).map(|i| format!("{class} {i}")).collect();
        assert_eq!(order, expected.iter().collect::<Vec<_>>());
    }
}

#[tokio::test(start_paused = true)]
async fn each_request_waits_in_the_class_it_names_else_the_default() {
    let budget = two_classes(2);
    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    let by_extension = BudgetLayer::new(budget.clone())
        .class_from_extension()
        .layer(noting(served.clone()));
    let untold = BudgetLayer::new(budget.clone()).layer(noting(served.clone()));
    let by_function = BudgetLayer::new(budget.clone())
        .class_by(|_: &http::Request<String>| Some(String::from("interactive")))
        .layer(noting(served.clone()));
    for name in ["interactive", "interactive", "bogus", "batch"] {
        let mut request = http::Request::new(name.to_string());
        request.extensions_mut().insert(RequestClass::new(name));
        by_extension.clone().oneshot(request).await.unwrap();
    }
    // No extension, and a layer told nothing: the default class (batch, the lightest).
    by_extension
        .clone()
        .oneshot(http::Request::new(String::new()))
        .await
        .unwrap();
    untold
        .clone()
        .oneshot(http::Request::new(String::new()))
        .await
        .unwrap();
    by_function
        .clone()
        .oneshot(http::Request::new(String::new()))
        .await
        .unwrap();
    let s = budget.snapshot();
    let admitted: Vec<(&str, u64)> = s
        .classes
        .iter()
        .map(|c| (c.name.as_str(), c.admitted))
        .collect();
    assert_eq!(admitted, [("interactive", 3), ("batch", 4)]);
    assert_eq!(s.admitted, 7);
}

/// Waits until `cond` holds, polling; panics after a generous bound.
async fn wait_for(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..2000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not within 20 s");
}

/// Inserts the class a request's `x-priority` header names, as a layer that knows the caller
/// would.
async fn tag(mut request: axum::extract::Request) -> axum::extract::Request {
    let class = request
        .headers()
        .get("x-priority")
        .and_then(|v| v.to_str().ok())
        .map(RequestClass::new);
    if let Some(class) = class {
        request.extensions_mut().insert(class);
    }
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_axum_server_admits_queued_interactive_requests_ahead_of_batch_ones() {
    let budget = two_classes(1);
    let release = Arc::new(Semaphore::new(0));
    let served = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (gate, log) = (release.clone(), served.clone());
    let app = Router::new()
        .route(
            "/work",
            get(move |query: axum::extract::RawQuery| {
                let (gate, log) = (gate.clone(), log.clone());
                async move {
                    log.lock().unwrap().push(query.0.unwrap_or_default());
                    gate.acquire().await.unwrap().forget();
                    "done"
                }
            }),
        )
        .layer(
            ServiceBuilder::new()
                .layer(axum::middleware::map_request(tag))
                .layer(HandleErrorLayer::new(shed))
                .layer(BudgetLayer::new(budget.clone()).class_from_extension()),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let send = |query: &str, class: Option<&str>| {
        let mut req = axum::http::Request::get(format!("http://{addr}/work?{query}"));
        if let Some(class) = class {
            req = req.header("x-priority", class);
        }
        tokio::spawn(client.request(req.body(Full::new(Bytes::new())).unwrap()))
    };
    let mut calls = vec![send("holder", None)];
    wait_for("the holder served", || served.lock().unwrap().len() == 1).await;
    for i in 0..4 {
        calls.push(send(&format!("batch{i}"), Some("batch")));
        wait_for("queued", || budget.snapshot().waiting == i + 1).await;
    }
    for i in 0..4 {
        calls.push(send(&format!("interactive{i}"), Some("interactive")));
        wait_for("queued", || budget.snapshot().waiting == i + 5).await;
    }
    for n in 2..=9 {
        release.add_permits(1);
        wait_for("the next one served", || served.lock().unwrap().len() == n).await;
    }
    release.add_permits(1);
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap().status(), StatusCode::OK);
    }
    let served = served.lock().unwrap().clone();
    let interactive = served[1..6]
        .iter()
        .filter(|q| q.starts_with("interactive"))
        .count();
    assert_eq!(interactive, 4, "served in this order: {served:?}");
    let s = budget.snapshot();
    let admitted: Vec<(&str, u64)> = s
        .classes
        .iter()
        .map(|c| (c.name.as_str(), c.admitted))
        .collect();
    assert_eq!(admitted, [("interactive", 4), ("batch", 5)]);
}
