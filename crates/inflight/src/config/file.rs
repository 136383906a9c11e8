//! [`BudgetsFile`]: a budgets file read and parsed as TOML, before any key is checked; and
//! [`Keys`]: the keys in it that another crate reads.
//!
//! This crate checks the budgets' own keys and the `[fleet]` table. Another crate may keep keys
//! of its own in the same file (`inflight-proxy` keeps a `[proxy]` table, and `upstream` and
//! `listen` in a budget's table): it names them in a [`Keys`], passes that to
//! [`BudgetsFile::budgets`] so that they are not refused as unknown, and reads them itself from
//! the same [`BudgetsFile`]. A key that no reader names is refused, with its path.

use std::path::{Path, PathBuf};

use super::error::{budget_path, capped, ConfigError};
use super::value::{Table, Value};

/// Keys of a budgets file that a crate other than this one reads: top-level tables of its own,
/// and keys of its own in each budget's table.
///
/// ```
/// use inflight::config::{BudgetsFile, Keys};
///
/// const SIDECAR: Keys = Keys::new("my-sidecar", &["sidecar"], &["port"]);
///
/// let file = BudgetsFile::from_toml_str(r#"
///     [sidecar]
///     log = "info"
///
///     [budgets.records]
///     max_concurrent = 6
///     port = 7002
/// "#).unwrap();
/// // Known to the reader, so not refused:
/// let budgets = file.budgets(&[SIDECAR]).unwrap();
/// assert_eq!(budgets.len(), 1);
/// // Without the reader, its keys are unknown:
/// let err = file.budgets(&[]).unwrap_err();
/// assert_eq!(err.field(), Some("sidecar"));
/// // The reader reads its own keys from the same file:
/// assert_eq!(file.table("sidecar").unwrap().get("log").unwrap().as_str(), Some("info"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys {
    reader: &'static str,
    tables: &'static [&'static str],
    budget_keys: &'static [&'static str],
}

impl Keys {
    /// The keys `reader` (a crate's name, for messages) reads: the top-level `tables` and the
    /// `budget_keys` of each `[budgets.<name>]` table.
    pub const fn new(
        reader: &'static str,
        tables: &'static [&'static str],
        budget_keys: &'static [&'static str],
    ) -> Keys {
        Keys {
            reader,
            tables,
            budget_keys,
        }
    }

    /// Who reads these keys.
    pub fn reader(&self) -> &'static str {
        self.reader
    }

    /// The top-level tables it reads.
    pub fn tables(&self) -> &'static [&'static str] {
        self.tables
    }

    /// The keys of a budget's table it reads.
    pub fn budget_keys(&self) -> &'static [&'static str] {
        self.budget_keys
    }
}

/// A budgets file, read and parsed as TOML, its keys not yet checked: what [`Budgets`]
/// (through [`BudgetsFile::budgets`]) and other crates' keys are read from.
///
/// [`Budgets`]: super::Budgets
#[derive(Debug, Clone)]
pub struct BudgetsFile {
    root: Table,
    path: Option<PathBuf>,
}

impl BudgetsFile {
    /// Parses `text` as TOML. Relative paths in it are taken from the current directory.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Toml`] when the text is not valid TOML.
    pub fn from_toml_str(text: &str) -> Result<BudgetsFile, ConfigError> {
        let root: Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::Toml(capped(e.to_string().trim_end())))?;
        Ok(BudgetsFile { root, path: None })
    }

    /// Reads and parses the file at `path`. Relative paths in it are taken from its folder.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Read`] when the file cannot be read, [`ConfigError::InFile`] around
    /// [`ConfigError::Toml`] when it is not valid TOML.
    pub fn from_path(path: impl AsRef<Path>) -> Result<BudgetsFile, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut file = BudgetsFile::from_toml_str(&text).map_err(|error| ConfigError::InFile {
            path: path.to_path_buf(),
            error: Box::new(error),
        })?;
        file.path = Some(path.to_path_buf());
        Ok(file)
    }

    /// The path the file was read from, if it was read from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The folder relative paths in the file are taken from: the file's own, or `None` for the
    /// current directory.
    pub fn folder(&self) -> Option<&Path> {
        self.path
            .as_deref()
            .and_then(Path::parent)
            .filter(|p| !p.as_os_str().is_empty())
    }

    /// `written`, a path as the file gives it, taken from [`BudgetsFile::folder`] when relative.
    pub fn resolve(&self, written: impl AsRef<Path>) -> PathBuf {
        let written = written.as_ref();
        match self.folder() {
            Some(folder) if written.is_relative() => folder.join(written),
            _ => written.to_path_buf(),
        }
    }

    /// The top-level value named `key` (`[proxy]` is `table("proxy")`), if the file has one.
    pub fn table(&self, key: &str) -> Option<&Value> {
        self.root.get(key)
    }

    /// Each budget's name and table, in file order; entries of `[budgets]` that are not tables
    /// are left out (checking the budgets refuses them).
    pub fn budget_tables(&self) -> impl Iterator<Item = (&str, &Table)> {
        self.root
            .get("budgets")
            .and_then(Value::as_table)
            .into_iter()
            .flatten()
            .filter_map(|(name, value)| Some((name.as_str(), value.as_table()?)))
    }

    pub(super) fn root(&self) -> &Table {
        &self.root
    }

    /// `errors`, from this crate and from other readers of the file, as one error: opened up,
    /// put in the order of the keys they name in the file, and said to be in the file when it
    /// was read from one. `None` for no errors.
    ///
    /// ```
    /// use inflight::config::BudgetsFile;
    /// use inflight::ConfigError;
    ///
    /// let file = BudgetsFile::from_toml_str(r#"
    ///     [budgets.a]
    ///     max_concurrent = 0
    ///     port = "x"
    ///
    ///     [budgets.b]
    ///     max_concurrent = 1
    ///     port = "y"
    /// "#).unwrap();
    /// let ours = ConfigError::invalid("budgets.b.port", "must be a number");
    /// let core = file.budgets(&[]).unwrap_err();
    /// let all = file.join(vec![ours, core]).unwrap();
    /// let fields: Vec<_> = all.errors().iter().map(|e| e.field().unwrap().to_string()).collect();
    /// assert_eq!(fields[0], "budgets.a.max_concurrent");
    /// assert_eq!(fields.last().unwrap(), "budgets.b.port");
    /// ```
    pub fn join(&self, errors: impl IntoIterator<Item = ConfigError>) -> Option<ConfigError> {
        let mut errors: Vec<ConfigError> = errors.into_iter().flat_map(opened).collect();
        errors.sort_by_key(|e| self.position(e.field()));
        let error = ConfigError::join(errors)?;
        Some(self.in_file(error))
    }

    /// `error`, said to be in the file when it was read from one.
    pub fn in_file(&self, error: ConfigError) -> ConfigError {
        match (&self.path, error) {
            (_, e @ (ConfigError::InFile { .. } | ConfigError::Read { .. })) => e,
            (Some(path), error) => ConfigError::InFile {
                path: path.clone(),
                error: Box::new(error),
            },
            (None, error) => error,
        }
    }

    /// Where the key at dotted path `field` stands in the file: the top-level key, the budget
    /// and the budget's key, each by its index; the end for what the file does not hold.
    fn position(&self, field: Option<&str>) -> [usize; 3] {
        const END: usize = usize::MAX;
        let Some(field) = field else {
            return [0; 3];
        };
        let under = |path: &str, prefix: &str| -> Option<usize> {
            if path == prefix {
                Some(prefix.len())
            } else if path.starts_with(prefix) && path[prefix.len()..].starts_with('.') {
                Some(prefix.len() + 1)
            } else {
                None
            }
        };
        let Some(top) = self.root.keys().position(|k| under(field, k).is_some()) else {
            return [END; 3];
        };
        let Some(budgets) = self.root.get("budgets").and_then(Value::as_table) else {
            return [top, 0, 0];
        };
        if self.root.keys().nth(top).map(String::as_str) != Some("budgets") {
            return [top, 0, 0];
        }
        for (i, (name, value)) in budgets.iter().enumerate() {
            let Some(rest) = under(field, &budget_path(name)) else {
                continue;
            };
            let key = field.get(rest..).unwrap_or("");
            let key = key.split('.').next().unwrap_or("");
            let at = value
                .as_table()
                .and_then(|t| t.keys().position(|k| k == key))
                .unwrap_or(if key.is_empty() { 0 } else { END });
            return [top, i, at];
        }
        [top, END, END]
    }
}

/// The single mistakes of `error`, without the file they are said to be in.
fn opened(error: ConfigError) -> Vec<ConfigError> {
    match error {
        ConfigError::Several { errors } => errors.into_iter().flat_map(opened).collect(),
        ConfigError::InFile { error, .. } => opened(*error),
        other => vec![other],
    }
}

/// Whether `key` is one of the top-level tables this crate or `others` read.
pub(super) fn known_table(key: &str, others: &[Keys]) -> bool {
    key == "budgets" || key == "fleet" || others.iter().any(|k| k.tables.contains(&key))
}

/// The top-level tables this crate and `others` read, for a message.
pub(super) fn expected_tables(others: &[Keys]) -> String {
    let mut tables = vec!["[budgets.<name>] tables".to_string(), "[fleet]".to_string()];
    tables.extend(
        others
            .iter()
            .flat_map(|k| k.tables)
            .map(|t| format!("[{t}]")),
    );
    let last = tables.pop().unwrap_or_default();
    format!("{} and {last}", tables.join(", "))
}
