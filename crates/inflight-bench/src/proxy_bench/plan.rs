//! What a benchmark run measures, and in what order: who is measured ([`Who`]), the load points
//! of the latency case ([`LoadPoint`]), the run's [`Settings`], the order of each repeat
//! ([`rotation`]) and the rule that discards an open-loop run whose generator sent late
//! ([`send_lag_verdict`]).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

use super::load::LoadReport;
use super::ProxyBenchError;

/// The budget of the budget case: the most requests the upstream may see at once.
pub const BUDGET_LIMIT: u64 = 6;

/// The service time of the upstream's slow path in the budget case, milliseconds; subtracted
/// from latency to give the wait in front of it.
pub const BUDGET_SERVICE_MS: f64 = 20.0;

/// The open-loop load points by default: 10%, 25% and 50% of each target's own saturation
/// throughput, measured in the same repeat.
pub const DEFAULT_FRACTIONS: [f64; 3] = [0.10, 0.25, 0.50];

/// Keep-alive connections of a callgrind step, and the requests sent before its count starts.
pub const CALLGRIND_CONNECTIONS: usize = 4;
pub const CALLGRIND_WARMUP_REQUESTS: usize = 200;

/// An open-loop run whose generator sent its requests later than this after their scheduled
/// time, at p99, measured its own lag rather than the proxy's latency: it is discarded.
pub const MAX_SEND_LAG: Duration = Duration::from_micros(100);

/// Who a measurement is of: the upstream reached directly (the baseline), or one of the proxies
/// in front of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Who {
    /// The load generator straight to the upstream, no proxy.
    Direct,
    /// `inflight proxy`.
    Inflight,
    /// HAProxy.
    Haproxy,
    /// nginx.
    Nginx,
}

impl Who {
    /// Every target, in the order of the tables and of the rotation.
    pub const ALL: [Who; 4] = [Who::Direct, Who::Inflight, Who::Haproxy, Who::Nginx];

    /// `direct`, `inflight`, `haproxy` or `nginx`.
    pub fn as_str(self) -> &'static str {
        match self {
            Who::Direct => "direct",
            Who::Inflight => "inflight",
            Who::Haproxy => "haproxy",
            Who::Nginx => "nginx",
        }
    }

    /// Whether this is a proxy (every target but [`Who::Direct`]).
    pub fn is_proxy(self) -> bool {
        self != Who::Direct
    }

    /// Parses a comma-separated list such as `inflight,direct`, into the order of [`Who::ALL`]
    /// with no repeats.
    ///
    /// ```
    /// use inflight_bench::proxy_bench::plan::Who;
    ///
    /// assert_eq!(Who::parse_list("inflight, direct").unwrap(), vec![Who::Direct, Who::Inflight]);
    /// assert!(Who::parse_list("envoy").is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// A message naming the unknown entry, or saying the list is empty.
    pub fn parse_list(list: &str) -> Result<Vec<Who>, String> {
        let mut chosen = Vec::new();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            chosen.push(name.parse::<Who>()?);
        }
        if chosen.is_empty() {
            return Err("expected at least one of direct, inflight, haproxy, nginx".into());
        }
        Ok(Who::ALL
            .into_iter()
            .filter(|w| chosen.contains(w))
            .collect())
    }
}

impl FromStr for Who {
    type Err = String;

    fn from_str(s: &str) -> Result<Who, String> {
        Who::ALL
            .into_iter()
            .find(|w| w.as_str() == s)
            .ok_or_else(|| {
                format!("unknown target {s:?}: expected direct, inflight, haproxy or nginx")
            })
    }
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The order of the targets in repeat `repeat` (from 0): the list rotated so that the repeat
/// starts at target `repeat mod n`. Over `n` repeats each target goes first once, so a drift in
/// the machine's load does not always fall on the same one.
///
/// ```
/// use inflight_bench::proxy_bench::plan::{rotation, Who};
///
/// let all = Who::ALL;
/// assert_eq!(rotation(1, &all), vec![Who::Inflight, Who::Haproxy, Who::Nginx, Who::Direct]);
/// ```
pub fn rotation(repeat: usize, targets: &[Who]) -> Vec<Who> {
    if targets.is_empty() {
        return Vec::new();
    }
    let start = repeat % targets.len();
    targets[start..]
        .iter()
        .chain(&targets[..start])
        .copied()
        .collect()
}

/// Where an open-loop run offers its load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LoadPoint {
    /// This fraction of the target's own saturation throughput in the same repeat.
    Fraction(f64),
    /// This many requests per second, whoever is measured.
    Rate(f64),
}

impl LoadPoint {
    /// `10%` or `2000/s`: the name of the point in tables and JSON.
    pub fn label(&self) -> String {
        match *self {
            LoadPoint::Fraction(f) => format!("{}%", round_to(f * 100.0, 2)),
            LoadPoint::Rate(r) => format!("{}/s", round_to(r, 2)),
        }
    }

    /// The rate to offer, given the target's saturation throughput (2xx per second); `None`
    /// when the point is a fraction of a throughput that was not measured.
    pub fn rate(&self, saturation: Option<f64>) -> Option<f64> {
        match *self {
            LoadPoint::Fraction(f) => saturation.filter(|s| *s > 0.0).map(|s| s * f),
            LoadPoint::Rate(r) => Some(r),
        }
    }
}

fn round_to(v: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (v * scale).round() / scale
}

/// Whether an open-loop run's generator kept to its schedule: `Err` with the reason when the
/// p99 of its send lag is over [`MAX_SEND_LAG`], or was not measured.
///
/// # Errors
///
/// The reason to discard the run, with the figure.
pub fn send_lag_verdict(report: &LoadReport) -> Result<(), String> {
    let Some(lag) = report.send_lag_ms else {
        return Err("no send lag measured (not an open loop)".into());
    };
    if lag.count == 0 {
        return Err("no request was sent in the measured time".into());
    }
    let limit_ms = MAX_SEND_LAG.as_secs_f64() * 1000.0;
    if lag.p99 > limit_ms {
        return Err(format!(
            "the generator's send lag p99 {:.0} µs is over {:.0} µs",
            lag.p99 * 1000.0,
            limit_ms * 1000.0
        ));
    }
    Ok(())
}

/// What a run measures, and how long each step lasts.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Who is measured, in the order of [`Who::ALL`].
    pub targets: Vec<Who>,
    /// Repeats of every case for every target, interleaved ([`rotation`]).
    pub repeats: usize,
    /// Load sent and not measured before each load step.
    pub warmup: Duration,
    /// The measured time of each load step.
    pub duration: Duration,
    /// Client connections of the load steps.
    pub connections: usize,
    /// The open-loop load points of the latency case.
    pub points: Vec<LoadPoint>,
    /// How many times an open-loop run discarded for its send lag is run again.
    pub retries: usize,
    /// Idle keep-alive connections held while the proxies' memory is read.
    pub idle_connections: usize,
    /// How long they stay idle before the memory is read.
    pub idle_settle: Duration,
    /// A request with no answer after this counts as an error.
    pub request_timeout: Duration,
    /// Requests counted in each callgrind step (with `--instructions callgrind`).
    pub callgrind_requests: usize,
    /// Path-prefix routes in front of `inflight proxy`'s listener, none of which the
    /// benchmark's requests match: each request is checked against all of them and goes to the
    /// listener's own budget, which measures what a routing table costs (0: no table).
    pub inflight_routes: usize,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            targets: Who::ALL.to_vec(),
            repeats: 10,
            warmup: Duration::from_secs(1),
            duration: Duration::from_secs(5),
            connections: 64,
            points: DEFAULT_FRACTIONS.map(LoadPoint::Fraction).to_vec(),
            retries: 2,
            idle_connections: 10_000,
            idle_settle: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            callgrind_requests: 2000,
            inflight_routes: 0,
        }
    }
}

impl Settings {
    /// Refuses settings that cannot run.
    ///
    /// # Errors
    ///
    /// [`ProxyBenchError::Plan`] naming the setting.
    pub fn check(&self) -> Result<(), ProxyBenchError> {
        let bad = |m: &str| Err(ProxyBenchError::Plan(m.to_string()));
        if self.targets.is_empty() {
            return bad("nothing to measure: no target chosen");
        }
        if self.repeats == 0 {
            return bad("repeats must be at least 1");
        }
        if self.duration.is_zero() {
            return bad("the duration must be above 0");
        }
        if self.connections == 0 {
            return bad("connections must be at least 1");
        }
        if self.targets.iter().any(|w| w.is_proxy()) && self.idle_connections == 0 {
            return bad("idle connections must be at least 1");
        }
        if self.callgrind_requests == 0 {
            return bad("callgrind requests must be at least 1");
        }
        for p in &self.points {
            let ok = match *p {
                LoadPoint::Fraction(f) => f.is_finite() && f > 0.0 && f <= 1.0,
                LoadPoint::Rate(r) => r.is_finite() && r > 0.0,
            };
            if !ok {
                return bad(&format!("load point {} cannot be offered", p.label()));
            }
        }
        Ok(())
    }

    /// The planned seconds of one target's steps in one repeat, without retries: the load
    /// steps' warm-up and measured time, the idle step's settling, and `overhead` per step.
    pub fn planned_seconds(&self, who: Who, overhead: f64) -> f64 {
        let step = self.warmup.as_secs_f64() + self.duration.as_secs_f64() + overhead;
        // Saturation and the load points; a proxy also has the budget case and the idle step.
        let loads = 1 + self.points.len() + usize::from(who.is_proxy());
        let idle = if who.is_proxy() {
            self.idle_settle.as_secs_f64() + 2.0 * overhead
        } else {
            0.0
        };
        loads as f64 * step + idle
    }
}

/// The time left, from the time taken so far for `done` planned seconds, for `left` more.
pub fn eta(elapsed: Duration, done: f64, left: f64) -> Duration {
    if done <= 0.0 {
        return Duration::from_secs_f64(left.max(0.0));
    }
    Duration::from_secs_f64((elapsed.as_secs_f64() / done * left).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(LoadPoint::Fraction(0.1).label(), "10%");
        assert_eq!(LoadPoint::Fraction(0.25).label(), "25%");
        assert_eq!(LoadPoint::Rate(2000.0).label(), "2000/s");
        assert_eq!(LoadPoint::Fraction(0.5).rate(Some(1000.0)), Some(500.0));
        assert_eq!(LoadPoint::Fraction(0.5).rate(Some(0.0)), None);
        assert_eq!(LoadPoint::Rate(7.0).rate(None), Some(7.0));
    }

    #[test]
    fn the_default_settings_run() {
        Settings::default().check().unwrap();
        let s = Settings {
            repeats: 0,
            ..Settings::default()
        };
        assert!(s.check().is_err());
    }
}
