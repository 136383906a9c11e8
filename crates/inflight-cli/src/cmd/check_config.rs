//! `inflight check-config`: load and check a budgets file, and print what each budget implies.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use inflight::config::{BudgetsFile, FleetConfig, FleetFail, LeaseMode, Scope};
use inflight::sizing::{assess, Assessment};
use inflight::{BudgetConfig, Classes, OnLost, Rate};
use inflight_proxy::config::{
    ClientGone, Listener, Protocol, ProxyConfig, ProxyFile, Release, Route,
    DEFAULT_OVERLOAD_GRPC_STATUS, DEFAULT_OVERLOAD_STATUS, GRPC_STATUS_NAMES,
};
use serde_json::{json, Value};

/// Validate a budgets file and print each budget's limits, timeouts and Little's-law figures.
///
/// Exit status: 0 when the file is valid (warnings included, unless --deny-warnings), 1 when it
/// has warnings and --deny-warnings is given, 2 when it is not valid (stderr names every budget
/// and field that is wrong).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Little's law: calls in flight = throughput x time per call.
  With service_time, a budget passes at most max_concurrent / service_time.
  With target_rate too, the target needs target_rate x service_time calls in flight;
  more than max_concurrent is flagged: lower the target, or raise the budget after measuring.

A budget proxied by inflight proxy also shows its upstream, listen address and release, and
any of overload_status, preserve_host, upstream_http2, overload_on_timeout, on_client_gone,
ca_file, class_header, protocol and overload_grpc_status that differ from their defaults; the [proxy] table's admin, drain and limits on
client connections (first_byte_timeout, idle_timeout, http2_keepalive_interval,
http2_keepalive_timeout, max_connections) follow the budgets.

A budget with classes (classes = { interactive = 4, batch = 1 }, default_class, strict) shows
how grants are shared, its default class, and each class's weight and permit deadline (its
own, or the budget's); --json adds classes (name, weight, permit_timeout_ms,
own_permit_timeout), default_class and strict to such a budget.

A fleet budget (scope = \"fleet\") shows how it holds its permits (lease_mode), what it does
while Redis cannot be reached (fail, local_limit) and with a call whose lease is lost (on_lost);
the [fleet] table (its URL without the password, the topology the URL names, the lease) follows
the budgets. --json adds scope, fail, local_limit, lease_mode and on_lost to each budget and a
fleet object. With a rate it shows rate_scope fleet (rate_scope in --json: \"fleet\", \"local\",
or null without a rate): its rate holds for every replica together, kept in the fleet's store,
and no process applies it on its own. `inflight fleet status` asks the fleet's Redis itself.

Example:
  inflight check-config examples/budgets.toml
  inflight check-config budgets.toml --json | jq '.budgets[] | {name, max_rate_per_s}'
  inflight check-config budgets.toml --json | jq '.budgets[] | {name, classes, default_class}'
  generate-budgets | inflight check-config - --deny-warnings   # in CI")]
pub struct Args {
    /// The budgets file (TOML, one [budgets.<name>] table per dependency); `-` reads stdin.
    pub file: PathBuf,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Exit 1 when the file is valid but has warnings (for CI).
    #[arg(long)]
    pub deny_warnings: bool,
}

/// The most bytes read from stdin: a budgets file is small.
const MAX_STDIN: u64 = 16 * 1024 * 1024;

/// The budgets of `file`, or of stdin for `-`, each key checked by the crate that reads it:
/// the budgets' own and `[fleet]` by `inflight`, the proxy's by `inflight-proxy`.
fn load(file: &std::path::Path) -> anyhow::Result<Result<ProxyFile, inflight::ConfigError>> {
    if file.as_os_str() != "-" {
        return Ok(BudgetsFile::from_path(file).and_then(super::budgets_file));
    }
    use std::io::Read;
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_STDIN + 1)
        .read_to_string(&mut text)
        .map_err(|e| anyhow::anyhow!("cannot read the budgets file from stdin: {e}"))?;
    if text.len() as u64 > MAX_STDIN {
        anyhow::bail!("the budgets file on stdin is larger than 16 MiB");
    }
    Ok(BudgetsFile::from_toml_str(&text).and_then(super::budgets_file))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let shown_file = if args.file.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        args.file.display().to_string()
    };
    // `[fleet]` as `inflight proxy` would take it: its URL parsed, its CA file read (no
    // connection).
    let loaded = load(&args.file)?.and_then(|file| match file.budgets().fleet() {
        Some(fleet) => match inflight_redis::RedisFleet::from_config(fleet) {
            Ok(_) => Ok(file),
            Err(e) => Err(inflight::ConfigError::invalid("fleet", e.to_string())),
        },
        None => Ok(file),
    });
    let file = match loaded {
        Ok(file) => file,
        Err(err) => {
            // The message names the file once, here: the error's own text is what is wrong in it.
            let err = err.without_path();
            let all = err.errors();
            if args.json {
                let doc = json!({
                    "file": shown_file,
                    "valid": false,
                    "error": err.to_string(),
                    "field": err.field(),
                    "errors": all
                        .iter()
                        .map(|e| json!({ "field": e.field(), "error": e.to_string() }))
                        .collect::<Vec<_>>(),
                });
                println!("{}", serde_json::to_string_pretty(&doc)?);
            }
            let message = match err {
                // A file that cannot be read names itself, with the reason.
                inflight::ConfigError::Read { .. } => err.to_string(),
                _ if all.len() > 1 => format!(
                    "{shown_file}: {} errors:\n{}",
                    all.len(),
                    all.iter()
                        .map(|e| format!("  {e}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
                _ => format!("{shown_file}: {err}"),
            };
            return Err(anyhow::anyhow!(message));
        }
    };
    let budgets = file.budgets();
    let reports: Vec<BudgetReport<'_>> = budgets
        .iter()
        .map(|b| {
            let mut report = BudgetReport::new(b.name(), b.config(), file.route(b.name()), false);
            if let Some(Scope::Fleet { fail }) = budgets.scope(b.name()) {
                report.fleet = true;
                report.fail = Some(fail);
                report.lease_mode = budgets.lease_mode(b.name());
            }
            report
        })
        .collect();
    // The proxy's own settings, for a file that `inflight proxy` would run.
    let proxy = file
        .proxy()
        .cloned()
        .or_else(|| file.routes().next().map(|_| ProxyConfig::default()));
    let warnings: usize = reports.iter().map(|r| r.assessment.warnings.len()).sum();
    if args.json {
        let mut doc = json!({
            "file": shown_file,
            "valid": true,
            "warnings": warnings,
            "budgets": reports.iter().map(BudgetReport::to_json).collect::<Vec<_>>(),
        });
        if let Some(proxy) = &proxy {
            doc["proxy"] = proxy_json(proxy);
            doc["listeners"] = listeners_json(file.listeners());
        }
        if let Some(fleet) = budgets.fleet() {
            doc["fleet"] = fleet_json(fleet);
        }
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", render(&shown_file, &reports));
        if let Some(fleet) = budgets.fleet() {
            print!("{}", render_fleet(fleet));
        }
        if let Some(proxy) = &proxy {
            print!("{}", render_proxy(proxy));
            print!("{}", render_listeners(file.listeners()));
        }
    }
    if args.deny_warnings && warnings > 0 {
        eprintln!("error: {shown_file}: {warnings} warning(s), and --deny-warnings was given");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// One budget and what the library's [`assess`] makes of it; this module only prints it.
struct BudgetReport<'a> {
    name: &'a str,
    config: &'a BudgetConfig,
    route: Option<&'a Route>,
    /// The budget keeps its permits, and its rate, in the fleet's store (`scope = "fleet"`).
    fleet: bool,
    /// A fleet budget's policy while its store cannot be reached.
    fail: Option<FleetFail>,
    /// How a fleet budget holds its permits.
    lease_mode: Option<LeaseMode>,
    assessment: Assessment,
}

impl<'a> BudgetReport<'a> {
    fn new(name: &'a str, config: &'a BudgetConfig, route: Option<&'a Route>, fleet: bool) -> Self {
        BudgetReport {
            name,
            config,
            route,
            fleet,
            fail: None,
            lease_mode: None,
            assessment: assess(config),
        }
    }

    fn to_json(&self) -> Value {
        let c = self.config;
        let a = &self.assessment;
        // From whole nanoseconds, so that 1ns is 1e-6 ms and not 1.0000000000000002e-6.
        let ms = |d: Option<Duration>| d.map(|d| d.as_nanos() as f64 / 1e6);
        let mut doc = json!({
            "name": self.name,
            "max_concurrent": c.max_concurrent(),
            "max_queued": c.max_queued_limit(),
            "permit_timeout_ms": ms(c.permit_timeout_limit()),
            "call_timeout_ms": ms(c.call_timeout_limit()),
            "service_time_ms": ms(c.service_time_hint()),
            "target_rate_per_s": c.target_rate_hint().map(|r| r.events_per_second()),
            "max_rate_per_s": a.max_rate.map(|r| r.events_per_second()),
            "needed_concurrency": a.needed_concurrency,
            "target_exceeds_budget": a.target_exceeds_budget(),
            "limit": limit_kind(c),
            "adaptive": adaptive_json(c),
            "rate_per_s": c.rate_limit().map(|(r, _)| r.events_per_second()),
            "burst": c.rate_limit().map(|(_, b)| b),
            "rate_scope": c.rate_limit().map(|_| if self.fleet { "fleet" } else { "local" }),
            "rate_needs_in_flight": a.rate_in_flight,
            "scope": if self.fleet { "fleet" } else { "local" },
            "fail": self.fail.map(|f| match f {
                FleetFail::Local(_) => "local",
                _ => "closed",
            }),
            "local_limit": match self.fail {
                Some(FleetFail::Local(n)) => Some(n),
                _ => None,
            },
            "lease_mode": self.lease_mode.map(|m| match m {
                LeaseMode::Shares => "shares",
                _ => "per_call",
            }),
            "on_lost": on_lost_name(c.on_lost_policy()),
            "warnings": a.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
        });
        if let Some(classes) = c.priority_classes() {
            doc["classes"] = classes_json(classes, c);
            doc["default_class"] = classes.default_name().into();
            doc["strict"] = classes.is_strict().into();
        }
        if let Some(route) = self.route {
            doc["proxy"] = route_json(route);
        }
        doc
    }
}

/// A budget's classes, in the file's order: each deadline is the one its callers get (the
/// class's own, else the budget's), and `own_permit_timeout` says which.
fn classes_json(classes: &Classes, c: &BudgetConfig) -> Value {
    let ms = |d: Duration| d.as_nanos() as f64 / 1e6;
    classes
        .iter()
        .map(|class| {
            json!({
                "name": class.name(),
                "weight": class.weight(),
                "permit_timeout_ms": class.permit_timeout().or(c.permit_timeout_limit()).map(ms),
                "own_permit_timeout": class.permit_timeout().is_some(),
            })
        })
        .collect()
}

/// A budget's classes' lines: how grants are shared, the default, then one line a class.
fn render_classes(out: &mut String, classes: &Classes, c: &BudgetConfig) {
    use std::fmt::Write;
    let how = if classes.is_strict() {
        "strict priority (the heaviest class with waiters first)"
    } else {
        "weighted fair queuing (grants by weight among the classes with waiters)"
    };
    let _ = writeln!(
        out,
        "  classes         {how}, default {}",
        classes.default_name()
    );
    let width = classes
        .iter()
        .map(|k| k.name().len())
        .max()
        .unwrap_or(0)
        .max(12);
    for class in classes.iter() {
        let deadline = match (class.permit_timeout(), c.permit_timeout_limit()) {
            (Some(own), _) => humantime::format_duration(own).to_string(),
            (None, Some(budget)) => {
                format!("{} (the budget's)", humantime::format_duration(budget))
            }
            (None, None) => "none (the budget's: wait as long as it takes)".to_string(),
        };
        let _ = writeln!(
            out,
            "    {:<width$}  weight {}, permit_timeout {deadline}",
            class.name(),
            class.weight()
        );
    }
}

/// A proxied budget's route, every field (defaults included), as a budgets file names them.
fn route_json(route: &Route) -> Value {
    json!({
        "upstream": route.upstream().url(),
        "listen": route.listen().to_string(),
        "release": release_name(route.release()),
        "overload_status": route.overload_status(),
        "preserve_host": route.preserve_host(),
        "upstream_http2": route.upstream_http2(),
        "overload_on_timeout": route.overload_on_timeout(),
        "on_client_gone": match route.on_client_gone() {
            ClientGone::Finish => "finish",
            _ => "cancel",
        },
        "ca_file": route.ca_file().map(|ca| ca.path().display().to_string()),
        "ca_certificates": route.ca_file().map(|ca| ca.certificates().len()),
        "class_header": route.class_header(),
        "protocol": match route.protocol() {
            Protocol::Grpc => "grpc",
            _ => "http",
        },
        "overload_grpc_status": route.overload_grpc_status().iter().map(|c| GRPC_STATUS_NAMES[*c as usize]).collect::<Vec<_>>(),
    })
}

/// The `[proxy]` table, its defaults filled in.
fn proxy_json(proxy: &ProxyConfig) -> Value {
    let ms = |d: Duration| d.as_nanos() as f64 / 1e6;
    let clients = proxy.clients();
    json!({
        "admin": proxy.admin().map(|a| a.to_string()),
        "drain_ms": ms(proxy.drain()),
        "first_byte_timeout_ms": ms(clients.first_byte_timeout()),
        "idle_timeout_ms": ms(clients.idle_timeout()),
        "http2_keepalive_interval_ms": ms(clients.http2_keepalive_interval()),
        "http2_keepalive_timeout_ms": ms(clients.http2_keepalive_timeout()),
        "max_connections": clients.max_connections(),
    })
}

/// Each listener: its address, default budget and routes (longest prefix first).
fn listeners_json(listeners: &[Listener]) -> Value {
    listeners
        .iter()
        .map(|l| {
            json!({
                "listen": l.addr().to_string(),
                "default": l.default_budget(),
                "routes": l.rules().iter().map(|r| json!({
                    "prefix": r.prefix(),
                    "host": r.host(),
                    "budget": r.budget(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// The table of routes, for listeners that have any: which budget each path prefix goes to.
fn render_listeners(listeners: &[Listener]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for l in listeners.iter().filter(|l| !l.rules().is_empty()) {
        let _ = writeln!(out, "\n[routes on {}] (longest prefix first)", l.addr());
        for r in l.rules() {
            let on = r.host().map(|h| format!(" (host {h})")).unwrap_or_default();
            let _ = writeln!(out, "  {:<24} -> {}{on}", r.prefix(), r.budget());
        }
        let _ = writeln!(
            out,
            "  {:<24} -> {} (default)",
            "anything else",
            l.default_budget()
        );
    }
    out
}

/// `body` or `headers`, as a budgets file names it.
fn release_name(release: Release) -> &'static str {
    match release {
        Release::Headers => "headers",
        _ => "body",
    }
}

/// A proxied budget's lines: where it listens and forwards, and the settings it changes from
/// their defaults.
fn render_route(out: &mut String, route: &Route) {
    use std::fmt::Write;
    let _ = writeln!(out, "  upstream        {}", route.upstream().url());
    let _ = writeln!(out, "  listen          {}", route.listen());
    let release = match route.release() {
        Release::Headers => "headers (the permit goes back once the response headers arrive)",
        _ => "body (the permit goes back once the response body is sent)",
    };
    let _ = writeln!(out, "  release         {release}");
    if route.overload_status() != DEFAULT_OVERLOAD_STATUS {
        let statuses: Vec<String> = route.overload_status().iter().map(u16::to_string).collect();
        let shown = if statuses.is_empty() {
            "none".to_string()
        } else {
            statuses.join(", ")
        };
        let _ = writeln!(out, "  overload_status {shown}");
    }
    if route.preserve_host() {
        let _ = writeln!(
            out,
            "  preserve_host   true (the client's Host header is forwarded unchanged)"
        );
    }
    if route.upstream_http2() {
        let how = if route.upstream().is_tls() {
            "agreed by ALPN"
        } else {
            "with prior knowledge"
        };
        let _ = writeln!(out, "  upstream_http2  true (HTTP/2 {how})");
    }
    if !route.overload_on_timeout() {
        let _ = writeln!(
            out,
            "  overload_on_timeout false (a call past call_timeout tells the limit nothing)"
        );
    }
    if route.on_client_gone() == ClientGone::Finish {
        let _ = writeln!(
            out,
            "  on_client_gone  finish (a call whose client left goes on, holding its permit, until its answer ends or call_timeout)"
        );
    }
    if let Some(header) = route.class_header() {
        let _ = writeln!(
            out,
            "  class_header    {header} (its value names the class; missing or unknown: the default)"
        );
    }
    if route.protocol() == Protocol::Grpc {
        let _ = writeln!(
            out,
            "  protocol        grpc (refusals are gRPC statuses; grpc-status tells the limit of overload)"
        );
    }
    if route.overload_grpc_status() != DEFAULT_OVERLOAD_GRPC_STATUS {
        let names: Vec<&str> = route
            .overload_grpc_status()
            .iter()
            .map(|c| GRPC_STATUS_NAMES[*c as usize])
            .collect();
        let _ = writeln!(out, "  overload_grpc_status {}", names.join(", "));
    }
    if let Some(ca) = route.ca_file() {
        let n = ca.certificates().len();
        let _ = writeln!(
            out,
            "  ca_file         {} ({n} certificate{})",
            shown_path(ca.path()),
            if n == 1 { "" } else { "s" }
        );
    }
}

/// The `[proxy]` table's lines.
fn render_proxy(proxy: &ProxyConfig) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "\n[proxy]");
    match proxy.admin() {
        Some(admin) => {
            let _ = writeln!(out, "  admin           {admin}");
        }
        None => {
            let _ = writeln!(
                out,
                "  admin           none (no /metrics, /healthz, /readyz)"
            );
        }
    }
    let _ = writeln!(
        out,
        "  drain           {}",
        humantime::format_duration(proxy.drain())
    );
    let clients = proxy.clients();
    let shown = humantime::format_duration;
    let _ = writeln!(
        out,
        "  clients         first bytes within {}, idle at most {}, HTTP/2 pinged every {} (answer within {}), at most {} connections per listener",
        shown(clients.first_byte_timeout()),
        shown(clients.idle_timeout()),
        shown(clients.http2_keepalive_interval()),
        shown(clients.http2_keepalive_timeout()),
        clients.max_connections()
    );
    out
}

fn on_lost_name(on_lost: OnLost) -> &'static str {
    match on_lost {
        OnLost::Cancel => "cancel",
        _ => "keep",
    }
}

/// A fleet budget's lines: where its permits live, what it does while Redis is away, and with
/// a call whose lease is lost. Nothing for a budget of this process alone (but `on_lost`, if
/// set).
fn render_scope(out: &mut String, r: &BudgetReport<'_>) {
    use std::fmt::Write;
    let on_lost = r.config.on_lost_policy();
    if !r.fleet {
        if on_lost != OnLost::Keep {
            let _ = writeln!(out, "  on_lost         {}", on_lost_name(on_lost));
        }
        return;
    }
    let mode = match r.lease_mode {
        Some(LeaseMode::Shares) => {
            "shares (a share of the limit per process, moved as demand moves)"
        }
        _ => "per_call (a fleet lease for each call)",
    };
    let _ = writeln!(
        out,
        "  scope           fleet: max_concurrent is the limit of every replica together"
    );
    let _ = writeln!(out, "  lease_mode      {mode}");
    let fail = match r.fail {
        Some(FleetFail::Local(n)) => format!(
            "local, local_limit {n} (while Redis cannot be reached, each process runs at most {n}, its fleet calls included, from a lease and a third into the outage)"
        ),
        _ => "closed (calls are refused while Redis cannot be reached)".to_string(),
    };
    let _ = writeln!(out, "  fail            {fail}");
    let _ = writeln!(
        out,
        "  on_lost         {}",
        match on_lost {
            OnLost::Cancel => "cancel (a call whose lease is lost is dropped)",
            _ => "keep (a call whose lease is lost runs on to its end)",
        }
    );
}

/// The topology a fleet URL names, before anything connects.
fn fleet_topology(url: &str) -> &'static str {
    match url.split_once("://").map(|(scheme, _)| scheme) {
        Some("redis+cluster" | "rediss+cluster") => "cluster",
        Some("redis+sentinel" | "rediss+sentinel") => "sentinel",
        _ => "standalone or cluster (found on connect)",
    }
}

fn fleet_json(fleet: &FleetConfig) -> Value {
    json!({
        "url": fleet.shown_url(),
        "topology": fleet_topology(fleet.url()),
        "tls": fleet.url().starts_with("rediss"),
        "lease_ms": fleet.lease().map(|d| d.as_nanos() as f64 / 1e6),
        "ca_file": fleet.ca_file().map(|p| p.display().to_string()),
    })
}

fn render_fleet(fleet: &FleetConfig) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "\n[fleet]");
    let _ = writeln!(out, "  url             {}", fleet.shown_url());
    let _ = writeln!(out, "  topology        {}", fleet_topology(fleet.url()));
    let _ = writeln!(
        out,
        "  lease           {}",
        match fleet.lease() {
            Some(lease) => humantime::format_duration(lease).to_string(),
            None => "5s (the default)".to_string(),
        }
    );
    if let Some(ca) = fleet.ca_file() {
        let _ = writeln!(out, "  ca_file         {}", shown_path(ca));
    }
    out
}

/// A path as a terminal should show it: as it is, or quoted with control characters escaped.
fn shown_path(path: &std::path::Path) -> String {
    let text = path.display().to_string();
    if text.chars().any(char::is_control) {
        format!("{text:?}")
    } else {
        text
    }
}

fn duration(d: Option<Duration>, none: &str) -> String {
    d.map(|d| humantime::format_duration(d).to_string())
        .unwrap_or_else(|| none.to_string())
}

fn render(file: &str, reports: &[BudgetReport<'_>]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let warnings: usize = reports.iter().map(|r| r.assessment.warnings.len()).sum();
    let _ = writeln!(
        out,
        "{file}: valid, {} budget{}, {warnings} warning{}",
        reports.len(),
        if reports.len() == 1 { "" } else { "s" },
        if warnings == 1 { "" } else { "s" }
    );
    for r in reports {
        let c = r.config;
        let a = &r.assessment;
        let _ = writeln!(out, "\n[{}]", shown_name(r.name));
        let _ = writeln!(out, "  max_concurrent  {}", c.max_concurrent());
        if let Some(adaptive) = adaptive_line(c) {
            let _ = writeln!(out, "  limit           {adaptive}");
        }
        let queued = match c.max_queued_limit() {
            None => "unbounded".to_string(),
            Some(0) => "0 (fail fast when all permits are held)".to_string(),
            Some(n) => n.to_string(),
        };
        let _ = writeln!(out, "  max_queued      {queued}");
        let _ = writeln!(
            out,
            "  permit_timeout  {}",
            duration(c.permit_timeout_limit(), "none (wait as long as it takes)")
        );
        let _ = writeln!(
            out,
            "  call_timeout    {}",
            duration(
                c.call_timeout_limit(),
                "none (set one: calls that hang hold their permit forever)"
            )
        );
        if let Some(classes) = c.priority_classes() {
            render_classes(&mut out, classes, c);
        }
        render_scope(&mut out, r);
        match (c.service_time_hint(), a.max_rate) {
            (Some(t), Some(rate)) => {
                let _ = writeln!(
                    out,
                    "  service_time    {}  -> at most {} through this budget ({} / {})",
                    humantime::format_duration(t),
                    per_s(rate.events_per_second()),
                    c.max_concurrent(),
                    humantime::format_duration(t)
                );
            }
            _ => {
                let _ = writeln!(
                    out,
                    "  service_time    not given (add it to see the most this budget lets through)"
                );
            }
        }
        if let Some(target) = c.target_rate_hint() {
            match a.needed_concurrency {
                Some(needed) => {
                    let verdict = verdict(a.target_exceeds_budget(), c);
                    let _ = writeln!(
                        out,
                        "  target_rate     {}  -> needs {needed:.1} in flight ({} x {}): {verdict}",
                        per_s(target.events_per_second()),
                        per_s(target.events_per_second()),
                        duration(c.service_time_hint(), "?")
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "  target_rate     {}  (add service_time to size it)",
                        per_s(target.events_per_second())
                    );
                }
            }
        }
        if let Some((rate, burst)) = c.rate_limit() {
            let rate_text = per_s(rate.events_per_second());
            match a.rate_in_flight {
                Some(needed) => {
                    let verdict = verdict(a.rate_exceeds_budget(), c);
                    let _ = writeln!(
                        out,
                        "  rate            {rate_text}, burst {burst}  -> needs {needed:.1} in flight ({rate_text} x {}): {verdict}",
                        duration(c.service_time_hint(), "?")
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "  rate            {rate_text}, burst {burst}  (add service_time to see the calls in flight it needs)"
                    );
                }
            }
            if r.fleet {
                let _ = writeln!(
                    out,
                    "  rate_scope      fleet (one rate for every replica together, kept in the fleet's store; no rate per process)"
                );
            }
        }
        if let Some(route) = r.route {
            render_route(&mut out, route);
        }
        for w in &a.warnings {
            let _ = writeln!(out, "  warning: {w}");
        }
    }
    out
}

/// The library's verdict on the calls in flight a target or a rate limit needs, as the table
/// shows it.
fn verdict(exceeds: Option<bool>, c: &BudgetConfig) -> String {
    if exceeds == Some(true) {
        format!("EXCEEDS max_concurrent {}", c.max_concurrent())
    } else {
        format!("fits within {}", c.max_concurrent())
    }
}

/// A budget's name as a terminal should show it: bare when it is a plain key, else quoted with
/// newlines and control characters escaped.
fn shown_name(name: &str) -> String {
    let bare = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare && !name.is_empty() {
        name.to_string()
    } else {
        format!("{name:?}")
    }
}

/// `fixed` or `adaptive`, as a budgets file names it.
fn limit_kind(c: &BudgetConfig) -> &'static str {
    if c.adaptive_limit().is_some() {
        "adaptive"
    } else {
        "fixed"
    }
}

fn adaptive_json(c: &BudgetConfig) -> Value {
    match c.adaptive_limit() {
        Some(a) => json!({
            "algorithm": a.algorithm().as_str(),
            "min": a.min_limit(),
            "initial": a.initial_limit(),
            "max": c.max_concurrent(),
            "backoff": a.backoff_factor(),
            "cold_start_ms": a.cold_start_spread().as_nanos() as f64 / 1e6,
            "probe_hold": a.probe_hold_round_trips(),
        }),
        None => Value::Null,
    }
}

fn adaptive_line(c: &BudgetConfig) -> Option<String> {
    let a = c.adaptive_limit()?;
    let start = if a.cold_start_spread().is_zero() {
        "all at once".to_string()
    } else {
        format!(
            "spread over {}",
            humantime::format_duration(a.cold_start_spread())
        )
    };
    let hold = match a.probe_hold_round_trips() {
        0 => String::new(),
        n => format!(", probes held up to {n} round trips after an overload"),
    };
    Some(format!(
        "adaptive ({}), from {} within {}..={} (cold start {start}{hold}): learnt from how calls end",
        a.algorithm(),
        a.initial_limit(),
        a.min_limit(),
        c.max_concurrent()
    ))
}

/// As the library prints rates (and warnings): whole numbers plain, two decimals above 1/s, two
/// significant digits below (a slow budget is "0.0033/s", not "0/s").
fn per_s(rate: f64) -> String {
    Rate::per_second(rate).to_string()
}
