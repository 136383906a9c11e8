//! The processes a run starts: the upstream and the proxies (`inflight proxy`, HAProxy, nginx),
//! each with its configuration file and log in the run's folder, on its CPU and, for a proxy,
//! in its quota group; each is stopped when dropped.

use std::fs::OpenOptions;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use inflight_cpu::QuotaGroup;

use super::host::Pinning;
use super::plan::{Settings, Who, BUDGET_LIMIT, BUDGET_SERVICE_MS};
use super::ProxyBenchError;

/// How long a process has to start listening (under valgrind: some fifty times slower), and to
/// stop before it is killed.
pub(crate) const START_PATIENCE: Duration = Duration::from_secs(10);
pub(crate) const VALGRIND_START_PATIENCE: Duration = Duration::from_secs(120);
const STOP_PATIENCE: Duration = Duration::from_secs(5);

/// The programs a run starts.
#[derive(Debug, Clone)]
pub struct Tools {
    /// `inflight`, for `inflight proxy` and `inflight check-config`.
    pub inflight: PathBuf,
    /// `haproxy`.
    pub haproxy: PathBuf,
    /// `nginx`.
    pub nginx: PathBuf,
    /// `proxy-bench` itself, for `proxy-bench upstream`.
    pub proxy_bench: PathBuf,
}

impl Tools {
    /// The program that runs `who` (none for direct).
    pub(crate) fn of(&self, who: Who) -> Option<&Path> {
        match who {
            Who::Direct => None,
            Who::Inflight => Some(&self.inflight),
            Who::Haproxy => Some(&self.haproxy),
            Who::Nginx => Some(&self.nginx),
        }
    }
}

/// The first line `inflight --version`, `haproxy -v` or `nginx -v` prints (nginx prints it on
/// stderr); an error saying how to get the program when it cannot be run.
pub(crate) fn version(who: Who, program: &Path) -> Result<String, ProxyBenchError> {
    let output = Command::new(program)
        .arg(if who == Who::Inflight { "--version" } else { "-v" })
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ProxyBenchError::Process {
            what: format!("{who} ({})", program.display()),
            reason: format!(
                "cannot be run: {e}; install it (e.g. `apt-get install {who}`), name it with --{who} PATH, or leave it out with --only"
            ),
        })?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    Ok(text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("unknown version")
        .trim()
        .to_string())
}

/// The loopback ports of a run: the upstream, and each proxy's wide listener and budget-of-6 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Ports {
    pub upstream: u16,
    pub inflight: u16,
    pub inflight_six: u16,
    pub haproxy: u16,
    pub haproxy_six: u16,
    pub nginx: u16,
    pub nginx_six: u16,
}

impl Ports {
    /// Seven free consecutive ports: from `base`, or (without one) a block found free below the
    /// system's range of ephemeral ports. Not in that range: the generator's own connections
    /// take their local ports from it, and one of them could hold a port while the proxy that
    /// listens on it restarts.
    pub fn pick(base: Option<u16>) -> Result<Ports, ProxyBenchError> {
        if let Some(base) = base {
            return Ports::block(base).map_err(|(port, e)| {
                ProxyBenchError::Plan(format!(
                    "127.0.0.1:{port} is not free ({e}): stop what listens there, or choose another --base-port"
                ))
            });
        }
        let (low, high) = ephemeral_range();
        // Blocks of 7 in 10000..low, or above high when the range starts too low.
        let (first, last) = if low >= 10_000 + 7 {
            (10_000u32, u32::from(low))
        } else {
            (u32::from(high) + 1, 65_536)
        };
        let blocks = ((last.saturating_sub(first)) / 7).max(1);
        let start = std::process::id() % blocks;
        for i in 0..blocks.min(500) {
            let base = first + (start + i) % blocks * 7;
            if let Ok(ports) = Ports::block(u16::try_from(base).unwrap_or(u16::MAX - 7)) {
                return Ok(ports);
            }
        }
        Err(ProxyBenchError::Plan(format!(
            "no 7 consecutive free ports on 127.0.0.1 in {first}-{last}: choose them with --base-port"
        )))
    }

    /// `base` and the six after it, each checked free; else the first that is not, and why.
    fn block(base: u16) -> Result<Ports, (u32, io::Error)> {
        let mut held = Vec::new();
        for i in 0..7u32 {
            let port = u32::from(base) + i;
            let p =
                u16::try_from(port).map_err(|_| (port, io::Error::other("past the last port")))?;
            // Kept bound until all seven are checked.
            held.push(TcpListener::bind(("127.0.0.1", p)).map_err(|e| (port, e))?);
        }
        let p = |i: u16| base + i;
        Ok(Ports {
            upstream: p(0),
            inflight: p(1),
            inflight_six: p(2),
            haproxy: p(3),
            haproxy_six: p(4),
            nginx: p(5),
            nginx_six: p(6),
        })
    }

    /// The wide and the budget-of-6 port of `who` (direct: the upstream's, and none).
    pub fn of(&self, who: Who) -> (u16, Option<u16>) {
        match who {
            Who::Direct => (self.upstream, None),
            Who::Inflight => (self.inflight, Some(self.inflight_six)),
            Who::Haproxy => (self.haproxy, Some(self.haproxy_six)),
            Who::Nginx => (self.nginx, Some(self.nginx_six)),
        }
    }
}

/// The system's range of ephemeral ports (`net.ipv4.ip_local_port_range`), or Linux's default.
fn ephemeral_range() -> (u16, u16) {
    let text =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut it = text
        .split_whitespace()
        .filter_map(|v| v.parse::<u16>().ok());
    match (it.next(), it.next()) {
        (Some(low), Some(high)) if low <= high => (low, high),
        _ => (32_768, 60_999),
    }
}

/// Connections a proxy must hold at once: the idle ones, the load's and its own to the
/// upstream, with room to spare; one descriptor each.
pub(crate) fn connection_room(settings: &Settings) -> usize {
    settings.idle_connections + 2 * settings.connections + 1024
}

/// `inflight proxy`'s budgets file: `wide` (1024 at once, a queue of 1024) and `six` (the
/// budget case, a queue for every client); with `inflight_routes`, that many routes on `wide`'s
/// listener to a budget of their own, which no request of the benchmark matches.
pub(crate) fn inflight_config(ports: &Ports, settings: &Settings) -> String {
    let mut text = format!(
        r#"[proxy]
max_connections = {room}
idle_timeout = "120s"

[budgets.wide]
max_concurrent = 1024
max_queued = 1024
permit_timeout = "5s"
call_timeout = "10s"
upstream = "http://127.0.0.1:{up}"
listen = "127.0.0.1:{wide}"

[budgets.six]
max_concurrent = {BUDGET_LIMIT}
max_queued = {queue}
permit_timeout = "5s"
call_timeout = "10s"
upstream = "http://127.0.0.1:{up}"
listen = "127.0.0.1:{six}"
"#,
        room = connection_room(settings),
        up = ports.upstream,
        wide = ports.inflight,
        six = ports.inflight_six,
        queue = settings.connections,
    );
    if settings.inflight_routes > 0 {
        text.push_str(&format!(
            "\n[budgets.routed]\nmax_concurrent = 1024\nupstream = \"http://127.0.0.1:{}\"\n",
            ports.upstream
        ));
        for i in 0..settings.inflight_routes {
            text.push_str(&format!(
                "\n[[proxy.routes]]\nlisten = \"127.0.0.1:{}\"\nprefix = \"/routed/{i}/\"\nbudget = \"routed\"\n",
                ports.inflight
            ));
        }
    }
    text
}

/// HAProxy's configuration: one thread, `maxconn` for the idle connections, the budget case
/// as `server ... maxconn 6` with a queue. HAProxy asks for two descriptors per connection of
/// its `maxconn` (one to the client, one to a server) and by default refuses to start when the
/// hard limit on open files is lower; idle clients hold one each, so a limit that fits them is
/// enough (`no strict-limits`: a warning in its log instead).
pub(crate) fn haproxy_config(ports: &Ports, settings: &Settings) -> String {
    format!(
        r#"global
    nbthread 1
    maxconn {room}
    no strict-limits

defaults
    mode http
    option http-keep-alive
    option forwardfor
    timeout connect 5s
    timeout client 120s
    timeout server 30s
    timeout http-request 30s
    timeout http-keep-alive 120s
    timeout queue 5s

frontend wide
    bind 127.0.0.1:{wide}
    default_backend wide

frontend six
    bind 127.0.0.1:{six}
    default_backend six

backend wide
    http-reuse always
    server up 127.0.0.1:{up} maxconn 1024

backend six
    http-reuse always
    server up 127.0.0.1:{up} maxconn {BUDGET_LIMIT}
"#,
        room = connection_room(settings),
        wide = ports.haproxy,
        six = ports.haproxy_six,
        up = ports.upstream,
    )
}

/// nginx's configuration, with its files under `dir`: one worker, keep-alive to the upstream,
/// the budget case as `max_conns=6` (no queue in open-source nginx: the rest get 502 at once).
/// Without `master`, one process does the worker's work (`master_process off`): callgrind can
/// be asked for the counts of a process it started, not of one forked from it.
pub(crate) fn nginx_config(
    ports: &Ports,
    settings: &Settings,
    dir: &Path,
    root: bool,
    master: bool,
) -> String {
    let room = connection_room(settings);
    let d = dir.display();
    format!(
        r#"worker_processes 1;
worker_rlimit_nofile {files};
daemon off;
master_process {master};
{user}pid {d}/nginx.pid;
error_log {d}/error.log warn;

events {{ worker_connections {room}; }}

http {{
    access_log off;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    keepalive_timeout 120s;
    keepalive_requests 1000000;

    upstream wide {{
        server 127.0.0.1:{up};
        keepalive 64;
        keepalive_requests 1000000;
    }}
    upstream six {{
        server 127.0.0.1:{up} max_conns={BUDGET_LIMIT};
        keepalive {BUDGET_LIMIT};
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{wide};
        location / {{
            proxy_pass http://wide;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }}
    }}
    server {{
        listen 127.0.0.1:{six};
        location / {{
            proxy_pass http://six;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }}
    }}
}}
"#,
        files = room + 64,
        master = if master { "on" } else { "off" },
        user = if root { "user root;\n" } else { "" },
        up = ports.upstream,
        wide = ports.nginx,
        six = ports.nginx_six,
    )
}

/// The configuration files of a run, written in its folder and checked by each program.
#[derive(Debug, Clone)]
pub(crate) struct Configs {
    dir: PathBuf,
}

impl Configs {
    /// Writes the files of the proxies in `targets` under `dir` and has each program check its own.
    pub(crate) fn write(
        dir: &Path,
        tools: &Tools,
        targets: &[Who],
        ports: &Ports,
        settings: &Settings,
    ) -> Result<Configs, ProxyBenchError> {
        let configs = Configs {
            dir: dir.to_path_buf(),
        };
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        for &who in targets {
            let check = match who {
                Who::Direct => continue,
                Who::Inflight => {
                    std::fs::write(configs.inflight(), inflight_config(ports, settings))?;
                    let mut c = Command::new(&tools.inflight);
                    c.arg("check-config").arg(configs.inflight());
                    c
                }
                Who::Haproxy => {
                    std::fs::write(configs.haproxy(), haproxy_config(ports, settings))?;
                    let mut c = Command::new(&tools.haproxy);
                    c.args(["-c", "-q", "-f"]).arg(configs.haproxy());
                    c
                }
                Who::Nginx => {
                    let nginx = configs.nginx_dir();
                    std::fs::create_dir_all(nginx.join("tmp"))?;
                    std::fs::write(
                        configs.nginx_conf(false),
                        nginx_config(ports, settings, &nginx, root, true),
                    )?;
                    std::fs::write(
                        configs.nginx_conf(true),
                        nginx_config(ports, settings, &nginx, root, false),
                    )?;
                    let mut c = Command::new(&tools.nginx);
                    c.args(["-t", "-q"]).args(configs.nginx_args(false));
                    c
                }
            };
            let mut check = check;
            let out =
                check
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| ProxyBenchError::Process {
                        what: format!("checking {who}'s configuration"),
                        reason: e.to_string(),
                    })?;
            if !out.status.success() {
                return Err(ProxyBenchError::Process {
                    what: format!("{who}'s configuration (in {})", dir.display()),
                    reason: format!(
                        "refused: {} {}",
                        String::from_utf8_lossy(&out.stderr).trim(),
                        String::from_utf8_lossy(&out.stdout).trim()
                    ),
                });
            }
        }
        Ok(configs)
    }

    fn inflight(&self) -> PathBuf {
        self.dir.join("budgets.toml")
    }

    fn haproxy(&self) -> PathBuf {
        self.dir.join("haproxy.cfg")
    }

    fn nginx_dir(&self) -> PathBuf {
        self.dir.join("nginx")
    }

    /// `nginx.conf`, or `single.conf` (`master_process off`) for a single process.
    fn nginx_conf(&self, single: bool) -> PathBuf {
        self.nginx_dir()
            .join(if single { "single.conf" } else { "nginx.conf" })
    }

    fn nginx_args(&self, single: bool) -> Vec<PathBuf> {
        vec![
            "-p".into(),
            self.nginx_dir(),
            "-c".into(),
            self.nginx_conf(single),
            "-e".into(),
            self.nginx_dir().join("error.log"),
        ]
    }

    /// The command that runs `who` (a proxy) in the foreground; `single`: in one process (only
    /// nginx has a master and a worker otherwise).
    pub(crate) fn command(&self, tools: &Tools, who: Who, single: bool) -> Option<Command> {
        let program = tools.of(who)?;
        let mut cmd = Command::new(program);
        match who {
            Who::Direct => return None,
            Who::Inflight => {
                cmd.arg("proxy").arg("--config").arg(self.inflight());
            }
            Who::Haproxy => {
                cmd.arg("-db").arg("-f").arg(self.haproxy());
            }
            Who::Nginx => {
                cmd.args(self.nginx_args(single));
            }
        }
        Some(cmd)
    }
}

/// A process this run started, with its output appended to a log file; stopped (SIGTERM, then
/// SIGKILL after 5 s) when dropped.
#[derive(Debug)]
pub(crate) struct Process {
    name: String,
    child: std::process::Child,
    log: PathBuf,
    stopped: bool,
}

impl Process {
    /// Starts `cmd` on `cpu` (when `pinning` applies) and in `group`, if given, from its first
    /// instruction, with stdout and stderr appended to `log`.
    pub(crate) fn spawn(
        name: &str,
        mut cmd: Command,
        log: &Path,
        pinning: &Pinning,
        cpu: usize,
        group: Option<&QuotaGroup>,
    ) -> Result<Process, ProxyBenchError> {
        let out = OpenOptions::new().create(true).append(true).open(log)?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        // A group of its own: Ctrl-C in a terminal reaches this process only, which then stops
        // the others in order, rather than each of them at once, mid-step.
        cmd.process_group(0);
        pinning.prepare(&mut cmd, cpu);
        if let Some(group) = group {
            group.prepare_command(&mut cmd);
        }
        let child = cmd.spawn().map_err(|e| ProxyBenchError::Process {
            what: name.to_string(),
            reason: format!("cannot start {:?}: {e}", cmd.get_program()),
        })?;
        Ok(Process {
            name: name.to_string(),
            child,
            log: log.to_path_buf(),
            stopped: false,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `ports` accept connections on 127.0.0.1 and, if given, `ready` is in the log.
    ///
    /// # Errors
    ///
    /// When the process exits first or does not get ready within `patience`, with the end of
    /// its log.
    pub(crate) async fn wait_ready(
        &mut self,
        ports: &[u16],
        ready: Option<&str>,
        patience: Duration,
    ) -> Result<(), ProxyBenchError> {
        let deadline = Instant::now() + patience;
        let mut pending: Vec<u16> = ports.to_vec();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.stopped = true;
                return Err(self.failed(&format!("exited while starting ({status})")));
            }
            let mut still = Vec::new();
            for port in pending {
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                if tokio::net::TcpStream::connect(addr).await.is_err() {
                    still.push(port);
                }
            }
            pending = still;
            let logged = match ready {
                Some(line) => std::fs::read_to_string(&self.log)
                    .map(|t| t.contains(line))
                    .unwrap_or(false),
                None => true,
            };
            if pending.is_empty() && logged {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(self.failed(&format!(
                    "not ready after {} s (ports not listening: {pending:?})",
                    patience.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn failed(&self, what: &str) -> ProxyBenchError {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(8)..].join("\n  ");
        ProxyBenchError::Process {
            what: self.name.clone(),
            reason: format!("{what}; the end of {}:\n  {tail}", self.log.display()),
        }
    }

    /// Stops the process and its children: SIGTERM, SIGKILL after 5 s; waits for it.
    pub(crate) fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill has no memory preconditions; the pid is our child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + STOP_PATIENCE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The upstream (`proxy-bench upstream`) on `port`, answering `/slow` after the budget case's
/// service time, exiting by itself after `exit_after` at the latest.
pub(crate) fn upstream_command(tools: &Tools, port: u16, exit_after: Duration) -> Command {
    let mut cmd = Command::new(&tools.proxy_bench);
    cmd.arg("upstream")
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--slow-ms")
        .arg(BUDGET_SERVICE_MS.to_string())
        .arg("--exit-after")
        .arg(exit_after.as_secs_f64().ceil().to_string());
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports() -> Ports {
        Ports {
            upstream: 9000,
            inflight: 9001,
            inflight_six: 9002,
            haproxy: 9003,
            haproxy_six: 9004,
            nginx: 9005,
            nginx_six: 9006,
        }
    }

    #[test]
    fn every_proxy_has_room_for_the_idle_connections() {
        let settings = Settings {
            idle_connections: 10_000,
            ..Settings::default()
        };
        let room = 10_000 + 2 * 64 + 1024;
        assert!(inflight_config(&ports(), &settings).contains(&format!("max_connections = {room}")));
        assert!(haproxy_config(&ports(), &settings).contains(&format!("maxconn {room}")));
        let nginx = nginx_config(&ports(), &settings, Path::new("/tmp/x"), false, true);
        assert!(nginx.contains(&format!("worker_connections {room};")));
        assert!(!nginx.contains("user root"));
    }

    #[test]
    fn the_budget_case_holds_six_at_the_upstream() {
        let s = Settings::default();
        assert!(inflight_config(&ports(), &s).contains("max_concurrent = 6\nmax_queued = 64"));
        assert!(haproxy_config(&ports(), &s).contains("server up 127.0.0.1:9000 maxconn 6"));
        assert!(nginx_config(&ports(), &s, Path::new("/x"), true, false)
            .contains("server 127.0.0.1:9000 max_conns=6;"));
    }

    #[test]
    fn a_routing_table_sits_in_front_of_the_wide_listener_and_matches_no_request() {
        let s = Settings {
            inflight_routes: 16,
            ..Settings::default()
        };
        let text = inflight_config(&ports(), &s);
        assert_eq!(text.matches("[[proxy.routes]]").count(), 16);
        assert!(text.contains("[budgets.routed]"));
        // The benchmark's requests go to `/` and `/slow`: no route's prefix is a prefix of them.
        assert!(!text.contains("prefix = \"/\"") && !text.contains("prefix = \"/slow"));
        assert!(!inflight_config(&ports(), &Settings::default()).contains("[[proxy.routes]]"));
    }

    #[test]
    fn ports_are_seven_and_distinct() {
        let p = Ports::pick(None).unwrap();
        let mut all = vec![
            p.upstream,
            p.inflight,
            p.inflight_six,
            p.haproxy,
            p.haproxy_six,
            p.nginx,
            p.nginx_six,
        ];
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 7);
        assert_eq!(p.of(Who::Direct), (p.upstream, None));
        let (low, high) = ephemeral_range();
        assert!(
            p.upstream < low || p.upstream > high,
            "{p:?} in {low}-{high}"
        );
        assert_eq!(p.nginx_six, p.upstream + 6);
    }
}
