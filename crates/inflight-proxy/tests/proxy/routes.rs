//! `[[proxy.routes]]` end to end: one listener, several budgets, each request to the budget of
//! its path's longest matching prefix.

use crate::support::{client, get, metrics, proxy, until, Upstream};

#[tokio::test]
async fn one_listener_sends_each_path_to_its_own_budget() {
    let upstream = Upstream::start().await;
    let text = format!(
        r#"
        [budgets.light]
        max_concurrent = 4
        upstream = "{url}"
        listen = "127.0.0.1:0"

        [budgets.heavy]
        max_concurrent = 1
        max_queued = 0
        upstream = "{url}"

        [[proxy.routes]]
        listen = "127.0.0.1:0"
        prefix = "/hold"
        budget = "heavy"
        "#,
        url = upstream.url()
    );
    let (proxy, _) = proxy(&text).await;
    let addr = proxy.local_addr("light").unwrap();
    assert_eq!(
        proxy.local_addr("heavy"),
        Some(addr),
        "heavy is served where its route is"
    );
    // The heavy budget's one permit is held upstream ...
    let held = tokio::spawn(async move { get(&client(), addr, "/hold").await });
    until("one held", || upstream.seen().len() == 1).await;
    // ... so a second heavy call is refused at once, while light calls pass.
    let (status, headers, _) = get(&client(), addr, "/hold").await;
    assert_eq!(status, 503);
    assert_eq!(headers["x-inflight-refused"], "queue_full");
    for _ in 0..3 {
        assert_eq!(get(&client(), addr, "/sleep/1").await.0, 200);
    }
    let m = metrics(&proxy);
    assert_eq!(m["inflight_budget_admitted_total{budget=heavy}"], 1.0);
    assert_eq!(
        m["inflight_budget_rejections_total{budget=heavy,reason=queue_full}"],
        1.0
    );
    assert_eq!(m["inflight_budget_admitted_total{budget=light}"], 3.0);
    upstream.release(1);
    assert_eq!(held.await.unwrap().0, 200);
}

/// Routes and the limits on client connections are read at start: a reload that changes them
/// is refused as needing a restart, naming the key, and the running proxy keeps its own.
#[tokio::test]
async fn a_reload_that_changes_routes_or_client_limits_needs_a_restart() {
    let upstream = Upstream::start().await;
    let text = |idle: &str, prefix: &str| {
        format!(
            "[proxy]\nidle_timeout = \"{idle}\"\n\n[budgets.light]\nmax_concurrent = 4\nupstream = \"{url}\"\nlisten = \"127.0.0.1:0\"\n\n[budgets.heavy]\nmax_concurrent = 1\nupstream = \"{url}\"\n\n[[proxy.routes]]\nlisten = \"127.0.0.1:0\"\nprefix = \"{prefix}\"\nbudget = \"heavy\"\n",
            url = upstream.url()
        )
    };
    let (proxy, _) = proxy(&text("30s", "/hold")).await;
    let restart =
        |result: Result<inflight_proxy::Reloaded, inflight_proxy::ReloadError>| match result {
            Err(inflight_proxy::ReloadError::NeedsRestart { field, .. }) => field,
            other => panic!("not refused as needing a restart: {other:?}"),
        };
    assert_eq!(
        restart(proxy.reload(&text("30s", "/export"))),
        "proxy.routes"
    );
    assert_eq!(
        restart(proxy.reload(&text("5s", "/hold"))),
        "proxy.idle_timeout"
    );
    // The same file reloads.
    assert!(proxy.reload(&text("30s", "/hold")).is_ok());
}
