//! [`sweep`]: the pool benchmark from start to report: the quota's cgroup, the calibration, one
//! child process per pool size, the cleanup.

use std::io;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use inflight_cpu::{CgroupError, CpuBudget, Enforcement, QuotaGroup};

use super::child::run_child;
use super::error::BenchError;
use super::report::{enforcement_of, BenchReport, PoolResult};
use super::task::calibrate;
use crate::shutdown::Shutdown;

/// The settings of a sweep over pool sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepConfig {
    /// The CPU quota to enforce with a cgroup made for the sweep; `None` runs under whatever
    /// limits this process already has.
    pub cpus: Option<f64>,
    /// Whether to run without a quota when `cpus` cannot be enforced, rather than fail.
    pub allow_unenforced: bool,
    /// The pool sizes, in the order they run.
    pub pools: Vec<usize>,
    /// How long each pool size runs.
    pub duration: Duration,
    /// The target length of one task on an idle CPU.
    pub task: Duration,
}

/// What the child process for one pool size must do: call
/// [`run_pool`](super::run_pool)`(pool, duration, iters)` and print the [`PoolRun`](super::PoolRun)
/// as one JSON line on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildSpec {
    pub pool: usize,
    pub iters: u64,
    pub duration: Duration,
}

/// What a sweep tells its caller as it goes.
#[derive(Debug)]
#[non_exhaustive]
pub enum SweepEvent<'a> {
    /// `cpus` cannot be enforced, and the sweep goes on without a quota (`allow_unenforced`).
    Unenforced { cpus: f64, error: &'a CgroupError },
    /// The task is sized; the pools run next.
    Calibrated {
        iters: u64,
        /// The median length of one task on an idle CPU.
        task_time: Duration,
        enforcement: Enforcement,
        /// The cgroup the pools run in, when the sweep made one.
        group: Option<&'a QuotaGroup>,
    },
    /// Pool size `pool` starts, for `duration`.
    PoolStarted { pool: usize, duration: Duration },
}

/// How a sweep ended.
#[derive(Debug)]
pub enum SweepOutcome {
    /// Every pool size ran.
    Complete {
        report: BenchReport,
        cleanup: Cleanup,
    },
    /// The shutdown fired: the running child process was stopped.
    Interrupted { cleanup: Cleanup },
}

/// What became of the cgroup the sweep made.
#[derive(Debug)]
pub enum Cleanup {
    /// The sweep made none.
    NoGroup,
    /// Removed.
    Removed(PathBuf),
    /// Left behind: removing it failed.
    Failed { path: PathBuf, error: io::Error },
}

/// Runs the pool benchmark: makes the cgroup for `config.cpus` (if any), calibrates the task,
/// runs each pool size in a child process built by `child` (inside the cgroup), and removes the
/// cgroup. When `shutdown` fires, the running child is killed and the sweep ends
/// [`SweepOutcome::Interrupted`]. `progress` is told what happens as it happens.
///
/// # Errors
///
/// [`BenchError::MoreThanAvailable`] when `cpus` is more than this process can use (checked
/// first, whatever `allow_unenforced` says); [`BenchError::Quota`] when `cpus` cannot be
/// enforced and `allow_unenforced` is off; the
/// others when a pool's child process cannot be started, fails, or prints no result (the cgroup
/// is removed before returning).
pub fn sweep(
    config: &SweepConfig,
    mut child: impl FnMut(&ChildSpec) -> Command,
    shutdown: &Shutdown,
    mut progress: impl FnMut(SweepEvent<'_>),
) -> Result<SweepOutcome, BenchError> {
    if let Some(cpus) = config.cpus {
        if let Some(available) = inflight_cpu::more_than_available(cpus) {
            return Err(BenchError::MoreThanAvailable { cpus, available });
        }
    }
    let group = match config.cpus {
        Some(cpus) => match QuotaGroup::create(cpus) {
            Ok(g) => Some(g),
            Err(error) if config.allow_unenforced => {
                progress(SweepEvent::Unenforced {
                    cpus,
                    error: &error,
                });
                None
            }
            Err(source) => return Err(BenchError::Quota { cpus, source }),
        },
        None => None,
    };
    // Without our own group, throttling is read from the cgroup this process already runs in.
    let stats_dir: Option<PathBuf> = match &group {
        Some(g) => Some(g.path().to_path_buf()),
        None => CpuBudget::detect()
            .ok()
            .and_then(|b| b.levels.first().map(|l| l.dir.clone())),
    };
    let enforcement = enforcement_of(group.as_ref());

    let (iters, task_time) = calibrate(config.task, shutdown);
    progress(SweepEvent::Calibrated {
        iters,
        task_time,
        enforcement,
        group: group.as_ref(),
    });
    if shutdown.fired() {
        return Ok(SweepOutcome::Interrupted {
            cleanup: remove(group),
        });
    }

    let mut results = Vec::with_capacity(config.pools.len());
    for &pool in &config.pools {
        progress(SweepEvent::PoolStarted {
            pool,
            duration: config.duration,
        });
        let cmd = child(&ChildSpec {
            pool,
            iters,
            duration: config.duration,
        });
        match run_child(
            cmd,
            pool,
            config.duration,
            group.as_ref(),
            stats_dir.as_deref(),
            shutdown,
        ) {
            Ok((run, throttle)) => results.push(PoolResult::new(&run, throttle)),
            Err(BenchError::Interrupted { .. }) => {
                return Ok(SweepOutcome::Interrupted {
                    cleanup: remove(group),
                })
            }
            Err(e) => return Err(e),
        }
    }

    let report = BenchReport {
        cpus: config.cpus,
        enforcement,
        cgroup: group.as_ref().map(|g| g.path().display().to_string()),
        duration_s: config.duration.as_secs_f64(),
        task_iters: iters,
        task_us: task_time.as_secs_f64() * 1e6,
        results,
    };
    Ok(SweepOutcome::Complete {
        report,
        cleanup: remove(group),
    })
}

fn remove(group: Option<QuotaGroup>) -> Cleanup {
    match group {
        None => Cleanup::NoGroup,
        Some(g) => {
            let path = g.path().to_path_buf();
            match g.remove() {
                Ok(()) => Cleanup::Removed(path),
                Err(error) => Cleanup::Failed { path, error },
            }
        }
    }
}
