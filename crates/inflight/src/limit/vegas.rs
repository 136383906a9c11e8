//! [`Vegas`]: a latency-based limit. It estimates the queue at the dependency from how much
//! slower calls run than without load, and keeps that queue short.

use std::time::Duration;

use tokio::time::Instant;

use super::ceiling::{Ceiling, Refusal};
use super::round_trip::{granted_by, Cuts};
use super::{Limit, Outcome, Sample};

/// A latency-based limit: keeps the queue it builds at the dependency between `alpha` and `beta`
/// calls, and also cuts on overload.
///
/// Calls are taken in windows of `max(limit, 8)` successes (`limit` in slow start, below),
/// counting only calls granted after the window began, so that a window measures the limit it was
/// opened under. At the end of each window:
///
/// - **The window's mean latency** is compared with the **baseline**, the latency without load.
///   The estimated queue is `limit x (1 - baseline / mean)`: the calls waiting at the dependency
///   rather than being served. A dependency that serves 6 at once and is sent 8 shows a queue of
///   about 2. (A mean, not a median: when a quarter of the calls queue, the median does not
///   move, the mean does.)
/// - Queue under `alpha`, and the limit was full during the window: grow by one. Queue over
///   `beta`: shrink by half the excess (at least one). In between: stay.
/// - The baseline is the lowest window mean seen. It is the mean of a window, never a single
///   sample, so one lucky fast call cannot set it. It may rise, by 2% a window, only in windows
///   that did not fill the limit: there the calls in flight were fewer than the limit allows, so
///   a slower mean says the dependency got slower, not that this budget queued calls at it. In
///   windows that fill the limit it never rises, so a queue that persists stays a queue instead
///   of becoming the new normal. The cost: a dependency that gets slower for good while demand
///   keeps the limit full is read as queueing, and the limit settles lower than it could (never
///   higher) until demand next falls below it.
///
/// Until a window first shows a queue (or an overload arrives), the limit grows by half after
/// each window that found it full (slow start), so a limit that starts low reaches a
/// dependency's capacity in a few round trips without overshooting far past it. The half is
/// added one permit per success, not at once: a dependency that refuses beyond its capacity then
/// refuses one call, not a burst.
///
/// An [`Outcome::Overload`] (a 503 or 429, a call timeout) is answered at once, at most once per
/// round trip, as [`Aimd`](super::Aimd) does, in one of two ways:
///
/// - **A refused probe.** The call was granted with more calls in flight than any full window
///   had held without a refusal: the limit went looking above what works and found the edge. It
///   goes back to the highest level that held, and remembers where it was refused. A dependency
///   with no queue (it serves N and refuses the N+1st at once, as nginx `limit_conn` or an Envoy
///   circuit breaker do) shows its capacity no other way: its latency is flat up to N. So, as TCP
///   CUBIC approaches the window where it last saw loss slowly, the limit grows to the refused
///   level again only after 16 full windows without a refusal, a wait that doubles with each
///   probe refused there, up to 32. A probe that holds a full window clears that memory and the
///   limit slow-starts from there: a capacity that grew is found within the longest wait and a
///   few windows more.
/// - **A loss.** The call was refused at a level that had held: the dependency lost capacity. The
///   limit is cut to `backoff` times itself (default half), and what held is learnt again. A probe refused soon
///   after a loss waits only 2 windows before the next (doubling from there): a dependency that
///   just changed may change back.
///
/// Pick it when the dependency queues before it refuses: the queue shows up as latency long
/// before the 503s, so Vegas holds the limit near the capacity with few or no refusals. Where it
/// has no queue, the memory of refusals keeps them rare: one to find the capacity, then one per
/// probe, every 16 to 32 windows. Keep one
/// budget per kind of call: a mix of fast and slow operations makes a median that says little.
///
/// ```
/// use std::time::Duration;
/// use inflight::limit::{Limit, Outcome, Sample, Vegas};
/// use tokio::time::sleep;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut limit = Vegas::new(1, 8, 32);
/// let ms = Duration::from_millis;
/// // A window of calls at no load, 30 ms each, sets the baseline.
/// sleep(ms(30)).await;
/// for _ in 0..8 {
///     limit.on_sample(&Sample::new(ms(30), 8, Outcome::Success));
/// }
/// assert_eq!(limit.baseline(), Some(ms(30)));
/// // Slow start: the full window grows the limit by half, one permit per success from here.
/// assert_eq!(limit.current(), 9);
/// for _ in 0..3 {
///     limit.on_sample(&Sample::new(ms(30), 8, Outcome::Success));
/// }
/// let grown = limit.current();
/// assert_eq!(grown, 12);
/// // Calls granted since then take twice as long: half of what is in flight queues. Shrink.
/// sleep(ms(70)).await; // granted 10 ms after the window opened, 60 ms each
/// for _ in 0..grown {
///     limit.on_sample(&Sample::new(ms(60), grown, Outcome::Success));
/// }
/// assert!(limit.current() < grown);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Vegas {
    limit: usize,
    min: usize,
    max: usize,
    alpha: f64,
    beta: f64,
    backoff: f64,
    slow_start: bool,
    baseline: Option<Duration>,
    window: Vec<Duration>,
    window_full: bool,
    window_start: Option<Instant>,
    window_refused: bool,
    /// Permits slow start still adds, one per success.
    ramp: usize,
    ceiling: Ceiling,
    cuts: Cuts,
}

/// Successes per window, at the least.
const MIN_WINDOW: usize = 8;
/// How far the baseline may rise per window that did not fill the limit.
const BASELINE_RISE: f64 = 0.02;

impl Vegas {
    /// The default queue bounds: grow under 1 queued call, shrink over 3.
    pub const DEFAULT_QUEUE: (f64, f64) = (1.0, 3.0);
    /// The default cut on a loss: to half, as TCP Reno halves its window. A refusal at a level
    /// that had held means the dependency lost capacity, usually more than a quarter of it (a
    /// replica gone, a pool halved), and a cut to three quarters met one more refusal on the way
    /// down; refused probes are not cut at all (see above), so the deep cut costs them nothing.
    pub const DEFAULT_BACKOFF: f64 = 0.5;

    /// A limit between `min` and `max` (both at least 1), starting at `initial`.
    pub fn new(min: usize, initial: usize, max: usize) -> Vegas {
        let min = min.max(1);
        let max = max.max(min);
        Vegas {
            limit: initial.clamp(min, max),
            min,
            max,
            alpha: Vegas::DEFAULT_QUEUE.0,
            beta: Vegas::DEFAULT_QUEUE.1,
            backoff: Vegas::DEFAULT_BACKOFF,
            slow_start: true,
            baseline: None,
            window: Vec::with_capacity(MIN_WINDOW),
            window_full: false,
            window_start: None,
            window_refused: false,
            ramp: 0,
            ceiling: Ceiling::default(),
            cuts: Cuts::default(),
        }
    }

    /// Grows while the estimated queue is under `alpha` calls, shrinks while it is over `beta`.
    /// Negative or non-finite values, or `alpha > beta`, leave the defaults.
    pub fn queue(mut self, alpha: f64, beta: f64) -> Vegas {
        if alpha.is_finite() && beta.is_finite() && 0.0 <= alpha && alpha <= beta {
            self.alpha = alpha;
            self.beta = beta;
        }
        self
    }

    /// Multiplies the limit by `backoff` on overload; kept within 0.5 to 0.95.
    pub fn backoff(mut self, backoff: f64) -> Vegas {
        self.backoff = if backoff.is_finite() {
            backoff.clamp(0.5, 0.95)
        } else {
            Vegas::DEFAULT_BACKOFF
        };
        self
    }

    /// The latency without load, once a window has set it.
    pub fn baseline(&self) -> Option<Duration> {
        self.baseline
    }

    fn restart_window(&mut self, now: Instant) {
        self.window.clear();
        self.window_full = false;
        self.window_refused = false;
        self.window_start = Some(now);
    }

    fn end_window(&mut self, now: Instant) {
        let mean = mean(&self.window);
        let full = self.window_full;
        if full && !self.window_refused && self.ceiling.held(self.limit) {
            // A probe above a refusal held: how much more there is is unknown, so look for it
            // as from a start (paced, so a new ceiling costs one refusal).
            self.slow_start = true;
        }
        self.restart_window(now);
        let baseline = match self.baseline {
            Some(b) if full => mean.min(b),
            Some(b) => mean.min(b.mul_f64(1.0 + BASELINE_RISE)),
            None => mean,
        };
        self.baseline = Some(baseline);
        if mean.is_zero() {
            return;
        }
        let queue = self.limit as f64 * (1.0 - baseline.as_secs_f64() / mean.as_secs_f64());
        if queue > self.beta {
            self.slow_start = false;
            let cut = ((queue - self.beta) / 2.0).floor().max(1.0) as usize;
            self.limit = self.limit.saturating_sub(cut).max(self.min);
        } else if queue > self.alpha {
            self.slow_start = false;
        } else if full {
            if self.slow_start {
                self.ramp = self.limit.div_ceil(2);
                self.step_ramp(now);
            } else if self.limit < self.max && self.ceiling.allows(self.limit + 1) {
                self.limit += 1;
            }
        }
    }

    /// Slow start's growth, one permit at a time: a dependency that refuses beyond its capacity
    /// then refuses one call, not the burst a jump by half would send at once. The window
    /// restarts when the growth is done, so that it measures the limit reached, not calls
    /// granted on the way there (fewer in flight, so faster: they would hide a queue).
    fn step_ramp(&mut self, now: Instant) {
        if self.ramp == 0 {
            return;
        }
        if self.limit < self.max && self.ceiling.allows(self.limit + 1) {
            self.limit += 1;
            self.ramp -= 1;
        } else {
            self.ramp = 0;
        }
        if self.ramp == 0 {
            self.restart_window(now);
        }
    }
}

impl Limit for Vegas {
    fn current(&self) -> usize {
        self.limit
    }

    fn max(&self) -> usize {
        self.max
    }

    fn on_sample(&mut self, sample: &Sample) {
        match sample.outcome {
            Outcome::Overload => {
                self.window_refused = true;
                if let Some(now) = self.cuts.allow(sample.latency) {
                    let cut = ((self.limit as f64 * self.backoff) as usize).max(self.min);
                    self.limit = match self.ceiling.refused(sample.in_flight) {
                        Refusal::FallBack(held) => held.clamp(self.min, self.limit),
                        Refusal::Loss => cut,
                    };
                    self.slow_start = false;
                    self.ramp = 0;
                    self.restart_window(now);
                }
            }
            Outcome::Success => {
                let now = Instant::now();
                self.step_ramp(now);
                if granted_by(self.window_start, now, sample.latency) {
                    // Granted before this window began: it measured an earlier limit.
                    return;
                }
                self.window_full |= sample.in_flight >= self.limit;
                self.window.push(sample.latency);
                // Slow start only decides whether to grow, and a queue shows at once: one round
                // trip's worth of calls is enough there.
                let size = if self.slow_start {
                    self.limit
                } else {
                    self.limit.max(MIN_WINDOW)
                };
                if self.window.len() >= size {
                    self.end_window(now);
                }
            }
            Outcome::Ignore => {}
        }
    }
}

fn mean(samples: &[Duration]) -> Duration {
    let total: Duration = samples.iter().sum();
    total / samples.len().max(1) as u32
}

#[cfg(test)]
mod tests {
    //! Vegas against a simulated dependency on paused time: it serves `capacity` calls at once,
    //! lets `queue` more wait, and refuses the rest at once, as the lab's system of record does.

    use std::collections::VecDeque;

    use super::*;

    /// A call in the dependency: when it ends, when it was granted, the calls in flight then.
    #[derive(Debug, Clone, Copy)]
    struct Call {
        ends: Instant,
        granted: Instant,
        in_flight: usize,
        refused: bool,
    }

    /// A phase of the dependency: from `at` on, `capacity` served and `queue` waiting.
    #[derive(Debug, Clone, Copy)]
    struct Phase {
        at: Duration,
        capacity: usize,
        queue: usize,
    }

    #[derive(Debug, Default)]
    struct Run {
        served: usize,
        refused: usize,
        /// (seconds since the start, calls refused) for each refusal.
        refusals: Vec<f64>,
        /// (seconds since the start, limit) after each change.
        limits: Vec<(f64, usize)>,
    }

    impl Run {
        fn refused_after(&self, secs: f64) -> usize {
            self.refusals.iter().filter(|&&t| t >= secs).count()
        }

        fn served_between(&self, served_at: &[f64], from: f64, to: f64) -> usize {
            served_at.iter().filter(|&&t| t >= from && t < to).count()
        }

        /// The first time at or after `from` the limit was at least `level`.
        fn reached(&self, level: usize, from: f64) -> Option<f64> {
            let before = self.limits.iter().rev().find(|(t, _)| *t <= from);
            if before.is_some_and(|(_, l)| *l >= level) {
                return Some(from);
            }
            self.limits
                .iter()
                .find(|(t, l)| *t >= from && *l >= level)
                .map(|(t, _)| *t)
        }
    }

    /// A small seeded generator: service times of `median x exp(sigma x N(0, 1))`, as the lab's
    /// sim draws them (sigma 0.2 there).
    struct Jitter(u64, f64);

    impl Jitter {
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }

        fn service(&mut self, median: Duration) -> Duration {
            let (u1, u2) = (self.uniform().max(1e-12), self.uniform());
            let normal = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            median.mul_f64((self.1 * normal).exp())
        }
    }

    /// Drives `limit` with unbounded demand (a caller waits for every free permit) against the
    /// dependency for `length`; returns what happened and when each call was served.
    async fn run(
        limit: &mut Vegas,
        phases: &[Phase],
        (median, sigma): (Duration, f64),
        length: Duration,
    ) -> (Run, Vec<f64>) {
        let start = Instant::now();
        let mut jitter = Jitter(0x9E37_79B9_7F4A_7C15, sigma);
        let mut serving: Vec<Call> = Vec::new();
        let mut waiting: VecDeque<Call> = VecDeque::new();
        let mut refusing: Vec<Call> = Vec::new();
        let mut out = Run::default();
        let mut served_at = Vec::new();
        let mut last_limit = 0;
        loop {
            let now = Instant::now();
            let elapsed = now - start;
            if elapsed >= length {
                break;
            }
            let phase = phases.iter().rev().find(|p| p.at <= elapsed).unwrap();
            if limit.current() != last_limit {
                last_limit = limit.current();
                out.limits.push((elapsed.as_secs_f64(), last_limit));
            }
            while serving.len() < phase.capacity && !waiting.is_empty() {
                let mut call = waiting.pop_front().unwrap();
                call.ends = now + jitter.service(median);
                serving.push(call);
            }
            while serving.len() + waiting.len() + refusing.len() < limit.current() {
                let in_flight = serving.len() + waiting.len() + refusing.len() + 1;
                let mut call = Call {
                    ends: now,
                    granted: now,
                    in_flight,
                    refused: false,
                };
                if serving.len() + waiting.len() >= phase.capacity + phase.queue {
                    call.refused = true;
                    call.ends = now + Duration::from_millis(1);
                    refusing.push(call);
                } else if serving.len() < phase.capacity {
                    call.ends = now + jitter.service(median);
                    serving.push(call);
                } else {
                    waiting.push_back(call);
                }
            }
            let next_phase = phases
                .iter()
                .map(|p| start + p.at)
                .filter(|&t| t > now)
                .min();
            let next = serving
                .iter()
                .chain(&refusing)
                .map(|c| c.ends)
                .chain(next_phase)
                .min()
                .unwrap_or(start + length)
                .min(start + length);
            tokio::time::advance(next - now).await;
            let now = Instant::now();
            let (done, rest): (Vec<_>, Vec<_>) = serving
                .drain(..)
                .chain(refusing.drain(..))
                .partition(|c| c.ends <= now);
            for call in rest {
                if call.refused {
                    refusing.push(call);
                } else {
                    serving.push(call);
                }
            }
            for call in done {
                let outcome = if call.refused {
                    out.refused += 1;
                    out.refusals.push((now - start).as_secs_f64());
                    Outcome::Overload
                } else {
                    out.served += 1;
                    served_at.push((now - start).as_secs_f64());
                    Outcome::Success
                };
                limit.on_sample(&Sample::new(now - call.granted, call.in_flight, outcome));
            }
        }
        (out, served_at)
    }

    fn phase(at_ms: u64, capacity: usize, queue: usize) -> Phase {
        Phase {
            at: Duration::from_millis(at_ms),
            capacity,
            queue,
        }
    }

    /// The lab's hard-limit scenario: 6 served, none queued, 150 ms a call. A limit that probes
    /// whenever latency allows pays a refusal a probe, every few windows; here the probes grow
    /// rare.
    #[tokio::test(start_paused = true)]
    async fn probes_above_a_hard_limit_become_rare() {
        let mut limit = Vegas::new(1, 4, 64);
        let (run, served_at) = run(
            &mut limit,
            &[phase(0, 6, 0)],
            (Duration::from_millis(150), 0.2),
            Duration::from_secs(20),
        )
        .await;
        // 20 s at 6 x 150 ms is 800 calls at most.
        assert!(run.served >= 760, "served {}", run.served);
        assert!(
            run.refused <= 5,
            "refused {}: {:?}",
            run.refused,
            run.refusals
        );
        assert!(run.refused_after(5.0) <= 2, "{:?}", run.refusals);
        // Once found, the capacity is used: 6 at a time is 40 calls/s.
        let late = run.served_between(&served_at, 2.0, 20.0);
        assert!(late as f64 >= 0.95 * 40.0 * 18.0, "{late} served in 18 s");
    }

    /// The window after slow start's growth measures the limit reached: calls granted on the way
    /// there, with fewer in flight, are faster and would hide the queue the new limit builds.
    #[tokio::test(start_paused = true)]
    async fn the_window_after_a_ramp_measures_the_limit_reached() {
        let ms = Duration::from_millis;
        let mut limit = Vegas::new(1, 8, 64);
        tokio::time::sleep(ms(30)).await;
        for _ in 0..8 {
            limit.on_sample(&Sample::new(ms(30), 8, Outcome::Success));
        }
        assert_eq!(limit.current(), 9, "slow start began its growth by 4");
        // Three calls granted just after, with 9 to 11 in flight, answer fast; each adds one.
        tokio::time::sleep(ms(20)).await;
        for in_flight in 9..12 {
            limit.on_sample(&Sample::new(ms(19), in_flight, Outcome::Success));
        }
        assert_eq!(limit.current(), 12);
        // At 12, calls take 36 ms against 30: 12 x (1 - 30/36) = 2 calls queue. Stop growing.
        tokio::time::sleep(ms(37)).await;
        for _ in 0..12 {
            limit.on_sample(&Sample::new(ms(36), 12, Outcome::Success));
        }
        assert_eq!(limit.current(), 12, "grew into a queue of 2");
    }

    /// The lab's healthy and slow-write system of record: 6 served and 6 queued. Slow start
    /// finds the queue in latency before the refusals begin, whatever the service time.
    #[tokio::test(start_paused = true)]
    async fn slow_start_stops_at_a_queue_before_it_is_refused() {
        for median in [30, 150] {
            let mut limit = Vegas::new(1, 4, 64);
            let (run, _) = run(
                &mut limit,
                &[phase(0, 6, 6)],
                (Duration::from_millis(median), 0.2),
                Duration::from_secs(10),
            )
            .await;
            assert_eq!(run.refused, 0, "{median} ms: {:?}", run.limits);
            assert!(run.served as f64 >= 0.95 * 10.0 * 6000.0 / median as f64);
        }
    }

    /// The capacity doubles with no queue to show it: the limit finds it within a bounded number
    /// of windows (the longest wait between probes, then a slow start). Exact service times, so
    /// that only the probing is measured, not the latency rule's noise.
    #[tokio::test(start_paused = true)]
    async fn a_capacity_that_doubles_is_found() {
        let mut limit = Vegas::new(1, 4, 64);
        let (run, _) = run(
            &mut limit,
            &[phase(0, 6, 0), phase(30_000, 12, 0)],
            (Duration::from_millis(150), 0.0),
            Duration::from_secs(60),
        )
        .await;
        // A window here is a round trip and 8 calls at 40/s, about 0.35 s: at most 32 windows of
        // waiting (the longest wait), then a slow start's few; 0.4 s a window leaves a margin.
        let found = run.reached(11, 30.0).expect("found the doubled capacity");
        assert!(
            found - 30.0 <= 36.0 * 0.4,
            "found 11 at {found:.1} s: {:?}",
            run.limits
        );
        assert!(limit.current() >= 11, "limit {}", limit.current());
    }

    /// The capacity halves: the limit follows it down and keeps refusals rare there.
    #[tokio::test(start_paused = true)]
    async fn a_capacity_that_halves_is_followed() {
        let mut limit = Vegas::new(1, 4, 64);
        let (run, served_at) = run(
            &mut limit,
            &[phase(0, 6, 0), phase(5_000, 3, 0)],
            (Duration::from_millis(150), 0.2),
            Duration::from_secs(20),
        )
        .await;
        assert!(limit.current() <= 4, "limit {}", limit.current());
        let late = run.refused_after(7.0);
        assert!(
            late <= 3,
            "{late} refused in the last 13 s: {:?}",
            run.refusals
        );
        // 3 at a time is 20 calls/s.
        let served = run.served_between(&served_at, 7.0, 20.0);
        assert!(
            served as f64 >= 0.9 * 20.0 * 13.0,
            "{served} served in 13 s"
        );
    }

    /// The lab's degrading scenario: 6 served and 6 queued, 3 and 1 from 1.5 s, 6 and 6 again
    /// from 3.5 s. Few refusals, and the capacity that comes back is used again.
    #[tokio::test(start_paused = true)]
    async fn a_capacity_that_drops_and_comes_back_is_followed() {
        let mut limit = Vegas::new(1, 4, 64);
        let (run, served_at) = run(
            &mut limit,
            &[phase(0, 6, 6), phase(1_500, 3, 1), phase(3_500, 6, 6)],
            (Duration::from_millis(150), 0.2),
            Duration::from_secs(8),
        )
        .await;
        assert!(run.refused <= 3, "{:?}", run.refusals);
        let back = run.served_between(&served_at, 4.0, 8.0);
        assert!(
            back as f64 >= 0.9 * 40.0 * 4.0,
            "{back} served in 4 s after the recovery"
        );
    }
}
