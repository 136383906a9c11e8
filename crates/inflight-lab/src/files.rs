//! The lab folder (`lab/`) and its files: found on disk, or the copies compiled into the binary
//! when the lab runs away from the repository.
//!
//! `strategies.toml`, `scenarios.toml` and `hypotheses.toml` must all be in the folder used;
//! `matrix.toml` and `reference.toml` fall back to their built-in copies when it lacks them.
//! [`LabConfig`] holds them all, loaded, and plans the cells of a run.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::hypothesis::{self, Hypothesis, HypothesisError};
use crate::matrix::{Cell, Matrix, MatrixError};
use crate::report::{Reference, ReferenceError};
use crate::scenario::{ScenarioError, ScenarioSet};
use crate::strategy::{self, Strategies, StrategyError};

pub const STRATEGIES: &str = "strategies.toml";
pub const SCENARIOS: &str = "scenarios.toml";
pub const HYPOTHESES: &str = "hypotheses.toml";
pub const MATRIX: &str = "matrix.toml";
pub const REFERENCE: &str = "reference.toml";

/// A lab folder that lacks a file it must have.
#[derive(Debug, thiserror::Error)]
#[error("lab file not found: {name} (looked for {looked}); pass --lab-dir DIR")]
pub struct LabFilesError {
    pub name: &'static str,
    pub looked: String,
}

/// Where the lab's files come from: a folder, or (none found) the built-in copies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabFiles {
    dir: Option<PathBuf>,
    origin: Origin,
}

/// How the lab folder in use was found ([`LabFiles::find`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// Named with `--lab-dir`.
    LabDir(PathBuf),
    /// `lab` in the current directory.
    CurrentDir(PathBuf),
    /// The `lab` folder of the workspace the binary was built in.
    Workspace(PathBuf),
    /// No folder: the copies built into the binary.
    BuiltIn,
}

impl std::fmt::Display for Origin {
    /// `--lab-dir DIR`, `lab/ in the current directory`, `the lab folder of the workspace inflight
    /// was built in (DIR)` or `the copies built into inflight`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::LabDir(dir) => write!(f, "--lab-dir {}", dir.display()),
            Origin::CurrentDir(dir) => write!(f, "{}/ in the current directory", dir.display()),
            Origin::Workspace(dir) => write!(
                f,
                "the lab folder of the workspace inflight was built in ({})",
                dir.display()
            ),
            Origin::BuiltIn => f.write_str("the copies built into inflight"),
        }
    }
}

impl LabFiles {
    /// `explicit` if given (it must hold the three required files); else `lab` here if it holds
    /// `strategies.toml`, else the `lab` folder of the workspace the binary was built in, else the
    /// built-in copies.
    pub fn find(explicit: Option<&Path>) -> Result<LabFiles, LabFilesError> {
        let candidates: Vec<PathBuf> = match explicit {
            Some(dir) => vec![dir.to_path_buf()],
            None => {
                let mut dirs = vec![PathBuf::from("lab")];
                // The workspace the binary was built in (target/<profile>/inflight).
                if let Ok(exe) = std::env::current_exe() {
                    if let Some(root) = exe
                        .ancestors()
                        .skip(1)
                        .find(|d| d.join("Cargo.toml").is_file() && d.join("lab").is_dir())
                    {
                        dirs.push(root.join("lab"));
                    }
                }
                dirs
            }
        };
        let found = candidates.iter().position(|d| d.join(STRATEGIES).is_file());
        let (dir, origin) = match (found, explicit) {
            (_, Some(dir)) => (dir.to_path_buf(), Origin::LabDir(dir.to_path_buf())),
            (Some(0), None) => (
                candidates[0].clone(),
                Origin::CurrentDir(candidates[0].clone()),
            ),
            (Some(i), None) => (
                candidates[i].clone(),
                Origin::Workspace(candidates[i].clone()),
            ),
            (None, None) => return Ok(LabFiles::builtin()),
        };
        for name in [STRATEGIES, SCENARIOS, HYPOTHESES] {
            if !dir.join(name).is_file() {
                let looked: Vec<String> = candidates
                    .iter()
                    .map(|d| d.join(name).display().to_string())
                    .collect();
                return Err(LabFilesError {
                    name,
                    looked: looked.join(" and "),
                });
            }
        }
        Ok(LabFiles {
            dir: Some(dir),
            origin,
        })
    }

    /// The files compiled into the binary.
    pub fn builtin() -> LabFiles {
        LabFiles {
            dir: None,
            origin: Origin::BuiltIn,
        }
    }

    /// How the folder in use was found, or that there is none.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The folder in use, if not the built-in copies.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The path of `name` in the folder, if the folder has it.
    pub fn path(&self, name: &str) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(name))
            .filter(|p| p.is_file())
    }

    pub fn strategies(&self) -> Result<Strategies, StrategyError> {
        match self.path(STRATEGIES) {
            Some(path) => strategy::load(&path),
            None => Ok(strategy::builtin()),
        }
    }

    pub fn scenarios(&self) -> Result<ScenarioSet, ScenarioError> {
        match self.path(SCENARIOS) {
            Some(path) => ScenarioSet::load(&path),
            None => Ok(ScenarioSet::builtin()),
        }
    }

    pub fn hypotheses(&self) -> Result<Vec<Hypothesis>, HypothesisError> {
        match self.path(HYPOTHESES) {
            Some(path) => hypothesis::load(&path),
            None => Ok(hypothesis::builtin()),
        }
    }

    pub fn matrix(&self) -> Result<Matrix, MatrixError> {
        match self.path(MATRIX) {
            Some(path) => Matrix::load(&path),
            None => Ok(Matrix::builtin()),
        }
    }

    pub fn reference(&self) -> Result<Reference, ReferenceError> {
        match self.path(REFERENCE) {
            Some(path) => Reference::load(&path),
            None => Ok(Reference::builtin()),
        }
    }

    /// Where the hypotheses come from, for messages: the file, or `built-in`.
    pub fn hypotheses_origin(&self) -> String {
        self.path(HYPOTHESES)
            .map_or("built-in hypotheses".to_string(), |p| {
                p.display().to_string()
            })
    }
}

/// Everything the lab folder configures, loaded and checked.
#[derive(Debug, Clone)]
pub struct LabConfig {
    pub files: LabFiles,
    pub strategies: Strategies,
    pub scenarios: ScenarioSet,
    pub hypotheses: Vec<Hypothesis>,
    pub matrix: Matrix,
    pub reference: Reference,
}

impl LabConfig {
    /// Loads every file of `files`; the error names the file that is wrong.
    pub fn load(files: LabFiles) -> anyhow::Result<LabConfig> {
        let strategies = files.strategies()?;
        let scenarios = files.scenarios()?;
        let hypotheses = files
            .hypotheses()
            .with_context(|| format!("cannot use {}", files.hypotheses_origin()))?;
        let matrix = files.matrix()?;
        let reference = files.reference()?;
        Ok(LabConfig {
            files,
            strategies,
            scenarios,
            hypotheses,
            matrix,
            reference,
        })
    }

    /// The cells to run ([`Matrix::plan`]), each checked to name a known strategy and scenario.
    pub fn plan(
        &self,
        strategies: Option<&[String]>,
        scenarios: Option<&[String]>,
        cpus: Option<&[f64]>,
    ) -> anyhow::Result<Vec<Cell>> {
        let cells = self.matrix.plan(strategies, scenarios, cpus);
        for cell in &cells {
            self.strategies.get(&cell.strategy)?;
            self.scenarios.get(&cell.scenario)?;
        }
        Ok(cells)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_lab() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab")
    }

    #[test]
    fn the_repository_folder_is_used_when_named() {
        let files = LabFiles::find(Some(&repo_lab())).unwrap();
        assert_eq!(files.dir(), Some(repo_lab().as_path()));
        assert_eq!(files.origin(), &Origin::LabDir(repo_lab()));
        assert_eq!(
            files.origin().to_string(),
            format!("--lab-dir {}", repo_lab().display())
        );
        assert_eq!(files.strategies().unwrap(), strategy::builtin());
        assert_eq!(files.matrix().unwrap(), Matrix::builtin());
        assert_eq!(files.reference().unwrap(), Reference::builtin());
    }

    #[test]
    fn a_named_folder_must_hold_the_required_files() {
        let dir = tempfile::tempdir().unwrap();
        let err = LabFiles::find(Some(dir.path())).unwrap_err().to_string();
        assert!(
            err.contains("strategies.toml") && err.contains("not found"),
            "{err}"
        );
        std::fs::write(dir.path().join(STRATEGIES), "").unwrap();
        let err = LabFiles::find(Some(dir.path())).unwrap_err().to_string();
        assert!(err.contains("scenarios.toml"), "{err}");
    }

    #[test]
    fn optional_files_fall_back_to_the_builtin_copies() {
        let dir = tempfile::tempdir().unwrap();
        for name in [STRATEGIES, SCENARIOS, HYPOTHESES] {
            std::fs::copy(repo_lab().join(name), dir.path().join(name)).unwrap();
        }
        let files = LabFiles::find(Some(dir.path())).unwrap();
        assert_eq!(files.path(MATRIX), None);
        assert_eq!(files.matrix().unwrap(), Matrix::builtin());
        assert_eq!(files.reference().unwrap(), Reference::builtin());
    }

    #[test]
    fn a_plan_names_known_strategies_and_scenarios_only() {
        let lab = LabConfig::load(LabFiles::builtin()).unwrap();
        assert_eq!(lab.plan(None, None, None).unwrap().len(), 17);
        let err = lab
            .plan(Some(&["c1".into(), "nope".into()]), None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown strategy `nope`"), "{err}");
        let err = lab
            .plan(None, Some(&["sunny".into()]), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown scenario `sunny`"), "{err}");
    }

    #[test]
    fn the_builtin_copies_are_all_valid() {
        let files = LabFiles::builtin();
        assert_eq!(files.origin().to_string(), "the copies built into inflight");
        assert_eq!(files.path(STRATEGIES), None);
        assert!(files.strategies().is_ok());
        assert!(files.scenarios().is_ok());
        assert!(files.hypotheses().is_ok());
        assert!(files.matrix().is_ok());
        assert!(files.reference().is_ok());
    }
}
