//! `runtime_choices` and `runtime_choice` on fixture trees: every modelled runtime and version
//! group, the rows a version falls in, and the caveats that say where a rule misses the budget.

use std::path::PathBuf;

use inflight_cpu::{runtime_choice, runtime_choices, CpuBudget, Runtime, RuntimeVersion};

fn budget(name: &str) -> CpuBudget {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    CpuBudget::detect_in(&root).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// `runtime versions: value` for every row, in order.
fn table(b: &CpuBudget) -> Vec<String> {
    runtime_choices(b)
        .iter()
        .map(|c| match c.versions {
            Some(v) => format!("{} {v}: {}", c.runtime, c.value),
            None => format!("{} {}: {}", c.runtime, c.api, c.value),
        })
        .collect()
}

fn caveats(b: &CpuBudget, runtime: Runtime, version: RuntimeVersion) -> String {
    runtime_choice(b, runtime, version).caveats.join(" | ")
}

const JDK17: RuntimeVersion = RuntimeVersion::new(17, 0, 15);
const JDK25: RuntimeVersion = RuntimeVersion::new(25, 0, 3);
const GO119: RuntimeVersion = RuntimeVersion::new(1, 19, 8);
const GO125: RuntimeVersion = RuntimeVersion::new(1, 25, 0);

#[test]
fn every_row_on_a_v1_parent_quota() {
    // cgroup v1, 4 CPUs, 1.0 CPU on /batch above the unlimited /batch/job7.
    let b = budget("v1-nested");
    assert_eq!(
        table(&b),
        [
            "rust std::thread::available_parallelism(): 1",
            "dotnet Environment.ProcessorCount: 4",
            "jvm JDK 24+: 1",
            "jvm JDK 17-23: 4",
            "go Go 1.25+: 4",
            "go Go < 1.25: 4",
            "python os.process_cpu_count() (3.13+), len(os.sched_getaffinity(0)): 4",
            "python os.cpu_count() (pool default before 3.13): 4",
            "node libuv 1.52+: 4",
            "node libuv 1.49-1.50: 4",
            "node libuv < 1.49: 4",
        ]
    );
    // Older JDKs read only their own cgroup on v1 too, and say so.
    let c = caveats(&b, Runtime::Jvm, JDK17);
    assert!(
        c.contains("misses the quota of 1.00 CPUs set on the parent /batch"),
        "{c}"
    );
    assert_eq!(caveats(&b, Runtime::Jvm, JDK25), "");
    let c = caveats(&b, Runtime::Go, GO119);
    assert!(c.contains("reads no cgroup quota"), "{c}");
    let c = caveats(&b, Runtime::Node, RuntimeVersion::new(1, 52, 0));
    assert!(c.contains("cgroup v1 or hybrid host"), "{c}");
}

#[test]
fn every_row_on_a_v2_pod_with_quotas_on_two_parents() {
    // cgroup v2, 8 CPUs: /kubepods.slice 4.0, /kubepods.slice/pod1 1.5, the leaf unlimited.
    let b = budget("v2-nested");
    assert_eq!(
        table(&b),
        [
            "rust std::thread::available_parallelism(): 1",
            "dotnet Environment.ProcessorCount: 8",
            "jvm JDK 24+: 2",
            "jvm JDK 17-23: 8",
            "go Go 1.25+: 8",
            "go Go < 1.25: 8",
            "python os.process_cpu_count() (3.13+), len(os.sched_getaffinity(0)): 8",
            "python os.cpu_count() (pool default before 3.13): 8",
            "node libuv 1.52+: 4",
            "node libuv 1.49-1.50: 8",
            "node libuv < 1.49: 8",
        ]
    );
    // libuv 1.51+ keeps the quota nearest the root, not the tightest.
    let c = caveats(&b, Runtime::Node, RuntimeVersion::new(1, 51, 0));
    assert!(
        c.contains("4.00 CPUs on /kubepods.slice, the one nearest the root")
            && c.contains("1.50 CPUs on /kubepods.slice/pod1"),
        "{c}"
    );
}

#[test]
fn every_row_on_a_v2_leaf_quota() {
    // cgroup v2, 8 CPUs, 2.0 CPUs on the leaf.
    let b = budget("v2-limited");
    assert_eq!(
        table(&b),
        [
            "rust std::thread::available_parallelism(): 2",
            "dotnet Environment.ProcessorCount: 2",
            "jvm JDK 24+: 2",
            "jvm JDK 17-23: 2",
            "go Go 1.25+: 2",
            "go Go < 1.25: 8",
            "python os.process_cpu_count() (3.13+), len(os.sched_getaffinity(0)): 8",
            "python os.cpu_count() (pool default before 3.13): 8",
            "node libuv 1.52+: 2",
            "node libuv 1.49-1.50: 2",
            "node libuv < 1.49: 8",
        ]
    );
    let c = caveats(&b, Runtime::Node, RuntimeVersion::new(1, 49, 1));
    assert!(c.contains("cpu.weight"), "{c}");
}

#[test]
fn a_quota_under_one_cpu_by_libuv_version() {
    // A container namespace that sees only its own level: 0.5 CPUs, 4 CPUs in the mask.
    let b = budget("v2-container");
    let node = |v| runtime_choice(&b, Runtime::Node, v).value;
    assert_eq!(node(RuntimeVersion::new(1, 46, 0)), 4);
    assert_eq!(node(RuntimeVersion::new(1, 49, 1)), 1);
    assert_eq!(node(RuntimeVersion::new(1, 50, 0)), 1);
    // 1.51 computes 0 whole CPUs and ignores it; 1.52 makes it 1.
    assert_eq!(node(RuntimeVersion::new(1, 51, 0)), 4);
    assert_eq!(node(RuntimeVersion::new(1, 52, 1)), 1);
    let c = caveats(&b, Runtime::Node, RuntimeVersion::new(1, 51, 0));
    assert!(c.contains("ignores the quota of 0.50 CPUs"), "{c}");
    let c = caveats(&b, Runtime::Node, RuntimeVersion::new(1, 52, 0));
    assert!(c.contains("libuv 1.51 ignores"), "{c}");
    assert_eq!(runtime_choice(&b, Runtime::Go, GO125).value, 2);
    assert_eq!(runtime_choice(&b, Runtime::Go, GO119).value, 4);
}

#[test]
fn affinity_and_host_cpus_apart() {
    // 16 host CPUs, 4 in the mask, no quota: only os.cpu_count() counts the host.
    let b = budget("v2-unlimited");
    let t = table(&b);
    assert!(t
        .iter()
        .all(|row| row.ends_with(": 4") || row.starts_with("python os.cpu_count()")));
    assert!(t.contains(&"python os.cpu_count() (pool default before 3.13): 16".to_string()));
    let cpu_count = runtime_choices(&b)
        .into_iter()
        .find(|c| c.api.starts_with("os.cpu_count()"))
        .unwrap();
    assert!(cpu_count.caveats[0].contains("ignores the affinity mask of 4"));
}

#[test]
fn versions_pick_their_rows() {
    let b = budget("v1-nested");
    let versions = |runtime, v| runtime_choice(&b, runtime, v).versions;
    assert_eq!(versions(Runtime::Jvm, JDK17), Some("JDK 17-23"));
    assert_eq!(
        versions(Runtime::Jvm, RuntimeVersion::new(23, 0, 2)),
        Some("JDK 17-23")
    );
    assert_eq!(
        versions(Runtime::Jvm, RuntimeVersion::new(24, 0, 0)),
        Some("JDK 24+")
    );
    assert_eq!(versions(Runtime::Jvm, JDK25), Some("JDK 24+"));
    // JDK 8 prints 1.8.0_392.
    assert_eq!(
        versions(Runtime::Jvm, RuntimeVersion::new(1, 8, 0)),
        Some("JDK 17-23")
    );
    assert_eq!(versions(Runtime::Go, GO119), Some("Go < 1.25"));
    assert_eq!(
        versions(Runtime::Go, RuntimeVersion::new(1, 24, 9)),
        Some("Go < 1.25")
    );
    assert_eq!(versions(Runtime::Go, GO125), Some("Go 1.25+"));
    assert_eq!(
        versions(Runtime::Node, RuntimeVersion::new(1, 46, 0)),
        Some("libuv < 1.49")
    );
    assert_eq!(
        versions(Runtime::Node, RuntimeVersion::new(1, 51, 0)),
        Some("libuv 1.51")
    );
    assert_eq!(
        versions(Runtime::Python, RuntimeVersion::new(3, 11, 7)),
        Some("< 3.13")
    );
    let py = runtime_choice(&b, Runtime::Python, RuntimeVersion::new(3, 13, 0));
    assert_eq!(py.api, "os.process_cpu_count()");
    assert_eq!(py.value, 4);
    assert_eq!(
        runtime_choice(&b, Runtime::Rust, RuntimeVersion::new(1, 85, 0)).value,
        1
    );
}

#[test]
fn the_first_row_of_each_runtime_is_its_newest() {
    // Readers that take the first `jvm` or `go` row keep getting JDK 24+ and Go 1.25+.
    let b = budget("v2-nested");
    let rows = runtime_choices(&b);
    let first = |r: &str| rows.iter().find(|c| c.runtime == r).unwrap();
    assert_eq!(first("jvm").versions, Some("JDK 24+"));
    assert_eq!(first("go").versions, Some("Go 1.25+"));
    assert_eq!(first("node").versions, Some("libuv 1.52+"));
    assert_eq!(
        first("python").api,
        "os.process_cpu_count() (3.13+), len(os.sched_getaffinity(0))"
    );
}
