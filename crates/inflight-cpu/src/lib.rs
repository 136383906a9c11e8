//! The CPU budget of a Linux process, and cgroups with a CPU quota to run work in.
//!
//! A pool sized from the machine's CPU count is wrong inside a container: the affinity mask, or a
//! cgroup quota on any level above the process, may allow far less. [`CpuBudget`] reads all of
//! them (from `/proc/self` and `/sys/fs/cgroup`, cgroup v1, v2 or both) and says what the process
//! may really use; [`runtime_choices`] shows what Rust, .NET, the JVM, Go, Python and Node would
//! pick for that budget, version by version, and where their rules miss it ([`runtime_choice`]
//! for one runtime at one version). For experiments, [`QuotaGroup`] creates a cgroup with a
//! real CPU quota, places processes in it, reads its throttling counters and removes it on drop.
//!
//! ```
//! use inflight_cpu::{runtime_choice, runtime_choices, CpuBudget, Runtime, RuntimeVersion};
//!
//! # fn main() -> Result<(), inflight_cpu::DetectError> {
//! let budget = CpuBudget::detect()?;
//! assert!(budget.effective_cpus > 0.0);
//! assert!(budget.effective_cpus <= budget.affinity_cpus as f64);
//! // Whole CPUs for a CPU-bound pool: a fractional quota leaves the rest as headroom.
//! let pool = budget.recommended_pool();
//! assert!(pool >= 1);
//! for choice in runtime_choices(&budget) {
//!     println!("{} {}: {} = {}", choice.runtime, choice.versions.unwrap_or(""), choice.api, choice.value);
//! }
//! // What `java -version` = 17.0.15 would print for `Runtime.availableProcessors()` here.
//! let jdk17 = runtime_choice(&budget, Runtime::Jvm, RuntimeVersion::new(17, 0, 15));
//! assert_eq!(jdk17.versions, Some("JDK 17-23"));
//! # Ok(())
//! # }
//! ```
//!
//! Creating a [`QuotaGroup`] needs root (or a delegated cgroup subtree) and a cgroup `cpu`
//! controller; its errors ([`CgroupError`]) say which is missing and how to fix it.
//!
//! # Modules
//!
//! - [`detect`]: [`CpuBudget`], read from `/proc/self` and `/sys/fs/cgroup` (or a copy of them):
//!   host CPUs, affinity, the quota of every cgroup level, the effective CPUs.
//! - [`runtimes`]: the parallelism Rust, .NET, the JVM, Go, Python and Node would choose for a
//!   budget, by version ([`Runtime`], [`RuntimeVersion`]).
//! - [`cgroup`]: [`QuotaGroup`], creating a cgroup with a quota (v1 or v2), and its counters.
//!
//! # Features
//!
//! - `tokio` (default): `QuotaGroup::prepare_tokio_command` for `tokio::process::Command`.
//! - `serde`: `Serialize` and `Deserialize` for [`Enforcement`], spelled as in
//!   [`Enforcement::as_str`].
//!
//! # Layers
//!
//! From the top down: a module uses only modules on lower lines (`scripts/check-layers.py`
//! checks it in CI).
//!
//! - `runtimes`
//! - `cgroup`, `detect`
//! - `mounts`

pub mod cgroup;
pub mod detect;
mod mounts;
pub mod runtimes;

pub use cgroup::{
    more_than_available, throttle_stats_at, CgroupError, Enforcement, QuotaGroup, ThrottleStats,
    PERIOD_US,
};
pub use detect::{
    CgroupVersion, CpuBudget, CpuController, DetectError, LevelLimit, Limit, QuotaStatus,
};
pub use runtimes::{runtime_choice, runtime_choices, Runtime, RuntimeChoice, RuntimeVersion};
