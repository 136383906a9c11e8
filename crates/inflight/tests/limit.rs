//! The limit seam on paused tokio time: a limit that learns resizes the budget at once, growing
//! admits waiters, shrinking never takes a held permit, samples carry latency, in-flight counts
//! and outcomes.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use inflight::limit::{Fixed, Limit, Outcome, Sample};
use inflight::{Budget, BudgetConfig, CallError};
use support::{ms, settle};
use tokio::time::sleep;

/// A limit driven by the test: it records every sample and takes its next value from a script.
#[derive(Debug, Clone)]
struct Scripted {
    state: Arc<Mutex<State>>,
    max: usize,
}

#[derive(Debug, Default)]
struct State {
    now: usize,
    next: Vec<usize>,
    samples: Vec<Sample>,
}

impl Scripted {
    fn new(initial: usize, max: usize) -> Scripted {
        Scripted {
            state: Arc::new(Mutex::new(State {
                now: initial,
                ..State::default()
            })),
            max,
        }
    }

    /// The values the limit takes after the next samples, in order.
    fn then(&self, values: &[usize]) {
        let mut s = self.state.lock().unwrap();
        s.next = values.iter().rev().copied().collect();
    }

    fn samples(&self) -> Vec<Sample> {
        self.state.lock().unwrap().samples.clone()
    }
}

impl Limit for Scripted {
    fn current(&self) -> usize {
        self.state.lock().unwrap().now
    }

    fn max(&self) -> usize {
        self.max
    }

    fn on_sample(&mut self, sample: &Sample) {
        let mut s = self.state.lock().unwrap();
        s.samples.push(*sample);
        if let Some(next) = s.next.pop() {
            s.now = next;
        }
    }
}

fn scripted(initial: usize, max: usize) -> (Budget, Scripted) {
    let limit = Scripted::new(initial, max);
    let budget = Budget::builder("learning")
        .limit(limit.clone())
        .build()
        .unwrap();
    (budget, limit)
}

#[tokio::test(start_paused = true)]
async fn growing_admits_waiters_at_once() {
    let (b, limit) = scripted(1, 8);
    assert_eq!(b.limit(), 1);
    assert_eq!(b.snapshot().max_concurrent, 8);
    let first = b.acquire_owned().await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let b = b.clone();
        waiters.push(tokio::spawn(async move {
            let p = b.acquire_owned().await.unwrap();
            sleep(ms(100)).await;
            drop(p);
        }));
    }
    settle().await;
    assert_eq!(b.snapshot().waiting, 3);
    limit.then(&[4]);
    first.report(Outcome::Success);
    settle().await;
    assert_eq!(b.limit(), 4);
    assert_eq!(b.snapshot().waiting, 0, "all three admitted on the grow");
    assert_eq!(b.in_flight(), 3);
    for w in waiters {
        w.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn shrinking_never_takes_a_held_permit() {
    let (b, limit) = scripted(4, 8);
    let held: Vec<_> = futures::future::join_all((0..4).map(|_| b.acquire_owned()))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    limit.then(&[1, 1, 1, 1]);
    let mut held = held.into_iter();
    held.next().unwrap().report(Outcome::Overload);
    assert_eq!(b.limit(), 1);
    assert_eq!(b.in_flight(), 3, "the other three keep their permits");
    assert!(
        b.try_acquire().is_err(),
        "three in flight against a limit of one"
    );
    drop(held.next());
    drop(held.next());
    assert!(b.try_acquire().is_err(), "one still in flight");
    drop(held.next());
    assert_eq!(b.in_flight(), 0);
    let p = b.try_acquire().unwrap();
    assert!(b.try_acquire().is_err(), "the limit is one");
    drop(p);
    assert_eq!(b.snapshot().limit, 1);
    assert!(b.snapshot().peak_in_flight <= 4);
}

#[tokio::test(start_paused = true)]
async fn samples_carry_latency_in_flight_and_outcome() {
    let (b, limit) = scripted(4, 4);
    let a = b.acquire().await.unwrap();
    let c = b.acquire().await.unwrap();
    sleep(ms(30)).await;
    c.report(Outcome::Overload);
    sleep(ms(20)).await;
    drop(a);
    let r = b
        .call(|| async {
            sleep(ms(70)).await;
            Ok::<_, ()>(())
        })
        .await;
    assert!(r.is_ok());
    let r = b.call(|| async { Err::<(), _>("503") }).await;
    assert!(matches!(r, Err(CallError::Inner("503"))));
    let samples = limit.samples();
    let seen: Vec<_> = samples
        .iter()
        .map(|s| (s.latency, s.in_flight, s.outcome))
        .collect();
    assert_eq!(
        seen,
        [
            (ms(30), 2, Outcome::Overload),
            (ms(50), 1, Outcome::Ignore),
            (ms(70), 1, Outcome::Success),
            (ms(0), 1, Outcome::Overload),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_timeout_is_an_overload_and_a_cancelled_call_is_ignored() {
    let limit = Scripted::new(2, 2);
    let b = Budget::builder("learning")
        .limit(limit.clone())
        .call_timeout(ms(50))
        .build()
        .unwrap();
    let r = b
        .call(|| async {
            sleep(ms(500)).await;
            Ok::<_, ()>(())
        })
        .await;
    assert!(matches!(r, Err(CallError::Timeout)));
    let cancelled = tokio::time::timeout(
        ms(10),
        b.call(|| async {
            sleep(ms(500)).await;
            Ok::<_, ()>(())
        }),
    )
    .await;
    assert!(cancelled.is_err());
    let outcomes: Vec<_> = limit.samples().iter().map(|s| s.outcome).collect();
    assert_eq!(outcomes, [Outcome::Overload, Outcome::Ignore]);
    assert_eq!(b.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_limit_is_clamped_to_one_and_its_max() {
    let (b, limit) = scripted(3, 5);
    limit.then(&[0, 50]);
    drop(b.acquire().await.unwrap());
    assert_eq!(b.limit(), 1, "never below one");
    drop(b.acquire().await.unwrap());
    assert_eq!(b.limit(), 5, "never above max");
}

#[test]
fn a_fixed_limit_is_the_default_and_a_builder_may_name_it() {
    let b = Budget::builder("fixed")
        .limit(Fixed::new(3))
        .build()
        .unwrap();
    assert_eq!(b.limit(), 3);
    assert_eq!(b.config().max_concurrent(), 3);
    let b = Budget::new("fixed", BudgetConfig::new(6)).unwrap();
    assert_eq!(b.limit(), 6);
    let err = Budget::builder("x")
        .max_concurrent(4)
        .limit(Fixed::new(3))
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "max_concurrent");
    let err = Budget::builder("x")
        .limit(Fixed::new(0))
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "max_concurrent");
}

#[tokio::test(start_paused = true)]
async fn a_permit_knows_when_it_was_granted_after_a_wait() {
    let b = Budget::new("fixed", BudgetConfig::new(1)).unwrap();
    let first = b.acquire().await.unwrap();
    assert_eq!(
        first.granted_at(),
        None,
        "the fixed fast path reads no clock"
    );
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let p = b.acquire_owned().await.unwrap();
            p.granted_at()
        })
    };
    settle().await;
    let released = tokio::time::Instant::now() + Duration::from_millis(40);
    sleep(ms(40)).await;
    drop(first);
    assert_eq!(waiter.await.unwrap(), Some(released));
}
