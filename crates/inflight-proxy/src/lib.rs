//! `inflight proxy`: per-dependency budgets for clients in any language, with no code change.
//!
//! A sidecar in front of each dependency. The application calls `http://127.0.0.1:7002/...`
//! instead of the dependency, and the proxy forwards each request only once it holds a permit
//! of that dependency's [`Budget`](inflight::Budget): the same budgets file, limits, queue bound,
//! permit deadline, call timeout, adaptive limit and rate as in a Rust process.
//!
//! # Semantics
//!
//! - A request is forwarded only once it holds a permit; the call timeout starts then.
//! - A refused request is never forwarded. It gets a small body naming the budget and the
//!   reason, and an `X-Inflight-Refused` header with the reason: 503 for a full queue
//!   (`queue_full`) or a missed permit deadline (`permit_timeout`), 429 when rate limited
//!   (`rate_limited`, with `Retry-After`: the seconds until the rate would admit a request in
//!   time), 503 when a pause the upstream asked for outlasts the request's permit deadline
//!   (`paused`, with `Retry-After`: the seconds until the pause ends). A full queue carries
//!   `Retry-After` once calls were measured (the calls queued ahead, plus this one, times the
//!   mean call time, over the limit); a missed deadline carries none, as no honest estimate
//!   exists.
//! - An upstream answer listed in `overload_status` with `Retry-After` (delay-seconds or an
//!   HTTP-date) or `retry-after-ms` pauses the budget: passed to the client as it is, it keeps
//!   new requests from the upstream until the pause ends (at most 10 minutes); requests in
//!   flight are untouched, and waiting ones go on, in order, when it ends.
//! - 504 (`call_timeout`) when the upstream's headers do not come within the call timeout;
//!   502 (`upstream_unreachable`) when the upstream cannot be reached, logged and counted.
//! - A fleet budget with `on_lost = "cancel"` drops a request whose fleet lease is lost: 503
//!   (`lease_lost`) before the upstream's headers, a cut body after them.
//! - An `https://` upstream is spoken to over TLS (rustls): its certificate is checked, for the
//!   upstream's host name (also sent as SNI), against the system's root certificates or the
//!   budget's `ca_file`. A failed handshake is a 502 (`upstream_tls`), logged with the reason,
//!   counted, and fed to an adaptive limit as overload as a failed connect is. The `listen` side
//!   is plain HTTP, for a sidecar on loopback.
//! - By default (`release = "body"`) the permit is held until the response body has been sent to
//!   the client in full, since a streamed body keeps the dependency busy. The call timeout
//!   covers the body too: a body still streaming when it runs out is cut (the client sees the
//!   connection end early) and counted as a call timeout. `release = "headers"` gives the permit
//!   back when the headers arrive; the body then streams under no permit and no deadline.
//! - A budget with priority classes (`classes = { interactive = 4, batch = 1 }`) may name a
//!   request header, `class_header = "x-priority"`, whose value names each request's class:
//!   while every permit is held, queued requests are admitted by class weight, and one evicted
//!   from a full queue by a heavier class gets 503 (`evicted`). A missing header, a value that
//!   names no class, is not visible ASCII or is longer than 64 bytes, is the default class,
//!   never an error; the header is forwarded unchanged. `/metrics` has the budget's figures per
//!   class (`inflight_class_*{budget,class}`).
//! - A budget with `scope = "fleet"` keeps its permits in the Redis of the file's `[fleet]`
//!   table (through `inflight-redis`), so every replica's proxy shares one limit.
//! - Upstream answers listed in `overload_status` (429 and 503 by default), and failures to
//!   reach the upstream, are fed to an adaptive limit as overload.
//! - Clients may speak HTTP/1.1 or HTTP/2 with prior knowledge (told apart by the first bytes
//!   of the connection). To the upstream: HTTP/1.1 over a pool of keep-alive connections, or
//!   with `upstream_http2 = true` HTTP/2 (with prior knowledge, or agreed by ALPN over TLS), every
//!   request a stream of one connection. Bodies stream both ways, never buffered whole. Hop-by-hop headers are removed (RFC 9110 section 7.6.1, including those
//!   named in `Connection`), `Host` names the upstream unless `preserve_host = true`, and the
//!   client's address is appended to `X-Forwarded-For`. Malformed requests get 400 (an HTTP/1.1
//!   one without exactly one `Host` too), a head of 64 KiB or more 431.
//! - Client connections are bounded on every listener (see
//!   [`ClientLimits`](config::ClientLimits)): first bytes within `first_byte_timeout`, no
//!   request for `idle_timeout` closes a connection (for HTTP/1.1, from its last answer, or its
//!   start, until a request's headers are in), unanswered HTTP/2 pings close it, and at
//!   `max_connections` a new connection closes the one idle longest. A drain that runs out cuts
//!   what still runs.
//! - An HTTP/1.1 connection idle for 10 ms is parked: hyper's state and its buffers are freed,
//!   and the connection's task holds its socket alone until the next request, which a new hyper
//!   connection serves (`inflight_proxy_connections_parked`).
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let proxy = inflight_proxy::Proxy::builder()
//!     .log(|line| eprintln!("{line}"))
//!     .start(
//!         r#"
//!         [proxy]
//!         admin = "127.0.0.1:0"      # port 0: any free port
//!
//!         [budgets.records]
//!         max_concurrent = 6
//!         max_queued = 6
//!         permit_timeout = "500ms"
//!         call_timeout = "2s"
//!         upstream = "http://127.0.0.1:7070"
//!         listen = "127.0.0.1:0"
//!         "#,
//!     )
//!     .await?;
//! let records = proxy.local_addr("records").unwrap();
//! assert!(records.ip().is_loopback());
//! assert!(proxy.metrics().contains("inflight_budget_limit{budget=\"records\"} 6"));
//! // ... until told to stop:
//! let drained = proxy.drain().await;
//! assert!(drained.in_time);
//! # Ok(())
//! # }
//! ```
//!
//! # Modules
//!
//! The public surface is [`Proxy`], [`ProxyBuilder`], their errors and [`metrics`] (the names
//! it exports). Inside: `route` forwards one budget's requests, `body` streams a response while
//! holding its permit, `headers` rewrites headers, `refusal` writes the proxy's own answers,
//! `server` runs the accept loops, `admin` the admin server and `tls` connects to `https://`
//! upstreams.
//!
//! # Layers
//!
//! From the top down: a module uses only modules on lower lines (`scripts/check-layers.py`
//! checks it in CI).
//!
//! - `admin`
//! - `page`
//! - `route`, `server`
//! - `conn`
//! - `metrics`
//! - `refusal`, `replaced`
//! - `body`, `headers`, `error`, `tls`
//! - `sweep`
//! - `call`
//! - `upstream`
//! - `client_body`, `detached`, `grpc`
//! - `config`

mod admin;
mod body;
mod call;
mod client_body;
pub mod config;
mod conn;
mod detached;
mod error;
mod grpc;
mod headers;
pub mod metrics;
mod page;
mod refusal;
mod replaced;
mod route;
mod server;
mod sweep;
mod tls;
mod upstream;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use inflight::config::{budget_path, FleetConfig, Scope};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use body::ProxyBody;
pub use error::{ReloadError, StartError};

use config::{ProxyConfig, ProxyFile};
use metrics::Registry;
use route::{RouteSlot, RouteState};

/// How often the proxy looks at its fleet budgets' state, to say when one loses Redis.
const FLEET_WATCH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// How often a fleet budget that stays without Redis is said again.
const FLEET_REPEAT: std::time::Duration = std::time::Duration::from_secs(10);

/// Where the proxy's log lines go: one line per call, no trailing newline.
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// A running proxy: one listener per proxied budget, and the admin server if configured.
///
/// Serving starts when [`ProxyBuilder::start`] returns. [`Proxy::reload`] applies a new
/// budgets file; [`Proxy::drain`] stops it. Dropping a `Proxy` without draining stops its
/// accept loops at once.
pub struct Proxy {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    admin_stop: watch::Sender<bool>,
    servers: Vec<JoinHandle<()>>,
    admin: Option<JoinHandle<()>>,
    /// Folds the latency samples into the histograms now and then (see [`Registry::upkeep`]).
    upkeep: JoinHandle<()>,
    admin_addr: Option<SocketAddr>,
}

/// Options of a proxy before it starts.
#[derive(Default)]
pub struct ProxyBuilder {
    log: Option<Log>,
}

/// How a drain ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Drained {
    /// Whether every connection finished its request within the `drain` time.
    pub in_time: bool,
    /// Permits still held when the drain ended (0 when `in_time`).
    pub in_flight: usize,
}

/// What a reload changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Reloaded {
    /// Budgets whose limits or settings changed: new permits follow the new settings.
    pub changed: Vec<String>,
    /// `[proxy]` keys that changed and apply from now on (`proxy.drain`).
    pub proxy_changed: Vec<String>,
}

/// What the accept loops, the admin server and reloads share.
pub(crate) struct Shared {
    registry: Registry,
    routes: Vec<Arc<RouteSlot>>,
    /// The listeners the proxy started with, and their routes: a reload may not change them.
    listeners: Vec<config::Listener>,
    proxy: Mutex<ProxyConfig>,
    /// The `[fleet]` table the proxy started with: a reload may not change it.
    fleet: Option<FleetConfig>,
    /// The Redis fleets whose stores the budgets use (one from the start, one more from each
    /// reload that rebuilt a fleet budget): a drain gives back their leases.
    fleets: Mutex<Vec<inflight_redis::RedisFleet>>,
    draining: AtomicBool,
    runtime: tokio::runtime::Handle,
    /// When the proxy started: the live page's clock.
    started: tokio::time::Instant,
    /// Each proxied budget and the address its listener is bound to, once bound.
    bound: std::sync::OnceLock<Vec<(String, SocketAddr)>>,
}

impl Shared {
    /// Each proxied budget's state now, in file order.
    fn states(&self) -> Vec<Arc<RouteState>> {
        self.routes.iter().map(|r| r.current()).collect()
    }

    /// The fleets whose stores the budgets use, at this moment.
    fn fleets(&self) -> Vec<inflight_redis::RedisFleet> {
        self.fleets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn render_metrics(&self) -> String {
        let states = self.states();
        let fleets = self.fleets();
        self.registry.within(|| {
            for fleet in &fleets {
                inflight_redis::metrics::publish_fleet(fleet);
            }
        });
        self.registry.render(
            states
                .iter()
                .map(|s| (&s.budget, s.snapshot(), s.in_flight())),
        )
    }

    /// The document of `/budgets.json`: see the `page` module.
    pub(crate) fn budgets_json(&self) -> String {
        let states = self.states();
        let fleets = self.fleets();
        let bound = self.bound.get().map_or(&[][..], Vec::as_slice);
        page::budgets_json(
            &states,
            bound,
            &fleets,
            self.is_draining(),
            self.started.elapsed(),
        )
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    fn proxy_config(&self) -> ProxyConfig {
        self.proxy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl ProxyBuilder {
    /// Sends the proxy's log lines (upstream failures, refused reloads) to `log`; by default
    /// they are dropped.
    pub fn log(mut self, log: impl Fn(&str) + Send + Sync + 'static) -> ProxyBuilder {
        self.log = Some(Arc::new(log));
        self
    }

    /// Starts a proxy for the budgets file `text`: binds every proxied budget's `listen`
    /// address and the admin address, and starts serving.
    ///
    /// # Errors
    ///
    /// [`StartError::Config`] for an invalid file, [`StartError::NoProxiedBudget`] when no budget
    /// names both `upstream` and `listen`, [`StartError::Fleet`] when the `[fleet]` table names no
    /// usable Redis, [`StartError::Bind`] naming the field and address that could not be
    /// listened on.
    pub async fn start(self, text: &str) -> Result<Proxy, StartError> {
        let registry = Registry::new();
        let (budgets, fleet) = fleet(&registry, || ProxyFile::from_toml_str(text))?;
        self.start_with(registry, budgets, fleet).await
    }

    /// [`ProxyBuilder::start`] for the budgets file at `path`.
    ///
    /// # Errors
    ///
    /// As [`ProxyBuilder::start`]; [`StartError::Config`] also when the file cannot be read.
    pub async fn start_path(self, path: impl AsRef<Path>) -> Result<Proxy, StartError> {
        let registry = Registry::new();
        let (budgets, fleet) = fleet(&registry, || ProxyFile::from_path(path))?;
        self.start_with(registry, budgets, fleet).await
    }

    async fn start_with(
        self,
        registry: Registry,
        file: ProxyFile,
        fleet: Option<inflight_redis::RedisFleet>,
    ) -> Result<Proxy, StartError> {
        let log = self.log.unwrap_or_else(|| Arc::new(|_: &str| {}));
        if file.routes().next().is_none() {
            return Err(StartError::NoProxiedBudget);
        }
        let budgets = file.budgets();
        let proxy_config = file.proxy().cloned().unwrap_or_default();
        // A request body that goes idle_timeout without a frame is the client's failure.
        let body_stall = proxy_config.clients().idle_timeout();
        let mut routes = Vec::new();
        for (budget, route) in file.routes() {
            let scope = budgets.scope(budget.name()).unwrap_or_default();
            let state =
                RouteState::new(&registry, budget.clone(), route.clone(), scope, body_stall);
            routes.push(Arc::new(RouteSlot::new(budget.name(), state)));
        }
        let mut listeners = Vec::new();
        for listener in file.listeners() {
            let default = listener.default_budget();
            let own = file
                .route(default)
                .is_some_and(|r| r.listen() == listener.addr());
            let field = if own {
                format!("{}.listen", budget_path(default))
            } else {
                "proxy.routes".to_string()
            };
            listeners.push((listener.clone(), bind(&field, listener.addr()).await?));
        }
        let admin_listener = match proxy_config.admin() {
            Some(addr) => Some(bind("proxy.admin", addr).await?),
            None => None,
        };
        let shared = Arc::new(Shared {
            registry,
            routes,
            listeners: file.listeners().to_vec(),
            proxy: Mutex::new(proxy_config),
            fleet: budgets.fleet().cloned(),
            fleets: Mutex::new(fleet.into_iter().collect()),
            draining: AtomicBool::new(false),
            runtime: tokio::runtime::Handle::current(),
            started: tokio::time::Instant::now(),
            bound: std::sync::OnceLock::new(),
        });
        let (stop, stopped) = watch::channel(false);
        let clients = shared.proxy_config().clients();
        let mut servers = Vec::new();
        let mut bound = Vec::new();
        for (config, listener) in listeners {
            let addr = listener
                .local_addr()
                .expect("a bound listener has an address");
            let table = Arc::new(route::Table::new(&config, &shared.routes));
            bound.push((config, addr));
            let handle_log = log.clone();
            let conns = Arc::new(metrics::ConnMetrics::new(
                &shared.registry,
                table.default_name(),
            ));
            servers.push(server::spawn(
                listener,
                stopped.clone(),
                log.clone(),
                clients,
                conns,
                move |request, peer| {
                    let slot = table.pick(&request).clone();
                    route::forward(slot, request, peer, handle_log.clone())
                },
            ));
        }
        // Each proxied budget, with the address of the listener that serves it.
        let addrs: Vec<(String, SocketAddr)> = shared
            .routes
            .iter()
            .filter_map(|slot| {
                let (_, addr) = bound.iter().find(|(l, _)| {
                    l.default_budget() == slot.name
                        || l.rules().iter().any(|r| r.budget() == slot.name)
                })?;
                Some((slot.name.clone(), *addr))
            })
            .collect();
        let _ = shared.bound.set(addrs);
        let mut admin_addr = None;
        // The admin server answers until the drain is over (/readyz says 503 meanwhile).
        let (admin_stop, admin_stopped) = watch::channel(false);
        let admin = admin_listener.map(|listener| {
            admin_addr = listener.local_addr().ok();
            let shared = shared.clone();
            let conns = Arc::new(metrics::ConnMetrics::new(
                &shared.registry,
                config::ADMIN_LISTENER,
            ));
            let answer = shared.clone();
            server::spawn(
                listener,
                admin_stopped,
                log.clone(),
                clients,
                conns,
                move |request, _| {
                    let response = admin::answer(&answer, &request);
                    async move { response }
                },
            )
        });
        let upkeep = {
            let shared = Arc::downgrade(&shared);
            let log = log.clone();
            tokio::spawn(async move {
                // Every second: a fleet budget that lost Redis (or got it back, or learns after
                // Redis lost its state) is said; every tenth of a second, the histograms are
                // folded.
                let mut fold = tokio::time::interval(crate::metrics::UPKEEP_INTERVAL);
                let mut watch = tokio::time::interval(FLEET_WATCH_INTERVAL);
                for every in [&mut fold, &mut watch] {
                    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                }
                let mut health: Vec<inflight_redis::HealthLog> = Vec::new();
                // At start, whether the fleet's Redis answers: a budget whose Redis does not
                // is marked down then (said on the first tick, and in the metrics), not at the
                // first request.
                let fleets = shared.upgrade().map(|s| s.fleets()).unwrap_or_default();
                for fleet in &fleets {
                    fleet.check().await;
                }
                drop(fleets);
                loop {
                    let watching = tokio::select! {
                        _ = fold.tick() => false,
                        _ = watch.tick() => true,
                    };
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    if !watching {
                        shared.registry.upkeep();
                        continue;
                    }
                    let fleets = shared.fleets();
                    health.resize_with(fleets.len(), || {
                        inflight_redis::HealthLog::new(FLEET_REPEAT)
                    });
                    for (fleet, health) in fleets.iter().zip(&mut health) {
                        for line in health.lines(fleet) {
                            log(&line);
                        }
                    }
                }
            })
        };
        Ok(Proxy {
            shared,
            stop,
            admin_stop,
            servers,
            admin,
            upkeep,
            admin_addr,
        })
    }
}

impl Proxy {
    /// Options before starting: see [`ProxyBuilder`].
    pub fn builder() -> ProxyBuilder {
        ProxyBuilder::default()
    }

    /// Each proxied budget and the address of the listener that serves it.
    fn bound(&self) -> &[(String, SocketAddr)] {
        self.shared.bound.get().map_or(&[][..], Vec::as_slice)
    }

    /// The address budget `name`'s listener is bound to (the port picked, for port 0).
    pub fn local_addr(&self, name: &str) -> Option<SocketAddr> {
        self.bound()
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| *a)
    }

    /// Each proxied budget's name and the address its listener is bound to, in file order.
    pub fn listeners(&self) -> impl Iterator<Item = (&str, SocketAddr)> {
        self.bound().iter().map(|(n, a)| (n.as_str(), *a))
    }

    /// The URL budget `name` forwards to now.
    pub fn upstream(&self, name: &str) -> Option<String> {
        let slot = self.shared.routes.iter().find(|s| s.name == name)?;
        Some(slot.current().route.upstream().url().to_string())
    }

    /// Where the fleet budgets keep their permits: the `[fleet]` URL without its password,
    /// the names of the proxied budgets with `scope = "fleet"`, and the lease; `None` without
    /// a `[fleet]` table. What the proxy says when it starts.
    pub fn fleet(&self) -> Option<(String, Vec<String>, std::time::Duration)> {
        let config = self.shared.fleet.as_ref()?;
        let names = self
            .shared
            .routes
            .iter()
            .filter(|slot| slot.current().is_fleet())
            .map(|slot| slot.name.clone())
            .collect();
        let lease = config
            .lease()
            .unwrap_or(inflight_redis::RedisFleet::DEFAULT_LEASE);
        Some((config.shown_url(), names, lease))
    }

    /// The address the admin server is bound to, if there is one.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The Prometheus text `/metrics` serves.
    pub fn metrics(&self) -> String {
        self.shared.render_metrics()
    }

    /// Applies the budgets file `text`. New permits follow the new limits; permits held now
    /// are never taken back. A budget whose settings did not change keeps its permits and
    /// counters.
    ///
    /// A budget whose settings changed is built anew: requests admitted before the reload
    /// finish under the old one, and count against the new limit until they end (the new
    /// budget holds a permit for each, and counts those as admitted).
    ///
    /// # Errors
    ///
    /// The running configuration stays as it was when the file is not valid
    /// ([`ReloadError::Config`]) or changes which budgets are proxied, where they listen, the
    /// admin address, the limits on client connections or the `[fleet]` table
    /// ([`ReloadError::NeedsRestart`]).
    pub fn reload(&self, text: &str) -> Result<Reloaded, ReloadError> {
        let (budgets, fleet) = fleet(&self.shared.registry, || ProxyFile::from_toml_str(text))?;
        self.apply(budgets, fleet)
    }

    /// [`Proxy::reload`] from the file at `path`.
    ///
    /// # Errors
    ///
    /// As [`Proxy::reload`]; [`ReloadError::Config`] also when the file cannot be read.
    pub fn reload_path(&self, path: impl AsRef<Path>) -> Result<Reloaded, ReloadError> {
        let (budgets, fleet) = fleet(&self.shared.registry, || ProxyFile::from_path(path))?;
        self.apply(budgets, fleet)
    }

    fn apply(
        &self,
        file: ProxyFile,
        fleet: Option<inflight_redis::RedisFleet>,
    ) -> Result<Reloaded, ReloadError> {
        let restart = |field: String, message: &str| ReloadError::NeedsRestart {
            field,
            message: message.to_string(),
        };
        let budgets = file.budgets();
        let mut next = Vec::new();
        for (budget, route) in file.routes() {
            let path = budget_path(budget.name());
            let Some(slot) = self.shared.routes.iter().find(|s| s.name == budget.name()) else {
                return Err(restart(path, "a newly proxied budget needs a restart"));
            };
            if slot.listen != route.listen() {
                return Err(restart(
                    format!("{path}.listen"),
                    "a new listen address needs a restart",
                ));
            }
            next.push((slot.clone(), budget.clone(), route.clone()));
        }
        if let Some(gone) = self
            .shared
            .routes
            .iter()
            .find(|s| !next.iter().any(|(n, _, _)| n.name == s.name))
        {
            return Err(restart(
                budget_path(&gone.name),
                "a budget no longer proxied needs a restart",
            ));
        }
        if budgets.fleet() != self.shared.fleet.as_ref() {
            return Err(restart(
                "fleet".into(),
                "a new [fleet] table needs a restart",
            ));
        }
        if file.listeners() != self.shared.listeners.as_slice() {
            return Err(restart(
                "proxy.routes".into(),
                "new routes or listeners need a restart",
            ));
        }
        let proxy = file.proxy().cloned().unwrap_or_default();
        if proxy.admin() != self.shared.proxy_config().admin() {
            return Err(restart(
                "proxy.admin".into(),
                "a new admin address needs a restart",
            ));
        }
        if proxy.clients() != self.shared.proxy_config().clients() {
            let running = self.shared.proxy_config().clients();
            let new = proxy.clients();
            let field = if new.first_byte_timeout() != running.first_byte_timeout() {
                "proxy.first_byte_timeout"
            } else if new.idle_timeout() != running.idle_timeout() {
                "proxy.idle_timeout"
            } else if new.max_connections() != running.max_connections() {
                "proxy.max_connections"
            } else if new.http2_keepalive_interval() != running.http2_keepalive_interval() {
                "proxy.http2_keepalive_interval"
            } else {
                "proxy.http2_keepalive_timeout"
            };
            return Err(restart(
                field.into(),
                "new limits on client connections need a restart",
            ));
        }
        let mut reloaded = Reloaded::default();
        let mut fleet_rebuilt = false;
        for (slot, budget, route) in next {
            let old = slot.current();
            let scope = budgets.scope(budget.name()).unwrap_or_default();
            let fleet = matches!(scope, Scope::Fleet { .. });
            let (mut state, new_budget) = old.reloaded(budget, route, scope);
            fleet_rebuilt |= new_budget && fleet;
            if new_budget {
                route::hand_over(&self.shared.runtime, &old, &mut state, fleet);
            }
            if new_budget || state.route != old.route {
                reloaded.changed.push(slot.name.clone());
            }
            slot.replace(state);
        }
        // A fleet none of whose stores is in use holds no lease: no need to keep it.
        if let (true, Some(fleet)) = (fleet_rebuilt, fleet) {
            self.shared
                .fleets
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(fleet);
        }
        if proxy.drain() != self.shared.proxy_config().drain() {
            reloaded.proxy_changed.push("proxy.drain".to_string());
        }
        *self
            .shared
            .proxy
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = proxy;
        Ok(reloaded)
    }

    /// Stops accepting connections, lets every connection finish the request it is serving
    /// (response body included), and returns once all have closed or the `drain` time of the
    /// running configuration has passed, whichever is first. `/readyz` answers 503 meanwhile.
    /// Connections still open when the drain time is over are cut (their clients see the
    /// connection end), and their tasks stop. Calls that went on without their client
    /// (`on_client_gone = "finish"`) are waited for within the same time, and cut with them.
    ///
    /// Then every lease of the fleet budgets goes back to Redis ([`RedisFleet::shutdown`],
    /// at most one round-trip timeout more): requests still running past the drain time see
    /// theirs lost, and the fleet does not count them any more.
    ///
    /// [`RedisFleet::shutdown`]: inflight_redis::RedisFleet::shutdown
    pub async fn drain(mut self) -> Drained {
        self.shared.draining.store(true, Ordering::Relaxed);
        let _ = self.stop.send(true);
        let drain: Duration = self.shared.proxy_config().drain();
        let servers = std::mem::take(&mut self.servers);
        let aborts: Vec<_> = servers.iter().map(JoinHandle::abort_handle).collect();
        // The calls that went on without their client (`on_client_gone = "finish"`) are
        // waited for too.
        let routes = self.shared.routes.clone();
        let in_time = tokio::time::timeout(drain, async {
            for server in servers {
                let _ = server.await;
            }
            for route in &routes {
                route.detached.ended().await;
            }
        })
        .await
        .is_ok();
        let _ = self.admin_stop.send(true);
        let in_flight = self
            .shared
            .routes
            .iter()
            .map(|r| r.current().in_flight())
            .sum();
        // What still runs when the drain time is over is cut: each listener's task owns its
        // connections' tasks, and aborting it aborts them.
        for abort in aborts {
            abort.abort();
        }
        for route in &routes {
            route.detached.cut();
        }
        let fleets = std::mem::take(
            &mut *self
                .shared
                .fleets
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        give_back(&fleets).await;
        Drained { in_time, in_flight }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for server in &self.servers {
            server.abort();
        }
        for route in &self.shared.routes {
            route.detached.cut();
        }
        if let Some(admin) = &self.admin {
            admin.abort();
        }
        self.upkeep.abort();
    }
}

/// Gives back every lease of `fleets`, all at once.
async fn give_back(fleets: &[inflight_redis::RedisFleet]) {
    let mut set = tokio::task::JoinSet::new();
    for fleet in fleets {
        let fleet = fleet.clone();
        set.spawn(async move { fleet.shutdown().await });
    }
    while set.join_next().await.is_some() {}
}

/// The file `load` gives, its budgets built under `registry` (so their metrics are its), with
/// each `scope = "fleet"` budget given its permits in the Redis of the file's `[fleet]` table,
/// and that fleet.
fn fleet(
    registry: &Registry,
    load: impl FnOnce() -> Result<ProxyFile, inflight::ConfigError>,
) -> Result<(ProxyFile, Option<inflight_redis::RedisFleet>), FleetLoadError> {
    registry.within(|| {
        let file = load()?;
        let (budgets, fleet) = inflight_redis::attach_fleet(file.budgets().clone())?;
        Ok((file.with_budgets(budgets), fleet))
    })
}

/// A budgets file that could not be loaded, before it is told apart for start or reload.
enum FleetLoadError {
    Config(inflight::ConfigError),
    Fleet(inflight_redis::LoadError),
}

impl From<inflight::ConfigError> for FleetLoadError {
    fn from(e: inflight::ConfigError) -> Self {
        FleetLoadError::Config(e)
    }
}

impl From<inflight_redis::LoadError> for FleetLoadError {
    fn from(e: inflight_redis::LoadError) -> Self {
        match e {
            inflight_redis::LoadError::Config(e) => FleetLoadError::Config(e),
            other => FleetLoadError::Fleet(other),
        }
    }
}

impl From<FleetLoadError> for StartError {
    fn from(e: FleetLoadError) -> Self {
        match e {
            FleetLoadError::Config(e) => StartError::Config(e),
            FleetLoadError::Fleet(e) => StartError::Fleet(e),
        }
    }
}

impl From<FleetLoadError> for ReloadError {
    fn from(e: FleetLoadError) -> Self {
        match e {
            FleetLoadError::Config(e) => ReloadError::Config(e),
            FleetLoadError::Fleet(e) => ReloadError::Fleet(e),
        }
    }
}

/// The queue of connections the kernel completes before the proxy accepts them. tokio's (and
/// std's) 128 overflows when clients connect faster than a busy proxy accepts, and each client
/// that overflows it waits a second for its SYN to be sent again; nginx uses 511, HAProxy its
/// `maxconn`. The kernel caps it at `net.core.somaxconn`.
const LISTEN_BACKLOG: u32 = 4096;

async fn bind(field: &str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    let listen = || -> std::io::Result<TcpListener> {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(LISTEN_BACKLOG)
    };
    listen().map_err(|source| StartError::Bind {
        field: field.to_string(),
        addr,
        source,
    })
}
