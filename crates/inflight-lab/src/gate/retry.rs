//! Retries around a gate, for the strategies with a `retry` table: `inflight`'s back-pressure
//! (`Budget::call_with_retry`, which gives the dependency's `Retry-After` to the budget so that
//! it pauses) or tower's retry layer with a `TpsBudget`, around the same budget.
//!
//! Both retry what the gates call an overload (a 429 or 503 answer) and a transport failure, and
//! never a call past the client timeout: the sim's hangs are drawn per call, and a retry would
//! only make a record wait another timeout. Both retry budgets have the defaults tower and Finagle
//! give them (a window of 10 s, 10 retries a second whatever the traffic) with the window and the
//! floor scaled by the time scale, as the sim scales its own times; the backoff before a retry
//! without a retry-after starts at 50 ms (also scaled) in both.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use inflight::limit::{Outcome, Verdict};
use inflight::{Budget, CallError, RetryBudget};
use tower::retry::backoff::{Backoff, ExponentialBackoff, ExponentialBackoffMaker, MakeBackoff};
use tower::retry::budget::{Budget as _, TpsBudget};
use tower::ServiceExt;

use super::{Answer, CallFailure, CallFuture, Gate};
use crate::strategy::{RetryBy, RetrySpec};

/// Makes a new attempt of one call each time it is asked (a named type, so that tower's request
/// type carries no trait-object lifetime for the compiler to generalise over).
#[derive(Clone)]
pub(crate) struct MakeCall(Arc<dyn Fn() -> CallFuture + Send + Sync>);

impl MakeCall {
    pub(crate) fn new(make: impl Fn() -> CallFuture + Send + Sync + 'static) -> MakeCall {
        MakeCall(Arc::new(make))
    }

    /// A new attempt.
    pub(crate) fn attempt(&self) -> CallFuture {
        (self.0)()
    }
}

/// The retry budget's window at time scale 1 (tower's and Finagle's default).
const TTL: Duration = Duration::from_secs(10);
/// Retries a second the retry budget allows whatever the traffic, at time scale 1 (the default).
const MIN_PER_SEC: f64 = 10.0;
/// The backoff before the first retry without a retry-after, at time scale 1.
const BACKOFF_BASE: Duration = Duration::from_millis(50);
/// The longest backoff, at time scale 1.
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// The jitter of tower's default `ExponentialBackoffMaker`.
const TOWER_JITTER: f64 = 0.99;

/// Retries made, and retries the retry budget refused, by one gate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RetryCounts {
    pub(crate) made: u64,
    pub(crate) denied: u64,
}

/// A gate, and how its calls are retried.
#[derive(Clone)]
pub(crate) struct Retrying {
    gate: Gate,
    how: How,
}

#[derive(Clone)]
enum How {
    /// Each call is made once.
    Once,
    /// `Budget::call_with_retry` (the budget is the gate's).
    Inflight {
        budget: Budget,
        retry: inflight::Retry,
    },
    /// tower's `Retry` around the gate.
    Tower(TowerRetry),
}

/// What tower's retry layer needs for each call: the shared retry budget, the backoff maker, the
/// most attempts and the counts.
#[derive(Clone)]
struct TowerRetry {
    budget: Arc<TpsBudget>,
    backoff: ExponentialBackoffMaker,
    max_attempts: u32,
    counts: Arc<Counters>,
}

#[derive(Default)]
struct Counters {
    made: AtomicU64,
    denied: AtomicU64,
}

/// The retry budget's window and floor at `time_scale`: the window within tower's bounds of 1 s
/// to 60 s.
fn scaled_budget(time_scale: f64) -> (Duration, u32) {
    let ttl = TTL
        .mul_f64(time_scale)
        .clamp(Duration::from_secs(1), Duration::from_secs(60));
    let min_per_sec = (MIN_PER_SEC / time_scale).round().min(1_000_000.0) as u32;
    (ttl, min_per_sec)
}

impl Retrying {
    /// `gate`, retried as `spec` says (or not at all), with the retry budget's and backoff's
    /// times scaled by `time_scale`.
    pub(crate) fn new(
        gate: Gate,
        spec: Option<&RetrySpec>,
        time_scale: f64,
    ) -> Result<Retrying, String> {
        let (ttl, min_per_sec) = scaled_budget(time_scale);
        Retrying::with_budget(gate, spec, time_scale, ttl, min_per_sec)
    }

    fn with_budget(
        gate: Gate,
        spec: Option<&RetrySpec>,
        time_scale: f64,
        ttl: Duration,
        min_per_sec: u32,
    ) -> Result<Retrying, String> {
        let Some(spec) = spec else {
            return Ok(Retrying {
                gate,
                how: How::Once,
            });
        };
        // Checked here for both, so that tower's asserts never see a bad value.
        let retry_budget =
            RetryBudget::new(ttl, min_per_sec, spec.retry_percent).map_err(|e| e.to_string())?;
        let (base, max) = (
            BACKOFF_BASE.mul_f64(time_scale),
            BACKOFF_MAX.mul_f64(time_scale),
        );
        let how = match spec.by {
            RetryBy::Inflight => {
                let Gate::Budget(budget) = &gate else {
                    return Err("retry by inflight needs an inflight budget".to_string());
                };
                How::Inflight {
                    budget: budget.clone(),
                    retry: inflight::Retry::new(retry_budget)
                        .max_attempts(spec.max_attempts)
                        .backoff(base, max),
                }
            }
            RetryBy::Tower => How::Tower(TowerRetry {
                budget: Arc::new(TpsBudget::new(ttl, min_per_sec, spec.retry_percent as f32)),
                backoff: ExponentialBackoffMaker::new(
                    base,
                    max,
                    TOWER_JITTER,
                    tower::util::rng::HasherRng::default(),
                )
                .map_err(|e| e.to_string())?,
                max_attempts: spec.max_attempts,
                counts: Arc::default(),
            }),
        };
        Ok(Retrying { gate, how })
    }

    /// The gate the attempts go through.
    pub(crate) fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Runs the call through the gate, retried as configured, each attempt with `timeout` from
    /// when it is admitted; the last attempt's status, or why it had none. A gate of one attempt
    /// gives the record's priority class `class` to its budget ([`Gate::call_in`]); a strategy
    /// with classes has no retries (the strategies file refuses the two together), so the
    /// retrying gates take no class.
    pub(crate) async fn call(
        &self,
        make: MakeCall,
        timeout: Duration,
        class: Option<&str>,
    ) -> Result<u16, CallFailure> {
        match &self.how {
            How::Once => self.gate.call_in(make.attempt(), timeout, class).await,
            How::Inflight { budget, retry } => {
                let result = budget
                    .call_with_retry(retry, verdict, || {
                        let call = make.attempt();
                        async move {
                            tokio::time::timeout(timeout, call)
                                .await
                                .unwrap_or(Err(CallFailure::Timeout))
                        }
                    })
                    .await;
                let last = match result {
                    Ok(answer) => return Ok(answer.status),
                    Err(gave_up) => gave_up.into_last(),
                };
                match last {
                    // An overload answer not retried further: the record sees it.
                    Ok(answer) => Ok(answer.status),
                    Err(CallError::Inner(failure)) => Err(failure),
                    Err(CallError::Timeout) => Err(CallFailure::Timeout),
                    Err(_) => Err(CallFailure::Permit),
                }
            }
            How::Tower(tower) => {
                let gate = self.gate.clone();
                let inner = tower::service_fn(move |make: MakeCall| {
                    let gate = gate.clone();
                    async move { gate.call(make.attempt(), timeout).await }
                });
                let policy = TowerPolicy {
                    budget: tower.budget.clone(),
                    backoff: tower.backoff.clone().make_backoff(),
                    attempts_left: tower.max_attempts,
                    counts: tower.counts.clone(),
                };
                tower::retry::Retry::new(policy, inner).oneshot(make).await
            }
        }
    }

    /// The retries made and denied so far.
    pub(crate) fn retries(&self) -> RetryCounts {
        match &self.how {
            How::Once => RetryCounts::default(),
            How::Inflight { budget, .. } => {
                let s = budget.snapshot();
                RetryCounts {
                    made: s.retries,
                    denied: s.retries_denied,
                }
            }
            How::Tower(tower) => RetryCounts {
                made: tower.counts.made.load(Ordering::Relaxed),
                denied: tower.counts.denied.load(Ordering::Relaxed),
            },
        }
    }
}

/// What an attempt tells the budget and the retry: the gates' classification (see
/// [`super::classify`]), with the dependency's retry-after on an overload answer, so that the
/// budget pauses for it, and a transport failure as a failure.
fn verdict(result: &Result<Answer, CallFailure>) -> Verdict {
    match result {
        Ok(answer) => {
            let outcome = super::classify(&Ok(answer.status));
            match answer.retry_after {
                Some(delay) if outcome == Outcome::Overload => outcome.with_retry_after(delay),
                _ => outcome.into(),
            }
        }
        Err(CallFailure::Timeout) => Outcome::Ignore.into(),
        Err(_) => Verdict::failure(),
    }
}

/// tower's retry policy as its `budget` module's documentation shows it (deposit on a result
/// that is not retried, withdraw before each retry), with tower's backoff between attempts and
/// the same most attempts as `inflight`'s; it retries what [`verdict`] calls retryable.
#[derive(Clone)]
struct TowerPolicy {
    budget: Arc<TpsBudget>,
    backoff: ExponentialBackoff,
    attempts_left: u32,
    counts: Arc<Counters>,
}

impl tower::retry::Policy<MakeCall, u16, CallFailure> for TowerPolicy {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _call: &mut MakeCall,
        result: &mut Result<u16, CallFailure>,
    ) -> Option<Self::Future> {
        let retryable = match result {
            Ok(status) => super::classify(&Ok(*status)) == Outcome::Overload,
            Err(CallFailure::Transport(_)) => true,
            Err(_) => false,
        };
        if !retryable {
            self.budget.deposit();
            return None;
        }
        if self.attempts_left <= 1 {
            return None;
        }
        if !self.budget.withdraw() {
            self.counts.denied.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.attempts_left -= 1;
        self.counts.made.fetch_add(1, Ordering::Relaxed);
        Some(self.backoff.next_backoff())
    }

    fn clone_request(&mut self, call: &MakeCall) -> Option<MakeCall> {
        Some(call.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::GateSpec;
    use std::sync::Mutex;

    /// A call whose attempts answer `script` in turn (the last one from then on), each after
    /// 10 ms, counting the attempts.
    fn scripted(script: Vec<Result<Answer, &'static str>>) -> (MakeCall, Arc<AtomicU64>) {
        let attempts = Arc::new(AtomicU64::new(0));
        let script = Arc::new(Mutex::new(script));
        let counted = attempts.clone();
        let make = MakeCall::new(move || {
            let n = counted.fetch_add(1, Ordering::SeqCst) as usize;
            let script = script.lock().unwrap();
            let answer = script[n.min(script.len() - 1)];
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                answer.map_err(CallFailure::Transport)
            })
        });
        (make, attempts)
    }

    fn answer(status: u16, retry_after_ms: Option<u64>) -> Result<Answer, &'static str> {
        Ok(Answer {
            status,
            retry_after: retry_after_ms.map(Duration::from_millis),
        })
    }

    fn gate(n: usize) -> Gate {
        Gate::new(
            "records",
            &GateSpec::Fixed(n),
            Duration::from_secs(1),
            1.0,
            None,
        )
        .unwrap()
    }

    fn spec(by: RetryBy, max_attempts: u32) -> RetrySpec {
        RetrySpec {
            max_attempts,
            ..RetrySpec::new(by)
        }
    }

    const TIMEOUT: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn inflight_waits_out_the_retry_after_and_the_budget_pauses_for_it() {
        let r = Retrying::new(gate(4), Some(&spec(RetryBy::Inflight, 3)), 1.0).unwrap();
        let (make, attempts) = scripted(vec![answer(429, Some(700)), answer(200, None)]);
        let start = tokio::time::Instant::now();
        assert_eq!(r.call(make, TIMEOUT, None).await.unwrap(), 200);
        assert_eq!(attempts.load(Ordering::SeqCst), 2);
        // 10 ms for each attempt, and the 700 ms the 429 asked for between them.
        assert_eq!(start.elapsed(), Duration::from_millis(720));
        let Gate::Budget(budget) = r.gate() else {
            panic!("a budget")
        };
        let s = budget.snapshot();
        assert_eq!(s.pauses, 1, "the retry-after paused the budget");
        assert_eq!(r.retries(), RetryCounts { made: 1, denied: 0 });
    }

    #[tokio::test(start_paused = true)]
    async fn inflight_gives_the_last_overload_answer_after_its_attempts() {
        let r = Retrying::new(gate(4), Some(&spec(RetryBy::Inflight, 3)), 1.0).unwrap();
        let (make, attempts) = scripted(vec![answer(503, None)]);
        assert_eq!(r.call(make, TIMEOUT, None).await.unwrap(), 503);
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
        assert_eq!(r.retries().made, 2);
        // A timeout and a success are not retried; a transport failure is.
        let (make, attempts) = scripted(vec![Err("connect"), answer(200, None)]);
        assert_eq!(r.call(make, TIMEOUT, None).await.unwrap(), 200);
        assert_eq!(attempts.load(Ordering::SeqCst), 2);
        let hang = MakeCall::new(|| Box::pin(std::future::pending()));
        assert!(matches!(
            r.call(hang, TIMEOUT, None).await,
            Err(CallFailure::Timeout)
        ));
        assert_eq!(r.retries().made, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn tower_retries_without_reading_the_retry_after() {
        let r = Retrying::new(gate(4), Some(&spec(RetryBy::Tower, 3)), 1.0).unwrap();
        let (make, attempts) = scripted(vec![answer(429, Some(5_000)), answer(200, None)]);
        let start = tokio::time::Instant::now();
        assert_eq!(r.call(make, TIMEOUT, None).await.unwrap(), 200);
        assert_eq!(attempts.load(Ordering::SeqCst), 2);
        // Two attempts of 10 ms and tower's first backoff between them: 50 ms plus up to 99%
        // jitter (up to 119.5 ms in all, which the timer's millisecond ticks round up to 120),
        // never the 5 s asked for.
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(70) && took <= Duration::from_millis(120),
            "{took:?}"
        );
        let (make, attempts) = scripted(vec![answer(503, None)]);
        assert_eq!(r.call(make, TIMEOUT, None).await.unwrap(), 503);
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
        assert_eq!(r.retries(), RetryCounts { made: 3, denied: 0 });
    }

    #[tokio::test(start_paused = true)]
    async fn both_stop_when_the_retry_budget_is_spent_and_count_it() {
        for by in [RetryBy::Inflight, RetryBy::Tower] {
            // No share of calls and a floor of 2 retries in the window.
            let spec = RetrySpec {
                retry_percent: 0.0,
                ..spec(by, 3)
            };
            let r = Retrying::with_budget(gate(4), Some(&spec), 1.0, Duration::from_secs(2), 1)
                .unwrap();
            let (make, attempts) = scripted(vec![answer(503, None)]);
            for _ in 0..3 {
                assert_eq!(r.call(make.clone(), TIMEOUT, None).await.unwrap(), 503);
            }
            // 3 first attempts and the 2 retries the floor allows.
            assert_eq!(attempts.load(Ordering::SeqCst), 5, "{by:?}");
            let counts = r.retries();
            assert_eq!(counts.made, 2, "{by:?}");
            assert!(counts.denied >= 1, "{by:?}: {counts:?}");
        }
    }

    #[test]
    fn the_budget_scales_with_the_time_scale_within_towers_bounds() {
        assert_eq!(scaled_budget(1.0), (Duration::from_secs(10), 10));
        assert_eq!(scaled_budget(0.2), (Duration::from_secs(2), 50));
        assert_eq!(scaled_budget(0.05), (Duration::from_secs(1), 200));
    }

    #[test]
    fn a_bad_retry_percent_is_an_error_not_a_panic() {
        let spec = RetrySpec {
            retry_percent: -1.0,
            ..RetrySpec::new(RetryBy::Tower)
        };
        let e = Retrying::new(gate(1), Some(&spec), 1.0).err().unwrap();
        assert!(e.contains("retry_percent"), "{e}");
    }
}
