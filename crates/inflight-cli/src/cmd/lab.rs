//! `inflight lab`: run the lab (`lab run`) and, hidden, one runner process (`lab runner`) that
//! `lab run` starts inside a CPU-quota cgroup.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Subcommand;
use inflight_lab::orchestrate::{self, Cell, LabError, LabOptions, Progress, Shutdown};
use inflight_lab::results::RunResult;
use inflight_lab::runner::{self, RunnerConfig};
use inflight_lab::scenario::ScenarioSet;
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
    Run(RunArgs),
    /// Write the report (summary.md, runs.csv, figures, index.html) again from a results.json.
    ///
    /// Useful after a newer `inflight` changed how reports look, or to put a report of an old run
    /// somewhere else. The numbers and hypothesis outcomes are taken from the file as they are.
    Report(ReportArgs),
    /// One run of one strategy (started by `lab run` inside a cgroup); prints a JSON run result.
    #[command(hide = true)]
    Runner(RunnerArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Strategies to run, from `<lab-dir>/strategies.toml` (default: the seed's matrix; with
    /// --scenarios or --cpus alone: c1,c2,c3,c4).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    strategies: Option<Vec<String>>,
    /// Scenarios to run, from `<lab-dir>/scenarios.toml` (default: the seed's matrix; with
    /// --strategies or --cpus alone: healthy,slow-write,slow-enrichment).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    scenarios: Option<Vec<String>>,
    /// CPU quotas for the runner, e.g. `1` or `1,2` or `0.5` (default: the seed's matrix; with
    /// --strategies or --scenarios alone: 1).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "N",
        allow_negative_numbers = true
    )]
    cpus: Option<Vec<f64>>,
    /// Records per run.
    #[arg(long, default_value_t = 200, allow_negative_numbers = true)]
    records: u64,
    /// Runs of each cell (default 5; 3 with --quick).
    #[arg(long, allow_negative_numbers = true)]
    repeats: Option<u32>,
    /// Multiplies every latency, hang and client timeout (default 1.0, the seed's timing; 0.1 with
    /// --quick).
    #[arg(long, value_name = "F", allow_negative_numbers = true)]
    time_scale: Option<f64>,
    /// Base seed; each (scenario, repeat) gets a seed derived from it, shared by all strategies.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where to write the report (default: a new folder `lab-results/<UTC date-time>`).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print the results document as JSON on stdout (tables and progress go to stderr).
    #[arg(long)]
    json: bool,
    /// Use a running `inflight sim` at this loopback URL instead of starting one.
    #[arg(long, value_name = "URL")]
    sim_url: Option<String>,
    /// Time scale 0.1 and 3 repeats: the default matrix in under two minutes.
    #[arg(long)]
    quick: bool,
    /// Run without a CPU quota if none can be enforced (C1 then sees all host CPUs).
    #[arg(long)]
    no_limit: bool,
    /// Folder holding strategies.toml, scenarios.toml and hypotheses.toml (default `lab`, else
    /// the `lab` folder of the workspace the binary was built in).
    #[arg(long, value_name = "DIR")]
    lab_dir: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct ReportArgs {
    /// The results.json a `lab run` wrote.
    results: PathBuf,
    /// Where to write the report (default: the folder holding RESULTS).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct RunnerArgs {
    /// The strategy to run.
    #[arg(long)]
    strategy: String,
    /// The strategies file.
    #[arg(long, value_name = "FILE")]
    strategies: PathBuf,
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
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        LabCommand::Run(args) => run_lab(args),
        LabCommand::Report(args) => rewrite_report(args),
        LabCommand::Runner(args) => run_runner(args),
    }
}

fn rewrite_report(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.results)
        .with_context(|| format!("cannot read {}", args.results.display()))?;
    let doc: inflight_lab::results::ResultsDoc = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a lab results document", args.results.display()))?;
    let dir = match args.out {
        Some(dir) => dir,
        None => match args.results.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    inflight_lab::report::write_report(&doc, &dir)
        .with_context(|| format!("cannot write the report into {}", dir.display()))?;
    print!("{}", inflight_lab::report::summary_table(&doc));
    print!("{}", inflight_lab::report::hypotheses_table(&doc));
    eprintln!("report written to {}", dir.join("index.html").display());
    Ok(ExitCode::SUCCESS)
}

fn run_runner(args: RunnerArgs) -> anyhow::Result<ExitCode> {
    let strategies = strategy::load(&args.strategies)?;
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

const ALL_STRATEGIES: [&str; 4] = ["c1", "c2", "c3", "c4"];
const ALL_SCENARIOS: [&str; 3] = ["healthy", "slow-write", "slow-enrichment"];

/// The lab's three files, found.
struct LabFiles {
    strategies: PathBuf,
    scenarios: PathBuf,
    hypotheses: PathBuf,
}

fn find_lab_files(explicit: Option<&Path>) -> anyhow::Result<LabFiles> {
    let names = ["strategies.toml", "scenarios.toml", "hypotheses.toml"];
    let candidates: Vec<PathBuf> = match explicit {
        Some(dir) => vec![dir.to_path_buf()],
        None => {
            let mut dirs = vec![PathBuf::from("lab")];
            // Fall back to the workspace the binary was built in (target/<profile>/inflight).
            if let Ok(exe) = std::env::current_exe() {
                if let Some(root) = exe
                    .ancestors()
                    .skip(1)
                    .find(|d| d.join("Cargo.toml").is_file() && d.join("lab").is_dir())
                {
                    dirs.push(root.join("lab"));
                }
            }
            dirs
        }
    };
    let dir = candidates
        .iter()
        .find(|d| d.join(names[0]).is_file())
        .or_else(|| candidates.first())
        .expect("at least one candidate")
        .clone();
    for name in names {
        let path = dir.join(name);
        if !path.is_file() {
            let looked: Vec<String> = candidates
                .iter()
                .map(|d| d.join(name).display().to_string())
                .collect();
            bail!(
                "lab file not found: {} (looked for {}); pass --lab-dir DIR",
                name,
                looked.join(" and ")
            );
        }
    }
    Ok(LabFiles {
        strategies: dir.join(names[0]),
        scenarios: dir.join(names[1]),
        hypotheses: dir.join(names[2]),
    })
}

fn default_out_dir() -> PathBuf {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    PathBuf::from("lab-results").join(now.replace(':', "-"))
}

/// The report folder, made before the runs start.
struct OutDir {
    path: PathBuf,
    /// Whether this run made it (and so may remove it again if the run ends with nothing in it).
    made: bool,
}

impl OutDir {
    fn create(path: &Path) -> anyhow::Result<OutDir> {
        if path.exists() && !path.is_dir() {
            bail!(
                "--out {} exists and is not a folder; give a folder (made if missing)",
                path.display()
            );
        }
        let made = !path.exists();
        std::fs::create_dir_all(path)
            .with_context(|| format!("cannot create the report folder {}", path.display()))?;
        let probe = path.join(".inflight-write-test");
        std::fs::write(&probe, b"")
            .with_context(|| format!("cannot write into the report folder {}", path.display()))?;
        let _ = std::fs::remove_file(&probe);
        Ok(OutDir {
            path: path.to_path_buf(),
            made,
        })
    }

    /// Removes the folder if this run made it and wrote nothing into it.
    fn discard_if_empty(&self) {
        if self.made {
            // `remove_dir` refuses a folder that is not empty, which is what we want.
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}

fn plan(args: &RunArgs) -> Vec<Cell> {
    if args.strategies.is_none() && args.scenarios.is_none() && args.cpus.is_none() {
        return orchestrate::default_matrix();
    }
    let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let strategies = args
        .strategies
        .clone()
        .unwrap_or_else(|| owned(&ALL_STRATEGIES));
    let scenarios = args
        .scenarios
        .clone()
        .unwrap_or_else(|| owned(&ALL_SCENARIOS));
    let cpus = args.cpus.clone().unwrap_or_else(|| vec![1.0]);
    orchestrate::cross_product(&strategies, &scenarios, &cpus)
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
            .find(|c| !(c.is_finite() && **c > 0.0 && **c <= 1024.0))
        {
            bail!("--cpus must be between 0 and 1024 CPUs (fractions allowed), got {bad}");
        }
    }
    let repeats = args.repeats.unwrap_or(if args.quick { 3 } else { 5 });
    let time_scale = args
        .time_scale
        .unwrap_or(if args.quick { 0.1 } else { 1.0 });
    if repeats == 0 {
        bail!("--repeats must be at least 1");
    }
    if args.records == 0 || args.records > 1_000_000 {
        bail!(
            "--records must be between 1 and 1000000, got {}",
            args.records
        );
    }
    if !(time_scale.is_finite() && time_scale > 0.0 && time_scale <= 100.0) {
        bail!("--time-scale must be a number above 0 and at most 100, got {time_scale}");
    }
    if let Some(url) = &args.sim_url {
        runner::loopback_base(url)?;
    }

    let files = find_lab_files(args.lab_dir.as_deref())?;
    let strategies = strategy::load(&files.strategies)?;
    let scenarios = ScenarioSet::load(&files.scenarios)?;
    let hypotheses = inflight_lab::hypothesis::load(&files.hypotheses)
        .with_context(|| format!("cannot use {}", files.hypotheses.display()))?;
    let cells = plan(&args);
    for cell in &cells {
        strategies.get(&cell.strategy)?;
        scenarios.get(&cell.scenario)?;
    }
    let out_dir = args.out.clone().unwrap_or_else(default_out_dir);
    // Made now, so a folder that cannot be written fails before the runs, not after them.
    let out = OutDir::create(&out_dir)?;

    let opts = LabOptions {
        exe: std::env::current_exe().context("cannot find the inflight binary to start")?,
        cells,
        repeats,
        records: args.records,
        time_scale,
        seed: args.seed,
        strategies_file: files.strategies.clone(),
        scenarios_file: files.scenarios.clone(),
        sim_url: args.sim_url.clone(),
        no_limit: args.no_limit,
    };
    let total = opts.cells.len() * repeats as usize;
    eprintln!(
        "lab: {} cells x {} repeats = {total} runs of {} records, time scale {}, seed {}; writing to {}",
        opts.cells.len(),
        repeats,
        opts.records,
        time_scale,
        opts.seed,
        out_dir.display()
    );

    let rt = super::async_runtime()?;
    let result = rt.block_on(async {
        let shutdown = Shutdown::on_signals();
        let mut reporter = Reporter::new();
        let doc = orchestrate::run_matrix(&opts, &shutdown, &mut |p| reporter.report(p)).await;
        reporter.finish();
        // Nothing is running any more: a later Ctrl-C simply ends the command.
        shutdown.exit_on_signal();
        doc
    });
    let mut doc = match result {
        Ok(doc) => doc,
        Err(LabError::Interrupted) => {
            out.discard_if_empty();
            eprintln!("lab: interrupted; stopped the runner and the sim and removed the cgroups");
            return Ok(ExitCode::from(130));
        }
        Err(e) => {
            out.discard_if_empty();
            return Err(e.into());
        }
    };
    orchestrate::evaluate_hypotheses(&mut doc, &hypotheses);
    orchestrate::write_outputs(&doc, &out_dir)?;

    let summary = inflight_lab::report::summary_table(&doc);
    let hypotheses_table = inflight_lab::report::hypotheses_table(&doc);
    if args.json {
        let json = serde_json::to_string_pretty(&doc).context("cannot serialise the results")?;
        println!("{json}");
        eprintln!("{summary}\n{hypotheses_table}");
    } else {
        println!("{summary}\n{hypotheses_table}");
    }
    if doc.meta.enforcement == "none" {
        eprintln!("lab: note: no CPU quota was enforced (--no-limit); the runs used all host CPUs");
    }
    eprintln!(
        "lab: report in {} (open {})",
        out_dir.display(),
        out_dir.join("index.html").display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Shows progress on stderr: a bar on a terminal, a line per run otherwise.
struct Reporter {
    tty: bool,
    started: Instant,
    bar_shown: bool,
}

impl Reporter {
    fn new() -> Reporter {
        Reporter {
            tty: std::io::stderr().is_terminal(),
            started: Instant::now(),
            bar_shown: false,
        }
    }

    fn clear_bar(&mut self) {
        if self.bar_shown {
            eprint!("\r\x1b[2K");
            self.bar_shown = false;
        }
    }

    fn report(&mut self, progress: Progress<'_>) {
        match progress {
            Progress::SimReady { url, started } => {
                self.clear_bar();
                let how = if started { "started" } else { "using" };
                eprintln!("lab: {how} sim at {url}");
            }
            Progress::NoLimit { message } => {
                self.clear_bar();
                eprintln!("lab: warning: no CPU limit can be enforced, running without one (--no-limit): {message}");
            }
            Progress::Warning(message) => {
                self.clear_bar();
                eprintln!("lab: warning: {message}");
            }
            Progress::RunStarting {
                index,
                total,
                cell,
                repeat,
            } => {
                let what = format!(
                    "{} {} {} CPU repeat {repeat}",
                    cell.strategy, cell.scenario, cell.cpus
                );
                if self.tty {
                    self.draw_bar(index - 1, total, &what);
                } else {
                    eprintln!("[{index}/{total}] {what} ...");
                }
            }
            Progress::RunDone {
                index,
                total,
                result,
            } => {
                self.clear_bar();
                eprintln!("[{index}/{total}] {}", describe(result));
                if self.tty && index < total {
                    self.draw_bar(index, total, "");
                }
            }
        }
    }

    fn draw_bar(&mut self, done: usize, total: usize, what: &str) {
        const WIDTH: usize = 30;
        let filled = (done * WIDTH).checked_div(total).unwrap_or(0).min(WIDTH);
        let elapsed = self.started.elapsed();
        let eta = if done > 0 {
            let left = elapsed.mul_f64((total - done) as f64 / done as f64);
            format!(
                " eta {}",
                humantime::format_duration(Duration::from_secs(left.as_secs()))
            )
        } else {
            String::new()
        };
        eprint!(
            "\r\x1b[2K[{}{}] {done}/{total}{eta} {what}",
            "=".repeat(filled),
            " ".repeat(WIDTH - filled)
        );
        let _ = std::io::stderr().flush();
        self.bar_shown = true;
    }

    fn finish(&mut self) {
        self.clear_bar();
    }
}

fn describe(r: &RunResult) -> String {
    let mut s = format!(
        "{} {} {} CPU repeat {}: {:.2} s, {:.2} accepted/s, complete {} incomplete {} rejected {} failed {}, 503s {}, peak writes offered {}, peak enrichment {}",
        r.strategy,
        r.scenario,
        r.cpus,
        r.repeat,
        r.completion_s,
        r.accepted_per_s,
        r.complete,
        r.incomplete,
        r.rejected,
        r.failed,
        r.write_503s,
        r.peak_writes_offered,
        r.peak_enrichment_in_flight
    );
    if !r.failed_by_kind.is_empty() {
        let kinds: Vec<String> = r
            .failed_by_kind
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        s.push_str(&format!(" ({})", kinds.join(", ")));
    }
    s
}
