//! Priority classes on paused tokio time: weights, progress of the lightest class, strict
//! priority, work conservation, eviction from a full queue, cancellation, per-class deadlines,
//! the default class, and the per-class accounting of every outcome.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use inflight::{AcquireError, Budget, BudgetConfig, ClassSnapshot, Classes, TryAcquireError};
use support::{ms, settle};
use tokio::time::{sleep, Instant};

fn budget(config: BudgetConfig) -> Budget {
    Budget::new("classes", config).expect("a valid test budget")
}

fn two_classes() -> Classes {
    Classes::new().class("interactive", 4).class("batch", 1)
}

fn class<'a>(name: &str, snapshots: &'a [ClassSnapshot]) -> &'a ClassSnapshot {
    snapshots
        .iter()
        .find(|c| c.name == name)
        .expect("the class is in the snapshot")
}

/// Every acquire of the class ended in exactly one counted outcome, or is still in progress.
fn outcomes(c: &ClassSnapshot) -> u64 {
    c.admitted
        + c.rejected
        + c.permit_timeouts
        + c.rate_limited
        + c.paused
        + c.evicted
        + c.cancelled
        + c.unavailable
}

/// Spawns `tasks` tasks per class that take a permit in their class, hold it for `hold`, and
/// ask again at once, until `total` grants were made; returns the classes granted, in order.
async fn contend(b: &Budget, classes: &[&'static str], tasks: usize, total: usize) -> Vec<usize> {
    let order = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let mut handles = Vec::new();
    for (i, &name) in classes.iter().enumerate() {
        for _ in 0..tasks {
            let (b, order) = (b.clone(), order.clone());
            handles.push(tokio::spawn(async move {
                loop {
                    let permit = b.acquire_in(name).await.unwrap();
                    {
                        let mut order = order.lock().unwrap();
                        if order.len() >= total {
                            return;
                        }
                        order.push(i);
                    }
                    sleep(ms(1)).await;
                    drop(permit);
                }
            }));
        }
    }
    for h in handles {
        h.await.unwrap();
    }
    Arc::try_unwrap(order).unwrap().into_inner().unwrap()
}

#[tokio::test(start_paused = true)]
async fn weights_are_honoured_within_five_percent_over_ten_thousand_grants() {
    let b = budget(BudgetConfig::new(2).classes(two_classes()));
    let order = contend(&b, &["interactive", "batch"], 8, 10_000).await;
    let interactive = order.iter().filter(|&&c| c == 0).count() as f64;
    let batch = order.iter().filter(|&&c| c == 1).count() as f64;
    let ratio = interactive / batch;
    assert!(
        (ratio - 4.0).abs() <= 4.0 * 0.05,
        "interactive:batch = {interactive}:{batch} = {ratio:.3}, weights 4:1"
    );
    let s = b.snapshot();
    let (i, bt) = (class("interactive", &s.classes), class("batch", &s.classes));
    // The tasks stop after the 10,000th grant: a few more permits were granted and handed back.
    assert!(i.admitted + bt.admitted >= 10_000);
    assert_eq!(i.admitted + bt.admitted, s.admitted);
    assert_eq!(
        (s.in_flight, s.waiting, i.in_flight, bt.in_flight),
        (0, 0, 0, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn with_equal_weights_the_classes_alternate() {
    let b = budget(BudgetConfig::new(1).classes(Classes::new().class("a", 1).class("b", 1)));
    let order = contend(&b, &["a", "b"], 3, 2_000).await;
    let a = order.iter().filter(|&&c| c == 0).count();
    assert!((950..=1_050).contains(&a), "a got {a} of 2,000");
}

#[tokio::test(start_paused = true)]
async fn the_lightest_class_always_progresses() {
    let classes = Classes::new().class("interactive", 50).class("batch", 1);
    let b = budget(BudgetConfig::new(2).classes(classes));
    let order = contend(&b, &["interactive", "batch"], 6, 5_000).await;
    let mut gap = 0;
    let mut longest = 0;
    for &c in &order[100..] {
        if c == 1 {
            gap = 0;
        } else {
            gap += 1;
            longest = longest.max(gap);
        }
    }
    // Weights 50:1: batch is served once in every 51 grants, give or take the two permits
    // granted as the tasks come back.
    assert!(
        longest <= 55,
        "batch waited {longest} grants in a row under 50:1"
    );
    let batch = order.iter().filter(|&&c| c == 1).count();
    assert!((80..=120).contains(&batch), "batch got {batch} of 5,000");
}

#[tokio::test(start_paused = true)]
async fn strict_priority_serves_the_heaviest_class_first() {
    let classes = two_classes().strict(true);
    let b = budget(BudgetConfig::new(1).classes(classes));
    let held = b.acquire_owned_in("batch").await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let name = if i % 2 == 0 { "batch" } else { "interactive" };
        let (b, order) = (b.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let _p = b.acquire_in(name).await.unwrap();
            order.lock().unwrap().push(name);
            sleep(ms(1)).await;
        }));
        settle().await;
    }
    drop(held);
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order[..5], ["interactive"; 5], "{order:?}");
    assert_eq!(order[5..], ["batch"; 5], "{order:?}");
}

#[tokio::test(start_paused = true)]
async fn an_idle_class_leaves_its_share_to_the_others() {
    let b = budget(BudgetConfig::new(2).classes(two_classes()));
    // Only batch asks: it gets every permit, none is kept back for interactive.
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let b = b.clone();
        tasks.push(tokio::spawn(async move {
            let _p = b.acquire_in("batch").await.unwrap();
            sleep(ms(10)).await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(start.elapsed(), ms(50), "two at a time, back to back");
    assert_eq!(b.snapshot().peak_in_flight, 2);

    // Interactive asks for 20 turns per task, batch for 50, both at once: once interactive is
    // done, batch takes its share at once, so both permits are busy throughout.
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (name, turns) in [("interactive", 20), ("batch", 50)] {
        for _ in 0..4 {
            let b = b.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..turns {
                    let _p = b.acquire_in(name).await.unwrap();
                    sleep(ms(10)).await;
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(start.elapsed(), ms((4 * 20 + 4 * 50) * 10 / 2));
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_evicts_exactly_the_newest_waiter_of_the_lightest_class() {
    let classes = Classes::new()
        .class("interactive", 4)
        .class("normal", 2)
        .class("batch", 1);
    let b = budget(BudgetConfig::new(1).max_queued(3).classes(classes));
    let held = b.acquire_owned_in("interactive").await.unwrap();
    let spawn = |name: &'static str| {
        let b = b.clone();
        tokio::spawn(async move {
            let out = b.acquire_in(name).await.map(drop);
            (name, out)
        })
    };
    let batch_1 = spawn("batch");
    settle().await;
    let normal_1 = spawn("normal");
    settle().await;
    let batch_2 = spawn("batch");
    settle().await;
    assert_eq!(b.snapshot().waiting, 3);

    // Heavier than batch: the newest batch waiter gives up its place, at once.
    let interactive_1 = spawn("interactive");
    settle().await;
    assert!(batch_2.is_finished());
    let (_, out) = batch_2.await.unwrap();
    assert!(matches!(out, Err(AcquireError::Evicted { .. })), "{out:?}");
    assert!(out.unwrap_err().is_evicted());
    assert_eq!(b.snapshot().waiting, 3);
    assert!(!batch_1.is_finished() && !normal_1.is_finished());

    // Normal is heavier than batch too: the last batch waiter goes.
    let normal_2 = spawn("normal");
    settle().await;
    let (_, out) = batch_1.await.unwrap();
    assert!(out.unwrap_err().is_evicted());

    // Now the lightest waiting class is normal: neither a batch nor a normal caller is heavier,
    // so both are refused as the queue is full, and nobody waiting is touched.
    assert!(b.acquire_in("batch").await.unwrap_err().is_queue_full());
    assert!(b.acquire_in("normal").await.unwrap_err().is_queue_full());
    // A caller naming no class is in the default class (batch, the lightest).
    assert!(b.acquire().await.unwrap_err().is_queue_full());

    drop(held);
    for t in [interactive_1, normal_1, normal_2] {
        let (name, out) = t.await.unwrap();
        assert!(out.is_ok(), "{name}: {out:?}");
    }
    let s = b.snapshot();
    assert_eq!((s.evicted, s.rejected, s.admitted), (2, 3, 4));
    let batch = class("batch", &s.classes);
    assert_eq!((batch.evicted, batch.rejected, batch.admitted), (2, 2, 0));
    let normal = class("normal", &s.classes);
    assert_eq!(
        (normal.evicted, normal.rejected, normal.admitted),
        (0, 1, 2)
    );
    let interactive = class("interactive", &s.classes);
    assert_eq!(interactive.admitted, 2);
    assert_eq!(
        s.peak_waiting, 3,
        "an eviction never shows more than max_queued"
    );
    for c in &s.classes {
        assert_eq!((c.waiting, c.in_flight), (0, 0), "{c:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_of_any_class_frees_its_place() {
    let b = budget(BudgetConfig::new(1).max_queued(2).classes(two_classes()));
    let held = b.acquire_owned().await.unwrap();
    let waiter = |name: &'static str| {
        let b = b.clone();
        tokio::spawn(async move { b.acquire_in(name).await.map(drop) })
    };
    let batch = waiter("batch");
    let interactive = waiter("interactive");
    settle().await;
    assert_eq!(b.snapshot().waiting, 2);
    assert!(b.acquire_in("batch").await.unwrap_err().is_queue_full());

    interactive.abort();
    assert!(interactive.await.unwrap_err().is_cancelled());
    let s = b.snapshot();
    assert_eq!((s.waiting, s.cancelled), (1, 1));
    assert_eq!(class("interactive", &s.classes).cancelled, 1);
    assert_eq!(class("interactive", &s.classes).waiting, 0);

    // Its place can be taken again, by either class.
    let next = waiter("batch");
    settle().await;
    assert_eq!(b.snapshot().waiting, 2);
    drop(held);
    batch.await.unwrap().unwrap();
    next.await.unwrap().unwrap();
    assert_eq!(b.available_permits(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_permit_handed_to_a_cancelled_waiter_goes_to_the_next() {
    let b = budget(BudgetConfig::new(1).classes(two_classes().strict(true)));
    let held = b.acquire_owned().await.unwrap();
    let batch = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire_in("batch").await.map(drop) })
    };
    let interactive = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire_in("interactive").await.map(drop) })
    };
    settle().await;
    // The permit goes to interactive (strict priority), whose task has not run yet ...
    drop(held);
    assert!(
        b.try_acquire_in("interactive").is_err(),
        "it is interactive's"
    );
    // ... and is cancelled before it takes it: batch gets it.
    interactive.abort();
    let _ = interactive.await;
    batch.await.unwrap().unwrap();
    let s = b.snapshot();
    assert_eq!(
        (s.in_flight, s.waiting, s.admitted, s.cancelled),
        (0, 0, 2, 1)
    );
    assert_eq!(b.available_permits(), 1, "the permit was not lost");
    assert!(b.try_acquire_in("batch").is_ok());
}

#[tokio::test(start_paused = true)]
async fn each_class_waits_its_own_permit_deadline() {
    let classes = two_classes().class_permit_timeout("interactive", ms(50));
    let b = budget(
        BudgetConfig::new(1)
            .permit_timeout(ms(500))
            .classes(classes),
    );
    let _held = b.acquire_owned().await.unwrap();
    let timed = |name: &'static str| {
        let b = b.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let out = b.acquire_in(name).await.map(drop);
            (start.elapsed(), out)
        })
    };
    let (interactive, batch) = (timed("interactive"), timed("batch"));
    let (waited, out) = interactive.await.unwrap();
    assert_eq!((waited, out), (ms(50), Err(AcquireError::PermitTimeout)));
    let (waited, out) = batch.await.unwrap();
    assert_eq!((waited, out), (ms(500), Err(AcquireError::PermitTimeout)));
    let s = b.snapshot();
    assert_eq!(s.permit_timeouts, 2);
    assert_eq!(class("interactive", &s.classes).permit_timeouts, 1);
    assert_eq!(class("batch", &s.classes).permit_timeouts, 1);
}

#[tokio::test(start_paused = true)]
async fn calls_without_a_known_class_are_in_the_default_class() {
    // The default is the lightest class unless one is named.
    let b = budget(BudgetConfig::new(4).classes(two_classes()));
    let _a = b.acquire().await.unwrap();
    let _b = b.acquire_in("no such class").await.unwrap();
    let _c = b.try_acquire().unwrap();
    let _d = b.acquire_owned_in("interactive").await.unwrap();
    let s = b.snapshot();
    let (interactive, batch) = (class("interactive", &s.classes), class("batch", &s.classes));
    assert_eq!((batch.admitted, batch.in_flight), (3, 3));
    assert_eq!((interactive.admitted, interactive.in_flight), (1, 1));

    let named = two_classes().default_class("interactive");
    let b = budget(BudgetConfig::new(1).classes(named));
    let _held = b.acquire().await.unwrap();
    assert_eq!(
        b.try_acquire_in("unknown").unwrap_err(),
        TryAcquireError::NoPermits
    );
    let s = b.snapshot();
    let interactive = class("interactive", &s.classes);
    assert_eq!((interactive.admitted, interactive.rejected), (1, 1));
    assert_eq!(class("batch", &s.classes).admitted, 0);

    // A budget without classes takes any name, in its one queue.
    let plain = budget(BudgetConfig::new(1));
    let _p = plain.acquire_in("interactive").await.unwrap();
    assert!(plain.snapshot().classes.is_empty());
}

#[tokio::test(start_paused = true)]
async fn try_acquire_in_never_overtakes_a_waiter_of_any_class() {
    let b = budget(BudgetConfig::new(1).classes(two_classes()));
    let held = b.acquire_owned_in("interactive").await.unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let _p = b.acquire_in("batch").await.unwrap();
            sleep(ms(10)).await;
        })
    };
    settle().await;
    // A heavier class does not overtake a waiter with try_acquire either.
    assert_eq!(
        b.try_acquire_in("interactive").unwrap_err(),
        TryAcquireError::NoPermits
    );
    drop(held);
    assert_eq!(
        b.try_acquire_in("interactive").unwrap_err(),
        TryAcquireError::NoPermits,
        "the permit is the waiter's"
    );
    waiter.await.unwrap();
    assert!(b.try_acquire_in("interactive").is_ok());
}

#[tokio::test(start_paused = true)]
async fn every_acquire_ends_in_exactly_one_outcome_of_its_class() {
    let classes = Classes::new()
        .class("interactive", 4)
        .class("batch", 1)
        .class_permit_timeout("batch", ms(20));
    let b = budget(
        BudgetConfig::new(2)
            .max_queued(3)
            .permit_timeout(ms(100))
            .classes(classes),
    );
    let names = ["interactive", "batch"];
    let attempts = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
    let mut tasks = Vec::new();
    for i in 0..60u64 {
        let c = usize::from((i * 7) % 3 != 0); // a mix: a third interactive
        let (b, attempts) = (b.clone(), attempts[c].clone());
        let name = names[c];
        let task = tokio::spawn(async move {
            sleep(ms(i * 3)).await;
            attempts.fetch_add(1, SeqCst);
            if i % 5 == 0 {
                if let Ok(p) = b.try_acquire_in(name) {
                    sleep(ms(20)).await;
                    drop(p);
                }
            } else if let Ok(p) = b.acquire_in(name).await {
                sleep(ms(20 + i % 40)).await;
                drop(p);
            }
        });
        // Some are cancelled while they wait, or while they hold their permit.
        if i % 7 == 3 {
            tokio::spawn(async move {
                sleep(ms(i * 3 + 10)).await;
                task.abort();
            });
        } else {
            tasks.push(task);
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    sleep(ms(1_000)).await;
    let s = b.snapshot();
    let mut all = 0;
    for (c, name) in names.iter().enumerate() {
        let snap = class(name, &s.classes);
        assert_eq!(
            outcomes(snap),
            attempts[c].load(SeqCst) as u64,
            "every acquire in {name} ends in exactly one outcome: {snap:?}"
        );
        assert_eq!((snap.in_flight, snap.waiting), (0, 0), "{snap:?}");
        assert_eq!(snap.admitted, snap.wait.count);
        all += outcomes(snap);
    }
    assert_eq!(
        s.admitted
            + s.rejected
            + s.permit_timeouts
            + s.rate_limited
            + s.paused
            + s.evicted
            + s.cancelled
            + s.unavailable,
        all,
        "the budget-wide counters count every class: {s:?}"
    );
    let sum = |f: fn(&ClassSnapshot) -> u64| s.classes.iter().map(f).sum::<u64>();
    assert_eq!(s.admitted, sum(|c| c.admitted));
    assert_eq!(s.rejected, sum(|c| c.rejected));
    assert_eq!(s.permit_timeouts, sum(|c| c.permit_timeouts));
    assert_eq!(s.evicted, sum(|c| c.evicted));
    assert_eq!(s.cancelled, sum(|c| c.cancelled));
    // The mix did exercise the outcomes the accounting is about.
    assert!(
        s.admitted > 0 && s.rejected > 0 && s.permit_timeouts > 0,
        "{s:?}"
    );
    assert!(s.evicted > 0 && s.cancelled > 0, "{s:?}");
    assert_eq!(b.available_permits(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_snapshot_shows_each_class_in_flight_and_waiting() {
    let b = budget(BudgetConfig::new(2).classes(two_classes()));
    let _i = b.acquire_in("interactive").await.unwrap();
    let _b = b.acquire_in("batch").await.unwrap();
    let waiters: Vec<_> = ["batch", "batch", "interactive"]
        .into_iter()
        .map(|name| {
            let b = b.clone();
            tokio::spawn(async move { b.acquire_in(name).await.map(drop) })
        })
        .collect();
    settle().await;
    let s = b.snapshot();
    let (interactive, batch) = (class("interactive", &s.classes), class("batch", &s.classes));
    assert_eq!((interactive.in_flight, interactive.waiting), (1, 1));
    assert_eq!((batch.in_flight, batch.waiting), (1, 2));
    assert_eq!((interactive.weight, batch.weight), (4, 1));
    for w in waiters {
        w.abort();
    }
}
