//! What limits the sim's two endpoints: the system of record's capacity and queue (which a
//! scenario's schedule may change during a run), and the enrichment API's quota.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::scenario::{Phase, Quota, RecordsSpec};

/// The system of record's slots: `capacity` served at once, `queue` more waiting, 503 beyond.
#[derive(Debug)]
pub(crate) struct RecordsGate {
    slots: Arc<Semaphore>,
    capacity: AtomicU64,
    queue: AtomicU64,
    schedule: Vec<Phase>,
    time_scale: f64,
    started: AtomicBool,
}

impl RecordsGate {
    pub(crate) fn new(spec: &RecordsSpec, time_scale: f64) -> Arc<RecordsGate> {
        Arc::new(RecordsGate {
            slots: Arc::new(Semaphore::new(spec.capacity)),
            capacity: AtomicU64::new(spec.capacity as u64),
            queue: AtomicU64::new(spec.queue as u64),
            schedule: spec.schedule.clone(),
            time_scale,
            started: AtomicBool::new(false),
        })
    }

    /// Capacity and queue now.
    pub(crate) fn limits(&self) -> (u64, u64) {
        (
            self.capacity.load(Ordering::SeqCst),
            self.queue.load(Ordering::SeqCst),
        )
    }

    pub(crate) fn slots(&self) -> Arc<Semaphore> {
        self.slots.clone()
    }

    /// Starts the schedule's clock at the run's first request (once); each phase then applies at
    /// its time, scaled. A gate replaced by a scenario switch keeps its task, which then changes
    /// only the old gate.
    pub(crate) fn start_schedule(self: &Arc<Self>) {
        if self.schedule.is_empty() || self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let gate = self.clone();
        let start = Instant::now();
        tokio::spawn(async move {
            for phase in &gate.schedule {
                tokio::time::sleep_until(start + phase.at.mul_f64(gate.time_scale)).await;
                gate.apply(phase).await;
            }
        });
    }

    async fn apply(&self, phase: &Phase) {
        let (before, _) = self.limits();
        let after = phase.capacity as u64;
        // The 503 threshold moves at once; served slots follow as calls in service finish.
        self.capacity.store(after, Ordering::SeqCst);
        self.queue.store(phase.queue as u64, Ordering::SeqCst);
        if after > before {
            self.slots.add_permits((after - before) as usize);
        } else if after < before {
            let take = u32::try_from(before - after).unwrap_or(u32::MAX);
            if let Ok(taken) = self.slots.acquire_many(take).await {
                taken.forget();
            }
        }
    }
}

/// The enrichment API's quota: a GCRA that answers "no" instead of making callers wait.
#[derive(Debug)]
pub(crate) struct QuotaGate {
    interval: Duration,
    tolerance: Duration,
    tat: Mutex<Option<Instant>>,
}

impl QuotaGate {
    /// The gate for `quota` with every duration multiplied by `time_scale` (so the rate is
    /// divided by it).
    pub(crate) fn new(quota: Quota, time_scale: f64) -> QuotaGate {
        let interval = Duration::from_secs_f64(time_scale / quota.per_second);
        QuotaGate {
            interval,
            tolerance: interval.saturating_mul(quota.burst.saturating_sub(1)),
            tat: Mutex::new(None),
        }
    }

    /// Admits a call arriving now if it is within the quota (and counts it); otherwise says how
    /// long until the quota would admit one, from the gate's own state: a call that arrives after
    /// that wait is admitted unless others came first.
    pub(crate) fn admit(&self) -> Result<(), Duration> {
        let now = Instant::now();
        let mut tat = self.tat.lock().unwrap_or_else(|e| e.into_inner());
        let current = tat.unwrap_or(now);
        if let Some(earliest) = current.checked_sub(self.tolerance) {
            if now < earliest {
                return Err(earliest - now);
            }
        }
        *tat = Some(current.max(now) + self.interval);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_quota_admits_its_burst_then_its_rate() {
        let gate = QuotaGate::new(
            Quota {
                per_second: 10.0,
                burst: 2,
            },
            1.0,
        );
        assert!(gate.admit().is_ok() && gate.admit().is_ok());
        assert!(gate.admit().is_err(), "the burst is spent");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(gate.admit().is_ok());
        assert!(gate.admit().is_err());
        let mut admitted = 0;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            admitted += usize::from(gate.admit().is_ok());
        }
        assert_eq!(admitted, 10, "one per 100 ms over a second");
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_says_how_long_until_the_quota_admits() {
        let gate = QuotaGate::new(
            Quota {
                per_second: 10.0,
                burst: 2,
            },
            1.0,
        );
        assert!(gate.admit().is_ok() && gate.admit().is_ok());
        tokio::time::sleep(Duration::from_millis(30)).await;
        // Two calls at 0 ms with a burst of 2 at 10/s: the next is admitted at 100 ms.
        let wait = gate.admit().unwrap_err();
        assert_eq!(wait, Duration::from_millis(70));
        tokio::time::sleep(wait - Duration::from_millis(1)).await;
        assert_eq!(gate.admit().unwrap_err(), Duration::from_millis(1));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(gate.admit().is_ok(), "admitted once the wait is over");
        // At a time scale of 0.5 the quota is 20/s: the wait halves.
        let fast = QuotaGate::new(
            Quota {
                per_second: 10.0,
                burst: 1,
            },
            0.5,
        );
        assert!(fast.admit().is_ok());
        assert_eq!(fast.admit().unwrap_err(), Duration::from_millis(50));
    }

    #[tokio::test(start_paused = true)]
    async fn a_schedule_changes_capacity_and_queue_at_its_times() {
        let spec = RecordsSpec {
            latency: crate::scenario::ScenarioSet::builtin()
                .get("healthy")
                .unwrap()
                .records
                .latency
                .clone(),
            capacity: 6,
            queue: 6,
            schedule: vec![
                Phase {
                    at: Duration::from_secs(1),
                    capacity: 3,
                    queue: 1,
                },
                Phase {
                    at: Duration::from_secs(2),
                    capacity: 6,
                    queue: 6,
                },
            ],
        };
        let gate = RecordsGate::new(&spec, 0.5);
        gate.start_schedule();
        assert_eq!(gate.limits(), (6, 6));
        tokio::time::sleep(Duration::from_millis(510)).await;
        assert_eq!(gate.limits(), (3, 1));
        assert_eq!(gate.slots().available_permits(), 3);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(gate.limits(), (6, 6));
        assert_eq!(gate.slots().available_permits(), 6);
    }
}
