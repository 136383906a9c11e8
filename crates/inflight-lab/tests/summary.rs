//! The report opens with what the run found, folds the hypotheses that do not apply to its cells,
//! and lays its tables out within a 1280 px window; the default matrix is what the hypotheses the
//! README cites are about.

use std::path::PathBuf;

use inflight_lab::hypothesis;
use inflight_lab::report;
use inflight_lab::results::{ResultsDoc, RunMeta, RunResult};
use inflight_lab::run::Matrix;

/// The `results.json` of a real `inflight lab run --quick --repeats 2 --records 100` (C1-C4).
fn fixture() -> ResultsDoc {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/results-quick.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

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
