//! `proxy-bench`: the proxy benchmark (`run`, which `scripts/bench-proxy.sh` calls), and its
//! steps on their own: the upstream every proxy forwards to, the load generator, the
//! idle-connection memory reading.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use inflight_bench::proxy_bench::host::Pinning;
use inflight_bench::proxy_bench::instructions;
use inflight_bench::proxy_bench::plan::{LoadPoint, Settings, Who};
use inflight_bench::proxy_bench::report::Completion;
use inflight_bench::proxy_bench::run::{self, Progress, RunConfig};
use inflight_bench::proxy_bench::servers::Tools;
use inflight_bench::proxy_bench::{self, idle, load, upstream, ProxyBenchError, Target};
use inflight_bench::shutdown::Shutdown;
use serde_json::{json, Map, Value};

#[derive(Parser)]
#[command(
    name = "proxy-bench",
    about = "inflight proxy against HAProxy and nginx: the whole benchmark (run), or its steps"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const RUN_HELP: &str = "\
Starts one upstream and, in front of it, `inflight proxy`, HAProxy and nginx, each pinned to
CPU 1 (--proxy-cpu) and in a cgroup with a quota of one CPU (where the machine allows it; the
output says plainly when it does not), with the load generator and the upstream on CPU 0
(--load-cpu). Each repeat measures every target, starting at target `repeat mod N` in the order
direct, inflight, haproxy, nginx:
  - memory per idle connection: --idle-connections keep-alive connections (one request each,
    then idle) on a fresh proxy;
  - saturation: closed loop, --connections connections: 2xx/s, CPU µs and instructions per
    answer (instructions where `perf stat -e instructions` works; else said, and null; or,
    with --instructions callgrind, counted in a step of their own under valgrind);
  - latency: open loop at 10%, 25% and 50% of the target's saturation in that repeat (or at
    --rate for all), from each request's scheduled send; a run whose generator sent late (send
    lag p99 over 100 µs) is discarded and run again (--retries);
  - a budget of 6 over a 20 ms upstream, 64 closed-loop clients (Little's law: 300/s).
Tables (medians, min-max) and the goals on stdout, progress on stderr, every measurement in the
JSON file. Ctrl-C or SIGTERM stops what was started, removes the cgroups and writes what
finished, marked partial. Needs root for the cgroups; only 127.0.0.1 is used.

Example:
  proxy-bench run --duration 5 --repeats 10 --json run.json
  proxy-bench run --only direct,inflight --duration 0.5 --repeats 2 --idle-connections 100";

#[derive(Subcommand)]
enum Command {
    /// Run the whole benchmark: every case, every target, repeated and interleaved.
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
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
        /// Write every measured request of the open loop to this CSV file (`at_us`, when it
        /// was scheduled from the start of the measured time; `latency_us`, 0 for no answer;
        /// `connection`): where in time the slow answers fall.
        #[arg(long, requires = "rate")]
        samples: Option<std::path::PathBuf>,
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
}

#[derive(clap::Args)]
struct RunArgs {
    /// Measured seconds of each load step.
    #[arg(long, default_value_t = 5.0, value_parser = positive)]
    duration: f64,
    /// Unmeasured seconds of load before each load step.
    #[arg(long, default_value_t = 1.0, value_parser = non_negative)]
    warmup: f64,
    /// Repeats of every case for every target (interleaved, in a rotating order).
    #[arg(long, default_value_t = 10, value_parser = at_least_one)]
    repeats: usize,
    /// Offer the latency case at this many requests per second for every target, instead of at
    /// 10%, 25% and 50% of each one's saturation.
    #[arg(long, value_parser = positive)]
    rate: Option<f64>,
    /// Where to write the JSON document [default: target/bench-proxy/DATE.json].
    #[arg(long)]
    json: Option<PathBuf>,
    /// Keep the configuration files and the logs (kept anyway when the run fails).
    #[arg(long)]
    keep_logs: bool,
    /// Do not put the proxies in cgroups with a quota of one CPU (they stay pinned to their CPU).
    #[arg(long)]
    no_cgroup: bool,
    /// Let the load generator's CPU halt when idle during the latency runs. By default its
    /// idle states deeper than polling are switched off for them (as root, where the kernel
    /// lists them) and set back after, so that a scheduled send does not wait for a halted
    /// CPU to wake.
    #[arg(long)]
    load_cpu_may_idle: bool,
    /// Idle keep-alive connections held while each proxy's memory is read.
    #[arg(long, default_value_t = 10_000, value_parser = at_least_one)]
    idle_connections: usize,
    /// Seconds the idle connections stay idle before the memory is read.
    #[arg(long, default_value_t = 2.0, value_parser = non_negative)]
    idle_settle: f64,
    /// Client connections of the load steps.
    #[arg(long, default_value_t = 64, value_parser = at_least_one)]
    connections: usize,
    /// How many times a latency run discarded for its send lag is run again.
    #[arg(long, default_value_t = 2)]
    retries: usize,
    /// The targets to measure, comma-separated: direct, inflight, haproxy, nginx.
    #[arg(long, default_value = "direct,inflight,haproxy,nginx", value_parser = targets)]
    only: Targets,
    /// The `inflight` binary [default: the one next to proxy-bench, else on PATH].
    #[arg(long)]
    inflight: Option<PathBuf>,
    /// The `haproxy` binary.
    #[arg(long, default_value = "haproxy")]
    haproxy: PathBuf,
    /// The `nginx` binary.
    #[arg(long, default_value = "nginx")]
    nginx: PathBuf,
    /// The CPU of the proxy under test.
    #[arg(long, default_value_t = 1)]
    proxy_cpu: usize,
    /// The CPU of the load generator and the upstream.
    #[arg(long, default_value_t = 0)]
    load_cpu: usize,
    /// How to count the instructions each proxy executes per answer.
    #[arg(long, value_enum, default_value_t = Instructions::Perf)]
    instructions: Instructions,
    /// Requests counted in each callgrind step (with --instructions callgrind).
    #[arg(long, default_value_t = 2000, value_parser = at_least_one)]
    callgrind_requests: usize,
    /// Routes in front of inflight's listener that no request matches, each request checked
    /// against all of them: what a routing table costs, next to a run without (0).
    #[arg(long, default_value_t = 0)]
    inflight_routes: usize,
    /// The first of 7 consecutive loopback ports to use [default: any free ones].
    #[arg(long)]
    base_port: Option<u16>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Instructions {
    /// `perf stat -e instructions` over each saturation step, where the machine supports it
    /// (the output says when not).
    Perf,
    /// A step of its own per proxy and repeat: a fresh proxy under valgrind's callgrind (user
    /// space only), --callgrind-requests requests on 4 connections after 200 to warm it; its
    /// cache simulation counts the level-1 data cache misses too.
    Callgrind,
    /// Do not count them.
    Off,
}

#[derive(Clone)]
struct Targets(Vec<Who>);

fn targets(s: &str) -> Result<Targets, String> {
    Who::parse_list(s).map(Targets)
}

#[derive(clap::Args)]
struct Label {
    /// The case this measures (saturation, latency, budget, idle).
    #[arg(long = "case", value_parser = clap::builder::PossibleValuesParser::new(["saturation", "latency", "budget", "idle"]))]
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

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("expected a whole number of at least 1, got {s:?}")),
    }
}

fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("expected a number of at least 0, got {s:?}")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Run(args) = cli.command {
        return run_benchmark(args);
    }
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
    match runtime.block_on(step(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("proxy-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Progress on stderr; the document so far written to the JSON file after each step.
struct Output {
    json: PathBuf,
}

impl Progress for Output {
    fn line(&mut self, line: &str) {
        eprintln!("{line}");
    }

    fn checkpoint(&mut self, document: &Value) {
        if let Err(e) = write_json(&self.json, document) {
            eprintln!("proxy-bench: warning: {e:#}");
        }
    }
}

/// Writes `document` to `path` whole or not at all (a temporary file renamed over it).
fn write_json(path: &Path, document: &Value) -> anyhow::Result<()> {
    let tmp = path.with_extension("json.partial");
    let text = serde_json::to_string_pretty(document)? + "\n";
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

fn run_benchmark(args: RunArgs) -> ExitCode {
    // Pinned before the runtime starts its threads: they inherit the CPU.
    let pinning = Pinning::pin_this_thread(args.proxy_cpu, args.load_cpu);
    match try_run(args, pinning) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("proxy-bench: {e:#}");
            let bad_input = e
                .downcast_ref::<ProxyBenchError>()
                .is_some_and(|e| matches!(e, ProxyBenchError::Plan(_)));
            ExitCode::from(if bad_input { 2 } else { 1 })
        }
    }
}

fn try_run(args: RunArgs, pinning: Pinning) -> anyhow::Result<ExitCode> {
    let settings = Settings {
        targets: args.only.0.clone(),
        repeats: args.repeats,
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
        connections: args.connections,
        points: match args.rate {
            Some(rate) => vec![LoadPoint::Rate(rate)],
            None => Settings::default().points,
        },
        retries: args.retries,
        idle_connections: args.idle_connections,
        idle_settle: Duration::from_secs_f64(args.idle_settle),
        request_timeout: Duration::from_secs(10),
        callgrind_requests: args.callgrind_requests,
        inflight_routes: args.inflight_routes,
    };
    settings.check()?;
    let json_path = match &args.json {
        Some(path) => path.clone(),
        None => default_json_path(),
    };
    if let Some(dir) = json_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let work = tempfile::Builder::new()
        .prefix("proxy-bench.")
        .tempdir()
        .context("cannot create a folder for the configuration files and logs")?;
    let exe = std::env::current_exe().context("cannot find proxy-bench's own path")?;
    let tools = Tools {
        inflight: args.inflight.clone().unwrap_or_else(|| {
            let sibling = exe.with_file_name("inflight");
            if sibling.is_file() {
                sibling
            } else {
                PathBuf::from("inflight")
            }
        }),
        haproxy: args.haproxy.clone(),
        nginx: args.nginx.clone(),
        proxy_bench: exe,
    };
    let config = RunConfig {
        settings,
        tools,
        cgroup: !args.no_cgroup,
        awake_load_cpu: !args.load_cpu_may_idle,
        pinning,
        instructions: match args.instructions {
            Instructions::Perf => instructions::Mode::Perf,
            Instructions::Callgrind => instructions::Mode::Callgrind,
            Instructions::Off => instructions::Mode::Off,
        },
        base_port: args.base_port,
        work_dir: work.path().to_path_buf(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let mut output = Output {
        json: json_path.clone(),
    };
    let (outcome, exit) = runtime.block_on(async {
        let shutdown = Shutdown::on_signals();
        let outcome = run::run(config, meta(), &shutdown, &mut output).await;
        (outcome, shutdown.exit_code())
    });
    let keep = |work: tempfile::TempDir, why: &str| {
        let path = work.keep();
        eprintln!(
            "proxy-bench: configuration files and logs kept in {} ({why})",
            path.display()
        );
    };
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => {
            keep(work, "the run failed");
            return Err(e.into());
        }
    };
    let mut stdout = std::io::stdout().lock();
    // A closed pipe is not an error: the JSON file still gets written.
    let _ = write!(stdout, "{}", outcome.tables);
    write_json(&json_path, &outcome.document)?;
    let _ = writeln!(stdout, "\nJSON: {}", json_path.display());
    let code = match &outcome.completion {
        Completion::Complete => ExitCode::SUCCESS,
        Completion::Stopped(why) if why.starts_with("error: ") => {
            keep(work, "the run failed");
            return Ok(ExitCode::FAILURE);
        }
        Completion::Stopped(_) | Completion::Running => ExitCode::from(exit),
    };
    if args.keep_logs {
        keep(work, "--keep-logs");
    }
    Ok(code)
}

/// `$CARGO_TARGET_DIR/bench-proxy/DATE.json`, or `target/bench-proxy/DATE.json`.
fn default_json_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(':', "");
    target.join("bench-proxy").join(format!("{stamp}.json"))
}

/// What the run records about itself: the date, the commit, the machine, the command line.
fn meta() -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert(
        "date".into(),
        json!(humantime::format_rfc3339_seconds(SystemTime::now()).to_string()),
    );
    let commit = std::process::Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "describe",
            "--always",
            "--dirty",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    meta.insert("commit".into(), json!(commit));
    meta.insert("machine".into(), json!(machine()));
    meta.insert(
        "command".into(),
        json!(std::env::args().collect::<Vec<_>>().join(" ")),
    );
    meta
}

/// `2 CPUs (MODEL), 24 GiB`.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let online = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    format!("{online} CPUs ({model}), {:.0} GiB", mem_kib / 1_048_576.0)
}

async fn step(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run(_) => unreachable!("run has its own runtime"),
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
            let shutdown = Shutdown::on_signals();
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
            samples,
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
                count_instructions: false,
                samples: samples.is_some(),
            };
            let measured = load::run(plan).await?;
            if let Some(path) = &samples {
                let mut csv = String::from("at_us,latency_us,connection\n");
                for sample in &measured.samples {
                    csv.push_str(&format!(
                        "{},{},{}\n",
                        sample.at_us, sample.latency_us, sample.connection
                    ));
                }
                std::fs::write(path, csv)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
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
