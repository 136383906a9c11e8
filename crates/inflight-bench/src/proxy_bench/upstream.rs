//! [`Upstream`]: the one HTTP/1.1 server every proxy in the benchmark forwards to. It answers
//! 200 with [`BODY`] (100 bytes) at once on `/`, after its delay on `/slow`, and counts the
//! requests it serves and the most it served at once.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::gauge::PeakGauge;
use crate::timer::PreciseTimer;

/// The body of every benchmark answer: 100 bytes.
pub const BODY: &[u8; 100] =
    b"inflight proxy benchmark upstream: a 100-byte answer, the same for every proxy measured............\n";

/// The path answered after the upstream's delay; every other path is answered at once.
pub const SLOW_PATH: &str = "/slow";

/// The path that answers the counters as JSON (`{"requests":..,"in_flight":..,"peak":..}`);
/// it is not counted itself.
pub const STATS_PATH: &str = "/_stats";

/// The path that restarts the counters (the peak from the requests in flight now).
pub const RESET_PATH: &str = "/_reset";

/// What the upstream counts.
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    gauge: PeakGauge,
}

/// A running benchmark upstream.
pub struct Upstream {
    addr: SocketAddr,
    counters: Arc<Counters>,
}

impl Upstream {
    /// Serves on `listener` until the runtime stops, answering [`SLOW_PATH`] after `delay`.
    pub fn spawn(listener: TcpListener, delay: Duration) -> std::io::Result<Upstream> {
        let addr = listener.local_addr()?;
        let counters = Arc::new(Counters::default());
        let timer = PreciseTimer::new();
        let shared = counters.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    // Out of file descriptors: let some close.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let counters = shared.clone();
                let timer = timer.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        answer(counters.clone(), timer.clone(), delay, request)
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Upstream { addr, counters })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests served (and being served) since the last reset, stats requests not counted.
    pub fn requests(&self) -> u64 {
        self.counters.requests.load(Ordering::SeqCst)
    }

    /// The most requests it was serving at once since the last reset.
    pub fn peak(&self) -> u64 {
        self.counters.gauge.peak()
    }
}

async fn answer(
    counters: Arc<Counters>,
    timer: PreciseTimer,
    delay: Duration,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    match request.uri().path() {
        STATS_PATH => {
            let text = format!(
                "{{\"requests\":{},\"in_flight\":{},\"peak\":{}}}\n",
                counters.requests.load(Ordering::SeqCst),
                counters.gauge.current(),
                counters.gauge.peak()
            );
            return Ok(Response::new(Full::new(Bytes::from(text))));
        }
        RESET_PATH => {
            counters.requests.store(0, Ordering::SeqCst);
            counters.gauge.reset_peak();
            return Ok(Response::new(Full::new(Bytes::from_static(b"reset\n"))));
        }
        _ => {}
    }
    let _inside = counters.gauge.enter();
    counters.requests.fetch_add(1, Ordering::SeqCst);
    if request.uri().path() == SLOW_PATH {
        timer.sleep(delay).await;
    }
    let mut response = Response::new(Full::new(Bytes::from_static(BODY)));
    *response.status_mut() = StatusCode::OK;
    Ok(response)
}
