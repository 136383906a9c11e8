//! Fleet budgets at scale, side by side in one run: hundreds of real processes sharing one
//! budget, per-call leases next to shares, on one `redis-server` and on a 3-primary Redis
//! Cluster, each started on loopback by this bench; and the shares script with thousands of
//! clients.
//!
//! ```text
//! cargo bench -p inflight-redis --bench scale                  # 200 processes, 10 s each
//! cargo bench -p inflight-redis --bench scale -- --processes 100 --seconds 5 --shares-clients 5000
//! cargo bench -p inflight-redis --bench scale -- --only single  # or: cluster, shares-script, gaps
//! cargo bench -p inflight-redis --bench scale -- --pin         # Redis on CPU 0, the processes on CPU 1
//! cargo bench -p inflight-redis --bench scale -- --lease-ms 20000  # the fleet's lease (5 s by default)
//! ```
//!
//! Each process is this bench run again as a child: `--callers` callers (2) loop on one budget
//! of `--limit` (40) for `--seconds`, each call a connection held `--hold-ms` (100) at an
//! observer in the parent that counts the calls in service. The parent reads, per design:
//!
//! - **calls** made, and **Jain's index** of the calls per process;
//! - **scripts per call**: `EVALSHA` and `EVAL` commands Redis received (`INFO commandstats`,
//!   summed over the primaries) per call: the round trips the clients made for their permits;
//! - **Redis µs per call**: the scripts' own time (`usec` of `EVALSHA`) and the server's CPU
//!   (`used_cpu_user + used_cpu_sys`), per call;
//! - **permit wait** p50 and p99 over every call;
//! - **connections per process** (`connected_clients` during the run, over the processes);
//! - **peak** calls in service at the observer, against the limit.
//!
//! On one server, a third row, `plain_set`, is the floor and not a budget: the same processes
//! and callers send one plain `SET` per call, each caller once per the pace at which the
//! budget's callers get their turns, so Redis sees about the same calls a second, one round trip
//! each.
//!
//! The shares script with many clients: `--shares-clients` (5,000) share stores in this process,
//! each with its own process id (one connection carries them all), on one budget; the script's
//! mean time per report (`usec_per_call`), over `--seconds`.
//!
//! **Gaps** (`--only gaps`): one caller's acquire + release through the same client, back to
//! back, then 2 and 10 ms apart, never waiting: Redis's time per script and CPU per call as the
//! server idles more between scripts. The 200-process runs send Redis a script every 2-3 ms.
//! Then one plain `SET` per call at the same gaps: the Redis CPU that any design with one round
//! trip per call pays on the machine (in JSON, `what` is `fleet` or `set`; for `set`,
//! `scripts_per_call` and `us_per_script` count the `SET`s).
//!
//! Results go to stdout as Markdown tables and to `--json FILE` if given (`cargo bench` runs in
//! `crates/inflight-redis`, so a relative `FILE` starts there); progress to stderr, with each
//! design's Redis commands (scripts' own included) per call.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inflight::store::Store;
use inflight::Budget;
use inflight_redis::{Fail, RedisFleet};

mod support;

/// The tests' real cluster, for the cluster rows.
#[path = "../tests/support/cluster.rs"]
#[allow(dead_code)]
mod cluster;

/// The TLS support the cluster's nodes may use.
#[path = "../tests/support/tls.rs"]
#[allow(dead_code)]
mod tls;

/// What the tests' cluster support takes from its parent.
fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The run's settings, from `--name value` pairs.
#[derive(Debug, Clone)]
struct Settings {
    processes: usize,
    callers: usize,
    limit: usize,
    seconds: f64,
    hold_ms: u64,
    /// `--lease-ms`: the fleet's lease (its default, 5 s, when not given). A shares turn's term
    /// is a sixth of it.
    lease_ms: Option<u64>,
    shares_clients: usize,
    only: Option<String>,
    json: Option<String>,
    /// `--pin`: Redis on CPU 0, this bench and its processes on CPU 1.
    pin: bool,
}

fn settings() -> Settings {
    let mut s = Settings {
        processes: 200,
        callers: 2,
        limit: 40,
        seconds: 10.0,
        hold_ms: 100,
        lease_ms: None,
        shares_clients: 5000,
        only: None,
        json: None,
        pin: false,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        let number = || -> f64 {
            value.parse().unwrap_or_else(|_| {
                eprintln!("error: {} takes a number, got {value:?}", args[i]);
                std::process::exit(2)
            })
        };
        match args[i].as_str() {
            "--processes" => s.processes = number() as usize,
            "--callers" => s.callers = number() as usize,
            "--limit" => s.limit = number() as usize,
            "--seconds" => s.seconds = number(),
            "--hold-ms" => s.hold_ms = number() as u64,
            "--lease-ms" => s.lease_ms = Some(number() as u64),
            "--shares-clients" => s.shares_clients = number() as usize,
            "--only" => s.only = Some(value),
            "--json" => s.json = Some(value),
            "--bench" => {
                i += 1;
                continue;
            }
            "--pin" => {
                s.pin = true;
                i += 1;
                continue;
            }
            other => {
                eprintln!("error: unknown argument {other:?} (see the bench's docs)");
                std::process::exit(2)
            }
        }
        i += 2;
    }
    s
}

fn main() {
    if std::env::var("INFLIGHT_SCALE_CHILD").is_ok() {
        child();
        return;
    }
    let s = settings();
    if std::process::Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        eprintln!("skipped: redis-server is not installed");
        return;
    }
    let mut rows = Vec::new();
    let wants = |name: &str| s.only.as_deref().is_none_or(|o| o == name);
    if wants("single") {
        let server = support::start_server().expect("redis-server starts");
        let url = format!("redis://127.0.0.1:{}", server.1);
        for mode in ["per_call", "shares", "plain_set"] {
            rows.push(run(&s, "one server", &url, &[server.1], mode));
        }
    }
    if wants("cluster") {
        let cluster =
            cluster::RedisCluster::start(3, 0, Duration::from_secs(5)).expect("a cluster starts");
        let masters = cluster.masters();
        for mode in ["per_call", "shares"] {
            rows.push(run(&s, "3-primary cluster", &cluster.url(), &masters, mode));
        }
    }
    let script = wants("shares-script").then(|| shares_script(&s));
    let gaps = wants("gaps").then(|| gaps(&s));
    if !rows.is_empty() || script.is_some() {
        print_tables(&s, &rows, script.as_ref());
    }
    if let Some(gaps) = &gaps {
        print_gaps(gaps);
    }
    if let Some(path) = &s.json {
        let doc = serde_json_like(&s, &rows, script.as_ref(), gaps.as_deref());
        if let Err(e) = std::fs::write(path, doc) {
            // `cargo bench` runs in the package's folder: a relative path starts there.
            eprintln!("error: cannot write {path}: {e}");
            std::process::exit(1);
        }
        eprintln!("wrote {path}");
    }
}

/// One design's figures.
#[derive(Debug, Clone)]
struct Row {
    topology: String,
    mode: String,
    processes: usize,
    calls: u64,
    jain: f64,
    zero_call_processes: usize,
    scripts_per_call: f64,
    script_us_per_call: f64,
    cpu_us_per_call: f64,
    wait_p50_ms: f64,
    wait_p99_ms: f64,
    connections_per_process: f64,
    peak: usize,
    limit: usize,
    failed: usize,
}

/// Puts the nodes on `ports` on CPU 0 and this process (every thread, and so the processes it
/// starts after) on CPU 1, as a production Redis has cores of its own: the 200 processes'
/// context switches then do not evict Redis's caches, and Redis's CPU per call is its own work.
/// Says so when `taskset` is missing or the machine has one CPU.
fn pin(ports: &[u16]) {
    // Read once: once this process is pinned, it sees one CPU.
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cpus = *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let taskset = |cpu: &str, pid: &str| {
        Command::new("taskset")
            .args(["-a", "-p", "-c", cpu, pid])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let pinned = cpus >= 2
        && ports.iter().all(|port| {
            let pid = info(*port, "server")
                .get("process_id")
                .cloned()
                .unwrap_or_default();
            taskset("0", &pid)
        })
        && taskset("1", &std::process::id().to_string());
    if pinned {
        eprintln!("  pinned: Redis on CPU 0, the bench and its processes on CPU 1");
    } else {
        eprintln!("  not pinned ({cpus} CPUs, or taskset failed): Redis shares the CPUs");
    }
}

/// `INFO` of the node on `port`, as `field -> value`.
fn info(port: u16, section: &str) -> BTreeMap<String, String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query(&mut client.get_connection().unwrap())
        .unwrap();
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

fn command_stat(stats: &BTreeMap<String, String>, command: &str, field: &str) -> f64 {
    stats
        .get(&format!("cmdstat_{command}"))
        .and_then(|v| {
            v.split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0.0)
}

fn reset(ports: &[u16]) {
    for port in ports {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut client.get_connection().unwrap())
            .unwrap();
    }
}

fn cpu(ports: &[u16]) -> f64 {
    ports
        .iter()
        .map(|p| {
            let i = info(*p, "cpu");
            let f = |k: &str| i.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            f("used_cpu_user") + f("used_cpu_sys")
        })
        .sum()
}

/// Counts calls in service: each call is one connection held for the call.
struct Observer {
    addr: std::net::SocketAddr,
    now: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl Observer {
    fn start() -> Observer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (n, p) = (now.clone(), peak.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let (n, p) = (n.clone(), p.clone());
                std::thread::spawn(move || {
                    let mut byte = [0u8; 1];
                    if conn.read(&mut byte).unwrap_or(0) == 0 {
                        return;
                    }
                    let in_service = n.fetch_add(1, Relaxed) + 1;
                    p.fetch_max(in_service, Relaxed);
                    let _ = conn.write_all(b"k");
                    let mut sink = [0u8; 64];
                    while matches!(conn.read(&mut sink), Ok(k) if k > 0) {}
                    n.fetch_sub(1, Relaxed);
                });
            }
        });
        Observer { addr, now, peak }
    }
}

/// One design, `s.processes` child processes on `url`.
fn run(s: &Settings, topology: &str, url: &str, ports: &[u16], mode: &str) -> Row {
    eprintln!(
        "{topology}, {mode}: {} processes x {} callers, {} s",
        s.processes, s.callers, s.seconds
    );
    if s.pin {
        pin(ports);
    }
    let observer = Observer::start();
    let budget = format!("scale-{mode}-{}", rand::random::<u32>());
    let exe = std::env::current_exe().unwrap();
    let start_at =
        std::time::SystemTime::now() + Duration::from_millis(1500 + 10 * s.processes as u64);
    let start_ms = start_at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    let children: Vec<Child> = (0..s.processes)
        .map(|_| {
            Command::new(&exe)
                .env("INFLIGHT_SCALE_CHILD", "1")
                .env("URL", url)
                .env("BUDGET", &budget)
                .env("MODE", mode)
                .env("LIMIT", s.limit.to_string())
                .env("CALLERS", s.callers.to_string())
                .env("SECONDS", s.seconds.to_string())
                .env("HOLD_MS", s.hold_ms.to_string())
                .env("LEASE_MS", lease_ms(s).to_string())
                .env("PACE_MS", pace_ms(s).to_string())
                .env("OBSERVER", observer.addr.to_string())
                .env("START_MS", &start_ms)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("a child process starts")
        })
        .collect();
    // Stats from the moment every child starts calling.
    let wait = start_at
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    std::thread::sleep(wait);
    reset(ports);
    let cpu_before = cpu(ports);
    std::thread::sleep(Duration::from_secs_f64(s.seconds / 2.0));
    let clients: f64 = ports
        .iter()
        .map(|p| {
            info(*p, "clients")
                .get("connected_clients")
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        })
        .sum();
    let mut per_process = Vec::new();
    let mut waits = Vec::new();
    let mut failed = 0;
    for mut child in children {
        let mut line = String::new();
        let out = child.stdout.take().unwrap();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = child.wait();
        let mut parts = line.split_whitespace();
        match parts.next().and_then(|c| c.parse::<u64>().ok()) {
            Some(calls) => {
                per_process.push(calls);
                waits.extend(parts.filter_map(|w| w.parse::<f64>().ok()));
            }
            None => {
                failed += 1;
                per_process.push(0);
            }
        }
    }
    let cpu_after = cpu(ports);
    let stats: Vec<_> = ports.iter().map(|p| info(*p, "commandstats")).collect();
    let sum = |command: &str, field: &str| -> f64 {
        stats
            .iter()
            .map(|st| command_stat(st, command, field))
            .sum()
    };
    let calls: u64 = per_process.iter().sum();
    // Where Redis's time went, command by command (scripts' own commands included).
    let mut by_command: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for st in &stats {
        for name in st.keys().filter_map(|k| k.strip_prefix("cmdstat_")) {
            let e = by_command.entry(name).or_default();
            e.0 += command_stat(st, name, "calls");
            e.1 += command_stat(st, name, "usec");
        }
    }
    let per = calls.max(1) as f64;
    for (name, (n, usec)) in &by_command {
        eprintln!(
            "  {name}: {:.2} a call, {:.1} us a call",
            n / per,
            usec / per
        );
    }
    let n = per_process.len() as f64;
    let total: f64 = per_process.iter().map(|&c| c as f64).sum();
    let squares: f64 = per_process.iter().map(|&c| (c as f64).powi(2)).sum();
    waits.sort_by(f64::total_cmp);
    let pct = |q: f64| {
        if waits.is_empty() {
            0.0
        } else {
            waits[((waits.len() - 1) as f64 * q).round() as usize]
        }
    };
    let per_call = |x: f64| if calls == 0 { 0.0 } else { x / calls as f64 };
    let row = Row {
        topology: topology.to_string(),
        mode: mode.to_string(),
        processes: s.processes,
        calls,
        jain: if squares == 0.0 {
            0.0
        } else {
            total * total / (n * squares)
        },
        zero_call_processes: per_process.iter().filter(|&&c| c == 0).count(),
        scripts_per_call: per_call(sum("evalsha", "calls") + sum("eval", "calls")),
        script_us_per_call: per_call(sum("evalsha", "usec") + sum("eval", "usec")),
        cpu_us_per_call: per_call((cpu_after - cpu_before) * 1e6),
        wait_p50_ms: pct(0.5),
        wait_p99_ms: pct(0.99),
        connections_per_process: clients / s.processes as f64,
        peak: observer.peak.load(Relaxed),
        limit: s.limit,
        failed,
    };
    let _ = observer.now.load(Relaxed);
    eprintln!("  {row:?}");
    row
}

/// The fleet's lease in the run: `--lease-ms`, else the fleet's default.
fn lease_ms(s: &Settings) -> u64 {
    s.lease_ms
        .unwrap_or(RedisFleet::DEFAULT_LEASE.as_millis() as u64)
}

/// How often each caller of `plain_set` calls: the pace at which the fleet's callers get their
/// turns when they all wait (the limit's calls of `hold_ms` shared by every caller).
fn pace_ms(s: &Settings) -> u64 {
    (s.processes * s.callers) as u64 * s.hold_ms / s.limit.max(1) as u64
}

/// A child: callers on one fleet budget until the time is up; prints its calls and permit
/// waits (ms) on one line.
///
/// `MODE=plain_set` is the floor, not a budget: each call is one plain `SET` before its hold at
/// the observer, each caller calling once per `PACE_MS` from a random start within it, so Redis
/// sees one round trip per call at about the fleet rows' pace, spread in time as their turns
/// are, from as many processes and connections.
fn child() {
    let env = |k: &str| std::env::var(k).unwrap();
    let num = |k: &str| env(k).parse::<f64>().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let limit = num("LIMIT") as usize;
        let callers = num("CALLERS") as usize;
        let mode = env("MODE");
        let mut builder = Budget::builder(&env("BUDGET"))
            .max_concurrent(callers)
            .permit_timeout(Duration::from_secs(30));
        let (fleet, plain) = if mode == "plain_set" {
            let client = redis::Client::open(env("URL").as_str()).unwrap();
            let conn = client.get_multiplexed_async_connection().await.unwrap();
            (None, Some(conn))
        } else {
            let fleet = RedisFleet::builder(&env("URL"))
                .lease(Duration::from_millis(num("LEASE_MS") as u64))
                .build()
                .unwrap();
            let store: Arc<dyn Store> = if mode == "shares" {
                Arc::new(fleet.shares(limit, Fail::Closed))
            } else {
                Arc::new(fleet.store(limit, Fail::Closed))
            };
            builder = builder.store(store);
            (Some(fleet), None)
        };
        let budget = builder.build().unwrap();
        let pace = Duration::from_millis(num("PACE_MS") as u64);
        let start_ms = env("START_MS").parse::<u64>().unwrap();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        tokio::time::sleep(Duration::from_millis(start_ms.saturating_sub(now_ms))).await;
        let until = Instant::now() + Duration::from_secs_f64(num("SECONDS"));
        let hold = Duration::from_millis(num("HOLD_MS") as u64);
        let observer = env("OBSERVER");
        let waits = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..callers)
            .map(|_| {
                let (budget, waits, observer, stop, plain) = (
                    budget.clone(),
                    waits.clone(),
                    observer.clone(),
                    stop.clone(),
                    plain.clone(),
                );
                tokio::spawn(async move {
                    if plain.is_some() {
                        // Spread over the pace, as the fleet's turns are.
                        tokio::time::sleep(pace.mul_f64(rand::random::<f64>())).await;
                    }
                    while Instant::now() < until && !stop.load(Relaxed) {
                        let asked = Instant::now();
                        let left = until.saturating_duration_since(asked);
                        let permit = if let Some(mut conn) = plain.clone() {
                            let mut set = redis::cmd("SET");
                            set.arg("k").arg("v");
                            if set.query_async::<()>(&mut conn).await.is_err() {
                                tokio::time::sleep(pace).await;
                                continue;
                            }
                            None
                        } else {
                            let Ok(Ok(permit)) = tokio::time::timeout(left, budget.acquire()).await
                            else {
                                continue;
                            };
                            Some(permit)
                        };
                        waits
                            .lock()
                            .unwrap()
                            .push(asked.elapsed().as_secs_f64() * 1e3);
                        if let Ok(mut conn) = tokio::net::TcpStream::connect(&observer).await {
                            use tokio::io::{AsyncReadExt, AsyncWriteExt};
                            let _ = conn.write_all(b"c").await;
                            let mut b = [0u8; 1];
                            let _ = conn.read(&mut b).await;
                            tokio::time::sleep(hold).await;
                            let _ = conn.shutdown().await;
                            let _ = conn.read(&mut b).await;
                        }
                        drop(permit);
                        if plain.is_some() {
                            tokio::time::sleep_until((asked + pace).into()).await;
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
        if let Some(fleet) = fleet {
            fleet.shutdown().await;
        }
        let waits = waits.lock().unwrap();
        let mut line = waits.len().to_string();
        for w in waits.iter() {
            line.push_str(&format!(" {w:.2}"));
        }
        println!("{line}");
    });
}

/// One caller's calls with a gap between them.
struct GapRow {
    /// `fleet`: an acquire and release of a per-call lease; `set`: one plain `SET`, the least
    /// any design with a round trip per call sends.
    what: &'static str,
    gap_ms: u64,
    calls: u64,
    scripts_per_call: f64,
    us_per_script: f64,
    cpu_us_per_call: f64,
}

/// The same per-call lease scripts, from one caller of one process, back to back and then with
/// 2 and 10 ms between calls (never waiting: a budget of 40): how much of a script's cost is the
/// work, and how much a Redis core that idles between scripts (cold caches, a sleeping CPU).
/// Then the floor: one plain `SET` per call through a connection of the same client, at the
/// same gaps, Redis's CPU per command.
fn gaps(s: &Settings) -> Vec<GapRow> {
    let server = support::start_server().expect("redis-server starts");
    if s.pin {
        pin(&[server.1]);
    }
    let url = format!("redis://127.0.0.1:{}", server.1);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let fleet = RedisFleet::builder(&url).build().unwrap();
        let budget = Budget::builder("scale-gaps")
            .max_concurrent(40)
            .store(Arc::new(fleet.store(40, Fail::Closed)))
            .build()
            .unwrap();
        let mut rows = Vec::new();
        for gap_ms in [0u64, 2, 10] {
            let calls = if gap_ms == 0 { 3000 } else { 500 };
            eprintln!("gaps: {calls} calls, {gap_ms} ms apart");
            drop(budget.acquire().await.unwrap());
            tokio::time::sleep(Duration::from_millis(50)).await;
            reset(&[server.1]);
            let cpu_before = cpu(&[server.1]);
            for _ in 0..calls {
                drop(budget.acquire().await.unwrap());
                if gap_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(gap_ms)).await;
                }
            }
            // The last release, sent in the background.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let cpu_after = cpu(&[server.1]);
            let stats = info(server.1, "commandstats");
            let scripts = command_stat(&stats, "evalsha", "calls");
            rows.push(GapRow {
                what: "fleet",
                gap_ms,
                calls,
                scripts_per_call: scripts / calls as f64,
                us_per_script: command_stat(&stats, "evalsha", "usec_per_call"),
                cpu_us_per_call: (cpu_after - cpu_before) * 1e6 / calls as f64,
            });
        }
        fleet.shutdown().await;
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        for gap_ms in [0u64, 2, 10] {
            let calls = if gap_ms == 0 { 3000 } else { 500 };
            eprintln!("gaps: {calls} plain SETs, {gap_ms} ms apart");
            plain_set(&mut conn).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            reset(&[server.1]);
            let cpu_before = cpu(&[server.1]);
            for _ in 0..calls {
                plain_set(&mut conn).await;
                if gap_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(gap_ms)).await;
                }
            }
            let cpu_after = cpu(&[server.1]);
            let stats = info(server.1, "commandstats");
            rows.push(GapRow {
                what: "set",
                gap_ms,
                calls,
                scripts_per_call: command_stat(&stats, "set", "calls") / calls as f64,
                us_per_script: command_stat(&stats, "set", "usec_per_call"),
                cpu_us_per_call: (cpu_after - cpu_before) * 1e6 / calls as f64,
            });
        }
        rows
    })
}

/// One plain `SET`: the floor's call.
async fn plain_set(conn: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query_async(conn)
        .await
        .unwrap();
}

fn print_gaps(rows: &[GapRow]) {
    println!("\n| one caller, per call | ms between calls | calls | commands per call | µs per command | Redis CPU µs per call |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for g in rows {
        let what = match g.what {
            "fleet" => "acquire + release (scripts)",
            _ => "one plain `SET`",
        };
        println!(
            "| {what} | {} | {} | {:.2} | {:.1} | {:.1} |",
            g.gap_ms, g.calls, g.scripts_per_call, g.us_per_script, g.cpu_us_per_call
        );
    }
}

/// The shares script with `s.shares_clients` clients on one budget.
struct ScriptRow {
    clients: usize,
    reports: f64,
    us_per_report: f64,
}

fn shares_script(s: &Settings) -> ScriptRow {
    let server = support::start_server().expect("redis-server starts");
    let url = format!("redis://127.0.0.1:{}", server.1);
    eprintln!(
        "shares script: {} clients, {} s",
        s.shares_clients, s.seconds
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let fleet = RedisFleet::builder(&url).build().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for _ in 0..s.shares_clients {
            let budget = Budget::builder("scale-script")
                .max_concurrent(2)
                .permit_timeout(Duration::from_secs(30))
                .store(Arc::new(fleet.shares(s.limit.max(1) * 10, Fail::Closed)))
                .build()
                .unwrap();
            let stop = stop.clone();
            tasks.push(tokio::spawn(async move {
                while !stop.load(Relaxed) {
                    if let Ok(Ok(permit)) =
                        tokio::time::timeout(Duration::from_secs(1), budget.acquire()).await
                    {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        drop(permit);
                    }
                    tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 200)).await;
                }
            }));
        }
        // Every client has reported once; then the stats.
        tokio::time::sleep(Duration::from_secs(2)).await;
        reset(&[server.1]);
        tokio::time::sleep(Duration::from_secs_f64(s.seconds)).await;
        let stats = info(server.1, "commandstats");
        stop.store(true, Relaxed);
        for t in tasks {
            let _ = t.await;
        }
        fleet.shutdown().await;
        let reports = command_stat(&stats, "evalsha", "calls");
        ScriptRow {
            clients: s.shares_clients,
            reports,
            us_per_report: command_stat(&stats, "evalsha", "usec_per_call"),
        }
    })
}

fn print_tables(s: &Settings, rows: &[Row], script: Option<&ScriptRow>) {
    println!(
        "\n{} processes x {} callers, calls of {} ms, a budget of {}, a lease of {} ms, {} s each\n",
        s.processes, s.callers, s.hold_ms, s.limit, lease_ms(s), s.seconds
    );
    println!("| topology | lease mode | calls | Jain | processes with no call | scripts per call | script µs per call | Redis CPU µs per call | wait p50 | wait p99 | connections per process | peak (limit) |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in rows {
        println!(
            "| {} | {} | {} | {:.3} | {} | {:.2} | {:.1} | {:.1} | {:.1} ms | {:.1} ms | {:.2} | {} ({}) |",
            r.topology,
            r.mode,
            r.calls,
            r.jain,
            r.zero_call_processes,
            r.scripts_per_call,
            r.script_us_per_call,
            r.cpu_us_per_call,
            r.wait_p50_ms,
            r.wait_p99_ms,
            r.connections_per_process,
            r.peak,
            r.limit
        );
        if r.failed > 0 {
            println!(
                "\n{} processes of {} {} said nothing (failed)",
                r.failed, r.topology, r.mode
            );
        }
    }
    if rows.iter().any(|r| r.mode == "plain_set") {
        println!(
            "\n`plain_set` is not a budget: each call is one plain `SET`, every caller calling once \
             per {} ms (the fleet's turns when all wait), so its Redis CPU per call is what one \
             round trip per call costs on this machine; its wait is the `SET`'s round trip, its \
             peak is not held.",
            pace_ms(s)
        );
    }
    if let Some(sc) = script {
        println!("\n| shares clients | reports | µs per report |");
        println!("| ---: | ---: | ---: |");
        println!(
            "| {} | {} | {:.1} |",
            sc.clients, sc.reports, sc.us_per_report
        );
    }
}

/// The run as JSON, written by hand (the bench has no JSON dependency).
fn serde_json_like(
    s: &Settings,
    rows: &[Row],
    script: Option<&ScriptRow>,
    gaps: Option<&[GapRow]>,
) -> String {
    let mut out = format!(
        "{{\n  \"processes\": {},\n  \"callers\": {},\n  \"limit\": {},\n  \"seconds\": {},\n  \"hold_ms\": {},\n  \"lease_ms\": {},\n  \"pinned\": {},\n  \"designs\": [\n",
        s.processes, s.callers, s.limit, s.seconds, s.hold_ms, lease_ms(s), s.pin
    );
    for (i, r) in rows.iter().enumerate() {
        out.push_str(&format!(
            "    {{\"topology\": \"{}\", \"lease_mode\": \"{}\", \"processes\": {}, \"calls\": {}, \"jain\": {:.4}, \"processes_with_no_call\": {}, \"scripts_per_call\": {:.4}, \"script_us_per_call\": {:.2}, \"redis_cpu_us_per_call\": {:.2}, \"wait_p50_ms\": {:.2}, \"wait_p99_ms\": {:.2}, \"connections_per_process\": {:.3}, \"peak\": {}, \"limit\": {}, \"failed_processes\": {}}}{}\n",
            r.topology, r.mode, r.processes, r.calls, r.jain, r.zero_call_processes, r.scripts_per_call, r.script_us_per_call,
            r.cpu_us_per_call, r.wait_p50_ms, r.wait_p99_ms, r.connections_per_process, r.peak, r.limit, r.failed,
            if i + 1 < rows.len() { "," } else { "" }
        ));
    }
    out.push_str("  ]");
    if let Some(sc) = script {
        out.push_str(&format!(
            ",\n  \"shares_script\": {{\"clients\": {}, \"reports\": {}, \"us_per_report\": {:.2}}}",
            sc.clients, sc.reports, sc.us_per_report
        ));
    }
    if let Some(gaps) = gaps {
        out.push_str(",\n  \"gaps\": [\n");
        for (i, g) in gaps.iter().enumerate() {
            out.push_str(&format!(
                "    {{\"what\": \"{}\", \"gap_ms\": {}, \"calls\": {}, \"scripts_per_call\": {:.3}, \"us_per_script\": {:.2}, \"redis_cpu_us_per_call\": {:.2}}}{}\n",
                g.what, g.gap_ms, g.calls, g.scripts_per_call, g.us_per_script, g.cpu_us_per_call,
                if i + 1 < gaps.len() { "," } else { "" }
            ));
        }
        out.push_str("  ]");
    }
    out.push_str("\n}\n");
    out
}
