//! Helpers shared by the budget tests.

#![allow(dead_code)]

use std::time::Duration;

use inflight::{Budget, BudgetConfig};

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn budget(config: BudgetConfig) -> Budget {
    Budget::new("test", config).expect("a valid test budget")
}

/// Lets every task that can run, run, without advancing paused time.
pub async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}
