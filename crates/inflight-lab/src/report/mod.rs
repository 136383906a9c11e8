//! The report of a lab run: `runs.csv`, `summary.md`, SVG figures and a self-contained `index.html`,
//! plus the plain-text tables the terminal shows.
//!
//! Everything here is drawn from a [`ResultsDoc`] and, for the comparison with an earlier
//! experiment, a [`Reference`]; nothing is measured or invented here.
//!
//! - [`findings`](mod@findings): what the run found, in sentences built from its medians; the
//!   terminal, `summary.md` and `index.html` open with them.
//! - [`table`]: one table model rendered as plain text, Markdown or HTML, and the tables of a run.
//! - [`csv`]: every run on one line, `runs.csv`.
//! - [`svg`]: the figures, hand-written SVG so the report needs no plotting library.
//! - [`markdown`]: the report in Markdown, `summary.md`.
//! - [`html`]: the report in one page, `index.html`.
//! - [`reference`](mod@reference): the earlier experiment's figures (`lab/reference.toml`) next to a run's.
//! - [`rebuild`](mod@rebuild): a stored `results.json` checked, its summary and hypotheses computed
//!   again from its runs (`inflight lab report`).

use std::path::Path;

use anyhow::Context;

use crate::hypothesis::fmt_num;
use crate::results::{ResultsDoc, Spread};

pub mod csv;
pub mod findings;
pub mod html;
pub mod markdown;
pub mod rebuild;
pub mod reference;
pub mod svg;
pub mod table;

pub use self::csv::{runs_csv, CSV_COLUMNS};
pub use self::findings::findings;
pub use self::html::index_html;
pub use self::markdown::summary_md;
pub use self::rebuild::{rebuild, RebuildError, Rebuilt};
pub use self::reference::{Reference, ReferenceError, ReferenceFigure};
pub use self::svg::{figures, Figure};
pub use self::table::{hypotheses_table, summary_table, TERMINAL_WIDTH};

/// The files [`write_report`] writes besides the figures.
pub const RUNS_CSV: &str = "runs.csv";
pub const SUMMARY_MD: &str = "summary.md";
pub const INDEX_HTML: &str = "index.html";

/// Writes `runs.csv`, `summary.md`, the SVG figures and `index.html` into `dir` (created if needed),
/// comparing with the built-in reference figures.
pub fn write_report(doc: &ResultsDoc, dir: &Path) -> anyhow::Result<()> {
    write_report_with(doc, &Reference::builtin(), dir)
}

/// [`write_report`] comparing with `reference`.
pub fn write_report_with(
    doc: &ResultsDoc,
    reference: &Reference,
    dir: &Path,
) -> anyhow::Result<()> {
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
    write(SUMMARY_MD, &summary_md(doc, reference, &figures))?;
    write(INDEX_HTML, &index_html(doc, reference, &figures))?;
    Ok(())
}

/// What the terminal shows first: the findings ([`findings()`]), then the [`summary_table`].
pub fn terminal_summary(doc: &ResultsDoc) -> String {
    let found = findings::findings_text(doc, TERMINAL_WIDTH);
    if found.is_empty() {
        summary_table(doc)
    } else {
        format!("{found}\n{}", summary_table(doc))
    }
}

/// What a report of a partial document says first: how many runs finished of how many, and how to
/// run the rest; `None` for a complete document.
pub fn partial_note(doc: &ResultsDoc) -> Option<String> {
    let m = &doc.meta;
    m.partial.then(|| {
        format!(
            "Partial run: {} of {} planned runs finished before the lab stopped (interrupted or killed). Cells show the repeats that finished; hypotheses about cells that lack repeats are skipped. `inflight lab run --resume DIR`, with this folder as DIR, runs the rest with the same seeds and writes the complete report.",
            doc.runs.len(),
            m.runs_planned
        )
    })
}

/// `83.6 (82.9-84.1)`, or just `83.6` when every repeat gave the same value.
pub fn fmt_spread(s: Spread) -> String {
    fmt_spread_with(s, fmt_num)
}

/// A fraction's spread as percentages: `20.0 (18.5-21.0)`.
pub(crate) fn fmt_pct(s: Spread) -> String {
    fmt_spread_with(s, |v| format!("{:.1}", v * 100.0))
}

/// `median (min-max)` with each number written by `fmt`, or just the median when min and max agree.
pub(crate) fn fmt_spread_with(s: Spread, fmt: impl Fn(f64) -> String) -> String {
    if (s.max - s.min).abs() < 1e-9 {
        fmt(s.median)
    } else {
        format!("{} ({}-{})", fmt(s.median), fmt(s.min), fmt(s.max))
    }
}

pub(crate) fn strategy_label(strategy: &str) -> String {
    strategy.to_uppercase()
}

/// Whether the document's runs had a CPU quota: false when they ran without one
/// (`lab run --no-limit`), as their summary rows say.
pub(crate) fn cpu_limited(doc: &ResultsDoc) -> bool {
    !doc.summary.iter().any(|r| r.unlimited) && !doc.runs.iter().any(|r| r.unlimited)
}

/// What the CPU counts mean when no quota was enforced; `None` when one was.
pub(crate) fn limit_note(doc: &ResultsDoc) -> Option<String> {
    if cpu_limited(doc) {
        return None;
    }
    let host = match doc.meta.host_cpus {
        0 => "all the host's CPUs".to_string(),
        1 => "the host's 1 CPU".to_string(),
        n => format!("all {n} of the host's CPUs"),
    };
    Some(format!(
        "No CPU limit was enforced (--no-limit): every run had {host}, so the CPU counts are only those planned, and hypotheses that compare CPU counts are skipped."
    ))
}

/// That times are scaled, and by how much, when the run's time scale is not 1; `None` when it is
/// (or is unknown).
pub(crate) fn scale_note(doc: &ResultsDoc) -> Option<String> {
    let scale = doc.meta.time_scale;
    if !(scale.is_finite() && scale > 0.0) || (scale - 1.0).abs() < 1e-9 {
        return None;
    }
    Some(format!(
        "Times are scaled by {s} (--time-scale {s}): every latency, hang and timeout lasted {s}x as long as at full time, so seconds here are about {s}x and rates about {r}x what they would be at time scale 1.",
        s = fmt_num(scale),
        r = fmt_num(1.0 / scale)
    ))
}

/// `text` broken into lines of at most `width` characters at spaces, the first line starting with
/// `first` and the others with `indent` spaces. A word longer than a line is not broken.
pub(crate) fn wrap(text: &str, width: usize, first: &str, indent: usize) -> String {
    let mut out = String::new();
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        let len = line.chars().count();
        if !empty && len + 1 + word.chars().count() > width {
            out.push_str(line.trim_end());
            out.push('\n');
            line = " ".repeat(indent);
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

/// Scenarios in order of first appearance (summary first, then runs).
pub(crate) fn scenarios(doc: &ResultsDoc) -> Vec<String> {
    first_appearances(
        doc.summary
            .iter()
            .map(|r| &r.scenario)
            .chain(doc.runs.iter().map(|r| &r.scenario)),
    )
}

/// Strategies in order of first appearance.
pub(crate) fn strategies(doc: &ResultsDoc) -> Vec<String> {
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

/// `s` with `&`, `<`, `>` and quotes escaped, for XML text and attribute values.
pub(crate) fn esc_xml(s: &str) -> String {
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

/// `s` escaped for HTML text and attribute values.
pub(crate) fn esc_html(s: &str) -> String {
    esc_xml(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_wrapped_with_a_hanging_indent() {
        let text = "one two three four five six";
        assert_eq!(
            wrap(text, 12, "- ", 2),
            "- one two\n  three four\n  five six\n"
        );
        assert_eq!(
            wrap("averyveryverylongword x", 8, "", 0),
            "averyveryverylongword\nx\n"
        );
    }

    #[test]
    fn the_time_scale_is_noted_only_when_it_is_not_1() {
        let mut doc = ResultsDoc::default();
        doc.meta.time_scale = 1.0;
        assert_eq!(scale_note(&doc), None);
        doc.meta.time_scale = 0.0;
        assert_eq!(scale_note(&doc), None, "unknown scale");
        doc.meta.time_scale = 0.1;
        let note = scale_note(&doc).unwrap();
        assert!(note.starts_with("Times are scaled by 0.1 "), "{note}");
        assert!(note.contains("rates about 10x"), "{note}");
    }

    #[test]
    fn a_run_split_between_replicas_says_so_in_its_settings() {
        let mut doc = ResultsDoc::default();
        doc.meta.records = 200;
        let md = summary_md(&doc, &Reference::builtin(), &[]);
        assert!(md.contains("- records per run: 200\n"), "{md}");
        doc.meta.replicas = 3;
        let md = summary_md(&doc, &Reference::builtin(), &[]);
        assert!(
            md.contains("- records per run: 200, split between 3 replicas"),
            "{md}"
        );
    }

    #[test]
    fn measured_budgets_are_listed_on_the_page_and_in_the_summary() {
        let mut doc = ResultsDoc::default();
        let md = summary_md(&doc, &Reference::builtin(), &[]);
        assert!(!md.contains("Budgets measured"), "{md}");
        doc.measured.push(crate::results::MeasuredBudget {
            scenario: "slow-write".into(),
            dependency: "records".into(),
            max_concurrent: 6,
            basis: "knee".into(),
            capacity: Some(6),
            service_time_ms: Some(152.34),
            max_rate_per_s: Some(39.2),
            conclusion: "capacity 6 calls in flight".into(),
            levels: Vec::new(),
            sweep_time_scale: 1.0,
            sweep_s: 60.1,
        });
        let md = summary_md(&doc, &Reference::builtin(), &[]);
        assert!(md.contains("## Budgets measured before the runs"), "{md}");
        assert!(
            md.contains("| slow-write | records | 6 | knee at 6 | 152.3 | 39.2 | - | 1 | 60.1 |"),
            "{md}"
        );
        let page = index_html(&doc, &Reference::builtin(), &[]);
        assert!(page.contains("<h2>Budgets measured before the runs</h2>"));
        assert!(page.contains("knee at 6"));
    }

    #[test]
    fn a_partial_document_is_marked_on_the_page_and_in_the_summary() {
        let mut doc = ResultsDoc::default();
        assert_eq!(partial_note(&doc), None);
        let page = index_html(&doc, &Reference::builtin(), &[]);
        assert!(!page.contains("class=\"partial\""));
        doc.meta.partial = true;
        doc.runs = (1..=11)
            .map(|i| crate::results::sample_run("c4", "healthy", 1.0, i, 1.0))
            .collect();
        doc.meta.runs_finished = 11;
        doc.meta.runs_planned = 33;
        let note = partial_note(&doc).unwrap();
        assert!(
            note.starts_with("Partial run: 11 of 33 planned runs finished"),
            "{note}"
        );
        let page = index_html(&doc, &Reference::builtin(), &[]);
        assert!(
            page.contains("<p class=\"partial\">Partial run: 11 of 33")
                && page.contains("<code>inflight lab run --resume DIR</code>"),
            "{page}"
        );
        assert!(page.contains("11 of 33 planned (partial)"), "runs line");
        let md = summary_md(&doc, &Reference::builtin(), &[]);
        assert!(md.contains("> **Partial run: 11 of 33"), "{md}");
    }

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
}
