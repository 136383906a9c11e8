//! `inflight proxy`: a real process in front of a real upstream (`inflight sim`, or a plain TCP
//! server the test answers by hand), driven with signals.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use predicates::prelude::PredicateBooleanExt;

use crate::support::{exits_2, inflight, inflight_path, send_signal, wait_exit, SimProcess};

/// A running `inflight proxy`, killed when dropped.
struct ProxyProcess {
    child: Child,
    /// Each listener's line, `<budget> listening on <addr>, ...`, by budget.
    listening: Vec<(String, SocketAddr)>,
    stderr: mpsc::Receiver<String>,
}

impl ProxyProcess {
    fn start(config: &std::path::Path) -> ProxyProcess {
        ProxyProcess::start_with(config, &[], Stdio::null())
    }

    fn start_with(config: &std::path::Path, args: &[&str], stdin: Stdio) -> ProxyProcess {
        let mut command = Command::new(inflight_path());
        command
            .args(["proxy", "--config"])
            .arg(config)
            .args(args)
            .stdin(stdin);
        ProxyProcess::spawn(command)
    }

    /// Runs `command` (an `inflight proxy`) with its output piped, until it is ready.
    fn spawn(mut command: Command) -> ProxyProcess {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, stderr) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut listening = Vec::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        loop {
            let mut line = String::new();
            if out.read_line(&mut line).unwrap() == 0 {
                let _ = child.kill();
                let errors: Vec<String> = stderr.try_iter().collect();
                panic!("the proxy exited before it was ready: {errors:?}");
            }
            let line = line.trim_end();
            if line == "inflight proxy: ready" {
                break;
            }
            let rest = line.strip_prefix("inflight proxy: ").unwrap();
            let (name, rest) = rest.split_once(" listening on ").unwrap();
            let addr = rest.split(',').next().unwrap().parse().unwrap();
            listening.push((name.to_string(), addr));
        }
        ProxyProcess {
            child,
            listening,
            stderr,
        }
    }

    fn addr(&self, name: &str) -> SocketAddr {
        self.listening
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no listener for {name}: {:?}", self.listening))
            .1
    }

    /// Waits for a stderr line containing `needle`; panics after a generous bound.
    fn stderr_line(&self, needle: &str) -> String {
        loop {
            match self.stderr.recv_timeout(Duration::from_secs(20)) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => continue,
                Err(_) => panic!("no stderr line with {needle:?} within 20 s"),
            }
        }
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request on a new connection; returns the status and the whole answer.
fn request(addr: SocketAddr, head: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
        .write_all(format!("{head}\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    (status, answer)
}

/// A budgets file for one budget `records` whose upstream refuses every connection (each
/// request gets 502, and logs a line).
const TO_NOWHERE: &str = "[budgets.records]\nmax_concurrent = 2\nupstream = \"http://127.0.0.1:9\"\nlisten = \"127.0.0.1:0\"\n";

/// Asserts that the proxy has not exited.
fn assert_running(proxy: &mut ProxyProcess) {
    assert_eq!(
        proxy.child.try_wait().unwrap().map(|s| s.to_string()),
        None,
        "the proxy ended"
    );
}

fn write_config(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
    let path = dir.path().join("budgets.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn help_shows_an_example_budgets_file() {
    inflight()
        .args(["proxy", "--help"])
        .assert()
        .success()
        .stdout(predicates::str::contains(
            "upstream = \"http://127.0.0.1:7070\"",
        ))
        .stdout(predicates::str::contains("listen = \"127.0.0.1:7002\""))
        .stdout(predicates::str::contains("SIGHUP"));
}

/// The budgets file `--help` shows is one `check-config` takes, classes and class_header
/// included.
#[test]
fn the_help_example_budgets_file_is_valid() {
    let out = inflight().args(["proxy", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let example: String = help
        .split("Example budgets file:\n")
        .nth(1)
        .expect("an example budgets file")
        .split("\n\n")
        .take(2)
        .collect::<Vec<_>>()
        .join("\n\n")
        .lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        example.contains("class_header = \"x-priority\""),
        "{example}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, &example);
    let doc =
        crate::support::run_json(["check-config".as_ref(), path.as_os_str(), "--json".as_ref()]);
    assert_eq!(doc["valid"], true, "{example}");
    assert_eq!(doc["budgets"][0]["proxy"]["class_header"], "x-priority");
    assert_eq!(doc["budgets"][0]["default_class"], "batch");
}

#[test]
fn a_file_without_a_proxied_budget_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, "[budgets.records]\nmax_concurrent = 2\n");
    exits_2(
        ["proxy".as_ref(), "--config".as_ref(), path.as_os_str()],
        "no budget is proxied",
    );
}

#[test]
fn an_invalid_file_exits_2_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        &dir,
        "[budgets.records]\nmax_concurrent = 2\nupstream = \"http://127.0.0.1:1\"\nlisten = \"127.0.0.1:0\"\nrelease = \"later\"\n",
    );
    exits_2(
        ["proxy".as_ref(), "--config".as_ref(), path.as_os_str()],
        "budgets.records.release: must be \"body\" or \"headers\"",
    )
    // The limit on open files is said once the proxy has started, not before a refusal.
    .stderr(predicates::str::contains("open files").not());
    exits_2(
        ["proxy", "--config", "/nonexistent/budgets.toml"],
        "cannot read",
    );
}

#[test]
fn a_port_in_use_exits_2_naming_it() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        &dir,
        &format!("[budgets.records]\nmax_concurrent = 2\nupstream = \"http://127.0.0.1:1\"\nlisten = \"{addr}\"\n"),
    );
    exits_2(
        ["proxy".as_ref(), "--config".as_ref(), path.as_os_str()],
        &format!("budgets.records.listen: cannot listen on {addr}"),
    );
}

#[test]
fn it_forwards_to_the_sim_reloads_on_sighup_and_drains_on_sigterm() {
    let sim = SimProcess::start(&["--time-scale", "0.05"]);
    let dir = tempfile::tempdir().unwrap();
    let file = |max: usize| {
        format!(
            "[proxy]\nadmin = \"127.0.0.1:0\"\ndrain = \"20s\"\n\n[budgets.enrichment]\nmax_concurrent = {max}\nupstream = \"{}\"\nlisten = \"127.0.0.1:0\"\n",
            sim.url
        )
    };
    let path = write_config(&dir, &file(4));
    let proxy = ProxyProcess::start(&path);
    let addr = proxy.addr("enrichment");
    let admin = proxy.addr("admin");

    let (status, answer) = request(addr, "GET /enrich/7 HTTP/1.1");
    assert_eq!(status, 200, "{answer}");
    let (_, metrics) = request(admin, "GET /metrics HTTP/1.1");
    assert!(
        metrics.contains("inflight_budget_limit{budget=\"enrichment\"} 4"),
        "{metrics}"
    );

    // A valid new file applies; an invalid one is refused and the proxy keeps running.
    write_config(&dir, &file(9));
    send_signal(&proxy.child, libc::SIGHUP);
    proxy.stderr_line("reloaded");
    let (_, metrics) = request(admin, "GET /metrics HTTP/1.1");
    assert!(
        metrics.contains("inflight_budget_limit{budget=\"enrichment\"} 9"),
        "{metrics}"
    );
    write_config(&dir, "[budgets.enrichment]\nmax_concurrent = 0\n");
    send_signal(&proxy.child, libc::SIGHUP);
    let line = proxy.stderr_line("refused");
    assert!(line.contains("budgets.enrichment.max_concurrent"), "{line}");
    assert_eq!(request(addr, "GET /enrich/8 HTTP/1.1").0, 200);

    let mut proxy = proxy;
    send_signal(&proxy.child, libc::SIGTERM);
    let status = wait_exit(&mut proxy.child, Duration::from_secs(20), "the proxy");
    assert_eq!(status.code(), Some(0));
    proxy.stderr_line("drained");
}

/// With `--exit-on-stdin-close` (what the lab starts it with) the proxy drains and exits 0 when
/// its stdin closes, so a killed parent leaves no proxy behind; without it, a closed stdin (as in
/// every other test here, where stdin is /dev/null) changes nothing.
#[test]
fn with_exit_on_stdin_close_the_proxy_exits_when_its_stdin_closes() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, TO_NOWHERE);
    let mut proxy = ProxyProcess::start_with(&path, &["--exit-on-stdin-close"], Stdio::piped());
    let addr = proxy.addr("records");
    assert!(proxy.child.try_wait().unwrap().is_none());
    drop(proxy.child.stdin.take());
    proxy.stderr_line("draining");
    let status = wait_exit(&mut proxy.child, Duration::from_secs(20), "the proxy");
    assert_eq!(status.code(), Some(0));
    assert!(TcpStream::connect(addr).is_err(), "{addr} still listens");
}

#[test]
fn sigterm_lets_a_request_in_flight_finish() {
    // An upstream the test answers by hand, once the proxy is draining.
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream_addr = upstream.local_addr().unwrap();
    let (answer_tx, answer_rx) = mpsc::channel::<()>();
    let (arrived_tx, arrived_rx) = mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = upstream.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = conn.read(&mut buf).unwrap();
        arrived_tx.send(()).unwrap();
        answer_rx.recv().unwrap();
        conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nfinished\n")
            .unwrap();
    });
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        &dir,
        &format!("[proxy]\ndrain = \"20s\"\n\n[budgets.records]\nmax_concurrent = 2\nupstream = \"http://{upstream_addr}\"\nlisten = \"127.0.0.1:0\"\n"),
    );
    let mut proxy = ProxyProcess::start(&path);
    let addr = proxy.addr("records");
    let client = std::thread::spawn(move || request(addr, "GET /write HTTP/1.1"));
    arrived_rx.recv_timeout(Duration::from_secs(20)).unwrap();

    send_signal(&proxy.child, libc::SIGTERM);
    proxy.stderr_line("draining");
    assert!(
        proxy.child.try_wait().unwrap().is_none(),
        "the proxy exited with a request in flight"
    );
    answer_tx.send(()).unwrap();
    let (status, answer) = client.join().unwrap();
    assert_eq!(status, 200, "{answer}");
    assert!(answer.ends_with("finished\n"), "{answer}");
    let status = wait_exit(&mut proxy.child, Duration::from_secs(20), "the proxy");
    assert_eq!(status.code(), Some(0));
    server.join().unwrap();
}

/// An HTTP/2 connection (prior knowledge) that asks with a head of `header` bytes, then closes
/// (`reset`: with a TCP reset) without reading the answer.
fn http2_ask_and_leave(addr: SocketAddr, header: usize, reset: bool) {
    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, flags]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }
    // HPACK: a literal field without indexing, with a new name (lengths as 7-bit integers).
    fn literal(block: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        fn length(block: &mut Vec<u8>, mut n: usize) {
            if n < 127 {
                block.push(n as u8);
                return;
            }
            block.push(127);
            n -= 127;
            while n >= 128 {
                block.push((n & 127) as u8 | 128);
                n >>= 7;
            }
            block.push(n as u8);
        }
        block.push(0);
        length(block, name.len());
        block.extend_from_slice(name);
        length(block, value.len());
        block.extend_from_slice(value);
    }
    let mut block = Vec::new();
    literal(&mut block, b":method", b"GET");
    literal(&mut block, b":scheme", b"http");
    literal(&mut block, b":path", b"/");
    literal(&mut block, b":authority", addr.to_string().as_bytes());
    literal(&mut block, b"x-big", &vec![b'a'; header]);
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(4, 0, 0, &[]));
    let chunks: Vec<&[u8]> = block.chunks(16_384).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let end_headers = if i + 1 == chunks.len() { 4 } else { 0 };
        out.extend(if i == 0 {
            frame(1, end_headers | 1, 1, chunk)
        } else {
            frame(9, end_headers, 1, chunk)
        });
    }
    let stream = TcpStream::connect(addr).unwrap();
    let _ = (&stream).write_all(&out);
    if reset {
        // SO_LINGER of 0: the close sends a reset.
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: the socket is open; the option's value is a `linger` of its size.
        let set = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&stream),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        assert_eq!(set, 0);
    }
    drop(stream);
}

/// Clients that leave while the proxy writes to them (an HTTP/2 head too large, refused with a
/// GOAWAY the client never reads; closed, or reset) do not end the proxy: a write to a socket
/// its peer closed fails there, and kills no process (it was killed by SIGPIPE, exit 141,
/// without a word).
#[test]
fn clients_that_leave_while_the_proxy_writes_to_them_do_not_end_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, TO_NOWHERE);
    let mut proxy = ProxyProcess::start(&path);
    let addr = proxy.addr("records");
    for i in 0..40 {
        http2_ask_and_leave(addr, 65_600, i % 2 == 1);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_running(&mut proxy);
    assert_eq!(request(addr, "GET /after HTTP/1.1").0, 502);
}

/// A proxy whose stderr's reader has gone (a log shipper that exited) goes on serving: the lines
/// it would log are lost, not the process or the requests.
#[test]
fn a_proxy_whose_stderr_reader_has_gone_goes_on_serving() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, TO_NOWHERE);
    let mut proxy = ProxyProcess::start(&path);
    let addr = proxy.addr("records");
    // The test's reader of the proxy's stderr ends with the receiver: dropped, the next line
    // read ends the thread and closes the pipe's last reading end.
    drop(std::mem::replace(&mut proxy.stderr, mpsc::channel().1));
    // Each 502 logs a line (at most one a second): the first one read ends the reader.
    for _ in 0..3 {
        assert_eq!(request(addr, "GET /logged HTTP/1.1").0, 502);
        std::thread::sleep(Duration::from_millis(1100));
    }
    assert_running(&mut proxy);
    send_signal(&proxy.child, libc::SIGTERM);
    let status = wait_exit(&mut proxy.child, Duration::from_secs(20), "the proxy");
    assert_eq!(status.code(), Some(0));
}

/// Started by something that reads none of its stdout (`inflight proxy ... | head -0`), the
/// proxy serves: its start-up lines are lost, and the broken pipe is no error.
#[test]
fn a_proxy_whose_stdout_reader_has_gone_before_it_starts_serves() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        &dir,
        &TO_NOWHERE.replace("127.0.0.1:0", &format!("127.0.0.1:{port}")),
    );
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = std::process::Command::new(crate::support::inflight_path())
        .args(["proxy", "--config"])
        .arg(&path)
        .stdout(writer)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let start = std::time::Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert_eq!(child.try_wait().unwrap(), None, "the proxy exited");
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the proxy never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(request(addr, "GET / HTTP/1.1").0, 502);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        child.try_wait().unwrap(),
        None,
        "the proxy exited after start"
    );
    send_signal(&child, libc::SIGTERM);
    let status = wait_exit(&mut child, Duration::from_secs(20), "the proxy");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn check_config_accepts_proxied_budgets_and_names_wrong_proxy_fields() {
    let dir = tempfile::tempdir().unwrap();
    let good = write_config(
        &dir,
        "[proxy]\nadmin = \"127.0.0.1:9901\"\ndrain = \"5s\"\n\n[budgets.records]\nmax_concurrent = 6\nupstream = \"http://127.0.0.1:7070\"\nlisten = \"127.0.0.1:7002\"\nrelease = \"headers\"\noverload_status = [503]\n",
    );
    inflight()
        .args(["check-config".as_ref(), good.as_os_str()])
        .assert()
        .success();
    let bad = write_config(
        &dir,
        "[budgets.records]\nmax_concurrent = 6\nupstream = \"ftp://127.0.0.1:7070\"\nlisten = \"127.0.0.1:7002\"\n",
    );
    exits_2(
        ["check-config".as_ref(), bad.as_os_str()],
        "budgets.records.upstream: must start with http://",
    );
}

/// Started with a low soft limit on open files, the proxy raises it to the hard limit, so that
/// its clients meet `max_connections` first, and says so.
#[test]
fn the_soft_limit_on_open_files_is_raised_to_the_hard_one_at_start() {
    use std::os::unix::process::CommandExt;

    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        &dir,
        "[budgets.r]\nmax_concurrent = 2\nupstream = \"http://127.0.0.1:9\"\nlisten = \"127.0.0.1:0\"\n",
    );
    let mut command = Command::new(inflight_path());
    command
        .args(["proxy", "--config"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls (getrlimit, setrlimit) between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            limit.rlim_cur = 256.min(limit.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let numbers: Vec<&str> = files.split_whitespace().skip(3).take(2).collect();
    if numbers[1] == "256" {
        assert!(line.contains("the soft limit is the hard one"), "{line}");
        return;
    }
    assert!(
        line.contains("open files: soft limit raised from 256 to the hard limit"),
        "{line}"
    );
    assert_eq!(numbers[0], numbers[1], "soft and hard limits now: {files}");
}

/// Out of file descriptors, the listener's accept fails until connections close: the proxy
/// says so at most once a second (with how many it left out), not at every retry 50 ms apart,
/// and serves again once the connections are gone.
#[test]
fn accept_errors_out_of_open_files_are_logged_once_a_second_and_the_listener_recovers() {
    use std::os::unix::process::CommandExt;

    let (port, _) = crate::support::always("200 OK", "ok");
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        &dir,
        &format!(
            "[budgets.r]\nmax_concurrent = 2\nupstream = \"http://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:0\"\n"
        ),
    );
    let mut command = Command::new(inflight_path());
    command
        .args(["proxy", "--config"])
        .arg(&path)
        .stdin(Stdio::null());
    // SAFETY: only async-signal-safe calls (setrlimit) between fork and exec.
    unsafe {
        command.pre_exec(|| {
            // Soft and hard: the proxy cannot raise it.
            let limit = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            Ok(())
        });
    }
    let proxy = ProxyProcess::spawn(command);
    let addr = proxy.addr("r");
    assert_eq!(request(addr, "GET / HTTP/1.1").0, 200);
    // More connections than the proxy has files left: the last ones wait in the backlog,
    // and every accept of them fails.
    let held: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let first = proxy.stderr_line("cannot accept a connection");
    assert!(first.contains("Too many open files"), "{first}");
    assert!(first.contains("trying again every 50 ms"), "{first}");
    // 2.5 s of failing accepts, one every 50 ms: about 50 without pacing.
    let watched = std::time::Instant::now();
    let mut lines = Vec::new();
    while let Some(left) = Duration::from_millis(2500).checked_sub(watched.elapsed()) {
        match proxy.stderr.recv_timeout(left) {
            Ok(line) if line.contains("cannot accept") => lines.push(line),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    assert!(
        (1..=3).contains(&lines.len()),
        "about one line a second in 2.5 s: {lines:?}"
    );
    assert!(
        lines[0].contains("more since the last line"),
        "the retries left out are counted: {lines:?}"
    );
    drop(held);
    // The backlog drains (each is accepted and sees its client gone), then a client is served.
    let start = std::time::Instant::now();
    loop {
        let answer = TcpStream::connect(addr).ok().map(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            text
        });
        if answer.is_some_and(|a| a.starts_with("HTTP/1.1 200")) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "served again once the connections closed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Raises this process's limit on open files (and so the proxy's, which inherits it) to
/// `want`, or as far as it may go (the hard limit, unless the process may raise that); returns
/// the soft limit then.
fn raise_open_files(want: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur >= want {
            return limit.rlim_cur;
        }
        let raised = libc::rlimit {
            rlim_cur: want,
            rlim_max: limit.rlim_max.max(want),
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            return want;
        }
        // Raising the hard limit needs CAP_SYS_RESOURCE: the soft one goes up to it.
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur
    }
}

/// `n` GETs, one after another, on one keep-alive connection; each one's time.
fn timed_gets(addr: SocketAddr, n: usize) -> Vec<Duration> {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    (0..n)
        .map(|_| {
            let start = std::time::Instant::now();
            writer
                .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
            let mut length = 0;
            let mut line = String::new();
            loop {
                line.clear();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
                assert!(!line.is_empty(), "the proxy closed the connection");
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            start.elapsed()
        })
        .collect()
}

fn p99(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[(times.len() * 99).div_ceil(100) - 1]
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// 20,000 client connections that never send a byte or stall inside their headers, against a
/// real proxy process: it stays up, a normal client is still answered with its p99 within 2x
/// the unloaded one (plus 25 ms for this shared machine), its memory stays within 32 KiB a
/// connection, and every such connection is closed at its timeout, counted by reason. Where
/// the hard limit on open files is lower (and cannot be raised), as many as it leaves room for
/// in the proxy (it holds one file a connection), which the test says.
#[test]
fn twenty_thousand_idle_and_slow_clients_are_held_then_closed_and_a_normal_one_is_served() {
    let files = raise_open_files(45_000);
    let each = (files.saturating_sub(100) / 2).min(10_000) as usize;
    if each < 1_000 {
        eprintln!("skipping: only {files} open files allowed");
        return;
    }
    if each < 10_000 {
        eprintln!(
            "{} connections, not 20,000: the hard limit on open files is {files}, and raising it needs CAP_SYS_RESOURCE",
            2 * each
        );
    }
    let (port, _) = crate::support::always("200 OK", "ok");
    let upstream = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        &dir,
        &format!(
            "[proxy]\nadmin = \"127.0.0.1:0\"\nfirst_byte_timeout = \"30s\"\nidle_timeout = \"30s\"\nmax_connections = 25000\n\n[budgets.r]\nmax_concurrent = 6\nupstream = \"http://{upstream}\"\nlisten = \"127.0.0.1:0\"\n"
        ),
    );
    let proxy = ProxyProcess::start(&path);
    let addr = proxy.addr("r");
    let admin = proxy.addr("admin");
    let pid = proxy.child.id();

    timed_gets(addr, 50);
    let unloaded = p99(timed_gets(addr, 300));
    let rss_before = rss_kib(pid);

    let opened = std::time::Instant::now();
    let mut held = Vec::with_capacity(2 * each);
    for i in 0..2 * each {
        let mut stream = TcpStream::connect(addr).unwrap();
        if i % 2 == 1 {
            stream
                .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: ")
                .unwrap();
        }
        held.push(stream);
    }
    let took = opened.elapsed();
    // Opened before the first of them times out, so that all are held at once while measured.
    assert!(
        took < Duration::from_secs(25),
        "opening took {took:?}: the timeouts would fire first"
    );
    let loaded = p99(timed_gets(addr, 300));
    let rss_held = rss_kib(pid);
    let per_connection = (rss_held.saturating_sub(rss_before)) as f64 / (2 * each) as f64;
    eprintln!(
        "p99 unloaded {unloaded:?}, with {} held {loaded:?}; RSS {rss_before} KiB, then {rss_held} KiB ({per_connection:.1} KiB a connection); opened in {took:?}",
        2 * each
    );
    assert!(
        loaded <= unloaded * 2 + Duration::from_millis(25),
        "p99 {loaded:?} with {} held, {unloaded:?} without",
        2 * each
    );
    assert!(
        per_connection <= 32.0,
        "{per_connection:.1} KiB a connection"
    );

    // Every held connection is closed once its 30 s are up (plus a generous margin).
    for stream in &held {
        stream.set_nonblocking(true).unwrap();
    }
    let deadline = opened + Duration::from_secs(30) + took + Duration::from_secs(20);
    let mut open: Vec<TcpStream> = held;
    let mut buf = [0u8; 512];
    while !open.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} connections still open 20 s past their timeout",
            open.len()
        );
        std::thread::sleep(Duration::from_millis(100));
        open.retain_mut(|s| loop {
            match s.read(&mut buf) {
                Ok(0) => break false,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break true,
                Err(_) => break false,
            }
        });
    }
    let metrics = request(admin, "GET /metrics HTTP/1.1").1;
    let closed = |reason: &str| -> u64 {
        let prefix = format!(
            "inflight_proxy_connections_closed_total{{listener=\"r\",reason=\"{reason}\"}} "
        );
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |n| n.trim().parse().unwrap())
    };
    assert_eq!(closed("first_byte_timeout"), each as u64, "{metrics}");
    assert_eq!(closed("idle_timeout"), each as u64, "{metrics}");
    assert_eq!(closed("max_connections"), 0);
    // Still up, and still serving.
    assert_eq!(request(addr, "GET / HTTP/1.1").0, 200);
}
