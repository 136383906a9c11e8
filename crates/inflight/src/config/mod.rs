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
//! cold_start = "8ms"        # the start spreads the initial limit over this (at most 1s; "0s": at once)
//! probe_hold = 0            # aimd: after an overload, hold below its level up to this many round trips (0: off)
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
//! Other crates keep keys of their own in the same file: `inflight proxy` reads a `[proxy]`
//! table and, in a budget's table, where it listens for that budget and forwards to. They
//! read a [`BudgetsFile`] and name their [`Keys`] so that this crate does not refuse them.
//!
//! Everything is checked when the file is loaded; a file that loads is safe to run with.

mod budgets;
mod classes;
mod error;
mod file;
mod fleet;
mod parse;
pub mod value;

pub use budgets::Budgets;
pub use classes::MAX_CLASS_NAME;
pub use error::{budget_path, capped, ConfigError};
pub use file::{BudgetsFile, Keys};
pub use fleet::{shown_url, FleetConfig, FleetFail, LeaseMode, Scope};
