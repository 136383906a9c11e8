//! The pool benchmark's unit of work: a fixed arithmetic [`task`], and [`calibrate`], which sizes
//! it to a target length on this machine.

use std::time::{Duration, Instant};

use crate::shutdown::Shutdown;

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
/// one task of that size took while calibrating. A fired `shutdown` cuts the measuring short.
pub fn calibrate(target: Duration, shutdown: &Shutdown) -> (u64, Duration) {
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
    while warm.elapsed() < Duration::from_millis(100) && !shutdown.fired() {
        task(iters, 3);
    }
    // Up to 101 samples (10 s at the largest task size); a shutdown cuts it short.
    let mut samples = Vec::with_capacity(101);
    for i in 0..101 {
        let t = Instant::now();
        task(iters, i);
        samples.push(t.elapsed());
        if shutdown.fired() {
            break;
        }
    }
    samples.sort();
    (iters, samples[samples.len() / 2])
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
        let (iters, took) = calibrate(Duration::from_micros(50), &Shutdown::never());
        assert!(iters >= 1);
        assert!(took > Duration::ZERO);
    }
}
