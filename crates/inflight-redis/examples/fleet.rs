//! One budget of 6 writes shared by every process that runs this, through Redis.
//!
//! ```text
//! redis-server --port 6379 --save '' &
//! cargo run -p inflight-redis --example fleet -- redis://127.0.0.1:6379   # in several shells
//! ```

use std::sync::Arc;
use std::time::Duration;

use inflight::{Budget, CallError};
use inflight_redis::{Fail, RedisFleet};

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

    let writes = (0..24).map(|i| {
        let records = records.clone();
        async move {
            records
                .call(|| async move {
                    tokio::time::sleep(Duration::from_millis(100)).await; // the write
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
    let s = store.snapshot();
    println!(
        "fleet leases taken {}, fallbacks {}, refused {}, mean redis round trip {:?}",
        s.acquired, s.fallbacks, s.unavailable, s.mean_round_trip
    );
    Ok(())
}
