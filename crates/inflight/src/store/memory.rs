//! [`MemoryStore`]: shared permits kept in this process.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::{Lease, Store, StoreError, StoreFuture};

/// A [`Store`] in this process: `n` permits shared by every budget built with it, served in the
/// order callers asked (tokio's fair semaphore).
#[derive(Debug)]
pub struct MemoryStore {
    permits: Semaphore,
    next: AtomicU64,
}

impl MemoryStore {
    /// A store of `n` permits.
    ///
    /// # Panics
    ///
    /// Panics if `n` is above tokio's [`Semaphore::MAX_PERMITS`].
    pub fn new(n: usize) -> MemoryStore {
        MemoryStore {
            permits: Semaphore::new(n),
            next: AtomicU64::new(0),
        }
    }

    /// Permits not leased right now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

impl Store for MemoryStore {
    fn acquire<'a>(
        &'a self,
        _budget: &'a str,
        deadline: Option<Instant>,
    ) -> StoreFuture<'a, Result<Lease, StoreError>> {
        Box::pin(async move {
            let permit = match deadline {
                Some(at) => tokio::time::timeout_at(at, self.permits.acquire())
                    .await
                    .map_err(|_| StoreError::Timeout)?,
                None => self.permits.acquire().await,
            };
            permit
                .map_err(|e| StoreError::unavailable(e.to_string()))?
                .forget();
            Ok(Lease::new(self.next.fetch_add(1, Relaxed).to_string()))
        })
    }

    fn release(&self, _budget: &str, _lease: Lease) {
        self.permits.add_permits(1);
    }
}
