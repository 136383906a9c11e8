//! Tests of `inflight capacity` against the real sim: the knee of the system of record in
//! `slow-write` and `healthy`, no knee for the enrichment API, the suggested budget through
//! `check-config`, the sim's own count of writes in flight next to the client's, bad input, a
//! server that refuses everything, and Ctrl-C.
//!
//! The sim's latencies are tokio sleeps (1 ms ticks, rounded up) behind a debug-built HTTP
//! stack on a shared machine: every call carries 1-4 ms more than the scenario's median. The
//! runs below use a time scale at which the median is 60 ms, so that this floor stays a few
//! percent and the 10% bound on the service time holds; at 15 ms it would not.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::support::{self, exits_2, inflight, run_json, SimProcess};

const RECORD_BODY: &str = r#"{"id": {n}, "complete": true}"#;

/// The scaled median of the current scenario's `part` (`records` or `enrichment`), in ms.
fn scaled_median_ms(sim: &SimProcess, part: &str) -> f64 {
    let text = http_get(&sim.url, "/scenario");
    let current: Value = serde_json::from_str(&text).unwrap();
    let median = current[part]["median"].as_str().unwrap();
    let median = humantime_ms(median);
    median * current["time_scale"].as_f64().unwrap()
}

fn humantime_ms(text: &str) -> f64 {
    if let Some(ms) = text.strip_suffix("ms") {
        ms.parse().unwrap()
    } else if let Some(s) = text.strip_suffix('s') {
        s.parse::<f64>().unwrap() * 1000.0
    } else {
        panic!("unexpected duration {text}")
    }
}

fn http_get(url: &str, path: &str) -> String {
    let addr = url.strip_prefix("http://").unwrap();
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// Runs a sweep of the system of record and checks the knee and the service time.
fn records_knee(scenario: &str, time_scale: &str) -> Value {
    let sim = SimProcess::start(&[
        "--scenario",
        scenario,
        "--time-scale",
        time_scale,
        "--seed",
        "1",
    ]);
    let median = scaled_median_ms(&sim, "records");
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("capacity.svg");
    let doc = run_json([
        "capacity",
        &format!("{}/records", sim.url),
        "--method",
        "POST",
        "--body",
        RECORD_BODY,
        "--max",
        "16",
        "--requests",
        "150",
        "--name",
        "records",
        "--svg",
        svg.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(doc["capacity"], 6, "{doc:#}");
    let service_time = doc["service_time_ms"].as_f64().unwrap();
    assert!(
        (service_time - median).abs() <= 0.10 * median,
        "service time {service_time} ms, scenario median {median} ms"
    );
    for level in doc["levels"].as_array().unwrap() {
        for field in [
            "concurrency",
            "requests",
            "throughput_per_s",
            "p50_ms",
            "p99_ms",
            "max_ms",
            "errors",
        ] {
            assert!(level.get(field).is_some(), "{field} missing in {level}");
        }
    }
    // The climb stopped on the sim's 503s (capacity 6 + queue 6 < 16) and never went past.
    assert_eq!(doc["stopped"]["kind"], "errors", "{doc:#}");
    let levels: Vec<u64> = doc["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["concurrency"].as_u64().unwrap())
        .collect();
    assert_eq!(levels, [1, 2, 4, 5, 6, 7, 8, 16], "{doc:#}");
    let max_rate = doc["max_rate_per_s"].as_f64().unwrap();
    let ceiling = 6.0 * 1000.0 / median;
    assert!(
        max_rate > 0.8 * ceiling && max_rate < 1.1 * ceiling,
        "{max_rate} vs {ceiling}"
    );

    let figure = std::fs::read_to_string(&svg).unwrap();
    assert!(figure.starts_with("<svg"), "{figure}");
    assert!(figure.contains("capacity 6"), "{figure}");
    doc
}

/// The suggested budget, written to a file, passes `check-config` with no warning.
fn suggestion_checks_cleanly(doc: &Value, max_concurrent: u64) {
    let suggested = &doc["suggested"];
    assert_eq!(suggested["max_concurrent"], max_concurrent, "{doc:#}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("budgets.toml");
    std::fs::write(&file, suggested["toml"].as_str().unwrap()).unwrap();
    let check = run_json(["check-config", file.to_str().unwrap(), "--json"]);
    assert_eq!(check["valid"], true, "{check:#}");
    assert_eq!(check["warnings"], 0, "{check:#}");
    let text = inflight()
        .args(["check-config", file.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("valid, 1 budget, 0 warnings"), "{text}");
}

#[test]
fn slow_write_system_of_record_has_capacity_6() {
    let doc = records_knee("slow-write", "0.4");
    assert_eq!(doc["verdict"]["kind"], "knee");
    suggestion_checks_cleanly(&doc, 6);
    assert_eq!(doc["suggested"]["name"], "records");
}

#[test]
fn healthy_system_of_record_has_capacity_6() {
    // healthy writes take 30 ms; at time scale 2 they take 60 ms, like slow-write at 0.4.
    let doc = records_knee("healthy", "2");
    suggestion_checks_cleanly(&doc, 6);
}

#[test]
fn enrichment_has_no_knee_up_to_max_and_says_so() {
    let sim = SimProcess::start(&[
        "--scenario",
        "slow-write",
        "--time-scale",
        "0.4",
        "--seed",
        "1",
    ]);
    let median = scaled_median_ms(&sim, "enrichment");
    let url = format!("{}/enrich/7", sim.url);
    let doc = run_json([
        "capacity",
        &url,
        "--max",
        "16",
        "--requests",
        "150",
        "--json",
    ]);
    assert_eq!(doc["capacity"], Value::Null, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "no_knee");
    assert_eq!(doc["verdict"]["up_to"], 16);
    assert_eq!(doc["stopped"], Value::Null);
    let conclusion = doc["conclusion"].as_str().unwrap();
    assert!(
        conclusion.starts_with("no knee up to concurrency 16: throughput kept growing"),
        "{conclusion}"
    );
    // Enrichment latencies are wider (sigma 0.25) than the records' and their draws are shared
    // with any other caller of the sim, so the sample median is held to 15% here.
    let service_time = doc["service_time_ms"].as_f64().unwrap();
    assert!(
        (service_time - median).abs() <= 0.15 * median,
        "service time {service_time} ms, scenario median {median} ms"
    );
    assert_eq!(doc["suggested"]["basis"], "lower_bound");
    suggestion_checks_cleanly(&doc, 16);
}

#[test]
fn the_sim_reports_6_writes_in_flight_while_the_client_has_more() {
    let sim = SimProcess::start(&[
        "--scenario",
        "slow-write",
        "--time-scale",
        "0.4",
        "--seed",
        "1",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("capacity.svg");
    let source = format!("{}/stats#/records/in_service", sim.url);
    let doc = run_json([
        "capacity",
        &format!("{}/records", sim.url),
        "-X",
        "POST",
        "-d",
        RECORD_BODY,
        "--levels",
        "2,4,8,16",
        "--requests",
        "100",
        "--target-in-flight",
        &source,
        // Half the default rate: the other end-to-end tests share these 2 cores.
        "--target-in-flight-every",
        "20ms",
        "--svg",
        svg.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        doc["target_in_flight_source"]["url"],
        format!("{}/stats", sim.url)
    );
    assert_eq!(
        doc["target_in_flight_source"]["pointer"],
        "/records/in_service"
    );
    assert_eq!(doc["target_in_flight_source"]["every_ms"], 20.0);
    let levels = doc["levels"].as_array().unwrap();
    assert!(levels.iter().any(|l| l["concurrency"] == 16), "{doc:#}");
    for level in levels {
        let c = level["concurrency"].as_f64().unwrap();
        let seen = &level["target_in_flight"];
        let max = seen["max"].as_f64().unwrap_or_else(|| panic!("{level}"));
        let mean = seen["mean"].as_f64().unwrap();
        assert!(seen["samples"].as_u64().unwrap() > 0, "{level}");
        assert_eq!(seen["failed"], 0, "{level}");
        // The sim never serves more writes than the client sent, nor more than its capacity;
        // from 8 up, with 6 in service and the rest waiting or refused, it says so.
        assert!(max <= c && max <= 6.0 && mean <= max, "{level}");
        if c >= 8.0 {
            assert_eq!(max, 6.0, "{level}");
        }
    }
    let figure = std::fs::read_to_string(&svg).unwrap();
    assert!(figure.contains(">calls in flight</text>"), "{figure}");
}

#[test]
fn a_target_in_flight_that_cannot_be_read_is_exit_2_before_any_call() {
    let sim = SimProcess::start(&["--time-scale", "0.1"]);
    let records = format!("{}/records", sim.url);
    let run = |source: &str| {
        inflight()
            .args(["capacity", &records, "-X", "POST", "-d", RECORD_BODY])
            .args(["--target-in-flight", source])
            .timeout(Duration::from_secs(20))
            .output()
            .unwrap()
    };
    let stderr = support::assert_refused(
        &run(&format!("{}/stats#/records/in_sevice", sim.url)),
        "cannot read calls in flight from",
        "",
    );
    assert!(stderr.contains("--target-in-flight"), "{stderr}");
    assert!(
        stderr.contains(
            "its answer has nothing at /records/in_sevice (/records has keys seen, accepted,"
        ),
        "{stderr}"
    );
    support::assert_refused(
        &run(&format!("{}/stats#/records", sim.url)),
        "/records is an object (keys seen,",
        "",
    );
    support::assert_refused(
        &run(&format!("{}/stats#/scenario", sim.url)),
        "/scenario is the string \"healthy\", not a number of calls",
        "",
    );
    support::assert_refused(
        &run(&format!("{}/metrics#/x", sim.url)),
        "its answer is not JSON",
        "",
    );
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    support::assert_refused(
        &run(&format!("http://127.0.0.1:{port}/stats#/n")),
        "cannot reach it",
        "",
    );
    // Nothing reached the system of record.
    let stats: Value = serde_json::from_str(&http_get(&sim.url, "/stats")).unwrap();
    assert_eq!(stats["records"]["seen"], 0, "{stats:#}");
}

#[test]
fn bad_target_in_flight_flags_are_exit_2() {
    let url = "http://127.0.0.1:9/";
    exits_2(
        [
            "capacity",
            url,
            "--target-in-flight",
            "http://127.0.0.1:9/stats",
        ],
        "has no JSON pointer: expected URL#/json/pointer",
    )
    .stdout("");
    exits_2(
        [
            "capacity",
            url,
            "--target-in-flight",
            "http://127.0.0.1:9/stats#records",
        ],
        "must start with `/`",
    );
    exits_2(
        [
            "capacity",
            url,
            "--target-in-flight",
            "http://127.0.0.1:9/s#/a~2",
        ],
        "`~` must be followed by 0",
    );
    exits_2(
        [
            "capacity",
            url,
            "--target-in-flight",
            "https://127.0.0.1:9/s#/a",
        ],
        "only http:// URLs",
    );
    exits_2(
        ["capacity", url, "--target-in-flight-every", "5ms"],
        "--target-in-flight <URL#POINTER>",
    );
    // 192.0.2.0/24 is reserved for documentation: nothing is called before the refusal.
    exits_2(
        [
            "capacity",
            url,
            "--target-in-flight",
            "http://192.0.2.1/stats#/n",
        ],
        "refusing to poll 192.0.2.1 for --target-in-flight",
    )
    .stdout("");
}

#[test]
fn bad_flags_are_exit_2() {
    exits_2(
        ["capacity", "http://127.0.0.1:9/", "--levels", "0"],
        "concurrency levels must be at least 1",
    )
    .stdout("");
    exits_2(
        ["capacity", "http://127.0.0.1:9/", "--levels", "1,x"],
        "is not a concurrency level",
    );
    exits_2(["capacity", "http://127.0.0.1:9/", "--max", "0"], "--max");
    exits_2(
        [
            "capacity",
            "http://127.0.0.1:9/",
            "-X",
            "POST",
            "--body",
            "id={n}",
        ],
        "the body is not JSON once {n} is replaced by a number",
    )
    .stdout("");
    exits_2(
        ["capacity", "http://127.0.0.1:9/", "--header", "nocolon"],
        "expected `Name: value`",
    );
    exits_2(["capacity", "https://127.0.0.1:9/"], "only http:// URLs");
    exits_2(["capacity", "not a url"], "is not a URL");
    exits_2(
        [
            "capacity",
            "http://127.0.0.1:9/",
            "--stop-on-errors",
            "100%",
        ],
        "below 100%",
    );
    exits_2(
        ["capacity", "http://127.0.0.1:9/", "--duration", "0s"],
        "greater than 0",
    );
    exits_2(
        ["capacity", "http://127.0.0.1:9/", "--requests", "10"],
        "per caller at the highest level 64",
    );
    exits_2(
        ["capacity", "http://127.0.0.1:9/", "--name", "a.b"],
        "budget name `a.b`",
    );
}

#[test]
fn a_remote_host_needs_an_acknowledgement() {
    // 192.0.2.0/24 is reserved for documentation: nothing is called before the refusal.
    exits_2(
        ["capacity", "http://192.0.2.1/"],
        "refusing to load-test 192.0.2.1",
    )
    .stdout("");
    exits_2(["capacity", "http://example.invalid/"], "--allow-remote");
}

#[test]
fn the_caps_are_shown_before_the_run() {
    let out = inflight()
        .args([
            "capacity",
            "http://127.0.0.1:1/",
            "--max",
            "4",
            "--requests",
            "50",
            "--duration",
            "1s",
            "--timeout",
            "1s",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // 3 levels + 8 probes of 50, and the first call; (1s + 1s) x 11 + 1s.
    assert!(
        stderr.contains("at most 551 requests and 23s in all"),
        "{stderr}"
    );
}

#[test]
fn an_unreachable_url_is_exit_2() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let out = inflight()
        .args([
            "capacity",
            &format!("http://127.0.0.1:{port}/"),
            "--timeout",
            "2s",
        ])
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    support::assert_refused(&out, "cannot reach http://127.0.0.1", "");
}

/// A listener on loopback that answers each connection with `reply` and closes it; returns
/// its port.
fn raw_server(reply: &'static [u8]) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let _ = stream.write_all(reply);
        }
    });
    port
}

#[test]
fn a_port_that_does_not_speak_http_is_exit_2() {
    let port = raw_server(b"SSH-2.0-OpenSSH_9.6\r\n");
    let out = inflight()
        .args([
            "capacity",
            &format!("http://127.0.0.1:{port}/"),
            "--timeout",
            "2s",
        ])
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    support::assert_refused(&out, "did not answer as an HTTP/1.1 server", "");
}

#[test]
fn a_4xx_on_the_first_call_is_exit_2() {
    let sim = SimProcess::start(&["--time-scale", "0.1"]);
    // The system of record refuses a body that is JSON but not a record.
    let out = inflight()
        .args([
            "capacity",
            &format!("{}/records", sim.url),
            "-X",
            "POST",
            "-d",
            r#"{"id": "x"}"#,
        ])
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    support::assert_refused(&out, "answered the first call with 400 Bad Request", "");
}

/// An HTTP/1.1 server on loopback that answers every request 503 and counts them.
fn always_503() -> (u16, Arc<AtomicU64>) {
    support::always("503 Service Unavailable", "overloaded")
}

#[test]
fn a_server_that_answers_503_to_everything_stops_the_climb_at_once() {
    let (port, count) = always_503();
    let out = inflight()
        .args([
            "capacity",
            &format!("http://127.0.0.1:{port}/"),
            "--max",
            "8",
            "--requests",
            "30",
        ])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains("stopped climbing at concurrency 1: 100.0% of calls failed (503 x 30)"),
        "{stdout}"
    );
    assert!(
        stderr.contains("error: no capacity: every level from concurrency 1 up"),
        "{stderr}"
    );
    assert!(
        stdout.contains("first failure: 503 Service Unavailable: overloaded"),
        "{stdout}"
    );
    assert!(!stdout.contains("[budgets."), "{stdout}");
    // One level and the first call: nothing more was sent.
    assert_eq!(count.load(Ordering::SeqCst), 31);
}

/// One call is "1 call" and one request "1 request", in the plan line and in a level's progress.
#[test]
fn one_is_singular() {
    let (port, count) = support::always("200 OK", "ok");
    let url = format!("http://127.0.0.1:{port}/");
    let run = |total: &str| {
        inflight()
            .args(["capacity", &url, "--levels", "1", "--requests", "3"])
            .args(["--total-requests", total])
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap()
    };
    // The first call and one call of level 1.
    let out = run("2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("at most 2 requests and"), "{stderr}");
    assert!(stderr.contains("concurrency    1: 1 call, "), "{stderr}");
    assert!(!stderr.contains("1 calls"), "{stderr}");
    // Only the first call: no level is measured.
    let out = run("1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("at most 1 request and"), "{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(count.load(Ordering::SeqCst), 3);
}

/// Every `--svg` path in the guide's `inflight capacity` commands is a fresh one: run from the
/// repository root, the command must not overwrite a tracked file.
#[test]
fn the_guides_commands_write_no_tracked_file() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("docs/guide/cli.md")).unwrap();
    let mut paths = Vec::new();
    let mut words = readme.split_whitespace();
    while let Some(word) = words.next() {
        if word == "--svg" {
            paths.push(words.next().unwrap().trim_matches(['\'', '"', '`']));
        }
    }
    assert!(!paths.is_empty(), "the guide shows --svg");
    for path in paths {
        assert!(
            !root.join(path).exists(),
            "the guide's `--svg {path}` would overwrite {path}"
        );
    }
}

#[test]
fn ctrl_c_stops_at_once_and_prints_what_was_measured() {
    let sim = SimProcess::start(&["--scenario", "slow-write", "--time-scale", "0.2"]);
    let mut child = Command::new(support::inflight_path())
        .args([
            "capacity",
            &format!("{}/records", sim.url),
            "-X",
            "POST",
            "-d",
            RECORD_BODY,
        ])
        .args([
            "--levels",
            "1,2,4",
            "--requests",
            "100000",
            "--duration",
            "60s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the plan line, then let the first level run a little.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.starts_with("measuring POST"), "{line}");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(support::send_signal(&child, libc::SIGINT), 0);
    let status = support::wait_exit(&mut child, Duration::from_secs(10), "inflight capacity");
    assert_eq!(status.code(), Some(130));
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert!(stdout.contains("(interrupted)"), "{stdout}");
    assert!(
        stdout.contains("interrupted: the figures are from the levels measured so far"),
        "{stdout}"
    );
    assert!(!stdout.contains("[budgets."), "{stdout}");
}

#[test]
fn help_shows_an_example() {
    let out = inflight().args(["capacity", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("inflight capacity http://127.0.0.1:7070/records"),
        "{text}"
    );
    assert!(text.contains("--allow-remote"), "{text}");
    assert!(
        text.contains("p50, p99 and max are the latencies of the calls answered 2xx only"),
        "{text}"
    );
    // clap reads a literal `{n}` in help as a line break; the help shows it as typed.
    assert!(
        text.contains(r#"--body '{"id": {n}, "complete": true}'"#),
        "{text}"
    );
    assert!(text.contains("`{n}` is replaced by a counter"), "{text}");
    assert!(
        text.contains("--target-in-flight 'http://127.0.0.1:7070/stats#/records/in_service'"),
        "{text}"
    );
}
