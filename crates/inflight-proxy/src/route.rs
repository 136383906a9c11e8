//! One proxied budget: its settings, its pooled client to the upstream, and the forwarding of a
//! request once it holds a permit.

use std::error::Error as StdError;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use inflight::config::Scope;

use crate::config::{ClientGone, Release, Route};
use inflight::limit::{Outcome, Verdict};
use inflight::tower::HeldCall;
use inflight::{AcquireError, Budget, BudgetSnapshot, OwnedPermit, RetryAfter};
use tokio::time::Instant;

use crate::body::ProxyBody;
use crate::call::CallSlot;
use crate::client_body::ClientBody;
use crate::detached::Detached;
use crate::grpc;
use crate::grpc::GrpcTally;
use crate::headers::{self, Peer};
use crate::metrics::{LogPace, Registry, RouteMetrics};
use crate::refusal::{self, Reason};
use crate::replaced::{InUse, Replaced};
use crate::sweep::Sweeper;
use crate::upstream::answer::AnswerBody;
use crate::upstream::{
    chunked_alone, Http1Pool, Http2Upstream, Malformed, Pooled, UpstreamError, WatchedBody,
};
use crate::{tls, Log};

/// The pooled client to one upstream: HTTP/1.1 over plain TCP (`http://`) on a pool of its
/// own, HTTP/2 (with prior knowledge, or by ALPN over TLS) on a connection of its own, or
/// HTTP/1.1 over TLS (`https://`) by hyper-util's client.
#[derive(Clone)]
pub(crate) enum UpstreamClient {
    Http1(Arc<Http1Pool>),
    Http2(Arc<Http2Upstream<HttpConnector>>),
    Http2Tls(Arc<Http2Upstream<tls::Connector>>),
    Tls(Box<Client<tls::Connector, WatchedBody>>),
}

impl UpstreamClient {
    /// Sends `request`; `continues`: its client expects `100 Continue` before it sends the
    /// body (the proxy's own client waits for the upstream's; hyper's sends the body at once).
    /// The request goes into the returned future at once, which holds it only inside its box.
    /// `client_sending` says while the client's body is waited for; a body that goes
    /// `body_stall` without a frame before the upstream answers fails as the client's
    /// ([`WatchedBody`], for every client).
    fn request(
        &self,
        request: Request<Incoming>,
        continues: bool,
        client_sending: Option<Arc<ClientBody>>,
        body_stall: Duration,
    ) -> Sent<'_> {
        let request = request.map(|body| WatchedBody::new(body, client_sending, body_stall));
        match self {
            UpstreamClient::Http1(pool) => Sent::Http1(Box::pin(pool.request(request, continues))),
            UpstreamClient::Http2(client) => Sent::Http2(Box::pin(client.request(request))),
            UpstreamClient::Http2Tls(client) => Sent::Http2(Box::pin(client.request(request))),
            UpstreamClient::Tls(client) => Sent::Legacy(client.request(request)),
        }
    }

    /// Whether requests go out with an origin-form target (`/path?query`); else absolute.
    fn origin_form(&self) -> bool {
        matches!(self, UpstreamClient::Http1(_))
    }
}

/// A request on its way to the upstream: a pointer's size whatever the client.
enum Sent<'a> {
    Http1(Pin<Box<dyn Future<Output = Pooled> + Send + 'a>>),
    Http2(Pin<Box<dyn Future<Output = Result<Response<Incoming>, UpstreamError>> + Send + 'a>>),
    Legacy(hyper_util::client::legacy::ResponseFuture),
}

impl Future for Sent<'_> {
    type Output = Result<Response<AnswerBody>, UpstreamError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Sent::Http1(sent) => sent.as_mut().poll(cx),
            Sent::Http2(sent) => sent
                .as_mut()
                .poll(cx)
                .map_ok(|response| response.map(AnswerBody::Hyper)),
            Sent::Legacy(sent) => Pin::new(sent).poll(cx).map(|answered| {
                let mut response = answered.map_err(UpstreamError::Client)?;
                // As the proxy's own client reads answers: its own version to the client, and
                // no transfer coding but chunked (it could not be told to the client).
                if response.version() == Version::HTTP_10 {
                    *response.version_mut() = Version::HTTP_11;
                }
                let headers = response.headers();
                if headers.contains_key(hyper::header::TRANSFER_ENCODING) && !chunked_alone(headers)
                {
                    return Err(UpstreamError::Malformed(Malformed::Coding));
                }
                Ok(response.map(AnswerBody::Hyper))
            }),
        }
    }
}

/// How long an idle pooled connection to an upstream is kept.
const POOL_IDLE: Duration = Duration::from_secs(90);

/// How long a connection to an upstream may take before the request gets a 502, when the
/// budget has no call timeout to bound it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A budget's route as it runs: replaced whole on reload.
pub(crate) struct RouteState {
    pub(crate) budget: Budget,
    /// Which budget of the route this is: one more each time a reload replaces it.
    generation: u64,
    pub(crate) route: Route,
    scope: Scope,
    authority: HeaderValue,
    /// The upstream's scheme and authority, as the URIs sent to it start.
    scheme: hyper::http::uri::Scheme,
    authority_uri: hyper::http::uri::Authority,
    /// The header that names a request's class (`class_header`), if the route has one.
    class_header: Option<HeaderName>,
    client: UpstreamClient,
    metrics: Arc<RouteMetrics>,
    /// Ends the budget's calls at their deadline: one per budget, whose call timeout is one
    /// duration.
    sweeper: Arc<Sweeper>,
    /// How long a client's request body may go without a frame (the proxy's `idle_timeout`).
    body_stall: Duration,
    /// The calls still running under the budget this one replaced, while there are any.
    carried: Option<Arc<Carried>>,
    /// The budgets reloads replaced under this route, whose counts its counters go on from.
    replaced: Arc<Replaced>,
    /// Held while this state lives: its budget may still count (see [`Replaced`]).
    in_use: InUse,
}

/// The calls a budget replaced by a reload still runs, and the permits of the new budget held
/// for them ([`hand_over`]).
pub(crate) struct Carried {
    /// The replaced route's state, while calls run or wait under it.
    old: Mutex<Option<Arc<RouteState>>>,
    /// Permits of the new budget held for them.
    held: AtomicUsize,
}

impl RouteState {
    /// Whether the budget keeps its permits in the fleet's Redis.
    pub(crate) fn is_fleet(&self) -> bool {
        matches!(self.scope, Scope::Fleet { .. })
    }

    /// `body_stall`: how long a client's request body may go without a frame.
    pub(crate) fn new(
        registry: &Registry,
        budget: Budget,
        route: Route,
        scope: Scope,
        body_stall: Duration,
    ) -> RouteState {
        let metrics = Arc::new(RouteMetrics::new(registry, budget.name()));
        let client = client(&route);
        let sweeper = Arc::new(Sweeper::new());
        RouteState::with(
            budget,
            (0, sweeper),
            route,
            scope,
            client,
            (metrics, Arc::default()),
            body_stall,
        )
    }

    /// `(generation, sweeper)`: the budget's generation and the sweeper of its calls;
    /// `(metrics, replaced)`: the route's, kept from reload to reload.
    fn with(
        budget: Budget,
        (generation, sweeper): (u64, Arc<Sweeper>),
        route: Route,
        scope: Scope,
        client: UpstreamClient,
        (metrics, replaced): (Arc<RouteMetrics>, Arc<Replaced>),
        body_stall: Duration,
    ) -> RouteState {
        let authority = HeaderValue::from_str(route.upstream().authority())
            .expect("a checked upstream's authority is a valid header value");
        let scheme = hyper::http::uri::Scheme::try_from(route.upstream().scheme())
            .expect("a checked upstream's scheme is http or https");
        let authority_uri = hyper::http::uri::Authority::try_from(route.upstream().authority())
            .expect("a checked upstream's authority is a valid authority");
        let class_header = route.class_header().map(|name| {
            HeaderName::from_bytes(name.as_bytes())
                .expect("a checked class_header is a valid header name")
        });
        RouteState {
            budget,
            generation,
            route,
            scope,
            authority,
            scheme,
            authority_uri,
            class_header,
            client,
            metrics,
            sweeper,
            body_stall,
            carried: None,
            replaced,
            in_use: InUse::default(),
        }
    }

    /// The budget's snapshot, its counters going on from those of the budgets reloads
    /// replaced under this route (counted since the route started, not since its budget was
    /// built).
    pub(crate) fn snapshot(&self) -> BudgetSnapshot {
        let mut snapshot = self.budget.snapshot();
        self.replaced.add_to(&mut snapshot);
        snapshot
    }

    /// The calls at the upstream now: the budget's in flight, with those still running under
    /// the budgets it replaced in place of the permits held for them (there may be more of
    /// them than the new limit). Never fewer than the budget's own: a permit held for a call
    /// that ended is given back up to [`HANDOFF_POLL`] later, and counts until then.
    pub(crate) fn in_flight(&self) -> usize {
        let own = self.budget.in_flight();
        let Some(carried) = &self.carried else {
            return own;
        };
        let older = carried
            .old
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or(0, |old| old.in_flight());
        own.max(own.saturating_sub(carried.held.load(Ordering::Acquire)) + older)
    }

    /// This route under new settings, and whether its budget was replaced: the same budget
    /// (permits, counters) if its settings and scope did not change, the same pool of
    /// connections if the upstream did not.
    pub(crate) fn reloaded(
        &self,
        budget: Budget,
        route: Route,
        scope: Scope,
    ) -> (RouteState, bool) {
        let replaced = budget.config() != self.budget.config() || scope != self.scope;
        let (budget, generation, sweeper) = if replaced {
            self.replaced.push(&self.budget, &self.in_use);
            (budget, self.generation + 1, Arc::new(Sweeper::new()))
        } else {
            (self.budget.clone(), self.generation, self.sweeper.clone())
        };
        let same_upstream = route.upstream() == self.route.upstream()
            && route.upstream_http2() == self.route.upstream_http2()
            && route.ca_file() == self.route.ca_file();
        let client = if same_upstream {
            self.client.clone()
        } else {
            client(&route)
        };
        let state = RouteState::with(
            budget,
            (generation, sweeper),
            route,
            scope,
            client,
            (self.metrics.clone(), self.replaced.clone()),
            self.body_stall,
        );
        (state, replaced)
    }
}

/// A pooled client to the route's upstream: HTTP/1.1 with keep-alive, or HTTP/2
/// (`upstream_http2`: with prior knowledge, or by ALPN over TLS) whose requests share one
/// connection as streams.
fn client(route: &Route) -> UpstreamClient {
    let http2 = route.upstream_http2();
    let tls = route.upstream().is_tls();
    if !http2 && !tls {
        let authority = hyper::http::uri::Authority::try_from(route.upstream().authority())
            .expect("a checked upstream's authority is a valid authority");
        return UpstreamClient::Http1(Arc::new(Http1Pool::new(
            &authority,
            POOL_IDLE,
            CONNECT_TIMEOUT,
        )));
    }
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
    if http2 {
        let target = Uri::builder()
            .scheme(route.upstream().scheme())
            .authority(route.upstream().authority())
            .path_and_query("/")
            .build()
            .expect("a checked upstream's scheme and authority make a URI");
        return if tls {
            let connector = tls::Connector::new(connector, route.ca_file(), true);
            UpstreamClient::Http2Tls(Arc::new(Http2Upstream::new(target, connector, POOL_IDLE)))
        } else {
            UpstreamClient::Http2(Arc::new(Http2Upstream::new(target, connector, POOL_IDLE)))
        };
    }
    let connector = tls::Connector::new(connector, route.ca_file(), false);
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE)
        .timer(TokioTimer::new());
    UpstreamClient::Tls(Box::new(builder.build(connector)))
}

/// How often a budget replaced by a reload is checked for calls still running under it.
const HANDOFF_POLL: Duration = Duration::from_millis(5);

/// Keeps `new` from admitting on top of the calls still running under `old`, the state it
/// replaced: holds one permit of `new`'s budget for each call in flight or waiting under
/// `old`'s (up to `new`'s limit), and gives them back as those calls end. Held permits of
/// `old` are never revoked; new ones come from `new` only as far as its limit leaves room
/// beside them. Meanwhile `new` counts the calls at the upstream as `old`'s and its own
/// ([`RouteState::in_flight`]).
///
/// Checked every [`HANDOFF_POLL`], so a permit comes back up to that late: the limit is kept,
/// at the cost of a moment's unused capacity. A permit taken here is counted by `new` as
/// admitted.
///
/// Not done for a budget with a rate limit (a permit taken here would spend a rate slot that a
/// request should have) or with permits in the fleet's store (the old calls' leases are in the
/// store already, under the same keys, and count against the new budget there).
pub(crate) fn hand_over(
    runtime: &tokio::runtime::Handle,
    old: &Arc<RouteState>,
    new: &mut RouteState,
    fleet: bool,
) {
    if fleet || new.budget.config().rate_limit().is_some() {
        return;
    }
    let (old_budget, new_budget) = (old.budget.clone(), new.budget.clone());
    // The first permits are taken before the new budget serves anyone.
    let mut held: Vec<OwnedPermit> = Vec::new();
    if !take_over(&old_budget, &new_budget, &mut held) {
        return;
    }
    let carried = Arc::new(Carried {
        old: Mutex::new(Some(old.clone())),
        held: AtomicUsize::new(held.len()),
    });
    new.carried = Some(carried.clone());
    runtime.spawn(async move {
        loop {
            tokio::time::sleep(HANDOFF_POLL).await;
            let running = take_over(&old_budget, &new_budget, &mut held);
            carried.held.store(held.len(), Ordering::Release);
            if !running {
                *carried.old.lock().unwrap_or_else(PoisonError::into_inner) = None;
                return;
            }
        }
    });
}

/// Holds as many permits of `new` as calls run or wait under `old` (up to `new`'s limit);
/// whether any still do.
fn take_over(old: &Budget, new: &Budget, held: &mut Vec<OwnedPermit>) -> bool {
    let under_old = old.in_flight() + old.snapshot().waiting;
    let want = under_old.min(new.limit());
    held.truncate(want);
    while held.len() < want {
        // A try that fails is counted as a refusal: ask only while a permit is free.
        if new.in_flight() >= new.limit() || new.snapshot().waiting > 0 {
            break;
        }
        match new.try_acquire_owned() {
            Ok(permit) => held.push(permit),
            Err(_) => break,
        }
    }
    under_old > 0
}

/// A route's place: where it listens (as configured) and its current state.
pub(crate) struct RouteSlot {
    pub(crate) name: String,
    pub(crate) listen: SocketAddr,
    state: RwLock<Arc<RouteState>>,
    /// Its calls that go on without their client (`on_client_gone = "finish"`), whatever
    /// budget of the route they hold a permit of.
    pub(crate) detached: Detached,
}

impl RouteSlot {
    pub(crate) fn new(name: &str, state: RouteState) -> RouteSlot {
        RouteSlot {
            name: name.to_string(),
            listen: state.route.listen(),
            detached: Detached::new(state.metrics.without_client.clone()),
            state: RwLock::new(Arc::new(state)),
        }
    }

    pub(crate) fn current(&self) -> Arc<RouteState> {
        self.state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn replace(&self, state: RouteState) {
        *self.state.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(state);
    }
}

/// The budgets of one listener: its default, and the rules that pick another by path prefix
/// (and host), longest prefix first.
pub(crate) struct Table {
    default: Arc<RouteSlot>,
    rules: Vec<(crate::config::RouteRule, Arc<RouteSlot>)>,
}

impl Table {
    pub(crate) fn new(listener: &crate::config::Listener, slots: &[Arc<RouteSlot>]) -> Table {
        let slot = |name: &str| {
            slots
                .iter()
                .find(|s| s.name == name)
                .expect("a checked listener names proxied budgets")
                .clone()
        };
        Table {
            default: slot(listener.default_budget()),
            rules: listener
                .rules()
                .iter()
                .map(|r| (r.clone(), slot(r.budget())))
                .collect(),
        }
    }

    /// The name of the listener's default budget.
    pub(crate) fn default_name(&self) -> &str {
        &self.default.name
    }

    /// The budget `request` goes to.
    pub(crate) fn pick(&self, request: &Request<Incoming>) -> &Arc<RouteSlot> {
        if self.rules.is_empty() {
            return &self.default;
        }
        let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
        let host = request
            .uri()
            .host()
            .or_else(|| request.headers().get(hyper::header::HOST)?.to_str().ok());
        self.rules
            .iter()
            .find(|(rule, _)| rule.matches(path, host))
            .map_or(&self.default, |(_, slot)| slot)
    }
}

/// Forwards `request` from `peer` through the budget of `slot`'s current state, or answers it
/// itself.
///
/// Each request's future is boxed, and copied whole when it is, so it is kept small: one
/// future for the whole request, not one awaiting another (each level would hold its own copy
/// of the request), and the call's own future boxed apart once a permit is held.
pub(crate) fn forward(
    slot: Arc<RouteSlot>,
    request: Request<Incoming>,
    peer: Peer,
    log: Log,
) -> impl Future<Output = Response<ProxyBody>> + Send + 'static {
    let arrived = Instant::now();
    let http10 = request.version() == Version::HTTP_10;
    async move {
        let (state, mut response) = if request.method() == Method::CONNECT {
            let refused = plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "inflight: CONNECT is not proxied\n",
            );
            (slot.current(), refused)
        } else if !forwardable(request.uri()) {
            (slot.current(), target_refused())
        } else if !one_host(&request) {
            let refused = plain(
                StatusCode::BAD_REQUEST,
                "inflight: an HTTP/1.1 request must have exactly one Host header\n",
            );
            (slot.current(), refused)
        } else if !coding_known(&request) {
            let refused = plain(
                StatusCode::NOT_IMPLEMENTED,
                "inflight: a request body in a transfer coding other than chunked is not proxied\n",
            );
            (slot.current(), refused)
        } else {
            // The permit first: a refused request is never forwarded, and the call timeout
            // starts now.
            let (state, call) = acquire(&slot, request.headers()).await;
            let grpc = grpc::requested(request.headers(), state.route.protocol());
            let tally = grpc.then(|| state.metrics.grpc_tally(request.uri().path()));
            let response = match call {
                Ok(call) => {
                    let forwarded: Forwarded<'_> =
                        if state.route.on_client_gone() == ClientGone::Finish {
                            Box::pin(forward_detached(
                                &slot, &state, call, request, peer, &log, &tally,
                            ))
                        } else {
                            let tally = tally.clone();
                            Box::pin(forward_call(&state, call, request, peer, &log, tally, None))
                        };
                    forwarded.await
                }
                Err(e) => {
                    state.metrics.replied(Reason::from(&e));
                    refusal::answer(&state.budget, Reason::from(&e), e.retry_after(), grpc)
                }
            };
            // A status in the headers (a trailers-only answer, the upstream's or the proxy's
            // own) is counted now; one in the trailers is counted by the body.
            if let Some(tally) = &tally {
                if let Some(status) = grpc::status(response.headers()) {
                    grpc::grpc_ended(tally, Some(status));
                }
            }
            (state, response)
        };
        state
            .metrics
            .responded(response.status().as_u16(), arrived.elapsed());
        if http10 && response.body().size_hint().exact().is_none() {
            // An answer of unknown length to an HTTP/1.0 client is ended by the close: said as
            // HTTP/1.0, hyper's server closes without promising keep-alive (as HTTP/1.1 it
            // would say `connection: keep-alive`, then close).
            *response.version_mut() = Version::HTTP_10;
        }
        response
    }
}

/// A request's call forwarded, boxed: with its client (`forward_call`), or in a task of its own
/// (`forward_detached`).
type Forwarded<'a> = Pin<Box<dyn Future<Output = Response<ProxyBody>> + Send + 'a>>;

/// [`forward_call`] in a task of its own, which goes on if the request's future is dropped
/// (its client left): the call ends as it would have, its answer read and dropped (see
/// `Streamed`'s drop), holding its permit until then (`on_client_gone = "finish"`).
async fn forward_detached(
    slot: &RouteSlot,
    state: &Arc<RouteState>,
    call: HeldCall,
    request: Request<Incoming>,
    peer: Peer,
    log: &Log,
    tally: &Option<GrpcTally>,
) -> Response<ProxyBody> {
    let grpc = tally.is_some();
    let (on, log, tally) = (Arc::clone(state), Arc::clone(log), tally.clone());
    let detached = slot.detached.clone();
    let (answer, answered) = tokio::sync::oneshot::channel();
    let status_tally = tally.clone();
    slot.detached.spawn(async move {
        let response = forward_call(
            &on,
            call,
            request,
            peer,
            &log,
            tally,
            Some(detached.clone()),
        );
        if let Err(response) = answer.send(response.await) {
            // Its client left before the answer's head: counted here, and the call marked so
            // that its body, read on as it drops, does not count it again.
            if let Some(slot) = response.body().call() {
                slot.left_now();
            }
            detached.client_left();
            // A gRPC status in the headers, which `forward` would have counted.
            if let (Some(tally), Some(status)) = (&status_tally, grpc::status(response.headers())) {
                grpc::grpc_ended(tally, Some(status));
            }
        }
    });
    // Nothing: cut by a drain that ran out (or as the runtime shuts down), or the task panicked.
    answered
        .await
        .unwrap_or_else(|_| replied(state, Reason::Unreachable, grpc))
}

/// Waits for a permit of the route's budget, in the class `headers` name (with the route's
/// `class_header`; else the default class). A permit granted by a budget that a reload
/// replaced meanwhile goes back, and the request waits again under the new one: else the old
/// budget's queue would keep admitting up to the old limit after the limit was lowered.
async fn acquire(
    slot: &RouteSlot,
    headers: &hyper::HeaderMap,
) -> (Arc<RouteState>, Result<HeldCall, AcquireError>) {
    let mut state = slot.current();
    loop {
        let class = state
            .class_header
            .as_ref()
            .and_then(|name| headers::class_of(headers, name));
        let granted = match class {
            Some(class) => state.budget.acquire_owned_in(class).await,
            None => state.budget.acquire_owned().await,
        };
        let permit = match granted {
            Ok(permit) => permit,
            Err(e) => return (state, Err(e)),
        };
        let now = slot.current();
        if now.generation == state.generation {
            // The same budget, perhaps with other route settings: forward under those.
            return (now, Ok(HeldCall::from_permit(permit)));
        }
        // Given back before it was a call: not counted as a cancelled call.
        drop(permit);
        state = now;
    }
}

/// Sends the request of `call` to the upstream and answers with what comes back. The request
/// is made ready and handed to the client before the future begins, so the future holds it
/// once, inside the client's. `outlives_client`: where the call goes on if its client leaves
/// (`on_client_gone = "finish"`).
#[allow(clippy::too_many_arguments)]
fn forward_call<'a>(
    state: &'a RouteState,
    call: HeldCall,
    mut request: Request<Incoming>,
    peer: Peer,
    log: &'a Log,
    tally: Option<GrpcTally>,
    outlives_client: Option<Detached>,
) -> impl Future<Output = Response<ProxyBody>> + Send + 'a {
    let grpc = tally.is_some();
    // An HTTP/2 client's stream may stop being polled for good (see `ProxyBody::holding`).
    let client_http2 = request.version() == Version::HTTP_2;
    // Watched only for a request with a body to come (no allocation for the others).
    let client_sending = (!hyper::body::Body::is_end_stream(request.body()))
        .then(|| Arc::new(ClientBody::default()));
    let sent = upstream_uri(state, request.uri()).map(|uri| {
        // An HTTP/2 client names the host in the request target, not in a Host header.
        let client_host = request
            .uri()
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
        if state.route.preserve_host() && !request.headers().contains_key(hyper::header::HOST) {
            if let Some(host) = client_host {
                request.headers_mut().insert(hyper::header::HOST, host);
            }
        }
        let http2 = state.route.upstream_http2();
        *request.uri_mut() = if http2 && state.route.preserve_host() {
            // To an HTTP/2 upstream the client's host goes as `:authority`, from the URI, and
            // no `Host` beside it (the connection goes to the upstream whatever the URI says).
            with_authority(uri, request.headers_mut().remove(hyper::header::HOST))
        } else {
            uri
        };
        *request.version_mut() = if http2 {
            Version::HTTP_2
        } else {
            Version::HTTP_11
        };
        // To an HTTP/2 upstream the authority goes as `:authority`, from the URI.
        let host = (!http2).then_some(&state.authority);
        let continues = headers::for_upstream(
            request.headers_mut(),
            host,
            state.route.preserve_host() && !http2,
            &peer,
        );
        state
            .client
            .request(request, continues, client_sending.clone(), state.body_stall)
    });
    async move {
        let replied = |state: &RouteState, reason: Reason| replied(state, reason, grpc);
        let Some(mut sent) = sent else {
            // Checked before the permit was asked for; an upstream's authority always joins.
            call.finish(false, Outcome::Ignore);
            return target_refused();
        };
        // With on_lost = "cancel", a request whose fleet lease is lost before the upstream
        // answers is dropped: `None`.
        let watched = call.cancels_on();
        let deadline = call.deadline();
        let slot = CallSlot::watching_client(
            call,
            timeout_outcome(&state.route),
            client_sending,
            outlives_client,
        );
        // The budget's sweeper ends the call at its deadline, whether the upstream has not
        // answered by then or the answer's body is still streaming.
        let watch = deadline.map(|at| state.sweeper.watch(at, &slot));
        let result = {
            let sent = async {
                match &watched {
                    Some(lease) => tokio::select! {
                        biased;
                        result = &mut sent => Some(result),
                        () = lease.lost() => None,
                    },
                    None => Some((&mut sent).await),
                }
            };
            let mut sent = std::pin::pin!(sent);
            std::future::poll_fn(|cx| {
                if watch.is_some() {
                    slot.wake_on_expiry(cx.waker());
                    if slot.timed_out() {
                        return Poll::Ready(None);
                    }
                }
                sent.as_mut().poll(cx).map(Some)
            })
            .await
        };
        let Some(result) = result else {
            // The sweeper ended the call (timed out) before the upstream answered: while the
            // client still owed its body, the client's doing.
            return replied(state, timed_out(&slot));
        };
        let Some(result) = result else {
            // Counted as cancelled; nothing is learned of the upstream.
            drop(slot.take());
            return replied(state, Reason::LeaseLost);
        };
        let mut response = match result {
            Ok(answered) => {
                slot.answered();
                answered
            }
            Err(e) if from_client_body(&e) || slot.client_body_failed() => {
                // The client's request body failed, not the upstream: nothing for the limit to
                // learn. (Unless the sweeper ended the call first: then it timed out.)
                if !slot.end(false, Outcome::Ignore) {
                    return replied(state, timed_out(&slot));
                }
                return replied(state, Reason::ClientBody);
            }
            Err(e) => {
                // Whatever kept the upstream from answering says it cannot take more now, a
                // failed TLS handshake included (as a refused connection is).
                if !slot.end(false, Outcome::Overload) {
                    return replied(state, Reason::CallTimeout);
                }
                let tls = tls::is_handshake_failure(&e);
                if let Some(left_out) = state.metrics.may_log() {
                    let what = if tls {
                        "TLS handshake failed"
                    } else if e.is_connect() {
                        "cannot connect"
                    } else {
                        "failed"
                    };
                    let line = format!(
                        "budget {:?}: {} {what}: 502: {}",
                        state.budget.name(),
                        state.route.upstream().url(),
                        chain(&e)
                    );
                    log(&LogPace::with_left_out(&line, left_out));
                }
                let reason = if tls {
                    Reason::Tls
                } else {
                    Reason::Unreachable
                };
                return replied(state, reason);
            }
        };
        let status = response.status().as_u16();
        let overload = state.route.overload_status().contains(&status);
        let judged = grpc
            .then(|| grpc::judge(response.headers(), state.route.overload_grpc_status()))
            .flatten();
        let (ok, outcome) = if overload {
            (false, overload_verdict(response.headers()))
        } else if let Some(judged) = judged {
            // A trailers-only answer: its status is in its headers.
            judged
        } else {
            (status < 500, Outcome::Success.into())
        };
        // Else a gRPC call's status comes in its trailers, read as the body ends (`judge` found
        // none in the headers).
        let in_trailers = grpc && judged.is_none();
        let trailers = in_trailers.then(|| Arc::<[u32]>::from(state.route.overload_grpc_status()));
        let tally = tally.filter(|_| in_trailers);
        headers::remove_hop_by_hop(response.headers_mut());
        let (parts, body) = response.into_parts();
        let body = match state.route.release() {
            Release::Headers => {
                if !slot.end(ok, outcome) {
                    // Timed out as the answer came (another thread's sweeper).
                    return replied(state, Reason::CallTimeout);
                }
                ProxyBody::streamed(body, tally)
            }
            _ => {
                if !slot.decide(ok, outcome) {
                    return replied(state, Reason::CallTimeout);
                }
                ProxyBody::holding(body, slot, watch, watched, trailers, tally, client_http2)
            }
        };
        Response::from_parts(parts, body)
    }
}

/// An upstream's overload answer, with its `Retry-After` (or `retry-after-ms`), which pauses
/// the budget: no new request goes to the upstream before it ends. An unreadable value is
/// ignored.
fn overload_verdict(headers: &hyper::HeaderMap) -> Verdict {
    let verdict = Verdict::from(Outcome::Overload);
    match RetryAfter::from_headers(headers) {
        Ok(Some(delay)) => verdict.with_retry_after(delay),
        _ => verdict,
    }
}

/// What a call past its call timeout tells the budget's limit (`overload_on_timeout`).
fn timeout_outcome(route: &Route) -> Outcome {
    if route.overload_on_timeout() {
        Outcome::Overload
    } else {
        Outcome::Ignore
    }
}

fn replied(state: &RouteState, reason: Reason, grpc: bool) -> Response<ProxyBody> {
    state.metrics.replied(reason);
    refusal::answer(&state.budget, reason, None, grpc)
}

fn plain(status: StatusCode, text: &'static str) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::full(text));
    *response.status_mut() = status;
    response
}

/// Whether the request's target is a path the upstream can be sent (origin form).
fn forwardable(uri: &Uri) -> bool {
    uri.path_and_query()
        .is_none_or(|p| p.as_str().starts_with('/'))
}

/// Whether `request` has the one `Host` header HTTP/1.1 asks for (RFC 9112, 3.2: none, or
/// more than one, is answered 400). HTTP/1.0 and HTTP/2 requests need none.
fn one_host<B>(request: &Request<B>) -> bool {
    request.version() != hyper::Version::HTTP_11
        || request
            .headers()
            .get_all(hyper::header::HOST)
            .iter()
            .take(2)
            .count()
            == 1
}

/// Whether `request`'s body is sent in no transfer coding or in chunks alone (RFC 9112, 6.1:
/// a server answers 501 to a coding it does not know). Hyper's server takes the chunks off a
/// body coded `gzip, chunked` and leaves the gzip, which the upstream could not be told of.
fn coding_known<B: Body>(request: &Request<B>) -> bool {
    // A body of known length (none, or `Content-Length`) came in no transfer coding: its
    // headers need no look.
    if request.body().size_hint().exact().is_some() {
        return true;
    }
    let headers = request.headers();
    !headers.contains_key(hyper::header::TRANSFER_ENCODING) || chunked_alone(headers)
}

fn target_refused() -> Response<ProxyBody> {
    plain(
        StatusCode::BAD_REQUEST,
        "inflight: the request target cannot be forwarded\n",
    )
}

/// The URI to send to the upstream: the request's path and query, after the upstream's scheme
/// and authority (parsed once, with the route) unless the client sends origin-form targets.
fn upstream_uri(state: &RouteState, uri: &Uri) -> Option<Uri> {
    let path = match uri.path_and_query() {
        Some(path) if path.as_str().starts_with('/') => path.clone(),
        Some(_) => return None,
        None => hyper::http::uri::PathAndQuery::from_static("/"),
    };
    if state.client.origin_form() {
        if uri.scheme().is_none() && uri.authority().is_none() {
            return Some(uri.clone());
        }
        return Some(Uri::from(path));
    }
    let mut parts = hyper::http::uri::Parts::default();
    parts.scheme = Some(state.scheme.clone());
    parts.authority = Some(state.authority_uri.clone());
    parts.path_and_query = Some(path);
    Uri::from_parts(parts).ok()
}

/// `uri` with `host` as its authority, if it is one (else `uri` as it is: the upstream's).
fn with_authority(uri: Uri, host: Option<HeaderValue>) -> Uri {
    let Some(authority) = host.and_then(|h| {
        hyper::http::uri::Authority::try_from(h.as_bytes())
            .ok()
            .filter(|a| !a.as_str().contains('@'))
    }) else {
        return uri;
    };
    let mut parts = uri.into_parts();
    parts.authority = Some(authority);
    Uri::from_parts(parts).expect("a URI with another valid authority is valid")
}

/// Why a call ended at its deadline: the client's body (it had not sent all of it), or the
/// call's timeout.
fn timed_out(slot: &CallSlot) -> Reason {
    if slot.client_stalled() {
        Reason::ClientBody
    } else {
        Reason::CallTimeout
    }
}

/// Whether the request failed because its body, read from the client, did (it stopped coming
/// or failed: the proxy's own error for it, or hyper's "user body" error, somewhere in the
/// chain), rather than the upstream or the way to it. The hyper error of the proxy's HTTP/2
/// client is not looked at itself (`UpstreamError::Http2`'s sources are its sources): its
/// "user" errors include a request that never reached the connection.
fn from_client_body(e: &(dyn StdError + 'static)) -> bool {
    let mut source: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(s) = source {
        let ours = matches!(
            s.downcast_ref::<UpstreamError>(),
            Some(UpstreamError::ClientBody(_) | UpstreamError::ClientBodyStalled(_))
        );
        if ours
            || s.downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_user)
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// An error and its sources, one line.
fn chain(e: &dyn StdError) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `make` returns; `make` is never called.
    fn returned<R>(_make: impl FnOnce() -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// A value of any type, for a call that is only typed, never made.
    fn any<T>() -> T {
        unreachable!("only typed")
    }

    /// Each request's futures are boxed, and copied whole when they are: they stay within the
    /// sizes glibc's allocator serves from its per-thread cache (1,032 bytes), where a larger
    /// box costs several times as much to allocate and free. They were 2,912 bytes (the
    /// request's), 1,832 (the call's) and 1,392 (the upstream pool's) when each level was an
    /// `async fn` holding its own copy of the request.
    #[test]
    fn a_requests_futures_fit_the_allocators_small_sizes() {
        let sizes = [
            ("forward", returned(|| forward(any(), any(), any(), any()))),
            (
                "forward_call",
                returned(|| forward_call(any(), any(), any(), any(), any(), any(), any())),
            ),
            (
                "Http1Pool::request",
                returned(|| Http1Pool::request(any(), any(), any())),
            ),
        ];
        for (name, size) in sizes {
            eprintln!("{name}: {size} bytes");
            assert!(size <= 1024, "{name}: {size} bytes");
        }
    }
}
