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
