//! What limits the calls to one dependency ([`GateSpec`]): a fixed budget, a budget table read as
//! a budgets file reads it, a peer crate's limiter, or a size the lab measures.

use std::fmt;

use serde::Serialize;

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
    pub(super) fn parse(krate: &str, algorithm: &str) -> Result<Peer, String> {
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
pub(super) fn budget_table(
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
