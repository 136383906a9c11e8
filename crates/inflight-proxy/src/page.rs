//! The live page at the admin address's `/`, and `/budgets.json`, the document it reads once a
//! second: every budget's limit (with its last minutes), calls in flight, queued and the peak,
//! admissions and refusals by reason, permit wait and call time, classes, pause and pace, and
//! fleet lease state. One HTML file with its script inline: no external assets, no build step.
//!
//! `/budgets.json` is for scripts too (version 1; fields are only ever added):
//!
//! ```text
//! { "version": 1, "draining": false, "uptime_s": 12.5,
//!   "budgets": [ { "name": "records", "listen": "127.0.0.1:7002", "upstream": "http://...",
//!     "protocol": "http", "limit": 6, "max_concurrent": 6, "adaptive": false,
//!     "in_flight": 2, "waiting": 0, "peak_in_flight": 6, "peak_waiting": 4,
//!     "admitted": 120, "refused": { "queue_full": 3, "permit_timeout": 0, "rate_limited": 0,
//!       "paused": 0, "evicted": 0, "unavailable": 0 },
//!     "calls": { "ok": 110, "error": 2, "timeout": 1, "cancelled": 0 },
//!     "overloads": 2, "pauses": 0, "paused_for_ms": null, "paced": false,
//!     "wait_ms": { "p50": 0.0, "p99": 12.1 }, "call_ms": { "p50": 30.2, "p99": 80.4 },
//!     "limit_history": [ [-300.0, 6], [0.0, 6] ],
//!     "classes": [ { "name": "interactive", "weight": 4, "in_flight": 1, "waiting": 0,
//!       "admitted": 40, "rejected": 0, "wait_ms": { "p50": 0.0, "p99": 1.0 } } ],
//!     "fleet": null } ] }
//! ```
//!
//! `limit_history` holds `[seconds from now, limit]` points of the last five minutes, the first
//! at the window's start; `fleet` is `{ "redis_down", "local_held", "fallbacks", "refused",
//! "learning" }` for a fleet budget. Counters count since the proxy started: a reload that
//! replaces a budget carries its counts on (the peaks and the wait and call times are the new
//! budget's). A reader takes rates from two documents.

use std::time::Duration;

use inflight::{Budget, LatencySummary};
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::config::Protocol;
use crate::route::RouteState;

/// How far back `limit_history` reaches.
const HISTORY: Duration = Duration::from_secs(300);

/// The document of `/budgets.json`.
pub(crate) fn budgets_json(
    states: &[std::sync::Arc<RouteState>],
    bound: &[(String, std::net::SocketAddr)],
    fleets: &[inflight_redis::RedisFleet],
    draining: bool,
    uptime: Duration,
) -> String {
    let health: Vec<inflight_redis::FleetHealth> = fleets.iter().flat_map(|f| f.health()).collect();
    let budgets: Vec<Value> = states
        .iter()
        .map(|state| {
            let fleet = state.is_fleet().then(|| {
                health
                    .iter()
                    .rev()
                    .find(|h| h.budget == state.budget.name())
                    .map(|h| {
                        json!({
                            "redis_down": h.redis_down,
                            "local_held": h.local_held,
                            "fallbacks": h.fallbacks,
                            "refused": h.refused,
                            "learning": h.learning,
                        })
                    })
                    .unwrap_or(Value::Null)
            });
            let listen = bound
                .iter()
                .find(|(name, _)| name == state.budget.name())
                .map_or(state.route.listen(), |(_, addr)| *addr);
            budget_json(state, listen, fleet.unwrap_or(Value::Null))
        })
        .collect();
    let doc = json!({
        "version": 1,
        "draining": draining,
        "uptime_s": uptime.as_secs_f64(),
        "budgets": budgets,
    });
    doc.to_string()
}

fn budget_json(state: &RouteState, listen: std::net::SocketAddr, fleet: Value) -> Value {
    let budget = &state.budget;
    let s = state.snapshot();
    json!({
        "name": s.name,
        "listen": listen.to_string(),
        "upstream": state.route.upstream().url(),
        "protocol": match state.route.protocol() {
            Protocol::Grpc => "grpc",
            _ => "http",
        },
        "limit": s.limit,
        "max_concurrent": s.max_concurrent,
        "adaptive": budget.config().adaptive_limit().is_some(),
        "in_flight": state.in_flight(),
        "waiting": s.waiting,
        "peak_in_flight": s.peak_in_flight,
        "peak_waiting": s.peak_waiting,
        "admitted": s.admitted,
        "refused": {
            "queue_full": s.rejected,
            "permit_timeout": s.permit_timeouts,
            "rate_limited": s.rate_limited,
            "paused": s.paused,
            "evicted": s.evicted,
            "unavailable": s.unavailable,
        },
        "calls": {
            "ok": s.calls_ok,
            "error": s.calls_error,
            "timeout": s.call_timeouts,
            "cancelled": s.calls_cancelled,
        },
        "overloads": s.outcomes_overload,
        "pauses": s.pauses,
        "paused_for_ms": budget.paused_for().map(ms),
        "paced": budget.is_paced(),
        "wait_ms": latency(&s.wait),
        "call_ms": latency(&s.call),
        "limit_history": history(budget, s.limit),
        "classes": s.classes.iter().map(|c| json!({
            "name": c.name,
            "weight": c.weight,
            "in_flight": c.in_flight,
            "waiting": c.waiting,
            "admitted": c.admitted,
            "rejected": c.rejected + c.permit_timeouts + c.rate_limited + c.paused + c.evicted + c.unavailable,
            "wait_ms": latency(&c.wait),
        })).collect::<Vec<_>>(),
        "fleet": fleet,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn latency(l: &LatencySummary) -> Value {
    json!({ "p50": ms(l.p50), "p99": ms(l.p99) })
}

/// The limit over the last [`HISTORY`], as `[seconds from now, limit]` points: the limit at the
/// window's start, each change since, and now.
fn history(budget: &Budget, now_limit: usize) -> Vec<(f64, usize)> {
    let now = Instant::now();
    let start = now.checked_sub(HISTORY).unwrap_or(now);
    let changes = budget.limit_changes();
    let before = changes
        .iter()
        .rev()
        .find(|c| c.at <= start)
        .map_or(changes.first().map_or(now_limit, |c| c.limit), |c| c.limit);
    let ago = |at: Instant| -(now.saturating_duration_since(at).as_secs_f64());
    let mut points = vec![(ago(start), before)];
    points.extend(
        changes
            .iter()
            .filter(|c| c.at > start)
            .map(|c| (ago(c.at), c.limit)),
    );
    points.push((0.0, now_limit));
    points
}

/// The page: a table per budget, refreshed from `/budgets.json` once a second.
pub(crate) const HTML: &str = include_str!("page.html");
