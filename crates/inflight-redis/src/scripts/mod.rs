//! The Lua scripts a fleet budget runs on the Redis server: acquire, renew, release (with the
//! fleet's wait queue), the shares report, and the GCRA of a fleet rate limit. Each reads the
//! server's clock (`TIME`), never a client's.
//!
//! Every key a script touches is passed in `KEYS` and carries the budget's hash tag
//! (`inflight:{name}:...`), so a budget lives on one slot of a Redis Cluster. Since Redis 5
//! scripts are replicated by their effects, so reading `TIME` inside one is safe.
//!
//! # Grants told
//!
//! A script that hands a permit to a waiter tells the waiter's process on a channel of its own.
//! On one server (or a primary found through Sentinel) that is `PUBLISH` on
//! `inflight:grants:<process>`; on a Cluster it is `SPUBLISH` on
//! `inflight:{name}:grants:<process>`, a sharded channel in the budget's own slot, so the word
//! stays on the budget's shard instead of crossing the whole cluster bus ([`Scripts::for_cluster`]).
//!
//! # Epochs: state that Redis lost
//!
//! Each budget keeps `inflight:{name}:epoch`, a hash of `epoch` (the server's clock in
//! microseconds when the budget's state began), `version` (bumped by every write that grants,
//! renews or registers) and `learn` (server milliseconds until which nothing new is granted).
//! Every script is told the epoch and the highest version its process has seen, and answers
//! with its own:
//!
//! - **State gone** (a restart without persistence, a flush): the hash is missing. Made again
//!   by a process that had seen an epoch, the budget starts *learning* for one lease.
//! - **Writes lost** (a failover with asynchronous replication): a process has seen a higher
//!   version (or a later epoch) than the server holds. The budget takes a new epoch and learns
//!   for one lease.
//! - **Learning**: nothing new is granted, and every process that runs calls re-registers them
//!   at its next round trip (its renewal, at most a third of a lease away, or at once when it
//!   sees the new epoch): leases missing from a server whose epoch the process had not seen are
//!   added back, and calls admitted on the local fallback are added as holders. A lease added
//!   back extends learning to one lease from then. After learning, grants resume below the
//!   limit, counting every call registered.
//!
//! A process's own lease, still valid on its own clock, is re-registered only when the server's
//! epoch moved: with the epoch unchanged, a missing lease was taken back on expiry, and is lost.
//!
//! # Files
//!
//! - `mod.rs`: [`Scripts`] and [`GCRA`], the scripts as a server runs them.
//! - `sources.rs`: what each script takes and returns; its Lua text is in `lua/`.
//! - `keys.rs`: the names of the keys and channels.
//!
//! They run on a real `redis-server` in `tests/scripts.rs`.

use std::sync::LazyLock;

use redis::Script;

pub(crate) mod keys;
mod sources;

pub use keys::budget_keys;
pub(crate) use keys::{
    cluster_slot, epoch_key, grants_channel, lease_keys, rate_key, sharded_grants_channel,
    share_keys, shares_key, PROCESS_TOKEN_LEN,
};
use sources::{
    ACQUIRE, FENCE, GCRA_SOURCE, PRELUDE, RELEASE, RENEW, SHARES, TELL_PLAIN, TELL_SHARDED,
};

/// The lease and shares scripts, as one kind of deployment runs them.
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) renew: Script,
    pub(crate) release: Script,
    pub(crate) shares: Script,
    /// Their sources, to load them when a connection is made.
    sources: Vec<String>,
}

impl Scripts {
    fn new(tell: &str) -> Scripts {
        let tell = tell.replace("TOKEN_LEN", &PROCESS_TOKEN_LEN.to_string());
        let lease = |body: &str| format!("{FENCE}{tell}{PRELUDE}{body}");
        let sources = vec![
            lease(ACQUIRE),
            lease(RENEW),
            lease(RELEASE),
            format!("{FENCE}{tell}{SHARES}"),
        ];
        Scripts {
            acquire: Script::new(&sources[0]),
            renew: Script::new(&sources[1]),
            release: Script::new(&sources[2]),
            shares: Script::new(&sources[3]),
            sources,
        }
    }

    /// The scripts' sources, the GCRA's included: loaded with `SCRIPT LOAD` in one pipeline
    /// when a connection is made, so that the first calls need no `NOSCRIPT` round trip.
    pub(crate) fn sources(&self) -> impl Iterator<Item = &str> {
        self.sources
            .iter()
            .map(String::as_str)
            .chain(std::iter::once(GCRA_SOURCE))
    }

    /// The scripts for one server, or a primary found through Sentinel (`PUBLISH`).
    pub(crate) fn for_node() -> &'static Scripts {
        static PLAIN: LazyLock<Scripts> = LazyLock::new(|| Scripts::new(TELL_PLAIN));
        &PLAIN
    }

    /// The scripts for a Redis Cluster (`SPUBLISH` in the budget's slot).
    pub(crate) fn for_cluster() -> &'static Scripts {
        static SHARDED: LazyLock<Scripts> = LazyLock::new(|| Scripts::new(TELL_SHARDED));
        &SHARDED
    }
}

/// The GCRA of a fleet rate limit (see [`GCRA_SOURCE`](sources::GCRA_SOURCE)).
pub(crate) static GCRA: LazyLock<Script> = LazyLock::new(|| Script::new(GCRA_SOURCE));
