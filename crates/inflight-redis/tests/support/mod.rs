//! Helpers shared by the tests against a real `redis-server`: a server on a free loopback port,
//! killed when dropped, and child processes of the test binary itself.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A `redis-server` on 127.0.0.1, without persistence, killed on drop.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one on a free port, or `None` (after saying why) when `redis-server` is not
    /// installed.
    pub fn start() -> Option<RedisServer> {
        if Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_err()
        {
            eprintln!("skipped: redis-server is not installed (apt-get install redis-server)");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let mut server = RedisServer { port, child: None };
        server.spawn();
        Some(server)
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let client = redis::Client::open(self.url()).unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(mut conn) = client.get_connection() {
                if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                    return;
                }
            }
            std::thread::sleep(ms(20));
        }
        panic!(
            "redis-server on port {} did not answer within 10 s",
            self.port
        );
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server (its data and script cache are gone).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// A plain connection, for looking at the server from outside the store.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// Leases of `budget` held now, expired ones included until someone reclaims them.
    pub fn holders(&self, budget: &str) -> Vec<String> {
        redis::cmd("ZRANGE")
            .arg(format!("inflight:{{{budget}}}:holders"))
            .arg(0)
            .arg(-1)
            .query(&mut self.conn())
            .unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A copy of this test binary running the role `role` of the `child` test, talking through
/// lines: it prints `child: ...` lines, and reads commands on stdin.
pub struct ChildProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl ChildProcess {
    pub fn spawn(role: &str, env: &[(&str, String)]) -> ChildProcess {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["child", "--exact", "--nocapture", "--test-threads", "1"])
            .env("INFLIGHT_REDIS_CHILD", role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("the test binary runs again");
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // The harness may print its own words on the same line first.
                if let Some(at) = line.find("child: ") {
                    if tx.send(line[at + "child: ".len()..].to_string()).is_err() {
                        return;
                    }
                }
            }
        });
        ChildProcess {
            child,
            stdin,
            lines,
        }
    }

    /// The next line the child says, within `within`.
    pub fn expect_line(&self, within: Duration) -> String {
        self.lines
            .recv_timeout(within)
            .unwrap_or_else(|_| panic!("the child said nothing within {within:?}"))
    }

    pub fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        let rc = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(rc, 0, "signal {signal} delivered");
    }

    /// Waits for the child to exit, within `within`; kills it if it does not.
    pub fn wait(mut self, within: Duration) -> bool {
        self.stdin.take();
        let start = Instant::now();
        while start.elapsed() < within {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(ms(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
