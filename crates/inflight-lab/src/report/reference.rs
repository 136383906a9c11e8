//! The figures an earlier experiment reported (`lab/reference.toml`), next to a run's own.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::table::Table;
use super::{cpu_limited, fmt_spread};
use crate::hypothesis::find_row;
use crate::results::{Metric, ResultsDoc, Spread};

/// The reference file shipped with the lab, compiled in for runs outside the repository.
pub const BUILTIN_REFERENCE: &str = include_str!("../../lab/reference.toml");

/// Why a reference file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("cannot read reference file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid reference file {origin}: {message}")]
    Parse { origin: String, message: String },
}

/// An earlier experiment's figures: what it is called, how its figures were made, and the figures.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    /// What the report calls the experiment (a column header and a heading).
    pub name: String,
    /// How its figures were made, shown above the table.
    pub note: String,
    #[serde(default, rename = "figure")]
    pub figures: Vec<ReferenceFigure>,
}

/// What the earlier experiment reported for one quantity, and which of this run's cells to compare.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferenceFigure {
    pub quantity: String,
    pub scenario: String,
    pub strategy: String,
    pub cpus: f64,
    pub metric: Metric,
    /// Divide by this strategy's value (same scenario, 1 CPU) for a ratio.
    #[serde(default)]
    pub ratio_to: Option<String>,
    /// The figure as the experiment reported it (text: some are words, not numbers).
    pub value: String,
}

impl Reference {
    /// Parses a reference file's text; `origin` names it in error messages.
    pub fn parse(text: &str, origin: &str) -> Result<Reference, ReferenceError> {
        toml::from_str(text).map_err(|e: toml::de::Error| ReferenceError::Parse {
            origin: origin.to_string(),
            message: e.to_string().trim().to_string(),
        })
    }

    /// Reads a reference file.
    pub fn load(path: &Path) -> Result<Reference, ReferenceError> {
        let text = std::fs::read_to_string(path).map_err(|source| ReferenceError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Reference::parse(&text, &path.display().to_string())
    }

    /// The reference compiled into the binary (a copy of `lab/reference.toml`).
    pub fn builtin() -> Reference {
        Reference::parse(BUILTIN_REFERENCE, "built-in")
            .expect("the built-in reference file is valid")
    }

    /// The reference figures next to this run's, as plain text (rows for cells this run has).
    pub fn table(&self, doc: &ResultsDoc) -> String {
        let table = self.model(doc);
        if table.rows.is_empty() {
            return format!("no cells in common with the {}'s table\n", self.name);
        }
        format!("{}{}\n", table.text(), self.note(doc))
    }

    /// One row per figure whose cells this run has: quantity, the reference's value, this run's.
    pub(crate) fn model(&self, doc: &ResultsDoc) -> Table {
        let time_scale = if doc.meta.time_scale > 0.0 {
            doc.meta.time_scale
        } else {
            1.0
        };
        let mut table = Table::new(&[
            ("quantity", false),
            (self.name.as_str(), true),
            ("this run", true),
        ]);
        let limited = cpu_limited(doc);
        for r in &self.figures {
            let Some(row) = find_row(doc, &r.scenario, &r.strategy, r.cpus) else {
                continue;
            };
            let ours = row.get(r.metric);
            let text = match &r.ratio_to {
                // What a quantity does across CPU counts was not measured without a quota.
                _ if !limited && self.varies_with_cpus(r) => {
                    "not comparable: no CPU limit".to_string()
                }
                Some(den) => {
                    let Some(den_row) = find_row(doc, &r.scenario, den, 1.0) else {
                        continue;
                    };
                    let den = den_row.get(r.metric);
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
                .push(vec![r.quantity.clone(), r.value.clone(), text]);
        }
        table
    }

    /// Whether the reference gives `figure`'s quantity at more than one CPU count (C1's
    /// completion at 1 and at 2 CPUs): then it is about the CPU quota.
    fn varies_with_cpus(&self, figure: &ReferenceFigure) -> bool {
        self.figures.iter().any(|f| {
            f.scenario == figure.scenario
                && f.strategy == figure.strategy
                && f.metric == figure.metric
                && (f.cpus - figure.cpus).abs() > 1e-9
        })
    }

    /// How to read the table: the reference's note, then what this run's numbers are.
    pub(crate) fn note(&self, doc: &ResultsDoc) -> String {
        let mut note = self.note.clone();
        note.push_str(" This run: median (min-max) over its repeats.");
        if !cpu_limited(doc) {
            note.push_str(
                " It enforced no CPU limit, so its figures at a CPU count are not compared.",
            );
        }
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
}

/// Seconds shrink and rates grow with the time scale; undo that so numbers compare with the
/// reference, which ran at time scale 1.
fn rescale(metric: Metric, s: Spread, time_scale: f64) -> Spread {
    let factor = metric.to_full_time(time_scale);
    s.map(|v| v * factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_reference_holds_every_figure() {
        let r = Reference::builtin();
        assert_eq!(r.name, "seed");
        assert_eq!(r.figures.len(), 26);
        assert_eq!(r.figures[0].value, "83.6");
        assert_eq!(r.figures[0].metric, Metric::CompletionS);
        assert!(r
            .figures
            .iter()
            .any(|f| f.ratio_to.as_deref() == Some("c2")));
    }

    #[test]
    fn the_repository_file_is_the_builtin_one() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/reference.toml");
        assert_eq!(Reference::load(&path).unwrap(), Reference::builtin());
    }

    #[test]
    fn figures_about_cpu_counts_are_not_compared_without_a_limit() {
        use crate::results::{sample_run, RunMeta};
        let runs = vec![
            sample_run("c1", "healthy", 1.0, 1, 80.0),
            sample_run("c1", "healthy", 2.0, 1, 80.0),
            sample_run("c2", "healthy", 1.0, 1, 3.0),
        ];
        let meta = |enforcement| RunMeta {
            enforcement,
            repeats: 1,
            time_scale: 1.0,
            ..RunMeta::default()
        };
        let r = Reference::builtin();
        let limited =
            ResultsDoc::from_runs(meta(inflight_cpu::Enforcement::CgroupV1), runs.clone());
        let table = r.table(&limited);
        assert!(!table.contains("not comparable"), "{table}");
        let unlimited = ResultsDoc::from_runs(meta(inflight_cpu::Enforcement::None), runs);
        let table = r.table(&unlimited);
        let c1 = table
            .lines()
            .find(|l| l.starts_with("C1 completion at 1 CPU"))
            .unwrap();
        assert!(c1.ends_with("not comparable: no CPU limit"), "{table}");
        let c2 = table
            .lines()
            .find(|l| l.starts_with("healthy: C2 accepted/s"))
            .unwrap();
        assert!(c2.ends_with("2.67"), "{table}");
        assert!(table.contains("enforced no CPU limit"), "{table}");
    }

    #[test]
    fn a_bad_file_names_what_is_wrong() {
        let err = Reference::parse(
            "name = \"x\"\nnote = \"n\"\n[[figure]]\nmetric = \"nope\"\n",
            "r.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("r.toml") && err.contains("nope"), "{err}");
    }
}
