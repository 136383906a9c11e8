//! Turns a [`BudgetsFile`] into checked [`BudgetConfig`]s with their scopes, and the `[fleet]`
//! table, with messages that name the field.

use super::classes::{self, CLASS_FIELDS};
use super::error::{budget_path, ConfigError};
use super::file::{expected_tables, known_table, BudgetsFile, Keys};
use super::value::{duration, integer, rate, shown, Table, Value};
use super::{FleetConfig, FleetFail, LeaseMode, Scope};
use crate::budget::{BudgetConfig, OnLost};

/// Keys of a budget's table, but for its classes' ([`CLASS_FIELDS`]).
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
    "cold_start",
    "probe_hold",
    "rate",
    "burst",
    "scope",
    "fail",
    "local_limit",
    "lease_mode",
    "on_lost",
];

/// Keys of the `[fleet]` table.
const FLEET_FIELDS: &[&str] = &["url", "lease", "ca_file"];

/// Keys that only an adaptive limit takes.
const ADAPTIVE_FIELDS: &[&str] = &[
    "algorithm",
    "min",
    "max",
    "initial",
    "backoff",
    "cold_start",
    "probe_hold",
];

/// The most calls at once an adaptive limit may reach when the file gives no `max`.
pub(crate) const DEFAULT_ADAPTIVE_MAX: usize = 100;

/// A budgets file's own keys, checked: each budget with its scope, and the `[fleet]` table if
/// any.
pub(super) struct Parsed {
    pub(super) budgets: Vec<(String, BudgetConfig, Scope)>,
    pub(super) fleet: Option<FleetConfig>,
    /// How each fleet budget holds its permits (`lease_mode`), by name.
    pub(super) lease_modes: Vec<(String, LeaseMode)>,
}

/// The budgets of `file`, whose keys are this crate's or those `others` read.
pub(super) fn budgets_file(file: &BudgetsFile, others: &[Keys]) -> Result<Parsed, ConfigError> {
    let root = file.root();
    // Every key is checked, so a file with several mistakes names them all at once.
    let mut errors = Vec::new();
    for key in root.keys() {
        if !known_table(key, others) {
            errors.push(ConfigError::invalid(
                key.as_str(),
                format!(
                    "unknown top-level key (expected only {})",
                    expected_tables(others)
                ),
            ));
        }
    }
    let fleet = match root.get("fleet").map(|v| fleet_config(v, file)) {
        Some(Ok(fleet)) => Some(fleet),
        Some(Err(e)) => {
            errors.push(e);
            None
        }
        None => None,
    };
    // A [fleet] table with a mistake in it is there all the same: its budgets are checked as
    // fleet budgets.
    let has_fleet = root.contains_key("fleet");
    let no_budgets = || {
        ConfigError::invalid(
            "budgets",
            "no budgets defined (add a [budgets.<name>] table with max_concurrent)",
        )
    };
    let budgets = match root.get("budgets") {
        Some(Value::Table(t)) if !t.is_empty() => t,
        other => {
            errors.push(match other {
                Some(Value::Table(_)) | None => no_budgets(),
                Some(other) => ConfigError::invalid(
                    "budgets",
                    format!("must be a table of budgets, got {}", other.type_str()),
                ),
            });
            return Err(ConfigError::join(errors).expect("one error at least"));
        }
    };
    let mut configs = Vec::new();
    for (name, value) in budgets {
        let Some(table) = value.as_table() else {
            errors.push(ConfigError::invalid(
                budget_path(name),
                format!("must be a table, got {}", value.type_str()),
            ));
            continue;
        };
        let checked = budget_config(name, table, others).and_then(|config| {
            let scope = scope(name, table, &config, has_fleet)?;
            Ok((config, scope))
        });
        match checked {
            Ok((config, scope)) => configs.push((name.clone(), config, scope)),
            Err(e) => errors.push(e),
        }
    }
    let mut lease_modes = Vec::new();
    for (name, _, scope) in &configs {
        if let Some(table) = budgets.get(name).and_then(Value::as_table) {
            match lease_mode(name, table, *scope) {
                Ok(Some(mode)) => lease_modes.push((name.clone(), mode)),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
    }
    match ConfigError::join(errors) {
        Some(e) => Err(e),
        None => Ok(Parsed {
            budgets: configs,
            fleet,
            lease_modes,
        }),
    }
}

/// How a fleet budget holds its permits: `lease_mode`, `"per_call"` (the default) or
/// `"shares"`. `None` for a budget that is not a fleet budget.
fn lease_mode(name: &str, table: &Table, scope: Scope) -> Result<Option<LeaseMode>, ConfigError> {
    let field = format!("{}.lease_mode", budget_path(name));
    let fleet = matches!(scope, Scope::Fleet { .. });
    match (table.get("lease_mode"), fleet) {
        (None, false) => Ok(None),
        (Some(_), false) => Err(ConfigError::invalid(
            field,
            "only a fleet budget takes this (add scope = \"fleet\")",
        )),
        (None, true) => Ok(Some(LeaseMode::PerCall)),
        (Some(Value::String(s)), true) if s == "per_call" => Ok(Some(LeaseMode::PerCall)),
        (Some(Value::String(s)), true) if s == "shares" && table.contains_key("rate") => {
            Err(ConfigError::invalid(
                field,
                "\"shares\" keeps no fleet rate: a fleet budget with a rate holds its permits per call (leave lease_mode out)",
            ))
        }
        (Some(Value::String(s)), true) if s == "shares" => Ok(Some(LeaseMode::Shares)),
        (Some(other), true) => Err(ConfigError::invalid(
            field,
            format!("must be \"per_call\" or \"shares\", got {}", shown(other)),
        )),
    }
}

/// The `[fleet]` table: where fleet-scoped budgets keep their permits. Every mistake in it is
/// named, not only the first.
fn fleet_config(value: &Value, file: &BudgetsFile) -> Result<FleetConfig, ConfigError> {
    let table = value.as_table().ok_or_else(|| {
        ConfigError::invalid(
            "fleet",
            format!("must be a table, got {}", value.type_str()),
        )
    })?;
    let mut errors = Vec::new();
    for key in table.keys() {
        if !FLEET_FIELDS.contains(&key.as_str()) {
            errors.push(ConfigError::invalid(
                format!("fleet.{key}"),
                format!("unknown key (expected one of {})", FLEET_FIELDS.join(", ")),
            ));
        }
    }
    let url = match table.get("url") {
        Some(Value::String(url)) if !url.trim().is_empty() => Some(url.clone()),
        Some(other) => {
            errors.push(ConfigError::invalid(
                "fleet.url",
                format!(
                    "must be a URL string like \"redis://127.0.0.1:6379\", got {}",
                    shown(other)
                ),
            ));
            None
        }
        None => {
            errors.push(ConfigError::invalid(
                "fleet.url",
                "missing (where the fleet keeps its permits, e.g. \"redis://127.0.0.1:6379\")",
            ));
            None
        }
    };
    let lease = match table.get("lease").map(|v| duration("fleet.lease", v)) {
        // A lease is how long a crashed holder's permits stay taken: a week at most, as every
        // timeout; 3 ms at least (renewed every third of it).
        Some(Ok(lease))
            if lease > std::time::Duration::from_secs(7 * 24 * 3600)
                || lease < std::time::Duration::from_millis(3) =>
        {
            errors.push(ConfigError::invalid(
                "fleet.lease",
                format!(
                    "must be at least 3ms and at most 7 days, got {}",
                    humantime::format_duration(lease)
                ),
            ));
            None
        }
        Some(Ok(lease)) => Some(lease),
        Some(Err(e)) => {
            errors.push(e);
            None
        }
        None => None,
    };
    let ca_file = match table.get("ca_file") {
        None => None,
        Some(Value::String(p)) if !p.trim().is_empty() => Some(file.resolve(p)),
        Some(other) => {
            errors.push(ConfigError::invalid(
                "fleet.ca_file",
                format!(
                    "must be the path of a PEM file like \"redis-ca.pem\", got {}",
                    shown(other)
                ),
            ));
            None
        }
    };
    match (ConfigError::join(errors), url) {
        (None, Some(url)) => Ok(FleetConfig {
            url,
            lease,
            ca_file,
        }),
        (Some(e), _) => Err(e),
        (None, None) => Err(ConfigError::invalid("fleet.url", "missing")),
    }
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

fn budget_config(name: &str, table: &Table, others: &[Keys]) -> Result<BudgetConfig, ConfigError> {
    let path = budget_path(name);
    let field = |f: &str| format!("{path}.{f}");
    let mut errors = Vec::new();
    let known = || {
        FIELDS
            .iter()
            .chain(CLASS_FIELDS)
            .chain(others.iter().flat_map(|k| k.budget_keys()))
    };
    for key in table.keys() {
        if !known().any(|k| k == key) {
            let expected: Vec<&str> = known().copied().collect();
            errors.push(ConfigError::invalid(
                field(key),
                format!("unknown key (expected one of {})", expected.join(", ")),
            ));
        }
    }
    let adaptive = match table.get("limit") {
        None => false,
        Some(Value::String(kind)) if kind == "fixed" => false,
        Some(Value::String(kind)) if kind == "adaptive" => true,
        Some(other) => {
            errors.push(ConfigError::invalid(
                field("limit"),
                format!("must be \"fixed\" or \"adaptive\", got {}", shown(other)),
            ));
            false
        }
    };
    if !adaptive
        && table
            .get("limit")
            .is_none_or(|v| v.as_str() == Some("fixed"))
    {
        for key in ADAPTIVE_FIELDS.iter().filter(|k| table.contains_key(**k)) {
            errors.push(ConfigError::invalid(
                field(key),
                "only an adaptive limit takes this (add limit = \"adaptive\")",
            ));
        }
    }
    let max_concurrent = match (table.get("max_concurrent"), table.get("max")) {
        (Some(v), None) => integer(&field("max_concurrent"), v, 1),
        (None, Some(v)) => integer(&field("max"), v, 1),
        (Some(_), Some(_)) => Err(ConfigError::invalid(
            field("max"),
            "give max or max_concurrent, not both (they are the same number)",
        )),
        (None, None) if adaptive => Ok(DEFAULT_ADAPTIVE_MAX),
        (None, None) => Err(ConfigError::invalid(
            field("max_concurrent"),
            "missing (every budget needs a limit of at least 1)",
        )),
    };
    let mut config = BudgetConfig::new(*max_concurrent.as_ref().unwrap_or(&1));
    if let Err(e) = max_concurrent {
        errors.push(e);
    }
    let mut take = |r: Result<BudgetConfig, ConfigError>, config: &mut BudgetConfig| match r {
        Ok(c) => *config = c,
        Err(e) => errors.push(e),
    };
    if let Some(v) = table.get("max_queued") {
        let r = integer(&field("max_queued"), v, 0).map(|n| config.clone().max_queued(n));
        take(r, &mut config);
    }
    if let Some(v) = table.get("permit_timeout") {
        let r = duration(&field("permit_timeout"), v).map(|d| config.clone().permit_timeout(d));
        take(r, &mut config);
    }
    if let Some(v) = table.get("call_timeout") {
        let r = duration(&field("call_timeout"), v).map(|d| config.clone().call_timeout(d));
        take(r, &mut config);
    }
    if let Some(v) = table.get("service_time") {
        let r = duration(&field("service_time"), v).map(|d| config.clone().service_time(d));
        take(r, &mut config);
    }
    if let Some(v) = table.get("on_lost") {
        let r = match v {
            Value::String(s) if s == "keep" => Ok(config.clone().on_lost(OnLost::Keep)),
            Value::String(s) if s == "cancel" => Ok(config.clone().on_lost(OnLost::Cancel)),
            other => Err(ConfigError::invalid(
                field("on_lost"),
                format!(
                    "must be \"keep\" (the default: a call whose lease is lost runs on) or \"cancel\" (it is dropped), got {}",
                    shown(other)
                ),
            )),
        };
        take(r, &mut config);
    }
    if let Some(v) = table.get("target_rate") {
        let r = rate(&field("target_rate"), v).map(|t| config.clone().target_rate(t));
        take(r, &mut config);
    }
    if adaptive {
        let r = adaptive_limit(config.clone(), table, &field);
        take(r, &mut config);
    }
    if table.contains_key("rate") || table.contains_key("burst") {
        let r = rate_limit(config.clone(), table, &field);
        take(r, &mut config);
    }
    match classes::classes(table, &path) {
        Ok(Some(classes)) => config = config.classes(classes),
        Ok(None) => {}
        Err(e) => errors.push(e),
    }
    match ConfigError::join(errors) {
        Some(e) => Err(e),
        None => Ok(config),
    }
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
    if let Some(v) = table.get("probe_hold") {
        let rounds = integer(&field("probe_hold"), v, 0)?;
        adaptive = adaptive.probe_hold(u32::try_from(rounds).unwrap_or(u32::MAX));
    }
    if let Some(v) = table.get("cold_start") {
        // "0s" is taken: the whole initial limit at once.
        let zero = v
            .as_str()
            .is_some_and(|t| matches!(t.trim(), "0" | "0s" | "0ms"));
        let spread = if zero {
            std::time::Duration::ZERO
        } else {
            duration(&field("cold_start"), v)?
        };
        adaptive = adaptive.cold_start(spread);
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
