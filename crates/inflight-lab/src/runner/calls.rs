//! One call to a dependency: through its gate, under the client timeout, counted attempt by
//! attempt.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use inflight_bench::gauge::PeakGauge;

use super::record::Shared;
use super::PROXIED_TIMEOUT_FACTOR;
use crate::gate::{Answer, CallFailure, MakeCall, Retrying};

/// The calls to one dependency, counted attempt by attempt.
#[derive(Default)]
pub(super) struct Calls {
    /// Attempts in flight.
    pub(super) gauge: Arc<PeakGauge>,
    /// Attempts made (a retry is one more).
    pub(super) made: Arc<AtomicU64>,
    /// Answers by status, for the overload answers: 429 and 503.
    pub(super) status_429: Arc<AtomicU64>,
    pub(super) status_503: Arc<AtomicU64>,
}

impl Calls {
    pub(super) fn peak(&self) -> u64 {
        self.gauge.peak()
    }

    pub(super) fn current(&self) -> u64 {
        self.gauge.current()
    }

    pub(super) fn count(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::SeqCst)
    }
}

fn transport_kind(err: &reqwest::Error) -> &'static str {
    if err.is_connect() {
        "connect"
    } else if err.is_body() || err.is_decode() {
        "body"
    } else if err.is_request() {
        "request"
    } else {
        "transport"
    }
}

/// Runs the call through the dependency's gate (permit or peer limiter, then the client timeout,
/// which starts only once the call is admitted; retried if the strategy says so), or under the
/// client timeout alone when the dependency has no gate. `request` makes each attempt's request;
/// every attempt is counted in `calls`, and its answer's `Retry-After` (or `retry-after-ms`) read
/// with `inflight::RetryAfter` for the gate.
pub(super) async fn gated<R>(
    shared: &Shared,
    gate: Option<&Retrying>,
    class: Option<&str>,
    calls: &Calls,
    request: R,
) -> Result<u16, CallFailure>
where
    R: Fn() -> reqwest::RequestBuilder + Send + Sync + 'static,
{
    let (gauge, made) = (calls.gauge.clone(), calls.made.clone());
    let (status_429, status_503) = (calls.status_429.clone(), calls.status_503.clone());
    let make = MakeCall::new(move || {
        let sent = request().send();
        let (gauge, made) = (gauge.clone(), made.clone());
        let (status_429, status_503) = (status_429.clone(), status_503.clone());
        Box::pin(async move {
            let _in_flight = gauge.enter();
            made.fetch_add(1, Ordering::Relaxed);
            let response = sent
                .await
                .map_err(|e| CallFailure::Transport(transport_kind(&e)))?;
            let status = response.status().as_u16();
            match status {
                429 => status_429.fetch_add(1, Ordering::Relaxed),
                503 => status_503.fetch_add(1, Ordering::Relaxed),
                _ => 0,
            };
            // A malformed value is no retry-after: the answer is still an overload.
            let retry_after = inflight::RetryAfter::from_headers(response.headers())
                .ok()
                .flatten();
            // Read the whole answer so the call counts as done only when the server is done
            // with it.
            response
                .bytes()
                .await
                .map_err(|e| CallFailure::Transport(transport_kind(&e)))?;
            Ok(Answer {
                status,
                retry_after,
            })
        })
    });
    let timeout = shared.call_timeout;
    match gate {
        Some(gate) => gate.call(make, timeout, class).await,
        // The proxy ends a call at its call timeout with a 504 (it never forwards before it
        // holds a permit, so the wait in its queue is not part of the timeout).
        None if shared.proxied => {
            match tokio::time::timeout(timeout * PROXIED_TIMEOUT_FACTOR, make.attempt()).await {
                Ok(Ok(Answer { status: 504, .. })) | Err(_) => Err(CallFailure::Timeout),
                Ok(answer) => answer.map(|a| a.status),
            }
        }
        None => tokio::time::timeout(timeout, make.attempt())
            .await
            .map_err(|_| CallFailure::Timeout)?
            .map(|a| a.status),
    }
}
