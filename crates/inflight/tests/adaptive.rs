//! The adaptive limits on paused tokio time: synthetic latency and overload streams, and a
//! simulated dependency that serves a few calls at once, queues a few more and refuses the rest.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use inflight::limit::{Adaptive, Aimd, Limit, Outcome, Sample, Vegas};
use inflight::{Budget, BudgetConfig, Budgets};
use support::ms;
use tokio::sync::Semaphore;
use tokio::time::sleep;

fn feed(limit: &mut dyn Limit, latency: Duration, outcome: Outcome, n: usize) {
    for _ in 0..n {
        let in_flight = limit.current();
        limit.on_sample(&Sample::new(latency, in_flight, outcome));
    }
}

/// Feeds `n` samples, advancing paused time by `latency` after each batch of `limit` samples, as a
/// dependency serving `limit` calls at once would.
async fn feed_in_rounds(limit: &mut dyn Limit, latency: Duration, outcome: Outcome, rounds: usize) {
    for _ in 0..rounds {
        sleep(latency).await;
        let n = limit.current();
        feed(limit, latency, outcome, n);
    }
}

fn both(min: usize, initial: usize, max: usize) -> [(&'static str, Box<dyn Limit>); 2] {
    [
        ("aimd", Box::new(Aimd::new(min, initial, max))),
        ("vegas", Box::new(Vegas::new(min, initial, max))),
    ]
}

#[tokio::test(start_paused = true)]
async fn each_backs_off_under_overload_and_recovers_when_it_ends() {
    for (name, mut limit) in both(1, 16, 64) {
        feed_in_rounds(&mut *limit, ms(30), Outcome::Success, 5).await;
        let before = limit.current();
        assert!(before >= 16, "{name}: grew while in use, got {before}");
        feed_in_rounds(&mut *limit, ms(30), Outcome::Overload, 10).await;
        let backed_off = limit.current();
        assert!(backed_off < before / 2, "{name}: {before} -> {backed_off}");
        feed_in_rounds(&mut *limit, ms(30), Outcome::Success, 40).await;
        assert!(
            limit.current() > backed_off * 2,
            "{name}: recovered only to {} from {backed_off}",
            limit.current()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn each_stays_inside_min_and_max() {
    for (name, mut limit) in both(3, 5, 9) {
        feed_in_rounds(&mut *limit, ms(10), Outcome::Success, 200).await;
        assert_eq!(limit.current(), 9, "{name}: capped at max");
        feed_in_rounds(&mut *limit, ms(10), Outcome::Overload, 200).await;
        assert_eq!(limit.current(), 3, "{name}: floored at min");
        // Wildly varying latencies never push it out either.
        for i in 0..500u64 {
            let n = limit.current();
            limit.on_sample(&Sample::new(ms(1 + (i * 37) % 400), n, Outcome::Success));
            assert!(
                (3..=9).contains(&limit.current()),
                "{name}: {}",
                limit.current()
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn neither_drifts_upward_under_steady_overload_or_steady_timeouts() {
    for (name, mut limit) in both(1, 20, 100) {
        // Every call times out at the same 2 s: no volatility, but every one is an overload.
        feed_in_rounds(&mut *limit, ms(2000), Outcome::Overload, 50).await;
        assert_eq!(limit.current(), 1, "{name}: steady timeouts");
    }
    for (name, mut limit) in both(1, 20, 100) {
        // Modest steady overload: one call in ten refused, the rest succeed at the same latency.
        let mut seen = Vec::new();
        for round in 0..200 {
            sleep(ms(50)).await;
            let n = limit.current();
            for i in 0..n {
                let outcome = if (round * 7 + i) % 10 == 0 {
                    Outcome::Overload
                } else {
                    Outcome::Success
                };
                limit.on_sample(&Sample::new(ms(50), n, outcome));
            }
            seen.push(limit.current());
        }
        let late = seen[150..].iter().max().unwrap();
        assert!(
            *late <= 20,
            "{name}: climbed to {late} under steady overload"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn vegas_does_not_collapse_after_one_lucky_fast_sample() {
    let mut limit = Vegas::new(1, 8, 64);
    feed_in_rounds(&mut limit, ms(100), Outcome::Success, 6).await;
    let settled = limit.current();
    // One call answered from a cache in 1 ms among calls that take 100 ms.
    limit.on_sample(&Sample::new(ms(1), settled, Outcome::Success));
    feed_in_rounds(&mut limit, ms(100), Outcome::Success, 6).await;
    assert!(
        limit.current() >= settled,
        "{settled} -> {} after one fast sample",
        limit.current()
    );
    assert!(limit.baseline().unwrap() >= ms(90));
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_overloads_costs_one_cut_per_round_trip() {
    for (name, mut limit) in both(1, 20, 100) {
        sleep(ms(100)).await;
        // Twenty calls granted together all come back 503 together.
        feed(&mut *limit, ms(100), Outcome::Overload, 20);
        // One cut of each one's default backoff: AIMD to three quarters, Vegas to half.
        let once = if name == "vegas" { 10 } else { 15 };
        assert_eq!(limit.current(), once, "{name}: one cut, not twenty");
    }
}

#[tokio::test(start_paused = true)]
async fn neither_grows_while_the_limit_is_not_in_use() {
    for (name, mut limit) in both(1, 10, 100) {
        for _ in 0..200 {
            sleep(ms(10)).await;
            limit.on_sample(&Sample::new(ms(10), 2, Outcome::Success));
        }
        assert_eq!(limit.current(), 10, "{name}");
    }
}

/// A dependency on paused time: serves `capacity` calls at once for `service` each, lets `queue`
/// more wait, and answers 503 at once beyond that.
struct Dependency {
    serving: Semaphore,
    in_system: AtomicUsize,
    peak: AtomicUsize,
    refused: AtomicUsize,
    served: AtomicUsize,
    capacity: AtomicUsize,
    queue: usize,
    service: Duration,
}

impl Dependency {
    fn new(capacity: usize, queue: usize, service: Duration) -> Arc<Dependency> {
        Arc::new(Dependency {
            serving: Semaphore::new(capacity),
            in_system: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            served: AtomicUsize::new(0),
            capacity: AtomicUsize::new(capacity),
            queue,
            service,
        })
    }

    async fn call(&self) -> u16 {
        let now = self.in_system.fetch_add(1, SeqCst) + 1;
        if now > self.capacity.load(SeqCst) + self.queue {
            self.in_system.fetch_sub(1, SeqCst);
            self.refused.fetch_add(1, SeqCst);
            return 503;
        }
        self.peak.fetch_max(now, SeqCst);
        let permit = self.serving.acquire().await.unwrap();
        sleep(self.service).await;
        drop(permit);
        self.in_system.fetch_sub(1, SeqCst);
        self.served.fetch_add(1, SeqCst);
        200
    }
}

fn classify(status: &Result<u16, ()>) -> Outcome {
    match status {
        Ok(503 | 429) | Err(_) => Outcome::Overload,
        Ok(_) => Outcome::Success,
    }
}

/// `workers` tasks each make `calls` calls through `budget` to `dep`, one after another.
async fn drive(budget: &Budget, dep: &Arc<Dependency>, workers: usize, calls: usize) {
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (budget, dep) = (budget.clone(), dep.clone());
            tokio::spawn(async move {
                for _ in 0..calls {
                    let dep = dep.clone();
                    let _ = budget
                        .call_with(classify, || async move { Ok(dep.call().await) })
                        .await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn vegas_finds_a_six_slot_dependency_without_refusals() {
    let dep = Dependency::new(6, 6, ms(150));
    let budget = Budget::new("records", BudgetConfig::new(64).adaptive(Adaptive::vegas())).unwrap();
    let start = tokio::time::Instant::now();
    drive(&budget, &dep, 64, 20).await;
    let took = start.elapsed();
    let served = dep.served.load(SeqCst);
    assert_eq!(served + dep.refused.load(SeqCst), 64 * 20);
    assert_eq!(dep.refused.load(SeqCst), 0, "no 503s");
    assert!(dep.peak.load(SeqCst) <= 12);
    // The bound is 6 at a time, 150 ms each: 1280 calls need 32 s. Allow a tenth for learning.
    let bound = ms(150).mul_f64(64.0 * 20.0 / 6.0);
    assert!(took < bound.mul_f64(1.1), "took {took:?}, bound {bound:?}");
    let l = budget.limit();
    assert!((6..=10).contains(&l), "settled at {l}");
}

#[tokio::test(start_paused = true)]
async fn aimd_backs_off_a_refusing_dependency_and_keeps_refusals_rare() {
    let dep = Dependency::new(6, 6, ms(150));
    let budget = Budget::new("records", BudgetConfig::new(64).adaptive(Adaptive::aimd())).unwrap();
    drive(&budget, &dep, 64, 20).await;
    let refused = dep.refused.load(SeqCst);
    let served = dep.served.load(SeqCst);
    assert_eq!(served + refused, 64 * 20);
    assert!(
        refused * 20 < served,
        "{refused} refused against {served} served"
    );
    assert!(budget.limit() <= 16, "limit {}", budget.limit());
}

#[tokio::test(start_paused = true)]
async fn vegas_follows_a_capacity_that_drops_and_comes_back() {
    let dep = Dependency::new(6, 6, ms(100));
    let budget = Budget::new("records", BudgetConfig::new(64).adaptive(Adaptive::vegas())).unwrap();
    drive(&budget, &dep, 64, 10).await;
    let healthy = budget.limit();
    // Capacity drops to 3: take three serving slots away for the next stretch.
    let taken = dep.serving.acquire_many(3).await.unwrap();
    dep.capacity.store(3, SeqCst);
    drive(&budget, &dep, 64, 10).await;
    let degraded = budget.limit();
    assert!(
        degraded < healthy,
        "limit {healthy} while healthy, {degraded} while degraded"
    );
    assert!(degraded <= 7, "degraded limit {degraded}");
    drop(taken);
    dep.capacity.store(6, SeqCst);
    drive(&budget, &dep, 64, 10).await;
    assert!(budget.limit() > degraded, "recovered to {}", budget.limit());
    let refused = dep.refused.load(SeqCst);
    assert!(refused * 100 <= 64 * 30, "{refused} refusals");
}

#[test]
fn a_budgets_file_can_choose_an_adaptive_limit() {
    let budgets = Budgets::from_toml_str(
        r#"
        [budgets.records]
        limit = "adaptive"
        algorithm = "aimd"
        min = 2
        max = 24
        initial = 6
        backoff = 0.5

        [budgets.enrichment]
        limit = "adaptive"
        "#,
    )
    .unwrap();
    let records = budgets.get("records").unwrap();
    assert_eq!(records.limit(), 6);
    assert_eq!(records.config().max_concurrent(), 24);
    let a = records.config().adaptive_limit().unwrap();
    assert_eq!((a.min_limit(), a.backoff_factor()), (2, Some(0.5)));
    let enrichment = budgets.get("enrichment").unwrap();
    assert_eq!(enrichment.config().max_concurrent(), 100);
    assert_eq!(enrichment.limit(), 4);

    for (text, field, says) in [
        ("limit = \"adaptive\"\nmin = 0", "min", "at least 1"),
        (
            "limit = \"adaptive\"\nmax = 4\nmin = 5",
            "min",
            "at most max",
        ),
        (
            "limit = \"adaptive\"\nmax = 4\ninitial = 9",
            "initial",
            "between",
        ),
        (
            "limit = \"adaptive\"\nalgorithm = \"tcp\"",
            "algorithm",
            "unknown algorithm",
        ),
        (
            "limit = \"adaptive\"\nbackoff = 1.5",
            "backoff",
            "between 0.5 and 0.95",
        ),
        (
            "limit = \"adaptive\"\nmax = 4\nmax_concurrent = 4",
            "max",
            "not both",
        ),
        (
            "max_concurrent = 4\nmin = 2",
            "min",
            "only an adaptive limit",
        ),
        (
            "limit = \"elastic\"\nmax_concurrent = 4",
            "limit",
            "\"fixed\" or \"adaptive\"",
        ),
    ] {
        let err = Budgets::from_toml_str(&format!("[budgets.records]\n{text}")).unwrap_err();
        assert_eq!(
            err.field(),
            Some(&*format!("budgets.records.{field}")),
            "{text}"
        );
        assert!(err.to_string().contains(says), "{text}: {err}");
    }
}

#[tokio::test(start_paused = true)]
async fn limit_changes_are_recorded_for_plotting() {
    let budget = Budget::new("records", BudgetConfig::new(8).adaptive(Adaptive::aimd())).unwrap();
    let first = budget.limit_changes();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].limit, 4);
    let p = budget.acquire().await.unwrap();
    sleep(ms(5)).await;
    p.report(Outcome::Overload);
    let changes = budget.limit_changes();
    assert_eq!(changes.len(), 2);
    assert_eq!(changes[1].limit, 3);
    assert_eq!(changes[1].at - changes[0].at, ms(5));
    assert!(Budget::new("fixed", BudgetConfig::new(3))
        .unwrap()
        .limit_changes()
        .is_empty());
}

/// Drives `limit` against a dependency with no queue that serves `capacity` calls of `latency`
/// at once and refuses the rest, closed loop, for `rounds` round trips: each round the limit's
/// worth of calls goes out together and ends together. Returns (calls, refused).
async fn no_queue(
    limit: &mut dyn Limit,
    capacity: usize,
    latency: Duration,
    rounds: usize,
) -> (usize, usize) {
    let (mut calls, mut refused) = (0, 0);
    for _ in 0..rounds {
        sleep(latency).await;
        let n = limit.current();
        for in_flight in 1..=n {
            let outcome = if in_flight > capacity {
                refused += 1;
                Outcome::Overload
            } else {
                Outcome::Success
            };
            limit.on_sample(&Sample::new(latency, in_flight, outcome));
        }
        calls += n;
    }
    (calls, refused)
}

#[tokio::test(start_paused = true)]
async fn a_probe_hold_keeps_refusals_from_a_dependency_with_no_queue_rare() {
    let latency = ms(20);
    let mut plain = Aimd::new(1, 16, 32);
    let (calls, refused) = no_queue(&mut plain, 6, latency, 2_000).await;
    let plain_share = refused as f64 / calls as f64;
    assert!(plain_share > 0.03, "AIMD's sawtooth: {refused} of {calls}");

    let mut held = Aimd::new(1, 16, 32).probe_hold(64);
    let (calls, refused) = no_queue(&mut held, 6, latency, 2_000).await;
    let held_share = refused as f64 / calls as f64;
    assert!(held_share < 0.01, "held: {refused} of {calls}");
    // And it still fills the capacity: the calls per round stay at 6 nearly all the time.
    assert!(
        calls as f64 >= 0.95 * 6.0 * 2_000.0,
        "{calls} calls in 2000 rounds"
    );

    // When the capacity grows, a held limit finds it within its longest hold.
    let (_, _) = no_queue(&mut held, 12, latency, 64 + 40).await;
    assert!(
        held.current() >= 12,
        "{} after the capacity grew to 12",
        held.current()
    );
}

#[test]
fn a_probe_hold_is_aimds_and_checked() {
    let ok = Budgets::from_toml_str(
        "[budgets.r]\nlimit = \"adaptive\"\nalgorithm = \"aimd\"\nmax = 8\nprobe_hold = 64\n",
    )
    .unwrap();
    let adaptive = ok.get("r").unwrap().config().adaptive_limit().unwrap();
    assert_eq!(adaptive.probe_hold_round_trips(), 64);
    for (text, says) in [
        (
            "algorithm = \"vegas\"\nprobe_hold = 8",
            "only algorithm = \"aimd\"",
        ),
        (
            "algorithm = \"aimd\"\nprobe_hold = -1",
            "must not be negative",
        ),
        ("algorithm = \"aimd\"\nprobe_hold = 20000", "at most 10000"),
        ("algorithm = \"aimd\"\nprobe_hold = \"64\"", "whole number"),
    ] {
        let err = Budgets::from_toml_str(&format!(
            "[budgets.r]\nlimit = \"adaptive\"\nmax = 8\n{text}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("budgets.r.probe_hold") && err.contains(says),
            "{err}"
        );
    }
    let err = Budgets::from_toml_str("[budgets.r]\nmax_concurrent = 8\nprobe_hold = 4\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("budgets.r.probe_hold"), "{err}");
}
