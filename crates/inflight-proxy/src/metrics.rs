//! The proxy's Prometheus text: every budget's metrics (`inflight::metrics`), plus requests by
//! budget and status class, the proxy's own replies by reason, and a latency histogram.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `inflight_proxy_requests_total` | counter | budget, status_class | responses sent, by status class (`2xx` ... `5xx`), the proxy's own replies included |
//! | `inflight_proxy_replies_total` | counter | budget, reason | responses the proxy made itself: `queue_full`, `permit_timeout`, `rate_limited`, `paused`, `evicted`, `unavailable` (503/429), `call_timeout` (504), `upstream_unreachable`, `upstream_tls` (502), `client_body` (400), `lease_lost` (503, `on_lost = "cancel"`) |
//! | `inflight_proxy_request_duration_seconds` | histogram | budget | from the request's arrival to its response headers, the permit wait included |
//! | `inflight_proxy_calls_without_client_total` | counter | budget | calls whose client left before their answer was sent in full, and that went on without it (`on_client_gone = "finish"`) |
//! | `inflight_proxy_grpc_calls_total` | counter | budget, method, grpc_status | gRPC calls that ended, by method (`/package.Service/Method`; the first 100 a budget sees by name, any later or malformed one as `other`) and status (`OK` ... `UNAUTHENTICATED`, the upstream's or the proxy's own; `none` when the answer ended without one) |
//! | `inflight_proxy_connections` | gauge | listener | client connections open now (`listener`: the budget's name, or `admin`) |
//! | `inflight_proxy_connections_closed_total` | counter | listener, reason | client connections the proxy closed: `first_byte_timeout`, `idle_timeout`, `keepalive_timeout` (HTTP/2 pings unanswered), `max_connections` (idle longest when the listener was full), `send_timeout` (the client took no byte of an answer for `idle_timeout`; over HTTP/2, only such streams were left) |
//! | `inflight_proxy_streams_cut_total` | counter | listener, reason | HTTP/2 streams whose calls the proxy ended because of their client: `send_timeout` (it gave the stream no room for `idle_timeout`) |
//!
//! Each proxy renders through a recorder of its own, so two proxies in one process never mix
//! their numbers; budgets are built under it, as `inflight::metrics` requires.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use inflight::{Budget, BudgetSnapshot};
use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter,
    Gauge, Histogram, Unit,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use crate::config::GRPC_STATUS_NAMES;
use crate::grpc::GrpcTally;
use crate::refusal::Reason;

/// Responses sent, by budget and status class (counter).
pub const REQUESTS: &str = "inflight_proxy_requests_total";
/// Responses the proxy made itself, by budget and reason (counter).
pub const REPLIES: &str = "inflight_proxy_replies_total";
/// From a request's arrival to its response headers (histogram, seconds).
pub const REQUEST_DURATION: &str = "inflight_proxy_request_duration_seconds";

/// Calls whose client left before their answer was sent in full, and that went on without it
/// (`on_client_gone = "finish"`), by budget (counter).
pub const CALLS_WITHOUT_CLIENT: &str = "inflight_proxy_calls_without_client_total";

/// gRPC calls that ended, by budget, method and status (counter).
pub const GRPC_CALLS: &str = "inflight_proxy_grpc_calls_total";
/// The most gRPC methods a budget labels by name: a method seen after them is labelled
/// `other`, so that clients cannot grow the metrics without bound.
pub const MAX_GRPC_METHODS: usize = 100;

/// Client connections open now, by listener (gauge).
pub const CONNECTIONS: &str = "inflight_proxy_connections";
/// Client HTTP/1.1 connections parked now, by listener: idle, holding no buffers (gauge).
pub const CONNECTIONS_PARKED: &str = "inflight_proxy_connections_parked";
/// Client connections the proxy closed, by listener and reason (counter).
pub const CONNECTIONS_CLOSED: &str = "inflight_proxy_connections_closed_total";
/// HTTP/2 streams whose calls the proxy ended for their client, by listener and reason
/// (counter).
pub const STREAMS_CUT: &str = "inflight_proxy_streams_cut_total";

/// The content type of Prometheus text exposition 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
const REASONS: [Reason; 11] = [
    Reason::QueueFull,
    Reason::PermitTimeout,
    Reason::RateLimited,
    Reason::Paused,
    Reason::Evicted,
    Reason::Unavailable,
    Reason::CallTimeout,
    Reason::Unreachable,
    Reason::Tls,
    Reason::ClientBody,
    Reason::LeaseLost,
];

/// How often a proxy folds the histograms' samples into their buckets when nobody scrapes
/// `/metrics` (a scrape does it too). Often, so that each fold is short: the fold runs on the
/// proxy's runtime, and the samples of 5 s at 46,000 answers a second (two histograms) held
/// the requests behind it for milliseconds.
pub(crate) const UPKEEP_INTERVAL: Duration = Duration::from_millis(100);

/// One proxy's recorder.
pub(crate) struct Registry {
    recorder: Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
}

impl Registry {
    pub(crate) fn new() -> Registry {
        let recorder = PrometheusBuilder::new()
            .set_buckets(inflight::metrics::BUCKETS)
            .expect("the bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        let registry = Registry {
            recorder: Arc::new(recorder),
            handle,
        };
        registry.within(|| {
            inflight::metrics::describe();
            inflight_redis::metrics::describe();
            describe_counter!(
                REQUESTS,
                Unit::Count,
                "Responses sent, by budget and status class; the proxy's own replies included."
            );
            describe_counter!(
                REPLIES,
                Unit::Count,
                format!(
                    "Responses the proxy made itself, by reason: {}.",
                    REASONS.map(Reason::as_str).join(", ")
                )
            );
            describe_counter!(
                CALLS_WITHOUT_CLIENT,
                Unit::Count,
                "Calls whose client left before their answer was sent in full, and that went on without it (on_client_gone = finish)."
            );
            describe_counter!(
                GRPC_CALLS,
                Unit::Count,
                "gRPC calls that ended, by method (the first 100 a budget sees, then other) and status (the upstream's or the proxy's own; none when the answer carried none)."
            );
            describe_gauge!(
                CONNECTIONS,
                Unit::Count,
                "Client connections open now, by listener (a budget's name, or admin)."
            );
            describe_gauge!(
                CONNECTIONS_PARKED,
                Unit::Count,
                "Client HTTP/1.1 connections parked now, by listener: idle past 10 ms, holding no buffers, watched for their next request."
            );
            describe_counter!(
                CONNECTIONS_CLOSED,
                Unit::Count,
                format!(
                    "Client connections the proxy closed, by reason: {}.",
                    Closed::ALL.map(Closed::as_str).join(", ")
                )
            );
            describe_counter!(
                STREAMS_CUT,
                Unit::Count,
                "HTTP/2 streams whose calls the proxy ended because of their client, by reason: send_timeout (it gave the stream no room for idle_timeout)."
            );
            describe_histogram!(
                REQUEST_DURATION,
                Unit::Seconds,
                "From a request's arrival to its response headers, the permit wait included."
            );
        });
        registry
    }

    /// Runs `f` with this registry as the recorder: budgets built inside report to it.
    pub(crate) fn within<T>(&self, f: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(&*self.recorder, f)
    }

    /// Folds the samples the histograms took since the last render into their buckets. The
    /// recorder keeps each sample until then, so a proxy that is never scraped would keep every
    /// request's latencies: the proxy calls this every [`UPKEEP_INTERVAL`].
    pub(crate) fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// The Prometheus text now, `budgets` published first, each with its snapshot (the counts
    /// of the budgets reloads replaced under its name added: its counters go on from theirs)
    /// and the calls it has at its upstream (more than its own in flight while a reload's
    /// hand-over runs).
    pub(crate) fn render<'a>(
        &self,
        budgets: impl IntoIterator<Item = (&'a Budget, BudgetSnapshot, usize)>,
    ) -> String {
        self.within(|| {
            for (budget, snapshot, in_flight) in budgets {
                inflight::metrics::publish_with(budget, &snapshot);
                gauge!(inflight::metrics::IN_FLIGHT, "budget" => budget.name().to_string())
                    .set(in_flight as f64);
            }
        });
        self.handle.render()
    }
}

/// The handles of one budget's route, and the pace of its log lines.
pub(crate) struct RouteMetrics {
    classes: [Counter; 5],
    replies: [Counter; REASONS.len()],
    duration: Histogram,
    /// Calls that went on without their client.
    pub(crate) without_client: Counter,
    log: LogPace,
    grpc: GrpcMethods,
}

/// The counters of one budget's gRPC methods, registered as methods are first seen.
struct GrpcMethods {
    recorder: Arc<PrometheusRecorder>,
    budget: String,
    methods: Mutex<HashMap<Box<str>, GrpcTally>>,
}

impl GrpcMethods {
    fn tally(&self, path: &str) -> GrpcTally {
        let mut methods = self.methods.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tally) = methods.get(path) {
            return tally.clone();
        }
        // `other` is kept apart from the cap: up to MAX_GRPC_METHODS names and `other`.
        let named = methods.len() - usize::from(methods.contains_key("other"));
        let label = if grpc_method(path) && named < MAX_GRPC_METHODS {
            path
        } else {
            "other"
        };
        if let Some(tally) = methods.get(label) {
            return tally.clone();
        }
        let tally: GrpcTally = metrics::with_local_recorder(&*self.recorder, || {
            Arc::new(std::array::from_fn(|code| {
                let status = GRPC_STATUS_NAMES.get(code).copied().unwrap_or("none");
                counter!(GRPC_CALLS, "budget" => self.budget.clone(), "method" => label.to_string(), "grpc_status" => status)
            }))
        });
        methods.insert(label.into(), tally.clone());
        tally
    }
}

/// Whether `path` names a gRPC method: `/package.Service/Method`, two non-empty parts of
/// visible ASCII, at most 256 bytes.
fn grpc_method(path: &str) -> bool {
    let Some((service, method)) = path.strip_prefix('/').and_then(|p| p.split_once('/')) else {
        return false;
    };
    path.len() <= 256
        && !service.is_empty()
        && !method.is_empty()
        && !method.contains('/')
        && path.bytes().all(|b| b.is_ascii_graphic())
}

/// At most one log line per [`LOG_INTERVAL`]: an upstream that is down fails every request,
/// and a line for each would flood the log. The lines left out are counted.
pub(crate) struct LogPace {
    last: Mutex<Option<std::time::Instant>>,
    left_out: AtomicU64,
}

/// The least time between two log lines of one route.
const LOG_INTERVAL: Duration = Duration::from_secs(1);

impl LogPace {
    pub(crate) fn new() -> LogPace {
        LogPace {
            last: Mutex::new(None),
            left_out: AtomicU64::new(0),
        }
    }

    /// `Some(lines left out since the last)` when a line may be written now.
    pub(crate) fn may_log(&self, now: std::time::Instant) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|at| now.duration_since(at) < LOG_INTERVAL) {
            self.left_out.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *last = Some(now);
        Some(self.left_out.swap(0, Ordering::Relaxed))
    }

    /// `line`, with how many were left out before it when any were.
    pub(crate) fn with_left_out(line: &str, left_out: u64) -> String {
        if left_out > 0 {
            format!("{line} ({left_out} more since the last line)")
        } else {
            line.to_string()
        }
    }
}

impl RouteMetrics {
    pub(crate) fn new(registry: &Registry, budget: &str) -> RouteMetrics {
        registry.within(|| {
            let b = budget.to_string();
            RouteMetrics {
                classes: CLASSES
                    .map(|c| counter!(REQUESTS, "budget" => b.clone(), "status_class" => c)),
                replies: REASONS
                    .map(|r| counter!(REPLIES, "budget" => b.clone(), "reason" => r.as_str())),
                duration: histogram!(REQUEST_DURATION, "budget" => b.clone()),
                without_client: counter!(CALLS_WITHOUT_CLIENT, "budget" => b.clone()),
                log: LogPace::new(),
                grpc: GrpcMethods {
                    recorder: registry.recorder.clone(),
                    budget: b.clone(),
                    methods: Mutex::new(HashMap::new()),
                },
            }
        })
    }

    /// A response with `status` went out `elapsed` after its request arrived.
    pub(crate) fn responded(&self, status: u16, elapsed: Duration) {
        if let Some(c) = (status / 100)
            .checked_sub(1)
            .and_then(|i| self.classes.get(usize::from(i)))
        {
            c.increment(1);
        }
        self.duration.record(elapsed.as_secs_f64());
    }

    /// The counters of the gRPC method a request's `path` names.
    pub(crate) fn grpc_tally(&self, path: &str) -> GrpcTally {
        self.grpc.tally(path)
    }

    /// Whether a log line may be written now, and how many were left out since the last.
    pub(crate) fn may_log(&self) -> Option<u64> {
        self.log.may_log(std::time::Instant::now())
    }

    /// The proxy answered a request itself, for `reason`.
    pub(crate) fn replied(&self, reason: Reason) {
        if let Some(i) = REASONS.iter().position(|r| *r == reason) {
            self.replies[i].increment(1);
        }
    }
}

/// Why the proxy closed a client connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// It sent no byte, or stalled inside the HTTP/2 preface, for `first_byte_timeout`.
    FirstByteTimeout,
    /// It went without a request for `idle_timeout`.
    IdleTimeout,
    /// It left HTTP/2 pings unanswered for `http2_keepalive_timeout`.
    KeepaliveTimeout,
    /// Its listener was full and it was the connection idle longest.
    MaxConnections,
    /// It took no byte of an answer for `idle_timeout` (the client stopped reading); over
    /// HTTP/2, only streams whose calls were ended for it were left.
    SendTimeout,
}

impl Closed {
    const ALL: [Closed; 5] = [
        Closed::FirstByteTimeout,
        Closed::IdleTimeout,
        Closed::KeepaliveTimeout,
        Closed::MaxConnections,
        Closed::SendTimeout,
    ];

    /// One more than its place in [`Closed::ALL`]: never 0.
    pub(crate) fn code(self) -> u8 {
        Closed::ALL
            .iter()
            .position(|c| *c == self)
            .expect("every reason is in ALL") as u8
            + 1
    }

    /// The reason whose [`Closed::code`] is `code`.
    pub(crate) fn from_code(code: u8) -> Option<Closed> {
        Closed::ALL.get(usize::from(code.checked_sub(1)?)).copied()
    }

    fn as_str(self) -> &'static str {
        match self {
            Closed::FirstByteTimeout => "first_byte_timeout",
            Closed::IdleTimeout => "idle_timeout",
            Closed::KeepaliveTimeout => "keepalive_timeout",
            Closed::MaxConnections => "max_connections",
            Closed::SendTimeout => "send_timeout",
        }
    }
}

/// The connection gauges and counters of one listener.
pub(crate) struct ConnMetrics {
    open: Gauge,
    parked: Gauge,
    closed: [Counter; Closed::ALL.len()],
    streams_cut: Counter,
}

impl ConnMetrics {
    pub(crate) fn new(registry: &Registry, listener: &str) -> ConnMetrics {
        registry.within(|| {
            let l = listener.to_string();
            ConnMetrics {
                open: gauge!(CONNECTIONS, "listener" => l.clone()),
                parked: gauge!(CONNECTIONS_PARKED, "listener" => l.clone()),
                closed: Closed::ALL.map(
                    |c| counter!(CONNECTIONS_CLOSED, "listener" => l.clone(), "reason" => c.as_str()),
                ),
                streams_cut: counter!(STREAMS_CUT, "listener" => l.clone(), "reason" => "send_timeout"),
            }
        })
    }

    pub(crate) fn opened(&self) {
        self.open.increment(1.0);
    }

    pub(crate) fn ended(&self) {
        self.open.decrement(1.0);
    }

    /// A connection parked (`true`) or served again, or closed, from parked (`false`).
    pub(crate) fn parked(&self, parked: bool) {
        if parked {
            self.parked.increment(1.0);
        } else {
            self.parked.decrement(1.0);
        }
    }

    /// `n` HTTP/2 streams' calls ended: their client gave them no room for `idle_timeout`.
    pub(crate) fn streams_cut(&self, n: usize) {
        if n > 0 {
            self.streams_cut.increment(n as u64);
        }
    }

    pub(crate) fn closed(&self, why: Closed) {
        if let Some(i) = Closed::ALL.iter().position(|c| *c == why) {
            self.closed[i].increment(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grpc::grpc_ended;

    #[test]
    fn log_lines_are_paced_and_the_ones_left_out_counted() {
        let pace = LogPace::new();
        let t0 = std::time::Instant::now();
        assert_eq!(pace.may_log(t0), Some(0));
        for ms in [1, 500, 999] {
            assert_eq!(pace.may_log(t0 + Duration::from_millis(ms)), None);
        }
        assert_eq!(pace.may_log(t0 + Duration::from_millis(1000)), Some(3));
        assert_eq!(pace.may_log(t0 + Duration::from_millis(2500)), Some(0));
    }

    #[test]
    fn grpc_methods_are_labelled_by_name_up_to_the_cap_then_as_other() {
        for path in ["/demo.Records/Get", "/Svc/M", "/a.b.C/Do_It-2"] {
            assert!(grpc_method(path), "{path}");
        }
        for path in [
            "/",
            "/x",
            "/x/",
            "//M",
            "/a/b/c",
            "/a b/M",
            "/a/\u{e9}",
            "x/M",
        ] {
            assert!(!grpc_method(path), "{path}");
        }
        let registry = Registry::new();
        let route = RouteMetrics::new(&registry, "records");
        grpc_ended(&route.grpc_tally("/demo.Records/Get"), Some(0));
        grpc_ended(&route.grpc_tally("/demo.Records/Get"), Some(8));
        grpc_ended(&route.grpc_tally("/demo.Records/Get"), Some(99));
        grpc_ended(&route.grpc_tally("not a method"), None);
        for i in 0..MAX_GRPC_METHODS + 5 {
            grpc_ended(&route.grpc_tally(&format!("/s.S/M{i}")), Some(0));
        }
        let text = registry.render([]);
        let count = |method: &str, status: &str| {
            let line = format!(
                "inflight_proxy_grpc_calls_total{{budget=\"records\",method=\"{method}\",grpc_status=\"{status}\"}} "
            );
            text.lines()
                .find_map(|l| l.strip_prefix(&line))
                .map_or(0, |n| n.parse::<u64>().unwrap())
        };
        assert_eq!(count("/demo.Records/Get", "OK"), 1);
        assert_eq!(count("/demo.Records/Get", "RESOURCE_EXHAUSTED"), 1);
        assert_eq!(count("/demo.Records/Get", "UNKNOWN"), 1, "a code past 16");
        assert_eq!(count("other", "none"), 1);
        // Get and the first 99 of the rest by name; the last 6 as other.
        assert_eq!(count("/s.S/M98", "OK"), 1);
        assert_eq!(count("/s.S/M99", "OK"), 0);
        assert_eq!(count("other", "OK"), 6);
        let methods: std::collections::HashSet<&str> = text
            .lines()
            .filter(|l| l.starts_with("inflight_proxy_grpc_calls_total{"))
            .filter_map(|l| l.split("method=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(methods.len(), MAX_GRPC_METHODS + 1);
    }
}
