//! Runs the cells of a lab run one after another: each run in its own runner process (`inflight
//! lab runner`), placed in a fresh CPU-quota cgroup before its async runtime starts, against the
//! sim set to the cell's scenario; the runner is killed and reaped before its cgroup is dropped.

use std::process::Stdio;
use std::time::Duration;

use inflight_cpu::{Enforcement, QuotaGroup};
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use super::matrix::Cell;
use super::plan::PlannedRun;
use super::progress::Progress;
use super::Shutdown;
use super::{LabError, LabOptions};
use crate::results::RunResult;
use crate::sim::client::{u64_at, SimClient, SimClientError};

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

/// The most a run may take before it is stopped: every record's four calls one after another,
/// each at its full 2 s timeout (times the time scale), plus a minute for start-up.
pub fn run_deadline(records: u64, time_scale: f64) -> Duration {
    Duration::from_secs(60) + Duration::from_secs_f64(records as f64 * 8.0 * time_scale * 1.25)
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

/// Runs `todo` in order against the sim at `url`, each run in its own runner process, inside a
/// fresh CPU-quota cgroup when `limited`. Each result is handed to `finished` (which keeps it)
/// before the run is reported done; progress counts `todo` alone ("run k of `todo.len()`").
pub(crate) async fn run_cells(
    opts: &LabOptions,
    todo: &[PlannedRun],
    shutdown: &Shutdown,
    progress: &mut dyn FnMut(Progress<'_>),
    url: &str,
    limited: bool,
    finished: &mut dyn FnMut(&RunResult) -> Result<(), LabError>,
) -> Result<(), LabError> {
    let control = SimClient::new(url.to_string())?;
    // Fail early, with the sim's own message, if it is not there or lacks a scenario.
    control.stats().await.map_err(|e| SimClientError {
        message: format!(
            "no `inflight sim` answers there (start one with `inflight sim --port <port>`, or leave out --sim-url): {}",
            e.message
        ),
        url: e.url,
    })?;
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
        let mut result = run_one(opts, shutdown, &control, cell, repeat, limited, progress).await?;
        result.seed = run_seed(opts.seed, &cell.scenario, repeat);
        finished(&result)?;
        progress(Progress::RunDone {
            index,
            total,
            result: &result,
        });
    }
    Ok(())
}

async fn run_one(
    opts: &LabOptions,
    shutdown: &Shutdown,
    control: &SimClient,
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
        .arg(&cell.strategy);
    if let Some(file) = &opts.strategies_file {
        cmd.arg("--strategies").arg(file);
    }
    cmd.arg("--sim-url")
        .arg(control.url())
        .arg("--records")
        .arg(opts.records.to_string())
        .arg("--time-scale")
        .arg(opts.time_scale.to_string())
        .arg("--seed")
        .arg(seed.to_string());
    if let Some(addr) = opts.metrics_addr {
        cmd.arg("--metrics-addr").arg(addr.to_string());
    }
    cmd.stdin(Stdio::piped())
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
    // A runner ended by Ctrl-C, SIGTERM or SIGHUP (sent to the whole process group, or to it
    // alone) was interrupted, not broken.
    {
        use std::os::unix::process::ExitStatusExt;
        if matches!(status.signal(), Some(1 | 2 | 15)) {
            return Err(LabError::Interrupted);
        }
    }
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
        .ok_or_else(|| control.error(format!("/stats has no records.peak_offered: {stats}")))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::results::sample_run as run;

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
