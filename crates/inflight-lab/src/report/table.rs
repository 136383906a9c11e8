//! The report's tables: one model rendered as plain text, Markdown or HTML, and the tables built
//! from a results document (the summary, one per scenario, the hypotheses, the settings).

use std::fmt::Write as _;

use super::{esc_html, fmt_pct, fmt_spread, scenarios, strategy_label};
use crate::hypothesis::fmt_num;
use crate::results::{ResultsDoc, SummaryRow};

/// A table rendered as plain text, Markdown or HTML.
pub(crate) struct Table {
    headers: Vec<String>,
    pub(crate) rows: Vec<Vec<String>>,
    /// Columns aligned right (numbers).
    right: Vec<bool>,
}

impl Table {
    pub(crate) fn new(headers: &[(&str, bool)]) -> Self {
        Self {
            headers: headers.iter().map(|(h, _)| h.to_string()).collect(),
            right: headers.iter().map(|(_, r)| *r).collect(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn text(&self) -> String {
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

    pub(crate) fn markdown(&self) -> String {
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

    pub(crate) fn html(&self) -> String {
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

pub(crate) fn hypotheses_model(doc: &ResultsDoc) -> Table {
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

pub(crate) fn hypotheses_tally(doc: &ResultsDoc) -> String {
    let count = |o: &str| doc.hypotheses.iter().filter(|h| h.outcome == o).count();
    format!(
        "{} pass, {} fail, {} skipped (of {})",
        count("pass"),
        count("fail"),
        count("skipped"),
        doc.hypotheses.len()
    )
}

/// The hypotheses and their outcomes as plain text: one line per hypothesis evaluated, observed
/// values below; those skipped because the run lacks their cells are counted in one line (the
/// files list them all).
pub fn hypotheses_table(doc: &ResultsDoc) -> String {
    if doc.hypotheses.is_empty() {
        return "no hypotheses evaluated\n".to_string();
    }
    let shown: Vec<_> = doc
        .hypotheses
        .iter()
        .filter(|h| h.outcome != "skipped")
        .collect();
    let id_width = shown
        .iter()
        .map(|h| h.id.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let hidden = doc.hypotheses.len() - shown.len();
    for h in shown {
        let _ = writeln!(
            out,
            "{:<id_width$}  {:<7}  {}",
            h.id,
            h.outcome.to_uppercase(),
            h.claim
        );
        let _ = writeln!(out, "{:<id_width$}  {:<7}  {}", "", "", h.observed);
    }
    if hidden > 0 {
        let _ = writeln!(
            out,
            "{hidden} skipped: their cells are not in this run (summary.md lists them)"
        );
    }
    let _ = writeln!(
        out,
        "{} (a failed hypothesis is a finding, not an error)",
        hypotheses_tally(doc)
    );
    out
}

/// The run's settings as (name, value) pairs.
pub(crate) fn meta_lines(doc: &ResultsDoc) -> Vec<(String, String)> {
    let m = &doc.meta;
    vec![
        ("started".into(), started_line(m)),
        ("records per run".into(), m.records.to_string()),
        ("repeats".into(), m.repeats.to_string()),
        ("time scale".into(), m.time_scale.to_string()),
        ("seed".into(), m.seed.to_string()),
        ("CPU limit enforcement".into(), m.enforcement.to_string()),
        ("host CPUs".into(), m.host_cpus.to_string()),
        ("inflight version".into(), m.inflight_version.clone()),
        ("runs".into(), runs_line(doc)),
    ]
}

/// When the run started, and when it was resumed if it was.
fn started_line(m: &crate::results::RunMeta) -> String {
    if m.resumed_at.is_empty() {
        m.started_at.clone()
    } else {
        format!("{}, resumed {}", m.started_at, m.resumed_at.join(", "))
    }
}

/// `33`, or for a partial document `11 of 33 planned (partial)`.
fn runs_line(doc: &ResultsDoc) -> String {
    if doc.meta.partial {
        format!(
            "{} of {} planned (partial)",
            doc.runs.len(),
            doc.meta.runs_planned
        )
    } else {
        doc.runs.len().to_string()
    }
}

/// One scenario's summary rows, without the scenario column, with the incomplete share.
pub(crate) fn scenario_table(doc: &ResultsDoc, scenario: &str) -> Table {
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

pub(crate) const SPREAD_NOTE: &str = "Values are medians over the repeats with (min-max) when they differ. accepted/s = (complete + incomplete) / completion s. Peak writes offered comes from the sim (requests inside the system of record at once, counting those about to be refused); peak enrichment in flight from the runner.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_table_aligns_columns() {
        let mut t = Table::new(&[("a", false), ("n", true)]);
        t.rows.push(vec!["xx".into(), "1".into()]);
        t.rows.push(vec!["y".into(), "100".into()]);
        assert_eq!(t.text(), "a     n\n--  ---\nxx    1\ny   100\n");
    }
}
