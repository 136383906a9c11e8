//! [`Level`]: what one concurrency level measured, and [`ErrorCounts`], its failures by kind.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::in_flight::TargetInFlight;

/// Failed calls by kind. Any answer other than 2xx is a failure; 429 and 503 (the answers of a
/// service that is refusing load) are counted apart from the other statuses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCounts {
    /// All failed calls.
    pub total: u64,
    /// Answers 429 Too Many Requests.
    pub status_429: u64,
    /// Answers 503 Service Unavailable.
    pub status_503: u64,
    /// Other answers that are not 2xx, by status code.
    pub status: BTreeMap<u16, u64>,
    /// Calls with no complete answer within the per-call timeout.
    pub timeout: u64,
    /// Calls that failed below HTTP: connection refused or reset, not an HTTP answer.
    pub transport: u64,
}

impl ErrorCounts {
    /// Counts one answer with a status that is not 2xx.
    pub(crate) fn add_status(&mut self, code: u16) {
        self.total += 1;
        match code {
            429 => self.status_429 += 1,
            503 => self.status_503 += 1,
            _ => *self.status.entry(code).or_default() += 1,
        }
    }

    pub(crate) fn add_timeout(&mut self) {
        self.total += 1;
        self.timeout += 1;
    }

    pub(crate) fn add_transport(&mut self) {
        self.total += 1;
        self.transport += 1;
    }

    /// The kinds seen, most frequent first, as `503 x 40, timeout x 2`; empty when none.
    pub fn describe(&self) -> String {
        let mut kinds: Vec<(String, u64)> = vec![
            ("429".to_string(), self.status_429),
            ("503".to_string(), self.status_503),
            ("timeout".to_string(), self.timeout),
            ("transport".to_string(), self.transport),
        ];
        kinds.extend(self.status.iter().map(|(c, n)| (c.to_string(), *n)));
        kinds.retain(|(_, n)| *n > 0);
        kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
        kinds
            .iter()
            .map(|(k, n)| format!("{k} x {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What one concurrency level measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Level {
    /// Calls kept in flight at once.
    pub concurrency: u32,
    /// Calls that ended (answered, failed or timed out).
    pub requests: u64,
    /// Calls answered 2xx.
    pub ok: u64,
    /// Calls answered 2xx per second, over the time the level kept `concurrency` calls in
    /// flight (the last calls, which drain with fewer in flight, are left out).
    pub throughput_per_s: f64,
    /// Median latency of the calls answered 2xx, in milliseconds (`null` if none); failed calls
    /// are not in it, nor in the other latencies: they are counted in `errors`.
    pub p50_ms: Option<f64>,
    /// 99th percentile latency of the calls answered 2xx, in milliseconds.
    pub p99_ms: Option<f64>,
    /// Slowest call answered 2xx, in milliseconds.
    pub max_ms: Option<f64>,
    /// Mean latency of the calls answered 2xx, in milliseconds.
    pub mean_ms: Option<f64>,
    /// Failed calls by kind.
    pub errors: ErrorCounts,
    /// Wall time of the level, in seconds.
    pub elapsed_s: f64,
    /// Whether this level was added between two others to pin down the knee.
    pub refined: bool,
    /// Whether Ctrl-C or the total time cap cut the level short (its calls in flight were
    /// dropped).
    pub interrupted: bool,
    /// Whether the level had no full round of 2xx answers while every caller was busy (its time
    /// bound came first, or failed calls used up its calls): its throughput and latencies are
    /// then over the whole level and all its calls, warm-up and drain included, and say less
    /// than a steady level's. `false` in documents written before the field.
    #[serde(default)]
    pub thin: bool,
    /// The first failure's message, on one line, for a transport error or an error status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// The target's calls in flight during the level, as the target reported them; absent
    /// unless the sweep read them ([`Sweep::target_in_flight`](crate::Sweep::target_in_flight)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_in_flight: Option<TargetInFlight>,
}

impl Level {
    /// The share of calls that failed, 0 to 1 (0 when no call ended).
    pub fn error_rate(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.errors.total as f64 / self.requests as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_counted_by_kind() {
        let mut e = ErrorCounts::default();
        for code in [503, 503, 429, 500, 404, 500] {
            e.add_status(code);
        }
        e.add_timeout();
        e.add_transport();
        assert_eq!(e.total, 8);
        assert_eq!((e.status_503, e.status_429, e.status[&500]), (2, 1, 2));
        assert_eq!(
            e.describe(),
            "503 x 2, 500 x 2, 429 x 1, timeout x 1, transport x 1, 404 x 1"
        );
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["status"]["500"], 2);
    }
}
