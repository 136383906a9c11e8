//! `inflight proxy` with a fleet budget, against a real `redis-server` on loopback: a drain
//! gives back every lease of the proxy before it exits, and a Redis restart under load leaves it
//! running.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::{inflight_path, send_signal, wait_exit};

/// A `redis-server` on a free loopback port, without persistence, killed on drop.
pub(crate) struct Redis {
    port: u16,
    child: Child,
    password: Option<String>,
}

impl Redis {
    /// `None` (after saying why) when `redis-server` is not installed.
    pub(crate) fn start() -> Option<Redis> {
        Redis::start_with(None)
    }

    /// One that asks clients for `password` (`requirepass`), when given.
    pub(crate) fn start_with(password: Option<&str>) -> Option<Redis> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        Redis::start_on(port, password)
    }

    /// A new server on the same port, empty: the old one is killed first.
    pub(crate) fn restart(&mut self) {
        self.kill();
        let password = self.password.take();
        let fresh = Redis::start_on(self.port, password.as_deref()).expect("redis-server ran once");
        *self = fresh;
    }

    fn start_on(port: u16, password: Option<&str>) -> Option<Redis> {
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"]);
        if let Some(password) = password {
            command.args(["--requirepass", password]);
        }
        let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn();
        let Ok(child) = child else {
            eprintln!("skipped: redis-server is not installed (apt-get install redis-server)");
            return None;
        };
        let redis = Redis {
            port,
            child,
            password: password.map(str::to_string),
        };
        let start = Instant::now();
        while redis.command("PING").as_deref() != Some("+PONG") {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server answered"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(redis)
    }

    pub(crate) fn url(&self) -> String {
        match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// One inline command (after `AUTH` if the server asks for a password); the first line of
    /// the reply.
    pub(crate) fn command(&self, command: &str) -> Option<String> {
        let mut conn = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let mut reader = BufReader::new(conn.try_clone().ok()?);
        let mut line = String::new();
        if let Some(password) = &self.password {
            conn.write_all(format!("AUTH {password}\r\n").as_bytes())
                .ok()?;
            reader.read_line(&mut line).ok()?;
            line.clear();
        }
        conn.write_all(format!("{command}\r\n").as_bytes()).ok()?;
        reader.read_line(&mut line).ok()?;
        Some(line.trim_end().to_string())
    }

    /// Kills the server.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Leases of budget `name` held in Redis now.
    pub(crate) fn holders(&self, name: &str) -> usize {
        let reply = self
            .command(&format!("ZCARD inflight:{{{name}}}:holders"))
            .expect("redis answers");
        reply
            .strip_prefix(':')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("ZCARD answered {reply:?}"))
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An upstream that reads each request and never answers while the test runs.
pub(crate) fn slow_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

/// A running `inflight proxy`, with its listen and admin addresses and its stderr lines.
pub(crate) struct Proxy {
    pub(crate) child: Child,
    pub(crate) listen: SocketAddr,
    pub(crate) admin: Option<SocketAddr>,
    pub(crate) stdout: Vec<String>,
    pub(crate) stderr: mpsc::Receiver<String>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `inflight proxy --config path`, reading its stdout until it says it is ready.
pub(crate) fn start_proxy(path: &std::path::Path) -> Proxy {
    let mut child = Command::new(inflight_path())
        .args(["proxy", "--config"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, stderr) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (mut listen, mut admin, mut stdout) = (None, None, Vec::new());
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            panic!("the proxy exited before it was ready: {stdout:?}");
        }
        let line = line.trim_end().to_string();
        if line == "inflight proxy: ready" {
            break;
        }
        if let Some(rest) = line.strip_prefix("inflight proxy: records listening on ") {
            listen = rest.split(',').next().and_then(|a| a.parse().ok());
        }
        if let Some(rest) = line.strip_prefix("inflight proxy: admin listening on ") {
            admin = rest.parse().ok();
        }
        stdout.push(line);
    }
    Proxy {
        child,
        listen: listen.expect("records has a listener"),
        admin,
        stdout,
        stderr,
    }
}

#[test]
fn sigterm_gives_back_every_fleet_lease_before_the_proxy_exits() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let upstream = slow_upstream();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("budgets.toml");
    // A lease far longer than the test: one left behind would still be in Redis at the end.
    std::fs::write(
        &path,
        format!(
            "[fleet]\nurl = \"{}\"\nlease = \"60s\"\n\n[proxy]\ndrain = \"1s\"\n\n\
             [budgets.records]\nmax_concurrent = 3\npermit_timeout = \"10s\"\n\
             call_timeout = \"60s\"\nscope = \"fleet\"\nupstream = \"http://{upstream}\"\n\
             listen = \"127.0.0.1:0\"\n",
            redis.url()
        ),
    )
    .unwrap();
    let mut proxy = start_proxy(&path);
    let addr = proxy.listen;
    let clients: Vec<_> = (0..3)
        .map(|_| {
            std::thread::spawn(move || {
                let mut conn = TcpStream::connect(addr).unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(30)))
                    .unwrap();
                conn.write_all(b"GET /write HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let mut answer = Vec::new();
                let _ = conn.read_to_end(&mut answer);
            })
        })
        .collect();
    let start = Instant::now();
    while redis.holders("records") < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the proxy took 3 fleet leases for its calls"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let sent = Instant::now();
    assert_eq!(send_signal(&proxy.child, libc::SIGTERM), 0);
    let status = wait_exit(&mut proxy.child, Duration::from_secs(30), "the proxy");
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        redis.holders("records"),
        0,
        "a lease of the proxy was left in Redis"
    );
    // The drain time (1 s), then the give-back: at most one round-trip timeout (1 s).
    assert!(
        took < Duration::from_secs(2) * 3,
        "exited {took:?} after SIGTERM, for a drain of 1 s"
    );
    for client in clients {
        client.join().unwrap();
    }
}

/// A Redis restarted while the proxy's calls take fleet leases (the proxy's connection to it
/// closed under it) leaves the proxy process running, its requests answered, and its drain
/// whole.
#[test]
fn a_redis_restart_under_load_leaves_the_proxy_running() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("budgets.toml");
    // An upstream that refuses every connection: each request takes a lease and answers 502.
    std::fs::write(
        &path,
        format!(
            "[fleet]\nurl = \"{}\"\n\n[budgets.records]\nmax_concurrent = 4\n\
             permit_timeout = \"2s\"\nscope = \"fleet\"\nfail = \"local\"\nlocal_limit = 2\n\
             upstream = \"http://127.0.0.1:9\"\nlisten = \"127.0.0.1:0\"\n",
            redis.url()
        ),
    )
    .unwrap();
    let mut proxy = start_proxy(&path);
    let addr = proxy.listen;
    let ask = move || {
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        conn.write_all(b"GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let _ = conn.read_to_string(&mut answer);
        answer
    };
    // Load from four threads while Redis is restarted.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut answered = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if ask().starts_with("HTTP/1.1 ") {
                        answered += 1;
                    }
                }
                answered
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    redis.restart();
    std::thread::sleep(Duration::from_millis(1000));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answered: usize = load.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(answered > 0);
    assert_eq!(
        proxy.child.try_wait().unwrap().map(|s| s.to_string()),
        None,
        "the proxy ended"
    );
    let last = ask();
    assert!(
        last.starts_with("HTTP/1.1 "),
        "answered after the restarts: {last:?}"
    );
    assert_eq!(send_signal(&proxy.child, libc::SIGTERM), 0);
    let status = wait_exit(&mut proxy.child, Duration::from_secs(30), "the proxy");
    assert_eq!(status.code(), Some(0));
}
