//! The proxy benchmark (`proxy-bench run`, or `scripts/bench-proxy.sh`): `inflight proxy`,
//! HAProxy and nginx in front of one [`upstream::Upstream`], each pinned to its own CPU and held
//! to a quota of one, driven by one load generator ([`load`]) pinned to the other CPU, with the
//! memory of idle client connections measured by [`idle`]. [`run`] repeats every case for every
//! target in a rotating order; [`summary`] gives the medians and spreads, [`goals`] the
//! verdicts, [`report`] the tables and the JSON document.
//!
//! The load generator is this crate's own rather than `wrk` or `oha`: one tool serves every
//! case (closed loop at saturation, open loop at a fixed rate with latency from the scheduled
//! send and the generator's own send lag, idle keep-alive connections held open while the
//! proxies' memory is read), so each proxy meets the same client.
//!
//! # Modules
//!
//! - [`run`]: a whole run, from the upstream's start to the document.
//! - [`plan`]: the targets, the load points, the settings, the rotation, the discard rule.
//! - [`servers`]: the processes started, their configuration files, ports and logs.
//! - [`load`], [`idle`], [`upstream`]: the load generator, the idle connections, the upstream;
//!   `client`, the generator's HTTP/1.1 client connection.
//! - [`host`]: the CPU pinning, the open-files limit, the load average.
//! - [`awake`]: the load CPU kept out of its deep idle states while latency is measured.
//! - [`instructions`]: instructions counted with `perf stat`, where the machine counts them.
//! - [`summary`], [`goals`], [`report`]: medians and spreads, verdicts, tables and JSON.

pub mod awake;
mod client;
pub mod goals;
pub mod host;
pub mod idle;
pub mod instructions;
pub mod load;
pub mod plan;
mod procs;
pub mod report;
pub mod run;
pub mod servers;
pub mod summary;
pub mod upstream;

use std::net::SocketAddr;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Why a benchmark step could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyBenchError {
    /// The URL is not `http://IP:PORT/path`.
    #[error("invalid target {url:?}: {reason}")]
    Target { url: String, reason: String },
    /// The plan's numbers cannot run.
    #[error("invalid plan: {0}")]
    Plan(String),
    /// A connection could not be opened or used.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// HTTP failed on a connection.
    #[error(transparent)]
    Http(#[from] hyper::Error),
    /// An answer was not what the benchmark expects.
    #[error("unexpected answer from {what}: {reason}")]
    Answer { what: String, reason: String },
    /// A program the benchmark runs could not be run, refused its configuration, or exited.
    #[error("{what}: {reason}")]
    Process { what: String, reason: String },
}

/// Where requests go: an `http://IP:PORT/path` URL, split for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The address connected to.
    pub addr: SocketAddr,
    /// The `Host` header sent.
    pub host: String,
    /// The path and query sent.
    pub path: String,
}

impl Target {
    /// Parses `http://IP:PORT[/path]`. Only IP addresses: the benchmark resolves no names.
    ///
    /// ```
    /// use inflight_bench::proxy_bench::Target;
    ///
    /// let t = Target::parse("http://127.0.0.1:7070/slow").unwrap();
    /// assert_eq!((t.addr.port(), t.path.as_str()), (7070, "/slow"));
    /// assert!(Target::parse("https://127.0.0.1:7070/").is_err());
    /// assert!(Target::parse("http://localhost:7070/").is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// [`ProxyBenchError::Target`] naming what is wrong.
    pub fn parse(url: &str) -> Result<Target, ProxyBenchError> {
        let bad = |reason: &str| ProxyBenchError::Target {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("it must start with http://"))?;
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let addr: SocketAddr = host
            .parse()
            .map_err(|_| bad("the host must be IP:PORT, e.g. 127.0.0.1:7070"))?;
        Ok(Target {
            addr,
            host: host.to_string(),
            path: path.to_string(),
        })
    }
}

/// Percentiles of a latency histogram kept in microseconds, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Latency {
    /// How many were recorded.
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Latency {
    /// The summary of `h` (microseconds); all zero when it is empty.
    pub fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            count: h.len(),
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
            mean: h.mean() / 1000.0,
        }
    }
}

/// The upstream's counters, read over HTTP from its [`upstream::STATS_PATH`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamStats {
    /// Requests served since the last reset.
    pub requests: u64,
    /// Requests being served now.
    pub in_flight: u64,
    /// The most served at once since the last reset.
    pub peak: u64,
}

/// Reads the counters of the upstream at `addr`.
///
/// # Errors
///
/// When it cannot be reached or answers something else than its counters.
pub async fn upstream_stats(addr: SocketAddr) -> Result<UpstreamStats, ProxyBenchError> {
    let body = fetch(addr, upstream::STATS_PATH).await?;
    serde_json::from_slice(&body).map_err(|e| ProxyBenchError::Answer {
        what: format!("the upstream at {addr}"),
        reason: e.to_string(),
    })
}

/// Restarts the counters of the upstream at `addr`.
///
/// # Errors
///
/// When it cannot be reached.
pub async fn reset_upstream(addr: SocketAddr) -> Result<(), ProxyBenchError> {
    fetch(addr, upstream::RESET_PATH).await.map(drop)
}

async fn fetch(addr: SocketAddr, path: &str) -> Result<Vec<u8>, ProxyBenchError> {
    use http_body_util::{BodyExt, Empty};
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, addr.to_string())
        .body(Empty::<bytes::Bytes>::new())
        .expect("a fixed path makes a request");
    let response = sender.send_request(request).await?;
    if !response.status().is_success() {
        return Err(ProxyBenchError::Answer {
            what: format!("http://{addr}{path}"),
            reason: format!("status {}", response.status()),
        });
    }
    Ok(response.into_body().collect().await?.to_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_error_is_told_once_in_a_chain() {
        let e = ProxyBenchError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        ));
        let chain = format!("{:#}", anyhow::Error::from(e).context("cannot reset"));
        assert_eq!(chain, "cannot reset: connection refused");
    }
}
