//! Per-call leases next to shares, under the same load, in one run: 16 fleet clients (each a
//! `RedisFleet` with its own connection, in this one process), a fleet limit of 512, and a
//! dependency that serves each call for 5 ms and counts its calls in service itself.
//!
//! ```text
//! cargo bench -p inflight-redis --bench shares
//! cargo bench -p inflight-redis --bench shares -- --clients 16 --limit 512 --seconds 5 --rounds 3
//! ```
//!
//! Each client runs `3 × limit / clients` callers back to back (demand above the limit). Each
//! round measures both designs in turn on a fresh `redis-server` on a free loopback port:
//! calls a second, Redis commands a call counted by the server (`INFO commandstats`: every
//! command, the scripts' own included; and the scripts alone), the mean calls in service at the
//! dependency against the limit, and the most at once. Results (median [min max] over rounds)
//! go to stdout as a Markdown table; progress to stderr.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use inflight::store::Store;
use inflight::Budget;
use inflight_redis::{Fail, RedisFleet};

mod support;

use support::start_server;

/// The dependency's own counters.
#[derive(Default)]
struct Dependency {
    now: AtomicU64,
    peak: AtomicU64,
    calls: AtomicU64,
    busy_micros: AtomicU64,
}

impl Dependency {
    async fn serve(&self) {
        let began = Instant::now();
        let n = self.now.fetch_add(1, Relaxed) + 1;
        self.peak.fetch_max(n, Relaxed);
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.now.fetch_sub(1, Relaxed);
        self.calls.fetch_add(1, Relaxed);
        self.busy_micros
            .fetch_add(began.elapsed().as_micros() as u64, Relaxed);
    }
}

/// Every command's calls, and the scripts' alone, from `INFO commandstats`.
fn commands(conn: &mut redis::Connection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let (mut all, mut scripts) = (0, 0);
    for line in info.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        if let Some(calls) = rest
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|n| n.parse::<u64>().ok())
        {
            all += calls;
            if matches!(name, "cmdstat_evalsha" | "cmdstat_eval") {
                scripts += calls;
            }
        }
    }
    (all, scripts)
}

#[derive(Debug, Clone, Copy)]
struct Figures {
    calls_per_sec: f64,
    commands_per_call: f64,
    scripts_per_call: f64,
    in_use: f64,
    /// Mean time a call spent in service at the dependency (5 ms asked; more on a busy
    /// machine, whose timers wake late).
    service_ms: f64,
    peak: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Design {
    PerCall,
    Shares,
}

struct Load {
    clients: usize,
    limit: usize,
    warm_up: Duration,
    measure: Duration,
}

fn run(design: Design, load: &Load) -> Figures {
    let server = start_server().expect("redis-server starts");
    let url = format!("redis://127.0.0.1:{}", server.1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let dependency = Arc::new(Dependency::default());
    let stop = Arc::new(AtomicBool::new(false));
    let callers = 3 * load.limit / load.clients;
    let fleets: Vec<RedisFleet> = (0..load.clients)
        .map(|_| RedisFleet::new(&url).unwrap())
        .collect();
    let figures = runtime.block_on(async {
        let mut tasks = Vec::new();
        for fleet in &fleets {
            let store: Arc<dyn Store> = match design {
                Design::PerCall => Arc::new(fleet.store(load.limit, Fail::Closed)),
                Design::Shares => Arc::new(fleet.shares(load.limit, Fail::Closed)),
            };
            let budget = Budget::builder("bench")
                .max_concurrent(callers)
                .permit_timeout(Duration::from_secs(10))
                .store(store)
                .build()
                .unwrap();
            for _ in 0..callers {
                let (budget, dependency, stop) = (budget.clone(), dependency.clone(), stop.clone());
                tasks.push(tokio::spawn(async move {
                    while !stop.load(Relaxed) {
                        if let Ok(_permit) = budget.acquire().await {
                            dependency.serve().await;
                        }
                    }
                }));
            }
        }
        tokio::time::sleep(load.warm_up).await;
        let (commands_before, scripts_before) = commands(&mut conn);
        let calls_before = dependency.calls.load(Relaxed);
        let busy_before = dependency.busy_micros.load(Relaxed);
        let began = Instant::now();
        tokio::time::sleep(load.measure).await;
        let took = began.elapsed();
        let calls = dependency.calls.load(Relaxed) - calls_before;
        let busy = dependency.busy_micros.load(Relaxed) - busy_before;
        let peak = dependency.peak.load(Relaxed);
        let (commands_after, scripts_after) = commands(&mut conn);
        stop.store(true, Relaxed);
        for task in tasks {
            let _ = task.await;
        }
        for fleet in &fleets {
            fleet.shutdown().await;
        }
        // The INFO that read the first count is in the second.
        let commands = (commands_after - commands_before).saturating_sub(1);
        let scripts = scripts_after - scripts_before;
        Figures {
            calls_per_sec: calls as f64 / took.as_secs_f64(),
            commands_per_call: commands as f64 / calls.max(1) as f64,
            scripts_per_call: scripts as f64 / calls.max(1) as f64,
            in_use: busy as f64 / (took.as_micros() as f64 * load.limit as f64),
            service_ms: busy as f64 / 1000.0 / calls.max(1) as f64,
            peak,
        }
    });
    drop(fleets);
    drop(runtime);
    drop(server);
    figures
}

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, got {v:?}"))
        })
}

fn summary(values: &mut [f64], digits: usize) -> String {
    values.sort_by(f64::total_cmp);
    format!(
        "{:.d$} [{:.d$} {:.d$}]",
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
        d = digits
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo test --benches` runs benches with `--test`: a smoke run only.
    let smoke = args.iter().any(|a| a == "--test");
    let load = Load {
        clients: arg(&args, "--clients", 16) as usize,
        limit: arg(&args, "--limit", 512) as usize,
        warm_up: Duration::from_secs(if smoke { 1 } else { 2 }),
        measure: Duration::from_secs(arg(&args, "--seconds", if smoke { 1 } else { 5 })),
    };
    let rounds = arg(&args, "--rounds", if smoke { 1 } else { 3 }) as usize;
    if start_server().is_none() {
        eprintln!("skipped: redis-server is not installed or did not start");
        return;
    }
    let mut results: Vec<(Design, Vec<Figures>)> =
        vec![(Design::PerCall, Vec::new()), (Design::Shares, Vec::new())];
    for round in 1..=rounds {
        for (design, figures) in &mut results {
            let f = run(*design, &load);
            eprintln!("round {round} {design:?}: {f:?}");
            figures.push(f);
        }
    }
    let load_average = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{} clients, limit {}, 5 ms calls, {} callers a client, {} s a round, {rounds} rounds; \
         load average at the end: {}",
        load.clients,
        load.limit,
        3 * load.limit / load.clients,
        load.measure.as_secs(),
        load_average
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!();
    println!(
        "| design | calls/s | Redis commands/call | scripts/call | limit in use | time in service | most in service |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (design, figures) in &results {
        let pick = |f: fn(&Figures) -> f64| figures.iter().map(f).collect::<Vec<f64>>();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            match design {
                Design::PerCall => "per-call leases (`store`)",
                Design::Shares => "shares (`shares`)",
            },
            summary(&mut pick(|f| f.calls_per_sec), 0),
            summary(&mut pick(|f| f.commands_per_call), 4),
            summary(&mut pick(|f| f.scripts_per_call), 4),
            summary(&mut pick(|f| f.in_use * 100.0), 1) + " %",
            summary(&mut pick(|f| f.service_ms), 2) + " ms",
            figures.iter().map(|f| f.peak).max().unwrap_or(0),
        );
    }
}
