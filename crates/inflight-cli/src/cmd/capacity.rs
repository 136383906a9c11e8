//! `inflight capacity`: sweep concurrency against one endpoint, find the knee (capacity and
//! service time), and print the budget to configure.

use std::num::NonZeroU64;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::output::{self, note, outln};
use anyhow::Context;
use inflight_bench::shutdown::Shutdown;
use inflight_capacity::knee::{KneeRules, Verdict};
use inflight_capacity::{
    svg, CapacityError, InFlightSource, Levels, Progress, Stop, Sweep, Target,
};

/// `{n}` as help text shows it. clap turns a literal `{n}` anywhere in help into a line break,
/// so the two halves are kept apart by an empty style reset: invisible on a terminal, and removed
/// with the other styling when help is piped.
macro_rules! counter {
    () => {
        "{\x1b[0mn}"
    };
}

const AFTER_HELP: &str = concat!(
    "Measurement: p50, p99 and max are the latencies of the calls answered 2xx only; failed calls
are counted by kind under errors. A caller whose call failed at once (an error status, a refused
connection) waits about one service time before its next call, so a level's failed share is the
share of callers refused. A level with no full round of 2xx answers while every caller was busy
is marked (thin): its figures cover the whole level, warm-up and drain included.

Calls in flight as the target saw them: --target-in-flight URL#POINTER reads a number the target
reports about itself, GET URL and the JSON pointer (RFC 6901) after the `#`, every 10ms
(--target-in-flight-every) during each level over a connection of its own (never counted in the
levels). Each level then shows the most and the mean the target reported over the window its ok/s
is counted in (`target max`, `target mean`; `levels[].target_in_flight` in --json). A first
reading that fails stops the run before any call; later failed readings are counted and shown.

Safety: a loopback target (127.0.0.0/8, ::1, localhost) runs as given; any other host is someone's
service and needs --allow-remote (so does a --target-in-flight URL on another host). Every run is
bounded by a total request cap and a total time cap, printed before it starts. Ctrl-C stops at
once and prints what was measured so far.

Examples:
  inflight sim --port 7070 --scenario slow-write &
  inflight capacity http://127.0.0.1:7070/records --method POST \\
      --body '{\"id\": ",
    counter!(),
    ", \"complete\": true}' --max 32 --name records --svg capacity.svg \\
      --target-in-flight 'http://127.0.0.1:7070/stats#/records/in_service'
  inflight capacity http://127.0.0.1:7070/enrich/1 --levels 1,4,16,64 --json | jq .capacity"
);

/// The longest a per-level time or a per-call timeout may be.
const MAX_DURATION: Duration = Duration::from_secs(600);

/// Find a dependency's capacity and service time by measurement, and the budget to configure.
///
/// Keeps 1, 2, 4, 8, ... calls in flight against one endpoint, each level until --requests
/// calls or --duration, and measures throughput, p50/p99/max latency (of the calls answered 2xx
/// only) and failed calls by kind (and, with --target-in-flight, the calls in flight the target
/// itself reports). A caller whose call is refused (an error status, a refused connection) waits
/// about one service time before its next call, so a level's failed share is the share of
/// callers refused. A level without a full round of 2xx answers while every caller was busy is
/// marked (thin): its figures cover the whole level.
/// The capacity is the smallest concurrency whose throughput is at the plateau (within
/// --tolerance) before latency grows with a queue or calls fail; levels are added between
/// measured ones to pin it to one step. The service time is the median latency at the lowest
/// level. The climb stops at the first level with more than --stop-on-errors failed calls.
///
/// Results go to stdout (a table, or --json), progress to stderr. Exit status: 0 when levels
/// were measured (knee or not), 1 when every level failed too many calls, 2 on bad input or a
/// target that cannot be measured, 130 after Ctrl-C (what was measured is printed first).
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The endpoint to measure (http:// only).
    #[arg(value_name = "URL")]
    url: String,

    /// The HTTP method.
    #[arg(long, short = 'X', default_value = "GET")]
    method: String,

    /// A JSON request body; `{n}` is replaced by a counter (1, 2, 3, ...) on each call.
    #[arg(long, short = 'd', value_name = "TEMPLATE",
          help = concat!("A JSON request body; `", counter!(), "` is replaced by a counter (1, 2, 3, ...) on each call"))]
    body: Option<String>,

    /// A request header, `Name: value` (repeatable).
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    headers: Vec<String>,

    /// Concurrency levels to climb, comma-separated (e.g. 1,2,4,8,16).
    #[arg(long, value_name = "LIST", value_parser = parse_levels, conflicts_with = "max")]
    levels: Option<Levels>,

    /// Climb 1, 2, 4, 8, ... up to this concurrency (1 to 1024).
    #[arg(long, value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=inflight_capacity::MAX_CONCURRENCY as u64))]
    max: u64,

    /// The longest one level runs (it also ends after --requests calls).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = super::args::duration_up_to(MAX_DURATION))]
    duration: Duration,

    /// The most calls one level sends (it also ends after --duration).
    #[arg(long, value_name = "N", default_value = "200")]
    requests: NonZeroU64,

    /// How long one call may take before it counts as a timeout.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = super::args::duration_up_to(MAX_DURATION))]
    timeout: Duration,

    /// Stop climbing at the first level with more failed calls than this (e.g. 5%).
    #[arg(long, value_name = "PERCENT", default_value = "5%", value_parser = parse_error_threshold)]
    stop_on_errors: f64,

    /// How close to the plateau, and to full efficiency, counts as on it (e.g. 10%).
    #[arg(long, value_name = "PERCENT", default_value = "10%", value_parser = parse_tolerance)]
    tolerance: f64,

    /// The name of the suggested `[budgets.NAME]` table (default: from the URL's path).
    #[arg(long)]
    name: Option<String>,

    /// A lower total request cap than the levels imply.
    #[arg(long, value_name = "N")]
    total_requests: Option<NonZeroU64>,

    /// A lower total time cap than the levels imply.
    #[arg(long, value_name = "DURATION", value_parser = super::args::duration_up_to(MAX_DURATION))]
    total_time: Option<Duration>,

    /// Also read the target's own count of calls in flight during each level: GET URL, and the
    /// number at the JSON pointer after `#` (e.g. http://127.0.0.1:7070/stats#/records/in_service).
    #[arg(long, value_name = "URL#POINTER", value_parser = parse_source)]
    target_in_flight: Option<InFlightSource>,

    /// How often --target-in-flight is read during a level (one reading at a time).
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = super::args::duration_up_to(MAX_DURATION),
          requires = "target_in_flight")]
    target_in_flight_every: Duration,

    /// Acknowledge that the target (or the --target-in-flight URL) is not this machine and that
    /// you may load-test it.
    #[arg(long)]
    allow_remote: bool,

    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,

    /// Also write the figure (throughput and p99 against concurrency, the knee marked; with
    /// --target-in-flight, the target's calls in flight too) here.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

fn parse_levels(s: &str) -> Result<Levels, String> {
    Levels::parse(s).map_err(|e| e.to_string())
}

fn parse_source(s: &str) -> Result<InFlightSource, String> {
    s.parse()
        .map_err(|e: inflight_capacity::SourceError| e.to_string())
}

/// A percentage, `5%` or `5`, as a fraction.
fn parse_percent(s: &str) -> Result<f64, String> {
    let number = s.trim().trim_end_matches('%').trim();
    let v: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage (e.g. 5%)"))?;
    if !v.is_finite() {
        return Err(format!("{s:?} is not a percentage (e.g. 5%)"));
    }
    Ok(v / 100.0)
}

fn parse_error_threshold(s: &str) -> Result<f64, String> {
    let v = parse_percent(s)?;
    if !(0.0..1.0).contains(&v) {
        return Err(format!("must be at least 0% and below 100%, got {s}"));
    }
    Ok(v)
}

fn parse_tolerance(s: &str) -> Result<f64, String> {
    let v = parse_percent(s)?;
    if !(v > 0.0 && v < 0.5) {
        return Err(format!("must be above 0% and below 50%, got {s}"));
    }
    Ok(v)
}

fn target(args: &Args) -> anyhow::Result<Target> {
    let mut target = Target::new(&args.url)?
        .method(&args.method)
        .context("--method")?;
    if let Some(body) = &args.body {
        target = target.body(body).context("--body")?;
    }
    for header in &args.headers {
        target = target.header(header).context("--header")?;
    }
    if !target.is_loopback() && !args.allow_remote {
        anyhow::bail!(
            "refusing to load-test {}: it is not this machine; pass --allow-remote if it is yours to load or its owners agreed",
            target.url().host_str().unwrap_or("that host")
        );
    }
    Ok(target)
}

/// The source of the target's calls in flight, held to the same rule as the target.
fn in_flight_source(args: &Args) -> anyhow::Result<Option<InFlightSource>> {
    let Some(source) = &args.target_in_flight else {
        return Ok(None);
    };
    if !source.is_loopback() && !args.allow_remote {
        anyhow::bail!(
            "refusing to poll {} for --target-in-flight: it is not this machine; pass --allow-remote if it is yours to poll or its owners agreed",
            source.url().host_str().unwrap_or("that host")
        );
    }
    Ok(Some(source.clone()))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let target = target(&args)?;
    let source = in_flight_source(&args)?;
    let levels = match &args.levels {
        Some(levels) => levels.clone(),
        None => Levels::doubling(args.max)?,
    };
    let mut sweep = Sweep::new(target, levels)
        .requests_per_level(args.requests)
        .duration_per_level(args.duration)
        .timeout(args.timeout)
        .rules(KneeRules {
            tolerance: args.tolerance,
            stop_on_errors: args.stop_on_errors,
        });
    if let Some(source) = source {
        sweep = sweep
            .target_in_flight(source)
            .target_in_flight_every(args.target_in_flight_every);
    }
    if let Some(name) = &args.name {
        inflight_capacity::suggest::check_name(name).context("--name")?;
        sweep = sweep.name(name.clone());
    }
    if let Err(e) = sweep.check() {
        let flag = match &e {
            CapacityError::TooFewRequests { .. } => "--requests",
            CapacityError::Name(_) => "--name (the default from the URL does not fit)",
            _ => "settings",
        };
        return Err(anyhow::Error::new(e).context(flag));
    }
    if let Some(n) = args.total_requests {
        sweep = sweep.total_requests(n.get());
    }
    if let Some(d) = args.total_time {
        sweep = sweep.total_time(d);
    }
    let list: Vec<String> = sweep
        .levels()
        .as_slice()
        .iter()
        .map(|c| c.to_string())
        .collect();
    note!(
        "measuring {} {}: concurrency {} (and up to {} probes), each level {} calls or {}; {} in all",
        sweep.target().method_name(),
        sweep.target().url(),
        list.join(","),
        inflight_capacity::MAX_PROBES,
        args.requests,
        humantime::format_duration(args.duration),
        sweep.caps()
    );
    if let Some(source) = sweep.in_flight_source() {
        note!(
            "reading the target's calls in flight from {source} every {}",
            humantime::format_duration(sweep.in_flight_every())
        );
    }

    let runtime = super::async_runtime()?;
    let report = match runtime.block_on(async {
        let shutdown = Shutdown::on_signals();
        sweep.run(&shutdown, print_progress).await
    }) {
        Ok(report) => report,
        Err(CapacityError::Interrupted) => {
            note!("interrupted before the first level: nothing was measured");
            return Ok(ExitCode::from(130));
        }
        Err(e @ CapacityError::InFlight { .. }) => {
            return Err(anyhow::Error::new(e).context("--target-in-flight"))
        }
        Err(e) => return Err(e.into()),
    };

    if let Some(path) = &args.svg {
        std::fs::write(path, svg::figure(&report))
            .with_context(|| format!("cannot write the figure to {}", path.display()))?;
        note!("figure written to {}", path.display());
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        output::out(&report.render())?;
    }
    if let Some(e) = &report.suggest_error {
        note!("warning: no budget suggested: {e}");
    }
    Ok(match (&report.stopped, report.verdict) {
        (Some(Stop::Interrupted), _) => ExitCode::from(130),
        (_, Verdict::AllRefused { .. } | Verdict::NoData) => {
            note!("error: {}", report.conclusion());
            ExitCode::from(1)
        }
        _ => ExitCode::SUCCESS,
    })
}

fn print_progress(progress: Progress<'_>) {
    if let Progress::Measured(l) = progress {
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} ms"));
        let errors = if l.errors.total == 0 {
            "no errors".to_string()
        } else {
            format!("{} failed ({})", l.errors.total, l.errors.describe())
        };
        let target = match &l.target_in_flight {
            Some(t) => match (t.max, t.mean) {
                (Some(max), Some(mean)) => format!(
                    ", target in flight max {max} mean {mean:.1}{}",
                    if t.failed > 0 {
                        format!(" ({} failed)", readings(t.failed))
                    } else {
                        String::new()
                    }
                ),
                _ => format!(", target in flight unread ({} failed)", readings(t.failed)),
            },
            None => String::new(),
        };
        note!(
            "  concurrency {:>4}{}: {} call{}, {:.1}/s, p50 {}, p99 {} (2xx), {errors}{target}{}{}",
            l.concurrency,
            if l.refined { " (probe)" } else { "" },
            l.requests,
            if l.requests == 1 { "" } else { "s" },
            l.throughput_per_s,
            ms(l.p50_ms),
            ms(l.p99_ms),
            if l.thin { ", thin" } else { "" },
            if l.interrupted { ", interrupted" } else { "" }
        );
    }
}

/// `1 reading`, `2 readings`.
fn readings(n: u64) -> String {
    format!("{n} reading{}", if n == 1 { "" } else { "s" })
}
