//! What common runtimes would pick as their parallelism for a [`CpuBudget`], version by version,
//! by the rules in their sources, and where a rule misses a parent's quota, rounds a fractional one
//! up or floors it, or reads no quota at all.

use std::fmt;

use crate::detect::{CgroupVersion, CpuBudget, LevelLimit};

/// Slack for comparing quotas in CPUs (quota / period is not exact in floating point).
const EPS: f64 = 1e-9;

/// A runtime whose default parallelism is modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Runtime {
    /// `std::thread::available_parallelism()`.
    Rust,
    /// `Environment.ProcessorCount`.
    Dotnet,
    /// HotSpot's `Runtime.availableProcessors()`; versions are JDK versions (`17.0.15`, `25`).
    Jvm,
    /// The default `GOMAXPROCS`; versions are Go versions (`1.19.8`).
    Go,
    /// `os.process_cpu_count()` (3.13+) or `len(os.sched_getaffinity(0))`; versions are Python's.
    Python,
    /// Node's `os.availableParallelism()`; versions are those of the libuv inside Node
    /// (`process.versions.uv`), which holds the rule.
    Node,
}

impl Runtime {
    /// `rust`, `dotnet`, `jvm`, `go`, `python` or `node`, as [`RuntimeChoice::runtime`] spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Rust => "rust",
            Runtime::Dotnet => "dotnet",
            Runtime::Jvm => "jvm",
            Runtime::Go => "go",
            Runtime::Python => "python",
            Runtime::Node => "node",
        }
    }
}

/// A version number as a runtime prints it: `major.minor.patch`, missing parts 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuntimeVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl RuntimeVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> RuntimeVersion {
        RuntimeVersion {
            major,
            minor,
            patch,
        }
    }

    /// The first version number in `text`, such as the output of `java -version`
    /// (`openjdk version "17.0.15" 2025-04-15`), `go version` (`go version go1.19.8 linux/amd64`),
    /// `python3 --version` (`Python 3.11.7`) or `node -p process.versions.uv` (`1.46.0`).
    /// Parts past the third are ignored (`1.8.0_392` is `1.8.0`).
    pub fn parse(text: &str) -> Option<RuntimeVersion> {
        let start = text.find(|c: char| c.is_ascii_digit())?;
        let mut parts = text[start..]
            .split(|c: char| !c.is_ascii_digit() && c != '.')
            .next()?
            .split('.')
            .map_while(|p| p.parse::<u32>().ok());
        Some(RuntimeVersion::new(
            parts.next()?,
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        ))
    }
}

impl fmt::Display for RuntimeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// One runtime's default parallelism for a budget, for a range of its versions.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeChoice {
    /// `rust`, `dotnet`, `jvm`, `go`, `python`, `node` ([`Runtime::as_str`]).
    pub runtime: &'static str,
    /// The versions the rule holds for (`JDK 24+`, `Go < 1.25`, `libuv 1.49-1.50`); `None` where
    /// one rule is modelled for every version.
    pub versions: Option<&'static str>,
    /// What it is called in that runtime.
    pub api: &'static str,
    pub value: usize,
    /// The rule, in one line.
    pub rule: &'static str,
    /// Where the rule goes wrong for this budget (empty when it matches the budget).
    pub caveats: Vec<String>,
}

/// The choices of Rust's `available_parallelism`, .NET's `Environment.ProcessorCount`, the JVM's
/// `availableProcessors()` (JDK 24+, then JDK 17-23), Go's default `GOMAXPROCS` (1.25+, then
/// older), Python's `os.process_cpu_count()` and `os.cpu_count()`, and Node's
/// `os.availableParallelism()` (by libuv version, newest first) for `budget`.
///
/// Each runtime's newest versions come first; [`runtime_choice`] gives the rule for one version.
pub fn runtime_choices(budget: &CpuBudget) -> Vec<RuntimeChoice> {
    vec![
        rust(budget),
        dotnet(budget),
        jvm(budget, 24),
        jvm(budget, 23),
        go(budget, RuntimeVersion::new(1, 25, 0)),
        go(budget, RuntimeVersion::new(1, 24, 0)),
        python_affinity(
            budget,
            "os.process_cpu_count() (3.13+), len(os.sched_getaffinity(0))",
            None,
        ),
        python_cpu_count(budget),
        node(budget, RuntimeVersion::new(1, 52, 0)),
        node(budget, RuntimeVersion::new(1, 50, 0)),
        node(budget, RuntimeVersion::new(1, 48, 0)),
    ]
}

/// What `runtime` at `version` would pick for `budget`.
///
/// The JVM's rules are modelled from JDK 17 (earlier JDKs are given JDK 17's rule); `version` is
/// not read for Rust and .NET (one rule each). For Node, `version` is libuv's
/// (`process.versions.uv`). Python's row is `os.process_cpu_count()` from 3.13, and
/// `len(os.sched_getaffinity(0))`, which it equals, before.
pub fn runtime_choice(
    budget: &CpuBudget,
    runtime: Runtime,
    version: RuntimeVersion,
) -> RuntimeChoice {
    match runtime {
        Runtime::Rust => rust(budget),
        Runtime::Dotnet => dotnet(budget),
        // JDK 8 and earlier print `1.8.0_392`.
        Runtime::Jvm => jvm(
            budget,
            if version.major == 1 {
                version.minor
            } else {
                version.major
            },
        ),
        Runtime::Go => go(budget, version),
        Runtime::Python if version >= RuntimeVersion::new(3, 13, 0) => {
            python_affinity(budget, "os.process_cpu_count()", Some("3.13+"))
        }
        Runtime::Python => python_affinity(budget, "len(os.sched_getaffinity(0))", Some("< 3.13")),
        Runtime::Node => node(budget, version),
    }
}

fn affinity(budget: &CpuBudget) -> usize {
    budget.affinity_cpus.max(1)
}

/// Rust std: walks every level up to the mount root, floors the quota, at least 1.
fn rust(budget: &CpuBudget) -> RuntimeChoice {
    let mut caveats = Vec::new();
    let value = match budget.quota_cpus {
        Some(q) => {
            let floored = (q.floor() as usize).max(1);
            floor_caveats(&mut caveats, q, floored);
            floored.min(affinity(budget))
        }
        None => affinity(budget),
    };
    RuntimeChoice {
        runtime: "rust",
        versions: None,
        api: "std::thread::available_parallelism()",
        value,
        rule: "min(affinity, max(1, floor(tightest quota of all levels)))",
        caveats,
    }
}

/// .NET (PAL cgroup.cpp): the process's own cgroup only; a quota at or below one period is 1,
/// otherwise rounded up.
fn dotnet(budget: &CpuBudget) -> RuntimeChoice {
    let leaf = budget.leaf_quota_cpus();
    let mut caveats = parent_caveat(budget);
    let value = match leaf {
        Some(q) => {
            let v = if q <= 1.0 { 1 } else { q.ceil() as usize };
            round_up_caveat(&mut caveats, q, v);
            v.min(affinity(budget))
        }
        None => affinity(budget),
    };
    RuntimeChoice {
        runtime: "dotnet",
        versions: None,
        api: "Environment.ProcessorCount",
        value,
        rule: "min(affinity, ceil(own cgroup's quota)), at least 1; parents not read",
        caveats,
    }
}

/// HotSpot rounds the quota up and caps it at the affinity mask. Since JDK 24 (JDK-8322420,
/// `CgroupUtil::adjust_controller`) it walks up to the mount root and keeps the tightest level, on
/// cgroup v1 and v2; before, it reads only the process's own cgroup, on both.
fn jvm(budget: &CpuBudget, feature: u32) -> RuntimeChoice {
    let walks = feature >= 24;
    let quota = if walks {
        budget.quota_cpus
    } else {
        budget.leaf_quota_cpus()
    };
    let mut caveats = if walks {
        Vec::new()
    } else {
        parent_caveat(budget)
    };
    let value = match quota {
        Some(q) => {
            let v = (q.ceil() as usize).max(1);
            round_up_caveat(&mut caveats, q, v);
            v.min(affinity(budget))
        }
        None => affinity(budget),
    };
    RuntimeChoice {
        runtime: "jvm",
        versions: Some(if walks { "JDK 24+" } else { "JDK 17-23" }),
        api: "Runtime.availableProcessors()",
        value,
        rule: if walks {
            "min(affinity, ceil(tightest quota of all levels))"
        } else {
            "min(affinity, ceil(own cgroup's quota)); parents not read"
        },
        caveats,
    }
}

/// Go 1.25 (`runtime/cgroup_linux.go`): the process's own cgroup only, rounded up, at least 2,
/// when the main module says `go 1.25` or later (GODEBUG `containermaxprocs`). Before 1.25 the
/// default is `runtime.NumCPU()`, the affinity mask.
fn go(budget: &CpuBudget, version: RuntimeVersion) -> RuntimeChoice {
    if version < RuntimeVersion::new(1, 25, 0) {
        let value = affinity(budget);
        return RuntimeChoice {
            runtime: "go",
            versions: Some("Go < 1.25"),
            api: "GOMAXPROCS (default)",
            value,
            rule: "affinity (runtime.NumCPU()); no quota read",
            caveats: no_quota_caveat(budget, value),
        };
    }
    let mut caveats = parent_caveat(budget);
    let value = match budget.leaf_quota_cpus() {
        Some(q) => {
            let v = (q.ceil() as usize).max(2);
            if q < 2.0 && v.min(affinity(budget)) as f64 > q + EPS {
                caveats.push(format!(
                    "raises a quota of {q:.2} CPUs to at least 2: more running threads than the quota"
                ));
            } else {
                round_up_caveat(&mut caveats, q, v);
            }
            v.min(affinity(budget))
        }
        None => affinity(budget),
    };
    RuntimeChoice {
        runtime: "go",
        versions: Some("Go 1.25+"),
        api: "GOMAXPROCS (default; go.mod at go 1.25+)",
        value,
        rule: "min(affinity, max(2, ceil(own cgroup's quota))); parents not read",
        caveats,
    }
}

/// CPython's `os.process_cpu_count()` counts `sched_getaffinity` (3.13+; the same as
/// `len(os.sched_getaffinity(0))` before). The pools of `concurrent.futures` and
/// `multiprocessing` default to it from 3.13.
fn python_affinity(
    budget: &CpuBudget,
    api: &'static str,
    versions: Option<&'static str>,
) -> RuntimeChoice {
    let value = affinity(budget);
    RuntimeChoice {
        runtime: "python",
        versions,
        api,
        value,
        rule: "affinity; no quota read",
        caveats: no_quota_caveat(budget, value),
    }
}

/// `os.cpu_count()`: the host's logical CPUs. `ProcessPoolExecutor` and `multiprocessing.Pool`
/// default to it before 3.13.
fn python_cpu_count(budget: &CpuBudget) -> RuntimeChoice {
    let value = budget.host_cpus.max(1);
    let mut caveats = Vec::new();
    if budget.affinity_cpus < value {
        caveats.push(format!(
            "counts the host's {value} CPUs: ignores the affinity mask of {}",
            budget.affinity_cpus
        ));
    }
    caveats.extend(no_quota_caveat(budget, value));
    RuntimeChoice {
        runtime: "python",
        versions: None,
        api: "os.cpu_count() (pool default before 3.13)",
        value,
        rule: "host CPUs; neither affinity nor quota read",
        caveats,
    }
}

/// The generations of libuv's `uv_available_parallelism` on Linux.
#[derive(Clone, Copy, PartialEq)]
enum Libuv {
    /// Before 1.49: the affinity mask.
    AffinityOnly,
    /// 1.49-1.50: the own cgroup's `cpu.max` times `cpu.weight / 100`.
    OwnCgroup,
    /// 1.51+: walks up to `/sys/fs/cgroup` but keeps the quota it read last, the one nearest the
    /// root; 1.51 ignores a quota under 1 CPU, 1.52 makes it 1.
    NearestRoot { under_one_ignored: bool },
}

/// libuv's `uv_available_parallelism` (`src/unix/core.c`, `linux.c`): the affinity mask, and
/// since 1.49 a cgroup v2 quota, floored. The quota is found only when `/proc/self/cgroup` is v2
/// alone: the cgroup v1 lookup builds a path that does not exist and gives up.
fn node(budget: &CpuBudget, libuv: RuntimeVersion) -> RuntimeChoice {
    let generation = if libuv < RuntimeVersion::new(1, 49, 0) {
        Libuv::AffinityOnly
    } else if libuv < RuntimeVersion::new(1, 51, 0) {
        Libuv::OwnCgroup
    } else {
        Libuv::NearestRoot {
            under_one_ignored: libuv < RuntimeVersion::new(1, 52, 0),
        }
    };
    let (versions, rule) = match generation {
        Libuv::AffinityOnly => ("libuv < 1.49", "affinity; no quota read"),
        Libuv::OwnCgroup => (
            "libuv 1.49-1.50",
            "cgroup v2 only: min(affinity, max(1, floor(own cgroup's quota x cpu.weight/100)))",
        ),
        Libuv::NearestRoot {
            under_one_ignored: true,
        } => (
            "libuv 1.51",
            "cgroup v2 only: min(affinity, floor(quota nearest the root)); under 1 CPU ignored",
        ),
        Libuv::NearestRoot {
            under_one_ignored: false,
        } => (
            "libuv 1.52+",
            "cgroup v2 only: min(affinity, max(1, floor(quota nearest the root)))",
        ),
    };
    let affinity = affinity(budget);
    let v2_alone = budget.cgroup_version == CgroupVersion::V2;
    let quota_of = |l: &LevelLimit| l.limit.cpus().map(|q| (q, l.cgroup.clone()));
    let read = match generation {
        Libuv::AffinityOnly => None,
        _ if !v2_alone => None,
        Libuv::OwnCgroup => budget.levels.first().and_then(quota_of),
        Libuv::NearestRoot { .. } => budget.levels.iter().rev().find_map(quota_of),
    };
    let mut caveats = Vec::new();
    let value = match read {
        None => {
            caveats = match generation {
                Libuv::OwnCgroup if v2_alone => parent_caveat(budget),
                _ => no_quota_caveat(budget, affinity),
            };
            if generation != Libuv::AffinityOnly && !v2_alone {
                for c in &mut caveats {
                    *c = format!("on a cgroup v1 or hybrid host it {c}");
                }
            }
            affinity
        }
        Some((q, cgroup)) => {
            match generation {
                Libuv::OwnCgroup => {
                    caveats = parent_caveat(budget);
                    caveats.push(
                        "scales the quota by cpu.weight / 100 (not read here; 100, the default, assumed): a lower weight gives fewer"
                            .to_string(),
                    );
                }
                _ => {
                    if let (Some(t), Some(tightest)) = (budget.quota_cpus, budget.tightest_level())
                    {
                        if q > t + EPS {
                            caveats.push(format!(
                                "takes the quota of {q:.2} CPUs on {cgroup}, the one nearest the root, not the tightest ({t:.2} CPUs on {})",
                                tightest.cgroup
                            ));
                        }
                    }
                }
            }
            let floored = q.floor() as usize;
            match generation {
                Libuv::NearestRoot {
                    under_one_ignored: true,
                } if floored == 0 => {
                    caveats.push(format!(
                        "ignores the quota of {q:.2} CPUs because it is under 1: {affinity} threads against it"
                    ));
                    affinity
                }
                _ => {
                    let v = floored.max(1);
                    floor_caveats(&mut caveats, q, v);
                    if floored == 0 && affinity > 1 && generation != Libuv::OwnCgroup {
                        caveats.push(format!(
                            "libuv 1.51 ignores a quota under 1 CPU and gives {affinity} here"
                        ));
                    }
                    v.min(affinity)
                }
            }
        }
    };
    RuntimeChoice {
        runtime: "node",
        versions: Some(versions),
        api: "os.availableParallelism()",
        value,
        rule,
        caveats,
    }
}

/// The caveats of flooring a quota `q` to `floored` (at least 1).
fn floor_caveats(caveats: &mut Vec<String>, q: f64, floored: usize) {
    if q.fract() > EPS && q > 1.0 {
        caveats.push(format!(
            "floors the fractional quota {q:.2} to {floored}: {:.2} CPUs of quota unused by a pool of this size",
            q - floored as f64
        ));
    }
    if q < 1.0 {
        caveats.push(format!(
            "a quota of {q:.2} CPUs is raised to 1: one busy thread still runs past it every period"
        ));
    }
}

/// For rules that read only the process's own cgroup: the tightest quota they miss, if it is set
/// above that cgroup.
fn parent_caveat(budget: &CpuBudget) -> Vec<String> {
    let leaf = budget.leaf_quota_cpus();
    match (budget.quota_cpus, budget.tightest_level()) {
        (Some(t), Some(level)) if leaf.is_none_or(|l| l > t + EPS) => vec![format!(
            "misses the quota of {t:.2} CPUs set on the parent {}: it reads only the process's own cgroup ({})",
            level.cgroup,
            match leaf {
                Some(l) => format!("{l:.2} CPUs"),
                None => "no limit".to_string(),
            }
        )],
        _ => Vec::new(),
    }
}

/// For rules that read no quota: the quota that `value` threads run against, if it is smaller.
fn no_quota_caveat(budget: &CpuBudget, value: usize) -> Vec<String> {
    match (budget.quota_cpus, budget.tightest_level()) {
        (Some(t), Some(level)) if value as f64 > t + EPS => vec![format!(
            "reads no cgroup quota: {value} CPUs counted against the quota of {t:.2} set on {}",
            level.cgroup
        )],
        _ => Vec::new(),
    }
}

fn round_up_caveat(caveats: &mut Vec<String>, quota: f64, value: usize) {
    if value as f64 > quota + EPS {
        caveats.push(format!(
            "rounds the quota {quota:.2} up to {value}: more busy threads than the quota, throttled every period under full load"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions_as_runtimes_print_them() {
        let v = |s| RuntimeVersion::parse(s);
        assert_eq!(
            v("openjdk version \"17.0.15\" 2025-04-15"),
            Some(RuntimeVersion::new(17, 0, 15))
        );
        assert_eq!(
            v("openjdk version \"25\" 2025-09-16"),
            Some(RuntimeVersion::new(25, 0, 0))
        );
        assert_eq!(
            v("java version \"1.8.0_392\""),
            Some(RuntimeVersion::new(1, 8, 0))
        );
        assert_eq!(
            v("go version go1.19.8 linux/amd64"),
            Some(RuntimeVersion::new(1, 19, 8))
        );
        assert_eq!(v("Python 3.11.7"), Some(RuntimeVersion::new(3, 11, 7)));
        assert_eq!(v("v20.20.2\n"), Some(RuntimeVersion::new(20, 20, 2)));
        assert_eq!(v("1.46.0"), Some(RuntimeVersion::new(1, 46, 0)));
        assert_eq!(v("no digits"), None);
        assert_eq!(RuntimeVersion::new(1, 25, 0).to_string(), "1.25.0");
        assert!(RuntimeVersion::new(1, 9, 0) < RuntimeVersion::new(1, 19, 0));
    }

    #[test]
    fn runtime_names() {
        for (r, s) in [
            (Runtime::Rust, "rust"),
            (Runtime::Dotnet, "dotnet"),
            (Runtime::Jvm, "jvm"),
            (Runtime::Go, "go"),
            (Runtime::Python, "python"),
            (Runtime::Node, "node"),
        ] {
            assert_eq!(r.as_str(), s);
        }
    }
}
