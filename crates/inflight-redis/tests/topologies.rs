//! Fleet budgets on the Redis that production runs, counted where the calls arrive: a Redis
//! Cluster reached from any node's address, its failovers (manual, and a primary killed), a
//! primary found through Sentinel and its failover. Each "process" is a `RedisFleet` of its own
//! (its own connection and grants channel); every call goes to an [`Observer`].

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use inflight::store::Store;
use inflight::Budget;
use inflight_redis::{Fail, RedisFleet, RedisStore};
use support::cluster::RedisCluster;
use support::load::Load;
use support::sentinel::Sentinels;
use support::{ms, Observer};
use tokio::time::Instant;

/// A fleet on `url` with a lease of `lease`, trusting the authority in `ca` when given.
fn fleet(url: &str, lease: Duration, ca: Option<&Path>) -> RedisFleet {
    let mut builder = RedisFleet::builder(url)
        .lease(lease)
        .op_timeout(ms(500))
        .retry_after(ms(200));
    if let Some(ca) = ca {
        builder = builder.ca_file(ca);
    }
    builder.build().unwrap()
}

fn budget<S: Store + Clone + 'static>(name: &str, limit: usize, store: &S) -> Budget {
    Budget::builder(name)
        .max_concurrent(limit)
        .permit_timeout(ms(2000))
        .store(Arc::new(store.clone()))
        .build()
        .unwrap()
}

/// Calls of `command` on the cluster's node at `port` since its stats were reset.
fn calls(cluster: &RedisCluster, port: u16, command: &str) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut cluster.conn_to(port))
        .unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_naming_any_node_reaches_budgets_on_every_primary_of_a_cluster() {
    let Some(cluster) = RedisCluster::start(3, 0, ms(2000)) else {
        return;
    };
    every_primary(&cluster, |url| fleet(url, ms(5000), None)).await;
}

/// The same over TLS alone (client port and cluster bus) with an ACL user, the way managed
/// clusters run: `rediss://user:password@node` and the cluster's CA file. The nodes found
/// through the one named are reached with the same login and the same authority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rediss_url_with_a_ca_file_reaches_budgets_on_every_primary_of_a_tls_cluster() {
    let Some(cluster) = RedisCluster::start_tls(3, 0, ms(2000)) else {
        return;
    };
    let ca = cluster.ca_file().expect("a TLS cluster");
    assert!(cluster.url().starts_with("rediss://"), "{}", cluster.url());
    every_primary(&cluster, |url| fleet(url, ms(5000), Some(&ca))).await;
}

/// Three processes, each given the first node's address (made into a fleet by `fleet`), load
/// a budget on each primary: every call takes a fleet lease on its budget's own primary, and
/// the observers see each limit used and never passed.
async fn every_primary(cluster: &RedisCluster, fleet: impl Fn(&str) -> RedisFleet) {
    let names = cluster.budget_on_each_master();
    let masters = cluster.masters();
    for port in &masters {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut cluster.conn_to(*port))
            .unwrap();
    }
    let limit = 3;
    // Three processes, each given the first node's address, each with every budget; a local
    // fallback that would show at the observer if the fleet ran on it.
    let observers: Vec<Observer> = names.iter().map(|_| Observer::start()).collect();
    let fleets: Vec<RedisFleet> = (0..3).map(|_| fleet(&cluster.url())).collect();
    let mut stores = Vec::new();
    let mut loads = Vec::new();
    for (name, observer) in names.iter().zip(&observers) {
        let budgets: Vec<Budget> = fleets
            .iter()
            .map(|f| {
                let store = f.store(limit, Fail::Local(2));
                stores.push(store.clone());
                budget(name, limit, &store)
            })
            .collect();
        loads.push(Load::start(&budgets, 3, &observer.addr(), ms(20)));
    }
    tokio::time::sleep(ms(1500)).await;
    let mut reports = Vec::new();
    for load in loads {
        reports.push(load.stop().await);
    }
    for ((name, observer), report) in names.iter().zip(&observers).zip(&reports) {
        let served = observer.served();
        assert!(report.ok > 20, "{name}: {}", report.summary());
        assert_eq!(
            served.peak, limit,
            "{name}: the limit, used and never passed: {served:?}"
        );
    }
    let fallbacks: u64 = stores.iter().map(|s| s.snapshot().fallbacks).sum();
    let acquired: u64 = stores.iter().map(|s| s.snapshot().acquired).sum();
    assert_eq!(fallbacks, 0, "every call took a fleet lease");
    assert!(acquired > 60);
    assert_eq!(fleets[0].topology(), Some("cluster"));
    // Each budget's scripts ran on its own primary, and grants were told in its slot only.
    for port in &masters {
        assert!(
            calls(cluster, *port, "evalsha") > 0,
            "scripts ran on {port}"
        );
        assert_eq!(
            calls(cluster, *port, "publish"),
            0,
            "no broadcast over the cluster bus"
        );
    }
    assert!(
        masters
            .iter()
            .map(|p| calls(cluster, *p, "spublish"))
            .sum::<u64>()
            > 0
    );
}

/// Shares on a Cluster with more processes than permits: the permits go in turns, each handed
/// over by a give-back's script on the budget's primary to a process it finds listening in the
/// budget's slot (`PUBSUB SHARDNUMSUB` inside the script, the word by `SPUBLISH`). Six
/// processes share a budget of 2: no report fails, the observer never sees more than 2, every
/// process gets calls, and the scripts looked for listeners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_on_a_cluster_go_in_turns_handed_over_in_the_budgets_slot() {
    let Some(cluster) = RedisCluster::start(3, 0, ms(2000)) else {
        return;
    };
    let name = "turns";
    let port = cluster.owner(name);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut cluster.conn_to(port))
        .unwrap();
    let observer = Observer::start();
    let fleets: Vec<RedisFleet> = (0..6)
        .map(|_| fleet(&cluster.url(), ms(600), None))
        .collect();
    let stores: Vec<_> = fleets.iter().map(|f| f.shares(2, Fail::Closed)).collect();
    let budgets: Vec<Budget> = stores.iter().map(|store| budget(name, 2, store)).collect();
    let load = Load::start(&budgets, 2, &observer.addr(), ms(20));
    tokio::time::sleep(ms(3000)).await;
    let report = load.stop().await;
    let served = observer.served();
    assert!(served.peak <= 2, "never past the limit: {served:?}");
    assert_eq!(
        (report.unavailable, report.other),
        (0, 0),
        "{}",
        report.summary()
    );
    for (i, store) in stores.iter().enumerate() {
        let snapshot = store.snapshot();
        assert!(snapshot.acquired > 0, "process {i} got calls: {snapshot:?}");
        assert_eq!(snapshot.unavailable, 0, "process {i}: {snapshot:?}");
    }
    assert!(
        calls(&cluster, port, "pubsub|shardnumsub") > 0,
        "the give-backs looked for listeners in the slot"
    );
    assert!(calls(&cluster, port, "spublish") > 0);
    for fleet in &fleets {
        fleet.shutdown().await;
    }
}

/// Runs a load of 3 processes × 4 callers on one budget of 4 through `url` (trusting `ca`)
/// while `fault` runs; returns the longest time without a grant after the fault began, and the
/// peak at the observer.
async fn through_a_fault(
    url: &str,
    ca: Option<PathBuf>,
    lease: Duration,
    fault: impl FnOnce() -> Instant + Send + 'static,
) -> (Duration, usize, support::load::Report, Vec<RedisStore>) {
    let limit = 4;
    let observer = Observer::start();
    let stores: Vec<RedisStore> = (0..3)
        .map(|_| fleet(url, lease, ca.as_deref()).store(limit, Fail::Closed))
        .collect();
    let budgets: Vec<Budget> = stores.iter().map(|s| budget("records", limit, s)).collect();
    let load = Load::start(&budgets, 4, &observer.addr(), ms(20));
    tokio::time::sleep(ms(1000)).await;
    assert!(load.granted() > 20, "the load runs before the fault");
    let began = tokio::task::spawn_blocking(fault).await.unwrap();
    // Long enough for grants to resume and go on.
    let resumed = Instant::now();
    while load.granted() == 0 || Instant::now() < resumed + ms(1500) {
        tokio::time::sleep(ms(100)).await;
        assert!(resumed.elapsed() < Duration::from_secs(30), "grants resume");
    }
    let report = load.stop().await;
    let gap = report.longest_gap_after(began.into_std());
    assert!(
        report.granted_after(began.into_std() + gap) > 10,
        "grants went on after the fault: {}",
        report.summary()
    );
    (gap, observer.served().peak, report, stores)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failovers_hold_the_limit_and_grants_resume_within_the_node_timeout() {
    let node_timeout = ms(1000);
    let Some(cluster) = RedisCluster::start(3, 1, node_timeout) else {
        return;
    };
    let cluster = Arc::new(std::sync::Mutex::new(cluster));
    let url = cluster.lock().unwrap().url();
    // A manual failover: the replica takes over once it has every write.
    let c = cluster.clone();
    let (gap, peak, report, _) = through_a_fault(&url, None, ms(1500), move || {
        let c = c.lock().unwrap();
        let owner = c.owner("records");
        let replica = c.replica_of(owner);
        let began = Instant::now();
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query(&mut c.nodes.iter().find(|n| n.port == replica).unwrap().conn())
            .unwrap();
        support::cluster::wait_for(Duration::from_secs(10), "the replica to take over", || {
            c.owner("records") == replica
        });
        began
    })
    .await;
    println!(
        "CLUSTER FAILOVER: longest gap {gap:?}, peak {peak}, {}",
        report.summary()
    );
    assert!(peak <= 4, "the limit held at the dependency: {peak}");
    assert!(
        gap <= node_timeout + ms(2000),
        "grants resumed after {gap:?}"
    );
    // A primary killed: its replica is promoted after the node timeout and an election.
    let c = cluster.clone();
    let promoted = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let took = promoted.clone();
    let (gap, peak, report, stores) = through_a_fault(&url, None, ms(1500), move || {
        let mut c = c.lock().unwrap();
        let owner = c.owner("records");
        let began = Instant::now();
        c.node(owner).kill();
        support::cluster::wait_for(Duration::from_secs(15), "a replica to be promoted", || {
            c.masters().len() == 3 && c.owner("records") != owner
        });
        *took.lock().unwrap() = began.elapsed();
        began
    })
    .await;
    let promoted = *promoted.lock().unwrap();
    let lost: u64 = stores.iter().map(|s| s.snapshot().epochs_moved).sum();
    println!(
        "primary killed: promoted after {promoted:?}, longest gap {gap:?}, peak {peak}, epochs moved {lost}, {}",
        report.summary()
    );
    assert!(peak <= 4, "the limit held at the dependency: {peak}");
    // Grants resume within 2 s of the promotion (the goal: node timeout + 2 s after the kill;
    // the promotion itself is Redis's, an election after the node timeout). A promoted
    // replica that lost writes makes the budget learn for one lease (1.5 s) on top.
    assert!(
        gap <= promoted + ms(2000) + if lost > 0 { ms(1500) } else { ms(0) },
        "grants resumed {gap:?} after the kill, promoted after {promoted:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_holds_the_limit_and_grants_resume_on_the_new_primary() {
    let Some(sentinels) = Sentinels::start(2, ms(1000)) else {
        return;
    };
    sentinel_failover(sentinels).await;
}

/// The same over TLS alone, with an ACL user on the data nodes: `rediss+sentinel://` and the
/// CA file reach the sentinels and the primary they name, before and after the failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_over_tls_holds_the_limit_and_grants_resume_on_the_new_primary() {
    let Some(sentinels) = Sentinels::start_tls(2, ms(1000)) else {
        return;
    };
    assert!(sentinels.url().starts_with("rediss+sentinel://"));
    sentinel_failover(sentinels).await;
}

/// A load through `sentinels` while they fail the primary over: the limit holds at the
/// observer, grants resume within 2 s of the switch, and the budget lives on the new primary.
async fn sentinel_failover(sentinels: Sentinels) {
    let sentinels = Arc::new(sentinels);
    let s = sentinels.clone();
    let switched = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let took = switched.clone();
    let (gap, peak, report, stores) =
        through_a_fault(&sentinels.url(), sentinels.ca_file(), ms(1500), move || {
            let old = s.primary();
            let began = Instant::now();
            s.failover();
            s.wait_switched(old, Duration::from_secs(15));
            *took.lock().unwrap() = began.elapsed();
            began
        })
        .await;
    let switched = *switched.lock().unwrap();
    println!(
        "SENTINEL FAILOVER: switched after {switched:?}, longest gap {gap:?}, peak {peak}, {}",
        report.summary()
    );
    assert!(peak <= 4, "the limit held at the dependency: {peak}");
    let lost: u64 = stores.iter().map(|s| s.snapshot().epochs_moved).sum();
    assert!(
        gap <= switched + ms(2000) + if lost > 0 { ms(1500) } else { ms(0) },
        "grants resumed {gap:?} after the failover began (switched after {switched:?})"
    );
    let fallbacks: u64 = stores.iter().map(|s| s.snapshot().fallbacks).sum();
    assert_eq!(fallbacks, 0, "Fail::Closed: no local permit");
    // Every process now takes its leases at the new primary.
    let primary = sentinels.primary();
    let holders: Vec<String> = redis::cmd("KEYS")
        .arg("inflight:{records}:*")
        .query(&mut sentinels.data_conn(primary))
        .unwrap();
    assert!(!holders.is_empty(), "the budget lives on the new primary");
}

/// A plain URL that names a replica, or a sentinel, instead of a primary: every call is
/// refused (`Fail::Closed`), and the error and `fleet status` say what the address is and
/// what to name instead, short (a sentinel's refusal of the scripts would quote them whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_naming_a_replica_or_a_sentinel_is_refused_saying_what_it_names() {
    let Some(sentinels) = Sentinels::start(1, ms(5000)) else {
        return;
    };
    let primary = sentinels.primary();
    let replica = sentinels
        .data
        .iter()
        .find(|n| n.port != primary)
        .expect("a replica");
    // And the other way round: a data node named as a sentinel.
    let as_sentinel = format!("redis+sentinel://127.0.0.1:{primary}/mymaster");
    for (url, says) in [
        (replica.url(), "is a read-only replica"),
        (sentinels.sentinels[0].url(), "runs no scripts: a sentinel?"),
        (
            as_sentinel,
            "is not a sentinel (it does not know the SENTINEL command)",
        ),
    ] {
        let fleet = fleet(&url, ms(2000), None);
        let store = fleet.store(2, Fail::Closed);
        let records = budget("records", 2, &store);
        let err = records.acquire().await.map(drop).unwrap_err().to_string();
        assert!(err.contains(says), "{url}: {err}");
        assert!(
            err.contains("redis+sentinel://"),
            "what to name instead: {err}"
        );
        assert!(err.len() < 600, "{url}: {} bytes: {err}", err.len());
        let status = fleet.status("records").await.unwrap_err().to_string();
        assert!(status.contains(says), "{url}: {status}");
        let health = fleet.health();
        assert!(
            health[0].error.as_deref().is_some_and(|e| e.contains(says)),
            "{health:?}"
        );
    }
}

/// A primary that hangs (SIGSTOP: its connections stay open, nothing answers) before a process
/// first connects: the budgets on the other primaries are reached all the same, within a few
/// calls. The connection to the cluster is made by a task of its own, so a call whose
/// round-trip timeout ends while the hung node's connection times out does not undo it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_primary_leaves_the_budgets_of_the_others_reachable_to_a_new_process() {
    // A node timeout longer than the test: the cluster never counts the hung node failed.
    let Some(mut cluster) = RedisCluster::start(3, 0, Duration::from_secs(30)) else {
        return;
    };
    let names = cluster.budget_on_each_master();
    let masters = cluster.masters();
    let seed = cluster.url();
    let hung = *masters
        .iter()
        .find(|p| !seed.ends_with(&format!(":{p}")))
        .expect("a primary other than the seed");
    cluster.node(hung).pause(true);
    let fleet = fleet(&seed, ms(5000), None);
    let store = fleet.store(2, Fail::Closed);
    for (name, owner) in names.iter().zip(&masters) {
        if *owner == hung {
            continue;
        }
        let records = budget(name, 2, &store);
        let start = Instant::now();
        let mut errors = Vec::new();
        let took = loop {
            match records.acquire().await {
                Ok(permit) => break permit,
                Err(e) => errors.push(e.to_string()),
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{name} on {owner} was never reached with {hung} hung: {errors:?}"
            );
            tokio::time::sleep(ms(100)).await;
        };
        assert!(took.lease().is_some(), "a fleet lease");
        assert!(fleet.status(name).await.is_ok(), "{name}");
    }
    // The hung node's budget: what is said of it names its slot's node, not the seed the URL
    // names (which answers; messages blamed it).
    let (on_hung, _) = names
        .iter()
        .zip(&masters)
        .find(|(_, owner)| **owner == hung)
        .unwrap();
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(format!("inflight:{{{on_hung}}}:holders"))
        .query(&mut cluster.conn_to(masters.iter().copied().find(|p| *p != hung).unwrap()))
        .unwrap();
    let place = format!("the redis cluster node of slot {slot} (the cluster reached through ");
    let status = fleet.status(on_hung).await.unwrap_err().to_string();
    assert!(status.contains(&place), "{status}");
    let mut log = inflight_redis::HealthLog::new(Duration::from_secs(10));
    log.lines(&fleet);
    let records = budget(on_hung, 2, &store);
    let refused = records.acquire().await.map(drop).unwrap_err().to_string();
    assert!(refused.contains(&place), "{refused}");
    let lines = log.lines(&fleet);
    let said = lines
        .iter()
        .find(|l| l.starts_with(&format!("fleet budget {on_hung}: ")))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(
        said.contains(&place) && said.contains("cannot be reached"),
        "{said}"
    );
    assert!(!said.contains("redis at"), "{said}");
    cluster.node(hung).pause(false);
}
