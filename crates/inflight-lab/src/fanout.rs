//! The fan-out benchmark behind `inflight fanout`: a stand-in downstream that counts the callers
//! inside it and keeps the peak, and five ways to send it many jobs: unbounded, `buffer_unordered`,
//! a semaphore around a join of all jobs, a `JoinSet` with a semaphore, and an `inflight::Budget`.
//!
//! The downstream's delay needs a finer timer than tokio's: tokio's timer wheel ticks every
//! millisecond and rounds deadlines up to the next tick, so a 20 ms call lasts about 21 ms and a
//! bounded run of 63 waves comes out ~5% over the ideal. [`PreciseTimer`] (one thread parked with
//! a nanosecond timeout) wakes within tens of microseconds; `--timer tokio` measures the difference.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures::stream::StreamExt;
use inflight::{Budget, BudgetConfig};
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, Semaphore};

use crate::results::Spread;

/// A timer thread that completes sleeps close to their deadline (parks with a nanosecond
/// timeout instead of ticking every millisecond). Cheap to clone; the thread stops when the last
/// clone is dropped.
pub struct PreciseTimer {
    shared: Arc<TimerShared>,
}

struct TimerShared {
    state: Mutex<TimerState>,
    thread: Mutex<Option<JoinHandle<()>>>,
    handles: AtomicUsize,
}

#[derive(Default)]
struct TimerState {
    heap: BinaryHeap<Reverse<Entry>>,
    next_seq: u64,
    shutdown: bool,
}

struct Entry {
    deadline: Instant,
    seq: u64,
    tx: oneshot::Sender<()>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.deadline, self.seq).cmp(&(other.deadline, other.seq))
    }
}

impl PreciseTimer {
    /// Starts the timer thread.
    pub fn new() -> PreciseTimer {
        let shared = Arc::new(TimerShared {
            state: Mutex::new(TimerState::default()),
            thread: Mutex::new(None),
            handles: AtomicUsize::new(1),
        });
        let worker = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("precise-timer".into())
            .spawn(move || timer_loop(&worker))
            .expect("spawn the timer thread");
        *shared.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        PreciseTimer { shared }
    }

    /// Completes at `deadline` (or just after).
    pub fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        let wake = {
            let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            let seq = state.next_seq;
            state.next_seq += 1;
            let earliest = state
                .heap
                .peek()
                .map(|Reverse(e)| deadline < e.deadline)
                .unwrap_or(true);
            state.heap.push(Reverse(Entry { deadline, seq, tx }));
            earliest
        };
        if wake {
            self.unpark();
        }
        async move {
            let _ = rx.await;
        }
    }

    /// Completes after `delay`.
    pub fn sleep(&self, delay: Duration) -> impl Future<Output = ()> + Send + 'static {
        self.sleep_until(Instant::now() + delay)
    }

    fn unpark(&self) {
        if let Some(h) = self
            .shared
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            h.thread().unpark();
        }
    }
}

impl Default for PreciseTimer {
    fn default() -> Self {
        PreciseTimer::new()
    }
}

impl Clone for PreciseTimer {
    fn clone(&self) -> Self {
        self.shared.handles.fetch_add(1, Ordering::SeqCst);
        PreciseTimer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for PreciseTimer {
    fn drop(&mut self) {
        if self.shared.handles.fetch_sub(1, Ordering::SeqCst) != 1 {
            return;
        }
        self.shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shutdown = true;
        let handle = self
            .shared
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(h) = handle {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

fn timer_loop(shared: &TimerShared) {
    loop {
        let next = {
            let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            if state.shutdown {
                // Pending sleeps complete (their senders drop) rather than hang.
                state.heap.clear();
                return;
            }
            let now = Instant::now();
            while state
                .heap
                .peek()
                .is_some_and(|Reverse(e)| e.deadline <= now)
            {
                if let Some(Reverse(e)) = state.heap.pop() {
                    let _ = e.tx.send(());
                }
            }
            state.heap.peek().map(|Reverse(e)| e.deadline)
        };
        match next {
            Some(deadline) => {
                let now = Instant::now();
                if deadline > now {
                    std::thread::park_timeout(deadline - now);
                }
            }
            None => std::thread::park(),
        }
    }
}

/// Which timer the stand-in downstream sleeps on.
#[derive(Clone)]
pub enum Delay {
    /// `tokio::time::sleep` (1 ms ticks, deadlines rounded up).
    Tokio,
    Precise(PreciseTimer),
}

impl Delay {
    pub fn name(&self) -> &'static str {
        match self {
            Delay::Tokio => "tokio",
            Delay::Precise(_) => "precise",
        }
    }

    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        match self {
            Delay::Tokio => Box::pin(tokio::time::sleep(d)),
            Delay::Precise(t) => Box::pin(t.sleep(d)),
        }
    }
}

/// The stand-in dependency: each call waits `delay`, and the downstream counts how many callers
/// are inside it at once and remembers the most it saw.
pub struct Downstream {
    delay: Duration,
    timer: Delay,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    calls: AtomicU64,
}

struct Inside<'a>(&'a AtomicUsize);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Downstream {
    pub fn new(delay: Duration, timer: Delay) -> Downstream {
        Downstream {
            delay,
            timer,
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            calls: AtomicU64::new(0),
        }
    }

    /// One call: counted inside from entry until it returns (or is dropped).
    pub async fn call(&self, _id: usize) {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _inside = Inside(&self.in_flight);
        self.peak.fetch_max(now, Ordering::SeqCst);
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.timer.sleep(self.delay).await;
    }

    /// The most callers that were inside at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }
}

/// A way to send `jobs` calls to the downstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// `join_all` of every call: no bound.
    Unbounded,
    /// `futures::stream::iter(..).map(call).buffer_unordered(limit)`.
    BufferUnordered,
    /// A tokio `Semaphore` acquired inside each of the futures given to one `join_all`.
    Semaphore,
    /// A `JoinSet` with a task spawned per job, each acquiring a shared semaphore's permit.
    Joinset,
    /// `inflight::Budget::call` inside each of the futures given to one `join_all`.
    Budget,
}

impl Strategy {
    pub const ALL: [Strategy; 5] = [
        Strategy::Unbounded,
        Strategy::BufferUnordered,
        Strategy::Semaphore,
        Strategy::Joinset,
        Strategy::Budget,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Unbounded => "unbounded",
            Strategy::BufferUnordered => "buffer_unordered",
            Strategy::Semaphore => "semaphore",
            Strategy::Joinset => "joinset",
            Strategy::Budget => "budget",
        }
    }

    pub fn parse(s: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|k| k.name() == s)
    }

    pub fn is_bounded(self) -> bool {
        self != Strategy::Unbounded
    }

    /// What the strategy builds before the first call returns: how many, and of what.
    pub fn up_front(self, jobs: usize, limit: usize) -> (usize, &'static str) {
        match self {
            Strategy::Unbounded | Strategy::Semaphore | Strategy::Budget => (jobs, "futures"),
            Strategy::BufferUnordered => (limit.min(jobs), "futures"),
            Strategy::Joinset => (jobs, "tasks"),
        }
    }
}

/// Why a fan-out round failed.
#[derive(Debug, thiserror::Error)]
pub enum FanoutError {
    #[error("the budget rejected a call: {0}")]
    Budget(String),
    #[error("a spawned job failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    #[error("invalid settings: {0}")]
    Invalid(String),
}

/// Sends `jobs` calls to `d` with `strategy`, at most `limit` at once for the bounded ones.
pub async fn run_once(
    strategy: Strategy,
    d: &Arc<Downstream>,
    jobs: usize,
    limit: usize,
) -> Result<(), FanoutError> {
    match strategy {
        Strategy::Unbounded => {
            futures::future::join_all((0..jobs).map(|id| d.call(id))).await;
        }
        Strategy::BufferUnordered => {
            futures::stream::iter(0..jobs)
                .map(|id| d.call(id))
                .buffer_unordered(limit)
                .collect::<Vec<()>>()
                .await;
        }
        Strategy::Semaphore => {
            let sem = Semaphore::new(limit);
            futures::future::join_all((0..jobs).map(|id| {
                let sem = &sem;
                async move {
                    let _permit = sem.acquire().await.expect("the semaphore is never closed");
                    d.call(id).await;
                }
            }))
            .await;
        }
        Strategy::Joinset => {
            let sem = Arc::new(Semaphore::new(limit));
            let mut set = tokio::task::JoinSet::new();
            for id in 0..jobs {
                let sem = Arc::clone(&sem);
                let d = Arc::clone(d);
                set.spawn(async move {
                    let _permit = sem.acquire().await.expect("the semaphore is never closed");
                    d.call(id).await;
                });
            }
            while let Some(done) = set.join_next().await {
                done?;
            }
        }
        Strategy::Budget => {
            let budget = Budget::new("downstream", BudgetConfig::new(limit))
                .map_err(|e| FanoutError::Invalid(e.to_string()))?;
            let results = futures::future::join_all((0..jobs).map(|id| {
                let budget = &budget;
                async move {
                    budget
                        .call(|| async move {
                            d.call(id).await;
                            Ok::<(), Infallible>(())
                        })
                        .await
                }
            }))
            .await;
            if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
                return Err(FanoutError::Budget(e.to_string()));
            }
        }
    }
    Ok(())
}

/// The benchmark's settings.
#[derive(Debug, Clone)]
pub struct FanoutConfig {
    pub jobs: usize,
    pub delay: Duration,
    pub limit: usize,
    pub rounds: usize,
    pub strategies: Vec<Strategy>,
}

/// How many sleeps of the delay [`run`] times on each timer before the rounds.
pub const TIMER_SAMPLES: usize = 10;

/// The least a wave of calls costs beyond the delay (waking the caller, starting the next call),
/// used only to plan a run: with a tiny delay and many waves this overhead is the run's length.
pub const WAVE_OVERHEAD: Duration = Duration::from_micros(50);

impl FanoutConfig {
    /// A lower bound on how long [`run`] takes: the timer readings, then the warm-up round and
    /// `rounds` measured rounds of every strategy, a bounded round being `ceil(jobs / limit)`
    /// waves of `delay` + [`WAVE_OVERHEAD`] and an unbounded one a single wave.
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

/// `ceil(jobs / limit) x delay`, in milliseconds.
pub fn ideal_bounded_ms(jobs: usize, limit: usize, delay: Duration) -> f64 {
    jobs.div_ceil(limit.max(1)) as f64 * delay.as_secs_f64() * 1e3
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ideal_time_matches_the_seed() {
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
            strategies: Strategy::ALL.to_vec(),
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
            strategies: vec![Strategy::Budget],
        };
        assert!(
            tiny.planned() >= Duration::from_secs(100),
            "{:?}",
            tiny.planned()
        );
    }

    #[test]
    fn strategies_parse_by_name() {
        for s in Strategy::ALL {
            assert_eq!(Strategy::parse(s.name()), Some(s));
        }
        assert_eq!(Strategy::parse("nope"), None);
    }

    /// In paused time every strategy completes all calls, the bounded ones never exceed the
    /// limit and reach it, and the waves take exactly ceil(jobs/limit) delays.
    #[tokio::test(start_paused = true)]
    async fn bounded_strategies_hold_the_limit_in_paused_time() {
        let delay = Duration::from_millis(20);
        for s in Strategy::ALL {
            let d = Arc::new(Downstream::new(delay, Delay::Tokio));
            let t = tokio::time::Instant::now();
            run_once(s, &d, 50, 8).await.unwrap();
            let took = t.elapsed();
            assert_eq!(d.calls(), 50, "{}", s.name());
            assert_eq!(d.in_flight(), 0, "{}", s.name());
            if s.is_bounded() {
                assert_eq!(d.peak(), 8, "{}", s.name());
                // 7 waves of 20 ms; paused time may add a millisecond per wave for tick rounding.
                assert!(
                    took >= Duration::from_millis(140) && took <= Duration::from_millis(147),
                    "{}: {took:?}",
                    s.name()
                );
            } else {
                assert_eq!(d.peak(), 50);
                assert!(took <= Duration::from_millis(21), "{took:?}");
            }
        }
    }

    #[tokio::test]
    async fn precise_timer_orders_and_completes_sleeps() {
        let timer = PreciseTimer::new();
        let start = Instant::now();
        let a = timer.sleep(Duration::from_millis(30));
        let b = timer.sleep(Duration::from_millis(5));
        b.await;
        let after_b = start.elapsed();
        a.await;
        let after_a = start.elapsed();
        assert!(after_b >= Duration::from_millis(5));
        assert!(after_a >= Duration::from_millis(30));
    }

    #[tokio::test]
    async fn precise_timer_thread_stops_with_the_last_handle() {
        let timer = PreciseTimer::new();
        let clone = timer.clone();
        let shared = Arc::clone(&timer.shared);
        drop(timer);
        clone.sleep(Duration::from_millis(1)).await;
        drop(clone);
        assert!(shared.thread.lock().unwrap().is_none());
    }

    #[tokio::test]
    async fn a_small_real_run_reports_every_strategy() {
        let config = FanoutConfig {
            jobs: 24,
            delay: Duration::from_millis(5),
            limit: 4,
            rounds: 2,
            strategies: Strategy::ALL.to_vec(),
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
            strategies: vec![Strategy::Unbounded],
        };
        let err = run(&config, Delay::Tokio, |_| {}).await.unwrap_err();
        assert!(err.to_string().contains("greater than 0"));
    }
}
