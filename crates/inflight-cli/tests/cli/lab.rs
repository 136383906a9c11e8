//! Tests of `inflight lab`: a small end-to-end lab run under a real cgroup (when root), Ctrl-C
//! cleanup, and bad flags.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use inflight_lab::results::ResultsDoc;

use inflight_lab::results::RunPlan;
use inflight_lab::run::{run_seed, Cell};

use crate::support::{
    assert_refused, exits_2, inflight, inflight_path, is_root, send_signal, wait_exit,
};

/// Links to the lab crate's files, inside this crate so that the packaged crate has them.
fn lab_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab")
}

/// A lab folder with the repository's scenarios and hypotheses and these strategies.
fn lab_dir_with_strategies(strategies: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in ["scenarios.toml", "hypotheses.toml"] {
        std::fs::copy(lab_dir().join(name), dir.path().join(name)).unwrap();
    }
    std::fs::write(dir.path().join("strategies.toml"), strategies).unwrap();
    dir
}

/// The common flags of a small, fast run; without root there is no cgroup, so `--no-limit`.
fn small_run_args(out: &Path) -> Vec<String> {
    let mut args: Vec<String> = [
        "lab",
        "run",
        "--strategies",
        "c1,c4",
        "--scenarios",
        "healthy,slow-write",
        "--records",
        "24",
        "--repeats",
        "1",
        "--time-scale",
        "0.05",
        "--lab-dir",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(lab_dir().display().to_string());
    args.push("--out".into());
    args.push(out.display().to_string());
    if !is_root() {
        args.push("--no-limit".into());
    }
    args
}

/// Runs a lab run with `args` plus `--json`, `--out out` and (without root) `--no-limit`; returns
/// the results document on stdout and what went to stderr.
fn run_lab_json(args: &[&str], out: &Path) -> (ResultsDoc, String) {
    let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    args.extend(["--json".to_string(), "--out".to_string()]);
    args.push(out.display().to_string());
    if !is_root() {
        args.push("--no-limit".into());
    }
    let output = run_lab(&args);
    let doc = serde_json::from_slice(&output.stdout).expect("one JSON document");
    (doc, String::from_utf8_lossy(&output.stderr).into_owned())
}

/// Runs `inflight` with `args` (a lab run), allowing it five minutes, and checks that it succeeds.
fn run_lab(args: &[String]) -> Output {
    inflight()
        .args(args)
        .timeout(Duration::from_secs(300))
        .assert()
        .success()
        .get_output()
        .clone()
}

#[test]
fn small_lab_run_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let mut args = small_run_args(&out);
    args.push("--json".into());
    let output = run_lab(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    // With --json, stdout holds exactly the results document.
    let doc: ResultsDoc = serde_json::from_str(&stdout).expect("stdout is one JSON document");
    // Where the lab files came from, at start-up and in the plan.
    let stderr = String::from_utf8_lossy(&output.stderr);
    let origin = format!("--lab-dir {}", lab_dir().display());
    assert!(
        stderr.contains(&format!("lab: lab files from {origin}\n")),
        "{stderr}"
    );
    assert_eq!(doc.meta.plan.as_ref().unwrap().lab_files, origin);

    let from_file: ResultsDoc =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap())
            .expect("results.json parses");
    assert_eq!(doc, from_file);

    assert_eq!(doc.runs.len(), 4, "2 strategies x 2 scenarios x 1 repeat");
    assert_eq!(doc.summary.len(), 4);
    assert_eq!(doc.meta.records, 24);
    if is_root() {
        assert!(
            doc.meta.enforcement.as_str().starts_with("cgroup-"),
            "{}",
            doc.meta.enforcement
        );
    }
    for run in &doc.runs {
        let sum = run.complete + run.incomplete + run.rejected + run.failed;
        assert_eq!(run.records, 24, "{run:?}");
        assert_eq!(sum, run.records, "outcomes must add up: {run:?}");
        assert_eq!(
            run.failed, 0,
            "no failures on a healthy loopback sim: {run:?}"
        );
        assert!(run.completion_s > 0.0);
        assert_eq!(run.cpus, 1.0);
        let accepted = (run.complete + run.incomplete) as f64;
        assert!((run.accepted_per_s - accepted / run.completion_s).abs() < 1e-6);
        match run.strategy.as_str() {
            "c4" => {
                assert!(
                    run.peak_writes_offered <= 6,
                    "c4 has a records budget of 6: {run:?}"
                );
                assert_eq!(run.write_503s, 0, "{run:?}");
                assert!(run.peak_enrichment_in_flight <= 24);
            }
            "c1" => {
                // The CPU-derived default: one record, so one enrichment call, at a time.
                assert_eq!(
                    run.peak_enrichment_in_flight as usize,
                    run.runner_available_parallelism
                );
                if is_root() {
                    assert_eq!(
                        run.runner_available_parallelism, 1,
                        "the 1-CPU quota is seen"
                    );
                }
            }
            other => panic!("unexpected strategy {other}"),
        }
        assert!(!run.timeline.enrichment.is_empty(), "timeline sampled");
    }
    assert!(!doc.hypotheses.is_empty(), "hypotheses evaluated");
    for h in &doc.hypotheses {
        assert!(
            ["pass", "fail", "skipped"].contains(&h.outcome.as_str()),
            "{h:?}"
        );
    }
    for file in ["runs.csv", "summary.md", "index.html"] {
        let path = out.join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(!text.trim().is_empty(), "{file} is empty");
    }
    let csv = std::fs::read_to_string(out.join("runs.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        1 + doc.runs.len(),
        "header + one line per run"
    );
    let svgs = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "svg"))
        .count();
    assert!(svgs >= 1, "at least one SVG figure");
}

#[test]
fn adaptive_and_rate_limited_strategies_run_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = small_run_args(&dir.path().join("r"));
    let i = args.iter().position(|a| a == "c1,c4").unwrap();
    args[i] = "c5,c4r,tower-acc-vegas".into();
    let i = args.iter().position(|a| a == "healthy,slow-write").unwrap();
    args[i] = "degrading,quota".into();
    let i = args.iter().position(|a| a == "0.05").unwrap();
    args[i] = "0.2".into();
    run_lab(&args);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r/results.json")).unwrap())
            .unwrap();
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 6);
    for run in runs {
        let outcomes = ["complete", "incomplete", "rejected", "failed"]
            .iter()
            .map(|k| run[k].as_u64().unwrap())
            .sum::<u64>();
        assert_eq!(outcomes, 24, "every record ends in one outcome: {run}");
        let limits = run["timeline"]["records_limit"].as_array();
        match run["strategy"].as_str().unwrap() {
            // C5's adaptive records budget shows its limit over time, within 1..=100.
            "c5" => {
                let limits = limits.expect("c5 records its adaptive limit");
                assert!(!limits.is_empty());
                assert!(limits
                    .iter()
                    .all(|l| (1..=100).contains(&l.as_u64().unwrap())));
            }
            // A fixed budget has no limit series.
            "c4r" => assert!(limits.is_none()),
            _ => {}
        }
        if run["strategy"] == "c4r" && run["scenario"] == "quota" {
            // The budget's rate is the quota's own (50/s, scaled with the run). A stall of
            // this loaded 2-core machine wakes the rate's waiters together and bunches their
            // sends past the quota's burst (CI saw 1, and once 4). Without the rate (C4, run
            // so 3 times) 18-19 of the 24 calls got 429: a quarter is far from that.
            let got = run["enrichment_429s"].as_u64().unwrap();
            assert!(
                got <= 6,
                "the rate keeps C4R under the quota: {got} 429s of 24"
            );
        }
    }
    let svg = std::fs::read_to_string(dir.path().join("r/timeline-degrading.svg")).unwrap();
    assert!(
        svg.contains("stroke-dasharray"),
        "the adaptive limit is drawn dashed"
    );
}

/// C6 (C5 with back-pressure) and C5-TOWER-RETRY (C5's budgets in tower's retry layer) retry
/// the quota's 429s and the hard limit's 503s: every record still ends in one outcome, every
/// attempt and retry is counted, and the retries rescue records that a first 429 would fail.
#[test]
fn strategies_with_retries_run_end_to_end_and_count_their_retries() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = small_run_args(&dir.path().join("r"));
    let i = args.iter().position(|a| a == "c1,c4").unwrap();
    args[i] = "c6,c5-tower-retry".into();
    let i = args.iter().position(|a| a == "healthy,slow-write").unwrap();
    args[i] = "quota,hard-limit".into();
    let i = args.iter().position(|a| a == "24").unwrap();
    args[i] = "48".into();
    let i = args.iter().position(|a| a == "0.05").unwrap();
    args[i] = "0.2".into();
    run_lab(&args);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r/results.json")).unwrap())
            .unwrap();
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    let n = |run: &serde_json::Value, key: &str| {
        run[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} missing: {run}"))
    };
    for run in runs {
        let outcomes: u64 = ["complete", "incomplete", "rejected", "failed"]
            .iter()
            .map(|k| n(run, k))
            .sum();
        assert_eq!(outcomes, 48, "every record ends in one outcome: {run}");
        let by_kind = |prefix: &str| -> u64 {
            run["failed_by_kind"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(kind, _)| kind.starts_with(prefix))
                .map(|(_, v)| v.as_u64().unwrap())
                .sum()
        };
        // Each record that got as far as its write made one, plus the retries.
        let written =
            n(run, "complete") + n(run, "incomplete") + n(run, "rejected") + by_kind("write_");
        assert_eq!(
            n(run, "write_calls"),
            written + n(run, "write_retries"),
            "{run}"
        );
        assert!(
            n(run, "enrichment_calls") >= 3 * written + n(run, "enrichment_retries"),
            "{run}"
        );
        assert!(n(run, "write_503s") <= n(run, "write_calls"), "{run}");
        if run["scenario"] == "quota" {
            // 64 records start at once against a quota of 250 calls/s (50/s at time scale
            // 0.2) with a burst of 25: the first calls are refused, and retried.
            assert!(n(run, "enrichment_429s") > 0, "{run}");
            assert!(n(run, "enrichment_retries") > 0, "{run}");
            assert!(
                by_kind("enrich_status_429") < n(run, "enrichment_429s"),
                "a retried 429 does not fail its record: {run}"
            );
        }
    }
    let summary = doc["summary"].as_array().unwrap();
    for row in summary {
        let fraction = row["enrichment_429_fraction"]["median"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&fraction), "{row}");
        assert!(row["complete_fraction"]["median"].as_f64().unwrap() <= 1.0);
    }
}

/// The budgets of C4-PROXY and C5-PROXY are enforced by an `inflight proxy` the lab starts in
/// front of the sim: the runner, with no limits of its own, keeps 64 records in flight, yet the
/// system of record sees at most the proxy's 6 writes at once, and every record ends in one
/// outcome.
#[test]
fn proxied_strategies_put_their_budgets_in_a_proxy_in_front_of_the_sim() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = small_run_args(&dir.path().join("r"));
    let i = args.iter().position(|a| a == "c1,c4").unwrap();
    args[i] = "c2-64,c4-proxy,c5-proxy".into();
    let i = args.iter().position(|a| a == "healthy,slow-write").unwrap();
    args[i] = "slow-write".into();
    let i = args.iter().position(|a| a == "24").unwrap();
    args[i] = "96".into();
    let i = args.iter().position(|a| a == "0.05").unwrap();
    args[i] = "0.2".into();
    let output = run_lab(&args);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r/results.json")).unwrap())
            .unwrap();
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    let run = |name: &str| {
        runs.iter()
            .find(|r| r["strategy"] == name)
            .unwrap_or_else(|| panic!("a run of {name}"))
    };
    for r in runs {
        let outcomes = ["complete", "incomplete", "rejected", "failed"]
            .iter()
            .map(|k| r[k].as_u64().unwrap())
            .sum::<u64>();
        assert_eq!(outcomes, 96, "every record ends in one outcome: {r}");
    }
    // Without limits the runner offers the system of record far more than 6 writes at once...
    let unlimited = run("c2-64")["peak_writes_offered"].as_u64().unwrap();
    assert!(unlimited > 6, "c2-64 offered {unlimited} writes at once");
    // ... and behind the proxy it offers the proxy as many, which lets 6 through.
    let c4 = run("c4-proxy");
    assert!(
        c4["peak_writes_in_flight"].as_u64().unwrap() > 6,
        "the runner itself has no limit: {c4}"
    );
    assert_eq!(c4["peak_writes_offered"], 6, "{c4}");
    assert_eq!(c4["write_503s"], 0, "{c4}");
    let c5 = run("c5-proxy");
    assert!(c5["complete"].as_u64().unwrap() + c5["incomplete"].as_u64().unwrap() > 0);
    assert!(
        c5["peak_writes_offered"].as_u64().unwrap() < unlimited,
        "the proxy's adaptive budget holds writes below the unlimited peak: {c5}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("the proxy"), "no proxy trouble: {stderr}");
}

/// The limits of a proxied strategy's budgets live in the proxy, not the runner: the lab reads
/// them from the proxy's `/budgets.json` while the run lasts, into the run's timeline, lined up
/// with the runner's samples. C5-PROXY's Vegas limit on writes moves as the system of record
/// degrades, and the report's timeline draws it; C4-PROXY's fixed budgets keep none, as C4's.
#[test]
fn a_proxied_adaptive_strategy_records_the_proxys_limits_over_time() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let mut args = small_run_args(&out);
    for (from, to) in [
        ("c1,c4", "c5-proxy,c4-proxy"),
        ("healthy,slow-write", "degrading"),
        ("24", "96"),
        ("0.05", "0.2"),
    ] {
        let i = args.iter().position(|a| a == from).unwrap();
        args[i] = to.into();
    }
    run_lab(&args);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let runs = doc["runs"].as_array().unwrap();
    let timeline = |name: &str| {
        &runs
            .iter()
            .find(|r| r["strategy"] == name)
            .unwrap_or_else(|| panic!("a run of {name}"))["timeline"]
    };
    let series = |t: &serde_json::Value, key: &str| -> Vec<u64> {
        t[key]
            .as_array()
            .map(|v| v.iter().map(|x| x.as_u64().unwrap()).collect())
            .unwrap_or_default()
    };
    let c5 = timeline("c5-proxy");
    let samples = series(c5, "records").len();
    assert!(samples > 10, "{c5}");
    let records_limit = series(c5, "records_limit");
    let enrichment_limit = series(c5, "enrichment_limit");
    assert_eq!(records_limit.len(), samples, "one limit per sample: {c5}");
    assert_eq!(enrichment_limit.len(), samples, "{c5}");
    let mut levels = records_limit.clone();
    levels.sort_unstable();
    levels.dedup();
    assert!(levels.len() >= 2, "the writes' limit moves: {levels:?}");
    assert!(levels[0] >= 1, "{levels:?}");
    // AIMD on enrichment, started open at 64, never above it.
    assert!(
        enrichment_limit.iter().all(|l| (1..=64).contains(l)),
        "{c5}"
    );
    // Lined up by the runner's clock, which is not kept.
    assert!(c5.get("started_unix_s").is_none(), "{c5}");
    let failed = c5["limit_samples_failed"].as_u64().unwrap_or(0);
    assert!(
        failed * 4 < samples as u64,
        "{failed} of {samples} reads failed"
    );

    let c4 = timeline("c4-proxy");
    assert!(!series(c4, "records").is_empty());
    assert!(c4.get("records_limit").is_none(), "a fixed budget: {c4}");
    assert!(c4.get("enrichment_limit").is_none(), "{c4}");

    let svg = std::fs::read_to_string(out.join("timeline-degrading.svg")).unwrap();
    assert!(
        svg.contains("dashed: the adaptive limit of the calls of its colour"),
        "the proxy's limit is drawn"
    );
}

#[test]
fn without_json_the_summary_goes_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let mut args = small_run_args(&out);
    // One cell only, to keep it short.
    let i = args.iter().position(|a| a == "c1,c4").unwrap();
    args[i] = "c4".into();
    let i = args.iter().position(|a| a == "healthy,slow-write").unwrap();
    args[i] = "slow-write".into();
    let output = run_lab(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stdout.to_lowercase().contains("c4") && stdout.contains("slow-write"),
        "{stdout}"
    );
    assert!(serde_json::from_str::<serde_json::Value>(&stdout).is_err());
    // stderr is not a terminal here: a plain line per run, and where the report is.
    assert!(stderr.contains("[1/1] c4 slow-write"), "{stderr}");
    assert!(stderr.contains("index.html"), "{stderr}");
    assert!(out.join("results.json").is_file());
}

/// Reads stderr lines until one contains `needle`, returning all lines read (bounded by time).
fn read_until(reader: &mut impl BufRead, needle: &str, limit: Duration) -> Vec<String> {
    let start = Instant::now();
    let mut lines = Vec::new();
    while start.elapsed() < limit {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let found = line.contains(needle);
                lines.push(line);
                if found {
                    break;
                }
            }
        }
    }
    lines
}

/// A lab run long enough that a signal lands mid-run, its stderr, and the lines up to its first
/// run's start.
fn start_long_lab(
    dir: &Path,
) -> (
    std::process::Child,
    BufReader<std::process::ChildStderr>,
    Vec<String>,
) {
    let mut args = small_run_args(&dir.join("r"));
    let i = args.iter().position(|a| a == "0.05").unwrap();
    args[i] = "1.0".into();
    let i = args.iter().position(|a| a == "24").unwrap();
    args[i] = "200".into();
    let mut child = std::process::Command::new(inflight_path())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let lines = read_until(&mut stderr, "[1/4]", Duration::from_secs(60));
    (child, stderr, lines)
}

#[test]
fn sigterm_ends_the_lab_as_interrupted_with_status_143() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, mut stderr, lines) = start_long_lab(dir.path());
    std::thread::sleep(Duration::from_millis(300));
    send_signal(&child, libc::SIGTERM);
    let status = wait_exit(&mut child, Duration::from_secs(30), "lab after SIGTERM");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
    assert_eq!(status.code(), Some(143), "stderr: {lines:?} {rest}");
    assert!(rest.contains("interrupted by SIGTERM"), "{rest}");
    assert!(!rest.contains("the runner failed"), "{rest}");
}

#[test]
fn ctrl_c_stops_the_sim_and_runner_and_removes_cgroups() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, mut stderr, lines) = start_long_lab(dir.path());
    let pid = child.id();
    let sim_url = lines
        .iter()
        .find_map(|l| l.split("sim at ").nth(1))
        .map(|u| u.trim().to_string())
        .unwrap_or_else(|| panic!("no sim url in {lines:?}"));
    std::thread::sleep(Duration::from_millis(300));
    send_signal(&child, libc::SIGINT);
    let status = wait_exit(&mut child, Duration::from_secs(30), "lab after SIGINT");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
    assert_eq!(status.code(), Some(130), "stderr: {lines:?} {rest}");
    assert!(rest.contains("interrupted"), "{rest}");

    // The sim is gone: its port no longer accepts connections.
    let addr = sim_url.trim_start_matches("http://");
    let mut refused = false;
    for _ in 0..50 {
        if std::net::TcpStream::connect(addr).is_err() {
            refused = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(refused, "the sim at {addr} still accepts connections");

    assert_eq!(cgroups_of(pid), Vec::<String>::new(), "cgroups left behind");
    // No runner of this lab is left: none runs with this sim's URL on its command line.
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&sim_url) && c.contains("runner"))
        .collect();
    assert!(left.is_empty(), "runners left: {left:?}");
}

/// The CPU-quota cgroups named after the lab process `pid` (`inflight-<pid>-<n>`) that exist
/// now; none without root, where the lab makes none.
fn cgroups_of(pid: u32) -> Vec<String> {
    let prefix = format!("inflight-{pid}-");
    let mut found = Vec::new();
    for root in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup"] {
        let Ok(entries) = std::fs::read_dir(root) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with(&prefix) {
                found.push(format!("{root}/{name}"));
            }
        }
    }
    found
}

/// A small run of 4: c4 then c1 in `healthy`, 2 repeats. c4 takes a fraction of a second and c1
/// a few, so a signal sent once the first run is done lands in the second.
fn resumable_run_args(out: &Path) -> Vec<String> {
    let mut args = small_run_args(out);
    for (from, to) in [
        ("c1,c4", "c4,c1"),
        ("healthy,slow-write", "healthy"),
        ("1", "2"),
        ("0.05", "0.1"),
    ] {
        let i = args.iter().position(|a| a == from).unwrap();
        args[i] = to.into();
    }
    args
}

/// Starts `inflight ARGS` with stderr piped, and reads stderr up to the line saying the second
/// run started (`[2/4] c1 healthy 1 CPU repeat 1 ...`), so the first one is done and saved;
/// returns the child, its stderr and the lines read.
fn start_until_second_run(
    args: &[String],
) -> (
    std::process::Child,
    BufReader<std::process::ChildStderr>,
    Vec<String>,
) {
    let mut child = std::process::Command::new(inflight_path())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let needle = "[2/4] c1 healthy 1 CPU repeat 1 ...";
    let lines = read_until(&mut stderr, needle, Duration::from_secs(120));
    assert!(
        lines.last().is_some_and(|l| l.contains(needle)),
        "the second run did not start: {lines:?}"
    );
    (child, stderr, lines)
}

fn read_doc(dir: &Path) -> ResultsDoc {
    let text = std::fs::read_to_string(dir.join("results.json"))
        .unwrap_or_else(|e| panic!("{}/results.json: {e}", dir.display()));
    serde_json::from_str(&text).expect("results.json is a results document")
}

/// (strategy, scenario, repeat, seed) of every run, in order.
fn run_keys(doc: &ResultsDoc) -> Vec<(String, String, u32, u64)> {
    doc.runs
        .iter()
        .map(|r| (r.strategy.clone(), r.scenario.clone(), r.repeat, r.seed))
        .collect()
}

/// Resumes `dir` with `--json`, checks it succeeds, and returns its document and stderr.
fn resume(dir: &Path) -> (ResultsDoc, String) {
    let output = inflight()
        .args(["lab", "run", "--json", "--resume"])
        .arg(dir)
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    let doc: ResultsDoc =
        serde_json::from_slice(&output.stdout).expect("stdout is one JSON document");
    assert_eq!(doc, read_doc(dir), "stdout and results.json agree");
    (doc, stderr)
}

#[test]
fn an_interrupted_lab_keeps_its_finished_runs_and_resume_runs_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let args = resumable_run_args(&out);
    let (mut child, mut stderr, lines) = start_until_second_run(&args);
    send_signal(&child, libc::SIGINT);
    let status = wait_exit(&mut child, Duration::from_secs(30), "lab after SIGINT");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
    assert_eq!(status.code(), Some(130), "stderr: {lines:?} {rest}");

    // The finished runs are kept, marked partial, with a page that says so.
    let partial = read_doc(&out);
    let finished = partial.runs.len();
    assert!(partial.meta.partial, "{:?}", partial.meta);
    // c1 takes seconds: the signal lands in it.
    assert_eq!(finished, 1, "{rest}");
    assert_eq!(
        (partial.meta.runs_finished, partial.meta.runs_planned),
        (finished, 4)
    );
    assert_eq!(partial.runs[0].strategy, "c4");
    assert!(!partial.summary.is_empty());
    assert!(partial.hypotheses.iter().all(|h| h.outcome == "skipped"));
    let page = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(
        page.contains("Partial run: ") && page.contains(&format!("{finished} of 4 planned runs")),
        "no partial banner on the page"
    );
    assert!(
        rest.contains(&format!("partial report: {finished} of 4 runs finished")),
        "{rest}"
    );
    assert!(
        rest.contains("the run in progress (c1 healthy 1 CPU repeat 1) was stopped and discarded"),
        "{rest}"
    );
    let hint = format!("inflight lab run --resume {}", out.display());
    assert!(rest.contains(&hint), "{rest}");
    // Named by its path: the rest must be run by the same build.
    let exe = inflight_path().canonicalize().unwrap();
    assert!(
        rest.contains(&format!("run the rest with: {} lab run", exe.display())),
        "{rest}"
    );
    assert_eq!(
        partial.meta.plan.as_ref().unwrap().exe,
        exe.display().to_string()
    );

    // A new run into the folder is pointed to --resume.
    let output = inflight().args(&args).output().unwrap();
    assert_refused(&output, &hint, "--out over a partial run: ");

    // --resume runs only the missing runs, counted on their own, and completes the folder.
    let (doc, stderr) = resume(&out);
    assert!(
        stderr.contains(&format!(
            "resuming {}: {finished} of 4 runs done, {} to run",
            out.display(),
            4 - finished
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("[1/{}] ", 4 - finished)),
        "{stderr}"
    );
    assert!(!stderr.contains("[1/4]"), "{stderr}");
    assert!(!doc.meta.partial);
    assert_eq!((doc.meta.runs_finished, doc.meta.runs_planned), (4, 4));
    assert_eq!(doc.meta.resumed_at.len(), 1);
    assert_eq!(doc.meta.started_at, partial.meta.started_at);
    assert_eq!(
        doc.runs[..finished],
        partial.runs[..],
        "the finished runs are kept as they were"
    );
    let page = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(!page.contains("Partial run: "));

    // The same runs, in the same order, with the same seeds as an uninterrupted run.
    let whole = dir.path().join("whole");
    run_lab(&resumable_run_args(&whole));
    let uninterrupted = read_doc(&whole);
    assert_eq!(run_keys(&doc), run_keys(&uninterrupted));
    for run in &doc.runs {
        assert_eq!(run.seed, run_seed(1, &run.scenario, run.repeat), "{run:?}");
    }
    assert_ne!(doc.runs[0].seed, doc.runs[2].seed, "repeats differ");

    // Nothing is left to resume.
    let output = inflight()
        .args(["lab", "run", "--resume"])
        .arg(&out)
        .output()
        .unwrap();
    assert_refused(
        &output,
        "this run is complete (4 of 4 runs, and its report); nothing to resume",
        "",
    );
}

#[test]
fn a_killed_lab_leaves_a_folder_that_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let (mut child, _stderr, _) = start_until_second_run(&resumable_run_args(&out));
    let pid = child.id();
    if is_root() {
        // Killed inside the second run, once its runner's cgroup is made.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while cgroups_of(pid).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "no cgroup for the second run"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    send_signal(&child, libc::SIGKILL);
    wait_exit(&mut child, Duration::from_secs(10), "lab after SIGKILL");

    let killed = read_doc(&out);
    assert!(killed.meta.partial);
    assert!(!killed.runs.is_empty(), "the finished run was saved");
    assert!(killed.meta.plan.is_some());

    // The killed lab's sim and runner end when their stdin closes; the resumed one starts its own.
    // Wait for its runner to leave its cgroup, so that the group is provably stale.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while cgroups_of(pid).iter().any(|g| {
        std::fs::read_to_string(format!("{g}/cgroup.procs")).is_ok_and(|p| !p.trim().is_empty())
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "the killed lab's runner still runs"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (doc, _) = resume(&out);
    assert!(!doc.meta.partial);
    assert_eq!(doc.runs.len(), 4);
    assert_eq!(doc.runs[..killed.runs.len()], killed.runs[..]);
    for run in &doc.runs {
        assert_eq!(run.seed, run_seed(1, &run.scenario, run.repeat), "{run:?}");
    }
    assert!(out.join("index.html").is_file());
    // A SIGKILLed lab cannot remove the cgroup of the run it was in; the next lab removed it,
    // its owner being dead and nothing running in it any more.
    assert_eq!(
        cgroups_of(pid),
        Vec::<String>::new(),
        "the killed lab's cgroups"
    );
}

/// The hypotheses of a resumed run are those its first part read, kept in its plan: a lab
/// folder whose hypotheses file changed in between is not read for them, and naming it with
/// `--lab-dir` is refused, as changed strategies are.
#[test]
fn a_resumed_run_evaluates_the_hypotheses_it_started_with() {
    let dir = tempfile::tempdir().unwrap();
    let lab = dir.path().join("lab");
    std::fs::create_dir(&lab).unwrap();
    for name in ["strategies.toml", "scenarios.toml"] {
        std::fs::copy(lab_dir().join(name), lab.join(name)).unwrap();
    }
    let hypothesis = |claim: &str, compare: &str| {
        format!(
            "[[hypothesis]]\nid = \"K1\"\nclaim = \"{claim}\"\nmetric = \"complete\"\nscenario = \"healthy\"\nstrategies = [\"c4\"]\ncompare = \"{compare}\"\nthreshold = 0\n"
        )
    };
    let first = hypothesis("C4 completes records in healthy", ">");
    std::fs::write(lab.join("hypotheses.toml"), &first).unwrap();
    let out = dir.path().join("r");
    let mut args = resumable_run_args(&out);
    let i = args.iter().position(|a| a == "--lab-dir").unwrap();
    args[i + 1] = lab.display().to_string();
    let (mut child, mut stderr, lines) = start_until_second_run(&args);
    send_signal(&child, libc::SIGINT);
    let status = wait_exit(&mut child, Duration::from_secs(30), "lab after SIGINT");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
    assert_eq!(status.code(), Some(130), "stderr: {lines:?} {rest}");
    let partial = read_doc(&out);
    assert!(partial.meta.partial);
    let plan = partial.meta.plan.as_ref().unwrap();
    assert_eq!(plan.hypotheses_toml, first);
    assert_eq!(
        plan.hypotheses_origin,
        lab.join("hypotheses.toml").display().to_string()
    );

    // The lab folder's file now claims the opposite, which C4's runs fail.
    std::fs::write(
        lab.join("hypotheses.toml"),
        hypothesis("C4 completes no record in healthy", "<"),
    )
    .unwrap();
    let output = inflight()
        .args(["lab", "run", "--resume"])
        .arg(&out)
        .arg("--lab-dir")
        .arg(&lab)
        .output()
        .unwrap();
    assert_refused(
        &output,
        &format!(
            "--lab-dir asks for the hypotheses of {}, but the run in",
            lab.join("hypotheses.toml").display()
        ),
        "",
    );

    // Resumed where `lab/` is that folder: its strategies are the plan's, its hypotheses not.
    let output = inflight()
        .current_dir(dir.path())
        .args(["lab", "run", "--json", "--resume"])
        .arg(&out)
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("lab files from lab/ in the current directory"),
        "{stderr}"
    );
    assert!(!stderr.contains("note:"), "{stderr}");
    let doc = read_doc(&out);
    assert!(!doc.meta.partial);
    let hypotheses: Vec<(&str, &str, &str)> = doc
        .hypotheses
        .iter()
        .map(|h| (h.id.as_str(), h.claim.as_str(), h.outcome.as_str()))
        .collect();
    assert_eq!(
        hypotheses,
        [("K1", "C4 completes records in healthy", "pass")]
    );
    assert_eq!(doc.meta.plan.unwrap().hypotheses_toml, first);
}

#[test]
fn resume_refuses_what_it_cannot_resume_and_flags_that_change_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let resume_args = |folder: &Path, extra: &[&str]| {
        let mut args: Vec<String> = vec!["lab".into(), "run".into(), "--resume".into()];
        args.push(folder.display().to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let refused = |args: Vec<String>, needle: &str| {
        let output = inflight().args(&args).output().unwrap();
        assert_refused(&output, needle, &format!("{args:?}: "));
    };

    refused(
        resume_args(&dir.path().join("nope"), &[]),
        "nope: no such folder",
    );
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    refused(
        resume_args(&empty, &[]),
        "not a lab results folder (it holds no results.json)",
    );
    // A results document from before plans were kept.
    let old = dir.path().join("old");
    std::fs::create_dir(&old).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../inflight-lab/tests/fixtures/results-quick.json"),
        old.join("results.json"),
    )
    .unwrap();
    refused(resume_args(&old, &[]), "holds no plan");

    // A partial run of 2 cells x 2 repeats with nothing finished, as a killed lab leaves it.
    let partial = dir.path().join("partial");
    std::fs::create_dir(&partial).unwrap();
    let mut doc = ResultsDoc::default();
    doc.meta.records = 24;
    doc.meta.repeats = 2;
    doc.meta.time_scale = 0.1;
    doc.meta.seed = 1;
    doc.meta.partial = true;
    doc.meta.runs_planned = 4;
    doc.meta.inflight_version = env!("CARGO_PKG_VERSION").into();
    doc.meta.plan = Some(RunPlan {
        cells: vec![
            Cell::new("c4", "healthy", 1.0),
            Cell::new("c1", "healthy", 1.0),
        ],
        strategies_origin: "built-in".into(),
        strategies_toml: inflight_lab::strategy::BUILTIN_STRATEGIES.into(),
        scenarios_origin: "built-in".into(),
        scenarios_toml: inflight_lab::scenario::BUILTIN_SCENARIOS.into(),
        ..RunPlan::default()
    });
    std::fs::write(
        partial.join("results.json"),
        serde_json::to_string(&doc).unwrap(),
    )
    .unwrap();
    for (extra, needle) in [
        (
            vec!["--records", "99"],
            "--records asks for 99 records per run, but the run in",
        ),
        (
            vec!["--repeats", "3"],
            "planned with 2 repeats; leave --repeats out",
        ),
        (vec!["--quick"], "--quick asks for 3 repeats"),
        (vec!["--time-scale", "0.5"], "planned with time scale 0.1"),
        (vec!["--seed", "7"], "planned with seed 1"),
        (vec!["--strategies", "c1"], "planned with strategies c4,c1"),
        (
            vec!["--scenarios", "quota"],
            "planned with scenarios healthy",
        ),
        (vec!["--cpus", "1,2"], "planned with CPUs 1"),
        (vec!["--out", "/tmp/x"], "cannot be used with"),
        (vec!["--replace"], "cannot be used with"),
    ] {
        refused(resume_args(&partial, &extra), needle);
    }
    // A lab folder whose strategies are not the plan's.
    let lab = dir.path().join("lab");
    std::fs::create_dir(&lab).unwrap();
    for name in ["strategies.toml", "scenarios.toml", "hypotheses.toml"] {
        std::fs::copy(lab_dir().join(name), lab.join(name)).unwrap();
    }
    let strategies = std::fs::read_to_string(lab.join("strategies.toml")).unwrap();
    std::fs::write(
        lab.join("strategies.toml"),
        format!("{strategies}\n# changed\n"),
    )
    .unwrap();
    let lab_arg = lab.display().to_string();
    refused(
        resume_args(&partial, &["--lab-dir", &lab_arg]),
        "--lab-dir asks for the strategies of",
    );
    // Nothing was run or written by the refusals.
    let names: Vec<String> = std::fs::read_dir(&partial)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["results.json"]);
}

#[test]
fn bad_flags_exit_2_with_a_message() {
    let lab = lab_dir().display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--repeats", "0"], "--repeats"),
        (vec!["--records", "0"], "--records"),
        (vec!["--time-scale=-1"], "--time-scale"),
        (vec!["--cpus", "0"], "--cpus"),
        (vec!["--cpus", "-1"], "--cpus must be"),
        (
            vec!["--cpus", "0.001"],
            "between 0.01 (the kernel's smallest quota",
        ),
        (vec!["--metrics-addr", "10.0.0.1:9464"], "loopback"),
        (vec!["--time-scale", "-1"], "--time-scale must be"),
        (vec!["--time-scale", "nan"], "--time-scale"),
        (vec!["--time-scale", "0"], "--time-scale"),
        (vec!["--strategies", "c1,nope"], "unknown strategy `nope`"),
        (vec!["--scenarios", "sunny"], "unknown scenario `sunny`"),
        (vec!["--sim-url", "http://10.0.0.1:80"], "loopback"),
        (vec!["--repeats", "many"], "invalid value"),
        (
            vec!["--replicas", "0"],
            "--replicas must be between 1 and 16, got 0",
        ),
        (
            vec!["--replicas", "17"],
            "--replicas must be between 1 and 16",
        ),
        (
            vec!["--replicas", "4", "--records", "3"],
            "at least one record per replica",
        ),
        (
            vec!["--redis-url", "redis://10.0.0.1:6379"],
            "not a loopback address",
        ),
        (vec!["--redis-url", "http://127.0.0.1:1"], "--redis-url"),
        (vec!["--frobnicate"], "unexpected argument"),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["lab", "run", "--lab-dir", &lab];
        args.extend(&extra);
        let output = inflight().args(&args).output().unwrap();
        assert_refused(&output, needle, &format!("{extra:?}: "));
    }
    // An --out that is a file, and a --sim-url where nothing listens, are refused before any
    // run, with a message, and leave no report folder behind.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let sim_url = format!("http://127.0.0.1:{closed_port}");
    let fresh = dir.path().join("fresh");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--out".into(), file.display().to_string()],
            "is not a folder",
        ),
        (
            // The folder holding `a-file`: an earlier run's files must not mix with a new one's.
            vec!["--out".into(), dir.path().display().to_string()],
            "already holds 1 file(s)",
        ),
        (
            vec![
                "--sim-url".into(),
                sim_url,
                "--no-limit".into(),
                "--out".into(),
                fresh.display().to_string(),
            ],
            "no `inflight sim` answers there",
        ),
        (
            vec![
                "--strategies".into(),
                "c4-fleet".into(),
                "--scenarios".into(),
                "healthy".into(),
                "--redis-url".into(),
                format!("redis://127.0.0.1:{closed_port}"),
                "--no-limit".into(),
                "--out".into(),
                fresh.display().to_string(),
            ],
            "no Redis answers at --redis-url",
        ),
    ];
    for (extra, needle) in cases {
        let output = inflight()
            .args(["lab", "run", "--lab-dir", &lab])
            .args(&extra)
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap();
        assert_refused(&output, needle, &format!("{extra:?}: "));
    }
    assert!(!fresh.exists(), "a failed run left its empty report folder");

    let missing = tempfile::tempdir().unwrap();
    let output = inflight()
        .args(["lab", "run", "--lab-dir"])
        .arg(missing.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.contains("strategies.toml") && stderr.contains("not found"),
        "{stderr}"
    );
}

#[test]
fn bad_strategies_file_is_named_with_the_field() {
    let dir = lab_dir_with_strategies("[c4]\nrecords_in_flight = 32\nenrichment = 0\n");
    let output = inflight()
        .args(["lab", "run", "--strategies", "c4", "--lab-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("strategies.toml") && stderr.contains("`enrichment`"),
        "{stderr}"
    );
}

#[test]
fn lab_report_rewrites_a_report_from_results_json() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../inflight-lab/tests/fixtures/results-quick.json");
    let out = tempfile::tempdir().unwrap();
    let assert = inflight()
        .args(["lab", "report"])
        .arg(&fixture)
        .arg("--out")
        .arg(out.path())
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).into_owned();
    assert!(
        stdout.contains("H1"),
        "hypotheses table on stdout: {stdout}"
    );
    for file in [
        "summary.md",
        "runs.csv",
        "index.html",
        "accepted_per_s.svg",
        "write_503s.svg",
    ] {
        let path = out.path().join(file);
        let meta = std::fs::metadata(&path).unwrap_or_else(|_| panic!("{file} written"));
        assert!(meta.len() > 0, "{file} is empty");
    }
    let doc: ResultsDoc =
        serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    let csv = std::fs::read_to_string(out.path().join("runs.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        doc.runs.len() + 1,
        "a header and a row per run"
    );
    // The page links results.json: it is there, with the same runs and its summary.
    let copy: ResultsDoc =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap())
            .expect("results.json written next to the page");
    assert_eq!(copy.runs, doc.runs);
    let summary = inflight_lab::run::summarize(&doc.runs);
    assert_eq!(copy.summary.len(), summary.len());
    for (copied, computed) in copy.summary.iter().zip(&summary) {
        assert_eq!(copied.strategy, computed.strategy);
        assert_eq!(copied.repeats, computed.repeats);
        // Summaries of older documents lack fields later versions compute (write_503_fraction).
        let (a, b) = (copied.write_503_fraction, computed.write_503_fraction);
        assert!((a.median - b.median).abs() < 1e-9, "{copied:?}");
    }
    assert!(copy.summary.iter().any(|r| r.write_503_fraction.max > 0.0));
    assert_eq!(copy.hypotheses.len(), doc.hypotheses.len());
    // A folder holding results.json will do too.
    let again = tempfile::tempdir().unwrap();
    inflight()
        .args(["lab", "report"])
        .arg(out.path())
        .arg("--out")
        .arg(again.path())
        .assert()
        .success();
    assert!(again.path().join("index.html").is_file());

    exits_2(
        ["lab", "report", "/nonexistent/results.json"],
        "cannot read /nonexistent/results.json",
    );
    let not_results = out.path().join("runs.csv");
    exits_2(
        ["lab", "report", not_results.to_str().unwrap()],
        "is not a lab results document",
    );
}

#[test]
fn run_help_lists_every_strategy_and_scenario_of_the_lab_files() {
    let out = inflight().args(["lab", "run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let strategies = std::fs::read_to_string(lab_dir().join("strategies.toml")).unwrap();
    let scenarios = std::fs::read_to_string(lab_dir().join("scenarios.toml")).unwrap();
    let names = strategies
        .lines()
        .filter_map(|l| l.strip_prefix('[').and_then(|l| l.strip_suffix(']')))
        .chain(scenarios.lines().filter_map(|l| {
            l.strip_prefix("[scenarios.")
                .and_then(|l| l.strip_suffix(']'))
                .filter(|n| !n.contains('.'))
        }));
    for name in names {
        assert!(
            help.contains(name),
            "`{name}` missing from lab run --help:\n{help}"
        );
    }
    assert!(help.contains("Examples:"), "{help}");
    // Names that are the start of others (c5 of c5-priority) are each there on their own.
    for name in ["c5-priority,", "c5-priority-strict ", "priority ("] {
        assert!(
            help.contains(name),
            "`{name}` missing from lab run --help:\n{help}"
        );
    }
}

/// `--replicas 3`: three runner processes share the sim. With local budgets of 6 they offer the
/// system of record more than 6 writes at once; with the records budget in Redis (`c4-fleet`, on
/// a redis-server the lab starts itself) never more than 6, and no 503.
#[test]
fn replicas_share_a_fleet_budget_in_redis() {
    if std::process::Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        eprintln!("skipped: redis-server is not installed (scripts/test.sh installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let lab = lab_dir().display().to_string();
    let (doc, stderr) = run_lab_json(
        &[
            "lab",
            "run",
            "--replicas",
            "3",
            "--strategies",
            "c4,c4-fleet",
            "--scenarios",
            "slow-write",
            "--records",
            "90",
            "--repeats",
            "1",
            "--time-scale",
            "0.1",
            "--lab-dir",
            &lab,
        ],
        &out,
    );
    assert!(
        stderr.contains("started redis-server at redis://127.0.0.1:"),
        "{stderr}"
    );
    assert_eq!(doc.meta.replicas, 3);
    let run = |strategy: &str| {
        doc.runs
            .iter()
            .find(|r| r.strategy == strategy)
            .unwrap_or_else(|| panic!("no {strategy} run"))
    };
    for strategy in ["c4", "c4-fleet"] {
        let r = run(strategy);
        assert_eq!(r.replicas, 3, "{strategy}");
        assert_eq!(r.records, 90, "{strategy}: every replica's records counted");
        assert_eq!(r.complete + r.incomplete + r.rejected + r.failed, 90);
    }
    let local = run("c4");
    assert!(
        local.peak_writes_offered > 6,
        "three local budgets of 6 offered only {} writes at once",
        local.peak_writes_offered
    );
    let fleet = run("c4-fleet");
    assert!(
        fleet.peak_writes_offered <= 6,
        "the fleet budget of 6 let {} writes in at once",
        fleet.peak_writes_offered
    );
    assert_eq!(fleet.write_503s, 0);
    assert_eq!(fleet.failed, 0, "{:?}", fleet.failed_by_kind);
    // The replica hypotheses are evaluated; the others say why they are skipped.
    let h = |id: &str| doc.hypotheses.iter().find(|h| h.id == id).unwrap();
    assert_eq!(h("H26").outcome, "pass", "{}", h("H26").observed);
    assert_eq!(h("H27").outcome, "pass", "{}", h("H27").observed);
    assert_eq!(h("H3").outcome, "skipped");
    assert!(h("H3")
        .observed
        .contains("this run had runs split between 3 replicas"));
    // The lab stopped the redis-server it started.
    let url = stderr
        .split("started redis-server at ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "redis-server at {url} still answers after the lab ended"
    );
}

/// A budget given as `{ measure = "capacity" }` is sized by a capacity sweep against the sim
/// before the runs: the system of record in slow-write serves 6 at once.
#[test]
fn a_measured_budget_is_sized_by_a_sweep_before_the_runs() {
    let dir = lab_dir_with_strategies(
        "[measured]\ndescription = \"records budget measured\"\nrecords_in_flight = 16\nrecords = { measure = \"capacity\" }\n",
    );
    let out = dir.path().join("report");
    let lab = dir.path().display().to_string();
    let (doc, stderr) = run_lab_json(
        &[
            "lab",
            "run",
            "--strategies",
            "measured",
            "--scenarios",
            "slow-write",
            "--records",
            "24",
            "--repeats",
            "1",
            "--time-scale",
            "0.05",
            "--lab-dir",
            &lab,
        ],
        &out,
    );
    assert!(
        stderr.contains("measured the records budget in slow-write"),
        "{stderr}"
    );
    assert_eq!(doc.measured.len(), 1, "{:?}", doc.measured);
    let m = &doc.measured[0];
    assert_eq!(
        (m.scenario.as_str(), m.dependency.as_str()),
        ("slow-write", "records")
    );
    // The sweep runs at time scale 0.4 at least, where the knee is clear: 6, give or take the
    // noise of a loaded 2-core machine.
    assert_eq!(m.sweep_time_scale, inflight_lab::run::MIN_SWEEP_TIME_SCALE);
    assert!(
        (5..=7).contains(&m.max_concurrent),
        "measured {} ({})",
        m.max_concurrent,
        m.conclusion
    );
    assert!(m.levels.len() >= 4, "{:?}", m.levels);
    // Each level also read how many writes the sim had in service: never more than its 6, nor
    // than the level sent, and 6 once the sweep passed the capacity.
    let seen: Vec<(u32, f64)> = m
        .levels
        .iter()
        .filter_map(|l| Some((l.concurrency, l.target_in_flight.as_ref()?.max?)))
        .collect();
    assert!(seen.len() >= 4, "{:?}", m.levels);
    assert!(
        seen.iter()
            .all(|(c, max)| *max <= 6.0 && *max <= f64::from(*c)),
        "{seen:?}"
    );
    assert!(seen.iter().any(|(_, max)| *max == 6.0), "{seen:?}");
    // The run used the measured size.
    let run = &doc.runs[0];
    assert!(
        run.peak_writes_offered <= m.max_concurrent as u64,
        "peak {} with a measured budget of {}",
        run.peak_writes_offered,
        m.max_concurrent
    );
}

/// The fixture as JSON, changed by `edit`, written to a file in `dir`; returns its path.
fn edited_fixture(dir: &Path, name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../inflight-lab/tests/fixtures/results-quick.json");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    edit(&mut doc);
    let path = dir.join(name);
    std::fs::write(&path, doc.to_string()).unwrap();
    path.display().to_string()
}

#[test]
fn lab_report_refuses_a_document_whose_runs_do_not_hold_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    type Edit = fn(&mut serde_json::Value);
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            // The summary's tables of 2 repeats, and no runs.
            "stale.json",
            |d| d["runs"] = serde_json::json!([]),
            "c1 healthy at 1 CPU: 2 repeats in the summary, no runs",
        ),
        (
            "outcomes.json",
            |d| d["runs"][3]["failed"] = 5.into(),
            "100 records started but complete",
        ),
        (
            "twice.json",
            |d| {
                let first = d["runs"][0].clone();
                d["runs"].as_array_mut().unwrap().push(first);
            },
            "c1 healthy at 1 CPU repeat 1 appears twice",
        ),
        (
            "repeats.json",
            |d| d["meta"]["repeats"] = 3.into(),
            "c1 healthy at 1 CPU: 2 of the settings' 3 repeats",
        ),
    ];
    for (name, edit, needle) in cases {
        let path = edited_fixture(dir.path(), name, edit);
        let output = inflight()
            .args(["lab", "report", &path, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        let stderr = assert_refused(&output, needle, &format!("{name}: "));
        assert!(
            stderr.contains(&format!("cannot report {path}")),
            "{stderr}"
        );
        assert!(!out.exists(), "{name}: nothing written");
    }
}

#[test]
fn a_run_without_a_cpu_limit_is_labelled_unlimited_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let path = edited_fixture(dir.path(), "results.json", |d| {
        d["meta"]["enforcement"] = "none".into();
    });
    let out = dir.path().join("out");
    let output = inflight()
        .args(["lab", "report", &path, "--out"])
        .arg(&out)
        .assert()
        .success()
        .get_output()
        .clone();
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The terminal: no row says "1" or "2" CPUs, H1 and H2 are skipped with the reason.
    assert!(stdout.contains("unlimited (1 planned)"), "{stdout}");
    assert!(stdout.contains("unlimited (2 planned)"), "{stdout}");
    assert!(stdout.contains("No CPU limit was enforced"), "{stdout}");
    assert!(stdout.contains("SKIPPED  H1:"), "{stdout}");
    assert!(stdout.contains("SKIPPED  H2:"), "{stdout}");
    assert!(!stdout.contains("@1 CPU"), "{stdout}");

    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    for key in ["runs", "summary"] {
        for entry in doc[key].as_array().unwrap() {
            assert_eq!(entry["unlimited"], true, "{key}: {entry}");
        }
    }
    for h in doc["hypotheses"].as_array().unwrap() {
        let skipped = h["id"] == "H1" || h["id"] == "H2";
        assert_eq!(h["outcome"] == "skipped", skipped, "{h}");
        assert_eq!(h["skip_reason"] == "no-cpu-limit", skipped, "{h}");
    }
    let csv = std::fs::read_to_string(out.join("runs.csv")).unwrap();
    assert!(csv.lines().next().unwrap().ends_with(",unlimited"), "{csv}");
    assert!(csv.lines().skip(1).all(|l| l.ends_with(",true")), "{csv}");
    let read = |file: &str| std::fs::read_to_string(out.join(file)).unwrap();
    assert!(read("summary.md").contains("| C1 | unlimited (2 planned) | 2 |"));
    assert!(read("index.html").contains("<td class=\"num\">unlimited (2 planned)</td>"));
    for file in ["summary.md", "index.html"] {
        assert!(read(file).contains("No CPU limit was enforced"), "{file}");
        assert!(!read(file).contains("@1 CPU"), "{file}");
    }
    for file in ["timeline-healthy.svg", "accepted_per_s.svg"] {
        let svg = read(file);
        assert!(
            svg.contains("C1, unlimited (1 planned)")
                || svg.contains("C1 healthy, unlimited (2 planned)"),
            "{file}"
        );
        assert!(!svg.contains("2 CPUs") && !svg.contains("1 CPU"), "{file}");
    }
}

#[test]
fn more_cpus_than_the_host_has_are_refused_before_planning() {
    let host = std::thread::available_parallelism().unwrap().get();
    let lab = lab_dir().display().to_string();
    let over = (host + 1).to_string();
    let output = inflight()
        .args(["lab", "run", "--lab-dir", &lab, "--cpus", &over])
        .output()
        .unwrap();
    let stderr = assert_refused(
        &output,
        &format!("--cpus {over} is more than this host's {host} CPU"),
        "",
    );
    assert!(
        !stderr.contains("lab: "),
        "refused before the plan: {stderr}"
    );
    // The matrix file's CPU counts too.
    let dir = tempfile::tempdir().unwrap();
    for name in ["strategies.toml", "scenarios.toml", "hypotheses.toml"] {
        std::fs::copy(lab_dir().join(name), dir.path().join(name)).unwrap();
    }
    std::fs::write(
        dir.path().join("matrix.toml"),
        format!(
            "[defaults]\nstrategies = [\"c1\"]\nscenarios = [\"healthy\"]\ncpus = [1]\n\n[[cells]]\nstrategies = [\"c1\"]\nscenarios = [\"healthy\"]\ncpus = [{over}]\n"
        ),
    )
    .unwrap();
    let output = inflight()
        .args(["lab", "run", "--lab-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_refused(
        &output,
        &format!("the matrix runs c1 in healthy at {over} CPUs, more than this host's {host} CPU"),
        "",
    );
}

/// A `lab/` folder in a fresh directory, as a checkout has it, and that directory.
fn dir_with_a_lab_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("lab")).unwrap();
    for name in ["strategies.toml", "scenarios.toml", "hypotheses.toml"] {
        std::fs::copy(lab_dir().join(name), dir.path().join("lab").join(name)).unwrap();
    }
    dir
}

/// A run into the default folder (`lab-results/<date>`) that fails before its first run, here
/// for a --sim-url where nothing listens, says so and leaves no `lab-results` behind; it says
/// which lab files it read, a `lab` folder in the current directory.
#[test]
fn a_run_that_fails_at_start_leaves_no_lab_results_folder() {
    let cwd = dir_with_a_lab_folder();
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let output = inflight()
        .current_dir(cwd.path())
        .args(["lab", "run", "--strategies", "c4", "--scenarios", "healthy"])
        .args(["--no-limit", "--sim-url"])
        .arg(format!("http://127.0.0.1:{closed_port}"))
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = assert_refused(&output, "no `inflight sim` answers there", "");
    assert!(
        stderr.contains("lab: lab files from lab/ in the current directory\n"),
        "{stderr}"
    );
    assert!(
        !cwd.path().join("lab-results").exists(),
        "a failed run left lab-results behind: {stderr}"
    );
}

/// The parent and the process group of `pid` (fields 4 and 5 of /proc/PID/stat).
fn parent_and_group(pid: u32) -> Option<(u32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: count from the last `)`.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(1);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

/// The children of `parent`, each with its process group.
fn children_of(parent: u32) -> Vec<(u32, i32)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let (ppid, group) = parent_and_group(pid)?;
            (ppid == parent).then_some((pid, group))
        })
        .collect()
}

/// A Ctrl-C at the terminal sends SIGINT to the lab's whole process group. Wherever it lands (the
/// sim starting, the first run under way) the lab stops everything, exits 130 and says what it
/// kept; nothing it did not keep is left behind. The sim and the runner are in process groups of
/// their own, so only the lab hears the terminal and stops them itself.
#[test]
fn a_ctrl_c_at_the_terminal_always_says_what_was_kept() {
    for moment in ["start-up", "first run"] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("r");
        let mut args = small_run_args(&out);
        for (from, to) in [("0.05", "1.0"), ("24", "200")] {
            let i = args.iter().position(|a| a == from).unwrap();
            args[i] = to.into();
        }
        let mut child = std::process::Command::new(inflight_path())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // As a shell starts a command: a process group of its own, the terminal's.
            .process_group(0)
            .spawn()
            .unwrap();
        let group = child.id() as libc::pid_t;
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let needle = if moment == "start-up" {
            "writing to"
        } else {
            "[1/4]"
        };
        let lines = read_until(&mut stderr, needle, Duration::from_secs(60));
        assert!(
            lines.last().is_some_and(|l| l.contains(needle)),
            "{moment}: {lines:?}"
        );
        if moment == "first run" {
            std::thread::sleep(Duration::from_millis(300));
            // The sim and the runner.
            let children = children_of(child.id());
            assert!(children.len() >= 2, "{children:?}");
            for (pid, pgid) in children {
                assert_ne!(pgid, group, "child {pid} is in the lab's process group");
            }
        }
        // SAFETY: kill with the process group of a child we spawned and a valid signal.
        unsafe { libc::kill(-group, libc::SIGINT) };
        let status = wait_exit(&mut child, Duration::from_secs(30), "lab after Ctrl-C");
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        assert_eq!(status.code(), Some(130), "{moment}: {lines:?} {rest}");
        assert!(
            rest.contains("lab: interrupted by SIGINT"),
            "{moment}: {rest}"
        );
        assert!(rest.contains(", so nothing was kept"), "{moment}: {rest}");
        assert!(
            !out.exists(),
            "{moment}: the folder of a run that kept nothing is left"
        );
    }
}
