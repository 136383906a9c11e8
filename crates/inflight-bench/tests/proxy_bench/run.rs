//! `proxy-bench run` end to end, with tiny durations: the real upstream, the real `inflight
//! proxy` (and HAProxy and nginx where installed), real pinning and cgroups where the machine
//! allows them. What is asserted holds on a busy machine: counts, the document's shape, the
//! cleanup; no time or throughput.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::support::{inflight, installed, installed_with, is_root, proxy_bench};

/// `proxy-bench run` of `only` with `duration` seconds per load step, writing `json`.
fn run_args(json: &Path, only: &str, duration: &str) -> Command {
    let mut cmd = Command::new(proxy_bench());
    cmd.args(["run", "--only", only, "--inflight"])
        .arg(inflight())
        .args(["--json"])
        .arg(json)
        .args(["--duration", duration, "--warmup", "0.1"])
        .args(["--idle-connections", "50", "--idle-settle", "0.2"]);
    cmd
}

fn read(json: &Path) -> Value {
    let text = std::fs::read_to_string(json).expect("the JSON document is written");
    serde_json::from_str(&text).expect("the JSON document parses")
}

/// Nothing the run started is left: no process holds its folder in its command line, its
/// upstream port is closed, its cgroups are gone.
fn assert_cleaned_up(doc: &Value) {
    let work = doc["meta"]["work_dir"].as_str().unwrap();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            !cmdline.contains(work),
            "left running: {cmdline} (pid {:?})",
            entry.file_name()
        );
    }
    let port = doc["meta"]["ports"]["upstream"].as_u64().unwrap() as u16;
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the upstream still listens on {port}"
    );
    for group in doc["meta"]["cpu_limit"]["groups"].as_array().unwrap() {
        let group = group.as_str().unwrap();
        assert!(!Path::new(group).exists(), "cgroup {group} left behind");
    }
}

fn targets_of(doc: &Value, repeat: u64) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    for r in doc["runs"].as_array().unwrap() {
        let t = r["target"].as_str().unwrap().to_string();
        if r["repeat"] == repeat && order.last() != Some(&t) {
            order.push(t);
        }
    }
    order
}

#[test]
fn a_short_run_measures_inflight_against_direct_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let started = Instant::now();
    let out = run_args(&json, "inflight,direct", "0.2")
        .args(["--repeats", "2", "--retries", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}");
    eprintln!("the run took {:?}", started.elapsed());
    let doc = read(&json);
    assert_eq!(doc["partial"], false);
    assert_eq!(doc["stopped_by"], Value::Null);

    // Repeat 1 starts at direct, repeat 2 at inflight.
    assert_eq!(targets_of(&doc, 1), ["direct", "inflight"]);
    assert_eq!(targets_of(&doc, 2), ["inflight", "direct"]);
    let runs = doc["runs"].as_array().unwrap();
    let count = |target: &str, case: &str| {
        runs.iter()
            .filter(|r| r["target"] == target && r["case"] == case)
            .count()
    };
    assert_eq!(count("direct", "saturation"), 2);
    assert_eq!(count("inflight", "saturation"), 2);
    assert_eq!(count("inflight", "idle"), 2);
    assert_eq!(count("inflight", "budget"), 2);
    assert_eq!((count("direct", "idle"), count("direct", "budget")), (0, 0));
    // Three load points, one or two attempts each (one retry), per target and repeat.
    for target in ["direct", "inflight"] {
        let n = count(target, "latency");
        assert!((6..=12).contains(&n), "{target}: {n} latency runs");
    }
    // A run is discarded exactly when its generator's send lag p99 is over 100 µs, and only
    // a discarded run is followed by another attempt.
    for r in runs.iter().filter(|r| r["case"] == "latency") {
        let lag = r["load"]["send_lag_ms"]["p99"].as_f64().unwrap();
        assert_eq!(r["discarded"].is_string(), lag > 0.1, "{r}");
        if r["attempt"] == 2 {
            let first = runs
                .iter()
                .find(|f| {
                    f["repeat"] == r["repeat"]
                        && f["target"] == r["target"]
                        && f["point"] == r["point"]
                        && f["attempt"] == 1
                })
                .unwrap();
            assert!(first["discarded"].is_string(), "{first}");
        }
    }
    for r in runs.iter().filter(|r| r["case"] == "idle") {
        assert_eq!(r["idle"]["opened"], 50, "{r}");
        assert_eq!(r["idle"]["still_open"], 50, "{r}");
    }
    for r in runs.iter().filter(|r| r["case"] == "budget") {
        assert_eq!(r["upstream"]["peak"], 6, "{r}");
    }
    let summary = &doc["summary"];
    assert_eq!(summary["saturation"].as_array().unwrap().len(), 2);
    assert_eq!(summary["saturation"][1]["target"], "inflight");
    assert_eq!(summary["saturation"][1]["runs"], 2);
    assert!(
        summary["saturation"][1]["cpu_us_per_answer"]["median"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert_eq!(summary["latency"].as_array().unwrap().len(), 3);

    // The machine: load averages, commit, the pinning and the CPU limit as they were.
    let meta = &doc["meta"];
    for key in [
        "load_average_at_start",
        "load_average_at_end",
        "commit",
        "date",
    ] {
        assert!(meta[key].is_string(), "meta.{key}: {meta}");
    }
    assert_eq!(meta["settings"]["repeats"], 2);
    assert_eq!(meta["settings"]["idle_connections"], 50);
    let instructions = &meta["instructions"];
    if instructions["measured"] == false {
        assert!(instructions["reason"].is_string());
        assert!(stdout.contains("instructions: not measured ("), "{stdout}");
        assert_eq!(
            summary["saturation"][1]["instructions_per_answer"],
            Value::Null
        );
    }
    if meta["pinning"]["applied"] == true {
        assert_eq!(meta["inflight_process"]["cpus_allowed"], "1");
        // One CPU to use: inflight picks its single-threaded runtime.
        assert_eq!(meta["inflight_process"]["threads"], 1);
    } else {
        assert!(stdout.contains("pinning: NOT APPLIED"), "{stdout}");
    }
    let limit = &meta["cpu_limit"];
    if limit["enforced"] == true {
        assert!(is_root());
        assert_eq!(limit["groups"].as_array().unwrap().len(), 1);
    } else {
        assert!(stdout.contains("CPU limit: NOT ENFORCED"), "{stdout}");
    }

    assert!(stdout.contains("1. saturation"), "{stdout}");
    assert!(
        stdout.contains("goals (judged on the medians):"),
        "{stdout}"
    );
    assert!(stderr.contains("==> repeat 2/2: direct"), "{stderr}");
    assert_cleaned_up(&doc);
}

#[test]
fn haproxy_and_nginx_run_beside_inflight_where_installed() {
    let missing: Vec<&str> = ["haproxy", "nginx"]
        .into_iter()
        .filter(|p| !installed(p))
        .collect();
    if !missing.is_empty() {
        eprintln!("skipping: {} not installed", missing.join(" and "));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = run_args(&json, "haproxy,nginx", "0.2")
        .args(["--repeats", "1", "--retries", "0"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = read(&json);
    let runs = doc["runs"].as_array().unwrap();
    for target in ["haproxy", "nginx"] {
        for case in ["idle", "saturation", "budget"] {
            assert_eq!(
                runs.iter()
                    .filter(|r| r["target"] == target && r["case"] == case)
                    .count(),
                1,
                "{target} {case}"
            );
        }
        assert!(doc["meta"][format!("{target}_version")].is_string());
    }
    // nginx's master and its worker are both measured.
    let nginx_idle = runs
        .iter()
        .find(|r| r["target"] == "nginx" && r["case"] == "idle")
        .unwrap();
    assert_eq!(nginx_idle["idle"]["processes"], 2);
    // HAProxy queues for its 6 as inflight does; both hold the upstream to 6.
    let haproxy_budget = runs
        .iter()
        .find(|r| r["target"] == "haproxy" && r["case"] == "budget")
        .unwrap();
    assert_eq!(haproxy_budget["upstream"]["peak"], 6);
    assert_cleaned_up(&doc);
}

#[test]
fn callgrind_counts_instructions_in_a_step_of_their_own_where_installed() {
    if !installed_with("valgrind", "--version") || !installed_with("callgrind_control", "--version")
    {
        eprintln!("skipping: valgrind is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = run_args(&json, "inflight", "0.2")
        .args(["--repeats", "1", "--retries", "0"])
        .args(["--instructions", "callgrind", "--callgrind-requests", "50"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = read(&json);
    assert_eq!(doc["meta"]["instructions"]["tool"], "callgrind");
    assert_eq!(doc["meta"]["instructions"]["measured"], true);
    let counted: Vec<&Value> = doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["case"] == "instructions")
        .collect();
    assert_eq!(counted.len(), 1);
    let c = &counted[0]["callgrind"];
    assert_eq!(
        (c["requests"].clone(), c["ok"].clone()),
        (50.into(), 50.into()),
        "{c}"
    );
    assert!(c["per_answer"].as_f64().unwrap() > 1000.0, "{c}");
    assert!(
        stdout.contains("5. instructions under callgrind"),
        "{stdout}"
    );
    assert_cleaned_up(&doc);
}

#[test]
fn sigterm_stops_the_run_and_writes_what_finished() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let mut child = run_args(&json, "direct,inflight", "1")
        .args(["--repeats", "5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The document is written after each step: the first is there once a step finished.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !json.exists() {
        assert!(Instant::now() < deadline, "no step finished in 30 s");
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill has no memory preconditions; the pid is our child, not yet reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    let doc = read(&json);
    assert_eq!(doc["partial"], true);
    assert_eq!(doc["stopped_by"], "SIGTERM");
    assert!(!doc["runs"].as_array().unwrap().is_empty());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("PARTIAL RUN: stopped by SIGTERM"),
        "{stdout}"
    );
    assert_cleaned_up(&doc);
}

#[test]
fn bad_flags_exit_2_with_the_reason() {
    for (args, needle) in [
        (vec!["--repeats", "0"], "--repeats"),
        (vec!["--only", "direct,envoy"], "unknown target \"envoy\""),
        (vec!["--duration=-1"], "expected a positive number"),
        (vec!["--rate", "0"], "expected a positive number"),
        (vec!["--instructions", "magic"], "--instructions"),
    ] {
        let out = Command::new(proxy_bench())
            .arg("run")
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    let help = Command::new(proxy_bench())
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("Example:"), "{help}");
    assert!(help.contains("--idle-connections"), "{help}");
}
