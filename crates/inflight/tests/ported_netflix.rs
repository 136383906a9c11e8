//! Netflix concurrency-limits' core tests (Netflix/concurrency-limits at 78a74b9,
//! `concurrency-limits-core/src/test/java/.../limit` and `.../limiter`), ported to inflight.
//!
//! - `AIMDLimitTest` and `VegasLimitTest` drive `inflight::limit::{Aimd, Vegas}` sample by sample,
//!   as the Java tests call `onSample`, on paused tokio time (both read tokio's clock). inflight's
//!   Vegas measures windows of samples, not single ones, so a Java sample becomes a window of
//!   them; the assertion is the property (grows, shrinks, stays), not Netflix's exact numbers,
//!   which come from its own increase and decrease functions.
//! - `SimpleLimiterTest`, `BlockingLimiterTest`, `AbstractPartitionedLimiterTest` (partitions:
//!   inflight's priority classes) and `LifoBlockingLimiterTest` drive a `Budget`. Netflix's
//!   `acquire` of a non-blocking limiter is `try_acquire`; a blocking limiter's is `acquire`.
//!   `SettableLimit` is a `Limit` whose value the test sets.
//!
//! Not ported: `GradientLimitTest`/`Gradient2LimitTest` (inflight has no gradient limit), the
//! bypass tests (inflight has no bypass resolver), `decreaseSmoothing` (no smoothing setting),
//! `setLimitReservesBusy` (no per-partition limit), and the measurement/window/function tests.
//!
//! Ported to inflight's documented behaviour where Netflix's differs on purpose (each test says
//! which): waiters are served first in, first out (`LifoBlockingLimiter` serves the newest
//! first); a budget reads its `Limit` when a call ends (a limit raised with no call ending
//! admits nobody new; Netflix's `SettableLimit` takes effect at once); one limit covers every
//! class (Netflix lets an unused partition's share past the total); Vegas grows a large limit
//! only from windows in which a caller found it full (Netflix, from over half in use).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inflight::limit::{Adaptive, Aimd, Limit, Outcome, Sample, Vegas};
use inflight::{AcquireError, Budget, BudgetConfig, Classes, OwnedPermit, TryAcquireError};
use tokio::time::{sleep, timeout, Instant};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Lets every task that can run, run, without advancing paused time.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

// ---------------------------------------------------------------------------------------------
// AIMDLimitTest
// ---------------------------------------------------------------------------------------------

/// Ports `AIMDLimitTest.testDefault`: an initial limit of 10 is the limit.
#[tokio::test(start_paused = true)]
async fn aimd_default() {
    assert_eq!(Aimd::new(1, 10, 200).current(), 10);
    let budget = Budget::new(
        "netflix",
        BudgetConfig::new(200).adaptive(Adaptive::aimd().initial(10)),
    )
    .unwrap();
    assert_eq!(budget.limit(), 10);
}

/// Ports `AIMDLimitTest.increaseOnSuccess`: a success with half the limit in flight adds one.
#[tokio::test(start_paused = true)]
async fn aimd_increase_on_success() {
    let mut limit = Aimd::new(1, 20, 200);
    limit.on_sample(&Sample::new(ms(1), 10, Outcome::Success));
    assert_eq!(limit.current(), 21);
}

/// Ports `AIMDLimitTest.increaseOnSuccess` through a budget: with 10 of a limit of 20 held, a
/// success reported on a permit raises the budget's limit to 21.
#[tokio::test(start_paused = true)]
async fn aimd_increase_on_success_through_a_budget() {
    let budget = Budget::new(
        "netflix",
        BudgetConfig::new(200).adaptive(Adaptive::aimd().initial(20)),
    )
    .unwrap();
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(budget.acquire_owned().await.unwrap());
    }
    held.pop().unwrap().report(Outcome::Success);
    assert_eq!(budget.limit(), 21);
}

/// Ports `AIMDLimitTest.decreaseOnDrops`: a drop multiplies the limit by the backoff (Netflix's
/// default 0.9; inflight's default is 0.75, so it is set here).
#[tokio::test(start_paused = true)]
async fn aimd_decrease_on_drops() {
    let mut limit = Aimd::new(1, 30, 200).backoff(0.9);
    limit.on_sample(&Sample::new(Duration::ZERO, 0, Outcome::Overload));
    assert_eq!(limit.current(), 27);
}

/// Ports `AIMDLimitTest.decreaseOnDrops` through a budget: an overload reported on a permit
/// cuts the budget's limit by the backoff.
#[tokio::test(start_paused = true)]
async fn aimd_decrease_on_drops_through_a_budget() {
    let budget = Budget::new(
        "netflix",
        BudgetConfig::new(200).adaptive(
            Adaptive::aimd()
                .initial(30)
                .backoff(0.9)
                .cold_start(Duration::ZERO),
        ),
    )
    .unwrap();
    budget.acquire().await.unwrap().report(Outcome::Overload);
    assert_eq!(budget.limit(), 27);
}

/// Ports `AIMDLimitTest.successOverflow`: a limit at its max stays there on success.
#[tokio::test(start_paused = true)]
async fn aimd_success_overflow() {
    let mut limit = Aimd::new(0, 21, 21);
    limit.on_sample(&Sample::new(ms(1), 10, Outcome::Success));
    assert_eq!(limit.current(), 21);
    limit.on_sample(&Sample::new(ms(1), 21, Outcome::Success));
    assert_eq!(limit.current(), 21, "grew past its max");
}

// ---------------------------------------------------------------------------------------------
// VegasLimitTest
// ---------------------------------------------------------------------------------------------

/// Netflix's `VegasLimitTest.create()`: alpha 3, beta 6, initial 10, max 20.
fn vegas() -> Vegas {
    Vegas::new(1, 10, 20).queue(3.0, 6.0)
}

/// Feeds `n` successes of `latency`, each granted after the latest window began (the clock moves
/// past `latency` first), with `in_flight(i)` calls in flight at the i-th.
async fn feed(limit: &mut Vegas, latency: Duration, n: usize, in_flight: impl Fn(usize) -> usize) {
    sleep(latency + ms(1)).await;
    for i in 0..n {
        limit.on_sample(&Sample::new(latency, in_flight(i), Outcome::Success));
    }
}

/// Finishes a slow-start ramp: feeds successes at this instant until the limit stops moving.
fn finish_ramp(limit: &mut Vegas, latency: Duration) {
    loop {
        let before = limit.current();
        limit.on_sample(&Sample::new(latency, before, Outcome::Success));
        if limit.current() == before {
            return;
        }
    }
}

/// Ports `VegasLimitTest.increaseLimit`: at the no-load latency, with the limit in use, the limit
/// grows (Netflix: 10 -> 16 on the second sample; here after the first window, by slow start).
#[tokio::test(start_paused = true)]
async fn vegas_increase_limit() {
    let mut limit = vegas();
    feed(&mut limit, ms(10), 10, |_| 10).await;
    assert_eq!(limit.baseline(), Some(ms(10)));
    finish_ramp(&mut limit, ms(10));
    assert!(limit.current() > 10, "limit {}", limit.current());
    assert!(limit.current() <= 20, "past its max: {}", limit.current());
}

/// Ports `VegasLimitTest.decreaseLimit`: calls five times slower than without load, with the
/// limit in use, shrink the limit (Netflix: 10 -> 9).
#[tokio::test(start_paused = true)]
async fn vegas_decrease_limit() {
    let mut limit = vegas();
    feed(&mut limit, ms(10), 10, |_| 10).await;
    finish_ramp(&mut limit, ms(10));
    let before = limit.current();
    feed(&mut limit, ms(50), before, |_| before).await;
    assert!(
        limit.current() < before,
        "{before} -> {} on a queue of {:.1}",
        limit.current(),
        before as f64 * (1.0 - 10.0 / 50.0)
    );
}

/// Ports `VegasLimitTest.noChangeIfWithinThresholds`: a queue between alpha and beta leaves the
/// limit where it is.
#[tokio::test(start_paused = true)]
async fn vegas_no_change_if_within_thresholds() {
    let mut limit = vegas();
    feed(&mut limit, ms(10), 10, |_| 10).await;
    finish_ramp(&mut limit, ms(10));
    let before = limit.current();
    // before x (1 - 10/14) is between 3 and 6 for any limit from 11 to 20.
    feed(&mut limit, ms(14), before, |_| before).await;
    assert_eq!(limit.current(), before);
}

/// Ports `VegasLimitTest.decreaseWithoutSmoothing`: a queue that persists shrinks the limit
/// window after window (Netflix: 100 -> 50 -> 25).
#[tokio::test(start_paused = true)]
async fn vegas_decrease_without_smoothing() {
    let mut limit = Vegas::new(1, 100, 200);
    feed(&mut limit, ms(10), 100, |_| 100).await;
    finish_ramp(&mut limit, ms(10));
    let start = limit.current();
    feed(&mut limit, ms(20), start, |_| start).await;
    let first = limit.current();
    assert!(first < start, "{start} -> {first}");
    feed(&mut limit, ms(20), first.max(8), |_| first).await;
    let second = limit.current();
    assert!(second < first, "{start} -> {first} -> {second}");
}

/// Ports `VegasLimitTest.largeLimitIncrease`, first half: a large limit that the calls use only
/// half of does not move.
#[tokio::test(start_paused = true)]
async fn vegas_large_limit_unused_half_does_not_move() {
    let mut limit = Vegas::new(1, 10_000, 20_000);
    feed(&mut limit, Duration::from_secs(10), 10_000, |_| 5_000).await;
    assert_eq!(limit.current(), 10_000);
}

/// Ports `VegasLimitTest.largeLimitIncrease` with the limit full: the large limit grows.
#[tokio::test(start_paused = true)]
async fn vegas_large_limit_increase_when_full() {
    let mut limit = Vegas::new(1, 10_000, 20_000);
    feed(&mut limit, Duration::from_secs(10), 10_000, |_| 10_000).await;
    finish_ramp(&mut limit, Duration::from_secs(10));
    assert!(limit.current() > 10_000, "limit {}", limit.current());
}

// ---------------------------------------------------------------------------------------------
// SimpleLimiterTest
// ---------------------------------------------------------------------------------------------

fn fixed(n: usize) -> Budget {
    Budget::new("netflix", BudgetConfig::new(n)).unwrap()
}

/// Ports `SimpleLimiterTest.useLimiterCapacityUntilTotalLimit`.
#[test]
fn simple_use_limiter_capacity_until_total_limit() {
    let budget = fixed(10);
    let held: Vec<_> = (0..10).map(|_| budget.try_acquire().unwrap()).collect();
    assert_eq!(
        budget.try_acquire().unwrap_err(),
        TryAcquireError::NoPermits
    );
    assert_eq!(budget.in_flight(), 10);
    drop(held);
}

/// Ports `SimpleLimiterTest.testReleaseLimit`.
#[test]
fn simple_release_limit() {
    let budget = fixed(10);
    let first = budget.try_acquire().unwrap();
    let rest: Vec<_> = (1..10).map(|_| budget.try_acquire().unwrap()).collect();
    assert_eq!(budget.in_flight(), 10);
    assert!(budget.try_acquire().is_err());
    first.report(Outcome::Success);
    assert_eq!(budget.in_flight(), 9);
    let again = budget.try_acquire().unwrap();
    assert_eq!(budget.in_flight(), 10);
    drop((rest, again));
}

/// Ports `SimpleLimiterTest.testSimpleBypassLimiterDefault`: no caller goes around a full
/// budget, whatever it calls itself.
#[test]
fn simple_bypass_limiter_default() {
    let budget = fixed(10);
    let held: Vec<_> = (0..10)
        .map(|i| {
            let p = budget.try_acquire_in("live").unwrap();
            assert_eq!(budget.in_flight(), i + 1);
            p
        })
        .collect();
    assert!(budget.try_acquire_in("live").is_err());
    assert!(budget.try_acquire_in("admin").is_err());
    drop(held);
}

/// Ports `SimpleLimiterTest.testConcurrentSimple`: many threads trying a budget of 10 at once
/// never hold more than 10, and every try is counted once.
#[test]
fn simple_concurrent() {
    const THREADS: usize = 32;
    const ITERATIONS: usize = 2_000;
    const LIMIT: usize = 10;
    let budget = fixed(LIMIT);
    let inside = AtomicUsize::new(0);
    let peak = AtomicUsize::new(0);
    let ok = AtomicUsize::new(0);
    let refused = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..ITERATIONS {
                    match budget.try_acquire() {
                        Ok(permit) => {
                            let now = inside.fetch_add(1, SeqCst) + 1;
                            peak.fetch_max(now, SeqCst);
                            ok.fetch_add(1, SeqCst);
                            std::thread::yield_now();
                            inside.fetch_sub(1, SeqCst);
                            permit.report(Outcome::Success);
                        }
                        Err(_) => {
                            refused.fetch_add(1, SeqCst);
                        }
                    }
                }
            });
        }
    });
    let (ok, refused) = (ok.load(SeqCst), refused.load(SeqCst));
    assert!(peak.load(SeqCst) <= LIMIT, "peak {}", peak.load(SeqCst));
    assert_eq!(ok + refused, THREADS * ITERATIONS);
    let s = budget.snapshot();
    assert!(s.peak_in_flight <= LIMIT);
    assert_eq!((s.admitted as usize, s.rejected as usize), (ok, refused));
    assert_eq!(s.in_flight, 0);
}

// ---------------------------------------------------------------------------------------------
// BlockingLimiterTest
// ---------------------------------------------------------------------------------------------

/// Netflix's `SettableLimit`: a limit the test sets by hand. A budget reads it after each
/// sample.
#[derive(Debug, Clone)]
struct SettableLimit(Arc<AtomicUsize>);

impl SettableLimit {
    fn starting_at(n: usize) -> SettableLimit {
        SettableLimit(Arc::new(AtomicUsize::new(n)))
    }

    fn set_limit(&self, n: usize) {
        self.0.store(n, SeqCst);
    }
}

impl Limit for SettableLimit {
    fn current(&self) -> usize {
        self.0.load(SeqCst)
    }

    fn max(&self) -> usize {
        1_000
    }

    fn on_sample(&mut self, _: &Sample) {}
}

fn settable(limit: &SettableLimit, config: BudgetConfig) -> Budget {
    Budget::builder("netflix")
        .config(config)
        .limit(limit.clone())
        .build()
        .unwrap()
}

/// Ports `BlockingLimiterTest.test`: 10 held, the limit set to 1, all 10 released: a permit
/// is free again (and only one).
#[tokio::test(start_paused = true)]
async fn blocking_shrink_then_release_all() {
    let limit = SettableLimit::starting_at(10);
    let budget = settable(&limit, BudgetConfig::new(1_000));
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(budget.acquire_owned().await.unwrap());
    }
    limit.set_limit(1);
    for p in held {
        p.report(Outcome::Success);
    }
    let one = timeout(ms(1_000), budget.acquire())
        .await
        .expect("no permit after every holder released")
        .unwrap();
    assert_eq!(budget.limit(), 1);
    assert!(
        budget.try_acquire().is_err(),
        "two permits under a limit of 1"
    );
    drop(one);
}

/// Ports `BlockingLimiterTest.testMultipleBlockedThreads`: 8 callers on a limit of 1 all get
/// through in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_multiple_blocked_threads() {
    let limit = SettableLimit::starting_at(1);
    let budget = settable(&limit, BudgetConfig::new(1_000));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let budget = budget.clone();
            tokio::spawn(async move {
                budget.acquire().await.unwrap().report(Outcome::Success);
            })
        })
        .collect();
    for task in tasks {
        timeout(Duration::from_secs(1), task)
            .await
            .expect("a caller stayed blocked")
            .unwrap();
    }
    assert_eq!(budget.snapshot().peak_in_flight, 1);
}

/// Ports `BlockingLimiterTest.testTimeout`: with a 50 ms wait allowed, the second caller on a
/// limit of 1 is refused after at least 50 ms.
#[tokio::test(start_paused = true)]
async fn blocking_timeout() {
    let limit = SettableLimit::starting_at(1);
    let budget = settable(&limit, BudgetConfig::new(1_000).permit_timeout(ms(50)));
    let _held = budget.acquire().await.unwrap();
    let before = Instant::now();
    assert_eq!(
        budget.acquire().await.unwrap_err(),
        AcquireError::PermitTimeout
    );
    assert!(before.elapsed() >= ms(50), "{:?}", before.elapsed());
}

/// Ports `BlockingLimiterTest.testNoTimeout`: with no deadline, the second caller is still
/// waiting after a second.
#[tokio::test(start_paused = true)]
async fn blocking_no_timeout() {
    let limit = SettableLimit::starting_at(1);
    let budget = settable(&limit, BudgetConfig::new(1_000));
    let _held = budget.acquire().await.unwrap();
    assert!(timeout(Duration::from_secs(1), budget.acquire())
        .await
        .is_err());
}

/// Ports `BlockingLimiterTest.failOnHighTimeout`: an absurd wait is refused when the limiter is
/// built (Netflix caps it at an hour and tries a day; inflight caps it at 7 days).
#[test]
fn blocking_fail_on_high_timeout() {
    let err = Budget::new(
        "netflix",
        BudgetConfig::new(1).permit_timeout(Duration::from_secs(8 * 24 * 3600)),
    )
    .unwrap_err();
    assert_eq!(err.field(), "permit_timeout");
}

// ---------------------------------------------------------------------------------------------
// AbstractPartitionedLimiterTest (partitions: priority classes)
// ---------------------------------------------------------------------------------------------

/// Netflix's `batch` 0.3 and `live` 0.7 of a fixed limit of 10, as weights.
fn partitioned() -> Budget {
    let classes = Classes::new().class("batch", 3).class("live", 7);
    Budget::new("netflix", BudgetConfig::new(10).classes(classes)).unwrap()
}

fn class_in_flight(budget: &Budget, class: &str) -> usize {
    budget
        .snapshot()
        .classes
        .iter()
        .find(|c| c.name == class)
        .unwrap()
        .in_flight
}

/// Ports `limitAllocatedToBins`: batch 0.3 and live 0.7 of 10. inflight has no per-class limit;
/// its shares apply to the grants while callers of both wait: 3 in 10 to batch, 7 to live.
#[tokio::test(start_paused = true)]
async fn partition_limit_allocated_to_bins() {
    let classes = Classes::new().class("batch", 3).class("live", 7);
    let budget = Budget::new("netflix", BudgetConfig::new(1).classes(classes)).unwrap();
    let held = budget.acquire_owned().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..200 {
        let class = if i % 2 == 0 { "batch" } else { "live" };
        let (budget, order) = (budget.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let _p = budget.acquire_in(class).await.unwrap();
            order.lock().unwrap().push(class);
        }));
        settle().await;
    }
    drop(held);
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap();
    let batch = order[..100].iter().filter(|c| **c == "batch").count();
    assert!(
        (29..=31).contains(&batch),
        "batch got {batch} of the first 100 grants"
    );
}

/// Ports `useExcessCapacityUntilTotalLimit`: batch may use all 10 while live is idle, and no
/// more.
#[test]
fn partition_use_excess_capacity_until_total_limit() {
    let budget = partitioned();
    let mut held = Vec::new();
    for i in 0..10 {
        held.push(budget.try_acquire_in("batch").unwrap());
        assert_eq!(class_in_flight(&budget, "batch"), i + 1);
    }
    assert!(budget.try_acquire_in("batch").is_err());
}

/// Ports `exceedTotalLimitForUnusedBin` the way inflight keeps its one limit: live callers that
/// wait while batch holds every permit get the next permits that come back, ahead of batch
/// callers that waited longer.
#[tokio::test(start_paused = true)]
async fn partition_unused_bin_gets_the_next_permits() {
    let classes = Classes::new()
        .class("batch", 3)
        .class("live", 7)
        .strict(true);
    let budget = Budget::new("netflix", BudgetConfig::new(10).classes(classes)).unwrap();
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(budget.try_acquire_owned_in("batch").unwrap());
    }
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for class in ["batch", "batch", "live", "live"] {
        let (budget, order) = (budget.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let p = budget.acquire_owned_in(class).await.unwrap();
            order.lock().unwrap().push(class);
            p
        }));
        settle().await;
    }
    held.pop();
    held.pop();
    settle().await;
    assert_eq!(*order.lock().unwrap(), ["live", "live"]);
    drop(held);
    for t in tasks {
        drop(t.await.unwrap());
    }
}

/// Ports `rejectOnceAllLimitsReached`.
#[test]
fn partition_reject_once_all_limits_reached() {
    let budget = partitioned();
    let mut held = Vec::new();
    for i in 0..3 {
        held.push(budget.try_acquire_in("batch").unwrap());
        assert_eq!(class_in_flight(&budget, "batch"), i + 1);
        assert_eq!(budget.in_flight(), i + 1);
    }
    for i in 0..7 {
        held.push(budget.try_acquire_in("live").unwrap());
        assert_eq!(class_in_flight(&budget, "live"), i + 1);
        assert_eq!(budget.in_flight(), i + 4);
    }
    assert!(budget.try_acquire_in("batch").is_err());
    assert!(budget.try_acquire_in("live").is_err());
}

/// Ports `releaseLimit`.
#[test]
fn partition_release_limit() {
    let budget = partitioned();
    let first = budget.try_acquire_in("batch").unwrap();
    let mut held = Vec::new();
    for i in 1..10 {
        held.push(budget.try_acquire_in("batch").unwrap());
        assert_eq!(class_in_flight(&budget, "batch"), i + 1);
    }
    assert_eq!(budget.in_flight(), 10);
    assert!(budget.try_acquire_in("batch").is_err());
    first.report(Outcome::Success);
    assert_eq!(class_in_flight(&budget, "batch"), 9);
    assert_eq!(budget.in_flight(), 9);
    held.push(budget.try_acquire_in("batch").unwrap());
    assert_eq!(class_in_flight(&budget, "batch"), 10);
    assert_eq!(budget.in_flight(), 10);
}

/// Ports `testConcurrentPartitions`: threads of three classes trying a budget of 20 at once
/// never hold more than 20 together (Netflix allows up to 20 + threads), and every try is
/// counted once per class.
#[test]
fn partition_concurrent() {
    const THREADS: usize = 5;
    const ITERATIONS: usize = 2_000;
    const LIMIT: usize = 20;
    let classes = Classes::new().class("A", 5).class("B", 3).class("C", 2);
    let budget = Budget::new("netflix", BudgetConfig::new(LIMIT).classes(classes)).unwrap();
    let inside = AtomicUsize::new(0);
    let peak = AtomicUsize::new(0);
    let tries = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for class in ["A", "B", "C"] {
            for _ in 0..THREADS {
                let (budget, inside, peak, tries) = (&budget, &inside, &peak, &tries);
                s.spawn(move || {
                    for _ in 0..ITERATIONS {
                        tries.fetch_add(1, SeqCst);
                        if let Ok(p) = budget.try_acquire_in(class) {
                            let now = inside.fetch_add(1, SeqCst) + 1;
                            peak.fetch_max(now, SeqCst);
                            std::thread::yield_now();
                            inside.fetch_sub(1, SeqCst);
                            p.report(Outcome::Success);
                        }
                    }
                });
            }
        }
    });
    assert!(peak.load(SeqCst) <= LIMIT, "peak {}", peak.load(SeqCst));
    let s = budget.snapshot();
    assert!(s.peak_in_flight <= LIMIT);
    assert_eq!(s.in_flight, 0);
    assert_eq!((s.admitted + s.rejected) as usize, tries.load(SeqCst));
    for c in &s.classes {
        assert_eq!(
            (c.admitted + c.rejected) as usize,
            THREADS * ITERATIONS,
            "class {}",
            c.name
        );
        assert_eq!(c.in_flight, 0);
    }
}

// ---------------------------------------------------------------------------------------------
// LifoBlockingLimiterTest
// ---------------------------------------------------------------------------------------------

/// The Java test's fixture: a settable limit of 4, a backlog of 10, a backlog timeout of 1 s.
fn lifo(limit: &SettableLimit) -> Budget {
    settable(
        limit,
        BudgetConfig::new(1_000)
            .max_queued(10)
            .permit_timeout(Duration::from_secs(1)),
    )
}

async fn acquire_n(budget: &Budget, n: usize) -> Vec<OwnedPermit> {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(budget.acquire_owned().await.unwrap());
    }
    held
}

/// Ports `LifoBlockingLimiterTest.blockWhenFullAndTimeout`.
#[tokio::test(start_paused = true)]
async fn lifo_block_when_full_and_timeout() {
    let limit = SettableLimit::starting_at(4);
    let budget = lifo(&limit);
    let _held = acquire_n(&budget, 4).await;
    let start = Instant::now();
    assert!(budget.acquire().await.unwrap_err().is_permit_timeout());
    assert!(start.elapsed() >= Duration::from_secs(1));
}

/// Ports `LifoBlockingLimiterTest.unblockWhenFullBeforeTimeout`.
#[tokio::test(start_paused = true)]
async fn lifo_unblock_when_full_before_timeout() {
    let limit = SettableLimit::starting_at(4);
    let budget = lifo(&limit);
    let mut held = acquire_n(&budget, 4).await;
    let first = held.remove(0);
    tokio::spawn(async move {
        sleep(ms(250)).await;
        first.report(Outcome::Success);
    });
    let start = Instant::now();
    let p = budget.acquire().await.unwrap();
    assert!(start.elapsed() >= ms(200), "{:?}", start.elapsed());
    drop(p);
}

/// Ports `LifoBlockingLimiterTest.rejectWhenBacklogSizeReached`: 4 held and 10 waiting, the
/// next is refused at once.
#[tokio::test(start_paused = true)]
async fn lifo_reject_when_backlog_size_reached() {
    let limit = SettableLimit::starting_at(4);
    let budget = lifo(&limit);
    let _held = acquire_n(&budget, 4).await;
    let waiters: Vec<_> = (0..10)
        .map(|_| {
            let budget = budget.clone();
            tokio::spawn(async move { budget.acquire_owned().await.map(drop) })
        })
        .collect();
    settle().await;
    let start = Instant::now();
    assert!(budget.acquire().await.unwrap_err().is_queue_full());
    assert_eq!(start.elapsed(), Duration::ZERO);
    for w in waiters {
        assert!(w.await.unwrap().unwrap_err().is_permit_timeout());
    }
}

/// Ports `LifoBlockingLimiterTest.adaptWhenLimitIncreases` where the raise comes with a sample
/// (a budget reads its limit when a call ends): a caller waiting on a full budget gets in as
/// soon as the limit grows, along with the permit that came back.
#[tokio::test(start_paused = true)]
async fn lifo_adapt_when_limit_increases_on_a_sample() {
    let limit = SettableLimit::starting_at(4);
    let budget = lifo(&limit);
    let mut held = acquire_n(&budget, 4).await;
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let budget = budget.clone();
            tokio::spawn(async move { budget.acquire_owned().await })
        })
        .collect();
    settle().await;
    limit.set_limit(6);
    held.pop().unwrap().report(Outcome::Success);
    settle().await;
    assert_eq!(budget.in_flight(), 5);
    for w in waiters {
        assert!(w.is_finished());
        drop(w.await.unwrap().unwrap());
    }
}

/// Ports `LifoBlockingLimiterTest.adaptWhenLimitDecreases`: 4 held, the limit set to 3, one
/// released: the next caller still waits, and times out.
#[tokio::test(start_paused = true)]
async fn lifo_adapt_when_limit_decreases() {
    let limit = SettableLimit::starting_at(4);
    let budget = lifo(&limit);
    let mut held = acquire_n(&budget, 4).await;
    limit.set_limit(3);
    held.remove(0).report(Outcome::Success);
    let start = Instant::now();
    assert!(budget.acquire().await.unwrap_err().is_permit_timeout());
    assert!(start.elapsed() >= Duration::from_secs(1));
}

/// Ports `LifoBlockingLimiterTest.verifyFifoOrder` (whose expectation is last in, first out),
/// asserting inflight's documented order: first in, first out.
#[tokio::test(start_paused = true)]
async fn lifo_verify_fifo_order_as_inflight_documents() {
    let limit = SettableLimit::starting_at(4);
    let budget = lifo(&limit);
    let first_batch = acquire_n(&budget, 4).await;
    let values = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        sleep(ms(50)).await;
        let (budget, values) = (budget.clone(), values.clone());
        tasks.push(tokio::spawn(async move {
            let p = budget.acquire().await.unwrap();
            values.lock().unwrap().push(i);
            p.report(Outcome::Success);
        }));
    }
    for p in first_batch {
        sleep(ms(100)).await;
        p.report(Outcome::Success);
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*values.lock().unwrap(), [0, 1, 2, 3, 4]);
}

/// Ports `LifoBlockingLimiterTest.timeoutAcquireRaceCondition`: a permit released just as the
/// callers waiting for it time out is never lost. 3 held, the 4th taken; 10 callers wait 10 ms
/// for it; the first to time out releases the 4th. After each round, 3 are in flight.
#[tokio::test(start_paused = true)]
async fn lifo_timeout_acquire_race_condition() {
    timeout_race(Duration::from_millis(10)).await;
}

/// `timeoutAcquireRaceCondition` on real time and two worker threads, where the release and
/// the timeouts really race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifo_timeout_acquire_race_condition_threads() {
    for _ in 0..5 {
        timeout_race(Duration::from_millis(10)).await;
    }
}

async fn timeout_race(wait: Duration) {
    let limit = SettableLimit::starting_at(4);
    let budget = settable(
        &limit,
        BudgetConfig::new(1_000)
            .max_queued(1_000)
            .permit_timeout(wait),
    );
    let _three = acquire_n(&budget, 3).await;
    for round in 0..10 {
        let first_timeout = Arc::new(AtomicBool::new(false));
        let one = Arc::new(Mutex::new(Some(budget.acquire_owned().await.unwrap())));
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let (budget, first_timeout, one) =
                    (budget.clone(), first_timeout.clone(), one.clone());
                tokio::spawn(async move {
                    match budget.acquire().await {
                        Ok(p) => p.report(Outcome::Success),
                        Err(_) => {
                            if !first_timeout.swap(true, SeqCst) {
                                let p = one.lock().unwrap().take();
                                if let Some(p) = p {
                                    p.report(Outcome::Success);
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(budget.in_flight(), 3, "round {round}");
        assert_eq!(budget.available_permits(), 1, "round {round}");
    }
}

/// Ports `LifoBlockingLimiterTest.fixedTimeoutExposedWhenConfigured`.
#[test]
fn lifo_fixed_timeout_exposed_when_configured() {
    let budget = Budget::new(
        "netflix",
        BudgetConfig::new(4).max_queued(10).permit_timeout(ms(250)),
    )
    .unwrap();
    assert_eq!(budget.permit_timeout(), Some(ms(250)));
    assert_eq!(budget.max_queued(), Some(10));
}

// ---------------------------------------------------------------------------------------------
// BlockingLimiterTest and LifoBlockingLimiterTest on a budget with classes (a partitioned
// limiter that blocks): the same properties through the class queue.
// ---------------------------------------------------------------------------------------------

fn settable_classes(limit: &SettableLimit, config: BudgetConfig) -> Budget {
    let classes = Classes::new().class("live", 7).class("batch", 3);
    settable(limit, config.classes(classes))
}

/// Ports `BlockingLimiterTest.test` to a budget with classes: 10 held across two classes, the
/// limit set to 1, all released: one permit is free, and only one.
#[tokio::test(start_paused = true)]
async fn partition_blocking_shrink_then_release_all() {
    let limit = SettableLimit::starting_at(10);
    let budget = settable_classes(&limit, BudgetConfig::new(1_000));
    let mut held = Vec::new();
    for i in 0..10 {
        let class = if i % 2 == 0 { "live" } else { "batch" };
        held.push(budget.acquire_owned_in(class).await.unwrap());
    }
    limit.set_limit(1);
    for p in held {
        p.report(Outcome::Success);
    }
    let one = timeout(ms(1_000), budget.acquire_in("batch"))
        .await
        .expect("no permit after every holder released")
        .unwrap();
    assert_eq!(budget.limit(), 1);
    assert!(
        budget.try_acquire_in("live").is_err(),
        "two permits under a limit of 1"
    );
    drop(one);
}

/// Ports `LifoBlockingLimiterTest.adaptWhenLimitIncreases` (the raise with a sample) to a
/// budget with classes: waiters of both classes get in as soon as the limit grows.
#[tokio::test(start_paused = true)]
async fn partition_adapt_when_limit_increases_on_a_sample() {
    let limit = SettableLimit::starting_at(4);
    let budget = settable_classes(&limit, BudgetConfig::new(1_000).max_queued(10));
    let mut held = acquire_n(&budget, 4).await;
    let waiters: Vec<_> = ["live", "batch"]
        .into_iter()
        .map(|class| {
            let budget = budget.clone();
            tokio::spawn(async move { budget.acquire_owned_in(class).await })
        })
        .collect();
    settle().await;
    limit.set_limit(6);
    held.pop().unwrap().report(Outcome::Success);
    settle().await;
    assert_eq!(budget.in_flight(), 5);
    for w in waiters {
        assert!(w.is_finished());
        drop(w.await.unwrap().unwrap());
    }
}

/// Ports `LifoBlockingLimiterTest.timeoutAcquireRaceCondition` to a budget with classes.
#[tokio::test(start_paused = true)]
async fn partition_timeout_acquire_race_condition() {
    timeout_race_classes(Duration::from_millis(10)).await;
}

/// `timeoutAcquireRaceCondition` with classes, on real time and two worker threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_timeout_acquire_race_condition_threads() {
    for _ in 0..5 {
        timeout_race_classes(Duration::from_millis(10)).await;
    }
}

async fn timeout_race_classes(wait: Duration) {
    let limit = SettableLimit::starting_at(4);
    let budget = settable_classes(
        &limit,
        BudgetConfig::new(1_000)
            .max_queued(1_000)
            .permit_timeout(wait),
    );
    let _three = acquire_n(&budget, 3).await;
    for round in 0..10 {
        let first_timeout = Arc::new(AtomicBool::new(false));
        let one = Arc::new(Mutex::new(Some(budget.acquire_owned().await.unwrap())));
        let tasks: Vec<_> = (0..10)
            .map(|i| {
                let (budget, first_timeout, one) =
                    (budget.clone(), first_timeout.clone(), one.clone());
                let class = if i % 2 == 0 { "live" } else { "batch" };
                tokio::spawn(async move {
                    match budget.acquire_in(class).await {
                        Ok(p) => p.report(Outcome::Success),
                        Err(_) => {
                            if !first_timeout.swap(true, SeqCst) {
                                let p = one.lock().unwrap().take();
                                if let Some(p) = p {
                                    p.report(Outcome::Success);
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(budget.in_flight(), 3, "round {round}");
        assert_eq!(budget.available_permits(), 1, "round {round}");
        let s = budget.snapshot();
        assert_eq!(s.waiting, 0, "round {round}");
        for c in &s.classes {
            assert_eq!(c.waiting, 0, "round {round}, class {}", c.name);
        }
    }
}
