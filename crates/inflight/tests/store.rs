//! The store seam on paused tokio time, with the in-memory store: a shared limit over several
//! budgets, the permit deadline across both waits, cancellation, and a store that is down.

mod support;

use std::sync::Arc;
use std::time::Duration;

use inflight::store::{Lease, MemoryStore, Store, StoreError, StoreFuture};
use inflight::{AcquireError, Budget, TryAcquireError};
use support::{ms, settle};
use tokio::time::Instant;

fn shared_budget(name: &str, local: usize, store: Arc<dyn Store>) -> Budget {
    Budget::builder(name)
        .max_concurrent(local)
        .permit_timeout(ms(100))
        .store(store)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn budgets_sharing_a_store_never_exceed_it_together() {
    let store = Arc::new(MemoryStore::new(3));
    let a = shared_budget("a", 2, store.clone());
    let b = shared_budget("b", 2, store.clone());
    let a1 = a.acquire().await.unwrap();
    let a2 = a.acquire().await.unwrap();
    let b1 = b.acquire().await.unwrap();
    assert_eq!(store.available(), 0);
    // b has a local permit to spare but the store has none: b waits, within its deadline.
    let start = Instant::now();
    assert_eq!(b.acquire().await.unwrap_err(), AcquireError::PermitTimeout);
    assert_eq!(start.elapsed(), ms(100));
    assert_eq!(
        b.in_flight(),
        1,
        "the local permit went back after the store timed out"
    );
    assert_eq!(b.snapshot().permit_timeouts, 1);
    drop(a1);
    let b2 = b.acquire().await.unwrap();
    assert_eq!(store.available(), 0);
    drop((a2, b1, b2));
    assert_eq!(store.available(), 3);
    assert_eq!(a.in_flight() + b.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn one_deadline_covers_the_local_wait_and_the_store_wait() {
    let store = Arc::new(MemoryStore::new(1));
    let a = shared_budget("a", 1, store.clone());
    let other = shared_budget("other", 1, store.clone());
    let held_local = a.acquire_owned().await.unwrap();
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            (a.acquire().await.map(drop), start.elapsed())
        })
    };
    settle().await;
    tokio::time::sleep(ms(60)).await;
    // The local permit frees at 60 ms, but the store's only permit is taken by someone else.
    drop(held_local);
    let held_store = other.acquire_owned().await.unwrap();
    assert_eq!(store.available(), 0);
    let (result, waited) = waiter.await.unwrap();
    assert_eq!(result.unwrap_err(), AcquireError::PermitTimeout);
    assert_eq!(waited, ms(100));
    assert_eq!(a.in_flight(), 0, "the waiter gave its local permit back");
    drop(held_store);
    assert_eq!(store.available(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_caller_cancelled_while_waiting_for_the_store_holds_nothing() {
    let store = Arc::new(MemoryStore::new(1));
    let a = shared_budget("a", 2, store.clone());
    let held = a.acquire().await.unwrap();
    let cancelled = tokio::time::timeout(ms(10), a.acquire()).await;
    assert!(cancelled.is_err());
    assert_eq!(a.in_flight(), 1);
    assert_eq!(a.snapshot().cancelled, 1);
    drop(held);
    assert_eq!(store.available(), 1);
    assert_eq!(
        a.try_acquire().unwrap_err(),
        TryAcquireError::WouldWait,
        "a store cannot be asked without waiting"
    );
}

#[derive(Debug)]
struct Down;

impl Store for Down {
    fn acquire<'a>(
        &'a self,
        _: &'a str,
        _: Option<Instant>,
    ) -> StoreFuture<'a, Result<Lease, StoreError>> {
        Box::pin(async {
            Err(StoreError::unavailable(
                "connection refused (127.0.0.1:6379)",
            ))
        })
    }

    fn release(&self, _: &str, _: Lease) {
        unreachable!("nothing was leased")
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_is_down_refuses_with_its_reason() {
    let b = shared_budget("records", 2, Arc::new(Down));
    let err = b.acquire().await.unwrap_err();
    assert!(matches!(err, AcquireError::Unavailable(_)));
    assert!(err.to_string().contains("connection refused"), "{err}");
    let s = b.snapshot();
    assert_eq!((s.unavailable, s.admitted, s.in_flight), (1, 0, 0));
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// A store whose leases it can mark lost, as a remote store does when one expires.
#[derive(Debug, Default)]
struct Forgetful {
    watches: std::sync::Mutex<Vec<inflight::store::LeaseWatch>>,
}

impl Store for Forgetful {
    fn acquire<'a>(
        &'a self,
        _budget: &'a str,
        _deadline: Option<Instant>,
    ) -> StoreFuture<'a, Result<Lease, StoreError>> {
        Box::pin(async move {
            let watch = inflight::store::LeaseWatch::new();
            self.watches.lock().unwrap().push(watch.clone());
            Ok(Lease::watched("only", watch))
        })
    }

    fn release(&self, _budget: &str, _lease: Lease) {}
}

#[tokio::test(start_paused = true)]
async fn a_holder_sees_that_its_lease_was_lost() {
    let store = Arc::new(Forgetful::default());
    let a = shared_budget("a", 1, store.clone());
    let permit = a.acquire().await.unwrap();
    let lease = permit.lease().expect("a store-backed permit holds a lease");
    assert!(!lease.is_lost());
    let waiter = {
        let lease = lease.clone();
        tokio::spawn(async move { lease.lost().await })
    };
    settle().await;
    assert!(!waiter.is_finished());
    store.watches.lock().unwrap()[0].mark_lost();
    assert!(permit.lease().unwrap().is_lost());
    waiter.await.unwrap();
    let plain = Budget::builder("plain").max_concurrent(1).build().unwrap();
    assert!(plain.acquire().await.unwrap().lease().is_none());
}

/// A budget on `store` with `on_lost`.
fn lossy_budget(store: Arc<Forgetful>, on_lost: inflight::OnLost) -> Budget {
    Budget::builder("records")
        .max_concurrent(2)
        .on_lost(on_lost)
        .store(store)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_lease_is_lost_is_dropped_when_the_budget_says_cancel() {
    let store = Arc::new(Forgetful::default());
    let b = lossy_budget(store.clone(), inflight::OnLost::Cancel);
    let ran_to_the_end = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let call = tokio::spawn({
        let (b, ran) = (b.clone(), ran_to_the_end.clone());
        async move {
            let start = Instant::now();
            let result = b
                .call(|| async move {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    ran.store(true, std::sync::atomic::Ordering::Relaxed);
                    Ok::<_, std::io::Error>(())
                })
                .await;
            (start.elapsed(), result)
        }
    });
    tokio::time::sleep(ms(100)).await;
    assert_eq!(b.in_flight(), 1, "the call runs, holding its lease");
    store.watches.lock().unwrap()[0].mark_lost();
    let (took, result) = call.await.unwrap();
    assert_eq!(took, ms(100), "dropped the moment its lease was lost");
    let err = result.unwrap_err();
    assert!(matches!(err, inflight::CallError::LeaseLost), "{err:?}");
    assert!(err.to_string().contains("lease was lost"), "{err}");
    assert!(!ran_to_the_end.load(std::sync::atomic::Ordering::Relaxed));
    assert_eq!(b.in_flight(), 0, "its permit went back");
    let s = b.snapshot();
    assert_eq!(
        (s.call_timeouts, s.calls_cancelled),
        (0, 1),
        "counted as cancelled, not as a timeout of the call"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_lease_is_lost_runs_on_by_default() {
    let store = Arc::new(Forgetful::default());
    let b = lossy_budget(store.clone(), inflight::OnLost::default());
    let call = tokio::spawn({
        let b = b.clone();
        async move {
            b.call(|| async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok::<_, std::io::Error>(7)
            })
            .await
        }
    });
    tokio::time::sleep(ms(100)).await;
    store.watches.lock().unwrap()[0].mark_lost();
    assert_eq!(call.await.unwrap().unwrap(), 7, "it ran to its end");
}
