//! Tests of `inflight check-config`.

use predicates::prelude::*;
use serde_json::Value;

use crate::support::{exits_2, inflight, run_json};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/budgets.toml");

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
