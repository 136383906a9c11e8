//! The fleet's keys of a budgets file: the `[fleet]` table ([`FleetConfig`]) and, per budget,
//! where its permits live ([`Scope`], [`FleetFail`]) and how a fleet budget holds them
//! ([`LeaseMode`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::capped;

/// The `[fleet]` table of a budgets file: where fleet-scoped budgets keep their permits. Its
/// `Debug` shows the URL without its password, as [`FleetConfig::shown_url`] does.
#[derive(Clone, PartialEq, Eq)]
pub struct FleetConfig {
    pub(crate) url: String,
    pub(crate) lease: Option<Duration>,
    pub(crate) ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for FleetConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetConfig")
            .field("url", &self.shown_url())
            .field("lease", &self.lease)
            .field("ca_file", &self.ca_file)
            .finish()
    }
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
    pub fn ca_file(&self) -> Option<&Path> {
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
/// shown in logs, reports and errors. The user part ends at the last `@` before any query, so a
/// password with a raw `/` or `@` in it (which a URL should percent-encode) is hidden too; with
/// no `@` before the first `?` or `#`, the whole user part up to the last `@` of all is hidden,
/// so a raw `?` or `#` in it shows nothing of it. Cut to 200 characters, as every value a
/// message echoes ([`capped`]).
///
/// ```
/// use inflight::config::shown_url;
///
/// assert_eq!(shown_url("rediss://app:pw@h:6380/1"), "rediss://app:***@h:6380/1");
/// assert_eq!(shown_url("redis+sentinel://:pw@s1:26379,s2:26379/m"), "redis+sentinel://:***@s1:26379,s2:26379/m");
/// assert_eq!(shown_url("redis://app:p/w@d@h:6379/0"), "redis://app:***@h:6379/0");
/// assert_eq!(shown_url("redis://app:Top#Secret1@h:6401"), "redis://***@h:6401");
/// assert_eq!(shown_url("redis://app:Top?Secret1@h:6401/0"), "redis://***@h:6401/0");
/// assert_eq!(shown_url("redis://SEK#RIT@h:6401"), "redis://***@h:6401");
/// assert_eq!(shown_url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
/// let long = format!("redis://{}:6379", "h".repeat(300));
/// assert!(shown_url(&long).ends_with("... (313 characters in all)"));
/// ```
pub fn shown_url(url: &str) -> String {
    capped(&without_password(url))
}

/// `url` with its password hidden, whole (see [`shown_url`]).
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let query = rest.find(['?', '#']).unwrap_or(rest.len());
    if let Some(at) = rest[..query].rfind('@') {
        let (userinfo, hosts) = (&rest[..at], &rest[at..]);
        let user = match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***"),
            None => userinfo.to_string(),
        };
        return format!("{scheme}://{user}{hosts}");
    }
    match rest.rfind('@') {
        // A raw `?` or `#` inside the user part: where the name ends cannot be told, so all
        // of it is hidden.
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_password() {
        let config = FleetConfig {
            url: "rediss://app:s3cret@127.0.0.1:6380".into(),
            lease: None,
            ca_file: None,
        };
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("app:***@127.0.0.1:6380"), "{shown}");
    }
}
