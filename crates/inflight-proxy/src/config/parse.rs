//! Checks the proxy's keys of a budgets file, each mistake named by its path.

use std::io::Read;
use std::net::SocketAddr;

use inflight::config::value::{duration, integer, short, shown, Table, Value};
use inflight::config::{budget_path, BudgetsFile};
use inflight::ConfigError;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use super::routes;
use super::{
    CaFile, ClientGone, Listener, Protocol, ProxyConfig, Release, Route, Upstream,
    DEFAULT_OVERLOAD_GRPC_STATUS, DEFAULT_OVERLOAD_STATUS, GRPC_STATUS_NAMES, MAX_CLASS_HEADER,
    PROXY_FIELDS, ROUTE_FIELDS,
};

/// The name of the admin listener in the connection metrics' `listener` label.
pub(crate) const ADMIN_LISTENER: &str = "admin";

/// The longest timeout on client connections (and drain) taken.
const MAX_CLIENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// The shortest timeout on client connections taken: below it a connection would be closed
/// before a client on loopback could send its first request ("1ns" for "1s" included).
const MIN_CLIENT_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1);

/// The most client connections per listener taken: more than any file-descriptor limit.
const MAX_CONNECTIONS: usize = 10_000_000;

/// The most bytes of a `ca_file` read: a bundle of root certificates is far smaller.
const MAX_CA_FILE: u64 = 4 * 1024 * 1024;

/// What [`proxy_keys`] read: the `[proxy]` table, the routes by budget, the listeners, and the
/// mistakes.
pub(super) type ProxyKeys = (
    Option<ProxyConfig>,
    Vec<(String, Route)>,
    Vec<Listener>,
    Vec<ConfigError>,
);

/// The proxy's keys of `file`: its `[proxy]` table, each proxied budget's route (by name, in
/// file order), the listeners, and every mistake among them.
pub(super) fn proxy_keys(file: &BudgetsFile) -> ProxyKeys {
    let mut errors = Vec::new();
    let proxy = file
        .table("proxy")
        .and_then(|v| proxy_config(v).map_err(|e| errors.push(e)).ok());
    let mut routes = Vec::new();
    let mut own = Vec::new();
    for (name, table) in file.budget_tables() {
        let path = budget_path(name);
        match route(table, &|f| format!("{path}.{f}"), file) {
            Ok(Some((route, listens))) => {
                if listens {
                    own.push((name.to_string(), route.listen));
                }
                routes.push((name.to_string(), route));
            }
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    let rule_values = file
        .table("proxy")
        .and_then(Value::as_table)
        .and_then(|t| t.get("routes"));
    let (rules, wrong) = routes::rules(rule_values, &address);
    errors.extend(wrong);
    let proxied: Vec<String> = routes.iter().map(|(n, _)| n.clone()).collect();
    let (listeners, wrong) = routes::listeners(rules, &proxied, &own);
    errors.extend(wrong);
    // A listener is named by its default budget in the metrics, and the admin listener is
    // `admin`: the two would share their series.
    if listeners.iter().any(|l| l.default == ADMIN_LISTENER) {
        errors.push(ConfigError::invalid(
            format!("budgets.{ADMIN_LISTENER}"),
            format!(
                "a budget that names a listener may not be called {ADMIN_LISTENER:?}: the admin listener's metrics carry listener=\"{ADMIN_LISTENER}\"; choose another name"
            ),
        ));
    }
    // A budget without a listen of its own listens where the first route to it is.
    for (name, route) in &mut routes {
        if own.iter().any(|(n, _)| n == name) {
            continue;
        }
        if let Some(l) = listeners
            .iter()
            .find(|l| l.default == *name || l.rules.iter().any(|r| r.budget == *name))
        {
            route.listen = l.addr;
        }
    }
    let named: Vec<(String, SocketAddr)> = own.clone();
    if let Err(e) = distinct_addresses(&named, proxy.as_ref()) {
        errors.push(e);
    }
    // An upstream that is one of the proxy's own listeners: each request would come back to
    // the proxy, and again, until the client gave up.
    for (name, route) in &routes {
        let upstream = route.upstream();
        let looped = listeners.iter().map(|l| l.addr).find(|addr| {
            addr.port() != 0
                && addr.port() == upstream.port()
                && upstream.host().trim_matches(['[', ']']).parse() == Ok(addr.ip())
        });
        if let Some(addr) = looped {
            errors.push(ConfigError::invalid(
                format!("{}.upstream", budget_path(name)),
                format!(
                    "{} is this proxy's own listener {addr}: every request would come back to it",
                    upstream.url()
                ),
            ));
        }
    }
    // A listener only routes name may not take the admin address either.
    if let Some(admin) = proxy
        .as_ref()
        .and_then(|p| p.admin)
        .filter(|a| a.port() != 0)
    {
        let routed_only = listeners
            .iter()
            .any(|l| l.addr == admin && !own.iter().any(|(_, a)| *a == admin));
        if routed_only {
            errors.push(ConfigError::invalid(
                "proxy.admin",
                format!("{admin} is already the listen address of a [[proxy.routes]] entry"),
            ));
        }
    }
    (proxy, routes, listeners, errors)
}

/// The `[proxy]` table.
fn proxy_config(value: &Value) -> Result<ProxyConfig, ConfigError> {
    let table = value.as_table().ok_or_else(|| {
        ConfigError::invalid(
            "proxy",
            format!("must be a table, got {}", value.type_str()),
        )
    })?;
    let mut errors = Vec::new();
    for key in table.keys() {
        if !PROXY_FIELDS.contains(&key.as_str()) {
            errors.push(ConfigError::invalid(
                format!("proxy.{key}"),
                format!("unknown key (expected one of {})", PROXY_FIELDS.join(", ")),
            ));
        }
    }
    let mut config = ProxyConfig::default();
    if let Some(v) = table.get("admin") {
        match address("proxy.admin", v) {
            Ok(a) => config.admin = Some(a),
            Err(e) => errors.push(e),
        }
    }
    let clients = &mut config.clients;
    // Each with the shortest value it takes: `drain` any (from 1ns), a client timeout 1ms.
    let any = std::time::Duration::ZERO;
    for (key, slot, min) in [
        ("drain", &mut config.drain, any),
        (
            "first_byte_timeout",
            &mut clients.first_byte_timeout,
            MIN_CLIENT_TIMEOUT,
        ),
        (
            "idle_timeout",
            &mut clients.idle_timeout,
            MIN_CLIENT_TIMEOUT,
        ),
        (
            "http2_keepalive_interval",
            &mut clients.http2_keepalive_interval,
            MIN_CLIENT_TIMEOUT,
        ),
        (
            "http2_keepalive_timeout",
            &mut clients.http2_keepalive_timeout,
            MIN_CLIENT_TIMEOUT,
        ),
    ] {
        if let Some(v) = table.get(key) {
            match duration(&format!("proxy.{key}"), v) {
                Ok(d) if d > MAX_CLIENT_TIMEOUT => errors.push(ConfigError::invalid(
                    format!("proxy.{key}"),
                    format!("must be at most 7 days, got {}", shown(v)),
                )),
                Ok(d) if d < min => errors.push(ConfigError::invalid(
                    format!("proxy.{key}"),
                    format!("must be at least {min:?}, got {}", shown(v)),
                )),
                Ok(d) => *slot = d,
                Err(e) => errors.push(e),
            }
        }
    }
    if let Some(v) = table.get("max_connections") {
        match integer("proxy.max_connections", v, 1) {
            Ok(n) if n > MAX_CONNECTIONS => errors.push(ConfigError::invalid(
                "proxy.max_connections",
                format!("must be at most {MAX_CONNECTIONS}, got {n}"),
            )),
            Ok(n) => clients.max_connections = n,
            Err(e) => errors.push(e),
        }
    }
    match ConfigError::join(errors) {
        Some(e) => Err(e),
        None => Ok(config),
    }
}

/// A budget's route, if it is proxied, and whether it has a `listen` of its own (else a
/// `[[proxy.routes]]` entry must name it, and its listen address is that route's); `field`
/// makes the dotted path of one of its keys. Relative paths (`ca_file`) are taken from the
/// file's folder.
fn route(
    table: &Table,
    field: &dyn Fn(&str) -> String,
    file: &BudgetsFile,
) -> Result<Option<(Route, bool)>, ConfigError> {
    let (upstream, listen) = match (table.get("upstream"), table.get("listen")) {
        (None, None) => {
            return match ROUTE_FIELDS.iter().find(|k| table.contains_key(**k)) {
                Some(key) => Err(ConfigError::invalid(
                    field(key),
                    "only a proxied budget takes this (add upstream and listen)",
                )),
                None => Ok(None),
            };
        }
        (Some(u), None) => (u, None),
        (None, Some(_)) => {
            return Err(ConfigError::invalid(
                field("upstream"),
                "missing (a budget with listen needs the URL to forward to, e.g. \"http://127.0.0.1:7070\")",
            ))
        }
        (Some(u), Some(l)) => (u, Some(l)),
    };
    let mut errors = Vec::new();
    let upstream = upstream_url(&field("upstream"), upstream).map_err(|e| errors.push(e));
    let listens = listen.is_some();
    let listen = match listen {
        Some(l) => address(&field("listen"), l).map_err(|e| errors.push(e)),
        // Filled in from the route that names the budget.
        None => Ok(SocketAddr::from(([0, 0, 0, 0], 0))),
    };
    let release = match table.get("release") {
        None => Release::Body,
        Some(Value::String(s)) if s == "body" => Release::Body,
        Some(Value::String(s)) if s == "headers" => Release::Headers,
        Some(other) => {
            errors.push(ConfigError::invalid(
                field("release"),
                format!("must be \"body\" or \"headers\", got {}", shown(other)),
            ));
            Release::Body
        }
    };
    let on_client_gone = match table.get("on_client_gone") {
        None => ClientGone::Cancel,
        Some(Value::String(s)) if s == "cancel" => ClientGone::Cancel,
        Some(Value::String(s)) if s == "finish" => {
            if !table.contains_key("call_timeout") {
                errors.push(ConfigError::invalid(
                    field("on_client_gone"),
                    "\"finish\" needs the budget's call_timeout (add call_timeout = \"10s\", say): \
                     it bounds how long a call whose client left may hold its permit",
                ));
            }
            ClientGone::Finish
        }
        Some(other) => {
            errors.push(ConfigError::invalid(
                field("on_client_gone"),
                format!("must be \"cancel\" or \"finish\", got {}", shown(other)),
            ));
            ClientGone::Cancel
        }
    };
    let overload_status = match table.get("overload_status") {
        None => DEFAULT_OVERLOAD_STATUS.to_vec(),
        Some(v) => statuses(&field("overload_status"), v).unwrap_or_else(|e| {
            errors.push(e);
            Vec::new()
        }),
    };
    let mut flag = |key: &str, default: bool| match table.get(key) {
        None => default,
        Some(Value::Boolean(b)) => *b,
        Some(other) => {
            errors.push(ConfigError::invalid(
                field(key),
                format!("must be true or false, got {}", shown(other)),
            ));
            false
        }
    };
    let preserve_host = flag("preserve_host", false);
    // gRPC needs HTTP/2 to the upstream: a gRPC budget speaks it unless told otherwise, which is
    // refused below.
    let grpc = table.get("protocol").and_then(Value::as_str) == Some("grpc");
    let upstream_http2 = flag("upstream_http2", grpc);
    let overload_on_timeout = flag("overload_on_timeout", true);
    if grpc && !upstream_http2 && table.get("upstream_http2").is_some_and(Value::is_bool) {
        errors.push(ConfigError::invalid(
            field("upstream_http2"),
            "a budget with protocol = \"grpc\" needs HTTP/2 to its upstream: remove \
             upstream_http2 = false (a gRPC budget speaks HTTP/2 to its upstream by default)",
        ));
    }
    let ca_file = match (table.get("ca_file"), &upstream) {
        (None, _) => None,
        (Some(v), Ok(u)) if !u.tls => {
            errors.push(ConfigError::invalid(
                field("ca_file"),
                format!(
                    "{} is a CA file, and only an https:// upstream takes one, not {}",
                    v.as_str().map_or_else(|| shown(v), short),
                    short(&u.url)
                ),
            ));
            None
        }
        (Some(v), _) => ca_file(&field("ca_file"), v, file)
            .map_err(|e| errors.push(e))
            .ok(),
    };
    let protocol = match table.get("protocol") {
        None => Protocol::Http,
        Some(Value::String(s)) if s == "http" => Protocol::Http,
        Some(Value::String(s)) if s == "grpc" => Protocol::Grpc,
        Some(other) => {
            errors.push(ConfigError::invalid(
                field("protocol"),
                format!("must be \"http\" or \"grpc\", got {}", shown(other)),
            ));
            Protocol::Http
        }
    };
    let overload_grpc_status = match table.get("overload_grpc_status") {
        None => DEFAULT_OVERLOAD_GRPC_STATUS.to_vec(),
        Some(v) => grpc_statuses(&field("overload_grpc_status"), v).unwrap_or_else(|e| {
            errors.push(e);
            Vec::new()
        }),
    };
    let class_header = match table.get("class_header") {
        None => None,
        Some(_) if !table.contains_key("classes") => {
            errors.push(ConfigError::invalid(
                field("class_header"),
                "only a budget with classes takes this (add classes = { interactive = 4, batch = 1 })",
            ));
            None
        }
        Some(v) => header_name(&field("class_header"), v)
            .map_err(|e| errors.push(e))
            .ok(),
    };
    if let Some(e) = ConfigError::join(errors) {
        return Err(e);
    }
    let (Ok(upstream), Ok(listen)) = (upstream, listen) else {
        unreachable!("an error in either was returned above");
    };
    Ok(Some((
        Route {
            upstream,
            listen,
            release,
            overload_status,
            preserve_host,
            upstream_http2,
            overload_on_timeout,
            ca_file,
            class_header,
            protocol,
            overload_grpc_status,
            on_client_gone,
        },
        listens,
    )))
}

/// An HTTP header's name (RFC 9110 section 5.1: a token), in lower case.
fn header_name(field: &str, value: &Value) -> Result<String, ConfigError> {
    let Some(name) = value.as_str() else {
        return Err(ConfigError::invalid(
            field,
            format!(
                "must be a header name like \"x-priority\", got {}",
                shown(value)
            ),
        ));
    };
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(ConfigError::invalid(
            field,
            format!(
                "must be a header name like \"x-priority\" (letters, digits and !#$%&'*+-.^_`|~), got {}",
                short(name)
            ),
        ));
    }
    if name.len() > MAX_CLASS_HEADER {
        return Err(ConfigError::invalid(
            field,
            format!(
                "must be at most {MAX_CLASS_HEADER} characters, got {}",
                name.len()
            ),
        ));
    }
    Ok(name.to_ascii_lowercase())
}

/// A `ca_file`: a path to a PEM file of one or more certificates, read and checked now.
fn ca_file(field: &str, value: &Value, file: &BudgetsFile) -> Result<CaFile, ConfigError> {
    let written = match value.as_str() {
        Some(p) if !p.trim().is_empty() => p,
        _ => {
            return Err(ConfigError::invalid(
                field,
                format!(
                    "must be the path of a PEM file like \"ca.pem\", got {}",
                    shown(value)
                ),
            ))
        }
    };
    let path = file.resolve(written);
    let shown = short(&path.display().to_string());
    let bad = |why: String| ConfigError::invalid(field, format!("{shown}: {why}"));
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(MAX_CA_FILE + 1).read_to_end(&mut bytes))
        .map_err(|e| bad(format!("cannot read it: {e}")))?;
    if bytes.len() as u64 > MAX_CA_FILE {
        return Err(bad("is larger than 4 MiB, too large for a CA file".into()));
    }
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("is not valid PEM: {e}")))?;
    if certificates.is_empty() {
        return Err(bad(
            "holds no PEM certificate (a -----BEGIN CERTIFICATE----- block)".into(),
        ));
    }
    // Parsed as the proxy's TLS library will take them as roots, so that a file that loads works.
    for (i, der) in certificates.iter().enumerate() {
        if let Err(e) = webpki::anchor_from_trusted_cert(&CertificateDer::from(der.as_slice())) {
            return Err(bad(format!(
                "certificate {} of {} is not a valid X.509 certificate: {e}",
                i + 1,
                certificates.len()
            )));
        }
    }
    Ok(CaFile { path, certificates })
}

/// Checks across budgets: no two listen on one address, and the admin server on none of theirs.
fn distinct_addresses(
    routes: &[(String, SocketAddr)],
    proxy: Option<&ProxyConfig>,
) -> Result<(), ConfigError> {
    let mut errors = Vec::new();
    for (i, (name, addr)) in routes.iter().enumerate() {
        let addr = *addr;
        if addr.port() == 0 {
            continue;
        }
        if let Some((first, _)) = routes[..i].iter().find(|(_, r)| *r == addr) {
            errors.push(ConfigError::invalid(
                format!("{}.listen", budget_path(name)),
                format!(
                    "{addr} is already the listen address of {}",
                    budget_path(first)
                ),
            ));
        }
    }
    if let Some(admin) = proxy.and_then(|p| p.admin).filter(|a| a.port() != 0) {
        if let Some((name, _)) = routes.iter().find(|(_, r)| *r == admin) {
            errors.push(ConfigError::invalid(
                "proxy.admin",
                format!(
                    "{admin} is already the listen address of {}",
                    budget_path(name)
                ),
            ));
        }
    }
    match ConfigError::join(errors) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// An address to listen on: an IP address and a port (`127.0.0.1:7002`, `[::1]:7002`).
fn address(field: &str, value: &Value) -> Result<SocketAddr, ConfigError> {
    let text = value.as_str().ok_or_else(|| {
        ConfigError::invalid(
            field,
            format!(
                "must be an address string like \"127.0.0.1:7002\", got {}",
                shown(value)
            ),
        )
    })?;
    text.trim().parse().map_err(|_| {
        ConfigError::invalid(
            field,
            format!(
                "must be an IP address and port like \"127.0.0.1:7002\", got {}",
                short(text)
            ),
        )
    })
}

/// An upstream URL: `http://host[:port]` or `https://host[:port]`, with nothing after the
/// authority but an optional `/`.
fn upstream_url(field: &str, value: &Value) -> Result<Upstream, ConfigError> {
    let text = value.as_str().ok_or_else(|| {
        ConfigError::invalid(
            field,
            format!(
                "must be a URL string like \"http://127.0.0.1:7070\", got {}",
                shown(value)
            ),
        )
    })?;
    let shown = short(text);
    let bad = |why: &str| ConfigError::invalid(field, format!("{why}, got {shown}"));
    let trimmed = text.trim();
    let (rest, tls) = if let Some(rest) = strip_prefix_ignore_case(trimmed, "http://") {
        (rest, false)
    } else if let Some(rest) = strip_prefix_ignore_case(trimmed, "https://") {
        (rest, true)
    } else {
        return Err(bad(
            "must start with http:// or https:// (a URL like \"http://127.0.0.1:7070\")",
        ));
    };
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if !path.is_empty() && path != "/" {
        return Err(bad(
            "must not have a path, query or fragment (requests keep their own path)",
        ));
    }
    if authority.contains('@') {
        return Err(bad("must not carry a user name or password"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some(end) = v6.find(']') else {
            return Err(bad("has an unclosed [ in its host"));
        };
        let host = &authority[..end + 2];
        if v6[..end].parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad("has an invalid IPv6 address between [ and ]"));
        }
        (host, &authority[end + 2..])
    } else {
        match authority.find(':') {
            Some(i) => (&authority[..i], &authority[i..]),
            None => (authority, ""),
        }
    };
    let valid_host = !host.is_empty()
        && (host.starts_with('[')
            || host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_'));
    if !valid_host {
        return Err(bad("must name a host, like \"http://127.0.0.1:7070\""));
    }
    let port = match port.strip_prefix(':') {
        None if port.is_empty() && tls => 443,
        None if port.is_empty() => 80,
        None => return Err(bad("has something after its host that is not a port")),
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => return Err(bad("must have a port from 1 to 65535")),
            Ok(n) => n,
        },
    };
    Ok(Upstream {
        url: trimmed.trim_end_matches('/').to_string(),
        tls,
        authority: authority.to_string(),
        host: host.to_string(),
        port,
    })
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// A list of HTTP statuses, each from 100 to 599.
fn statuses(field: &str, value: &Value) -> Result<Vec<u16>, ConfigError> {
    let Value::Array(items) = value else {
        return Err(ConfigError::invalid(
            field,
            format!(
                "must be a list of HTTP statuses like [429, 503], got {}",
                shown(value)
            ),
        ));
    };
    items
        .iter()
        .map(|item| match item.as_integer() {
            Some(n @ 100..=599) => Ok(n as u16),
            _ => Err(ConfigError::invalid(
                field,
                format!(
                    "each status must be a whole number from 100 to 599, got {}",
                    shown(item)
                ),
            )),
        })
        .collect()
}

/// A list of gRPC status codes, each a name (`"UNAVAILABLE"`) or a number from 1 to 16.
fn grpc_statuses(field: &str, value: &Value) -> Result<Vec<u32>, ConfigError> {
    let Value::Array(items) = value else {
        return Err(ConfigError::invalid(
            field,
            format!(
                "must be a list of gRPC statuses like [\"RESOURCE_EXHAUSTED\", \"UNAVAILABLE\"], got {}",
                shown(value)
            ),
        ));
    };
    items
        .iter()
        .map(|item| {
            let code = match item {
                Value::String(name) => GRPC_STATUS_NAMES
                    .iter()
                    .position(|n| n.eq_ignore_ascii_case(name))
                    .map(|i| i as u32),
                Value::Integer(n) => u32::try_from(*n).ok(),
                _ => None,
            };
            match code {
                Some(c @ 1..=16) => Ok(c),
                _ => Err(ConfigError::invalid(
                    field,
                    format!(
                        "each status must be a gRPC status name other than OK (like \"UNAVAILABLE\") or a number from 1 to 16, got {}",
                        shown(item)
                    ),
                )),
            }
        })
        .collect()
}
