//! [`FleetHealth`]: whether a fleet budget runs on Redis now, and [`HealthLog`], the lines that
//! tell an operator when that changes: what `inflight proxy` and `inflight lab run` print.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::fallback::Fail;
use crate::fleet::RedisFleet;
use crate::shares::ShareSnapshot;
use crate::snapshot::FleetSnapshot;

/// Whether a fleet budget runs on Redis now, as one process sees it: see
/// [`RedisFleet::health`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetHealth {
    /// The budget.
    pub budget: String,
    /// What it does while Redis cannot be reached.
    pub fail: Fail,
    /// Whether the last call to Redis failed: calls go to the fail policy now.
    pub redis_down: bool,
    /// Why, while `redis_down`: the last call's error, cut to 200 characters.
    pub error: Option<String>,
    /// Acquires served by the local fallback so far.
    pub fallbacks: u64,
    /// Acquires refused because Redis could not be reached so far (`fail = "closed"`).
    pub refused: u64,
    /// Calls the local fallback admitted, running now.
    pub local_held: usize,
    /// Whether the budget learns after Redis lost its state (nothing new is granted).
    pub learning: bool,
    /// Times this process saw Redis lose the budget's state.
    pub epochs_moved: u64,
}

impl FleetHealth {
    /// From a store's state: `(error, fallbacks, refused, local_held)` (Redis is down while
    /// there is an error) and `(learning, epochs_moved)`.
    pub(crate) fn new(
        budget: String,
        fail: Fail,
        (error, fallbacks, refused, local_held): (Option<String>, u64, u64, usize),
        (learning, epochs_moved): (bool, u64),
    ) -> FleetHealth {
        FleetHealth {
            budget,
            fail,
            redis_down: error.is_some(),
            error,
            fallbacks,
            refused,
            local_held,
            learning,
            epochs_moved,
        }
    }
}

/// Turns successive [`RedisFleet::health`] readings into lines for an operator: when a budget
/// loses Redis (and what its calls do then), every `repeat` while it stays lost, when Redis is
/// back, and when Redis lost the budget's state. An outage that began and ended between two
/// readings is said too, if calls went to the fail policy meanwhile (how many). Call
/// [`HealthLog::lines`] every second or so.
///
/// ```
/// use std::time::Duration;
/// use inflight_redis::{HealthLog, RedisFleet};
///
/// let fleet = RedisFleet::new("redis://127.0.0.1:6379").unwrap();
/// let mut log = HealthLog::new(Duration::from_secs(10));
/// for line in log.lines(&fleet) {
///     eprintln!("{line}");
/// }
/// ```
#[derive(Debug)]
pub struct HealthLog {
    repeat: Duration,
    last: HashMap<String, (FleetHealth, Instant)>,
}

impl HealthLog {
    /// A log that repeats a budget's lost-Redis line every `repeat` while it lasts.
    pub fn new(repeat: Duration) -> HealthLog {
        HealthLog {
            repeat,
            last: HashMap::new(),
        }
    }

    /// The lines worth printing since the last call.
    pub fn lines(&mut self, fleet: &RedisFleet) -> Vec<String> {
        let now = Instant::now();
        let mut lines = Vec::new();
        for h in fleet.health() {
            // On a cluster, the node that holds the budget, not the one the URL names.
            let place = fleet.place_of(&h.budget);
            let policy = match h.fail {
                Fail::Local(n) => {
                    let lease = fleet.lease();
                    format!(
                        "each process runs at most {} on its local fallback, once the outage is {:.1} s old (a lease and a third: the leases taken before it have expired by then)",
                        calls(n as u64),
                        (lease + lease / 3).as_secs_f64()
                    )
                }
                _ => "calls are refused (fail = closed)".to_string(),
            };
            let (was, said) = match self.last.get(&h.budget) {
                Some((was, said)) => (Some(was.clone()), *said),
                None => (None, now),
            };
            let was_down = was.as_ref().is_some_and(|w| w.redis_down);
            let (was_fallbacks, was_refused) =
                was.as_ref().map_or((0, 0), |w| (w.fallbacks, w.refused));
            let was_learning = was.as_ref().is_some_and(|w| w.learning);
            let mut say = said;
            if h.redis_down && !was_down {
                lines.push(format!(
                    "fleet budget {}: {place} cannot be reached: {}; {policy}",
                    h.budget,
                    // Without the error's own full stop: the line goes on after it.
                    h.error
                        .as_deref()
                        .unwrap_or("no answer")
                        .trim_end_matches('.')
                ));
                say = now;
            } else if h.redis_down && now >= said + self.repeat {
                let so_far = match h.fail {
                    Fail::Local(_) => format!(
                        "{} admitted on the local fallback so far (calls past its limit wait within their permit deadline)",
                        calls(h.fallbacks)
                    ),
                    _ => format!("{} refused so far", calls(h.refused)),
                };
                lines.push(format!(
                    "fleet budget {}: {place} still cannot be reached: {so_far}",
                    h.budget
                ));
                say = now;
            } else if !h.redis_down
                && !was_down
                && (h.fallbacks > was_fallbacks || h.refused > was_refused)
            {
                // Lost and back between two readings: said by what it did to calls.
                let meanwhile = match h.fail {
                    Fail::Local(_) => format!(
                        "{} admitted on the local fallback meanwhile",
                        calls(h.fallbacks - was_fallbacks)
                    ),
                    _ => format!("{} refused meanwhile", calls(h.refused - was_refused)),
                };
                lines.push(format!(
                    "fleet budget {}: {place} could not be reached for a moment and is back: {meanwhile}",
                    h.budget
                ));
            } else if !h.redis_down && was_down {
                lines.push(format!(
                    "fleet budget {}: {place} is back{}",
                    h.budget,
                    if h.local_held > 0 {
                        format!(
                            "; the {} the local fallback still runs count against the fleet's limit until they end",
                            calls(h.local_held as u64)
                        )
                    } else {
                        String::new()
                    }
                ));
            }
            if h.learning && !was_learning {
                lines.push(format!(
                    "fleet budget {}: redis lost the budget's state (a restart, a flush or a failover); nothing new is granted for one lease while every process registers the calls it runs",
                    h.budget
                ));
            }
            self.last.insert(h.budget.clone(), (h, say));
        }
        lines
    }
}

/// `n` calls, as a line says it: "1 call", "3 calls".
fn calls(n: u64) -> String {
    match n {
        1 => "1 call".to_string(),
        n => format!("{n} calls"),
    }
}

impl FleetSnapshot {
    /// Whether budget `budget` (of a store with `fail`) runs on Redis now, as this says.
    pub(crate) fn health(&self, budget: String, fail: Fail) -> FleetHealth {
        let state = (
            self.redis_error.clone(),
            self.fallbacks,
            self.unavailable,
            self.local_held,
        );
        FleetHealth::new(budget, fail, state, (self.learning, self.epochs_moved))
    }
}

impl ShareSnapshot {
    /// Whether budget `budget` (of a share store with `fail`) runs on Redis now, as this says.
    pub(crate) fn health(&self, budget: String, fail: Fail) -> FleetHealth {
        let state = (
            self.redis_error.clone(),
            self.fallbacks,
            self.unavailable,
            self.local_held,
        );
        FleetHealth::new(budget, fail, state, (self.learning, self.epochs_moved))
    }
}

impl RedisFleet {
    /// Each budget this fleet's stores have served, and whether it runs on Redis now: for a
    /// process to tell its operator when a fleet budget falls back (see [`FleetHealth`]).
    ///
    /// ```
    /// use inflight_redis::RedisFleet;
    ///
    /// let fleet = RedisFleet::new("redis://127.0.0.1:6379").unwrap();
    /// for budget in fleet.health() {
    ///     if budget.redis_down {
    ///         eprintln!("{}: redis cannot be reached, {} calls on the local fallback", budget.budget, budget.local_held);
    ///     }
    /// }
    /// ```
    pub fn health(&self) -> Vec<FleetHealth> {
        let mut all: Vec<FleetHealth> = self
            .stores()
            .into_iter()
            .map(|(budget, store)| store.snapshot().health(budget, store.fail()))
            .collect();
        all.extend(
            self.share_stores()
                .into_iter()
                .map(|(budget, store)| store.snapshot().health(budget, store.fail())),
        );
        all.sort_by(|a, b| a.budget.cmp(&b.budget));
        all
    }
}
