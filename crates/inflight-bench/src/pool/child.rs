//! [`run_child`]: one pool size run in a child process, inside the benchmark's cgroup if there is
//! one, with the cgroup's throttling counters read around it.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use inflight_cpu::{throttle_stats_at, QuotaGroup, ThrottleStats};

use super::error::BenchError;
use super::worker::PoolRun;
use crate::shutdown::Shutdown;

/// Runs the command for one pool size, inside `group` if there is one, and reads the
/// [`PoolRun`] it prints (one JSON line on stdout). Throttling is read from `stats_dir`'s
/// `cpu.stat` (the group's, or the cgroup this process already runs in) before and after. The
/// child is killed if it outlives `duration` by more than 30 s, or at once if `shutdown` fires.
pub fn run_child(
    mut cmd: Command,
    pool: usize,
    duration: Duration,
    group: Option<&QuotaGroup>,
    stats_dir: Option<&Path>,
    shutdown: &Shutdown,
) -> Result<(PoolRun, Option<ThrottleStats>), BenchError> {
    if let Some(g) = group {
        g.prepare_command(&mut cmd);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let before = stats_dir.and_then(|d| throttle_stats_at(d).ok());
    let mut child = cmd
        .spawn()
        .map_err(|source| BenchError::Spawn { pool, source })?;
    let limit = duration + Duration::from_secs(30);
    let started = Instant::now();
    let status = loop {
        if shutdown.fired() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(BenchError::Interrupted { pool });
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BenchError::Timeout { pool, limit });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(source) => return Err(BenchError::Spawn { pool, source }),
        }
    };
    // A Ctrl-C at the terminal reaches the child too; it may have died of it just now.
    if shutdown.fired() {
        return Err(BenchError::Interrupted { pool });
    }
    let after = stats_dir.and_then(|d| throttle_stats_at(d).ok());
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut stdout);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut stderr);
    }
    if !status.success() {
        return Err(BenchError::Child {
            pool,
            status,
            stderr: stderr.trim().to_string(),
        });
    }
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .ok_or_else(|| BenchError::Output {
            pool,
            reason: "empty stdout".to_string(),
        })?;
    let run: PoolRun = serde_json::from_str(line).map_err(|e| BenchError::Output {
        pool,
        reason: format!("{e} in {line:?}"),
    })?;
    let throttle = match (before, after) {
        (Some(b), Some(a)) => Some(a.since(&b)),
        _ => None,
    };
    Ok((run, throttle))
}
