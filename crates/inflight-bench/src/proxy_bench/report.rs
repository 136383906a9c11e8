//! The benchmark's table and JSON: reads the lines the `load` and `idle` steps wrote (one JSON
//! object each, with its `case` and `proxy`), prints one table per case, and checks the goals.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

/// The cases, in the order they are tabled.
pub const CASES: [&str; 4] = ["saturation", "latency", "budget", "idle"];

/// The service time of the upstream's slow path in the budget case, subtracted from latency to
/// give the wait in front of it.
pub const BUDGET_SERVICE_MS: f64 = 20.0;

/// The budget of the budget case, and what the upstream must see at most.
pub const BUDGET_LIMIT: u64 = 6;

/// One proxy's row of one case, as a step wrote it.
#[derive(Debug, Clone)]
pub struct Run {
    /// `saturation`, `latency`, `budget` or `idle`.
    pub case: String,
    /// `direct`, `inflight`, `haproxy` or `nginx`.
    pub proxy: String,
    /// The step's measurement: a `load` report (with `upstream` counters) or an `idle` one.
    pub value: Value,
}

impl Run {
    /// Reads one line; `None` for a line that is not a run (blank, or another object).
    pub fn parse(line: &str) -> Option<Run> {
        let value: Value = serde_json::from_str(line).ok()?;
        Some(Run {
            case: value.get("case")?.as_str()?.to_string(),
            proxy: value.get("proxy")?.as_str()?.to_string(),
            value,
        })
    }

    fn num(&self, path: &[&str]) -> Option<f64> {
        let mut v = &self.value;
        for key in path {
            v = v.get(*key)?;
        }
        v.as_f64()
    }
}

fn of<'a>(runs: &'a [Run], case: &'a str) -> impl Iterator<Item = &'a Run> + 'a {
    runs.iter().filter(move |r| r.case == case)
}

/// The tables and the goals of `runs`, and the JSON document with `meta`.
pub fn render(runs: &[Run], meta: Map<String, Value>) -> (String, Value) {
    let mut out = String::new();
    let find = |case: &str, proxy: &str| runs.iter().find(|r| r.case == case && r.proxy == proxy);
    let f = |v: Option<f64>, digits: usize| match v {
        Some(v) => format!("{v:.digits$}"),
        None => "-".to_string(),
    };
    let errors = |r: &Run| {
        let non_2xx: u64 = r
            .value
            .pointer("/load/statuses")
            .and_then(Value::as_object)
            .map(|s| {
                s.iter()
                    .filter(|(k, _)| !k.starts_with('2'))
                    .filter_map(|(_, v)| v.as_u64())
                    .sum()
            })
            .unwrap_or(0);
        let io = r.num(&["load", "errors"]).unwrap_or(0.0) as u64;
        (non_2xx, io)
    };

    if let Some(first) = of(runs, "saturation").next() {
        let _ = writeln!(
            out,
            "1. saturation: closed loop, {} connections, {} s",
            f(first.num(&["load", "connections"]), 0),
            f(first.num(&["load", "duration_s"]), 0)
        );
        let _ = writeln!(
            out,
            "{:<10} {:>10} {:>9} {:>9} {:>8} {:>8} {:>11} {:>9}",
            "proxy", "2xx/s", "p50 ms", "p99 ms", "non-2xx", "errors", "CPU us/req", "CPU used"
        );
        for r in of(runs, "saturation") {
            let (non_2xx, io) = errors(r);
            let duration = r.num(&["load", "duration_s"]);
            let _ = writeln!(
                out,
                "{:<10} {:>10} {:>9} {:>9} {:>8} {:>8} {:>11} {:>9}",
                r.proxy,
                f(r.num(&["load", "ok_per_s"]), 0),
                f(r.num(&["load", "latency_ms", "p50"]), 3),
                f(r.num(&["load", "latency_ms", "p99"]), 3),
                non_2xx,
                io,
                f(r.num(&["load", "proxy_cpu_us_per_answer"]), 1),
                f(
                    r.num(&["load", "proxy_cpu_s"])
                        .zip(duration)
                        .map(|(c, d)| c / d),
                    2
                )
            );
        }
        out.push_str(
            "CPU us/req: the proxy's CPU time per answer; CPU used: of one CPU, its quota\n",
        );
        out.push('\n');
    }

    let direct = find("latency", "direct");
    if let Some(first) = of(runs, "latency").next() {
        let _ = writeln!(
            out,
            "2. added latency: open loop at {}/s, {} connections, {} s; added = proxy's percentile minus direct's",
            f(first.num(&["load", "offered_per_s"]), 0),
            f(first.num(&["load", "connections"]), 0),
            f(first.num(&["load", "duration_s"]), 0)
        );
        let _ = writeln!(
            out,
            "{:<10} {:>9} {:>9} {:>11} {:>11} {:>8} {:>8} {:>13}",
            "proxy", "p50 ms", "p99 ms", "+p50 ms", "+p99 ms", "2xx/s", "errors", "send lag p99"
        );
        for r in of(runs, "latency") {
            let p50 = r.num(&["load", "latency_ms", "p50"]);
            let p99 = r.num(&["load", "latency_ms", "p99"]);
            let added = |p: Option<f64>, key: &str| {
                let d = direct?.num(&["load", "latency_ms", key])?;
                Some(p? - d)
            };
            let (non_2xx, io) = errors(r);
            let _ = writeln!(
                out,
                "{:<10} {:>9} {:>9} {:>11} {:>11} {:>8} {:>8} {:>13}",
                r.proxy,
                f(p50, 3),
                f(p99, 3),
                if r.proxy == "direct" {
                    "-".into()
                } else {
                    f(added(p50, "p50"), 3)
                },
                if r.proxy == "direct" {
                    "-".into()
                } else {
                    f(added(p99, "p99"), 3)
                },
                f(r.num(&["load", "ok_per_s"]), 0),
                non_2xx + io,
                f(r.num(&["load", "send_lag_ms", "p99"]), 3)
            );
        }
        out.push_str(
            "send lag: how late the generator itself sent, after the schedule (in the latency too)\n",
        );
        out.push('\n');
    }

    if let Some(first) = of(runs, "budget").next() {
        let _ = writeln!(
            out,
            "3. budget of {BUDGET_LIMIT} over a {BUDGET_SERVICE_MS} ms upstream: closed loop, {} clients, {} s; Little's law: {:.0}/s; wait = latency minus {BUDGET_SERVICE_MS} ms",
            f(first.num(&["load", "connections"]), 0),
            f(first.num(&["load", "duration_s"]), 0),
            BUDGET_LIMIT as f64 * 1000.0 / BUDGET_SERVICE_MS
        );
        let _ = writeln!(
            out,
            "{:<10} {:>8} {:>8} {:>8} {:>15} {:>12} {:>14}",
            "proxy", "2xx/s", "non-2xx", "errors", "upstream peak", "2xx p99 ms", "2xx p99 wait"
        );
        for r in of(runs, "budget") {
            let (non_2xx, io) = errors(r);
            let p99 = r.num(&["load", "ok_latency_ms", "p99"]);
            let count = r.num(&["load", "ok_latency_ms", "count"]).unwrap_or(0.0);
            let p99 = p99.filter(|_| count > 0.0);
            let _ = writeln!(
                out,
                "{:<10} {:>8} {:>8} {:>8} {:>15} {:>12} {:>14}",
                r.proxy,
                f(r.num(&["load", "ok_per_s"]), 1),
                non_2xx,
                io,
                f(r.num(&["upstream", "peak"]), 0),
                f(p99, 1),
                f(p99.map(|p| p - BUDGET_SERVICE_MS), 1)
            );
        }
        out.push('\n');
    }

    if let Some(first) = of(runs, "idle").next() {
        let _ = writeln!(
            out,
            "4. memory: {} keep-alive client connections, one request each, then idle (RSS of all the proxy's processes)",
            f(first.num(&["idle", "connections"]), 0)
        );
        let _ = writeln!(
            out,
            "{:<10} {:>10} {:>11} {:>11} {:>9} {:>13} {:>10}",
            "proxy",
            "processes",
            "before KiB",
            "after KiB",
            "KiB/conn",
            "MiB per 1000",
            "still open"
        );
        for r in of(runs, "idle") {
            let _ = writeln!(
                out,
                "{:<10} {:>10} {:>11} {:>11} {:>9} {:>13} {:>10}",
                r.proxy,
                f(r.num(&["idle", "processes"]), 0),
                f(r.num(&["idle", "rss_before_kib"]), 0),
                f(r.num(&["idle", "rss_after_kib"]), 0),
                f(r.num(&["idle", "kib_per_connection"]), 1),
                f(r.num(&["idle", "mib_per_1000"]), 2),
                f(r.num(&["idle", "still_open"]), 0)
            );
        }
        out.push('\n');
    }

    let goals = goals(runs);
    out.push_str("goals:\n");
    for g in &goals {
        let _ = writeln!(
            out,
            "  {:<7} {}",
            match g.get("met").and_then(Value::as_bool) {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "n/a",
            },
            g.get("text").and_then(Value::as_str).unwrap_or("")
        );
    }
    let doc = json!({
        "meta": meta,
        "runs": runs.iter().map(|r| r.value.clone()).collect::<Vec<_>>(),
        "goals": goals,
    });
    (out, doc)
}

/// The product's three goals, each with whether it was met and the figures.
fn goals(runs: &[Run]) -> Vec<Value> {
    let get = |case: &str, proxy: &str, path: &[&str]| {
        runs.iter()
            .find(|r| r.case == case && r.proxy == proxy)
            .and_then(|r| r.num(path))
    };
    let mut goals = Vec::new();
    let ok = ["load", "ok_per_s"];
    goals.push(match (get("saturation", "inflight", &ok), get("saturation", "haproxy", &ok)) {
        (Some(i), Some(h)) => {
            let cpu = ["load", "proxy_cpu_us_per_answer"];
            let cost = match (get("saturation", "inflight", &cpu), get("saturation", "haproxy", &cpu)) {
                (Some(ic), Some(hc)) => format!("; CPU per answer: inflight {ic:.1} us, HAProxy {hc:.1} us"),
                _ => String::new(),
            };
            json!({
                "goal": "throughput at least HAProxy's",
                "met": i >= h,
                "text": format!("throughput at least HAProxy's: inflight {i:.0}/s, HAProxy {h:.0}/s ({:+.1}%){cost}", (i / h - 1.0) * 100.0),
            })
        }
        _ => json!({"goal": "throughput at least HAProxy's", "met": null, "text": "throughput at least HAProxy's: not measured"}),
    });
    let p99 = ["load", "latency_ms", "p99"];
    goals.push(
        match (
            get("latency", "inflight", &p99),
            get("latency", "haproxy", &p99),
            get("latency", "direct", &p99),
        ) {
            (Some(i), Some(h), Some(d)) => json!({
                "goal": "added p99 no more than HAProxy's",
                "met": i - d <= h - d,
                "text": format!("added p99 no more than HAProxy's: inflight {:+.3} ms, HAProxy {:+.3} ms (direct p99 {d:.3} ms)", i - d, h - d),
            }),
            _ => json!({"goal": "added p99 no more than HAProxy's", "met": null, "text": "added p99 no more than HAProxy's: not measured"}),
        },
    );
    goals.push(match (get("budget", "inflight", &["upstream", "peak"]), get("budget", "inflight", &ok)) {
        (Some(peak), Some(rate)) => json!({
            "goal": format!("exactly {BUDGET_LIMIT} at the upstream"),
            "met": peak as u64 == BUDGET_LIMIT,
            "text": format!("exactly {BUDGET_LIMIT} at the upstream: inflight's upstream saw {peak:.0} at most, at {rate:.1}/s"),
        }),
        _ => json!({"goal": format!("exactly {BUDGET_LIMIT} at the upstream"), "met": null, "text": "exactly 6 at the upstream: not measured"}),
    });
    goals
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(case: &str, proxy: &str, body: Value) -> Run {
        let mut value = body;
        value["case"] = json!(case);
        value["proxy"] = json!(proxy);
        Run::parse(&value.to_string()).unwrap()
    }

    #[test]
    fn goals_compare_inflight_with_haproxy() {
        let runs = vec![
            run(
                "saturation",
                "inflight",
                json!({"load": {"ok_per_s": 900.0}}),
            ),
            run(
                "saturation",
                "haproxy",
                json!({"load": {"ok_per_s": 1000.0}}),
            ),
            run(
                "latency",
                "direct",
                json!({"load": {"latency_ms": {"p99": 1.0}}}),
            ),
            run(
                "latency",
                "inflight",
                json!({"load": {"latency_ms": {"p99": 1.5}}}),
            ),
            run(
                "latency",
                "haproxy",
                json!({"load": {"latency_ms": {"p99": 1.75}}}),
            ),
            run(
                "budget",
                "inflight",
                json!({"load": {"ok_per_s": 299.0}, "upstream": {"peak": 7}}),
            ),
        ];
        let (text, doc) = render(&runs, Map::new());
        let met: Vec<_> = doc["goals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["met"].clone())
            .collect();
        assert_eq!(met, vec![json!(false), json!(true), json!(false)]);
        assert!(
            text.contains("inflight 900/s, HAProxy 1000/s (-10.0%)"),
            "{text}"
        );
        assert!(
            text.contains("inflight +0.500 ms, HAProxy +0.750 ms"),
            "{text}"
        );
        assert!(text.contains("saw 7 at most"), "{text}");
    }

    #[test]
    fn the_budget_table_counts_non_2xx_and_subtracts_the_service_time() {
        let runs = vec![run(
            "budget",
            "nginx",
            json!({"load": {"connections": 64, "duration_s": 10.0, "ok_per_s": 290.0, "errors": 3,
                "statuses": {"200": 2900, "502": 40000},
                "ok_latency_ms": {"count": 2900, "p99": 25.5}},
                "upstream": {"peak": 6}}),
        )];
        let (text, _) = render(&runs, Map::new());
        let row = text.lines().find(|l| l.starts_with("nginx")).unwrap();
        let cells: Vec<_> = row.split_whitespace().collect();
        assert_eq!(
            cells,
            vec!["nginx", "290.0", "40000", "3", "6", "25.5", "5.5"]
        );
    }

    #[test]
    fn a_line_that_is_not_a_run_is_skipped() {
        assert!(Run::parse("").is_none());
        assert!(Run::parse("{\"meta\": 1}").is_none());
    }
}
