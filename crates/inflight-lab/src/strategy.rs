//! The strategies file (`lab/strategies.toml`): how many records a strategy keeps in flight and
//! which budgets it puts around its outbound calls.
//!
//! Each strategy is a top-level table named after it:
//!
//! ```toml
//! [c4]
//! description = "32 records in flight, enrichment budget 24, records budget 6"
//! records_in_flight = 32     # or "available_parallelism"
//! enrichment = 24            # Budget around enrichment calls
//! records = 6                # Budget around writes
//! # shared = 30              # or one Budget around all outbound calls
//! ```
//!
//! A [`Strategy`] and the file's [`Strategies`] are here; a dependency's gate ([`GateSpec`]) in
//! `gate_spec`, the retries ([`RetrySpec`]) in `retry`, and the file read and checked in `parse`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

mod gate_spec;
mod parse;
mod retry;

pub use self::gate_spec::{GateSpec, Peer};
pub use self::parse::parse;
pub use self::retry::{RetryBy, RetrySpec, MAX_ATTEMPTS};

/// The strategies file shipped with the lab, compiled in for runs outside the repository.
pub const BUILTIN_STRATEGIES: &str = include_str!("../lab/strategies.toml");

/// A strategies file that could not be read or is not valid.
#[derive(Debug, thiserror::Error)]
pub enum StrategyError {
    #[error("cannot read strategies file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("strategies file {path}: {message}")]
    Invalid { path: String, message: String },
    #[error("unknown strategy `{name}`; known strategies: {known}")]
    Unknown { name: String, known: String },
}

/// How many records a strategy processes at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RecordsInFlight {
    /// A fixed number.
    Fixed(usize),
    /// `std::thread::available_parallelism()` of the runner process: the CPU-derived default.
    AvailableParallelism,
}

impl RecordsInFlight {
    /// The number this resolves to in the current process.
    pub fn resolve(self) -> usize {
        match self {
            RecordsInFlight::Fixed(n) => n,
            RecordsInFlight::AvailableParallelism => available_parallelism(),
        }
    }
}

impl fmt::Display for RecordsInFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordsInFlight::Fixed(n) => write!(f, "{n}"),
            RecordsInFlight::AvailableParallelism => f.write_str("available_parallelism"),
        }
    }
}

/// `std::thread::available_parallelism()`, or 1 when it cannot be read (as .NET and Go do).
pub fn available_parallelism() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The budgets a strategy puts around its outbound calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum BudgetPlan {
    /// No dependency limits: every record's calls go out as soon as the record makes them.
    None,
    /// One budget shared by all outbound calls, whatever the dependency.
    Shared(usize),
    /// One gate per dependency; `None` leaves that dependency unlimited.
    PerDependency {
        enrichment: Option<GateSpec>,
        records: Option<GateSpec>,
    },
}

impl fmt::Display for BudgetPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetPlan::None => f.write_str("no dependency limits"),
            BudgetPlan::Shared(n) => write!(f, "one shared budget of {n}"),
            BudgetPlan::PerDependency {
                enrichment,
                records,
            } => {
                let show = |v: &Option<GateSpec>| {
                    v.as_ref()
                        .map_or("unlimited".to_string(), |g| g.to_string())
                };
                write!(
                    f,
                    "enrichment budget {}, records budget {}",
                    show(enrichment),
                    show(records)
                )
            }
        }
    }
}

/// Where a strategy's budgets are enforced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforce {
    /// In the runner process, around its calls (the default).
    #[default]
    Runner,
    /// In an `inflight proxy` sidecar that the lab starts in front of the sim, as its own process
    /// in its own CPU quota: the runner has no dependency limits and sends its calls to the
    /// proxy, as an unmodified application would.
    Proxy,
}

/// One strategy from the strategies file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Strategy {
    pub name: String,
    pub description: String,
    pub records_in_flight: RecordsInFlight,
    pub budgets: BudgetPlan,
    /// Where the budgets are enforced (`enforce = "proxy"`: by a sidecar proxy).
    pub enforce: Enforce,
    /// Whether and how the calls are retried (`retry = { by = "inflight" }`); `None` makes each
    /// call once.
    pub retry: Option<RetrySpec>,
}
impl Strategy {
    /// Whether an `inflight proxy` sidecar enforces this strategy's budgets (`enforce = "proxy"`).
    pub fn proxied(&self) -> bool {
        self.enforce == Enforce::Proxy
    }

    /// The dependencies whose budget sizes the lab measures before the runs.
    pub fn measured(&self) -> Vec<&'static str> {
        self.gates()
            .filter(|(_, gate)| matches!(gate, GateSpec::Measured))
            .map(|(dependency, _)| dependency)
            .collect()
    }

    /// Whether a budget of this strategy keeps its permits in Redis (`scope = "fleet"`), so its
    /// runners need the lab's Redis.
    pub fn uses_fleet(&self) -> bool {
        self.gates()
            .any(|(dependency, gate)| gate.fleet(dependency).is_some())
    }

    /// Each dependency's own gate, by dependency name (none for a shared budget).
    fn gates(&self) -> impl Iterator<Item = (&'static str, &GateSpec)> {
        let (enrichment, records) = match &self.budgets {
            BudgetPlan::PerDependency {
                enrichment,
                records,
            } => (enrichment.as_ref(), records.as_ref()),
            _ => (None, None),
        };
        [("enrichment", enrichment), ("records", records)]
            .into_iter()
            .filter_map(|(dependency, gate)| Some((dependency, gate?)))
    }
}

/// All strategies of a file, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Strategies {
    pub by_name: BTreeMap<String, Strategy>,
}

impl Strategies {
    /// The strategy called `name`, or an error listing the known ones.
    pub fn get(&self, name: &str) -> Result<&Strategy, StrategyError> {
        self.by_name
            .get(name)
            .ok_or_else(|| StrategyError::Unknown {
                name: name.to_string(),
                known: self.names().join(", "),
            })
    }

    pub fn names(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }
}

/// Read and validate a strategies file.
pub fn load(path: &Path) -> Result<Strategies, StrategyError> {
    let text = std::fs::read_to_string(path).map_err(|source| StrategyError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text).map_err(|message| StrategyError::Invalid {
        path: path.display().to_string(),
        message,
    })
}

/// The strategies compiled into the binary (a copy of `lab/strategies.toml`).
pub fn builtin() -> Strategies {
    parse(BUILTIN_STRATEGIES).expect("the built-in strategies file is valid")
}
