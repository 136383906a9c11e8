//! The sim over real HTTP on 127.0.0.1: capacity and queue, 400s and 404s, stats, reset, scenario switch.

use std::time::{Duration, Instant};

use inflight_lab::scenario::ScenarioSet;
use inflight_lab::sim::{Sim, SimConfig, SimHandle, SimStats};
use serde_json::{json, Value};

/// Writes slow enough that 20 requests sent at once all arrive while the first 12 are still inside.
const TEST_SCENARIOS: &str = r#"
[scenarios.slow-writes]
description = "writes take 1.5 s, enrichment 20 ms"
enrichment = { median = "20ms" }
records = { median = "1500ms", capacity = 6, queue = 6 }

[scenarios.fast]
description = "everything 10 ms"
enrichment = { median = "10ms", sigma = 0.1 }
records = { median = "10ms", capacity = 2, queue = 1 }

[scenarios.quota]
description = "enrichment 10 ms under a quota of 2 calls/s, no burst"
enrichment = { median = "10ms", quota = "2/s", quota_burst = 1 }
records = { median = "10ms", capacity = 6, queue = 0 }

[scenarios.hanging]
description = "every enrichment call hangs for a minute"
enrichment = { median = "10ms", hang_probability = 1.0, hang = "60s" }
records = { median = "10ms", capacity = 6, queue = 6 }
"#;

async fn start(scenario: &str) -> SimHandle {
    let config = SimConfig {
        scenarios: ScenarioSet::parse(TEST_SCENARIOS, "test").unwrap(),
        scenario: scenario.into(),
        seed: 1,
        time_scale: 1.0,
    };
    let sim = Sim::bind(config, 0).await.unwrap();
    assert!(sim.local_addr().ip().is_loopback());
    sim.spawn()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// `GET url`, its body parsed as JSON.
async fn get_json<T: serde::de::DeserializeOwned>(c: &reqwest::Client, url: String) -> T {
    c.get(url).send().await.unwrap().json().await.unwrap()
}

/// `POST url` with `body` as JSON.
async fn post_json(c: &reqwest::Client, url: String, body: Value) -> reqwest::Response {
    c.post(url).json(&body).send().await.unwrap()
}

async fn stats(c: &reqwest::Client, url: &str) -> SimStats {
    get_json(c, format!("{url}/stats")).await
}

/// Sends `count` complete records (ids 0..count) to `POST /records` all at once; their statuses.
async fn write_at_once(c: &reqwest::Client, url: &str, count: i32) -> Vec<u16> {
    let sends: Vec<_> = (0..count)
        .map(|id| {
            let c = c.clone();
            let url = url.to_string();
            tokio::spawn(async move {
                post_json(
                    &c,
                    format!("{url}/records"),
                    json!({ "id": id, "complete": true }),
                )
                .await
                .status()
                .as_u16()
            })
        })
        .collect();
    let mut codes = Vec::new();
    for send in sends {
        codes.push(send.await.unwrap());
    }
    codes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_writes_at_once_give_twelve_accepted_and_eight_503s() {
    let sim = start("slow-writes").await;
    let url = sim.url().to_string();
    let c = client();
    let codes = write_at_once(&c, &url, 20).await;
    let ok = codes.iter().filter(|&&c| c == 200).count();
    let refused = codes.iter().filter(|&&c| c == 503).count();
    assert_eq!((ok, refused), (12, 8), "codes: {codes:?}");

    let s = stats(&c, &url).await;
    assert_eq!(s.scenario, "slow-writes");
    assert_eq!(s.records.seen, 20);
    assert_eq!(s.records.accepted, 12);
    assert_eq!(s.records.rejected_503, 8);
    assert_eq!(s.records.in_service, 0);
    assert_eq!(s.records.peak_in_service, 6);
    assert!(
        (13..=20).contains(&s.records.peak_offered),
        "peak offered counts the refused: {}",
        s.records.peak_offered
    );
    assert_eq!(s.enrich.seen, 0);
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn bad_requests_get_400_with_a_message_and_unknown_paths_404() {
    let sim = start("fast").await;
    let url = sim.url().to_string();
    let c = client();

    let r = c.get(format!("{url}/enrich/abc")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("integer"),
        "{body}"
    );

    for bad in [
        "not json",
        r#"{"id": 1}"#,
        r#"{"id": "x", "complete": true}"#,
        r#"{"id": 1, "complete": "yes"}"#,
        r#"{"id": 1.5, "complete": true}"#,
        r#"[1, true]"#,
        r#"{"id": 1, "complete": true, "extra": 0}"#,
        "",
    ] {
        let r = c
            .post(format!("{url}/records"))
            .header("content-type", "application/json")
            .body(bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "body {bad:?}");
        let body: Value = r.json().await.unwrap();
        assert!(body["error"].as_str().unwrap().contains("id"), "{body}");
    }

    for path in ["/nope", "/enrich", "/records/1", "/stats/x"] {
        let r = c.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 404, "{path}");
    }

    // A known path with the wrong method: 405 with the allowed methods and a message.
    for (method, path) in [
        (reqwest::Method::POST, "/enrich/1"),
        (reqwest::Method::GET, "/records"),
        (reqwest::Method::DELETE, "/stats"),
    ] {
        let r = c
            .request(method.clone(), format!("{url}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 405, "{method} {path}");
        assert!(r.headers().contains_key("allow"), "{method} {path}");
        let body: Value = r.json().await.unwrap();
        assert!(
            body["error"].as_str().unwrap().contains("not served"),
            "{body}"
        );
    }

    let r = post_json(&c, format!("{url}/scenario"), json!({ "name": "nope" })).await;
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = r.json().await.unwrap();
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("fast, hanging, quota, slow-writes"),
        "{message}"
    );

    let r = post_json(
        &c,
        format!("{url}/scenario"),
        json!({ "name": "fast", "time_scale": -1.0 }),
    )
    .await;
    assert_eq!(r.status().as_u16(), 400);

    // Malformed requests were seen but none was accepted or refused for capacity.
    let s = stats(&c, &url).await;
    assert_eq!(
        (s.records.seen, s.records.accepted, s.records.rejected_503),
        (8, 0, 0)
    );
    assert_eq!(s.enrich.seen, 1);
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn enrichment_answers_and_stats_reset() {
    let sim = start("fast").await;
    let url = sim.url().to_string();
    let c = client();
    for id in [1, -7, 42] {
        let body: Value = get_json(&c, format!("{url}/enrich/{id}")).await;
        assert_eq!(body["id"], id);
        assert!(body["score"].is_number());
    }
    let r = post_json(
        &c,
        format!("{url}/records"),
        json!({ "id": 3, "complete": false }),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["accepted"], true);
    assert_eq!(body["id"], 3);

    let s = stats(&c, &url).await;
    assert_eq!((s.enrich.seen, s.enrich.accepted), (3, 3));
    assert_eq!(s.enrich.peak_in_service, 1);
    assert_eq!(s.records.accepted, 1);

    let r = c.post(format!("{url}/stats/reset")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let s = stats(&c, &url).await;
    assert_eq!(s.enrich, Default::default());
    assert_eq!(s.records, Default::default());
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn scenario_switch_changes_capacity_reseeds_and_resets() {
    let sim = start("slow-writes").await;
    let url = sim.url().to_string();
    let c = client();
    c.get(format!("{url}/enrich/1")).send().await.unwrap();

    let r = post_json(
        &c,
        format!("{url}/scenario"),
        json!({ "name": "fast", "seed": 99, "time_scale": 0.5 }),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    let current: Value = get_json(&c, format!("{url}/scenario")).await;
    assert_eq!(current["name"], "fast");
    assert_eq!(current["seed"], 99);
    assert_eq!(current["time_scale"], 0.5);
    assert_eq!(current["records"]["capacity"], 2);
    assert_eq!(current["records"]["queue"], 1);
    assert_eq!(current["records"]["median"], "10ms");

    let s = stats(&c, &url).await;
    assert_eq!((s.scenario.as_str(), s.time_scale), ("fast", 0.5));
    assert_eq!(s.enrich.seen, 0, "switching resets the stats");

    // The new capacity (2 + 1 waiting) holds: 3 of 6 simultaneous writes are refused.
    let codes = write_at_once(&c, &url, 6).await;
    // 10 ms writes are too quick for "at once" to be reliable, so only bound the outcome.
    let ok = codes.iter().filter(|&&c| c == 200).count() as u64;
    let s = stats(&c, &url).await;
    assert_eq!(s.records.accepted, ok);
    assert_eq!(s.records.accepted + s.records.rejected_503, 6);
    assert!(s.records.peak_in_service <= 2, "{:?}", s.records);
    sim.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_gives_up_does_not_leave_in_service_high() {
    let sim = start("hanging").await;
    let url = sim.url().to_string();
    let c = client();
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    for id in 0..3 {
        let r = impatient.get(format!("{url}/enrich/{id}")).send().await;
        assert!(r.unwrap_err().is_timeout());
    }
    // The calls hang for 60 s; in_service must drop as soon as the server sees the clients gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    let s = loop {
        let s = stats(&c, &url).await;
        if s.enrich.in_service == 0 || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(s.enrich.in_service, 0, "{:?}", s.enrich);
    assert_eq!(s.enrich.seen, 3);
    assert_eq!(s.enrich.accepted, 0);
    assert!(s.enrich.peak_in_service >= 1);
    sim.shutdown().await.unwrap();
}

#[tokio::test]
async fn oversized_bodies_get_a_json_413_and_silent_connections_are_closed() {
    let sim = start("fast").await;
    let c = client();
    let big = vec![b'x'; 100 * 1024];
    let resp = c
        .post(format!("{}/records", sim.url()))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("at most"),
        "{body}"
    );

    // A connection that never sends its headers is closed after the read timeout (5 s).
    use tokio::io::AsyncReadExt;
    let mut silent = tokio::net::TcpStream::connect(sim.local_addr())
        .await
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(20), silent.read(&mut buf))
        .await
        .expect("the sim closes a silent connection");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

/// A call over the quota is answered 429 with the wait until the quota admits one: in whole
/// seconds (`Retry-After`) and milliseconds (`retry-after-ms`), both rounded up, so a caller that
/// waits `retry-after-ms` is admitted.
#[tokio::test]
async fn a_429_over_the_quota_says_when_to_come_back() {
    let sim = start("quota").await;
    let c = client();
    let url = format!("{}/enrich/1", sim.url());
    assert_eq!(c.get(&url).send().await.unwrap().status(), 200);
    let refused = c.get(&url).send().await.unwrap();
    assert_eq!(refused.status(), 429);
    let header = |name: &str| -> u64 {
        let value = refused
            .headers()
            .get(name)
            .unwrap_or_else(|| panic!("no {name}"));
        value.to_str().unwrap().parse().unwrap()
    };
    let (seconds, millis) = (header("retry-after"), header("retry-after-ms"));
    // One call a 500 ms: the next turn is at most 500 ms away.
    assert!((1..=500).contains(&millis), "retry-after-ms: {millis}");
    assert_eq!(seconds, 1, "{millis} ms rounded up to whole seconds");
    tokio::time::sleep(Duration::from_millis(millis)).await;
    assert_eq!(c.get(&url).send().await.unwrap().status(), 200);
    assert_eq!(stats(&c, sim.url()).await.enrich.rejected_429, 1);
}
