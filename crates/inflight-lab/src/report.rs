//! The report of a lab run: `runs.csv`, `summary.md`, SVG figures and a self-contained `index.html`,
//! plus the plain-text tables the terminal shows.
//!
//! Everything here is drawn from a [`ResultsDoc`]; nothing is measured or invented here. Figures
//! are hand-written SVG so the report needs no plotting library and opens from disk.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;

use crate::hypothesis::{find_row, fmt_num};
use crate::results::{ResultsDoc, RunResult, Spread, SummaryRow};

/// The files [`write_report`] writes besides the figures.
pub const RUNS_CSV: &str = "runs.csv";
pub const SUMMARY_MD: &str = "summary.md";
pub const INDEX_HTML: &str = "index.html";

/// The columns of `runs.csv`, in order.
pub const CSV_COLUMNS: &[&str] = &[
    "strategy",
    "scenario",
    "repeat",
    "cpus",
    "runner_available_parallelism",
    "records",
    "complete",
    "incomplete",
    "rejected",
    "failed",
    "failed_by_kind",
    "completion_s",
    "accepted_per_s",
    "write_503s",
    "peak_writes_offered",
    "peak_enrichment_in_flight",
    "peak_writes_in_flight",
    "enrichment_timeouts",
];

/// Writes `runs.csv`, `summary.md`, the SVG figures and `index.html` into `dir` (created if needed).
pub fn write_report(doc: &ResultsDoc, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create report directory {}", dir.display()))?;
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    write(RUNS_CSV, &runs_csv(doc))?;
    let figures = figures(doc);
    for figure in &figures {
        write(&figure.file, &figure.svg)?;
    }
    write(SUMMARY_MD, &summary_md(doc, &figures))?;
    write(INDEX_HTML, &index_html(doc, &figures))?;
    Ok(())
}

/// One SVG figure of the report.
#[derive(Debug, Clone)]
pub struct Figure {
    /// File name inside the report directory, e.g. `accepted_per_s.svg`.
    pub file: String,
    pub title: String,
    pub caption: String,
    pub svg: String,
}

// ---------------------------------------------------------------------------------------------
// Tables

/// A table rendered as plain text, Markdown or HTML.
struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Columns aligned right (numbers).
    right: Vec<bool>,
}

impl Table {
    fn new(headers: &[(&str, bool)]) -> Self {
        Self {
            headers: headers.iter().map(|(h, _)| h.to_string()).collect(),
            right: headers.iter().map(|(_, r)| *r).collect(),
            rows: Vec::new(),
        }
    }

    fn text(&self) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([self.headers[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let mut out = String::new();
            for (i, cell) in cells.iter().enumerate() {
                let pad = widths[i] - cell.chars().count();
                if i > 0 {
                    out.push_str("  ");
                }
                if self.right[i] {
                    out.push_str(&" ".repeat(pad));
                    out.push_str(cell);
                } else {
                    out.push_str(cell);
                    if i + 1 < cells.len() {
                        out.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.trim_end().to_string() + "\n"
        };
        let mut out = line(&self.headers);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        out.push_str(&line(&rule));
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out
    }

    fn markdown(&self) -> String {
        let esc = |s: &str| s.replace('|', "\\|");
        let mut out = format!(
            "| {} |\n|{}|\n",
            self.headers
                .iter()
                .map(|h| esc(h))
                .collect::<Vec<_>>()
                .join(" | "),
            self.right
                .iter()
                .map(|r| if *r { " ---: " } else { " --- " })
                .collect::<Vec<_>>()
                .join("|")
        );
        for row in &self.rows {
            let _ = writeln!(
                out,
                "| {} |",
                row.iter().map(|c| esc(c)).collect::<Vec<_>>().join(" | ")
            );
        }
        out
    }

    fn html(&self) -> String {
        let mut out = String::from("<table>\n<thead><tr>");
        for (h, right) in self.headers.iter().zip(&self.right) {
            let _ = write!(out, "<th{}>{}</th>", align(*right), esc_html(h));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for row in &self.rows {
            out.push_str("<tr>");
            for (cell, right) in row.iter().zip(&self.right) {
                let class = match cell.as_str() {
                    "pass" => " class=\"pass\"",
                    "fail" => " class=\"fail\"",
                    "skipped" => " class=\"skipped\"",
                    _ => "",
                };
                let _ = write!(out, "<td{}{class}>{}</td>", align(*right), esc_html(cell));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody>\n</table>\n");
        out
    }
}

fn align(right: bool) -> &'static str {
    if right {
        " style=\"text-align:right\""
    } else {
        ""
    }
}

/// `83.6 (82.9-84.1)`, or just `83.6` when every repeat gave the same value.
pub fn fmt_spread(s: Spread) -> String {
    fmt_spread_with(s, fmt_num)
}

/// A fraction's spread as percentages: `20.0 (18.5-21.0)`.
fn fmt_pct(s: Spread) -> String {
    fmt_spread_with(s, |v| format!("{:.1}", v * 100.0))
}

/// `median (min-max)` with each number written by `fmt`, or just the median when min and max agree.
fn fmt_spread_with(s: Spread, fmt: impl Fn(f64) -> String) -> String {
    if (s.max - s.min).abs() < 1e-9 {
        fmt(s.median)
    } else {
        format!("{} ({}-{})", fmt(s.median), fmt(s.min), fmt(s.max))
    }
}

fn strategy_label(strategy: &str) -> String {
    strategy.to_uppercase()
}

/// Scenarios in order of first appearance (summary first, then runs).
fn scenarios(doc: &ResultsDoc) -> Vec<String> {
    first_appearances(
        doc.summary
            .iter()
            .map(|r| &r.scenario)
            .chain(doc.runs.iter().map(|r| &r.scenario)),
    )
}

/// Strategies in order of first appearance.
fn strategies(doc: &ResultsDoc) -> Vec<String> {
    first_appearances(
        doc.summary
            .iter()
            .map(|r| &r.strategy)
            .chain(doc.runs.iter().map(|r| &r.strategy)),
    )
}

/// `names` without repeats, each where it first appears.
fn first_appearances<'a>(names: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in names {
        if !out.contains(name) {
            out.push(name.clone());
        }
    }
    out
}

const SUMMARY_HEADERS: &[(&str, bool)] = &[
    ("strategy", false),
    ("scenario", false),
    ("CPUs", true),
    ("repeats", true),
    ("completion s", true),
    ("accepted/s", true),
    ("complete", true),
    ("incomplete", true),
    ("rejected", true),
    ("failed", true),
    ("write 503s", true),
    ("peak writes offered", true),
    ("peak enrichment in flight", true),
];

fn summary_cells(row: &SummaryRow) -> Vec<String> {
    vec![
        strategy_label(&row.strategy),
        row.scenario.clone(),
        fmt_num(row.cpus),
        row.repeats.to_string(),
        fmt_spread(row.completion_s),
        fmt_spread(row.accepted_per_s),
        fmt_spread(row.complete),
        fmt_spread(row.incomplete),
        fmt_spread(row.rejected),
        fmt_spread(row.failed),
        fmt_spread(row.write_503s),
        fmt_spread(row.peak_writes_offered),
        fmt_spread(row.peak_enrichment_in_flight),
    ]
}

/// Summary rows grouped by scenario (scenario order of appearance), each group in summary order.
fn summary_table_model(doc: &ResultsDoc) -> Table {
    let mut table = Table::new(SUMMARY_HEADERS);
    for scenario in scenarios(doc) {
        for row in doc.summary.iter().filter(|r| r.scenario == scenario) {
            table.rows.push(summary_cells(row));
        }
    }
    table
}

/// The summary as a plain-text table for the terminal: medians, with (min-max) over the repeats.
pub fn summary_table(doc: &ResultsDoc) -> String {
    if doc.summary.is_empty() {
        return "no summary rows (no runs finished)\n".to_string();
    }
    let mut out = summary_table_model(doc).text();
    out.push_str("values: median over repeats, (min-max) when they differ; accepted/s = (complete + incomplete) / completion s\n");
    out
}

fn hypotheses_model(doc: &ResultsDoc) -> Table {
    let mut table = Table::new(&[
        ("id", false),
        ("outcome", false),
        ("claim", false),
        ("observed", false),
    ]);
    for h in &doc.hypotheses {
        table.rows.push(vec![
            h.id.clone(),
            h.outcome.clone(),
            h.claim.clone(),
            h.observed.clone(),
        ]);
    }
    table
}

fn hypotheses_tally(doc: &ResultsDoc) -> String {
    let count = |o: &str| doc.hypotheses.iter().filter(|h| h.outcome == o).count();
    format!(
        "{} pass, {} fail, {} skipped (of {})",
        count("pass"),
        count("fail"),
        count("skipped"),
        doc.hypotheses.len()
    )
}

/// The hypotheses and their outcomes as plain text: one line per hypothesis, observed values below.
pub fn hypotheses_table(doc: &ResultsDoc) -> String {
    if doc.hypotheses.is_empty() {
        return "no hypotheses evaluated\n".to_string();
    }
    let id_width = doc
        .hypotheses
        .iter()
        .map(|h| h.id.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for h in &doc.hypotheses {
        let _ = writeln!(
            out,
            "{:<id_width$}  {:<7}  {}",
            h.id,
            h.outcome.to_uppercase(),
            h.claim
        );
        let _ = writeln!(out, "{:<id_width$}  {:<7}  {}", "", "", h.observed);
    }
    let _ = writeln!(
        out,
        "{} (a failed hypothesis is a finding, not an error)",
        hypotheses_tally(doc)
    );
    out
}

// ---------------------------------------------------------------------------------------------
// The seed's reference numbers

/// What the seed reported for one quantity, and how to find ours.
struct SeedRef {
    quantity: &'static str,
    scenario: &'static str,
    strategy: &'static str,
    cpus: f64,
    metric: &'static str,
    /// Divide by this strategy's value (same scenario, 1 CPU) for a ratio.
    ratio_to: Option<&'static str>,
    seed: &'static str,
}

/// The seed's numbers (seeds/000_5233369a7f9f91cc.txt): medians of five runs, 200 records.
const SEED_REFS: &[SeedRef] = &[
    SeedRef {
        quantity: "C1 completion at 1 CPU, s",
        scenario: "healthy",
        strategy: "c1",
        cpus: 1.0,
        metric: "completion_s",
        ratio_to: None,
        seed: "83.6",
    },
    SeedRef {
        quantity: "C1 completion at 2 CPUs, s",
        scenario: "healthy",
        strategy: "c1",
        cpus: 2.0,
        metric: "completion_s",
        ratio_to: None,
        seed: "42.1",
    },
    SeedRef {
        quantity: "C1 peak enrichment in flight at 1 CPU",
        scenario: "healthy",
        strategy: "c1",
        cpus: 1.0,
        metric: "peak_enrichment_in_flight",
        ratio_to: None,
        seed: "1",
    },
    SeedRef {
        quantity: "C1 peak enrichment in flight at 2 CPUs",
        scenario: "healthy",
        strategy: "c1",
        cpus: 2.0,
        metric: "peak_enrichment_in_flight",
        ratio_to: None,
        seed: "2",
    },
    SeedRef {
        quantity: "healthy: C2 accepted/s",
        scenario: "healthy",
        strategy: "c2",
        cpus: 1.0,
        metric: "accepted_per_s",
        ratio_to: None,
        seed: "67.86",
    },
    SeedRef {
        quantity: "healthy: C3 accepted/s",
        scenario: "healthy",
        strategy: "c3",
        cpus: 1.0,
        metric: "accepted_per_s",
        ratio_to: None,
        seed: "65.32",
    },
    SeedRef {
        quantity: "healthy: C4 accepted/s",
        scenario: "healthy",
        strategy: "c4",
        cpus: 1.0,
        metric: "accepted_per_s",
        ratio_to: None,
        seed: "58.38",
    },
    SeedRef {
        quantity: "healthy: C4 / C2 accepted/s",
        scenario: "healthy",
        strategy: "c4",
        cpus: 1.0,
        metric: "accepted_per_s",
        ratio_to: Some("c2"),
        seed: "0.86",
    },
    SeedRef {
        quantity: "healthy: C2 write 503s",
        scenario: "healthy",
        strategy: "c2",
        cpus: 1.0,
        metric: "write_503s",
        ratio_to: None,
        seed: "a few, in 2 of 5 runs",
    },
    SeedRef {
        quantity: "healthy: C3 write 503s",
        scenario: "healthy",
        strategy: "c3",
        cpus: 1.0,
        metric: "write_503s",
        ratio_to: None,
        seed: "a few, in 2 of 5 runs",
    },
    SeedRef {
        quantity: "healthy: C4 write 503s",
        scenario: "healthy",
        strategy: "c4",
        cpus: 1.0,
        metric: "write_503s",
        ratio_to: None,
        seed: "0",
    },
    SeedRef {
        quantity: "slow-write: C2 accepted/s",
        scenario: "slow-write",
        strategy: "c2",
        cpus: 1.0,
        metric: "accepted_per_s",
        ratio_to: None,
        seed: "34.35",
    },
    SeedRef {
        quantity: "slow-write: C3 accepted/s",
        scenario: "slow-write",
        strategy: "c3",
        cpus: 1.0,
        metric: "accepted_per_s",
        ratio_to: None,
        seed: "34.01",
    },
    SeedRef {
        quantity: "slow-write: C4 accepted/s",
        scenario: "slow-write",
        strategy: "c4",
        cpus: 1.0,
        metric: "accepted_per_s",
        ratio_to: None,
        seed: "35.08",
    },
    SeedRef {
        quantity: "slow-write: C2 write 503s",
        scenario: "slow-write",
        strategy: "c2",
        cpus: 1.0,
        metric: "write_503s",
        ratio_to: None,
        seed: "64",
    },
    SeedRef {
        quantity: "slow-write: C3 write 503s",
        scenario: "slow-write",
        strategy: "c3",
        cpus: 1.0,
        metric: "write_503s",
        ratio_to: None,
        seed: "57",
    },
    SeedRef {
        quantity: "slow-write: C4 write 503s",
        scenario: "slow-write",
        strategy: "c4",
        cpus: 1.0,
        metric: "write_503s",
        ratio_to: None,
        seed: "0",
    },
    SeedRef {
        quantity: "slow-write: C2 peak writes offered",
        scenario: "slow-write",
        strategy: "c2",
        cpus: 1.0,
        metric: "peak_writes_offered",
        ratio_to: None,
        seed: "13 (max 14)",
    },
    SeedRef {
        quantity: "slow-write: C3 peak writes offered",
        scenario: "slow-write",
        strategy: "c3",
        cpus: 1.0,
        metric: "peak_writes_offered",
        ratio_to: None,
        seed: "13 (max 14)",
    },
    SeedRef {
        quantity: "slow-write: C4 peak writes offered",
        scenario: "slow-write",
        strategy: "c4",
        cpus: 1.0,
        metric: "peak_writes_offered",
        ratio_to: None,
        seed: "at most 6",
    },
    SeedRef {
        quantity: "slow-write: C3 completion, s",
        scenario: "slow-write",
        strategy: "c3",
        cpus: 1.0,
        metric: "completion_s",
        ratio_to: None,
        seed: "4.2",
    },
    SeedRef {
        quantity: "slow-write: C4 completion, s",
        scenario: "slow-write",
        strategy: "c4",
        cpus: 1.0,
        metric: "completion_s",
        ratio_to: None,
        seed: "5.7",
    },
    SeedRef {
        quantity: "slow-enrichment: C4 / C3 accepted/s",
        scenario: "slow-enrichment",
        strategy: "c4",
        cpus: 1.0,
        metric: "accepted_per_s",
        ratio_to: Some("c3"),
        seed: "0.82",
    },
    SeedRef {
        quantity: "slow-enrichment: C2 incomplete fraction",
        scenario: "slow-enrichment",
        strategy: "c2",
        cpus: 1.0,
        metric: "incomplete_fraction",
        ratio_to: None,
        seed: "about 0.2",
    },
    SeedRef {
        quantity: "slow-enrichment: C3 incomplete fraction",
        scenario: "slow-enrichment",
        strategy: "c3",
        cpus: 1.0,
        metric: "incomplete_fraction",
        ratio_to: None,
        seed: "about 0.2",
    },
    SeedRef {
        quantity: "slow-enrichment: C4 incomplete fraction",
        scenario: "slow-enrichment",
        strategy: "c4",
        cpus: 1.0,
        metric: "incomplete_fraction",
        ratio_to: None,
        seed: "about 0.2",
    },
];

/// Seconds shrink and rates grow with the time scale; undo that so numbers compare with the seed.
fn rescale(metric: &str, s: Spread, time_scale: f64) -> Spread {
    let factor = match metric {
        "completion_s" => 1.0 / time_scale,
        "accepted_per_s" => time_scale,
        _ => 1.0,
    };
    s.map(|v| v * factor)
}

fn seed_model(doc: &ResultsDoc) -> Table {
    let time_scale = if doc.meta.time_scale > 0.0 {
        doc.meta.time_scale
    } else {
        1.0
    };
    let mut table = Table::new(&[("quantity", false), ("seed", true), ("this run", true)]);
    for r in SEED_REFS {
        let Some(row) = find_row(doc, r.scenario, r.strategy, r.cpus) else {
            continue;
        };
        let Some(ours) = crate::hypothesis::metric(row, r.metric) else {
            continue;
        };
        let text = match r.ratio_to {
            Some(den) => {
                let Some(den_row) = find_row(doc, r.scenario, den, 1.0) else {
                    continue;
                };
                let den = crate::hypothesis::metric(den_row, r.metric).unwrap_or_default();
                if den.median == 0.0 {
                    "undefined".to_string()
                } else {
                    format!("{:.2}", ours.median / den.median)
                }
            }
            None => fmt_spread(rescale(r.metric, ours, time_scale)),
        };
        table
            .rows
            .push(vec![r.quantity.to_string(), r.seed.to_string(), text]);
    }
    table
}

fn seed_note(doc: &ResultsDoc) -> String {
    let mut note = String::from(
        "Seed: medians of five runs of 200 records in the seed's .NET lab. This run: median (min-max) over its repeats.",
    );
    if (doc.meta.time_scale - 1.0).abs() > 1e-9 && doc.meta.time_scale > 0.0 {
        let _ = write!(
            note,
            " This run used time scale {}; its seconds are divided and its rates multiplied by it to compare.",
            doc.meta.time_scale
        );
    }
    if doc.meta.records != 0 && doc.meta.records != 200 {
        let _ = write!(
            note,
            " It processed {} records per run, so its completion times and counts (503s) are not directly comparable; its rates are.",
            doc.meta.records
        );
    }
    note
}

/// The seed's reference numbers next to this run's, as plain text (rows for cells this run has).
pub fn seed_table(doc: &ResultsDoc) -> String {
    let table = seed_model(doc);
    if table.rows.is_empty() {
        return "no cells in common with the seed's table\n".to_string();
    }
    format!("{}{}\n", table.text(), seed_note(doc))
}

// ---------------------------------------------------------------------------------------------
// CSV

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv_row(run: &RunResult) -> Vec<String> {
    let kinds = run
        .failed_by_kind
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";");
    vec![
        run.strategy.clone(),
        run.scenario.clone(),
        run.repeat.to_string(),
        run.cpus.to_string(),
        run.runner_available_parallelism.to_string(),
        run.records.to_string(),
        run.complete.to_string(),
        run.incomplete.to_string(),
        run.rejected.to_string(),
        run.failed.to_string(),
        kinds,
        format!("{:.4}", run.completion_s),
        format!("{:.4}", run.accepted_per_s),
        run.write_503s.to_string(),
        run.peak_writes_offered.to_string(),
        run.peak_enrichment_in_flight.to_string(),
        run.peak_writes_in_flight.to_string(),
        run.enrichment_timeouts.to_string(),
    ]
}

/// `runs.csv`: one line per run, columns [`CSV_COLUMNS`].
pub fn runs_csv(doc: &ResultsDoc) -> String {
    let mut out = CSV_COLUMNS.join(",") + "\n";
    for run in &doc.runs {
        let row: Vec<String> = csv_row(run).iter().map(|f| csv_field(f)).collect();
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------------------------------------
// SVG figures

const PALETTE: &[&str] = &[
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
];
const ENRICH_COLOR: &str = "#4e79a7";
const RECORDS_COLOR: &str = "#e15759";

fn esc_xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

fn esc_html(s: &str) -> String {
    esc_xml(s)
}

/// A step of 1, 2 or 5 times a power of ten giving about `target` ticks up to `max`.
fn nice_step(max: f64, target: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / target;
    let pow = 10f64.powf(raw.log10().floor());
    let frac = raw / pow;
    let nice = if frac <= 1.0 {
        1.0
    } else if frac <= 2.0 {
        2.0
    } else if frac <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * pow
}

/// Tick values 0, step, 2 step, ... up to `max`; at most 50 of them whatever the input.
fn ticks(max: f64, step: f64) -> Vec<f64> {
    if !(max.is_finite() && step.is_finite() && step > 0.0 && max >= 0.0) {
        return vec![0.0];
    }
    (0..=50)
        .map(|i| i as f64 * step)
        .take_while(|t| *t <= max + step * 1e-6)
        .collect()
}

fn svg_open(width: f64, height: f64, title: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"11\">\n<title>{}</title>\n<rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"white\"/>\n<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
        esc_xml(title),
        width / 2.0,
        esc_xml(title)
    )
}

/// Bars of the median per (strategy, cpus) cell, grouped by scenario, with min-max whiskers.
fn bar_chart(doc: &ResultsDoc, metric: &str, title: &str, y_label: &str) -> String {
    let groups: Vec<(String, Vec<&SummaryRow>)> = scenarios(doc)
        .into_iter()
        .map(|s| {
            let rows = doc.summary.iter().filter(|r| r.scenario == s).collect();
            (s, rows)
        })
        .filter(|(_, rows): &(String, Vec<&SummaryRow>)| !rows.is_empty())
        .collect();
    let bars: usize = groups.iter().map(|(_, rows)| rows.len()).sum();
    let (left, right, top, bottom) = (64.0, 20.0, 40.0, 64.0);
    let bar_w = 34.0;
    let gap = 26.0;
    let width = (left + right + bars as f64 * bar_w + groups.len() as f64 * gap).max(420.0);
    let height = 340.0;
    let plot_h = height - top - bottom;
    let mut svg = svg_open(width, height, title);
    if bars == 0 {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no data</text>\n</svg>",
            width / 2.0,
            height / 2.0
        );
        return svg;
    }
    // A non-finite value (e.g. a rate over a zero completion time) is drawn as 0, never as NaN.
    let value = |r: &SummaryRow| {
        crate::hypothesis::metric(r, metric)
            .unwrap_or_default()
            .map(|v| if v.is_finite() { v } else { 0.0 })
    };
    let max = groups
        .iter()
        .flat_map(|(_, rows)| rows.iter().map(|r| value(r).max))
        .fold(0.0f64, f64::max);
    // All-zero (or non-finite) data still gets a 0..1 axis rather than a degenerate one.
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let step = nice_step(max, 5.0);
    let y_max = (max / step).ceil() * step;
    let y = |v: f64| top + plot_h - (v / y_max) * plot_h;
    // Grid and y axis.
    for tick in ticks(y_max, step) {
        let ty = y(tick);
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" y1=\"{ty:.1}\" x2=\"{:.1}\" y2=\"{ty:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            width - right,
            left - 6.0,
            ty + 4.0,
            fmt_num(tick)
        );
    }
    let _ = writeln!(
        svg,
        "<text transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        top + plot_h / 2.0,
        esc_xml(y_label)
    );
    let strategy_order = strategies(doc);
    // Centre the bars when the chart is wider than they need (few bars, minimum width).
    let needed = bars as f64 * bar_w + groups.len() as f64 * gap;
    let mut x = left + gap / 2.0 + ((width - left - right - needed) / 2.0).max(0.0);
    for (scenario, rows) in &groups {
        let group_start = x;
        for r in rows {
            let v = value(r);
            let color_index = strategy_order
                .iter()
                .position(|s| s == &r.strategy)
                .unwrap_or(0);
            let color = PALETTE[color_index % PALETTE.len()];
            // A second CPU count of the same strategy is drawn lighter.
            let opacity = if (r.cpus - 1.0).abs() < 1e-9 {
                1.0
            } else {
                0.55
            };
            let (y0, y1) = (y(v.median), y(0.0));
            let _ = writeln!(
                svg,
                "<rect x=\"{:.1}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\" fill-opacity=\"{opacity}\"><title>{} {} CPU{}: median {} (min {}, max {})</title></rect>",
                x + 3.0,
                bar_w - 6.0,
                (y1 - y0).max(0.0),
                esc_xml(&strategy_label(&r.strategy)),
                fmt_num(r.cpus),
                if (r.cpus - 1.0).abs() < 1e-9 { "" } else { "s" },
                fmt_num(v.median),
                fmt_num(v.min),
                fmt_num(v.max)
            );
            let cx = x + bar_w / 2.0;
            let (ymin, ymax) = (y(v.min), y(v.max));
            let _ = writeln!(
                svg,
                "<path d=\"M{cx:.1} {ymin:.1} V{ymax:.1} M{:.1} {ymin:.1} H{:.1} M{:.1} {ymax:.1} H{:.1}\" stroke=\"#222\" stroke-width=\"1.2\" fill=\"none\"/>",
                cx - 5.0,
                cx + 5.0,
                cx - 5.0,
                cx + 5.0
            );
            let _ = writeln!(
                svg,
                "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"9\">{}</text>",
                ymax - 4.0,
                esc_xml(&fmt_num(v.median))
            );
            let label = if (r.cpus - 1.0).abs() < 1e-9 {
                strategy_label(&r.strategy)
            } else {
                format!("{} {}c", strategy_label(&r.strategy), fmt_num(r.cpus))
            };
            let _ = writeln!(
                svg,
                "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                top + plot_h + 14.0,
                esc_xml(&label)
            );
            x += bar_w;
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-weight=\"bold\">{}</text>",
            (group_start + x) / 2.0,
            top + plot_h + 32.0,
            esc_xml(scenario)
        );
        x += gap;
    }
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#444\"/>",
        y(0.0),
        width - right,
        y(0.0)
    );
    let _ = writeln!(
        svg,
        "<text x=\"{left}\" y=\"{:.1}\" font-size=\"10\" fill=\"#555\">bars: median over repeats; whiskers: min-max; \"2c\": 2 CPUs</text>",
        height - 8.0
    );
    svg.push_str("</svg>\n");
    svg
}

/// Keeps at most `max_points` points, each the maximum of its bucket so peaks survive.
fn downsample(values: &[u32], max_points: usize) -> Vec<(usize, u32)> {
    if values.len() <= max_points {
        return values.iter().copied().enumerate().collect();
    }
    let bucket = values.len().div_ceil(max_points);
    values
        .chunks(bucket)
        .enumerate()
        .map(|(i, chunk)| (i * bucket, chunk.iter().copied().max().unwrap_or(0)))
        .collect()
}

/// The run drawn for a strategy in a scenario: fewest CPUs, then first repeat, with a timeline.
fn timeline_run<'a>(doc: &'a ResultsDoc, scenario: &str, strategy: &str) -> Option<&'a RunResult> {
    doc.runs
        .iter()
        .filter(|r| r.scenario == scenario && r.strategy == strategy)
        .filter(|r| !r.timeline.enrichment.is_empty() || !r.timeline.records.is_empty())
        .min_by(|a, b| a.cpus.total_cmp(&b.cpus).then(a.repeat.cmp(&b.repeat)))
}

/// Calls in flight per dependency over time: one panel per strategy, one run each.
fn timeline_chart(doc: &ResultsDoc, scenario: &str) -> Option<String> {
    let runs: Vec<&RunResult> = strategies(doc)
        .iter()
        .filter_map(|s| timeline_run(doc, scenario, s))
        .collect();
    if runs.is_empty() {
        return None;
    }
    let seconds = |r: &RunResult| {
        let interval = if r.timeline.interval_ms > 0.0 {
            r.timeline.interval_ms
        } else {
            10.0
        };
        r.timeline.enrichment.len().max(r.timeline.records.len()) as f64 * interval / 1000.0
    };
    let longest = runs.iter().map(|r| seconds(r)).fold(0.0f64, f64::max);
    let shortest = runs
        .iter()
        .map(|r| seconds(r))
        .fold(f64::INFINITY, f64::min);
    // One time axis for all panels makes them comparable, but when one run is far longer (C1 at
    // one CPU takes ~80 s, the others ~3 s) the short ones shrink to a sliver: then each panel
    // gets its own axis, and the figure says so.
    let shared_axis = longest <= 3.0 * shortest.max(1e-3);
    let x_axis = |secs: f64| {
        let raw = secs.max(1e-3);
        let step = nice_step(raw, 8.0);
        (((raw / step).ceil() * step), step)
    };
    let (left, right, top, panel_h, panel_gap) = (56.0, 20.0, 70.0, 110.0, 44.0);
    let width = 780.0;
    let height = top + runs.len() as f64 * (panel_h + panel_gap) + 20.0;
    let plot_w = width - left - right;
    let title = format!("Calls in flight per dependency over time: {scenario}");
    let mut svg = svg_open(width, height, &title);
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" y1=\"34\" x2=\"{}\" y2=\"34\" stroke=\"{ENRICH_COLOR}\" stroke-width=\"2\"/><text x=\"{}\" y=\"38\">enrichment calls in flight</text><line x1=\"{}\" y1=\"34\" x2=\"{}\" y2=\"34\" stroke=\"{RECORDS_COLOR}\" stroke-width=\"2\"/><text x=\"{}\" y=\"38\">writes in flight</text>",
        left + 20.0,
        left + 26.0,
        left + 200.0,
        left + 220.0,
        left + 226.0
    );
    for (i, run) in runs.iter().enumerate() {
        let py = top + i as f64 * (panel_h + panel_gap);
        let (x_max, x_step) = x_axis(if shared_axis { longest } else { seconds(run) });
        let interval_s = if run.timeline.interval_ms > 0.0 {
            run.timeline.interval_ms / 1000.0
        } else {
            0.01
        };
        let peak = run
            .timeline
            .enrichment
            .iter()
            .chain(&run.timeline.records)
            .copied()
            .max()
            .unwrap_or(0)
            .max(1) as f64;
        // Calls in flight are whole numbers: no tick at 0.5.
        let y_step = nice_step(peak, 3.0).max(1.0);
        let y_max = (peak / y_step).ceil() * y_step;
        let x = |t: f64| left + t / x_max * plot_w;
        let y = |v: f64| py + panel_h - v / y_max * panel_h;
        let _ = writeln!(
            svg,
            "<text x=\"{left}\" y=\"{:.1}\" font-weight=\"bold\">{} ({} CPU{}, repeat {}): peak {} enrichment, {} writes in flight; {} accepted/s</text>",
            py - 14.0,
            esc_xml(&strategy_label(&run.strategy)),
            fmt_num(run.cpus),
            if (run.cpus - 1.0).abs() < 1e-9 { "" } else { "s" },
            run.repeat,
            run.timeline.enrichment.iter().max().copied().unwrap_or(0),
            run.timeline.records.iter().max().copied().unwrap_or(0),
            fmt_num(run.accepted_per_s)
        );
        for tick in ticks(y_max, y_step) {
            let _ = writeln!(
                svg,
                "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#e4e4e4\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                y(tick),
                width - right,
                y(tick),
                left - 6.0,
                y(tick) + 4.0,
                fmt_num(tick)
            );
        }
        for t in ticks(x_max, x_step) {
            let _ = writeln!(
                svg,
                "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#444\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"9\">{}</text>",
                x(t),
                py + panel_h,
                x(t),
                py + panel_h + 4.0,
                x(t),
                py + panel_h + 14.0,
                fmt_num(t)
            );
        }
        for (series, color) in [
            (&run.timeline.enrichment, ENRICH_COLOR),
            (&run.timeline.records, RECORDS_COLOR),
        ] {
            if series.is_empty() {
                continue;
            }
            let mut points = String::new();
            for (idx, v) in downsample(series, 900) {
                let _ = write!(
                    points,
                    "{:.1},{:.1} ",
                    x(idx as f64 * interval_s),
                    y(v as f64)
                );
            }
            let _ = writeln!(
                svg,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.3\"/>",
                points.trim_end()
            );
        }
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#444\"/>",
            py + panel_h,
            width - right,
            py + panel_h
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">seconds since the first record started{}</text>",
        left + plot_w / 2.0,
        height - 4.0,
        if shared_axis {
            ""
        } else {
            " (each panel has its own time axis)"
        }
    );
    svg.push_str("</svg>\n");
    Some(svg)
}

/// File-name-safe form of a scenario name.
fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The report's figures: accepted/s and 503s bars, and one timeline figure per scenario.
pub fn figures(doc: &ResultsDoc) -> Vec<Figure> {
    let mut out = vec![
        Figure {
            file: "accepted_per_s.svg".into(),
            title: "Accepted records per second".into(),
            caption: "Median accepted records/s (complete + incomplete, divided by completion time) per strategy and scenario; whiskers span the min and max over the repeats.".into(),
            svg: bar_chart(doc, "accepted_per_s", "Accepted records per second", "accepted records/s"),
        },
        Figure {
            file: "write_503s.svg".into(),
            title: "503s from the system of record".into(),
            caption: "Median writes answered 503 per run, per strategy and scenario; whiskers span the min and max over the repeats.".into(),
            svg: bar_chart(doc, "write_503s", "503s from the system of record per run", "write 503s per run"),
        },
    ];
    for scenario in scenarios(doc) {
        if let Some(svg) = timeline_chart(doc, &scenario) {
            out.push(Figure {
                file: format!("timeline-{}.svg", slug(&scenario)),
                title: format!("Calls in flight over time: {scenario}"),
                caption: format!(
                    "Enrichment calls and writes the runner had in flight, sampled every 10 ms, for one run of each strategy in {scenario} (fewest CPUs, first repeat)."
                ),
                svg,
            });
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// summary.md and index.html

fn meta_lines(doc: &ResultsDoc) -> Vec<(String, String)> {
    let m = &doc.meta;
    vec![
        ("started".into(), m.started_at.clone()),
        ("records per run".into(), m.records.to_string()),
        ("repeats".into(), m.repeats.to_string()),
        ("time scale".into(), m.time_scale.to_string()),
        ("seed".into(), m.seed.to_string()),
        ("CPU limit enforcement".into(), m.enforcement.clone()),
        ("host CPUs".into(), m.host_cpus.to_string()),
        ("inflight version".into(), m.inflight_version.clone()),
        ("runs".into(), doc.runs.len().to_string()),
    ]
}

fn scenario_table(doc: &ResultsDoc, scenario: &str) -> Table {
    let headers: Vec<(&str, bool)> = SUMMARY_HEADERS
        .iter()
        .copied()
        .filter(|(h, _)| *h != "scenario")
        .chain([("incomplete %", true)])
        .collect();
    let mut table = Table::new(&headers);
    for row in doc.summary.iter().filter(|r| r.scenario == scenario) {
        let mut cells = summary_cells(row);
        cells.remove(1);
        cells.push(fmt_pct(row.incomplete_fraction));
        table.rows.push(cells);
    }
    table
}

const SPREAD_NOTE: &str = "Values are medians over the repeats with (min-max) when they differ. accepted/s = (complete + incomplete) / completion s. Peak writes offered comes from the sim (requests inside the system of record at once, counting those about to be refused); peak enrichment in flight from the runner.";

/// `summary.md`: settings, a seed-style table per scenario, the hypotheses, the seed comparison, figures.
pub fn summary_md(doc: &ResultsDoc, figures: &[Figure]) -> String {
    let mut out = String::from("# inflight lab run\n\n");
    for (k, v) in meta_lines(doc) {
        let _ = writeln!(out, "- {k}: {v}");
    }
    out.push_str("\n## Results\n\n");
    out.push_str(SPREAD_NOTE);
    out.push_str("\n\n");
    if doc.summary.is_empty() {
        out.push_str("No summary rows: no run finished.\n\n");
    }
    for scenario in scenarios(doc) {
        let table = scenario_table(doc, &scenario);
        if table.rows.is_empty() {
            continue;
        }
        let _ = write!(out, "### {scenario}\n\n{}\n", table.markdown());
    }
    let _ = write!(out, "## Hypotheses\n\nPreregistered in `lab/hypotheses.toml`; {}. A failed hypothesis is a finding, not an error.\n\n", hypotheses_tally(doc));
    if !doc.hypotheses.is_empty() {
        out.push_str(&hypotheses_model(doc).markdown());
        out.push('\n');
    }
    let seed = seed_model(doc);
    if !seed.rows.is_empty() {
        let _ = write!(
            out,
            "## Next to the seed\n\n{}\n\n{}\n",
            seed_note(doc),
            seed.markdown()
        );
    }
    out.push_str("## Figures\n\n");
    for f in figures {
        let _ = write!(out, "![{}]({})\n\n{}\n\n", f.title, f.file, f.caption);
    }
    out.push_str("Every run is in `runs.csv` and `results.json`.\n");
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}\
th,td{border:1px solid #ccc;padding:0.25em 0.5em;vertical-align:top}\
th{background:#f3f3f3}\
td.pass{background:#dff0d8;font-weight:bold}td.fail{background:#f2dede;font-weight:bold}td.skipped{background:#eee}\
figure{margin:1em 0 2em}figcaption{color:#555;font-size:0.9em;max-width:780px}\
dl{display:grid;grid-template-columns:max-content auto;gap:0.2em 1em}dt{font-weight:bold}dd{margin:0}\
.note{color:#555;font-size:0.9em;max-width:900px}";

/// `index.html`: the whole report in one file, figures inlined, opens from disk.
pub fn index_html(doc: &ResultsDoc, figures: &[Figure]) -> String {
    let mut out = String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>inflight lab run</title>\n<style>");
    out.push_str(STYLE);
    out.push_str("</style>\n</head>\n<body>\n<h1>inflight lab run</h1>\n<dl>\n");
    for (k, v) in meta_lines(doc) {
        let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", esc_html(&k), esc_html(&v));
    }
    out.push_str("</dl>\n<p><a href=\"results.json\">results.json</a> · <a href=\"runs.csv\">runs.csv</a> · <a href=\"summary.md\">summary.md</a></p>\n");
    let _ = writeln!(
        out,
        "<h2>Results</h2>\n<p class=\"note\">{}</p>",
        esc_html(SPREAD_NOTE)
    );
    if doc.summary.is_empty() {
        out.push_str("<p>No summary rows: no run finished.</p>\n");
    }
    for scenario in scenarios(doc) {
        let table = scenario_table(doc, &scenario);
        if table.rows.is_empty() {
            continue;
        }
        let _ = write!(out, "<h3>{}</h3>\n{}", esc_html(&scenario), table.html());
    }
    let _ = writeln!(
        out,
        "<h2>Hypotheses</h2>\n<p class=\"note\">Preregistered in <code>lab/hypotheses.toml</code>; {}. A failed hypothesis is a finding, not an error.</p>",
        esc_html(&hypotheses_tally(doc))
    );
    if !doc.hypotheses.is_empty() {
        out.push_str(&hypotheses_model(doc).html());
    }
    let seed = seed_model(doc);
    if !seed.rows.is_empty() {
        let _ = write!(
            out,
            "<h2>Next to the seed</h2>\n<p class=\"note\">{}</p>\n{}",
            esc_html(&seed_note(doc)),
            seed.html()
        );
    }
    out.push_str("<h2>Figures</h2>\n");
    for f in figures {
        // The SVG is our own output and already escaped; strip nothing, embed as is.
        let _ = write!(
            out,
            "<figure>\n{}<figcaption>{}</figcaption>\n</figure>\n",
            f.svg,
            esc_html(&f.caption)
        );
    }
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_and_numbers_format_for_people() {
        assert_eq!(
            fmt_spread(Spread {
                median: 200.0,
                min: 200.0,
                max: 200.0
            }),
            "200"
        );
        assert_eq!(
            fmt_spread(Spread {
                median: 83.62,
                min: 82.0,
                max: 85.456
            }),
            "83.62 (82-85.46)"
        );
        assert_eq!(
            fmt_spread(Spread {
                median: 94.5,
                min: 0.19,
                max: 100.0
            }),
            "94.5 (0.19-100)"
        );
        assert_eq!(
            fmt_pct(Spread {
                median: 0.2,
                min: 0.2,
                max: 0.2
            }),
            "20.0"
        );
    }

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
    }

    #[test]
    fn nice_steps_are_1_2_5() {
        assert_eq!(nice_step(10.0, 5.0), 2.0);
        assert_eq!(nice_step(67.0, 5.0), 20.0);
        assert_eq!(nice_step(0.3, 3.0), 0.1);
        assert_eq!(nice_step(0.0, 5.0), 1.0);
    }

    #[test]
    fn ticks_are_bounded_whatever_the_input() {
        assert_eq!(ticks(1.0, 0.5), vec![0.0, 0.5, 1.0]);
        assert_eq!(ticks(1.0, 1e-10).len(), 51);
        assert_eq!(ticks(f64::INFINITY, 1.0), vec![0.0]);
        assert_eq!(ticks(1.0, 0.0), vec![0.0]);
    }

    #[test]
    fn all_zero_and_non_finite_bars_draw_quickly() {
        let row = |v: f64| SummaryRow {
            strategy: "c1".into(),
            scenario: "s".into(),
            cpus: 1.0,
            write_503s: Spread {
                median: v,
                min: v,
                max: v,
            },
            ..Default::default()
        };
        for v in [0.0, f64::INFINITY, f64::NAN, 1e-12] {
            let doc = ResultsDoc {
                summary: vec![row(v)],
                ..Default::default()
            };
            let svg = bar_chart(&doc, "write_503s", "t", "y");
            assert!(svg.len() < 20_000, "{v}: {} bytes", svg.len());
            assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        }
    }

    #[test]
    fn downsampling_keeps_peaks() {
        let mut v = vec![0u32; 10_000];
        v[4321] = 17;
        let d = downsample(&v, 900);
        assert!(d.len() <= 900);
        assert_eq!(d.iter().map(|(_, v)| *v).max(), Some(17));
        assert_eq!(downsample(&[1, 2], 900), vec![(0, 1), (1, 2)]);
    }

    #[test]
    fn text_table_aligns_columns() {
        let mut t = Table::new(&[("a", false), ("n", true)]);
        t.rows.push(vec!["xx".into(), "1".into()]);
        t.rows.push(vec!["y".into(), "100".into()]);
        assert_eq!(t.text(), "a     n\n--  ---\nxx    1\ny   100\n");
    }
}
