//! `proxy-bench`: the steps of `scripts/bench-proxy.sh`: the upstream every proxy forwards to,
//! the load generator, the idle-connection memory reading, and the report.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use inflight_bench::proxy_bench::{self, idle, load, report, upstream, Target};
use serde_json::{json, Map, Value};

#[derive(Parser)]
#[command(
    name = "proxy-bench",
    about = "The proxy benchmark's steps (run by scripts/bench-proxy.sh)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve 200 with a 100-byte body: at once on /, after --slow-ms on /slow; counters on
    /// /_stats (reset by /_reset).
    Upstream {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// The delay of /slow, milliseconds.
        #[arg(long, default_value_t = 20.0, value_parser = non_negative)]
        slow_ms: f64,
        /// Exit after this many seconds even if not told to stop.
        #[arg(long, default_value_t = 1800.0, value_parser = positive)]
        exit_after: f64,
    },
    /// Send load to --url and append the measurement to --out as one JSON line.
    Load {
        /// http://IP:PORT/path
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 64)]
        connections: usize,
        /// Requests per second over all connections: an open loop. Without it, a closed loop.
        #[arg(long, value_parser = positive)]
        rate: Option<f64>,
        /// Measured seconds.
        #[arg(long, default_value_t = 10.0, value_parser = positive)]
        duration: f64,
        /// Unmeasured seconds first.
        #[arg(long, default_value_t = 2.0, value_parser = non_negative)]
        warmup: f64,
        /// Seconds before a request with no answer counts as an error.
        #[arg(long, default_value_t = 10.0, value_parser = positive)]
        timeout: f64,
        /// The upstream (IP:PORT) whose counters to reset before and read after.
        #[arg(long)]
        upstream: Option<SocketAddr>,
        /// A process (with its descendants) whose CPU time over the measured time to report;
        /// repeat for more.
        #[arg(long = "pid")]
        pids: Vec<u32>,
        #[command(flatten)]
        label: Label,
    },
    /// Open --connections keep-alive connections, one request each, hold them idle, and report
    /// how the resident memory of the --pid processes (and their descendants) grew.
    Idle {
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 1000)]
        connections: usize,
        /// A process to measure, with its descendants; repeat for more.
        #[arg(long = "pid", required = true)]
        pids: Vec<u32>,
        /// Seconds the connections stay idle before the memory is read again.
        #[arg(long, default_value_t = 2.0, value_parser = non_negative)]
        settle: f64,
        #[command(flatten)]
        label: Label,
    },
    /// Print the tables and goals of the lines in FILE; write the JSON document to --json.
    Report {
        file: PathBuf,
        #[arg(long)]
        json: Option<PathBuf>,
        /// KEY=VALUE recorded in the JSON's meta; repeat for more.
        #[arg(long = "meta", value_parser = key_value)]
        meta: Vec<(String, String)>,
    },
}

#[derive(clap::Args)]
struct Label {
    /// The case this measures (saturation, latency, budget, idle).
    #[arg(long = "case", value_parser = clap::builder::PossibleValuesParser::new(report::CASES))]
    case: String,
    /// Who is measured (direct, inflight, haproxy, nginx).
    #[arg(long)]
    proxy: String,
    /// The JSON-lines file the measurement is appended to.
    #[arg(long)]
    out: PathBuf,
}

fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("expected a positive number, got {s:?}")),
    }
}

fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("expected a number of at least 0, got {s:?}")),
    }
}

fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("proxy-bench: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("proxy-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Upstream {
            listen,
            slow_ms,
            exit_after,
        } => {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("cannot listen on {listen}"))?;
            let up =
                upstream::Upstream::spawn(listener, Duration::from_secs_f64(slow_ms / 1000.0))?;
            println!("proxy-bench upstream: listening on {}", up.local_addr());
            std::io::stdout().flush()?;
            let shutdown = inflight_bench::shutdown::Shutdown::on_signals();
            tokio::select! {
                _ = shutdown.wait() => {}
                _ = tokio::time::sleep(Duration::from_secs_f64(exit_after)) => {
                    eprintln!("proxy-bench upstream: exiting after {exit_after} s");
                }
            }
            Ok(())
        }
        Command::Load {
            url,
            connections,
            rate,
            duration,
            warmup,
            timeout,
            upstream,
            pids,
            label,
        } => {
            let target = Target::parse(&url)?;
            if let Some(up) = upstream {
                proxy_bench::reset_upstream(up)
                    .await
                    .with_context(|| format!("cannot reset the upstream at {up}"))?;
            }
            let plan = load::LoadPlan {
                target,
                connections,
                mode: match rate {
                    Some(rate) => load::Loop::Open { rate },
                    None => load::Loop::Closed,
                },
                warmup: Duration::from_secs_f64(warmup),
                duration: Duration::from_secs_f64(duration),
                request_timeout: Duration::from_secs_f64(timeout),
                pids,
            };
            let measured = load::run(plan).await?;
            let stats = match upstream {
                Some(up) => Some(
                    proxy_bench::upstream_stats(up)
                        .await
                        .with_context(|| format!("cannot read the upstream's counters at {up}"))?,
                ),
                None => None,
            };
            eprintln!(
                "  {} {}: {:.0} 2xx/s, p50 {:.3} ms, p99 {:.3} ms, {} non-2xx, {} errors{}",
                label.case,
                label.proxy,
                measured.ok_per_s,
                measured.latency_ms.p50,
                measured.latency_ms.p99,
                measured
                    .statuses
                    .iter()
                    .filter(|(s, _)| !(200..300).contains(*s))
                    .map(|(_, n)| n)
                    .sum::<u64>(),
                measured.errors,
                stats
                    .map(|s| format!(", upstream peak {}", s.peak))
                    .unwrap_or_default()
                    + &measured
                        .proxy_cpu_us_per_answer
                        .map(|us| format!(", proxy CPU {us:.1} us per answer"))
                        .unwrap_or_default()
            );
            append(
                &label,
                json!({"load": measured, "upstream": stats, "url": url}),
            )
        }
        Command::Idle {
            url,
            connections,
            pids,
            settle,
            label,
        } => {
            let plan = idle::IdlePlan {
                target: Target::parse(&url)?,
                connections,
                pids,
                settle: Duration::from_secs_f64(settle),
                request_timeout: Duration::from_secs(10),
            };
            let measured = idle::run(plan).await?;
            eprintln!(
                "  idle {}: {} of {} open, {} -> {} KiB over {} processes, {:.1} KiB per connection",
                label.proxy,
                measured.still_open,
                measured.opened,
                measured.rss_before_kib,
                measured.rss_after_kib,
                measured.processes,
                measured.kib_per_connection
            );
            append(&label, json!({"idle": measured, "url": url}))
        }
        Command::Report { file, json, meta } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let runs: Vec<_> = text.lines().filter_map(report::Run::parse).collect();
            if runs.is_empty() {
                anyhow::bail!("{} has no measurements", file.display());
            }
            let meta: Map<String, Value> = meta
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            let (table, doc) = report::render(&runs, meta);
            print!("{table}");
            if let Some(path) = json {
                std::fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            Ok(())
        }
    }
}

fn append(label: &Label, mut line: Value) -> anyhow::Result<()> {
    line["case"] = json!(label.case);
    line["proxy"] = json!(label.proxy);
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&label.out)
        .with_context(|| format!("cannot open {}", label.out.display()))?;
    writeln!(file, "{line}").with_context(|| format!("cannot write {}", label.out.display()))?;
    Ok(())
}
