//! Cost of one acquire + release: `Budget` against a bare `tokio::sync::Semaphore` and tower's
//! `ConcurrencyLimit` and `GlobalConcurrencyLimit` (the shared-semaphore variant) around a no-op
//! service, uncontended and with 64 tasks contending.
//!
//! `budget_call` is one [`Budget::call`] around a ready future, and `budget_layer` (with the
//! feature `tower`) one request through a `BudgetLayer` around a no-op service: the routine that
//! runs a call under its permit, on top of the acquire + release.
//!
//! `budget_classes` is the same acquire + release in a budget with two priority classes
//! (`acquire_in`, which the class queue ranks when permits run out), next to `budget`; and
//! `budget_one_class` in a budget with a single class.
//!
//! Run with `cargo bench -p inflight --bench budget` (add `--features tower` for
//! `budget_layer`); times are per acquire + release.

use std::future::{ready, Future, Ready};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use inflight::{Budget, BudgetConfig, Classes};
use tokio::runtime::Runtime;
use tokio::sync::Semaphore;
use tower::limit::{ConcurrencyLimit, GlobalConcurrencyLimitLayer};
use tower::{service_fn, Layer, Service, ServiceExt};

const LIMIT: usize = 8;
const TASKS: u64 = 64;

type Noop = tower::util::ServiceFn<fn(()) -> Ready<Result<(), ()>>>;

fn noop_service() -> ConcurrencyLimit<Noop> {
    let f: fn(()) -> Ready<Result<(), ()>> = |_| ready(Ok(()));
    ConcurrencyLimit::new(service_fn(f), LIMIT)
}

fn noop_global_service() -> ConcurrencyLimit<Noop> {
    let f: fn(()) -> Ready<Result<(), ()>> = |_| ready(Ok(()));
    GlobalConcurrencyLimitLayer::new(LIMIT).layer(service_fn(f))
}

fn budget() -> Budget {
    Budget::new("bench", BudgetConfig::new(LIMIT)).unwrap()
}

fn classed_budget() -> Budget {
    let classes = Classes::new().class("interactive", 4).class("batch", 1);
    Budget::new("bench", BudgetConfig::new(LIMIT).classes(classes)).unwrap()
}

fn one_class_budget() -> Budget {
    let classes = Classes::new().class("only", 1);
    Budget::new("bench", BudgetConfig::new(LIMIT).classes(classes)).unwrap()
}

fn current_thread() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn multi_thread() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn uncontended(c: &mut Criterion) {
    let rt = current_thread();
    let mut group = c.benchmark_group("uncontended");
    group.bench_function("semaphore", |b| {
        let sem = Semaphore::new(LIMIT);
        b.to_async(&rt).iter_custom(|iters| {
            let sem = &sem;
            async move {
                let start = Instant::now();
                for _ in 0..iters {
                    drop(sem.acquire().await.unwrap());
                }
                start.elapsed()
            }
        })
    });
    group.bench_function("budget", |b| {
        let budget = budget();
        b.to_async(&rt).iter_custom(|iters| {
            let budget = &budget;
            async move {
                let start = Instant::now();
                for _ in 0..iters {
                    drop(budget.acquire().await.unwrap());
                }
                start.elapsed()
            }
        })
    });
    for (name, make) in [
        ("budget_classes", classed_budget as fn() -> Budget),
        ("budget_one_class", one_class_budget),
    ] {
        group.bench_function(name, |b| {
            let budget = make();
            b.to_async(&rt).iter_custom(|iters| {
                let budget = &budget;
                async move {
                    let start = Instant::now();
                    for _ in 0..iters {
                        drop(budget.acquire_in("interactive").await.unwrap());
                    }
                    start.elapsed()
                }
            })
        });
    }
    group.bench_function("budget_classes_try_acquire", |b| {
        let budget = classed_budget();
        b.to_async(&rt).iter_custom(|iters| {
            let budget = &budget;
            async move {
                let start = Instant::now();
                for _ in 0..iters {
                    drop(budget.try_acquire_in("interactive").unwrap());
                }
                start.elapsed()
            }
        })
    });
    group.bench_function("budget_adaptive", |b| {
        // Started at 64 and past its cold start (one call answered): the permit path of an
        // adaptive budget that has heard from its dependency.
        let budget = Budget::new(
            "bench",
            BudgetConfig::new(64).adaptive(inflight::limit::Adaptive::aimd().initial(64)),
        )
        .unwrap();
        rt.block_on(async {
            let permit = budget.acquire().await.unwrap();
            permit.report(inflight::limit::Outcome::Success);
        });
        b.to_async(&rt).iter_custom(|iters| {
            let budget = &budget;
            async move {
                let start = Instant::now();
                for _ in 0..iters {
                    drop(budget.acquire().await.unwrap());
                }
                start.elapsed()
            }
        })
    });
    group.bench_function("budget_try_acquire", |b| {
        let budget = budget();
        b.to_async(&rt).iter_custom(|iters| {
            let budget = &budget;
            async move {
                let start = Instant::now();
                for _ in 0..iters {
                    drop(budget.try_acquire().unwrap());
                }
                start.elapsed()
            }
        })
    });
    group.bench_function("budget_call", |b| {
        let budget = budget();
        b.to_async(&rt).iter_custom(|iters| {
            let budget = &budget;
            async move {
                let start = Instant::now();
                for _ in 0..iters {
                    budget.call(|| ready(Ok::<_, ()>(()))).await.unwrap();
                }
                start.elapsed()
            }
        })
    });
    #[cfg(feature = "tower")]
    group.bench_function("budget_layer", |b| {
        let f: fn(()) -> Ready<Result<(), ()>> = |_| ready(Ok(()));
        let svc = inflight::tower::BudgetLayer::new(budget()).layer(service_fn(f));
        b.to_async(&rt).iter_custom(|iters| {
            let mut svc = svc.clone();
            async move {
                let start = Instant::now();
                for _ in 0..iters {
                    svc.ready().await.unwrap();
                    svc.call(()).await.unwrap();
                }
                start.elapsed()
            }
        })
    });
    for (name, make) in [
        (
            "tower_concurrency_limit",
            noop_service as fn() -> ConcurrencyLimit<Noop>,
        ),
        ("tower_global_concurrency_limit", noop_global_service),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_custom(|iters| async move {
                let mut svc = make();
                let start = Instant::now();
                for _ in 0..iters {
                    svc.ready().await.unwrap();
                    svc.call(()).await.unwrap();
                }
                start.elapsed()
            })
        });
    }
    group.finish();
}

/// Runs `TASKS` tasks that together do `iters` acquire + release, each holding its permit across
/// one yield so that tasks really wait for each other.
fn contended(c: &mut Criterion) {
    let rt = multi_thread();
    let mut group = c.benchmark_group("contended_64_tasks");
    group.bench_function(BenchmarkId::from_parameter("semaphore"), |b| {
        b.to_async(&rt).iter_custom(|iters| async move {
            let sem = Arc::new(Semaphore::new(LIMIT));
            contend(iters, |n| {
                let sem = sem.clone();
                async move {
                    for _ in 0..n {
                        let p = sem.acquire().await.unwrap();
                        tokio::task::yield_now().await;
                        drop(p);
                    }
                }
            })
            .await
        })
    });
    group.bench_function(BenchmarkId::from_parameter("budget"), |b| {
        b.to_async(&rt).iter_custom(|iters| async move {
            let budget = budget();
            contend(iters, |n| {
                let budget = budget.clone();
                async move {
                    for _ in 0..n {
                        let p = budget.acquire().await.unwrap();
                        tokio::task::yield_now().await;
                        drop(p);
                    }
                }
            })
            .await
        })
    });
    group.bench_function(BenchmarkId::from_parameter("budget_classes"), |b| {
        b.to_async(&rt).iter_custom(|iters| async move {
            let budget = classed_budget();
            let next = std::sync::atomic::AtomicUsize::new(0);
            // Half the tasks in each class.
            contend(iters, |n| {
                let budget = budget.clone();
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let class = if i.is_multiple_of(2) {
                    "interactive"
                } else {
                    "batch"
                };
                async move {
                    for _ in 0..n {
                        let p = budget.acquire_in(class).await.unwrap();
                        tokio::task::yield_now().await;
                        drop(p);
                    }
                }
            })
            .await
        })
    });
    for (name, make) in [
        (
            "tower_concurrency_limit",
            noop_service as fn() -> ConcurrencyLimit<Noop>,
        ),
        ("tower_global_concurrency_limit", noop_global_service),
    ] {
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.to_async(&rt).iter_custom(|iters| async move {
                let svc = make();
                contend(iters, |n| {
                    let mut svc = svc.clone();
                    async move {
                        for _ in 0..n {
                            svc.ready().await.unwrap();
                            let response = svc.call(());
                            tokio::task::yield_now().await;
                            response.await.unwrap();
                        }
                    }
                })
                .await
            })
        });
    }
    group.finish();
}

/// Spawns `TASKS` tasks made by `task(n)`, each doing `n` acquire + release so that together they
/// do at least `iters`, waits for all of them, and returns the time scaled to `iters`.
async fn contend<F, Fut>(iters: u64, task: F) -> Duration
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let per_task = iters.div_ceil(TASKS);
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS).map(|_| tokio::spawn(task(per_task))).collect();
    for t in tasks {
        t.await.unwrap();
    }
    scale(start.elapsed(), iters, per_task * TASKS)
}

/// Rounding `iters` up to a multiple of `TASKS` did `done` operations; report the time for `iters`.
fn scale(elapsed: Duration, iters: u64, done: u64) -> Duration {
    elapsed.mul_f64(iters as f64 / done as f64)
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = uncontended, contended
}
criterion_main!(benches);
