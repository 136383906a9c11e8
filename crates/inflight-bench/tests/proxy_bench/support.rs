//! Helpers shared by the proxy benchmark's tests: made-up measurements, and the binaries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use inflight_bench::proxy_bench::load::LoadReport;
use inflight_bench::proxy_bench::Latency;

/// A closed-loop measurement: `ok_per_s` 2xx answers per second over 1 s, latency p50 and p99
/// in ms, and the proxy's CPU µs per answer.
pub fn closed(ok_per_s: f64, p50: f64, p99: f64, cpu_us: Option<f64>) -> LoadReport {
    report(ok_per_s, p50, p99, None, cpu_us)
}

/// An open-loop measurement whose generator's send lag p99 is `lag_p99_ms`.
pub fn open(rate: f64, p50: f64, p99: f64, lag_p99_ms: f64) -> LoadReport {
    let mut r = report(rate, p50, p99, Some(lag_p99_ms), None);
    r.mode = "open";
    r.offered_per_s = Some(rate);
    r
}

fn report(
    ok_per_s: f64,
    p50: f64,
    p99: f64,
    lag_p99_ms: Option<f64>,
    cpu_us: Option<f64>,
) -> LoadReport {
    let count = ok_per_s as u64;
    let latency = Latency {
        count,
        p50,
        p90: p99,
        p99,
        p999: p99,
        max: p99,
        mean: p50,
    };
    LoadReport {
        mode: "closed",
        offered_per_s: None,
        connections: 64,
        duration_s: 1.0,
        sent: count,
        ok: count,
        statuses: BTreeMap::from([(200, count)]),
        errors: 0,
        answers_per_s: ok_per_s,
        ok_per_s,
        latency_ms: latency,
        ok_latency_ms: latency,
        send_lag_ms: lag_p99_ms.map(|p99| Latency {
            count,
            p50: p99 / 2.0,
            p90: p99,
            p99,
            p999: p99,
            max: p99,
            mean: p99 / 2.0,
        }),
        connection_wait_ms: None,
        steal_ms: None,
        proxy_cpu_s: cpu_us.map(|us| us * ok_per_s / 1e6),
        proxy_cpu_us_per_answer: cpu_us,
        proxy_instructions: None,
        proxy_instructions_per_answer: None,
        instructions_error: None,
        samples: Vec::new(),
    }
}

/// `proxy-bench`, as cargo built it for these tests.
pub fn proxy_bench() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_proxy-bench"))
}

/// The `inflight` binary (`crates/inflight-cli`), built by cargo once per test run: it belongs
/// to another package, which `cargo test -p inflight-bench` does not build by itself.
pub fn inflight() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let output = Command::new(env!("CARGO"))
            .current_dir(&workspace)
            .args([
                "build",
                "-p",
                "inflight-cli",
                "--bin",
                "inflight",
                "--message-format=json",
            ])
            .output()
            .expect("cargo runs");
        assert!(
            output.status.success(),
            "cargo build -p inflight-cli failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|m| m["target"]["name"] == "inflight")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo names the inflight executable it built")
    })
}

/// Whether `program -v` runs (HAProxy and nginx are optional for these tests).
pub fn installed(program: &str) -> bool {
    installed_with(program, "-v")
}

/// Whether `program arg` runs and succeeds.
pub fn installed_with(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
