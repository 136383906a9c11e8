//! The report folder of a lab run, made (and checked to be writable) before the runs start.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// `lab-results/<UTC date-time>`, the default report folder.
pub fn default_out_dir() -> PathBuf {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    PathBuf::from("lab-results").join(now.replace(':', "-"))
}

/// The report folder, made before the runs start.
#[derive(Debug)]
pub struct OutDir {
    path: PathBuf,
    /// Whether this run made it (and so may remove it again if the run ends with nothing in it).
    made: bool,
}

impl OutDir {
    /// Makes the folder if missing and checks a file can be written into it. A folder that
    /// already holds files is refused unless `replace` is given (then the files a run writes are
    /// overwritten, and any others are left alone), so that one run's report never mixes with
    /// another's.
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
                bail!(
                    "--out {} already holds {held} file(s), perhaps an earlier run; give an empty or new folder, or add --replace to write over it",
                    path.display()
                );
            }
        }
        let made = !path.exists();
        std::fs::create_dir_all(path)
            .with_context(|| format!("cannot create the report folder {}", path.display()))?;
        let probe = path.join(".inflight-write-test");
        std::fs::write(&probe, b"")
            .with_context(|| format!("cannot write into the report folder {}", path.display()))?;
        let _ = std::fs::remove_file(&probe);
        Ok(OutDir {
            path: path.to_path_buf(),
            made,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the folder if this run made it and wrote nothing into it.
    pub fn discard_if_empty(&self) {
        if self.made {
            // `remove_dir` refuses a folder that is not empty, which is what we want.
            let _ = std::fs::remove_dir(&self.path);
        }
    }
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
        assert!(OutDir::create(&out, true).is_ok());
        // An empty folder that exists is fine.
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(OutDir::create(&empty, false).is_ok());
    }
}
