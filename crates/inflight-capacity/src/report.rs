//! [`CapacityReport`]: the levels, the knee, the suggested budget; as JSON or a table.

use std::fmt::Write as _;

use serde::Serialize;

use crate::bounds::{Caps, Stop};
use crate::call::one_line;
use crate::knee::{find_knee, Evidence, KneeRules, Point, Verdict};
use crate::level::Level;
use crate::suggest::{suggest, Basis, Measured, Suggestion};
use crate::target::Target;

/// Where and how often the target's calls in flight were read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InFlightPolling {
    /// The endpoint read.
    pub url: String,
    /// The JSON pointer to the number in its answer.
    pub pointer: String,
    /// The time between readings, in milliseconds.
    pub every_ms: f64,
}

/// The result of a sweep. Serialized, it is the `--json` document: `url`, `levels` (each with
/// `concurrency`, `requests`, `throughput_per_s`, `p50_ms`, `p99_ms`, `max_ms`, `errors`, and
/// `target_in_flight` when the target's count was read), `capacity`, `service_time_ms`,
/// `max_rate_per_s` and `suggested`, with more around them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityReport {
    pub url: String,
    pub method: String,
    /// The levels measured, by concurrency.
    pub levels: Vec<Level>,
    /// The smallest concurrency at the plateau before calls wait or fail; `null` without a knee.
    pub capacity: Option<u32>,
    /// Median latency at the lowest level, in milliseconds.
    pub service_time_ms: Option<f64>,
    /// The highest throughput of a level under the error threshold, calls per second.
    pub max_rate_per_s: Option<f64>,
    /// What the levels say: a knee (and what showed it), no knee up to a level, or refused.
    pub verdict: Verdict,
    /// The verdict in one plain sentence, as the table ends.
    pub conclusion: String,
    /// How sharp the knee is: the capacity level's plateau share and efficiency, the smaller
    /// (1 = throughput on the plateau with no wait).
    pub fit: Option<f64>,
    /// The tolerance and error threshold used.
    pub rules: KneeRules,
    /// The run's caps.
    pub caps: Caps,
    /// Why the climb ended early, if it did.
    pub stopped: Option<Stop>,
    /// The budget to paste; `null` when nothing clean was measured or a level was cut short
    /// (Ctrl-C, the total time cap).
    pub suggested: Option<Suggestion>,
    /// Where the target's calls in flight were read from; absent when they were not, and then
    /// so is every level's `target_in_flight`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_in_flight_source: Option<InFlightPolling>,
    /// Where the suggestion could not be made although there was data (should not happen).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggest_error: Option<String>,
}

impl CapacityReport {
    /// The report of `levels` measured against `target` (levels in any order).
    pub fn build(
        target: &Target,
        name: String,
        mut levels: Vec<Level>,
        rules: KneeRules,
        caps: Caps,
        stopped: Option<Stop>,
    ) -> CapacityReport {
        levels.sort_by_key(|l| l.concurrency);
        let points: Vec<Point> = levels.iter().map(Point::from).collect();
        let knee = find_knee(&points, &rules);
        let at = |c: u32| levels.iter().find(|l| l.concurrency == c);
        let basis = match knee.verdict {
            Verdict::Knee { capacity, .. } => Some((capacity, Basis::Knee)),
            Verdict::NoKnee { up_to } => Some((up_to, Basis::LowerBound)),
            _ => None,
        };
        let url = target.url().to_string();
        let mut suggest_error = None;
        // A level cut short measured part of a round; no budget rests on it.
        let cut = levels.iter().any(|l| l.interrupted);
        let suggested = match (basis, knee.service_time_ms, knee.max_rate_per_s) {
            _ if cut => None,
            (Some((c, basis)), Some(service_time_ms), Some(max_rate_per_s)) => {
                let measured = Measured {
                    max_concurrent: c,
                    basis,
                    service_time_ms,
                    p99_ms: at(c).and_then(|l| l.p99_ms).unwrap_or(service_time_ms),
                    max_rate_per_s,
                };
                match suggest(&name, &url, &measured) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        suggest_error = Some(e.to_string());
                        None
                    }
                }
            }
            _ => None,
        };
        let mut report = CapacityReport {
            url,
            method: target.method_name().to_string(),
            capacity: knee.capacity(),
            service_time_ms: knee.service_time_ms,
            max_rate_per_s: knee.max_rate_per_s,
            verdict: knee.verdict,
            fit: knee.fit,
            levels,
            rules,
            caps,
            stopped,
            suggested,
            suggest_error,
            target_in_flight_source: None,
            conclusion: String::new(),
        };
        report.conclusion = report.conclusion();
        report
    }

    /// The lowest level measured (its p50 is the service time).
    fn base(&self) -> Option<&Level> {
        self.levels.first()
    }

    /// The verdict in one plain sentence.
    pub fn conclusion(&self) -> String {
        let tol = self.rules.tolerance * 100.0;
        match self.verdict {
            Verdict::Knee { capacity, evidence } => {
                let why = match evidence {
                    Evidence::Queueing => "above it throughput stops growing and calls wait",
                    Evidence::Errors => "above it calls fail",
                };
                format!("capacity {capacity} calls in flight: {why} (tolerance {tol:.0}%)")
            }
            Verdict::NoKnee { up_to } => format!(
                "no knee up to concurrency {up_to}: throughput kept growing with concurrency, so the capacity is above {up_to} (measure higher with --max or --levels)"
            ),
            Verdict::AllRefused { first } => format!(
                "no capacity: every level from concurrency {first} up had more than {:.0}% of calls failing",
                self.rules.stop_on_errors * 100.0
            ),
            Verdict::NoData => "no capacity: no call finished".to_string(),
        }
    }

    /// The table, the conclusion and the suggested budget, as the command prints them.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{} {}", self.method, self.url);
        let polled = self.target_in_flight_source.is_some();
        let _ = writeln!(
            out,
            "{:>11}  {:>8}  {:>10}  {:>8}  {:>8}  {:>8}  {}errors",
            "concurrency",
            "requests",
            "ok/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            if polled {
                "target max  target mean  "
            } else {
                ""
            }
        );
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        let target = |l: &Level| match &l.target_in_flight {
            Some(t) if polled => format!(
                "{:>10}  {:>11}  ",
                t.max.map_or("-".to_string(), count),
                t.mean.map_or("-".to_string(), |v| format!("{v:.1}"))
            ),
            _ if polled => format!("{:>10}  {:>11}  ", "-", "-"),
            _ => String::new(),
        };
        for l in &self.levels {
            let mark = match (Some(l.concurrency) == self.capacity, l.refined) {
                (true, _) => " <- knee",
                (false, true) => " (probe)",
                _ => "",
            };
            let thin = if l.thin { " (thin)" } else { "" };
            let errors = if l.errors.total == 0 {
                "0".to_string()
            } else {
                format!(
                    "{} ({:.1}%: {})",
                    l.errors.total,
                    l.error_rate() * 100.0,
                    l.errors.describe()
                )
            };
            let _ = writeln!(
                out,
                "{:>11}  {:>8}  {:>10.1}  {:>8}  {:>8}  {:>8}  {}{errors}{thin}{mark}{}",
                l.concurrency,
                l.requests,
                l.throughput_per_s,
                ms(l.p50_ms),
                ms(l.p99_ms),
                ms(l.max_ms),
                target(l),
                if l.interrupted { " (interrupted)" } else { "" }
            );
        }
        let _ = writeln!(
            out,
            "p50/p99/max ms: the calls answered 2xx only; failed calls are counted under errors"
        );
        if self.levels.iter().any(|l| l.thin) {
            let _ = writeln!(
                out,
                "(thin): no full round of 2xx answers while every caller was busy; ok/s and latencies cover the whole level, warm-up and drain included"
            );
        }
        if let Some(source) = &self.target_in_flight_source {
            let _ = writeln!(
                out,
                "target max/mean: calls in flight as {}#{} reported them, read every {}ms over the window of ok/s",
                source.url, source.pointer, count(source.every_ms)
            );
            let failed: u64 = self
                .levels
                .iter()
                .filter_map(|l| l.target_in_flight.as_ref())
                .map(|t| t.failed)
                .sum();
            let first = self
                .levels
                .iter()
                .filter_map(|l| l.target_in_flight.as_ref())
                .find_map(|t| t.first_failure.as_ref());
            if let Some(first) = first.filter(|_| failed > 0) {
                let _ = writeln!(
                    out,
                    "{failed} reading{} of the target's calls in flight failed; the first: {first}",
                    if failed == 1 { "" } else { "s" }
                );
            }
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "{}", self.conclusion());
        if let (Some(t), Some(base)) = (self.service_time_ms, self.base()) {
            let _ = writeln!(
                out,
                "service time {t:.1} ms (median at concurrency {})",
                base.concurrency
            );
        }
        if let Some(rate) = self.max_rate_per_s {
            let _ = writeln!(out, "max rate {rate:.1}/s (the most a clean level passed)");
        }
        if let Some(stop) = &self.stopped {
            let _ = writeln!(out, "{stop}");
        }
        if let Some(first) = self.levels.iter().find_map(|l| l.first_error.as_ref()) {
            let _ = writeln!(out, "first failure: {}", one_line(first));
        }
        if let Some(s) = &self.suggested {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "Suggested budget (paste into a budgets file; `inflight check-config` takes it without warnings):"
            );
            out.push_str(&s.toml);
        }
        out
    }
}

/// A count as a table shows it: whole numbers without decimals.
fn count(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::level::ErrorCounts;

    /// A level of a service with capacity 6 and 100 ms calls, refusing beyond 12.
    pub(crate) fn level(c: u32) -> Level {
        let served = c.min(6) as f64;
        let mut errors = ErrorCounts::default();
        let requests = 100;
        if c > 12 {
            for _ in 0..80 {
                errors.add_status(503);
            }
        }
        let p50 = 100.0 * (c.clamp(6, 12) as f64) / 6.0;
        Level {
            concurrency: c,
            requests,
            ok: requests - errors.total,
            throughput_per_s: served * 10.0,
            p50_ms: Some(p50),
            p99_ms: Some(p50 * 1.5),
            max_ms: Some(p50 * 1.7),
            mean_ms: Some(p50 * 1.02),
            errors,
            elapsed_s: 1.0,
            refined: matches!(c, 5..=7),
            interrupted: false,
            thin: false,
            first_error: (c > 12).then(|| "503 Service Unavailable".to_string()),
            target_in_flight: None,
        }
    }

    pub(crate) fn report(levels: &[u32], stopped: Option<Stop>) -> CapacityReport {
        let target = Target::new("http://127.0.0.1:7070/records").unwrap();
        CapacityReport::build(
            &target,
            "records".to_string(),
            levels.iter().rev().map(|&c| level(c)).collect(),
            KneeRules::default(),
            Caps {
                total_requests: 1000,
                total_time: std::time::Duration::from_secs(60),
            },
            stopped,
        )
    }

    #[test]
    fn a_knee_gives_a_table_and_a_budget() {
        let r = report(&[1, 2, 4, 5, 6, 7, 8, 16], None);
        assert_eq!(r.capacity, Some(6));
        assert_eq!(r.service_time_ms, Some(100.0));
        assert_eq!(r.max_rate_per_s, Some(60.0));
        let levels: Vec<u32> = r.levels.iter().map(|l| l.concurrency).collect();
        assert_eq!(levels, [1, 2, 4, 5, 6, 7, 8, 16], "sorted");
        let text = r.render();
        assert!(text.contains("<- knee"), "{text}");
        assert!(text.contains("capacity 6 calls in flight"), "{text}");
        assert!(
            text.contains("[budgets.records]\nmax_concurrent = 6\n"),
            "{text}"
        );
        let json = serde_json::to_value(&r).unwrap();
        for key in [
            "url",
            "levels",
            "capacity",
            "service_time_ms",
            "max_rate_per_s",
            "suggested",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
        assert_eq!(json["levels"][7]["errors"]["status_503"], 80);
    }

    /// The report of `levels` with the target's calls in flight read: at most 6, the level at
    /// 16 with one failed reading.
    pub(crate) fn report_with_target(levels: &[u32]) -> CapacityReport {
        let mut r = report(levels, None);
        for l in &mut r.levels {
            let c = f64::from(l.concurrency.min(6));
            let failed = u64::from(l.concurrency == 16);
            l.target_in_flight = Some(crate::in_flight::TargetInFlight::of(
                &[c - 1.0, c, c],
                failed,
                (failed > 0).then(|| "no answer within 1s".to_string()),
            ));
        }
        r.target_in_flight_source = Some(InFlightPolling {
            url: "http://127.0.0.1:7070/stats".into(),
            pointer: "/records/in_service".into(),
            every_ms: 10.0,
        });
        r
    }

    #[test]
    fn the_targets_calls_in_flight_get_two_columns_and_a_note() {
        let text = report_with_target(&[1, 8, 16]).render();
        assert!(
            text.contains("max ms  target max  target mean  errors\n"),
            "{text}"
        );
        let row = |c: &str| text.lines().find(|l| l.starts_with(c)).unwrap().to_string();
        assert!(
            row("          8").contains("         6          5.7  0"),
            "{text}"
        );
        assert!(
            row("          1").contains("         1          0.7  0"),
            "{text}"
        );
        assert!(
            text.contains("target max/mean: calls in flight as http://127.0.0.1:7070/stats#/records/in_service reported them, read every 10ms"),
            "{text}"
        );
        assert!(
            text.contains(
                "1 reading of the target's calls in flight failed; the first: no answer within 1s"
            ),
            "{text}"
        );
        let json = serde_json::to_value(report_with_target(&[1, 8])).unwrap();
        assert_eq!(json["levels"][1]["target_in_flight"]["max"], 6.0);
        assert_eq!(json["levels"][1]["target_in_flight"]["samples"], 3);
        assert_eq!(json["levels"][1]["target_in_flight"]["failed"], 0);
        assert_eq!(
            json["target_in_flight_source"]["pointer"],
            "/records/in_service"
        );
    }

    #[test]
    fn without_a_source_the_table_says_nothing_of_it() {
        let r = report(&[1, 8], None);
        let text = r.render();
        assert!(!text.contains("target max"), "{text}");
        assert!(!text.contains("in flight as"), "{text}");
        let json = serde_json::to_value(&r).unwrap();
        // Absent, so documents of runs without it are as they were.
        assert!(
            json["levels"][0].get("target_in_flight").is_none(),
            "{json}"
        );
        assert!(json.get("target_in_flight_source").is_none(), "{json}");
    }

    #[test]
    fn latencies_say_they_are_of_2xx_calls_and_thin_levels_are_marked() {
        let mut r = report(&[1, 8, 16], None);
        let text = r.render();
        assert!(
            text.contains("p50/p99/max ms: the calls answered 2xx only"),
            "{text}"
        );
        assert!(!text.contains("(thin)"), "{text}");
        r.levels[2].thin = true;
        r.levels[2].first_error =
            Some("503 Service Unavailable: <html>\n<body>\nbusy\n</body>\n</html>".into());
        let text = r.render();
        let row = text.lines().find(|l| l.starts_with("         16")).unwrap();
        assert!(row.ends_with("(80.0%: 503 x 80) (thin)"), "{text}");
        assert!(
            text.contains("\n(thin): no full round of 2xx answers"),
            "{text}"
        );
        assert!(
            text.contains(
                "\nfirst failure: 503 Service Unavailable: <html> <body> busy </body> </html>\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn no_knee_is_said_plainly() {
        // Throughput doubles with every level: the service took all of them.
        let r = report(&[1, 2, 4], None);
        assert_eq!(r.capacity, None);
        assert_eq!(r.verdict, Verdict::NoKnee { up_to: 4 });
        let text = r.render();
        assert!(text.contains("no knee up to concurrency 4"), "{text}");
        assert!(text.contains("service time 100.0 ms"), "{text}");
        let s = r.suggested.as_ref().unwrap();
        assert_eq!((s.basis, s.max_concurrent), (Basis::LowerBound, 4));
        assert_eq!(r.conclusion, r.conclusion());
    }

    #[test]
    fn an_interrupted_run_suggests_nothing() {
        let mut r = report(&[1, 2], Some(Stop::Interrupted));
        assert!(r.suggested.is_some(), "whole levels");
        let target = Target::new(&r.url).unwrap();
        let mut levels = r.levels.clone();
        levels[1].interrupted = true;
        r = CapacityReport::build(
            &target,
            "records".into(),
            levels,
            r.rules,
            r.caps,
            r.stopped.clone(),
        );
        assert!(r.suggested.is_none());
        assert!(r.render().contains("interrupted"));
    }

    #[test]
    fn all_refused_has_no_capacity_and_no_budget() {
        let r = report(&[16], None);
        assert_eq!(r.capacity, None);
        assert_eq!(r.suggested, None);
        assert!(
            r.conclusion().starts_with("no capacity"),
            "{}",
            r.conclusion()
        );
    }
}
