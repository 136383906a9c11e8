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
//! upstream_http2 = false               # true: HTTP/2 to the upstream (h2c, or h2 by ALPN); a gRPC budget: true
//! overload_on_timeout = true           # false: a call past call_timeout tells the limit nothing
//! on_client_gone = "cancel"            # or "finish" (needs call_timeout): a call whose client left goes on, holding its permit
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
//! ([`ProxyFile::from_path`]), or from the current directory for text
//! ([`ProxyFile::from_toml_str`]). The file is read and checked
//! when the budgets file is loaded: one that cannot be read, holds no PEM certificate or one
//! that does not parse as X.509, is refused then, as is `ca_file` on an `http://` upstream. With `upstream_http2 = true`, an
//! `https://` upstream must agree to HTTP/2 by ALPN (`h2`).
//!
//! A budget with `upstream` and `listen` is proxied; one with neither is not, and one with only
//! one of them is refused.

mod parse;
pub(crate) use parse::ADMIN_LISTENER;
mod routes;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use inflight::config::{BudgetsFile, Keys};
use inflight::{Budget, Budgets, ConfigError};

/// How long a draining proxy lets in-flight requests finish when the file says nothing.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

/// Upstream answers that mean overload when the file says nothing: 429 and 503.
pub const DEFAULT_OVERLOAD_STATUS: &[u16] = &[429, 503];

/// The keys of a budgets file the proxy reads: the `[proxy]` table, and a proxied budget's
/// keys in its table. Given to [`BudgetsFile::budgets`] so that the budgets' own check does not
/// refuse them.
pub const KEYS: Keys = Keys::new("inflight-proxy", &["proxy"], ROUTE_FIELDS);

/// Keys of a budget's table that only a proxied budget takes.
const ROUTE_FIELDS: &[&str] = &[
    "upstream",
    "listen",
    "release",
    "overload_status",
    "preserve_host",
    "upstream_http2",
    "overload_on_timeout",
    "ca_file",
    "class_header",
    "protocol",
    "overload_grpc_status",
    "on_client_gone",
];

/// gRPC statuses that mean overload when the file says nothing: `RESOURCE_EXHAUSTED` (8) and
/// `UNAVAILABLE` (14).
pub const DEFAULT_OVERLOAD_GRPC_STATUS: &[u32] = &[8, 14];

/// The gRPC status codes by name (gRPC's `doc/statuscodes.md`), in code order.
pub const GRPC_STATUS_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// What a proxied budget's clients speak (`protocol` in a budgets file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Protocol {
    /// HTTP (`protocol = "http"`, the default): a request whose `content-type` is
    /// `application/grpc...` is still treated as gRPC.
    #[default]
    Http,
    /// gRPC (`protocol = "grpc"`): every request is treated as gRPC.
    Grpc,
}

/// The longest `class_header` name taken.
pub const MAX_CLASS_HEADER: usize = 128;

/// Keys of the `[proxy]` table.
pub(crate) const PROXY_FIELDS: &[&str] = &[
    "admin",
    "drain",
    "first_byte_timeout",
    "idle_timeout",
    "http2_keepalive_interval",
    "http2_keepalive_timeout",
    "max_connections",
    "routes",
];

/// How long a new client connection may take to send its first bytes when the file says
/// nothing (`first_byte_timeout`).
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client connection may go without a request when the file says nothing
/// (`idle_timeout`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How often an HTTP/2 client is pinged when the file says nothing
/// (`http2_keepalive_interval`).
pub const DEFAULT_HTTP2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// How long an HTTP/2 client has to answer a ping when the file says nothing
/// (`http2_keepalive_timeout`).
pub const DEFAULT_HTTP2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// How many client connections one listener keeps open at most when the file says nothing
/// (`max_connections`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// The `[proxy]` table of a budgets file: settings of `inflight proxy` as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    admin: Option<SocketAddr>,
    drain: Duration,
    clients: ClientLimits,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            admin: None,
            drain: DEFAULT_DRAIN,
            clients: ClientLimits::default(),
        }
    }
}

/// What the proxy allows its clients on each listener (the `[proxy]` table's client keys), so
/// that idle, slow or leaked connections cannot take its memory or its file descriptors.
///
/// ```
/// use std::time::Duration;
/// use inflight_proxy::config::ProxyFile;
///
/// let file = ProxyFile::from_toml_str(r#"
///     [proxy]
///     idle_timeout = "15s"
///     max_connections = 2000
///
///     [budgets.records]
///     max_concurrent = 6
///     upstream = "http://127.0.0.1:7070"
///     listen = "127.0.0.1:7002"
/// "#).unwrap();
/// let clients = file.proxy().unwrap().clients();
/// assert_eq!(clients.idle_timeout(), Duration::from_secs(15));
/// assert_eq!(clients.first_byte_timeout(), Duration::from_secs(10));
/// assert_eq!(clients.max_connections(), 2000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    pub(crate) first_byte_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) http2_keepalive_interval: Duration,
    pub(crate) http2_keepalive_timeout: Duration,
    pub(crate) max_connections: usize,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            first_byte_timeout: DEFAULT_FIRST_BYTE_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            http2_keepalive_interval: DEFAULT_HTTP2_KEEPALIVE_INTERVAL,
            http2_keepalive_timeout: DEFAULT_HTTP2_KEEPALIVE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl ClientLimits {
    /// How long a new connection may take to send the first bytes that tell its protocol
    /// (`first_byte_timeout`): one that sends nothing, or stalls inside the HTTP/2 preface, is
    /// closed then.
    pub fn first_byte_timeout(&self) -> Duration {
        self.first_byte_timeout
    }

    /// How long a connection may go without a request (`idle_timeout`). HTTP/1.1: from the
    /// moment the connection can take a request (its first bytes arrived, or the last response
    /// was sent) until that request's headers are in full, so it also bounds a client that
    /// sends its headers slowly. HTTP/2: while no stream is open. It also bounds a request's
    /// body that stops coming before the upstream answers (400, `client_body`).
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// How often an HTTP/2 client is pinged (`http2_keepalive_interval`).
    pub fn http2_keepalive_interval(&self) -> Duration {
        self.http2_keepalive_interval
    }

    /// How long an HTTP/2 client has to answer a ping before its connection is closed
    /// (`http2_keepalive_timeout`).
    pub fn http2_keepalive_timeout(&self) -> Duration {
        self.http2_keepalive_timeout
    }

    /// How many client connections one listener keeps open at most (`max_connections`, at most
    /// 10,000,000). A new connection beyond it asks the connection idle longest (for a second
    /// at least) to close, or, when none is idle, waits to be accepted until one closes.
    pub fn max_connections(&self) -> usize {
        self.max_connections
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

    /// What the proxy allows its clients: see [`ClientLimits`].
    pub fn clients(&self) -> ClientLimits {
        self.clients
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

/// What becomes of a proxied call whose client leaves before its answer was sent in full
/// (`on_client_gone` in a budgets file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ClientGone {
    /// The upstream's request is closed (its connection, or its HTTP/2 stream reset) and the
    /// permit goes back at once (`on_client_gone = "cancel"`, the default), as behind Envoy,
    /// HAProxy or Go's reverse proxy: right for an upstream that stops work on a closed
    /// request.
    #[default]
    Cancel,
    /// The call goes on without its client until its answer ends (read and dropped) or its
    /// `call_timeout`, which the budget must have, and holds its permit until then
    /// (`on_client_gone = "finish"`): for an upstream that works on whatever its client does
    /// (a threaded server that never reads its socket again), so that clients that give up
    /// early cannot put more than the limit at it.
    Finish,
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
    protocol: Protocol,
    overload_grpc_status: Vec<u32>,
    on_client_gone: ClientGone,
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
    /// use inflight_proxy::config::ProxyFile;
    ///
    /// let file = ProxyFile::from_toml_str(r#"
    ///     [budgets.records]
    ///     max_concurrent = 6
    ///     classes = { interactive = 4, batch = 1 }
    ///     upstream = "http://127.0.0.1:7070"
    ///     listen = "127.0.0.1:7002"
    ///     class_header = "X-Priority"
    /// "#).unwrap();
    /// assert_eq!(file.route("records").unwrap().class_header(), Some("x-priority"));
    /// ```
    pub fn class_header(&self) -> Option<&str> {
        self.class_header.as_deref()
    }

    /// What the budget's clients speak (`protocol`). With gRPC, the proxy's own answers are
    /// gRPC statuses, and the upstream's `grpc-status` tells an adaptive limit of overload.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The gRPC status codes that tell the budget's limit the upstream is overloaded
    /// (`overload_grpc_status`, names like `"RESOURCE_EXHAUSTED"` or numbers; by default
    /// `RESOURCE_EXHAUSTED` and `UNAVAILABLE`).
    pub fn overload_grpc_status(&self) -> &[u32] {
        &self.overload_grpc_status
    }

    /// What becomes of a call whose client leaves before its answer was sent in full
    /// (`on_client_gone`; by default [`ClientGone::Cancel`]).
    ///
    /// ```
    /// use inflight_proxy::config::{ClientGone, ProxyFile};
    ///
    /// let file = ProxyFile::from_toml_str(r#"
    ///     [budgets.records]
    ///     max_concurrent = 6
    ///     call_timeout = "10s"
    ///     upstream = "http://127.0.0.1:7070"
    ///     listen = "127.0.0.1:7002"
    ///     on_client_gone = "finish"
    /// "#).unwrap();
    /// assert_eq!(file.route("records").unwrap().on_client_gone(), ClientGone::Finish);
    /// ```
    pub fn on_client_gone(&self) -> ClientGone {
        self.on_client_gone
    }
}

/// A budgets file as `inflight proxy` reads it: the budgets, the `[proxy]` table and where each
/// proxied budget listens and forwards to.
///
/// ```
/// use inflight_proxy::config::{ProxyFile, Release};
///
/// let file = ProxyFile::from_toml_str(r#"
///     [proxy]
///     drain = "3s"
///
///     [budgets.records]
///     max_concurrent = 6
///     upstream = "http://127.0.0.1:7070"
///     listen = "127.0.0.1:7002"
///
///     [budgets.enrichment]
///     max_concurrent = 24
/// "#).unwrap();
/// let records = file.route("records").unwrap();
/// assert_eq!(records.upstream().authority(), "127.0.0.1:7070");
/// assert_eq!(records.release(), Release::Body);
/// assert!(file.route("enrichment").is_none());
/// assert_eq!(file.budgets().len(), 2);
/// assert_eq!(file.proxy().unwrap().drain(), std::time::Duration::from_secs(3));
///
/// // The budgets' own keys and the proxy's are checked together, each mistake by its path:
/// let err = ProxyFile::from_toml_str(r#"
///     [budgets.records]
///     max_concurrent = 0
///     upstream = "ftp://127.0.0.1"
///     listen = "127.0.0.1:7002"
/// "#).unwrap_err();
/// let fields: Vec<_> = err.errors().iter().filter_map(|e| e.field()).collect();
/// assert_eq!(fields, ["budgets.records.max_concurrent", "budgets.records.upstream"]);
/// ```
#[derive(Debug, Clone)]
pub struct ProxyFile {
    budgets: Budgets,
    proxy: Option<ProxyConfig>,
    routes: Vec<(String, Route)>,
    listeners: Vec<Listener>,
}

impl ProxyFile {
    /// Parses and checks a budgets file's text: the budgets' keys, the `[fleet]` table and the
    /// proxy's keys. A relative `ca_file` is taken from the current directory.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming every mistake by its path.
    pub fn from_toml_str(text: &str) -> Result<ProxyFile, ConfigError> {
        ProxyFile::from_file(&BudgetsFile::from_toml_str(text)?)
    }

    /// [`ProxyFile::from_toml_str`] for the file at `path`; a relative `ca_file` is taken from
    /// its folder.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Read`] when the file cannot be read, otherwise [`ConfigError::InFile`]
    /// around what is wrong in it.
    pub fn from_path(path: impl AsRef<Path>) -> Result<ProxyFile, ConfigError> {
        ProxyFile::from_file(&BudgetsFile::from_path(path)?)
    }

    /// The budgets and the proxy's keys of a file already read.
    ///
    /// # Errors
    ///
    /// As [`ProxyFile::from_path`].
    pub fn from_file(file: &BudgetsFile) -> Result<ProxyFile, ConfigError> {
        let budgets = file.budgets(&[KEYS]);
        let (proxy, routes, listeners, mut errors) = parse::proxy_keys(file);
        match budgets {
            Ok(budgets) => match file.join(errors) {
                Some(e) => Err(e),
                None => Ok(ProxyFile {
                    budgets,
                    proxy,
                    routes,
                    listeners,
                }),
            },
            Err(e) => {
                errors.push(e);
                Err(file.join(errors).expect("one error at least"))
            }
        }
    }

    /// The file's budgets.
    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }

    /// The file's budgets, without the proxy's keys.
    pub fn into_budgets(self) -> Budgets {
        self.budgets
    }

    /// The same file with its budgets replaced by `budgets` (the same names, given their stores,
    /// say, by `inflight_redis::attach`).
    pub fn with_budgets(self, budgets: Budgets) -> ProxyFile {
        ProxyFile { budgets, ..self }
    }

    /// The file's `[proxy]` table, if it has one.
    pub fn proxy(&self) -> Option<&ProxyConfig> {
        self.proxy.as_ref()
    }

    /// Where `inflight proxy` listens for budget `name` and forwards to, if it is proxied.
    pub fn route(&self, name: &str) -> Option<&Route> {
        self.routes.iter().find(|(n, _)| n == name).map(|(_, r)| r)
    }

    /// The proxied budgets with their routes, in file order.
    pub fn routes(&self) -> impl Iterator<Item = (&Budget, &Route)> {
        self.routes
            .iter()
            .filter_map(|(name, route)| Some((self.budgets.get(name)?, route)))
    }

    /// The addresses the proxy listens on, each with its default budget and the rules that pick
    /// another budget by path prefix (and host), in file order of their first mention.
    pub fn listeners(&self) -> &[Listener] {
        &self.listeners
    }
}

/// One address the proxy listens on: its default budget (the budget whose `listen` it is, or
/// the `[[proxy.routes]]` entry with prefix `/`), and the rules that send a request to another
/// budget by its path's longest matching prefix (and its `Host`, where a rule names one).
///
/// ```
/// use inflight_proxy::config::ProxyFile;
///
/// let file = ProxyFile::from_toml_str(r#"
///     [budgets.search]
///     max_concurrent = 16
///     upstream = "http://127.0.0.1:7070"
///     listen = "127.0.0.1:7002"
///
///     [budgets.export]
///     max_concurrent = 2
///     upstream = "http://127.0.0.1:7070"
///
///     [[proxy.routes]]
///     listen = "127.0.0.1:7002"
///     prefix = "/export"
///     budget = "export"
/// "#).unwrap();
/// let listener = &file.listeners()[0];
/// assert_eq!(listener.default_budget(), "search");
/// assert_eq!(listener.budget_for("/export/2026.csv", None), "export");
/// assert_eq!(listener.budget_for("/search?q=x", None), "search");
/// assert_eq!(listener.budget_for("/exports", None), "search");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    addr: SocketAddr,
    default: String,
    rules: Vec<RouteRule>,
}

/// A `[[proxy.routes]]` entry: requests to `listen` whose path starts with `prefix` (at a `/`
/// or the prefix's end) and, if given, whose `Host` is `host`, go to `budget`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteRule {
    listen: SocketAddr,
    prefix: String,
    host: Option<String>,
    budget: String,
}

impl RouteRule {
    /// The path prefix (`/export`, or `/` for every path).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The host the rule is limited to, lower case and without a port, if any.
    pub fn host(&self) -> Option<&str> {
        self.host.as_deref()
    }

    /// The budget a matching request goes to.
    pub fn budget(&self) -> &str {
        &self.budget
    }

    /// Whether a request for `path` to `host` matches: the prefix ends at a `/`, at the end
    /// of the path or before its query, so `/export` takes `/export/1` and `/export?x` but not
    /// `/exports`.
    pub fn matches(&self, path: &str, host: Option<&str>) -> bool {
        if let Some(want) = &self.host {
            let given = host.map(|h| h.rsplit_once(':').map_or(h, |(name, _)| name));
            if !given.is_some_and(|g| g.eq_ignore_ascii_case(want)) {
                return false;
            }
        }
        match path.strip_prefix(self.prefix.as_str()) {
            Some(rest) => {
                self.prefix.ends_with('/') || rest.is_empty() || rest.starts_with(['/', '?', '#'])
            }
            None => false,
        }
    }
}

impl Listener {
    /// The address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The budget a request goes to when no rule matches.
    pub fn default_budget(&self) -> &str {
        &self.default
    }

    /// The rules, longest prefix first (a rule with a host before one without at equal length).
    pub fn rules(&self) -> &[RouteRule] {
        &self.rules
    }

    /// The budget of a request for `path` (with its query, if any) to `host`: the first
    /// matching rule's, else the default.
    pub fn budget_for(&self, path: &str, host: Option<&str>) -> &str {
        self.rules
            .iter()
            .find(|r| r.matches(path, host))
            .map_or(&self.default, |r| &r.budget)
    }
}
