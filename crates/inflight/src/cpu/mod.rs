//! The CPU budget of a process under Linux cgroups: what it may use ([`CpuBudget`]), what common
//! runtimes would pick for it, and a cgroup with a CPU quota to run work in ([`QuotaGroup`]).
//!
//! - [`detect`]: [`CpuBudget`], read from `/proc/self` and `/sys/fs/cgroup` (or a copy of them):
//!   host CPUs, affinity, the quota of every cgroup level, the effective CPUs.
//! - [`runtimes`]: the parallelism Rust, .NET, the JVM and Go would choose for a budget.
//! - [`cgroup`]: [`QuotaGroup`], creating a cgroup with a quota (v1 or v2), and its counters.

pub mod cgroup;
pub mod detect;
mod mounts;
pub mod runtimes;

pub use cgroup::{
    throttle_stats_at, CgroupError, Enforcement, QuotaGroup, ThrottleStats, PERIOD_US,
};
pub use detect::{
    CgroupVersion, CpuBudget, CpuController, DetectError, LevelLimit, Limit, QuotaStatus,
};
pub use runtimes::{runtime_choices, RuntimeChoice};
