//! Tests of `inflight sim`: its flags, the listening line, stopping, and bad input (exit 2).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{self, exits_2, send_signal, wait_exit};

fn sim_command() -> Command {
    Command::new(support::inflight_path())
}

/// Starts the sim, reads its first stdout line and returns the child and its base URL.
fn start(args: &[&str]) -> (Child, String) {
    let mut child = sim_command()
        .arg("sim")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim_end()
        .strip_prefix("inflight sim listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    (child, url)
}

/// A minimal HTTP/1.1 exchange over loopback; returns (status, body).
fn http(url: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let addr = url.strip_prefix("http://").unwrap();
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad response {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn flags_set_scenario_seed_and_time_scale_and_closing_stdin_stops_it() {
    let (mut child, url) = start(&[
        "--port",
        "0",
        "--scenario",
        "slow-write",
        "--seed",
        "7",
        "--time-scale",
        "0.5",
        "--exit-on-stdin-close",
    ]);
    let (status, body) = http(&url, "GET", "/scenario", "");
    assert_eq!(status, 200, "{body}");
    let current: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(current["name"], "slow-write");
    assert_eq!(current["seed"], 7);
    assert_eq!(current["time_scale"], 0.5);
    assert_eq!(current["records"]["median"], "150ms");

    let (status, _) = http(&url, "POST", "/records", r#"{"id": 1, "complete": true}"#);
    assert_eq!(status, 200);
    let (status, body) = http(&url, "POST", "/records", r#"{"id": true}"#);
    assert_eq!(status, 400, "{body}");
    let (status, _) = http(&url, "GET", "/elsewhere", "");
    assert_eq!(status, 404);
    let (_, body) = http(&url, "GET", "/stats", "");
    let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(stats["records"]["accepted"], 1);
    assert_eq!(stats["records"]["seen"], 2);

    drop(child.stdin.take());
    let status = wait_exit(&mut child, Duration::from_secs(10), "the sim");
    assert!(status.success(), "{status:?}");
}

#[test]
fn sigterm_stops_it_cleanly() {
    let (mut child, url) = start(&["--time-scale", "0.1"]);
    let (status, _) = http(&url, "GET", "/enrich/3", "");
    assert_eq!(status, 200);
    let rc = send_signal(&child, libc::SIGTERM);
    assert_eq!(rc, 0);
    let status = wait_exit(&mut child, Duration::from_secs(10), "the sim");
    assert!(status.success(), "{status:?}");
}

#[test]
fn without_the_flag_closing_stdin_does_not_stop_it() {
    let (mut child, url) = start(&[]);
    drop(child.stdin.take());
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "still serving");
    assert_eq!(http(&url, "GET", "/stats", "").0, 200);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn an_unknown_scenario_is_exit_2_naming_the_known_ones() {
    exits_2(["sim", "--scenario", "nope"], "unknown scenario `nope`")
        .stdout("")
        .stderr(predicates::str::contains(
            "degrading, hard-limit, healthy, priority, quota, slow-enrichment, slow-write",
        ));
}

#[test]
fn a_bad_scenarios_file_is_exit_2_with_a_message() {
    exits_2(
        ["sim", "--scenarios", "/no/such/scenarios.toml"],
        "cannot read scenarios file /no/such/scenarios.toml",
    )
    .stdout("");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.toml");
    std::fs::write(
        &file,
        "[scenarios.x]\nenrichment = { median = \"soon\" }\nrecords = { median = \"1ms\", capacity = 1, queue = 0 }\n",
    )
    .unwrap();
    exits_2(
        [
            "sim",
            "--scenario",
            "x",
            "--scenarios",
            file.to_str().unwrap(),
        ],
        "scenario `x`: enrichment.median",
    );

    std::fs::write(&file, "not = [toml").unwrap();
    exits_2(
        ["sim", "--scenarios", file.to_str().unwrap()],
        "invalid scenarios file",
    );
}

#[test]
fn a_bad_time_scale_is_exit_2() {
    for bad in ["0", "-1", "NaN"] {
        exits_2(
            ["sim", &format!("--time-scale={bad}")],
            "time scale must be",
        );
        // Also as a separate argument, where a leading `-` must not read as a flag.
        exits_2(["sim", "--time-scale", bad], "time scale must be");
    }
}

#[test]
fn a_custom_scenarios_file_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.toml");
    std::fs::write(
        &file,
        "[scenarios.tiny]\nenrichment = { median = \"5ms\" }\nrecords = { median = \"5ms\", capacity = 2, queue = 1 }\n",
    )
    .unwrap();
    let (mut child, url) = start(&[
        "--scenario",
        "tiny",
        "--scenarios",
        file.to_str().unwrap(),
        "--exit-on-stdin-close",
    ]);
    let (_, body) = http(&url, "GET", "/scenario", "");
    let current: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(current["name"], "tiny");
    assert_eq!(current["records"]["capacity"], 2);
    drop(child.stdin.take());
    assert!(wait_exit(&mut child, Duration::from_secs(10), "the sim").success());
}
