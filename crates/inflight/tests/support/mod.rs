//! Helpers shared by the budget tests.

#![allow(dead_code)]

use std::time::Duration;

use inflight::{Budget, BudgetConfig, Classes};

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn budget(config: BudgetConfig) -> Budget {
    Budget::new("test", config).expect("a valid test budget")
}

/// The same budget with a single priority class, which must behave as one without classes.
pub fn one_class(config: BudgetConfig) -> Budget {
    budget(config.classes(Classes::new().class("only", 1)))
}

/// Lets every task that can run, run, without advancing paused time.
pub async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}
