//! The CPU-bound pool benchmark behind `inflight pool-bench`: a fixed arithmetic task run by
//! thread pools of several sizes, each pool in its own child process inside a cgroup with a CPU
//! quota, with per-task latency percentiles and the cgroup's throttling counters.
//!
//! The child process is whatever command the caller builds (the CLI re-executes itself with a
//! hidden flag that calls [`run_pool`] and prints its [`PoolRun`] as one JSON line).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use inflight_cpu::{throttle_stats_at, Enforcement, QuotaGroup, ThrottleStats};
use serde::{Deserialize, Serialize};

/// The CFS period the reading of the results refers to (the kernel default).
pub const CFS_PERIOD_MS: f64 = 100.0;

/// The task: `iters` rounds of a 64-bit mix (xorshift-multiply) seeded by `seed`. Its result
/// depends on every round and goes through `black_box`, so the optimizer cannot drop or shorten it.
pub fn task(iters: u64, seed: u64) -> u64 {
    let mut x = std::hint::black_box(seed | 1);
    for i in 0..std::hint::black_box(iters) {
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd).wrapping_add(i);
        x ^= x >> 29;
    }
    std::hint::black_box(x)
}

/// The number of task iterations that take about `target` on one idle CPU, and the median time
/// one task of that size took while calibrating.
pub fn calibrate(target: Duration) -> (u64, Duration) {
    let mut iters = 1_000u64;
    // Grow until one task is long enough to time reliably, then scale linearly.
    loop {
        let t = Instant::now();
        task(iters, 7);
        let took = t.elapsed();
        if took >= Duration::from_micros(200) || iters >= 1 << 40 {
            let per_iter = took.as_secs_f64() / iters as f64;
            iters = ((target.as_secs_f64() / per_iter).round() as u64).max(1);
            break;
        }
        iters *= 4;
    }
    // Warm the CPU up first (frequency scaling, caches), so the reported size matches what the
    // sweep's busy workers see; bounded to 100 ms.
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_millis(100) && !interrupted() {
        task(iters, 3);
    }
    // Up to 101 samples (10 s at the largest task size); a caught Ctrl-C cuts it short.
    let mut samples = Vec::with_capacity(101);
    for i in 0..101 {
        let t = Instant::now();
        task(iters, i);
        samples.push(t.elapsed());
        if interrupted() {
            break;
        }
    }
    samples.sort();
    (iters, samples[samples.len() / 2])
}

/// What one pool size measured, in the process that ran it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PoolRun {
    pub pool: usize,
    pub tasks: u64,
    /// From the moment all workers started to the moment the last one stopped.
    pub elapsed_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// `std::thread::available_parallelism()` inside the process that ran the pool.
    pub available_parallelism: usize,
}

/// Runs `pool` worker threads, each repeating the task until `duration` has passed, and records
/// every task's latency (start to finish, so preemption and throttling inside a task count).
pub fn run_pool(pool: usize, duration: Duration, iters: u64) -> PoolRun {
    let pool = pool.max(1);
    let barrier = Arc::new(Barrier::new(pool + 1));
    let workers: Vec<_> = (0..pool)
        .map(|w| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                // 1 ns .. 1 h at 3 significant figures.
                let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
                    .expect("valid histogram bounds");
                barrier.wait();
                let deadline = Instant::now() + duration;
                let mut sink = 0u64;
                let mut n = 0u64;
                loop {
                    let t = Instant::now();
                    if t >= deadline {
                        break;
                    }
                    sink = sink.wrapping_add(task(iters, (w as u64) << 32 | n));
                    hist.saturating_record(t.elapsed().as_nanos() as u64);
                    n += 1;
                }
                std::hint::black_box(sink);
                (hist, Instant::now())
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let mut total =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds");
    let mut end = start;
    for w in workers {
        let (hist, finished) = w.join().expect("a pool worker panicked");
        total.add(&hist).expect("histograms with the same bounds");
        end = end.max(finished);
    }
    let ms = |ns: u64| ns as f64 / 1e6;
    PoolRun {
        pool,
        tasks: total.len(),
        elapsed_s: (end - start).as_secs_f64(),
        p50_ms: ms(total.value_at_quantile(0.5)),
        p99_ms: ms(total.value_at_quantile(0.99)),
        max_ms: ms(total.max()),
        available_parallelism: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    }
}

/// One row of the results: a pool size with its throughput, latency and throttling.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PoolResult {
    pub pool: usize,
    pub tasks: u64,
    pub tasks_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Periods in which the cgroup was throttled while this pool ran (`None`: not readable).
    pub nr_throttled: Option<u64>,
    pub throttled_ms: Option<f64>,
    pub available_parallelism: usize,
}

impl PoolResult {
    pub fn new(run: &PoolRun, throttle: Option<ThrottleStats>) -> PoolResult {
        PoolResult {
            pool: run.pool,
            tasks: run.tasks,
            tasks_per_s: if run.elapsed_s > 0.0 {
                run.tasks as f64 / run.elapsed_s
            } else {
                0.0
            },
            p50_ms: run.p50_ms,
            p99_ms: run.p99_ms,
            max_ms: run.max_ms,
            nr_throttled: throttle.map(|t| t.nr_throttled),
            throttled_ms: throttle.map(|t| t.throttled.as_secs_f64() * 1e3),
            available_parallelism: run.available_parallelism,
        }
    }
}

/// The whole benchmark: `inflight pool-bench --json` prints this.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BenchReport {
    /// The quota asked for with `--cpus`, if any.
    pub cpus: Option<f64>,
    /// `cgroup-v1`, `cgroup-v2` or `none`.
    pub enforcement: String,
    /// The cgroup the pools ran in, when the tool created one.
    pub cgroup: Option<String>,
    pub duration_s: f64,
    pub task_iters: u64,
    /// The median time of one task on an idle CPU, measured before the sweep.
    pub task_us: f64,
    pub results: Vec<PoolResult>,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Catches SIGINT, SIGTERM and SIGHUP from now on: instead of ending the process at once (which
/// would leave the benchmark's cgroup behind), they set a flag that [`run_child`] and the caller
/// check, so the child is killed and the cgroup removed on the way out. The child processes do
/// not inherit the handler (exec resets it).
pub fn catch_interrupts() -> std::io::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is valid; the handler only stores to an atomic, which is
        // async-signal-safe; sigemptyset and sigaction get valid pointers.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether a signal caught by [`catch_interrupts`] has arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Why a pool could not be run in its child process.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("cannot start the pool {pool} child process: {source}")]
    Spawn {
        pool: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("the pool {pool} child process did not finish within {limit:?} and was killed")]
    Timeout { pool: usize, limit: Duration },
    #[error("the pool {pool} child process failed ({status}): {stderr}")]
    Child {
        pool: usize,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("the pool {pool} child process printed no result: {reason}")]
    Output { pool: usize, reason: String },
    #[error("interrupted while pool {pool} ran; its child process was stopped")]
    Interrupted { pool: usize },
}

/// Runs the command for one pool size, inside `group` if there is one, and reads the
/// [`PoolRun`] it prints (one JSON line on stdout). Throttling is read from `stats_dir`'s
/// `cpu.stat` (the group's, or the cgroup this process already runs in) before and after. The
/// child is killed if it outlives `duration` by more than 30 s, or at once if a signal caught by
/// [`catch_interrupts`] arrives.
pub fn run_child(
    mut cmd: Command,
    pool: usize,
    duration: Duration,
    group: Option<&QuotaGroup>,
    stats_dir: Option<&Path>,
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
        if interrupted() {
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
    if interrupted() {
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

/// How the quota was enforced, for the report.
pub fn enforcement_of(group: Option<&QuotaGroup>) -> Enforcement {
    group.map(|g| g.enforcement()).unwrap_or(Enforcement::None)
}

/// One sentence that reads the results: where throughput plateaus and what the tail does past it.
pub fn interpret(report: &BenchReport) -> String {
    let rs = &report.results;
    if rs.is_empty() {
        return "no pool sizes were run".to_string();
    }
    let best = rs.iter().map(|r| r.tasks_per_s).fold(0.0, f64::max);
    if best <= 0.0 {
        return "no task completed: each pool ran for less than one task takes".to_string();
    }
    // The smallest pool that reaches 90% of the best throughput is where the plateau starts.
    let knee = rs
        .iter()
        .filter(|r| r.tasks_per_s >= 0.9 * best)
        .min_by_key(|r| r.pool)
        .unwrap_or(&rs[0]);
    let biggest = rs.iter().max_by_key(|r| r.pool).unwrap_or(&rs[0]);
    let mut s = String::new();
    let limit = match report.cpus {
        Some(c) if report.enforcement != "none" => format!("the {c} CPU quota"),
        _ => "the CPUs available".to_string(),
    };
    if rs.len() == 1 {
        s.push_str(&format!(
            "one pool size only: {:.0} tasks/s, p99 {:.2} ms, max {:.2} ms",
            knee.tasks_per_s, knee.p99_ms, knee.max_ms
        ));
    } else if biggest.pool == knee.pool {
        s.push_str(&format!(
            "throughput still grows up to the largest pool ({}, {:.0} tasks/s): no plateau within {limit}",
            biggest.pool, biggest.tasks_per_s
        ));
    } else {
        s.push_str(&format!(
            "throughput plateaus at pool {} ({:.0} tasks/s, {limit}); pool {} changes throughput by {:+.0}% while p99 goes {:.2} -> {:.2} ms and max {:.2} -> {:.2} ms",
            knee.pool,
            knee.tasks_per_s,
            biggest.pool,
            (biggest.tasks_per_s / knee.tasks_per_s - 1.0) * 100.0,
            knee.p99_ms,
            biggest.p99_ms,
            knee.max_ms,
            biggest.max_ms,
        ));
        if report.enforcement != "none" {
            s.push_str(&format!(" (the CFS period is {CFS_PERIOD_MS:.0} ms)"));
        }
    }
    if report.enforcement == "none" {
        s.push_str("; no quota was enforced by this tool, so throttling comes only from limits already on this process");
    } else {
        let throttled: u64 = rs.iter().filter_map(|r| r.nr_throttled).sum();
        if throttled == 0 {
            s.push_str("; the cgroup was never throttled, so the tail here comes from threads sharing CPUs (other load on this machine), not from the quota");
        } else {
            let worst = rs
                .iter()
                .max_by(|a, b| {
                    a.throttled_ms
                        .unwrap_or(0.0)
                        .total_cmp(&b.throttled_ms.unwrap_or(0.0))
                })
                .unwrap_or(&rs[0]);
            s.push_str(&format!(
                "; the quota throttled the group most at pool {} ({} periods, {:.0} ms); throttled time adds up over every CPU's run queue, so it can exceed the wall time",
                worst.pool,
                worst.nr_throttled.unwrap_or(0),
                worst.throttled_ms.unwrap_or(0.0)
            ));
        }
    }
    s
}

/// The human table, one row per pool size.
pub fn render_table(report: &BenchReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:>5}  {:>12}  {:>9}  {:>9}  {:>9}  {:>12}  {:>12}\n",
        "pool", "tasks/s", "p50 ms", "p99 ms", "max ms", "nr_throttled", "throttled ms"
    ));
    for r in &report.results {
        let throttled = r
            .nr_throttled
            .map(|n| n.to_string())
            .unwrap_or_else(|| "-".into());
        let throttled_ms = r
            .throttled_ms
            .map(|n| format!("{n:.0}"))
            .unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "{:>5}  {:>12}  {:>9.3}  {:>9.3}  {:>9.2}  {:>12}  {:>12}\n",
            r.pool,
            group_thousands(r.tasks_per_s.round() as u64),
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            throttled,
            throttled_ms
        ));
    }
    out
}

fn group_thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_depends_on_its_inputs() {
        assert_ne!(task(100, 1), task(100, 2));
        assert_ne!(task(100, 1), task(101, 1));
        assert_eq!(task(100, 1), task(100, 1));
    }

    #[test]
    fn calibration_finds_a_positive_size() {
        let (iters, took) = calibrate(Duration::from_micros(50));
        assert!(iters >= 1);
        assert!(took > Duration::ZERO);
    }

    #[test]
    fn a_short_pool_run_counts_tasks_and_orders_percentiles() {
        let run = run_pool(2, Duration::from_millis(100), 1_000);
        assert_eq!(run.pool, 2);
        assert!(run.tasks > 0);
        assert!(run.p50_ms <= run.p99_ms && run.p99_ms <= run.max_ms);
        // The run lasts about as long as asked: at least the duration, not absurdly more.
        assert!(
            run.elapsed_s >= 0.09 && run.elapsed_s < 10.0,
            "{}",
            run.elapsed_s
        );
    }

    fn row(pool: usize, tps: f64, p99: f64, max: f64) -> PoolResult {
        PoolResult {
            pool,
            tasks: 1,
            tasks_per_s: tps,
            p50_ms: 0.05,
            p99_ms: p99,
            max_ms: max,
            nr_throttled: Some(pool as u64 * 10),
            throttled_ms: Some(pool as f64 * 100.0),
            available_parallelism: 1,
        }
    }

    #[test]
    fn interpretation_names_the_plateau_and_the_tail() {
        let report = BenchReport {
            cpus: Some(1.0),
            enforcement: "cgroup-v1".into(),
            cgroup: None,
            duration_s: 5.0,
            task_iters: 1,
            task_us: 50.0,
            results: vec![
                row(1, 19_000.0, 0.1, 0.5),
                row(2, 19_500.0, 40.0, 55.0),
                row(4, 19_200.0, 60.0, 80.0),
                row(8, 19_100.0, 80.0, 98.0),
            ],
        };
        let s = interpret(&report);
        assert!(s.contains("plateaus at pool 1"), "{s}");
        assert!(s.contains("0.10 -> 80.00"), "{s}");
        assert!(s.contains("CFS period"), "{s}");
        assert!(s.contains("most at pool 8 (80 periods, 800 ms)"), "{s}");
        let table = render_table(&report);
        assert!(table.contains("19,500"), "{table}");
        assert_eq!(table.lines().count(), 5);
    }

    #[test]
    fn interpretation_of_runs_without_tasks_has_no_nan() {
        let mut empty = row(1, 0.0, 0.0, 0.0);
        empty.tasks = 0;
        let report = BenchReport {
            cpus: None,
            enforcement: "none".into(),
            cgroup: None,
            duration_s: 1e-9,
            task_iters: 1,
            task_us: 50.0,
            results: vec![empty.clone(), PoolResult { pool: 2, ..empty }],
        };
        let s = interpret(&report);
        assert!(s.contains("no task completed"), "{s}");
        assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
    }

    #[test]
    fn thousands_grouping() {
        assert_eq!(group_thousands(0), "0");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1_000), "1,000");
        assert_eq!(group_thousands(1_234_567), "1,234,567");
    }
}
