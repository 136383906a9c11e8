//! Turns the TOML text of a budgets file into checked [`BudgetConfig`]s, with messages that name
//! the field.

use std::time::Duration;

use toml::{Table, Value};

use super::{budget_path, ConfigError, FleetConfig, FleetFail, Scope};
use crate::budget::BudgetConfig;
use crate::rate::{ParseRateError, Rate};

const FIELDS: &[&str] = &[
    "max_concurrent",
    "max_queued",
    "permit_timeout",
    "call_timeout",
    "service_time",
    "target_rate",
    "limit",
    "algorithm",
    "min",
    "max",
    "initial",
    "backoff",
    "rate",
    "burst",
    "scope",
    "fail",
    "local_limit",
];

/// Keys of the `[fleet]` table.
const FLEET_FIELDS: &[&str] = &["url", "lease"];

/// Keys that only an adaptive limit takes.
const ADAPTIVE_FIELDS: &[&str] = &["algorithm", "min", "max", "initial", "backoff"];

/// The most calls at once an adaptive limit may reach when the file gives no `max`.
pub(crate) const DEFAULT_ADAPTIVE_MAX: usize = 100;

/// A budgets file, checked: each budget with its scope, and the `[fleet]` table if any.
pub(super) struct Parsed {
    pub(super) budgets: Vec<(String, BudgetConfig, Scope)>,
    pub(super) fleet: Option<FleetConfig>,
}

pub(super) fn budgets_file(text: &str) -> Result<Parsed, ConfigError> {
    let root: Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Toml(e.to_string().trim_end().to_string()))?;
    for key in root.keys() {
        if key != "budgets" && key != "fleet" {
            return Err(ConfigError::invalid(
                key.as_str(),
                "unknown top-level key (expected only [budgets.<name>] tables and [fleet])",
            ));
        }
    }
    let fleet = root.get("fleet").map(fleet_config).transpose()?;
    let budgets = match root.get("budgets") {
        None => {
            return Err(ConfigError::invalid(
                "budgets",
                "no budgets defined (add a [budgets.<name>] table with max_concurrent)",
            ))
        }
        Some(Value::Table(t)) => t,
        Some(other) => {
            return Err(ConfigError::invalid(
                "budgets",
                format!("must be a table of budgets, got {}", other.type_str()),
            ))
        }
    };
    if budgets.is_empty() {
        return Err(ConfigError::invalid(
            "budgets",
            "no budgets defined (add a [budgets.<name>] table with max_concurrent)",
        ));
    }
    let budgets = budgets
        .iter()
        .map(|(name, value)| {
            let table = value.as_table().ok_or_else(|| {
                ConfigError::invalid(
                    budget_path(name),
                    format!("must be a table, got {}", value.type_str()),
                )
            })?;
            let config = budget_config(name, table)?;
            let scope = scope(name, table, &config, fleet.is_some())?;
            Ok((name.clone(), config, scope))
        })
        .collect::<Result<_, ConfigError>>()?;
    Ok(Parsed { budgets, fleet })
}

/// The `[fleet]` table: where fleet-scoped budgets keep their permits.
fn fleet_config(value: &Value) -> Result<FleetConfig, ConfigError> {
    let table = value.as_table().ok_or_else(|| {
        ConfigError::invalid(
            "fleet",
            format!("must be a table, got {}", value.type_str()),
        )
    })?;
    for key in table.keys() {
        if !FLEET_FIELDS.contains(&key.as_str()) {
            return Err(ConfigError::invalid(
                format!("fleet.{key}"),
                format!("unknown key (expected one of {})", FLEET_FIELDS.join(", ")),
            ));
        }
    }
    let url = match table.get("url") {
        Some(Value::String(url)) if !url.trim().is_empty() => url.clone(),
        Some(other) => {
            return Err(ConfigError::invalid(
                "fleet.url",
                format!(
                    "must be a URL string like \"redis://127.0.0.1:6379\", got {}",
                    shown(other)
                ),
            ))
        }
        None => {
            return Err(ConfigError::invalid(
                "fleet.url",
                "missing (where the fleet keeps its permits, e.g. \"redis://127.0.0.1:6379\")",
            ))
        }
    };
    let lease = table
        .get("lease")
        .map(|v| duration("fleet.lease", v))
        .transpose()?;
    Ok(FleetConfig { url, lease })
}

/// Where a budget's permits live: `scope`, and for a fleet budget `fail` and `local_limit`.
fn scope(
    name: &str,
    table: &Table,
    config: &BudgetConfig,
    has_fleet: bool,
) -> Result<Scope, ConfigError> {
    let path = budget_path(name);
    let field = |f: &str| format!("{path}.{f}");
    let fleet = match table.get("scope") {
        None => false,
        Some(Value::String(s)) if s == "local" => false,
        Some(Value::String(s)) if s == "fleet" => true,
        Some(other) => {
            return Err(ConfigError::invalid(
                field("scope"),
                format!("must be \"local\" or \"fleet\", got {}", shown(other)),
            ))
        }
    };
    if !fleet {
        if let Some(key) = ["fail", "local_limit"]
            .iter()
            .find(|k| table.contains_key(**k))
        {
            return Err(ConfigError::invalid(
                field(key),
                "only a fleet budget takes this (add scope = \"fleet\")",
            ));
        }
        return Ok(Scope::Local);
    }
    if !has_fleet {
        return Err(ConfigError::invalid(
            field("scope"),
            "a fleet budget needs a [fleet] table with url",
        ));
    }
    let local = match table.get("fail") {
        None => false,
        Some(Value::String(s)) if s == "closed" => false,
        Some(Value::String(s)) if s == "local" => true,
        Some(other) => {
            return Err(ConfigError::invalid(
                field("fail"),
                format!("must be \"closed\" or \"local\", got {}", shown(other)),
            ))
        }
    };
    let fail = match (local, table.get("local_limit")) {
        (false, None) => FleetFail::Closed,
        (false, Some(_)) => {
            return Err(ConfigError::invalid(
                field("local_limit"),
                "only fail = \"local\" takes this",
            ))
        }
        (true, None) => return Err(ConfigError::invalid(
            field("local_limit"),
            "missing (fail = \"local\" needs the limit per process while the fleet is unreachable)",
        )),
        (true, Some(v)) => {
            let n = integer(&field("local_limit"), v, 1)?;
            if n > config.max_concurrent() {
                return Err(ConfigError::invalid(
                    field("local_limit"),
                    format!(
                        "must not exceed max_concurrent ({}), got {n}",
                        config.max_concurrent()
                    ),
                ));
            }
            FleetFail::Local(n)
        }
    };
    Ok(Scope::Fleet { fail })
}

fn budget_config(name: &str, table: &Table) -> Result<BudgetConfig, ConfigError> {
    let path = budget_path(name);
    let field = |f: &str| format!("{path}.{f}");
    for key in table.keys() {
        if !FIELDS.contains(&key.as_str()) {
            return Err(ConfigError::invalid(
                field(key),
                format!("unknown key (expected one of {})", FIELDS.join(", ")),
            ));
        }
    }
    let adaptive = match table.get("limit") {
        None => false,
        Some(Value::String(kind)) if kind == "fixed" => false,
        Some(Value::String(kind)) if kind == "adaptive" => true,
        Some(other) => {
            return Err(ConfigError::invalid(
                field("limit"),
                format!("must be \"fixed\" or \"adaptive\", got {}", shown(other)),
            ))
        }
    };
    if !adaptive {
        if let Some(key) = ADAPTIVE_FIELDS.iter().find(|k| table.contains_key(**k)) {
            return Err(ConfigError::invalid(
                field(key),
                "only an adaptive limit takes this (add limit = \"adaptive\")",
            ));
        }
    }
    let max_concurrent = match (table.get("max_concurrent"), table.get("max")) {
        (Some(v), None) => integer(&field("max_concurrent"), v, 1)?,
        (None, Some(v)) => integer(&field("max"), v, 1)?,
        (Some(_), Some(_)) => {
            return Err(ConfigError::invalid(
                field("max"),
                "give max or max_concurrent, not both (they are the same number)",
            ))
        }
        (None, None) if adaptive => DEFAULT_ADAPTIVE_MAX,
        (None, None) => {
            return Err(ConfigError::invalid(
                field("max_concurrent"),
                "missing (every budget needs a limit of at least 1)",
            ))
        }
    };
    let mut config = BudgetConfig::new(max_concurrent);
    if let Some(v) = table.get("max_queued") {
        config = config.max_queued(integer(&field("max_queued"), v, 0)?);
    }
    if let Some(v) = table.get("permit_timeout") {
        config = config.permit_timeout(duration(&field("permit_timeout"), v)?);
    }
    if let Some(v) = table.get("call_timeout") {
        config = config.call_timeout(duration(&field("call_timeout"), v)?);
    }
    if let Some(v) = table.get("service_time") {
        config = config.service_time(duration(&field("service_time"), v)?);
    }
    if let Some(v) = table.get("target_rate") {
        config = config.target_rate(rate(&field("target_rate"), v)?);
    }
    if adaptive {
        config = adaptive_limit(config, table, &field)?;
    }
    if table.contains_key("rate") || table.contains_key("burst") {
        config = rate_limit(config, table, &field)?;
    }
    Ok(config)
}

#[cfg(feature = "adaptive")]
fn adaptive_limit(
    config: BudgetConfig,
    table: &Table,
    field: &dyn Fn(&str) -> String,
) -> Result<BudgetConfig, ConfigError> {
    use crate::limit::{Adaptive, Algorithm};

    let algorithm = match table.get("algorithm") {
        None => Algorithm::default(),
        Some(Value::String(name)) => name
            .parse()
            .map_err(|e: String| ConfigError::invalid(field("algorithm"), e))?,
        Some(other) => {
            return Err(ConfigError::invalid(
                field("algorithm"),
                format!("must be \"aimd\" or \"vegas\", got {}", shown(other)),
            ))
        }
    };
    let mut adaptive = Adaptive::new(algorithm);
    if let Some(v) = table.get("min") {
        adaptive = adaptive.min(integer(&field("min"), v, 1)?);
    }
    if let Some(v) = table.get("initial") {
        adaptive = adaptive.initial(integer(&field("initial"), v, 1)?);
    }
    if let Some(v) = table.get("backoff") {
        let b = v.as_float().ok_or_else(|| {
            ConfigError::invalid(
                field("backoff"),
                format!("must be a number like 0.75, got {}", shown(v)),
            )
        })?;
        adaptive = adaptive.backoff(b);
    }
    if !table.contains_key("initial") {
        // The default start, under a max smaller than it, starts at the max instead.
        adaptive = adaptive.initial(adaptive.initial_limit().min(config.max_concurrent()));
    }
    Ok(config.adaptive(adaptive))
}

#[cfg(not(feature = "adaptive"))]
fn adaptive_limit(
    _: BudgetConfig,
    _: &Table,
    field: &dyn Fn(&str) -> String,
) -> Result<BudgetConfig, ConfigError> {
    Err(ConfigError::invalid(
        field("limit"),
        "adaptive limits need the crate's \"adaptive\" feature",
    ))
}

#[cfg(feature = "rate")]
fn rate_limit(
    mut config: BudgetConfig,
    table: &Table,
    field: &dyn Fn(&str) -> String,
) -> Result<BudgetConfig, ConfigError> {
    if let Some(v) = table.get("rate") {
        config = config.rate(rate(&field("rate"), v)?);
    }
    if let Some(v) = table.get("burst") {
        let burst = integer(&field("burst"), v, 1)?;
        let burst = u32::try_from(burst)
            .map_err(|_| ConfigError::invalid(field("burst"), format!("is too large: {burst}")))?;
        config = config.burst(burst);
    }
    Ok(config)
}

#[cfg(not(feature = "rate"))]
fn rate_limit(
    _: BudgetConfig,
    _: &Table,
    field: &dyn Fn(&str) -> String,
) -> Result<BudgetConfig, ConfigError> {
    Err(ConfigError::invalid(
        field("rate"),
        "rate limits need the crate's \"rate\" feature",
    ))
}

fn integer(field: &str, value: &Value, min: i64) -> Result<usize, ConfigError> {
    let n = value.as_integer().ok_or_else(|| {
        ConfigError::invalid(
            field,
            format!("must be a whole number, got {}", shown(value)),
        )
    })?;
    if n < min {
        let message = if min == 0 {
            format!("must not be negative, got {n}")
        } else {
            format!("must be at least {min}, got {n}")
        };
        return Err(ConfigError::invalid(field, message));
    }
    usize::try_from(n).map_err(|_| ConfigError::invalid(field, format!("is too large: {n}")))
}

fn duration(field: &str, value: &Value) -> Result<Duration, ConfigError> {
    let text = value.as_str().ok_or_else(|| {
        ConfigError::invalid(
            field,
            format!(
                "must be a duration string like \"500ms\" or \"2s\", got {}",
                shown(value)
            ),
        )
    })?;
    if text.trim_start().starts_with('-') {
        return Err(ConfigError::invalid(
            field,
            format!("must not be negative, got {text:?}"),
        ));
    }
    let d = humantime::parse_duration(text).map_err(|e| {
        ConfigError::invalid(
            field,
            format!("cannot parse {text:?} as a duration like \"500ms\" or \"2s\": {e}"),
        )
    })?;
    if d.is_zero() {
        return Err(ConfigError::invalid(
            field,
            format!("must be greater than zero, got {text:?}"),
        ));
    }
    Ok(d)
}

fn rate(field: &str, value: &Value) -> Result<Rate, ConfigError> {
    let text = value.as_str().ok_or_else(|| {
        ConfigError::invalid(
            field,
            format!("must be a rate string like \"40/s\", got {}", shown(value)),
        )
    })?;
    if text.trim_start().starts_with('-') {
        return Err(ConfigError::invalid(
            field,
            format!("must not be negative, got {text:?}"),
        ));
    }
    let rate: Rate = text
        .parse()
        .map_err(|e: ParseRateError| ConfigError::invalid(field, e.to_string()))?;
    if rate.events_per_second() == 0.0 {
        return Err(ConfigError::invalid(
            field,
            format!("must be greater than zero, got {text:?}"),
        ));
    }
    Ok(rate)
}

/// A value of the wrong type, for a message: its type and its text as written (`integer 500`,
/// `datetime 1979-05-27`; toml would show a datetime as its internal table).
fn shown(value: &Value) -> String {
    match value {
        Value::Datetime(d) => format!("datetime {d}"),
        other => format!("{} {other}", other.type_str()),
    }
}
