//! The live page at the admin address: `/budgets.json` agrees with `/metrics`, and the page,
//! rendered by a real headless Chromium, shows the same numbers.

use std::process::Stdio;
use std::time::Duration;

use crate::support::{client, get, metrics, proxy, until, Upstream};

/// A proxy in front of `upstream` with an admin address, one budget of 2 that has bound: two
/// calls held, two refused, and a class row.
async fn bound_proxy(upstream: &Upstream) -> inflight_proxy::Proxy {
    let text = format!(
        r#"
        [proxy]
        admin = "127.0.0.1:0"

        [budgets.records]
        max_concurrent = 2
        max_queued = 0
        classes = {{ interactive = 4, batch = 1 }}
        class_header = "x-priority"
        upstream = "{url}"
        listen = "127.0.0.1:0"
        "#,
        url = upstream.url()
    );
    let (proxy, _) = proxy(&text).await;
    proxy
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).expect("valid JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_json_agrees_with_metrics() {
    let upstream = Upstream::start().await;
    let proxy = bound_proxy(&upstream).await;
    let addr = proxy.local_addr("records").unwrap();
    let admin = proxy.admin_addr().unwrap();
    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async move { get(&client(), addr, "/hold").await }))
        .collect();
    until("two held", || upstream.seen().len() == 2).await;
    for _ in 0..2 {
        assert_eq!(get(&client(), addr, "/").await.0, 503);
    }
    let (status, headers, body) = get(&client(), admin, "/budgets.json").await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/json");
    let doc = json(&body);
    assert_eq!(doc["version"], 1);
    let b = &doc["budgets"][0];
    let m = metrics(&proxy);
    assert_eq!(b["name"], "records");
    assert_eq!(
        b["limit"],
        m["inflight_budget_limit{budget=records}"] as u64
    );
    assert_eq!(b["in_flight"], 2);
    assert_eq!(
        b["peak_in_flight"],
        m["inflight_budget_peak_in_flight{budget=records}"] as u64
    );
    assert_eq!(
        b["admitted"],
        m["inflight_budget_admitted_total{budget=records}"] as u64
    );
    assert_eq!(
        b["refused"]["queue_full"],
        m["inflight_budget_rejections_total{budget=records,reason=queue_full}"] as u64
    );
    assert_eq!(b["refused"]["queue_full"], 2);
    assert_eq!(b["classes"][0]["name"], "interactive");
    assert_eq!(b["limit_history"].as_array().unwrap().last().unwrap()[1], 2);
    assert!(b["fleet"].is_null());
    let (status, headers, page) = get(&client(), admin, "/").await;
    assert_eq!(status, 200);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(
        page.contains("budgets.json") && !page.contains("src=\"http"),
        "self-contained"
    );
    upstream.release(2);
    for h in held {
        h.await.unwrap();
    }
}

/// Chromium, as Debian ships it, if it is installed.
fn chromium() -> Option<&'static str> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
}

/// The page in a real headless Chromium shows the budget's numbers as `/metrics` has them, and
/// a screenshot of it is taken (into `INFLIGHT_PAGE_SCREENSHOT` when set, as the docs' is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_in_a_headless_chromium_shows_what_metrics_say() {
    let Some(chromium) = chromium() else {
        eprintln!(
            "skipping: Chromium is not installed (scripts/test.sh installs Debian's chromium)"
        );
        return;
    };
    let upstream = Upstream::start().await;
    let proxy = bound_proxy(&upstream).await;
    let addr = proxy.local_addr("records").unwrap();
    let admin = proxy.admin_addr().unwrap();
    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async move { get(&client(), addr, "/hold").await }))
        .collect();
    until("two held", || upstream.seen().len() == 2).await;
    for _ in 0..3 {
        assert_eq!(get(&client(), addr, "/").await.0, 503);
    }
    let profile = tempfile::tempdir().unwrap();
    let run = |extra: Vec<String>| {
        let mut command = tokio::process::Command::new(chromium);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--virtual-time-budget=3000",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(format!("http://{admin}/"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        command
    };
    let dom = tokio::time::timeout(
        Duration::from_secs(60),
        run(vec!["--dump-dom".into()]).output(),
    )
    .await
    .expect("Chromium dumps the page within 60 s")
    .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    let m = metrics(&proxy);
    let shown = |field: &str| -> String {
        let marker = format!("data-budget=\"records\" data-field=\"{field}\">");
        let at = dom
            .find(&marker)
            .unwrap_or_else(|| panic!("no {field} on the page:\n{dom}"));
        let rest = &dom[at + marker.len()..];
        rest[..rest.find('<').unwrap()].to_string()
    };
    assert_eq!(shown("limit"), "2");
    assert_eq!(shown("in_flight"), "2");
    assert_eq!(
        shown("admitted"),
        (m["inflight_budget_admitted_total{budget=records}"] as u64).to_string()
    );
    assert_eq!(
        shown("peak_in_flight"),
        (m["inflight_budget_peak_in_flight{budget=records}"] as u64).to_string()
    );
    assert_eq!(shown("refused"), "3");
    assert!(
        dom.contains("data-class=\"interactive\""),
        "the class rows are drawn"
    );

    let screenshot = std::env::var("INFLIGHT_PAGE_SCREENSHOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| profile.path().join("page.png"));
    let shot = tokio::time::timeout(
        Duration::from_secs(60),
        run(vec![
            format!("--screenshot={}", screenshot.display()),
            "--window-size=1100,520".into(),
            "--hide-scrollbars".into(),
        ])
        .output(),
    )
    .await
    .expect("Chromium takes the screenshot within 60 s")
    .unwrap();
    assert!(shot.status.success());
    let png = std::fs::read(&screenshot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 5_000,
        "a real picture"
    );
    upstream.release(2);
    for h in held {
        h.await.unwrap();
    }
}
