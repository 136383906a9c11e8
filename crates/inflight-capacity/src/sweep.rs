//! [`Sweep`]: climbs the concurrency levels against the target, each level bounded by a number of
//! calls and a time, the whole run by a total of both, and stops on errors or Ctrl-C.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use inflight_bench::shutdown::Shutdown;
use tokio::task::JoinSet;

use crate::bounds::{Caps, Stop, MIN_CALLS_PER_CALLER};
use crate::call::{Caller, Outcome};
use crate::duration::fmt_duration;
use crate::error::CapacityError;
use crate::in_flight::{InFlightSource, Reader, Readings};
use crate::knee::{find_knee, KneeRules, Point};
use crate::level::{ErrorCounts, Level};
use crate::levels::Levels;
use crate::report::{CapacityReport, InFlightPolling};
use crate::target::Target;

/// Levels added between measured ones to pin down the knee, at most.
pub const MAX_PROBES: u32 = 8;

/// The shortest wait of a refused caller before its next call (see [`Sweep`]).
pub const MIN_PACE: Duration = Duration::from_millis(1);

/// What a sweep reports while it runs.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Progress<'a> {
    /// A level starts; `refined` when it was added to pin down the knee.
    Starting { concurrency: u32, refined: bool },
    /// A level ended.
    Measured(&'a Level),
}

/// A capacity sweep against one endpoint.
///
/// Each level keeps `concurrency` calls in flight (a closed loop: a caller sends its next call
/// when the last one ends) until `requests_per_level` calls were sent or `duration_per_level`
/// passed, whichever comes first. Levels climb in order and the climb stops at the first level
/// whose failed share exceeds [`KneeRules::stop_on_errors`]; then up to [`MAX_PROBES`] levels
/// are added between measured ones to pin the knee to one step.
///
/// A caller whose call failed at once (an error status, a refused or reset connection) waits
/// about one service time before its next call, as a client backing off would: the median of
/// the lowest level's 2xx calls (before that level ends, the first call's time if it was
/// answered 2xx), at least [`MIN_PACE`]. So a target that refuses the calls above its capacity
/// at once sees each refused caller about as often as a served one, and a level's failed share
/// is the share of callers it refused, not of one caller retrying in a tight loop. A timeout
/// already waited the whole timeout and is not paced.
///
/// With [`Sweep::target_in_flight`], each level also polls the target's own count of calls in
/// flight (one reading at a time, every [`Sweep::target_in_flight_every`], over a connection of its own that
/// no level counts) and reports it in [`Level::target_in_flight`].
///
/// ```no_run
/// use inflight_bench::shutdown::Shutdown;
/// use inflight_capacity::{Levels, Sweep, Target};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), inflight_capacity::CapacityError> {
/// let target = Target::new("http://127.0.0.1:8080/records").unwrap()
///     .method("POST").unwrap()
///     .body(r#"{"id": {n}, "complete": true}"#).unwrap();
/// let sweep = Sweep::new(target, Levels::doubling(32).unwrap());
/// let report = sweep.run(&Shutdown::never(), |_| {}).await?;
/// println!("capacity {:?}, {:?} ms per call", report.capacity, report.service_time_ms);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Sweep {
    target: Target,
    levels: Levels,
    requests_per_level: NonZeroU64,
    duration_per_level: Duration,
    timeout: Duration,
    rules: KneeRules,
    name: Option<String>,
    total_requests: Option<u64>,
    total_time: Option<Duration>,
    in_flight: Option<InFlightSource>,
    poll_every: Duration,
}

impl Sweep {
    /// A sweep of `target` over `levels`: 200 calls or 5 s per level, 5 s per call, the default
    /// [`KneeRules`], and caps from those.
    pub fn new(target: Target, levels: Levels) -> Sweep {
        Sweep {
            target,
            levels,
            requests_per_level: NonZeroU64::new(200).expect("not zero"),
            duration_per_level: Duration::from_secs(5),
            timeout: Duration::from_secs(5),
            rules: KneeRules::default(),
            name: None,
            total_requests: None,
            total_time: None,
            in_flight: None,
            poll_every: Duration::from_millis(10),
        }
    }

    /// Calls per level, at most.
    pub fn requests_per_level(mut self, n: NonZeroU64) -> Sweep {
        self.requests_per_level = n;
        self
    }

    /// Time per level, at most (calls in flight then may take up to the timeout to end).
    pub fn duration_per_level(mut self, d: Duration) -> Sweep {
        self.duration_per_level = d;
        self
    }

    /// Time one call may take before it counts as a timeout.
    pub fn timeout(mut self, d: Duration) -> Sweep {
        self.timeout = d;
        self
    }

    /// The tolerance and error threshold.
    pub fn rules(mut self, rules: KneeRules) -> Sweep {
        self.rules = rules;
        self
    }

    /// The name of the suggested budget (default: from the URL's path).
    pub fn name(mut self, name: impl Into<String>) -> Sweep {
        self.name = Some(name.into());
        self
    }

    /// A lower total request cap than the one the levels imply.
    pub fn total_requests(mut self, n: u64) -> Sweep {
        self.total_requests = Some(n);
        self
    }

    /// A lower total time cap than the one the levels imply.
    pub fn total_time(mut self, d: Duration) -> Sweep {
        self.total_time = Some(d);
        self
    }

    /// Also read the target's own count of calls in flight from `source` during each level.
    /// The first reading is taken before any call: a source that cannot be read stops the run
    /// there ([`CapacityError::InFlight`]); later failed readings are counted in the level.
    pub fn target_in_flight(mut self, source: InFlightSource) -> Sweep {
        self.in_flight = Some(source);
        self
    }

    /// How often [`Sweep::target_in_flight`] is read during a level (default 10 ms; at least
    /// 1 ms). A reading slower than that delays the next: one is in flight at a time.
    pub fn target_in_flight_every(mut self, every: Duration) -> Sweep {
        self.poll_every = every;
        self
    }

    /// Where the target's calls in flight are read, if they are.
    pub fn in_flight_source(&self) -> Option<&InFlightSource> {
        self.in_flight.as_ref()
    }

    /// How often they are read.
    pub fn in_flight_every(&self) -> Duration {
        self.poll_every
    }

    /// The target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The levels to climb.
    pub fn levels(&self) -> &Levels {
        &self.levels
    }

    /// The name of the suggested budget.
    pub fn budget_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| self.target.default_name())
    }

    /// The caps of the run: every level and probe at its bounds, plus the first check call,
    /// or lower ones if set.
    pub fn caps(&self) -> Caps {
        let runs = self.levels.len() as u64 + u64::from(MAX_PROBES);
        let requests = runs
            .saturating_mul(self.requests_per_level.get())
            .saturating_add(1);
        let per_level = self.duration_per_level.saturating_add(self.timeout);
        let time = per_level
            .saturating_mul(runs.min(u64::from(u32::MAX)) as u32)
            .saturating_add(self.timeout);
        Caps {
            total_requests: self.total_requests.map_or(requests, |n| n.min(requests)),
            total_time: self.total_time.map_or(time, |t| t.min(time)),
        }
    }

    /// Checks the settings; [`Sweep::run`] does too, before any call.
    ///
    /// # Errors
    ///
    /// [`CapacityError::Setting`] for a zero duration or timeout, or a tolerance or error
    /// threshold out of range; [`CapacityError::TooFewRequests`] for fewer calls per level
    /// than [`MIN_CALLS_PER_CALLER`] per caller at the highest level; [`CapacityError::Name`]
    /// for a budget name that cannot head a table.
    pub fn check(&self) -> Result<(), CapacityError> {
        let bad = |m: String| Err(CapacityError::Setting(m));
        if self.duration_per_level.is_zero() {
            return bad("the time per level must be above 0".into());
        }
        if self.timeout.is_zero() {
            return bad("the per-call timeout must be above 0".into());
        }
        if self.in_flight.is_some() && self.poll_every < Duration::from_millis(1) {
            return bad(format!(
                "the target's calls in flight are read at most every 1ms, got {}",
                fmt_duration(self.poll_every)
            ));
        }
        let t = self.rules.tolerance;
        if !(t > 0.0 && t < 1.0) {
            return bad(format!(
                "the tolerance must be above 0% and below 100%, got {}%",
                t * 100.0
            ));
        }
        let needed = MIN_CALLS_PER_CALLER * u64::from(self.levels.max());
        if self.requests_per_level.get() < needed {
            return Err(CapacityError::TooFewRequests {
                per_level: self.requests_per_level.get(),
                level: self.levels.max(),
                needed,
            });
        }
        crate::suggest::check_name(&self.budget_name())?;
        let e = self.rules.stop_on_errors;
        if !(0.0..1.0).contains(&e) {
            return bad(format!(
                "the error threshold must be at least 0% and below 100%, got {}%",
                e * 100.0
            ));
        }
        Ok(())
    }

    /// Runs the sweep: one check call, then the levels, then the probes; `progress` hears of
    /// each level as it starts and ends.
    ///
    /// # Errors
    ///
    /// Only before the first level: a bad setting, a first reading of the target's calls in
    /// flight that failed, a first call that shows the target cannot be measured (unreachable,
    /// not HTTP, no answer, a 4xx), or Ctrl-C during them.
    /// Everything after is in the report ([`CapacityReport::stopped`]).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the calls in flight; use `shutdown` to stop and still get the
    /// report of what was measured.
    pub async fn run(
        &self,
        shutdown: &Shutdown,
        mut progress: impl FnMut(Progress<'_>),
    ) -> Result<CapacityReport, CapacityError> {
        self.check()?;
        let caps = self.caps();
        let name = self.budget_name();
        let caller = Arc::new(
            Caller::new(self.target.clone(), self.timeout).map_err(CapacityError::Client)?,
        );
        let reader = match &self.in_flight {
            Some(source) => Some(Arc::new(first_reading(source, shutdown).await?)),
            None => None,
        };
        let clients = Clients { caller, reader };
        let run = Arc::new(RunBounds {
            requests_left: AtomicU64::new(caps.total_requests),
            deadline: Instant::now() + caps.total_time,
            request_cap_hit: AtomicBool::new(false),
            pace_us: AtomicU64::new(0),
        });
        self.first_call(&clients.caller, &run, shutdown).await?;
        // The pace comes from the lowest level once it has 2xx answers; levels climb in order.
        let mut paced_by_level = false;

        let mut levels: Vec<Level> = Vec::new();
        let mut stopped = None;
        for &c in self.levels.as_slice() {
            if let Some(stop) = run.exhausted(shutdown) {
                stopped = Some(stop);
                break;
            }
            let level = self
                .measure(&clients, &run, shutdown, c, false, &mut progress)
                .await;
            if let (false, Some(p50)) = (paced_by_level, level.p50_ms) {
                run.set_pace(Duration::try_from_secs_f64(p50 / 1000.0).unwrap_or_default());
                paced_by_level = true;
            }
            let (interrupted, rate) = (level.interrupted, level.error_rate());
            let errors = level.errors.describe();
            levels.push(level);
            if interrupted {
                stopped = Some(run.cut(shutdown));
                break;
            }
            if rate > self.rules.stop_on_errors {
                stopped = Some(Stop::Errors {
                    concurrency: c,
                    error_rate: rate,
                    errors,
                });
                break;
            }
        }
        if matches!(stopped, None | Some(Stop::Errors { .. })) {
            for _ in 0..MAX_PROBES {
                let points: Vec<Point> = levels.iter().map(Point::from).collect();
                let Some(c) = find_knee(&points, &self.rules).probe else {
                    break;
                };
                if levels.iter().any(|l| l.concurrency == c) {
                    break;
                }
                if let Some(stop) = run.exhausted(shutdown) {
                    stopped = Some(stop);
                    break;
                }
                let level = self
                    .measure(&clients, &run, shutdown, c, true, &mut progress)
                    .await;
                let interrupted = level.interrupted;
                levels.push(level);
                if interrupted {
                    stopped = Some(run.cut(shutdown));
                    break;
                }
            }
        }
        levels.sort_by_key(|l| l.concurrency);
        let mut report =
            CapacityReport::build(&self.target, name, levels, self.rules, caps, stopped);
        report.target_in_flight_source = clients.reader.map(|r| InFlightPolling {
            url: r.source().url().to_string(),
            pointer: r.source().pointer().to_string(),
            every_ms: self.poll_every.as_secs_f64() * 1000.0,
        });
        Ok(report)
    }

    /// One call before the climb: a target that cannot be measured is refused with a reason.
    async fn first_call(
        &self,
        caller: &Caller,
        run: &RunBounds,
        shutdown: &Shutdown,
    ) -> Result<(), CapacityError> {
        run.take_one();
        let url = self.target.url().to_string();
        let (outcome, latency) = tokio::select! {
            answer = caller.call() => answer,
            _ = shutdown.wait() => return Err(CapacityError::Interrupted),
        };
        match outcome {
            Outcome::Ok => {
                run.set_pace(latency);
                Ok(())
            }
            // A 5xx is the target's answer under load; the climb measures and stops on it.
            Outcome::Status { code, .. } if code >= 500 || code == 429 => Ok(()),
            Outcome::Status { detail, .. } => Err(CapacityError::Refused { url, detail }),
            Outcome::Timeout => Err(CapacityError::NoAnswer {
                url,
                timeout: self.timeout,
            }),
            Outcome::Transport {
                connect: true,
                detail,
            } => Err(CapacityError::Unreachable { url, detail }),
            Outcome::Transport { detail, .. } => Err(CapacityError::NotHttp { url, detail }),
        }
    }

    /// Measures one level: `concurrency` callers in a closed loop until the level's bounds,
    /// and the target's calls in flight read meanwhile if `reader` is set.
    async fn measure(
        &self,
        clients: &Clients,
        run: &Arc<RunBounds>,
        shutdown: &Shutdown,
        concurrency: u32,
        refined: bool,
        progress: &mut impl FnMut(Progress<'_>),
    ) -> Level {
        progress(Progress::Starting {
            concurrency,
            refined,
        });
        let started = Instant::now();
        let state = Arc::new(LevelState {
            started,
            deadline: (started + self.duration_per_level).min(run.deadline),
            cap: self.requests_per_level.get(),
            concurrency,
            issued: AtomicU64::new(0),
            warmed: AtomicU32::new(0),
            window_start: OnceLock::new(),
            stopped_at: OnceLock::new(),
            acc: Mutex::new(Acc::new()),
        });
        // Dropped with the level (or the future), the poller stops with it.
        let mut poller = JoinSet::new();
        let readings = clients.reader.as_ref().map(|reader| {
            let readings = Arc::new(Readings::default());
            let (reader, into, every) = (reader.clone(), readings.clone(), self.poll_every);
            poller.spawn(async move { reader.poll(every, &into).await });
            readings
        });
        let mut callers = JoinSet::new();
        for _ in 0..concurrency {
            let (caller, run, state) = (clients.caller.clone(), run.clone(), state.clone());
            callers.spawn(async move {
                let mut first = true;
                while state.claim(&run) {
                    let (outcome, latency) = caller.call().await;
                    let refused = !matches!(outcome, Outcome::Ok | Outcome::Timeout);
                    state.record(outcome, latency, first);
                    if first {
                        state.warmed_up();
                        first = false;
                    }
                    if refused {
                        // Back off about one service time, not past the level's end.
                        let until = (Instant::now() + run.pace()).min(state.deadline);
                        tokio::time::sleep_until(until.into()).await;
                    }
                }
            });
        }
        // Ctrl-C, or the total time cap, cuts the level short: the calls in flight are dropped.
        let interrupted = tokio::select! {
            _ = async { while callers.join_next().await.is_some() {} } => false,
            _ = shutdown.wait() => true,
            _ = tokio::time::sleep_until(run.deadline.into()) => true,
        };
        // The callers may see the total time cap pass (and end) before the timer above fires:
        // a level whose callers stopped at the run's deadline, before its own, was cut too.
        let interrupted = interrupted
            || (run.deadline < started + self.duration_per_level
                && state.stopped_at.get().is_some_and(|&at| at >= run.deadline));
        callers.abort_all();
        poller.abort_all();
        let level = state.level(concurrency, refined, interrupted, readings.as_deref());
        progress(Progress::Measured(&level));
        level
    }
}

/// The run's two clients: the target's calls, and the readings of its calls in flight over
/// connections of their own.
struct Clients {
    caller: Arc<Caller>,
    reader: Option<Arc<Reader>>,
}

/// The first reading of the target's calls in flight, before any call: a source that cannot be
/// read is refused with the reason.
async fn first_reading(
    source: &InFlightSource,
    shutdown: &Shutdown,
) -> Result<Reader, CapacityError> {
    let reader = Reader::new(source.clone()).map_err(CapacityError::Client)?;
    let reading = tokio::select! {
        reading = reader.read() => reading,
        _ = shutdown.wait() => return Err(CapacityError::Interrupted),
    };
    match reading {
        Ok(_) => Ok(reader),
        Err(error) => Err(CapacityError::InFlight {
            from: source.to_string(),
            error,
        }),
    }
}

/// The bounds of the whole run, shared by every level.
#[derive(Debug)]
struct RunBounds {
    requests_left: AtomicU64,
    deadline: Instant,
    request_cap_hit: AtomicBool,
    /// How long a refused caller waits before its next call, in microseconds (0: not known yet).
    pace_us: AtomicU64,
}

impl RunBounds {
    /// The wait of a refused caller: about one service time, at least [`MIN_PACE`].
    fn pace(&self) -> Duration {
        Duration::from_micros(self.pace_us.load(Ordering::Relaxed)).max(MIN_PACE)
    }

    fn set_pace(&self, service_time: Duration) {
        let us = u64::try_from(service_time.as_micros()).unwrap_or(u64::MAX);
        self.pace_us.store(us, Ordering::Relaxed);
    }

    /// Takes one call from the total; false once none are left.
    fn take_one(&self) -> bool {
        let taken = self
            .requests_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if !taken {
            self.request_cap_hit.store(true, Ordering::SeqCst);
        }
        taken
    }

    /// Why a level was cut short: Ctrl-C, or else the total time cap.
    fn cut(&self, shutdown: &Shutdown) -> Stop {
        if shutdown.fired() {
            Stop::Interrupted
        } else {
            Stop::TimeCap
        }
    }

    /// Why no further level may start, if one may not.
    fn exhausted(&self, shutdown: &Shutdown) -> Option<Stop> {
        if shutdown.fired() {
            Some(Stop::Interrupted)
        } else if self.request_cap_hit.load(Ordering::SeqCst)
            || self.requests_left.load(Ordering::SeqCst) == 0
        {
            Some(Stop::RequestCap)
        } else if Instant::now() >= self.deadline {
            Some(Stop::TimeCap)
        } else {
            None
        }
    }
}

/// One level while it runs.
///
/// Throughput is counted over a steady window: from the moment every caller has finished its
/// first call (connections open, the first burst absorbed) to the moment the level stopped
/// sending calls (after that, fewer calls are in flight while the last ones drain). Latencies
/// are those of the calls after the warm-up. A level without a full round of answers in that
/// window (its time bound came first, or fast refusals used up its calls) is measured over its
/// whole length and all its calls instead.
struct LevelState {
    started: Instant,
    deadline: Instant,
    cap: u64,
    concurrency: u32,
    issued: AtomicU64,
    /// Callers whose first call has ended.
    warmed: AtomicU32,
    /// When the last caller's first call ended.
    window_start: OnceLock<Instant>,
    /// When the level stopped sending calls.
    stopped_at: OnceLock<Instant>,
    acc: Mutex<Acc>,
}

struct Acc {
    /// Latency of 2xx answers after the warm-up, in microseconds.
    steady_us: Histogram<u64>,
    /// Latency of every 2xx answer, in microseconds.
    all_us: Histogram<u64>,
    requests: u64,
    ok: u64,
    ok_in_window: u64,
    errors: ErrorCounts,
    first_error: Option<String>,
}

impl Acc {
    fn new() -> Acc {
        Acc {
            steady_us: histogram(),
            all_us: histogram(),
            requests: 0,
            ok: 0,
            ok_in_window: 0,
            errors: ErrorCounts::default(),
            first_error: None,
        }
    }
}

/// 1 us to an hour at 3 significant digits.
fn histogram() -> Histogram<u64> {
    // The bounds are constants that hold (low >= 1, high >= 2 x low, sigfig <= 5).
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

impl LevelState {
    /// A caller's first call ended; the last one opens the steady window.
    fn warmed_up(&self) {
        if self.warmed.fetch_add(1, Ordering::SeqCst) + 1 == self.concurrency {
            let _ = self.window_start.set(Instant::now());
        }
    }

    /// Whether a caller may send another call; the first refusal ends the level's window.
    fn claim(&self, run: &RunBounds) -> bool {
        if self.stopped_at.get().is_some() {
            return false;
        }
        let go = Instant::now() < self.deadline
            && self.issued.fetch_add(1, Ordering::SeqCst) < self.cap
            && run.take_one();
        if !go {
            let _ = self.stopped_at.set(Instant::now());
        }
        go
    }

    fn record(&self, outcome: Outcome, latency: Duration, first: bool) {
        let steady = !first && self.window_start.get().is_some();
        let in_window = steady && self.stopped_at.get().is_none();
        let mut acc = self.acc.lock().unwrap_or_else(|e| e.into_inner());
        acc.requests += 1;
        match outcome {
            Outcome::Ok => {
                acc.ok += 1;
                if in_window {
                    acc.ok_in_window += 1;
                }
                let us = u64::try_from(latency.as_micros())
                    .unwrap_or(u64::MAX)
                    .max(1);
                acc.all_us.saturating_record(us);
                if steady {
                    acc.steady_us.saturating_record(us);
                }
            }
            Outcome::Status { code, detail } => {
                acc.errors.add_status(code);
                acc.first_error.get_or_insert(detail);
            }
            Outcome::Timeout => acc.errors.add_timeout(),
            Outcome::Transport { detail, .. } => {
                acc.errors.add_transport();
                acc.first_error.get_or_insert(detail);
            }
        }
    }

    fn level(
        &self,
        concurrency: u32,
        refined: bool,
        interrupted: bool,
        readings: Option<&Readings>,
    ) -> Level {
        let end = Instant::now();
        let stop = self.stopped_at.get().copied().unwrap_or(end);
        let acc = self.acc.lock().unwrap_or_else(|e| e.into_inner());
        // A steady window needs a full round of answers; a level without one (cut short by its
        // time bound, or by fast refusals) is measured over its whole length instead.
        let steady = match self.window_start.get() {
            Some(&start) if acc.ok_in_window >= u64::from(concurrency) && stop > start => {
                Some((start, stop))
            }
            _ => None,
        };
        let (ok, window, h) = match steady {
            Some((start, stop)) => (acc.ok_in_window, stop.duration_since(start), &acc.steady_us),
            None => (
                acc.ok,
                end.saturating_duration_since(self.started),
                &acc.all_us,
            ),
        };
        let window = window.as_secs_f64();
        let ms = |us: u64| us as f64 / 1000.0;
        let some = !h.is_empty();
        Level {
            concurrency,
            requests: acc.requests,
            ok: acc.ok,
            throughput_per_s: if window > 0.0 {
                ok as f64 / window
            } else {
                0.0
            },
            p50_ms: some.then(|| ms(h.value_at_quantile(0.5))),
            p99_ms: some.then(|| ms(h.value_at_quantile(0.99))),
            max_ms: some.then(|| ms(h.max())),
            mean_ms: some.then(|| h.mean() / 1000.0),
            errors: acc.errors.clone(),
            elapsed_s: end.saturating_duration_since(self.started).as_secs_f64(),
            refined,
            interrupted,
            thin: steady.is_none(),
            first_error: acc.first_error.clone(),
            target_in_flight: readings.map(|r| r.summary(steady)),
        }
    }
}
