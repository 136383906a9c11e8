//! Turns the TOML text of a budgets file into checked [`BudgetConfig`]s, with messages that name
//! the field.

use std::time::Duration;

use toml::{Table, Value};

use super::{budget_path, ConfigError};
use crate::budget::BudgetConfig;
use crate::rate::{ParseRateError, Rate};

const FIELDS: &[&str] = &[
    "max_concurrent",
    "max_queued",
    "permit_timeout",
    "call_timeout",
    "service_time",
    "target_rate",
];

pub(super) fn budget_configs(text: &str) -> Result<Vec<(String, BudgetConfig)>, ConfigError> {
    let root: Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Toml(e.to_string().trim_end().to_string()))?;
    for key in root.keys() {
        if key != "budgets" {
            return Err(ConfigError::invalid(
                key.as_str(),
                "unknown top-level key (expected only [budgets.<name>] tables)",
            ));
        }
    }
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
    budgets
        .iter()
        .map(|(name, value)| {
            let table = value.as_table().ok_or_else(|| {
                ConfigError::invalid(
                    budget_path(name),
                    format!("must be a table, got {}", value.type_str()),
                )
            })?;
            Ok((name.clone(), budget_config(name, table)?))
        })
        .collect()
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
    let max_concurrent = match table.get("max_concurrent") {
        None => {
            return Err(ConfigError::invalid(
                field("max_concurrent"),
                "missing (every budget needs a limit of at least 1)",
            ))
        }
        Some(v) => integer(&field("max_concurrent"), v, 1)?,
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
    Ok(config)
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
