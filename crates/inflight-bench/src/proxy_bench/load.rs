//! The load generator: keep-alive HTTP/1.1 connections sending GETs to one target, in a closed
//! loop (each connection sends its next request when the last answer is in) or an open loop (a
//! fixed schedule at an offered rate, latency measured from each request's scheduled time, so a
//! slow answer delays and counts against the requests behind it rather than hiding them).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::client::Connection;
use super::{host, instructions, procs, Latency, ProxyBenchError, Target};
use crate::pace::SpinClock;
use crate::timer::PreciseTimer;

/// How long a closed-loop connection waits after a request that got no answer.
const ERROR_BACKOFF: Duration = Duration::from_millis(1);

/// How load is offered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Loop {
    /// Each connection sends its next request as soon as the last answer is in.
    Closed,
    /// Requests at `rate` per second in total, each connection on its own evenly spaced
    /// schedule, whatever the answers do.
    Open {
        /// Requests per second, over all connections.
        rate: f64,
    },
}

/// One load run.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// Where the requests go.
    pub target: Target,
    /// Keep-alive connections, each with one request in flight at most.
    pub connections: usize,
    /// Closed or open loop.
    pub mode: Loop,
    /// Load sent first and not measured.
    pub warmup: Duration,
    /// The measured time, after the warm-up.
    pub duration: Duration,
    /// A request with no full answer after this is counted as an error (and its connection
    /// opened anew).
    pub request_timeout: Duration,
    /// The proxy's processes (each with its descendants), whose CPU time over the measured
    /// time is reported; none to report none.
    pub pids: Vec<u32>,
    /// Whether to count the instructions those processes execute over the measured time, with
    /// `perf stat` (see [`super::instructions::probe`]).
    pub count_instructions: bool,
    /// Whether to keep every measured request of the open loop ([`Sample`]): where in time
    /// the slow answers fall, which a percentile cannot say.
    pub samples: bool,
}

/// One measured request of the open loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// When it was scheduled, microseconds from the start of the measured time.
    pub at_us: u64,
    /// Its latency (from its scheduled time to its answer's end), microseconds; 0 for a
    /// request that got no answer.
    pub latency_us: u64,
    /// The connection it was sent on.
    pub connection: u32,
}

/// What a load run measured.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// `closed` or `open`.
    pub mode: &'static str,
    /// The offered rate (open loop only).
    pub offered_per_s: Option<f64>,
    /// Connections used.
    pub connections: usize,
    /// The measured time, seconds.
    pub duration_s: f64,
    /// Requests sent in the measured time.
    pub sent: u64,
    /// Answers with a 2xx status.
    pub ok: u64,
    /// Answers by status code, 2xx included.
    pub statuses: BTreeMap<u16, u64>,
    /// Requests that got no answer: refused or broken connections, timeouts.
    pub errors: u64,
    /// Answers of any status per second.
    pub answers_per_s: f64,
    /// 2xx answers per second.
    pub ok_per_s: f64,
    /// Latency of the answers (any status), from the send (closed loop) or the scheduled
    /// send (open loop) to the last byte of the body.
    pub latency_ms: Latency,
    /// 2xx answers only.
    pub ok_latency_ms: Latency,
    /// Open loop: the generator's own lag, how late it started each request after the later
    /// of its scheduled time and the moment its connection was free (the end of the answer
    /// before). A run whose p99 is high measured the generator, not the target.
    pub send_lag_ms: Option<Latency>,
    /// Open loop: how long each request waited after its scheduled time for its connection,
    /// still busy with the answer before (0 for most): the target's slowness, not the
    /// generator's, and counted in the latency, which runs from the scheduled time.
    pub connection_wait_ms: Option<Latency>,
    /// Per CPU, the time the host took from it over the measured time (steal, where a virtual
    /// machine's kernel counts it), milliseconds at 10 ms resolution: time in which nothing on
    /// that CPU ran, the generator's sends included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steal_ms: Option<Vec<f64>>,
    /// The CPU time the proxy's processes used in the measured time, seconds.
    pub proxy_cpu_s: Option<f64>,
    /// That per answer, microseconds.
    pub proxy_cpu_us_per_answer: Option<f64>,
    /// The instructions the proxy's processes executed in the measured time (`perf stat`
    /// attaches as it starts, so the few milliseconds it takes to attach are not counted).
    pub proxy_instructions: Option<u64>,
    /// That per answer.
    pub proxy_instructions_per_answer: Option<f64>,
    /// Why instructions asked for were not counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions_error: Option<String>,
    /// Every measured request of the open loop, in the order scheduled, when the plan asked
    /// for them (not in the JSON line).
    #[serde(skip)]
    pub samples: Vec<Sample>,
}

#[derive(Default)]
struct Tally {
    sent: u64,
    errors: u64,
    statuses: BTreeMap<u16, u64>,
    all: Option<Histogram<u64>>,
    ok: Option<Histogram<u64>>,
    lag: Option<Histogram<u64>>,
    wait: Option<Histogram<u64>>,
    samples: Vec<Sample>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            all: Some(histogram()),
            ok: Some(histogram()),
            lag: Some(histogram()),
            wait: Some(histogram()),
            ..Tally::default()
        }
    }

    fn merge(&mut self, other: Tally) {
        self.sent += other.sent;
        self.errors += other.errors;
        self.samples.extend(other.samples);
        for (status, n) in other.statuses {
            *self.statuses.entry(status).or_default() += n;
        }
        for (mine, theirs) in [
            (&mut self.all, other.all),
            (&mut self.ok, other.ok),
            (&mut self.lag, other.lag),
            (&mut self.wait, other.wait),
        ] {
            if let (Some(mine), Some(theirs)) = (mine.as_mut(), theirs) {
                mine.add(theirs).expect("histograms of the same bounds add");
            }
        }
    }
}

/// Microseconds, 1 µs to 120 s, 3 significant digits.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid histogram bounds")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// Runs `plan` and reports what it measured.
///
/// # Errors
///
/// [`ProxyBenchError::Plan`] for a plan that cannot run (no connections, a rate that is not a
/// positive number); nothing is sent then.
pub async fn run(plan: LoadPlan) -> Result<LoadReport, ProxyBenchError> {
    if plan.connections == 0 {
        return Err(ProxyBenchError::Plan(
            "connections must be at least 1".into(),
        ));
    }
    if plan.duration.is_zero() {
        return Err(ProxyBenchError::Plan("the duration must be above 0".into()));
    }
    if let Loop::Open { rate } = plan.mode {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(ProxyBenchError::Plan(format!(
                "the rate must be a positive number of requests per second, got {rate}"
            )));
        }
    }
    let timer = PreciseTimer::new();
    let start = Instant::now() + Duration::from_millis(20);
    let measure_from = start + plan.warmup;
    let end = measure_from + plan.duration;
    // The open loop's connections sleep to their next send on one clock that the spinning task
    // below ends the sleeps of (see [`SpinClock`] for why no kernel timer).
    let clock = SpinClock::new();
    let mut tasks = Vec::with_capacity(plan.connections);
    for i in 0..plan.connections {
        let plan = plan.clone();
        let timer = timer.clone();
        let clock = clock.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = Connection::new(plan.target.clone(), plan.request_timeout);
            match plan.mode {
                Loop::Closed => {
                    timer.sleep_until(start).await;
                    closed(&mut conn, measure_from, end).await
                }
                Loop::Open { rate } => {
                    let offset = Duration::from_secs_f64(i as f64 / rate);
                    let period = Duration::from_secs_f64(plan.connections as f64 / rate);
                    let keep = plan.samples.then_some(i as u32);
                    let schedule = Schedule {
                        first: start + offset,
                        period,
                        measure_from,
                        end,
                    };
                    open(&mut conn, &clock, schedule, keep).await
                }
            }
        }));
    }
    // The open loop keeps its thread busy rather than asleep in epoll_wait between sends and
    // answers: on a virtual machine each sleep and wake-up costs more than a request, and a
    // send scheduled while the thread sleeps waits for it to wake. Measured on this project's
    // 2-vCPU machine through the benchmark (a fixed 5,000/s and 12,000/s to direct, inflight and
    // HAProxy, 2 repeats each): send lag p99 35-276 µs spinning, 76-2,549 µs sleeping.
    let spinner = match plan.mode {
        Loop::Open { .. } => Some(tokio::spawn(spin_until(end, clock))),
        Loop::Closed => None,
    };
    let pids = plan.pids.clone();
    let count_instructions = plan.count_instructions;
    let cpu = tokio::spawn(async move {
        tokio::time::sleep_until(measure_from.into()).await;
        let steal_before = host::steal_ms();
        if pids.is_empty() {
            tokio::time::sleep_until(end.into()).await;
            return Ok((None, None, steal_since(steal_before)));
        }
        let before = procs::cpu_of_trees(&pids)?;
        let counter = if count_instructions {
            Some(procs::members_of_trees(&pids).and_then(|members| {
                instructions::Counter::start(&members).map_err(ProxyBenchError::Io)
            }))
        } else {
            None
        };
        tokio::time::sleep_until(end.into()).await;
        let after = procs::cpu_of_trees(&pids)?;
        let counted = match counter {
            None => None,
            Some(Err(e)) => Some(Err(e.to_string())),
            Some(Ok(counter)) => Some(
                tokio::task::spawn_blocking(move || counter.stop())
                    .await
                    .unwrap_or_else(|e| Err(e.to_string())),
            ),
        };
        Ok::<_, ProxyBenchError>((
            Some(after.saturating_sub(before)),
            counted,
            steal_since(steal_before),
        ))
    });
    let mut tally = Tally::new();
    for task in tasks {
        tally.merge(task.await.expect("a load task does not panic"));
    }
    tally
        .samples
        .sort_unstable_by_key(|s| (s.at_us, s.connection));
    let (cpu, counted, steal) = cpu.await.expect("the CPU reading does not panic")?;
    if let Some(spinner) = spinner {
        spinner.abort();
    }
    let instructions = counted.as_ref().and_then(|c| c.as_ref().ok().copied());
    let seconds = plan.duration.as_secs_f64();
    let answers: u64 = tally.statuses.values().sum();
    let ok: u64 = tally
        .statuses
        .iter()
        .filter(|(s, _)| (200..300).contains(*s))
        .map(|(_, n)| n)
        .sum();
    let (mode, offered) = match plan.mode {
        Loop::Closed => ("closed", None),
        Loop::Open { rate } => ("open", Some(rate)),
    };
    Ok(LoadReport {
        mode,
        offered_per_s: offered,
        connections: plan.connections,
        duration_s: seconds,
        sent: tally.sent,
        ok,
        statuses: tally.statuses,
        errors: tally.errors,
        answers_per_s: answers as f64 / seconds,
        ok_per_s: ok as f64 / seconds,
        latency_ms: Latency::of(tally.all.as_ref().expect("set")),
        ok_latency_ms: Latency::of(tally.ok.as_ref().expect("set")),
        send_lag_ms: offered.map(|_| Latency::of(tally.lag.as_ref().expect("set"))),
        connection_wait_ms: offered.map(|_| Latency::of(tally.wait.as_ref().expect("set"))),
        steal_ms: steal,
        proxy_cpu_s: cpu.map(|c| c.as_secs_f64()),
        proxy_cpu_us_per_answer: cpu
            .filter(|_| answers > 0)
            .map(|c| c.as_secs_f64() * 1e6 / answers as f64),
        proxy_instructions: instructions,
        proxy_instructions_per_answer: instructions
            .filter(|_| answers > 0)
            .map(|n| n as f64 / answers as f64),
        instructions_error: counted.and_then(Result::err),
        samples: tally.samples,
    })
}

/// Until `end`: wakes the connections whose next send is due, yields to the runtime, which
/// polls its reactor without waiting while a task is ready, then to the operating system,
/// which runs whatever else is ready on this CPU (the upstream) first.
async fn spin_until(end: Instant, clock: SpinClock) {
    while Instant::now() < end {
        clock.wake_due();
        std::thread::yield_now();
        tokio::task::yield_now().await;
    }
    // A send due between the last turn and `end` is still asleep; no send sleeps past `end`.
    clock.wake_due();
}

/// The steal per CPU since `before` (see [`host::steal_ms`]).
fn steal_since(before: Option<Vec<f64>>) -> Option<Vec<f64>> {
    let (before, after) = (before?, host::steal_ms()?);
    Some(
        after
            .iter()
            .zip(before.iter().chain(std::iter::repeat(&0.0)))
            .map(|(a, b)| (a - b).max(0.0))
            .collect(),
    )
}

async fn closed(conn: &mut Connection, measure_from: Instant, end: Instant) -> Tally {
    let mut tally = Tally::new();
    loop {
        let sent = Instant::now();
        if sent >= end {
            return tally;
        }
        let outcome = conn.get().await;
        let failed = outcome.is_none();
        if sent >= measure_from {
            tally.record(outcome, sent, sent, sent);
        }
        if failed {
            // A refused connection fails at once: do not spin on it.
            tokio::time::sleep(ERROR_BACKOFF).await;
        }
    }
}

/// One open-loop connection's sends: every `period` from `first` until `end`, measured from
/// `measure_from`.
struct Schedule {
    first: Instant,
    period: Duration,
    measure_from: Instant,
    end: Instant,
}

/// One connection of the open loop; `keep`, its number, when every request is kept.
async fn open(
    conn: &mut Connection,
    clock: &SpinClock,
    schedule: Schedule,
    keep: Option<u32>,
) -> Tally {
    let Schedule {
        first,
        period,
        measure_from,
        end,
    } = schedule;
    let mut tally = Tally::new();
    let mut k: u32 = 0;
    // When the connection was last free: the end of the answer before.
    let mut free = first;
    loop {
        let scheduled = first + period * k;
        k += 1;
        if scheduled >= end {
            return tally;
        }
        clock.sleep_until(scheduled).await;
        let sent = Instant::now();
        let outcome = conn.get().await;
        if scheduled >= measure_from {
            if let Some(connection) = keep {
                tally.samples.push(Sample {
                    at_us: micros(scheduled - measure_from),
                    latency_us: outcome.map_or(0, |(_, done)| micros(done - scheduled)),
                    connection,
                });
            }
            tally.record(outcome, scheduled, free.max(scheduled), sent);
        }
        free = Instant::now();
    }
}

impl Tally {
    /// One request: scheduled `from` (the latency runs from there), its connection free for it
    /// at `free` (the generator's own lag runs from there), started at `sent`.
    fn record(
        &mut self,
        outcome: Option<(u16, Instant)>,
        from: Instant,
        free: Instant,
        sent: Instant,
    ) {
        self.sent += 1;
        if let Some(lag) = self.lag.as_mut() {
            let _ = lag.record(micros(sent.saturating_duration_since(free)));
        }
        if let Some(wait) = self.wait.as_mut() {
            let _ = wait.record(micros(free.saturating_duration_since(from)));
        }
        let Some((status, done)) = outcome else {
            self.errors += 1;
            return;
        };
        *self.statuses.entry(status).or_default() += 1;
        let latency = micros(done.saturating_duration_since(from));
        if let Some(all) = self.all.as_mut() {
            let _ = all.record(latency);
        }
        if (200..300).contains(&status) {
            if let Some(ok) = self.ok.as_mut() {
                let _ = ok.record(latency);
            }
        }
    }
}

/// What [`send_count`] got back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CountReport {
    /// Requests sent.
    pub sent: usize,
    /// Answers with a 2xx status.
    pub ok: u64,
    /// Answers with another status.
    pub other: u64,
    /// Requests that got no answer.
    pub errors: u64,
}

/// Sends exactly `count` GETs to `target` over `connections` keep-alive connections, each
/// sending its next request once the last is answered, and counts the answers: a fixed amount
/// of work, whatever it takes, for counting what each request costs.
pub async fn send_count(
    target: &Target,
    connections: usize,
    count: usize,
    timeout: Duration,
) -> CountReport {
    let connections = connections.clamp(1, count.max(1));
    let mut tasks = Vec::with_capacity(connections);
    for i in 0..connections {
        let share = count / connections + usize::from(i < count % connections);
        let mut conn = Connection::new(target.clone(), timeout);
        tasks.push(tokio::spawn(async move {
            let mut report = CountReport::default();
            for _ in 0..share {
                report.sent += 1;
                match conn.get().await {
                    Some((status, _)) if (200..300).contains(&status) => report.ok += 1,
                    Some(_) => report.other += 1,
                    None => report.errors += 1,
                }
            }
            report
        }));
    }
    let mut total = CountReport::default();
    for task in tasks {
        let r = task.await.expect("a counting task does not panic");
        total.sent += r.sent;
        total.ok += r.ok;
        total.other += r.other;
        total.errors += r.errors;
    }
    total
}
