//! [`Budgets`]: the named budgets of a file, built from its checked keys.

use std::path::Path;
use std::sync::Arc;

use super::error::{budget_path, ConfigError};
use super::file::{BudgetsFile, Keys};
use super::fleet::{FleetConfig, LeaseMode, Scope};
use super::parse;
use crate::budget::Budget;
use crate::store::Store;

/// Named budgets, one per dependency, in the order the file lists them.
///
/// # Examples
///
/// ```
/// use inflight::Budgets;
///
/// let budgets = Budgets::from_toml_str(r#"
///     [budgets.enrichment]
///     max_concurrent = 24
///
///     [budgets.records]
///     max_concurrent = 6
///     max_queued = 6
///     permit_timeout = "500ms"
///     call_timeout = "2s"
/// "#).unwrap();
///
/// let records = budgets.get("records").expect("defined above");
/// assert_eq!(records.config().max_concurrent(), 6);
/// let names: Vec<&str> = budgets.iter().map(|b| b.name()).collect();
/// assert_eq!(names, ["enrichment", "records"]);
///
/// let err = Budgets::from_toml_str("[budgets.records]\nmax_concurrent = 0").unwrap_err();
/// assert_eq!(err.to_string(), "budgets.records.max_concurrent: must be at least 1, got 0");
/// ```
#[derive(Debug, Clone)]
pub struct Budgets {
    budgets: Vec<Budget>,
    scopes: Vec<Scope>,
    fleet: Option<FleetConfig>,
    lease_modes: Vec<(String, LeaseMode)>,
}

impl Budgets {
    /// Parses and validates a budgets file's text.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Toml`] for malformed TOML; [`ConfigError::Invalid`] for unknown keys, a
    /// missing or zero `max_concurrent`, negative numbers, unparsable durations or rates, zero
    /// timeouts, or a file with no budgets.
    ///
    /// Keys that another crate reads (the proxy's `upstream`, say) are unknown here: read such
    /// a file through that crate, or through [`BudgetsFile::budgets`] with its [`Keys`].
    pub fn from_toml_str(text: &str) -> Result<Budgets, ConfigError> {
        BudgetsFile::from_toml_str(text)?.budgets(&[])
    }

    /// The file's `[fleet]` table, if it has one.
    pub fn fleet(&self) -> Option<&FleetConfig> {
        self.fleet.as_ref()
    }

    /// Where budget `name` keeps its permits, if there is such a budget.
    ///
    /// ```
    /// use inflight::config::{FleetFail, Scope};
    /// use inflight::Budgets;
    ///
    /// let budgets = Budgets::from_toml_str(r#"
    ///     [fleet]
    ///     url = "redis://127.0.0.1:6379"
    ///
    ///     [budgets.records]
    ///     max_concurrent = 6
    ///     scope = "fleet"
    ///     fail = "local"
    ///     local_limit = 2
    ///
    ///     [budgets.enrichment]
    ///     max_concurrent = 24
    /// "#).unwrap();
    /// assert_eq!(budgets.fleet().unwrap().url(), "redis://127.0.0.1:6379");
    /// assert_eq!(budgets.scope("records"), Some(Scope::Fleet { fail: FleetFail::Local(2) }));
    /// assert_eq!(budgets.scope("enrichment"), Some(Scope::Local));
    /// ```
    pub fn scope(&self, name: &str) -> Option<Scope> {
        let i = self.budgets.iter().position(|b| b.name() == name)?;
        self.scopes.get(i).copied()
    }

    /// How fleet budget `name` holds its permits (`lease_mode`); `None` for a budget that is
    /// not a fleet budget, or no such budget.
    ///
    /// ```
    /// use inflight::config::LeaseMode;
    /// use inflight::Budgets;
    ///
    /// let budgets = Budgets::from_toml_str(r#"
    ///     [fleet]
    ///     url = "redis://127.0.0.1:6379"
    ///
    ///     [budgets.search]
    ///     max_concurrent = 512
    ///     scope = "fleet"
    ///     lease_mode = "shares"
    ///
    ///     [budgets.records]
    ///     max_concurrent = 6
    ///     scope = "fleet"
    /// "#).unwrap();
    /// assert_eq!(budgets.lease_mode("search"), Some(LeaseMode::Shares));
    /// assert_eq!(budgets.lease_mode("records"), Some(LeaseMode::PerCall));
    ///
    /// let err = Budgets::from_toml_str(r#"
    ///     [fleet]
    ///     url = "redis://127.0.0.1:6379"
    ///
    ///     [budgets.search]
    ///     max_concurrent = 512
    ///     scope = "fleet"
    ///     lease_mode = "pooled"
    /// "#).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "budgets.search.lease_mode: must be \"per_call\" or \"shares\", got string \"pooled\""
    /// );
    /// ```
    pub fn lease_mode(&self, name: &str) -> Option<LeaseMode> {
        self.lease_modes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, mode)| *mode)
    }

    /// The same budgets, with budget `name` built again to keep its permits in `store` as well
    /// (its settings unchanged). A budget of another name is left as it is.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the budget when there is no budget `name`.
    pub fn with_store(mut self, name: &str, store: Arc<dyn Store>) -> Result<Budgets, ConfigError> {
        let Some(i) = self.budgets.iter().position(|b| b.name() == name) else {
            return Err(ConfigError::invalid(budget_path(name), "no such budget"));
        };
        let old = &self.budgets[i];
        self.budgets[i] = Budget::builder(name)
            .config(old.config().clone())
            .store(store)
            .build()
            .map_err(ConfigError::from_build)?;
        Ok(self)
    }

    /// Reads, parses and validates a budgets file.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Read`] when the file cannot be read, otherwise [`ConfigError::InFile`]
    /// around the error [`Budgets::from_toml_str`] gives for its text.
    ///
    /// A relative path in the file (`[fleet] ca_file`) is taken from the file's folder,
    /// wherever the process runs.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Budgets, ConfigError> {
        BudgetsFile::from_path(path)?.budgets(&[])
    }

    /// The budget named `name`.
    pub fn get(&self, name: &str) -> Option<&Budget> {
        self.budgets.iter().find(|b| b.name() == name)
    }

    /// The budgets, in file order.
    pub fn iter(&self) -> std::slice::Iter<'_, Budget> {
        self.budgets.iter()
    }

    /// How many budgets there are.
    pub fn len(&self) -> usize {
        self.budgets.len()
    }

    /// Whether there are none (a loaded file always has at least one).
    pub fn is_empty(&self) -> bool {
        self.budgets.is_empty()
    }
}

impl<'a> IntoIterator for &'a Budgets {
    type Item = &'a Budget;
    type IntoIter = std::slice::Iter<'a, Budget>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl IntoIterator for Budgets {
    type Item = Budget;
    type IntoIter = std::vec::IntoIter<Budget>;

    fn into_iter(self) -> Self::IntoIter {
        self.budgets.into_iter()
    }
}

impl BudgetsFile {
    /// The file's budgets, with every key checked: those of this crate, and only the names of
    /// those that `others` read (each reader checks its own). A key no one reads is refused.
    ///
    /// # Errors
    ///
    /// As [`Budgets::from_toml_str`], said to be in the file ([`ConfigError::InFile`]) when it
    /// was read from one.
    pub fn budgets(&self, others: &[Keys]) -> Result<Budgets, ConfigError> {
        let parsed = parse::budgets_file(self, others).map_err(|e| self.in_file(e))?;
        let mut budgets = Vec::with_capacity(parsed.budgets.len());
        let mut scopes = Vec::with_capacity(parsed.budgets.len());
        for (name, config, scope) in parsed.budgets {
            let budget =
                Budget::new(&name, config).map_err(|e| self.in_file(ConfigError::from_build(e)))?;
            budgets.push(budget);
            scopes.push(scope);
        }
        Ok(Budgets {
            budgets,
            scopes,
            fleet: parsed.fleet,
            lease_modes: parsed.lease_modes,
        })
    }
}
