//! [`FanoutConfig`]: the fan-out benchmark's settings, and how long a run of them is planned to
//! take.

use std::time::Duration;

use super::strategy::FanoutStrategy;

/// The benchmark's settings.
#[derive(Debug, Clone)]
pub struct FanoutConfig {
    pub jobs: usize,
    pub delay: Duration,
    pub limit: usize,
    pub rounds: usize,
    pub strategies: Vec<FanoutStrategy>,
}

/// How many sleeps of the delay [`run`](super::run()) times on each timer before the rounds.
pub const TIMER_SAMPLES: usize = 10;

/// The least a wave of calls costs beyond the delay (waking the caller, starting the next call),
/// used only to plan a run: with a tiny delay and many waves this overhead is the run's length.
pub const WAVE_OVERHEAD: Duration = Duration::from_micros(50);

impl FanoutConfig {
    /// A lower bound on how long [`run`](super::run()) takes: the timer readings, then the
    /// warm-up round and `rounds` measured rounds of every strategy, a bounded round being
    /// `ceil(jobs / limit)` waves of `delay` + [`WAVE_OVERHEAD`] and an unbounded one a single
    /// wave.
    pub fn planned(&self) -> Duration {
        let wave = self.delay.as_secs_f64() + WAVE_OVERHEAD.as_secs_f64();
        let waves = self.jobs.div_ceil(self.limit.max(1)) as f64;
        let per_round: f64 = self
            .strategies
            .iter()
            .map(|s| if s.is_bounded() { waves * wave } else { wave })
            .sum();
        let timers = 2.0 * TIMER_SAMPLES as f64 * self.delay.as_secs_f64();
        let secs = timers + per_round * (self.rounds as f64 + 1.0);
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    }
}

/// `ceil(jobs / limit) x delay`, in milliseconds.
pub fn ideal_bounded_ms(jobs: usize, limit: usize, delay: Duration) -> f64 {
    jobs.div_ceil(limit.max(1)) as f64 * delay.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ideal_time_matches_the_reference() {
        let ideal = ideal_bounded_ms(500, 8, Duration::from_millis(20));
        assert!((ideal - 1260.0).abs() < 1e-9);
        assert!((ideal_bounded_ms(16, 8, Duration::from_millis(20)) - 40.0).abs() < 1e-9);
    }

    #[test]
    fn the_plan_counts_waves_rounds_and_timer_readings() {
        let config = FanoutConfig {
            jobs: 500,
            delay: Duration::from_millis(20),
            limit: 8,
            rounds: 5,
            strategies: FanoutStrategy::ALL.to_vec(),
        };
        // 20 timer sleeps; 6 rounds of 4 x 63 waves + 1 wave, each 20.05 ms.
        let expected = 20.0 * 0.020 + 6.0 * (4.0 * 63.0 + 1.0) * 0.020_05;
        assert!((config.planned().as_secs_f64() - expected).abs() < 1e-6);
        // A tiny delay does not make a million waves look free.
        let tiny = FanoutConfig {
            jobs: 1_000_000,
            delay: Duration::from_nanos(1),
            limit: 1,
            rounds: 1,
            strategies: vec![FanoutStrategy::Budget],
        };
        assert!(
            tiny.planned() >= Duration::from_secs(100),
            "{:?}",
            tiny.planned()
        );
    }
}
