//! The strategies file read: each strategy's table as written, checked field by field into a
//! [`Strategy`], with messages that name the strategy and the field.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use super::gate_spec::{budget_table, Peer};
use super::{
    BudgetPlan, Enforce, GateSpec, RecordsInFlight, RetryBy, RetrySpec, Strategies, Strategy,
    MAX_ATTEMPTS,
};

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
    use std::path::Path;

    use super::*;
    use crate::strategy::{builtin, load};

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
