//! Tests of `inflight pool-bench`: flag validation, a short real run under a cgroup quota (root
//! only), the refusal when the quota cannot be enforced, and `--no-limit`.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;

use predicates::prelude::*;

use crate::support::{
    assert_refused, can_create_cgroups, exits_2, inflight, inflight_path, is_root, run_json,
    send_signal, success_json, wait_exit,
};

fn bad_flag(args: &[&str], needle: &str) {
    exits_2(["pool-bench"].iter().chain(args), needle);
}

#[test]
fn rejects_a_zero_pool() {
    bad_flag(&["--pools", "0"], "--pools");
    bad_flag(&["--pools", "1,0,4"], "0 is not in 1..=1024");
    bad_flag(&["--pools", "two"], "--pools");
}

#[test]
fn rejects_bad_cpu_counts() {
    bad_flag(&["--cpus", "-1"], "the quota must be greater than 0");
    bad_flag(&["--cpus", "0"], "the quota must be greater than 0");
    bad_flag(
        &["--cpus", "0.001"],
        "the smallest quota the kernel accepts",
    );
    bad_flag(&["--cpus", "lots"], "is not a number of CPUs");
    bad_flag(
        &["--cpus", "inf"],
        "the quota must be a finite number of CPUs",
    );
}

/// A quota above the CPUs this process can use would limit nothing, and the report would name
/// it as the limit: refused before anything runs, with or without `--no-limit`.
#[test]
fn rejects_more_cpus_than_this_process_can_use() {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    let over = (available + 1).to_string();
    let needle = format!(
        "a quota of {over} CPUs is more than the {available} CPU{} this process can use",
        if available == 1 { "" } else { "s" }
    );
    for extra in [&[][..], &["--no-limit"][..]] {
        let out = inflight()
            .args([
                "pool-bench",
                "--cpus",
                &over,
                "--pools",
                "1",
                "--duration",
                "5s",
            ])
            .args(extra)
            .timeout(Duration::from_secs(20))
            .output()
            .unwrap();
        let stderr = assert_refused(&out, &needle, "");
        assert!(
            stderr.contains(&format!("give at most {available}")),
            "{stderr}"
        );
        // Refused before the calibration: no pool was announced.
        assert!(!stderr.contains("pool 1: running"), "{stderr}");
    }
}

#[test]
fn rejects_bad_durations() {
    bad_flag(&["--duration", "soon"], "is not a duration");
    bad_flag(&["--duration", "0s"], "greater than 0");
    bad_flag(&["--duration", "1h"], "10m limit");
}

#[test]
fn runs_without_a_quota_of_its_own() {
    let doc = run_json([
        "pool-bench",
        "--pools",
        "1,2",
        "--duration",
        "200ms",
        "--json",
    ]);
    assert!(doc["cpus"].is_null());
    assert_eq!(doc["enforcement"], "none");
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for (r, pool) in results.iter().zip([1, 2]) {
        assert_eq!(r["pool"], pool);
        assert!(r["tasks_per_s"].as_f64().unwrap() > 0.0);
        let (p50, p99, max) = (
            r["p50_ms"].as_f64().unwrap(),
            r["p99_ms"].as_f64().unwrap(),
            r["max_ms"].as_f64().unwrap(),
        );
        assert!(p50 > 0.0 && p50 <= p99 && p99 <= max, "{r}");
    }
}

/// A real quota of 0.2 CPUs: two busy threads must be throttled, the child sees the quota, and
/// the cgroup is gone afterwards.
#[test]
fn runs_each_pool_inside_a_real_quota() {
    if !can_create_cgroups(0.2) {
        return;
    }
    let doc = run_json([
        "pool-bench",
        "--cpus",
        "0.2",
        "--pools",
        "1,2",
        "--duration",
        "600ms",
        "--json",
    ]);
    assert_eq!(doc["cpus"], 0.2);
    let enforcement = doc["enforcement"].as_str().unwrap();
    assert!(
        enforcement == "cgroup-v1" || enforcement == "cgroup-v2",
        "{enforcement}"
    );
    let cgroup = doc["cgroup"].as_str().unwrap();
    assert!(
        !std::path::Path::new(cgroup).exists(),
        "{cgroup} was not removed"
    );
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        // Rust's std inside the child reads the 0.2 quota (floored to at least 1).
        assert_eq!(r["available_parallelism"], 1, "{r}");
        assert!(r["nr_throttled"].as_u64().is_some(), "{r}");
    }
    assert!(
        results[1]["nr_throttled"].as_u64().unwrap() > 0,
        "{}",
        results[1]
    );
    assert!(results[1]["throttled_ms"].as_f64().unwrap() > 0.0);
}

#[test]
fn human_output_has_the_table_and_a_reading() {
    inflight()
        .args(["pool-bench", "--pools", "1,2", "--duration", "150ms"])
        .assert()
        .success()
        .stdout(predicate::str::contains("tasks/s"))
        .stdout(predicate::str::contains("p99 ms"))
        .stdout(predicate::str::contains("nr_throttled"))
        .stdout(predicate::str::contains("throughput"));
}

/// As an unprivileged user the quota cannot be created: the tool says why and refuses, and
/// `--no-limit` runs with enforcement "none".
#[test]
fn refuses_an_unenforceable_quota_unless_no_limit() {
    if !is_root() {
        eprintln!("skipping: needs root to switch to an unprivileged user");
        return;
    }
    let bin = inflight_path();
    let run = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(&bin);
        cmd.args([
            "pool-bench",
            "--cpus",
            "1",
            "--pools",
            "1",
            "--duration",
            "100ms",
            "--json",
        ])
        .args(extra)
        .uid(65534)
        .gid(65534);
        cmd.output().unwrap()
    };
    let out = run(&[]);
    let stderr = assert_refused(&out, "cannot enforce --cpus 1", "");
    assert!(stderr.contains("not root"), "{stderr}");
    assert!(stderr.contains("--no-limit"), "{stderr}");

    let out = run(&["--no-limit"]);
    let doc = success_json(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: cannot enforce --cpus 1"),
        "{stderr}"
    );
    assert_eq!(doc["enforcement"], "none");
    assert_eq!(doc["cpus"], 1.0);
}

/// Ctrl-C in the middle of a pool: the child is stopped, the cgroup removed, and the exit status
/// is 130.
#[test]
fn ctrl_c_removes_the_cgroup() {
    if !can_create_cgroups(1.0) {
        return;
    }
    let mut child = std::process::Command::new(inflight_path())
        .args([
            "pool-bench",
            "--cpus",
            "1",
            "--pools",
            "1,2",
            "--duration",
            "20s",
            "--json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    // The first line names the cgroup: "... (1 CPU quota in /sys/fs/cgroup/...)".
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    let cgroup = first
        .split(" in ")
        .nth(1)
        .map(|p| std::path::PathBuf::from(p.trim().trim_end_matches(')')))
        .unwrap_or_else(|| panic!("no cgroup in {first:?}"));
    assert!(cgroup.exists(), "{}", cgroup.display());
    let mut second = String::new();
    stderr.read_line(&mut second).unwrap();
    assert!(second.contains("pool 1: running"), "{second}");
    std::thread::sleep(Duration::from_millis(300));
    send_signal(&child, libc::SIGINT);
    let status = wait_exit(
        &mut child,
        Duration::from_secs(10),
        "pool-bench after SIGINT",
    );
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(rest.contains("removed cgroup"), "{rest}");
    assert!(!cgroup.exists(), "{} was left behind", cgroup.display());
}
