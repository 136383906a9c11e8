//! The runner against stand-ins for the sim over real HTTP on 127.0.0.1: every record ends in
//! exactly one outcome, budgets and records in flight bound the calls, classes are counted apart,
//! connections open before the clock starts, and retries are counted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use inflight_bench::gauge::PeakGauge;
use inflight_lab::runner::{run, RunnerConfig, RunnerError};
use inflight_lab::scenario::RecordClasses;
use inflight_lab::strategy::{BudgetPlan, Enforce, GateSpec, RecordsInFlight, Strategy};

/// A tiny stand-in for the sim whose answers depend on the record id, so every outcome kind
/// is reached and can be counted exactly.
#[derive(Clone, Default)]
struct Stand {
    writes: Arc<PeakGauge>,
}

async fn enrich(Path(id): Path<u64>) -> (StatusCode, &'static str) {
    match id % 10 {
        // Hangs far beyond the client timeout (500 ms at the test's time scale).
        3 => tokio::time::sleep(Duration::from_secs(5)).await,
        4 => return (StatusCode::INTERNAL_SERVER_ERROR, "boom"),
        _ => tokio::time::sleep(Duration::from_millis(5)).await,
    }
    (StatusCode::OK, r#"{"score":1}"#)
}

async fn write(
    State(stand): State<Stand>,
    Json(body): Json<serde_json::Value>,
) -> (StatusCode, &'static str) {
    let id = body["id"].as_u64().unwrap();
    // The hanging writes (ids ending 7) stay in this handler after the client's timeout has
    // released their permit, so the server may then hold more writes than the budget: count
    // only the writes that answer, which the budget must keep to its size.
    let _in = (id % 10 != 7).then(|| stand.writes.enter());
    assert_eq!(body["complete"].as_bool().unwrap(), id % 10 != 3);
    match id % 10 {
        5 => return (StatusCode::SERVICE_UNAVAILABLE, "busy"),
        6 => return (StatusCode::BAD_REQUEST, "no"),
        7 => tokio::time::sleep(Duration::from_secs(5)).await,
        _ => tokio::time::sleep(Duration::from_millis(5)).await,
    }
    (StatusCode::OK, r#"{"accepted":true}"#)
}

async fn stand() -> (String, Stand) {
    let stand = Stand::default();
    let app = Router::new()
        .route("/enrich/{id}", get(enrich))
        .route("/records", post(write))
        .with_state(stand.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, stand)
}

fn strategy(in_flight: usize, budgets: BudgetPlan) -> Strategy {
    Strategy {
        name: "t".into(),
        description: String::new(),
        records_in_flight: RecordsInFlight::Fixed(in_flight),
        budgets,
        enforce: Enforce::Runner,
        retry: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_ends_in_exactly_one_outcome() {
    let (url, stand) = stand().await;
    let budgets = BudgetPlan::PerDependency {
        enrichment: Some(GateSpec::Fixed(8)),
        records: Some(GateSpec::Fixed(2)),
    };
    let config = RunnerConfig {
        strategy: strategy(16, budgets),
        sim_url: url,
        records: 40,
        time_scale: 0.25,
        metrics_addr: None,
        first_id: 0,
        redis_url: None,
        seed: 1,
        measured: BTreeMap::new(),
        enrichment_url: None,
        records_url: None,
        classes: None,
    };
    let r = run(&config).await.unwrap();
    // Ids ending 0,1,2,8,9 complete; 3 incomplete; 5 rejected; 4, 6, 7 fail in three ways.
    assert_eq!(r.records, 40);
    assert_eq!(r.complete, 20);
    assert_eq!(r.incomplete, 4);
    assert_eq!(r.rejected, 4);
    assert_eq!(r.write_503s, 4);
    assert_eq!(r.failed, 12);
    assert_eq!(r.failed_by_kind["enrich_status_500"], 4);
    assert_eq!(r.failed_by_kind["write_status_400"], 4);
    assert_eq!(r.failed_by_kind["write_timeout"], 4);
    assert_eq!(r.complete + r.incomplete + r.rejected + r.failed, r.records);
    // Three enrichment calls of each id ending 3 time out.
    assert_eq!(r.enrichment_timeouts, 12);
    assert!(
        r.peak_enrichment_in_flight <= 8,
        "{}",
        r.peak_enrichment_in_flight
    );
    assert!(r.peak_writes_in_flight <= 2, "{}", r.peak_writes_in_flight);
    assert!(
        stand.writes.peak() <= 2,
        "server saw {} answering writes at once",
        stand.writes.peak()
    );
    let accepted = (r.complete + r.incomplete) as f64;
    assert!((r.accepted_per_s - accepted / r.completion_s).abs() < 1e-9);
    assert!(!r.timeline.enrichment.is_empty());
    assert_eq!(r.timeline.enrichment.len(), r.timeline.records.len());
    assert!(r.timeline.enrichment.iter().all(|&v| v <= 8));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_each_class_are_counted_apart_for_every_strategy() {
    let (url, _stand) = stand().await;
    let classes = RecordClasses::new(vec![
        ("interactive".to_string(), 0.2),
        ("batch".to_string(), 0.8),
    ])
    .unwrap();
    let with_classes = GateSpec::Budget(
        "max_concurrent = 2\nclasses = { interactive = 4, batch = 1 }".to_string(),
    );
    let (records, seed) = (60, 11);
    for budgets in [
        BudgetPlan::None,
        BudgetPlan::PerDependency {
            enrichment: Some(GateSpec::Fixed(8)),
            records: Some(with_classes.clone()),
        },
    ] {
        let config = RunnerConfig {
            strategy: strategy(16, budgets),
            sim_url: url.clone(),
            records,
            time_scale: 0.25,
            metrics_addr: None,
            first_id: 0,
            redis_url: None,
            seed,
            measured: BTreeMap::new(),
            enrichment_url: None,
            records_url: None,
            classes: Some(classes.clone()),
        };
        let r = run(&config).await.unwrap();
        // The stand's outcome follows the id: ids ending 0, 1, 2, 3, 8, 9 are accepted.
        for name in ["interactive", "batch"] {
            let ids: Vec<u64> = (0..records)
                .filter(|&id| classes.class_of(seed, id) == name)
                .collect();
            let accepted = ids
                .iter()
                .filter(|id| matches!(*id % 10, 0..=3 | 8 | 9))
                .count() as u64;
            let c = &r.classes[name];
            assert_eq!(
                (c.records, c.accepted),
                (ids.len() as u64, accepted),
                "{name}"
            );
            let (p50, p99) = (c.completion_p50_s.unwrap(), c.completion_p99_s.unwrap());
            assert!(
                0.0 < p50 && p50 <= p99 && p99 <= r.completion_s,
                "{name}: {c:?}"
            );
        }
        assert!(r.classes["interactive"].records > 0);
        assert_eq!(
            r.classes.values().map(|c| c.accepted).sum::<u64>(),
            r.complete + r.incomplete
        );
    }
}

/// A stand-in whose every call answers 200 after a few milliseconds: only the budget's
/// queue orders the records.
async fn even_stand() -> String {
    async fn enrich() -> &'static str {
        tokio::time::sleep(Duration::from_millis(1)).await;
        r#"{"score":1}"#
    }
    async fn write() -> &'static str {
        tokio::time::sleep(Duration::from_millis(5)).await;
        r#"{"accepted":true}"#
    }
    let app = Router::new()
        .route("/enrich/{id}", get(enrich))
        .route("/records", post(write));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_records_go_first_through_a_tight_budget_with_classes() {
    let url = even_stand().await;
    let classes = RecordClasses::new(vec![
        ("interactive".to_string(), 0.2),
        ("batch".to_string(), 0.8),
    ])
    .unwrap();
    // One write at a time for 24 records in flight: a batch record waits for most of the
    // others' writes, an interactive one (strict priority) for the one in flight and the
    // interactive ones ahead of it.
    let records = GateSpec::Budget(
        "max_concurrent = 1\nclasses = { interactive = 4, batch = 1 }\nstrict = true".to_string(),
    );
    let config = RunnerConfig {
        strategy: strategy(
            24,
            BudgetPlan::PerDependency {
                enrichment: None,
                records: Some(records),
            },
        ),
        sim_url: url,
        records: 150,
        time_scale: 1.0,
        metrics_addr: None,
        first_id: 0,
        redis_url: None,
        seed: 5,
        measured: BTreeMap::new(),
        enrichment_url: None,
        records_url: None,
        classes: Some(classes),
    };
    let r = run(&config).await.unwrap();
    assert_eq!(r.complete, 150, "{r:?}");
    let p50 = |name: &str| r.classes[name].completion_p50_s.unwrap();
    let (interactive, batch) = (p50("interactive"), p50("batch"));
    // About 2 writes' wait against about 20: a generous margin for a noisy machine.
    assert!(
        interactive < 0.5 * batch,
        "interactive p50 {interactive} s against batch p50 {batch} s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_in_flight_bounds_enrichment_calls_and_shared_budget_bounds_all() {
    let (url, _stand) = stand().await;
    let mut config = RunnerConfig {
        strategy: strategy(3, BudgetPlan::None),
        sim_url: url,
        records: 30,
        time_scale: 0.1,
        metrics_addr: None,
        first_id: 0,
        redis_url: None,
        seed: 1,
        measured: BTreeMap::new(),
        enrichment_url: None,
        records_url: None,
        classes: None,
    };
    let r = run(&config).await.unwrap();
    assert_eq!(r.records, 30);
    assert!(r.peak_enrichment_in_flight <= 3);
    assert!(r.peak_enrichment_in_flight >= 1);

    config.strategy = strategy(12, BudgetPlan::Shared(4));
    let r = run(&config).await.unwrap();
    assert_eq!(r.complete + r.incomplete + r.rejected + r.failed, 30);
    let most = r
        .timeline
        .enrichment
        .iter()
        .zip(&r.timeline.records)
        .map(|(e, w)| e + w)
        .max()
        .unwrap();
    assert!(
        most <= 4,
        "shared budget of 4 but {most} calls in flight at once"
    );
}

/// A stand-in whose answers say which client connection each request came on, split into
/// those before the run (`GET /stats`) and those of the run.
#[derive(Clone, Default)]
struct Ports {
    warm_up: Arc<Mutex<std::collections::BTreeSet<u16>>>,
    run: Arc<Mutex<std::collections::BTreeSet<u16>>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_open_before_the_clock_starts() {
    use axum::extract::ConnectInfo;
    use std::net::SocketAddr;

    async fn warm_up(State(p): State<Ports>, ConnectInfo(from): ConnectInfo<SocketAddr>) {
        p.warm_up.lock().unwrap().insert(from.port());
        // Long enough that every warm-up request is still open when the last one starts.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    async fn call(State(p): State<Ports>, ConnectInfo(from): ConnectInfo<SocketAddr>) {
        p.run.lock().unwrap().insert(from.port());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let ports = Ports::default();
    let app = Router::new()
        .route("/stats", get(warm_up))
        .route("/enrich/{id}", get(call))
        .route("/records", post(call))
        .with_state(ports.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap()
    });
    let config = RunnerConfig {
        strategy: strategy(8, BudgetPlan::None),
        sim_url: url,
        records: 40,
        time_scale: 1.0,
        metrics_addr: None,
        first_id: 0,
        redis_url: None,
        seed: 1,
        measured: BTreeMap::new(),
        enrichment_url: None,
        records_url: None,
        classes: None,
    };
    let r = run(&config).await.unwrap();
    assert_eq!(r.complete, 40);
    let warm_up = ports.warm_up.lock().unwrap().clone();
    let run = ports.run.lock().unwrap().clone();
    assert_eq!(warm_up.len(), 8, "one connection per record in flight");
    assert!(
        run.is_subset(&warm_up),
        "the run opened connections of its own: {run:?} beyond {warm_up:?}"
    );
}

#[tokio::test]
async fn unreachable_sim_fails_every_record_by_kind() {
    // Bind then drop a listener so the port is very likely closed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let config = RunnerConfig {
        strategy: strategy(2, BudgetPlan::None),
        sim_url: format!("http://127.0.0.1:{port}"),
        records: 5,
        time_scale: 0.1,
        metrics_addr: None,
        first_id: 0,
        redis_url: None,
        seed: 1,
        measured: BTreeMap::new(),
        enrichment_url: None,
        records_url: None,
        classes: None,
    };
    let r = run(&config).await.unwrap();
    assert_eq!(r.failed, 5);
    assert_eq!(r.failed_by_kind["enrich_connect"], 5);
}

#[tokio::test]
async fn bad_time_scale_is_refused() {
    let config = RunnerConfig {
        strategy: strategy(2, BudgetPlan::None),
        sim_url: "http://127.0.0.1:1".into(),
        records: 1,
        time_scale: 0.0,
        metrics_addr: None,
        first_id: 0,
        redis_url: None,
        seed: 1,
        measured: BTreeMap::new(),
        enrichment_url: None,
        records_url: None,
        classes: None,
    };
    assert!(matches!(
        run(&config).await,
        Err(RunnerError::BadTimeScale(_))
    ));
}

/// A stand-in that refuses the first call of each record id to each dependency, once: the
/// enrichment API with a 429 that says when to come back, the system of record with a 503.
#[derive(Clone, Default)]
struct Refuses {
    enriched: Arc<Mutex<std::collections::BTreeSet<u64>>>,
    written: Arc<Mutex<std::collections::BTreeSet<u64>>>,
}

async fn refusing_stand() -> String {
    use axum::response::IntoResponse;
    async fn enrich(State(r): State<Refuses>, Path(id): Path<u64>) -> axum::response::Response {
        if r.enriched.lock().unwrap().insert(id) {
            let headers = [("retry-after", "1"), ("retry-after-ms", "20")];
            return (StatusCode::TOO_MANY_REQUESTS, headers, "slow down").into_response();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        (StatusCode::OK, r#"{"score":1}"#).into_response()
    }
    async fn write(
        State(r): State<Refuses>,
        Json(body): Json<serde_json::Value>,
    ) -> (StatusCode, &'static str) {
        let id = body["id"].as_u64().unwrap();
        if r.written.lock().unwrap().insert(id) {
            return (StatusCode::SERVICE_UNAVAILABLE, "busy");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        (StatusCode::OK, r#"{"accepted":true}"#)
    }
    let app = Router::new()
        .route("/enrich/{id}", get(enrich))
        .route("/records", post(write))
        .with_state(Refuses::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_counted_and_every_record_still_ends_once() {
    use inflight_lab::strategy::{RetryBy, RetrySpec};
    let records = 20;
    for retry in [None, Some(RetryBy::Inflight), Some(RetryBy::Tower)] {
        let mut strategy = strategy(
            4,
            BudgetPlan::PerDependency {
                enrichment: Some(GateSpec::Fixed(4)),
                records: Some(GateSpec::Fixed(2)),
            },
        );
        strategy.retry = retry.map(RetrySpec::new);
        let config = RunnerConfig {
            strategy,
            sim_url: refusing_stand().await,
            records,
            time_scale: 0.25,
            metrics_addr: None,
            first_id: 0,
            redis_url: None,
            seed: 1,
            measured: BTreeMap::new(),
            enrichment_url: None,
            records_url: None,
            classes: None,
        };
        let r = run(&config).await.unwrap();
        assert_eq!(
            r.complete + r.incomplete + r.rejected + r.failed,
            records,
            "{retry:?}"
        );
        // Every id's first enrichment call is refused once.
        assert_eq!(r.enrichment_429s, records, "{retry:?}");
        match retry {
            None => {
                assert_eq!(r.failed_by_kind["enrich_status_429"], records);
                assert_eq!((r.enrichment_calls, r.write_calls), (records, 0));
                assert_eq!((r.enrichment_retries, r.write_retries), (0, 0));
            }
            Some(by) => {
                assert_eq!(r.complete, records, "{by:?}: {r:?}");
                // One retry of each record's first enrichment call and of its write.
                assert_eq!(r.enrichment_retries, records, "{by:?}");
                assert_eq!(r.write_retries, records, "{by:?}");
                assert_eq!(
                    (r.enrichment_retries_denied, r.write_retries_denied),
                    (0, 0)
                );
                assert_eq!(r.enrichment_calls, 4 * records, "{by:?}");
                assert_eq!(r.write_calls, 2 * records, "{by:?}");
                assert_eq!(r.write_503s, records, "{by:?}: every 503 answer counted");
                assert_eq!(r.rejected, 0, "{by:?}");
            }
        }
    }
}
