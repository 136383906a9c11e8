//! The report folder of a lab run: made (and checked to be writable) before the runs start, and
//! `results.json` written into it durably, so that a run stopped at any point, even by SIGKILL,
//! leaves a document that `--resume` can continue.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::report::{Reference, INDEX_HTML, RUNS_CSV, SUMMARY_MD};
use crate::results::ResultsDoc;

/// The results document's name in a report folder.
pub const RESULTS_JSON: &str = "results.json";

/// The files of an earlier run that a new run over it (`--replace`) removes at once, so that
/// until it writes its own report the folder never shows the old run's next to its plan.
const REPORT_FILES: [&str; 4] = [RESULTS_JSON, RUNS_CSV, SUMMARY_MD, INDEX_HTML];

/// `lab-results/<UTC date-time>`, the default report folder.
pub fn default_out_dir() -> PathBuf {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    PathBuf::from("lab-results").join(now.replace(':', "-"))
}

/// The report folder, made before the runs start.
#[derive(Debug)]
pub struct OutDir {
    path: PathBuf,
    /// The folders this run made, the report folder first and then each parent it had to make
    /// (`lab-results` for the default folder), so that a run that ends with nothing in them
    /// removes them all again.
    made: Vec<PathBuf>,
}

impl OutDir {
    /// Makes the folder if missing and checks a file can be written into it. A folder that
    /// already holds files is refused unless `replace` is given, so that one run's report never
    /// mixes with another's; a partial run there is pointed to `--resume`. With `replace`, an
    /// earlier run's `results.json`, `runs.csv`, `summary.md` and `index.html` are removed now,
    /// the rest of its files are overwritten by the report, and any others are left alone.
    pub fn create(path: &Path, replace: bool) -> anyhow::Result<OutDir> {
        if path.exists() && !path.is_dir() {
            bail!(
                "--out {} exists and is not a folder; give a folder (made if missing)",
                path.display()
            );
        }
        if !replace && path.is_dir() {
            let held = std::fs::read_dir(path)
                .with_context(|| format!("cannot read the report folder {}", path.display()))?
                .count();
            if held > 0 {
                if let Some(meta) = read_meta(path).filter(|m| m.partial) {
                    bail!(
                        "--out {} holds a partial lab run ({} of {} runs finished); continue it with `inflight lab run --resume {}`, or add --replace to write over it",
                        path.display(),
                        meta.runs_finished,
                        meta.runs_planned,
                        path.display()
                    );
                }
                bail!(
                    "--out {} already holds {held} file(s), perhaps an earlier run; give an empty or new folder, or add --replace to write over it",
                    path.display()
                );
            }
        }
        let made: Vec<PathBuf> = path
            .ancestors()
            .take_while(|dir| !dir.as_os_str().is_empty() && !dir.exists())
            .map(Path::to_path_buf)
            .collect();
        std::fs::create_dir_all(path)
            .with_context(|| format!("cannot create the report folder {}", path.display()))?;
        check_writable(path)?;
        if replace && made.is_empty() {
            for name in REPORT_FILES {
                let file = path.join(name);
                if file.is_file() {
                    std::fs::remove_file(&file)
                        .with_context(|| format!("cannot remove {}", file.display()))?;
                }
            }
        }
        Ok(OutDir {
            path: path.to_path_buf(),
            made,
        })
    }

    /// The folder of a run being resumed (see [`super::Resume`]), checked to be writable.
    pub fn resume(path: &Path) -> anyhow::Result<OutDir> {
        check_writable(path)?;
        Ok(OutDir {
            path: path.to_path_buf(),
            made: Vec::new(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `doc` as `results.json`, durably: into a temporary file that is synced and then
    /// renamed over the old one, and the folder synced, so that a crash or SIGKILL at any point
    /// leaves the old document or the new one, never a mix or nothing.
    pub fn save(&self, doc: &ResultsDoc) -> std::io::Result<()> {
        save_results(doc, &self.path)
    }

    /// Removes what this run wrote (its `results.json`), and the folders this run made (the
    /// report folder, and parents such as `lab-results`) as long as nothing else is in them: for
    /// a run that ends before any of its runs finished.
    pub fn discard(&self) {
        let _ = std::fs::remove_file(self.path.join(RESULTS_JSON));
        for dir in &self.made {
            // `remove_dir` refuses a folder that is not empty, which is what we want: another
            // run's folder in `lab-results` keeps it.
            if std::fs::remove_dir(dir).is_err() {
                break;
            }
        }
    }
}

/// Writes the report (`runs.csv`, `summary.md`, figures, `index.html`) and then `results.json`
/// (durably, see [`OutDir::save`]) into `dir`, comparing with `reference`. The document comes
/// last, so a folder whose report was cut short still reads as it was before.
pub fn write_outputs(doc: &ResultsDoc, reference: &Reference, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    crate::report::write_report_with(doc, reference, dir)
        .with_context(|| format!("cannot write the report into {}", dir.display()))?;
    save_results(doc, dir)
        .with_context(|| format!("cannot write {}", dir.join(RESULTS_JSON).display()))?;
    Ok(())
}

/// Writes `doc` as `dir/results.json` durably (see [`OutDir::save`]).
pub(crate) fn save_results(doc: &ResultsDoc, dir: &Path) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(doc).map_err(std::io::Error::other)?;
    write_durably(&dir.join(RESULTS_JSON), json.as_bytes())
}

/// Writes `bytes` to `path` through a synced temporary file renamed over it, then syncs the
/// folder so the rename itself survives a crash.
fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    // A folder cannot be opened for syncing everywhere; the rename is done either way.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

fn check_writable(path: &Path) -> anyhow::Result<()> {
    let probe = path.join(".inflight-write-test");
    std::fs::write(&probe, b"")
        .with_context(|| format!("cannot write into the report folder {}", path.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// The `meta` of `dir/results.json`, if it holds a results document.
fn read_meta(dir: &Path) -> Option<crate::results::RunMeta> {
    let text = std::fs::read_to_string(dir.join(RESULTS_JSON)).ok()?;
    serde_json::from_str::<ResultsDoc>(&text)
        .ok()
        .map(|doc| doc.meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_holding_a_run_is_refused_unless_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("r");
        OutDir::create(&out, false).unwrap();
        std::fs::write(out.join("results.json"), "{}").unwrap();
        let err = OutDir::create(&out, false).unwrap_err().to_string();
        assert!(
            err.contains("already holds 1 file") && err.contains("--replace"),
            "{err}"
        );
        std::fs::write(out.join("mine.txt"), "kept").unwrap();
        assert!(OutDir::create(&out, true).is_ok());
        assert!(
            !out.join("results.json").exists(),
            "the old run's document goes"
        );
        assert!(out.join("mine.txt").exists(), "other files stay");
        // An empty folder that exists is fine.
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(OutDir::create(&empty, false).is_ok());
    }

    #[test]
    fn a_folder_holding_a_partial_run_points_to_resume() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::create(&dir.path().join("r"), false).unwrap();
        let mut doc = ResultsDoc::default();
        doc.meta.partial = true;
        doc.meta.runs_finished = 11;
        doc.meta.runs_planned = 33;
        out.save(&doc).unwrap();
        let err = OutDir::create(out.path(), false).unwrap_err().to_string();
        assert!(
            err.contains("holds a partial lab run (11 of 33 runs finished)")
                && err.contains(&format!(
                    "inflight lab run --resume {}",
                    out.path().display()
                )),
            "{err}"
        );
    }

    #[test]
    fn saving_replaces_the_document_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::create(&dir.path().join("r"), false).unwrap();
        let mut doc = ResultsDoc::default();
        out.save(&doc).unwrap();
        doc.meta.runs_finished = 1;
        doc.runs
            .push(crate::results::sample_run("c1", "healthy", 1.0, 1, 2.0));
        out.save(&doc).unwrap();
        let text = std::fs::read_to_string(out.path().join(RESULTS_JSON)).unwrap();
        assert_eq!(serde_json::from_str::<ResultsDoc>(&text).unwrap(), doc);
        let names: Vec<String> = std::fs::read_dir(out.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, [RESULTS_JSON]);
    }

    #[test]
    fn discarding_removes_the_document_and_a_folder_this_run_made() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::create(&dir.path().join("r"), false).unwrap();
        out.save(&ResultsDoc::default()).unwrap();
        out.discard();
        assert!(!out.path().exists());
        // A folder that was there stays.
        let out = OutDir::create(dir.path(), false).unwrap();
        out.save(&ResultsDoc::default()).unwrap();
        out.discard();
        assert!(dir.path().is_dir());
        assert!(!dir.path().join(RESULTS_JSON).exists());
    }

    #[test]
    fn discarding_removes_the_parents_this_run_made_too() {
        let dir = tempfile::tempdir().unwrap();
        // As the default folder `lab-results/<date>` is made where there is no `lab-results`.
        let results = dir.path().join("lab-results");
        let out = OutDir::create(&results.join("2026-12-01T09-00-00Z"), false).unwrap();
        out.save(&ResultsDoc::default()).unwrap();
        out.discard();
        assert!(
            !results.exists(),
            "the empty lab-results made for it is gone"
        );
        assert!(dir.path().is_dir());
        // A parent that holds another run's folder stays, with that folder.
        let earlier = results.join("2026-11-30T10-00-00Z");
        std::fs::create_dir_all(&earlier).unwrap();
        let out = OutDir::create(&results.join("2026-12-01T09-00-00Z"), false).unwrap();
        out.discard();
        assert!(!out.path().exists());
        assert!(earlier.is_dir());
    }
}
