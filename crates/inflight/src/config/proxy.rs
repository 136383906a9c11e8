//! The proxy's keys of a budgets file: the `[proxy]` table ([`ProxyConfig`]) and, per budget,
//! where `inflight proxy` listens for it and forwards to ([`Route`]).
//!
//! ```toml
//! [proxy]
//! admin = "127.0.0.1:9901"   # optional: GET /metrics, /healthz, /readyz
//! drain = "10s"              # optional: on SIGTERM, how long in-flight requests may finish
//!
//! [budgets.records]
//! max_concurrent = 6
//! upstream = "http://127.0.0.1:7070"   # where requests go, once they hold a permit
//! listen = "127.0.0.1:7002"            # where the application sends them instead
//! release = "body"                     # "body" (the default) or "headers": when the permit goes back
//! overload_status = [429, 503]         # upstream answers that mean overload (the default)
//! preserve_host = false                # true: forward the client's Host header unchanged
//! upstream_http2 = false               # true: HTTP/2 to the upstream (h2c, or h2 by ALPN)
//! overload_on_timeout = true           # false: a call past call_timeout tells the limit nothing
//!
//! [budgets.billing]
//! max_concurrent = 4
//! upstream = "https://billing.internal:8443"  # TLS to the upstream (port 443 if none is given)
//! listen = "127.0.0.1:7003"
//! ca_file = "certs/billing-ca.pem"     # optional: trust these PEM certificates, not the system's
//! ```
//!
//! A budget with priority classes may take each request's class from a header of the request:
//!
//! ```toml
//! [budgets.search]
//! max_concurrent = 4
//! classes = { interactive = 4, batch = 1 }
//! upstream = "http://127.0.0.1:7080"
//! listen = "127.0.0.1:7004"
//! class_header = "x-priority"          # "x-priority: interactive"; missing or unknown: the default class
//! ```
//!
//! The header is a property of the budget's listener, so it sits with the route's keys: each
//! proxied budget listens on its own address and may read its own header. Its value is matched
//! exactly against the class names; a missing header, a value that is not visible ASCII or is
//! longer than a class name may be, or one that names no class puts the request in the default
//! class (never an error). The header is forwarded unchanged.
//!
//! Clients may speak HTTP/1.1 or HTTP/2 with prior knowledge to `listen`, whichever this says;
//! `listen` is plain HTTP, meant for a sidecar on loopback.
//!
//! An `https://` upstream is spoken to over TLS (rustls): the server name sent (SNI) and the name
//! its certificate must carry are the upstream's host. The certificate is checked against the
//! system's root certificates, or, with `ca_file`, against the certificates of that PEM file
//! alone. A relative `ca_file` is taken from the budgets file's folder
//! ([`Budgets::from_path`](crate::Budgets::from_path)), or from the current directory for text
//! ([`Budgets::from_toml_str`](crate::Budgets::from_toml_str)). The file is read and checked
//! when the budgets file is loaded: one that cannot be read, holds no PEM certificate or one
//! that does not parse as X.509, is refused then, as is `ca_file` on an `http://` upstream. With `upstream_http2 = true`, an
//! `https://` upstream must agree to HTTP/2 by ALPN (`h2`).
//!
//! A budget with `upstream` and `listen` is proxied; one with neither is not, and one with only
//! one of them is refused.

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use toml::{Table, Value};

use super::ConfigError;

/// How long a draining proxy lets in-flight requests finish when the file says nothing.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

/// Upstream answers that mean overload when the file says nothing: 429 and 503.
pub const DEFAULT_OVERLOAD_STATUS: &[u16] = &[429, 503];

/// Keys of a budget's table that only a proxied budget takes.
pub(super) const ROUTE_FIELDS: &[&str] = &[
    "upstream",
    "listen",
    "release",
    "overload_status",
    "preserve_host",
    "upstream_http2",
    "overload_on_timeout",
    "ca_file",
    "class_header",
];

/// The longest `class_header` name taken.
pub const MAX_CLASS_HEADER: usize = 128;

/// The most bytes of a `ca_file` read: a bundle of root certificates is far smaller.
const MAX_CA_FILE: u64 = 4 * 1024 * 1024;

/// Keys of the `[proxy]` table.
const PROXY_FIELDS: &[&str] = &["admin", "drain"];

/// The `[proxy]` table of a budgets file: settings of `inflight proxy` as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    admin: Option<SocketAddr>,
    drain: Duration,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            admin: None,
            drain: DEFAULT_DRAIN,
        }
    }
}

impl ProxyConfig {
    /// Where the admin server listens (`/metrics`, `/healthz`, `/readyz`), if anywhere.
    pub fn admin(&self) -> Option<SocketAddr> {
        self.admin
    }

    /// How long in-flight requests may finish once the proxy is told to stop
    /// ([`DEFAULT_DRAIN`] unless the file says).
    pub fn drain(&self) -> Duration {
        self.drain
    }
}

/// When a proxied request gives its permit back (`release` in a budgets file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Release {
    /// Once the response body has been sent to the client in full (`release = "body"`, the
    /// default): a streamed body keeps the dependency busy until it ends.
    #[default]
    Body,
    /// As soon as the upstream's response headers arrive (`release = "headers"`).
    Headers,
}

/// An `http://` or `https://` upstream, as a budgets file names it: scheme, host and port, no
/// path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    url: String,
    tls: bool,
    authority: String,
    host: String,
    port: u16,
}

impl Upstream {
    /// The URL as written (`http://127.0.0.1:7070`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The scheme: `"http"` or `"https"`.
    pub fn scheme(&self) -> &str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }

    /// Whether the upstream is spoken to over TLS (`https://`).
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// Host and port as written in the URL (`127.0.0.1:7070`, `records.internal`): what a
    /// forwarded request's `Host` header says.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The host (`127.0.0.1`, `records.internal`, `[::1]`).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port: as written, else 80 (`http://`) or 443 (`https://`).
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Where `inflight proxy` listens for a budget's requests and where it forwards them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    upstream: Upstream,
    listen: SocketAddr,
    release: Release,
    overload_status: Vec<u16>,
    preserve_host: bool,
    upstream_http2: bool,
    overload_on_timeout: bool,
    ca_file: Option<CaFile>,
    class_header: Option<String>,
}

/// The certificates an `https://` upstream's certificate is checked against instead of the
/// system's (`ca_file` in a budgets file), as read when the file was loaded.
#[derive(Clone, PartialEq, Eq)]
pub struct CaFile {
    path: PathBuf,
    certificates: Vec<Vec<u8>>,
}

impl CaFile {
    /// Where the certificates were read from (a relative `ca_file` joined to the budgets file's
    /// folder).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The certificates, DER-encoded, in file order; at least one.
    pub fn certificates(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.certificates.iter().map(Vec::as_slice)
    }
}

impl std::fmt::Debug for CaFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaFile")
            .field("path", &self.path)
            .field("certificates", &self.certificates.len())
            .finish()
    }
}

impl Route {
    /// Where requests are forwarded once they hold a permit.
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// Where the proxy listens for this budget's requests (port 0: any free port).
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }

    /// When a request gives its permit back.
    pub fn release(&self) -> Release {
        self.release
    }

    /// Upstream statuses that tell the budget's limit the upstream is overloaded.
    pub fn overload_status(&self) -> &[u16] {
        &self.overload_status
    }

    /// Whether the client's `Host` header is forwarded unchanged (else it names the upstream).
    pub fn preserve_host(&self) -> bool {
        self.preserve_host
    }

    /// Whether the upstream is spoken to in HTTP/2, all requests sharing one connection, rather
    /// than HTTP/1.1 over a pool of connections: with prior knowledge (`h2c`) to an `http://`
    /// upstream, agreed by ALPN with an `https://` one.
    pub fn upstream_http2(&self) -> bool {
        self.upstream_http2
    }

    /// Whether a call that runs past the budget's call timeout tells its limit the upstream is
    /// overloaded (the default), or nothing: for an upstream whose slow calls come whatever its
    /// load, so that an adaptive limit does not shrink on them.
    pub fn overload_on_timeout(&self) -> bool {
        self.overload_on_timeout
    }

    /// The certificates an `https://` upstream's certificate is checked against, when the file
    /// names a `ca_file`; `None`: the system's root certificates.
    pub fn ca_file(&self) -> Option<&CaFile> {
        self.ca_file.as_ref()
    }

    /// The request header whose value names the request's priority class (`class_header`), in
    /// lower case, if the budget has one; only a budget with classes takes it. A request
    /// without it, or whose value names no class of the budget, is in the default class; the
    /// header is forwarded unchanged.
    ///
    /// ```
    /// use inflight::Budgets;
    ///
    /// let budgets = Budgets::from_toml_str(r#"
    ///     [budgets.records]
    ///     max_concurrent = 6
    ///     classes = { interactive = 4, batch = 1 }
    ///     upstream = "http://127.0.0.1:7070"
    ///     listen = "127.0.0.1:7002"
    ///     class_header = "X-Priority"
    /// "#).unwrap();
    /// assert_eq!(budgets.route("records").unwrap().class_header(), Some("x-priority"));
    /// ```
    pub fn class_header(&self) -> Option<&str> {
        self.class_header.as_deref()
    }
}

/// The `[proxy]` table.
pub(super) fn proxy_config(value: &Value) -> Result<ProxyConfig, ConfigError> {
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
    if let Some(v) = table.get("drain") {
        match super::parse::duration("proxy.drain", v) {
            Ok(d) => config.drain = d,
            Err(e) => errors.push(e),
        }
    }
    match ConfigError::all(errors) {
        Some(e) => Err(e),
        None => Ok(config),
    }
}

/// A budget's route, if it is proxied; `field` makes the dotted path of one of its keys.
/// Relative paths (`ca_file`) are taken from `folder` when given.
pub(super) fn route(
    table: &Table,
    field: &dyn Fn(&str) -> String,
    folder: Option<&Path>,
) -> Result<Option<Route>, ConfigError> {
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
        (Some(_), None) => {
            return Err(ConfigError::invalid(
                field("listen"),
                "missing (a budget with an upstream needs the address to listen on, e.g. \"127.0.0.1:7002\")",
            ))
        }
        (None, Some(_)) => {
            return Err(ConfigError::invalid(
                field("upstream"),
                "missing (a budget with listen needs the URL to forward to, e.g. \"http://127.0.0.1:7070\")",
            ))
        }
        (Some(u), Some(l)) => (u, l),
    };
    let mut errors = Vec::new();
    let upstream = upstream_url(&field("upstream"), upstream).map_err(|e| errors.push(e));
    let listen = address(&field("listen"), listen).map_err(|e| errors.push(e));
    let release = match table.get("release") {
        None => Release::Body,
        Some(Value::String(s)) if s == "body" => Release::Body,
        Some(Value::String(s)) if s == "headers" => Release::Headers,
        Some(other) => {
            errors.push(ConfigError::invalid(
                field("release"),
                format!(
                    "must be \"body\" or \"headers\", got {}",
                    super::parse::shown(other)
                ),
            ));
            Release::Body
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
                format!("must be true or false, got {}", super::parse::shown(other)),
            ));
            false
        }
    };
    let preserve_host = flag("preserve_host", false);
    let upstream_http2 = flag("upstream_http2", false);
    let overload_on_timeout = flag("overload_on_timeout", true);
    let ca_file = match (table.get("ca_file"), &upstream) {
        (None, _) => None,
        (Some(v), Ok(u)) if !u.tls => {
            errors.push(ConfigError::invalid(
                field("ca_file"),
                format!(
                    "{} is a CA file, and only an https:// upstream takes one, not {}",
                    v.as_str()
                        .map_or_else(|| super::parse::shown(v), super::parse::short),
                    super::parse::short(&u.url)
                ),
            ));
            None
        }
        (Some(v), _) => ca_file(&field("ca_file"), v, folder)
            .map_err(|e| errors.push(e))
            .ok(),
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
    if let Some(e) = ConfigError::all(errors) {
        return Err(e);
    }
    let (Ok(upstream), Ok(listen)) = (upstream, listen) else {
        unreachable!("an error in either was returned above");
    };
    Ok(Some(Route {
        upstream,
        listen,
        release,
        overload_status,
        preserve_host,
        upstream_http2,
        overload_on_timeout,
        ca_file,
        class_header,
    }))
}

/// An HTTP header's name (RFC 9110 section 5.1: a token), in lower case.
fn header_name(field: &str, value: &Value) -> Result<String, ConfigError> {
    let Some(name) = value.as_str() else {
        return Err(ConfigError::invalid(
            field,
            format!(
                "must be a header name like \"x-priority\", got {}",
                super::parse::shown(value)
            ),
        ));
    };
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(ConfigError::invalid(
            field,
            format!(
                "must be a header name like \"x-priority\" (letters, digits and !#$%&'*+-.^_`|~), got {}",
                super::parse::short(name)
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
fn ca_file(field: &str, value: &Value, folder: Option<&Path>) -> Result<CaFile, ConfigError> {
    let written = match value.as_str() {
        Some(p) if !p.trim().is_empty() => p,
        _ => {
            return Err(ConfigError::invalid(
                field,
                format!(
                    "must be the path of a PEM file like \"ca.pem\", got {}",
                    super::parse::shown(value)
                ),
            ))
        }
    };
    let path = match folder {
        Some(folder) => folder.join(written),
        None => PathBuf::from(written),
    };
    let shown = super::parse::short(&path.display().to_string());
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
pub(super) fn distinct_addresses(
    routes: &[(String, &Route)],
    proxy: Option<&ProxyConfig>,
) -> Result<(), ConfigError> {
    let mut errors = Vec::new();
    for (i, (name, route)) in routes.iter().enumerate() {
        let addr = route.listen;
        if addr.port() == 0 {
            continue;
        }
        if let Some((first, _)) = routes[..i].iter().find(|(_, r)| r.listen == addr) {
            errors.push(ConfigError::invalid(
                format!("{}.listen", super::budget_path(name)),
                format!(
                    "{addr} is already the listen address of {}",
                    super::budget_path(first)
                ),
            ));
        }
    }
    if let Some(admin) = proxy.and_then(|p| p.admin).filter(|a| a.port() != 0) {
        if let Some((name, _)) = routes.iter().find(|(_, r)| r.listen == admin) {
            errors.push(ConfigError::invalid(
                "proxy.admin",
                format!(
                    "{admin} is already the listen address of {}",
                    super::budget_path(name)
                ),
            ));
        }
    }
    match ConfigError::all(errors) {
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
                super::parse::shown(value)
            ),
        )
    })?;
    text.trim().parse().map_err(|_| {
        ConfigError::invalid(
            field,
            format!(
                "must be an IP address and port like \"127.0.0.1:7002\", got {}",
                super::parse::short(text)
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
                super::parse::shown(value)
            ),
        )
    })?;
    let shown = super::parse::short(text);
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
                super::parse::shown(value)
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
                    super::parse::shown(item)
                ),
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::config::Release;
    use crate::Budgets;

    fn refused(text: &str) -> String {
        Budgets::from_toml_str(text)
            .expect_err("the file must be refused")
            .to_string()
    }

    #[test]
    fn a_proxied_budget_loads_with_its_defaults() {
        let budgets = Budgets::from_toml_str(
            r#"
            [proxy]
            admin = "127.0.0.1:9901"
            drain = "3s"

            [budgets.records]
            max_concurrent = 6
            upstream = "http://127.0.0.1:7070/"
            listen = "127.0.0.1:7002"

            [budgets.enrichment]
            max_concurrent = 24
            upstream = "http://Enrich.internal"
            listen = "[::1]:7003"
            release = "headers"
            overload_status = [503]
            preserve_host = true

            [budgets.local]
            max_concurrent = 2
            "#,
        )
        .unwrap();
        let proxy = budgets.proxy().unwrap();
        assert_eq!(proxy.admin(), Some("127.0.0.1:9901".parse().unwrap()));
        assert_eq!(proxy.drain(), std::time::Duration::from_secs(3));
        let records = budgets.route("records").unwrap();
        assert_eq!(records.upstream().url(), "http://127.0.0.1:7070");
        assert_eq!(records.upstream().authority(), "127.0.0.1:7070");
        assert_eq!(records.upstream().port(), 7070);
        assert_eq!(records.listen(), "127.0.0.1:7002".parse().unwrap());
        assert_eq!(records.release(), Release::Body);
        assert_eq!(records.overload_status(), [429, 503]);
        assert!(!records.preserve_host());
        let enrichment = budgets.route("enrichment").unwrap();
        assert_eq!(enrichment.upstream().host(), "Enrich.internal");
        assert_eq!(enrichment.upstream().port(), 80);
        assert_eq!(enrichment.release(), Release::Headers);
        assert_eq!(enrichment.overload_status(), [503]);
        assert!(enrichment.preserve_host());
        assert!(!enrichment.upstream_http2());
        assert!(budgets.route("local").is_none());
        let names: Vec<_> = budgets.routes().map(|(b, _)| b.name()).collect();
        assert_eq!(names, ["records", "enrichment"]);
    }

    #[test]
    fn a_file_without_proxy_keys_has_no_proxy_table() {
        let budgets = Budgets::from_toml_str("[budgets.a]\nmax_concurrent = 1\n").unwrap();
        assert!(budgets.proxy().is_none());
        assert_eq!(budgets.routes().count(), 0);
    }

    #[test]
    fn each_mistake_names_its_field() {
        let base = "[budgets.r]\nmax_concurrent = 1\n";
        let cases = [
            (
                "upstream = \"http://127.0.0.1:1\"\n",
                "budgets.r.listen: missing",
            ),
            ("listen = \"127.0.0.1:1\"\n", "budgets.r.upstream: missing"),
            (
                "release = \"body\"\n",
                "budgets.r.release: only a proxied budget takes this",
            ),
            (
                "upstream = \"127.0.0.1:7070\"\nlisten = \"127.0.0.1:1\"\n",
                "budgets.r.upstream: must start with http://",
            ),
            (
                "upstream = \"ftp://x\"\nlisten = \"127.0.0.1:1\"\n",
                "budgets.r.upstream: must start with http:// or https://",
            ),
            (
                "upstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\nca_file = \"ca.pem\"\n",
                "budgets.r.ca_file: \"ca.pem\" is a CA file, and only an https:// upstream takes one, not \"http://x\"",
            ),
            (
                "upstream = \"https://x\"\nlisten = \"127.0.0.1:1\"\nca_file = 3\n",
                "budgets.r.ca_file: must be the path of a PEM file",
            ),
            (
                "upstream = \"https://x\"\nlisten = \"127.0.0.1:1\"\nca_file = \"/nonexistent/ca.pem\"\n",
                "budgets.r.ca_file: \"/nonexistent/ca.pem\": cannot read it: No such file",
            ),
            (
                "upstream = \"http://x/v1\"\nlisten = \"127.0.0.1:1\"\n",
                "budgets.r.upstream: must not have a path",
            ),
            (
                "upstream = \"http://x:0\"\nlisten = \"127.0.0.1:1\"\n",
                "budgets.r.upstream: must have a port from 1 to 65535",
            ),
            (
                "upstream = \"http://x:99999\"\nlisten = \"127.0.0.1:1\"\n",
                "budgets.r.upstream: must have a port from 1 to 65535",
            ),
            (
                "upstream = \"http://\"\nlisten = \"127.0.0.1:1\"\n",
                "budgets.r.upstream: must name a host",
            ),
            (
                "upstream = \"http://u:p@x\"\nlisten = \"127.0.0.1:1\"\n",
                "budgets.r.upstream: must not carry a user name",
            ),
            (
                "upstream = \"http://x\"\nlisten = \"localhost:1\"\n",
                "budgets.r.listen: must be an IP address and port",
            ),
            (
                "upstream = \"http://x\"\nlisten = 7002\n",
                "budgets.r.listen: must be an address string",
            ),
            (
                "upstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\nrelease = \"trailers\"\n",
                "budgets.r.release: must be \"body\" or \"headers\", got string \"trailers\"",
            ),
            (
                "upstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\noverload_status = [503, 700]\n",
                "budgets.r.overload_status: each status must be a whole number from 100 to 599, got integer 700",
            ),
            (
                "upstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\noverload_status = 503\n",
                "budgets.r.overload_status: must be a list",
            ),
            (
                "upstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\npreserve_host = \"yes\"\n",
                "budgets.r.preserve_host: must be true or false",
            ),
            (
                "upstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\nupstream_http2 = 1\n",
                "budgets.r.upstream_http2: must be true or false",
            ),
        ];
        for (extra, expected) in cases {
            let err = refused(&format!("{base}{extra}"));
            assert!(err.starts_with(expected), "{extra:?}: {err}");
        }
    }

    /// A self-signed CA certificate (P-256).
    const PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBmjCCAUGgAwIBAgIUaemB69Nt5NYt9kRNuicmGTpZqDEwCgYIKoZIzj0EAwIw
IjEgMB4GA1UEAwwXaW5mbGlnaHQgY29uZmlnIHRlc3QgQ0EwIBcNMjYxMjAxMTEz
NjA2WhgPMjEyNjExMDcxMTM2MDZaMCIxIDAeBgNVBAMMF2luZmxpZ2h0IGNvbmZp
ZyB0ZXN0IENBMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEPSsgSyxPwes68sDA
TlA8sVuI+QaTSo3XJLNS8psIOPJNLZ/9xEBJh/D3nE+bKces8TZs2BCFTPUx/XIp
VbmDd6NTMFEwHQYDVR0OBBYEFBu6jNvE9HFisi6B/r/ml5NuzA4eMB8GA1UdIwQY
MBaAFBu6jNvE9HFisi6B/r/ml5NuzA4eMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZI
zj0EAwIDRwAwRAIgKhV0fBURQaa3jleXXYvqt4sR1b8J657nAYMAcZtUwTkCIG2Z
1UoGFamLwUG3enYY8F2yIoMkXlRkK0vRVk6rfWJv
-----END CERTIFICATE-----
";

    fn https_budget(extra: &str) -> String {
        format!(
            "[budgets.r]\nmax_concurrent = 1\nupstream = \"https://records.internal\"\nlisten = \"127.0.0.1:1\"\n{extra}"
        )
    }

    #[test]
    fn an_https_upstream_loads_with_the_system_roots_or_a_ca_file_beside_the_budgets_file() {
        let budgets = Budgets::from_toml_str(&https_budget("")).unwrap();
        let route = budgets.route("r").unwrap();
        assert_eq!(route.upstream().scheme(), "https");
        assert!(route.upstream().is_tls());
        assert_eq!(route.upstream().port(), 443);
        assert!(route.ca_file().is_none());

        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("certs")).unwrap();
        std::fs::write(dir.path().join("certs/ca.pem"), format!("{PEM}{PEM}")).unwrap();
        let file = dir.path().join("budgets.toml");
        std::fs::write(&file, https_budget("ca_file = \"certs/ca.pem\"\n")).unwrap();
        let budgets = Budgets::from_path(&file).unwrap();
        let ca = budgets.route("r").unwrap().ca_file().unwrap();
        assert_eq!(ca.path(), dir.path().join("certs/ca.pem"));
        assert_eq!(ca.certificates().len(), 2);
        let der = ca.certificates().next().unwrap();
        assert_eq!((der.len(), der[0]), (414, 0x30), "one DER SEQUENCE");
        // Text has no folder of its own: the current directory's file, which is not there.
        let err = refused(&https_budget("ca_file = \"certs/ca.pem\"\n"));
        assert!(
            err.starts_with("budgets.r.ca_file: \"certs/ca.pem\": cannot read it"),
            "{err}"
        );
        let http = Budgets::from_toml_str(
            "[budgets.r]\nmax_concurrent = 1\nupstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\n",
        )
        .unwrap();
        assert_eq!(http.route("r").unwrap().upstream().scheme(), "http");
        assert_eq!(http.route("r").unwrap().upstream().port(), 80);
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("empty.pem", String::new(), "holds no PEM certificate"),
            (
                "key.pem",
                "-----BEGIN PRIVATE KEY-----\nMAMCAQU=\n-----END PRIVATE KEY-----\n".into(),
                "holds no PEM certificate",
            ),
            (
                "cut.pem",
                "-----BEGIN CERTIFICATE-----\nMAMCAQU=\n".into(),
                "is not valid PEM: missing section end marker",
            ),
            (
                "garbage.pem",
                "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n".into(),
                "certificate 1 of 1 is not a valid X.509 certificate",
            ),
            (
                "second.pem",
                format!("{PEM}-----BEGIN CERTIFICATE-----\nMAMCAQU=\n-----END CERTIFICATE-----\n"),
                "certificate 2 of 2 is not a valid X.509 certificate",
            ),
        ];
        for (name, text, why) in cases {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            let err = refused(&https_budget(&format!(
                "ca_file = {:?}\n",
                path.display().to_string()
            )));
            let expected = format!("budgets.r.ca_file: {:?}: {why}", path.display().to_string());
            assert!(err.starts_with(&expected), "{name}: {err}");
        }
        // A folder is no file.
        let err = refused(&https_budget(&format!(
            "ca_file = {:?}\n",
            dir.path().display().to_string()
        )));
        assert!(err.contains("cannot read it"), "{err}");
        // Nor is a file without end read whole.
        let err = refused(&https_budget("ca_file = \"/dev/zero\"\n"));
        assert!(err.contains("larger than 4 MiB"), "{err}");
    }

    #[test]
    fn a_class_header_is_a_header_name_of_a_budget_with_classes() {
        let base =
            "[budgets.r]\nmax_concurrent = 1\nupstream = \"http://x\"\nlisten = \"127.0.0.1:1\"\n";
        let classes = "classes = { interactive = 4, batch = 1 }\n";
        let budgets =
            Budgets::from_toml_str(&format!("{base}{classes}class_header = \"X-Priority\"\n"))
                .unwrap();
        assert_eq!(
            budgets.route("r").unwrap().class_header(),
            Some("x-priority")
        );
        let none = Budgets::from_toml_str(&format!("{base}{classes}")).unwrap();
        assert_eq!(none.route("r").unwrap().class_header(), None);
        let long = "x".repeat(129);
        let cases = [
            (
                format!("{base}class_header = \"x-priority\"\n"),
                "budgets.r.class_header: only a budget with classes takes this",
            ),
            (
                format!("{base}{classes}class_header = \"x priority\"\n"),
                "budgets.r.class_header: must be a header name like \"x-priority\" (letters, digits and !#$%&'*+-.^_`|~), got \"x priority\"",
            ),
            (
                format!("{base}{classes}class_header = \"\"\n"),
                "budgets.r.class_header: must be a header name",
            ),
            (
                format!("{base}{classes}class_header = 1\n"),
                "budgets.r.class_header: must be a header name like \"x-priority\", got integer 1",
            ),
            (
                format!("{base}{classes}class_header = \"{long}\"\n"),
                "budgets.r.class_header: must be at most 128 characters, got 129",
            ),
            (
                "[budgets.r]\nmax_concurrent = 1\nclasses = { a = 1 }\nclass_header = \"x-priority\"\n".to_string(),
                "budgets.r.class_header: only a proxied budget takes this",
            ),
        ];
        for (text, expected) in cases {
            let err = refused(&text);
            assert!(err.starts_with(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn the_proxy_table_is_checked() {
        let err = refused("[proxy]\nadmin = \"nowhere\"\n[budgets.a]\nmax_concurrent = 1\n");
        assert!(
            err.starts_with("proxy.admin: must be an IP address"),
            "{err}"
        );
        let err = refused("[proxy]\ndrain = \"0s\"\n[budgets.a]\nmax_concurrent = 1\n");
        assert!(
            err.starts_with("proxy.drain: must be greater than zero"),
            "{err}"
        );
        let err = refused("[proxy]\nadmn = \"127.0.0.1:1\"\n[budgets.a]\nmax_concurrent = 1\n");
        assert!(err.starts_with("proxy.admn: unknown key"), "{err}");
        let err = refused("proxy = 3\n[budgets.a]\nmax_concurrent = 1\n");
        assert!(err.starts_with("proxy: must be a table"), "{err}");
    }

    #[test]
    fn addresses_are_not_shared() {
        let err = refused(
            r#"
            [proxy]
            admin = "127.0.0.1:7002"
            [budgets.a]
            max_concurrent = 1
            upstream = "http://127.0.0.1:1"
            listen = "127.0.0.1:7002"
            [budgets.b]
            max_concurrent = 1
            upstream = "http://127.0.0.1:1"
            listen = "127.0.0.1:7002"
            "#,
        );
        assert!(
            err.contains(
                "budgets.b.listen: 127.0.0.1:7002 is already the listen address of budgets.a"
            ),
            "{err}"
        );
        assert!(
            err.contains("proxy.admin: 127.0.0.1:7002 is already the listen address of budgets.a"),
            "{err}"
        );
        // Port 0 picks a free port for each, so it is never shared.
        Budgets::from_toml_str(
            r#"
            [budgets.a]
            max_concurrent = 1
            upstream = "http://127.0.0.1:1"
            listen = "127.0.0.1:0"
            [budgets.b]
            max_concurrent = 1
            upstream = "http://127.0.0.1:1"
            listen = "127.0.0.1:0"
            "#,
        )
        .unwrap();
    }
}
