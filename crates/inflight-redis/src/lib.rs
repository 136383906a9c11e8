//! Fleet-wide budgets: one concurrency limit for a dependency, shared through Redis by every
//! replica of a service.
//!
//! A service scaled to N replicas, each with a local budget of 6 for its system of record, offers
//! it 6 × N calls at once. A [`RedisStore`] keeps the budget's permits in Redis instead, behind
//! the same [`Budget`](inflight::Budget) API: each call takes its local permit first (so a
//! process never asks Redis for more than its share), then a fleet lease.
//!
//! - **Leases that expire.** Each lease has an expiry on the Redis server's clock; holders renew
//!   theirs in the background while their call runs, and the next acquirer reclaims expired
//!   ones, so a process killed with SIGKILL frees its permits within one lease time.
//! - **Atomic and idempotent.** Acquire, renew and release are Lua scripts (run by `EVALSHA`,
//!   loaded again after a restart empties the script cache). The lease id is chosen by the
//!   caller, so an acquire whose reply was lost is never granted twice.
//! - **Nothing left behind.** [`RedisFleet::shutdown`] gives every lease back before the
//!   process ends (releases are otherwise sent in the background, and a process that ends at
//!   once would leave them held until they expire); a store dropped with releases still
//!   unanswered sends them itself, blocking for a bounded time.
//! - **Waiting in arrival order, fleet-wide.** A caller that finds the fleet full joins a queue
//!   in Redis; a release hands its permit to the earliest waiter of the whole fleet inside the
//!   same script and tells that waiter's process on a channel of its own, so the hand-off takes
//!   about one round trip. A queued waiter that stops asking (killed) is skipped one lease after
//!   its last ask. Waiting honours the budget's `permit_timeout`, `max_queued` and
//!   `call_timeout`.
//! - **When Redis is down**, [`Fail::Closed`] refuses calls with an error naming the budget and
//!   the Redis address, and [`Fail::Local`] falls back to a local limit once the outage is a
//!   lease and a third old (when the leases taken before it are lost), so that the dependency
//!   sees at most max(limit, processes x local limit); either is logged (through `tracing`),
//!   counted in [`FleetSnapshot`], and never waits past a deadline.
//! - **A rate for the whole fleet.** [`RedisStore::rate`] (or `rate` on a fleet budget in a
//!   budgets file) keeps the budget's rate limit in Redis, a GCRA on the server's clock shared
//!   by every replica; the budget applies no rate of its own per process.
//! - **The Redis that production runs.** One server, a Redis Cluster (from any node's address,
//!   or `redis+cluster://` seeds), a primary found through Sentinel (`redis+sentinel://`), over
//!   TLS (`rediss`), with ACL users: see [`RedisFleet`]'s topologies. All keys of a budget share
//!   one hash tag (`inflight:{records}:holders`), so a budget lives on one slot, and grants are
//!   told on a sharded channel of that slot.
//! - **State that Redis loses** (a restart without persistence, a flush, a failover that lost
//!   writes) is detected by each budget's epoch: the budget learns for one lease, granting
//!   nothing new while every process registers the calls it runs, those its local fallback
//!   admitted included (see the `scripts` module's docs in the source, and the guide's fleet chapter, `docs/guide/fleet.md`).
//! - **Loud.** A budget on its fallback is logged when it starts and every 10 s, counted, and
//!   shown by [`RedisFleet::health`], [`HealthLog`] and [`RedisFleet::status`] (what
//!   `inflight fleet status` prints).
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use inflight::Budget;
//! use inflight_redis::{Fail, RedisFleet};
//!
//! let fleet = RedisFleet::builder("redis://127.0.0.1:6379")
//!     .lease(Duration::from_secs(5))
//!     .build()
//!     .unwrap();
//! let records = Budget::builder("records")
//!     .max_concurrent(6)
//!     .permit_timeout(Duration::from_millis(500))
//!     .store(Arc::new(fleet.store(6, Fail::Local(2))))
//!     .build()
//!     .unwrap();
//! // records.call(..) now admits at most 6 calls at once across every process on this Redis,
//! // and 2 per process while Redis is unreachable.
//! # drop(records);
//! ```
//!
//! Budgets files name the fleet once and mark the budgets it keeps (see [`load`]):
//!
//! ```toml
//! [fleet]
//! url = "redis://127.0.0.1:6379"
//! lease = "5s"
//!
//! [budgets.records]
//! max_concurrent = 6
//! permit_timeout = "500ms"
//! scope = "fleet"
//! fail = "local"      # or "closed" (the default)
//! local_limit = 2     # with fail = "local": the limit per process while Redis is down
//!
//! [budgets.search]
//! max_concurrent = 512
//! scope = "fleet"
//! lease_mode = "shares" # a share per process instead of a lease per call: see ShareStore
//! ```
//!
//! # Modules
//!
//! - [`RedisFleet`]: the Redis a fleet shares and its settings; makes stores and rate limits;
//!   [`FleetStatus`], a budget as Redis holds it; [`FleetHealth`] and [`HealthLog`], whether a
//!   budget runs on Redis now.
//! - [`RedisStore`]: a budget's permits in Redis; [`Fail`]; [`FleetSnapshot`], its counters.
//! - [`ShareStore`]: a budget's limit as shares held by each process for a lease, for limits
//!   large against the number of processes; [`ShareSnapshot`], its state and counters.
//! - [`FleetRate`]: a fleet rate limit, a GCRA on the server's clock.
//! - [`load`], [`attach`] and [`attach_fleet`]: budgets files with a `[fleet]` table.
//! - `metrics` (feature `metrics`): a store's gauges and counters through the `metrics` facade.
//!
//! # Layers
//!
//! From the top down: a module uses only modules on lower lines (`scripts/check-layers.py`
//! checks it in CI).
//!
//! - `config`, `metrics`
//! - `health`
//! - `fleet`
//! - `store`
//! - `rate`, `shares`
//! - `engine`
//! - `fake`
//! - `server`, `snapshot`
//! - `link`
//! - `alloc`, `backoff`, `error`, `fallback`, `grants`, `scripts`, `status`

#[cfg(test)]
mod alloc;
mod backoff;
mod config;
mod engine;
mod error;
#[cfg(test)]
mod fake;
mod fallback;
mod fleet;
mod grants;
mod health;
mod link;
#[cfg(feature = "metrics")]
pub mod metrics;
mod rate;
mod scripts;
mod server;
mod shares;
mod snapshot;
mod status;
mod store;

pub use config::{attach, attach_fleet, load, LoadError};
pub use error::{FleetError, FleetUnavailable};
pub use fallback::Fail;
pub use fleet::{FleetBuilder, RedisFleet};
pub use health::{FleetHealth, HealthLog};
pub use rate::{FleetRate, RateError};
/// The keys a fleet budget or rate limit of a name keeps in Redis (`inflight:{records}:holders`,
/// ...): what to delete to start a budget afresh, when no process holds its permits.
pub use scripts::budget_keys;
pub use shares::{ShareSnapshot, ShareStore};
pub use snapshot::FleetSnapshot;
pub use status::FleetStatus;
pub use store::RedisStore;

// Every Rust snippet in the workspace README and in the guide (`docs/guide/`) compiles (and, but
// for those that need a Redis, runs) as a doctest here: the crate that sees the library with every
// feature on, and the fleet. The lab's chapter runs in `inflight-lab`, whose API it shows. The includes read links under `tests/` (`tests/workspace-README.md`,
// `tests/guide/*.md`) rather than paths outside the crate: those are missing from the packaged
// crate, while the links are packaged with their text, so the doctests run there too.
#[cfg(doctest)]
#[doc = include_str!("../tests/workspace-README.md")]
pub struct WorkspaceReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../tests/guide/README.md")]
pub struct GuideReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../tests/guide/library.md")]
pub struct GuideLibraryDoctests;

#[cfg(doctest)]
#[doc = include_str!("../tests/guide/budgets-files.md")]
pub struct GuideBudgetsFilesDoctests;

#[cfg(doctest)]
#[doc = include_str!("../tests/guide/limits.md")]
pub struct GuideLimitsDoctests;

#[cfg(doctest)]
#[doc = include_str!("../tests/guide/priorities.md")]
pub struct GuidePrioritiesDoctests;

#[cfg(doctest)]
#[doc = include_str!("../tests/guide/fleet.md")]
pub struct GuideFleetDoctests;

#[cfg(doctest)]
#[doc = include_str!("../tests/guide/proxy.md")]
pub struct GuideProxyDoctests;

#[cfg(doctest)]
#[doc = include_str!("../tests/guide/cli.md")]
pub struct GuideCliDoctests;

// This crate's own README (its page in the registry) runs as doctests too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
