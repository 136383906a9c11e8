//! `inflight proxy`: run the `inflight-proxy` sidecar for a budgets file until told to stop.

use std::fmt::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use inflight_proxy::Proxy;
use tokio::signal::unix::{signal, SignalKind};

use crate::output::{self, note};

/// Forward each request to its dependency only once it holds a permit of that dependency's budget.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Every budget with upstream and listen is proxied: the application sends its requests to the
listen address instead of the dependency. A refused request is never forwarded: 503 for a full
queue or a missed permit deadline, 429 when rate limited (with Retry-After); 504 when the call
timeout passes, 502 when the upstream cannot be reached. By default a permit is held until the
response body has been sent in full (release = \"headers\" gives it back at the headers).
A fleet budget (scope = \"fleet\", with a [fleet] table naming its Redis) keeps its permits
in Redis for every replica together; the proxy says where at start, on stderr when Redis
cannot be reached (and every 10 s while it lasts), and with on_lost = \"cancel\" drops a
request whose fleet lease is lost (503 lease_lost). `inflight fleet status` shows the budget
as Redis holds it.
Clients may speak HTTP/1.1 or HTTP/2 with prior knowledge; upstream_http2 = true speaks HTTP/2
with prior knowledge to the upstream.
An https:// upstream is spoken to over TLS, its certificate checked against the system's roots
or, with ca_file = \"ca.pem\" (PEM, relative to the budgets file), against those certificates;
a failed handshake is a 502 (upstream_tls), and upstream_http2 = true needs h2 by ALPN. The
listen side is plain HTTP, for a sidecar on loopback.
A budget with classes may name a request header (class_header = \"x-priority\") whose value
names each request's class: queued requests are admitted by class weight. A missing header, or
a value that names no class or is malformed, is the default class, never an error; the header
is forwarded unchanged. A request evicted from a full queue by a heavier class gets 503
(evicted).

Client connections are bounded on every listener ([proxy] keys, defaults in brackets): a new
connection must send its first bytes within first_byte_timeout [10s]; HTTP/1.1 must send each
request's headers within idle_timeout [30s] of the connection being ready for one, and HTTP/2
is closed after idle_timeout with no stream open; HTTP/2 clients are pinged every
http2_keepalive_interval [30s] and closed if they do not answer within http2_keepalive_timeout
[20s]; at most max_connections [10000] per listener, one more closing the connection idle
longest. A client that takes no byte of an answer for idle_timeout loses its call (HTTP/1.1:
its connection; HTTP/2: that stream), and a request body that stops coming for idle_timeout
before the upstream answers gets 400 (client_body). At start the soft limit on open files is
raised to the hard one, and said on stderr.

Once listening it prints one line per listener to stdout, then `inflight proxy: ready`.
SIGHUP reloads the file: new limits apply to new permits, held permits are kept, and an invalid
file keeps the running config (the error goes to stderr). SIGTERM or Ctrl-C stops accepting,
lets requests in flight finish within drain, gives every lease of its fleet budgets back to
Redis (requests still running lose theirs), and exits 0.
Exit status 2: the file is invalid, proxies no budget, or an address is in use.

Example budgets file:
  [proxy]
  admin = \"127.0.0.1:9901\"   # GET /metrics, /healthz, /readyz
  drain = \"10s\"              # on SIGTERM: finish what is in flight, give back fleet leases, exit 0

  [budgets.records]
  max_concurrent = 6
  max_queued = 6
  permit_timeout = \"500ms\"
  call_timeout = \"2s\"
  upstream = \"http://127.0.0.1:7070\"
  listen = \"127.0.0.1:7002\"
  release = \"body\"           # or \"headers\": when the permit goes back
  overload_status = [429, 503] # upstream answers an adaptive limit treats as overload
  overload_on_timeout = true   # false: a call past call_timeout tells the limit nothing
  on_client_gone = \"cancel\"  # or \"finish\": a call whose client left goes on, holding its permit
  classes = { interactive = 4, batch = 1 }  # who goes first when every permit is held
  class_header = \"x-priority\" # x-priority: interactive; missing or unknown: the default class

Examples:
  inflight proxy --config budgets.toml
  curl -s 127.0.0.1:9901/metrics | grep inflight_proxy_requests_total
  kill -HUP <pid>     # reload budgets.toml")]
pub struct Args {
    /// The budgets file (TOML); every budget with `upstream` and `listen` is proxied.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Drain and exit when stdin closes, so a process that started the proxy (the lab) never
    /// leaves it behind, even when it is killed.
    #[arg(long, hide = true)]
    pub exit_on_stdin_close: bool,
}

/// Raises the soft limit on open files to the hard one, so that client connections are bounded
/// by `max_connections` and not by a low default; what it did, to say once the proxy started.
fn raise_open_files() -> String {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct given; no other precondition.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return "cannot read the limit on open files; left as it is".to_string();
        }
        if limit.rlim_cur >= limit.rlim_max {
            return format!(
                "open files: up to {} (the soft limit is the hard one)",
                limit.rlim_cur
            );
        }
        let before = limit.rlim_cur;
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
            format!(
                "open files: soft limit raised from {before} to the hard limit {}",
                limit.rlim_max
            )
        } else {
            format!(
                "open files: cannot raise the soft limit {before} to {}: {}",
                limit.rlim_max,
                std::io::Error::last_os_error()
            )
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Raised before any listener opens; said once the proxy has started.
    let open_files = raise_open_files();
    let runtime = runtime()?;
    runtime.block_on(serve(args, &open_files))
}

/// The proxy's runtime: with one CPU to use (a sidecar's usual quota, which
/// `available_parallelism` follows), a single-threaded runtime, which spends less CPU per
/// request than a multi-threaded one with one worker (no hand-offs between the worker and the
/// I/O driver's thread); with more, a worker per CPU.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
        return super::async_runtime();
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

async fn serve(args: Args, open_files: &str) -> anyhow::Result<ExitCode> {
    let shown = args.config.display().to_string();
    let proxy = Proxy::builder()
        .log(|line| note!("inflight proxy: {line}"))
        .start_path(&args.config)
        .await
        .with_context(|| format!("cannot start the proxy for {shown}"))?;
    note!("inflight proxy: {open_files}");
    // Signals are set up before "ready", so a signal sent after it is never missed.
    let mut hangup = signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let (stdin_closed, mut parent_gone) = tokio::sync::oneshot::channel::<()>();
    // Without the flag the sender is kept for as long as the proxy runs: it never fires.
    let _never = if args.exit_on_stdin_close {
        std::thread::spawn(move || {
            super::wait_for_stdin_close();
            let _ = stdin_closed.send(());
        });
        None
    } else {
        Some(stdin_closed)
    };
    {
        // A reader that has gone (`inflight proxy ... | head -1`) leaves the proxy serving.
        let mut out = String::new();
        for (name, addr) in proxy.listeners() {
            let upstream = proxy.upstream(name).unwrap_or_default();
            writeln!(
                out,
                "inflight proxy: {name} listening on {addr}, forwarding to {upstream}"
            )?;
        }
        if let Some((url, names, lease)) = proxy.fleet() {
            if !names.is_empty() {
                writeln!(
                    out,
                    "inflight proxy: fleet budgets {} keep their permits in {url} (lease {}); inflight fleet status --config {shown} shows them",
                    names.join(", "),
                    humantime::format_duration(lease)
                )?;
            }
        }
        if let Some(admin) = proxy.admin_addr() {
            writeln!(out, "inflight proxy: admin listening on {admin}")?;
        }
        writeln!(out, "inflight proxy: ready")?;
        output::out(&out)?;
    }
    loop {
        tokio::select! {
            _ = hangup.recv() => match proxy.reload_path(&args.config) {
                Ok(reloaded) => note!(
                    "inflight proxy: reloaded {shown}: {}",
                    said(&reloaded)
                ),
                Err(e) => note!(
                    "inflight proxy: reload of {shown} refused, the running config stays: {e}"
                ),
            },
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
            _ = &mut parent_gone => break,
        }
    }
    note!("inflight proxy: draining");
    let drained = proxy.drain().await;
    if drained.in_time {
        note!("inflight proxy: drained");
    } else {
        let cut = match drained.in_flight {
            1 => "1 request in flight; it is cut".to_string(),
            n => format!("{n} requests in flight; they are cut"),
        };
        note!("inflight proxy: the drain time passed with {cut}");
    }
    Ok(ExitCode::SUCCESS)
}

/// What a reload changed, for its line: `nothing changed`, or the budgets with new settings
/// and the `[proxy]` keys that changed.
fn said(reloaded: &inflight_proxy::Reloaded) -> String {
    let mut parts = Vec::new();
    if !reloaded.changed.is_empty() {
        parts.push(format!("new settings for {}", reloaded.changed.join(", ")));
    }
    if !reloaded.proxy_changed.is_empty() {
        parts.push(format!("new {}", reloaded.proxy_changed.join(", ")));
    }
    if parts.is_empty() {
        "nothing changed".to_string()
    } else {
        parts.join("; ")
    }
}
