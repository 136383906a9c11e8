//! A budget's priority classes in a budgets file: `classes`, `default_class` and `strict`.
//!
//! ```toml
//! [budgets.records]
//! max_concurrent = 6
//! classes = { interactive = { weight = 4, permit_timeout = "50ms" }, batch = 1 }
//! default_class = "batch"   # optional: else the lightest class
//! strict = false            # optional: true serves the heaviest class with waiters first
//! ```

use super::error::ConfigError;
use super::value::{duration, short, shown, Table, Value};
use crate::budget::{Classes, MAX_CLASSES, MAX_WEIGHT};

/// Keys of a budget's table about its classes.
pub(super) const CLASS_FIELDS: &[&str] = &["classes", "default_class", "strict"];

/// Keys of one class's table (`interactive = { weight = 4, permit_timeout = "50ms" }`).
const CLASS_TABLE_FIELDS: &[&str] = &["weight", "permit_timeout"];

/// The longest class name: names travel in metrics labels and in request headers.
pub const MAX_CLASS_NAME: usize = 64;

/// The budget's classes, if its table declares them; `path` is the budget's dotted path.
/// Every mistake is reported, each under its own path.
pub(super) fn classes(table: &Table, path: &str) -> Result<Option<Classes>, ConfigError> {
    let field = |f: &str| format!("{path}.{f}");
    let Some(value) = table.get("classes") else {
        let errors: Vec<ConfigError> = ["default_class", "strict"]
            .iter()
            .filter(|k| table.contains_key(**k))
            .map(|k| {
                ConfigError::invalid(
                    field(k),
                    "only a budget with classes takes this (add classes = { interactive = 4, batch = 1 })",
                )
            })
            .collect();
        return match ConfigError::join(errors) {
            Some(e) => Err(e),
            None => Ok(None),
        };
    };
    let Value::Table(declared) = value else {
        return Err(ConfigError::invalid(
            field("classes"),
            format!(
                "must be a table of class weights like {{ interactive = 4, batch = 1 }}, got {}",
                shown(value)
            ),
        ));
    };
    if declared.is_empty() {
        return Err(ConfigError::invalid(
            field("classes"),
            "must name at least one class, e.g. { interactive = 4, batch = 1 }",
        ));
    }
    if declared.len() > MAX_CLASSES {
        return Err(ConfigError::invalid(
            field("classes"),
            format!("at most {MAX_CLASSES} classes, got {}", declared.len()),
        ));
    }
    let mut errors = Vec::new();
    let mut classes = Classes::new();
    for (name, value) in declared {
        let at = class_path(&field("classes"), name);
        if let Err(why) = check_name(name) {
            errors.push(ConfigError::invalid(at, why));
            continue;
        }
        match class(&at, value) {
            Ok((weight, timeout)) => {
                classes = classes.class(name, weight);
                if let Some(timeout) = timeout {
                    classes = classes.class_permit_timeout(name, timeout);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    match table.get("default_class") {
        None => {}
        Some(Value::String(name)) if declared.contains_key(name) => {
            classes = classes.default_class(name);
        }
        Some(Value::String(name)) => {
            let names: Vec<&str> = declared.keys().map(String::as_str).collect();
            errors.push(ConfigError::invalid(
                field("default_class"),
                format!(
                    "{} is not one of the classes ({})",
                    short(name),
                    names.join(", ")
                ),
            ));
        }
        Some(other) => errors.push(ConfigError::invalid(
            field("default_class"),
            format!(
                "must be the name of one of the classes, like \"batch\", got {}",
                shown(other)
            ),
        )),
    }
    match table.get("strict") {
        None => {}
        Some(Value::Boolean(strict)) => classes = classes.strict(*strict),
        Some(other) => errors.push(ConfigError::invalid(
            field("strict"),
            format!("must be true or false, got {}", shown(other)),
        )),
    }
    match ConfigError::join(errors) {
        Some(e) => Err(e),
        None => Ok(Some(classes)),
    }
}

/// One class: a weight, or a table with a weight and a permit deadline of its own.
fn class(at: &str, value: &Value) -> Result<(u32, Option<std::time::Duration>), ConfigError> {
    match value {
        Value::Integer(_) => Ok((weight(at, "weight ", value)?, None)),
        Value::Table(t) => {
            let mut errors = Vec::new();
            for key in t.keys() {
                if !CLASS_TABLE_FIELDS.contains(&key.as_str()) {
                    errors.push(ConfigError::invalid(
                        format!("{at}.{key}"),
                        format!(
                            "unknown key (expected one of {})",
                            CLASS_TABLE_FIELDS.join(", ")
                        ),
                    ));
                }
            }
            let weight = match t.get("weight") {
                Some(v) => weight(&format!("{at}.weight"), "", v).map_err(|e| errors.push(e)),
                None => {
                    errors.push(ConfigError::invalid(
                        format!("{at}.weight"),
                        "missing (the class's share of the grants, e.g. weight = 4)",
                    ));
                    Err(())
                }
            };
            let timeout = t
                .get("permit_timeout")
                .map(|v| permit_timeout(&format!("{at}.permit_timeout"), v))
                .transpose()
                .map_err(|e| errors.push(e));
            match (ConfigError::join(errors), weight, timeout) {
                (None, Ok(weight), Ok(timeout)) => Ok((weight, timeout)),
                (Some(e), _, _) => Err(e),
                (None, _, _) => unreachable!("every failure pushed an error"),
            }
        }
        other => Err(ConfigError::invalid(
            at,
            format!(
                "must be a weight like 4, or a table like {{ weight = 4, permit_timeout = \"50ms\" }}, got {}",
                shown(other)
            ),
        )),
    }
}

/// A class's own permit deadline, within the bounds of a budget's.
fn permit_timeout(at: &str, value: &Value) -> Result<std::time::Duration, ConfigError> {
    let d = duration(at, value)?;
    // The budget's own check, so that the bound has one source.
    crate::BudgetConfig::new(1)
        .permit_timeout(d)
        .validate("class")
        .map_err(|e| ConfigError::invalid(at, e.message()))?;
    Ok(d)
}

/// A weight from 1 to [`MAX_WEIGHT`]; `what` starts the message (`"weight "` when the path
/// does not already say it).
fn weight(at: &str, what: &str, value: &Value) -> Result<u32, ConfigError> {
    let Some(n) = value.as_integer() else {
        return Err(ConfigError::invalid(
            at,
            format!("{what}must be a whole number, got {}", shown(value)),
        ));
    };
    if n < 1 {
        return Err(ConfigError::invalid(
            at,
            format!("{what}must be at least 1, got {n}"),
        ));
    }
    if n > i64::from(MAX_WEIGHT) {
        return Err(ConfigError::invalid(
            at,
            format!("{what}must be at most {MAX_WEIGHT}, got {n}"),
        ));
    }
    Ok(n as u32)
}

/// Whether `name` may name a class: 1 to [`MAX_CLASS_NAME`] letters, digits, `-`, `_` or `.`,
/// so that it can be written in a request header and a metrics label as it is.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a class name must not be empty".into());
    }
    if name.len() > MAX_CLASS_NAME {
        return Err(format!(
            "a class name must be at most {MAX_CLASS_NAME} characters, got {}",
            name.chars().count()
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(
            "a class name may hold only ASCII letters, digits, '-', '_' and '.' (it travels in headers and metrics labels)"
                .into(),
        );
    }
    Ok(())
}

/// The dotted path of class `name` under `classes`, quoted as a TOML key when it is not bare.
fn class_path(classes: &str, name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        format!("{classes}.{name}")
    } else {
        format!("{classes}.{}", short(name))
    }
}
