//! A gRPC service with no queue behind the proxy: a fixed budget told its capacity against an
//! adaptive one told nothing, and no proxy at all, with a real `grpcio` server and client. See
//! `benches/README.md`; runs are written to `benches/runs/`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncBufReadExt;

/// Threads of the client, and calls each makes.
const THREADS: u32 = 32;
const CALLS: u32 = 60;
/// Runs of each case.
const REPEATS: usize = 3;
/// What the service serves at once.
const CAPACITY: u32 = 6;

fn clients() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients")
}

/// One run's figures.
#[derive(Debug, Clone)]
struct Run {
    case: &'static str,
    ok: u64,
    refused_by_service: u64,
    refused_by_proxy: u64,
    other: u64,
    seconds: f64,
}

impl Run {
    fn ok_per_s(&self) -> f64 {
        self.ok as f64 / self.seconds
    }

    fn refused_share(&self) -> f64 {
        let all = self.ok + self.refused_by_service + self.refused_by_proxy + self.other;
        self.refused_by_service as f64 / all as f64
    }
}

async fn client(target: SocketAddr) -> (serde_json::Value, f64) {
    let started = Instant::now();
    let out = tokio::process::Command::new("python3")
        .arg(clients().join("grpc_client.py"))
        .arg(target.to_string())
        .arg("Get")
        .arg(THREADS.to_string())
        .arg(CALLS.to_string())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("python3 runs");
    let seconds = started.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (serde_json::from_slice(&out.stdout).unwrap(), seconds)
}

fn count(doc: &serde_json::Value, code: &str) -> u64 {
    doc["statuses"][code].as_u64().unwrap_or(0)
}

async fn run(case: &'static str, upstream: SocketAddr) -> Run {
    let budget = match case {
        "fixed-6" => format!("max_concurrent = {CAPACITY}"),
        "adaptive" => "limit = \"adaptive\"\nalgorithm = \"aimd\"\ninitial = 16\nmax = 32".into(),
        "adaptive-hold" => {
            "limit = \"adaptive\"\nalgorithm = \"aimd\"\ninitial = 16\nmax = 32\nprobe_hold = 64"
                .into()
        }
        _ => String::new(),
    };
    let (doc, seconds) = if case == "direct" {
        client(upstream).await
    } else {
        let text = format!(
            "[budgets.get]\n{budget}\npermit_timeout = \"5s\"\nupstream = \"http://{upstream}\"\nlisten = \"127.0.0.1:0\"\nupstream_http2 = true\n"
        );
        let proxy = inflight_proxy::Proxy::builder().start(&text).await.unwrap();
        let result = client(proxy.local_addr("get").unwrap()).await;
        proxy.drain().await;
        result
    };
    let ok = count(&doc, "OK");
    let refused_by_service = count(&doc, "RESOURCE_EXHAUSTED");
    let refused_by_proxy = count(&doc, "UNAVAILABLE");
    let all: u64 = doc["statuses"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    Run {
        case,
        ok,
        refused_by_service,
        refused_by_proxy,
        other: all - ok - refused_by_service - refused_by_proxy,
        seconds,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let grpc = std::process::Command::new("python3")
        .args(["-c", "import grpc"])
        .status()
        .is_ok_and(|s| s.success());
    if !grpc {
        eprintln!("skipping: Python's grpcio is not installed (pip install grpcio)");
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut server = tokio::process::Command::new("python3")
            .arg(clients().join("grpc_server.py"))
            .arg(CAPACITY.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut line = String::new();
        tokio::io::BufReader::new(server.stdout.take().unwrap())
            .read_line(&mut line)
            .await
            .unwrap();
        let upstream: SocketAddr = format!("127.0.0.1:{}", line.trim()).parse().unwrap();
        let cases = ["fixed-6", "adaptive", "adaptive-hold", "direct"];
        let mut runs = Vec::new();
        for repeat in 0..REPEATS {
            // Rotate the order, so no case always runs first.
            for i in 0..cases.len() {
                let case = cases[(i + repeat) % cases.len()];
                let r = run(case, upstream).await;
                eprintln!(
                    "{case:>8} run {}: {:.1} OK/s, {:.2}% refused by the service, {} by the proxy, {:.1} s",
                    repeat + 1,
                    r.ok_per_s(),
                    100.0 * r.refused_share(),
                    r.refused_by_proxy,
                    r.seconds
                );
                runs.push(r);
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
        let mut table = String::from(
            "| case | OK/s (median) | refused by the service (median) | refused by the proxy (median) | runs |\n| --- | ---: | ---: | ---: | ---: |\n",
        );
        let mut ok_of = std::collections::HashMap::new();
        for case in cases {
            let mine: Vec<&Run> = runs.iter().filter(|r| r.case == case).collect();
            let ok = median(mine.iter().map(|r| r.ok_per_s()).collect());
            let share = median(mine.iter().map(|r| r.refused_share()).collect());
            let proxy = median(mine.iter().map(|r| r.refused_by_proxy as f64).collect());
            ok_of.insert(case, ok);
            table.push_str(&format!(
                "| {case} | {ok:.1} | {:.2}% | {proxy:.0} | {} |\n",
                100.0 * share,
                mine.len()
            ));
        }
        let mut verdict = String::new();
        for case in ["adaptive", "adaptive-hold"] {
            let ratio = ok_of[case] / ok_of["fixed-6"];
            let share = median(
                runs.iter()
                    .filter(|r| r.case == case)
                    .map(|r| r.refused_share())
                    .collect(),
            );
            verdict.push_str(&format!(
                "{case} / fixed-6 OK/s: {ratio:.3}x (goal >= 0.97x: {}); {case} refused by the service: {:.2}% (goal <= 1%: {})\n",
                if ratio >= 0.97 { "met" } else { "missed" },
                100.0 * share,
                if share <= 0.01 { "met" } else { "missed" }
            ));
        }
        println!("{table}\n{verdict}");
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/runs");
        std::fs::create_dir_all(&dir).unwrap();
        let stamp = std::process::Command::new("date")
            .args(["-u", "+%Y-%m-%dT%H%MZ"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|_| "run".into());
        let detail: String = runs
            .iter()
            .map(|r| {
                format!(
                    "| {} | {} | {} | {} | {} | {:.2} |\n",
                    r.case, r.ok, r.refused_by_service, r.refused_by_proxy, r.other, r.seconds
                )
            })
            .collect();
        let file = dir.join(format!("{stamp}-grpc.md"));
        std::fs::write(
            &file,
            format!(
                "# gRPC service with no queue, through the proxy ({stamp})\n\n{THREADS} client threads x {CALLS} calls of a 20 ms method; the service serves {CAPACITY} at once.\n\n{table}\n{verdict}\n| case | OK | refused by the service | refused by the proxy | other | seconds |\n| --- | ---: | ---: | ---: | ---: | ---: |\n{detail}"
            ),
        )
        .unwrap();
        eprintln!("written to {}", file.display());
        drop(server.stdin.take());
    });
}
