//! `inflight probe`: the CPU budget of this process (host CPUs, affinity, every cgroup level's
//! quota), what common runtimes would pick here, and the pool size to use for CPU-bound work.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use inflight_cpu::{runtime_choices, CpuBudget, Limit, RuntimeChoice};
use serde_json::{json, Value};

/// The line about I/O-bound work, shown by both outputs.
const IO_BOUND: &str = "I/O-bound concurrency is not sized by CPUs: by Little's law it is throughput x latency per dependency (see `inflight check-config`)";

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  inflight probe
  inflight probe --json | jq .effective_cpus")]
pub struct Args {
    /// Print one JSON object instead of the report.
    #[arg(long)]
    json: bool,

    /// Read DIR/proc/self/{cgroup,mountinfo,status}, DIR/sys/devices/system/cpu/online and the
    /// cgroup files under DIR instead of this machine's (for tests, or a copy of another machine's
    /// files). `std_available_parallelism` is still this process's own.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let budget = match &args.root {
        Some(root) => {
            anyhow::ensure!(root.is_dir(), "--root {}: not a directory", root.display());
            CpuBudget::detect_in(root)
                .with_context(|| format!("cannot read the CPU budget under {}", root.display()))?
        }
        None => CpuBudget::detect().context("cannot read this process's CPU budget")?,
    };
    let std_parallelism = std::thread::available_parallelism().map(|n| n.get()).ok();
    let runtimes = runtime_choices(&budget);
    let mut budget = budget;
    if let (None, Some(measured)) = (&args.root, std_parallelism) {
        let modeled = runtimes
            .iter()
            .find(|r| r.runtime == "rust")
            .map(|r| r.value);
        if modeled != Some(measured) {
            budget.notes.push(format!(
                "std::thread::available_parallelism() returned {measured} but its rule gives {}: this probe and Rust's std read the budget differently here",
                modeled.unwrap_or(0)
            ));
        }
    }
    if args.json {
        let doc = to_json(&budget, &runtimes, std_parallelism, args.root.as_ref());
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_report(&budget, &runtimes, std_parallelism, args.root.as_ref());
    }
    Ok(ExitCode::SUCCESS)
}

fn limit_json(limit: &Limit) -> Value {
    match limit {
        Limit::Unlimited => json!({"limit": "unlimited", "cpus": null}),
        Limit::Quota {
            quota_us,
            period_us,
        } => json!({
            "limit": "quota",
            "quota_us": quota_us,
            "period_us": period_us,
            "cpus": limit.cpus(),
        }),
        Limit::Absent => json!({"limit": "absent", "cpus": null}),
        Limit::Unknown(why) => json!({"limit": "unknown", "cpus": null, "reason": why}),
    }
}

fn to_json(
    b: &CpuBudget,
    runtimes: &[RuntimeChoice],
    std_parallelism: Option<usize>,
    root: Option<&PathBuf>,
) -> Value {
    let levels: Vec<Value> = b
        .levels
        .iter()
        .map(|l| {
            let mut v = limit_json(&l.limit);
            v["cgroup"] = json!(l.cgroup);
            v["dir"] = json!(l.dir.display().to_string());
            v
        })
        .collect();
    let runtimes: Vec<Value> = runtimes
        .iter()
        .map(|r| {
            json!({
                "runtime": r.runtime,
                "versions": r.versions,
                "api": r.api,
                "value": r.value,
                "rule": r.rule,
                "caveats": r.caveats,
            })
        })
        .collect();
    json!({
        "root": root.map(|r| r.display().to_string()),
        "host_cpus": b.host_cpus,
        "affinity_cpus": b.affinity_cpus,
        "cgroup_version": b.cgroup_version.as_str(),
        "cpu_controller": b.cpu_controller.map(|c| c.as_str()),
        "cgroup_path": b.cgroup_path,
        "levels": levels,
        "quota_status": b.quota_status.as_str(),
        "quota_cpus": b.quota_cpus,
        "quota_cgroup": b.tightest_level().map(|l| l.cgroup.clone()),
        "effective_cpus": b.effective_cpus,
        "std_available_parallelism": std_parallelism,
        "recommended_pool": b.recommended_pool(),
        "runtimes": runtimes,
        "io_bound": IO_BOUND,
        "notes": b.notes,
    })
}

fn print_report(
    b: &CpuBudget,
    runtimes: &[RuntimeChoice],
    std_parallelism: Option<usize>,
    root: Option<&PathBuf>,
) {
    match root {
        Some(r) => println!("CPU budget described by the files under {}", r.display()),
        None => println!("CPU budget of this process"),
    }
    println!("  host CPUs (online)        {}", b.host_cpus);
    println!("  affinity mask             {}", b.affinity_cpus);
    let controller = match b.cpu_controller {
        Some(c) => format!("cpu controller in {}", c.as_str()),
        None => "no cpu controller".to_string(),
    };
    println!(
        "  cgroup version            {} ({controller})",
        b.cgroup_version.as_str()
    );
    if let Some(path) = &b.cgroup_path {
        println!("  this process's cgroup     {path}");
    }
    if !b.levels.is_empty() {
        println!("  CPU limit per level, own cgroup first:");
        let width = b.levels.iter().map(|l| l.cgroup.len()).max().unwrap_or(1);
        for l in &b.levels {
            println!(
                "    {:<width$}  {}   ({})",
                l.cgroup,
                l.limit.describe(),
                l.dir.display()
            );
        }
    }
    let quota = match (b.quota_cpus, b.tightest_level()) {
        (Some(q), Some(l)) => format!("{q:.2} CPUs (set on {})", l.cgroup),
        _ => b.quota_status.as_str().to_string(),
    };
    println!("  effective quota           {quota}");
    println!(
        "  effective CPUs            {:.2}  = min(affinity, quota)",
        b.effective_cpus
    );
    match std_parallelism {
        Some(n) => println!(
            "  available_parallelism()   {n}  (measured in this process{})",
            if root.is_some() {
                ", not the files under --root"
            } else {
                ""
            }
        ),
        None => println!("  available_parallelism()   unavailable (the call failed)"),
    }
    println!();
    println!(
        "What runtimes would pick here (older versions on a row of their own where they differ)"
    );
    print_runtimes(runtimes);
    println!();
    println!(
        "Recommended pool for CPU-bound work: {}  (whole CPUs of the effective budget, at least 1)",
        b.recommended_pool()
    );
    println!("{IO_BOUND}.");
    if !b.notes.is_empty() {
        println!();
        println!("Notes");
        for n in &b.notes {
            println!("  - {n}");
        }
    }
}

/// One block per row: `runtime versions  value  api`, the rule, the caveats. A runtime's older
/// version groups that pick the same value as its newest get one line under it instead.
fn print_runtimes(runtimes: &[RuntimeChoice]) {
    let label = |r: &RuntimeChoice| match r.versions {
        Some(v) => format!("{:<7} {v}", r.runtime),
        None => r.runtime.to_string(),
    };
    let width = runtimes.iter().map(|r| label(r).len()).max().unwrap_or(0);
    let indent = " ".repeat(2 + width + 1 + 3 + 3);
    let mut newest: Option<&RuntimeChoice> = None;
    for r in runtimes {
        let same_as_newer = match newest {
            Some(n) => {
                n.runtime == r.runtime
                    && n.versions.is_some()
                    && r.versions.is_some()
                    && n.value == r.value
            }
            None => false,
        };
        if same_as_newer {
            println!(
                "{indent}= {} picks the same: {}",
                r.versions.unwrap_or_default(),
                r.rule
            );
            continue;
        }
        if newest.is_none_or(|n| n.runtime != r.runtime) {
            newest = Some(r);
        }
        println!("  {:<width$} {:>3}   {}", label(r), r.value, r.api);
        println!("{indent}{}", r.rule);
        for c in &r.caveats {
            println!("{indent}! {c}");
        }
    }
}
