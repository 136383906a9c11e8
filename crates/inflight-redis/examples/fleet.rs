//! One budget of 6 writes shared by every process that runs this, through Redis.
//!
//! ```text
//! redis-server --port 6379 --save '' &
//! cargo run -p inflight-redis --example fleet -- redis://127.0.0.1:6379   # in several shells
//! ```
//!
//! Each process makes 24 writes of 100 ms, gives its leases back with `fleet.shutdown()` before
//! it ends, and prints what happened to each write.
//!
//! Usage: `fleet [REDIS_URL] [TARGET]`. With `TARGET` (`host:port`), each write is also a TCP
//! connection to it, held for the write: it sends a line, waits for it back, and at the end
//! closes its side and waits for the target to close. Any echo server will do; the tests use
//! one that counts the writes in service across every process, to check the limit where the
//! writes arrive.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use inflight::{Budget, CallError};
use inflight_redis::{Fail, RedisFleet};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One write of `took`, at `target` when there is one.
async fn write(target: Option<&str>, took: Duration) -> std::io::Result<()> {
    let Some(target) = target else {
        tokio::time::sleep(took).await;
        return Ok(());
    };
    let mut conn = TcpStream::connect(target).await?;
    conn.write_all(b"write\n").await?;
    let mut echo = String::new();
    BufReader::new(&mut conn).read_line(&mut echo).await?;
    tokio::time::sleep(took).await;
    conn.shutdown().await?;
    conn.read_to_end(&mut Vec::new()).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_string());
    let target: Option<Arc<str>> = args.next().map(Into::into);
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
    let write_micros = Arc::new(AtomicU64::new(0));

    let start = Instant::now();
    let writes = (0..24).map(|i| {
        let (records, target, write_micros) =
            (records.clone(), target.clone(), write_micros.clone());
        async move {
            records
                .call(|| async move {
                    let began = Instant::now();
                    write(target.as_deref(), Duration::from_millis(100)).await?;
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
    println!("wall {wall:.2?}, write time {busy:.2?}");
    Ok(())
}
