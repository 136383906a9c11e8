//! Random interleavings of acquire, cancel and release on a multi-thread runtime, with fixed and
//! adaptive limits, rate limits and call timeouts: the limit holds, no permit is lost, every
//! acquire is counted exactly once, and so is every call that got its permit.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use inflight::limit::{Adaptive, Algorithm, Outcome};
use inflight::{Budget, BudgetConfig, Rate};
use proptest::prelude::*;

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
}

fn op() -> impl Strategy<Value = Op> {
    (
        0..300u64,
        0..400u64,
        prop::option::weighted(0.3, 0..600u64),
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(start_us, hold_us, abort_after_us, via_call, overload)| Op {
                start_us,
                hold_us,
                abort_after_us,
                via_call,
                overload,
            },
        )
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
    )
        .prop_map(
            |(max, queued, timeout_us, algorithm, rate, call_timeout_us)| {
                let mut c = BudgetConfig::new(max);
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn limit_holds_and_nothing_is_lost(config in config(), ops in prop::collection::vec(op(), 1..40)) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let max = config.max_concurrent();
        let max_queued = config.max_queued_limit();
        let budget = Budget::new("prop", config).unwrap();
        let holders = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let attempts = Arc::new(AtomicUsize::new(0));
        let calls = Arc::new(AtomicUsize::new(0));

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
                let task = tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_micros(op.start_us)).await;
                    attempts.fetch_add(1, SeqCst);
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
                    let outcome = if op.overload { Outcome::Overload } else { Outcome::Success };
                    if op.via_call {
                        let call = || {
                            calls.fetch_add(1, SeqCst);
                            hold()
                        };
                        let _ = budget.call_with(|_| outcome, call).await;
                    } else if let Ok(permit) = budget.acquire_owned().await {
                        let _ = hold().await;
                        permit.report(outcome);
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
        prop_assert!(most.load(SeqCst) <= max, "{} holders at once, limit {}", most.load(SeqCst), max);
        prop_assert!(s.peak_in_flight <= max);
        if let Some(q) = max_queued {
            prop_assert!(s.peak_waiting <= q, "{} waiting at once, max_queued {}", s.peak_waiting, q);
        }
        prop_assert_eq!(holders.load(SeqCst), 0);
        prop_assert_eq!(s.in_flight, 0);
        prop_assert_eq!(s.waiting, 0);
        prop_assert_eq!(budget.available_permits(), budget.limit(), "a permit was lost");
        prop_assert!((1..=max).contains(&budget.limit()));
        prop_assert_eq!(
            s.admitted + s.rejected + s.permit_timeouts + s.rate_limited + s.cancelled,
            attempts.load(SeqCst) as u64,
            "every acquire ends in exactly one outcome: {:?}", s
        );
        prop_assert_eq!(
            s.calls_ok + s.calls_error + s.call_timeouts + s.calls_cancelled,
            calls.load(SeqCst) as u64,
            "every call that got its permit ends in exactly one outcome: {:?}", s
        );
    }
}
