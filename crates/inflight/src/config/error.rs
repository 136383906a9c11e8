//! [`ConfigError`]: why a budget or a budgets file was refused, each mistake named by its dotted
//! path ([`budget_path`]).

use std::path::{Path, PathBuf};

use crate::budget::BuildError;

/// The most characters of one line of a message echoed back from a file: a file of one 5 MB
/// line must not put 5 MB on a terminal.
pub(crate) const MAX_ECHOED_LINE: usize = 200;

/// `message` with every line cut to 200 characters, and how long it was: how a message that
/// echoes what a user wrote (a value, a key, a URL, a server's answer) is shown.
///
/// ```
/// use inflight::config::capped;
///
/// assert_eq!(capped("short"), "short");
/// let long = "x".repeat(1_000_000);
/// assert_eq!(capped(&long), format!("{}... (1000000 characters in all)", "x".repeat(200)));
/// ```
pub fn capped(message: &str) -> String {
    cut_lines(message, MAX_ECHOED_LINE)
}

/// The most characters of one line of a message: its own words (a list of the keys a table
/// takes runs to hundreds) and the values it echoes, each cut to [`MAX_ECHOED_LINE`].
const MAX_MESSAGE_LINE: usize = 2_000;

/// `message` with every line cut to `max` characters, saying how long it was.
fn cut_lines(message: &str, max: usize) -> String {
    message
        .lines()
        .map(|line| {
            if line.chars().count() > max {
                let cut: String = line.chars().take(max).collect();
                format!("{cut}... ({} characters in all)", line.chars().count())
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

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
    /// A mistake in the field at dotted path `field` (`budgets.records.max_concurrent`): how a
    /// crate that reads keys of its own in a budgets file (see [`Keys`](super::Keys)) reports
    /// one.
    ///
    /// ```
    /// use inflight::ConfigError;
    ///
    /// let e = ConfigError::invalid("proxy.drain", "must be a duration");
    /// assert_eq!(e.to_string(), "proxy.drain: must be a duration");
    /// assert_eq!(e.field(), Some("proxy.drain"));
    /// ```
    ///
    /// The field (which may echo a key as written) is cut to 200 characters, and each line of
    /// the message to 2,000 (a value it echoes should be cut to 200 by itself, see [`capped`]).
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            field: capped(&field.into()),
            message: cut_lines(&message.into(), MAX_MESSAGE_LINE),
        }
    }

    /// `None` for no errors, the error itself for one, [`ConfigError::Several`] for more (in the
    /// order given, with every [`ConfigError::Several`] among them opened up).
    ///
    /// ```
    /// use inflight::ConfigError;
    ///
    /// assert!(ConfigError::join(Vec::new()).is_none());
    /// let both = ConfigError::join(vec![
    ///     ConfigError::invalid("budgets.a.max_concurrent", "must be at least 1, got 0"),
    ///     ConfigError::invalid("proxy.admin", "missing"),
    /// ]).unwrap();
    /// assert_eq!(both.errors().len(), 2);
    /// ```
    pub fn join(errors: impl IntoIterator<Item = ConfigError>) -> Option<ConfigError> {
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
