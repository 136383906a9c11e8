//! A steady load through fleet budgets, for the fault tests: callers that each take a permit,
//! make one call at an [`Observer`](super::Observer), give it back, and go again until stopped,
//! with the moment of every grant and every refusal counted by kind.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inflight::{AcquireError, Budget};

use super::{held_call, ms};

#[derive(Debug, Default)]
struct Counts {
    ok: AtomicU64,
    unavailable: AtomicU64,
    timeouts: AtomicU64,
    other: AtomicU64,
}

/// Callers running until [`Load::stop`].
pub struct Load {
    grants: Arc<Mutex<Vec<Instant>>>,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What a load saw.
#[derive(Debug)]
pub struct Report {
    /// When each permit was granted, in order.
    pub grants: Vec<Instant>,
    pub ok: u64,
    pub unavailable: u64,
    pub timeouts: u64,
    pub other: u64,
}

impl Load {
    /// `callers` callers on each of `budgets`, each call held `hold` at `observer`.
    pub fn start(budgets: &[Budget], callers: usize, observer: &str, hold: Duration) -> Load {
        let grants = Arc::new(Mutex::new(Vec::new()));
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for budget in budgets {
            for _ in 0..callers {
                let (budget, observer) = (budget.clone(), observer.to_string());
                let (grants, counts, stop) = (grants.clone(), counts.clone(), stop.clone());
                tasks.push(tokio::spawn(async move {
                    while !stop.load(Relaxed) {
                        match budget.acquire().await {
                            Ok(permit) => {
                                grants.lock().unwrap().push(Instant::now());
                                counts.ok.fetch_add(1, Relaxed);
                                held_call(&observer, budget.name(), hold).await;
                                drop(permit);
                            }
                            Err(e) => {
                                let counter = match e {
                                    AcquireError::Unavailable(_) => &counts.unavailable,
                                    AcquireError::PermitTimeout => &counts.timeouts,
                                    _ => &counts.other,
                                };
                                counter.fetch_add(1, Relaxed);
                                // Refused at once while Redis is away: not a tight loop.
                                tokio::time::sleep(ms(20)).await;
                            }
                        }
                    }
                }));
            }
        }
        Load {
            grants,
            counts,
            stop,
            tasks,
        }
    }

    /// Grants so far.
    pub fn granted(&self) -> usize {
        self.grants.lock().unwrap().len()
    }

    /// Stops the callers (each finishes its call in progress, or its wait) and reports.
    pub async fn stop(self) -> Report {
        self.stop.store(true, Relaxed);
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
        }
        let mut grants = self.grants.lock().unwrap().clone();
        grants.sort();
        Report {
            grants,
            ok: self.counts.ok.load(Relaxed),
            unavailable: self.counts.unavailable.load(Relaxed),
            timeouts: self.counts.timeouts.load(Relaxed),
            other: self.counts.other.load(Relaxed),
        }
    }
}

impl Report {
    /// The longest stretch without a grant between `from` and the last grant: how long
    /// grants stopped after a fault at `from`.
    pub fn longest_gap_after(&self, from: Instant) -> Duration {
        let mut last = from;
        let mut longest = Duration::ZERO;
        for &at in self.grants.iter().filter(|&&at| at >= from) {
            longest = longest.max(at - last);
            last = at;
        }
        longest
    }

    /// The counts, for a failure message or a line of output.
    pub fn summary(&self) -> String {
        format!(
            "{} granted, {} refused unavailable, {} timed out, {} other",
            self.ok, self.unavailable, self.timeouts, self.other
        )
    }

    /// Grants after `at`.
    pub fn granted_after(&self, at: Instant) -> usize {
        self.grants.iter().filter(|&&g| g > at).count()
    }
}
