//! [`Budgets`]: a set of named budgets loaded from a TOML file, and [`ConfigError`].
//!
//! The file has one table per dependency:
//!
//! ```toml
//! [budgets.records]
//! max_concurrent = 6        # required, at least 1
//! max_queued = 6            # optional, default unbounded; 0 fails fast
//! permit_timeout = "500ms"  # optional deadline for the wait for a permit
//! call_timeout = "2s"       # optional deadline for the call, started once the permit is held
//! service_time = "150ms"    # optional: typical time per call, for sizing
//! target_rate = "40/s"      # optional: the throughput you want through this budget
//! ```
//!
//! A budget whose dependency's capacity is unknown, or moves, can let its limit learn instead
//! (feature `adaptive`, on by default; see [`crate::limit`]):
//!
//! ```toml
//! [budgets.records]
//! limit = "adaptive"        # "fixed" (the default) or "adaptive"
//! algorithm = "vegas"       # "vegas" (latency-based, the default) or "aimd" (loss-based)
//! min = 1                   # the floor, default 1
//! max = 64                  # the ceiling (max_concurrent is the same number), default 100
//! initial = 4               # where it starts, default 4
//! backoff = 0.75            # the cut on overload, 0.5 to 0.95, default 0.5 (vegas), 0.75 (aimd)
//! ```
//!
//! A budget may also limit how fast calls start, next to how many run at once (feature `rate`,
//! on by default; see [`BudgetConfig::rate`](crate::BudgetConfig::rate)):
//!
//! ```toml
//! [budgets.llm]
//! max_concurrent = 16
//! rate = "600/min"          # also "/s", "/ms", "/h"
//! burst = 1                 # calls that may start back to back after a quiet spell, default 1
//! permit_timeout = "30s"    # a turn that would come later than this is refused at once
//! ```
//!
//! When a budget is tight, its priority classes say who goes first (see
//! [`Classes`](crate::Classes)): grants go to the classes with waiters by weight, and a full
//! queue makes room for a heavier class by refusing the newest waiter of the lightest. A call
//! names its class ([`Budget::acquire_in`](crate::Budget::acquire_in), the tower layer's
//! `class_by` or a request extension, the proxy's `class_header`); a call that
//! names none, or a class the budget lacks, is in the default class.
//!
//! ```toml
//! [budgets.records]
//! max_concurrent = 6
//! permit_timeout = "500ms"
//! classes = { interactive = { weight = 4, permit_timeout = "50ms" }, batch = 1 }
//! default_class = "batch"   # optional: else the lightest class (the last declared of them)
//! strict = false            # optional: true serves the heaviest class with waiters first
//! ```
//!
//! A weight is a whole number from 1 to 1000; a class's own `permit_timeout` replaces the
//! budget's for it. At most 16 classes, each named by 1 to 64 ASCII letters, digits, `-`, `_`
//! or `.` (names travel in request headers and metrics labels).
//!
//! A budget can keep its permits where every replica of a service sees them: `scope = "fleet"`,
//! with the shared store named once in a `[fleet]` table. This crate only reads and checks these
//! keys ([`Budgets::fleet`], [`Budgets::scope`], [`Budgets::lease_mode`]); a store crate such as `inflight-redis` attaches
//! the store (see [`Budgets::with_store`]).
//!
//! ```toml
//! [fleet]
//! url = "redis://127.0.0.1:6379"
//! lease = "5s"              # optional: a crashed holder's permits free within this time
//!
//! [budgets.records]
//! max_concurrent = 6        # the limit across the whole fleet
//! scope = "fleet"           # "local" (the default) or "fleet"
//! fail = "local"            # while the store is unreachable: "closed" (the default) or "local"
//! local_limit = 2           # with fail = "local": the limit per process meanwhile
//! lease_mode = "per_call"   # "per_call" (the default) or "shares": see Budgets::lease_mode
//! ```
//!
//! A budget can also be enforced in front of its dependency by `inflight proxy`, for clients in
//! any language: it names the `upstream` to forward to and the address to `listen` on, with a
//! `[proxy]` table for the proxy as a whole (see [`Route`] and [`ProxyConfig`]):
//!
//! ```toml
//! [proxy]
//! admin = "127.0.0.1:9901"  # optional: GET /metrics, /healthz, /readyz
//! drain = "10s"             # optional: on SIGTERM, how long in-flight requests may finish
//!
//! [budgets.records]
//! max_concurrent = 6
//! upstream = "http://127.0.0.1:7070"
//! listen = "127.0.0.1:7002"
//! release = "body"          # "body" (the default) or "headers": when the permit goes back
//! overload_status = [429, 503]  # upstream answers fed to an adaptive limit as overload
//! preserve_host = false     # true: forward the client's Host header unchanged
//! upstream_http2 = false    # true: HTTP/2 with prior knowledge to the upstream
//! ```
//!
//! An `https://` upstream is spoken to over TLS, its certificate checked against the system's
//! roots, or against `ca_file = "ca.pem"` (PEM; a relative path is taken from the budgets file's
//! folder).
//!
//! Everything is checked when the file is loaded; a file that loads is safe to run with.

mod classes;
mod parse;
mod proxy;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::budget::{Budget, BuildError};
use crate::store::Store;

pub use classes::MAX_CLASS_NAME;
pub use proxy::{
    CaFile, ProxyConfig, Release, Route, Upstream, DEFAULT_DRAIN, DEFAULT_OVERLOAD_STATUS,
    MAX_CLASS_HEADER,
};

/// Why a budget or a budgets file was refused.
///
/// Messages name the field they are about, as `budgets.<name>.<field>: <what is wrong>`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A field is missing, of the wrong type, out of range, or unknown.
    #[error("{field}: {message}")]
    Invalid {
        /// The dotted path of the field, e.g. `budgets.records.max_concurrent`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The text is not valid TOML.
    #[error("invalid TOML: {0}")]
    Toml(String),
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Several mistakes, each on its own (in file order).
    #[error("{} errors:\n{}", errors.len(), errors.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n"))]
    Several { errors: Vec<ConfigError> },
    /// The file at `path` was read but is refused for this reason.
    #[error("{}: {error}", path.display())]
    InFile {
        path: PathBuf,
        error: Box<ConfigError>,
    },
}

impl ConfigError {
    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// `None` for no errors, the error itself for one, [`ConfigError::Several`] for more.
    pub(crate) fn all(errors: Vec<ConfigError>) -> Option<ConfigError> {
        let mut errors: Vec<ConfigError> = errors
            .into_iter()
            .flat_map(|e| match e {
                ConfigError::Several { errors } => errors,
                other => vec![other],
            })
            .collect();
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(ConfigError::Several { errors }),
        }
    }

    /// Every mistake this error reports, one by one.
    pub fn errors(&self) -> Vec<&ConfigError> {
        match self {
            ConfigError::Several { errors } => errors.iter().flat_map(|e| e.errors()).collect(),
            ConfigError::InFile { error, .. } => error.errors(),
            other => vec![other],
        }
    }

    /// A budget's own refusal, with the field named by its path in the file.
    pub(crate) fn from_build(error: BuildError) -> Self {
        let budget = budget_path(error.budget());
        let field = match error.field() {
            "name" => budget,
            field => format!("{budget}.{field}"),
        };
        ConfigError::invalid(field, error.message())
    }

    /// The dotted path of the field this error is about, if it is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { field, .. } => Some(field),
            ConfigError::InFile { error, .. } => error.field(),
            ConfigError::Several { errors } => errors.first().and_then(|e| e.field()),
            _ => None,
        }
    }

    /// The file this error is about, if it came from one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            ConfigError::Read { path, .. } | ConfigError::InFile { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The error without the file it came from: what is wrong, as the text alone would say it.
    pub fn without_path(&self) -> &ConfigError {
        match self {
            ConfigError::InFile { error, .. } => error.without_path(),
            other => other,
        }
    }
}

/// The dotted path of budget `name` in a budgets file, as errors print it: `budgets.records`, or
/// `budgets."a.b"` when the name is not a bare TOML key (so a dot in a name is not read as a
/// nested table, and an empty name still shows).
///
/// ```
/// use inflight::config::budget_path;
///
/// assert_eq!(budget_path("records"), "budgets.records");
/// assert_eq!(budget_path("a.b"), r#"budgets."a.b""#);
/// ```
pub fn budget_path(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        format!("budgets.{name}")
    } else {
        format!("budgets.{name:?}")
    }
}

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
    routes: Vec<Option<Route>>,
    fleet: Option<FleetConfig>,
    proxy: Option<ProxyConfig>,
    lease_modes: Vec<(String, LeaseMode)>,
}

/// The `[fleet]` table of a budgets file: where fleet-scoped budgets keep their permits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetConfig {
    pub(crate) url: String,
    pub(crate) lease: Option<Duration>,
    pub(crate) ca_file: Option<std::path::PathBuf>,
}

impl FleetConfig {
    /// The store's URL, as written (`redis://127.0.0.1:6379`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// How long a lease lasts without renewal, if the file says.
    pub fn lease(&self) -> Option<Duration> {
        self.lease
    }

    /// The PEM file of certificate authorities a `rediss` server's certificate must chain to,
    /// if the file says (`ca_file`; a relative path is taken from the budgets file's folder).
    pub fn ca_file(&self) -> Option<&std::path::Path> {
        self.ca_file.as_deref()
    }

    /// The URL with its password (if any) shown as `***`, for logs and reports.
    ///
    /// ```
    /// let budgets = inflight::Budgets::from_toml_str(r#"
    ///     [fleet]
    ///     url = "redis://app:s3cret@127.0.0.1:6379/0"
    ///
    ///     [budgets.records]
    ///     max_concurrent = 6
    ///     scope = "fleet"
    /// "#).unwrap();
    /// assert_eq!(budgets.fleet().unwrap().shown_url(), "redis://app:***@127.0.0.1:6379/0");
    /// ```
    pub fn shown_url(&self) -> String {
        shown_url(&self.url)
    }
}

/// `url` with the password of its user part (if any) shown as `***`: how a store's URL is
/// shown in logs, reports and errors.
///
/// ```
/// use inflight::config::shown_url;
///
/// assert_eq!(shown_url("rediss://app:pw@h:6380/1"), "rediss://app:***@h:6380/1");
/// assert_eq!(shown_url("redis+sentinel://:pw@s1:26379,s2:26379/m"), "redis+sentinel://:***@s1:26379,s2:26379/m");
/// assert_eq!(shown_url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
/// ```
pub fn shown_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let user = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None => userinfo.to_string(),
            };
            format!("{scheme}://{user}@{hosts}{path}")
        }
        None => url.to_string(),
    }
}

/// Where a budget's permits live (`scope` in a budgets file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Scope {
    /// In this process only (the default).
    #[default]
    Local,
    /// In the fleet's shared store (`scope = "fleet"`), taken after the local permit.
    Fleet {
        /// What happens while the store cannot be reached.
        fail: FleetFail,
    },
}

/// How a fleet budget holds its permits (`lease_mode` in a budgets file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LeaseMode {
    /// A lease per call, taken from the fleet's store and given back when the call ends
    /// (`lease_mode = "per_call"`, the default): for small limits.
    #[default]
    PerCall,
    /// A share of the limit per process, held for a lease and moved as demand moves
    /// (`lease_mode = "shares"`): for limits large against the number of processes, at a cost
    /// that follows the moves of the shares rather than the calls.
    Shares,
}

/// What a fleet budget does while its store cannot be reached (`fail` in a budgets file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FleetFail {
    /// Refuse calls (`fail = "closed"`, the default).
    Closed,
    /// Admit at most this many at once per process (`fail = "local"`, `local_limit = n`).
    Local(usize),
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
    /// A relative path in the text (`ca_file`) is taken from the current directory; use
    /// [`Budgets::from_path`] to take it from the file's folder.
    pub fn from_toml_str(text: &str) -> Result<Budgets, ConfigError> {
        Budgets::from_toml_in(text, None)
    }

    /// [`Budgets::from_toml_str`], with relative paths resolved against `folder`.
    fn from_toml_in(text: &str, folder: Option<&Path>) -> Result<Budgets, ConfigError> {
        let parsed = parse::budgets_file(text, folder)?;
        let mut budgets = Vec::with_capacity(parsed.budgets.len());
        let mut scopes = Vec::with_capacity(parsed.budgets.len());
        let mut routes = Vec::with_capacity(parsed.budgets.len());
        for (name, config, scope, route) in parsed.budgets {
            budgets.push(Budget::new(&name, config).map_err(ConfigError::from_build)?);
            scopes.push(scope);
            routes.push(route);
        }
        Ok(Budgets {
            budgets,
            scopes,
            routes,
            fleet: parsed.fleet,
            proxy: parsed.proxy,
            lease_modes: parsed.lease_modes,
        })
    }

    /// The file's `[proxy]` table, if it has one.
    pub fn proxy(&self) -> Option<&ProxyConfig> {
        self.proxy.as_ref()
    }

    /// Where `inflight proxy` listens for budget `name` and forwards to, if it is proxied.
    ///
    /// ```
    /// use inflight::config::Release;
    /// use inflight::Budgets;
    ///
    /// let budgets = Budgets::from_toml_str(r#"
    ///     [budgets.records]
    ///     max_concurrent = 6
    ///     upstream = "http://127.0.0.1:7070"
    ///     listen = "127.0.0.1:7002"
    ///
    ///     [budgets.enrichment]
    ///     max_concurrent = 24
    /// "#).unwrap();
    /// let records = budgets.route("records").unwrap();
    /// assert_eq!(records.upstream().authority(), "127.0.0.1:7070");
    /// assert_eq!(records.release(), Release::Body);
    /// assert!(budgets.route("enrichment").is_none());
    /// ```
    pub fn route(&self, name: &str) -> Option<&Route> {
        let i = self.budgets.iter().position(|b| b.name() == name)?;
        self.routes.get(i)?.as_ref()
    }

    /// The proxied budgets with their routes, in file order.
    pub fn routes(&self) -> impl Iterator<Item = (&Budget, &Route)> {
        self.budgets
            .iter()
            .zip(&self.routes)
            .filter_map(|(b, r)| Some((b, r.as_ref()?)))
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
    /// A relative path in the file (`ca_file`) is taken from the file's folder, wherever the
    /// process runs.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Budgets, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
        Budgets::from_toml_in(&text, folder).map_err(|error| ConfigError::InFile {
            path: path.to_path_buf(),
            error: Box::new(error),
        })
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
