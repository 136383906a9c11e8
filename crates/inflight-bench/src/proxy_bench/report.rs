//! A run's tables (medians with their min-max, one table per case, then the goals) and its
//! JSON document (the settings and the machine, every step's measurement, the summary and the
//! goals).

use serde_json::{json, Map, Value};

use super::goals::Goal;
use super::plan::{BUDGET_LIMIT, BUDGET_SERVICE_MS};
use super::summary::{Record, Summary};
use crate::spread::Spread;

/// A text table: a header and rows of cells, the first column left-aligned, the others right.
struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![header.iter().map(|h| h.to_string()).collect()],
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn render(&self, out: &mut String) {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c == 0 {
                    line.push_str(&format!("{cell:<w$}", w = widths[c]));
                } else {
                    line.push_str(&format!("  {cell:>w$}", w = widths[c]));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
}

/// `median (min-max)`, or `-`.
fn cell(s: Option<Spread>, digits: usize) -> String {
    match s {
        Some(s) if s.min == s.max => format!("{:.digits$}", s.median),
        Some(s) => format!(
            "{:.digits$} ({:.digits$}-{:.digits$})",
            s.median, s.min, s.max
        ),
        None => "-".into(),
    }
}

/// `+median (min to max)` for differences that may be negative, or `-`.
fn signed(s: Option<Spread>, digits: usize) -> String {
    match s {
        Some(s) => format!(
            "{:+.digits$} ({:+.digits$} to {:+.digits$})",
            s.median, s.min, s.max
        ),
        None => "-".into(),
    }
}

/// What the tables say about the conditions, above them.
#[derive(Debug, Clone, Default)]
pub struct Conditions {
    /// Lines such as the CPU limit, the pinning and whether instructions were counted.
    pub lines: Vec<String>,
    /// Repeats done and asked for.
    pub repeats: (usize, usize),
    /// Closed-loop connections, and the measured seconds of each load step.
    pub connections: usize,
    pub duration_s: f64,
}

/// The tables of `summary` and the verdicts of `goals`.
pub fn tables(summary: &Summary, goals: &[Goal], conditions: &Conditions) -> String {
    let mut out = String::new();
    for line in &conditions.lines {
        out.push_str(line);
        out.push('\n');
    }
    let (done, asked) = conditions.repeats;
    out.push_str(&format!(
        "{done} of {asked} repeats; each cell: median (min-max) over the repeats\n\n"
    ));

    if !summary.saturation.is_empty() {
        out.push_str(&format!(
            "1. saturation: closed loop, {} connections, {} s\n",
            conditions.connections, conditions.duration_s
        ));
        let mut t = Table::new(&[
            "target",
            "2xx/s",
            "p50 ms",
            "p99 ms",
            "CPU µs/answer",
            "instructions/answer",
            "CPU used",
            "non-2xx",
            "errors",
            "runs",
        ]);
        for r in &summary.saturation {
            t.row(vec![
                r.target.to_string(),
                cell(r.ok_per_s, 0),
                cell(r.p50_ms, 3),
                cell(r.p99_ms, 3),
                cell(r.cpu_us_per_answer, 1),
                cell(r.instructions_per_answer, 0),
                cell(r.cpu_used, 2),
                r.non_2xx.to_string(),
                r.errors.to_string(),
                r.runs.to_string(),
            ]);
        }
        t.render(&mut out);
        out.push_str("CPU µs/answer: the proxy's CPU time (user and system) per answer; CPU used: of one CPU, its quota\n\n");
    }

    if !summary.latency.is_empty() {
        out.push_str(&format!(
            "2. latency: open loop, {} connections, {} s, from each request's scheduled send; a fraction is of each target's own saturation in the same repeat (direct's of its own); added = target minus direct in the same repeat\n",
            conditions.connections, conditions.duration_s
        ));
        let mut t = Table::new(&[
            "load",
            "target",
            "offered/s",
            "p50 ms",
            "p99 ms",
            "added p50 ms",
            "added p99 ms",
            "send lag p99 µs",
            "kept",
            "discarded",
            "errors",
        ]);
        for p in &summary.latency {
            for r in &p.rows {
                t.row(vec![
                    p.point.clone(),
                    r.target.to_string(),
                    cell(r.offered_per_s, 0),
                    cell(r.p50_ms, 3),
                    cell(r.p99_ms, 3),
                    signed(r.added_p50_ms, 3),
                    signed(r.added_p99_ms, 3),
                    cell(r.send_lag_p99_ms.map(|s| s.map(|v| v * 1000.0)), 0),
                    r.runs.to_string(),
                    match r.discarded_send_lag_p99_ms {
                        Some(lag) if r.discarded > 0 => {
                            let us = lag.map(|v| v * 1000.0);
                            if us.min == us.max {
                                format!("{} (lag {:.0})", r.discarded, us.min)
                            } else {
                                format!("{} (lag {:.0}-{:.0})", r.discarded, us.min, us.max)
                            }
                        }
                        _ => r.discarded.to_string(),
                    },
                    (r.non_2xx + r.errors).to_string(),
                ]);
            }
        }
        t.render(&mut out);
        out.push_str(&format!(
            "send lag: how late the generator itself sent after the schedule, or after the answer before on that connection if that came later (a wait for a busy connection is the target's, counted in its latency), p99 in µs; a run whose p99 is over {} µs is discarded and run again (discarded: how many, with the lowest and highest send lag p99 among them)\n\n",
            super::plan::MAX_SEND_LAG.as_micros()
        ));
    }

    if !summary.budget.is_empty() {
        out.push_str(&format!(
            "3. budget of {BUDGET_LIMIT} over a {BUDGET_SERVICE_MS} ms upstream: closed loop, {} clients, {} s; Little's law: {:.0}/s; wait = 2xx p99 minus {BUDGET_SERVICE_MS} ms\n",
            conditions.connections,
            conditions.duration_s,
            BUDGET_LIMIT as f64 * 1000.0 / BUDGET_SERVICE_MS
        ));
        let mut t = Table::new(&[
            "target",
            "2xx/s",
            "upstream peak",
            "2xx p99 ms",
            "p99 wait ms",
            "non-2xx",
            "errors",
            "runs",
        ]);
        for r in &summary.budget {
            t.row(vec![
                r.target.to_string(),
                cell(r.ok_per_s, 1),
                cell(r.upstream_peak, 0),
                cell(r.ok_p99_ms, 1),
                cell(r.wait_p99_ms, 1),
                r.non_2xx.to_string(),
                r.errors.to_string(),
                r.runs.to_string(),
            ]);
        }
        t.render(&mut out);
        out.push('\n');
    }

    if let Some(first) = summary.idle.first() {
        out.push_str(&format!(
            "4. memory: {} keep-alive client connections, one request each, then idle (RSS of all the proxy's processes, fresh ones each repeat)\n",
            first.connections
        ));
        let mut t = Table::new(&[
            "target",
            "processes",
            "before KiB",
            "after KiB",
            "KiB/connection",
            "still open (fewest)",
            "runs",
        ]);
        for r in &summary.idle {
            t.row(vec![
                r.target.to_string(),
                r.processes.to_string(),
                cell(r.rss_before_kib, 0),
                cell(r.rss_after_kib, 0),
                cell(r.kib_per_connection, 2),
                format!("{} of {}", r.still_open_min, r.connections),
                r.runs.to_string(),
            ]);
        }
        t.render(&mut out);
        out.push('\n');
    }

    if let Some(first) = summary.callgrind.first() {
        out.push_str(&format!(
            "5. instructions under callgrind: {} requests on {} keep-alive connections to a fresh proxy, after {} to warm it; user space only; L1d misses in callgrind's simulation of this CPU's caches\n",
            first.requests,
            super::plan::CALLGRIND_CONNECTIONS,
            super::plan::CALLGRIND_WARMUP_REQUESTS
        ));
        let mut t = Table::new(&[
            "target",
            "instructions/answer",
            "L1d misses/answer",
            "not 2xx",
            "runs",
        ]);
        for r in &summary.callgrind {
            t.row(vec![
                r.target.to_string(),
                cell(r.per_answer, 0),
                cell(r.l1d_misses_per_answer, 0),
                r.failed.to_string(),
                r.runs.to_string(),
            ]);
        }
        t.render(&mut out);
        out.push('\n');
    }

    out.push_str("goals (judged on the medians):\n");
    for g in goals {
        out.push_str(&format!("  {:<7} {}\n", g.verdict(), g.text));
    }
    out
}

/// How a run ended, for the JSON document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// Every step ran.
    Complete,
    /// Stopped early: by a signal (`SIGINT`, `SIGTERM`), or by an error; what finished is kept.
    Stopped(String),
    /// Still running: a checkpoint written after a step.
    Running,
}

/// The JSON document of a run: `meta` (the settings, the machine, the tools), `partial` and
/// `stopped_by`, the `summary`, the `goals` and every step's measurement in `runs`.
pub fn document(
    meta: Map<String, Value>,
    completion: &Completion,
    records: &[Record],
    summary: &Summary,
    goals: &[Goal],
) -> Value {
    let (partial, stopped_by) = match completion {
        Completion::Complete => (false, Value::Null),
        Completion::Stopped(why) => (true, json!(why)),
        Completion::Running => (true, json!("still running")),
    };
    json!({
        "meta": meta,
        "partial": partial,
        "stopped_by": stopped_by,
        "summary": summary,
        "goals": goals,
        "runs": records,
    })
}
