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
/// under fleet permits when Redis restarts; B and C run nothing. While Redis is away, A admits
/// nothing locally (its 6 running calls count against its local limit of 2), B and C admit 2
/// each: 10 at the dependency, the fleet's calls plus the local limit of each process that ran
/// fewer. Once Redis is back, every one of those calls is registered, and nothing new is granted
/// until fewer than 6 run.
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
    for (budget, name) in [(a, "a"), (b, "b"), (c, "c")] {
        for _ in 0..3 {
            let got = tokio::time::timeout(ms(100), budget.acquire_owned()).await;
            if let Ok(Ok(permit)) = got {
                local_calls.push((
                    name,
                    Running {
                        call: Call::begin(&observer.addr()).await,
                        _permit: permit,
                    },
                ));
            }
        }
    }
    let per_process = |n: &str| local_calls.iter().filter(|(p, _)| *p == n).count();
    assert_eq!(
        (per_process("a"), per_process("b"), per_process("c")),
        (0, 2, 2),
        "A's running calls count against its local limit"
    );
    assert_eq!(observer.served().in_service, limit + 2 * local);
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
                // Past the fallback's pause and the budget's learning, a fleet permit.
                if let Ok(permit) = b.acquire_owned().await {
                    if !permit.lease().unwrap().id().starts_with("local:") {
                        let granted = Instant::now();
                        let call = Call::begin(&observer).await;
                        return (granted, permit, call);
                    }
                }
                tokio::time::sleep(ms(50)).await;
            }
        }
    });
    tokio::time::sleep(lease + ms(1000)).await;
    assert!(
        !newcomer.is_finished(),
        "nothing new is granted while 10 calls run against a limit of 6"
    );
    assert_eq!(observer.served().peak, limit + 2 * local);
    // The local calls end, then A's: the newcomer starts once fewer than 6 run.
    for (_, running) in local_calls {
        running.call.end().await;
    }
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
    let served = observer.served();
    assert!(
        served.in_service <= limit,
        "the newcomer started with {} at the dependency, {ended} of A's calls ended: {served:?}",
        served.in_service
    );
    call.end().await;
    assert_eq!(observer.served().peak, limit + 2 * local, "never more");
    for running in a_calls {
        running.call.end().await;
    }
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
