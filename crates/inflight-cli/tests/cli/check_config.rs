//! Tests of `inflight check-config`.

use predicates::prelude::*;
use serde_json::Value;

use crate::support::{assert_refused, exits_2, inflight, run_json, success_json};

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
            .output()
            .unwrap();
        assert_refused(&out, needle, &format!("{text}: "));
    }
    let f = file("[budgets.\"  \"]\nmax_concurrent = 2\n");
    inflight()
        .args(["check-config", f.path().to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("must not be empty or blank"));
}

/// A `[fleet]` that `inflight proxy` and `inflight fleet status` would refuse is refused here
/// too (its URL parsed as they parse it, without connecting), with its password hidden; its
/// lease has bounds.
#[test]
fn a_fleet_the_proxy_would_refuse_is_refused() {
    for (url, lease, needle) in [
        ("http://127.0.0.1:6379", "5s", "unknown scheme \"http\""),
        ("redis://127.0.0.1:99999", "5s", "invalid redis url"),
        (
            "redis://app:pw@127.0.0.1:0/0",
            "5s",
            "invalid redis url \"redis://app:***@127.0.0.1:0/0\": 127.0.0.1:0: the port \"0\" \
             is not a number from 1 to 65535",
        ),
        (
            "redis+sentinel://127.0.0.1:26379",
            "5s",
            "names the primary after the sentinels",
        ),
        (
            "redis://app:Top#Secret1@127.0.0.1:6401",
            "5s",
            "redis://***@127.0.0.1:6401",
        ),
        (
            "redis://SEK#RIT@127.0.0.1:6401",
            "5s",
            "redis://***@127.0.0.1:6401",
        ),
        (
            "redis://127.0.0.1:6379",
            "100000d",
            "fleet.lease: must be at least 3ms and at most 7 days",
        ),
        (
            "redis://127.0.0.1:6379",
            "1ms",
            "fleet.lease: must be at least 3ms",
        ),
    ] {
        let f = file(&format!(
            "[fleet]\nurl = \"{url}\"\nlease = \"{lease}\"\n\n[budgets.r]\nmax_concurrent = 2\nscope = \"fleet\"\n"
        ));
        let out = inflight()
            .args(["check-config", f.path().to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = assert_refused(&out, needle, &format!("{url}: "));
        assert!(
            !stderr.contains("Secret1"),
            "the password was shown: {stderr}"
        );
    }
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

/// The workspace root, where `examples/` lives: the example is checked by its relative path, as
/// the README shows, so that the output names the file the same way on every machine.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// `inflight check-config ARGS` in the workspace root, with `stdin`; its exit code and stdout.
fn check_config_output(args: &[&str], stdin: &str) -> (Option<i32>, String) {
    let out = inflight()
        .current_dir(ROOT)
        .arg("check-config")
        .args(args)
        .write_stdin(stdin)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

const EXAMPLE_TEXT: &str = r#"examples/budgets.toml: valid, 2 budgets, 0 warnings

[enrichment]
  max_concurrent  24
  max_queued      unbounded
  permit_timeout  1s
  call_timeout    2s
  service_time    120ms  -> at most 200/s through this budget (24 / 120ms)
  target_rate     120/s  -> needs 14.4 in flight (120/s x 120ms): fits within 24

[records]
  max_concurrent  6
  max_queued      6
  permit_timeout  500ms
  call_timeout    2s
  service_time    150ms  -> at most 40/s through this budget (6 / 150ms)
  target_rate     40/s  -> needs 6.0 in flight (40/s x 150ms): fits within 6
"#;

const EXAMPLE_JSON: &str = r#"{
  "file": "examples/budgets.toml",
  "valid": true,
  "warnings": 0,
  "budgets": [
    {
      "name": "enrichment",
      "max_concurrent": 24,
      "max_queued": null,
      "permit_timeout_ms": 1000.0,
      "call_timeout_ms": 2000.0,
      "service_time_ms": 120.0,
      "target_rate_per_s": 120.0,
      "max_rate_per_s": 200.0,
      "needed_concurrency": 14.399999999999999,
      "target_exceeds_budget": false,
      "limit": "fixed",
      "adaptive": null,
      "rate_per_s": null,
      "burst": null,
      "rate_scope": null,
      "rate_needs_in_flight": null,
      "scope": "local",
      "fail": null,
      "local_limit": null,
      "lease_mode": null,
      "on_lost": "keep",
      "warnings": []
    },
    {
      "name": "records",
      "max_concurrent": 6,
      "max_queued": 6,
      "permit_timeout_ms": 500.0,
      "call_timeout_ms": 2000.0,
      "service_time_ms": 150.0,
      "target_rate_per_s": 40.0,
      "max_rate_per_s": 40.0,
      "needed_concurrency": 6.0,
      "target_exceeds_budget": false,
      "limit": "fixed",
      "adaptive": null,
      "rate_per_s": null,
      "burst": null,
      "rate_scope": null,
      "rate_needs_in_flight": null,
      "scope": "local",
      "fail": null,
      "local_limit": null,
      "lease_mode": null,
      "on_lost": "keep",
      "warnings": []
    }
  ]
}
"#;

#[test]
fn the_example_prints_exactly_this() {
    let (code, text) = check_config_output(&["examples/budgets.toml"], "");
    assert_eq!((code, text.as_str()), (Some(0), EXAMPLE_TEXT));
    let (code, json) = check_config_output(&["examples/budgets.toml", "--json"], "");
    assert_eq!((code, json.as_str()), (Some(0), EXAMPLE_JSON));
}

/// Every verdict and warning: a target and a rate limit that fit exactly (100/s x 70 ms is
/// 7.000000000000001 in floating point, within 7), a budget they both exceed with every
/// contradiction, an adaptive limit, and a budget without a service time.
const VERDICTS: &str = r#"[budgets.at_the_limit]
max_concurrent = 7
service_time = "70ms"
target_rate = "100/s"
rate = "100/s"

[budgets.over]
max_concurrent = 6
max_queued = 10
permit_timeout = "100ms"
call_timeout = "50ms"
service_time = "150ms"
target_rate = "120/s"
rate = "100/s"
burst = 5

[budgets.learning]
max_concurrent = 32
limit = "adaptive"
service_time = "150ms"
rate = "100/s"

[budgets.unsized]
max_concurrent = 3
max_queued = 0
permit_timeout = "1s"
target_rate = "10/s"
rate = "5/s"
"#;

const VERDICTS_TEXT: &str = r#"<stdin>: valid, 4 budgets, 7 warnings

[at_the_limit]
  max_concurrent  7
  max_queued      unbounded
  permit_timeout  none (wait as long as it takes)
  call_timeout    none (set one: calls that hang hold their permit forever)
  service_time    70ms  -> at most 100/s through this budget (7 / 70ms)
  target_rate     100/s  -> needs 7.0 in flight (100/s x 70ms): fits within 7
  rate            100/s, burst 1  -> needs 7.0 in flight (100/s x 70ms): fits within 7

[over]
  max_concurrent  6
  max_queued      10
  permit_timeout  100ms
  call_timeout    50ms
  service_time    150ms  -> at most 40/s through this budget (6 / 150ms)
  target_rate     120/s  -> needs 18.0 in flight (120/s x 150ms): EXCEEDS max_concurrent 6
  rate            100/s, burst 5  -> needs 15.0 in flight (100/s x 150ms): EXCEEDS max_concurrent 6
  warning: target_rate 120/s needs 18.0 calls in flight but max_concurrent is 6 (at most 40/s): lower the target, or raise the budget after measuring that the service can take it
  warning: a full queue of 10 takes about 250ms to drain, longer than permit_timeout 100ms: the last waiters would always time out (lower max_queued or raise permit_timeout)
  warning: call_timeout 50ms is shorter than service_time 150ms: a typical call would time out
  warning: rate 100/s needs 15.0 calls in flight but max_concurrent is 6: the budget passes at most 40/s, so the rate limit never binds (lower the rate, or raise max_concurrent after measuring)
  warning: target_rate 120/s is above the rate limit 100/s: the target cannot be met

[learning]
  max_concurrent  32
  limit           adaptive (vegas), from 4 within 1..=32 (cold start spread over 8ms): learnt from how calls end
  max_queued      unbounded
  permit_timeout  none (wait as long as it takes)
  call_timeout    none (set one: calls that hang hold their permit forever)
  service_time    150ms  -> at most 213.33/s through this budget (32 / 150ms)
  rate            100/s, burst 1  -> needs 15.0 in flight (100/s x 150ms): fits within 32

[unsized]
  max_concurrent  3
  max_queued      0 (fail fast when all permits are held)
  permit_timeout  1s
  call_timeout    none (set one: calls that hang hold their permit forever)
  service_time    not given (add it to see the most this budget lets through)
  target_rate     10/s  (add service_time to size it)
  rate            5/s, burst 1  (add service_time to see the calls in flight it needs)
  warning: permit_timeout 1s never applies with max_queued = 0 (callers are turned away instead of waiting)
  warning: target_rate 10/s is above the rate limit 5/s: the target cannot be met
"#;

const VERDICTS_JSON: &str = r#"{
  "file": "<stdin>",
  "valid": true,
  "warnings": 7,
  "budgets": [
    {
      "name": "at_the_limit",
      "max_concurrent": 7,
      "max_queued": null,
      "permit_timeout_ms": null,
      "call_timeout_ms": null,
      "service_time_ms": 70.0,
      "target_rate_per_s": 100.0,
      "max_rate_per_s": 99.99999999999999,
      "needed_concurrency": 7.000000000000001,
      "target_exceeds_budget": false,
      "limit": "fixed",
      "adaptive": null,
      "rate_per_s": 100.0,
      "burst": 1,
      "rate_scope": "local",
      "rate_needs_in_flight": 7.000000000000001,
      "scope": "local",
      "fail": null,
      "local_limit": null,
      "lease_mode": null,
      "on_lost": "keep",
      "warnings": []
    },
    {
      "name": "over",
      "max_concurrent": 6,
      "max_queued": 10,
      "permit_timeout_ms": 100.0,
      "call_timeout_ms": 50.0,
      "service_time_ms": 150.0,
      "target_rate_per_s": 120.0,
      "max_rate_per_s": 40.0,
      "needed_concurrency": 18.0,
      "target_exceeds_budget": true,
      "limit": "fixed",
      "adaptive": null,
      "rate_per_s": 100.0,
      "burst": 5,
      "rate_scope": "local",
      "rate_needs_in_flight": 15.0,
      "scope": "local",
      "fail": null,
      "local_limit": null,
      "lease_mode": null,
      "on_lost": "keep",
      "warnings": [
        "target_rate 120/s needs 18.0 calls in flight but max_concurrent is 6 (at most 40/s): lower the target, or raise the budget after measuring that the service can take it",
        "a full queue of 10 takes about 250ms to drain, longer than permit_timeout 100ms: the last waiters would always time out (lower max_queued or raise permit_timeout)",
        "call_timeout 50ms is shorter than service_time 150ms: a typical call would time out",
        "rate 100/s needs 15.0 calls in flight but max_concurrent is 6: the budget passes at most 40/s, so the rate limit never binds (lower the rate, or raise max_concurrent after measuring)",
        "target_rate 120/s is above the rate limit 100/s: the target cannot be met"
      ]
    },
    {
      "name": "learning",
      "max_concurrent": 32,
      "max_queued": null,
      "permit_timeout_ms": null,
      "call_timeout_ms": null,
      "service_time_ms": 150.0,
      "target_rate_per_s": null,
      "max_rate_per_s": 213.33333333333334,
      "needed_concurrency": null,
      "target_exceeds_budget": null,
      "limit": "adaptive",
      "adaptive": {
        "algorithm": "vegas",
        "min": 1,
        "initial": 4,
        "max": 32,
        "backoff": null,
        "cold_start_ms": 8.0,
        "probe_hold": 0
      },
      "rate_per_s": 100.0,
      "burst": 1,
      "rate_scope": "local",
      "rate_needs_in_flight": 15.0,
      "scope": "local",
      "fail": null,
      "local_limit": null,
      "lease_mode": null,
      "on_lost": "keep",
      "warnings": []
    },
    {
      "name": "unsized",
      "max_concurrent": 3,
      "max_queued": 0,
      "permit_timeout_ms": 1000.0,
      "call_timeout_ms": null,
      "service_time_ms": null,
      "target_rate_per_s": 10.0,
      "max_rate_per_s": null,
      "needed_concurrency": null,
      "target_exceeds_budget": null,
      "limit": "fixed",
      "adaptive": null,
      "rate_per_s": 5.0,
      "burst": 1,
      "rate_scope": "local",
      "rate_needs_in_flight": null,
      "scope": "local",
      "fail": null,
      "local_limit": null,
      "lease_mode": null,
      "on_lost": "keep",
      "warnings": [
        "permit_timeout 1s never applies with max_queued = 0 (callers are turned away instead of waiting)",
        "target_rate 10/s is above the rate limit 5/s: the target cannot be met"
      ]
    }
  ]
}
"#;

#[test]
fn every_verdict_prints_exactly_this() {
    let (code, text) = check_config_output(&["-"], VERDICTS);
    assert_eq!((code, text.as_str()), (Some(0), VERDICTS_TEXT));
    let (code, json) = check_config_output(&["-", "--json"], VERDICTS);
    assert_eq!((code, json.as_str()), (Some(0), VERDICTS_JSON));
}

/// A self-signed CA certificate (P-256), for a `ca_file`.
const CA_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBmjCCAUGgAwIBAgIUaemB69Nt5NYt9kRNuicmGTpZqDEwCgYIKoZIzj0EAwIw
IjEgMB4GA1UEAwwXaW5mbGlnaHQgY29uZmlnIHRlc3QgQ0EwIBcNMjYxMjAxMTEz
NjA2WhgPMjEyNjExMDcxMTM2MDZaMCIxIDAeBgNVBAMMF2luZmxpZ2h0IGNvbmZp
ZyB0ZXN0IENBMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEPSsgSyxPwes68sDA
TlA8sVuI+QaTSo3XJLNS8psIOPJNLZ/9xEBJh/D3nE+bKces8TZs2BCFTPUx/XIp
VbmDd6NTMFEwHQYDVR0OBBYEFBu6jNvE9HFisi6B/r/ml5NuzA4eMB8GA1UdIwQY
MBaAFBu6jNvE9HFisi6B/r/ml5NuzA4eMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZI
zj0EAwIDRwAwRAIgKhV0fBURQaa3jleXXYvqt4sR1b8J657nAYMAcZtUwTkCIG2Z
1UoGFamLwUG3enYY8F2yIoMkXlRkK0vRVk6rfWJv
-----END CERTIFICATE-----
";

/// Two proxied budgets, one with every proxy setting changed from its default, beside one that
/// is not proxied.
const PROXIED: &str = r#"[proxy]
admin = "127.0.0.1:9901"
drain = "3s"

[budgets.records]
max_concurrent = 6
upstream = "http://127.0.0.1:7070"
listen = "127.0.0.1:7002"

[budgets.billing]
max_concurrent = 4
upstream = "https://billing.internal:8443"
listen = "127.0.0.1:7003"
release = "headers"
overload_status = [503]
preserve_host = true
upstream_http2 = true
overload_on_timeout = false
call_timeout = "5s"
on_client_gone = "finish"
ca_file = "certs/ca.pem"

[budgets.local]
max_concurrent = 2
"#;

const PROXIED_TEXT: &str = r#"budgets.toml: valid, 3 budgets, 0 warnings

[records]
  max_concurrent  6
  max_queued      unbounded
  permit_timeout  none (wait as long as it takes)
  call_timeout    none (set one: calls that hang hold their permit forever)
  service_time    not given (add it to see the most this budget lets through)
  upstream        http://127.0.0.1:7070
  listen          127.0.0.1:7002
  release         body (the permit goes back once the response body is sent)

[billing]
  max_concurrent  4
  max_queued      unbounded
  permit_timeout  none (wait as long as it takes)
  call_timeout    5s
  service_time    not given (add it to see the most this budget lets through)
  upstream        https://billing.internal:8443
  listen          127.0.0.1:7003
  release         headers (the permit goes back once the response headers arrive)
  overload_status 503
  preserve_host   true (the client's Host header is forwarded unchanged)
  upstream_http2  true (HTTP/2 agreed by ALPN)
  overload_on_timeout false (a call past call_timeout tells the limit nothing)
  on_client_gone  finish (a call whose client left goes on, holding its permit, until its answer ends or call_timeout)
  ca_file         certs/ca.pem (1 certificate)

[local]
  max_concurrent  2
  max_queued      unbounded
  permit_timeout  none (wait as long as it takes)
  call_timeout    none (set one: calls that hang hold their permit forever)
  service_time    not given (add it to see the most this budget lets through)

[proxy]
  admin           127.0.0.1:9901
  drain           3s
  clients         first bytes within 10s, idle at most 30s, HTTP/2 pinged every 30s (answer within 20s), at most 10000 connections per listener
"#;

/// A folder with `budgets.toml` (`text`) and `certs/ca.pem`.
fn proxied_folder(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("certs")).unwrap();
    std::fs::write(dir.path().join("certs/ca.pem"), CA_PEM).unwrap();
    std::fs::write(dir.path().join("budgets.toml"), text).unwrap();
    dir
}

#[test]
fn a_proxied_budget_shows_its_route_and_the_proxy_table_follows() {
    let dir = proxied_folder(PROXIED);
    let out = inflight()
        .current_dir(dir.path())
        .args(["check-config", "budgets.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), PROXIED_TEXT);

    let out = inflight()
        .current_dir(dir.path())
        .args(["check-config", "budgets.toml", "--json"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["proxy"],
        serde_json::json!({ "admin": "127.0.0.1:9901", "drain_ms": 3000.0, "first_byte_timeout_ms": 10000.0, "idle_timeout_ms": 30000.0, "http2_keepalive_interval_ms": 30000.0, "http2_keepalive_timeout_ms": 20000.0, "max_connections": 10000 })
    );
    let budgets = doc["budgets"].as_array().unwrap();
    assert_eq!(
        budgets[0]["proxy"],
        serde_json::json!({
            "upstream": "http://127.0.0.1:7070",
            "listen": "127.0.0.1:7002",
            "release": "body",
            "overload_status": [429, 503],
            "preserve_host": false,
            "upstream_http2": false,
            "overload_on_timeout": true,
            "on_client_gone": "cancel",
            "ca_file": null,
            "ca_certificates": null,
            "class_header": null,
            "protocol": "http",
            "overload_grpc_status": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"],
        })
    );
    assert_eq!(
        budgets[1]["proxy"],
        serde_json::json!({
            "upstream": "https://billing.internal:8443",
            "listen": "127.0.0.1:7003",
            "release": "headers",
            "overload_status": [503],
            "preserve_host": true,
            "upstream_http2": true,
            "overload_on_timeout": false,
            "on_client_gone": "finish",
            "ca_file": "certs/ca.pem",
            "ca_certificates": 1,
            "class_header": null,
            "protocol": "http",
            "overload_grpc_status": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"],
        })
    );
    // A budget that is not proxied has no proxy field; its other fields are as they were.
    assert!(budgets[2].get("proxy").is_none(), "{}", budgets[2]);
    assert_eq!(budgets[2]["max_concurrent"], 2);
}

#[test]
fn a_proxied_file_without_a_proxy_table_shows_its_defaults() {
    let f = file(
        "[budgets.records]\nmax_concurrent = 1\nupstream = \"https://127.0.0.1\"\nlisten = \"127.0.0.1:0\"\n",
    );
    let out = inflight()
        .args(["check-config"])
        .arg(f.path())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.ends_with(
            "  upstream        https://127.0.0.1\n  listen          127.0.0.1:0\n  release         body (the permit goes back once the response body is sent)\n\n[proxy]\n  admin           none (no /metrics, /healthz, /readyz)\n  drain           10s\n  clients         first bytes within 10s, idle at most 30s, HTTP/2 pinged every 30s (answer within 20s), at most 10000 connections per listener\n"
        ),
        "{text}"
    );
    let doc = run_json([
        "check-config".as_ref(),
        f.path().as_os_str(),
        "--json".as_ref(),
    ]);
    assert_eq!(
        doc["proxy"],
        serde_json::json!({ "admin": null, "drain_ms": 10000.0, "first_byte_timeout_ms": 10000.0, "idle_timeout_ms": 30000.0, "http2_keepalive_interval_ms": 30000.0, "http2_keepalive_timeout_ms": 20000.0, "max_connections": 10000 })
    );
    // Without any proxied budget there is no [proxy] section at all.
    let (_, text) = check_config_output(&["examples/budgets.toml"], "");
    assert!(!text.contains("[proxy]"), "{text}");
}

#[test]
fn a_ca_file_is_found_beside_the_budgets_file_and_a_bad_one_exits_2_naming_it() {
    let dir = proxied_folder(PROXIED);
    // From another directory, the relative ca_file is still the one beside the file.
    let out = inflight()
        .arg("check-config")
        .arg(dir.path().join("budgets.toml"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = dir.path().join("certs/ca.pem").display().to_string();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains(&format!("  ca_file         {shown} (1 certificate)\n")),
        "{stdout}"
    );

    std::fs::write(dir.path().join("certs/empty.pem"), "no certificate\n").unwrap();
    let cases = [
        ("certs/missing.pem", "cannot read it: No such file"),
        ("certs/empty.pem", "holds no PEM certificate"),
    ];
    for (name, why) in cases {
        let text = PROXIED.replace("certs/ca.pem", name);
        std::fs::write(dir.path().join("budgets.toml"), text).unwrap();
        let path = dir.path().join(name).display().to_string();
        let out = inflight()
            .current_dir("/")
            .arg("check-config")
            .arg(dir.path().join("budgets.toml"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("budgets.billing.ca_file: {path:?}: {why}")),
            "{stderr}"
        );
    }
    // A CA file for an upstream that is not https://.
    let text = PROXIED.replace(
        "https://billing.internal:8443",
        "http://billing.internal:8443",
    );
    std::fs::write(dir.path().join("budgets.toml"), text).unwrap();
    let out = inflight()
        .arg("check-config")
        .arg(dir.path().join("budgets.toml"))
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["field"], "budgets.billing.ca_file");
    assert!(
        doc["error"]
            .as_str()
            .unwrap()
            .contains("\"certs/ca.pem\" is a CA file, and only an https:// upstream takes one"),
        "{doc}"
    );
}

#[test]
fn a_fleet_budgets_rate_is_shown_as_fleet_wide() {
    let f = file(
        r#"[fleet]
url = "redis://127.0.0.1:6379"

[budgets.llm]
max_concurrent = 16
rate = "600/min"
burst = 5
scope = "fleet"

[budgets.local_llm]
max_concurrent = 16
rate = "10/s"

[budgets.records]
max_concurrent = 6
scope = "fleet"
"#,
    );
    let path = f.path().to_str().unwrap();
    let (code, text) = check_config_output(&[path], "");
    assert_eq!(code, Some(0), "{text}");
    let fleet_line = "  rate_scope      fleet (one rate for every replica together, kept in the fleet's store; no rate per process)\n";
    let llm = text.split("[local_llm]").next().unwrap();
    assert!(
        llm.contains(&format!("  rate            10/s, burst 5  (add service_time to see the calls in flight it needs)\n{fleet_line}")),
        "{text}"
    );
    assert_eq!(
        text.matches("rate_scope").count(),
        1,
        "only the fleet budget with a rate: {text}"
    );
    let (code, json) = check_config_output(&[path, "--json"], "");
    assert_eq!(code, Some(0));
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let scopes: Vec<_> = doc["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["name"].as_str().unwrap(), b["rate_scope"].clone()))
        .collect();
    assert_eq!(
        scopes,
        [
            ("llm", serde_json::json!("fleet")),
            ("local_llm", serde_json::json!("local")),
            ("records", serde_json::Value::Null),
        ]
    );
    assert_eq!(doc["budgets"][0]["rate_per_s"], 10.0);
}

const CLASSES: &str = r#"
[budgets.records]
max_concurrent = 6
permit_timeout = "500ms"
classes = { interactive = { weight = 4, permit_timeout = "50ms" }, batch = 1 }
default_class = "batch"

[budgets.search]
max_concurrent = 2
classes = { high = 8, low = 1 }
strict = true

[budgets.plain]
max_concurrent = 1

[budgets.proxied]
max_concurrent = 1
classes = { interactive = 4, batch = 1 }
upstream = "http://127.0.0.1:7070"
listen = "127.0.0.1:7002"
class_header = "X-Priority"
"#;

#[test]
fn classes_are_shown_with_their_weights_deadlines_and_default() {
    let f = file(CLASSES);
    let out = inflight()
        .args(["check-config"])
        .arg(f.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let records = text
        .split("\n[")
        .find(|s| s.starts_with("records]"))
        .unwrap();
    assert!(
        records.contains(
            "  classes         weighted fair queuing (grants by weight among the classes with waiters), default batch\n    interactive   weight 4, permit_timeout 50ms\n    batch         weight 1, permit_timeout 500ms (the budget's)\n"
        ),
        "{records}"
    );
    let search = text
        .split("\n[")
        .find(|s| s.starts_with("search]"))
        .unwrap();
    assert!(
        search.contains(
            "  classes         strict priority (the heaviest class with waiters first), default low\n    high          weight 8, permit_timeout none (the budget's: wait as long as it takes)\n"
        ),
        "{search}"
    );
    let plain = text.split("\n[").find(|s| s.starts_with("plain]")).unwrap();
    assert!(!plain.contains("classes"), "{plain}");

    let doc = run_json(["check-config", &f.path().display().to_string(), "--json"]);
    let budgets = doc["budgets"].as_array().unwrap();
    assert_eq!(
        budgets[0]["classes"],
        serde_json::json!([
            { "name": "interactive", "weight": 4, "permit_timeout_ms": 50.0, "own_permit_timeout": true },
            { "name": "batch", "weight": 1, "permit_timeout_ms": 500.0, "own_permit_timeout": false },
        ])
    );
    assert_eq!(budgets[0]["default_class"], "batch");
    assert_eq!(budgets[0]["strict"], false);
    assert_eq!(budgets[1]["classes"][1]["permit_timeout_ms"], Value::Null);
    assert_eq!(budgets[1]["default_class"], "low");
    assert_eq!(budgets[1]["strict"], true);
    for key in ["classes", "default_class", "strict"] {
        assert!(
            budgets[2].get(key).is_none(),
            "{key} only for a budget with classes"
        );
    }
    assert_eq!(budgets[0]["max_concurrent"], 6, "the other fields stay");
    assert_eq!(budgets[3]["proxy"]["class_header"], "x-priority");
    let proxied = text
        .split("\n[")
        .find(|s| s.starts_with("proxied]"))
        .unwrap();
    assert!(
        proxied.contains(
            "\n  class_header    x-priority (its value names the class; missing or unknown: the default)\n"
        ),
        "{proxied}"
    );
}

#[test]
fn bad_classes_exit_2_naming_the_path() {
    for (text, says) in [
        (
            "[budgets.records]\nmax_concurrent = 2\nclasses = { interactive = 4, batch = 0 }\n",
            "budgets.records.classes.batch: weight must be at least 1, got 0",
        ),
        (
            "[budgets.records]\nmax_concurrent = 2\nclasses = { batch = 1 }\ndefault_class = \"bulk\"\n",
            "budgets.records.default_class: \"bulk\" is not one of the classes (batch)",
        ),
        (
            "[budgets.records]\nmax_concurrent = 2\nstrict = true\n",
            "budgets.records.strict: only a budget with classes takes this",
        ),
    ] {
        let f = file(text);
        let out = inflight()
            .args(["check-config"])
            .arg(f.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains(says), "{text}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        let doc = inflight()
            .args(["check-config", "--json"])
            .arg(f.path())
            .output()
            .unwrap();
        assert_eq!(doc.status.code(), Some(2));
        let doc: Value = serde_json::from_slice(&doc.stdout).unwrap();
        assert_eq!(doc["valid"], false);
        assert!(doc["error"].as_str().unwrap().contains(says), "{doc}");
    }
}

/// `[[proxy.routes]]`: check-config shows each listener's routes, longest prefix first, and
/// refuses two routes that would shadow each other, naming the second.
#[test]
fn routes_are_shown_as_a_table_and_overlaps_refused_with_their_path() {
    let text = "[budgets.search]\nmax_concurrent = 16\nupstream = \"http://127.0.0.1:7070\"\nlisten = \"127.0.0.1:7002\"\n\n[budgets.export]\nmax_concurrent = 2\nupstream = \"http://127.0.0.1:7070\"\n\n[[proxy.routes]]\nlisten = \"127.0.0.1:7002\"\nprefix = \"/export\"\nbudget = \"export\"\n";
    let f = file(text);
    let out = inflight()
        .arg("check-config")
        .arg(f.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.ends_with("[routes on 127.0.0.1:7002] (longest prefix first)\n  /export                  -> export\n  anything else            -> search (default)\n"),
        "{stdout}"
    );
    let doc = success_json(
        &inflight()
            .args(["check-config", "--json"])
            .arg(f.path())
            .output()
            .unwrap(),
    );
    assert_eq!(
        doc["listeners"],
        serde_json::json!([{ "listen": "127.0.0.1:7002", "default": "search", "routes": [{ "prefix": "/export", "host": null, "budget": "export" }] }])
    );
    let twice = format!("{text}\n[[proxy.routes]]\nlisten = \"127.0.0.1:7002\"\nprefix = \"/export\"\nbudget = \"search\"\n");
    let f = file(&twice);
    let out = inflight()
        .arg("check-config")
        .arg(f.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("proxy.routes[1]: the same listen, host and prefix as proxy.routes[0]"),
        "{stderr}"
    );
}

#[test]
fn a_grpc_budget_speaks_http2_to_its_upstream_and_refuses_to_be_told_otherwise() {
    let grpc = "[budgets.records]\nmax_concurrent = 2\nupstream = \"http://127.0.0.1:50051\"\nlisten = \"127.0.0.1:0\"\nprotocol = \"grpc\"\n";
    let f = file(grpc);
    let doc = run_json([
        "check-config".as_ref(),
        f.path().as_os_str(),
        "--json".as_ref(),
    ]);
    assert_eq!(doc["budgets"][0]["proxy"]["upstream_http2"], true);
    assert_eq!(doc["budgets"][0]["proxy"]["protocol"], "grpc");

    let f = file(&format!("{grpc}upstream_http2 = false\n"));
    exits_2(
        ["check-config".as_ref(), f.path().as_os_str()],
        "budgets.records.upstream_http2: a budget with protocol = \"grpc\" needs HTTP/2",
    );
}

#[test]
fn a_probe_hold_is_shown_and_a_vegas_one_refused() {
    let f = file(
        "[budgets.export]\nlimit = \"adaptive\"\nalgorithm = \"aimd\"\nmax = 32\nprobe_hold = 64\n",
    );
    let (code, text) = check_config_output(&[f.path().to_str().unwrap()], "");
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("probes held up to 64 round trips after an overload"),
        "{text}"
    );
    let doc = run_json([
        "check-config".as_ref(),
        f.path().as_os_str(),
        "--json".as_ref(),
    ]);
    assert_eq!(doc["budgets"][0]["adaptive"]["probe_hold"], 64);

    let f = file("[budgets.export]\nlimit = \"adaptive\"\nmax = 32\nprobe_hold = 64\n");
    exits_2(
        ["check-config".as_ref(), f.path().as_os_str()],
        "budgets.export.probe_hold: only algorithm = \"aimd\"",
    );
}
