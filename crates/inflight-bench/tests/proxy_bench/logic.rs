//! The logic of a run on made-up measurements: the rotation of the repeats, the medians and
//! spreads, the discard rule, the added latency, the goals' verdicts and the JSON document.

use inflight_bench::proxy_bench::goals::{judge, MAX_KIB_PER_IDLE_CONNECTION};
use inflight_bench::proxy_bench::idle::IdleReport;
use inflight_bench::proxy_bench::instructions::InstructionsStatus;
use inflight_bench::proxy_bench::plan::{
    eta, rotation, send_lag_verdict, LoadPoint, Settings, Who,
};
use inflight_bench::proxy_bench::report::{document, tables, Completion, Conditions};
use inflight_bench::proxy_bench::summary::{Case, Record, Summary};
use inflight_bench::proxy_bench::UpstreamStats;
use inflight_bench::spread::Spread;
use serde_json::{json, Map};
use std::time::Duration;

use super::support::{closed, open};

fn saturation(repeat: usize, who: Who, ok_per_s: f64, cpu_us: Option<f64>) -> Record {
    let mut r = Record::new(repeat, who, Case::Saturation);
    r.load = Some(closed(ok_per_s, 1.0, 2.0, cpu_us));
    r
}

fn latency(repeat: usize, who: Who, point: &str, p50: f64, p99: f64, lag_ms: f64) -> Record {
    let mut r = Record::new(repeat, who, Case::Latency);
    r.point = Some(point.into());
    let load = open(1000.0, p50, p99, lag_ms);
    r.discarded = send_lag_verdict(&load).err();
    r.load = Some(load);
    r
}

fn idle(repeat: usize, who: Who, kib_per_connection: f64) -> Record {
    let mut r = Record::new(repeat, who, Case::Idle);
    r.idle = Some(IdleReport {
        connections: 10_000,
        opened: 10_000,
        still_open: 10_000,
        processes: 1,
        rss_before_kib: 10_000,
        rss_after_kib: 10_000 + (kib_per_connection * 10_000.0) as u64,
        kib_per_connection,
        mib_per_1000: kib_per_connection * 1000.0 / 1024.0,
    });
    r
}

fn budget(repeat: usize, who: Who, peak: u64) -> Record {
    let mut r = Record::new(repeat, who, Case::Budget);
    r.load = Some(closed(290.0, 200.0, 230.0, None));
    r.upstream = Some(UpstreamStats {
        requests: 2900,
        in_flight: 0,
        peak,
    });
    r
}

fn unsupported() -> InstructionsStatus {
    InstructionsStatus::not_measured("perf stat unsupported here")
}

fn perf() -> InstructionsStatus {
    InstructionsStatus {
        measured: true,
        tool: "perf",
        reason: None,
    }
}

fn points() -> Vec<String> {
    vec!["10%".into()]
}

#[test]
fn each_repeat_starts_one_target_further() {
    let all = Who::ALL;
    let starts: Vec<Who> = (0..6).map(|i| rotation(i, &all)[0]).collect();
    assert_eq!(
        starts,
        [
            Who::Direct,
            Who::Inflight,
            Who::Haproxy,
            Who::Nginx,
            Who::Direct,
            Who::Inflight
        ]
    );
    assert_eq!(
        rotation(2, &all),
        [Who::Haproxy, Who::Nginx, Who::Direct, Who::Inflight]
    );
    for i in 0..8 {
        let mut order = rotation(i, &all);
        order.sort();
        assert_eq!(order, all, "repeat {i} measures every target once");
    }
    let two = [Who::Direct, Who::Inflight];
    assert_eq!(rotation(3, &two), [Who::Inflight, Who::Direct]);
    assert!(rotation(1, &[]).is_empty());
}

#[test]
fn a_list_of_targets_is_read_in_the_tables_order() {
    assert_eq!(
        Who::parse_list("nginx,direct,nginx").unwrap(),
        [Who::Direct, Who::Nginx]
    );
    assert!(Who::parse_list("").unwrap_err().contains("at least one"));
    assert!(Who::parse_list("direct,envoy")
        .unwrap_err()
        .contains("\"envoy\""));
}

#[test]
fn a_run_whose_generator_sent_late_is_discarded() {
    assert_eq!(send_lag_verdict(&open(100.0, 1.0, 2.0, 0.100)), Ok(()));
    let late = send_lag_verdict(&open(100.0, 1.0, 2.0, 0.101)).unwrap_err();
    assert!(late.contains("101 µs is over 100 µs"), "{late}");
    // A closed loop has no schedule to lag behind: it cannot pass as an open-loop run.
    assert!(send_lag_verdict(&closed(100.0, 1.0, 2.0, None)).is_err());
}

#[test]
fn medians_and_spreads_are_over_the_repeats_and_leave_discarded_runs_out() {
    let mut records = vec![
        saturation(1, Who::Inflight, 100.0, Some(40.0)),
        saturation(2, Who::Inflight, 300.0, Some(50.0)),
        saturation(3, Who::Inflight, 200.0, Some(45.0)),
    ];
    let mut discarded = saturation(4, Who::Inflight, 9999.0, Some(1.0));
    discarded.discarded = Some("made up".into());
    records.push(discarded);
    let s = Summary::of(&records, &Who::ALL, &points());
    let row = s.saturation_of(Who::Inflight).unwrap();
    assert_eq!(row.runs, 3);
    assert_eq!(
        row.ok_per_s,
        Some(Spread {
            median: 200.0,
            min: 100.0,
            max: 300.0
        })
    );
    assert_eq!(row.cpu_us_per_answer.unwrap().median, 45.0);
    assert_eq!(row.instructions_per_answer, None);
    assert!(s.saturation_of(Who::Haproxy).is_none());
}

#[test]
fn added_latency_is_taken_per_repeat_then_its_median() {
    let records = vec![
        latency(1, Who::Direct, "10%", 0.2, 1.0, 0.05),
        latency(1, Who::Inflight, "10%", 0.3, 1.5, 0.05),
        latency(2, Who::Direct, "10%", 0.4, 3.0, 0.05),
        latency(2, Who::Inflight, "10%", 0.5, 3.1, 0.05),
        latency(3, Who::Direct, "10%", 0.1, 0.5, 0.05),
        latency(3, Who::Inflight, "10%", 0.9, 0.6, 0.05),
        // Repeat 4: direct's run was discarded twice and never kept: inflight's is not paired.
        latency(4, Who::Direct, "10%", 0.1, 0.1, 0.5),
        latency(4, Who::Direct, "10%", 0.1, 0.1, 0.3),
        latency(4, Who::Inflight, "10%", 5.0, 50.0, 0.05),
    ];
    let s = Summary::of(&records, &Who::ALL, &points());
    let inflight = s.latency_of(Who::Inflight, "10%").unwrap();
    let added = inflight.added_p99_ms.unwrap();
    // Per repeat: +0.5, +0.1, +0.1; the difference of the medians (1.5 - 1.0) would say +0.5.
    assert!((added.median - 0.1).abs() < 1e-9, "{added:?}");
    assert!((added.max - 0.5).abs() < 1e-9, "{added:?}");
    assert_eq!(inflight.runs, 4);
    let direct = s.latency_of(Who::Direct, "10%").unwrap();
    assert_eq!(
        (direct.runs, direct.discarded, direct.repeats_without_a_run),
        (3, 2, 1)
    );
    assert_eq!(direct.added_p50_ms, None);
}

#[test]
fn goals_are_judged_on_the_medians_and_never_on_what_was_not_measured() {
    let mut records = vec![
        saturation(1, Who::Inflight, 20000.0, Some(40.0)),
        saturation(2, Who::Inflight, 21000.0, Some(30.0)),
        saturation(1, Who::Haproxy, 28000.0, Some(33.0)),
        saturation(2, Who::Haproxy, 27000.0, Some(35.0)),
        idle(1, Who::Inflight, MAX_KIB_PER_IDLE_CONNECTION),
        idle(2, Who::Inflight, MAX_KIB_PER_IDLE_CONNECTION),
        budget(1, Who::Inflight, 6),
        budget(2, Who::Inflight, 7),
    ];
    for (repeat, d, i, h) in [(1, 1.0, 1.2, 1.3), (2, 1.0, 1.4, 1.2)] {
        records.push(latency(repeat, Who::Direct, "10%", 0.2, d, 0.05));
        records.push(latency(repeat, Who::Inflight, "10%", 0.3, i, 0.05));
        records.push(latency(repeat, Who::Haproxy, "10%", 0.3, h, 0.05));
    }
    let s = Summary::of(&records, &Who::ALL, &points());
    let goals = judge(&s, &unsupported());
    let verdict = |start: &str| {
        goals
            .iter()
            .find(|g| g.goal.starts_with(start))
            .unwrap_or_else(|| panic!("no goal {start}: {goals:?}"))
    };
    // CPU: inflight 35.0 against HAProxy 34.0 (medians).
    let cpu = verdict("CPU per answer");
    assert_eq!(cpu.met, Some(false));
    assert!(
        cpu.text.contains("inflight 35.0 µs (30.0-40.0)"),
        "{}",
        cpu.text
    );
    let instructions = verdict("instructions per answer");
    assert_eq!(instructions.met, None);
    assert!(instructions
        .text
        .ends_with("not measured (perf stat unsupported here)"));
    // Exactly at the bound is within it.
    assert_eq!(verdict("KiB per idle connection ≤ 2").met, Some(true));
    // Equal added p50 (+0.1 both) meets "no more than"; added p99 +0.3 against +0.25 misses.
    assert_eq!(verdict("added p50 at 10% load").met, Some(true));
    assert_eq!(verdict("added p99 at 10% load").met, Some(false));
    assert_eq!(verdict("throughput at saturation").met, Some(false));
    // One repeat with 7 at the upstream is enough to miss "exactly 6".
    let six = verdict("exactly 6 at the upstream");
    assert_eq!(six.met, Some(false));
    assert!(six.text.contains("6 to 7"), "{}", six.text);

    let alone = Summary::of(
        &[saturation(1, Who::Inflight, 1.0, Some(1.0))],
        &Who::ALL,
        &[],
    );
    for g in judge(&alone, &perf()) {
        assert_eq!(g.met, None, "{} without HAProxy", g.goal);
        assert!(g.text.contains("not measured"), "{}", g.text);
    }
}

#[test]
fn the_json_document_has_every_measurement_the_summary_and_the_goals() {
    let records = vec![
        saturation(1, Who::Direct, 50000.0, None),
        latency(1, Who::Direct, "10%", 0.2, 1.0, 0.5),
        latency(1, Who::Direct, "10%", 0.2, 1.0, 0.05),
        idle(1, Who::Inflight, 21.0),
    ];
    let points = points();
    let s = Summary::of(&records, &Who::ALL, &points);
    let goals = judge(&s, &unsupported());
    let mut meta = Map::new();
    meta.insert("commit".into(), json!("abc1234"));
    let doc = document(
        meta,
        &Completion::Stopped("SIGTERM".into()),
        &records,
        &s,
        &goals,
    );
    assert_eq!(doc["partial"], true);
    assert_eq!(doc["stopped_by"], "SIGTERM");
    assert_eq!(doc["meta"]["commit"], "abc1234");
    for key in ["saturation", "latency", "budget", "idle"] {
        assert!(doc["summary"][key].is_array(), "summary.{key}");
    }
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    assert_eq!(runs[0]["target"], "direct");
    assert_eq!(runs[0]["case"], "saturation");
    assert_eq!(runs[0]["repeat"], 1);
    assert_eq!(
        runs[0]["load"]["proxy_instructions_per_answer"],
        json!(null)
    );
    assert!(runs[1]["discarded"]
        .as_str()
        .unwrap()
        .contains("send lag p99 500 µs"));
    assert_eq!(runs[2]["discarded"], json!(null));
    assert_eq!(runs[2]["point"], "10%");
    assert_eq!(runs[3]["idle"]["kib_per_connection"], 21.0);
    let latency = &doc["summary"]["latency"][0];
    assert_eq!(latency["point"], "10%");
    assert_eq!(latency["rows"][0]["discarded"], 1);
    assert_eq!(latency["rows"][0]["p99_ms"]["median"], 1.0);
    let goal = doc["goals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["goal"] == "instructions per answer at saturation ≤ HAProxy's")
        .unwrap();
    assert_eq!(goal["met"], json!(null));

    let done = document(Map::new(), &Completion::Complete, &records, &s, &goals);
    assert_eq!(
        (done["partial"].clone(), done["stopped_by"].clone()),
        (json!(false), json!(null))
    );
}

#[test]
fn the_tables_say_what_was_discarded_and_what_was_not_measured() {
    let records = vec![
        saturation(1, Who::Direct, 50000.0, None),
        latency(1, Who::Direct, "10%", 0.2, 1.0, 0.5),
        latency(1, Who::Direct, "10%", 0.25, 1.0, 0.05),
    ];
    let s = Summary::of(&records, &Who::ALL, &points());
    let goals = judge(&s, &unsupported());
    let text = tables(
        &s,
        &goals,
        &Conditions {
            lines: vec!["instructions: not measured (perf stat unsupported here)".into()],
            repeats: (1, 10),
            connections: 64,
            duration_s: 5.0,
        },
    );
    assert!(text
        .starts_with("instructions: not measured (perf stat unsupported here)\n1 of 10 repeats"));
    let row = text
        .lines()
        .find(|l| l.starts_with("10%"))
        .expect("a latency row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    // load, target, offered, p50, p99, added p50, added p99, lag, kept, discarded, errors
    assert_eq!(cells[0..5], ["10%", "direct", "1000", "0.250", "1.000"]);
    assert_eq!(cells[cells.len() - 5..], ["1", "1", "(lag", "500)", "0"]);
    assert!(text.contains("n/a     instructions per answer at saturation ≤ HAProxy's: not measured (perf stat unsupported here)"), "{text}");
}

#[test]
fn settings_that_cannot_run_are_refused() {
    let ok = Settings::default();
    ok.check().unwrap();
    assert_eq!(ok.repeats, 10);
    assert_eq!(ok.idle_connections, 10_000);
    for bad in [
        Settings {
            targets: vec![],
            ..Settings::default()
        },
        Settings {
            connections: 0,
            ..Settings::default()
        },
        Settings {
            points: vec![LoadPoint::Fraction(1.5)],
            ..Settings::default()
        },
        Settings {
            points: vec![LoadPoint::Rate(f64::NAN)],
            ..Settings::default()
        },
    ] {
        let e = bad.check().unwrap_err();
        assert!(e.to_string().starts_with("invalid plan: "), "{e}");
    }
}

#[test]
fn the_time_left_follows_the_pace_so_far() {
    assert_eq!(
        eta(Duration::from_secs(20), 10.0, 30.0),
        Duration::from_secs(60)
    );
    assert_eq!(eta(Duration::ZERO, 0.0, 30.0), Duration::from_secs(30));
    let s = Settings::default();
    // A proxy: saturation, three load points and the budget case, 6 s each, and its idle step.
    assert_eq!(s.planned_seconds(Who::Inflight, 0.0), 5.0 * 6.0 + 2.0);
    assert_eq!(s.planned_seconds(Who::Direct, 0.0), 4.0 * 6.0);
}
