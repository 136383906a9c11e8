//! The docs hold what they show: every budgets file in the README, the guide, the lab's results
//! and ARCHITECTURE.md passes `inflight check-config`, and the README's quick starts run as
//! written, with the `inflight` of this build first on `PATH`. (Every Rust snippet of the README
//! and the guide runs as a doctest of `inflight-redis`, the lab chapter's of `inflight-lab`.)

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{inflight, inflight_path, is_root};

/// The workspace root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every Markdown file of the docs: the README, the guide's chapters, the lab's results and
/// ARCHITECTURE.md.
fn docs() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![
        root.join("README.md"),
        root.join("lab/README.md"),
        root.join("ARCHITECTURE.md"),
    ];
    let mut guide: Vec<PathBuf> = std::fs::read_dir(root.join("docs/guide"))
        .expect("the guide is in docs/guide")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guide.sort();
    assert!(guide.len() >= 8, "the guide has its chapters: {guide:?}");
    files.extend(guide);
    files
}

/// The fenced blocks of `text` whose info string is exactly `info`, each with the heading it sits
/// under.
fn blocks(text: &str, info: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut heading = String::new();
    let mut open: Option<(bool, String)> = None;
    for line in text.lines() {
        match &mut open {
            None if line.starts_with("```") => {
                open = Some((line[3..].trim() == info, String::new()));
            }
            None => {
                if line.starts_with('#') {
                    heading = line.trim_start_matches('#').trim().to_string();
                }
            }
            Some((wanted, body)) if line.starts_with("```") => {
                if *wanted {
                    found.push((heading.clone(), std::mem::take(body)));
                }
                open = None;
            }
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    found
}

#[test]
fn every_budgets_file_the_docs_show_passes_check_config() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    let mut failed = Vec::new();
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (i, (heading, toml)) in blocks(&text, "toml").into_iter().enumerate() {
            // A Cargo manifest is TOML too, and no budgets file.
            if toml.lines().any(|l| l.trim() == "[dependencies]") {
                continue;
            }
            // Relative paths in a block (a ca_file) are taken from the doc's own folder.
            let file = doc
                .parent()
                .unwrap()
                .join(format!(".check-config-{}-{i}.toml", std::process::id()));
            std::fs::write(&file, &toml).unwrap();
            let output = inflight()
                .arg("check-config")
                .arg(&file)
                .current_dir(dir.path())
                .output()
                .unwrap();
            std::fs::remove_file(&file).unwrap();
            if !output.status.success() {
                failed.push(format!(
                    "{} (under \"{heading}\"):\n{toml}\n{}",
                    doc.display(),
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            checked += 1;
        }
    }
    assert!(
        failed.is_empty(),
        "{} budgets files of the docs fail `inflight check-config` (mark a part of a file \
         ```toml fragment):\n\n{}",
        failed.len(),
        failed.join("\n")
    );
    // The example files the README and the guide point to.
    for entry in std::fs::read_dir(root().join("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            inflight().arg("check-config").arg(&path).assert().success();
            checked += 1;
        }
    }
    assert!(
        checked >= 10,
        "the docs show budgets files: {checked} checked"
    );
}

/// A quick start of the README: its heading and its shell steps, in order.
fn quick_starts() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut starts: Vec<(String, String)> = Vec::new();
    for (heading, body) in blocks(&readme, "sh") {
        if !heading.starts_with("Quick start") {
            continue;
        }
        match starts.last_mut() {
            Some((h, steps)) if *h == heading => steps.push_str(&body),
            _ => starts.push((heading, body)),
        }
    }
    starts
}

/// Runs `steps` with bash in a copy of `examples/`, this build's `inflight` first on `PATH`, and
/// every process it started stopped after; its stdout and stderr together.
fn run_steps(steps: &str, limit: Duration) -> (bool, String) {
    let work = tempfile::tempdir().unwrap();
    let examples = work.path().join("examples");
    std::fs::create_dir(&examples).unwrap();
    for entry in std::fs::read_dir(root().join("examples")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), examples.join(entry.file_name())).unwrap();
    }
    let bin = inflight_path();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = format!("set -e\n{steps}");
    let log = work.path().join("out.txt");
    let mut child = Command::new("setsid")
        .args(["bash", "-c", &script])
        .current_dir(work.path())
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(work.path().join("err.txt")).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let ok = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.success();
        }
        if started.elapsed() > limit {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The steps' background processes (a proxy, the upstream, the sim) share its process group.
    let group = child.id() as i32;
    // SAFETY: kill has no memory preconditions; a negative pid names the group setsid made.
    unsafe {
        libc::kill(-group, libc::SIGTERM);
    }
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(300));
    unsafe {
        libc::kill(-group, libc::SIGKILL);
    }
    let out = std::fs::read_to_string(&log).unwrap_or_default()
        + &std::fs::read_to_string(work.path().join("err.txt")).unwrap_or_default();
    (ok, out)
}

/// Whether `program` can be run here.
fn found(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The README's quick starts for the proxy, the fleet and the CLI run as written and show what
/// they say to watch. The lab's step runs one small cell (`--strategies c4 --scenarios healthy
/// --repeats 1 --records 40`) instead of the whole quick matrix, which takes minutes; without
/// root it adds `--no-limit`, as the README says.
#[test]
fn the_readmes_quick_starts_run_as_written() {
    let starts = quick_starts();
    let names: Vec<&str> = starts.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(
        names,
        [
            "Quick start: the proxy in front of a Python server",
            "Quick start: two proxies sharing a fleet budget through Redis",
            "Quick start: the CLI",
        ],
        "the README's quick starts with shell steps"
    );
    for tool in ["python3", "curl", "xargs", "setsid"] {
        if !found(tool) {
            eprintln!("skipping: the quick starts need {tool}, not found here");
            return;
        }
    }
    for (heading, steps) in &starts {
        let mut steps = steps.clone();
        if heading.contains("Redis") && !found("redis-server") {
            eprintln!("skipping {heading:?}: redis-server is not installed");
            continue;
        }
        if heading.contains("CLI") {
            let small =
                "inflight lab run --strategies c4 --scenarios healthy --repeats 1 --records 40";
            let small = if is_root() {
                small.to_string()
            } else {
                format!("{small} --no-limit")
            };
            assert!(steps.contains("inflight lab run --quick"), "{steps}");
            steps = steps.replace("inflight lab run --quick", &small);
        }
        let (ok, out) = run_steps(&steps, Duration::from_secs(240));
        assert!(
            ok,
            "{heading}: the steps failed:\n{steps}\n--- output:\n{out}"
        );
        let expect: &[&str] = if heading.contains("Python") {
            &[
                "6 200",
                "6 503",
                "peak 2",
                "inflight_budget_rejections_total{budget=\"slow\",reason=\"queue_full\"} 6",
            ]
        } else if heading.contains("Redis") {
            &["holders", "peak 3"]
        } else {
            &[
                "valid, 2 budgets",
                "CPU budget of this process",
                "capacity",
                "What this run found",
                "report in lab-results",
            ]
        };
        for needle in expect {
            assert!(out.contains(needle), "{heading}: no {needle:?} in:\n{out}");
        }
    }
}

/// The examples the quick starts use are where the README says.
#[test]
fn the_quick_starts_examples_exist() {
    for file in [
        "examples/slow_upstream.py",
        "examples/proxy.toml",
        "examples/fleet-a.toml",
        "examples/fleet-b.toml",
        "examples/budgets.toml",
    ] {
        assert!(Path::new(&root().join(file)).exists(), "{file}");
    }
}
