//! Helpers shared by the command-line tests.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, ExitStatus, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use assert_cmd::assert::Assert;
use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

/// The `inflight` binary built for this test run.
pub fn inflight() -> Command {
    Command::cargo_bin("inflight").expect("the inflight binary is built")
}

/// The path of the `inflight` binary, for tests that need a plain `std::process::Command`.
pub fn inflight_path() -> PathBuf {
    assert_cmd::cargo::cargo_bin("inflight")
}

/// Whether this process runs as root (cgroup tests need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether this test can create a cgroup with a quota of `cpus`: it must run as root and the
/// machine must allow it. Says why on stderr when not, so the caller can skip.
pub fn can_create_cgroups(cpus: f64) -> bool {
    if !is_root() {
        eprintln!("skipping: needs root to create cgroups");
        return false;
    }
    if let Err(e) = inflight_cpu::QuotaGroup::create(cpus) {
        eprintln!("skipping: this machine cannot create a cgroup: {e}");
        return false;
    }
    true
}

/// Runs `inflight` with `args` and checks that it exits 2 with `needle` on stderr; the returned
/// assertion can check more.
pub fn exits_2<I, S>(args: I, needle: &str) -> Assert
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    inflight()
        .args(args)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(needle))
}

/// Checks that a finished command exited 2 with `needle` on stderr and nothing on stdout;
/// `context` prefixes the failure messages. Returns stderr.
pub fn assert_refused(output: &Output, needle: &str, context: &str) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{context}{stderr}");
    assert!(stderr.contains(needle), "{context}{stderr}");
    assert!(output.stdout.is_empty(), "{context}");
    stderr
}

/// Checks that a finished command succeeded (showing its stderr if not) and parses its stdout as
/// one JSON document.
pub fn success_json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stdout is one JSON document")
}

/// Runs `inflight` with `args` (which should include `--json`) and returns its JSON output.
pub fn run_json<I, S>(args: I) -> Value
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    success_json(&inflight().args(args).output().unwrap())
}

/// Sends `signal` to a child this test started; returns what `kill` returned.
pub fn send_signal(child: &Child, signal: libc::c_int) -> libc::c_int {
    // SAFETY: kill with the pid of a child we spawned and a valid signal number.
    unsafe { libc::kill(child.id() as libc::pid_t, signal) }
}

/// Waits for `child` to exit; kills it and panics, naming `what`, if it takes longer than `within`.
pub fn wait_exit(child: &mut Child, within: Duration, what: &str) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not stop within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An `inflight sim` started for a test, stopped when dropped.
pub struct SimProcess {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
}

impl SimProcess {
    /// Starts `inflight sim --port 0 ARGS --exit-on-stdin-close` and reads its URL.
    pub fn start(args: &[&str]) -> SimProcess {
        use std::io::BufRead;
        let mut child = std::process::Command::new(inflight_path())
            .args(["sim", "--port", "0", "--exit-on-stdin-close"])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim_end()
            .strip_prefix("inflight sim listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        SimProcess { child, url }
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP/1.1 server on loopback that answers every request (without a body) with `status` and
/// `body` at once, over keep-alive connections, and counts them.
pub fn always(status: &'static str, body: &'static str) -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicU64::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    // A request without a body: lines up to the blank one.
                    let mut line = String::new();
                    loop {
                        line.clear();
                        match reader.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                    }
                    seen.fetch_add(1, Ordering::SeqCst);
                    let reply = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if stream.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, count)
}
