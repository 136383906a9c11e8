//! What stands between a record and a dependency: an `inflight` [`Budget`], or a peer crate's
//! adaptive limiter, each fed the same calls and the same overload signals.
//!
//! Overload signals are the same for every gate: a 503 or 429 answer, and a transport failure. A
//! call past the client timeout is not one here: the sim's hangs are drawn per call whatever the
//! load, so a limit that shrank on them would throttle a dependency that is not full (in a service,
//! `inflight` counts a call timeout as overload by default). An `inflight` budget learns the
//! signals through `Budget::call_with`'s classifier; a peer limiter, which learns only from errors,
//! sees them as errors (and the runner turns them back into answers), and sees a timed-out call as
//! a success that took the whole timeout.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use inflight::limit::Outcome;
use inflight::{Budget, CallError};
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt};

use crate::strategy::{GateSpec, Peer};

mod retry;

pub(crate) use self::retry::{MakeCall, RetryCounts, Retrying};

/// How a single call ended, when it did not answer as hoped.
#[derive(Debug)]
pub(crate) enum CallFailure {
    Timeout,
    Status(u16),
    Transport(&'static str),
    Permit,
}

impl CallFailure {
    pub(crate) fn kind(&self, dependency: &str) -> String {
        match self {
            CallFailure::Timeout => format!("{dependency}_timeout"),
            CallFailure::Status(code) => format!("{dependency}_status_{code}"),
            CallFailure::Transport(what) => format!("{dependency}_{what}"),
            CallFailure::Permit => format!("{dependency}_permit"),
        }
    }
}

/// A dependency's answer: its status, and when it said to come back (`Retry-After`, read by
/// `inflight::RetryAfter`), if it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) retry_after: Option<Duration>,
}

/// One call to a dependency: its answer, or why there was none.
pub(crate) type CallFuture =
    Pin<Box<dyn Future<Output = Result<Answer, CallFailure>> + Send + 'static>>;

/// A call's answer's status alone, as a gate without retries gives it to its limit.
async fn status_of(call: CallFuture) -> Result<u16, CallFailure> {
    call.await.map(|answer| answer.status)
}

/// A call as a peer limiter's request (a named type, so that the service's request type carries
/// no trait-object lifetime for the compiler to generalise over).
pub(crate) struct Call(CallFuture);

/// What an answer tells a limit: 503 and 429 are overload, like a transport failure; a timeout
/// says nothing (see the module docs).
pub(crate) fn classify(result: &Result<u16, CallFailure>) -> Outcome {
    match result {
        Err(CallFailure::Timeout) => Outcome::Ignore,
        Ok(503 | 429) | Err(_) => Outcome::Overload,
        Ok(_) => Outcome::Success,
    }
}

/// The status a peer's inner service answers for a call past the client timeout, so that the
/// peer does not count it as an error; the gate turns it back into a timeout.
const TIMED_OUT: u16 = 0;

/// The gate of one dependency.
#[derive(Clone)]
pub(crate) enum Gate {
    Budget(Budget),
    Peer(PeerGate),
}

/// A peer limiter around a service that awaits the call it is given.
#[derive(Clone)]
pub(crate) struct PeerGate {
    service: BoxCloneSyncService<Call, u16, CallFailure>,
    limit: Option<Arc<dyn Fn() -> usize + Send + Sync>>,
}

impl Gate {
    /// The gate `spec` describes for `dependency`; every call gets `call_timeout` once admitted.
    /// Times in the spec are scaled like the sim's: a rate is divided by `time_scale`. A fleet
    /// budget keeps its permits in `fleet`, which it needs.
    pub(crate) fn new(
        dependency: &str,
        spec: &GateSpec,
        call_timeout: Duration,
        time_scale: f64,
        fleet: Option<&inflight_redis::RedisFleet>,
    ) -> Result<Gate, String> {
        match spec {
            GateSpec::Peer(peer) => Ok(Gate::Peer(PeerGate::new(*peer, call_timeout)?)),
            GateSpec::Measured => Err(format!(
                "the {dependency} budget's size is measured before the runs: run the strategy with `inflight lab run`"
            )),
            budget => {
                // The gate applies the client timeout itself (see `call`).
                let _ = call_timeout;
                let mut config = budget
                    .budget_config(dependency)
                    .expect("a spec that is not a peer is a budget");
                if let Some((rate, _)) = config.rate_limit() {
                    config = config.rate(inflight::Rate::per_second(
                        rate.events_per_second() / time_scale,
                    ));
                }
                let mut builder = Budget::builder(dependency);
                if let Some(fail) = spec.fleet(dependency) {
                    let fleet = fleet.ok_or_else(|| {
                        format!("the {dependency} budget keeps its permits in Redis (scope = \"fleet\"): give the runner --redis-url")
                    })?;
                    let fail = match fail {
                        inflight::config::FleetFail::Local(n) => inflight_redis::Fail::Local(n),
                        _ => inflight_redis::Fail::Closed,
                    };
                    let mut store = fleet.store(config.max_concurrent(), fail);
                    // A fleet budget's rate is kept in Redis for every replica together.
                    if let Some((rate, burst)) = config.rate_limit() {
                        store = store.rate(rate, burst).map_err(|e| e.to_string())?;
                    }
                    builder = builder.store(Arc::new(store));
                }
                builder
                    .config(config)
                    .build()
                    .map(Gate::Budget)
                    .map_err(|e| e.to_string())
            }
        }
    }

    /// Runs `call` through the gate, with `timeout` started once the call is admitted.
    pub(crate) async fn call(
        &self,
        call: CallFuture,
        timeout: Duration,
    ) -> Result<u16, CallFailure> {
        self.call_in(call, timeout, None).await
    }

    /// [`Gate::call`] for a record of priority class `class`: a budget with classes takes the
    /// permit in that class (`Budget::call_with_in`); any other gate, or no class, as `call`.
    pub(crate) async fn call_in(
        &self,
        call: CallFuture,
        timeout: Duration,
        class: Option<&str>,
    ) -> Result<u16, CallFailure> {
        match self {
            Gate::Budget(budget) => {
                // The timeout runs inside the call, so the classifier sees it (as nothing).
                let timed = async move {
                    tokio::time::timeout(timeout, status_of(call))
                        .await
                        .unwrap_or(Err(CallFailure::Timeout))
                };
                let result = match class.filter(|_| budget.classes().is_some()) {
                    Some(class) => budget.call_with_in(class, classify, || timed).await,
                    None => budget.call_with(classify, || timed).await,
                };
                result.map_err(|e| match e {
                    CallError::Timeout => CallFailure::Timeout,
                    CallError::Inner(failure) => failure,
                    // Rejected, or a reason a newer `inflight` adds: no permit, the call never ran.
                    _ => CallFailure::Permit,
                })
            }
            Gate::Peer(peer) => match peer.service.clone().oneshot(Call(call)).await {
                Ok(TIMED_OUT) => Err(CallFailure::Timeout),
                Ok(status) => Ok(status),
                // The peer saw an overload answer as an error; the record sees the answer.
                Err(CallFailure::Status(code)) => Ok(code),
                Err(other) => Err(other),
            },
        }
    }

    /// The gate's limit now, if it has one that moves and shows it.
    pub(crate) fn limit(&self) -> Option<usize> {
        match self {
            Gate::Budget(budget) => budget.config().adaptive_limit().map(|_| budget.limit()),
            Gate::Peer(peer) => peer.limit.as_ref().map(|f| f()),
        }
    }
}

impl PeerGate {
    /// `peer` configured as its documentation shows for a client (floors lowered to 1 where the
    /// example's floor is above what a six-slot dependency holds, and a latency threshold no
    /// shorter than the client timeout, so a slow but successful call is not a failure).
    fn new(peer: Peer, call_timeout: Duration) -> Result<PeerGate, String> {
        let inner = tower::service_fn(move |Call(call): Call| async move {
            match tokio::time::timeout(call_timeout, status_of(call)).await {
                Err(_) => Ok(TIMED_OUT),
                Ok(Ok(code @ (429 | 503))) => Err(CallFailure::Status(code)),
                Ok(other) => other,
            }
        });
        Ok(match peer {
            Peer::TowerAccGradient2 => {
                let algorithm = tower_acc::Gradient2::builder()
                    .initial_limit(20)
                    .min_limit(1)
                    .max_limit(200)
                    .smoothing(0.2)
                    .rtt_tolerance(1.5)
                    .long_window(600)
                    .build();
                PeerGate {
                    service: BoxCloneSyncService::new(
                        tower_acc::ConcurrencyLimitLayer::new(algorithm).layer(inner),
                    ),
                    limit: None,
                }
            }
            Peer::TowerAccVegas => PeerGate {
                service: BoxCloneSyncService::new(
                    tower_acc::ConcurrencyLimitLayer::new(tower_acc::Vegas::default()).layer(inner),
                ),
                limit: None,
            },
            Peer::TowerResilienceAimd => {
                let algorithm = tower_resilience_adaptive::Aimd::builder()
                    .initial_limit(10)
                    .min_limit(1)
                    .max_limit(100)
                    .increase_by(1)
                    .decrease_factor(0.5)
                    .latency_threshold(call_timeout)
                    .build()
                    .map_err(|e| format!("tower-resilience-adaptive aimd: {e}"))?;
                resilience(algorithm, inner)
            }
            Peer::TowerResilienceVegas => {
                let algorithm = tower_resilience_adaptive::Vegas::builder()
                    .initial_limit(10)
                    .alpha(3)
                    .beta(6)
                    .build()
                    .map_err(|e| format!("tower-resilience-adaptive vegas: {e}"))?;
                resilience(algorithm, inner)
            }
        })
    }
}

/// A tower-resilience-adaptive limiter, whose errors wrap the inner service's.
fn resilience<A, S>(algorithm: A, inner: S) -> PeerGate
where
    A: tower_resilience_adaptive::ConcurrencyAlgorithm + 'static,
    S: tower::Service<Call, Response = u16, Error = CallFailure> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    let service = tower_resilience_adaptive::AdaptiveLimiterLayer::new(algorithm).layer(inner);
    let watched = service.clone();
    let service = service.map_err(|e| match e {
        tower_resilience_adaptive::AdaptiveError::Service(failure) => failure,
        tower_resilience_adaptive::AdaptiveError::LimitReached => CallFailure::Permit,
    });
    PeerGate {
        service: BoxCloneSyncService::new(service),
        limit: Some(Arc::new(move || watched.limit())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget_gate(table: &str) -> Gate {
        let spec = GateSpec::Budget(table.to_string());
        Gate::new("records", &spec, Duration::from_secs(1), 1.0, None).unwrap()
    }

    fn ok() -> CallFuture {
        Box::pin(async {
            Ok(Answer {
                status: 200,
                retry_after: None,
            })
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_record_class_reaches_a_budget_with_classes_and_only_it() {
        let gate = budget_gate("max_concurrent = 2\nclasses = { interactive = 4, batch = 1 }");
        let timeout = Duration::from_secs(1);
        assert_eq!(
            gate.call_in(ok(), timeout, Some("interactive"))
                .await
                .unwrap(),
            200
        );
        assert_eq!(
            gate.call_in(ok(), timeout, Some("interactive"))
                .await
                .unwrap(),
            200
        );
        assert_eq!(
            gate.call_in(ok(), timeout, Some("batch")).await.unwrap(),
            200
        );
        // No class: the budget's default, the lightest.
        assert_eq!(gate.call(ok(), timeout).await.unwrap(), 200);
        let Gate::Budget(budget) = &gate else {
            panic!("a budget");
        };
        let admitted: Vec<(String, u64)> = budget
            .snapshot()
            .classes
            .iter()
            .map(|c| (c.name.clone(), c.admitted))
            .collect();
        assert_eq!(
            admitted,
            [("interactive".to_string(), 2), ("batch".to_string(), 2)]
        );
        // A budget without classes takes any record as it takes a call.
        let plain = budget_gate("max_concurrent = 2");
        assert_eq!(
            plain
                .call_in(ok(), timeout, Some("interactive"))
                .await
                .unwrap(),
            200
        );
        let Gate::Budget(plain) = &plain else {
            panic!("a budget");
        };
        assert!(plain.snapshot().classes.is_empty());
        assert_eq!(plain.snapshot().admitted, 1);
    }
}
