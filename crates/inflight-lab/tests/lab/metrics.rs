//! Prometheus text from the sim and the runner, over real HTTP on 127.0.0.1, read back by a
//! Prometheus text parser: names, types, labels and values.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use inflight_lab::runner::{self, RunnerConfig};
use inflight_lab::scenario::ScenarioSet;
use inflight_lab::sim::{Sim, SimConfig};
use inflight_lab::strategy;
use prometheus_parse::{Scrape, Value};

const SCENARIOS: &str = r#"
[scenarios.quick]
enrichment = { median = "5ms", quota = "1/s", quota_burst = 2 }
records = { median = "20ms", capacity = 2, queue = 0 }
"#;

fn parse(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("valid Prometheus text")
}

/// (name, type) of every family in a scrape, sorted: the snapshot a test compares.
fn families(scrape: &Scrape) -> BTreeSet<(String, &'static str)> {
    scrape
        .samples
        .iter()
        .map(|s| {
            let kind = match s.value {
                Value::Counter(_) => "counter",
                Value::Gauge(_) => "gauge",
                Value::Histogram(_) => "histogram",
                Value::Summary(_) => "summary",
                Value::Untyped(_) => "untyped",
            };
            (s.metric.clone(), kind)
        })
        .collect()
}

fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .and_then(|s| match s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(v),
            _ => None,
        })
}

#[tokio::test]
async fn the_sim_serves_its_counters_as_prometheus_text() {
    let config = SimConfig {
        scenarios: ScenarioSet::parse(SCENARIOS, "test").unwrap(),
        scenario: "quick".into(),
        seed: 1,
        time_scale: 1.0,
    };
    let sim = Sim::bind(config, 0).await.unwrap();
    let url = sim.url();
    let _handle = sim.spawn();
    let client = reqwest::Client::new();
    // Three enrichment calls at once: the quota's burst of 2 lets two through, the third is 429
    // (the next token comes a second later, however slowly a loaded machine sends them).
    let calls = (0..3).map(|i| client.get(format!("{url}/enrich/{i}")).send());
    let statuses: Vec<u16> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| r.unwrap().status().as_u16())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        1,
        "{statuses:?}"
    );
    // Three writes at once into capacity 2 and no queue: one is refused.
    let writes = (0..3).map(|i| {
        client
            .post(format!("{url}/records"))
            .json(&serde_json::json!({ "id": i, "complete": true }))
            .send()
    });
    for r in futures::future::join_all(writes).await {
        r.unwrap();
    }

    let resp = client.get(format!("{url}/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = resp.text().await.unwrap();
    let scrape = parse(&text);
    let expected: BTreeSet<(String, &str)> = [
        ("inflight_sim_in_service", "gauge"),
        ("inflight_sim_peak_in_service", "gauge"),
        ("inflight_sim_peak_offered", "gauge"),
        ("inflight_sim_requests_total", "counter"),
    ]
    .into_iter()
    .map(|(n, t)| (n.to_string(), t))
    .collect();
    assert_eq!(families(&scrape), expected, "{text}");
    let requests = |endpoint, outcome| {
        value(
            &scrape,
            "inflight_sim_requests_total",
            &[("endpoint", endpoint), ("outcome", outcome)],
        )
    };
    assert_eq!(requests("enrich", "ok"), Some(2.0));
    assert_eq!(requests("enrich", "rejected_429"), Some(1.0));
    assert_eq!(requests("records", "ok"), Some(2.0));
    assert_eq!(requests("records", "rejected_503"), Some(1.0));
    let peak = value(
        &scrape,
        "inflight_sim_peak_in_service",
        &[("endpoint", "records"), ("scenario", "quick")],
    );
    assert_eq!(peak, Some(2.0));
    assert!(
        text.contains("# HELP inflight_sim_requests_total"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_serves_its_budgets_while_it_runs() {
    let config = SimConfig {
        scenarios: ScenarioSet::builtin(),
        scenario: "slow-write".into(),
        seed: 1,
        time_scale: 0.5,
    };
    let sim = Sim::bind(config, 0).await.unwrap();
    let sim_url = sim.url();
    let _sim = sim.spawn();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let c5 = strategy::builtin().get("c5").unwrap().clone();
    let run_config = RunnerConfig {
        strategy: c5,
        sim_url,
        records: 80,
        time_scale: 0.5,
        seed: 1,
        metrics_addr: Some(addr),
        first_id: 0,
        redis_url: None,
        measured: Default::default(),
        enrichment_url: None,
        records_url: None,
        classes: None,
    };
    let run = tokio::spawn(async move { runner::run(&run_config).await });

    // Scrape while the run lasts, until the writes' budget has admitted some calls (bounded).
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = None;
    while Instant::now() < deadline && !run.is_finished() {
        if let Ok(resp) = client.get(format!("http://{addr}/metrics")).send().await {
            let text = resp.text().await.unwrap();
            let scrape = parse(&text);
            let admitted = value(
                &scrape,
                "inflight_budget_admitted_total",
                &[("budget", "records")],
            );
            if admitted.unwrap_or(0.0) > 0.0 {
                seen = Some((text, scrape));
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let result = run.await.unwrap().unwrap();
    assert_eq!(result.records, 80);
    let (text, scrape) = seen.expect("a scrape during the run showed the records budget");
    let names: BTreeSet<(String, &str)> = families(&scrape);
    for (name, kind) in [
        ("inflight_budget_in_flight", "gauge"),
        ("inflight_budget_waiting", "gauge"),
        ("inflight_budget_limit", "gauge"),
        ("inflight_budget_admitted_total", "counter"),
        ("inflight_budget_rejections_total", "counter"),
        ("inflight_budget_calls_total", "counter"),
        ("inflight_budget_permit_wait_seconds", "histogram"),
        ("inflight_budget_call_duration_seconds", "histogram"),
    ] {
        assert!(
            names.contains(&(name.to_string(), kind)),
            "{name} ({kind}) in {text}"
        );
    }
    for reason in [
        "queue_full",
        "permit_timeout",
        "rate_limited",
        "unavailable",
    ] {
        assert!(
            value(
                &scrape,
                "inflight_budget_rejections_total",
                &[("budget", "records"), ("reason", reason)]
            )
            .is_some(),
            "{reason} in {text}"
        );
    }
    // An adaptive limit between 1 and its maximum of 100.
    let limit = value(&scrape, "inflight_budget_limit", &[("budget", "records")]).unwrap();
    assert!((1.0..=100.0).contains(&limit), "{limit}");
    // Real histograms: explicit buckets, not quantiles.
    assert!(
        text.contains(
            "inflight_budget_call_duration_seconds_bucket{budget=\"records\",le=\"0.1\"}"
        ),
        "{text}"
    );
    assert!(!text.contains("quantile="), "{text}");
    // The server stops with the run.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .is_err());
}
