//! `inflight pool-bench`: a fixed CPU-bound task on thread pools of several sizes, each in a child
//! process inside a cgroup with a real CPU quota (`--cpus`), with latency percentiles and throttling.

use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::Context;
use inflight_bench::pool::{
    self, BenchError, BenchReport, Cleanup, SweepConfig, SweepEvent, SweepOutcome,
};
use inflight_bench::shutdown::Shutdown;
use inflight_cpu::Enforcement;

/// The longest one pool size may run.
const MAX_DURATION: Duration = Duration::from_secs(600);

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  sudo inflight pool-bench --cpus 1 --pools 1,2,4,8 --duration 5s
  inflight pool-bench --no-limit --json > pools.json")]
pub struct Args {
    /// CPU quota to enforce, in CPUs (fractional allowed, e.g. 1 or 0.5): the tool creates a
    /// cgroup with this quota, runs each pool size in a child process inside it, then removes it.
    /// At most the CPUs this process can use. Without it the pools run under whatever limits
    /// this process already has.
    #[arg(long, value_name = "N", value_parser = parse_cpus, allow_hyphen_values = true)]
    cpus: Option<f64>,

    /// Pool sizes to run, comma-separated, each 1 to 1024.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "1,2,4,8",
        value_parser = clap::value_parser!(u32).range(1..=1024)
    )]
    pools: Vec<u32>,

    /// How long each pool size runs (e.g. 5s, 500ms; at most 10m).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = super::args::duration_up_to(MAX_DURATION))]
    duration: Duration,

    /// Target length of one task on an idle CPU, in microseconds; calibrated once, then the same
    /// task runs for every pool size.
    #[arg(long, value_name = "US", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    task_us: u64,

    /// If the quota cannot be enforced, run anyway without one (enforcement "none").
    #[arg(long)]
    no_limit: bool,

    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,

    /// Internal: run one pool size in this process and print its result as JSON.
    #[arg(long, hide = true, value_name = "POOL")]
    child_pool: Option<usize>,

    /// Internal: the calibrated task size for --child-pool.
    #[arg(long, hide = true, value_name = "ITERS")]
    child_iters: Option<u64>,
}

fn parse_cpus(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of CPUs (e.g. 1, 0.5, 2)"))?;
    if !v.is_finite() {
        return Err(format!(
            "{s} CPUs: the quota must be a finite number of CPUs"
        ));
    }
    if v <= 0.0 {
        return Err(format!("{s} CPUs: the quota must be greater than 0"));
    }
    if v < 0.01 {
        return Err(format!(
            "{s} CPUs: the smallest quota the kernel accepts is 0.01 CPUs (1 ms per 100 ms period)"
        ));
    }
    if v > 4096.0 {
        return Err(format!("{s} CPUs: more than 4096 is not a useful quota"));
    }
    Ok(v)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(pool) = args.child_pool {
        let iters = args
            .child_iters
            .context("--child-pool needs --child-iters")?;
        let run = pool::run_pool(pool, args.duration, iters);
        println!("{}", serde_json::to_string(&run)?);
        return Ok(ExitCode::SUCCESS);
    }

    // From here on Ctrl-C (or SIGTERM) stops the child and removes the cgroup before exiting.
    let shutdown =
        Shutdown::on_signals_in_background().context("cannot install the Ctrl-C handler")?;
    let exe = std::env::current_exe().context("cannot find this program to run the pools")?;
    let config = SweepConfig {
        cpus: args.cpus,
        allow_unenforced: args.no_limit,
        pools: args.pools.iter().map(|&p| p as usize).collect(),
        duration: args.duration,
        task: Duration::from_micros(args.task_us),
    };
    let child = |spec: &pool::ChildSpec| {
        let mut cmd = Command::new(&exe);
        cmd.args([
            "pool-bench",
            "--child-pool",
            &spec.pool.to_string(),
            "--child-iters",
            &spec.iters.to_string(),
            "--duration",
            &format!("{}ns", spec.duration.as_nanos()),
        ]);
        cmd
    };
    let outcome = match pool::sweep(&config, child, &shutdown, print_progress) {
        Ok(outcome) => outcome,
        Err(BenchError::Quota { cpus, source }) => {
            return Err(anyhow::Error::new(source).context(format!(
                "cannot enforce --cpus {cpus}, so the benchmark would not measure what it claims; pass --no-limit to run without a quota"
            )))
        }
        Err(e @ BenchError::MoreThanAvailable { .. }) => {
            return Err(anyhow::Error::new(e).context("--cpus"))
        }
        Err(e) => {
            let context = match e.pool() {
                Some(pool) => format!("pool {pool} failed"),
                None => "the pool benchmark failed".to_string(),
            };
            return Err(anyhow::Error::new(e).context(context));
        }
    };
    match outcome {
        SweepOutcome::Complete { report, cleanup } => {
            if let Cleanup::Failed { path, error } = cleanup {
                eprintln!(
                    "warning: could not remove cgroup {}: {error}",
                    path.display()
                );
            }
            print_report(&report, args.duration, args.json)?;
            Ok(ExitCode::SUCCESS)
        }
        SweepOutcome::Interrupted { cleanup } => {
            match cleanup {
                Cleanup::Removed(path) => {
                    eprintln!("interrupted: stopped; removed cgroup {}", path.display())
                }
                Cleanup::Failed { path, error } => eprintln!(
                    "interrupted: stopped; could not remove cgroup {}: {error}",
                    path.display()
                ),
                Cleanup::NoGroup => eprintln!("interrupted: stopped"),
            }
            // The shell's status for a command ended by that signal (130 for Ctrl-C).
            Ok(ExitCode::from(shutdown.exit_code()))
        }
    }
}

/// The results, on stdout: one JSON object, or the table and its reading.
fn print_report(report: &BenchReport, duration: Duration, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
        return Ok(());
    }
    match (report.cpus, report.enforcement) {
        (Some(c), Enforcement::None) => {
            println!("pool-bench: asked for {c} CPUs, NOT enforced (--no-limit)")
        }
        (Some(c), e) => println!("pool-bench under a {c} CPU quota ({e})"),
        (None, _) => println!("pool-bench without a quota of its own (enforcement: none)"),
    }
    println!(
        "task: {:.1} us of arithmetic on an idle CPU; each pool runs {}",
        report.task_us,
        humantime::format_duration(duration)
    );
    println!();
    print!("{}", pool::render_table(report));
    println!();
    println!("{}", pool::interpret(report));
    Ok(())
}

/// Progress and warnings, on stderr.
fn print_progress(event: SweepEvent<'_>) {
    match event {
        SweepEvent::Unenforced { cpus, error } => {
            eprintln!("warning: cannot enforce --cpus {cpus}: {error}");
            eprintln!("warning: running without a quota (--no-limit): enforcement is \"none\"");
        }
        SweepEvent::Calibrated {
            iters,
            task_time,
            enforcement,
            group,
        } => eprintln!(
            "task: {iters} rounds of arithmetic, {:.1} us on an idle CPU (median); enforcement: {}{}",
            task_time.as_secs_f64() * 1e6,
            enforcement.as_str(),
            group
                .map(|g| format!(" ({} CPU quota in {})", g.cpus(), g.path().display()))
                .unwrap_or_default()
        ),
        SweepEvent::PoolStarted { pool, duration } => eprintln!(
            "pool {pool}: running for {}",
            humantime::format_duration(duration)
        ),
        _ => {}
    }
}
