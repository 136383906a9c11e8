//! `summary.md`: the settings, a table per scenario, the hypotheses, the reference figures and the
//! figures, in Markdown.

use std::fmt::Write as _;

use super::findings::{findings, findings_lead};
use super::reference::Reference;
use super::svg::Figure;
use super::table::{
    class_table, hypotheses_model, hypotheses_tally, measured_model, meta_lines,
    not_applicable_line, scenario_table, CLASS_NOTE, MEASURED_NOTE, SPREAD_NOTE,
};
use super::{limit_note, partial_note, scale_note, scenarios};
use crate::results::ResultsDoc;

/// `summary.md`: what the run found, settings, a table per scenario, the hypotheses, the reference
/// figures, figures.
pub fn summary_md(doc: &ResultsDoc, reference: &Reference, figures: &[Figure]) -> String {
    let mut out = String::from("# inflight lab run\n\n");
    if let Some(note) = partial_note(doc) {
        let _ = write!(out, "> **{note}**\n\n");
    }
    let found = findings(doc);
    if !found.is_empty() {
        let _ = write!(out, "## What this run found\n\n{}\n\n", findings_lead(doc));
        for sentence in &found {
            let _ = writeln!(out, "- {sentence}");
        }
        out.push('\n');
    }
    for (k, v) in meta_lines(doc) {
        let _ = writeln!(out, "- {k}: {v}");
    }
    out.push_str("\n## Results\n\n");
    out.push_str(SPREAD_NOTE);
    out.push_str("\n\n");
    if let Some(note) = limit_note(doc) {
        let _ = write!(out, "{note}\n\n");
    }
    if doc.summary.is_empty() {
        out.push_str("No summary rows: no run finished.\n\n");
    }
    for scenario in scenarios(doc) {
        let table = scenario_table(doc, &scenario);
        if table.rows.is_empty() {
            continue;
        }
        let _ = write!(out, "### {scenario}\n\n{}\n", table.markdown());
        if let Some(classes) = class_table(doc, &scenario) {
            let _ = write!(
                out,
                "#### {scenario} by class\n\n{CLASS_NOTE}\n\n{}\n",
                classes.markdown()
            );
        }
        // Next to each table, so a table copied elsewhere keeps it in sight.
        if let Some(note) = scale_note(doc) {
            let _ = write!(out, "_{note}_\n\n");
        }
    }
    if let Some(table) = measured_model(doc) {
        let _ = write!(
            out,
            "## Budgets measured before the runs\n\n{MEASURED_NOTE}\n\n{}\n",
            table.markdown()
        );
    }
    let _ = write!(out, "## Hypotheses\n\nPreregistered in `lab/hypotheses.toml`; {}. A failed hypothesis is a finding, not an error.\n\n", hypotheses_tally(doc));
    let table = hypotheses_model(doc);
    if !table.rows.is_empty() {
        out.push_str(&table.markdown());
        out.push('\n');
    }
    if let Some(line) = not_applicable_line(doc) {
        let _ = write!(out, "{line} (index.html and results.json list them).\n\n");
    }
    let table = reference.model(doc);
    if !table.rows.is_empty() {
        let _ = write!(
            out,
            "## Next to the {}\n\n{}\n\n{}\n",
            reference.name,
            reference.note(doc),
            table.markdown()
        );
    }
    out.push_str("## Figures\n\n");
    for f in figures {
        let _ = write!(out, "![{}]({})\n\n{}\n\n", f.title, f.file, f.caption);
    }
    out.push_str("Every run is in `runs.csv` and `results.json`.\n");
    out
}
