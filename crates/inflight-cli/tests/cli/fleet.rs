//! A fleet budget shown everywhere a user looks, tried as a new user would: two proxies sharing
//! a budget of 4 through a real `redis-server` (with a password) on loopback. `check-config`
//! shows the fleet settings, each proxy says where its permits live at start, `/metrics` has a
//! gauge of the calls at the dependency, `inflight fleet status` reads the budget in Redis, and
//! a Redis that goes away is said on stderr. The password is never shown.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::proxy_fleet::{slow_upstream, start_proxy, Redis};
use crate::support::{inflight, success_json};

const PASSWORD: &str = "s3cret-fleet";

/// `GET /metrics` of a proxy, parsed: `name{label=value,...}` to its value.
fn metrics(admin: SocketAddr) -> HashMap<String, f64> {
    let mut conn = TcpStream::connect(admin).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let lines = body.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid Prometheus text");
    let mut out = HashMap::new();
    for sample in scrape.samples {
        let mut labels: Vec<_> = sample
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        labels.sort();
        let value = match sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => continue,
        };
        out.insert(format!("{}{{{}}}", sample.metric, labels.join(",")), value);
    }
    out
}

fn gauge(admin: SocketAddr, name: &str) -> f64 {
    metrics(admin)
        .get(&format!("{name}{{budget=records}}"))
        .copied()
        .unwrap_or_else(|| panic!("{name} is on /metrics"))
}

/// Sends one request that the slow upstream never answers; the connection stays open.
fn hanging_request(addr: SocketAddr) -> TcpStream {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.write_all(b"GET /write HTTP/1.1\r\nHost: records\r\n\r\n")
        .unwrap();
    conn
}

fn until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn two_proxies_show_their_shared_fleet_budget_in_every_place_a_user_looks() {
    let Some(mut redis) = Redis::start_with(Some(PASSWORD)) else {
        return;
    };
    let upstream = slow_upstream();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("budgets.toml");
    std::fs::write(
        &path,
        format!(
            "[fleet]\nurl = \"{}\"\nlease = \"3s\"\n\n[proxy]\nadmin = \"127.0.0.1:0\"\ndrain = \"1s\"\n\n\
             [budgets.records]\nmax_concurrent = 4\npermit_timeout = \"20s\"\n\
             call_timeout = \"60s\"\nscope = \"fleet\"\nfail = \"local\"\nlocal_limit = 2\n\
             upstream = \"http://{upstream}\"\nlisten = \"127.0.0.1:0\"\n",
            redis.url()
        ),
    )
    .unwrap();

    // check-config: the fleet settings, in text and JSON, the password hidden.
    let out = inflight().arg("check-config").arg(&path).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    for shown in [
        "scope           fleet",
        "lease_mode      per_call",
        "fail            local, local_limit 2",
        "on_lost         keep",
        "[fleet]",
        "url             redis://:***@127.0.0.1:",
        "lease           3s",
    ] {
        assert!(
            text.contains(shown),
            "check-config shows {shown:?}:\n{text}"
        );
    }
    assert!(!text.contains(PASSWORD), "{text}");
    let doc = success_json(
        &inflight()
            .arg("check-config")
            .arg(&path)
            .arg("--json")
            .output()
            .unwrap(),
    );
    let b = &doc["budgets"][0];
    assert_eq!(
        (
            &b["scope"],
            &b["fail"],
            &b["local_limit"],
            &b["lease_mode"],
            &b["on_lost"]
        ),
        (
            &"fleet".into(),
            &"local".into(),
            &2.into(),
            &"per_call".into(),
            &"keep".into()
        )
    );
    assert!(doc["fleet"]["url"]
        .as_str()
        .unwrap()
        .starts_with("redis://:***@"));
    assert!(!doc.to_string().contains(PASSWORD));

    // Two proxies: each says where its budget's permits live.
    let proxies = [start_proxy(&path), start_proxy(&path)];
    for p in &proxies {
        let said = p.stdout.join("\n");
        assert!(
            said.contains("fleet budgets records keep their permits in redis://:***@127.0.0.1:"),
            "{said}"
        );
        assert!(!said.contains(PASSWORD), "{said}");
    }

    // 4 requests to each: 4 run at the upstream, 4 wait for a fleet lease.
    let _requests: Vec<TcpStream> = proxies
        .iter()
        .flat_map(|p| (0..4).map(|_| hanging_request(p.listen)))
        .collect();
    until(Duration::from_secs(10), "4 leases held in redis", || {
        redis.holders("records") == 4
    });
    until(Duration::from_secs(10), "the gauges settle", || {
        proxies
            .iter()
            .map(|p| {
                gauge(
                    p.admin.expect("an admin listener"),
                    "inflight_budget_awaiting_store",
                )
            })
            .sum::<f64>()
            == 4.0
    });
    let at_dependency: f64 = proxies
        .iter()
        .map(|p| {
            gauge(
                p.admin.expect("an admin listener"),
                "inflight_budget_in_flight",
            )
        })
        .sum();
    assert_eq!(
        at_dependency, 4.0,
        "in_flight counts the calls at the dependency"
    );
    let leases: f64 = proxies
        .iter()
        .map(|p| {
            gauge(
                p.admin.expect("an admin listener"),
                "inflight_fleet_leases_held",
            )
        })
        .sum();
    assert_eq!(leases, 4.0);
    assert_eq!(
        gauge(
            proxies[0].admin.expect("an admin listener"),
            "inflight_fleet_redis_down"
        ),
        0.0
    );

    // fleet status: the budget as Redis holds it.
    let status = inflight()
        .args(["fleet", "status", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8(status.stdout).unwrap();
    assert!(status.status.success(), "{text}");
    assert!(text.contains("holders         4 of 4"), "{text}");
    assert!(text.contains("waiters         4"), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");
    let doc = success_json(
        &inflight()
            .args(["fleet", "status", "--json", "--config"])
            .arg(&path)
            .output()
            .unwrap(),
    );
    let b = &doc["budgets"][0];
    assert_eq!((&b["holders"], &b["waiters"]), (&4.into(), &4.into()));
    assert_eq!(doc["topology"], "standalone");
    assert!(b["epoch"].as_u64().unwrap() > 0);
    assert_eq!(b["reachable"], true);

    // Redis goes away: each proxy says so, with what its calls do now, and fleet status fails.
    redis.kill();
    for p in &proxies {
        let start = Instant::now();
        loop {
            let line = p
                .stderr
                .recv_timeout(Duration::from_secs(15).saturating_sub(start.elapsed()))
                .expect("the proxy says redis cannot be reached");
            if line.contains("fleet budget records: redis at") && line.contains("cannot be reached")
            {
                assert!(
                    line.contains("at most 2 calls on its local fallback"),
                    "{line}"
                );
                assert!(!line.contains(PASSWORD), "{line}");
                break;
            }
        }
    }
    let status = inflight()
        .args(["fleet", "status", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(1));
    let text = String::from_utf8(status.stdout).unwrap();
    assert!(text.contains("NOT REACHED"), "{text}");
    assert!(
        text.contains("local (each process runs at most 2"),
        "{text}"
    );
}

#[test]
fn fleet_status_refuses_a_file_without_a_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("budgets.toml");
    std::fs::write(&path, "[budgets.records]\nmax_concurrent = 4\n").unwrap();
    let out = inflight()
        .args(["fleet", "status", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("no [fleet] table"), "{err}");
}

#[test]
fn fleet_status_refuses_a_file_whose_fleet_keeps_no_budget_and_says_a_bad_url_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let status = |text: &str| {
        let path = dir.path().join("budgets.toml");
        std::fs::write(&path, text).unwrap();
        let out = inflight()
            .args(["fleet", "status", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8(out.stderr).unwrap())
    };
    // A [fleet] table, but no budget in it: Redis is not asked, and the file is refused.
    let (code, err) =
        status("[fleet]\nurl = \"redis://127.0.0.1:1\"\n[budgets.records]\nmax_concurrent = 4\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no budget has scope = \"fleet\""), "{err}");
    // A URL that is not a fleet URL: one line, as check-config says it.
    let (code, err) = status(
        "[fleet]\nurl = \"http://127.0.0.1:6379\"\n\
         [budgets.records]\nmax_concurrent = 4\nscope = \"fleet\"\n",
    );
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("unknown scheme"), "{err}");
}

/// A budgets file in `dir` whose one budget, `records` (4), is kept in the Redis at `url`.
fn fleet_file(dir: &tempfile::TempDir, url: &str) -> std::path::PathBuf {
    let path = dir.path().join("budgets.toml");
    std::fs::write(
        &path,
        format!(
            "[fleet]\nurl = \"{url}\"\n[budgets.records]\nmax_concurrent = 4\nscope = \"fleet\"\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn fleet_status_whose_readers_have_gone_ends_with_its_code_not_a_panic() {
    // As `inflight fleet status ... | head -1` once head has its line: stdout, and here stderr
    // too, are pipes whose reading end is closed before the command writes.
    let dir = tempfile::tempdir().unwrap();
    let path = fleet_file(&dir, "redis://127.0.0.1:1");
    let gone = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        writer
    };
    let status = std::process::Command::new(crate::support::inflight_path())
        .args(["fleet", "status", "--config"])
        .arg(&path)
        .stdout(gone())
        .stderr(gone())
        .status()
        .unwrap();
    // 1: Redis could not be reached (as with readers); a panic is 101.
    assert_eq!(status.code(), Some(1), "{status:?}");
}

#[test]
fn fleet_status_json_has_every_key_for_a_budget_not_reached_and_says_why_a_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = fleet_file(&dir, "redis://127.0.0.1:1");
    let out = inflight()
        .args(["fleet", "status", "--json", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &doc["budgets"][0];
    assert_eq!(row["reachable"], false);
    assert_eq!(row["fallback"], "refusing");
    assert!(
        row["error"].as_str().unwrap().contains("cannot be reached"),
        "{row}"
    );
    for key in [
        "node",
        "role",
        "holders",
        "waiters",
        "epoch",
        "learning_ms",
        "round_trip_ms",
    ] {
        assert!(row[key].is_null(), "{key}: {row}");
    }
    // A file that is refused: JSON that says why, and exit 2.
    std::fs::write(&path, "[budgets.records]\nmax_concurrent = 4\n").unwrap();
    let out = inflight()
        .args(["fleet", "status", "--json", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        doc["error"].as_str().unwrap().contains("no [fleet] table"),
        "{doc}"
    );
    assert_eq!(doc["file"], path.display().to_string());
}

#[test]
fn fleet_status_on_a_redis_no_process_has_used_says_there_is_no_epoch_yet() {
    let Some(redis) = crate::proxy_fleet::Redis::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = fleet_file(&dir, &redis.url());
    let out = inflight()
        .args(["fleet", "status", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("  epoch           none yet (no process has met the budget in this redis), learning: no\n"),
        "{text}"
    );
}
