//! Fleet acquire+release against a local `redis-server` (started on a free loopback port), next
//! to a plain PING through the same client.
//!
//! ```text
//! cargo bench -p inflight-redis --bench fleet
//! redis-benchmark -p PORT -c 1 -n 20000 -t ping,set -q   # the server's own figure
//! ```
//!
//! Each iteration is one call of a budget whose permit is free: one script to acquire, one sent
//! in the background to release.

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use inflight::Budget;
use inflight_redis::{Fail, RedisFleet};

mod support;

use support::start_server;

fn fleet(c: &mut Criterion) {
    let Some(server) = start_server() else {
        eprintln!("skipped: redis-server is not installed or did not start");
        return;
    };
    let url = format!("redis://127.0.0.1:{}", server.1);
    eprintln!("redis-server on port {}", server.1);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let fleet = RedisFleet::new(&url).unwrap();
    let budget = Budget::builder("bench")
        .max_concurrent(64)
        .permit_timeout(Duration::from_secs(1))
        .store(Arc::new(fleet.store(64, Fail::Closed)))
        .build()
        .unwrap();
    let mut conn = runtime
        .block_on(
            redis::Client::open(url.as_str())
                .unwrap()
                .get_multiplexed_async_connection(),
        )
        .unwrap();

    let mut group = c.benchmark_group("fleet");
    group.throughput(Throughput::Elements(1));
    group.bench_function("ping/1_client", |b| {
        b.to_async(&runtime).iter(|| {
            let mut conn = conn.clone();
            async move {
                let _: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
            }
        });
    });
    group.bench_function("acquire_release/1_client", |b| {
        b.to_async(&runtime).iter(|| async {
            drop(budget.acquire().await.unwrap());
        });
    });
    for clients in [4_usize, 16] {
        group.throughput(Throughput::Elements(clients as u64));
        group.bench_function(format!("acquire_release/{clients}_clients"), |b| {
            b.to_async(&runtime).iter(|| async {
                futures::future::join_all((0..clients).map(|_| async {
                    drop(budget.acquire().await.unwrap());
                }))
                .await;
            });
        });
    }
    group.finish();
    conn = conn.clone();
    drop(conn);
}

criterion_group!(benches, fleet);
criterion_main!(benches);
