//! governor's GCRA tests (boinkor-net/governor at 9f3a79d: `governor/tests/direct.rs`,
//! `governor/tests/future.rs`, and the tests in `governor/src/gcra.rs`), ported to a budget's
//! rate limit.
//!
//! governor's `Quota::per_second(n)` lets `n` cells through back to back and then one per
//! `1/n` s: here `BudgetConfig::rate(Rate::per_second(n)).burst(n)`, with more permits than
//! any test holds, so that only the rate binds. `check()` is `try_acquire()` (the permit dropped
//! at once), `until_ready()` is `acquire()`, and governor's `FakeRelativeClock` is tokio's
//! paused clock.
//!
//! Not ported: the `check_n`/`until_n_ready` tests (`rejects_too_many_all`,
//! `all_capacity_check_rejects_excess`, `pauses_n`, `errors_on_exceeded_capacity`): a budget
//! has no way to take several cells at once; `never_allows_more_than_capacity_all` and
//! `all_1_identical_to_1` are ported with single cells. The keyed limiters, and the tests of
//! derives and `Display`.

use std::sync::Mutex;
use std::time::Duration;

use inflight::{AcquireError, Budget, BudgetConfig, Rate, TryAcquireError};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use tokio::time::{advance, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// governor's `Quota::per_second(n)`: a burst of `n`, then one per `1/n` s.
fn per_second(n: u32) -> Budget {
    Budget::new(
        "governor",
        BudgetConfig::new(100_000)
            .rate(Rate::per_second(f64::from(n)))
            .burst(n),
    )
    .unwrap()
}

/// governor's `check()`: one cell now, or the refusal.
fn check(budget: &Budget) -> Result<(), TryAcquireError> {
    budget.try_acquire().map(drop)
}

// ---------------------------------------------------------------------------------------------
// tests/direct.rs
// ---------------------------------------------------------------------------------------------

/// Ports `accepts_first_cell`.
#[tokio::test(start_paused = true)]
async fn accepts_first_cell() {
    let lb = per_second(5);
    assert_eq!(check(&lb), Ok(()));
}

/// Ports `rejects_too_many` (and `all_1_identical_to_1`, its `check_n(1)` twin): a burst of 2,
/// the third refused, and 2 again a second later, the third refused again.
#[tokio::test(start_paused = true)]
async fn rejects_too_many() {
    let lb = per_second(2);
    assert_eq!(check(&lb), Ok(()));
    advance(ms(1)).await;
    assert_eq!(check(&lb), Ok(()));
    advance(ms(1)).await;
    assert_eq!(check(&lb), Err(TryAcquireError::RateLimited));

    // OK again in 1 s.
    advance(ms(1000)).await;
    assert_eq!(check(&lb), Ok(()));
    advance(ms(1)).await;
    assert_eq!(check(&lb), Ok(()));
    advance(ms(1)).await;
    assert_eq!(check(&lb), Err(TryAcquireError::RateLimited));
    assert_eq!(lb.snapshot().rate_limited, 2);
}

/// Ports `does_not_allow_one_extra_cell_after_longer_interval` (governor issues 107, 249): after
/// an idle spell much longer than the burst takes to refill, the burst is back, and no more.
#[tokio::test(start_paused = true)]
async fn does_not_allow_one_extra_cell_after_longer_interval() {
    let lb = per_second(5);
    for _ in 1..=5 {
        assert_eq!(check(&lb), Ok(()));
    }
    assert!(check(&lb).is_err());
    advance(Duration::from_secs(2)).await;
    for _ in 1..=5 {
        assert_eq!(check(&lb), Ok(()));
    }
    assert!(check(&lb).is_err());
}

/// Ports `never_allows_more_than_capacity_all` with single cells: 4 per second, 4 at once, a
/// fifth refused; a second later 4 more, and the fifth refused.
#[tokio::test(start_paused = true)]
async fn never_allows_more_than_capacity() {
    let lb = per_second(4);
    for _ in 0..4 {
        assert_eq!(check(&lb), Ok(()));
    }
    advance(ms(1)).await;
    assert!(check(&lb).is_err());

    advance(ms(1000)).await;
    assert_eq!(check(&lb), Ok(()));
    assert_eq!(check(&lb), Ok(()));
    advance(ms(1)).await;
    assert_eq!(check(&lb), Ok(()));
    assert_eq!(check(&lb), Ok(()));
    advance(ms(1)).await;
    assert!(check(&lb).is_err());
}

/// Ports `correct_wait_time`: a caller refused by the rate asks how long to wait, waits that
/// long, and is then let through (governor's `NotUntil::wait_time_from`). Here the wait comes
/// from `Budget::rate_ready_in`, the budget's answer to that question for `try_acquire`.
#[tokio::test(start_paused = true)]
async fn correct_wait_time() {
    let lb = per_second(5);
    let mut conforming = 0;
    for _ in 0..20 {
        advance(ms(1)).await;
        match check(&lb) {
            Ok(()) => conforming += 1,
            Err(TryAcquireError::RateLimited) => {
                let wait = lb.rate_ready_in().expect("the budget has a rate");
                advance(wait).await;
                assert_eq!(
                    check(&lb),
                    Ok(()),
                    "refused again after waiting the {wait:?} the budget said"
                );
                conforming += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(conforming, 20);
}

/// Ports `correct_wait_time` with the wait a refusal carries: a caller with a short permit
/// deadline is refused with `RateLimited { retry_after }`, and after that long it gets in.
#[tokio::test(start_paused = true)]
async fn correct_wait_time_from_the_refusal() {
    let lb = Budget::new(
        "governor",
        BudgetConfig::new(100_000)
            .rate(Rate::per_second(5.0))
            .burst(5)
            .permit_timeout(Duration::from_micros(1)),
    )
    .unwrap();
    let mut conforming = 0;
    for _ in 0..20 {
        advance(ms(1)).await;
        match lb.acquire().await {
            Ok(_) => conforming += 1,
            Err(AcquireError::RateLimited { retry_after }) => {
                advance(retry_after).await;
                assert_eq!(check(&lb), Ok(()), "refused after its retry_after");
                conforming += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(conforming, 20);
}

/// Ports `actual_threadsafety`: 20 threads take the 20 cells of a burst at once, all of them
/// pass; 2 ms later a cell is refused, and a second later one passes.
#[tokio::test(start_paused = true)]
async fn actual_threadsafety() {
    let lim = per_second(20);
    let handle = tokio::runtime::Handle::current();
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..20 {
            let (lim, handle, results) = (&lim, handle.clone(), &results);
            s.spawn(move || {
                let _clock = handle.enter(); // the paused clock
                let r = check(lim);
                results.lock().unwrap().push(r);
            });
        }
    });
    assert_eq!(*results.lock().unwrap(), vec![Ok(()); 20]);
    advance(ms(2)).await;
    assert!(check(&lim).is_err());
    advance(ms(998)).await;
    assert_eq!(check(&lim), Ok(()));
}

/// Ports `default_direct`: on the real clock, the first cell passes.
#[tokio::test]
async fn default_direct() {
    let limiter = per_second(20);
    assert_eq!(check(&limiter), Ok(()));
}

/// Ports `stresstest_large_quotas`: a quota far above what the callers can reach never refuses
/// one of them. governor takes 1,000,000,001/s; a budget takes at most 1,000,000/s, so here
/// with a burst of 1,000,000, two threads of 500,000 calls each on the real clock.
#[test]
fn stresstest_large_quotas() {
    let lim = Budget::new(
        "governor",
        BudgetConfig::new(100_000)
            .rate(Rate::per_second(1_000_000.0))
            .burst(1_000_000),
    )
    .unwrap();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for i in 0..500_000 {
                    if let Err(e) = check(&lim) {
                        panic!("call {i} refused: {e}");
                    }
                }
            });
        }
    });
}

/// Ports `stresstest_large_quotas`' quota itself: governor takes a rate of 1,000,000,001/s. A
/// budget refuses one above 1,000,000/s when it is built, and says so.
#[test]
fn large_quota_is_refused_when_built() {
    let err = Budget::new(
        "governor",
        BudgetConfig::new(1).rate(Rate::per_second(1_000_000_001.0)),
    )
    .unwrap_err();
    assert_eq!(err.field(), "rate");
}

// ---------------------------------------------------------------------------------------------
// tests/future.rs
// ---------------------------------------------------------------------------------------------

/// Ports `pauses`: an exhausted 10/s limiter lets the next caller through after 100 ms, not
/// before.
#[tokio::test(start_paused = true)]
async fn pauses() {
    let lim = per_second(10);
    while check(&lim).is_ok() {}
    let i = Instant::now();
    drop(lim.acquire().await.unwrap());
    assert_eq!(i.elapsed(), ms(100));
}

/// Ports `proceeds`: a fresh limiter lets the first caller through without waiting.
#[tokio::test(start_paused = true)]
async fn proceeds() {
    let lim = per_second(2);
    let i = Instant::now();
    drop(lim.acquire().await.unwrap());
    assert_eq!(i.elapsed(), Duration::ZERO);
}

/// Ports `multiple`: 20 callers wait on a 10/s limiter at once. The burst of 10 goes at once,
/// then one each 100 ms, in the order they asked: never more than the burst plus what the rate
/// refilled, in any stretch of time ("no more than burst at once").
#[tokio::test(start_paused = true)]
async fn multiple() {
    let lim = per_second(10);
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let lim = lim.clone();
            tokio::spawn(async move {
                drop(lim.acquire().await.unwrap());
                (i, t0.elapsed())
            })
        })
        .collect();
    let mut started = Vec::new();
    for t in tasks {
        started.push(t.await.unwrap());
    }
    for (i, at) in &started {
        let expected = if *i < 10 { 0 } else { (*i as u64 - 9) * 100 };
        assert_eq!(*at, ms(expected), "caller {i}");
    }
    // Over any stretch [a, a + w], at most 10 + w x 10/s starts.
    let times: Vec<Duration> = started.iter().map(|(_, t)| *t).collect();
    for a in &times {
        for b in &times {
            if b >= a {
                let n = times.iter().filter(|t| *t >= a && *t <= b).count();
                let w = (*b - *a).as_secs_f64();
                assert!(n as f64 <= 10.0 + w * 10.0 + 1e-9, "{n} in {w} s");
            }
        }
    }
}

/// Ports `multiple` with fewer permits than the burst: 20 callers on a 10/s limiter whose budget
/// lets only 4 in flight, each call taking 50 ms. The rate still holds (no more than 10 plus
/// what the rate refilled), and the concurrency limit holds too.
#[tokio::test(start_paused = true)]
async fn multiple_under_a_concurrency_limit() {
    let lim = Budget::new(
        "governor",
        BudgetConfig::new(4).rate(Rate::per_second(10.0)).burst(10),
    )
    .unwrap();
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let lim = lim.clone();
            tokio::spawn(async move {
                let p = lim.acquire().await.unwrap();
                let at = t0.elapsed();
                tokio::time::sleep(ms(50)).await;
                drop(p);
                at
            })
        })
        .collect();
    let mut times = Vec::new();
    for t in tasks {
        times.push(t.await.unwrap());
    }
    times.sort();
    for (k, a) in times.iter().enumerate() {
        for b in &times[k..] {
            let n = times.iter().filter(|t| *t >= a && *t <= b).count();
            let w = (*b - *a).as_secs_f64();
            assert!(
                n as f64 <= 10.0 + w * 10.0 + 1e-9,
                "{n} in {w} s: {times:?}"
            );
        }
    }
    assert!(lim.snapshot().peak_in_flight <= 4);
}

// ---------------------------------------------------------------------------------------------
// src/gcra.rs tests
// ---------------------------------------------------------------------------------------------

/// Proptest settings for these ports: a fixed seed, so that each run checks the same cases, and
/// no regression file.
fn deterministic(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(0x9f3a79d),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(deterministic(256))]

    /// Ports `roundtrips_quota`: a rate and burst given to a budget come back as given.
    #[test]
    fn roundtrips_quota(per_second in 1u32..10_000, burst in 1u32..10_000) {
        let config = BudgetConfig::new(1)
            .rate(Rate::per_second(f64::from(per_second)))
            .burst(burst);
        prop_assert_eq!(
            config.rate_limit(),
            Some((Rate::per_second(f64::from(per_second)), burst))
        );
        let budget = Budget::new("governor", config).unwrap();
        prop_assert_eq!(
            budget.config().rate_limit(),
            Some((Rate::per_second(f64::from(per_second)), burst))
        );
    }
}

/// Ports `notuntil_impls`: a refusal by the rate says what it is, and when to come back.
#[tokio::test(start_paused = true)]
async fn notuntil_impls() {
    let lb = Budget::new(
        "governor",
        BudgetConfig::new(8)
            .rate(Rate::per_second(1.0))
            .permit_timeout(ms(10)),
    )
    .unwrap();
    assert!(check(&lb).is_ok());
    assert_eq!(check(&lb), Err(TryAcquireError::RateLimited));
    assert!(!TryAcquireError::RateLimited.to_string().is_empty());
    let refused = lb.acquire().await.unwrap_err();
    assert!(refused.is_rate_limited());
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(1)));
}

// ---------------------------------------------------------------------------------------------
// tests/proptests.rs
// ---------------------------------------------------------------------------------------------

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(deterministic(64))]

    /// Ports `accurate_not_until`: after the burst is used up, a cell passes every step; once
    /// refused, a caller is refused at every moment before the wait the refusal gave, and let
    /// through exactly when it ends. The step is the budget's own interval (`Rate::interval`,
    /// `1/n` s rounded to the nearest nanosecond; governor truncates, so its step is up to 1 ns
    /// shorter and a cell may pass that much earlier there).
    #[test]
    fn accurate_not_until(capacity in 1u32..1_000, additional in 1u32..200, parts in 1u32..50) {
        let step = Rate::per_second(f64::from(capacity)).interval().unwrap();
        not_until(capacity, additional, parts, step)?;
    }
}

fn not_until(
    capacity: u32,
    additional: u32,
    parts: u32,
    step: Duration,
) -> Result<(), TestCaseError> {
    paused_runtime().block_on(async {
        let lb = Budget::new(
            "governor",
            BudgetConfig::new(100_000)
                .rate(Rate::per_second(f64::from(capacity)))
                .burst(capacity)
                .permit_timeout(Duration::from_nanos(1)),
        )
        .unwrap();
        for _ in 0..capacity {
            prop_assert!(check(&lb).is_ok());
        }
        for i in 0..additional {
            advance(step).await;
            prop_assert!(
                check(&lb).is_ok(),
                "refused at step {} of {:?}",
                i + 1,
                step
            );
        }
        let refused = lb.acquire().await.map(drop);
        let Err(AcquireError::RateLimited { retry_after }) = refused else {
            return Err(TestCaseError::fail(format!("not refused: {refused:?}")));
        };
        let part = retry_after / (parts + 1);
        for i in 0..parts {
            advance(part).await;
            prop_assert!(
                check(&lb).is_err(),
                "let through after {} of {:?}",
                i + 1,
                retry_after
            );
        }
        advance(retry_after - part * parts).await;
        prop_assert_eq!(
            check(&lb),
            Ok(()),
            "refused at the end of its {:?}",
            retry_after
        );
        Ok(())
    })
}
