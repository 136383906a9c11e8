//! [`Adaptive`]: the settings of a limit that learns, as a [`BudgetConfig`](crate::BudgetConfig)
//! and a budgets file name them.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::{Aimd, Limit, Vegas};

/// Which algorithm an adaptive limit runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// [`Aimd`]: loss-based; moves only on overload signals and on use.
    Aimd,
    /// [`Vegas`]: latency-based; keeps the dependency's queue short, and also cuts on overload.
    #[default]
    Vegas,
}

impl Algorithm {
    /// The name a budgets file uses: `aimd` or `vegas`.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Aimd => "aimd",
            Algorithm::Vegas => "vegas",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algorithm {
    type Err = String;

    fn from_str(s: &str) -> Result<Algorithm, String> {
        match s {
            "aimd" => Ok(Algorithm::Aimd),
            "vegas" => Ok(Algorithm::Vegas),
            other => Err(format!(
                "unknown algorithm {other:?} (expected \"aimd\" or \"vegas\")"
            )),
        }
    }
}

/// A limit that learns, between `min` and the budget's `max_concurrent`, starting at `initial`.
///
/// The defaults suit a dependency that holds a handful of calls: `min = 1` (a floor of 20, as
/// some libraries default to, is above what a 6-slot system of record takes) and `initial = 4`.
///
/// **Cold start.** Before its first answer a budget has learnt nothing, and an initial limit
/// sent all at once reaches a dependency that refuses beyond a small burst (a rate quota) before
/// any refusal can be heard. So until the first call ends, however it ends, a budget lets
/// [`COLD_START_BURST`](Adaptive::COLD_START_BURST) calls out at once and spreads the rest of its
/// initial limit evenly over [`cold_start`](Adaptive::cold_start) (default
/// [`DEFAULT_COLD_START`](Adaptive::DEFAULT_COLD_START), 8 ms: the 60 calls after the burst of an
/// initial 64 go about 133 µs apart). A dependency that refuses at once is heard after a handful
/// of calls; a healthy one sees the whole initial limit within the spread. The first answer ends
/// it for good (a retry-after then starts the budget's pace); callers who will not wait
/// ([`Budget::try_acquire`](crate::Budget::try_acquire)) are refused with
/// [`TryAcquireError::Paused`](crate::TryAcquireError::Paused) between two of its slots.
///
/// ```
/// use std::time::Duration;
/// use inflight::limit::Adaptive;
///
/// let quick = Adaptive::aimd().initial(64).cold_start(Duration::from_millis(2));
/// assert_eq!(quick.cold_start_spread(), Duration::from_millis(2));
/// // All 64 at once, as before there was a cold start.
/// let blind = Adaptive::aimd().initial(64).cold_start(Duration::ZERO);
/// assert!(blind.cold_start_spread().is_zero());
/// ```
///
/// ```
/// use inflight::limit::{Adaptive, Algorithm};
/// use inflight::{Budget, BudgetConfig};
///
/// // Up to 64 calls at once, learnt from latency; start at 4.
/// let config = BudgetConfig::new(64).adaptive(Adaptive::vegas());
/// let budget = Budget::new("records", config).unwrap();
/// assert_eq!(budget.limit(), 4);
/// assert_eq!(budget.config().max_concurrent(), 64);
/// assert_eq!(budget.config().adaptive_limit().unwrap().algorithm(), Algorithm::Vegas);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adaptive {
    algorithm: Algorithm,
    min: usize,
    initial: usize,
    backoff: Option<f64>,
    cold_start: Duration,
    probe_hold: u32,
}

impl Adaptive {
    /// The default spread of a cold start: the initial limit goes out over 8 ms.
    pub const DEFAULT_COLD_START: Duration = Duration::from_millis(8);
    /// The longest cold start a budget accepts.
    pub const MAX_COLD_START: Duration = Duration::from_secs(1);
    /// The calls a cold start lets out at once, before it spaces the others.
    pub const COLD_START_BURST: u32 = 4;

    /// The most round trips a budgets file's `probe_hold` may give.
    pub const MAX_PROBE_HOLD: u32 = 10_000;

    /// The default floor.
    pub const DEFAULT_MIN: usize = 1;
    /// The default starting limit.
    pub const DEFAULT_INITIAL: usize = 4;

    /// An adaptive limit running `algorithm`, with the default floor and start.
    pub fn new(algorithm: Algorithm) -> Adaptive {
        Adaptive {
            algorithm,
            min: Adaptive::DEFAULT_MIN,
            initial: Adaptive::DEFAULT_INITIAL,
            backoff: None,
            cold_start: Adaptive::DEFAULT_COLD_START,
            probe_hold: 0,
        }
    }

    /// [`Aimd`], loss-based.
    pub fn aimd() -> Adaptive {
        Adaptive::new(Algorithm::Aimd)
    }

    /// [`Vegas`], latency-based.
    pub fn vegas() -> Adaptive {
        Adaptive::new(Algorithm::Vegas)
    }

    /// The limit never goes below this.
    pub fn min(mut self, min: usize) -> Adaptive {
        self.min = min;
        self
    }

    /// The limit to start from (clamped to the budget's `max_concurrent`).
    pub fn initial(mut self, initial: usize) -> Adaptive {
        self.initial = initial;
        self
    }

    /// The factor the limit is multiplied by on overload (0.5 to 0.95).
    pub fn backoff(mut self, backoff: f64) -> Adaptive {
        self.backoff = Some(backoff);
        self
    }

    /// The time over which a cold start spreads the initial limit (see the cold start above);
    /// `Duration::ZERO` sends the whole initial limit at once. At most
    /// [`MAX_COLD_START`](Adaptive::MAX_COLD_START).
    pub fn cold_start(mut self, spread: Duration) -> Adaptive {
        self.cold_start = spread;
        self
    }

    /// For [`Aimd`]: the most round trips an overload holds the limit below the calls in
    /// flight that drew it ([`Aimd::probe_hold`]); 0, the default, holds nothing. At most
    /// [`MAX_PROBE_HOLD`](Adaptive::MAX_PROBE_HOLD).
    pub fn probe_hold(mut self, max_round_trips: u32) -> Adaptive {
        self.probe_hold = max_round_trips;
        self
    }

    /// The probe hold's most round trips (0: none).
    pub fn probe_hold_round_trips(&self) -> u32 {
        self.probe_hold
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The floor.
    pub fn min_limit(&self) -> usize {
        self.min
    }

    /// The starting limit.
    pub fn initial_limit(&self) -> usize {
        self.initial
    }

    /// The factor applied on overload, if set (otherwise the algorithm's default).
    pub fn backoff_factor(&self) -> Option<f64> {
        self.backoff
    }

    /// The cold start's spread.
    pub fn cold_start_spread(&self) -> Duration {
        self.cold_start
    }

    /// The time between two cold-start calls after the burst, for a budget starting at
    /// `initial` permits; `None` when there is nothing to spread.
    pub(crate) fn cold_start_spacing(&self, initial: usize) -> Option<Duration> {
        let spaced = initial.checked_sub(Adaptive::COLD_START_BURST as usize)?;
        if spaced == 0 || self.cold_start.is_zero() {
            return None;
        }
        Some(self.cold_start / u32::try_from(spaced).unwrap_or(u32::MAX))
    }

    /// Checks the settings against the budget's `max`; the field and what is wrong.
    pub(crate) fn check(&self, max: usize) -> Result<(), (&'static str, String)> {
        if self.min == 0 {
            return Err(("min", "must be at least 1, got 0".into()));
        }
        if self.min > max {
            return Err((
                "min",
                format!("must be at most max ({max}), got {}", self.min),
            ));
        }
        if self.initial < self.min || self.initial > max {
            return Err((
                "initial",
                format!(
                    "must be between min ({}) and max ({max}), got {}",
                    self.min, self.initial
                ),
            ));
        }
        if let Some(b) = self.backoff {
            if !(0.5..=0.95).contains(&b) {
                return Err(("backoff", format!("must be between 0.5 and 0.95, got {b}")));
            }
        }
        if self.probe_hold > 0 && self.algorithm != Algorithm::Aimd {
            return Err((
                "probe_hold",
                "only algorithm = \"aimd\" takes this (vegas already probes by latency)".into(),
            ));
        }
        if self.probe_hold > Adaptive::MAX_PROBE_HOLD {
            return Err((
                "probe_hold",
                format!(
                    "must be at most {} round trips, got {}",
                    Adaptive::MAX_PROBE_HOLD,
                    self.probe_hold
                ),
            ));
        }
        if self.cold_start > Adaptive::MAX_COLD_START {
            return Err((
                "cold_start",
                format!(
                    "must be at most {:?}, got {:?}",
                    Adaptive::MAX_COLD_START,
                    self.cold_start
                ),
            ));
        }
        Ok(())
    }

    /// The limit these settings describe, for a budget of at most `max` calls.
    pub(crate) fn build(&self, max: usize) -> Box<dyn Limit> {
        match self.algorithm {
            Algorithm::Aimd => {
                let l = Aimd::new(self.min, self.initial, max).probe_hold(self.probe_hold);
                Box::new(match self.backoff {
                    Some(b) => l.backoff(b),
                    None => l,
                })
            }
            Algorithm::Vegas => {
                let l = Vegas::new(self.min, self.initial, max);
                Box::new(match self.backoff {
                    Some(b) => l.backoff(b),
                    None => l,
                })
            }
        }
    }
}
