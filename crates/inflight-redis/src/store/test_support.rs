//! What the store's tests share: a store of one process on the in-memory server double, a
//! budget over it, and a few turns of the scheduler.

use std::sync::Arc;
use std::time::Duration;

use inflight::Budget;

use super::RedisStore;
use crate::engine::{Engine, Settings};
use crate::fake::Shared;
use crate::fallback::Fail;

pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One process's store on `server`, with short leases and pauses.
pub(super) fn store(server: &Shared, limit: usize, fail: Fail) -> RedisStore {
    RedisStore::from_engine(Engine::new(
        Arc::new(server.clone()),
        Settings {
            limit,
            lease: ms(300),
            fail,
            op_timeout: ms(100),
            retry_after: ms(200),
            first_pause: ms(5),
            max_pause: ms(150),
            queue_lease: ms(300),
        },
    ))
}

/// A budget `name` of `local` permits in this process over `store`, waiting `timeout` ms.
pub(super) fn budget(name: &str, store: &RedisStore, local: usize, timeout: u64) -> Budget {
    Budget::builder(name)
        .max_concurrent(local)
        .permit_timeout(ms(timeout))
        .store(Arc::new(store.clone()))
        .build()
        .unwrap()
}

pub(super) async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}
