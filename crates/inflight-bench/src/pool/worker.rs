//! [`run_pool`]: one pool size run in this process (the child side of the benchmark), and the
//! [`PoolRun`] it measures.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::task::task;

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
///
/// # Panics
///
/// If a worker thread cannot be started or panics.
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
