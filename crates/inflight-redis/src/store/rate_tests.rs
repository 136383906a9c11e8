//! A [`RedisStore`]'s fleet rate against the in-memory server double, in paused time.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use inflight::{AcquireError, Budget};

use super::test_support::{self, ms, settle};
use super::RedisStore;
use crate::fake::Shared;
use crate::fallback::Fail;
use inflight::Rate;

/// One process's store on `server`, keeping 10 calls a second (and `burst`) for the fleet.
fn store(server: &Shared, limit: usize, fail: Fail, burst: u32) -> RedisStore {
    test_support::store(server, limit, fail)
        .rate(Rate::per_second(10.0), burst)
        .unwrap()
}

fn budget(store: &RedisStore, local: usize, timeout: u64) -> Budget {
    test_support::budget("llm", store, local, timeout)
}

#[tokio::test(start_paused = true)]
async fn a_slot_past_the_deadline_is_refused_at_once_and_reserves_nothing() {
    let server = Shared::default();
    let (a, b) = (
        store(&server, 4, Fail::Closed, 1),
        store(&server, 4, Fail::Closed, 1),
    );
    let (a, b) = (budget(&a, 4, 50), budget(&b, 4, 50));
    drop(a.acquire().await.unwrap());
    // The other process's turn is 100 ms away, past its 50 ms deadline.
    let start = Instant::now();
    let refused = b.acquire().await.unwrap_err();
    assert!(refused.is_rate_limited(), "{refused:?}");
    assert_eq!(
        refused.retry_after(),
        Some(ms(100)),
        "the slot it would have had"
    );
    assert_eq!(start.elapsed(), Duration::ZERO, "refused without waiting");
    assert_eq!(b.snapshot().rate_limited, 1);
    settle().await;
    assert_eq!(server.0.holders("llm"), 0, "its fleet lease went back");
    // Nothing was reserved: at 100 ms the slot is free for the next caller, at once.
    tokio::time::sleep(ms(100)).await;
    let start = Instant::now();
    drop(b.acquire().await.unwrap());
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn turns_go_in_arrival_order_across_processes() {
    let server = Shared::default();
    let stores: Vec<_> = (0..3)
        .map(|_| store(&server, 16, Fail::Closed, 2))
        .collect();
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    // Seven callers, arriving 1 ms apart, in turn from three processes.
    for n in 0..7 {
        let records = budget(&stores[n % 3], 16, 10_000);
        tasks.push(tokio::spawn(async move {
            let permit = records.acquire().await.unwrap();
            let started = t0.elapsed();
            tokio::time::sleep(ms(5)).await;
            drop(permit);
            started
        }));
        tokio::time::sleep(ms(1)).await;
    }
    let mut starts = Vec::new();
    for task in tasks {
        starts.push(task.await.unwrap());
    }
    // A burst of two, then one every 100 ms of the fleet's clock, in the order they came.
    assert_eq!(
        starts,
        [ms(0), ms(1), ms(100), ms(200), ms(300), ms(400), ms(500)]
    );
}

#[tokio::test(start_paused = true)]
async fn the_fleet_rate_replaces_the_budgets_own() {
    let server = Shared::default();
    let s = store(&server, 4, Fail::Closed, 1);
    // A budget that also names a rate of 1/s: only the fleet's 10/s applies.
    let llm = Budget::builder("llm")
        .max_concurrent(4)
        .permit_timeout(ms(500))
        .rate(Rate::per_second(1.0))
        .store(Arc::new(s))
        .build()
        .unwrap();
    let start = Instant::now();
    drop(llm.acquire().await.unwrap());
    drop(llm.acquire().await.unwrap());
    assert_eq!(
        start.elapsed(),
        ms(100),
        "one slot of the fleet's 10/s later"
    );
    // The budget has no rate gate of its own: the fleet's answers how long a caller would
    // wait past its deadline (the next slot, 100 ms away, is within its 500 ms).
    assert_eq!(llm.rate_limited_for(), Some(Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_leaves_before_its_slot_gives_its_lease_back() {
    let server = Shared::default();
    let s = store(&server, 4, Fail::Closed, 1);
    let llm = budget(&s, 4, 1000);
    drop(llm.acquire().await.unwrap());
    assert!(tokio::time::timeout(ms(50), llm.acquire()).await.is_err());
    settle().await;
    assert_eq!(server.0.holders("llm"), 0);
    assert_eq!(llm.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn while_redis_is_down_local_applies_the_rate_per_process_and_closed_refuses() {
    let server = Shared::default();
    server.0.down.store(true, Relaxed);
    let (a, b) = (
        store(&server, 4, Fail::Local(4), 1),
        store(&server, 4, Fail::Local(4), 1),
    );
    let (a, b) = (budget(&a, 4, 1000), budget(&b, 4, 50));
    // Nothing is admitted locally until the outage is a lease and a third (400 ms) old.
    let start = Instant::now();
    let (first_a, first_b) = tokio::join!(a.acquire(), b.acquire());
    assert!(
        first_b.unwrap_err().is_permit_timeout(),
        "b's deadline came within the hold"
    );
    drop(first_a.unwrap());
    assert_eq!(start.elapsed(), ms(400), "a, once the outage is 400 ms old");
    let start = Instant::now();
    drop(b.acquire().await.unwrap());
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "each process has its own gate"
    );
    drop(a.acquire().await.unwrap());
    assert_eq!(start.elapsed(), ms(100), "and keeps the rate within it");
    tokio::time::sleep(ms(50)).await;
    drop(b.acquire().await.unwrap());
    assert!(
        b.acquire().await.unwrap_err().is_rate_limited(),
        "its next local slot is past its deadline"
    );
    let c = budget(&store(&server, 4, Fail::Closed, 1), 4, 1000);
    assert!(matches!(
        c.acquire().await.unwrap_err(),
        AcquireError::Unavailable(_)
    ));
}
