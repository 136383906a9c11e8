//! The report opens with what the run found, folds the hypotheses that do not apply to its cells,
//! and lays its tables out within a 1280 px window; the default matrix is what the hypotheses the
//! README cites are about.

use inflight_lab::hypothesis;
use inflight_lab::report;
use inflight_lab::results::{ResultsDoc, RunMeta, RunResult};
use inflight_lab::run::Matrix;

use crate::support::fixture;

/// One repeat of every cell of the default matrix, made-up figures that add up, with the built-in
/// hypotheses evaluated.
fn default_matrix_doc() -> ResultsDoc {
    let runs = Matrix::builtin()
        .default_cells()
        .into_iter()
        .map(|cell| RunResult {
            strategy: cell.strategy,
            scenario: cell.scenario,
            cpus: cell.cpus,
            repeat: 1,
            records: 200,
            complete: 200,
            completion_s: 4.0,
            accepted_per_s: 50.0,
            replicas: 1,
            ..RunResult::default()
        })
        .collect();
    let meta = RunMeta {
        records: 200,
        repeats: 1,
        time_scale: 1.0,
        enforcement: inflight_cpu::Enforcement::CgroupV2,
        ..RunMeta::default()
    };
    let mut doc = ResultsDoc::from_runs(meta, runs);
    doc.hypotheses = hypothesis::evaluate(&hypothesis::builtin(), &doc);
    doc
}

fn write(doc: &ResultsDoc) -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    report::write_report(doc, dir.path()).unwrap();
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    let (html, md) = (read("index.html"), read("summary.md"));
    (dir, html, md)
}

/// `s` as the page escapes text.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

#[test]
fn the_page_the_summary_and_the_terminal_open_with_the_findings() {
    let doc = fixture();
    let found = report::findings(&doc);
    assert!(found.len() >= 3, "{found:#?}");
    // The fixture's C4 drew no 503 in slow-write, C2 and C3 did; C1 ran at 1 and 2 CPUs.
    assert!(
        found[0].starts_with("The CPU-derived default starves"),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|s| s.starts_with("In slow-write, C4 protects the system of record")),
        "{found:#?}"
    );
    assert!(found.last().unwrap().contains("failed: H7"), "{found:#?}");
    assert!(!found.iter().any(|s| s.contains("C5")), "C5 did not run");

    let (_dir, html, md) = write(&doc);
    let body = html.split("<h1>inflight lab run</h1>\n").nth(1).unwrap();
    assert!(
        body.starts_with("<section class=\"findings\">\n<h2>What this run found</h2>\n"),
        "{body}"
    );
    let items: Vec<&str> = body
        .split("</section>")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("<li>")?.strip_suffix("</li>"))
        .collect();
    let expected: Vec<String> = found.iter().map(|s| esc(s)).collect();
    assert_eq!(items, expected);

    let md_body = md.strip_prefix("# inflight lab run\n\n").unwrap();
    assert!(md_body.starts_with("## What this run found\n\n"), "{md}");
    for sentence in &found {
        assert!(md.contains(&format!("\n- {sentence}\n")), "{sentence}");
    }

    let terminal = report::terminal_summary(&doc);
    assert!(terminal.starts_with("What this run found\n"), "{terminal}");
    let first_words: String = found[0]
        .split_whitespace()
        .take(6)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        terminal.contains(&format!("\n- {first_words}")),
        "{terminal}"
    );
    assert!(
        terminal.ends_with(&report::summary_table(&doc)),
        "{terminal}"
    );
    for line in terminal.lines() {
        assert!(line.chars().count() <= report::TERMINAL_WIDTH, "{line}");
    }
}

#[test]
fn a_partial_page_says_so_before_its_findings() {
    let mut doc = fixture();
    doc.meta.partial = true;
    doc.meta.runs_planned = doc.runs.len() + 5;
    let (_dir, html, _md) = write(&doc);
    let body = html.split("<h1>inflight lab run</h1>\n").nth(1).unwrap();
    assert!(
        body.starts_with("<p class=\"partial\">Partial run:"),
        "{body}"
    );
    let after = body.split_once("</p>\n").unwrap().1;
    assert!(after.starts_with("<section class=\"findings\">"), "{after}");
    assert!(
        after.contains(&format!(
            "from the {} of {} planned runs that finished",
            doc.runs.len(),
            doc.meta.runs_planned
        )),
        "{after}"
    );
}

/// The ids the built-in hypotheses evaluate (pass, fail, or skipped for want of a CPU limit) in
/// a run of the default matrix: those the README's "preregistered hypotheses" sentence counts.
const APPLY_TO_THE_DEFAULT_MATRIX: &[&str] = &[
    "H1",
    "H2",
    "H3",
    "H4",
    "H5",
    "H6",
    "H7",
    "H8",
    "H9",
    "H10-healthy-c2",
    "H10-healthy-c3",
    "H10-healthy-c4",
    "H11-healthy",
    "H10-slow-write-c2",
    "H10-slow-write-c3",
    "H10-slow-write-c4",
    "H11-slow-write",
    "H10-slow-enrichment-c2",
    "H10-slow-enrichment-c3",
    "H10-slow-enrichment-c4",
    "H11-slow-enrichment",
    "H13",
    "H14-slow-write",
    "H17",
];

#[test]
fn the_default_matrix_is_what_its_hypotheses_are_about() {
    let doc = default_matrix_doc();
    let applying: Vec<&str> = doc
        .hypotheses
        .iter()
        .filter(|h| h.outcome != "skipped")
        .map(|h| h.id.as_str())
        .collect();
    assert_eq!(applying, APPLY_TO_THE_DEFAULT_MATRIX);
    let total = hypothesis::builtin().len();
    let tally = report::hypotheses_table(&doc);
    let (pass, fail) = (
        doc.hypotheses
            .iter()
            .filter(|h| h.outcome == "pass")
            .count(),
        doc.hypotheses
            .iter()
            .filter(|h| h.outcome == "fail")
            .count(),
    );
    let expected = format!(
        "{pass} pass, {fail} fail, 0 skipped (of the {} that apply to this run's cells; {} more do not)",
        applying.len(),
        total - applying.len()
    );
    assert!(tally.contains(&expected), "{tally}");
}

#[test]
fn hypotheses_that_do_not_apply_are_folded_into_one_line() {
    let doc = default_matrix_doc();
    let applying = APPLY_TO_THE_DEFAULT_MATRIX.len();
    let folded = doc.hypotheses.len() - applying;
    assert!(folded > 40, "most are about other cells: {folded}");
    let line = format!(
        "{folded} hypotheses do not apply: this run lacks the cells they are about, or their number of replicas"
    );
    let (_dir, html, md) = write(&doc);

    // The page: a row per hypothesis that applies, the others behind one line that opens.
    let section = html.split("<h2>Hypotheses</h2>").nth(1).unwrap();
    let section = section.split("<h2>").next().unwrap();
    let (shown, hidden) = section.split_once("<details>").unwrap();
    assert_eq!(shown.matches("<tr>").count(), 1 + applying, "header + rows");
    assert!(
        hidden.starts_with(&format!("\n<summary>{line}</summary>\n")),
        "{hidden}"
    );
    assert_eq!(hidden.matches("<tr>").count(), 1 + folded);
    for id in APPLY_TO_THE_DEFAULT_MATRIX {
        assert!(shown.contains(&format!("<td>{id}</td>")), "{id}");
    }
    assert!(!shown.contains("<td>H12</td>") && hidden.contains("<td>H12</td>"));

    // Still one well-formed document, the folded list inside it.
    let mut xml = html.clone();
    let mut from = 0;
    while let Some(at) = xml[from..].find("<meta ") {
        let end = from + at + xml[from + at..].find('>').unwrap();
        xml.insert(end, '/');
        from = end;
    }
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let parsed = roxmltree::Document::parse_with_options(&xml, options).unwrap();
    let details = parsed
        .descendants()
        .find(|n| n.has_tag_name("details"))
        .unwrap();
    assert_eq!(
        details
            .descendants()
            .filter(|n| n.has_tag_name("tr"))
            .count(),
        1 + folded
    );

    // summary.md and the terminal: the line, no rows.
    let md_section = md.split("## Hypotheses").nth(1).unwrap();
    let md_section = md_section.split("\n## ").next().unwrap();
    assert_eq!(
        md_section.matches("\n| H").count(),
        applying,
        "{md_section}"
    );
    assert!(
        md_section.contains(&format!("{line} (index.html and results.json list them).")),
        "{md_section}"
    );
    let terminal = report::hypotheses_table(&doc);
    assert!(!terminal.contains("H12:"), "{terminal}");
    assert!(
        terminal.contains(&format!("{folded} hypotheses do not apply")),
        "{terminal}"
    );
}

/// The page's tables laid out at 1280 px, as Debian's chromium does it: measured on four reports
/// (`lab run --quick` runs and two kept runs rebuilt), the 13-column results tables took 8.5-8.9
/// px per character of each column's widest unbreakable piece, plus 15.4 px per column (padding
/// and border), at their narrowest.
const PX_PER_CHAR: f64 = 9.0;
const PX_PER_COLUMN: f64 = 16.0;
/// What a 1280 px window leaves a table: 1217 px measured (the body's padding and a scrollbar).
const ROOM_AT_1280: f64 = 1217.0;

/// The selectors (`td.num`, `.range`, ...) the page's style keeps on one line.
fn nowrap_selectors(html: &str) -> Vec<String> {
    let style = html
        .split("<style>")
        .nth(1)
        .unwrap()
        .split("</style>")
        .next()
        .unwrap();
    let mut out = Vec::new();
    for rule in style.split('}') {
        let Some((selectors, body)) = rule.rsplit_once('{') else {
            continue;
        };
        if body.contains("white-space:nowrap") {
            // Inside an @media block the selector list follows the block's own `{`.
            out.extend(selectors.split(',').map(|s| s.trim().to_string()));
        }
    }
    out
}

/// The narrowest width of each table in `section` of the page `html`, in characters and columns:
/// each column as wide as its widest piece that cannot break (a word, or a whole cell or range the
/// page's style keeps on one line; a range's smaller type counts 0.9).
fn narrowest_tables(html: &str, section: &str) -> Vec<(usize, f64)> {
    let nowrap = nowrap_selectors(html);
    let kept = |s: &str| nowrap.iter().any(|n| n == s);
    let unescape = |s: &str| {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    };
    let words = |s: &str| -> f64 {
        s.split(|c: char| c.is_whitespace())
            .flat_map(|w| w.split_inclusive('-'))
            .map(|w| w.chars().count() as f64)
            .fold(0.0, f64::max)
    };
    let mut out = Vec::new();
    for table in section.split("<table>").skip(1) {
        let table = table.split("</table>").next().unwrap();
        let mut widths: Vec<f64> = Vec::new();
        for row in table.split("<tr>").skip(1) {
            let row = row.split("</tr>").next().unwrap();
            for (i, cell) in row.split("<t").skip(1).enumerate() {
                let (tag, rest) = cell.split_at(1);
                let (attrs, content) = rest.split_once('>').unwrap();
                let content = content.rsplit_once("</t").unwrap().0;
                let class = attrs
                    .split("class=\"")
                    .nth(1)
                    .map(|c| c.split('"').next().unwrap());
                let selector = match class {
                    Some(c) => format!("t{tag}.{c}"),
                    None => format!("t{tag}"),
                };
                let width = match content.split_once(" <span class=\"range\">") {
                    _ if kept(&selector) || kept(&format!("t{tag}")) => unescape(
                        &content
                            .replace(" <span class=\"range\">", " ")
                            .replace("</span>", ""),
                    )
                    .chars()
                    .count()
                        as f64,
                    Some((median, range)) => {
                        let range = unescape(range.trim_end_matches("</span>"));
                        let range = if kept(".range") {
                            range.chars().count() as f64
                        } else {
                            words(&range)
                        };
                        words(&unescape(median)).max(0.9 * range)
                    }
                    None => words(&unescape(content)),
                };
                if widths.len() <= i {
                    widths.resize(i + 1, 0.0);
                }
                widths[i] = widths[i].max(width);
            }
        }
        out.push((widths.len(), widths.iter().sum()));
    }
    out
}

/// A summary of five repeats with the README's widest figures and the peers' long names.
fn wide_doc() -> ResultsDoc {
    use inflight_lab::results::{Spread, SummaryRow};
    let s = |median: f64, min: f64, max: f64| Spread { median, min, max };
    let mut doc = fixture();
    doc.meta.repeats = 5;
    doc.summary.clear();
    for scenario in ["healthy", "slow-write", "slow-enrichment", "degrading"] {
        for strategy in [
            "c2",
            "c4-64",
            "c5",
            "tower-acc-gradient2",
            "tower-resilience-aimd",
        ] {
            doc.summary.push(SummaryRow {
                strategy: strategy.into(),
                scenario: scenario.into(),
                cpus: 1.0,
                repeats: 5,
                completion_s: s(81.66, 80.75, 82.52),
                accepted_per_s: s(13.48, 12.71, 13.67),
                complete: s(132.0, 130.0, 137.0),
                incomplete: s(39.0, 33.0, 42.0),
                rejected: s(141.0, 120.0, 144.0),
                failed: s(12.0, 3.0, 40.0),
                write_503s: s(141.0, 120.0, 144.0),
                peak_writes_offered: s(13.0, 13.0, 14.0),
                peak_enrichment_in_flight: s(38.5, 37.0, 40.0),
                incomplete_fraction: s(0.195, 0.165, 0.21),
                ..SummaryRow::default()
            });
        }
    }
    doc
}

#[test]
fn the_results_tables_fit_a_1280_px_window() {
    for (name, doc) in [("fixture", fixture()), ("wide", wide_doc())] {
        let (_dir, html, _md) = write(&doc);
        let results = html.split("<h2>Results</h2>").nth(1).unwrap();
        let results = results.split("<h2>").next().unwrap();
        let tables = narrowest_tables(&html, results);
        assert!(!tables.is_empty(), "{name}");
        for (columns, chars) in tables {
            assert!(columns <= 13, "{name}: {columns} columns");
            let px = chars * PX_PER_CHAR + columns as f64 * PX_PER_COLUMN;
            assert!(
                px <= ROOM_AT_1280,
                "{name}: a table of {columns} columns needs {px:.0} px at its narrowest"
            );
        }
        // No header or cell is kept on one line whole: only a range is.
        let nowrap = nowrap_selectors(&html);
        assert!(nowrap.contains(&".range".to_string()), "{nowrap:?}");
        assert!(
            !nowrap
                .iter()
                .any(|s| s.starts_with("td") || s.starts_with("th")),
            "{nowrap:?}"
        );
    }
}
