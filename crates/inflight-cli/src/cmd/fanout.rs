//! `inflight fanout`: unbounded and bounded fan-out strategies against a stand-in downstream that
//! counts its callers: peak concurrency, wall time against the ideal bounded time, and what each
//! strategy builds up front.

use std::process::ExitCode;
use std::time::Duration;

use crate::output::{self, note, outln};
use anyhow::Context;
use inflight_bench::fanout::{self, Delay, FanoutConfig, FanoutStrategy};
use inflight_bench::timer::PreciseTimer;

/// The longest one downstream call may take.
const MAX_DELAY: Duration = Duration::from_secs(10);

/// The longest a whole run may be planned to take.
const MAX_PLANNED: Duration = Duration::from_secs(600);

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  inflight fanout --jobs 500 --delay 20ms --limit 8
  inflight fanout --json | jq '.results[] | {strategy, median_ms, ratio_to_ideal}'")]
pub struct Args {
    /// How many calls to send to the downstream (1 to 1,000,000).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    jobs: u64,

    /// How long one downstream call takes (e.g. 20ms; at most 10s).
    #[arg(long, value_name = "DURATION", default_value = "20ms", value_parser = super::args::duration_up_to(MAX_DELAY))]
    delay: Duration,

    /// The bound of the bounded strategies: calls in flight at once (1 to 100,000).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    limit: u64,

    /// Measured rounds per strategy, after one warm-up round (1 to 100).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    rounds: u64,

    /// The timer the downstream sleeps on: `precise` (a parked thread, tens of microseconds of
    /// slack) or `tokio` (1 ms ticks, deadlines rounded up).
    #[arg(long, default_value = "precise", value_parser = ["precise", "tokio"])]
    timer: String,

    /// Strategies to run, comma-separated: unbounded, buffer_unordered, semaphore, joinset, budget.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "unbounded,buffer_unordered,semaphore,joinset,budget",
        value_parser = parse_strategy
    )]
    strategies: Vec<FanoutStrategy>,

    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

fn parse_strategy(s: &str) -> Result<FanoutStrategy, String> {
    FanoutStrategy::parse(s.trim()).ok_or_else(|| {
        format!(
            "unknown strategy {s:?}; expected one of: {}",
            FanoutStrategy::ALL.map(|k| k.name()).join(", ")
        )
    })
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = FanoutConfig {
        jobs: args.jobs as usize,
        delay: args.delay,
        limit: args.limit as usize,
        rounds: args.rounds as usize,
        strategies: args.strategies.clone(),
    };
    // Bound the whole run before starting it: every strategy runs rounds + 1 times.
    let planned = config.planned();
    anyhow::ensure!(
        planned <= MAX_PLANNED,
        "this run would take at least {} (ceil(jobs / limit) waves of the delay per bounded round); the limit is {}: lower --jobs, --rounds or --delay, or raise --limit",
        humantime::format_duration(Duration::from_millis(planned.as_millis() as u64)),
        humantime::format_duration(MAX_PLANNED)
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    let timer = match args.timer.as_str() {
        "tokio" => Delay::Tokio,
        _ => Delay::Precise(PreciseTimer::new()),
    };
    note!(
        "planned: at least {} in all",
        humantime::format_duration(Duration::from_millis(planned.as_millis() as u64))
    );
    let report = runtime
        .block_on(fanout::run(&config, timer, |stage| {
            note!("running {stage}");
        }))
        .context("the fan-out benchmark failed")?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        output::out(&fanout::render(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}
