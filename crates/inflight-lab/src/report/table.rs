//! The report's tables: one model rendered as plain text, Markdown or HTML, and the tables built
//! from a results document (the summary, one per scenario, the hypotheses, the settings).

use std::fmt::Write as _;

use super::{
    cpu_limited, esc_html, fmt_pct, fmt_spread, limit_note, scale_note, scenarios, strategy_label,
    wrap,
};
use crate::results::{
    cpus_cell, HypothesisResult, Metric, ResultsDoc, SkipReason, SummaryRow, Terminal, Unit,
};

/// How wide the terminal's tables and notes may be, in characters.
pub const TERMINAL_WIDTH: usize = 100;

/// A table rendered as plain text, Markdown or HTML.
pub(crate) struct Table {
    headers: Vec<String>,
    pub(crate) rows: Vec<Vec<String>>,
    /// Columns aligned right (numbers).
    right: Vec<bool>,
    /// Lines shown before the row at each index (group labels); plain text only.
    sections: Vec<(usize, String)>,
}

impl Table {
    pub(crate) fn new(headers: &[(&str, bool)]) -> Self {
        Self {
            headers: headers.iter().map(|(h, _)| h.to_string()).collect(),
            right: headers.iter().map(|(_, r)| *r).collect(),
            rows: Vec::new(),
            sections: Vec::new(),
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
        for (i, row) in self.rows.iter().enumerate() {
            for (_, label) in self.sections.iter().filter(|(at, _)| *at == i) {
                out.push_str(label);
                out.push('\n');
            }
            out.push_str(&line(row));
        }
        out
    }

    /// The widest line of [`Table::text`], in characters.
    fn text_width(&self) -> usize {
        self.text()
            .lines()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0)
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

    /// The table inside a `scroll` block, so that a narrow page scrolls the table rather than the
    /// page; numeric cells have the class `num` (right-aligned). A numeric cell's range is a
    /// `range` span, never broken itself: a narrow column puts it under the median rather than
    /// widening the table.
    pub(crate) fn html(&self) -> String {
        let mut out = String::from("<div class=\"scroll\">\n<table>\n<thead><tr>");
        for (h, right) in self.headers.iter().zip(&self.right) {
            let _ = write!(out, "<th{}>{}</th>", num_class(*right), esc_html(h));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for row in &self.rows {
            out.push_str("<tr>");
            for (cell, right) in row.iter().zip(&self.right) {
                let class = match cell.as_str() {
                    "pass" => " class=\"pass\"",
                    "fail" => " class=\"fail\"",
                    "skipped" => " class=\"skipped\"",
                    _ => num_class(*right),
                };
                let text = match cell.strip_suffix(')').and_then(|c| c.split_once(" (")) {
                    Some((median, range)) if *right && is_range(range) => format!(
                        "{} <span class=\"range\">({})</span>",
                        esc_html(median),
                        esc_html(range)
                    ),
                    _ => esc_html(cell),
                };
                let _ = write!(out, "<td{class}>{text}</td>");
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody>\n</table>\n</div>\n");
        out
    }
}

/// Whether `text` is a range of numbers as [`fmt_spread`] writes one: `82-85.46`, `0.19-100`.
fn is_range(text: &str) -> bool {
    let number = |s: &str| !s.is_empty() && s.parse::<f64>().is_ok();
    // A negative bound would put a second '-' in: split at each and try.
    text.match_indices('-')
        .any(|(i, _)| number(&text[..i]) && number(&text[i + 1..]))
}

fn num_class(right: bool) -> &'static str {
    if right {
        " class=\"num\""
    } else {
        ""
    }
}

/// A metric's cell: its spread, a fraction's as percentages.
fn metric_cell(row: &SummaryRow, metric: Metric) -> String {
    let spread = row.get(metric);
    match metric.def().unit {
        Unit::Fraction => fmt_pct(spread),
        Unit::Count | Unit::Seconds | Unit::PerSecond => fmt_spread(spread),
    }
}

/// The columns of the summary's tables in the files: the cell, then each metric the registry
/// shows in tables ([`Shown::table`](crate::results::Shown::table)), as (header, right-aligned).
fn summary_headers() -> Vec<(&'static str, bool)> {
    let cell = [
        ("strategy", false),
        ("scenario", false),
        ("CPUs", true),
        ("repeats", true),
    ];
    cell.into_iter()
        .chain(table_metrics().map(|m| (m.def().label, true)))
        .collect()
}

/// The cells of `row` under [`summary_headers`].
fn summary_cells(row: &SummaryRow) -> Vec<String> {
    let cell = [
        strategy_label(&row.strategy),
        row.scenario.clone(),
        cpus_cell(row.cpus, !row.unlimited),
        row.repeats.to_string(),
    ];
    cell.into_iter()
        .chain(table_metrics().map(|m| metric_cell(row, m)))
        .collect()
}

fn table_metrics() -> impl Iterator<Item = Metric> {
    Metric::ALL.into_iter().filter(|m| m.def().shown.table)
}

/// A column of the terminal's summary table.
struct TermColumn {
    header: &'static str,
    /// Columns are left out for width, highest rank first; 0 is never left out.
    drop_rank: u8,
    cell: TermCell,
}

/// What a terminal column shows of a row.
enum TermCell {
    Cell(fn(&SummaryRow) -> String),
    Metric(Metric),
}

/// The terminal's columns, in order: the cell's, then each metric the registry shows on the
/// terminal ([`Shown::terminal`](crate::results::Shown::terminal)) in its order. The files have
/// them all, and more.
fn term_columns() -> Vec<TermColumn> {
    let mut metrics: Vec<(Metric, Terminal)> = Metric::ALL
        .into_iter()
        .filter_map(|m| m.def().shown.terminal.map(|t| (m, t)))
        .collect();
    metrics.sort_by_key(|(_, t)| t.order);
    let cell = [
        TermColumn {
            header: "strategy",
            drop_rank: 0,
            cell: TermCell::Cell(|r| format!("  {}", strategy_label(&r.strategy))),
        },
        TermColumn {
            header: "CPUs",
            drop_rank: 0,
            cell: TermCell::Cell(|r| cpus_cell(r.cpus, !r.unlimited)),
        },
        TermColumn {
            header: "runs",
            drop_rank: 0,
            cell: TermCell::Cell(|r| r.repeats.to_string()),
        },
    ];
    cell.into_iter()
        .chain(metrics.into_iter().map(|(m, t)| TermColumn {
            header: m.def().label,
            drop_rank: t.drop_rank,
            cell: TermCell::Metric(m),
        }))
        .collect()
}

impl TermColumn {
    fn cell(&self, row: &SummaryRow) -> String {
        match &self.cell {
            TermCell::Cell(cell) => cell(row),
            TermCell::Metric(m) => metric_cell(row, *m),
        }
    }
}

/// The summary's rows in `columns`, grouped by scenario: a line naming each before its rows.
fn terminal_model(doc: &ResultsDoc, columns: &[&TermColumn]) -> Table {
    let headers: Vec<(&str, bool)> = columns
        .iter()
        .map(|c| (c.header, c.header != "strategy"))
        .collect();
    let mut table = Table::new(&headers);
    for scenario in scenarios(doc) {
        let at = table.rows.len();
        for row in doc.summary.iter().filter(|r| r.scenario == scenario) {
            table
                .rows
                .push(columns.iter().map(|c| c.cell(row)).collect());
        }
        if table.rows.len() > at {
            table.sections.push((at, scenario));
        }
    }
    table
}

/// The summary as a plain-text table for the terminal, at most [`TERMINAL_WIDTH`] characters
/// wide: medians with (min-max) over the repeats, grouped by scenario. Columns that do not fit are
/// left out and named; `summary.md`, `index.html` and `runs.csv` have them all.
pub fn summary_table(doc: &ResultsDoc) -> String {
    if doc.summary.is_empty() {
        return "no summary rows (no runs finished)\n".to_string();
    }
    let repeats = doc.summary[0].repeats;
    let same_repeats = doc.summary.iter().all(|r| r.repeats == repeats);
    let all = term_columns();
    let mut columns: Vec<&TermColumn> = all
        .iter()
        .filter(|c| c.header != "runs" || !same_repeats)
        .collect();
    let mut left_out = Vec::new();
    let mut table = terminal_model(doc, &columns);
    while table.text_width() > TERMINAL_WIDTH {
        let Some(i) = (0..columns.len())
            .filter(|&i| columns[i].drop_rank > 0)
            .max_by_key(|&i| columns[i].drop_rank)
        else {
            break;
        };
        left_out.insert(0, columns.remove(i).header);
        table = terminal_model(doc, &columns);
    }
    let mut out = table.text();
    let by_class: Vec<(String, Table)> = scenarios(doc)
        .into_iter()
        .filter_map(|s| terminal_class_table(doc, &s).map(|t| (s, t)))
        .collect();
    for (scenario, table) in &by_class {
        let _ = write!(out, "\n{scenario}, by class:\n{}", table.text());
    }
    let over = match (same_repeats, repeats) {
        (true, 1) => "1 repeat".to_string(),
        (true, n) => format!("{n} repeats"),
        (false, _) => "the repeats (runs)".to_string(),
    };
    let mut notes = vec![format!(
        "Medians over {over}, (min-max) when they differ; accepted/s = (complete + incomplete) / completion s."
    )];
    if !left_out.is_empty() {
        notes.push(format!(
            "Left out here for width (summary.md, index.html and runs.csv have them): {}.",
            left_out.join(", ")
        ));
    }
    if !by_class.is_empty() {
        notes.push(CLASS_NOTE.to_string());
    }
    notes.extend(limit_note(doc));
    notes.extend(scale_note(doc));
    for note in notes {
        out.push_str(&wrap(&note, TERMINAL_WIDTH, "", 0));
    }
    out
}

/// The hypotheses that apply to the run's cells, one row each; those that do not are counted in
/// [`not_applicable_line`] and listed in [`not_applicable_model`].
pub(crate) fn hypotheses_model(doc: &ResultsDoc) -> Table {
    hypotheses_rows(doc.hypotheses.iter().filter(|h| !lacks_cells(h)))
}

/// The hypotheses that do not apply to the run's cells, one row each.
pub(crate) fn not_applicable_model(doc: &ResultsDoc) -> Table {
    hypotheses_rows(doc.hypotheses.iter().filter(|h| lacks_cells(h)))
}

fn hypotheses_rows<'a>(hypotheses: impl Iterator<Item = &'a HypothesisResult>) -> Table {
    let mut table = Table::new(&[
        ("id", false),
        ("outcome", false),
        ("claim", false),
        ("observed", false),
    ]);
    for h in hypotheses {
        table.rows.push(vec![
            h.id.clone(),
            h.outcome.clone(),
            h.claim.clone(),
            h.observed.clone(),
        ]);
    }
    table
}

/// The budgets measured before the runs (`{ measure = "capacity" }`): one row per scenario and
/// dependency; `None` when there were none.
pub(crate) fn measured_model(doc: &ResultsDoc) -> Option<Table> {
    if doc.measured.is_empty() {
        return None;
    }
    let mut table = Table::new(&[
        ("scenario", false),
        ("dependency", false),
        ("budget", true),
        ("found", false),
        ("service time ms", true),
        ("max rate /s", true),
        ("most in service at the sim", true),
        ("sweep time scale", true),
        ("sweep s", true),
    ]);
    for m in &doc.measured {
        let found = match m.capacity {
            Some(c) if m.basis == "knee" => format!("knee at {c}"),
            _ => format!("no knee up to {}", m.max_concurrent),
        };
        table.rows.push(vec![
            m.scenario.clone(),
            m.dependency.clone(),
            m.max_concurrent.to_string(),
            found,
            m.service_time_ms
                .map_or("-".to_string(), |t| format!("{t:.1}")),
            m.max_rate_per_s
                .map_or("-".to_string(), |r| format!("{r:.1}")),
            m.levels
                .iter()
                .filter_map(|l| l.target_in_flight.as_ref().and_then(|t| t.max))
                .reduce(f64::max)
                .map_or("-".to_string(), |m| m.to_string()),
            m.sweep_time_scale.to_string(),
            format!("{:.1}", m.sweep_s),
        ]);
    }
    Some(table)
}

/// What the measured budgets table shows, in a sentence.
pub(crate) const MEASURED_NOTE: &str = "Before the runs, a capacity sweep of each dependency against the sim (as `inflight capacity` does) set these budgets: the capacity at the knee, or the highest level swept when there was none. Every level is in results.json under `measured`.";

/// `8 pass, 1 fail, 0 skipped (of 9)`; when some do not apply to the run's cells, the counts are
/// of those that do: `22 pass, 2 fail, 0 skipped (of the 24 that apply to this run's cells; 54
/// more do not)`; `none of the 78 apply to this run's cells`.
pub(crate) fn hypotheses_tally(doc: &ResultsDoc) -> String {
    let applicable: Vec<&HypothesisResult> =
        doc.hypotheses.iter().filter(|h| !lacks_cells(h)).collect();
    let count = |o: &str| applicable.iter().filter(|h| h.outcome == o).count();
    match (applicable.len(), doc.hypotheses.len()) {
        (0, 1) => return "the one does not apply to this run's cells".to_string(),
        (0, n) if n > 1 => return format!("none of the {n} apply to this run's cells"),
        _ => {}
    }
    let of = match doc.hypotheses.len() - applicable.len() {
        0 => format!("of {}", applicable.len()),
        more => format!(
            "of the {} that apply to this run's cells; {more} more do not",
            applicable.len()
        ),
    };
    format!(
        "{} pass, {} fail, {} skipped ({of})",
        count("pass"),
        count("fail"),
        count("skipped"),
    )
}

/// The one line that stands for the hypotheses that do not apply to the run's cells; `None` when
/// every one does.
pub(crate) fn not_applicable_line(doc: &ResultsDoc) -> Option<String> {
    let n = doc.hypotheses.iter().filter(|h| lacks_cells(h)).count();
    let cells = if doc.meta.partial {
        "this run lacks (or has not finished) the cells they are about"
    } else {
        "this run lacks the cells they are about"
    };
    (n > 0).then(|| {
        format!(
            "{n} {} not apply: {cells}, or their number of replicas",
            if n == 1 {
                "hypothesis does"
            } else {
                "hypotheses do"
            }
        )
    })
}

/// Whether a hypothesis was skipped because the run lacks its cells, or is about runs split
/// between another number of replicas (documents written before `skip_reason` skipped for no
/// other reason).
pub(crate) fn lacks_cells(h: &HypothesisResult) -> bool {
    h.outcome == "skipped"
        && matches!(
            h.skip_reason.unwrap_or(SkipReason::MissingCells),
            SkipReason::MissingCells | SkipReason::Replicas
        )
}

/// The hypotheses and their outcomes as plain text, at most [`TERMINAL_WIDTH`] characters wide:
/// each one's outcome, id and claim, the observed values below; those that do not apply to the
/// run's cells are counted in one line (index.html lists them all).
pub fn hypotheses_table(doc: &ResultsDoc) -> String {
    if doc.hypotheses.is_empty() {
        return "no hypotheses evaluated\n".to_string();
    }
    let mut out = String::new();
    for h in doc.hypotheses.iter().filter(|h| !lacks_cells(h)) {
        let first = format!("{:<7}  ", h.outcome.to_uppercase());
        let claim = format!("{}: {}", h.id, h.claim);
        out.push_str(&wrap(&claim, TERMINAL_WIDTH, &first, 9));
        out.push_str(&wrap(&h.observed, TERMINAL_WIDTH, &" ".repeat(9), 9));
    }
    let mut notes = Vec::new();
    if let Some(line) = not_applicable_line(doc) {
        notes.push(format!("{line} (index.html and results.json list them)"));
    }
    notes.push(format!(
        "{} (a failed hypothesis is a finding, not an error)",
        hypotheses_tally(doc)
    ));
    for note in notes {
        out.push_str(&wrap(&note, TERMINAL_WIDTH, "", 0));
    }
    out
}

/// The run's settings as (name, value) pairs.
pub(crate) fn meta_lines(doc: &ResultsDoc) -> Vec<(String, String)> {
    let m = &doc.meta;
    let time_scale = match scale_note(doc) {
        Some(_) => format!("{} (times are scaled)", m.time_scale),
        None => m.time_scale.to_string(),
    };
    let enforcement = if cpu_limited(doc) {
        m.enforcement.to_string()
    } else {
        format!(
            "{} (--no-limit: the runner had all the host's CPUs)",
            m.enforcement
        )
    };
    let records = if m.replicas > 1 {
        format!(
            "{}, split between {} replicas (runner processes, each under its own quota)",
            m.records, m.replicas
        )
    } else {
        m.records.to_string()
    };
    vec![
        ("started".into(), started_line(m)),
        ("records per run".into(), records),
        ("repeats".into(), m.repeats.to_string()),
        ("time scale".into(), time_scale),
        ("seed".into(), m.seed.to_string()),
        ("CPU limit enforcement".into(), enforcement),
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

/// One scenario's summary rows, without the scenario column.
pub(crate) fn scenario_table(doc: &ResultsDoc, scenario: &str) -> Table {
    scenario_table_without(doc, scenario, &["scenario"])
}

/// [`scenario_table`] for the page: the repeats column is left out when every cell has the
/// settings' repeats (the settings list them), so that the table fits a 1280 px window.
pub(crate) fn page_scenario_table(doc: &ResultsDoc, scenario: &str) -> Table {
    let same_repeats =
        doc.meta.repeats > 0 && doc.summary.iter().all(|r| r.repeats == doc.meta.repeats);
    if same_repeats {
        scenario_table_without(doc, scenario, &["scenario", "repeats"])
    } else {
        scenario_table(doc, scenario)
    }
}

fn scenario_table_without(doc: &ResultsDoc, scenario: &str, left_out: &[&str]) -> Table {
    let keep = |h: &str| !left_out.contains(&h);
    let all = summary_headers();
    let headers: Vec<(&str, bool)> = all.iter().copied().filter(|(h, _)| keep(h)).collect();
    let mut table = Table::new(&headers);
    for row in doc.summary.iter().filter(|r| r.scenario == scenario) {
        let cells: Vec<String> = all
            .iter()
            .zip(summary_cells(row))
            .filter(|((h, _), _)| keep(h))
            .map(|(_, cell)| cell)
            .collect();
        table.rows.push(cells);
    }
    table
}

/// One scenario's records by priority class, a row per (strategy, CPUs, class); `None` when
/// the scenario's records have no classes.
pub(crate) fn class_table(doc: &ResultsDoc, scenario: &str) -> Option<Table> {
    class_table_with(doc, scenario, true)
}

/// [`class_table`], with or without the CPUs column.
fn class_table_with(doc: &ResultsDoc, scenario: &str, cpus: bool) -> Option<Table> {
    let mut headers = vec![("strategy", false)];
    if cpus {
        headers.push(("CPUs", true));
    }
    headers.extend([
        ("class", false),
        ("records", true),
        ("accepted %", true),
        ("completion p50 s", true),
        ("completion p99 s", true),
    ]);
    let mut table = Table::new(&headers);
    let undefined = |s: Option<crate::results::Spread>| s.map_or("-".to_string(), fmt_spread);
    for row in doc.summary.iter().filter(|r| r.scenario == scenario) {
        for (class, c) in &row.classes {
            let mut cells = vec![strategy_label(&row.strategy)];
            if cpus {
                cells.push(cpus_cell(row.cpus, !row.unlimited));
            }
            cells.extend([
                class.clone(),
                fmt_spread(c.records),
                fmt_pct(c.accepted_fraction),
                undefined(c.completion_p50_s),
                undefined(c.completion_p99_s),
            ]);
            table.rows.push(cells);
        }
    }
    (!table.rows.is_empty()).then_some(table)
}

/// [`class_table`] for the terminal: the completion columns named short, and the CPUs column
/// left out if the table is wider than [`TERMINAL_WIDTH`] with it.
fn terminal_class_table(doc: &ResultsDoc, scenario: &str) -> Option<Table> {
    let short = |mut t: Table| {
        for h in &mut t.headers {
            if let Some(p) = h.strip_prefix("completion ") {
                *h = p.to_string();
            }
        }
        t
    };
    let table = short(class_table_with(doc, scenario, true)?);
    if table.text_width() <= TERMINAL_WIDTH {
        return Some(table);
    }
    class_table_with(doc, scenario, false).map(short)
}

pub(crate) const CLASS_NOTE: &str = "By priority class (drawn per record from the run's seed, the same records for every strategy): records, accepted % = (complete + incomplete) / records, and completion time (p50, p99) from when the runner took a record to when it ended, of the accepted records, by nearest rank; - when a repeat accepted none. Medians over the repeats with (min-max).";

pub(crate) const SPREAD_NOTE: &str = "Values are medians over the repeats with (min-max) when they differ. accepted/s = (complete + incomplete) / completion s. Peak writes offered comes from the sim (requests inside the system of record at once, counting those about to be refused); peak enrichment in flight from the runner.";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{HypothesisResult, Spread};

    #[test]
    fn text_table_aligns_columns() {
        let mut t = Table::new(&[("a", false), ("n", true)]);
        t.rows.push(vec!["xx".into(), "1".into()]);
        t.rows.push(vec!["y".into(), "100".into()]);
        assert_eq!(t.text(), "a     n\n--  ---\nxx    1\ny   100\n");
    }

    #[test]
    fn only_a_numeric_range_moves_under_its_median_on_the_page() {
        let mut t = Table::new(&[("CPUs", true), ("completion s", true), ("claim", false)]);
        t.rows.push(vec![
            "unlimited (2 planned)".into(),
            "2.66 (2.54-2.77)".into(),
            "a (1-2)".into(),
        ]);
        t.rows
            .push(vec!["1".into(), "-0.5 (-1-0)".into(), "x".into()]);
        let html = t.html();
        assert!(
            html.contains("<td class=\"num\">unlimited (2 planned)</td>"),
            "{html}"
        );
        assert!(
            html.contains("<td class=\"num\">2.66 <span class=\"range\">(2.54-2.77)</span></td>"),
            "{html}"
        );
        assert!(html.contains("<td>a (1-2)</td>"), "{html}");
        assert!(
            html.contains("<td class=\"num\">-0.5 <span class=\"range\">(-1-0)</span></td>"),
            "{html}"
        );
        assert!(!is_range("2 planned") && !is_range("-") && !is_range("1-"));
    }

    fn spread(median: f64, min: f64, max: f64) -> Spread {
        Spread { median, min, max }
    }

    /// A summary like the adaptive reference run's: long peer names, wide ranges, 5 repeats.
    fn wide_doc() -> ResultsDoc {
        let strategies = [
            "c1",
            "c2-64",
            "c5",
            "tower-acc-gradient2",
            "tower-resilience-vegas",
        ];
        let scenarios = ["healthy", "slow-write", "slow-enrichment", "degrading"];
        let mut doc = ResultsDoc::default();
        doc.meta.repeats = 5;
        doc.meta.time_scale = 1.0;
        doc.meta.host_cpus = 2;
        doc.meta.enforcement = inflight_cpu::Enforcement::CgroupV1;
        for scenario in scenarios {
            for strategy in strategies {
                for cpus in [0.5, 2.0] {
                    doc.summary.push(SummaryRow {
                        strategy: strategy.into(),
                        scenario: scenario.into(),
                        cpus,
                        repeats: 5,
                        completion_s: spread(1623.4, 1500.12, 1789.98),
                        accepted_per_s: spread(71.07, 69.32, 73.65),
                        complete: spread(132.0, 130.0, 137.0),
                        incomplete: spread(39.0, 33.0, 42.0),
                        rejected: spread(68.0, 63.0, 70.0),
                        failed: spread(12.0, 3.0, 40.0),
                        write_503s: spread(1068.0, 963.0, 1170.0),
                        peak_writes_offered: spread(13.0, 13.0, 14.0),
                        peak_enrichment_in_flight: spread(32.0, 30.0, 32.0),
                        incomplete_fraction: spread(0.195, 0.165, 0.21),
                        ..SummaryRow::default()
                    });
                }
            }
        }
        doc.hypotheses.push(HypothesisResult {
            id: "H16-slow-enrichment-tower-resilience-vegas".into(),
            claim: "In slow-write, C5 accepts at least 97% of the bound records / (time to the first write + records x service time / capacity) = 200 / (0.36 s + 200 x 0.15 s / 6) = 37.31/s, i.e. at least 36.19/s".into(),
            outcome: "fail".into(),
            observed: "median accepted_per_s in slow-write: C5 @unlimited (1 planned) 35.3 / TOWER-RESILIENCE-VEGAS @unlimited (1 planned) 36.2 = 0.975x (>= 1: no)".into(),
            skip_reason: None,
        });
        doc
    }

    #[test]
    fn records_by_class_are_shown_for_a_scenario_with_classes_only() {
        let mut doc = wide_doc();
        assert!(class_table(&doc, "degrading").is_none());
        let class = |p99: Option<Spread>| crate::results::ClassSummary {
            records: spread(160.0, 155.0, 171.0),
            accepted: spread(158.0, 150.0, 171.0),
            accepted_fraction: spread(0.9875, 0.9677, 1.0),
            completion_p50_s: Some(spread(1.6234, 1.50012, 1.78998)),
            completion_p99_s: p99,
        };
        for unlimited in [false, true] {
            let mut row = SummaryRow {
                strategy: "c5-priority-strict".into(),
                scenario: "priority".into(),
                cpus: 1.0,
                unlimited,
                repeats: 5,
                ..SummaryRow::default()
            };
            row.classes
                .insert("batch".into(), class(Some(spread(3.2841, 3.0123, 3.9876))));
            row.classes.insert("interactive".into(), class(None));
            doc.summary.retain(|r| r.scenario != "priority");
            doc.summary.push(row);
            let table = class_table(&doc, "priority").unwrap();
            assert_eq!(table.rows.len(), 2);
            assert_eq!(table.rows[0][2], "batch");
            assert_eq!(table.rows[0][4], "98.8 (96.8-100.0)");
            assert_eq!(table.rows[1][6], "-", "undefined in a repeat");
            let text = summary_table(&doc);
            assert!(text.contains("priority, by class:"), "{text}");
            assert!(text.contains("p99 s"), "{text}");
            assert!(!text.contains("unlimited (1 planned)  batch"), "{text}");
            for line in text.lines() {
                assert!(line.chars().count() <= TERMINAL_WIDTH, "{line}\n{text}");
            }
        }
        let md = crate::report::markdown::summary_md(
            &doc,
            &crate::report::reference::Reference::builtin(),
            &[],
        );
        assert!(md.contains("#### priority by class"), "{md}");
    }

    fn widest(text: &str) -> usize {
        text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
    }

    #[test]
    fn the_terminal_tables_fit_100_columns() {
        let mut doc = wide_doc();
        let full = summary_table_width(&doc);
        assert!(full > TERMINAL_WIDTH, "the test data is wide: {full}");
        for unlimited in [false, true] {
            doc.summary.iter_mut().for_each(|r| r.unlimited = unlimited);
            doc.meta.time_scale = if unlimited { 0.1 } else { 1.0 };
            let table = summary_table(&doc);
            let hyps = hypotheses_table(&doc);
            for text in [&table, &hyps] {
                for line in text.lines() {
                    assert!(
                        line.chars().count() <= TERMINAL_WIDTH,
                        "{} chars: {line}\n{text}",
                        line.chars().count()
                    );
                }
            }
            // Every cell is there, with its median and range of the headline figures.
            assert_eq!(
                table.matches("1623.4 (1500.1-1790)").count(),
                doc.summary.len(),
                "{table}"
            );
            assert!(table.contains("  TOWER-RESILIENCE-VEGAS"), "{table}");
            assert!(table.contains("\nslow-enrichment\n"), "{table}");
            assert!(
                table.contains("Left out here for width") && table.contains("peak enrichment"),
                "{table}"
            );
            assert_eq!(table.contains("unlimited (0.5 planned)"), unlimited);
            assert_eq!(table.contains("Times are scaled by 0.1"), unlimited);
            assert!(hyps.contains("FAIL     H16-slow-enrichment"), "{hyps}");
            assert!(hyps.contains("\n         median accepted_per_s"), "{hyps}");
        }
    }

    /// The width of the summary with every column, as the files have it.
    fn summary_table_width(doc: &ResultsDoc) -> usize {
        let mut table = Table::new(&summary_headers());
        for row in &doc.summary {
            table.rows.push(summary_cells(row));
        }
        widest(&table.text())
    }
}
