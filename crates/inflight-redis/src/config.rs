//! Budgets files with a `[fleet]` table: [`load`] and [`attach`] give each fleet-scoped budget
//! a [`RedisStore`](crate::RedisStore).

use std::path::Path;
use std::sync::Arc;

use inflight::config::{FleetFail, LeaseMode, Scope};
use inflight::{Budgets, ConfigError};

use crate::{Fail, FleetError, RedisFleet};

/// Why a budgets file with fleet budgets could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read, or is refused (see [`Budgets::from_path`]).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The `[fleet]` table names no usable Redis.
    #[error("fleet: {0}")]
    Fleet(#[from] FleetError),
}

/// Reads a budgets file and gives each budget with `scope = "fleet"` its permits in the Redis
/// of the file's `[fleet]` table.
///
/// Does not connect: the connection opens on the first call (see [`RedisFleet`]).
///
/// # Errors
///
/// [`LoadError::Config`] for a file that cannot be read or is refused;
/// [`LoadError::Fleet`] when `[fleet] url` is not a fleet URL, the lease is too short, or
/// `ca_file` cannot be read.
pub fn load(path: impl AsRef<Path>) -> Result<Budgets, LoadError> {
    attach(Budgets::from_path(path)?)
}

/// Gives each budget with `scope = "fleet"` in `budgets` its permits in the Redis of their
/// `[fleet]` table: the budget's `max_concurrent` becomes the fleet's limit, its `fail` the
/// policy while Redis cannot be reached, its `lease_mode` whether it takes a lease per call
/// ([`RedisFleet::store`], the default) or holds shares ([`RedisFleet::shares`],
/// `lease_mode = "shares"`). Other budgets are left as they are.
///
/// A fleet budget's `rate` (and `burst`) is kept for the whole fleet too, by its store (see
/// [`RedisStore::rate`](crate::RedisStore::rate)): calls start at most at that rate across
/// every replica together, and the budget applies no rate of its own per process. While Redis
/// cannot be reached, `fail = "local"` applies the rate in each process on its own, and
/// `fail = "closed"` refuses.
///
/// ```
/// use inflight::Budgets;
///
/// let budgets = Budgets::from_toml_str(r#"
///     [fleet]
///     url = "redis://127.0.0.1:6379"
///
///     [budgets.llm]
///     max_concurrent = 16
///     permit_timeout = "2s"
///     rate = "600/min"    # the provider's quota, for every replica together
///     burst = 5
///     scope = "fleet"
/// "#).unwrap();
/// let budgets = inflight_redis::attach(budgets).unwrap();
/// # drop(budgets);
/// ```
///
/// ```
/// use inflight::Budgets;
///
/// let budgets = Budgets::from_toml_str(r#"
///     [fleet]
///     url = "redis://127.0.0.1:6379"
///     lease = "5s"
///
///     [budgets.records]
///     max_concurrent = 6
///     permit_timeout = "500ms"
///     scope = "fleet"
///     fail = "closed"
/// "#).unwrap();
/// let budgets = inflight_redis::attach(budgets).unwrap();
/// // A fleet budget never grants without asking Redis.
/// assert!(budgets.get("records").unwrap().try_acquire().is_err());
/// ```
///
/// # Errors
///
/// [`LoadError::Fleet`] when `[fleet] url` is not a fleet URL, the lease is too short, or
/// `ca_file` cannot be read.
pub fn attach(budgets: Budgets) -> Result<Budgets, LoadError> {
    attach_fleet(budgets).map(|(budgets, _)| budgets)
}

/// [`attach`], also returning the [`RedisFleet`] that keeps the fleet budgets' permits (`None`
/// when the file has no `[fleet]` table), for a process that gives every lease back before it
/// ends with [`RedisFleet::shutdown`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let budgets = inflight::Budgets::from_toml_str(r#"
///     [fleet]
///     url = "redis://127.0.0.1:6379"
///
///     [budgets.records]
///     max_concurrent = 6
///     scope = "fleet"
/// "#).unwrap();
/// let (budgets, fleet) = inflight_redis::attach_fleet(budgets).unwrap();
/// // ... calls through budgets.get("records") ...
/// if let Some(fleet) = fleet {
///     fleet.shutdown().await; // every lease of this process is back in Redis
/// }
/// # }
/// ```
///
/// # Errors
///
/// As [`attach`].
pub fn attach_fleet(budgets: Budgets) -> Result<(Budgets, Option<RedisFleet>), LoadError> {
    let Some(config) = budgets.fleet() else {
        return Ok((budgets, None));
    };
    let fleet = RedisFleet::from_config(config)?;
    // Each fleet budget's store, made while the budgets are borrowed; attached after.
    let mut stores = Vec::new();
    for b in budgets.iter() {
        let Some(Scope::Fleet { fail }) = budgets.scope(b.name()) else {
            continue;
        };
        let fail = match fail {
            FleetFail::Local(n) => Fail::Local(n),
            _ => Fail::Closed,
        };
        let limit = b.config().max_concurrent();
        // The budgets file refuses a rate next to lease_mode = "shares".
        let store: Arc<dyn inflight::store::Store> = match budgets.lease_mode(b.name()) {
            Some(LeaseMode::Shares) => {
                let store = fleet.shares(limit, fail);
                store.register(b.name());
                Arc::new(store)
            }
            _ => {
                let mut store = fleet.store(limit, fail);
                store.register(b.name());
                if let Some((rate, burst)) = b.config().rate_limit() {
                    store = store.rate(rate, burst)?;
                }
                Arc::new(store)
            }
        };
        stores.push((b.name().to_string(), store));
    }
    let mut budgets = budgets;
    for (name, store) in stores {
        budgets = budgets.with_store(&name, store)?;
    }
    Ok((budgets, Some(fleet)))
}
