//! [`run`]: the fan-out benchmark from start to report: the timer readings, a warm-up round, then
//! the measured rounds of every strategy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{ideal_bounded_ms, FanoutConfig, TIMER_SAMPLES};
use super::downstream::{Delay, Downstream};
use super::error::FanoutError;
use super::report::{FanoutReport, StrategyResult, TimerReading};
use super::strategy::run_once;
use crate::spread::Spread;
use crate::timer::PreciseTimer;

/// Times `samples` sequential sleeps of `delay` on `timer`.
pub async fn measure_timer(timer: &Delay, delay: Duration, samples: usize) -> TimerReading {
    let mut took = Vec::with_capacity(samples);
    for _ in 0..samples.max(1) {
        let t = Instant::now();
        timer.sleep(delay).await;
        took.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let Spread {
        median: median_ms,
        min: min_ms,
        max: max_ms,
    } = Spread::of(&took);
    TimerReading {
        timer: timer.name().to_string(),
        samples: samples.max(1),
        median_ms,
        min_ms,
        max_ms,
    }
}

/// Runs the benchmark: the timer readings, one unmeasured warm-up round of every strategy, then
/// `rounds` measured rounds per strategy, each against a fresh downstream. `progress` is told
/// about each strategy as it starts.
pub async fn run(
    config: &FanoutConfig,
    timer: Delay,
    mut progress: impl FnMut(&str),
) -> Result<FanoutReport, FanoutError> {
    if config.jobs == 0 || config.limit == 0 || config.rounds == 0 || config.delay.is_zero() {
        return Err(FanoutError::Invalid(
            "jobs, limit, rounds and delay must all be greater than 0".into(),
        ));
    }
    let samples = TIMER_SAMPLES;
    let precise = match &timer {
        Delay::Precise(t) => t.clone(),
        Delay::Tokio => PreciseTimer::new(),
    };
    let timer_readings = vec![
        measure_timer(&Delay::Tokio, config.delay, samples).await,
        measure_timer(&Delay::Precise(precise), config.delay, samples).await,
    ];

    progress("warm-up");
    for &s in &config.strategies {
        let d = Arc::new(Downstream::new(config.delay, timer.clone()));
        run_once(s, &d, config.jobs, config.limit).await?;
    }

    let ideal = ideal_bounded_ms(config.jobs, config.limit, config.delay);
    let mut results = Vec::new();
    for &s in &config.strategies {
        progress(s.name());
        let mut times = Vec::with_capacity(config.rounds);
        let mut peak = 0;
        let mut calls = 0;
        for _ in 0..config.rounds {
            let d = Arc::new(Downstream::new(config.delay, timer.clone()));
            let t = Instant::now();
            run_once(s, &d, config.jobs, config.limit).await?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
            peak = peak.max(d.peak());
            calls += d.calls();
        }
        let Spread {
            median: median_ms,
            min: min_ms,
            max: max_ms,
        } = Spread::of(&times);
        let reference = if s.is_bounded() {
            ideal
        } else {
            config.delay.as_secs_f64() * 1e3
        };
        let (up_front, kind) = s.up_front(config.jobs, config.limit);
        results.push(StrategyResult {
            strategy: s.name().to_string(),
            peak,
            median_ms,
            min_ms,
            max_ms,
            ratio_to_ideal: median_ms / reference,
            up_front,
            up_front_kind: kind.to_string(),
            calls,
        });
    }
    Ok(FanoutReport {
        jobs: config.jobs,
        delay_ms: config.delay.as_secs_f64() * 1e3,
        limit: config.limit,
        rounds: config.rounds,
        ideal_bounded_ms: ideal,
        timer: timer.name().to_string(),
        timer_readings,
        results,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fanout::{render, FanoutStrategy};

    #[tokio::test]
    async fn a_small_real_run_reports_every_strategy() {
        let config = FanoutConfig {
            jobs: 24,
            delay: Duration::from_millis(5),
            limit: 4,
            rounds: 2,
            strategies: FanoutStrategy::ALL.to_vec(),
        };
        let mut seen = Vec::new();
        let report = run(&config, Delay::Precise(PreciseTimer::new()), |s| {
            seen.push(s.to_string())
        })
        .await
        .unwrap();
        assert_eq!(seen.len(), 6);
        assert_eq!(report.results.len(), 5);
        assert_eq!(report.timer_readings.len(), 2);
        for r in &report.results {
            assert_eq!(r.calls, 48);
            assert!(r.min_ms <= r.median_ms && r.median_ms <= r.max_ms);
            if r.strategy == "unbounded" {
                assert_eq!(r.peak, 24);
            } else {
                assert_eq!(r.peak, 4, "{}", r.strategy);
                // 6 waves of 5 ms at the very least.
                assert!(r.min_ms >= 30.0, "{}: {}", r.strategy, r.min_ms);
            }
        }
        assert!(render(&report).contains("buffer_unordered"));
    }

    #[tokio::test]
    async fn zero_settings_are_rejected() {
        let config = FanoutConfig {
            jobs: 0,
            delay: Duration::from_millis(5),
            limit: 4,
            rounds: 1,
            strategies: vec![FanoutStrategy::Unbounded],
        };
        let err = run(&config, Delay::Tokio, |_| {}).await.unwrap_err();
        assert!(err.to_string().contains("greater than 0"));
    }
}
