//! The matrix of a lab run: its cells (strategy, scenario, CPU count), and the matrix file
//! (`lab/matrix.toml`) that gives the default cells and what a flag left out stands for.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The matrix file shipped with the lab, compiled in for runs outside the repository.
pub const BUILTIN_MATRIX: &str = include_str!("../../lab/matrix.toml");

/// One cell of the matrix: a strategy in a scenario at a CPU count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub strategy: String,
    pub scenario: String,
    pub cpus: f64,
}

impl Cell {
    pub fn new(strategy: &str, scenario: &str, cpus: f64) -> Cell {
        Cell {
            strategy: strategy.to_string(),
            scenario: scenario.to_string(),
            cpus,
        }
    }
}

/// Every combination, CPU counts outermost, then scenarios, then strategies.
pub fn cross_product(strategies: &[String], scenarios: &[String], cpus: &[f64]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for &c in cpus {
        for scenario in scenarios {
            for strategy in strategies {
                cells.push(Cell::new(strategy, scenario, c));
            }
        }
    }
    cells
}

/// Why a matrix file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    #[error("cannot read matrix file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid matrix file {origin}: {message}")]
    Invalid { origin: String, message: String },
}

/// Lists of strategies, scenarios and CPU counts whose combinations are cells.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Block {
    pub strategies: Vec<String>,
    pub scenarios: Vec<String>,
    pub cpus: Vec<f64>,
}

impl Block {
    fn check(&self) -> Result<(), String> {
        if self.strategies.is_empty() || self.scenarios.is_empty() || self.cpus.is_empty() {
            return Err("strategies, scenarios and cpus must each name at least one".into());
        }
        if let Some(bad) = self.cpus.iter().find(|c| !(c.is_finite() && **c > 0.0)) {
            return Err(format!("cpus must be above 0, got {bad}"));
        }
        Ok(())
    }

    /// Every combination of the block's lists, in [`cross_product`] order.
    pub fn cells(&self) -> Vec<Cell> {
        cross_product(&self.strategies, &self.scenarios, &self.cpus)
    }
}

/// The matrix file: the default cells, and the defaults for flags left out.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    /// What a list left out stands for when another is given.
    pub defaults: Block,
    /// The blocks of the default matrix, in order.
    #[serde(default)]
    pub cells: Vec<Block>,
}

impl Matrix {
    /// Parses and checks a matrix file's text; `origin` names it in error messages.
    pub fn parse(text: &str, origin: &str) -> Result<Matrix, MatrixError> {
        let invalid = |message: String| MatrixError::Invalid {
            origin: origin.to_string(),
            message,
        };
        let matrix: Matrix = toml::from_str(text)
            .map_err(|e: toml::de::Error| invalid(e.to_string().trim().to_string()))?;
        matrix
            .defaults
            .check()
            .map_err(|m| invalid(format!("[defaults]: {m}")))?;
        if matrix.cells.is_empty() {
            return Err(invalid("no [[cells]] blocks".into()));
        }
        for (i, block) in matrix.cells.iter().enumerate() {
            block
                .check()
                .map_err(|m| invalid(format!("[[cells]] block {}: {m}", i + 1)))?;
        }
        Ok(matrix)
    }

    /// Reads a matrix file.
    pub fn load(path: &Path) -> Result<Matrix, MatrixError> {
        let text = std::fs::read_to_string(path).map_err(|source| MatrixError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Matrix::parse(&text, &path.display().to_string())
    }

    /// The matrix compiled into the binary (a copy of `lab/matrix.toml`).
    pub fn builtin() -> Matrix {
        Matrix::parse(BUILTIN_MATRIX, "built-in").expect("the built-in matrix file is valid")
    }

    /// The default matrix: every block's cells, blocks in order.
    pub fn default_cells(&self) -> Vec<Cell> {
        self.cells.iter().flat_map(Block::cells).collect()
    }

    /// The cells to run: the default matrix when no list is given, else every combination of the
    /// given lists and the defaults for those left out.
    pub fn plan(
        &self,
        strategies: Option<&[String]>,
        scenarios: Option<&[String]>,
        cpus: Option<&[f64]>,
    ) -> Vec<Cell> {
        if strategies.is_none() && scenarios.is_none() && cpus.is_none() {
            return self.default_cells();
        }
        cross_product(
            strategies.unwrap_or(&self.defaults.strategies),
            scenarios.unwrap_or(&self.defaults.scenarios),
            cpus.unwrap_or(&self.defaults.cpus),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_matrix_is_the_reference_experiments() {
        let m = Matrix::builtin().default_cells();
        assert_eq!(m.len(), 17);
        assert_eq!(m[0], Cell::new("c1", "healthy", 1.0));
        assert_eq!(m[1], Cell::new("c1", "healthy", 2.0));
        assert!(m[2..].iter().all(|c| c.cpus == 1.0 && c.strategy != "c1"));
        let cp = cross_product(&["a".into(), "b".into()], &["x".into()], &[1.0, 2.0]);
        assert_eq!(cp.len(), 4);
        assert_eq!(cp[1], Cell::new("b", "x", 1.0));
    }

    #[test]
    fn default_matrix_runs_c2_to_c5_per_scenario_in_order() {
        let m = Matrix::builtin().default_cells();
        let names: Vec<String> = m[2..]
            .iter()
            .map(|c| format!("{} {}", c.strategy, c.scenario))
            .collect();
        let expected: Vec<String> = ["healthy", "slow-write", "slow-enrichment"]
            .iter()
            .flat_map(|s| ["c2", "c3", "c4", "c4-64", "c5"].map(|c| format!("{c} {s}")))
            .collect();
        assert_eq!(names, expected);
    }

    #[test]
    fn a_list_left_out_stands_for_the_defaults() {
        let matrix = Matrix::builtin();
        let only = ["c4".to_string()];
        let cells = matrix.plan(Some(&only), None, None);
        assert_eq!(cells.len(), 3);
        assert_eq!(cells[1], Cell::new("c4", "slow-write", 1.0));
        let cells = matrix.plan(None, None, Some(&[2.0]));
        assert_eq!(cells.len(), 12);
        assert!(cells.iter().all(|c| c.cpus == 2.0));
    }

    #[test]
    fn the_repository_file_is_the_builtin_one() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/matrix.toml");
        assert_eq!(Matrix::load(&path).unwrap(), Matrix::builtin());
    }

    #[test]
    fn bad_files_name_what_is_wrong() {
        let defaults = "[defaults]\nstrategies = [\"a\"]\nscenarios = [\"s\"]\ncpus = [1]\n";
        for (text, needle) in [
            (defaults.to_string(), "no [[cells]]"),
            (
                format!("{defaults}[[cells]]\nstrategies = []\nscenarios = [\"s\"]\ncpus = [1]\n"),
                "block 1",
            ),
            (
                format!(
                    "{defaults}[[cells]]\nstrategies = [\"a\"]\nscenarios = [\"s\"]\ncpus = [0]\n"
                ),
                "cpus must be above 0",
            ),
            (format!("{defaults}extra = 1\n"), "extra"),
        ] {
            let err = Matrix::parse(&text, "m.toml").unwrap_err().to_string();
            assert!(
                err.contains(needle) && err.contains("m.toml"),
                "{needle:?} not in {err:?}"
            );
        }
    }
}
