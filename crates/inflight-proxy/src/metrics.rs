//! The proxy's Prometheus text: every budget's metrics (`inflight::metrics`), plus requests by
//! budget and status class, the proxy's own replies by reason, and a latency histogram.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `inflight_proxy_requests_total` | counter | budget, status_class | responses sent, by status class (`2xx` ... `5xx`), the proxy's own replies included |
//! | `inflight_proxy_replies_total` | counter | budget, reason | responses the proxy made itself: `queue_full`, `permit_timeout`, `rate_limited`, `paused`, `evicted`, `unavailable` (503/429), `call_timeout` (504), `upstream_unreachable`, `upstream_tls` (502), `client_body` (400), `lease_lost` (503, `on_lost = "cancel"`) |
//! | `inflight_proxy_request_duration_seconds` | histogram | budget | from the request's arrival to its response headers, the permit wait included |
//! | `inflight_proxy_connections` | gauge | listener | client connections open now (`listener`: the budget's name, or `admin`) |
//! | `inflight_proxy_connections_closed_total` | counter | listener, reason | client connections the proxy closed: `first_byte_timeout`, `idle_timeout`, `keepalive_timeout` (HTTP/2 pings unanswered), `max_connections` (idle longest when the listener was full) |
//!
//! Each proxy renders through a recorder of its own, so two proxies in one process never mix
//! their numbers; budgets are built under it, as `inflight::metrics` requires.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use inflight::Budget;
use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter,
    Gauge, Histogram, Unit,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use crate::refusal::Reason;

/// Responses sent, by budget and status class (counter).
pub const REQUESTS: &str = "inflight_proxy_requests_total";
/// Responses the proxy made itself, by budget and reason (counter).
pub const REPLIES: &str = "inflight_proxy_replies_total";
/// From a request's arrival to its response headers (histogram, seconds).
pub const REQUEST_DURATION: &str = "inflight_proxy_request_duration_seconds";

/// Client connections open now, by listener (gauge).
pub const CONNECTIONS: &str = "inflight_proxy_connections";
/// Client connections the proxy closed, by listener and reason (counter).
pub const CONNECTIONS_CLOSED: &str = "inflight_proxy_connections_closed_total";

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
/// `/metrics` (a scrape does it too).
pub(crate) const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// One proxy's recorder.
pub(crate) struct Registry {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
}

impl Registry {
    pub(crate) fn new() -> Registry {
        let recorder = PrometheusBuilder::new()
            .set_buckets(inflight::metrics::BUCKETS)
            .expect("the bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        let registry = Registry { recorder, handle };
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
                "Responses the proxy made itself, by reason: queue_full, permit_timeout, rate_limited, paused, evicted, unavailable, call_timeout, upstream_unreachable, upstream_tls, client_body, lease_lost."
            );
            describe_gauge!(
                CONNECTIONS,
                Unit::Count,
                "Client connections open now, by listener (a budget's name, or admin)."
            );
            describe_counter!(
                CONNECTIONS_CLOSED,
                Unit::Count,
                "Client connections the proxy closed, by reason: first_byte_timeout, idle_timeout, keepalive_timeout, max_connections."
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
        metrics::with_local_recorder(&self.recorder, f)
    }

    /// Folds the samples the histograms took since the last render into their buckets. The
    /// recorder keeps each sample until then, so a proxy that is never scraped would keep every
    /// request's latencies: the proxy calls this every [`UPKEEP_INTERVAL`].
    pub(crate) fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// The Prometheus text now, `budgets` published first.
    pub(crate) fn render<'a>(&self, budgets: impl IntoIterator<Item = &'a Budget>) -> String {
        self.within(|| inflight::metrics::publish_all(budgets));
        self.handle.render()
    }
}

/// The handles of one budget's route, and the pace of its log lines.
pub(crate) struct RouteMetrics {
    classes: [Counter; 5],
    replies: [Counter; REASONS.len()],
    duration: Histogram,
    log: LogPace,
}

/// At most one log line per [`LOG_INTERVAL`]: an upstream that is down fails every request,
/// and a line for each would flood the log. The lines left out are counted.
struct LogPace {
    last: Mutex<Option<std::time::Instant>>,
    left_out: AtomicU64,
}

/// The least time between two log lines of one route.
const LOG_INTERVAL: Duration = Duration::from_secs(1);

impl LogPace {
    fn new() -> LogPace {
        LogPace {
            last: Mutex::new(None),
            left_out: AtomicU64::new(0),
        }
    }

    /// `Some(lines left out since the last)` when a line may be written now.
    fn may_log(&self, now: std::time::Instant) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|at| now.duration_since(at) < LOG_INTERVAL) {
            self.left_out.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *last = Some(now);
        Some(self.left_out.swap(0, Ordering::Relaxed))
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
                log: LogPace::new(),
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
}

impl Closed {
    const ALL: [Closed; 4] = [
        Closed::FirstByteTimeout,
        Closed::IdleTimeout,
        Closed::KeepaliveTimeout,
        Closed::MaxConnections,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Closed::FirstByteTimeout => "first_byte_timeout",
            Closed::IdleTimeout => "idle_timeout",
            Closed::KeepaliveTimeout => "keepalive_timeout",
            Closed::MaxConnections => "max_connections",
        }
    }
}

/// The connection gauges and counters of one listener.
pub(crate) struct ConnMetrics {
    open: Gauge,
    closed: [Counter; Closed::ALL.len()],
}

impl ConnMetrics {
    pub(crate) fn new(registry: &Registry, listener: &str) -> ConnMetrics {
        registry.within(|| {
            let l = listener.to_string();
            ConnMetrics {
                open: gauge!(CONNECTIONS, "listener" => l.clone()),
                closed: Closed::ALL.map(
                    |c| counter!(CONNECTIONS_CLOSED, "listener" => l.clone(), "reason" => c.as_str()),
                ),
            }
        })
    }

    pub(crate) fn opened(&self) {
        self.open.increment(1.0);
    }

    pub(crate) fn ended(&self) {
        self.open.decrement(1.0);
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
}
