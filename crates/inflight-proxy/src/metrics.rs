//! The proxy's Prometheus text: every budget's metrics (`inflight::metrics`), plus requests by
//! budget and status class, the proxy's own replies by reason, and a latency histogram.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `inflight_proxy_requests_total` | counter | budget, class | responses sent, by status class (`2xx` ... `5xx`), the proxy's own replies included |
//! | `inflight_proxy_replies_total` | counter | budget, reason | responses the proxy made itself: `queue_full`, `permit_timeout`, `rate_limited`, `paused`, `evicted`, `unavailable` (503/429), `call_timeout` (504), `upstream_unreachable`, `upstream_tls` (502), `client_body` (400), `lease_lost` (503, `on_lost = "cancel"`) |
//! | `inflight_proxy_request_duration_seconds` | histogram | budget | from the request's arrival to its response headers, the permit wait included |
//!
//! Each proxy renders through a recorder of its own, so two proxies in one process never mix
//! their numbers; budgets are built under it, as `inflight::metrics` requires.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use inflight::Budget;
use metrics::{counter, describe_counter, describe_histogram, histogram, Counter, Histogram, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use crate::refusal::Reason;

/// Responses sent, by budget and status class (counter).
pub const REQUESTS: &str = "inflight_proxy_requests_total";
/// Responses the proxy made itself, by budget and reason (counter).
pub const REPLIES: &str = "inflight_proxy_replies_total";
/// From a request's arrival to its response headers (histogram, seconds).
pub const REQUEST_DURATION: &str = "inflight_proxy_request_duration_seconds";

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
                classes: CLASSES.map(|c| counter!(REQUESTS, "budget" => b.clone(), "class" => c)),
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
