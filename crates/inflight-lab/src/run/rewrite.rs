//! `inflight lab report`: the report of a results document written again, from its runs.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::out_dir::{write_outputs, RESULTS_JSON};
use crate::files::LabFiles;
use crate::results::ResultsDoc;

/// A report written again ([`rewrite_report`]).
#[derive(Debug)]
pub struct Rewritten {
    /// The document rebuilt from its runs, as written with the report.
    pub doc: ResultsDoc,
    /// What differs from the document as it was stored, in words (see [`crate::report::rebuild()`]).
    pub changes: Vec<String>,
    /// The folder the report went into.
    pub dir: PathBuf,
}

/// Reads `results` (a `results.json`, or the folder holding one), rebuilds it from its runs with
/// the hypotheses and reference figures of the lab folder (`lab_dir`, else the one `lab run`
/// would find, else the built-in copies), and writes the report and the rebuilt document into
/// `out` (default: the folder holding the document).
///
/// # Errors
///
/// If the document cannot be read, is not a results document, or its runs do not hold up; if
/// the lab files cannot be used; or if the report cannot be written.
pub fn rewrite_report(
    results: &Path,
    out: Option<&Path>,
    lab_dir: Option<&Path>,
) -> anyhow::Result<Rewritten> {
    let path = if results.is_dir() {
        results.join(RESULTS_JSON)
    } else {
        results.to_path_buf()
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let stored: ResultsDoc = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a lab results document", path.display()))?;
    let files = match lab_dir {
        Some(dir) => LabFiles::find(Some(dir))?,
        None => LabFiles::find(None).unwrap_or_else(|_| LabFiles::builtin()),
    };
    let hypotheses = files.hypotheses()?;
    let reference = files.reference()?;
    let rebuilt = crate::report::rebuild(&stored, &hypotheses)
        .with_context(|| format!("cannot report {}", path.display()))?;
    let dir = match out {
        Some(dir) => dir.to_path_buf(),
        None => match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
    };
    write_outputs(&rebuilt.doc, &reference, &dir)?;
    Ok(Rewritten {
        doc: rebuilt.doc,
        changes: rebuilt.changes,
        dir,
    })
}
