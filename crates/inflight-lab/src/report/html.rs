//! `index.html`: the whole report in one file, figures inlined, opens from disk.

use std::fmt::Write as _;

use super::findings::{findings, findings_lead};
use super::reference::Reference;
use super::svg::Figure;
use super::table::{
    class_table, hypotheses_model, hypotheses_tally, measured_model, meta_lines,
    not_applicable_line, not_applicable_model, page_scenario_table, CLASS_NOTE, MEASURED_NOTE,
    SPREAD_NOTE,
};
use super::{esc_html, limit_note, partial_note, scale_note, scenarios};
use crate::results::ResultsDoc;

/// The page's style: the full width of the window for tables and figures, text in lines short
/// enough to read. Headers wrap, and a numeric cell's range goes under its median when the column
/// is narrow (never broken itself), so the results tables fit a 1280 px window; on a narrower one
/// they scroll sideways inside their block, and figures shrink.
const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em auto;padding:0 1.5em;color:#222;line-height:1.4}\
h1,h2,h3{line-height:1.2}\
.scroll{overflow-x:auto;max-width:100%;margin:0.5em 0 1.5em}\
table{border-collapse:collapse;font-size:0.9em}\
th,td{border:1px solid #ccc;padding:0.25em 0.5em;vertical-align:top}\
th{background:#f3f3f3}\
th.num,td.num{text-align:right}.range{white-space:nowrap;color:#555;font-size:0.9em}\
td.pass{background:#dff0d8;font-weight:bold}td.fail{background:#f2dede;font-weight:bold}td.skipped{background:#eee}\
figure{margin:1em 0 2em}figure svg{max-width:100%;height:auto}figcaption{color:#555;font-size:0.9em;max-width:60em}\
dl{display:grid;grid-template-columns:max-content auto;gap:0.2em 1em}dt{font-weight:bold}dd{margin:0}\
p{max-width:60em}.note{color:#555;font-size:0.9em}\
@media (max-width:700px){body{margin:0.5em auto;padding:0 0.6em}table{font-size:0.8em}\
th,td{padding:0.2em 0.35em}dl{grid-template-columns:1fr;gap:0}dd{margin:0 0 0.4em}}\
details{margin:0.5em 0 1.5em}summary{cursor:pointer;color:#555}\
.partial{background:#fcf8e3;border:1px solid #e0c36c;padding:0.5em 0.75em;max-width:60em}";

/// `index.html`: the whole report in one file, figures inlined, opens from disk.
pub fn index_html(doc: &ResultsDoc, reference: &Reference, figures: &[Figure]) -> String {
    let mut out = String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>inflight lab run</title>\n<style>");
    out.push_str(STYLE);
    out.push_str("</style>\n</head>\n<body>\n<h1>inflight lab run</h1>\n");
    if let Some(note) = partial_note(doc) {
        // The command in the note reads as code; everything else is plain escaped text.
        let note = esc_html(&note)
            .replacen('`', "<code>", 1)
            .replacen('`', "</code>", 1);
        let _ = writeln!(out, "<p class=\"partial\">{note}</p>");
    }
    let found = findings(doc);
    if !found.is_empty() {
        let _ = writeln!(
            out,
            "<section class=\"findings\">\n<h2>What this run found</h2>\n<p class=\"note\">{}</p>\n<ul>",
            esc_html(&findings_lead(doc))
        );
        for sentence in &found {
            let _ = writeln!(out, "<li>{}</li>", esc_html(sentence));
        }
        out.push_str("</ul>\n</section>\n");
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
    if let Some(note) = limit_note(doc) {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", esc_html(&note));
    }
    if doc.summary.is_empty() {
        out.push_str("<p>No summary rows: no run finished.</p>\n");
    }
    let scale = scale_note(doc)
        .map(|note| format!("<p class=\"note\">{}</p>\n", esc_html(&note)))
        .unwrap_or_default();
    for scenario in scenarios(doc) {
        let table = page_scenario_table(doc, &scenario);
        if table.rows.is_empty() {
            continue;
        }
        let _ = write!(
            out,
            "<h3>{}</h3>\n{}{scale}",
            esc_html(&scenario),
            table.html()
        );
        if let Some(classes) = class_table(doc, &scenario) {
            let _ = write!(
                out,
                "<h4>{} by class</h4>\n<p class=\"note\">{}</p>\n{}",
                esc_html(&scenario),
                esc_html(CLASS_NOTE),
                classes.html()
            );
        }
    }
    if let Some(table) = measured_model(doc) {
        let _ = write!(
            out,
            "<h2>Budgets measured before the runs</h2>\n<p class=\"note\">{}</p>\n{}",
            esc_html(MEASURED_NOTE),
            table.html()
        );
    }
    let _ = writeln!(
        out,
        "<h2>Hypotheses</h2>\n<p class=\"note\">Preregistered in <code>lab/hypotheses.toml</code>; {}. A failed hypothesis is a finding, not an error.</p>",
        esc_html(&hypotheses_tally(doc))
    );
    let table = hypotheses_model(doc);
    if !table.rows.is_empty() {
        out.push_str(&table.html());
    }
    // Folded into one line, open on a click: in a run of a few cells most are about others.
    if let Some(line) = not_applicable_line(doc) {
        let _ = write!(
            out,
            "<details>\n<summary>{}</summary>\n{}</details>\n",
            esc_html(&line),
            not_applicable_model(doc).html()
        );
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
