//! Redis restarted without persistence in the middle of a run, under both fail policies and
//! both lease modes, counted where the calls arrive. Each "process" is a `RedisFleet` of its
//! own (its own connection and grants channel); every call goes to an [`Observer`].

mod support;

use std::sync::Arc;
use std::time::Duration;

use inflight::store::Store;
use inflight::{Budget, OwnedPermit};
use inflight_redis::{Fail, RedisFleet};
use support::load::Load;
use support::{fleet, ms, Call, Observer, RedisServer};
use tokio::time::Instant;

const LEASE: Duration = Duration::from_millis(1500);

fn budget(limit: usize, store: Arc<dyn Store>) -> Budget {
    Budget::builder("records")
        .max_concurrent(limit)
        .permit_timeout(ms(2000))
        .store(store)
        .build()
        .unwrap()
}

/// The store of one process: a lease per call, or shares.
fn store(fleet: &RedisFleet, shares: bool, limit: usize, fail: Fail) -> Arc<dyn Store> {
    if shares {
        Arc::new(fleet.shares(limit, fail))
    } else {
        Arc::new(fleet.store(limit, fail))
    }
}

/// Three processes with 6 callers each on a budget of 6, calls of 100 ms; Redis restarts empty
/// 0.5 s in. Returns the peak at the observer and the load's report.
async fn restart_mid_run(shares: bool) -> (usize, support::load::Report) {
    let mut server = RedisServer::start().expect("checked by the caller");
    let observer = Observer::start();
    let limit = 6;
    let fleets: Vec<RedisFleet> = (0..3).map(|_| fleet(&server, LEASE)).collect();
    let budgets: Vec<Budget> = fleets
        .iter()
        .map(|f| budget(limit, store(f, shares, limit, Fail::Closed)))
        .collect();
    let load = Load::start(&budgets, 6, &observer.addr(), ms(100));
    tokio::time::sleep(ms(500)).await;
    let restarted = tokio::task::spawn_blocking(move || {
        server.restart();
        (server, Instant::now())
    })
    .await
    .unwrap();
    let (_server, at) = restarted;
    // Learning (one lease) and well past it.
    tokio::time::sleep(LEASE + ms(1500)).await;
    let report = load.stop().await;
    assert!(
        report.granted_after((at + LEASE).into_std()) > 20,
        "grants resumed after the restart: {}",
        report.summary()
    );
    for f in &fleets {
        f.shutdown().await;
    }
    (observer.served().peak, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_persistence_holds_the_limit_of_per_call_leases() {
    if RedisServer::start().is_none() {
        return;
    }
    let (peak, report) = restart_mid_run(false).await;
    println!(
        "per-call leases, restart: peak {peak}, {}",
        report.summary()
    );
    assert_eq!(peak, 6, "the limit, used and never passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_persistence_holds_the_limit_of_shares() {
    if RedisServer::start().is_none() {
        return;
    }
    let (peak, report) = restart_mid_run(true).await;
    println!("shares, restart: peak {peak}, {}", report.summary());
    assert!(peak <= 6, "the limit held: {peak}");
}

/// A permit and its call at the observer, held until dropped.
struct Running {
    call: Call,
    _permit: OwnedPermit,
}

async fn run(budget: &Budget, observer: &Observer) -> Running {
    let permit = budget.acquire_owned().await.unwrap();
    Running {
        call: Call::begin(&observer.addr()).await,
        _permit: permit,
    }
}

/// The local fallback's bound, in its worst arrangement: process A runs the whole limit (6)
/// under fleet permits when Redis restarts; B and C run nothing. While Redis is away (less than
/// the fallback's hold of a lease and a third), nobody admits locally: A's running calls fill
/// its local limit of 2, and B and C cannot see them, so they wait. Once Redis is back, A's
/// calls are registered again, and nothing new is granted until fewer than 6 run: the
/// dependency never sees more than 6.
async fn local_fallback_across_a_restart(shares: bool) {
    let mut server = RedisServer::start().expect("checked by the caller");
    let observer = Observer::start();
    let (limit, local) = (6, 2);
    // A lease long enough that A's leases outlive the outage on A's own clock: they are
    // registered again, not lost.
    let lease = ms(3000);
    let fleets: Vec<RedisFleet> = (0..3).map(|_| fleet(&server, lease)).collect();
    let budgets: Vec<Budget> = fleets
        .iter()
        .map(|f| budget(limit, store(f, shares, limit, Fail::Local(local))))
        .collect();
    let (a, b, c) = (&budgets[0], &budgets[1], &budgets[2]);
    // B and C have met the budget (they know its epoch), and hold nothing.
    for budget in [b, c] {
        let running = run(budget, &observer).await;
        running.call.end().await;
    }
    let mut a_calls = Vec::new();
    for _ in 0..limit {
        a_calls.push(run(a, &observer).await);
    }
    server.stop();
    // Redis is away: every process tries for more than it may run.
    let mut local_calls = Vec::new();
    for budget in [a, b, c] {
        for _ in 0..3 {
            let got = tokio::time::timeout(ms(100), budget.acquire_owned()).await;
            if let Ok(Ok(permit)) = got {
                local_calls.push(Running {
                    call: Call::begin(&observer.addr()).await,
                    _permit: permit,
                });
            }
        }
    }
    assert_eq!(
        local_calls.len(),
        0,
        "nothing is admitted locally within the hold (A's calls may still run)"
    );
    assert_eq!(observer.served().in_service, limit);
    // Redis comes back empty. Everything running is registered again; nothing new starts.
    let _server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .unwrap();
    let newcomer = tokio::spawn({
        let (b, observer) = (b.clone(), observer.addr());
        async move {
            loop {
                // Past the budget's learning, a fleet permit (never a local one: Redis is back
                // before B's hold ends, and a waiter asks Redis again every `retry_after`).
                if let Ok(permit) = b.acquire_owned().await {
                    assert!(
                        !permit.lease().unwrap().id().starts_with("local:"),
                        "admitted locally while Redis was back"
                    );
                    let granted = Instant::now();
                    let call = Call::begin(&observer).await;
                    return (granted, permit, call);
                }
                tokio::time::sleep(ms(50)).await;
            }
        }
    });
    tokio::time::sleep(lease + ms(1000)).await;
    assert!(
        !newcomer.is_finished(),
        "nothing new is granted while A's 6 calls run against a limit of 6"
    );
    assert_eq!(observer.served().peak, limit);
    // A's calls end: the newcomer starts once fewer than 6 run.
    let mut ended = 0;
    let mut first_ended = None;
    while !newcomer.is_finished() {
        assert!(ended < limit, "the newcomer started once A's calls ended");
        let running = a_calls.pop().unwrap();
        running.call.end().await;
        first_ended.get_or_insert_with(Instant::now);
        ended += 1;
        tokio::time::sleep(ms(400)).await;
    }
    let (granted, _permit, call) = newcomer.await.unwrap();
    // Whenever its call got to the observer: granted only once one of A's calls had ended (A's
    // permit goes back after its call ends).
    assert!(
        first_ended.is_some_and(|at| granted > at),
        "the newcomer was granted while A ran all {limit} of its calls"
    );
    call.end().await;
    assert_eq!(observer.served().peak, limit, "never more");
    for running in a_calls {
        running.call.end().await;
    }
}

/// A long outage, past the fallback's hold, with `on_lost = "cancel"`: A runs the whole limit
/// when Redis stops; its leases are lost one lease later on its own clock and its calls are
/// dropped; B and C start admitting locally only a lease and a third into the outage, after
/// that. Every process then runs its local limit: 3 x 2, never more than max(limit, processes x
/// local limit) = 6 at the dependency. Once Redis is back, the local calls are registered.
async fn local_fallback_through_a_long_outage(shares: bool) {
    let mut server = RedisServer::start().expect("checked by the caller");
    let observer = Observer::start();
    let (limit, local) = (6, 2);
    let fleets: Vec<RedisFleet> = (0..3).map(|_| fleet(&server, LEASE)).collect();
    let budgets: Vec<Budget> = fleets
        .iter()
        .map(|f| {
            Budget::builder("records")
                .max_concurrent(limit)
                .permit_timeout(ms(10_000))
                .on_lost(inflight::OnLost::Cancel)
                .store(store(f, shares, limit, Fail::Local(local)))
                .build()
                .unwrap()
        })
        .collect();
    let (a, b, c) = (&budgets[0], &budgets[1], &budgets[2]);
    for budget in [b, c] {
        let running = run(budget, &observer).await;
        running.call.end().await;
    }
    // A runs the whole limit in calls that would last 20 s.
    let a_calls: Vec<_> = (0..limit)
        .map(|_| {
            let (a, observer) = (a.clone(), observer.addr());
            tokio::spawn(async move {
                a.call(|| async {
                    support::call(&observer, ms(20_000)).await;
                    Ok::<(), std::io::Error>(())
                })
                .await
            })
        })
        .collect();
    observer.until(ms(5000), "A's calls", |s| s.in_service == limit);
    server.stop();
    let stopped = Instant::now();
    // Every process wants more than it may run: calls of 300 ms, for 2 lease and a half.
    let wanting: Vec<_> = [a, b, c]
        .into_iter()
        .enumerate()
        .flat_map(|(p, budget)| (0..4).map(move |_| (p, budget.clone())))
        .map(|(p, budget)| {
            let observer = observer.addr();
            tokio::spawn(async move {
                let mut local = 0;
                let until = Instant::now() + LEASE * 5 / 2;
                while Instant::now() < until {
                    if let Ok(permit) = budget.acquire().await {
                        assert!(permit.lease().unwrap().id().starts_with("local:"));
                        local += 1;
                        support::call(&observer, ms(300)).await;
                    }
                }
                (p, local)
            })
        })
        .collect();
    let mut cancelled = 0;
    for call in a_calls {
        if let Err(inflight::CallError::LeaseLost) = call.await.unwrap() {
            cancelled += 1;
        }
    }
    assert_eq!(
        cancelled, limit,
        "A's calls were dropped when their leases were lost"
    );
    assert!(
        stopped.elapsed() <= LEASE + ms(700),
        "A's leases were lost {:?} into the outage",
        stopped.elapsed()
    );
    let mut per_process = [0; 3];
    for w in wanting {
        let (p, local) = w.await.unwrap();
        per_process[p] += local;
    }
    assert!(
        per_process.iter().all(|n| *n >= 2),
        "every process ran its local limit once the hold had passed: {per_process:?}"
    );
    let served = observer.served();
    println!(
        "long outage ({}): peak {}, local calls per process {per_process:?}",
        if shares { "shares" } else { "per-call leases" },
        served.peak
    );
    assert_eq!(
        served.peak,
        limit,
        "never more than max(limit, processes x local limit); at the peak: {:?}",
        observer.at_peak()
    );
    for f in &fleets {
        f.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_outage_with_cancel_holds_the_larger_of_the_limit_and_the_local_limits() {
    if RedisServer::start().is_none() {
        return;
    }
    local_fallback_through_a_long_outage(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_through_a_long_outage_with_cancel_hold_the_larger_of_the_limit_and_the_local_limits(
) {
    if RedisServer::start().is_none() {
        return;
    }
    local_fallback_through_a_long_outage(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_fallback_counts_running_calls_and_they_are_registered_after_a_restart() {
    if RedisServer::start().is_none() {
        return;
    }
    local_fallback_across_a_restart(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_count_local_calls_against_the_limit_after_a_restart() {
    if RedisServer::start().is_none() {
        return;
    }
    local_fallback_across_a_restart(true).await;
}
