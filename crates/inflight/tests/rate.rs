//! Rate limits on paused tokio time: spacing and burst, a deadline refused up front, callers
//! served in order, cancelled waits, try_acquire, and budgets files.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use inflight::{Budget, BudgetConfig, Budgets, Rate, TryAcquireError};
use support::{ms, settle};
use tokio::time::{sleep, Instant};

fn rated(per_second: f64, burst: u32) -> Budget {
    Budget::new(
        "rated",
        BudgetConfig::new(100)
            .rate(Rate::per_second(per_second))
            .burst(burst),
    )
    .unwrap()
}

/// Starts `n` calls one after another in one task and returns when each got its permit.
async fn starts(b: &Budget, n: usize) -> Vec<Duration> {
    let t0 = Instant::now();
    let mut at = Vec::new();
    for _ in 0..n {
        drop(b.acquire().await.unwrap());
        at.push(t0.elapsed());
    }
    at
}

#[tokio::test(start_paused = true)]
async fn calls_are_spaced_after_the_burst() {
    let b = rated(10.0, 3);
    assert_eq!(
        starts(&b, 6).await,
        [ms(0), ms(0), ms(0), ms(100), ms(200), ms(300)]
    );
    // Idle for a second: the burst is back, and no more than the burst.
    sleep(ms(1000)).await;
    assert_eq!(starts(&b, 4).await, [ms(0), ms(0), ms(0), ms(100)]);
}

#[tokio::test(start_paused = true)]
async fn never_more_than_burst_plus_rate_times_t_in_any_window() {
    let b = rated(50.0, 5);
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move {
                let _p = b.acquire().await.unwrap();
                Instant::now()
            })
        })
        .collect();
    let mut at = Vec::new();
    for t in tasks {
        at.push(t.await.unwrap());
    }
    at.sort();
    for (i, start) in at.iter().enumerate() {
        for window in [ms(20), ms(100), ms(1000)] {
            let inside = at[i..].iter().take_while(|t| **t - *start < window).count();
            let allowed = 5 + (window.as_secs_f64() * 50.0).floor() as usize;
            assert!(inside <= allowed, "{inside} starts within {window:?}");
        }
    }
    let span = *at.last().unwrap() - at[0];
    assert_eq!(
        span,
        ms(20 * 195),
        "200 starts, 5 in the burst, then every 20 ms"
    );
}

#[tokio::test(start_paused = true)]
async fn a_turn_past_the_deadline_is_refused_at_once() {
    let b = Budget::new(
        "rated",
        BudgetConfig::new(100)
            .rate(Rate::per_second(10.0))
            .permit_timeout(ms(250)),
    )
    .unwrap();
    // Three callers take the slots at 0, 100 and 200 ms, within 250 ms; a fourth would come at 300.
    let t0 = Instant::now();
    let early: Vec<_> = (0..3)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move { b.acquire_owned().await.map(drop) })
        })
        .collect();
    settle().await;
    let err = b.acquire().await.unwrap_err();
    assert!(err.is_rate_limited(), "{err:?}");
    assert_eq!(t0.elapsed(), Duration::ZERO, "refused without sleeping");
    for e in early {
        e.await.unwrap().unwrap();
    }
    let s = b.snapshot();
    assert_eq!((s.rate_limited, s.admitted), (1, 3));
    // The refusal reserved nothing: the next slot, at 300 ms, is still free.
    drop(b.acquire().await.unwrap());
    assert_eq!(t0.elapsed(), ms(300));
}

#[tokio::test(start_paused = true)]
async fn rate_waiters_are_served_in_order() {
    let b = rated(20.0, 1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (b, order) = (b.clone(), order.clone());
            tokio::spawn(async move {
                let _p = b.acquire().await.unwrap();
                order.lock().unwrap().push((i, Instant::now()));
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap();
    let ids: Vec<_> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(ids, (0..8).collect::<Vec<_>>());
    for pair in order.windows(2) {
        assert_eq!(pair[1].1 - pair[0].1, ms(50));
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_gives_its_slot_back_and_its_permit() {
    let b = Budget::new("rated", BudgetConfig::new(2).rate(Rate::per_second(10.0))).unwrap();
    drop(b.acquire().await.unwrap());
    // The next slot is at 100 ms; give up at 30.
    assert!(tokio::time::timeout(ms(30), b.acquire()).await.is_err());
    let s = b.snapshot();
    assert_eq!((s.cancelled, s.in_flight), (1, 0));
    let start = Instant::now();
    drop(b.acquire().await.unwrap());
    assert_eq!(
        start.elapsed(),
        ms(70),
        "the slot at 100 ms was given back and reused"
    );
}

#[tokio::test(start_paused = true)]
async fn try_acquire_takes_only_a_slot_that_is_due_now() {
    let b = rated(10.0, 2);
    assert!(b.try_acquire().is_ok());
    assert!(b.try_acquire().is_ok());
    assert_eq!(b.try_acquire().unwrap_err(), TryAcquireError::RateLimited);
    assert_eq!(b.in_flight(), 0, "the permit went back with the refusal");
    sleep(ms(100)).await;
    assert!(b.try_acquire().is_ok());
    settle().await;
    assert_eq!(b.snapshot().rate_limited, 1);
}

#[tokio::test(start_paused = true)]
async fn a_per_minute_quota_from_a_budgets_file() {
    let budgets = Budgets::from_toml_str(
        r#"
        [budgets.llm]
        max_concurrent = 16
        rate = "120/min"
        burst = 2
        "#,
    )
    .unwrap();
    let llm = budgets.get("llm").unwrap();
    assert_eq!(llm.config().rate_limit(), Some((Rate::per_second(2.0), 2)));
    assert_eq!(starts(llm, 4).await, [ms(0), ms(0), ms(500), ms(1000)]);
    for (text, field, says) in [
        ("rate = \"0/s\"", "rate", "greater than zero"),
        ("rate = \"1e300/s\"", "rate", "at most"),
        ("rate = \"fast\"", "rate", "expected a rate"),
        ("burst = 3", "burst", "only a rate limit"),
        ("rate = \"5/s\"\nburst = 0", "burst", "at least 1"),
        ("rate = \"5/s\"\nburst = 5000000", "burst", "at most"),
    ] {
        let err = Budgets::from_toml_str(&format!("[budgets.llm]\nmax_concurrent = 2\n{text}"))
            .unwrap_err();
        assert_eq!(
            err.field(),
            Some(&*format!("budgets.llm.{field}")),
            "{text}"
        );
        assert!(err.to_string().contains(says), "{text}: {err}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_concurrency_limit_still_holds_under_a_rate() {
    let b = Budget::new(
        "both",
        BudgetConfig::new(2)
            .rate(Rate::per_second(1000.0))
            .burst(10),
    )
    .unwrap();
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move {
                b.call(|| async {
                    sleep(ms(50)).await;
                    Ok::<_, ()>(())
                })
                .await
                .unwrap()
            })
        })
        .collect();
    settle().await;
    assert_eq!(b.in_flight(), 2);
    for c in calls {
        c.await.unwrap();
    }
    assert_eq!(b.snapshot().peak_in_flight, 2);
}
