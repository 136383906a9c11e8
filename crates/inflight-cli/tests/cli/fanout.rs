//! Tests of `inflight fanout`: flag validation, the planned-time bound, and short real runs with
//! generous checks on time and exact checks on peak concurrency.

use predicates::prelude::*;

use crate::support::{exits_2, inflight, run_json};

fn bad_flag(args: &[&str], needle: &str) {
    exits_2(["fanout"].iter().chain(args), needle);
}

#[test]
fn rejects_bad_flags() {
    bad_flag(&["--delay", "soon"], "is not a duration");
    bad_flag(&["--delay", "0ms"], "greater than 0");
    bad_flag(&["--delay", "1m"], "10s limit");
    bad_flag(&["--limit", "0"], "--limit");
    bad_flag(&["--jobs", "0"], "--jobs");
    bad_flag(&["--rounds", "0"], "--rounds");
    bad_flag(
        &["--strategies", "unbounded,fast"],
        "unknown strategy \"fast\"",
    );
    bad_flag(&["--timer", "sundial"], "--timer");
}

#[test]
fn refuses_a_run_longer_than_the_bound() {
    exits_2(
        [
            "fanout", "--jobs", "1000000", "--limit", "1", "--delay", "10s",
        ],
        "error: this run would take at least",
    );
}

#[test]
fn json_run_holds_the_limit_and_stays_near_the_ideal() {
    let doc = run_json([
        "fanout", "--jobs", "40", "--limit", "4", "--delay", "10ms", "--rounds", "2", "--json",
    ]);
    assert_eq!(doc["jobs"], 40);
    assert_eq!(doc["delay_ms"], 10.0);
    assert_eq!(doc["limit"], 4);
    assert_eq!(doc["rounds"], 2);
    assert_eq!(doc["ideal_bounded_ms"], 100.0);
    let results = doc["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "unbounded",
            "buffer_unordered",
            "semaphore",
            "joinset",
            "budget"
        ]
    );
    for r in results {
        let (median, min, max) = (
            r["median_ms"].as_f64().unwrap(),
            r["min_ms"].as_f64().unwrap(),
            r["max_ms"].as_f64().unwrap(),
        );
        assert!(min <= median && median <= max, "{r}");
        if r["strategy"] == "unbounded" {
            assert_eq!(r["peak"], 40);
            assert_eq!(r["up_front"], 40);
        } else {
            assert_eq!(r["peak"], 4, "{r}");
            // Never faster than ten waves of 10 ms; generously bounded above on a busy machine.
            assert!(min >= 99.0 && median < 300.0, "{r}");
        }
    }
    let readings = doc["timer_readings"].as_array().unwrap();
    assert_eq!(readings.len(), 2);
    assert!(readings
        .iter()
        .all(|t| t["median_ms"].as_f64().unwrap() >= 10.0));
}

#[test]
fn human_output_shows_the_ideal_and_the_timers() {
    inflight()
        .args([
            "fanout",
            "--jobs",
            "20",
            "--limit",
            "5",
            "--delay",
            "5ms",
            "--rounds",
            "1",
            "--timer",
            "tokio",
            "--strategies",
            "unbounded,budget",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "ideal bounded time: ceil(20 / 5) x 5 ms = 20 ms",
        ))
        .stdout(predicate::str::contains("on the tokio timer took"))
        .stdout(predicate::str::contains("on the precise timer took"))
        .stdout(predicate::str::contains("x ideal"))
        .stdout(predicate::str::contains("budget"));
}
