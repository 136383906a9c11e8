//! Behaviour of `Budget` on paused tokio time: ordering, bounds, deadlines, cancellation, panics,
//! counters.

mod support;

use std::sync::{Arc, Mutex};

use inflight::{AcquireError, Budget, BudgetConfig, CallError, TryAcquireError};
use support::{budget, ms, settle};

/// A test run twice: against a budget without classes, and against one with a single class,
/// which must behave the same (one FIFO queue).
macro_rules! peer_test {
    (async fn $name:ident($budget:ident) $body:block) => {
        mod $name {
            use super::*;

            #[tokio::test(start_paused = true)]
            async fn plain() {
                let $budget: fn(BudgetConfig) -> Budget = support::budget;
                $body
            }

            #[tokio::test(start_paused = true)]
            async fn one_class() {
                let $budget: fn(BudgetConfig) -> Budget = support::one_class;
                $body
            }
        }
    };
}
use tokio::time::{sleep, Instant};

peer_test! {
    async fn waiters_are_served_in_arrival_order(budget) {
    let b = budget(BudgetConfig::new(1));
    let first = b.acquire_owned().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (b, order) = (b.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let _p = b.acquire().await.unwrap();
            order.lock().unwrap().push(i);
            sleep(ms(10)).await;
        }));
        // Make sure task i is queued before task i+1 starts.
        settle().await;
    }
    assert_eq!(b.snapshot().waiting, 8);
    // A newcomer that arrives now must not overtake the queue either.
    let late = {
        let (b, order) = (b.clone(), order.clone());
        tokio::spawn(async move {
            let _p = b.acquire().await.unwrap();
            order.lock().unwrap().push(99);
        })
    };
    settle().await;
    drop(first);
    for t in tasks {
        t.await.unwrap();
    }
    late.await.unwrap();
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4, 5, 6, 7, 99]);
}
}

peer_test! {
    async fn a_full_queue_rejects_at_once(budget) {
    let b = budget(BudgetConfig::new(2).max_queued(3));
    let _held = (b.acquire().await.unwrap(), b.acquire().await.unwrap());
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let b = b.clone();
        waiters.push(tokio::spawn(async move { b.acquire().await.map(|_| ()) }));
    }
    settle().await;
    let start = Instant::now();
    let err = b.acquire().await.unwrap_err();
    assert_eq!(start.elapsed(), ms(0), "rejection must not wait");
    assert!(err.is_queue_full(), "{err:?}");
    let s = b.snapshot();
    assert_eq!((s.in_flight, s.waiting, s.rejected), (2, 3, 1));
    assert_eq!(s.peak_waiting, 3);
    for w in waiters {
        w.abort();
    }
}
}

peer_test! {
    async fn max_queued_zero_fails_fast_only_when_all_permits_are_held(budget) {
    let b = budget(BudgetConfig::new(2).max_queued(0));
    let p1 = b.acquire().await.unwrap();
    let _p2 = b.acquire().await.unwrap();
    assert!(b.acquire().await.unwrap_err().is_queue_full());
    drop(p1);
    assert!(b.acquire().await.is_ok());
    assert_eq!(b.snapshot().rejected, 1);
    assert_eq!(b.snapshot().admitted, 3);
}
}

peer_test! {
    async fn the_permit_deadline_ends_the_wait(budget) {
    let b = budget(BudgetConfig::new(1).permit_timeout(ms(500)));
    let held = b.acquire_owned().await.unwrap();
    let start = Instant::now();
    let err = b.acquire().await.unwrap_err();
    assert_eq!(start.elapsed(), ms(500));
    assert!(err.is_permit_timeout(), "{err:?}");
    let s = b.snapshot();
    assert_eq!((s.permit_timeouts, s.waiting, s.in_flight), (1, 0, 1));

    // A permit freed before the deadline is granted, and the wait is recorded.
    tokio::spawn(async move {
        sleep(ms(300)).await;
        drop(held);
    });
    let start = Instant::now();
    let _p = b.acquire().await.unwrap();
    assert_eq!(start.elapsed(), ms(300));
    let s = b.snapshot();
    assert_eq!(s.admitted, 2);
    assert_eq!(s.wait.max, ms(300));
}
}

peer_test! {
    async fn the_call_timeout_starts_once_the_permit_is_held(budget) {
    let b = budget(
        BudgetConfig::new(1)
            .permit_timeout(ms(1_000))
            .call_timeout(ms(500)),
    );
    let held = b.acquire_owned().await.unwrap();
    tokio::spawn(async move {
        sleep(ms(400)).await;
        drop(held);
    });
    let start = Instant::now();
    // Waits 400 ms for the permit, then runs 450 ms: 850 ms in all, past the 500 ms call timeout
    // if the wait were counted against it.
    let out = b
        .call(|| async {
            sleep(ms(450)).await;
            Ok::<_, ()>("written")
        })
        .await;
    assert_eq!(out, Ok("written"));
    assert_eq!(start.elapsed(), ms(850));
    let s = b.snapshot();
    assert_eq!(s.call_timeouts, 0);
    assert_eq!(s.call.max, ms(450));
    assert_eq!(s.wait.max, ms(400));
}
}

peer_test! {
    async fn a_call_past_its_timeout_is_dropped_and_counted(budget) {
    let b = budget(BudgetConfig::new(1).call_timeout(ms(2_000)));
    let dropped = Arc::new(Mutex::new(false));
    struct SetOnDrop(Arc<Mutex<bool>>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            *self.0.lock().unwrap() = true;
        }
    }
    let guard = SetOnDrop(dropped.clone());
    let start = Instant::now();
    let out = b
        .call(|| async move {
            let _guard = guard;
            sleep(ms(8_000)).await;
            Ok::<_, ()>(())
        })
        .await;
    assert_eq!(out, Err(CallError::Timeout));
    assert_eq!(start.elapsed(), ms(2_000));
    assert!(
        *dropped.lock().unwrap(),
        "the timed-out call's future must be dropped"
    );
    let s = b.snapshot();
    assert_eq!((s.call_timeouts, s.in_flight), (1, 0));
    assert_eq!(b.available_permits(), 1);
}
}

#[tokio::test(start_paused = true)]
async fn inner_errors_pass_through_and_rejected_calls_never_start() {
    let b = budget(BudgetConfig::new(1).max_queued(0));
    let out: Result<(), _> = b.call(|| async { Err("boom") }).await;
    assert_eq!(out, Err(CallError::Inner("boom")));

    let _held = b.acquire().await.unwrap();
    let started = Arc::new(Mutex::new(false));
    let s2 = started.clone();
    let out = b
        .call(|| async move {
            *s2.lock().unwrap() = true;
            Ok::<_, ()>(())
        })
        .await;
    assert!(matches!(
        out,
        Err(CallError::Rejected(AcquireError::QueueFull { .. }))
    ));
    assert!(!*started.lock().unwrap());
}

peer_test! {
    async fn cancelling_a_waiter_frees_its_queue_place(budget) {
    let b = budget(BudgetConfig::new(1).max_queued(1));
    let held = b.acquire_owned().await.unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire().await.map(|_| ()) })
    };
    settle().await;
    assert_eq!(b.snapshot().waiting, 1);
    assert!(b.acquire().await.unwrap_err().is_queue_full());

    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    let s = b.snapshot();
    assert_eq!((s.waiting, s.cancelled), (0, 1));

    // The freed place can be taken again, and the held permit still goes to it.
    let next = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire().await.map(|_| ()) })
    };
    settle().await;
    assert_eq!(b.snapshot().waiting, 1);
    drop(held);
    next.await.unwrap().unwrap();
    assert_eq!(b.available_permits(), 1);
}
}

peer_test! {
    async fn cancelling_a_holder_frees_its_permit(budget) {
    let b = budget(BudgetConfig::new(1));
    let holder = {
        let b = b.clone();
        tokio::spawn(async move {
            b.call(|| async {
                sleep(ms(60_000)).await;
                Ok::<_, ()>(())
            })
            .await
        })
    };
    settle().await;
    assert_eq!(b.snapshot().in_flight, 1);
    holder.abort();
    let _ = holder.await;
    assert_eq!(b.snapshot().in_flight, 0);
    assert_eq!(b.available_permits(), 1);
    let start = Instant::now();
    let _p = b.acquire().await.unwrap();
    assert_eq!(start.elapsed(), ms(0));
}
}

peer_test! {
    async fn a_panic_inside_a_call_frees_its_permit(budget) {
    let b = budget(BudgetConfig::new(1));
    let task = {
        let b = b.clone();
        tokio::spawn(async move {
            b.call(|| async {
                sleep(ms(5)).await;
                if true {
                    panic!("the call panicked");
                }
                Ok::<_, ()>(())
            })
            .await
        })
    };
    assert!(task.await.unwrap_err().is_panic());
    assert_eq!(b.available_permits(), 1);
    assert_eq!(b.snapshot().in_flight, 0);
}
}

peer_test! {
    async fn counters_and_peaks_add_up(budget) {
    let b = budget(BudgetConfig::new(3).max_queued(4).permit_timeout(ms(100)));
    let mut tasks = Vec::new();
    for i in 0..10u64 {
        let b = b.clone();
        tasks.push(tokio::spawn(async move {
            b.call(|| async move {
                sleep(ms(60 + i)).await;
                Ok::<_, ()>(())
            })
            .await
        }));
    }
    let mut ok = 0;
    let mut full = 0;
    let mut timed_out = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(()) => ok += 1,
            Err(CallError::Rejected(AcquireError::QueueFull { .. })) => full += 1,
            Err(CallError::Rejected(AcquireError::PermitTimeout)) => timed_out += 1,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    // 3 run at once, 4 queue (the first 3 of them get permits at ~60 ms, the 4th times out at
    // 100 ms), 3 are turned away.
    assert_eq!((ok, full, timed_out), (6, 3, 1));
    let s = b.snapshot();
    assert_eq!(s.admitted, 6);
    assert_eq!(s.rejected, 3);
    assert_eq!(s.permit_timeouts, 1);
    assert_eq!(s.cancelled, 0);
    assert_eq!(s.peak_in_flight, 3);
    assert_eq!(s.peak_waiting, 4);
    assert_eq!((s.in_flight, s.waiting), (0, 0));
    assert_eq!(s.call.count, 6);
    assert_eq!(s.wait.count, 6);
    assert_eq!(s.call.max, ms(65));
    assert_eq!(s.max_concurrent, 3);
    assert_eq!(s.name, "test");
}
}

#[tokio::test(start_paused = true)]
async fn clones_share_one_set_of_permits() {
    let a = budget(BudgetConfig::new(2));
    let c = a.clone();
    let _p1 = a.acquire().await.unwrap();
    let _p2 = c.acquire().await.unwrap();
    assert_eq!(a.available_permits(), 0);
    assert_eq!(c.snapshot().in_flight, 2);
}

#[test]
fn budget_and_permits_are_send_sync_static() {
    fn assert_send_sync_static<T: Send + Sync + 'static>() {}
    fn assert_send<T: Send>() {}
    assert_send_sync_static::<Budget>();
    assert_send_sync_static::<inflight::OwnedPermit>();
    #[cfg(feature = "toml")]
    assert_send_sync_static::<inflight::Budgets>();
    assert_send::<inflight::Permit<'static>>();
    assert_send_sync_static::<AcquireError>();
    #[cfg(feature = "toml")]
    assert_send_sync_static::<inflight::ConfigError>();
    fn assert_send_future<F: std::future::Future + Send>(_: F) {}
    let b = budget(BudgetConfig::new(1));
    assert_send_future(b.acquire());
    assert_send_future(b.call(|| async { Ok::<_, ()>(()) }));
    drop(b);
}

/// The futures of `acquire` stay small: the wait, about a kilobyte, is boxed, and taken only by
/// a caller that waits. Every future that awaits one holds it, and copies it whole each time it
/// moves (a proxied request's future, boxed per request, was 2.9 KB with a 1.1 KB acquire in it).
#[test]
fn acquire_futures_are_small() {
    let b = budget(BudgetConfig::new(1));
    let sizes = [
        ("acquire", std::mem::size_of_val(&b.acquire())),
        ("acquire_owned", std::mem::size_of_val(&b.acquire_owned())),
        ("acquire_in", std::mem::size_of_val(&b.acquire_in("a"))),
        (
            "acquire_owned_in",
            std::mem::size_of_val(&b.acquire_owned_in("a")),
        ),
    ];
    for (name, size) in sizes {
        assert!(size <= 256, "{name}: {size} bytes");
    }
}

#[test]
fn invalid_configs_are_refused_with_the_field_named() {
    // Built in code, a budget names the bare field: there is no budgets file to point into.
    let err = Budget::new("records", BudgetConfig::new(0)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "budget \"records\": max_concurrent: must be at least 1, got 0"
    );
    assert_eq!(err.budget(), "records");
    let err = Budget::new("records", BudgetConfig::new(1).permit_timeout(ms(0))).unwrap_err();
    assert_eq!(err.field(), "permit_timeout");
    let err = Budget::new("records", BudgetConfig::new(1).call_timeout(ms(0))).unwrap_err();
    assert_eq!(err.field(), "call_timeout");
    assert_eq!(
        Budget::new("", BudgetConfig::new(1)).unwrap_err().field(),
        "name"
    );
    assert_eq!(
        Budget::new("  ", BudgetConfig::new(1)).unwrap_err().field(),
        "name"
    );
    let err = Budget::new("a\nb", BudgetConfig::new(0)).unwrap_err();
    assert!(!err.to_string().contains('\n'), "{err}");
}

peer_test! {
    async fn a_released_permit_goes_to_the_waiter_not_to_a_newcomer(budget) {
    let b = budget(BudgetConfig::new(1));
    let first = b.acquire_owned().await.unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire_owned().await.unwrap() })
    };
    settle().await;
    drop(first);
    // The waiter has not run since the release, but the permit is already its own: the fast
    // path of a newcomer must not take it.
    let newcomer = b.acquire();
    tokio::pin!(newcomer);
    assert!(futures::poll!(newcomer.as_mut()).is_pending());
    let held = waiter.await.unwrap();
    drop(held);
    assert!(newcomer.await.is_ok());
}
}

#[test]
fn waiting_never_shows_more_than_max_queued() {
    waiting_stays_within_max_queued(budget);
}

#[test]
fn waiting_never_shows_more_than_max_queued_with_one_class() {
    waiting_stays_within_max_queued(support::one_class);
}

fn waiting_stays_within_max_queued(budget: fn(BudgetConfig) -> Budget) {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let b = budget(BudgetConfig::new(1).max_queued(1));
        let _held = b.acquire_owned().await.unwrap();
        let queued = {
            let b = b.clone();
            tokio::spawn(async move { b.acquire_owned().await.map(drop) })
        };
        while b.snapshot().waiting < 1 {
            tokio::task::yield_now().await;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let hammers: Vec<_> = (0..3)
            .map(|_| {
                let (b, stop) = (b.clone(), stop.clone());
                tokio::spawn(async move {
                    while !stop.load(SeqCst) {
                        assert!(matches!(
                            b.acquire().await,
                            Err(AcquireError::QueueFull { .. })
                        ));
                    }
                })
            })
            .collect();
        // Sample for a while (a snapshot is not cheap), stopping at the first overshoot.
        let mut most = 0;
        let until = std::time::Instant::now() + std::time::Duration::from_millis(300);
        while most <= 1 && std::time::Instant::now() < until {
            most = most.max(b.snapshot().waiting);
        }
        stop.store(true, SeqCst);
        for h in hammers {
            h.await.unwrap();
        }
        assert!(
            most <= 1,
            "a snapshot showed {most} waiting with max_queued 1"
        );
        assert_eq!(b.snapshot().peak_waiting, 1);
        queued.abort();
    });
}

peer_test! {
    async fn try_acquire_never_waits_and_never_overtakes_a_waiter(budget) {
    let b = budget(BudgetConfig::new(1));
    let held = b.try_acquire_owned().unwrap();
    assert_eq!(b.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let _p = b.acquire().await.unwrap();
            sleep(ms(10)).await;
        })
    };
    settle().await;
    drop(held);
    // The permit went to the waiter, whose task has not run yet: a newcomer must not take it.
    assert_eq!(b.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
    waiter.await.unwrap();
    let s = b.snapshot();
    assert_eq!((s.admitted, s.rejected, s.in_flight), (2, 2, 0));
    assert!(b.try_acquire().is_ok());
}
}

peer_test! {
    async fn a_waiter_handed_a_permit_counts_as_waiting_until_its_task_takes_it(budget) {
    let b = budget(BudgetConfig::new(1).max_queued(1));
    let held = b.acquire_owned().await.unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let _p = b.acquire().await.unwrap();
            sleep(ms(10)).await;
        })
    };
    settle().await;
    assert_eq!(b.snapshot().waiting, 1);
    // The release hands the permit to the waiter, whose task has not run yet.
    drop(held);
    assert_eq!(
        b.snapshot().waiting,
        1,
        "still counted until its task takes the permit"
    );
    assert!(matches!(
        b.acquire().await,
        Err(AcquireError::QueueFull { .. })
    ));
    assert!(b.try_acquire().is_err(), "the permit is the waiter's");
    // Once the waiter's task has run, nobody waits and a newcomer may queue again.
    settle().await;
    let s = b.snapshot();
    assert_eq!((s.waiting, s.in_flight), (0, 1));
    let newcomer = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire().await.map(drop) })
    };
    settle().await;
    assert_eq!(b.snapshot().waiting, 1);
    waiter.await.unwrap();
    newcomer.await.unwrap().unwrap();
    assert_eq!(b.snapshot().rejected, 2);
}
}
