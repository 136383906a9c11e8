//! [`FanoutStrategy`]: the ways to send many jobs to the downstream, and [`run_once`], which
//! sends them one way.

use std::convert::Infallible;
use std::sync::Arc;

use futures::stream::StreamExt;
use inflight::{Budget, BudgetConfig};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use super::downstream::Downstream;
use super::error::FanoutError;

/// A way to send `jobs` calls to the downstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FanoutStrategy {
    /// `join_all` of every call: no bound.
    Unbounded,
    /// `futures::stream::iter(..).map(call).buffer_unordered(limit)`.
    BufferUnordered,
    /// A tokio `Semaphore` acquired inside each of the futures given to one `join_all`.
    Semaphore,
    /// A `JoinSet` with a task spawned per job, each acquiring a shared semaphore's permit.
    Joinset,
    /// `inflight::Budget::call` inside each of the futures given to one `join_all`.
    Budget,
}

impl FanoutStrategy {
    pub const ALL: [FanoutStrategy; 5] = [
        FanoutStrategy::Unbounded,
        FanoutStrategy::BufferUnordered,
        FanoutStrategy::Semaphore,
        FanoutStrategy::Joinset,
        FanoutStrategy::Budget,
    ];

    /// The name on the command line and in JSON (`buffer_unordered`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FanoutStrategy::Unbounded => "unbounded",
            FanoutStrategy::BufferUnordered => "buffer_unordered",
            FanoutStrategy::Semaphore => "semaphore",
            FanoutStrategy::Joinset => "joinset",
            FanoutStrategy::Budget => "budget",
        }
    }

    /// The strategy called `s`, if there is one.
    pub fn parse(s: &str) -> Option<FanoutStrategy> {
        FanoutStrategy::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Whether it holds calls in flight to a limit (all but `unbounded`).
    pub fn is_bounded(self) -> bool {
        self != FanoutStrategy::Unbounded
    }

    /// What the strategy builds before the first call returns: how many, and of what.
    pub fn up_front(self, jobs: usize, limit: usize) -> (usize, &'static str) {
        match self {
            FanoutStrategy::Unbounded | FanoutStrategy::Semaphore | FanoutStrategy::Budget => {
                (jobs, "futures")
            }
            FanoutStrategy::BufferUnordered => (limit.min(jobs), "futures"),
            FanoutStrategy::Joinset => (jobs, "tasks"),
        }
    }
}

/// Sends `jobs` calls to `d` with `strategy`, at most `limit` at once for the bounded ones.
pub async fn run_once(
    strategy: FanoutStrategy,
    d: &Arc<Downstream>,
    jobs: usize,
    limit: usize,
) -> Result<(), FanoutError> {
    match strategy {
        FanoutStrategy::Unbounded => {
            futures::future::join_all((0..jobs).map(|id| d.call(id))).await;
        }
        FanoutStrategy::BufferUnordered => {
            futures::stream::iter(0..jobs)
                .map(|id| d.call(id))
                .buffer_unordered(limit)
                .collect::<Vec<()>>()
                .await;
        }
        FanoutStrategy::Semaphore => {
            let sem = Semaphore::new(limit);
            futures::future::join_all((0..jobs).map(|id| {
                let sem = &sem;
                async move {
                    let _permit = sem.acquire().await.expect("the semaphore is never closed");
                    d.call(id).await;
                }
            }))
            .await;
        }
        FanoutStrategy::Joinset => {
            let sem = Arc::new(Semaphore::new(limit));
            let mut set = tokio::task::JoinSet::new();
            for id in 0..jobs {
                let sem = Arc::clone(&sem);
                let d = Arc::clone(d);
                set.spawn(async move {
                    let _permit = sem.acquire().await.expect("the semaphore is never closed");
                    d.call(id).await;
                });
            }
            while let Some(done) = set.join_next().await {
                done?;
            }
        }
        FanoutStrategy::Budget => {
            let budget = Budget::new("downstream", BudgetConfig::new(limit))
                .map_err(|e| FanoutError::Invalid(e.to_string()))?;
            let results = futures::future::join_all((0..jobs).map(|id| {
                let budget = &budget;
                async move {
                    budget
                        .call(|| async move {
                            d.call(id).await;
                            Ok::<(), Infallible>(())
                        })
                        .await
                }
            }))
            .await;
            if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
                return Err(FanoutError::Budget(e.to_string()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::fanout::Delay;

    #[test]
    fn strategies_parse_by_name() {
        for s in FanoutStrategy::ALL {
            assert_eq!(FanoutStrategy::parse(s.name()), Some(s));
        }
        assert_eq!(FanoutStrategy::parse("nope"), None);
    }

    /// In paused time every strategy completes all calls, the bounded ones never exceed the
    /// limit and reach it, and the waves take exactly ceil(jobs/limit) delays.
    #[tokio::test(start_paused = true)]
    async fn bounded_strategies_hold_the_limit_in_paused_time() {
        let delay = Duration::from_millis(20);
        for s in FanoutStrategy::ALL {
            let d = Arc::new(Downstream::new(delay, Delay::Tokio));
            let t = tokio::time::Instant::now();
            run_once(s, &d, 50, 8).await.unwrap();
            let took = t.elapsed();
            assert_eq!(d.calls(), 50, "{}", s.name());
            assert_eq!(d.in_flight(), 0, "{}", s.name());
            if s.is_bounded() {
                assert_eq!(d.peak(), 8, "{}", s.name());
                // 7 waves of 20 ms; paused time may add a millisecond per wave for tick rounding.
                assert!(
                    took >= Duration::from_millis(140) && took <= Duration::from_millis(147),
                    "{}: {took:?}",
                    s.name()
                );
            } else {
                assert_eq!(d.peak(), 50);
                assert!(took <= Duration::from_millis(21), "{took:?}");
            }
        }
    }
}
