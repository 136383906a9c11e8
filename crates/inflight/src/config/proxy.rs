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
//! upstream_http2 = false               # true: HTTP/2 with prior knowledge to the upstream
//! overload_on_timeout = true           # false: a call past call_timeout tells the limit nothing
//! ```
//!
//! Clients may speak HTTP/1.1 or HTTP/2 with prior knowledge to `listen`, whichever this says.
//!
//! A budget with `upstream` and `listen` is proxied; one with neither is not, and one with only
//! one of them is refused.

use std::net::SocketAddr;
use std::time::Duration;

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
];

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

/// An `http://` upstream, as a budgets file names it: scheme, host and port, no path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    url: String,
    authority: String,
    host: String,
    port: u16,
}

impl Upstream {
    /// The URL as written (`http://127.0.0.1:7070`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The scheme: `"http"`.
    pub fn scheme(&self) -> &str {
        "http"
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

    /// The port: as written, else 80.
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

    /// Whether the upstream is spoken to in HTTP/2 with prior knowledge (`h2c`), all requests
    /// sharing one connection, rather than HTTP/1.1 over a pool of connections.
    pub fn upstream_http2(&self) -> bool {
        self.upstream_http2
    }

    /// Whether a call that runs past the budget's call timeout tells its limit the upstream is
    /// overloaded (the default), or nothing: for an upstream whose slow calls come whatever its
    /// load, so that an adaptive limit does not shrink on them.
    pub fn overload_on_timeout(&self) -> bool {
        self.overload_on_timeout
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
pub(super) fn route(
    table: &Table,
    field: &dyn Fn(&str) -> String,
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
    }))
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

/// An upstream URL: `http://host[:port]`, with nothing after the authority but an optional `/`.
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
    let rest = if let Some(rest) = strip_prefix_ignore_case(trimmed, "http://") {
        rest
    } else if strip_prefix_ignore_case(trimmed, "https://").is_some() {
        return Err(bad("https:// upstreams are not supported yet; use http://"));
    } else {
        return Err(bad(
            "must start with http:// (a URL like \"http://127.0.0.1:7070\")",
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
        None if port.is_empty() => 80,
        None => return Err(bad("has something after its host that is not a port")),
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => return Err(bad("must have a port from 1 to 65535")),
            Ok(n) => n,
        },
    };
    Ok(Upstream {
        url: trimmed.trim_end_matches('/').to_string(),
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
                "upstream = \"https://x\"\nlisten = \"127.0.0.1:1\"\n",
                "budgets.r.upstream: https:// upstreams are not supported yet",
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
