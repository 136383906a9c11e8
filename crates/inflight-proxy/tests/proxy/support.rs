//! A real upstream (axum on 127.0.0.1, port 0) whose answers the test controls, and a client.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use inflight_proxy::Proxy;
use tokio::sync::{mpsc, Semaphore};

/// What the upstream saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The proxy's end of the connection the request came on.
    pub peer: Option<SocketAddr>,
    pub version: hyper::Version,
}

pub struct UpstreamState {
    pub seen: Mutex<Vec<Seen>>,
    pub in_service: AtomicUsize,
    pub peak: AtomicUsize,
    /// `/hold` waits for one of these per request.
    pub gate: Semaphore,
    /// `/stream` sends what the test pushes here, and ends when the sender is dropped.
    pub streams: Mutex<Vec<mpsc::Receiver<Bytes>>>,
}

pub struct Upstream {
    pub addr: SocketAddr,
    pub state: Arc<UpstreamState>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let state = Arc::new(UpstreamState {
            seen: Mutex::default(),
            in_service: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            gate: Semaphore::new(0),
            streams: Mutex::default(),
        });
        let app = Router::new()
            .route("/hold", any(hold))
            .route("/stream", any(stream))
            .route("/status/{code}", any(status))
            .route("/sleep/{ms}", any(sleep))
            .route("/work/{ms}", any(work))
            .fallback(echo)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Upstream { addr, state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// Lets `n` held requests answer.
    pub fn release(&self, n: usize) {
        self.state.gate.add_permits(n);
    }

    /// The sender feeding the next `/stream` response's body.
    pub fn next_stream(&self) -> mpsc::Sender<Bytes> {
        let (tx, rx) = mpsc::channel(16);
        self.state.streams.lock().unwrap().push(rx);
        tx
    }

    /// Feeds the next `/stream` response 64 KiB chunks, up to 64 MiB (more than loopback's
    /// socket buffers hold), for as long as anyone takes them; the task ends with the sender,
    /// closed if the upstream's connection was.
    pub fn flood_next_stream(&self) -> tokio::task::JoinHandle<mpsc::Sender<Bytes>> {
        let body = self.next_stream();
        tokio::spawn(async move {
            let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
            for _ in 0..1024 {
                if body.send(chunk.clone()).await.is_err() {
                    break;
                }
            }
            body
        })
    }

    pub fn peak(&self) -> usize {
        self.state.peak.load(Ordering::SeqCst)
    }
}

async fn record(state: &UpstreamState, request: Request<Body>) {
    let (parts, body) = request.into_parts();
    let peer = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    // A request whose body failed on its way (reset by the proxy) was not seen whole.
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return;
    };
    state.seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        uri: parts.uri.to_string(),
        headers: parts.headers,
        body,
        peer,
        version: parts.version,
    });
}

struct InService<'a>(&'a UpstreamState);

impl<'a> InService<'a> {
    fn enter(state: &'a UpstreamState) -> InService<'a> {
        let now = state.in_service.fetch_add(1, Ordering::SeqCst) + 1;
        state.peak.fetch_max(now, Ordering::SeqCst);
        InService(state)
    }
}

impl Drop for InService<'_> {
    fn drop(&mut self) {
        self.0.in_service.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn echo(State(state): State<Arc<UpstreamState>>, request: Request<Body>) -> Response {
    let body = format!("{} {}", request.method(), request.uri());
    record(&state, request).await;
    (
        [
            ("connection", "x-upstream-hop"),
            ("x-upstream-hop", "1"),
            ("x-upstream", "yes"),
        ],
        body,
    )
        .into_response()
}

async fn hold(State(state): State<Arc<UpstreamState>>, request: Request<Body>) -> Response {
    let _in = InService::enter(&state);
    record(&state, request).await;
    state.gate.acquire().await.unwrap().forget();
    "held\n".into_response()
}

async fn stream(State(state): State<Arc<UpstreamState>>, request: Request<Body>) -> Response {
    record(&state, request).await;
    let rx = state.streams.lock().unwrap().remove(0);
    let guard = Arc::new(InServiceOwned::enter(state.clone()));
    let body = futures::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        let chunk = rx.recv().await?;
        Some((Ok::<_, std::io::Error>(chunk), (rx, guard)))
    });
    Body::from_stream(body).into_response()
}

/// In service for as long as a streamed body is being sent.
struct InServiceOwned(Arc<UpstreamState>);

impl InServiceOwned {
    fn enter(state: Arc<UpstreamState>) -> InServiceOwned {
        let now = state.in_service.fetch_add(1, Ordering::SeqCst) + 1;
        state.peak.fetch_max(now, Ordering::SeqCst);
        InServiceOwned(state)
    }
}

impl Drop for InServiceOwned {
    fn drop(&mut self) {
        self.0.in_service.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn status(
    State(state): State<Arc<UpstreamState>>,
    Path(code): Path<u16>,
    request: Request<Body>,
) -> Response {
    record(&state, request).await;
    (StatusCode::from_u16(code).unwrap(), "as asked\n").into_response()
}

async fn sleep(
    State(state): State<Arc<UpstreamState>>,
    Path(ms): Path<u64>,
    request: Request<Body>,
) -> Response {
    let _in = InService::enter(&state);
    record(&state, request).await;
    tokio::time::sleep(Duration::from_millis(ms)).await;
    "slept\n".into_response()
}

/// Works `ms` milliseconds on the request whatever becomes of its connection, as a threaded
/// server that never reads its socket again does: the work is counted in service until it ends.
async fn work(
    State(state): State<Arc<UpstreamState>>,
    Path(ms): Path<u64>,
    request: Request<Body>,
) -> Response {
    record(&state, request).await;
    let worker = tokio::spawn(async move {
        let _in = InServiceOwned::enter(state);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    });
    let _ = worker.await;
    "worked\n".into_response()
}

/// An HTTP/1.1 client with its own pool.
pub type TestClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A client that speaks HTTP/2 with prior knowledge: all its requests share one connection.
pub fn h2_client() -> TestClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// A GET to `addr` + `path`, answered in full: status, headers, body.
pub async fn get(client: &TestClient, addr: SocketAddr, path: &str) -> (u16, HeaderMap, String) {
    send(client, addr, "GET", path, &[], "").await
}

/// A request to the proxy at `addr`: `method` on `path`, with `headers` and `body`.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Request<Full<Bytes>> {
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    request.body(Full::new(body)).unwrap()
}

pub async fn send(
    client: &TestClient,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, HeaderMap, String) {
    let request = request(addr, method, path, headers, Bytes::from(body.to_string()));
    let response = within(client.request(request)).await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = within(response.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

/// `future`, or a panic after a generous bound: no test hangs.
pub async fn within<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .expect("no answer within 20 s")
}

/// Waits until `cond` holds, polling; panics after a generous bound.
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not within 20 s");
}

/// A proxy started from `text`, whose log lines the test can read.
pub async fn proxy(text: &str) -> (Proxy, Arc<Mutex<Vec<String>>>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    let proxy = Proxy::builder()
        .log(move |line| sink.lock().unwrap().push(line.to_string()))
        .start(text)
        .await
        .unwrap();
    (proxy, lines)
}

/// A proxy with a budget `records` of 4 in front of the upstream at `upstream`; its address.
pub async fn proxied(upstream: SocketAddr) -> (Proxy, SocketAddr) {
    let (proxy, _) = proxy(&budget(
        "records",
        &format!("http://{upstream}"),
        "max_concurrent = 4",
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    (proxy, addr)
}

/// One budget named `name`, proxied from a free port to `upstream`, with `extra` settings.
pub fn budget(name: &str, upstream: &str, extra: &str) -> String {
    format!("[budgets.{name}]\nupstream = \"{upstream}\"\nlisten = \"127.0.0.1:0\"\n{extra}\n")
}

/// The samples of the proxy's Prometheus text, by metric name and labels.
pub fn metrics(proxy: &Proxy) -> HashMap<String, f64> {
    let text = proxy.metrics();
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid Prometheus text");
    let mut out = HashMap::new();
    for sample in scrape.samples {
        let mut labels: Vec<_> = sample
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        labels.sort();
        let value = match sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            prometheus_parse::Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => continue,
        };
        out.insert(format!("{}{{{}}}", sample.metric, labels.join(",")), value);
    }
    out
}

/// What a child process left behind: its exit status, what it printed, and how long it ran.
pub struct Finished {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// Runs `command` to its end with its output captured; kills it and panics with its stderr if it
/// runs past `limit`, so no test hangs on a child.
pub async fn run_bounded(command: &mut tokio::process::Command, limit: Duration) -> Finished {
    use tokio::io::AsyncReadExt;

    let started = std::time::Instant::now();
    let mut child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
    let read = |mut pipe: Box<dyn tokio::io::AsyncRead + Send + Unpin>| {
        tokio::spawn(async move {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes).await;
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let status = match tokio::time::timeout(limit, child.wait()).await {
        Ok(status) => status.unwrap(),
        Err(_) => {
            let _ = child.kill().await;
            let stderr = within(stderr).await.unwrap();
            panic!("{command:?} still ran after {limit:?} and was killed; its stderr:\n{stderr}");
        }
    };
    let elapsed = started.elapsed();
    Finished {
        status,
        stdout: within(stdout).await.unwrap(),
        stderr: within(stderr).await.unwrap(),
        elapsed,
    }
}

/// What `program --version` prints (stdout, else stderr), or `None` when it cannot be run.
pub fn version_of(program: &str) -> Option<String> {
    let output = std::process::Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let text = if output.stdout.is_empty() {
        output.stderr
    } else {
        output.stdout
    };
    Some(String::from_utf8_lossy(&text).trim().to_string())
}

/// Sends a POST whose body stops after 10 of its 100 bytes to `addr`, and returns the first
/// bytes of the answer (within 10 s), the socket held open meanwhile.
pub async fn stalled_post(addr: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"POST /upload HTTP/1.1\r\nhost: proxy\r\ncontent-length: 100\r\n\r\n0123456789")
        .await
        .unwrap();
    let mut answer = vec![0; 4096];
    let n = tokio::time::timeout(std::time::Duration::from_secs(10), socket.read(&mut answer))
        .await
        .expect("an answer to a stalled body within 10 s")
        .unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

/// Asserts that `answer` is the proxy's 400 for a request body that failed on the client's side
/// (`client_body`).
pub fn assert_client_body(answer: &str) {
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer.contains("x-inflight-refused: client_body"),
        "{answer}"
    );
}
