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

use serde::Serialize;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Budgets {
    /// No dependency limits: every record's calls go out as soon as the record makes them.
    None,
    /// One budget shared by all outbound calls, whatever the dependency.
    Shared(usize),
    /// One budget per dependency; `None` leaves that dependency unlimited.
    PerDependency {
        enrichment: Option<usize>,
        records: Option<usize>,
    },
}

impl fmt::Display for Budgets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Budgets::None => f.write_str("no dependency limits"),
            Budgets::Shared(n) => write!(f, "one shared budget of {n}"),
            Budgets::PerDependency {
                enrichment,
                records,
            } => {
                let show = |v: &Option<usize>| v.map_or("unlimited".to_string(), |n| n.to_string());
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

/// One strategy from the strategies file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Strategy {
    pub name: String,
    pub description: String,
    pub records_in_flight: RecordsInFlight,
    pub budgets: Budgets,
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

const KEYS: &[&str] = &[
    "description",
    "records_in_flight",
    "shared",
    "enrichment",
    "records",
];

/// Parse and validate the text of a strategies file; the error names the strategy and field.
pub fn parse(text: &str) -> Result<Strategies, String> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| format!("not valid TOML: {}", e.message().trim_end()))?;
    let mut by_name = BTreeMap::new();
    for (name, value) in &table {
        let strategy = parse_one(name, value).map_err(|m| format!("strategy `{name}`: {m}"))?;
        by_name.insert(name.clone(), strategy);
    }
    if by_name.is_empty() {
        return Err("no strategies defined (expected tables like [c1])".to_string());
    }
    Ok(Strategies { by_name })
}

fn parse_one(name: &str, value: &toml::Value) -> Result<Strategy, String> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err("a name may hold only letters, digits, `-` and `_`".to_string());
    }
    let table = value
        .as_table()
        .ok_or_else(|| format!("expected a table [{name}], found a {}", value.type_str()))?;
    for key in table.keys() {
        if !KEYS.contains(&key.as_str()) {
            return Err(format!(
                "unknown field `{key}` (expected one of: {})",
                KEYS.join(", ")
            ));
        }
    }
    let description = match table.get("description") {
        None => String::new(),
        Some(toml::Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(format!(
                "field `description` must be a string, found a {}",
                other.type_str()
            ))
        }
    };
    let records_in_flight = match table.get("records_in_flight") {
        None => return Err("missing field `records_in_flight`".to_string()),
        Some(toml::Value::String(s)) if s == "available_parallelism" => {
            RecordsInFlight::AvailableParallelism
        }
        Some(toml::Value::String(s)) => {
            return Err(format!(
                "field `records_in_flight` must be a positive integer or \"available_parallelism\", found \"{s}\""
            ))
        }
        Some(v) => RecordsInFlight::Fixed(positive(v, "records_in_flight")?),
    };
    let get = |key: &str| table.get(key).map(|v| positive(v, key)).transpose();
    let shared = get("shared")?;
    let enrichment = get("enrichment")?;
    let records = get("records")?;
    let budgets = match (shared, enrichment, records) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(
                "field `shared` cannot be combined with `enrichment` or `records` (one shared budget, or one per dependency)"
                    .to_string(),
            )
        }
        (Some(n), None, None) => Budgets::Shared(n),
        (None, None, None) => Budgets::None,
        (None, enrichment, records) => Budgets::PerDependency {
            enrichment,
            records,
        },
    };
    Ok(Strategy {
        name: name.to_string(),
        description,
        records_in_flight,
        budgets,
    })
}

/// A positive integer that fits a `usize` (and is not absurd for a lab run).
fn positive(value: &toml::Value, key: &str) -> Result<usize, String> {
    const MAX: i64 = 100_000;
    match value {
        toml::Value::Integer(n) if *n >= 1 && *n <= MAX => Ok(*n as usize),
        toml::Value::Integer(n) => Err(format!(
            "field `{key}` must be between 1 and {MAX}, found {n}"
        )),
        other => Err(format!(
            "field `{key}` must be a positive integer, found a {}",
            other.type_str()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED_STRATEGIES: &str = r#"
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
    fn parses_the_four_seed_strategies() {
        let s = parse(SEED_STRATEGIES).unwrap();
        assert_eq!(s.names(), ["c1", "c2", "c3", "c4"]);
        let c1 = s.get("c1").unwrap();
        assert_eq!(c1.records_in_flight, RecordsInFlight::AvailableParallelism);
        assert_eq!(c1.budgets, Budgets::None);
        assert_eq!(
            s.get("c2").unwrap().records_in_flight,
            RecordsInFlight::Fixed(32)
        );
        assert_eq!(s.get("c3").unwrap().budgets, Budgets::Shared(30));
        let c4 = s.get("c4").unwrap();
        assert_eq!(
            c4.budgets,
            Budgets::PerDependency {
                enrichment: Some(24),
                records: Some(6)
            }
        );
        assert_eq!(c4.description, "per dependency");
    }

    #[test]
    fn the_repository_file_is_valid_and_matches_the_seed() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/strategies.toml");
        let s = load(&path).unwrap();
        let seed = parse(SEED_STRATEGIES).unwrap();
        for name in ["c1", "c2", "c3", "c4"] {
            let (a, b) = (s.get(name).unwrap(), seed.get(name).unwrap());
            assert_eq!(a.records_in_flight, b.records_in_flight, "{name}");
            assert_eq!(a.budgets, b.budgets, "{name}");
        }
    }

    #[test]
    fn unknown_strategy_lists_the_known_ones() {
        let s = parse(SEED_STRATEGIES).unwrap();
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
            Budgets::PerDependency {
                enrichment: None,
                records: Some(2)
            }
        );
    }
}
