//! The engine of a [`RedisStore`] against the in-memory server double: waits, grants,
//! releases, losses and the fallback, in paused time.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use inflight::{AcquireError, Budget};

use super::test_support::{self, ms, settle, store};
use super::RedisStore;
use crate::fake::Shared;
use crate::fallback::{Fail, Fallback};

fn budget(store: &RedisStore, local: usize, timeout: u64) -> Budget {
    test_support::budget("records", store, local, timeout)
}

#[tokio::test(start_paused = true)]
async fn a_full_fleet_times_out_exactly_at_the_deadline() {
    let server = Shared::default();
    let (a, b) = (
        store(&server, 1, Fail::Closed),
        store(&server, 1, Fail::Closed),
    );
    let held = budget(&a, 1, 100).acquire_owned().await.unwrap();
    let start = Instant::now();
    let err = budget(&b, 1, 100).acquire().await.unwrap_err();
    assert_eq!(err, AcquireError::PermitTimeout);
    assert_eq!(start.elapsed(), ms(100));
    assert_eq!(b.snapshot().timeouts, 1);
    // Pauses are jittered and doubling: a handful of asks, not a tight loop.
    let asks = server.0.calls.load(Relaxed);
    assert!(asks <= 10, "{asks} asks in 100 ms");
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn a_release_wakes_a_waiter_before_its_pause_ends() {
    let server = Shared::default();
    let (a, b) = (
        store(&server, 1, Fail::Closed),
        store(&server, 1, Fail::Closed),
    );
    let held = budget(&a, 1, 1000).acquire_owned().await.unwrap();
    let waiter = budget(&b, 1, 1000);
    let task = tokio::spawn(async move {
        let start = Instant::now();
        let permit = waiter.acquire_owned().await.unwrap();
        (start.elapsed(), permit)
    });
    // Long enough for the waiter's pauses to have grown to the cap.
    tokio::time::sleep(ms(250)).await;
    drop(held);
    let (waited, permit) = task.await.unwrap();
    assert!(waited < ms(260), "woken by the release, waited {waited:?}");
    assert!(!permit.lease().unwrap().is_lost());
    assert_eq!(server.0.holders("records"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_holder_that_cannot_renew_loses_its_lease_after_one_lease() {
    let server = Shared::default();
    let a = store(&server, 1, Fail::Closed);
    let records = budget(&a, 1, 1000);
    let permit = records.acquire().await.unwrap();
    // Renewals keep it alive well past one lease.
    tokio::time::sleep(ms(900)).await;
    assert!(!permit.lease().unwrap().is_lost());
    assert_eq!(server.0.holders("records"), 1);
    server.0.stalled.store(true, Relaxed);
    tokio::time::sleep(ms(450)).await;
    settle().await;
    assert!(permit.lease().unwrap().is_lost());
    assert_eq!(a.snapshot().lost, 1);
    assert_eq!(server.0.holders("records"), 0, "expired on the server too");
    // Giving back a lost lease sends nothing.
    let sent = server.0.calls.load(Relaxed);
    drop(permit);
    settle().await;
    assert_eq!(server.0.calls.load(Relaxed), sent);
}

#[tokio::test(start_paused = true)]
async fn a_restart_that_drops_the_leases_adds_them_back_before_granting_anything_new() {
    let server = Shared::default();
    let (a, b) = (
        store(&server, 2, Fail::Closed),
        store(&server, 2, Fail::Closed),
    );
    let (ra, rb) = (budget(&a, 2, 1000), budget(&b, 2, 1000));
    let first = ra.acquire().await.unwrap();
    let second = ra.acquire().await.unwrap();
    assert_eq!(server.0.holders("records"), 2);
    // Redis restarts empty while both calls run.
    server.0.wipe();
    // A newcomer that had seen the budget before finds it learning: nothing is granted
    // to it until the holders have had a lease to say what they run.
    let newcomer = tokio::spawn(async move {
        let start = Instant::now();
        let got = rb.acquire().await.map(drop);
        (start.elapsed(), got)
    });
    // (b saw the budget too: its first ask makes the new epoch learn.)
    tokio::time::sleep(ms(1)).await;
    // a's renewal (a third of a lease) adds both leases back.
    tokio::time::sleep(ms(110)).await;
    settle().await;
    assert!(!first.lease().unwrap().is_lost() && !second.lease().unwrap().is_lost());
    assert_eq!(
        server.0.holders("records"),
        2,
        "both running calls count again"
    );
    assert_eq!(a.snapshot().readded, 2);
    assert!(a.snapshot().epochs_moved >= 1);
    assert!(
        server.0.learning("records"),
        "nothing new granted for a lease"
    );
    // The limit is held after learning too: the newcomer starts once a call ends.
    tokio::time::sleep(ms(400)).await;
    assert!(!newcomer.is_finished());
    drop(first);
    let (waited, got) = newcomer.await.unwrap();
    assert!(got.is_ok());
    assert!(waited >= ms(500), "{waited:?}");
    drop(second);
}

#[tokio::test(start_paused = true)]
async fn fail_closed_refuses_at_once_and_skips_the_server_for_a_while() {
    let server = Shared::default();
    let a = store(&server, 2, Fail::Closed);
    let records = budget(&a, 2, 1000);
    server.0.down.store(true, Relaxed);
    let start = Instant::now();
    let err = records.acquire().await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(
        err.to_string(),
        "the permit store is unavailable: fleet budget \"records\": redis at fake:0 cannot be \
         reached: connection refused"
    );
    let asked = server.0.calls.load(Relaxed);
    assert!(records.acquire().await.is_err());
    assert_eq!(server.0.calls.load(Relaxed), asked, "skipped while down");
    assert_eq!(records.snapshot().unavailable, 2);
    server.0.down.store(false, Relaxed);
    tokio::time::sleep(ms(200)).await;
    assert!(
        records.acquire().await.is_ok(),
        "asks again after retry_after"
    );
    assert!(!a.snapshot().redis_down);
}

#[tokio::test(start_paused = true)]
async fn a_slow_server_counts_as_down_after_the_round_trip_timeout() {
    let server = Shared::default();
    let a = store(&server, 2, Fail::Local(1));
    let records = budget(&a, 2, 1000);
    server.0.delay_ms.store(5000, Relaxed);
    let start = Instant::now();
    let permit = records.acquire().await.unwrap();
    assert_eq!(
        start.elapsed(),
        ms(100 + 400),
        "one round-trip timeout, then the fallback once the outage is a lease and a third old"
    );
    assert!(Fallback::gave(permit.lease().unwrap()));
    let start = Instant::now();
    assert_eq!(
        records.acquire().await.unwrap_err(),
        AcquireError::PermitTimeout
    );
    assert_eq!(
        start.elapsed(),
        ms(1000),
        "the local limit waits within the deadline"
    );
    drop(permit);
    assert_eq!(a.snapshot().fallbacks, 1, "the calls the fallback admitted");
    assert_eq!(a.snapshot().local_held, 0);
}

#[tokio::test(start_paused = true)]
async fn shutdown_gives_back_every_lease_and_refuses_from_then_on() {
    let server = Shared::default();
    let a = store(&server, 2, Fail::Closed);
    let records = budget(&a, 2, 1000);
    let running = records.acquire().await.unwrap();
    let done = records.acquire().await.unwrap();
    let waiter = tokio::spawn({
        let records = records.clone();
        async move { records.acquire().await.map(drop) }
    });
    settle().await;
    // Dropped, its release is on its way in the background, not answered yet.
    server.0.delay_ms.store(50, Relaxed);
    drop(done);
    a.shutdown().await;
    assert_eq!(server.0.holders("records"), 0, "nothing left in the server");
    assert!(running.lease().unwrap().is_lost(), "its holder is told");
    let err = waiter.await.unwrap().unwrap_err();
    assert_eq!(
        err.to_string(),
        "the permit store is unavailable: fleet budget \"records\": the store is shut down"
    );
    assert!(records.acquire().await.is_err());
    let sent = server.0.calls.load(Relaxed);
    drop(running);
    settle().await;
    assert_eq!(
        server.0.calls.load(Relaxed),
        sent,
        "a lost lease sends nothing"
    );
    assert_eq!(a.snapshot().released, 2);
}

#[tokio::test(start_paused = true)]
async fn the_last_handle_dropped_sends_the_releases_still_on_their_way() {
    let server = Shared::default();
    let a = store(&server, 2, Fail::Closed);
    let records = budget(&a, 2, 1000);
    let permit = records.acquire().await.unwrap();
    settle().await;
    server.0.delay_ms.store(50, Relaxed);
    // The background release has not run when every handle goes, as when the process ends.
    drop(permit);
    drop(records);
    drop(a);
    assert_eq!(server.0.holders("records"), 0);
    assert_eq!(server.0.blocking_releases.load(Relaxed), 1);
    // A store whose releases were all answered sends nothing at drop.
    let b = store(&server, 2, Fail::Closed);
    let records = budget(&b, 2, 1000);
    server.0.delay_ms.store(0, Relaxed);
    drop(records.acquire().await.unwrap());
    settle().await;
    drop(records);
    drop(b);
    assert_eq!(server.0.blocking_releases.load(Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn waiters_of_every_process_are_served_in_arrival_order() {
    let server = Shared::default();
    let holder = store(&server, 1, Fail::Closed);
    let lone = store(&server, 1, Fail::Closed);
    let crowd = store(&server, 1, Fail::Closed);
    let held = budget(&holder, 1, 10_000).acquire_owned().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    // One waiter in one process arrives first; twelve in another come after it.
    for (n, store) in std::iter::once(&lone).chain([&crowd; 12]).enumerate() {
        let (records, order) = (budget(store, 20, 10_000), order.clone());
        tasks.push(tokio::spawn(async move {
            let permit = records.acquire().await.unwrap();
            order.lock().unwrap().push(n);
            tokio::time::sleep(ms(10)).await;
            drop(permit);
        }));
        tokio::time::sleep(ms(1)).await;
    }
    assert_eq!(server.0.queued("records"), 13);
    drop(held);
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..13).collect::<Vec<_>>());
    assert_eq!(server.0.queued("records"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_gives_up_leaves_the_queue() {
    let server = Shared::default();
    let a = store(&server, 1, Fail::Closed);
    let held = budget(&a, 1, 1000).acquire_owned().await.unwrap();
    let b = store(&server, 1, Fail::Closed);
    assert_eq!(
        budget(&b, 1, 50).acquire().await.unwrap_err(),
        AcquireError::PermitTimeout
    );
    let records = budget(&b, 1, 1000);
    let cancelled = tokio::time::timeout(ms(50), records.acquire()).await;
    assert!(cancelled.is_err());
    settle().await;
    assert_eq!(server.0.queued("records"), 0);
    drop(held);
    settle().await;
    assert_eq!(
        server.0.holders("records"),
        0,
        "nobody was handed the permit"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_acquire_releases_its_id_in_the_background() {
    let server = Shared::default();
    let a = store(&server, 1, Fail::Closed);
    let records = budget(&a, 1, 1000);
    server.0.delay_ms.store(50, Relaxed);
    // Cancelled while its script is on the way: the outcome is unknown, so the id is
    // released.
    let attempt = tokio::time::timeout(ms(20), records.acquire()).await;
    assert!(attempt.is_err());
    settle().await;
    assert_eq!(
        server.0.released.load(Relaxed),
        1,
        "the unheard-of lease went back"
    );
    settle().await;
    assert_eq!(server.0.holders("records"), 0);
    assert_eq!(records.in_flight(), 0);
}

/// While Redis is away, a lease not renewed is lost exactly one lease after its last
/// confirmation, and no process admits locally until its outage is a lease and a third old: the
/// leases others took before the outage are lost by then (and their calls dropped, with
/// `on_lost = "cancel"`).
#[tokio::test(start_paused = true)]
async fn the_local_fallback_admits_nothing_until_the_leases_from_before_the_outage_are_lost() {
    let server = Shared::default();
    let (a, b) = (
        store(&server, 2, Fail::Local(1)),
        store(&server, 2, Fail::Local(1)),
    );
    let (ra, rb) = (budget(&a, 2, 10_000), budget(&b, 2, 10_000));
    // a's renewal rounds start now; b has met the budget.
    drop(ra.acquire().await.unwrap());
    drop(rb.acquire().await.unwrap());
    // a takes the limit between two of its renewal rounds (every 100 ms).
    tokio::time::sleep(ms(50)).await;
    let granted = Instant::now();
    let held = [
        ra.acquire_owned().await.unwrap(),
        ra.acquire_owned().await.unwrap(),
    ];
    tokio::time::sleep(ms(10)).await;
    server.0.down.store(true, Relaxed);
    let down = Instant::now();
    let b_waits = tokio::spawn({
        let rb = rb.clone();
        async move {
            let permit = rb.acquire_owned().await.unwrap();
            (Instant::now(), permit)
        }
    });
    while !held.iter().all(|p| p.lease().unwrap().is_lost()) {
        tokio::time::sleep(ms(1)).await;
    }
    let lost = Instant::now();
    assert!(
        lost - granted <= ms(301),
        "lost {:?} after its grant, not at its expiry",
        lost - granted
    );
    let (admitted, permit) = b_waits.await.unwrap();
    assert!(Fallback::gave(permit.lease().unwrap()));
    assert_eq!(
        admitted - down,
        ms(400),
        "a lease and a third into b's outage"
    );
    assert!(admitted > lost);
    // a still runs its 2 calls (kept, with `on_lost = "keep"`): they fill its local limit of 1.
    assert!(tokio::time::timeout(ms(500), ra.acquire()).await.is_err());
    drop(held);
    let local = ra.acquire().await.unwrap();
    assert!(Fallback::gave(local.lease().unwrap()));
}
