//! Helpers shared by the tests against a real `redis-server`: a server on a free loopback port,
//! killed when dropped; child processes of the test binary itself; an [`Observer`] that counts
//! the calls in service at the dependency; and a [`Link`] between one process and Redis that
//! delays or stalls its traffic on command.

#![allow(dead_code)]

pub mod cluster;
pub mod load;
pub mod sentinel;
pub mod tls;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A fleet on `server` with a lease of `lease`, a round-trip timeout of 300 ms and a pause of
/// 200 ms after a failure: short enough for the tests' faults.
pub fn fleet(server: &RedisServer, lease: Duration) -> inflight_redis::RedisFleet {
    inflight_redis::RedisFleet::builder(&server.url())
        .lease(lease)
        .op_timeout(ms(300))
        .retry_after(ms(200))
        .build()
        .unwrap()
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
        // The port is free when picked, but another test's listener may take it before the
        // server binds it: then the server exits, and another port is tried.
        for _ in 0..20 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free loopback port")
                .port();
            let mut server = RedisServer { port, child: None };
            if server.spawn() {
                return Some(server);
            }
        }
        panic!("redis-server could not bind a free loopback port in 20 tries");
    }

    /// Starts the server on its port; whether it is the one answering there (not a listener
    /// of another test that took the port first).
    fn spawn(&mut self) -> bool {
        let mut child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let pid = child.id();
        let client = redis::Client::open(self.url()).unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = child.try_wait() {
                return false;
            }
            let info = client
                .get_connection_with_timeout(ms(500))
                .and_then(|mut conn| {
                    conn.set_read_timeout(Some(ms(500)))?;
                    redis::cmd("INFO").arg("server").query::<String>(&mut conn)
                });
            if let Ok(info) = info {
                if info
                    .lines()
                    .any(|l| l.trim() == format!("process_id:{pid}"))
                {
                    self.child = Some(child);
                    return true;
                }
            }
            std::thread::sleep(ms(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "redis-server on port {} did not answer within 10 s",
            self.port
        );
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
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
        assert!(
            self.spawn(),
            "port {} was taken while redis-server was stopped",
            self.port
        );
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

    /// Callers of `budget` waiting in the fleet's queue now.
    pub fn queued(&self, budget: &str) -> usize {
        redis::cmd("ZCARD")
            .arg(format!("inflight:{{{budget}}}:queue"))
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

/// The dependency the fleet's calls go to, counting them itself: a TCP server on 127.0.0.1 where
/// each call is one connection held for the call's time. A call is in service from the line it
/// sends until the end of its connection (its holder closing it, or dying), so a holder stalled
/// with its call open still counts. Independent of the clients' counters and of Redis.
///
/// The exchange is an echo: the call sends a line and waits for it back (it is counted by
/// then), shuts its side down when done, and waits for the server to close (it is no longer
/// counted by then). A permit held across that exchange therefore covers every moment its call
/// is counted, and the count is at most the permits held.
pub struct Observer {
    addr: std::net::SocketAddr,
    state: std::sync::Arc<std::sync::Mutex<Counts>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The observer's counts, and the calls in service (by connection) with their lines.
#[derive(Default)]
struct Counts {
    served: Served,
    open: std::collections::BTreeMap<u64, String>,
    next: u64,
    /// The lines of the calls in service when the peak was last reached.
    at_peak: Vec<String>,
}

/// What the observer has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    /// Calls in service now.
    pub in_service: usize,
    /// The most calls in service at once.
    pub peak: usize,
    /// Calls begun.
    pub begun: usize,
    /// Calls ended.
    pub ended: usize,
}

impl Observer {
    pub fn start() -> Observer {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port for the observer");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(Counts::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (state2, stop2) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let state = state2.clone();
                std::thread::spawn(move || serve_call(conn, &state));
            }
        });
        Observer { addr, state, stop }
    }

    /// Where calls go (`127.0.0.1:port`).
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    pub fn served(&self) -> Served {
        self.state.lock().unwrap().served
    }

    /// The lines the calls in service sent, when the most were in service at once: which
    /// holders those were, for a failure to name.
    pub fn at_peak(&self) -> Vec<String> {
        self.state.lock().unwrap().at_peak.clone()
    }

    /// Waits until `done(served)` holds, within `within`; panics naming `what` if it does not.
    pub fn until(&self, within: Duration, what: &str, done: impl Fn(&Served) -> bool) -> Served {
        let start = Instant::now();
        loop {
            let served = self.served();
            if done(&served) {
                return served;
            }
            assert!(
                start.elapsed() < within,
                "the observer did not see {what} within {within:?}: {served:?}"
            );
            std::thread::sleep(ms(2));
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

fn serve_call(conn: std::net::TcpStream, state: &std::sync::Mutex<Counts>) {
    use std::io::Read;
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return; // closed before it began: not a call
    }
    let me = {
        let mut s = state.lock().unwrap();
        let me = s.next;
        s.next += 1;
        s.open.insert(me, line.trim_end().to_string());
        let served = &mut s.served;
        served.in_service += 1;
        served.begun += 1;
        if served.in_service > served.peak {
            served.peak = served.in_service;
            s.at_peak = s.open.values().cloned().collect();
        }
        me
    };
    let mut writer = &conn;
    let _ = writer.write_all(line.as_bytes());
    // In service until the caller's side ends: a clean shutdown, a reset, or its death.
    let mut sink = [0u8; 256];
    while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
    {
        let mut s = state.lock().unwrap();
        s.open.remove(&me);
        s.served.in_service -= 1;
        s.served.ended += 1;
    }
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

/// One call at an [`Observer`], from async code: counted once `begin` returns, no longer
/// counted once `end` returns.
pub struct Call {
    stream: tokio::net::TcpStream,
}

impl Call {
    pub async fn begin(addr: &str) -> Call {
        Call::labelled(addr, "call").await
    }

    /// A call that names itself `label` (one line) to the observer.
    pub async fn labelled(addr: &str, label: &str) -> Call {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("the observer accepts");
        let sent = format!("{label}\n");
        stream.write_all(sent.as_bytes()).await.unwrap();
        let mut line = String::new();
        let mut reader = tokio::io::BufReader::new(&mut stream);
        reader.read_line(&mut line).await.unwrap();
        assert_eq!(line, sent, "the observer echoes the call");
        Call { stream }
    }

    pub async fn end(mut self) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.stream.shutdown().await.unwrap();
        let mut rest = Vec::new();
        let _ = self.stream.read_to_end(&mut rest).await;
    }
}

/// A call of `hold` at the observer, under whatever permit the caller holds.
pub async fn call(addr: &str, hold: Duration) {
    held_call(addr, "call", hold).await;
}

/// [`call`], naming itself `label`.
pub async fn held_call(addr: &str, label: &str, hold: Duration) {
    let call = Call::labelled(addr, label).await;
    tokio::time::sleep(hold).await;
    call.end().await;
}

/// A loopback TCP proxy between one process and a server (Redis), which delays or stalls the
/// traffic of every connection through it, both ways, on command. A stalled link holds what it
/// reads (nothing reaches the other side, as in a partition) and delivers it, in order, on
/// [`Link::resume`]; a delay holds each chunk that long after it was read.
pub struct Link {
    addr: std::net::SocketAddr,
    state: std::sync::Arc<LinkState>,
}

struct LinkState {
    mode: std::sync::Mutex<LinkMode>,
    changed: std::sync::Condvar,
}

#[derive(Clone, Copy)]
struct LinkMode {
    delay: Duration,
    stalled: bool,
    stopped: bool,
}

impl Link {
    /// A link to `to` (`host:port`).
    pub fn start(to: &str) -> Link {
        use std::sync::Arc;
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port for the link");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(LinkState {
            mode: std::sync::Mutex::new(LinkMode {
                delay: Duration::ZERO,
                stalled: false,
                stopped: false,
            }),
            changed: std::sync::Condvar::new(),
        });
        let (to, shared) = (to.to_string(), state.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if shared.mode.lock().unwrap().stopped {
                    return;
                }
                let Ok(near) = conn else { continue };
                let Ok(far) = std::net::TcpStream::connect(&to) else {
                    continue;
                };
                let _ = near.set_nodelay(true);
                let _ = far.set_nodelay(true);
                let (near2, far2) = (near.try_clone().unwrap(), far.try_clone().unwrap());
                pump(near, far, shared.clone());
                pump(far2, near2, shared.clone());
            }
        });
        Link { addr, state }
    }

    /// The Redis URL through this link.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Holds every chunk `delay` after it was read (zero: none).
    pub fn delay(&self, delay: Duration) {
        self.state.mode.lock().unwrap().delay = delay;
        self.state.changed.notify_all();
    }

    /// Forwards nothing until [`Link::resume`].
    pub fn stall(&self) {
        self.state.mode.lock().unwrap().stalled = true;
        self.state.changed.notify_all();
    }

    /// Delivers what the stall held, in order, and forwards again.
    pub fn resume(&self) {
        self.state.mode.lock().unwrap().stalled = false;
        self.state.changed.notify_all();
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        {
            let mut mode = self.state.mode.lock().unwrap();
            mode.stopped = true;
            mode.stalled = false;
        }
        self.state.changed.notify_all();
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

/// Copies `from` to `to` through a queue of chunks, each let go when the link allows it.
fn pump(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    state: std::sync::Arc<LinkState>,
) {
    use std::io::Read;
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    std::thread::spawn(move || {
        for (read_at, chunk) in rx {
            let mut mode = state.mode.lock().unwrap();
            loop {
                if !mode.stalled {
                    let due = read_at + mode.delay;
                    let now = Instant::now();
                    if now >= due {
                        break;
                    }
                    mode = state.changed.wait_timeout(mode, due - now).unwrap().0;
                } else {
                    mode = state.changed.wait(mode).unwrap();
                }
            }
            drop(mode);
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}
