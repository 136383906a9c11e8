//! `inflight lab run`: starts the sim, runs the matrix of strategies x scenarios x CPU counts x
//! repeats (each run in its own runner process inside a fresh CPU-quota cgroup), summarises the
//! repeats, evaluates the hypotheses and writes the report.
//!
//! Every process started here is stopped when the lab ends, fails or is interrupted (Ctrl-C,
//! SIGTERM), and every cgroup made here is removed: the runner is killed and reaped before its
//! cgroup is dropped, and the sim also exits by itself when our end of its stdin closes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use inflight_cpu::QuotaGroup;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::results::{ResultsDoc, RunMeta, RunResult, Spread, SummaryRow};
use crate::runner::loopback_base;

/// The strategies, scenarios and CPU counts of one cell of the matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub strategy: String,
    pub scenario: String,
    pub cpus: f64,
}

impl Cell {
    pub fn new(strategy: &str, scenario: &str, cpus: f64) -> Cell {
        Cell {
            strategy: strategy.to_string(),
            scenario: scenario.to_string(),
            cpus,
        }
    }
}

/// The seed's matrix: C1 in `healthy` at 1 and 2 CPUs; C2-C4 in all three scenarios at 1 CPU.
pub fn default_matrix() -> Vec<Cell> {
    let mut cells = vec![
        Cell::new("c1", "healthy", 1.0),
        Cell::new("c1", "healthy", 2.0),
    ];
    for scenario in ["healthy", "slow-write", "slow-enrichment"] {
        for strategy in ["c2", "c3", "c4"] {
            cells.push(Cell::new(strategy, scenario, 1.0));
        }
    }
    cells
}

/// Every combination, CPU counts outermost, then scenarios, then strategies.
pub fn cross_product(strategies: &[String], scenarios: &[String], cpus: &[f64]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for &c in cpus {
        for scenario in scenarios {
            for strategy in strategies {
                cells.push(Cell::new(strategy, scenario, c));
            }
        }
    }
    cells
}

/// Everything `inflight lab run` needs, resolved and checked by the command line.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// The `inflight` binary, run as `inflight sim` and `inflight lab runner`.
    pub exe: PathBuf,
    pub cells: Vec<Cell>,
    pub repeats: u32,
    pub records: u64,
    pub time_scale: f64,
    pub seed: u64,
    pub strategies_file: PathBuf,
    pub scenarios_file: PathBuf,
    /// Use this running sim instead of starting one.
    pub sim_url: Option<String>,
    /// Run without a CPU quota when none can be enforced.
    pub no_limit: bool,
}

/// Why the lab stopped.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("interrupted; stopped the runner and the sim and removed the cgroups")]
    Interrupted,
    #[error("cannot enforce a CPU limit of {cpus} CPUs: {message}")]
    NoLimit { cpus: f64, message: String },
    #[error("cannot start `{what}`")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the sim did not start: {0}")]
    SimStart(String),
    #[error("talking to the sim at {url}: {message}")]
    Sim { url: String, message: String },
    #[error("run {run}: the runner failed: {message}")]
    Runner { run: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

/// What the lab reports while it runs.
#[derive(Debug)]
pub enum Progress<'a> {
    /// The sim is listening (started by the lab or given with `--sim-url`).
    SimReady { url: &'a str, started: bool },
    /// No CPU quota can be enforced and `--no-limit` was given.
    NoLimit { message: &'a str },
    /// Run `index` (1-based) of `total` is starting.
    RunStarting {
        index: usize,
        total: usize,
        cell: &'a Cell,
        repeat: u32,
    },
    /// Run `index` of `total` ended with this result.
    RunDone {
        index: usize,
        total: usize,
        result: &'a RunResult,
    },
    /// Something worth a warning that does not stop the lab.
    Warning(String),
}

pub use inflight_bench::shutdown::Shutdown;

/// The seed of one run: the same for every strategy in a (scenario, repeat), so strategies face the
/// same sequence of latencies (common random numbers), different across repeats and scenarios.
pub fn run_seed(base: u64, scenario: &str, repeat: u32) -> u64 {
    // FNV-1a, stable across builds and platforms, then a splitmix64 finaliser.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in scenario.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    let mut z = base ^ h ^ u64::from(repeat).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The most a run may take before it is stopped: every record's four calls one after another,
/// each at its full 2 s timeout (times the time scale), plus a minute for start-up.
pub fn run_deadline(records: u64, time_scale: f64) -> Duration {
    Duration::from_secs(60) + Duration::from_secs_f64(records as f64 * 8.0 * time_scale * 1.25)
}

/// One summary row per (strategy, scenario, cpus), in the order the cells first appear.
pub fn summarize(runs: &[RunResult]) -> Vec<SummaryRow> {
    let mut order: Vec<(String, String, u64)> = Vec::new();
    let mut groups: BTreeMap<(String, String, u64), Vec<&RunResult>> = BTreeMap::new();
    for run in runs {
        let key = (
            run.strategy.clone(),
            run.scenario.clone(),
            run.cpus.to_bits(),
        );
        if !groups.contains_key(&key) {
            order.push(key.clone());
        }
        groups.entry(key).or_default().push(run);
    }
    order
        .into_iter()
        .map(|key| {
            let group = &groups[&key];
            let metric = |f: &dyn Fn(&RunResult) -> f64| {
                Spread::of(&group.iter().map(|r| f(r)).collect::<Vec<_>>())
            };
            SummaryRow {
                strategy: key.0.clone(),
                scenario: key.1.clone(),
                cpus: f64::from_bits(key.2),
                repeats: group.len() as u32,
                completion_s: metric(&|r| r.completion_s),
                accepted_per_s: metric(&|r| r.accepted_per_s),
                complete: metric(&|r| r.complete as f64),
                incomplete: metric(&|r| r.incomplete as f64),
                rejected: metric(&|r| r.rejected as f64),
                failed: metric(&|r| r.failed as f64),
                write_503s: metric(&|r| r.write_503s as f64),
                peak_writes_offered: metric(&|r| r.peak_writes_offered as f64),
                peak_enrichment_in_flight: metric(&|r| r.peak_enrichment_in_flight as f64),
                incomplete_fraction: metric(&|r| {
                    if r.records == 0 {
                        0.0
                    } else {
                        r.incomplete as f64 / r.records as f64
                    }
                }),
            }
        })
        .collect()
}

/// Checks a run's outcome counts add up; the message says what is off.
pub fn check_outcomes(run: &RunResult) -> Result<(), String> {
    let sum = run.complete + run.incomplete + run.rejected + run.failed;
    if sum != run.records {
        return Err(format!(
            "{} {} repeat {}: {} records started but complete {} + incomplete {} + rejected {} + failed {} = {sum}",
            run.strategy, run.scenario, run.repeat, run.records, run.complete, run.incomplete,
            run.rejected, run.failed
        ));
    }
    Ok(())
}

/// Whether a CPU quota can be enforced here: creates (and removes) one group per CPU count.
/// Returns the enforcement name, or the error message of the first that fails.
pub fn probe_enforcement(cpus: &[f64]) -> Result<String, (f64, String)> {
    let mut enforcement = String::from("none");
    for &c in cpus {
        match QuotaGroup::create(c) {
            Ok(group) => {
                enforcement = group.enforcement().as_str().to_string();
                drop(group);
            }
            Err(e) => return Err((c, e.to_string())),
        }
    }
    Ok(enforcement)
}

/// A sim this lab started: killed and reaped when stopped or dropped.
struct SimChild {
    child: Child,
    url: String,
}

impl SimChild {
    async fn start(opts: &LabOptions, shutdown: &Shutdown) -> Result<SimChild, LabError> {
        let mut cmd = Command::new(&opts.exe);
        cmd.arg("sim")
            .args(["--port", "0", "--exit-on-stdin-close", "--scenarios"])
            .arg(&opts.scenarios_file)
            .arg("--time-scale")
            .arg(opts.time_scale.to_string())
            .arg("--seed")
            .arg(opts.seed.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|source| LabError::Spawn {
            what: format!("{} sim", opts.exe.display()),
            source,
        })?;
        // Pass its messages on whole lines at a time, marked, so they never split one of ours.
        let stderr = child.stderr.take().expect("stderr is piped");
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("sim: {line}");
            }
        });
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::select! {
            line = tokio::time::timeout(Duration::from_secs(20), lines.next_line()) => line,
            _ = shutdown.wait() => {
                let _ = child.kill().await;
                return Err(LabError::Interrupted);
            }
        };
        let line = match first {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => {
                let status = child.wait().await.ok();
                return Err(LabError::SimStart(format!(
                    "it exited ({}) before saying where it listens",
                    status.map_or("unknown status".to_string(), |s| s.to_string())
                )));
            }
            Ok(Err(e)) => {
                let _ = child.kill().await;
                return Err(LabError::SimStart(format!("reading its output: {e}")));
            }
            Err(_) => {
                let _ = child.kill().await;
                return Err(LabError::SimStart(
                    "it did not say where it listens within 20 s".to_string(),
                ));
            }
        };
        let url = parse_listening_line(&line).ok_or_else(|| {
            LabError::SimStart(format!(
                "unexpected first line `{line}` (expected `inflight sim listening on http://127.0.0.1:<port>`)"
            ))
        })?;
        // Keep draining its stdout so it can never block on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(SimChild { child, url })
    }

    /// Closes its stdin (it exits by itself) and waits briefly; kills it if it lingers.
    async fn stop(mut self) {
        drop(self.child.stdin.take());
        // SIGTERM would also do; closing stdin is the path that also covers a killed lab.
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The URL in the sim's `inflight sim listening on http://127.0.0.1:<port>` line.
pub fn parse_listening_line(line: &str) -> Option<String> {
    let url = line.trim().strip_prefix("inflight sim listening on ")?;
    loopback_base(url).ok()
}

/// The sim's control endpoints.
struct SimControl {
    client: reqwest::Client,
    url: String,
}

impl SimControl {
    fn new(url: String) -> Result<SimControl, LabError> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| LabError::Sim {
                url: url.clone(),
                message: e.to_string(),
            })?;
        Ok(SimControl { client, url })
    }

    fn err(&self, message: impl std::fmt::Display) -> LabError {
        LabError::Sim {
            url: self.url.clone(),
            message: message.to_string(),
        }
    }

    async fn json(&self, req: reqwest::RequestBuilder) -> Result<serde_json::Value, LabError> {
        let response = req.send().await.map_err(|e| self.err(with_causes(&e)))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| self.err(with_causes(&e)))?;
        if !status.is_success() {
            return Err(self.err(format!("{status}: {}", text.trim())));
        }
        serde_json::from_str(&text).map_err(|e| self.err(format!("bad JSON ({e}): {text}")))
    }

    async fn stats(&self) -> Result<serde_json::Value, LabError> {
        self.json(self.client.get(format!("{}/stats", self.url)))
            .await
    }

    async fn set_scenario(&self, name: &str, seed: u64, time_scale: f64) -> Result<(), LabError> {
        let body = serde_json::json!({ "name": name, "seed": seed, "time_scale": time_scale });
        self.json(
            self.client
                .post(format!("{}/scenario", self.url))
                .json(&body),
        )
        .await
        .map(|_| ())
    }

    /// Waits (bounded) until no write from an earlier run is still inside the system of record,
    /// so one run's leftovers cannot crowd the next.
    async fn wait_idle(&self, limit: Duration) -> Result<(), LabError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let stats = self.stats().await?;
            let busy = stats["records"]["in_service"].as_u64().unwrap_or(0);
            if busy == 0 || tokio::time::Instant::now() >= deadline {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// An error with its causes, `a: b: c`, for errors (like reqwest's) whose message leaves them out.
fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn u64_at(v: &serde_json::Value, a: &str, b: &str) -> Option<u64> {
    v.get(a)?.get(b)?.as_u64()
}

/// Runs the whole matrix and returns the results document with summaries (hypotheses are
/// evaluated by [`finish`]). `progress` hears about each run.
pub async fn run_matrix(
    opts: &LabOptions,
    shutdown: &Shutdown,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<ResultsDoc, LabError> {
    if opts.cells.is_empty() || opts.repeats == 0 || opts.records == 0 {
        return Err(LabError::Invalid(
            "nothing to run: need at least one cell, one repeat and one record".to_string(),
        ));
    }
    let started_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();

    let mut cpus: Vec<f64> = Vec::new();
    for cell in &opts.cells {
        if !cpus.contains(&cell.cpus) {
            cpus.push(cell.cpus);
        }
    }
    let enforcement = match probe_enforcement(&cpus) {
        Ok(e) => e,
        Err((c, message)) if opts.no_limit => {
            let _ = c;
            progress(Progress::NoLimit { message: &message });
            "none".to_string()
        }
        Err((c, message)) => return Err(LabError::NoLimit { cpus: c, message }),
    };
    let limited = enforcement != "none";

    let (sim, url) = match &opts.sim_url {
        Some(url) => {
            let url = loopback_base(url).map_err(|e| LabError::Invalid(e.to_string()))?;
            (None, url)
        }
        None => {
            let sim = SimChild::start(opts, shutdown).await?;
            let url = sim.url.clone();
            (Some(sim), url)
        }
    };
    progress(Progress::SimReady {
        url: &url,
        started: sim.is_some(),
    });

    let result = run_cells(opts, shutdown, progress, &url, limited).await;
    if let Some(sim) = sim {
        sim.stop().await;
    }
    let runs = result?;
    let summary = summarize(&runs);
    Ok(ResultsDoc {
        meta: RunMeta {
            started_at,
            records: opts.records,
            repeats: opts.repeats,
            time_scale: opts.time_scale,
            seed: opts.seed,
            enforcement,
            host_cpus: crate::strategy::available_parallelism(),
            inflight_version: env!("CARGO_PKG_VERSION").to_string(),
        },
        runs,
        summary,
        hypotheses: Vec::new(),
    })
}

async fn run_cells(
    opts: &LabOptions,
    shutdown: &Shutdown,
    progress: &mut dyn FnMut(Progress<'_>),
    url: &str,
    limited: bool,
) -> Result<Vec<RunResult>, LabError> {
    let control = SimControl::new(url.to_string())?;
    // Fail early, with the sim's own message, if it is not there or lacks a scenario.
    control.stats().await.map_err(|e| match e {
        LabError::Sim { url, message } => LabError::Sim {
            message: format!(
                "no `inflight sim` answers there (start one with `inflight sim --port <port>`, or leave out --sim-url): {message}"
            ),
            url,
        },
        other => other,
    })?;
    let total = opts.cells.len() * opts.repeats as usize;
    let mut runs = Vec::with_capacity(total);
    let mut index = 0;
    for repeat in 1..=opts.repeats {
        for cell in &opts.cells {
            index += 1;
            if shutdown.fired() {
                return Err(LabError::Interrupted);
            }
            progress(Progress::RunStarting {
                index,
                total,
                cell,
                repeat,
            });
            let result = run_one(opts, shutdown, &control, cell, repeat, limited, progress).await?;
            progress(Progress::RunDone {
                index,
                total,
                result: &result,
            });
            runs.push(result);
        }
    }
    Ok(runs)
}

async fn run_one(
    opts: &LabOptions,
    shutdown: &Shutdown,
    control: &SimControl,
    cell: &Cell,
    repeat: u32,
    limited: bool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<RunResult, LabError> {
    let label = format!(
        "{} {} {} CPU repeat {repeat}",
        cell.strategy, cell.scenario, cell.cpus
    );
    let runner_err = |message: String| LabError::Runner {
        run: label.clone(),
        message,
    };
    control
        .wait_idle(Duration::from_secs_f64(10.0 * opts.time_scale.max(0.1)))
        .await?;
    let seed = run_seed(opts.seed, &cell.scenario, repeat);
    control
        .set_scenario(&cell.scenario, seed, opts.time_scale)
        .await?;

    let group = if limited {
        Some(
            QuotaGroup::create(cell.cpus).map_err(|e| LabError::NoLimit {
                cpus: cell.cpus,
                message: e.to_string(),
            })?,
        )
    } else {
        None
    };
    let mut cmd = std::process::Command::new(&opts.exe);
    cmd.args(["lab", "runner", "--exit-on-stdin-close", "--strategy"])
        .arg(&cell.strategy)
        .arg("--strategies")
        .arg(&opts.strategies_file)
        .arg("--sim-url")
        .arg(&control.url)
        .arg("--records")
        .arg(opts.records.to_string())
        .arg("--time-scale")
        .arg(opts.time_scale.to_string())
        .arg("--seed")
        .arg(seed.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(group) = &group {
        group.prepare_command(&mut cmd);
    }
    let mut cmd = Command::from(cmd);
    cmd.kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|source| LabError::Spawn {
        what: format!("{} lab runner", opts.exe.display()),
        source,
    })?;
    // Held until the runner ends: `Child::wait` would close it, and the runner exits when it closes.
    let stdin = child.stdin.take();
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let out_task = tokio::spawn(async move {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf).await;
        buf
    });
    let err_task = tokio::spawn(async move {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf).await;
        buf
    });

    enum Ended {
        Exited(std::io::Result<std::process::ExitStatus>),
        Interrupted,
        TimedOut,
    }
    let deadline = run_deadline(opts.records, opts.time_scale);
    let ended = tokio::select! {
        status = child.wait() => Ended::Exited(status),
        _ = shutdown.wait() => Ended::Interrupted,
        _ = tokio::time::sleep(deadline) => Ended::TimedOut,
    };
    let status = match ended {
        Ended::Exited(status) => status.map_err(|e| runner_err(e.to_string()))?,
        Ended::Interrupted | Ended::TimedOut => {
            // Kill and reap before the cgroup is dropped, so it is empty and can be removed.
            let _ = child.kill().await;
            drop(group);
            return Err(match ended {
                Ended::Interrupted => LabError::Interrupted,
                _ => runner_err(format!("still running after {deadline:?}; stopped it")),
            });
        }
    };
    drop(stdin);
    drop(child);
    drop(group);
    let out = out_task.await.unwrap_or_default();
    let err = err_task.await.unwrap_or_default();
    let err_text = String::from_utf8_lossy(&err).trim().to_string();
    if !status.success() {
        return Err(runner_err(format!(
            "exited with {status}: {}",
            if err_text.is_empty() {
                "(no message)"
            } else {
                &err_text
            }
        )));
    }
    if !err_text.is_empty() {
        progress(Progress::Warning(format!(
            "runner ({label}) said: {err_text}"
        )));
    }
    let mut result: RunResult = serde_json::from_slice(&out).map_err(|e| {
        runner_err(format!(
            "its output is not a run result ({e}): {}",
            String::from_utf8_lossy(&out)
                .chars()
                .take(200)
                .collect::<String>()
        ))
    })?;

    let stats = control.stats().await?;
    result.scenario = cell.scenario.clone();
    result.repeat = repeat;
    result.cpus = cell.cpus;
    result.peak_writes_offered = u64_at(&stats, "records", "peak_offered")
        .ok_or_else(|| control.err(format!("/stats has no records.peak_offered: {stats}")))?;
    if let Some(sim_503s) = u64_at(&stats, "records", "rejected_503") {
        if sim_503s != result.write_503s {
            progress(Progress::Warning(format!(
                "{label}: the runner counted {} write 503s, the sim {sim_503s}",
                result.write_503s
            )));
        }
    }
    check_outcomes(&result).map_err(runner_err)?;
    Ok(result)
}

/// Evaluates the preregistered hypotheses against the document's summary and stores the results
/// in the document. A failed hypothesis is a finding, not an error.
pub fn evaluate_hypotheses(doc: &mut ResultsDoc, hypotheses: &[crate::hypothesis::Hypothesis]) {
    doc.hypotheses = crate::hypothesis::evaluate(hypotheses, doc);
}

/// Writes `results.json` and the report (`runs.csv`, `summary.md`, figures, `index.html`) into `dir`.
pub fn write_outputs(doc: &ResultsDoc, dir: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("results.json");
    let json = serde_json::to_string_pretty(doc).context("cannot serialise the results")?;
    std::fs::write(&path, json).with_context(|| format!("cannot write {}", path.display()))?;
    crate::report::write_report(doc, dir)
        .with_context(|| format!("cannot write the report into {}", dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(strategy: &str, scenario: &str, cpus: f64, repeat: u32, secs: f64) -> RunResult {
        RunResult {
            strategy: strategy.into(),
            scenario: scenario.into(),
            cpus,
            repeat,
            records: 10,
            complete: 6,
            incomplete: 2,
            rejected: 1,
            failed: 1,
            completion_s: secs,
            accepted_per_s: 8.0 / secs,
            write_503s: 1,
            peak_writes_offered: repeat as u64 + 5,
            ..RunResult::default()
        }
    }

    #[test]
    fn summary_groups_by_strategy_scenario_and_cpus_in_order() {
        let runs = vec![
            run("c1", "healthy", 1.0, 1, 4.0),
            run("c1", "healthy", 2.0, 1, 2.0),
            run("c1", "healthy", 1.0, 2, 8.0),
            run("c1", "healthy", 2.0, 2, 2.2),
            run("c1", "healthy", 1.0, 3, 5.0),
        ];
        let rows = summarize(&runs);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].cpus, rows[0].repeats), (1.0, 3));
        assert_eq!((rows[1].cpus, rows[1].repeats), (2.0, 2));
        assert_eq!(
            rows[0].completion_s,
            Spread {
                median: 5.0,
                min: 4.0,
                max: 8.0
            }
        );
        assert_eq!(rows[0].accepted_per_s.median, 8.0 / 5.0);
        assert!((rows[1].completion_s.median - 2.1).abs() < 1e-12);
        assert_eq!(rows[0].peak_writes_offered.max, 8.0);
        assert_eq!(rows[0].incomplete_fraction.median, 0.2);
    }

    #[test]
    fn outcome_check_names_the_run() {
        let mut r = run("c2", "slow-write", 1.0, 4, 1.0);
        assert!(check_outcomes(&r).is_ok());
        r.failed = 0;
        let e = check_outcomes(&r).unwrap_err();
        assert!(
            e.contains("c2 slow-write repeat 4") && e.contains("= 9"),
            "{e}"
        );
    }

    #[test]
    fn default_matrix_is_the_seeds() {
        let m = default_matrix();
        assert_eq!(m.len(), 11);
        assert_eq!(m[0], Cell::new("c1", "healthy", 1.0));
        assert_eq!(m[1], Cell::new("c1", "healthy", 2.0));
        assert!(m[2..].iter().all(|c| c.cpus == 1.0 && c.strategy != "c1"));
        let cp = cross_product(&["a".into(), "b".into()], &["x".into()], &[1.0, 2.0]);
        assert_eq!(cp.len(), 4);
        assert_eq!(cp[1], Cell::new("b", "x", 1.0));
    }

    #[test]
    fn run_seeds_are_shared_by_strategies_and_differ_by_repeat_and_scenario() {
        let a = run_seed(1, "healthy", 1);
        assert_eq!(a, run_seed(1, "healthy", 1));
        assert_ne!(a, run_seed(1, "healthy", 2));
        assert_ne!(a, run_seed(1, "slow-write", 1));
        assert_ne!(a, run_seed(2, "healthy", 1));
    }

    #[test]
    fn listening_line_is_parsed() {
        assert_eq!(
            parse_listening_line("inflight sim listening on http://127.0.0.1:4123\n").as_deref(),
            Some("http://127.0.0.1:4123")
        );
        assert_eq!(
            parse_listening_line("listening on http://127.0.0.1:4123"),
            None
        );
        assert_eq!(
            parse_listening_line("inflight sim listening on http://10.1.1.1:4123"),
            None
        );
    }

    #[test]
    fn deadline_covers_the_slowest_serial_run() {
        // 200 records, four calls each at the full 2 s timeout, one at a time.
        assert!(run_deadline(200, 1.0) > Duration::from_secs(1600));
        assert!(run_deadline(24, 0.05) < Duration::from_secs(120));
    }
}
