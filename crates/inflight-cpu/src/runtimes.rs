//! What common runtimes would pick as their parallelism for a [`CpuBudget`], by their documented
//! rules, and where a rule misses a parent's quota, rounds a fractional one up or floors it.

use crate::detect::CpuBudget;

/// One runtime's default parallelism for a budget.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeChoice {
    /// `rust`, `dotnet`, `jvm`, `go`.
    pub runtime: &'static str,
    /// What it is called in that runtime.
    pub api: &'static str,
    pub value: usize,
    /// The rule, in one line.
    pub rule: &'static str,
    /// Where the rule goes wrong for this budget (empty when it matches the budget).
    pub caveats: Vec<String>,
}

/// The choices of Rust's `available_parallelism`, .NET's `Environment.ProcessorCount`, the JVM's
/// `availableProcessors()` (JDK 24+) and Go 1.25's default `GOMAXPROCS` for `budget`.
pub fn runtime_choices(budget: &CpuBudget) -> Vec<RuntimeChoice> {
    let affinity = budget.affinity_cpus.max(1);
    let leaf = budget.leaf_quota_cpus();
    let tightest = budget.quota_cpus;
    let mut out = Vec::new();

    // Rust std: walks every level up to the mount root, floors the quota, at least 1.
    let mut caveats = Vec::new();
    let value = match tightest {
        Some(q) => {
            let floored = (q.floor() as usize).max(1);
            if q.fract() > 1e-9 && q > 1.0 {
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
            floored.min(affinity)
        }
        None => affinity,
    };
    out.push(RuntimeChoice {
        runtime: "rust",
        api: "std::thread::available_parallelism()",
        value,
        rule: "min(affinity, max(1, floor(tightest quota of all levels)))",
        caveats,
    });

    // .NET (PAL cgroup.cpp): the process's own cgroup only; a quota at or below one period is 1,
    // otherwise rounded up.
    let mut caveats = parent_caveat(budget, leaf, tightest);
    let value = match leaf {
        Some(q) => {
            let v = if q <= 1.0 { 1 } else { q.ceil() as usize };
            round_up_caveat(&mut caveats, q, v);
            v.min(affinity)
        }
        None => affinity,
    };
    out.push(RuntimeChoice {
        runtime: "dotnet",
        api: "Environment.ProcessorCount",
        value,
        rule: "min(affinity, ceil(own cgroup's quota)), at least 1; parents not read",
        caveats,
    });

    // HotSpot since JDK 24 (JDK-8322420) takes the tightest level; earlier JDKs read only the
    // process's own cgroup on v2. The quota is rounded up.
    let mut caveats = Vec::new();
    let value = match tightest {
        Some(q) => {
            let v = (q.ceil() as usize).max(1);
            round_up_caveat(&mut caveats, q, v);
            v.min(affinity)
        }
        None => affinity,
    };
    if tightest.is_some()
        && leaf != tightest
        && budget.cpu_controller == Some(crate::detect::CpuController::V2)
    {
        caveats.push(
            "JDK 23 and earlier read only the process's own cgroup on cgroup v2 and would miss the parent's quota"
                .to_string(),
        );
    }
    out.push(RuntimeChoice {
        runtime: "jvm",
        api: "Runtime.availableProcessors() (JDK 24+)",
        value,
        rule: "min(affinity, ceil(tightest quota of all levels))",
        caveats,
    });

    // Go 1.25: the process's own cgroup only; rounded up, and at least 2.
    let mut caveats = parent_caveat(budget, leaf, tightest);
    let value = match leaf {
        Some(q) => {
            let v = (q.ceil() as usize).max(2);
            if q < 2.0 && v.min(affinity) as f64 > q + 1e-9 {
                caveats.push(format!(
                    "raises a quota of {q:.2} CPUs to at least 2: more running threads than the quota"
                ));
            } else {
                round_up_caveat(&mut caveats, q, v);
            }
            v.min(affinity)
        }
        None => affinity,
    };
    out.push(RuntimeChoice {
        runtime: "go",
        api: "GOMAXPROCS (Go 1.25 default)",
        value,
        rule: "min(affinity, max(2, ceil(own cgroup's quota))); parents not read",
        caveats,
    });
    out
}

fn parent_caveat(budget: &CpuBudget, leaf: Option<f64>, tightest: Option<f64>) -> Vec<String> {
    match (tightest, budget.tightest_level()) {
        (Some(t), Some(level)) if leaf.is_none_or(|l| l > t + 1e-9) => vec![format!(
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

fn round_up_caveat(caveats: &mut Vec<String>, quota: f64, value: usize) {
    if value as f64 > quota + 1e-9 {
        caveats.push(format!(
            "rounds the quota {quota:.2} up to {value}: more busy threads than the quota, throttled every period under full load"
        ));
    }
}
