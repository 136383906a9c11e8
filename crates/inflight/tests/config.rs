//! Loading and checking budgets files: each refusal names the budget and the field.

use std::time::Duration;

use inflight::{Budgets, ConfigError, Rate};

fn refused(text: &str) -> ConfigError {
    Budgets::from_toml_str(text).expect_err("the file must be refused")
}

#[test]
fn a_full_file_loads_in_order() {
    let budgets = Budgets::from_toml_str(
        r#"
        [budgets.records]
        max_concurrent = 6
        max_queued = 6
        permit_timeout = "500ms"
        call_timeout = "2s"
        service_time = "150ms"
        target_rate = "40/s"

        [budgets.enrichment]
        max_concurrent = 24
        "#,
    )
    .unwrap();
    assert_eq!(budgets.len(), 2);
    let names: Vec<_> = budgets.iter().map(|b| b.name().to_string()).collect();
    assert_eq!(names, ["records", "enrichment"]);
    let c = budgets.get("records").unwrap().config();
    assert_eq!(c.max_concurrent(), 6);
    assert_eq!(c.max_queued_limit(), Some(6));
    assert_eq!(c.permit_timeout_limit(), Some(Duration::from_millis(500)));
    assert_eq!(c.call_timeout_limit(), Some(Duration::from_secs(2)));
    assert_eq!(c.service_time_hint(), Some(Duration::from_millis(150)));
    assert_eq!(c.target_rate_hint(), Some(Rate::per_second(40.0)));
    assert_eq!(c.max_rate(), Some(Rate::per_second(40.0)));
    assert_eq!(c.needed_concurrency(), Some(6.0));
    let e = budgets.get("enrichment").unwrap().config();
    assert_eq!(e.max_queued_limit(), None);
    assert_eq!(e.call_timeout_limit(), None);
    assert!(budgets.get("missing").is_none());
}

#[test]
fn zero_max_concurrent_is_refused() {
    let err = refused("[budgets.records]\nmax_concurrent = 0\n");
    assert_eq!(
        err.to_string(),
        "budgets.records.max_concurrent: must be at least 1, got 0"
    );
}

#[test]
fn missing_max_concurrent_is_refused() {
    let err = refused("[budgets.records]\nmax_queued = 6\n");
    assert_eq!(err.field(), Some("budgets.records.max_concurrent"));
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn negative_numbers_are_refused() {
    let err = refused("[budgets.records]\nmax_concurrent = -3\n");
    assert_eq!(
        err.to_string(),
        "budgets.records.max_concurrent: must be at least 1, got -3"
    );
    let err = refused("[budgets.records]\nmax_concurrent = 2\nmax_queued = -1\n");
    assert_eq!(
        err.to_string(),
        "budgets.records.max_queued: must not be negative, got -1"
    );
    let err = refused("[budgets.records]\nmax_concurrent = 2\ncall_timeout = \"-2s\"\n");
    assert_eq!(err.field(), Some("budgets.records.call_timeout"));
    assert!(err.to_string().contains("negative"), "{err}");
    let err = refused("[budgets.records]\nmax_concurrent = 2\ntarget_rate = \"-4/s\"\n");
    assert_eq!(err.field(), Some("budgets.records.target_rate"));
}

#[test]
fn wrong_types_are_refused() {
    let err = refused("[budgets.records]\nmax_concurrent = \"6\"\n");
    assert_eq!(err.field(), Some("budgets.records.max_concurrent"));
    assert!(err.to_string().contains("whole number"), "{err}");
    let err = refused("[budgets.records]\nmax_concurrent = 2.5\n");
    assert_eq!(err.field(), Some("budgets.records.max_concurrent"));
    let err = refused("[budgets.records]\nmax_concurrent = 2\npermit_timeout = 500\n");
    assert_eq!(err.field(), Some("budgets.records.permit_timeout"));
    assert!(err.to_string().contains("duration string"), "{err}");
    let err = refused("[budgets]\nrecords = 6\n");
    assert_eq!(err.field(), Some("budgets.records"));
}

#[test]
fn unparsable_durations_and_rates_are_refused() {
    let err = refused("[budgets.records]\nmax_concurrent = 2\npermit_timeout = \"soon\"\n");
    assert_eq!(err.field(), Some("budgets.records.permit_timeout"));
    assert!(err.to_string().contains("\"soon\""), "{err}");
    let err = refused("[budgets.records]\nmax_concurrent = 2\nservice_time = \"150\"\n");
    assert_eq!(err.field(), Some("budgets.records.service_time"));
    let err = refused("[budgets.records]\nmax_concurrent = 2\ntarget_rate = \"forty\"\n");
    assert_eq!(err.field(), Some("budgets.records.target_rate"));
    assert!(err.to_string().contains("40/s"), "{err}");
}

#[test]
fn zero_timeouts_are_refused() {
    for field in ["permit_timeout", "call_timeout", "service_time"] {
        let err = refused(&format!(
            "[budgets.records]\nmax_concurrent = 2\n{field} = \"0ms\"\n"
        ));
        assert_eq!(
            err.field(),
            Some(format!("budgets.records.{field}").as_str())
        );
        assert!(err.to_string().contains("greater than zero"), "{err}");
    }
    let err = refused("[budgets.records]\nmax_concurrent = 2\ntarget_rate = \"0/s\"\n");
    assert_eq!(err.field(), Some("budgets.records.target_rate"));
}

#[test]
fn unknown_keys_are_refused() {
    let err = refused("[budgets.records]\nmax_concurrent = 2\nmax_inflight = 3\n");
    assert_eq!(err.field(), Some("budgets.records.max_inflight"));
    assert!(err.to_string().contains("unknown key"), "{err}");
    assert!(
        err.to_string().contains("max_concurrent"),
        "lists the known keys: {err}"
    );
    let err = refused("[limits.records]\nmax_concurrent = 2\n");
    assert_eq!(err.field(), Some("limits"));
}

#[test]
fn malformed_toml_and_empty_files_are_refused() {
    let err = refused("[budgets.records\nmax_concurrent = 2\n");
    assert!(matches!(err, ConfigError::Toml(_)), "{err:?}");
    assert!(err.to_string().starts_with("invalid TOML"), "{err}");
    assert!(err.to_string().contains("line 1"), "{err}");
    let err = refused("");
    assert_eq!(err.field(), Some("budgets"));
    let err = refused("[budgets]\n");
    assert_eq!(err.field(), Some("budgets"));
}

#[test]
fn from_path_reads_files_and_names_missing_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("budgets.toml");
    std::fs::write(&path, "[budgets.api]\nmax_concurrent = 3\n").unwrap();
    let budgets = Budgets::from_path(&path).unwrap();
    assert_eq!(budgets.get("api").unwrap().config().max_concurrent(), 3);
    let err = Budgets::from_path(dir.path().join("nope.toml")).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    assert!(err.to_string().contains("nope.toml"), "{err}");
}

#[test]
fn the_shipped_example_loads() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/budgets.toml");
    let budgets = Budgets::from_path(path).unwrap();
    assert_eq!(
        budgets.get("enrichment").unwrap().config().max_concurrent(),
        24
    );
    assert_eq!(budgets.get("records").unwrap().config().max_concurrent(), 6);
}

#[test]
fn assessing_huge_values_never_panics() {
    use inflight::sizing::{assess, Warning};
    use inflight::BudgetConfig;
    // max_queued x service_time / max_concurrent overflows a Duration: the queue certainly
    // cannot drain within the deadline, and assessing it must say so rather than panic.
    let c = BudgetConfig::new(1)
        .max_queued(i64::MAX as usize)
        .permit_timeout(Duration::from_secs(1))
        .service_time(Duration::from_secs(10));
    let a = assess(&c);
    assert!(
        matches!(a.warnings[..], [Warning::QueueCannotDrain { .. }]),
        "{:?}",
        a.warnings
    );
    let _ = a.warnings[0].to_string();
}

#[test]
fn slow_rates_are_not_shown_as_zero() {
    // One call at a time that takes five minutes passes 1/300 calls per second, not "0/s".
    assert_eq!(Rate::per_second(1.0 / 300.0).to_string(), "0.0033/s");
    assert_eq!(Rate::per_second(0.5).to_string(), "0.50/s");
    assert_eq!(Rate::per_second(40.0).to_string(), "40/s");
    assert_eq!(Rate::per_minute(100.0).to_string(), "1.67/s");
    assert_ne!(Rate::per_second(1e-12).to_string(), "0/s");
}

#[test]
fn datetimes_are_refused_without_toml_internals() {
    let err = refused("[budgets.records]\nmax_concurrent = 2\ncall_timeout = 1979-05-27\n");
    assert_eq!(err.field(), Some("budgets.records.call_timeout"));
    assert!(!err.to_string().contains("$__toml"), "{err}");
    assert!(err.to_string().contains("1979-05-27"), "{err}");
}

#[test]
fn names_that_are_not_bare_keys_are_quoted_in_messages() {
    let err = refused("[budgets.\"a.b\"]\nmax_concurrent = 0\n");
    assert_eq!(err.field(), Some("budgets.\"a.b\".max_concurrent"));
    let err = refused("[budgets.\"a.b\"]\nmax_concurrent = 1\nbogus = 1\n");
    assert_eq!(err.field(), Some("budgets.\"a.b\".bogus"));
    let err = refused("[budgets.\"\"]\nmax_concurrent = 1\n");
    assert_eq!(err.field(), Some("budgets.\"\""));
    assert!(err.to_string().contains("must not be empty"), "{err}");
    // Bare names stay as they are.
    let err = refused("[budgets.records-v2]\nmax_concurrent = 0\n");
    assert_eq!(err.field(), Some("budgets.records-v2.max_concurrent"));
}

#[test]
fn every_mistake_is_reported_and_absurd_values_name_their_bound() {
    let err = Budgets::from_toml_str(
        "[budgets.a]\nmax_concurrent = 0\n[budgets.b]\nmax_concurrent = 1\nbogus = 2\ncall_timeout = \"x\"\n",
    )
    .unwrap_err();
    let fields: Vec<_> = err.errors().iter().filter_map(|e| e.field()).collect();
    assert_eq!(
        fields,
        [
            "budgets.a.max_concurrent",
            "budgets.b.bogus",
            "budgets.b.call_timeout"
        ]
    );
    assert!(matches!(err, ConfigError::Several { .. }));
    assert!(err.to_string().starts_with("3 errors:"), "{err}");
    for (text, field, says) in [
        ("call_timeout = \"8days\"", "call_timeout", "at most 7 days"),
        (
            "target_rate = \"1e300/s\"",
            "target_rate",
            "at most 1000000/s",
        ),
        (
            "service_time = \"1e3s\"",
            "service_time",
            "without an exponent",
        ),
        (
            "permit_timeout = \"0.0000001ms\"",
            "permit_timeout",
            "at least 1ns",
        ),
    ] {
        let err = refused(&format!("[budgets.r]\nmax_concurrent = 1\n{text}"));
        assert_eq!(err.field(), Some(&*format!("budgets.r.{field}")), "{text}");
        assert!(err.to_string().contains(says), "{text}: {err}");
    }
    let err = Budgets::from_path("/nonexistent/budgets.toml").unwrap_err();
    assert!(err.to_string().contains("No such file"), "{err}");
}

#[test]
fn fleet_budgets_keep_their_scope_and_the_fleet_table() {
    use inflight::config::{FleetFail, Scope};
    let budgets = Budgets::from_toml_str(
        r#"
        [fleet]
        url = "redis://127.0.0.1:6379"
        lease = "5s"

        [budgets.records]
        max_concurrent = 6
        scope = "fleet"

        [budgets.search]
        max_concurrent = 4
        scope = "fleet"
        fail = "local"
        local_limit = 2

        [budgets.enrichment]
        max_concurrent = 24
        scope = "local"
        "#,
    )
    .unwrap();
    let fleet = budgets.fleet().unwrap();
    assert_eq!(fleet.url(), "redis://127.0.0.1:6379");
    assert_eq!(fleet.lease(), Some(std::time::Duration::from_secs(5)));
    assert_eq!(
        budgets.scope("records"),
        Some(Scope::Fleet {
            fail: FleetFail::Closed
        })
    );
    assert_eq!(
        budgets.scope("search"),
        Some(Scope::Fleet {
            fail: FleetFail::Local(2)
        })
    );
    assert_eq!(budgets.scope("enrichment"), Some(Scope::Local));
    assert_eq!(budgets.scope("missing"), None);
}

#[test]
fn fleet_keys_are_checked() {
    let fleet = "[fleet]\nurl = \"redis://127.0.0.1:6379\"\n";
    let cases = [
        (
            "[budgets.r]\nmax_concurrent = 2\nscope = \"fleet\"\n".to_string(),
            "budgets.r.scope",
            "[fleet]",
        ),
        (
            format!("{fleet}[budgets.r]\nmax_concurrent = 2\nscope = \"world\"\n"),
            "budgets.r.scope",
            "\"local\" or \"fleet\"",
        ),
        (
            format!("{fleet}[budgets.r]\nmax_concurrent = 2\nfail = \"local\"\n"),
            "budgets.r.fail",
            "scope = \"fleet\"",
        ),
        (
            format!("{fleet}[budgets.r]\nmax_concurrent = 2\nscope = \"fleet\"\nfail = \"open\"\n"),
            "budgets.r.fail",
            "\"closed\" or \"local\"",
        ),
        (
            format!("{fleet}[budgets.r]\nmax_concurrent = 2\nscope = \"fleet\"\nfail = \"local\"\n"),
            "budgets.r.local_limit",
            "missing",
        ),
        (
            format!(
                "{fleet}[budgets.r]\nmax_concurrent = 2\nscope = \"fleet\"\nfail = \"local\"\nlocal_limit = 3\n"
            ),
            "budgets.r.local_limit",
            "max_concurrent",
        ),
        (
            format!("{fleet}[budgets.r]\nmax_concurrent = 2\nscope = \"fleet\"\nlocal_limit = 1\n"),
            "budgets.r.local_limit",
            "fail = \"local\"",
        ),
        (
            "[fleet]\nlease = \"5s\"\n[budgets.r]\nmax_concurrent = 2\n".to_string(),
            "fleet.url",
            "missing",
        ),
        (
            format!("{fleet}hosts = 3\n[budgets.r]\nmax_concurrent = 2\n"),
            "fleet.hosts",
            "unknown key",
        ),
        (
            format!("{fleet}lease = \"0s\"\n[budgets.r]\nmax_concurrent = 2\n"),
            "fleet.lease",
            "greater than zero",
        ),
    ];
    for (text, field, says) in cases {
        let err = refused(&text);
        assert_eq!(err.field(), Some(field), "{text}");
        assert!(err.to_string().contains(says), "{err}");
    }
}

#[test]
fn every_mistake_of_a_file_is_named_at_once_those_of_its_fleet_table_too() {
    let err = refused(
        "[fleet]\nleese = \"5s\"\nlease = \"1ms\"\n\n\
         [budgets.r]\nmax_concurrent = 0\nscope = \"fleet\"\n\n\
         [budgets.s]\nmax_concurrent = 2\n\n\
         [extra]\n",
    )
    .to_string();
    for says in [
        "fleet.leese: unknown key",
        "fleet.url: missing",
        "fleet.lease: must be at least 3ms",
        "budgets.r.max_concurrent",
        "extra: unknown top-level key",
    ] {
        assert!(err.contains(says), "{says:?} in {err}");
    }
    // The [fleet] table is there, mistaken: its budget is not told to add one.
    assert!(!err.contains("needs a [fleet] table"), "{err}");
}

#[test]
fn what_a_message_echoes_from_the_file_is_cut_to_200_characters() {
    let long = "z".repeat(1_000_000);
    let fleet = "[fleet]\nurl = \"redis://127.0.0.1:6379\"\n";
    let budget = "[budgets.r]\nmax_concurrent = 2\n";
    for text in [
        format!("{fleet}{budget}scope = \"fleet\"\nlease_mode = \"{long}\"\n"),
        format!("{fleet}{budget}scope = \"fleet\"\nfail = \"{long}\"\n"),
        format!("{fleet}{budget}scope = \"{long}\"\n"),
        format!("{budget}{long} = 1\n"),
        format!("[fleet]\nurl = 7{long}\n{budget}"),
    ] {
        let err = refused(&text).to_string();
        assert!(err.len() < 1_000, "{} bytes: {}", err.len(), &err[..300]);
        assert!(err.contains("characters in all"), "{err}");
    }
}

#[test]
fn a_store_can_be_attached_to_a_loaded_budget() {
    use std::sync::Arc;
    let budgets = Budgets::from_toml_str(
        "[budgets.records]\nmax_concurrent = 3\npermit_timeout = \"1s\"\n[budgets.other]\nmax_concurrent = 1\n",
    )
    .unwrap();
    let store = Arc::new(inflight::store::MemoryStore::new(1));
    let budgets = budgets.with_store("records", store).unwrap();
    let records = budgets.get("records").unwrap();
    assert_eq!(records.limit(), 3);
    assert_eq!(
        records.permit_timeout(),
        Some(std::time::Duration::from_secs(1))
    );
    assert_eq!(
        records.try_acquire().unwrap_err(),
        inflight::TryAcquireError::WouldWait,
        "the rebuilt budget has the store"
    );
    let err = budgets
        .with_store("missing", Arc::new(inflight::store::MemoryStore::new(1)))
        .unwrap_err();
    assert_eq!(err.field(), Some("budgets.missing"));
}

#[test]
fn classes_load_with_weights_deadlines_default_and_strictness() {
    let budgets = Budgets::from_toml_str(
        r#"
        [budgets.records]
        max_concurrent = 6
        permit_timeout = "500ms"
        classes = { interactive = { weight = 4, permit_timeout = "50ms" }, batch = 1 }
        default_class = "interactive"
        strict = true

        [budgets.search]
        max_concurrent = 2
        [budgets.search.classes]
        high = 8
        mid = 2
        low = 2

        [budgets.plain]
        max_concurrent = 1
        "#,
    )
    .unwrap();
    let records = budgets.get("records").unwrap();
    let classes = records.classes().expect("declared above");
    let shown: Vec<_> = classes
        .iter()
        .map(|c| (c.name(), c.weight(), c.permit_timeout()))
        .collect();
    assert_eq!(
        shown,
        [
            ("interactive", 4, Some(Duration::from_millis(50))),
            ("batch", 1, None)
        ]
    );
    assert_eq!(classes.default_name(), "interactive");
    assert!(classes.is_strict());
    assert_eq!(
        records.config().permit_timeout_limit(),
        Some(Duration::from_millis(500))
    );
    // The order of the file, and the last of the lightest as the default.
    let search = budgets.get("search").unwrap().classes().unwrap();
    let names: Vec<_> = search.iter().map(|c| c.name()).collect();
    assert_eq!(names, ["high", "mid", "low"]);
    assert_eq!(search.default_name(), "low");
    assert!(!search.is_strict());
    assert!(budgets.get("plain").unwrap().classes().is_none());
}

#[test]
fn class_mistakes_name_their_path() {
    let base = "[budgets.records]\nmax_concurrent = 2\n";
    let cases = [
        (
            "classes = { interactive = 4, batch = 0 }",
            "budgets.records.classes.batch: weight must be at least 1, got 0",
        ),
        (
            "classes = { batch = 1001 }",
            "budgets.records.classes.batch: weight must be at most 1000, got 1001",
        ),
        (
            "classes = { batch = -2 }",
            "budgets.records.classes.batch: weight must be at least 1, got -2",
        ),
        (
            "classes = { batch = \"1\" }",
            "budgets.records.classes.batch: must be a weight like 4, or a table like { weight = 4, permit_timeout = \"50ms\" }, got string \"1\"",
        ),
        (
            "classes = { batch = 1.5 }",
            "budgets.records.classes.batch: must be a weight like 4",
        ),
        (
            "classes = { interactive = { weight = 0 } }",
            "budgets.records.classes.interactive.weight: must be at least 1, got 0",
        ),
        (
            "classes = { interactive = { permit_timeout = \"50ms\" } }",
            "budgets.records.classes.interactive.weight: missing",
        ),
        (
            "classes = { interactive = { weight = 4, timeout = \"50ms\" } }",
            "budgets.records.classes.interactive.timeout: unknown key (expected one of weight, permit_timeout)",
        ),
        (
            "classes = { interactive = { weight = 4, permit_timeout = \"0s\" } }",
            "budgets.records.classes.interactive.permit_timeout: must be greater than zero",
        ),
        (
            "classes = { interactive = { weight = 4, permit_timeout = \"8days\" } }",
            "budgets.records.classes.interactive.permit_timeout: must be at most 7 days, got 8days",
        ),
        (
            "classes = { interactive = { weight = 4, permit_timeout = 50 } }",
            "budgets.records.classes.interactive.permit_timeout: must be a duration string",
        ),
        (
            "classes = {}",
            "budgets.records.classes: must name at least one class",
        ),
        (
            "classes = 4",
            "budgets.records.classes: must be a table of class weights like { interactive = 4, batch = 1 }, got integer 4",
        ),
        (
            "classes = { \"two words\" = 1 }",
            "budgets.records.classes.\"two words\": a class name may hold only ASCII letters, digits",
        ),
        (
            "classes = { \"\" = 1 }",
            "budgets.records.classes.\"\": a class name must not be empty",
        ),
        (
            "classes = { interactive = 4, batch = 1 }\ndefault_class = \"bulk\"",
            "budgets.records.default_class: \"bulk\" is not one of the classes (interactive, batch)",
        ),
        (
            "classes = { batch = 1 }\ndefault_class = 1",
            "budgets.records.default_class: must be the name of one of the classes, like \"batch\", got integer 1",
        ),
        (
            "classes = { batch = 1 }\nstrict = \"yes\"",
            "budgets.records.strict: must be true or false, got string \"yes\"",
        ),
        (
            "default_class = \"batch\"",
            "budgets.records.default_class: only a budget with classes takes this (add classes = { interactive = 4, batch = 1 })",
        ),
        (
            "strict = true",
            "budgets.records.strict: only a budget with classes takes this",
        ),
        (
            "class = { batch = 1 }",
            "budgets.records.class: unknown key",
        ),
    ];
    for (extra, expected) in cases {
        let err = refused(&format!("{base}{extra}\n")).to_string();
        assert!(err.starts_with(expected), "{extra:?}:\n{err}");
    }
    let many: Vec<String> = (0..17).map(|i| format!("c{i} = 1")).collect();
    let err = refused(&format!("{base}classes = {{ {} }}\n", many.join(", ")));
    assert_eq!(
        err.to_string(),
        "budgets.records.classes: at most 16 classes, got 17"
    );
    let long = "x".repeat(65);
    let err = refused(&format!("{base}classes = {{ {long} = 1 }}\n"));
    assert!(
        err.to_string()
            .contains("a class name must be at most 64 characters, got 65"),
        "{err}"
    );
    // Every mistake at once, each under its own path.
    let err = refused(&format!(
        "{base}classes = {{ a = 0, b = {{ weight = 2, permit_timeout = \"x\" }} }}\ndefault_class = \"c\"\n"
    ));
    let fields: Vec<_> = err.errors().iter().filter_map(|e| e.field()).collect();
    assert_eq!(
        fields,
        [
            "budgets.records.classes.a",
            "budgets.records.classes.b.permit_timeout",
            "budgets.records.default_class"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_fleet_budget_takes_classes() {
    let budgets = Budgets::from_toml_str(
        r#"
        [fleet]
        url = "redis://127.0.0.1:6379"

        [budgets.records]
        max_concurrent = 6
        scope = "fleet"
        classes = { interactive = 4, batch = 1 }
        "#,
    )
    .unwrap();
    assert!(matches!(
        budgets.scope("records"),
        Some(inflight::config::Scope::Fleet { .. })
    ));
    // The store is taken after the permit, whatever the class.
    let store = std::sync::Arc::new(inflight::store::MemoryStore::new(1));
    let budgets = budgets.with_store("records", store).unwrap();
    let records = budgets.get("records").unwrap();
    assert_eq!(records.classes().unwrap().default_name(), "batch");
    let held = records.acquire_in("interactive").await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(60), records.acquire_in("batch"));
    assert!(second.await.is_err(), "the store's one permit is held");
    drop(held);
    drop(records.acquire_in("batch").await.unwrap());
}

/// Every budgets file in the guide's chapter on priorities that declares classes (and no proxy
/// keys, which `inflight-proxy` checks) loads as it is shown.
#[test]
fn the_guides_budgets_files_with_classes_load() {
    let readme = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/guide/priorities.md"
    );
    let Ok(text) = std::fs::read_to_string(readme) else {
        // The packaged crate has no workspace guide beside it.
        return;
    };
    let blocks: Vec<&str> = text
        .split("```toml\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .filter(|block| block.contains("classes =") && !block.contains("upstream ="))
        .collect();
    assert!(!blocks.is_empty(), "the README shows classes: {blocks:?}");
    for block in &blocks {
        let budgets = Budgets::from_toml_str(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
        let with_classes = budgets.iter().filter(|b| b.classes().is_some()).count();
        assert!(with_classes > 0, "{block}");
    }
}

#[test]
fn on_lost_is_keep_or_cancel() {
    let budgets = Budgets::from_toml_str(
        "[budgets.records]\nmax_concurrent = 6\non_lost = \"cancel\"\n\n[budgets.search]\nmax_concurrent = 6\n",
    )
    .unwrap();
    assert_eq!(
        budgets.get("records").unwrap().config().on_lost_policy(),
        inflight::OnLost::Cancel
    );
    assert_eq!(
        budgets.get("search").unwrap().config().on_lost_policy(),
        inflight::OnLost::Keep
    );
    let err = refused("[budgets.records]\nmax_concurrent = 6\non_lost = \"drop\"\n");
    assert_eq!(err.field(), Some("budgets.records.on_lost"));
    assert!(err.to_string().contains("\"keep\""), "{err}");
}

#[test]
fn the_fleet_table_takes_a_ca_file_from_the_files_folder_and_hides_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("budgets.toml");
    std::fs::write(
        &path,
        "[fleet]\nurl = \"rediss://app:pw@127.0.0.1:6380\"\nca_file = \"redis-ca.pem\"\n\n\
         [budgets.records]\nmax_concurrent = 6\nscope = \"fleet\"\n",
    )
    .unwrap();
    let budgets = Budgets::from_path(&path).unwrap();
    let fleet = budgets.fleet().unwrap();
    assert_eq!(
        fleet.ca_file(),
        Some(dir.path().join("redis-ca.pem").as_path())
    );
    assert_eq!(fleet.shown_url(), "rediss://app:***@127.0.0.1:6380");
    let err =
        refused("[fleet]\nurl = \"redis://h:1\"\nca_file = 3\n\n[budgets.r]\nmax_concurrent = 1\n");
    assert_eq!(err.field(), Some("fleet.ca_file"));
}

#[test]
fn an_adaptive_budgets_cold_start_is_a_key_of_its_own() {
    let budgets = Budgets::from_toml_str(
        "[budgets.a]\nlimit = \"adaptive\"\ninitial = 32\ncold_start = \"20ms\"\n\n[budgets.b]\nlimit = \"adaptive\"\ncold_start = \"0s\"\n\n[budgets.c]\nlimit = \"adaptive\"\n",
    )
    .unwrap();
    let spread = |name: &str| {
        budgets
            .get(name)
            .unwrap()
            .config()
            .adaptive_limit()
            .unwrap()
            .cold_start_spread()
    };
    assert_eq!(spread("a"), std::time::Duration::from_millis(20));
    assert!(spread("b").is_zero());
    assert_eq!(spread("c"), inflight::limit::Adaptive::DEFAULT_COLD_START);
    let err = refused("[budgets.a]\nmax_concurrent = 4\ncold_start = \"20ms\"\n");
    assert_eq!(err.field(), Some("budgets.a.cold_start"));
    assert!(
        err.to_string()
            .contains("only an adaptive limit takes this"),
        "{err}"
    );
    let err = refused("[budgets.a]\nlimit = \"adaptive\"\ncold_start = \"2s\"\n");
    assert!(err.to_string().contains("cold_start"), "{err}");
}
