//! Random interleavings of acquire, cancel and release on a multi-thread runtime, with fixed and
//! adaptive limits, rate limits, call timeouts, priority classes (weighted or strict, with their
//! own deadlines and evictions from a full queue) and pauses from a dependency's retry-after: the
//! limit holds, no permit is lost, no permit is granted inside a pause, every acquire is counted
//! exactly once (in its class too), and so is every call that got its permit (by what it
//! returned, and by its verdict).

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inflight::limit::{Adaptive, Algorithm, Outcome, Verdict};
use inflight::{Budget, BudgetConfig, Classes, Rate};
use proptest::prelude::*;
use tokio::time::Instant;

#[derive(Debug, Clone)]
struct Op {
    /// Microseconds to wait before asking for a permit.
    start_us: u64,
    /// Microseconds to hold the permit.
    hold_us: u64,
    /// Abort the task this many microseconds after spawning it.
    abort_after_us: Option<u64>,
    /// Use `call` rather than `acquire_owned`.
    via_call: bool,
    /// Report the call as an overload (else a success).
    overload: bool,
    /// With the overload, a retry-after of this many microseconds: the budget pauses.
    pause_us: Option<u64>,
    /// The class asked for, from [`CLASS_NAMES`] (the last is no class of any budget).
    class: usize,
    /// Use `try_acquire_owned_in` rather than waiting.
    try_only: bool,
}

/// The classes a budget may have, and a name none has.
const CLASS_NAMES: [&str; 4] = ["interactive", "normal", "batch", "unknown"];

fn op() -> impl Strategy<Value = Op> {
    (
        0..300u64,
        0..400u64,
        prop::option::weighted(0.3, 0..600u64),
        any::<bool>(),
        prop::bool::weighted(0.2),
        prop::option::weighted(0.5, 20..300u64),
        0..CLASS_NAMES.len(),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(start_us, hold_us, abort_after_us, via_call, overload, pause_us, class, try_only)| {
                Op {
                    start_us,
                    hold_us,
                    abort_after_us,
                    via_call,
                    overload,
                    pause_us,
                    class,
                    try_only,
                }
            },
        )
}

/// One to three of the classes, weights 1 to 5, weighted or strict, perhaps a deadline of
/// their own for the first.
fn classes() -> impl Strategy<Value = Classes> {
    (
        1..=3usize,
        prop::collection::vec(1..=5u32, 3),
        any::<bool>(),
        prop::option::of(30..400u64),
    )
        .prop_map(|(n, weights, strict, timeout_us)| {
            let mut c = Classes::new().strict(strict);
            for (name, weight) in CLASS_NAMES[..n].iter().zip(weights) {
                c = c.class(name, weight);
            }
            if let Some(t) = timeout_us {
                c = c.class_permit_timeout(CLASS_NAMES[0], Duration::from_micros(t));
            }
            c
        })
}

fn config() -> impl Strategy<Value = BudgetConfig> {
    (
        1..5usize,
        prop::option::of(0..6usize),
        prop::option::of(50..500u64),
        prop::option::of(prop::sample::select(vec![
            Algorithm::Aimd,
            Algorithm::Vegas,
        ])),
        // A rate of 2,000 to 20,000 calls a second, with a burst of 1 to 3: slow enough next to
        // the permit timeouts above that some turns come too late.
        prop::option::of((2_000..20_000u32, 1..4u32)),
        prop::option::of(50..400u64),
        prop::option::weighted(0.6, classes()),
    )
        .prop_map(
            |(max, queued, timeout_us, algorithm, rate, call_timeout_us, classes)| {
                let mut c = BudgetConfig::new(max);
                if let Some(classes) = classes {
                    c = c.classes(classes);
                }
                if let Some((per_second, burst)) = rate {
                    c = c.rate(Rate::per_second(f64::from(per_second))).burst(burst);
                }
                if let Some(t) = call_timeout_us {
                    c = c.call_timeout(Duration::from_micros(t));
                }
                if let Some(a) = algorithm {
                    c = c.adaptive(Adaptive::new(a).initial(max.min(2)));
                }
                if let Some(q) = queued {
                    c = c.max_queued(q);
                }
                if let Some(t) = timeout_us {
                    c = c.permit_timeout(Duration::from_micros(t));
                }
                c
            },
        )
}

/// Ops spread over a few milliseconds, beyond tokio's timer tick, with pauses of 1 to 3 ms,
/// so that callers arrive while pauses are in force.
fn spread_op() -> impl Strategy<Value = Op> {
    (op(), 0..6_000u64, 0..2_000u64, 1_000..3_000u64).prop_map(
        |(op, start_us, hold_us, pause_us)| Op {
            start_us,
            hold_us,
            pause_us: Some(pause_us),
            ..op
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn limit_holds_and_nothing_is_lost(config in config(), ops in prop::collection::vec(op(), 1..40)) {
        model(config, ops)?;
    }

    #[test]
    fn no_permit_is_granted_inside_a_pause(
        max in 1..5usize,
        timeout_us in prop::option::of(500..5_000u64),
        ops in prop::collection::vec(spread_op(), 1..40),
        classes in prop::option::of(classes()),
    ) {
        let mut config = BudgetConfig::new(max);
        if let Some(classes) = classes {
            config = config.classes(classes);
        }
        if let Some(t) = timeout_us {
            config = config.permit_timeout(Duration::from_micros(t));
        }
        model(config, ops)?;
    }
}

fn model(config: BudgetConfig, ops: Vec<Op>) -> Result<(), TestCaseError> {
    {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let max = config.max_concurrent();
        let max_queued = config.max_queued_limit();
        let budget = Budget::new("prop", config).unwrap();
        // The class each name lands in (the default class for a name the budget lacks).
        let class_of = |name: &str| {
            budget
                .classes()
                .and_then(|c| c.index_of(name).or_else(|| c.default_index()))
        };
        let class_attempts: Arc<Vec<AtomicUsize>> = Arc::new(
            (0..CLASS_NAMES.len())
                .map(|_| AtomicUsize::new(0))
                .collect(),
        );
        let holders = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let attempts = Arc::new(AtomicUsize::new(0));
        let calls = Arc::new(AtomicUsize::new(0));
        // (set by then, in force at least until): each pause, bracketed from outside.
        let pauses: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
        // (asked at, held by): each grant, bracketed from outside.
        let grants: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();

        rt.block_on(async {
            let mut handles = Vec::new();
            for op in ops {
                let (budget, holders, most, attempts, calls) = (
                    budget.clone(),
                    holders.clone(),
                    most.clone(),
                    attempts.clone(),
                    calls.clone(),
                );
                let (pauses, grants) = (pauses.clone(), grants.clone());
                let name = CLASS_NAMES[op.class];
                let class = class_of(name);
                let class_attempts = class_attempts.clone();
                let task = tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_micros(op.start_us)).await;
                    attempts.fetch_add(1, SeqCst);
                    if let Some(c) = class {
                        class_attempts[c].fetch_add(1, SeqCst);
                    }
                    let hold = || {
                        let (holders, most) = (holders.clone(), most.clone());
                        async move {
                            let now = holders.fetch_add(1, SeqCst) + 1;
                            most.fetch_max(now, SeqCst);
                            struct Leave(Arc<AtomicUsize>);
                            impl Drop for Leave {
                                fn drop(&mut self) {
                                    self.0.fetch_sub(1, SeqCst);
                                }
                            }
                            let _leave = Leave(holders);
                            tokio::time::sleep(Duration::from_micros(op.hold_us)).await;
                            Ok::<_, ()>(())
                        }
                    };
                    let pause = op
                        .pause_us
                        .filter(|_| op.overload)
                        .map(Duration::from_micros);
                    let verdict = match (op.overload, pause) {
                        (true, Some(d)) => Outcome::Overload.with_retry_after(d),
                        (true, None) => Outcome::Overload.into(),
                        (false, _) => Verdict::from(Outcome::Success),
                    };
                    let asked = Instant::now();
                    if op.try_only {
                        if let Ok(permit) = budget.try_acquire_owned_in(name) {
                            grants.lock().unwrap().push((asked, Instant::now()));
                            let _ = hold().await;
                            drop(permit);
                        }
                    } else if op.via_call {
                        let call = || {
                            grants.lock().unwrap().push((asked, Instant::now()));
                            calls.fetch_add(1, SeqCst);
                            hold()
                        };
                        let before = Instant::now();
                        // Only a call that returned was classified, and so paused the budget.
                        let returned = budget.call_with_in(name, |_| verdict, call).await.is_ok();
                        if let Some(d) = pause.filter(|_| returned) {
                            pauses.lock().unwrap().push((Instant::now(), before + d));
                        }
                    } else if let Ok(permit) = budget.acquire_owned_in(name).await {
                        grants.lock().unwrap().push((asked, Instant::now()));
                        let _ = hold().await;
                        let before = Instant::now();
                        permit.report(verdict);
                        if let Some(d) = pause {
                            pauses.lock().unwrap().push((Instant::now(), before + d));
                        }
                    }
                });
                handles.push((task, op.abort_after_us));
            }
            let mut joins = Vec::new();
            for (task, abort_after) in handles {
                joins.push(tokio::spawn(async move {
                    if let Some(us) = abort_after {
                        tokio::time::sleep(Duration::from_micros(us)).await;
                        task.abort();
                    }
                    let _ = task.await;
                }));
            }
            for j in joins {
                j.await.unwrap();
            }
        });

        let s = budget.snapshot();
        prop_assert!(
            most.load(SeqCst) <= max,
            "{} holders at once, limit {}",
            most.load(SeqCst),
            max
        );
        prop_assert!(s.peak_in_flight <= max);
        if let Some(q) = max_queued {
            prop_assert!(
                s.peak_waiting <= q,
                "{} waiting at once, max_queued {}",
                s.peak_waiting,
                q
            );
        }
        prop_assert_eq!(holders.load(SeqCst), 0);
        prop_assert_eq!(s.in_flight, 0);
        prop_assert_eq!(s.waiting, 0);
        prop_assert_eq!(
            budget.available_permits(),
            budget.limit(),
            "a permit was lost"
        );
        prop_assert!((1..=max).contains(&budget.limit()));
        // A caller that asked once a pause was set, and held its permit before the pause
        // could have ended, was granted inside it.
        for (asked, held) in grants.lock().unwrap().iter() {
            for (set, until) in pauses.lock().unwrap().iter() {
                prop_assert!(
                    !(asked >= set && held < until),
                    "granted inside a pause: asked {:?} after it was set, held {:?} before its end",
                    *asked - *set,
                    *until - *held
                );
            }
        }
        prop_assert_eq!(
            s.outcomes_success
                + s.outcomes_overload
                + s.outcomes_ignored
                + s.outcomes_error
                + s.outcomes_timeout
                + s.calls_cancelled,
            calls.load(SeqCst) as u64,
            "every call that got its permit has exactly one verdict: {:?}",
            s
        );
        prop_assert_eq!(
            s.admitted
                + s.rejected
                + s.permit_timeouts
                + s.rate_limited
                + s.paused
                + s.evicted
                + s.cancelled,
            attempts.load(SeqCst) as u64,
            "every acquire ends in exactly one outcome: {:?}",
            s
        );
        for (i, c) in s.classes.iter().enumerate() {
            prop_assert_eq!(
                c.admitted
                    + c.rejected
                    + c.permit_timeouts
                    + c.rate_limited
                    + c.paused
                    + c.evicted
                    + c.cancelled
                    + c.unavailable,
                class_attempts[i].load(SeqCst) as u64,
                "every acquire in class {} ends in exactly one outcome: {:?}",
                &c.name,
                c
            );
            prop_assert_eq!((c.in_flight, c.waiting), (0, 0), "{:?}", c);
        }
        if s.classes.is_empty() {
            prop_assert_eq!(s.evicted, 0);
        }
        prop_assert_eq!(
            s.calls_ok + s.calls_error + s.call_timeouts + s.calls_cancelled,
            calls.load(SeqCst) as u64,
            "every call that got its permit ends in exactly one outcome: {:?}",
            s
        );
    }
    Ok(())
}
