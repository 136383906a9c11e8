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

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

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

/// What limits the calls to one dependency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum GateSpec {
    /// An `inflight` budget with a fixed limit of this many calls (`records = 6`).
    Fixed(usize),
    /// An `inflight` budget from a budgets-file table (`records = { limit = "adaptive" }`),
    /// kept as written; it was checked when the file was read.
    Budget(String),
    /// A peer crate's adaptive limiter (`records = { peer = "tower-acc", algorithm = "vegas" }`).
    Peer(Peer),
    /// A fixed budget whose size the lab measures before the runs, with a capacity sweep of the
    /// dependency in each scenario (`records = { measure = "capacity" }`).
    Measured,
}

/// The peer limiters the lab runs side by side with `inflight`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Peer {
    /// `tower-acc`'s Gradient2.
    TowerAccGradient2,
    /// `tower-acc`'s Vegas.
    TowerAccVegas,
    /// `tower-resilience-adaptive`'s AIMD.
    TowerResilienceAimd,
    /// `tower-resilience-adaptive`'s Vegas.
    TowerResilienceVegas,
}

impl Peer {
    fn parse(krate: &str, algorithm: &str) -> Result<Peer, String> {
        Ok(match (krate, algorithm) {
            ("tower-acc", "gradient2") => Peer::TowerAccGradient2,
            ("tower-acc", "vegas") => Peer::TowerAccVegas,
            ("tower-resilience-adaptive", "aimd") => Peer::TowerResilienceAimd,
            ("tower-resilience-adaptive", "vegas") => Peer::TowerResilienceVegas,
            _ => {
                return Err(format!(
                    "unknown peer limiter {krate:?} with algorithm {algorithm:?} (known: tower-acc with gradient2 or vegas, tower-resilience-adaptive with aimd or vegas)"
                ))
            }
        })
    }

    /// The crate and algorithm, as a strategy file names them.
    pub fn name(self) -> &'static str {
        match self {
            Peer::TowerAccGradient2 => "tower-acc gradient2",
            Peer::TowerAccVegas => "tower-acc vegas",
            Peer::TowerResilienceAimd => "tower-resilience-adaptive aimd",
            Peer::TowerResilienceVegas => "tower-resilience-adaptive vegas",
        }
    }
}

impl GateSpec {
    /// The `inflight` budget configuration of this gate, if it is one.
    pub fn budget_config(&self, dependency: &str) -> Option<inflight::BudgetConfig> {
        match self {
            GateSpec::Fixed(n) => Some(inflight::BudgetConfig::new(*n)),
            GateSpec::Budget(table) => Some(
                budget_table(dependency, table)
                    .expect("a budget table is checked when the strategies file is read")
                    .0,
            ),
            GateSpec::Peer(_) | GateSpec::Measured => None,
        }
    }

    /// Whether this gate is an `inflight` budget with priority classes (`classes = { .. }`).
    pub fn has_classes(&self, dependency: &str) -> bool {
        self.budget_config(dependency)
            .is_some_and(|c| c.priority_classes().is_some())
    }

    /// What this gate's budget does while the fleet's Redis cannot be reached, if it keeps its
    /// permits there (`scope = "fleet"`); `None` for a budget of this process alone, or a peer.
    pub fn fleet(&self, dependency: &str) -> Option<inflight::config::FleetFail> {
        match self {
            GateSpec::Budget(table) => match budget_table(dependency, table)
                .expect("a budget table is checked when the strategies file is read")
                .1
            {
                inflight::config::Scope::Fleet { fail } => Some(fail),
                _ => None,
            },
            _ => None,
        }
    }
}

impl fmt::Display for GateSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateSpec::Fixed(n) => write!(f, "{n}"),
            GateSpec::Budget(table) => {
                let (config, scope) = budget_table("x", table).map_err(|_| fmt::Error)?;
                write!(f, "{}", describe_budget(&config))?;
                if matches!(scope, inflight::config::Scope::Fleet { .. }) {
                    f.write_str(" across the fleet")?;
                }
                Ok(())
            }
            GateSpec::Peer(peer) => f.write_str(peer.name()),
            GateSpec::Measured => f.write_str("measured"),
        }
    }
}

/// A budget table's configuration, in short: `adaptive (vegas) up to 64`, `24 at 50/s`.
fn describe_budget(config: &inflight::BudgetConfig) -> String {
    let mut text = match config.adaptive_limit() {
        Some(a) => format!(
            "adaptive ({}) up to {}",
            a.algorithm(),
            config.max_concurrent()
        ),
        None => config.max_concurrent().to_string(),
    };
    if let Some(classes) = config.priority_classes() {
        let weights: Vec<String> = classes
            .iter()
            .map(|c| format!("{} {}", c.name(), c.weight()))
            .collect();
        let how = if classes.is_strict() {
            "strict priority"
        } else {
            "weighted"
        };
        text.push_str(&format!(
            " with classes {} ({how}, default {})",
            weights.join(", "),
            classes.default_name()
        ));
    }
    if let Some((rate, burst)) = config.rate_limit() {
        text.push_str(&format!(" at {rate}"));
        if burst > 1 {
            text.push_str(&format!(" (burst {burst})"));
        }
    }
    text
}

/// Parses one dependency's budget table with the budgets-file parser, so a strategy's budget
/// means what the same table means in a budgets file. A fleet budget (`scope = "fleet"`) keeps
/// its permits in the lab's Redis, which the lab gives the runner (`--redis-url`): the `[fleet]`
/// table here only lets the parser check the budget's own keys.
/// Priority classes (`classes`, `strict`, `default_class`) included.
fn budget_table(
    dependency: &str,
    table: &str,
) -> Result<(inflight::BudgetConfig, inflight::config::Scope), String> {
    let rest: toml::Table = table
        .parse()
        .map_err(|e: toml::de::Error| format!("not valid TOML: {}", e.message().trim_end()))?;
    // One document, so that a nested table (`classes`) stays inside the budget's table.
    let mut budgets = toml::Table::new();
    budgets.insert(dependency.to_string(), toml::Value::Table(rest));
    let mut fleet = toml::Table::new();
    fleet.insert("url".into(), "redis://127.0.0.1:6379".into());
    let mut doc = toml::Table::new();
    doc.insert("fleet".into(), toml::Value::Table(fleet));
    doc.insert("budgets".into(), toml::Value::Table(budgets));
    let text = toml::to_string(&doc).map_err(|e| e.to_string())?;
    let budgets = inflight::Budgets::from_toml_str(&text).map_err(|e| e.to_string())?;
    let budget = budgets.get(dependency).expect("the one budget just parsed");
    let scope = budgets
        .scope(dependency)
        .expect("the one budget just parsed");
    Ok((budget.config().clone(), scope))
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

/// Who retries a strategy's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RetryBy {
    /// `inflight`'s back-pressure: `Budget::call_with_retry` within an `inflight::RetryBudget`,
    /// with the dependency's `Retry-After` given to the budget, which pauses for it.
    Inflight,
    /// tower's retry layer (`tower::retry::Retry`) with a `TpsBudget` and tower's exponential
    /// backoff, around the same budgets; it does not read `Retry-After`.
    Tower,
}

impl RetryBy {
    /// The name a strategy file gives it.
    pub fn name(self) -> &'static str {
        match self {
            RetryBy::Inflight => "inflight",
            RetryBy::Tower => "tower",
        }
    }
}

/// How a strategy retries the overload answers (429, 503) and transport failures of its calls;
/// a call past its timeout is not retried (see `crate::gate`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RetrySpec {
    pub by: RetryBy,
    /// The most attempts per call, the first included.
    pub max_attempts: u32,
    /// The share of recent calls that may be retried (the retry budget's `retry_percent`); the
    /// budget's window (10 s) and floor (10 retries a second) are tower's and Finagle's defaults,
    /// scaled by the time scale.
    pub retry_percent: f64,
}

// `retry_percent` is checked to be a number when the file is read.
impl Eq for RetrySpec {}

/// The most attempts a strategy may give a call.
pub const MAX_ATTEMPTS: u32 = 10;

impl RetrySpec {
    /// The defaults of a retry table that names only `by`: 3 attempts, 20% of calls.
    pub fn new(by: RetryBy) -> RetrySpec {
        RetrySpec {
            by,
            max_attempts: 3,
            retry_percent: 0.2,
        }
    }
}

impl fmt::Display for RetrySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "retried by {} (up to {} attempts, {}% of calls)",
            self.by.name(),
            self.max_attempts,
            self.retry_percent * 100.0
        )
    }
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

/// One strategy's table as written in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawStrategy {
    #[serde(default)]
    description: String,
    records_in_flight: RecordsInFlight,
    shared: Option<Count>,
    enrichment: Option<RawGate>,
    records: Option<RawGate>,
    #[serde(default)]
    enforce: Enforce,
    retry: Option<RawRetry>,
}

/// A strategy's `retry` table as written.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table such as { by = \"inflight\" }"
)]
struct RawRetry {
    by: RetryBy,
    max_attempts: Option<i64>,
    retry_percent: Option<f64>,
}

impl RawRetry {
    fn validate(self) -> Result<RetrySpec, String> {
        let mut spec = RetrySpec::new(self.by);
        if let Some(n) = self.max_attempts {
            if !(1..=i64::from(MAX_ATTEMPTS)).contains(&n) {
                return Err(format!(
                    "field `retry.max_attempts` must be between 1 and {MAX_ATTEMPTS}, found {n}"
                ));
            }
            spec.max_attempts = n as u32;
        }
        if let Some(p) = self.retry_percent {
            // The same range as tower's TpsBudget and inflight's RetryBudget.
            if !(0.0..=1000.0).contains(&p) {
                return Err(format!(
                    "field `retry.retry_percent` must be between 0 and 1000, found {p}"
                ));
            }
            spec.retry_percent = p;
        }
        Ok(spec)
    }
}

/// One dependency's gate as written: a count, or a table.
#[derive(Debug)]
enum RawGate {
    Count(Count),
    Table(toml::Table),
}

impl<'de> Deserialize<'de> for RawGate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawGate, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::Table(table) => Ok(RawGate::Table(table)),
            // A count's own messages ("must be a positive integer, found 0").
            other => Count::deserialize(other)
                .map(RawGate::Count)
                .map_err(de::Error::custom),
        }
    }
}

impl RawGate {
    fn validate(self, dependency: &str) -> Result<GateSpec, String> {
        match self {
            RawGate::Count(Count(n)) => Ok(GateSpec::Fixed(n)),
            RawGate::Table(mut table) => {
                if let Some(measure) = table.remove("measure") {
                    if measure.as_str() != Some("capacity") {
                        return Err(format!(
                            "field `{dependency}.measure` must be \"capacity\", got {measure}"
                        ));
                    }
                    if let Some(key) = table.keys().next() {
                        return Err(format!(
                            "field `{dependency}.{key}` is not taken with measure (the budget's size is measured)"
                        ));
                    }
                    return Ok(GateSpec::Measured);
                }
                if let Some(peer) = table.remove("peer") {
                    let krate = peer
                        .as_str()
                        .ok_or_else(|| format!("field `{dependency}.peer` must be a string"))?;
                    let algorithm = table
                        .remove("algorithm")
                        .and_then(|a| a.as_str().map(str::to_string))
                        .ok_or_else(|| {
                            format!("field `{dependency}.algorithm` is required with a peer")
                        })?;
                    if let Some(key) = table.keys().next() {
                        return Err(format!(
                            "field `{dependency}.{key}` is not taken with a peer (only peer and algorithm)"
                        ));
                    }
                    return Peer::parse(krate, &algorithm)
                        .map(GateSpec::Peer)
                        .map_err(|e| format!("field `{dependency}`: {e}"));
                }
                let text = toml::to_string(&table).map_err(|e| e.to_string())?;
                budget_table(dependency, &text)
                    .map_err(|e| format!("field `{dependency}`: {e}"))?;
                Ok(GateSpec::Budget(text))
            }
        }
    }
}

/// The largest count a strategy may give (not absurd for a lab run).
const MAX_COUNT: i64 = 100_000;

/// A positive integer that fits a `usize` and is at most [`MAX_COUNT`].
#[derive(Debug, Clone, Copy)]
struct Count(usize);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Count, D::Error> {
        d.deserialize_any(CountVisitor { or_name: None })
            .map(|n| Count(n.unwrap_or(0)))
    }
}

impl<'de> Deserialize<'de> for RecordsInFlight {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RecordsInFlight, D::Error> {
        let visitor = CountVisitor {
            or_name: Some("available_parallelism"),
        };
        Ok(match d.deserialize_any(visitor)? {
            Some(n) => RecordsInFlight::Fixed(n),
            None => RecordsInFlight::AvailableParallelism,
        })
    }
}

/// Reads a count, or (`None`) the one name allowed instead; its messages say what was found.
struct CountVisitor {
    or_name: Option<&'static str>,
}

impl CountVisitor {
    fn found<E: de::Error>(&self, what: &str) -> E {
        match self.or_name {
            Some(name) => E::custom(format!(
                "must be a positive integer or \"{name}\", found {what}"
            )),
            None => E::custom(format!("must be a positive integer, found {what}")),
        }
    }
}

impl<'de> Visitor<'de> for CountVisitor {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a positive integer")
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Option<usize>, E> {
        if (1..=MAX_COUNT).contains(&n) {
            Ok(Some(n as usize))
        } else {
            Err(E::custom(format!(
                "must be between 1 and {MAX_COUNT}, found {n}"
            )))
        }
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Option<usize>, E> {
        self.visit_i64(i64::try_from(n).unwrap_or(i64::MAX))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Option<usize>, E> {
        match self.or_name {
            Some(name) if s == name => Ok(None),
            Some(_) => Err(self.found(&format!("\"{s}\""))),
            None => Err(self.found("a string")),
        }
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<usize>, E> {
        Err(self.found("a float"))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<usize>, E> {
        Err(self.found("a boolean"))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Option<usize>, A::Error> {
        Err(self.found("an array"))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<Option<usize>, A::Error> {
        Err(self.found("a table"))
    }
}

/// Parse and validate the text of a strategies file; the error names the strategy and field.
pub fn parse(text: &str) -> Result<Strategies, String> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| format!("not valid TOML: {}", e.message().trim_end()))?;
    let raw: BTreeMap<String, RawStrategy> =
        serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
            let path: Vec<String> = e.path().iter().map(|s| s.to_string()).collect();
            let message = e.into_inner().to_string();
            let name = path.first().cloned().unwrap_or_default();
            match path.get(1) {
                Some(field) => format!("strategy `{name}`: field `{field}` {message}"),
                None => format!("strategy `{name}`: {message}"),
            }
        })?;
    let mut by_name = BTreeMap::new();
    for (name, raw) in raw {
        let strategy = raw
            .validate(&name)
            .map_err(|m| format!("strategy `{name}`: {m}"))?;
        by_name.insert(name, strategy);
    }
    if by_name.is_empty() {
        return Err("no strategies defined (expected tables like [c1])".to_string());
    }
    Ok(Strategies { by_name })
}

impl RawStrategy {
    fn validate(self, name: &str) -> Result<Strategy, String> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err("a name may hold only letters, digits, `-` and `_`".to_string());
        }
        let count = |c: Option<Count>| c.map(|Count(n)| n);
        let enrichment = self
            .enrichment
            .map(|g| g.validate("enrichment"))
            .transpose()?;
        let records = self.records.map(|g| g.validate("records")).transpose()?;
        let budgets = match (count(self.shared), enrichment, records) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err(
                    "field `shared` cannot be combined with `enrichment` or `records` (one shared budget, or one per dependency)"
                        .to_string(),
                )
            }
            (Some(n), None, None) => BudgetPlan::Shared(n),
            (None, None, None) => BudgetPlan::None,
            (None, enrichment, records) => BudgetPlan::PerDependency {
                enrichment,
                records,
            },
        };
        if self.enforce == Enforce::Proxy {
            proxied_budgets(&budgets)?;
        }
        if let BudgetPlan::PerDependency {
            enrichment,
            records,
        } = &budgets
        {
            for (dependency, gate) in [("enrichment", enrichment), ("records", records)] {
                let with_classes = gate.as_ref().is_some_and(|g| g.has_classes(dependency));
                if with_classes && (self.enforce == Enforce::Proxy || self.retry.is_some()) {
                    return Err(format!(
                        "field `{dependency}.classes`: the runner names each record's class to its own budgets, so a budget with classes cannot be combined with `enforce = \"proxy\"` or `retry`"
                    ));
                }
            }
        }
        let retry = self.retry.map(RawRetry::validate).transpose()?;
        if let Some(retry) = &retry {
            retried_budgets(retry, &budgets, self.enforce)?;
        }
        Ok(Strategy {
            name: name.to_string(),
            description: self.description,
            records_in_flight: self.records_in_flight,
            budgets,
            enforce: self.enforce,
            retry,
        })
    }
}

/// Checks that a proxy can enforce `budgets`: one `inflight` budget per dependency, kept in the
/// proxy's process (a shared budget, a peer limiter, a measured size or a fleet budget is the
/// runner's alone).
fn proxied_budgets(budgets: &BudgetPlan) -> Result<(), String> {
    let refuse = |what: &str| {
        Err(format!(
            "field `enforce` is \"proxy\", but {what}: a proxy enforces per-dependency `inflight` budgets (counts or budget tables)"
        ))
    };
    let (enrichment, records) = match budgets {
        BudgetPlan::None => return refuse("the strategy has no budgets"),
        BudgetPlan::Shared(_) => return refuse("`shared` budgets all calls as one"),
        BudgetPlan::PerDependency {
            enrichment,
            records,
        } => (enrichment, records),
    };
    for (dependency, gate) in [("enrichment", enrichment), ("records", records)] {
        match gate {
            Some(GateSpec::Peer(_)) => return refuse(&format!("`{dependency}` is a peer limiter")),
            Some(GateSpec::Measured) => {
                return refuse(&format!("`{dependency}` is measured by the lab"))
            }
            Some(gate @ GateSpec::Budget(_)) if gate.fleet(dependency).is_some() => {
                return refuse(&format!("`{dependency}` keeps its permits in Redis"))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks that the runner can retry through `budgets`: each dependency has an `inflight` budget
/// of the runner's own (`Budget::call_with_retry` is a budget's; tower's retry goes around the
/// same budgets, so that the two are compared on the same limits).
fn retried_budgets(
    retry: &RetrySpec,
    budgets: &BudgetPlan,
    enforce: Enforce,
) -> Result<(), String> {
    let by = retry.by.name();
    let refuse = |what: &str| {
        Err(format!(
            "field `retry` (by = \"{by}\") needs an `inflight` budget in the runner on each dependency (a count or a budget table), but {what}"
        ))
    };
    if enforce == Enforce::Proxy {
        return refuse("`enforce` is \"proxy\"");
    }
    let (enrichment, records) = match budgets {
        BudgetPlan::None => return refuse("the strategy has no budgets"),
        BudgetPlan::Shared(_) => return refuse("`shared` budgets all calls as one"),
        BudgetPlan::PerDependency {
            enrichment,
            records,
        } => (enrichment, records),
    };
    for (dependency, gate) in [("enrichment", enrichment), ("records", records)] {
        match gate {
            None => return refuse(&format!("`{dependency}` has no budget")),
            Some(GateSpec::Peer(_)) => return refuse(&format!("`{dependency}` is a peer limiter")),
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFERENCE_STRATEGIES: &str = r#"
        [c1]
        records_in_flight = "available_parallelism"
        [c2]
        records_in_flight = 32
        [c3]
        records_in_flight = 32
        shared = 30
        [c4]
        description = "per dependency"
        records_in_flight = 32
        enrichment = 24
        records = 6
    "#;

    #[test]
    fn parses_the_four_reference_strategies() {
        let s = parse(REFERENCE_STRATEGIES).unwrap();
        assert_eq!(s.names(), ["c1", "c2", "c3", "c4"]);
        let c1 = s.get("c1").unwrap();
        assert_eq!(c1.records_in_flight, RecordsInFlight::AvailableParallelism);
        assert_eq!(c1.budgets, BudgetPlan::None);
        assert_eq!(
            s.get("c2").unwrap().records_in_flight,
            RecordsInFlight::Fixed(32)
        );
        assert_eq!(s.get("c3").unwrap().budgets, BudgetPlan::Shared(30));
        let c4 = s.get("c4").unwrap();
        assert_eq!(
            c4.budgets,
            BudgetPlan::PerDependency {
                enrichment: Some(GateSpec::Fixed(24)),
                records: Some(GateSpec::Fixed(6))
            }
        );
        assert_eq!(c4.description, "per dependency");
    }

    #[test]
    fn the_repository_file_is_valid_and_matches_the_reference() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/strategies.toml");
        let s = load(&path).unwrap();
        assert_eq!(s, builtin());
        let reference = parse(REFERENCE_STRATEGIES).unwrap();
        for name in ["c1", "c2", "c3", "c4"] {
            let (a, b) = (s.get(name).unwrap(), reference.get(name).unwrap());
            assert_eq!(a.records_in_flight, b.records_in_flight, "{name}");
            assert_eq!(a.budgets, b.budgets, "{name}");
        }
    }

    #[test]
    fn unknown_strategy_lists_the_known_ones() {
        let s = parse(REFERENCE_STRATEGIES).unwrap();
        let err = s.get("c9").unwrap_err().to_string();
        assert!(
            err.contains("c9") && err.contains("c1, c2, c3, c4"),
            "{err}"
        );
    }

    fn err_of(text: &str) -> String {
        parse(text).unwrap_err()
    }

    #[test]
    fn rejects_bad_files_naming_the_field() {
        let e = err_of("[x]\nrecords_in_flight = 0");
        assert!(
            e.contains("`x`") && e.contains("records_in_flight") && e.contains("found 0"),
            "{e}"
        );
        let e = err_of("[x]\nrecords_in_flight = 4\nenrichment = 0");
        assert!(e.contains("`enrichment`") && e.contains("found 0"), "{e}");
        let e = err_of("[x]\nrecords_in_flight = 4\nrecord = 6");
        assert!(e.contains("unknown field `record`"), "{e}");
        let e = err_of("[x]\nshared = 4");
        assert!(e.contains("missing field `records_in_flight`"), "{e}");
        let e = err_of("[x]\nrecords_in_flight = \"cpus\"");
        assert!(
            e.contains("available_parallelism") && e.contains("cpus"),
            "{e}"
        );
        let e = err_of("[x]\nrecords_in_flight = 4\nshared = 3\nrecords = 2");
        assert!(e.contains("`shared` cannot be combined"), "{e}");
        let e = err_of("[x]\nrecords_in_flight = 4\nshared = \"3\"");
        assert!(e.contains("`shared` must be a positive integer"), "{e}");
        let e = err_of("x = 3");
        assert!(e.contains("expected a table"), "{e}");
        let e = err_of("");
        assert!(e.contains("no strategies"), "{e}");
        let e = err_of("[x\n");
        assert!(e.contains("not valid TOML"), "{e}");
    }

    #[test]
    fn one_dependency_budget_alone_is_allowed() {
        let s = parse("[w]\nrecords_in_flight = 8\nrecords = 2").unwrap();
        assert_eq!(
            s.get("w").unwrap().budgets,
            BudgetPlan::PerDependency {
                enrichment: None,
                records: Some(GateSpec::Fixed(2))
            }
        );
    }

    #[test]
    fn gates_may_be_budget_tables_or_peers() {
        let s = parse(
            r#"
            [a]
            records_in_flight = 64
            enrichment = { limit = "adaptive", algorithm = "aimd" }
            records = { peer = "tower-acc", algorithm = "vegas" }
            [r]
            records_in_flight = 8
            enrichment = { max_concurrent = 24, rate = "50/s" }
            "#,
        )
        .unwrap();
        let a = s.get("a").unwrap();
        assert_eq!(
            a.budgets.to_string(),
            "enrichment budget adaptive (aimd) up to 100, records budget tower-acc vegas"
        );
        let BudgetPlan::PerDependency { enrichment, .. } = &s.get("r").unwrap().budgets else {
            panic!("per dependency");
        };
        let config = enrichment
            .as_ref()
            .unwrap()
            .budget_config("enrichment")
            .unwrap();
        assert_eq!(config.rate_limit().unwrap().0.events_per_second(), 50.0);
        for (gate, says) in [
            ("{ limit = \"adaptive\", min = 0 }", "budgets.records.min"),
            ("{ max_concurrent = 0 }", "budgets.records.max_concurrent"),
            (
                "{ peer = \"tower-acc\", algorithm = \"aimd\" }",
                "unknown peer",
            ),
            ("{ peer = \"tower-acc\" }", "algorithm` is required"),
            (
                "{ peer = \"tower-acc\", algorithm = \"vegas\", min = 1 }",
                "not taken with a peer",
            ),
        ] {
            let e = err_of(&format!("[x]\nrecords_in_flight = 4\nrecords = {gate}"));
            assert!(e.contains("records") && e.contains(says), "{gate}: {e}");
        }
    }

    #[test]
    fn the_builtin_file_has_the_adaptive_peer_and_rate_strategies() {
        let names = builtin().names();
        for name in [
            "c2-64",
            "c4-64",
            "c5",
            "c4r",
            "tower-acc-gradient2",
            "tower-acc-vegas",
            "tower-resilience-aimd",
            "tower-resilience-vegas",
            "c4-fleet",
            "c4r-fleet",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} missing");
        }
    }

    #[test]
    fn a_measured_budget_takes_no_other_key() {
        let strategies = builtin();
        let measured = strategies.get("c4-measured").unwrap();
        assert_eq!(measured.measured(), vec!["enrichment", "records"]);
        assert!(strategies.get("c4").unwrap().measured().is_empty());
        for (gate, says) in [
            ("{ measure = \"guess\" }", "must be \"capacity\""),
            (
                "{ measure = \"capacity\", max_concurrent = 6 }",
                "not taken with measure",
            ),
        ] {
            let e = err_of(&format!("[x]\nrecords_in_flight = 4\nrecords = {gate}"));
            assert!(e.contains("records") && e.contains(says), "{gate}: {e}");
        }
    }

    #[test]
    fn a_fleet_budget_is_known_by_its_scope() {
        let strategies = builtin();
        let fleet = strategies.get("c4-fleet").unwrap();
        assert!(fleet.uses_fleet());
        assert!(
            fleet.budgets.to_string().contains("6 across the fleet"),
            "{}",
            fleet.budgets
        );
        let rate = strategies.get("c4r-fleet").unwrap();
        assert!(rate.uses_fleet());
        assert!(
            rate.budgets.to_string().contains("across the fleet"),
            "{}",
            rate.budgets
        );
        for local in ["c1", "c3", "c4", "c4r", "c5", "tower-acc-vegas"] {
            assert!(!strategies.get(local).unwrap().uses_fleet(), "{local}");
        }
        // The budget table is checked like a budgets file's: a fleet-only key needs the scope.
        let e = err_of(
            "[x]\nrecords_in_flight = 4\nrecords = { max_concurrent = 6, fail = \"closed\" }",
        );
        assert!(e.contains("scope"), "{e}");
    }

    #[test]
    fn priority_strategies_are_c5_with_classes() {
        let strategies = builtin();
        let c5 = strategies.get("c5").unwrap();
        for (name, strict) in [("c5-priority", false), ("c5-priority-strict", true)] {
            let s = strategies.get(name).unwrap();
            assert_eq!(s.records_in_flight, c5.records_in_flight, "{name}");
            let (
                BudgetPlan::PerDependency {
                    enrichment,
                    records,
                },
                BudgetPlan::PerDependency {
                    enrichment: e5,
                    records: r5,
                },
            ) = (&s.budgets, &c5.budgets)
            else {
                panic!("per dependency");
            };
            for (dependency, gate, plain) in
                [("enrichment", enrichment, e5), ("records", records, r5)]
            {
                let config = gate.as_ref().unwrap().budget_config(dependency).unwrap();
                let classes = config.priority_classes().expect("classes");
                let weights: Vec<(&str, u32)> =
                    classes.iter().map(|c| (c.name(), c.weight())).collect();
                assert_eq!(weights, [("interactive", 4), ("batch", 1)], "{name}");
                assert_eq!(classes.default_name(), "batch");
                assert_eq!(classes.is_strict(), strict, "{name}");
                // Otherwise C5's budget.
                let c5_config = plain.as_ref().unwrap().budget_config(dependency).unwrap();
                assert_eq!(
                    config
                        .clone()
                        .classes(inflight::Classes::new())
                        .max_concurrent(),
                    c5_config.max_concurrent()
                );
                assert_eq!(
                    config.adaptive_limit().map(|a| a.algorithm().to_string()),
                    c5_config
                        .adaptive_limit()
                        .map(|a| a.algorithm().to_string())
                );
                assert!(gate.as_ref().unwrap().has_classes(dependency));
                assert!(!plain.as_ref().unwrap().has_classes(dependency));
            }
            assert!(
                s.budgets
                    .to_string()
                    .contains("with classes interactive 4, batch 1"),
                "{}",
                s.budgets
            );
        }
    }

    #[test]
    fn bad_classes_in_a_budget_table_are_named() {
        for (gate, says) in [
            (
                "{ max_concurrent = 6, classes = { a = 0 } }",
                "classes.a: weight must be at least 1, got 0",
            ),
            (
                "{ max_concurrent = 6, classes = { a = 1001 } }",
                "at most 1000, got 1001",
            ),
            (
                "{ max_concurrent = 6, classes = { a = \"high\" } }",
                "classes.a: must be a weight like 4",
            ),
            (
                "{ max_concurrent = 6, classes = 3 }",
                "classes: must be a table of class weights",
            ),
            ("{ max_concurrent = 6, classes = {} }", "at least one class"),
            (
                "{ max_concurrent = 6, strict = true }",
                "strict: only a budget with classes takes this",
            ),
            (
                "{ max_concurrent = 6, default_class = \"a\" }",
                "default_class: only a budget with classes takes this",
            ),
            (
                "{ max_concurrent = 6, classes = { a = 1 }, strict = \"yes\" }",
                "strict: must be true or false",
            ),
            (
                "{ max_concurrent = 6, classes = { a = 1 }, default_class = \"b\" }",
                "\"b\" is not one of the classes",
            ),
        ] {
            let e = err_of(&format!("[x]\nrecords_in_flight = 4\nrecords = {gate}"));
            assert!(
                e.contains("`x`") && e.contains("records") && e.contains(says),
                "{gate}: {e}"
            );
        }
        let classes =
            "records = { max_concurrent = 2, classes = { a = 2, b = 1 } }\nenrichment = 2";
        for other in ["enforce = \"proxy\"", "retry = { by = \"inflight\" }"] {
            let e = err_of(&format!("[x]\nrecords_in_flight = 4\n{classes}\n{other}"));
            assert!(
                e.contains("`records.classes`") && e.contains("cannot be combined"),
                "{other}: {e}"
            );
        }
        let s = parse(&format!("[x]\nrecords_in_flight = 4\n{classes}")).unwrap();
        let BudgetPlan::PerDependency { records, .. } = &s.get("x").unwrap().budgets else {
            panic!("per dependency");
        };
        let config = records.as_ref().unwrap().budget_config("records").unwrap();
        assert_eq!(config.priority_classes().unwrap().default_name(), "b");
    }

    #[test]
    fn a_retry_table_names_who_retries_and_takes_defaults() {
        let strategies = builtin();
        let c6 = strategies.get("c6").unwrap();
        assert_eq!(c6.retry, Some(RetrySpec::new(RetryBy::Inflight)));
        assert_eq!(c6.budgets, strategies.get("c5").unwrap().budgets);
        let peer = strategies.get("c5-tower-retry").unwrap();
        assert_eq!(peer.retry.map(|r| r.by), Some(RetryBy::Tower));
        assert_eq!(peer.budgets, c6.budgets);
        assert_eq!(strategies.get("c5").unwrap().retry, None);
        let s = parse(
            "[x]\nrecords_in_flight = 4\nrecords = 2\nenrichment = 3\nretry = { by = \"tower\", max_attempts = 5, retry_percent = 0.5 }",
        )
        .unwrap();
        let retry = s.get("x").unwrap().retry.unwrap();
        assert_eq!((retry.max_attempts, retry.retry_percent), (5, 0.5));
        assert_eq!(
            retry.to_string(),
            "retried by tower (up to 5 attempts, 50% of calls)"
        );
    }

    #[test]
    fn a_bad_retry_table_is_named() {
        let budgets = "records_in_flight = 4\nrecords = 2\nenrichment = 3";
        for (retry, says) in [
            ("{ by = \"envoy\" }", "unknown variant `envoy`"),
            ("{ max_attempts = 2 }", "missing field `by`"),
            ("{ by = \"inflight\", tries = 2 }", "unknown field `tries`"),
            (
                "{ by = \"inflight\", max_attempts = 0 }",
                "between 1 and 10, found 0",
            ),
            (
                "{ by = \"tower\", retry_percent = -1.0 }",
                "between 0 and 1000",
            ),
            ("true", "a table such as"),
        ] {
            let e = err_of(&format!("[x]\n{budgets}\nretry = {retry}"));
            assert!(
                e.contains("`x`") && e.contains("retry") && e.contains(says),
                "{retry}: {e}"
            );
        }
        for (strategy, says) in [
            ("records_in_flight = 4\nrecords = 2", "`enrichment` has no budget"),
            ("records_in_flight = 4\nshared = 2", "`shared`"),
            ("records_in_flight = 4", "no budgets"),
            (
                "records_in_flight = 4\nrecords = 2\nenrichment = { peer = \"tower-acc\", algorithm = \"vegas\" }",
                "peer limiter",
            ),
            (
                "records_in_flight = 4\nrecords = 2\nenrichment = 3\nenforce = \"proxy\"",
                "\"proxy\"",
            ),
        ] {
            let e = err_of(&format!("[x]\n{strategy}\nretry = {{ by = \"inflight\" }}"));
            assert!(e.contains("field `retry`") && e.contains(says), "{strategy}: {e}");
        }
    }
}
