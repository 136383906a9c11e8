//! One budget of 6 writes shared by every process that runs this, through Redis.
//!
//! ```text
//! redis-server --port 6379 --save '' &
//! cargo run -p inflight-redis --example fleet -- redis://127.0.0.1:6379   # in several shells
//! ```
//!
//! Each process makes 24 writes of 100 ms, counts the writes in flight across the fleet on a
//! counter of its own in Redis (the peak it saw must never pass 6), gives its leases back with
//! `fleet.shutdown()` before it ends, and prints what happened to each write.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use inflight::{Budget, CallError};
use inflight_redis::{Fail, RedisFleet};

/// The counter of writes in flight across every process, kept next to the budget's keys.
const IN_FLIGHT: &str = "example:fleet:writes_in_flight";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_string());
    let fleet = RedisFleet::builder(&url)
        .lease(Duration::from_secs(5))
        .build()?;
    let store = fleet.store(6, Fail::Local(2));
    let records = Budget::builder("records")
        .max_concurrent(6)
        .permit_timeout(Duration::from_secs(2))
        .call_timeout(Duration::from_secs(1))
        .store(Arc::new(store.clone()))
        .build()?;
    let meter = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await
        .ok();
    let peak = Arc::new(AtomicI64::new(0));
    let write_micros = Arc::new(AtomicU64::new(0));

    let start = Instant::now();
    let writes = (0..24).map(|i| {
        let (records, meter) = (records.clone(), meter.clone());
        let (peak, write_micros) = (peak.clone(), write_micros.clone());
        async move {
            records
                .call(|| async move {
                    let began = Instant::now();
                    if let Some(mut meter) = meter.clone() {
                        let now: i64 = redis::cmd("INCR")
                            .arg(IN_FLIGHT)
                            .query_async(&mut meter)
                            .await
                            .unwrap_or(0);
                        peak.fetch_max(now, Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await; // the write
                    if let Some(mut meter) = meter {
                        let _: Result<i64, _> = redis::cmd("DECR")
                            .arg(IN_FLIGHT)
                            .query_async(&mut meter)
                            .await;
                    }
                    let took = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
                    write_micros.fetch_add(took, Relaxed);
                    Ok::<_, std::io::Error>(i)
                })
                .await
        }
    });
    for result in futures::future::join_all(writes).await {
        match result {
            Ok(_) => {}
            Err(CallError::Rejected(why)) => eprintln!("refused: {why}"),
            Err(e) => eprintln!("failed: {e}"),
        }
    }
    let wall = start.elapsed();
    // Every lease goes back to Redis before the process ends: the next run finds them free.
    fleet.shutdown().await;

    let b = records.snapshot();
    let refused = b.rejected + b.permit_timeouts + b.rate_limited + b.unavailable;
    println!(
        "writes ok {}, refused {refused} (queue full {}, permit timeout {}, rate limited {}, \
         redis unavailable {}), call timeout {}, failed {}",
        b.calls_ok,
        b.rejected,
        b.permit_timeouts,
        b.rate_limited,
        b.unavailable,
        b.call_timeouts,
        b.calls_error
    );
    let s = store.snapshot();
    println!(
        "fleet leases taken {}, local fallbacks {}, mean redis round trip {:?}",
        s.acquired, s.fallbacks, s.mean_round_trip
    );
    let busy = Duration::from_micros(write_micros.load(Relaxed));
    match meter {
        Some(_) => println!(
            "wall {wall:.2?}, write time {busy:.2?}, most writes in flight across the fleet {}",
            peak.load(Relaxed)
        ),
        None => println!("wall {wall:.2?}, write time {busy:.2?}"),
    }
    Ok(())
}
