//! A real Redis Cluster on loopback: `redis-server --cluster-enabled yes` nodes joined by
//! `redis-cli --cluster create`, killed (and their files removed) on drop; plain, or TLS only
//! with an ACL user (see [`super::tls::Certificates`]).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::ms;
use super::tls::{Certificates, Login};

/// One `redis-server` of a test topology.
pub struct Node {
    pub port: u16,
    child: Option<Child>,
    /// How the test logs in: `None` for a plain port open to all.
    login: Option<Login>,
}

impl Node {
    pub fn url(&self) -> String {
        match &self.login {
            None => format!("redis://127.0.0.1:{}", self.port),
            Some(login) => login.url(self.port),
        }
    }

    /// A client of this node: over TLS, trusting the test's authority, when the node has it.
    pub fn client(&self) -> redis::Client {
        match &self.login {
            None => redis::Client::open(self.url()).unwrap(),
            Some(login) => login.client(self.port),
        }
    }

    pub fn conn(&self) -> redis::Connection {
        let conn = self.client().get_connection_with_timeout(ms(1000)).unwrap();
        conn.set_read_timeout(Some(ms(2000))).unwrap();
        conn
    }

    /// SIGKILL: the node is gone at once, with whatever it had not replicated.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`): a node that hangs, its connections open, and
    /// answers nothing until it goes on.
    pub fn pause(&self, paused: bool) {
        if let Some(child) = &self.child {
            let signal = if paused { libc::SIGSTOP } else { libc::SIGCONT };
            // SAFETY: kill(2) on the pid of a child this node started and has not reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn from_child(port: u16, child: std::process::Child, login: Option<Login>) -> Node {
        let node = Node::spawned(port, child, login);
        wait_for(
            Duration::from_secs(10),
            &format!("a server on {port}"),
            || node.try_conn().is_some(),
        );
        node
    }

    pub fn try_conn(&self) -> Option<redis::Connection> {
        let mut conn = self.client().get_connection_with_timeout(ms(300)).ok()?;
        conn.set_read_timeout(Some(ms(1000))).ok()?;
        redis::cmd("PING").query::<String>(&mut conn).ok()?;
        Some(conn)
    }

    pub(super) fn spawned(port: u16, child: Child, login: Option<Login>) -> Node {
        Node {
            port,
            child: Some(child),
            login,
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port that is free, with its cluster bus port (+10000) free too.
pub fn free_port_pair() -> u16 {
    for _ in 0..200 {
        let port = 20_000 + rand::random::<u16>() % 30_000;
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
    panic!("no free loopback port pair in 200 tries");
}

/// Starts `redis-server` with `args` on `port`, TLS only and for the ACL user alone when
/// `certificates` are given; waits until it answers.
pub fn start_node(
    port: u16,
    certificates: Option<&Certificates>,
    args: &[&str],
    dir: &std::path::Path,
) -> Node {
    let mut command = Command::new("redis-server");
    match certificates {
        None => command.args(["--port", &port.to_string()]),
        Some(certificates) => command.args(certificates.server_args(port)),
    };
    let child = command
        .args(["--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let node = Node {
        port,
        child: Some(child),
        login: certificates.map(Certificates::login),
    };
    wait_for(
        Duration::from_secs(10),
        &format!("redis-server on {port}"),
        || node.try_conn().is_some(),
    );
    node
}

/// Polls `done` every 50 ms until it holds, within `within`; panics naming `what`.
pub fn wait_for(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(ms(50));
    }
}

pub fn installed(binary: &str) -> bool {
    let found = Command::new(binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        eprintln!("skipped: {binary} is not installed (scripts/test.sh installs it)");
    }
    found
}

/// A Redis Cluster of `masters` primaries, each with `replicas` replicas.
pub struct RedisCluster {
    pub nodes: Vec<Node>,
    pub node_timeout: Duration,
    /// The authority and keys of a TLS cluster.
    certificates: Option<Certificates>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Starts one, or `None` (after saying why) when `redis-server` is not installed.
    pub fn start(masters: usize, replicas: usize, node_timeout: Duration) -> Option<RedisCluster> {
        Self::start_with(masters, replicas, node_timeout, None)
    }

    /// Starts one whose nodes speak TLS only, on the client port and the cluster bus alike,
    /// and let in no one but the ACL user; `None` (after saying why) when `redis-server` or
    /// `openssl` is not installed.
    pub fn start_tls(
        masters: usize,
        replicas: usize,
        node_timeout: Duration,
    ) -> Option<RedisCluster> {
        let certificates = Certificates::make()?;
        Self::start_with(masters, replicas, node_timeout, Some(certificates))
    }

    /// The authority that signed the nodes' certificates, for a TLS cluster.
    pub fn ca_file(&self) -> Option<std::path::PathBuf> {
        self.certificates.as_ref().map(Certificates::ca_file)
    }

    fn start_with(
        masters: usize,
        replicas: usize,
        node_timeout: Duration,
        certificates: Option<Certificates>,
    ) -> Option<RedisCluster> {
        if !installed("redis-server") || !installed("redis-cli") {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let timeout = node_timeout.as_millis().to_string();
        let nodes: Vec<Node> = (0..masters * (1 + replicas))
            .map(|_| {
                let port = free_port_pair();
                let conf = format!("nodes-{port}.conf");
                start_node(
                    port,
                    certificates.as_ref(),
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        &conf,
                        "--cluster-node-timeout",
                        &timeout,
                    ],
                    dir.path(),
                )
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        // The nodes that cannot reach each other's bus leave `--cluster create` waiting for
        // them to join, for ever: it gets a minute.
        let log = dir.path().join("create.log");
        let mut create = Command::new("redis-cli")
            .args(certificates.iter().flat_map(Certificates::cli_args))
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli runs");
        let start = Instant::now();
        let status = loop {
            if let Some(status) = create.try_wait().unwrap() {
                break Some(status);
            }
            if start.elapsed() > Duration::from_secs(60) {
                let _ = create.kill();
                let _ = create.wait();
                break None;
            }
            std::thread::sleep(ms(50));
        };
        assert!(
            status.is_some_and(|s| s.success()),
            "redis-cli --cluster create ({}): {}",
            status.map_or("still running after 60 s".to_string(), |s| s.to_string()),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let cluster = RedisCluster {
            nodes,
            node_timeout,
            certificates,
            _dir: dir,
        };
        cluster.wait_ok(Duration::from_secs(20));
        Some(cluster)
    }

    /// Waits until every running node says the cluster is ok, knows every node, and every
    /// replica's link to its primary is up.
    pub fn wait_ok(&self, within: Duration) {
        let total = self.nodes.iter().filter(|n| n.is_running()).count();
        wait_for(within, "the cluster to be ok on every node", || {
            self.nodes.iter().filter(|n| n.is_running()).all(|n| {
                let mut conn = n.conn();
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut conn)
                    .unwrap_or_default();
                let repl: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut conn)
                    .unwrap_or_default();
                info.contains("cluster_state:ok")
                    && info.lines().any(|l| {
                        l.trim()
                            .strip_prefix("cluster_known_nodes:")
                            .and_then(|k| k.parse::<usize>().ok())
                            .is_some_and(|k| k >= total)
                    })
                    && (repl.contains("role:master") || repl.contains("master_link_status:up"))
            })
        });
    }

    /// The first node's URL, as a user gives a cluster's configuration endpoint.
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }

    fn any(&self) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .expect("a node still runs")
    }

    /// The port of the primary that owns budget `budget`'s slot now.
    pub fn owner(&self, budget: &str) -> u16 {
        let mut conn = self.any().conn();
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(format!("inflight:{{{budget}}}:holders"))
            .query(&mut conn)
            .unwrap();
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn).unwrap();
        for range in slots {
            let redis::Value::Array(range) = range else {
                continue;
            };
            let (Some(redis::Value::Int(from)), Some(redis::Value::Int(to))) =
                (range.first(), range.get(1))
            else {
                continue;
            };
            if (*from..=*to).contains(&i64::from(slot)) {
                if let Some(redis::Value::Array(master)) = range.get(2) {
                    if let Some(redis::Value::Int(port)) = master.get(1) {
                        return u16::try_from(*port).unwrap();
                    }
                }
            }
        }
        panic!("no primary owns slot {slot}");
    }

    /// The ports of the primaries.
    pub fn masters(&self) -> Vec<u16> {
        self.role_ports("master")
    }

    fn role_ports(&self, role: &str) -> Vec<u16> {
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.any().conn())
            .unwrap();
        nodes
            .lines()
            .filter(|l| {
                let flags = l.split(' ').nth(2).unwrap_or("");
                flags.split(',').any(|f| f == role) && !flags.contains("fail")
            })
            .filter_map(|l| {
                let addr = l.split(' ').nth(1)?;
                addr.split('@').next()?.rsplit(':').next()?.parse().ok()
            })
            .collect()
    }

    /// The port of a replica of the primary on `master`.
    pub fn replica_of(&self, master: u16) -> u16 {
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.any().conn())
            .unwrap();
        let id = nodes
            .lines()
            .find(|l| {
                l.split(' ')
                    .nth(1)
                    .is_some_and(|a| a.starts_with(&format!("127.0.0.1:{master}@")))
            })
            .and_then(|l| l.split(' ').next())
            .expect("the primary is known")
            .to_string();
        nodes
            .lines()
            .find(|l| l.split(' ').nth(3) == Some(id.as_str()) && !l.contains("fail"))
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|a| a.split('@').next())
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .expect("the primary has a replica")
    }

    /// A connection to the node on `port`.
    pub fn conn_to(&self, port: u16) -> redis::Connection {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .expect("a node of the cluster")
            .conn()
    }

    pub fn node(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of the cluster")
    }

    /// Budget names, one owned by each primary, in the order of [`RedisCluster::masters`].
    pub fn budget_on_each_master(&self) -> Vec<String> {
        let masters = self.masters();
        let mut names = vec![String::new(); masters.len()];
        for n in 0.. {
            let name = format!("b{n}");
            let owner = self.owner(&name);
            if let Some(i) = masters.iter().position(|m| *m == owner) {
                if names[i].is_empty() {
                    names[i] = name;
                }
            }
            if names.iter().all(|n| !n.is_empty()) {
                return names;
            }
            assert!(n < 1000, "names cover every primary");
        }
        unreachable!()
    }
}
