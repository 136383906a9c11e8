//! Redisson's distributed semaphore tests (`RedissonSemaphoreTest`,
//! `RedissonPermitExpirableSemaphoreTest`), ported to inflight's fleet budgets against a real
//! `redis-server` on loopback. Several `RedisFleet`s stand for several processes' clients of one
//! Redis. Each test names the Redisson case it ports.
//!
//! Not ported (no inflight equivalent): `addPermits`, `drainPermits`, `availablePermits`,
//! `trySetPermits`/`setPermits` (the limit is each store's own setting, not state in Redis),
//! `acquire(n)`/`release(n)`/`tryAcquire(n)` (one permit per call), `releaseIfExists`,
//! `updateLeaseTime`/per-permit lease times (one lease per fleet), `getInClusterNameMapper`,
//! semaphore `delete`/`expire`/`isExists`, and `release()` without an acquire (a release needs a
//! lease the store handed out).

mod support;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inflight::store::Store;
use inflight::{AcquireError, Budget};
use inflight_redis::{Fail, RedisFleet, RedisStore};
use support::{fleet, ms, Link, RedisServer};
use tokio::time::{timeout, Instant};

fn budget(name: &str, local: usize, permit_timeout: Duration, store: &RedisStore) -> Budget {
    Budget::builder(name)
        .max_concurrent(local)
        .permit_timeout(permit_timeout)
        .store(Arc::new(store.clone()))
        .build()
        .unwrap()
}

/// `n` permits of `b`, each granted (in the order asked).
async fn hold(b: &Budget, n: usize) -> Vec<inflight::OwnedPermit> {
    futures::future::join_all((0..n).map(|_| b.acquire_owned()))
        .await
        .into_iter()
        .map(|r| r.expect("each permit asked for is granted"))
        .collect()
}

/// `b.acquire_owned()` as a `'static` future.
async fn owned(b: Budget) -> Result<inflight::OwnedPermit, AcquireError> {
    b.acquire_owned().await
}

fn zcard(server: &RedisServer, key: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

fn queued(server: &RedisServer, name: &str) -> usize {
    zcard(server, &format!("inflight:{{{name}}}:queue"))
}

/// Waits (up to `within`) until Redis holds no lease and no waiter of `name`.
async fn until_empty(server: &RedisServer, name: &str, within: Duration) -> (usize, usize) {
    let start = Instant::now();
    loop {
        let state = (server.holders(name).len(), queued(server, name));
        if state == (0, 0) || start.elapsed() > within {
            return state;
        }
        tokio::time::sleep(ms(20)).await;
    }
}

/// Waits (up to `within`) until `name`'s queue in Redis holds `n` waiters.
async fn until_queued(server: &RedisServer, name: &str, n: usize, within: Duration) {
    let start = Instant::now();
    while queued(server, name) != n {
        assert!(
            start.elapsed() < within,
            "{n} waiters did not reach the queue within {within:?} (queued: {})",
            queued(server, name)
        );
        tokio::time::sleep(ms(10)).await;
    }
}

/// Counts callers inside the section and the highest count seen.
#[derive(Default)]
struct Section {
    now: AtomicUsize,
    peak: AtomicUsize,
    entered: AtomicUsize,
}

impl Section {
    async fn run(&self, hold: Duration) {
        let now = self.now.fetch_add(1, SeqCst) + 1;
        self.peak.fetch_max(now, SeqCst);
        self.entered.fetch_add(1, SeqCst);
        if hold.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(hold).await;
        }
        self.now.fetch_sub(1, SeqCst);
    }
}

/// `testConcurrencyLoop_MultiInstance`, `testConcurrency_MultiInstance_1_permits`,
/// `testConcurrency_SingleInstance`: many tasks on several fleets loop acquire / hold /
/// release; the permits held never exceed the limit, every call gets in, nothing is left.
async fn concurrency_loop(limit: usize, fleets: usize, tasks: usize, iterations: usize) {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let section = Arc::new(Section::default());
    let mut stores = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..fleets {
        let store = fleet(&server, ms(5000)).store(limit, Fail::Closed);
        let b = budget("sem", tasks, ms(30_000), &store);
        stores.push(store);
        for _ in 0..tasks {
            let (b, section) = (b.clone(), section.clone());
            handles.push(tokio::spawn(async move {
                for _ in 0..iterations {
                    let permit = b.acquire().await.expect("a permit within 30 s");
                    assert!(!permit.lease().unwrap().is_lost());
                    section.run(ms(2)).await;
                    drop(permit);
                }
            }));
        }
    }
    timeout(
        Duration::from_secs(120),
        futures::future::try_join_all(handles),
    )
    .await
    .expect("the loops end within 120 s")
    .unwrap();
    assert_eq!(
        section.entered.load(SeqCst),
        fleets * tasks * iterations,
        "every call got in"
    );
    assert!(
        section.peak.load(SeqCst) <= limit,
        "at most {limit} at once across the fleets, saw {}",
        section.peak.load(SeqCst)
    );
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
    for store in &stores {
        let s = store.snapshot();
        assert_eq!(s.held, 0, "{s:?}");
        assert_eq!(s.acquired, s.released, "{s:?}");
        assert_eq!(s.lost, 0, "{s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_loop_multi_instance_one_permit() {
    concurrency_loop(1, 4, 4, 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_loop_multi_instance_three_permits() {
    concurrency_loop(3, 4, 4, 20).await;
}

/// `testBlockingAcquire`: a release by one process wakes a waiter of another; then the fleet is
/// full again (`tryAcquire` is false).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_wakes_a_waiter_of_another_fleet() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let a = fleet(&server, ms(5000)).store(1, Fail::Closed);
    let b = fleet(&server, ms(5000)).store(1, Fail::Closed);
    let a_budget = budget("sem", 1, ms(1000), &a);
    let b_budget = budget("sem", 1, ms(10_000), &b);
    let held = a_budget.acquire_owned().await.unwrap();
    let waiter = tokio::spawn({
        let b_budget = b_budget.clone();
        async move { b_budget.acquire_owned().await }
    });
    until_queued(&server, "sem", 1, ms(3000)).await;
    assert!(!waiter.is_finished());
    let released = Instant::now();
    drop(held);
    let got = timeout(ms(3000), waiter)
        .await
        .expect("the release wakes the other fleet's waiter")
        .unwrap()
        .unwrap();
    assert!(
        released.elapsed() < ms(1500),
        "woken by the release, not by a later ask: {:?}",
        released.elapsed()
    );
    assert_eq!(server.holders("sem").len(), 1);
    let short = budget("sem", 1, ms(200), &a);
    assert_eq!(
        short.acquire().await.unwrap_err(),
        AcquireError::PermitTimeout
    );
    drop(got);
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
}

/// `testTryAcquire`, `testTryNAcquire`, `testExpireTryAcquire`: a timed acquire on a full fleet
/// returns at its deadline, not much later; one whose deadline is past a release 500 ms away
/// gets in at the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_with_a_timeout_returns_in_time() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let a = fleet(&server, ms(5000)).store(1, Fail::Closed);
    let b = fleet(&server, ms(5000)).store(1, Fail::Closed);
    let held = owned(budget("sem", 1, ms(1000), &a)).await.unwrap();
    for wait in [ms(100), ms(500), ms(1200)] {
        let start = Instant::now();
        let err = timeout(ms(5000), budget("sem", 1, wait, &b).acquire())
            .await
            .expect("bounded")
            .unwrap_err();
        let took = start.elapsed();
        assert_eq!(err, AcquireError::PermitTimeout);
        assert!(
            took >= wait - ms(10) && took < wait + ms(800),
            "a {wait:?} deadline returned after {took:?}"
        );
    }
    assert_eq!(
        queued(&server, "sem"),
        0,
        "waiters that gave up left the queue"
    );
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(ms(500)).await;
        drop(held);
    });
    let start = Instant::now();
    let got = timeout(ms(5000), owned(budget("sem", 1, ms(2000), &b)))
        .await
        .expect("bounded")
        .expect("the release came before the deadline");
    let took = start.elapsed();
    assert!(
        took >= ms(400) && took < ms(1500),
        "got in at the release (500 ms), took {took:?}"
    );
    releaser.await.unwrap();
    drop(got);
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
}

/// A waiter that gave up is not handed the next release: the next caller of another fleet gets
/// the permit at once (not after a lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gave_up_does_not_take_the_next_release() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let a = fleet(&server, ms(10_000)).store(1, Fail::Closed);
    let b = fleet(&server, ms(10_000)).store(1, Fail::Closed);
    let c = fleet(&server, ms(10_000)).store(1, Fail::Closed);
    let held = owned(budget("sem", 1, ms(1000), &a)).await.unwrap();
    let gave_up = budget("sem", 1, ms(300), &b).acquire().await.unwrap_err();
    assert_eq!(gave_up, AcquireError::PermitTimeout);
    drop(held);
    let got = timeout(ms(5000), owned(budget("sem", 1, ms(2000), &c)))
        .await
        .expect("bounded")
        .expect("the permit is free: nobody else waits");
    drop(got);
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
}

/// Runs a holder on a runtime of its own, in a thread, then stops that runtime without
/// releasing (its renewals and connections die with it): a process that died holding.
fn die_holding(url: String, lease: Duration, limit: usize, name: &'static str) {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let fleet = RedisFleet::builder(&url)
                .lease(lease)
                .op_timeout(ms(300))
                .retry_after(ms(200))
                .build()
                .unwrap();
            let store = fleet.store(limit, Fail::Closed);
            let b = budget(name, limit, ms(2000), &store);
            for _ in 0..limit {
                std::mem::forget(b.acquire_owned().await.unwrap());
            }
            std::mem::forget(fleet);
        });
        rt.shutdown_background();
    })
    .join()
    .unwrap();
}

/// `testExpire`, `testExpiration`: a holder that dies without releasing has its permit
/// reclaimed one lease after its last renewal, by a caller of another fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_permit_is_reclaimed_after_the_lease() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let lease = ms(1500);
    let died = Instant::now();
    die_holding(server.url(), lease, 1, "sem");
    assert_eq!(server.holders("sem").len(), 1);
    let b = RedisFleet::builder(&server.url())
        .lease(lease)
        .build()
        .unwrap()
        .store(1, Fail::Closed);
    let got = timeout(ms(8000), owned(budget("sem", 1, ms(6000), &b)))
        .await
        .expect("bounded")
        .expect("the dead holder's permit comes back within its lease");
    let took = died.elapsed();
    assert!(
        took >= ms(800) && took < lease + ms(1500),
        "reclaimed about a lease after the death, took {took:?}"
    );
    assert_eq!(b.snapshot().reclaimed, 1);
    assert_eq!(server.holders("sem").len(), 1);
    drop(got);
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
}

/// The same with waiters of two fleets queued before the holder died: each is served in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_queued_before_a_holder_died_get_its_permits() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let lease = ms(1500);
    die_holding(server.url(), lease, 2, "sem");
    assert_eq!(server.holders("sem").len(), 2);
    let b = fleet(&server, lease).store(2, Fail::Closed);
    let c = fleet(&server, lease).store(2, Fail::Closed);
    let start = Instant::now();
    let wb = tokio::spawn(owned(budget("sem", 2, ms(6000), &b)));
    let wc = tokio::spawn(owned(budget("sem", 2, ms(6000), &c)));
    let (gb, gc) = timeout(ms(8000), async { (wb.await, wc.await) })
        .await
        .expect("bounded");
    let (gb, gc) = (
        gb.unwrap().expect("b got in"),
        gc.unwrap().expect("c got in"),
    );
    assert!(start.elapsed() < lease + ms(2000), "{:?}", start.elapsed());
    assert_eq!(server.holders("sem").len(), 2);
    drop((gb, gc));
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
}

/// A holder whose fleet shuts down gives its permit back: a waiter of another fleet gets it at
/// once, well before a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_fleet_shut_down_frees_its_permit_at_once() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let a_fleet = fleet(&server, ms(10_000));
    let a = a_fleet.store(1, Fail::Closed);
    let b = fleet(&server, ms(10_000)).store(1, Fail::Closed);
    let held = owned(budget("sem", 1, ms(1000), &a)).await.unwrap();
    let waiter = tokio::spawn(owned(budget("sem", 1, ms(5000), &b)));
    until_queued(&server, "sem", 1, ms(3000)).await;
    let start = Instant::now();
    a_fleet.shutdown().await;
    let got = timeout(ms(6000), waiter)
        .await
        .expect("bounded")
        .unwrap()
        .expect("the shut down holder's permit goes to the waiter");
    assert!(start.elapsed() < ms(2000), "{:?}", start.elapsed());
    assert!(held.lease().unwrap().is_lost());
    drop(held); // gives back nothing: it is b's now
    tokio::time::sleep(ms(300)).await;
    assert_eq!(server.holders("sem").len(), 1, "b still holds");
    drop(got);
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
}

/// `testReleaseWithoutPermits`, `testReleaseManyNotExistOrExpired`: a lease given back twice
/// frees one permit, not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_released_twice_counts_once() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let a = fleet(&server, ms(5000)).store(2, Fail::Closed);
    let b = fleet(&server, ms(5000)).store(2, Fail::Closed);
    let deadline = || Some(Instant::now() + ms(2000));
    let first = a.acquire("sem", deadline()).await.unwrap();
    let kept = a.acquire("sem", deadline()).await.unwrap();
    a.release("sem", first.clone());
    a.release("sem", first.clone());
    // The same id released from another process's store changes nothing either.
    b.release("sem", first);
    tokio::time::sleep(ms(300)).await;
    assert_eq!(server.holders("sem"), vec![kept.id().to_string()]);
    let one = b.acquire("sem", deadline()).await.unwrap();
    let err = b
        .acquire("sem", Some(Instant::now() + ms(300)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, inflight::store::StoreError::Timeout),
        "the limit of 2 holds: {err:?}"
    );
    assert_eq!(a.snapshot().held, 1);
    assert_eq!(a.snapshot().released, 1);
    b.release("sem", one);
    a.release("sem", kept);
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
}

/// `testReleaseExpired`, `testReleaseManyExpiredDoesNotThrow`: a holder cut off from Redis past
/// its lease loses it to a caller of another fleet; giving the lost lease back afterwards does
/// not free the new holder's permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_an_expired_lease_frees_nothing_of_the_new_holder() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let lease = ms(1200);
    let link = Link::start(&server.addr());
    let a = RedisFleet::builder(&link.url())
        .lease(lease)
        .op_timeout(ms(300))
        .retry_after(ms(200))
        .build()
        .unwrap()
        .store(1, Fail::Closed);
    let b = fleet(&server, lease).store(1, Fail::Closed);
    let c = fleet(&server, lease).store(1, Fail::Closed);
    let held = owned(budget("sem", 1, ms(1000), &a)).await.unwrap();
    link.stall();
    let got = timeout(ms(6000), owned(budget("sem", 1, ms(5000), &b)))
        .await
        .expect("bounded")
        .expect("the stalled holder's lease expires");
    // Wait for the stalled holder to see its lease lost on its own clock.
    let start = Instant::now();
    while !held.lease().unwrap().is_lost() && start.elapsed() < ms(4000) {
        tokio::time::sleep(ms(20)).await;
    }
    assert!(held.lease().unwrap().is_lost());
    link.resume();
    drop(held);
    tokio::time::sleep(ms(500)).await;
    assert_eq!(server.holders("sem").len(), 1, "b's lease is still there");
    let err = budget("sem", 1, ms(300), &c).acquire().await.unwrap_err();
    assert_eq!(err, AcquireError::PermitTimeout, "the limit of 1 holds");
    drop(got);
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
}

/// `testGetLeaseTime`, `testExpire`: a held lease's expiry in Redis stays about a lease ahead
/// while its holder runs (renewals), well past the first lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_holder_keeps_its_lease_renewed() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let lease = ms(900);
    let a = fleet(&server, lease).store(1, Fail::Closed);
    let b = fleet(&server, lease).store(1, Fail::Closed);
    let held = owned(budget("sem", 1, ms(1000), &a)).await.unwrap();
    tokio::time::sleep(lease * 3).await;
    assert!(!held.lease().unwrap().is_lost());
    let err = budget("sem", 1, ms(300), &b).acquire().await.unwrap_err();
    assert_eq!(
        err,
        AcquireError::PermitTimeout,
        "still held after 3 leases"
    );
    let (secs, micros): (u64, u64) = {
        let t: Vec<u64> = redis::cmd("TIME").query(&mut server.conn()).unwrap();
        (t[0], t[1])
    };
    let now_ms = secs * 1000 + micros / 1000;
    let expiry: f64 = redis::cmd("ZSCORE")
        .arg("inflight:{sem}:holders")
        .arg(held.lease().unwrap().id())
        .query(&mut server.conn())
        .unwrap();
    let ahead = expiry as i64 - now_ms as i64;
    assert!(
        ahead > 0 && ahead <= lease.as_millis() as i64 + 50,
        "expires within a lease from now: {ahead} ms"
    );
    drop(held);
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
}

/// `testReducePermits`, `testSetPermits` (as configuration, not `addPermits`): the processes
/// restarted with a lower limit admit that many; one with a higher limit admits more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_after_the_limit_is_lowered_and_raised() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let old = fleet(&server, ms(5000));
    let old_store = old.store(3, Fail::Closed);
    let old_budget = budget("sem", 3, ms(1000), &old_store);
    let held: Vec<_> = hold(&old_budget, 3).await;
    drop(held);
    old.shutdown().await;
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
    // Lowered to 1.
    let low = fleet(&server, ms(5000)).store(1, Fail::Closed);
    let low_budget = budget("sem", 4, ms(300), &low);
    let one = low_budget.acquire_owned().await.unwrap();
    assert_eq!(
        low_budget.acquire().await.unwrap_err(),
        AcquireError::PermitTimeout
    );
    drop(one);
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
    // Raised to 4.
    let high = fleet(&server, ms(5000)).store(4, Fail::Closed);
    let high_budget = budget("sem", 8, ms(300), &high);
    let four: Vec<_> = hold(&high_budget, 4).await;
    assert_eq!(
        high_budget.acquire().await.unwrap_err(),
        AcquireError::PermitTimeout
    );
    drop(four);
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
}

/// Redisson's fair semaphore order (`RedissonFairLock`/`testConcurrency*` with a queue): waiters
/// of three fleets that reached the queue one after another are served in that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_several_fleets_are_served_in_arrival_order() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let holder = fleet(&server, ms(5000)).store(1, Fail::Closed);
    let held = budget("sem", 1, ms(1000), &holder)
        .acquire_owned()
        .await
        .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    let mut stores = Vec::new();
    for i in 0..4 {
        let store = fleet(&server, ms(5000)).store(1, Fail::Closed);
        let b = budget("sem", 1, ms(15_000), &store);
        stores.push(store);
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let permit = b.acquire().await.expect("served within 15 s");
            order.lock().unwrap().push(i);
            tokio::time::sleep(ms(50)).await;
            drop(permit);
        }));
        until_queued(&server, "sem", i + 1, ms(3000)).await;
    }
    drop(held);
    timeout(ms(20_000), futures::future::try_join_all(waiters))
        .await
        .expect("bounded")
        .unwrap();
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
}

/// `testConcurrencyMultiPermits`, `testReleaseAsyncMany`, `testAcquireAsyncMany`: many short
/// acquire/release cycles from tasks of several fleets, with no pause, leave nothing held or
/// queued in Redis and nothing held in any store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_short_cycles_leave_nothing_held() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let section = Arc::new(Section::default());
    let mut stores = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..3 {
        let store = fleet(&server, ms(5000)).store(2, Fail::Closed);
        let b = budget("sem", 4, ms(30_000), &store);
        stores.push(store);
        for _ in 0..4 {
            let (b, section) = (b.clone(), section.clone());
            handles.push(tokio::spawn(async move {
                for _ in 0..40 {
                    let permit = b.acquire().await.expect("a permit");
                    section.run(Duration::ZERO).await;
                    drop(permit);
                }
            }));
        }
    }
    timeout(
        Duration::from_secs(90),
        futures::future::try_join_all(handles),
    )
    .await
    .expect("bounded")
    .unwrap();
    assert_eq!(section.entered.load(SeqCst), 3 * 4 * 40);
    assert!(
        section.peak.load(SeqCst) <= 2,
        "{}",
        section.peak.load(SeqCst)
    );
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
    assert_eq!(
        zcard(&server, "inflight:{sem}:queue_expiry"),
        0,
        "no stale queue leases"
    );
    for store in &stores {
        let s = store.snapshot();
        assert_eq!((s.held, s.lost), (0, 0), "{s:?}");
        assert_eq!(s.acquired, s.released, "{s:?}");
    }
}

/// The same cycles with callers that give up (short deadlines) mixed in: nothing is left held,
/// no permit is lost to a waiter that left, and the last callers get in at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cycles_with_callers_giving_up_leave_nothing_held() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let section = Arc::new(Section::default());
    let mut stores = Vec::new();
    let mut handles = Vec::new();
    for f in 0..3 {
        let store = fleet(&server, ms(10_000)).store(1, Fail::Closed);
        // One fleet's callers give up after 5 ms; the others wait.
        let wait = if f == 0 { ms(5) } else { ms(30_000) };
        let b = budget("sem", 3, wait, &store);
        stores.push(store);
        for _ in 0..3 {
            let (b, section) = (b.clone(), section.clone());
            handles.push(tokio::spawn(async move {
                for _ in 0..30 {
                    match b.acquire().await {
                        Ok(permit) => {
                            section.run(ms(1)).await;
                            drop(permit);
                        }
                        Err(AcquireError::PermitTimeout) => {}
                        Err(e) => panic!("{e:?}"),
                    }
                }
            }));
        }
    }
    timeout(
        Duration::from_secs(90),
        futures::future::try_join_all(handles),
    )
    .await
    .expect("bounded: no permit was left with a caller that gave up")
    .unwrap();
    assert!(section.peak.load(SeqCst) <= 1);
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
    let start = Instant::now();
    let last = owned(budget("sem", 1, ms(2000), &stores[1])).await;
    assert!(last.is_ok(), "{last:?}");
    assert!(start.elapsed() < ms(1000));
    drop(last);
    for store in &stores {
        let s = store.snapshot();
        assert_eq!((s.held, s.lost), (0, 0), "{s:?}");
    }
}

/// `testTryAcquire` with the caller interrupted (Redisson's `acquireAsync().cancel()`): a
/// queued waiter whose future is dropped leaves the queue; the next release goes to the caller
/// after it at once, not after a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_while_queued_leaves_the_queue() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let a = fleet(&server, ms(10_000)).store(1, Fail::Closed);
    let b = fleet(&server, ms(10_000)).store(1, Fail::Closed);
    let c = fleet(&server, ms(10_000)).store(1, Fail::Closed);
    let held = owned(budget("sem", 1, ms(1000), &a)).await.unwrap();
    let dropped = tokio::spawn(owned(budget("sem", 1, ms(30_000), &b)));
    until_queued(&server, "sem", 1, ms(3000)).await;
    let next = tokio::spawn(owned(budget("sem", 1, ms(30_000), &c)));
    until_queued(&server, "sem", 2, ms(3000)).await;
    dropped.abort();
    let _ = dropped.await;
    until_queued(&server, "sem", 1, ms(3000)).await;
    let start = Instant::now();
    drop(held);
    let got = timeout(ms(5000), next)
        .await
        .expect("the next waiter is served at the release, not after a lease")
        .unwrap()
        .unwrap();
    assert!(start.elapsed() < ms(1500), "{:?}", start.elapsed());
    assert_eq!(b.snapshot().held, 0);
    drop(got);
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
}

/// `testReducePermits` with permits still held: the limit lowered to 1 while 3 are held under
/// the old limit of 3 (a rolling change). A caller of the lowered limit waits until fewer than
/// 1 are held, also when the old limit's holders release one by one: a permit the old process
/// gives back goes to the queue's head under the head's own limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_limit_is_not_exceeded_while_old_holders_release() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let old = fleet(&server, ms(5000));
    let old_store = old.store(3, Fail::Closed);
    let old_budget = budget("sem", 3, ms(1000), &old_store);
    let mut held: Vec<_> = hold(&old_budget, 3).await;
    let low = fleet(&server, ms(5000));
    let low_store = low.store(1, Fail::Closed);
    let low_budget = budget("sem", 1, ms(10_000), &low_store);
    let waiter = tokio::spawn(owned(low_budget.clone()));
    // Queued in Redis before the old holders give anything back.
    let queued = Instant::now();
    while zcard(&server, "inflight:{sem}:queue") == 0 {
        assert!(queued.elapsed() < ms(3000), "the caller never queued");
        tokio::time::sleep(ms(10)).await;
    }
    for left in (0..3).rev() {
        drop(held.pop());
        tokio::time::sleep(ms(300)).await;
        if left > 0 {
            assert!(
                !waiter.is_finished(),
                "a caller limited to 1 was let in while {left} lease(s) of the old limit are held"
            );
        }
    }
    let permit = timeout(ms(3000), waiter)
        .await
        .expect("let in once none is held")
        .unwrap()
        .unwrap();
    drop(permit);
    low.shutdown().await;
    old.shutdown().await;
    assert_eq!(until_empty(&server, "sem", ms(3000)).await, (0, 0));
}
