//! Runs the cells of a lab run one after another: each run in its own runner process (`inflight
//! lab runner`), placed in a fresh CPU-quota cgroup before its async runtime starts, against the
//! sim set to the cell's scenario; the runner is killed and reaped before its cgroup is dropped.

use std::time::Duration;

use inflight_cpu::{Enforcement, QuotaGroup};

pub use crate::results::check_outcomes;

use super::error::LabError;
use super::options::LabOptions;
use super::plan::PlannedRun;
use super::progress::Progress;
use super::redis::LabRedis;
use super::replicas::{self, SimPeaks};
use super::runner_process::{RunnerEnd, RunnerProcess};
use super::sidecar::{self, LimitSampler, Sidecar, PROXY_CPUS};
use crate::matrix::Cell;
use crate::results::{MeasuredBudget, RunResult};
use crate::runner::RunnerArgs;
use crate::sim::client::{u64_at, SimClient};
use crate::strategy::Strategies;
use inflight_bench::shutdown::Shutdown;

/// The RNG seed of one run: the same for every strategy in a (scenario, repeat), so strategies face the
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

/// The command line of replica `replica` (0-based) of the run of `cell` at `repeat`: its share
/// of the records, its seed, the lab's time scale and files, where it serves its metrics, and the
/// proxy it sends its calls to when one enforces the strategy's budgets.
#[allow(clippy::too_many_arguments)]
pub(crate) fn runner_args(
    opts: &LabOptions,
    sim_url: &str,
    cell: &Cell,
    repeat: u32,
    replica: usize,
    redis: Option<&LabRedis>,
    measured: &[MeasuredBudget],
    proxy: Option<&Sidecar>,
) -> RunnerArgs {
    let share = replicas::shares(opts.records, opts.replicas)[replica];
    RunnerArgs {
        strategy: cell.strategy.clone(),
        strategies: opts.strategies_file.clone(),
        scenario: Some(cell.scenario.clone()),
        scenarios: opts.scenarios_file.clone(),
        sim_url: sim_url.to_string(),
        records: share.records,
        time_scale: opts.time_scale,
        seed: run_seed(opts.seed, &cell.scenario, repeat),
        exit_on_stdin_close: true,
        // Replica i serves its metrics on the port after replica i - 1's.
        metrics_addr: opts.metrics_addr.map(|mut addr| {
            addr.set_port(addr.port().saturating_add(replica as u16));
            addr
        }),
        first_id: share.first_id,
        redis_url: redis.map(|r| r.url().to_string()),
        measured: measured
            .iter()
            .filter(|m| m.scenario == cell.scenario)
            .map(|m| (m.dependency.clone(), m.max_concurrent))
            .collect(),
        enrichment_url: proxy.map(|p| p.enrichment_url.clone()),
        records_url: proxy.map(|p| p.records_url.clone()),
    }
}

/// The most a run may take before it is stopped: every record's four calls one after another,
/// each at its full 2 s timeout (times the time scale), plus a minute for start-up.
pub fn run_deadline(records: u64, time_scale: f64) -> Duration {
    Duration::from_secs(60) + Duration::from_secs_f64(records as f64 * 8.0 * time_scale * 1.25)
}

/// Whether a CPU quota can be enforced here: creates (and removes) one group per CPU count.
/// Returns how it is enforced, or the CPU count and error message of the first that fails.
pub fn probe_enforcement(cpus: &[f64]) -> Result<Enforcement, (f64, String)> {
    let mut enforcement = Enforcement::None;
    for &c in cpus {
        match QuotaGroup::create(c) {
            Ok(group) => {
                enforcement = group.enforcement();
                drop(group);
            }
            Err(e) => return Err((c, e.to_string())),
        }
    }
    Ok(enforcement)
}

/// What the runs of a lab run need besides their options.
pub(crate) struct RunEnv<'a> {
    /// The sim's URL.
    pub url: &'a str,
    /// Whether each runner goes into a CPU-quota cgroup.
    pub limited: bool,
    /// The Redis of fleet budgets, if a strategy keeps one there.
    pub redis: Option<&'a LabRedis>,
    /// The budgets measured before the runs.
    pub measured: &'a [MeasuredBudget],
    /// The strategies the cells name.
    pub strategies: &'a Strategies,
}

/// Runs `todo` in order against the sim, each run in its own runner processes (one per
/// replica), inside fresh CPU-quota cgroups when `env.limited`; `finished` keeps each result
/// before the next run starts.
pub(crate) async fn run_cells(
    opts: &LabOptions,
    todo: &[PlannedRun],
    shutdown: &Shutdown,
    env: &RunEnv<'_>,
    progress: &mut dyn FnMut(Progress<'_>),
    finished: &mut dyn FnMut(&RunResult) -> Result<(), LabError>,
) -> Result<(), LabError> {
    let control = SimClient::new(env.url.to_string())?;
    let ctx = Context {
        opts,
        shutdown,
        control: &control,
        limited: env.limited,
        redis: env.redis,
        measured: env.measured,
        strategies: env.strategies,
    };
    let total = todo.len();
    for (i, planned) in todo.iter().enumerate() {
        let index = i + 1;
        if shutdown.fired() {
            return Err(LabError::Interrupted);
        }
        let (cell, repeat) = (&planned.cell, planned.repeat);
        progress(Progress::RunStarting {
            index,
            total,
            cell,
            repeat,
        });
        let mut result = run_one(&ctx, cell, repeat, progress).await?;
        result.seed = run_seed(opts.seed, &cell.scenario, repeat);
        result.unlimited = !env.limited;
        finished(&result)?;
        progress(Progress::RunDone {
            index,
            total,
            result: &result,
        });
    }
    Ok(())
}

/// What every run of a lab run shares.
struct Context<'a> {
    opts: &'a LabOptions,
    shutdown: &'a Shutdown,
    /// The sim.
    control: &'a SimClient,
    /// Whether each runner goes into a CPU-quota cgroup.
    limited: bool,
    redis: Option<&'a LabRedis>,
    /// The budgets measured before the runs.
    measured: &'a [MeasuredBudget],
    strategies: &'a Strategies,
}

/// One run of `cell`, with the proxy that enforces its strategy's budgets, if one does, started
/// before the runners and stopped after them.
async fn run_one(
    ctx: &Context<'_>,
    cell: &Cell,
    repeat: u32,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<RunResult, LabError> {
    let mut result = run_with_proxy(ctx, cell, repeat, progress).await?;
    // Used to line the proxy's limits up with the runner's samples; not kept.
    result.timeline.started_unix_s = None;
    Ok(result)
}

/// [`run_one`]'s run, and the proxy's: the budgets' limits read from its admin address while
/// the runners run, into the run's timeline.
async fn run_with_proxy(
    ctx: &Context<'_>,
    cell: &Cell,
    repeat: u32,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<RunResult, LabError> {
    let label = format!(
        "{} {} {} CPU repeat {repeat}",
        cell.strategy, cell.scenario, cell.cpus
    );
    let strategy = ctx
        .strategies
        .get(&cell.strategy)
        .map_err(|e| LabError::Invalid(e.to_string()))?;
    if !strategy.proxied() {
        return run_runners(ctx, cell, repeat, &label, None, progress).await;
    }
    let proxy_err = |message: String| LabError::Proxy {
        run: label.clone(),
        message,
    };
    let budgets = sidecar::budgets_file(strategy, ctx.control.url(), ctx.opts.time_scale)
        .map_err(proxy_err)?;
    // The proxy has a quota of its own, outside the runner's, as a sidecar container has.
    let group = if ctx.limited {
        Some(
            QuotaGroup::create(PROXY_CPUS).map_err(|e| LabError::NoLimit {
                cpus: PROXY_CPUS,
                message: e.to_string(),
            })?,
        )
    } else {
        None
    };
    let proxy = Sidecar::start(&ctx.opts.exe, &budgets, group)
        .await
        .map_err(proxy_err)?;
    let sampler = match proxy.admin_url.as_deref().map(LimitSampler::start) {
        Some(Ok(sampler)) => Some(sampler),
        Some(Err(e)) => {
            progress(Progress::Warning(format!("{label}: {e}")));
            None
        }
        None => {
            progress(Progress::Warning(format!(
                "{label}: the proxy said no admin address, so its limits are not in the timeline"
            )));
            None
        }
    };
    let result = run_runners(ctx, cell, repeat, &label, Some(&proxy), progress).await;
    let samples = match sampler {
        Some(sampler) => Some(sampler.finish().await),
        None => None,
    };
    let said = proxy.stop().await;
    if result.is_err() && !said.is_empty() {
        progress(Progress::Warning(format!(
            "the proxy of {label} said: {said}"
        )));
    }
    let mut result = result?;
    if let Some(samples) = samples {
        samples.fill(&mut result.timeline);
        if samples.failed() > 0 {
            progress(Progress::Warning(format!(
                "{label}: {} of {} reads of the proxy's limits failed or took over {:?} ({}); the timeline keeps the limit read before each",
                samples.failed(),
                samples.tried(),
                sidecar::limits::READ_WITHIN,
                samples.first_failure().unwrap_or("no reason given"),
            )));
        }
    }
    Ok(result)
}

/// The runs of `cell`: its replicas' runner processes, each in a fresh cgroup, against the sim
/// set to the cell's scenario; their results merged and checked.
async fn run_runners(
    ctx: &Context<'_>,
    cell: &Cell,
    repeat: u32,
    label: &str,
    proxy: Option<&Sidecar>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<RunResult, LabError> {
    let Context {
        opts,
        shutdown,
        control,
        limited,
        redis,
        measured,
        ..
    } = *ctx;
    let runner_err = |message: String| LabError::Runner {
        run: label.to_string(),
        message,
    };
    control
        .wait_idle(Duration::from_secs_f64(10.0 * opts.time_scale.max(0.1)))
        .await?;
    let seed = run_seed(opts.seed, &cell.scenario, repeat);
    control
        .set_scenario(&cell.scenario, seed, opts.time_scale)
        .await?;
    if let Some(redis) = redis {
        // Every permit free at the start, whatever an earlier run left behind.
        redis.clear(&["enrichment", "records"]).await?;
    }

    // One runner per replica, each in a fresh cgroup of its own, all started before any waits.
    let mut runners = Vec::new();
    for i in 0..replicas::shares(opts.records, opts.replicas).len() {
        let group = if limited {
            match QuotaGroup::create(cell.cpus) {
                Ok(group) => Some(group),
                Err(e) => {
                    kill_all(runners).await;
                    return Err(LabError::NoLimit {
                        cpus: cell.cpus,
                        message: e.to_string(),
                    });
                }
            }
        } else {
            None
        };
        let args = runner_args(opts, control.url(), cell, repeat, i, redis, measured, proxy);
        match RunnerProcess::spawn(&opts.exe, &args, group) {
            Ok(runner) => runners.push(runner),
            Err(source) => {
                kill_all(runners).await;
                return Err(LabError::Spawn {
                    what: format!("{} lab runner", opts.exe.display()),
                    source,
                });
            }
        }
    }

    enum Ended {
        Exited(Vec<std::io::Result<std::process::ExitStatus>>),
        Interrupted,
        TimedOut,
    }
    let deadline = run_deadline(opts.records, opts.time_scale);
    let ended = {
        let all = futures::future::join_all(runners.iter_mut().map(RunnerProcess::wait));
        tokio::select! {
            statuses = all => Ended::Exited(statuses),
            _ = shutdown.wait() => Ended::Interrupted,
            _ = tokio::time::sleep(deadline) => Ended::TimedOut,
        }
    };
    let statuses = match ended {
        Ended::Exited(statuses) => statuses,
        Ended::Interrupted => {
            kill_all(runners).await;
            return Err(LabError::Interrupted);
        }
        Ended::TimedOut => {
            kill_all(runners).await;
            return Err(runner_err(format!(
                "still running after {deadline:?}; stopped it"
            )));
        }
    };
    let several = runners.len() > 1;
    let mut parts = Vec::with_capacity(runners.len());
    let mut failure = None;
    for (i, (runner, status)) in runners.into_iter().zip(statuses).enumerate() {
        let who = if several {
            format!("replica {} of {label}", i + 1)
        } else {
            label.to_string()
        };
        match runner.finish(status).await {
            RunnerEnd::Done { result, said } => {
                if !said.is_empty() {
                    progress(Progress::Warning(format!("runner ({who}) said: {said}")));
                }
                parts.push(*result);
            }
            RunnerEnd::Interrupted => failure = Some(LabError::Interrupted),
            RunnerEnd::Failed(message) => {
                if failure.is_none() {
                    failure = Some(runner_err(if several {
                        format!("replica {}: {message}", i + 1)
                    } else {
                        message
                    }));
                }
            }
        }
    }
    if let Some(failure) = failure {
        return Err(failure);
    }

    let stats = control.stats().await?;
    let peak = |endpoint: &str| {
        u64_at(&stats, endpoint, "peak_offered")
            .ok_or_else(|| control.error(format!("/stats has no {endpoint}.peak_offered: {stats}")))
    };
    let sim_peaks = SimPeaks {
        enrichment: peak("enrich")?,
        writes: peak("records")?,
    };
    let mut result = replicas::merge(parts, sim_peaks);
    result.scenario = cell.scenario.clone();
    result.repeat = repeat;
    result.cpus = cell.cpus;
    result.peak_writes_offered = sim_peaks.writes;
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

/// Kills and reaps every runner, then removes their cgroups.
async fn kill_all(runners: Vec<RunnerProcess>) {
    futures::future::join_all(runners.into_iter().map(RunnerProcess::kill)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_seeds_are_shared_by_strategies_and_differ_by_repeat_and_scenario() {
        let a = run_seed(1, "healthy", 1);
        assert_eq!(a, run_seed(1, "healthy", 1));
        assert_ne!(a, run_seed(1, "healthy", 2));
        assert_ne!(a, run_seed(1, "slow-write", 1));
        assert_ne!(a, run_seed(2, "healthy", 1));
    }

    #[test]
    fn deadline_covers_the_slowest_serial_run() {
        // 200 records, four calls each at the full 2 s timeout, one at a time.
        assert!(run_deadline(200, 1.0) > Duration::from_secs(1600));
        assert!(run_deadline(24, 0.05) < Duration::from_secs(120));
    }
}
