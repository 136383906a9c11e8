//! Tests of `inflight probe`: fixture trees through `--root`, bad input, and a real cgroup with a
//! quota on a parent of the process's cgroup (root only).

use std::path::PathBuf;

use predicates::prelude::*;
use serde_json::Value;

use crate::support::{exits_2, inflight, inflight_path, is_root, run_json, success_json};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../inflight-cpu/tests/fixtures")
        .join(name)
}

fn probe_json(args: &[&str]) -> Value {
    run_json(["probe", "--json"].iter().chain(args))
}

/// The value of the row of `runtime` for `versions` (`JDK 17-23`, `Go < 1.25`, `libuv < 1.49`).
fn versioned_value(doc: &Value, runtime: &str, versions: &str) -> u64 {
    doc["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["runtime"] == runtime && r["versions"] == versions)
        .unwrap_or_else(|| panic!("no {runtime} {versions} row in {doc}"))["value"]
        .as_u64()
        .unwrap()
}

fn runtime_value(doc: &Value, runtime: &str) -> u64 {
    doc["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["runtime"] == runtime)
        .unwrap()["value"]
        .as_u64()
        .unwrap()
}

#[test]
fn json_for_a_nested_v2_fixture() {
    let root = fixture("v2-nested");
    let doc = probe_json(&["--root", root.to_str().unwrap()]);
    assert_eq!(doc["host_cpus"], 8);
    assert_eq!(doc["affinity_cpus"], 8);
    assert_eq!(doc["cgroup_version"], "v2");
    assert_eq!(doc["quota_cpus"], 1.5);
    assert_eq!(doc["effective_cpus"], 1.5);
    assert_eq!(doc["recommended_pool"], 1);
    assert_eq!(doc["quota_cgroup"], "/kubepods.slice/pod1");
    assert_eq!(doc["levels"].as_array().unwrap().len(), 4);
    assert_eq!(doc["levels"][0]["limit"], "unlimited");
    assert_eq!(doc["levels"][1]["quota_us"], 150000);
    assert!(doc["std_available_parallelism"].as_u64().unwrap() >= 1);
    assert_eq!(runtime_value(&doc, "rust"), 1);
    assert_eq!(runtime_value(&doc, "go"), 8);
    assert_eq!(runtime_value(&doc, "dotnet"), 8);
    assert_eq!(runtime_value(&doc, "jvm"), 2);
}

#[test]
fn json_for_unlimited_and_v1_fixtures() {
    let doc = probe_json(&["--root", fixture("v2-unlimited").to_str().unwrap()]);
    assert!(doc["quota_cpus"].is_null());
    assert_eq!(doc["quota_status"], "unlimited");
    assert_eq!(doc["effective_cpus"], 4.0);
    assert_eq!(doc["recommended_pool"], 4);

    let doc = probe_json(&["--root", fixture("v1-nested").to_str().unwrap()]);
    assert_eq!(doc["cgroup_version"], "v1");
    assert_eq!(doc["quota_cpus"], 1.0);
    assert_eq!(doc["levels"][0]["cgroup"], "/batch/job7");

    let doc = probe_json(&["--root", fixture("hybrid").to_str().unwrap()]);
    assert_eq!(doc["cgroup_version"], "hybrid");
    assert_eq!(doc["cpu_controller"], "v1");
    assert_eq!(doc["quota_cpus"], 0.5);
    assert_eq!(doc["recommended_pool"], 1);
}

#[test]
fn json_rows_by_version_on_a_v1_parent_quota() {
    // cgroup v1, 4 CPUs, 1.0 CPU on the parent /batch: JDK 17-23 and every rule that reads only
    // its own cgroup (or no quota) miss it.
    let doc = probe_json(&["--root", fixture("v1-nested").to_str().unwrap()]);
    let rows = doc["runtimes"].as_array().unwrap();
    assert_eq!(rows.len(), 11, "{doc}");
    for row in rows {
        assert!(row.get("versions").is_some(), "{row}");
        for field in ["runtime", "api", "value", "rule", "caveats"] {
            assert!(row.get(field).is_some(), "{field} missing in {row}");
        }
    }
    // The first row of a runtime is its newest versions, as before.
    assert_eq!(runtime_value(&doc, "jvm"), 1);
    assert_eq!(versioned_value(&doc, "jvm", "JDK 24+"), 1);
    assert_eq!(versioned_value(&doc, "jvm", "JDK 17-23"), 4);
    let jdk17 = rows.iter().find(|r| r["versions"] == "JDK 17-23").unwrap();
    assert!(jdk17["caveats"][0]
        .as_str()
        .unwrap()
        .contains("misses the quota of 1.00 CPUs set on the parent /batch"));
    assert_eq!(versioned_value(&doc, "go", "Go 1.25+"), 4);
    assert_eq!(versioned_value(&doc, "go", "Go < 1.25"), 4);
    assert_eq!(runtime_value(&doc, "python"), 4);
    assert_eq!(versioned_value(&doc, "node", "libuv < 1.49"), 4);
    assert_eq!(versioned_value(&doc, "node", "libuv 1.52+"), 4);
    assert!(rows
        .iter()
        .any(|r| r["runtime"] == "python"
            && r["api"].as_str().unwrap().starts_with("os.cpu_count()")));
}

#[test]
fn json_rows_by_version_on_a_v2_leaf_quota() {
    // cgroup v2, 8 CPUs, 2.0 CPUs on the leaf: Go before 1.25, Python and old Node count all 8.
    let doc = probe_json(&["--root", fixture("v2-limited").to_str().unwrap()]);
    assert_eq!(versioned_value(&doc, "jvm", "JDK 17-23"), 2);
    assert_eq!(versioned_value(&doc, "go", "Go 1.25+"), 2);
    assert_eq!(versioned_value(&doc, "go", "Go < 1.25"), 8);
    assert_eq!(runtime_value(&doc, "python"), 8);
    assert_eq!(versioned_value(&doc, "node", "libuv 1.52+"), 2);
    assert_eq!(versioned_value(&doc, "node", "libuv 1.49-1.50"), 2);
    assert_eq!(versioned_value(&doc, "node", "libuv < 1.49"), 8);
    assert!(doc["runtimes"][0]["versions"].is_null());
}

#[test]
fn human_report_shows_older_versions_where_they_differ() {
    let root = fixture("v1-nested");
    let out = inflight()
        .args(["probe", "--root", root.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // JDK 17-23 picks 4 where JDK 24+ picks 1: a row of its own.
    assert!(text.contains("jvm     JDK 24+"), "{text}");
    let jdk17 = text
        .lines()
        .find(|l| l.contains("JDK 17-23"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(jdk17.contains(" 4 "), "{jdk17}");
    // Go before 1.25 picks what 1.25 picks: one line under it.
    assert!(
        text.contains("= Go < 1.25 picks the same: affinity"),
        "{text}"
    );
    assert!(text.contains("os.process_cpu_count()"), "{text}");
    assert!(text.contains("os.cpu_count()"), "{text}");
    assert!(text.contains("os.availableParallelism()"), "{text}");
    assert!(text.contains("libuv < 1.49"), "{text}");
}

#[test]
fn human_report_names_the_parent_quota_and_little_law() {
    let root = fixture("v2-nested");
    inflight()
        .args(["probe", "--root", root.to_str().unwrap()])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "1.50 CPUs (set on /kubepods.slice/pod1)",
        ))
        .stdout(predicate::str::contains("misses the quota"))
        .stdout(predicate::str::contains(
            "Recommended pool for CPU-bound work: 1",
        ))
        .stdout(predicate::str::contains("Little's law"))
        .stdout(predicate::str::contains("check-config"));
}

#[test]
fn a_broken_limit_file_reads_as_unknown() {
    let doc = probe_json(&["--root", fixture("broken-only").to_str().unwrap()]);
    assert_eq!(doc["quota_status"], "unknown");
    assert!(doc["quota_cpus"].is_null());
    assert_eq!(doc["levels"][0]["limit"], "unknown");
    assert!(doc["levels"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("12abc"));
}

#[test]
fn broken_proc_files_are_a_clear_error() {
    exits_2(
        [
            "probe",
            "--root",
            fixture("broken-mountinfo").to_str().unwrap(),
        ],
        "error: cannot read the CPU budget",
    )
    .stderr(predicate::str::contains("mountinfo line 1"));
}

#[test]
fn a_missing_root_is_rejected() {
    exits_2(
        ["probe", "--root", "/no/such/dir"],
        "--root /no/such/dir: not a directory",
    );
}

#[test]
fn unknown_flag_is_rejected() {
    inflight()
        .args(["probe", "--bogus"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--bogus"));
}

#[test]
fn this_machine_reads_consistently() {
    let doc = probe_json(&[]);
    let host = doc["host_cpus"].as_u64().unwrap();
    let affinity = doc["affinity_cpus"].as_u64().unwrap();
    assert!(affinity >= 1 && affinity <= host);
    assert!(doc["recommended_pool"].as_u64().unwrap() >= 1);
    // The rule this probe models for Rust must agree with what Rust's std measured.
    assert_eq!(
        runtime_value(&doc, "rust"),
        doc["std_available_parallelism"].as_u64().unwrap()
    );
}

/// A real cgroup with a 0.5-CPU quota, and the probe run in an unlimited child cgroup of it:
/// the probe must find the parent's quota, and Rust's std agrees.
#[test]
fn real_cgroup_quota_on_the_parent_is_found() {
    if !is_root() {
        eprintln!("skipping: needs root to create cgroups");
        return;
    }
    let group = match inflight_cpu::QuotaGroup::create(0.5) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("skipping: cannot create a cgroup here: {e}");
            return;
        }
    };
    let inner = group.path().join("inner");
    std::fs::create_dir(&inner).unwrap();
    let bin = inflight_path();
    let script = format!(
        "echo $$ > '{}/cgroup.procs' && exec '{}' probe --json",
        inner.display(),
        bin.display()
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .unwrap();
    let doc = success_json(&out);
    let group_name = group.path().file_name().unwrap().to_str().unwrap();
    let path = doc["cgroup_path"].as_str().unwrap();
    assert!(path.ends_with(&format!("/{group_name}/inner")), "{path}");
    assert_ne!(doc["levels"][0]["limit"], "quota", "{doc}");
    assert_eq!(doc["levels"][1]["quota_us"], 50000, "{doc}");
    assert_eq!(doc["levels"][1]["period_us"], 100000);
    assert_eq!(doc["quota_cpus"], 0.5);
    assert_eq!(doc["effective_cpus"], 0.5);
    assert_eq!(doc["recommended_pool"], 1);
    assert_eq!(doc["std_available_parallelism"], 1);
    let affinity = doc["affinity_cpus"].as_u64().unwrap();
    assert_eq!(runtime_value(&doc, "go"), 2.min(affinity));
    // JDK 24+ finds the parent's quota; JDK 17-23 reads only the unlimited own cgroup.
    assert_eq!(versioned_value(&doc, "jvm", "JDK 24+"), 1);
    assert_eq!(versioned_value(&doc, "jvm", "JDK 17-23"), affinity);
    assert_eq!(versioned_value(&doc, "go", "Go < 1.25"), affinity);
    drop(group);
    assert!(!inner.exists());
}

/// The README's table of runtime rules has one row per row `probe` reports, and no other: the
/// runtime and its versions (`Node, libuv 1.52+` is `node` at `libuv 1.52+`).
#[test]
fn the_guides_table_lists_the_rows_probe_reports() {
    let readme = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/guide/cli.md"),
    )
    .unwrap();
    let table = readme
        .split("| runtime | API | rule, as its source reads |")
        .nth(1)
        .expect("the guide has the table of runtime rules");
    let mut documented: Vec<(String, Option<String>)> = table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cell = row.trim_matches('|').split('|').next().unwrap().trim();
            let (name, versions) = match cell.split_once(", ") {
                Some((name, versions)) => (name, Some(versions.to_string())),
                None => match cell.split_once(' ') {
                    // `JDK 24+`, `Go < 1.25`: the versions name the runtime.
                    Some((name, _)) => (name, Some(cell.to_string())),
                    None => (cell, None),
                },
            };
            let runtime = match name {
                "Rust" => "rust",
                ".NET" => "dotnet",
                "JDK" => "jvm",
                "Go" => "go",
                "Python" => "python",
                "Node" => "node",
                other => panic!("unknown runtime {other:?} in the guide's table"),
            };
            (runtime.to_string(), versions)
        })
        .collect();
    let doc = probe_json(&["--root", fixture("v2-nested").to_str().unwrap()]);
    let mut reported: Vec<(String, Option<String>)> = doc["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["runtime"].as_str().unwrap().to_string(),
                r["versions"].as_str().map(str::to_string),
            )
        })
        .collect();
    documented.sort();
    reported.sort();
    assert_eq!(documented, reported);
}
