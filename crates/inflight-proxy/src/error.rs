//! Errors: one type per operation ([`Proxy::start`](crate::ProxyBuilder::start),
//! [`Proxy::reload`](crate::Proxy::reload)).

use std::net::SocketAddr;

use inflight::ConfigError;

/// Why a proxy did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The budgets file is not valid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No budget in the file names both an `upstream` and a `listen` address.
    #[error("no budget is proxied: give at least one [budgets.<name>] both upstream and listen")]
    NoProxiedBudget,
    /// The file's `[fleet]` table names no usable Redis.
    #[error(transparent)]
    Fleet(inflight_redis::LoadError),
    /// An address could not be listened on (in use, or not this machine's).
    #[error("{field}: cannot listen on {addr}: {source}")]
    Bind {
        /// The field that names the address (`budgets.records.listen`, `proxy.admin`).
        field: String,
        /// The address.
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Why a reload was refused; the running configuration stays as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The new file is not valid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The new file's `[fleet]` table names no usable Redis.
    #[error(transparent)]
    Fleet(inflight_redis::LoadError),
    /// The new file changes something only a restart can change (which budgets are proxied,
    /// where they listen, the admin address).
    #[error("{field}: {message}")]
    NeedsRestart {
        /// The dotted path of the field.
        field: String,
        /// What changed.
        message: String,
    },
}
