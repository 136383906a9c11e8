//! `index.html`: the whole report in one file, figures inlined, opens from disk.

use std::fmt::Write as _;

use super::reference::Reference;
use super::svg::Figure;
use super::table::{hypotheses_model, hypotheses_tally, meta_lines, scenario_table, SPREAD_NOTE};
use super::{esc_html, partial_note, scenarios};
use crate::results::ResultsDoc;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}\
th,td{border:1px solid #ccc;padding:0.25em 0.5em;vertical-align:top}\
th{background:#f3f3f3}\
td.pass{background:#dff0d8;font-weight:bold}td.fail{background:#f2dede;font-weight:bold}td.skipped{background:#eee}\
figure{margin:1em 0 2em}figcaption{color:#555;font-size:0.9em;max-width:780px}\
dl{display:grid;grid-template-columns:max-content auto;gap:0.2em 1em}dt{font-weight:bold}dd{margin:0}\
.note{color:#555;font-size:0.9em;max-width:900px}\
.partial{background:#fcf8e3;border:1px solid #e0c36c;padding:0.5em 0.75em;max-width:900px}";

/// `index.html`: the whole report in one file, figures inlined, opens from disk.
pub fn index_html(doc: &ResultsDoc, reference: &Reference, figures: &[Figure]) -> String {
    let mut out = String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>inflight lab run</title>\n<style>");
    out.push_str(STYLE);
    out.push_str("</style>\n</head>\n<body>\n<h1>inflight lab run</h1>\n");
    if let Some(note) = partial_note(doc) {
        // The command in the note reads as code; everything else is plain escaped text.
        let note = esc_html(&note)
            .replacen('`', "<code>", 1)
            .replacen('`', "</code>", 1);
        let _ = writeln!(out, "<p class=\"partial\">{note}</p>");
    }
    out.push_str("<dl>\n");
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
    let table = reference.model(doc);
    if !table.rows.is_empty() {
        let _ = write!(
            out,
            "<h2>Next to the {}</h2>\n<p class=\"note\">{}</p>\n{}",
            esc_html(&reference.name),
            esc_html(&reference.note(doc)),
            table.html()
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
