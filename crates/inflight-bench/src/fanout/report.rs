//! [`FanoutReport`]: what a fan-out run measured (the JSON `inflight fanout --json` prints), and
//! its human table.

use serde::{Deserialize, Serialize};

/// One strategy's measurements over the rounds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StrategyResult {
    pub strategy: String,
    /// The most callers inside the downstream at once, over all rounds.
    pub peak: usize,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    /// `median_ms / ideal` (ideal bounded time, or one delay for `unbounded`).
    pub ratio_to_ideal: f64,
    /// How many futures or tasks the strategy builds before the first call returns.
    pub up_front: usize,
    /// `futures` or `tasks`.
    pub up_front_kind: String,
    pub calls: u64,
}

/// How long sleeps of the downstream's delay really took on the timer in use.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TimerReading {
    /// `tokio` or `precise`.
    pub timer: String,
    pub samples: usize,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
}

/// Everything `inflight fanout --json` prints.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FanoutReport {
    pub jobs: usize,
    pub delay_ms: f64,
    pub limit: usize,
    pub rounds: usize,
    /// `ceil(jobs / limit) x delay`.
    pub ideal_bounded_ms: f64,
    /// The timer the downstream slept on.
    pub timer: String,
    /// One sleep of `delay` on each timer, measured before the rounds.
    pub timer_readings: Vec<TimerReading>,
    pub results: Vec<StrategyResult>,
}

/// Milliseconds to at most 6 decimals, without trailing zeros (`20`, `0.5`, `0.000001`).
fn short_ms(ms: f64) -> String {
    let rounded = (ms * 1e6).round() / 1e6;
    format!("{rounded}")
}

/// The human table.
pub fn render(report: &FanoutReport) -> String {
    let delay = short_ms(report.delay_ms);
    let mut out = String::new();
    out.push_str(&format!(
        "{} jobs of {} ms, limit {}, {} rounds after a warm-up; downstream timer: {}\n",
        report.jobs, delay, report.limit, report.rounds, report.timer
    ));
    out.push_str(&format!(
        "ideal bounded time: ceil({} / {}) x {} ms = {} ms\n",
        report.jobs,
        report.limit,
        delay,
        short_ms(report.ideal_bounded_ms)
    ));
    for t in &report.timer_readings {
        out.push_str(&format!(
            "a {} ms sleep on the {} timer took {:.3} ms median (min {:.3}, max {:.3}, {} samples)\n",
            delay, t.timer, t.median_ms, t.min_ms, t.max_ms, t.samples
        ));
    }
    out.push('\n');
    out.push_str(&format!(
        "{:<17} {:>5} {:>10} {:>9} {:>9} {:>8}  {}\n",
        "strategy", "peak", "median ms", "min ms", "max ms", "x ideal", "built up front"
    ));
    for r in &report.results {
        out.push_str(&format!(
            "{:<17} {:>5} {:>10.1} {:>9.1} {:>9.1} {:>8.3}  {} {}\n",
            r.strategy,
            r.peak,
            r.median_ms,
            r.min_ms,
            r.max_ms,
            r.ratio_to_ideal,
            r.up_front,
            r.up_front_kind
        ));
    }
    out.push_str("(x ideal: unbounded against one delay, the bounded strategies against the ideal bounded time)\n");
    out
}
