//! A real primary, its replicas and three sentinels (Debian's `redis-sentinel`) on loopback,
//! killed (and their files removed) on drop; plain, or TLS only with an ACL user on the data
//! nodes (see [`super::tls::Certificates`]).

use std::process::{Command, Stdio};
use std::time::Duration;

use super::cluster::{free_port_pair, installed, start_node, wait_for, Node};
use super::tls::{Certificates, PASSWORD, USER};

/// The name the sentinels know the primary by.
pub const MASTER: &str = "fleet";

pub struct Sentinels {
    pub data: Vec<Node>,
    pub sentinels: Vec<Node>,
    /// The authority and keys of a TLS set.
    certificates: Option<Certificates>,
    _dir: tempfile::TempDir,
}

impl Sentinels {
    /// One primary, `replicas` replicas and three sentinels (quorum 2) that count the primary
    /// down after `down_after`; `None` (after saying why) when `redis-sentinel` is not
    /// installed.
    pub fn start(replicas: usize, down_after: Duration) -> Option<Sentinels> {
        Self::start_with(replicas, down_after, None)
    }

    /// The same over TLS alone: the data nodes let in no one but the ACL user, and the
    /// sentinels speak TLS to clients, to the data nodes and to each other; `None` (after
    /// saying why) when `redis-sentinel` or `openssl` is not installed.
    pub fn start_tls(replicas: usize, down_after: Duration) -> Option<Sentinels> {
        let certificates = Certificates::make()?;
        Self::start_with(replicas, down_after, Some(certificates))
    }

    /// The authority that signed the servers' certificates, for a TLS set.
    pub fn ca_file(&self) -> Option<std::path::PathBuf> {
        self.certificates.as_ref().map(Certificates::ca_file)
    }

    fn start_with(
        replicas: usize,
        down_after: Duration,
        certificates: Option<Certificates>,
    ) -> Option<Sentinels> {
        if !installed("redis-server") || !installed("redis-sentinel") {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let tls = certificates.as_ref();
        let primary = start_node(free_port_pair(), tls, &[], dir.path());
        let primary_port = primary.port.to_string();
        let mut data = vec![primary];
        for _ in 0..replicas {
            data.push(start_node(
                free_port_pair(),
                tls,
                &["--replicaof", "127.0.0.1", &primary_port],
                dir.path(),
            ));
        }
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            let port = free_port_pair();
            let conf = dir.path().join(format!("sentinel-{port}.conf"));
            let listen = match tls {
                None => format!("port {port}\n"),
                Some(certificates) => certificates.sentinel_config(port, MASTER),
            };
            std::fs::write(
                &conf,
                format!(
                    "{listen}bind 127.0.0.1\ndir {}\n\
                     sentinel monitor {MASTER} 127.0.0.1 {primary_port} 2\n\
                     sentinel down-after-milliseconds {MASTER} {}\n\
                     sentinel failover-timeout {MASTER} 5000\n\
                     sentinel parallel-syncs {MASTER} 2\n",
                    dir.path().display(),
                    down_after.as_millis()
                ),
            )
            .unwrap();
            let child = Command::new("redis-sentinel")
                .arg(&conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-sentinel starts");
            sentinels.push(Node::from_child(
                port,
                child,
                tls.map(Certificates::sentinel_login),
            ));
        }
        let set = Sentinels {
            data,
            sentinels,
            certificates,
            _dir: dir,
        };
        set.wait_ready(replicas, Duration::from_secs(30));
        Some(set)
    }

    /// Waits until every replica's link is up and every sentinel knows the replicas and the
    /// other sentinels.
    fn wait_ready(&self, replicas: usize, within: Duration) {
        wait_for(
            within,
            "replicas in sync, sentinels that know each other",
            || {
                let synced = self.data[1..].iter().all(|n| {
                    redis::cmd("INFO")
                        .arg("replication")
                        .query::<String>(&mut n.conn())
                        .unwrap_or_default()
                        .contains("master_link_status:up")
                });
                synced
                    && self.sentinels.iter().all(|s| {
                        let Some(mut conn) = s.try_conn() else {
                            return false;
                        };
                        let replicas_known: Vec<redis::Value> = redis::cmd("SENTINEL")
                            .arg("REPLICAS")
                            .arg(MASTER)
                            .query(&mut conn)
                            .unwrap_or_default();
                        let others: Vec<redis::Value> = redis::cmd("SENTINEL")
                            .arg("SENTINELS")
                            .arg(MASTER)
                            .query(&mut conn)
                            .unwrap_or_default();
                        replicas_known.len() >= replicas && others.len() >= 2
                    })
            },
        );
    }

    /// `redis+sentinel://` with every sentinel, naming the primary.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        match self.certificates {
            None => format!("redis+sentinel://{}/{MASTER}", hosts.join(",")),
            Some(_) => format!(
                "rediss+sentinel://{USER}:{PASSWORD}@{}/{MASTER}",
                hosts.join(",")
            ),
        }
    }

    /// The port of the primary the first sentinel names now.
    pub fn primary(&self) -> u16 {
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER)
            .query(&mut self.sentinels[0].conn())
            .unwrap();
        port
    }

    /// Asks a sentinel to fail the primary over to a replica (`SENTINEL FAILOVER`).
    pub fn failover(&self) {
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER)
            .query(&mut self.sentinels[0].conn())
            .unwrap();
    }

    /// Waits until the sentinels name a primary other than `old`, and returns it.
    pub fn wait_switched(&self, old: u16, within: Duration) -> u16 {
        let mut now = old;
        wait_for(within, "the sentinels to name a new primary", || {
            now = self.primary();
            now != old
        });
        now
    }

    /// A connection to the data node on `port`.
    pub fn data_conn(&self, port: u16) -> redis::Connection {
        self.data
            .iter()
            .find(|n| n.port == port)
            .expect("a data node")
            .conn()
    }

    pub fn node(&mut self, port: u16) -> &mut Node {
        self.data
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a data node")
    }
}
