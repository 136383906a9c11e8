//! Back-pressure on paused time: a dependency's retry-after pauses a budget (refusing at once
//! only the callers whose deadline falls inside the pause, granting the others when it ends,
//! never touching held permits); `AcquireError::retry_after`; outcomes counted as classified;
//! retries within a retry budget and the caller's deadline.

mod support;

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inflight::limit::{Outcome, Verdict};
use inflight::retry::RetryStop;
use inflight::{
    AcquireError, Budget, BudgetConfig, CallError, Rate, Retry, RetryBudget, TryAcquireError,
};
use support::{budget, ms, settle};
use tokio::time::{sleep, Instant};

/// Spawns an `acquire_owned` at `at` after `t0` that holds its permit for `hold`; returns the
/// time (after `t0`) it was answered and how.
fn waiter(
    b: &Budget,
    t0: Instant,
    at: Duration,
    hold: Duration,
) -> tokio::task::JoinHandle<(Duration, Result<(), AcquireError>)> {
    let b = b.clone();
    tokio::spawn(async move {
        tokio::time::sleep_until(t0 + at).await;
        let r = b.acquire_owned().await;
        let answered = t0.elapsed();
        if let Ok(p) = r {
            sleep(hold).await;
            drop(p);
            return (answered, Ok(()));
        }
        (answered, r.map(drop))
    })
}

#[tokio::test(start_paused = true)]
async fn a_pause_refuses_only_the_waiters_whose_deadline_falls_inside_it_and_grants_the_others_when_it_ends(
) {
    let b = budget(BudgetConfig::new(2).permit_timeout(ms(1000)));
    let t0 = Instant::now();
    let first = b.acquire_owned().await.unwrap();
    let second = b.acquire_owned().await.unwrap();
    // Queued before the pause: deadlines 1000 ms and 1600 ms.
    let early = waiter(&b, t0, ms(0), ms(10));
    let late = waiter(&b, t0, ms(600), ms(1000));
    sleep(ms(700)).await;
    // The dependency answers 429, retry after 500 ms: paused until 1200 ms.
    first.report(Outcome::Overload.with_retry_after(ms(500)));
    settle().await;
    assert_eq!(
        b.in_flight(),
        2,
        "the late waiter holds the freed permit through the pause"
    );
    // Arriving during the pause: deadline 1800 ms, queued behind the pause and the permits.
    let newcomer = waiter(&b, t0, ms(800), ms(10));
    sleep(ms(200)).await;
    assert_eq!(b.try_acquire().unwrap_err(), TryAcquireError::Paused);

    let (at, r) = early.await.unwrap();
    assert_eq!(
        at,
        ms(700),
        "refused as the pause began, not after sleeping through it"
    );
    assert_eq!(
        r.unwrap_err(),
        AcquireError::Paused {
            retry_after: ms(500)
        }
    );

    // The held permit is untouched: still held, and reports as usual.
    assert_eq!(b.in_flight(), 2);
    sleep(ms(400)).await; // 1300 ms: the late waiter was granted at 1200 ms and holds 1000 ms
    drop(second);
    let (at, r) = newcomer.await.unwrap();
    assert_eq!(
        (at, r),
        (ms(1700), Ok(())),
        "a permit came back at 1300 ms; granted at the pace's next slot, one retry-after on"
    );
    let (at, r) = late.await.unwrap();
    assert_eq!((at, r), (ms(1200), Ok(())), "granted when the pause ended");

    let s = b.snapshot();
    assert_eq!((s.paused, s.pauses, s.admitted), (2, 1, 4));
    assert_eq!(s.permit_timeouts, 0);
}

#[tokio::test(start_paused = true)]
async fn a_caller_arriving_with_a_deadline_inside_the_pause_is_refused_before_it_queues_and_a_longer_one_waits(
) {
    let b = budget(BudgetConfig::new(4).permit_timeout(ms(300)));
    b.acquire()
        .await
        .unwrap()
        .report(Outcome::Overload.with_retry_after(ms(1000)));
    let t0 = Instant::now();
    let err = b.acquire().await.unwrap_err();
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(err.retry_after(), Some(ms(1000)));
    assert_eq!(b.snapshot().waiting, 0);
    sleep(ms(800)).await;
    // 200 ms left, within a 300 ms deadline: waits them out, though every permit is free.
    let t1 = Instant::now();
    let p = b.acquire().await.unwrap();
    assert_eq!(t1.elapsed(), ms(200));
    drop(p);
    // Over, and paced: one call per retry-after (the dependency's word) from the pause's end.
    assert_eq!(b.try_acquire().unwrap_err(), TryAcquireError::Paused);
    sleep(ms(1000)).await;
    drop(b.try_acquire().unwrap());
    // Still paced at 12 s: one call, not two, back to back.
    sleep(ms(10_000)).await;
    let one = b.try_acquire().unwrap();
    assert_eq!(b.try_acquire().unwrap_err(), TryAcquireError::Paused);
    drop(one);
    // Nothing refused for twenty intervals of the pace (20 s here; never under 10 s): the pace
    // lapses, and the fast path is back.
    sleep(ms(8_000)).await;
    let all: Vec<_> = (0..4).map(|_| b.try_acquire().unwrap()).collect();
    assert_eq!(all.len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_pause_moved_past_a_sleeping_waiters_deadline_refuses_it_at_once() {
    let b = budget(BudgetConfig::new(3).permit_timeout(ms(1000)));
    let first = b.acquire_owned().await.unwrap();
    let second = b.acquire_owned().await.unwrap();
    first.report(Outcome::Overload.with_retry_after(ms(500)));
    let t0 = Instant::now();
    // A permit is free: the sleeper takes it and sleeps through the pause (until 500 ms).
    let sleeper = waiter(&b, t0, ms(0), ms(0));
    sleep(ms(100)).await;
    assert_eq!(b.in_flight(), 2);
    // A call in flight since before the pause says 2 s: the pause now ends at 2100 ms.
    second.report(Outcome::Overload.with_retry_after(ms(2000)));
    let (at, r) = sleeper.await.unwrap();
    assert_eq!(
        at,
        ms(100),
        "refused when the pause moved, not at its deadline"
    );
    assert_eq!(
        r.unwrap_err(),
        AcquireError::Paused {
            retry_after: ms(2000)
        }
    );
    assert_eq!(b.in_flight(), 0, "the sleeper's permit went back");
    assert!(b.acquire().await.unwrap_err().is_paused());
    assert_eq!(b.snapshot().pauses, 2);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_on_a_success_or_an_ignore_does_not_pause() {
    let b = budget(BudgetConfig::new(1).permit_timeout(ms(10)));
    b.acquire()
        .await
        .unwrap()
        .report(Outcome::Success.with_retry_after(ms(500)));
    b.acquire()
        .await
        .unwrap()
        .report(Outcome::Ignore.with_retry_after(ms(500)));
    assert!(b.acquire().await.is_ok());
    assert_eq!(b.snapshot().pauses, 0);
}

#[tokio::test(start_paused = true)]
async fn retry_after_of_refusals_rate_limited_queue_full_and_none() {
    let b = budget(
        BudgetConfig::new(8)
            .rate(Rate::per_second(2.0))
            .permit_timeout(ms(100)),
    );
    drop(b.acquire().await.unwrap());
    let err = b.acquire().await.unwrap_err();
    assert_eq!(
        err,
        AcquireError::RateLimited {
            retry_after: ms(500)
        },
        "the next slot"
    );

    let b = budget(BudgetConfig::new(1).max_queued(0).permit_timeout(ms(100)));
    let held = b.acquire().await.unwrap();
    assert_eq!(
        b.acquire().await.unwrap_err().retry_after(),
        None,
        "nothing measured"
    );
    drop(held);
    b.call(|| async {
        sleep(ms(40)).await;
        Ok::<_, std::io::Error>(())
    })
    .await
    .unwrap();
    let held = b.acquire().await.unwrap();
    // Nobody ahead, one permit, 40 ms a call: a place frees in about 40 ms.
    assert_eq!(b.acquire().await.unwrap_err().retry_after(), Some(ms(40)));
    held.report(Outcome::Overload.with_retry_after(ms(90)));
    assert_eq!(b.try_acquire().unwrap_err(), TryAcquireError::Paused);

    let slow = budget(BudgetConfig::new(1).permit_timeout(ms(50)));
    let _held = slow.acquire().await.unwrap();
    assert_eq!(
        slow.acquire().await.unwrap_err().retry_after(),
        None,
        "a permit timeout"
    );
}

#[tokio::test(start_paused = true)]
async fn outcomes_are_counted_as_classified_and_calls_as_returned() {
    let b = budget(BudgetConfig::new(4).call_timeout(ms(100)));
    let by_status = |r: &Result<u16, std::io::Error>| match r {
        Ok(503) => Outcome::Overload.into(),
        Ok(404) => Outcome::Ignore.into(),
        Ok(_) => Outcome::Success.into(),
        Err(_) => Verdict::failure(),
    };
    for status in [200, 503, 503, 404] {
        b.call_with(by_status, || async move { Ok(status) })
            .await
            .unwrap();
    }
    let failed = b
        .call_with(by_status, || async { Err(std::io::Error::other("reset")) })
        .await;
    assert!(matches!(failed, Err(CallError::Inner(_))));
    // Budget::call: an Err is a failure, counted as an error.
    b.call(|| async { Err::<(), _>(std::io::Error::other("refused")) })
        .await
        .unwrap_err();
    // An Err the classifier calls an overload is an overload, not an error.
    b.call_with(
        |_: &Result<(), std::io::Error>| Outcome::Overload,
        || async { Err(std::io::Error::other("busy")) },
    )
    .await
    .unwrap_err();
    let timed_out = b
        .call(|| async {
            sleep(ms(500)).await;
            Ok::<_, std::io::Error>(())
        })
        .await;
    assert!(timed_out.unwrap_err().is_timeout());

    let s = b.snapshot();
    // As returned: an Ok(503) classified as an overload is still calls_ok.
    assert_eq!((s.calls_ok, s.calls_error, s.call_timeouts), (4, 3, 1));
    // As classified.
    assert_eq!(
        (
            s.outcomes_success,
            s.outcomes_overload,
            s.outcomes_ignored,
            s.outcomes_error,
            s.outcomes_timeout
        ),
        (1, 3, 1, 2, 1)
    );
}

/// A dependency that answers 503 with a retry-after for its first `failures` calls, then 200;
/// counts the calls it saw and when.
#[derive(Clone, Default)]
struct Flaky {
    seen: Arc<Mutex<Vec<Instant>>>,
}

impl Flaky {
    async fn answer(&self, failures: usize) -> Result<u16, std::io::Error> {
        let mut seen = self.seen.lock().unwrap();
        seen.push(Instant::now());
        Ok(if seen.len() <= failures { 503 } else { 200 })
    }

    fn calls(&self) -> Vec<Instant> {
        self.seen.lock().unwrap().clone()
    }
}

fn with_hint(hint: Option<Duration>) -> impl FnMut(&Result<u16, std::io::Error>) -> Verdict {
    move |r| match (r, hint) {
        (Ok(503), Some(h)) => Outcome::Overload.with_retry_after(h),
        (Ok(503), None) => Outcome::Overload.into(),
        (Ok(_), _) => Outcome::Success.into(),
        (Err(_), _) => Verdict::failure(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_waits_for_the_dependencys_retry_after_and_succeeds() {
    let b = budget(BudgetConfig::new(2).permit_timeout(ms(5000)));
    let retry = Retry::new(RetryBudget::default()).max_attempts(4);
    let dep = Flaky::default();
    let t0 = Instant::now();
    let status = b
        .call_with_retry(&retry, with_hint(Some(ms(700))), || dep.answer(2))
        .await
        .unwrap();
    assert_eq!(status, 200);
    let at: Vec<_> = dep.calls().iter().map(|t| *t - t0).collect();
    assert_eq!(at, [ms(0), ms(700), ms(1400)]);
    let s = b.snapshot();
    assert_eq!((s.retries, s.admitted, s.pauses), (2, 3, 2));
}

#[tokio::test(start_paused = true)]
async fn no_retry_goes_past_the_permit_deadline() {
    let b = budget(BudgetConfig::new(2).permit_timeout(ms(1000)));
    let retry = Retry::new(RetryBudget::default()).max_attempts(10);
    let dep = Flaky::default();
    let t0 = Instant::now();
    let err = b
        .call_with_retry(&retry, with_hint(Some(ms(400))), || dep.answer(usize::MAX))
        .await
        .unwrap_err();
    // Attempts at 0, 400 and 800 ms; one more would start at 1200 ms, past the deadline.
    let at: Vec<_> = dep.calls().iter().map(|t| *t - t0).collect();
    assert_eq!(at, [ms(0), ms(400), ms(800)]);
    assert_eq!(err.stop(), RetryStop::PastDeadline { wait: ms(400) });
    assert_eq!(err.attempts(), 3);
    assert_eq!(err.retry_after(), Some(ms(400)));
    assert!(matches!(err.last(), Ok(503)), "the last answer comes back");
    assert_eq!(t0.elapsed(), ms(800), "gave up at once, without the wait");
    assert_eq!(
        err.to_string(),
        "gave up after 3 attempts (a retry after 400ms would end past the deadline): the last answer was classified as an overload"
    );
    let s = b.snapshot();
    assert_eq!((s.retries, s.retries_past_deadline), (2, 1));

    // With backoff instead of a hint, no attempt starts past the deadline either (a budget not
    // paced by the hints above).
    let b = budget(BudgetConfig::new(2).permit_timeout(ms(1000)));
    let dep = Flaky::default();
    let retry = Retry::new(RetryBudget::default())
        .max_attempts(100)
        .backoff(ms(100), ms(300))
        .within(ms(2000));
    let t0 = Instant::now();
    let err = b
        .call_with_retry(&retry, with_hint(None), || dep.answer(usize::MAX))
        .await
        .unwrap_err();
    assert!(matches!(err.stop(), RetryStop::PastDeadline { .. }));
    let last = *dep.calls().last().unwrap() - t0;
    assert!(last <= ms(2000), "{last:?}");
    assert!(dep.calls().len() >= 7, "{} attempts", dep.calls().len());
}

#[tokio::test(start_paused = true)]
async fn refusals_and_non_retryable_results_are_not_retried() {
    let b = budget(BudgetConfig::new(1).max_queued(0));
    let retry = Retry::default();
    let held = b.acquire().await.unwrap();
    let dep = Flaky::default();
    let err = b
        .call_with_retry(&retry, with_hint(None), || dep.answer(0))
        .await
        .unwrap_err();
    assert_eq!(err.stop(), RetryStop::Rejected);
    assert!(dep.calls().is_empty());
    drop(held);
    let ignored = b
        .call_with_retry(
            &retry,
            |_: &Result<u16, std::io::Error>| Outcome::Ignore,
            || async { Err(std::io::Error::other("404")) },
        )
        .await
        .unwrap_err();
    assert_eq!(
        (ignored.stop(), ignored.attempts()),
        (RetryStop::NotRetryable, 1)
    );
    let out = b
        .call_with_retry(&retry.clone().max_attempts(2), with_hint(None), || {
            dep.answer(usize::MAX)
        })
        .await
        .unwrap_err();
    assert_eq!((out.stop(), out.attempts()), (RetryStop::OutOfAttempts, 2));
    assert_eq!(b.snapshot().retries_out_of_attempts, 1);
}

#[tokio::test(start_paused = true)]
async fn the_retry_budget_never_lets_retries_exceed_its_share() {
    // 20% of calls plus 1 a second over 10 s, against a dependency that always fails.
    let b = budget(BudgetConfig::new(64));
    let retry_budget = RetryBudget::new(Duration::from_secs(10), 1, 0.2).unwrap();
    let retry = Retry::new(retry_budget)
        .max_attempts(5)
        .backoff(ms(10), ms(40));
    let attempts = Arc::new(AtomicU32::new(0));
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    // 3000 calls, one every 20 ms: 60 s of traffic.
    for _ in 0..3000 {
        let (b, retry, attempts) = (b.clone(), retry.clone(), attempts.clone());
        tasks.spawn(async move {
            b.call_with_retry(
                &retry,
                |_: &Result<(), std::io::Error>| Verdict::failure(),
                || async {
                    attempts.fetch_add(1, SeqCst);
                    Err::<(), _>(std::io::Error::other("down"))
                },
            )
            .await
            .unwrap_err()
        });
        sleep(ms(20)).await;
    }
    let mut denied = 0;
    while let Some(e) = tasks.join_next().await {
        if e.unwrap().stop() == RetryStop::Denied {
            denied += 1;
        }
    }
    let span = t0.elapsed().as_secs_f64();
    let s = b.snapshot();
    let retries = s.retries as f64;
    assert_eq!(u64::from(attempts.load(SeqCst)), 3000 + s.retries);
    // The share. Deposits and withdrawals count for 9 to 10 tenths of the ttl, so in any
    // stretch of 9 s every withdrawal made is still counted at its end, against at most 10 s of
    // deposits: over the run, 20% of the calls x 10/9, plus the floor of 10 per stretch.
    let allowed = 0.2 * 3000.0 * 10.0 / 9.0 + 10.0 * (span / 9.0 + 1.0);
    assert!(retries <= allowed, "{retries} retries, {allowed} allowed");
    // And the budget is what stopped them: without it, every call would retry 4 times.
    assert!(retries >= 0.2 * 3000.0 * 0.9, "{retries} retries");
    assert_eq!(s.retries_denied, denied);
    assert!(denied > 2000, "{denied}");
}

#[tokio::test(start_paused = true)]
async fn a_queued_waiter_is_refused_when_a_pause_begins_even_if_no_permit_frees() {
    // An adaptive limit cuts on the overload, so the permit that reported it is kept to pay
    // the cut, and nobody in the queue is handed a permit: only the pause wakes them.
    let b = Budget::new(
        "records",
        BudgetConfig::new(32)
            .adaptive(inflight::limit::Adaptive::aimd())
            .permit_timeout(ms(1000)),
    )
    .unwrap();
    let limit = b.limit();
    let mut held = Vec::new();
    for _ in 0..limit {
        held.push(b.acquire_owned().await.unwrap());
    }
    let t0 = Instant::now();
    let queued = waiter(&b, t0, ms(0), ms(0));
    sleep(ms(300)).await;
    held.pop()
        .unwrap()
        .report(Outcome::Overload.with_retry_after(ms(900)));
    assert!(b.limit() < limit, "the limit was cut");
    let (at, r) = queued.await.unwrap();
    assert_eq!(
        at,
        ms(300),
        "refused when the pause began, not at its deadline"
    );
    assert_eq!(
        r.unwrap_err(),
        AcquireError::Paused {
            retry_after: ms(900)
        }
    );
}
