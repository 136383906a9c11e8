//! `scope = "fleet"`: two proxies (two replicas) share one budget through a real redis-server.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{client, get, metrics, proxy, send, until, Upstream};

/// A `redis-server` on a free loopback port, without persistence, killed on drop.
struct RedisServer {
    port: u16,
    child: Child,
}

impl RedisServer {
    /// Starts one, or says why not and gives `None` when `redis-server` is not installed.
    fn start() -> Option<RedisServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .ok()?
            .port();
        let child = match Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                eprintln!("skipped: cannot run redis-server ({e}); apt-get install redis-server");
                return None;
            }
        };
        let server = RedisServer { port, child };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if server.ping() {
                return Some(server);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {port} did not answer within 10 s");
    }

    fn ping(&self) -> bool {
        let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let mut answer = [0u8; 7];
        conn.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
            && conn.read_exact(&mut answer).is_ok()
            && &answer == b"+PONG\r\n"
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn two_proxies_share_one_fleet_budget() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let upstream = Upstream::start().await;
    let file = format!(
        "[fleet]\nurl = \"{}\"\nlease = \"5s\"\n\n[budgets.records]\nmax_concurrent = 2\npermit_timeout = \"300ms\"\nscope = \"fleet\"\nupstream = \"{}\"\nlisten = \"127.0.0.1:0\"\n",
        redis.url(),
        upstream.url()
    );
    let (a, _) = proxy(&file).await;
    let (b, _) = proxy(&file).await;
    let a_addr = a.local_addr("records").unwrap();
    let b_addr = b.local_addr("records").unwrap();

    // Two held through one replica take the whole fleet's budget...
    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async move { get(&client(), a_addr, "/hold").await }))
        .collect();
    until("two requests held upstream", || upstream.seen().len() == 2).await;
    // ...so the other replica's request waits its permit_timeout and is refused, unforwarded.
    let (status, headers, _) = get(&client(), b_addr, "/").await;
    assert_eq!(status, 503);
    assert_eq!(headers["x-inflight-refused"], "permit_timeout");
    assert_eq!(upstream.seen().len(), 2);

    upstream.release(2);
    for h in held {
        assert_eq!(h.await.unwrap().0, 200);
    }
    // With the leases back, the other replica gets through.
    let (status, _, body) = get(&client(), b_addr, "/after").await;
    assert_eq!((status, body.as_str()), (200, "GET /after"));
    assert_eq!(upstream.peak(), 2);
    assert_eq!(
        metrics(&b)["inflight_budget_rejections_total{budget=records,reason=permit_timeout}"],
        1.0
    );

    // A reload to scope = "local" gives replica b a budget of its own.
    let local = file.replace("scope = \"fleet\"\n", "");
    assert_eq!(b.reload(&local).unwrap().changed, ["records"]);
    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async move { get(&client(), a_addr, "/hold").await }))
        .collect();
    until("two more requests held upstream", || {
        upstream.seen().len() == 5
    })
    .await;
    let (status, _, _) = get(&client(), b_addr, "/").await;
    assert_eq!(status, 200, "a local budget of 2 on b is free");
    upstream.release(2);
    for h in held {
        assert_eq!(h.await.unwrap().0, 200);
    }
}

impl RedisServer {
    /// Leases of budget `name` held in Redis now.
    fn holders(&self, name: &str) -> usize {
        let key = format!("inflight:{{{name}}}:holders");
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        conn.write_all(format!("*2\r\n$5\r\nZCARD\r\n${}\r\n{key}\r\n", key.len()).as_bytes())
            .unwrap();
        let mut answer = Vec::new();
        let mut byte = [0u8; 1];
        while answer.last() != Some(&b'\n') {
            conn.read_exact(&mut byte).unwrap();
            answer.push(byte[0]);
        }
        let answer = String::from_utf8(answer).unwrap();
        answer
            .trim_end()
            .strip_prefix(':')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("ZCARD answered {answer:?}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_gives_back_the_fleet_leases_of_requests_cut_at_the_drain_time() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let upstream = Upstream::start().await;
    // A lease far longer than the test: one kept would still be in Redis at the end.
    let file = format!(
        "[fleet]\nurl = \"{}\"\nlease = \"60s\"\n\n[proxy]\ndrain = \"300ms\"\n\n[budgets.records]\nmax_concurrent = 3\nscope = \"fleet\"\nupstream = \"{}\"\nlisten = \"127.0.0.1:0\"\n",
        redis.url(),
        upstream.url()
    );
    let (proxy, _) = proxy(&file).await;
    let addr = proxy.local_addr("records").unwrap();
    let held: Vec<_> = (0..3)
        .map(|_| tokio::spawn(async move { get(&client(), addr, "/hold").await }))
        .collect();
    until("three requests held upstream", || {
        upstream.seen().len() == 3
    })
    .await;
    assert_eq!(redis.holders("records"), 3);
    let drained = proxy.drain().await;
    assert!(!drained.in_time);
    assert_eq!(drained.in_flight, 3);
    assert_eq!(
        redis.holders("records"),
        0,
        "the requests cut at the drain time still hold their fleet leases"
    );
    upstream.release(3);
    for h in held {
        let _ = h.await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_gives_back_the_leases_of_a_fleet_budget_rebuilt_by_a_reload() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let upstream = Upstream::start().await;
    let file = format!(
        "[fleet]\nurl = \"{}\"\nlease = \"60s\"\n\n[proxy]\ndrain = \"300ms\"\n\n[budgets.records]\nmax_concurrent = 3\nscope = \"fleet\"\nupstream = \"{}\"\nlisten = \"127.0.0.1:0\"\n",
        redis.url(),
        upstream.url()
    );
    let (proxy, _) = proxy(&file).await;
    let addr = proxy.local_addr("records").unwrap();
    // New settings: a new budget, with a store of the reload's own fleet.
    let reloaded = file.replace("max_concurrent = 3", "max_concurrent = 2");
    assert_eq!(proxy.reload(&reloaded).unwrap().changed, ["records"]);
    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async move { get(&client(), addr, "/hold").await }))
        .collect();
    until("two requests held upstream", || upstream.seen().len() == 2).await;
    assert_eq!(redis.holders("records"), 2);
    let drained = proxy.drain().await;
    assert_eq!(drained.in_flight, 2);
    assert_eq!(
        redis.holders("records"),
        0,
        "the reloaded budget's leases were kept"
    );
    upstream.release(2);
    for h in held {
        let _ = h.await;
    }
}

#[tokio::test]
async fn a_fleet_budget_with_classes_shares_its_limit_whatever_the_class() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let upstream = Upstream::start().await;
    let file = format!(
        "[fleet]\nurl = \"{}\"\nlease = \"5s\"\n\n[budgets.records]\nmax_concurrent = 2\npermit_timeout = \"300ms\"\nscope = \"fleet\"\nclasses = {{ interactive = 4, batch = 1 }}\nclass_header = \"x-priority\"\nupstream = \"{}\"\nlisten = \"127.0.0.1:0\"\n",
        redis.url(),
        upstream.url()
    );
    let (a, _) = proxy(&file).await;
    let (b, _) = proxy(&file).await;
    let a_addr = a.local_addr("records").unwrap();
    let b_addr = b.local_addr("records").unwrap();
    let held: Vec<_> = ["interactive", "batch"]
        .into_iter()
        .map(|class| {
            tokio::spawn(async move {
                send(
                    &client(),
                    a_addr,
                    "GET",
                    "/hold",
                    &[("x-priority", class)],
                    "",
                )
                .await
            })
        })
        .collect();
    until("two requests held upstream", || upstream.seen().len() == 2).await;
    assert_eq!(redis.holders("records"), 2, "a lease per request, in Redis");
    // The heaviest class on the other replica still finds the fleet's two permits held.
    let (status, headers, _) = send(
        &client(),
        b_addr,
        "GET",
        "/",
        &[("x-priority", "interactive")],
        "",
    )
    .await;
    assert_eq!(status, 503);
    assert_eq!(headers["x-inflight-refused"], "permit_timeout");
    assert_eq!(upstream.seen().len(), 2);
    upstream.release(2);
    for h in held {
        assert_eq!(h.await.unwrap().0, 200);
    }
    let (status, _, _) = send(
        &client(),
        b_addr,
        "GET",
        "/after",
        &[("x-priority", "interactive")],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(upstream.peak(), 2);
    let seen = upstream.seen();
    assert_eq!(seen.last().unwrap().headers["x-priority"], "interactive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_lost_cancel_drops_a_request_whose_fleet_lease_is_lost() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let upstream = Upstream::start().await;
    // Leases of 300 ms: with Redis gone, a held request's lease is lost within about that.
    let file = format!(
        "[fleet]\nurl = \"{}\"\nlease = \"300ms\"\n\n[budgets.records]\nmax_concurrent = 2\n\
         permit_timeout = \"1s\"\nscope = \"fleet\"\non_lost = \"cancel\"\nupstream = \"{}\"\n\
         listen = \"127.0.0.1:0\"\n",
        redis.url(),
        upstream.url()
    );
    let (proxy, _) = proxy(&file).await;
    let addr = proxy.local_addr("records").unwrap();
    let held = tokio::spawn(async move {
        let start = Instant::now();
        let answer = get(&client(), addr, "/hold").await;
        (start.elapsed(), answer)
    });
    until("the request held upstream", || upstream.seen().len() == 1).await;
    drop(redis);
    let (took, (status, headers, body)) = tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .expect("the request is cut once its lease is lost")
        .unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(headers["x-inflight-refused"], "lease_lost");
    assert!(body.contains("on_lost"), "{body}");
    assert!(took < Duration::from_secs(3), "cut after {took:?}");
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_proxy_replies_total{budget=records,reason=lease_lost}"],
        1.0
    );
    assert_eq!(m["inflight_budget_in_flight{budget=records}"], 0.0);
    upstream.release(1);
}

/// A proxy whose fleet's Redis does not answer says so as it starts, before any request (on
/// stderr and in its metrics), and says nothing of the kind when it answers.
#[tokio::test]
async fn a_fleet_whose_redis_is_down_at_start_is_said_at_once() {
    down_at_start_is_said_at_once("").await;
}

/// The same with the budget's permits kept as shares.
#[tokio::test]
async fn a_shares_fleet_whose_redis_is_down_at_start_is_said_at_once() {
    down_at_start_is_said_at_once("lease_mode = \"shares\"\n").await;
}

async fn down_at_start_is_said_at_once(mode: &str) {
    let upstream = Upstream::start().await;
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let text = |url: &str| {
        format!(
            "[proxy]\nadmin = \"127.0.0.1:0\"\n[fleet]\nurl = \"{url}\"\n\n[budgets.records]\nmax_concurrent = 2\nscope = \"fleet\"\n{mode}upstream = \"{}\"\nlisten = \"127.0.0.1:0\"\n",
            upstream.url()
        )
    };
    let (down, lines) = proxy(&text(&format!("redis://127.0.0.1:{port}"))).await;
    until("the start-up check said so", || {
        lines.lock().unwrap().iter().any(|l| {
            l.contains("fleet budget records: redis at") && l.contains("cannot be reached")
        })
    })
    .await;
    assert_eq!(
        metrics(&down).get("inflight_fleet_redis_down{budget=records}"),
        Some(&1.0),
        "the metric says so too, before any request"
    );
    // Ready all the same: readiness is whether the proxy takes requests, not Redis (every
    // replica would go out of its load balancer at once).
    let admin = down.admin_addr().unwrap();
    assert_eq!(get(&client(), admin, "/readyz").await.0, 200);
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (_up, lines) = proxy(&text(&server.url())).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let said = lines.lock().unwrap().clone();
    assert!(
        !said.iter().any(|l| l.contains("cannot be reached")),
        "{said:?}"
    );
}
