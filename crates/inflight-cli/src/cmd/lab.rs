//! `inflight lab`: run the lab (`lab run`) and, hidden, one runner process (`lab runner`) that
//! `lab run` starts inside a CPU-quota cgroup.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::output::{self, note, outln};
use anyhow::Context;
use clap::Subcommand;
use inflight_cpu::Enforcement;
use inflight_lab::run::{self, LabArgs, LabError, LabRequest, ProgressReporter, Shutdown};
use inflight_lab::runner::{self, RunnerArgs};

/// The lab: strategies x scenarios under a real CPU quota, against simulated dependencies.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Debug, Subcommand)]
enum LabCommand {
    /// Run strategies x scenarios x CPU counts x repeats and write a report.
    ///
    /// With no flags it runs the matrix of the lab's matrix.toml: C1 in `healthy` at 1 and at 2
    /// CPUs, and C2, C3, C4, C4-64 and C5 in all three scenarios at 1 CPU, 5 repeats of 200
    /// records each (about 24 minutes). Each run is
    /// a separate runner process placed in a fresh cgroup with the CPU quota before its async
    /// runtime starts. Needs root (or a delegated cgroup) unless --no-limit.
    ///
    /// Each run is saved in the report folder's results.json as it finishes. Stopped early
    /// (Ctrl-C, SIGTERM), the lab discards the run in progress and writes a report of the runs
    /// that finished, marked partial; --resume DIR runs the rest with the same plan and seeds.
    Run(RunArgs),
    /// Write the report (summary.md, runs.csv, figures, index.html) again from a results.json.
    ///
    /// Useful after a newer `inflight` changed how reports look, or to put a report of an old run
    /// somewhere else. The runs are taken from the file as they are; the summary and the outcomes
    /// of the hypotheses it recorded are computed again from them, and the document so rebuilt is
    /// written with the report as results.json. A document whose runs are inconsistent (outcomes
    /// that do not add up to the records, repeats that do not match its settings, a run that
    /// appears twice), or whose summary holds cells or repeats its runs do not, is refused.
    Report(ReportArgs),
    /// One run of one strategy (started by `lab run` inside a cgroup); prints a JSON run result.
    #[command(hide = true)]
    Runner(RunnerArgs),
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Strategies in the built-in strategies.toml: c1, c2, c3, c4, c2-64, c4-64, c5, c4-proxy,
  c5-proxy (budgets in an inflight proxy the lab starts), tower-acc-gradient2, tower-acc-vegas,
  tower-resilience-aimd, tower-resilience-vegas, c4r, c4-fleet, c4r-fleet, c4-measured,
  c6 (C5 with back-pressure: honours Retry-After, retries within a retry budget),
  c5-tower-retry (C5 in tower's retry layer), c5-priority (C5 with priority classes interactive 4,
  batch 1), c5-priority-strict (the same with strict priority)
Scenarios in the built-in scenarios.toml: healthy, slow-write, slow-enrichment, degrading, quota,
  hard-limit (no queue: 503 beyond 6), priority (degrading with a fifth of the records
  interactive, the rest batch; reported by class)
(A lab/ folder in the current directory, or --lab-dir, may hold others; `lab run` names the
files it uses.)

Examples:
  sudo inflight lab run --quick
  sudo inflight lab run --strategies c4,c5 --scenarios degrading --repeats 3
  sudo inflight lab run --replicas 3 --strategies c4,c4-fleet --scenarios slow-write --quick
  sudo inflight lab run --replicas 3 --strategies c4r,c4r-fleet --scenarios quota
  sudo inflight lab run --strategies c5,c5-proxy --scenarios slow-write --quick
  sudo inflight lab run --strategies c5,c5-priority,c5-priority-strict --scenarios priority
  inflight lab run --no-limit --records 1000 --time-scale 0.2 --out /tmp/big --json > results.json
  sudo inflight lab run --resume lab-results/2026-11-30T10-00-00Z   # after Ctrl-C: the missing runs")]
struct RunArgs {
    /// Strategies to run, from `<lab-dir>/strategies.toml` (default: the matrix of matrix.toml; with
    /// --scenarios or --cpus alone: c1,c2,c3,c4).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    strategies: Option<Vec<String>>,
    /// Scenarios to run, from `<lab-dir>/scenarios.toml` (default: the matrix of matrix.toml; with
    /// --strategies or --cpus alone: healthy,slow-write,slow-enrichment).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    scenarios: Option<Vec<String>>,
    /// CPU quotas for the runner, e.g. `1` or `1,2` or `0.5`, at most the host's CPU count
    /// (default: the matrix of matrix.toml; with --strategies or --scenarios alone: 1).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "N",
        allow_negative_numbers = true
    )]
    cpus: Option<Vec<f64>>,
    /// Records per run (default 200).
    #[arg(long, allow_negative_numbers = true)]
    records: Option<u64>,
    /// Runs of each cell (default 5; 3 with --quick).
    #[arg(long, allow_negative_numbers = true)]
    repeats: Option<u32>,
    /// Multiplies every latency, hang and client timeout (default 1.0, the seed's timing; 0.2 with
    /// --quick).
    #[arg(long, value_name = "F", allow_negative_numbers = true)]
    time_scale: Option<f64>,
    /// Base seed (default 1); each (scenario, repeat) gets a seed derived from it, shared by all
    /// strategies.
    #[arg(long)]
    seed: Option<u64>,
    /// Where to write the report (default: a new folder `lab-results/<UTC date-time>`); a folder
    /// that already holds files is refused unless --replace is given.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Write the report over the files of a --out folder that already holds some.
    #[arg(long)]
    replace: bool,
    /// Continue the partial run in DIR (one stopped by Ctrl-C, SIGTERM or a kill): run only the
    /// runs it lacks, with its plan (cells, repeats, records, time scale, strategies, scenarios
    /// and hypotheses as they were) and seeds, and write the complete report there. Flags that set
    /// the plan may be given only with the plan's values; the runs must be measured by the same
    /// build of inflight (release or debug) as the first part's, which the partial report names.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["out", "replace"])]
    resume: Option<PathBuf>,
    /// Print the results document as JSON on stdout (tables and progress go to stderr).
    #[arg(long)]
    json: bool,
    /// Use a running `inflight sim` at this loopback URL instead of starting one.
    #[arg(long, value_name = "URL")]
    sim_url: Option<String>,
    /// Time scale 0.2 and 3 repeats: the default matrix in about three minutes, its
    /// medians within about 3% of a full run's (lab/README.md: "Quick mode and the full run").
    #[arg(long)]
    quick: bool,
    /// Each runner serves its budgets' metrics as Prometheus text at http://ADDR/metrics while
    /// its run lasts (a loopback address, e.g. 127.0.0.1:9464); the sim serves its own at
    /// <sim url>/metrics.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Run without a CPU quota if none can be enforced (C1 then sees all host CPUs): the report
    /// labels every cell unlimited and skips the hypotheses that compare CPU counts.
    #[arg(long)]
    no_limit: bool,
    /// Split each run between N runner processes, each in its own CPU quota of --cpus, against
    /// the one sim: N replicas of a service sharing its dependencies (1 to 16).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    replicas: Option<u32>,
    /// The Redis that fleet budgets (strategies with scope = "fleet", e.g. c4-fleet) keep their
    /// permits in, on loopback (default: the lab starts a redis-server of its own on a free port
    /// and stops it afterwards). The lab deletes its budgets' keys (inflight:{records}:* and
    /// inflight:{enrichment}:*) there before each run.
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    /// Folder holding strategies.toml, scenarios.toml and hypotheses.toml, and optionally
    /// matrix.toml and reference.toml (default `lab`, else the `lab` folder of the workspace the
    /// binary was built in, else the copies built into the binary). The lab says at start-up
    /// which it uses, and results.json keeps it (meta.plan.lab_files).
    #[arg(long, value_name = "DIR")]
    lab_dir: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  inflight lab report lab-results/2026-11-30T10-00-00Z/results.json --out /tmp/report
  inflight lab report lab-results/2026-11-30T10-00-00Z")]
struct ReportArgs {
    /// The results.json a `lab run` wrote, or the folder holding it.
    results: PathBuf,
    /// Where to write the report and the rebuilt results.json (default: the folder holding
    /// RESULTS, whose results.json is then rewritten).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The lab folder whose hypotheses.toml and reference.toml to use, as `lab run --lab-dir`
    /// takes it (default: as for `lab run`).
    #[arg(long, value_name = "DIR")]
    lab_dir: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        LabCommand::Run(args) => run_lab(args),
        LabCommand::Report(args) => rewrite_report(args),
        LabCommand::Runner(args) => run_runner(args),
    }
}

fn rewrite_report(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let rewritten =
        run::rewrite_report(&args.results, args.out.as_deref(), args.lab_dir.as_deref())?;
    for change in &rewritten.changes {
        note!("lab report: {change}");
    }
    let doc = &rewritten.doc;
    output::out(&inflight_lab::report::terminal_summary(doc))?;
    outln!("")?;
    output::out(&inflight_lab::report::hypotheses_table(doc))?;
    note!(
        "report written to {}",
        rewritten.dir.join("index.html").display()
    );
    Ok(ExitCode::SUCCESS)
}

fn run_runner(args: RunnerArgs) -> anyhow::Result<ExitCode> {
    let config = args.config()?;
    if args.exit_on_stdin_close {
        std::thread::spawn(|| {
            super::wait_for_stdin_close();
            std::process::exit(3);
        });
    }
    // Built with defaults, like a service's runtime, so its worker count follows the CPU quota.
    let rt = super::async_runtime()?;
    let result = rt.block_on(runner::run(&config))?;
    let json = serde_json::to_string(&result).context("cannot serialise the run result")?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{json}")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

impl From<RunArgs> for LabArgs {
    fn from(a: RunArgs) -> LabArgs {
        LabArgs {
            strategies: a.strategies,
            scenarios: a.scenarios,
            cpus: a.cpus,
            records: a.records,
            repeats: a.repeats,
            time_scale: a.time_scale,
            seed: a.seed,
            out: a.out,
            replace: a.replace,
            resume: a.resume,
            sim_url: a.sim_url,
            quick: a.quick,
            metrics_addr: a.metrics_addr,
            no_limit: a.no_limit,
            replicas: a.replicas,
            redis_url: a.redis_url,
            lab_dir: a.lab_dir,
        }
    }
}

fn run_lab(args: RunArgs) -> anyhow::Result<ExitCode> {
    let json = args.json;
    let rt = super::async_runtime()?;
    // Watched from the start: a signal at any point ends in a message that says what was kept.
    let shutdown = rt.block_on(async { Shutdown::on_signals() });
    let exe = std::env::current_exe().context("cannot find the inflight binary to start")?;
    let request = LabRequest::resolve(args.into(), exe)?;
    note!("lab: lab files from {}", request.lab().files.origin());
    note!("{}", request.describe());
    for note in request.notes() {
        note!("lab: note: {note}");
    }
    let mut lab_run = request.open()?;
    let result = rt.block_on(async {
        let mut reporter = ProgressReporter::new();
        let result = lab_run
            .run(request.options(), &shutdown, &mut |p| reporter.report(p))
            .await;
        reporter.finish();
        result
    });
    let end = lab_run.conclude(result, request.hypotheses(), &request.lab().reference)?;
    if end.interrupted() {
        let by = shutdown.signal_name().unwrap_or("a signal");
        // On its own line, whatever the progress bar left on the terminal.
        note!("\nlab: interrupted by {by}; stopped the runner and the sim and removed the cgroups");
    }
    if let Some(doc) = &end.kept {
        let summary = inflight_lab::report::terminal_summary(doc);
        let hypotheses_table = inflight_lab::report::hypotheses_table(doc);
        if json {
            let text = serde_json::to_string_pretty(doc).context("cannot serialise the results")?;
            outln!("{text}")?;
            note!("{summary}\n{hypotheses_table}");
        } else {
            outln!("{summary}\n{hypotheses_table}")?;
        }
        if doc.meta.enforcement == Enforcement::None {
            note!("lab: note: no CPU quota was enforced (--no-limit); the runs used all host CPUs");
        }
    }
    if let Some(kept) = end.kept_line() {
        note!("lab: {kept}");
    }
    if let Some(doc) = &end.kept {
        note!(
            "lab: report in {} (open {})",
            end.dir.display(),
            end.dir.join("index.html").display()
        );
        if doc.meta.partial {
            // This binary: a resumed run must be measured by the same build.
            note!(
                "lab: run the rest with: {} lab run --resume {}",
                request.options().exe.display(),
                end.dir.display()
            );
        }
    }
    // The exit status: 0 when the lab ran to the end, 128 + the signal when interrupted (130
    // for Ctrl-C, 143 for SIGTERM), else the error (exit 2).
    match end.stopped {
        None => Ok(ExitCode::SUCCESS),
        Some(LabError::Interrupted) => Ok(ExitCode::from(shutdown.exit_code())),
        Some(e) => Err(e.into()),
    }
}
