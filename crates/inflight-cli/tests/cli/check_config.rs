//! Tests of `inflight check-config`.

use predicates::prelude::*;
use serde_json::Value;

use crate::support::{exits_2, inflight, run_json};

// A link to `examples/budgets.toml`, inside the crate so that the packaged crate has it.
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/budgets.toml");

fn file(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::fs::write(f.path(), text).unwrap();
    f
}

#[test]
fn the_example_is_valid_and_shows_littles_law() {
    inflight()
        .args(["check-config", EXAMPLE])
        .assert()
        .success()
        .stdout(predicate::str::contains("valid, 2 budgets, 0 warnings"))
        .stdout(predicate::str::contains(
            "at most 40/s through this budget (6 / 150ms)",
        ))
        .stdout(predicate::str::contains("needs 6.0 in flight"));
}

#[test]
fn json_output_has_the_figures() {
    let doc = run_json(["check-config", EXAMPLE, "--json"]);
    assert_eq!(doc["valid"], true);
    let records = doc["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "records")
        .unwrap();
    assert_eq!(records["max_concurrent"], 6);
    assert_eq!(records["max_rate_per_s"], 40.0);
    assert_eq!(records["needed_concurrency"], 6.0);
    assert_eq!(records["target_exceeds_budget"], false);
    assert_eq!(records["permit_timeout_ms"], 500.0);
}

#[test]
fn a_target_above_the_budget_is_flagged_but_valid() {
    let f = file(
        "[budgets.records]\nmax_concurrent = 6\nservice_time = \"150ms\"\ntarget_rate = \"100/s\"\n",
    );
    inflight()
        .args(["check-config"])
        .arg(f.path())
        .assert()
        .success()
        .stdout(predicate::str::contains("needs 15.0 in flight"))
        .stdout(predicate::str::contains("EXCEEDS max_concurrent 6"))
        .stdout(predicate::str::contains("warning: target_rate 100/s"));
    let out = inflight()
        .args(["check-config", "--json"])
        .arg(f.path())
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["budgets"][0]["target_exceeds_budget"], true);
    assert_eq!(doc["warnings"], 1);
}

#[test]
fn contradictions_are_warned_about() {
    let f = file(
        "[budgets.records]\nmax_concurrent = 2\nmax_queued = 10\npermit_timeout = \"100ms\"\n\
         call_timeout = \"50ms\"\nservice_time = \"150ms\"\n",
    );
    inflight()
        .args(["check-config"])
        .arg(f.path())
        .assert()
        .success()
        .stdout(predicate::str::contains("2 warnings"))
        .stdout(predicate::str::contains(
            "a full queue of 10 takes about 750ms to drain, longer than permit_timeout 100ms",
        ))
        .stdout(predicate::str::contains(
            "call_timeout 50ms is shorter than service_time 150ms",
        ));
}

#[test]
fn an_invalid_file_exits_2_naming_the_field() {
    let f = file("[budgets.records]\nmax_concurrent = 0\n");
    exits_2(
        ["check-config", f.path().to_str().unwrap()],
        "budgets.records.max_concurrent: must be at least 1, got 0",
    )
    .stdout("");
    let out = inflight()
        .args(["check-config", "--json"])
        .arg(f.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["valid"], false);
    assert_eq!(doc["field"], "budgets.records.max_concurrent");
}

#[test]
fn bad_files_never_panic() {
    for (text, needle) in [
        ("[budgets.records\n", "invalid TOML"),
        (
            "[budgets.records]\nmax_concurrent = 2\ncall_timeout = \"soon\"\n",
            "budgets.records.call_timeout",
        ),
        (
            "[budgets.records]\nmax_concurrent = 2\nbogus = 1\n",
            "budgets.records.bogus: unknown key",
        ),
        (
            "[budgets.records]\nmax_concurrent = -1\n",
            "must be at least 1, got -1",
        ),
        ("\u{0}\u{1}binary", "invalid TOML"),
    ] {
        let f = file(text);
        exits_2(["check-config", f.path().to_str().unwrap()], needle)
            .stderr(predicate::str::contains("panicked").not());
    }
}

#[test]
fn a_missing_file_and_missing_argument_exit_2() {
    exits_2(
        ["check-config", "/nonexistent/budgets.toml"],
        "cannot read /nonexistent/budgets.toml",
    );
    exits_2(["check-config"], "FILE");
}

#[test]
fn extreme_but_valid_files_are_reported_not_panicked_on() {
    // max_queued x service_time overflows a Duration: still a valid file, with a warning.
    let f = file(
        "[budgets.r]\nmax_concurrent = 1\nmax_queued = 9223372036854775807\n\
         service_time = \"10s\"\npermit_timeout = \"1s\"\n",
    );
    inflight()
        .args(["check-config"])
        .arg(f.path())
        .assert()
        .success()
        .stdout(predicate::str::contains("1 warning"))
        .stdout(predicate::str::contains(
            "the last waiters would always time out",
        ))
        .stderr(predicate::str::contains("panicked").not());
    let out = inflight()
        .args(["check-config", "--json"])
        .arg(f.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["warnings"], 1);
}

#[test]
fn a_slow_budget_shows_its_rate_not_zero() {
    // One call at a time, five minutes each: 1/300 calls per second.
    let f = file(
        "[budgets.batch]\nmax_concurrent = 1\nservice_time = \"5m\"\ncall_timeout = \"1ns\"\n",
    );
    inflight()
        .args(["check-config"])
        .arg(f.path())
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "at most 0.0033/s through this budget (1 / 5m)",
        ));
    let doc = run_json(["check-config", f.path().to_str().unwrap(), "--json"]);
    assert_eq!(doc["budgets"][0]["call_timeout_ms"], 1e-6);
    assert_eq!(doc["budgets"][0]["service_time_ms"], 300_000.0);
}

#[test]
fn every_mistake_in_a_file_is_reported_at_once() {
    let f = file(
        "[budgets.a]\nmax_concurrent = 0\n[budgets.b]\nmax_concurrent = 2\ncall_timeout = \"soon\"\nbogus = 1\n",
    );
    let out = inflight()
        .args(["check-config", f.path().to_str().unwrap()])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let stderr = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "3 errors",
        "budgets.a.max_concurrent: must be at least 1",
        "budgets.b.call_timeout: cannot parse \"soon\"",
        "budgets.b.bogus: unknown key",
    ] {
        assert!(stderr.contains(needle), "{needle} in {stderr}");
    }
    let out = inflight()
        .args(["check-config", f.path().to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["valid"], false);
    assert_eq!(doc["errors"].as_array().unwrap().len(), 3);
}

#[test]
fn stdin_and_deny_warnings() {
    let warned = "[budgets.r]\nmax_concurrent = 2\nmax_queued = 0\npermit_timeout = \"1s\"\n";
    inflight()
        .args(["check-config", "-"])
        .write_stdin(warned)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "<stdin>: valid, 1 budget, 1 warning",
        ));
    inflight()
        .args(["check-config", "-", "--deny-warnings"])
        .write_stdin(warned)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("--deny-warnings"));
    inflight()
        .args(["check-config", "-", "--deny-warnings"])
        .write_stdin("[budgets.r]\nmax_concurrent = 2\n")
        .assert()
        .success();
}

#[test]
fn what_is_echoed_back_is_bounded_and_escaped() {
    let long = format!("[budgets.r]\nmax_concurrent = 2 {}\n", "x".repeat(200_000));
    let f = file(&long);
    let out = inflight()
        .args(["check-config", f.path().to_str().unwrap()])
        .assert()
        .code(2)
        .get_output()
        .clone();
    assert!(
        out.stderr.len() < 4_000,
        "{} bytes on stderr",
        out.stderr.len()
    );
    let f = file("[budgets.\"a\\nb\\u001b[31m\"]\nmax_concurrent = 2\n");
    let out = inflight()
        .args(["check-config", f.path().to_str().unwrap()])
        .assert()
        .success()
        .get_output()
        .clone();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains('\u{1b}'), "{stdout}");
    assert!(stdout.contains("[\"a\\nb\\u{1b}[31m\"]"), "{stdout}");
    exits_2(["check-config", "-"], "");
}

#[test]
fn absurd_values_are_refused_with_the_bound() {
    for (text, needle) in [
        (
            "target_rate = \"1e300/s\"",
            "target_rate: must be at most 1000000/s",
        ),
        ("call_timeout = \"18446744073709551615s\"", "call_timeout"),
        (
            "call_timeout = \"30days\"",
            "call_timeout: must be at most 7 days",
        ),
        ("call_timeout = \"1e400s\"", "without an exponent"),
        ("permit_timeout = \"0.0000001ms\"", "must be at least 1ns"),
    ] {
        let f = file(&format!("[budgets.r]\nmax_concurrent = 2\n{text}\n"));
        let out = inflight()
            .args(["check-config", f.path().to_str().unwrap()])
            .assert()
            .code(2)
            .get_output()
            .clone();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{text}: {stderr}");
    }
    let f = file("[budgets.\"  \"]\nmax_concurrent = 2\n");
    inflight()
        .args(["check-config", f.path().to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("must not be empty or blank"));
}

#[test]
fn a_missing_file_says_why() {
    inflight()
        .args(["check-config", "/nonexistent/budgets.toml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "cannot read /nonexistent/budgets.toml: No such file or directory",
        ));
}
