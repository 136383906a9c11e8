//! The pace a budget learns from a dependency's retry-afters, on paused time: what a pause
//! releases is spaced, the learnt rate holds calls to what a rate quota admits, and the pace
//! lapses when the dependency stops refusing.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use inflight::limit::{Adaptive, Outcome, Verdict};
use inflight::{Budget, BudgetConfig, BuildError, Retry, RetryBudget, TryAcquireError};
use support::{budget, ms, settle};
use tokio::time::{sleep, Instant};

/// A rate quota as an HTTP API keeps one: a GCRA that answers 429 at once beyond `per_second`
/// (with a burst of `burst`), saying how long until it admits one call, as the lab's sim does.
struct Quota {
    interval: Duration,
    tolerance: Duration,
    tat: Mutex<Option<Instant>>,
}

impl Quota {
    fn new(per_second: u32, burst: u32) -> Quota {
        let interval = Duration::from_secs(1) / per_second;
        Quota {
            interval,
            tolerance: interval * (burst - 1),
            tat: Mutex::new(None),
        }
    }

    fn admit(&self) -> Result<(), Duration> {
        let now = Instant::now();
        let mut tat = self.tat.lock().unwrap();
        let current = tat.unwrap_or(now);
        if let Some(earliest) = current.checked_sub(self.tolerance) {
            if now < earliest {
                return Err(earliest - now);
            }
        }
        *tat = Some(current.max(now) + self.interval);
        Ok(())
    }
}

/// Service times of `median x exp(sigma x N(0, 1))` from a seeded generator.
struct Jitter(u64);

impl Jitter {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    fn service(&mut self, median: Duration, sigma: f64) -> Duration {
        let (u1, u2) = (self.uniform().max(1e-12), self.uniform());
        let normal = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        median.mul_f64((sigma * normal).exp())
    }
}

/// What a run against the quota saw: each admitted call's start, and the 429s.
#[derive(Debug, Default)]
struct Seen {
    admitted: Vec<Instant>,
    refused: usize,
    failed: usize,
}

/// `workers` callers, each making `calls` calls one after another through `budget` with
/// `call_with_retry` (3 attempts), against a quota of 50/s with a burst of 5, calls of about
/// 120 ms: the lab's quota scenario.
async fn against_the_quota(budget: &Budget, workers: usize, calls: usize) -> Seen {
    let quota = Arc::new(Quota::new(50, 5));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let jitter = Arc::new(Mutex::new(Jitter(0x9E37_79B9_7F4A_7C15)));
    let retry = Arc::new(Retry::new(RetryBudget::default()));
    let classify = |r: &Result<Result<(), Duration>, std::io::Error>| match r {
        Ok(Ok(())) => Verdict::from(Outcome::Success),
        Ok(Err(wait)) => Outcome::Overload.with_retry_after(*wait),
        Err(_) => Verdict::failure(),
    };
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (budget, quota, seen, jitter, retry) = (
                budget.clone(),
                quota.clone(),
                seen.clone(),
                jitter.clone(),
                retry.clone(),
            );
            tokio::spawn(async move {
                for _ in 0..calls {
                    let r = budget
                        .call_with_retry(&retry, classify, || {
                            let (quota, seen, jitter) =
                                (quota.clone(), seen.clone(), jitter.clone());
                            async move {
                                match quota.admit() {
                                    Ok(()) => {
                                        seen.lock().unwrap().admitted.push(Instant::now());
                                        let took = jitter.lock().unwrap().service(ms(120), 0.25);
                                        sleep(took).await;
                                        Ok::<_, std::io::Error>(Ok(()))
                                    }
                                    Err(wait) => {
                                        seen.lock().unwrap().refused += 1;
                                        sleep(ms(1)).await;
                                        Ok(Err(wait))
                                    }
                                }
                            }
                        })
                        .await;
                    if r.is_err() {
                        seen.lock().unwrap().failed += 1;
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
}

fn c6_enrichment() -> Budget {
    Budget::new(
        "enrichment",
        BudgetConfig::new(64).adaptive(Adaptive::aimd().initial(64)),
    )
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_learnt_pace_holds_calls_to_what_a_rate_quota_admits() {
    let b = c6_enrichment();
    let t0 = Instant::now();
    let seen = against_the_quota(&b, 64, 9).await;
    let took = t0.elapsed();
    let admitted = seen.admitted.len();
    let attempts = admitted + seen.refused;
    let rate = admitted as f64 / took.as_secs_f64();
    let per_second: Vec<_> = (0..took.as_secs() + 1)
        .map(|s| {
            let from = t0 + Duration::from_secs(s);
            seen.admitted
                .iter()
                .filter(|&&t| t >= from && t < from + Duration::from_secs(1))
                .count()
        })
        .collect();
    eprintln!(
        "admitted {admitted}, refused {}, failed {}, {:.1}/s over {took:?}, limit {}, per second {per_second:?}",
        seen.refused,
        seen.failed,
        rate,
        b.limit()
    );
    assert_eq!(
        seen.failed, 0,
        "{} refused, {} admitted",
        seen.refused, admitted
    );
    // The cold start spreads the first 64 calls over 8 ms, and the first 429 (1 ms) is heard
    // after about a dozen: sent at once, 59 of them met the burst of 5 (10% of the calls
    // answered 429). After them, the pace keeps the refusals few.
    assert!(
        seen.refused as f64 <= 0.05 * attempts as f64,
        "{} of {attempts} answered 429",
        seen.refused
    );
    assert!(rate >= 0.95 * 50.0, "{rate:.1} calls/s");
}

/// Spawns an `acquire_owned` that holds its permit for `hold`; returns when it was granted,
/// after `t0`.
fn holder(b: &Budget, t0: Instant, hold: Duration) -> tokio::task::JoinHandle<Duration> {
    let b = b.clone();
    tokio::spawn(async move {
        let p = b.acquire_owned().await.unwrap();
        let at = t0.elapsed();
        sleep(hold).await;
        p.report(Outcome::Success);
        at
    })
}

#[tokio::test(start_paused = true)]
async fn a_pause_that_ends_lets_the_waiters_out_one_retry_after_apart_not_all_at_once() {
    let b = budget(BudgetConfig::new(6));
    let t0 = Instant::now();
    let held: Vec<_> = (0..6).map(|_| b.try_acquire_owned().unwrap()).collect();
    let waiters: Vec<_> = (0..6).map(|_| holder(&b, t0, ms(1000))).collect();
    settle().await;
    assert_eq!(b.snapshot().waiting, 6);
    // One call is refused: retry after 100 ms. The other five end; every permit is free.
    let mut held = held.into_iter();
    held.next()
        .unwrap()
        .report(Outcome::Overload.with_retry_after(ms(100)));
    for p in held {
        p.report(Outcome::Success);
    }
    let mut granted = Vec::new();
    for w in waiters {
        granted.push(w.await.unwrap());
    }
    // The dependency said it would take one call in 100 ms: one then, the next 100 ms later.
    assert_eq!(
        granted,
        [ms(100), ms(200), ms(300), ms(400), ms(500), ms(600)]
    );
    let s = b.snapshot();
    assert_eq!((s.pauses, s.admitted), (1, 12));
}

#[tokio::test(start_paused = true)]
async fn the_pace_grows_while_paced_calls_succeed_and_lapses_when_nothing_is_refused() {
    let b = budget(BudgetConfig::new(64));
    b.try_acquire()
        .unwrap()
        .report(Outcome::Overload.with_retry_after(ms(50)));
    let t0 = Instant::now();
    // A steady demand far above the pace, for 12 s: every call succeeds in 10 ms.
    let mut starts = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    while t0.elapsed() < Duration::from_secs(12) {
        let p = b.acquire_owned().await.unwrap();
        starts.push(t0.elapsed());
        tasks.spawn(async move {
            sleep(ms(10)).await;
            p.report(Outcome::Success);
        });
    }
    tasks.join_all().await;
    let in_second = |s: u64| starts.iter().filter(|t| t.as_secs() == s).count();
    // From one call per 50 ms (20/s), 3% more each second while every slot is used.
    assert_eq!(in_second(0), 20, "{starts:?}");
    assert!((20..=22).contains(&in_second(2)), "{}", in_second(2));
    assert!((25..=28).contains(&in_second(9)), "{}", in_second(9));
    // Ten seconds without a refusal: no pace, and 64 calls may start at once.
    let all: Vec<_> = (0..64).map(|_| b.try_acquire().unwrap()).collect();
    assert_eq!(all.len(), 64);
    assert_eq!(b.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
}

#[tokio::test(start_paused = true)]
async fn a_pace_is_cut_by_a_refusal_of_a_paced_call() {
    let b = budget(BudgetConfig::new(8));
    b.try_acquire()
        .unwrap()
        .report(Outcome::Overload.with_retry_after(ms(100)));
    let t0 = Instant::now();
    let a = b.acquire().await.unwrap(); // the slot at 100 ms
    let c = b.acquire().await.unwrap(); // 200 ms
    assert_eq!(t0.elapsed(), ms(200));
    // Refused again, retry after 10 ms: no call before 210 ms, and the pace is cut, to one call
    // per 105 ms (100 / 0.95) from there.
    a.report(Outcome::Overload.with_retry_after(ms(10)));
    drop(c);
    let d = b.acquire().await.unwrap();
    assert_eq!(t0.elapsed(), ms(300), "the slot handed out before the cut");
    drop(d);
    let _e = b.acquire().await.unwrap();
    let gap = t0.elapsed() - ms(300);
    assert!(
        gap >= ms(105) && gap <= ms(106),
        "{gap:?} (the timer rounds up to 1 ms)"
    );
}

#[tokio::test(start_paused = true)]
async fn a_budget_that_sees_no_retry_after_is_never_paced() {
    let b = budget(BudgetConfig::new(4));
    for _ in 0..3 {
        let all: Vec<_> = (0..4).map(|_| b.try_acquire().unwrap()).collect();
        for p in all {
            p.report(Outcome::Overload); // an overload without a retry-after
        }
    }
    assert_eq!(b.snapshot().pauses, 0);
    let all: Vec<_> = (0..4).map(|_| b.try_acquire().unwrap()).collect();
    assert_eq!(all.len(), 4);
}

/// 64 callers at once; when each was granted, after `t0`. Each holds its permit for 10 s.
async fn granted_at_once(b: &Budget, n: usize) -> Vec<Duration> {
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| holder(b, t0, Duration::from_secs(10)))
        .collect();
    let mut granted = Vec::new();
    for t in tasks {
        granted.push(t.await.unwrap());
    }
    granted.sort();
    granted
}

#[tokio::test(start_paused = true)]
async fn a_cold_start_sends_a_burst_then_spreads_the_initial_limit_over_8_ms() {
    let b = c6_enrichment();
    let granted = granted_at_once(&b, 64).await;
    let by = |t: Duration| granted.iter().filter(|&&g| g <= t).count();
    // 4 at once, then one per 8 ms / 60 (133 us; the timer rounds up to 1 ms): 7 more by 1 ms.
    assert_eq!(by(Duration::ZERO), 4, "{granted:?}");
    assert_eq!(by(ms(1)), 11, "{granted:?}");
    assert_eq!(by(ms(4)), 4 + 30, "{granted:?}");
    assert_eq!(by(ms(8)), 64, "{granted:?}");
    // One caller after another keeps to the same schedule: the 64th starts by 8 ms, not one
    // timer tick per call.
    let one_by_one = c6_enrichment();
    let t0 = Instant::now();
    let mut held = Vec::new();
    for _ in 0..64 {
        held.push(one_by_one.acquire().await.unwrap());
    }
    assert_eq!(t0.elapsed(), ms(8));
    // A fixed budget, and an adaptive one told not to, send all 64 at once.
    let fixed = budget(BudgetConfig::new(64));
    assert_eq!(granted_at_once(&fixed, 64).await, [Duration::ZERO; 64]);
    let blind = budget(
        BudgetConfig::new(64).adaptive(Adaptive::aimd().initial(64).cold_start(Duration::ZERO)),
    );
    assert_eq!(granted_at_once(&blind, 64).await, [Duration::ZERO; 64]);
}

#[tokio::test(start_paused = true)]
async fn the_first_answer_ends_the_cold_start_and_its_waiters_go_at_once() {
    let b = c6_enrichment();
    let t0 = Instant::now();
    let burst: Vec<_> = (0..4).map(|_| b.try_acquire().unwrap()).collect();
    // Between two of the cold start's slots, a caller that will not wait is refused.
    assert_eq!(b.try_acquire().unwrap_err(), TryAcquireError::Paused);
    let waiters: Vec<_> = (0..59)
        .map(|_| holder(&b, t0, Duration::from_secs(10)))
        .collect();
    settle().await;
    // The first answer, of any kind, at t0: every waiter goes now, not at its slot.
    burst.into_iter().next().unwrap().report(Outcome::Ignore);
    for w in waiters {
        assert_eq!(w.await.unwrap(), Duration::ZERO);
    }
    // And the budget is back on its fast path: no slots.
    assert!(b.try_acquire().is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_cold_start_longer_than_a_second_is_refused_by_name() {
    let config = BudgetConfig::new(64).adaptive(Adaptive::aimd().initial(64).cold_start(ms(1001)));
    let err: BuildError = Budget::new("enrichment", config).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("cold_start") && message.contains("at most 1s"),
        "{message}"
    );
}
