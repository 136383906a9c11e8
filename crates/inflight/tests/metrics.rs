//! The exported metrics of a budget with priority classes, rendered by the Prometheus exporter
//! and read back by a Prometheus text parser: the per-class series next to the budget-wide
//! ones, with their labels and values.

mod support;

use inflight::{AcquireError, Budget, BudgetConfig, Classes};
use metrics_exporter_prometheus::PrometheusBuilder;
use prometheus_parse::{Scrape, Value};
use support::{ms, settle};

fn parse(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("valid Prometheus text")
}

fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .and_then(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(*v),
            Value::Histogram(h) => h.iter().map(|b| b.count).reduce(f64::max),
            _ => None,
        })
}

#[tokio::test(start_paused = true)]
async fn each_class_has_its_own_series_next_to_the_budget_wide_ones() {
    let recorder = PrometheusBuilder::new()
        .set_buckets(inflight::metrics::BUCKETS)
        .unwrap()
        .build_recorder();
    let handle = recorder.handle();
    let classes = Classes::new()
        .class("interactive", 4)
        .class("batch", 1)
        .class_permit_timeout("batch", ms(100));
    let b = metrics::with_local_recorder(&recorder, || {
        Budget::new(
            "records",
            BudgetConfig::new(1).max_queued(1).classes(classes),
        )
        .unwrap()
    });

    let held = b.acquire_owned_in("interactive").await.unwrap();
    let batch = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire_in("batch").await.map(drop) })
    };
    settle().await;
    let interactive = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire_in("interactive").await.map(drop) })
    };
    settle().await;
    assert!(matches!(
        batch.await.unwrap(),
        Err(AcquireError::Evicted { .. })
    ));
    // Still queued: publish while one interactive caller holds and one waits.
    metrics::with_local_recorder(&recorder, || {
        inflight::metrics::describe();
        inflight::metrics::publish(&b);
    });
    let scrape = parse(&handle.render());
    let class = |c: &'static str| [("budget", "records"), ("class", c)];
    assert_eq!(
        value(&scrape, "inflight_class_in_flight", &class("interactive")),
        Some(1.0)
    );
    assert_eq!(
        value(&scrape, "inflight_class_in_flight", &class("batch")),
        Some(0.0)
    );
    assert_eq!(
        value(&scrape, "inflight_class_waiting", &class("interactive")),
        Some(1.0)
    );
    assert_eq!(
        value(&scrape, "inflight_budget_waiting", &[("budget", "records")]),
        Some(1.0)
    );

    drop(held);
    interactive.await.unwrap().unwrap();
    let _held = b.acquire_in("interactive").await.unwrap();
    // Batch waits its own 100 ms deadline out.
    assert_eq!(
        b.acquire_in("batch").await.unwrap_err(),
        AcquireError::PermitTimeout
    );
    metrics::with_local_recorder(&recorder, || inflight::metrics::publish(&b));
    let scrape = parse(&handle.render());
    let reason =
        |c: &'static str, r: &'static str| [("budget", "records"), ("class", c), ("reason", r)];
    let rejections = "inflight_class_rejections_total";
    assert_eq!(
        value(&scrape, rejections, &reason("batch", "evicted")),
        Some(1.0)
    );
    assert_eq!(
        value(&scrape, rejections, &reason("batch", "permit_timeout")),
        Some(1.0)
    );
    assert_eq!(
        value(&scrape, rejections, &reason("interactive", "evicted")),
        Some(0.0)
    );
    assert_eq!(
        value(
            &scrape,
            "inflight_class_admitted_total",
            &class("interactive")
        ),
        Some(3.0)
    );
    assert_eq!(
        value(&scrape, "inflight_class_admitted_total", &class("batch")),
        Some(0.0)
    );
    assert_eq!(
        value(&scrape, "inflight_class_in_flight", &class("interactive")),
        Some(1.0)
    );
    // The budget-wide series count every class, and name the eviction too.
    let budget = [("budget", "records")];
    assert_eq!(
        value(&scrape, "inflight_budget_admitted_total", &budget),
        Some(3.0)
    );
    assert_eq!(
        value(
            &scrape,
            "inflight_budget_rejections_total",
            &[("budget", "records"), ("reason", "evicted")]
        ),
        Some(1.0)
    );
    // Wait histograms per class: interactive's three grants, waits of zero included.
    let waits = "inflight_class_permit_wait_seconds";
    assert_eq!(value(&scrape, waits, &class("interactive")), Some(3.0));
    assert_eq!(
        value(&scrape, waits, &class("batch")),
        Some(0.0),
        "no batch caller was admitted"
    );
    assert!(scrape.docs.contains_key("inflight_class_rejections_total"));
}

/// The peak gauge shows that a budget bound, after the fact, without sampling `/metrics`.
#[tokio::test(start_paused = true)]
async fn the_peak_in_flight_gauge_keeps_the_most_calls_at_once() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let b = metrics::with_local_recorder(&recorder, || {
        Budget::new("records", BudgetConfig::new(6)).unwrap()
    });
    let held: Vec<_> = (0..4).map(|_| b.try_acquire_owned().unwrap()).collect();
    drop(held);
    let _one = b.try_acquire_owned().unwrap();
    metrics::with_local_recorder(&recorder, || inflight::metrics::publish(&b));
    let scrape = parse(&handle.render());
    let budget = [("budget", "records")];
    assert_eq!(
        value(&scrape, "inflight_budget_peak_in_flight", &budget),
        Some(4.0)
    );
    assert_eq!(
        value(&scrape, "inflight_budget_in_flight", &budget),
        Some(1.0)
    );
}
