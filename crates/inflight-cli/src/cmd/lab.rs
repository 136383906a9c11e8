//! `inflight lab`: run the lab (`lab run`) and, hidden, one runner process (`lab runner`) that
//! `lab run` starts inside a CPU-quota cgroup.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Subcommand;
use inflight_cpu::Enforcement;
use inflight_lab::files::{LabConfig, LabFiles};
use inflight_lab::run::{
    self, LabError, LabOptions, LabRun, OutDir, ProgressReporter, Resume, Setting, Shutdown,
};
use inflight_lab::runner::{self, RunnerConfig};
use inflight_lab::strategy;

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
    /// With no flags it runs the seed's matrix: C1 in `healthy` at 1 and at 2 CPUs, and C2-C4 in
    /// all three scenarios at 1 CPU, 5 repeats of 200 records each (about 20 minutes). Each run is
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
Strategies in lab/strategies.toml: c1, c2, c3, c4, c2-64, c4-64, c5, c4r, tower-acc-gradient2,
  tower-acc-vegas, tower-resilience-aimd, tower-resilience-vegas, c4-fleet, c4-measured
Scenarios in lab/scenarios.toml: healthy, slow-write, slow-enrichment, degrading, quota

Examples:
  sudo inflight lab run --quick
  sudo inflight lab run --strategies c4,c5 --scenarios degrading --repeats 3
  sudo inflight lab run --replicas 3 --strategies c4,c4-fleet --scenarios slow-write --quick
  inflight lab run --no-limit --records 1000 --time-scale 0.2 --out /tmp/big --json > results.json
  sudo inflight lab run --resume lab-results/2026-11-30T10-00-00Z   # after Ctrl-C: the missing runs")]
struct RunArgs {
    /// Strategies to run, from `<lab-dir>/strategies.toml` (default: the seed's matrix; with
    /// --scenarios or --cpus alone: c1,c2,c3,c4).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    strategies: Option<Vec<String>>,
    /// Scenarios to run, from `<lab-dir>/scenarios.toml` (default: the seed's matrix; with
    /// --strategies or --cpus alone: healthy,slow-write,slow-enrichment).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    scenarios: Option<Vec<String>>,
    /// CPU quotas for the runner, e.g. `1` or `1,2` or `0.5`, at most the host's CPU count
    /// (default: the seed's matrix; with --strategies or --scenarios alone: 1).
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
    /// runs it lacks, with its plan (cells, repeats, records, time scale, strategies and
    /// scenarios as they were) and seeds, and write the complete report there. Flags that set
    /// the plan may be given only with the plan's values.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["out", "replace"])]
    resume: Option<PathBuf>,
    /// Print the results document as JSON on stdout (tables and progress go to stderr).
    #[arg(long)]
    json: bool,
    /// Use a running `inflight sim` at this loopback URL instead of starting one.
    #[arg(long, value_name = "URL")]
    sim_url: Option<String>,
    /// Time scale 0.2 and 3 repeats: the default matrix in about two and a half minutes, its
    /// medians within about 3% of a full run's (README: "Quick mode and the full run").
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
    /// binary was built in, else the copies built into the binary).
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

#[derive(Debug, clap::Args)]
struct RunnerArgs {
    /// The strategy to run.
    #[arg(long)]
    strategy: String,
    /// The strategies file (default: the copy built into the binary).
    #[arg(long, value_name = "FILE")]
    strategies: Option<PathBuf>,
    /// The sim's loopback URL.
    #[arg(long, value_name = "URL")]
    sim_url: String,
    #[arg(long, default_value_t = 200)]
    records: u64,
    /// Multiplies the client's 2 s timeout.
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// The run's seed, as given to the sim (which draws the latencies; the runner draws nothing).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Exit when stdin closes, so a killed lab never leaves a runner behind.
    #[arg(long)]
    exit_on_stdin_close: bool,
    /// Serve the budgets' metrics as Prometheus text at http://ADDR/metrics while the run lasts
    /// (a loopback address, e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// The id of this runner's first record (replicas of one run take separate ranges).
    #[arg(long, default_value_t = 0)]
    first_id: u64,
    /// The Redis that fleet budgets keep their permits in.
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    /// The measured size of a budget given as `{ measure = "capacity" }`, e.g. `records=6`.
    #[arg(long, value_name = "DEPENDENCY=N", value_parser = parse_measured)]
    measured: Vec<(String, usize)>,
}

fn parse_measured(text: &str) -> Result<(String, usize), String> {
    let (dependency, n) = text
        .split_once('=')
        .ok_or_else(|| format!("expected DEPENDENCY=N, got `{text}`"))?;
    let n: usize = n
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("the size must be a positive integer, got `{n}`"))?;
    Ok((dependency.to_string(), n))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        LabCommand::Run(args) => run_lab(args),
        LabCommand::Report(args) => rewrite_report(args),
        LabCommand::Runner(args) => run_runner(args),
    }
}

fn rewrite_report(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let path = if args.results.is_dir() {
        args.results.join("results.json")
    } else {
        args.results.clone()
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let stored: inflight_lab::results::ResultsDoc = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a lab results document", path.display()))?;
    let files = match &args.lab_dir {
        Some(dir) => LabFiles::find(Some(dir))?,
        None => LabFiles::find(None).unwrap_or_else(|_| LabFiles::builtin()),
    };
    let hypotheses = files.hypotheses()?;
    let reference = files.reference()?;
    let rebuilt = inflight_lab::report::rebuild(&stored, &hypotheses)
        .with_context(|| format!("cannot report {}", path.display()))?;
    for change in &rebuilt.changes {
        eprintln!("lab report: {change}");
    }
    let doc = rebuilt.doc;
    let dir = match args.out {
        Some(dir) => dir,
        None => match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
    };
    run::write_outputs(&doc, &reference, &dir)?;
    print!("{}", inflight_lab::report::terminal_summary(&doc));
    println!();
    print!("{}", inflight_lab::report::hypotheses_table(&doc));
    eprintln!("report written to {}", dir.join("index.html").display());
    Ok(ExitCode::SUCCESS)
}

fn run_runner(args: RunnerArgs) -> anyhow::Result<ExitCode> {
    let strategies = match &args.strategies {
        Some(path) => strategy::load(path)?,
        None => strategy::builtin(),
    };
    let strategy = strategies.get(&args.strategy)?.clone();
    if args.records == 0 {
        bail!("--records must be at least 1");
    }
    if args.exit_on_stdin_close {
        std::thread::spawn(|| {
            super::wait_for_stdin_close();
            std::process::exit(3);
        });
    }
    let _ = args.seed;
    let config = RunnerConfig {
        strategy,
        sim_url: args.sim_url,
        records: args.records,
        time_scale: args.time_scale,
        metrics_addr: args.metrics_addr,
        first_id: args.first_id,
        redis_url: args.redis_url,
        measured: args.measured.into_iter().collect(),
    };
    // Built with defaults, like a service's runtime, so its worker count follows the CPU quota.
    let rt = super::async_runtime()?;
    let result = rt.block_on(runner::run(&config))?;
    let json = serde_json::to_string(&result).context("cannot serialise the run result")?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{json}")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The time scale of `--quick`: at 0.1 a call's fixed ~0.55 ms cost C1 4-6% against a full run;
/// at 0.2 most medians scaled back were measured within 3% of a full run's (README: "Quick mode
/// and the full run").
const QUICK_TIME_SCALE: f64 = 0.2;

/// `1 cell`, `3 cells`.
fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn dedup(v: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    v.retain(|s| seen.insert(s.clone()));
}

fn run_lab(mut args: RunArgs) -> anyhow::Result<ExitCode> {
    for list in [&mut args.strategies, &mut args.scenarios]
        .into_iter()
        .flatten()
    {
        list.iter_mut().for_each(|s| *s = s.trim().to_string());
        if list.iter().any(String::is_empty) {
            bail!("--strategies and --scenarios take comma-separated names, with none empty");
        }
        dedup(list);
    }
    if let Some(cpus) = &args.cpus {
        if let Some(bad) = cpus
            .iter()
            .find(|c| !(c.is_finite() && **c >= 0.01 && **c <= 1024.0))
        {
            bail!(
                "--cpus must be between 0.01 (the kernel's smallest quota, 1 ms per 100 ms) and 1024 CPUs, got {bad}"
            );
        }
    }
    if let Some(addr) = args.metrics_addr.filter(|a| !a.ip().is_loopback()) {
        bail!("--metrics-addr must be a loopback address (127.0.0.1 or [::1]), got {addr}");
    }
    if args.repeats == Some(0) {
        bail!("--repeats must be at least 1");
    }
    if let Some(records) = args.records.filter(|r| *r == 0 || *r > 1_000_000) {
        bail!("--records must be between 1 and 1000000, got {records}");
    }
    if let Some(t) = args
        .time_scale
        .filter(|t| !(t.is_finite() && *t > 0.0 && *t <= 100.0))
    {
        bail!("--time-scale must be a number above 0 and at most 100, got {t}");
    }
    if let Some(url) = &args.sim_url {
        runner::loopback_base(url)?;
    }
    if let Some(url) = &args.redis_url {
        run::redis::check_url(url)?;
    }
    if let Some(replicas) = args.replicas {
        if !(1..=16).contains(&replicas) {
            bail!("--replicas must be between 1 and 16, got {replicas}");
        }
        if let Some(records) = args.records.filter(|r| u64::from(replicas) > *r) {
            bail!(
                "--replicas {replicas} needs at least one record per replica, but --records is {records}"
            );
        }
    }

    // A quota above the host's CPUs gives the runner only the host's, under the quota's label.
    let host_cpus = strategy::available_parallelism();
    let too_many = |c: &f64| *c > host_cpus as f64 + 1e-9;
    if let Some(bad) = args.cpus.iter().flatten().find(|c| too_many(c)) {
        bail!(
            "--cpus {bad} is more than this host's {}: the runner would have {host_cpus} while its rows said {bad}; give at most {host_cpus}",
            count(host_cpus, "CPU")
        );
    }

    // What --quick stands for, where the flag itself is left out.
    let repeats = args.repeats.or(args.quick.then_some(3));
    let time_scale = args.time_scale.or(args.quick.then_some(QUICK_TIME_SCALE));

    let lab = LabConfig::load(LabFiles::find(args.lab_dir.as_deref())?)?;
    let exe = std::env::current_exe().context("cannot find the inflight binary to start")?;
    // Kept until the runs are over: the resumed plan's strategies and scenarios files.
    let mut _plan_files = None;
    let (mut lab_run, opts) = match &args.resume {
        None => {
            let cells = lab.plan(
                args.strategies.as_deref(),
                args.scenarios.as_deref(),
                args.cpus.as_deref(),
            )?;
            if let Some(cell) = cells.iter().find(|c| too_many(&c.cpus)) {
                bail!(
                    "the matrix runs {} in {} at {} CPUs, more than this host's {}: the runner would have {host_cpus} while its rows said {}; give --cpus {host_cpus} (or fewer)",
                    cell.strategy,
                    cell.scenario,
                    cell.cpus,
                    count(host_cpus, "CPU"),
                    cell.cpus
                );
            }
            let opts = LabOptions {
                exe,
                cells,
                repeats: repeats.unwrap_or(5),
                records: args.records.unwrap_or(200),
                time_scale: time_scale.unwrap_or(1.0),
                seed: args.seed.unwrap_or(1),
                strategies_file: lab.files.path(inflight_lab::files::STRATEGIES),
                scenarios_file: lab.files.path(inflight_lab::files::SCENARIOS),
                sim_url: args.sim_url.clone(),
                no_limit: args.no_limit,
                metrics_addr: args.metrics_addr,
                replicas: args.replicas.unwrap_or(1),
                redis_url: args.redis_url.clone(),
            };
            let out_dir = args.out.clone().unwrap_or_else(run::default_out_dir);
            // Made now, so a folder that cannot be written fails before the runs, not after them.
            let out = OutDir::create(&out_dir, args.replace)?;
            let total = opts.cells.len() * opts.repeats as usize;
            let split = if opts.replicas > 1 {
                format!(", each split between {} replicas", opts.replicas)
            } else {
                String::new()
            };
            eprintln!(
                "lab: {} x {} = {total} {} of {} records{split}, time scale {}, seed {}; writing to {}",
                count(opts.cells.len(), "cell"),
                count(opts.repeats as usize, "repeat"),
                if total == 1 { "run" } else { "runs" },
                opts.records,
                opts.time_scale,
                opts.seed,
                out_dir.display()
            );
            (LabRun::new(&opts, out)?, opts)
        }
        Some(dir) => {
            let resume = Resume::open(dir)?;
            let mut given = Vec::new();
            if let Some(names) = &args.strategies {
                given.push(("--strategies", Setting::Strategies(names.clone())));
            }
            if let Some(names) = &args.scenarios {
                given.push(("--scenarios", Setting::Scenarios(names.clone())));
            }
            if let Some(cpus) = &args.cpus {
                given.push(("--cpus", Setting::Cpus(cpus.clone())));
            }
            if let Some(records) = args.records {
                given.push(("--records", Setting::Records(records)));
            }
            if let Some(repeats) = repeats {
                let flag = if args.repeats.is_some() {
                    "--repeats"
                } else {
                    "--quick"
                };
                given.push((flag, Setting::Repeats(repeats)));
            }
            if let Some(time_scale) = time_scale {
                let flag = if args.time_scale.is_some() {
                    "--time-scale"
                } else {
                    "--quick"
                };
                given.push((flag, Setting::TimeScale(time_scale)));
            }
            if let Some(seed) = args.seed {
                given.push(("--seed", Setting::Seed(seed)));
            }
            if args.lab_dir.is_some() {
                let files = Setting::files_of(&lab.files).context("cannot read the lab files")?;
                given.extend(files.map(|s| ("--lab-dir", s)));
            }
            resume.check(&given)?;
            let planned_replicas = resume.doc().meta.replicas;
            if let Some(replicas) = args.replicas.filter(|r| *r != planned_replicas) {
                bail!(
                    "--replicas asks for {replicas}, but the run in {} was planned with {planned_replicas}; leave it out to resume",
                    dir.display()
                );
            }
            let files = resume
                .files()
                .context("cannot write the plan's strategies and scenarios for the runners")?;
            let (meta, plan) = (&resume.doc().meta, resume.plan());
            let opts = LabOptions {
                exe,
                cells: plan.cells.clone(),
                repeats: meta.repeats,
                records: meta.records,
                time_scale: meta.time_scale,
                seed: meta.seed,
                strategies_file: files.strategies.clone(),
                scenarios_file: files.scenarios.clone(),
                sim_url: args.sim_url.clone(),
                no_limit: args.no_limit,
                metrics_addr: args.metrics_addr,
                replicas: meta.replicas,
                redis_url: args.redis_url.clone(),
            };
            _plan_files = Some(files);
            let lab_run = LabRun::resume(resume)?;
            let (done, planned) = (lab_run.done_before(), lab_run.doc().meta.runs_planned);
            let to_run = match lab_run.to_run() {
                0 => "none to run, the report to write".to_string(),
                n => format!("{n} to run"),
            };
            eprintln!(
                "lab: resuming {}: {done} of {planned} runs done, {to_run} ({} x {} of {} records, time scale {}, seed {})",
                dir.display(),
                count(opts.cells.len(), "cell"),
                count(opts.repeats as usize, "repeat"),
                opts.records,
                opts.time_scale,
                opts.seed,
            );
            (lab_run, opts)
        }
    };
    let out_dir = lab_run.dir().to_path_buf();

    let rt = super::async_runtime()?;
    let shutdown_seen = std::sync::OnceLock::new();
    let result = rt.block_on(async {
        let shutdown = Shutdown::on_signals();
        let _ = shutdown_seen.set(shutdown.clone());
        let mut reporter = ProgressReporter::new();
        let result = lab_run
            .run(&opts, &shutdown, &mut |p| reporter.report(p))
            .await;
        reporter.finish();
        // Nothing is running any more: a later Ctrl-C simply ends the command.
        shutdown.exit_on_signal();
        result
    });
    let stopped = result.err();
    let interrupted = matches!(stopped, Some(LabError::Interrupted));
    if interrupted {
        let by = shutdown_seen
            .get()
            .and_then(|s| s.signal_name())
            .unwrap_or("a signal");
        // On its own line, whatever the progress bar left on the terminal.
        eprintln!(
            "\nlab: interrupted by {by}; stopped the runner and the sim and removed the cgroups"
        );
    }
    let unfinished = lab_run.unfinished().map(str::to_string);
    if stopped.is_some() && lab_run.is_empty() {
        lab_run.discard();
        if let Some(run) = &unfinished {
            eprintln!("lab: no run had finished ({run} was in progress), so nothing was kept");
        }
        return exit_after_stop(stopped, shutdown_seen.get());
    }
    lab_run.write_report(&lab.hypotheses, &lab.reference)?;
    let doc = lab_run.doc();

    let summary = inflight_lab::report::terminal_summary(doc);
    let hypotheses_table = inflight_lab::report::hypotheses_table(doc);
    if args.json {
        let json = serde_json::to_string_pretty(doc).context("cannot serialise the results")?;
        println!("{json}");
        eprintln!("{summary}\n{hypotheses_table}");
    } else {
        println!("{summary}\n{hypotheses_table}");
    }
    if doc.meta.enforcement == Enforcement::None {
        eprintln!("lab: note: no CPU quota was enforced (--no-limit); the runs used all host CPUs");
    }
    if doc.meta.partial {
        let discarded = match &unfinished {
            Some(run) => format!("; the run in progress ({run}) was stopped and discarded"),
            None => String::new(),
        };
        eprintln!(
            "lab: partial report: {} of {} runs finished{discarded}",
            doc.runs.len(),
            doc.meta.runs_planned
        );
    }
    eprintln!(
        "lab: report in {} (open {})",
        out_dir.display(),
        out_dir.join("index.html").display()
    );
    if doc.meta.partial {
        eprintln!(
            "lab: run the rest with: inflight lab run --resume {}",
            out_dir.display()
        );
    }
    exit_after_stop(stopped, shutdown_seen.get())
}

/// The exit status of a lab run: 0 when it ran to the end, 128 + the signal when interrupted
/// (130 for Ctrl-C, 143 for SIGTERM), else the error (exit 2).
fn exit_after_stop(
    stopped: Option<LabError>,
    shutdown: Option<&Shutdown>,
) -> anyhow::Result<ExitCode> {
    match stopped {
        None => Ok(ExitCode::SUCCESS),
        Some(LabError::Interrupted) => {
            Ok(ExitCode::from(shutdown.map_or(130, Shutdown::exit_code)))
        }
        Some(e) => Err(e.into()),
    }
}
