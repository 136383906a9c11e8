//! The proxy's own answers: refusals (503, 429) that never reached the upstream, a call timeout
//! (504), an unreachable upstream or a failed TLS handshake with it (502) and a client's request body that broke off (400), each
//! with a small body naming the budget and why.

use std::time::Duration;

use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use inflight::{AcquireError, Budget};

use crate::body::ProxyBody;
use crate::grpc;

/// Why the proxy answered a request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    QueueFull,
    PermitTimeout,
    RateLimited,
    Paused,
    Evicted,
    Unavailable,
    CallTimeout,
    Unreachable,
    Tls,
    ClientBody,
    LeaseLost,
}

impl Reason {
    /// The reason as metrics and the `X-Inflight-Refused` header name it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::QueueFull => "queue_full",
            Reason::PermitTimeout => "permit_timeout",
            Reason::RateLimited => "rate_limited",
            Reason::Paused => "paused",
            Reason::Evicted => "evicted",
            Reason::Unavailable => "unavailable",
            Reason::CallTimeout => "call_timeout",
            Reason::Unreachable => "upstream_unreachable",
            Reason::Tls => "upstream_tls",
            Reason::ClientBody => "client_body",
            Reason::LeaseLost => "lease_lost",
        }
    }

    fn status(self) -> StatusCode {
        match self {
            Reason::QueueFull
            | Reason::PermitTimeout
            | Reason::Paused
            | Reason::Evicted
            | Reason::Unavailable
            | Reason::LeaseLost => StatusCode::SERVICE_UNAVAILABLE,
            Reason::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Reason::CallTimeout => StatusCode::GATEWAY_TIMEOUT,
            Reason::Unreachable | Reason::Tls => StatusCode::BAD_GATEWAY,
            Reason::ClientBody => StatusCode::BAD_REQUEST,
        }
    }

    /// The gRPC status a gRPC client gets for this reason (gRPC's `doc/statuscodes.md`, and
    /// the retry design A6, where clients retry `UNAVAILABLE` by default policy):
    /// `RESOURCE_EXHAUSTED` for a rate limit, a quota the client spends; `UNAVAILABLE` for a
    /// full queue, a missed permit deadline, a pause, an eviction, a store or an upstream that
    /// cannot be reached and a lost lease, all passing conditions worth a retry with backoff;
    /// `DEADLINE_EXCEEDED` when the upstream did not answer in time; `INTERNAL` for a request
    /// body that broke off, as gRPC maps HTTP 400.
    fn grpc_code(self) -> u32 {
        match self {
            Reason::RateLimited => 8,
            Reason::QueueFull
            | Reason::PermitTimeout
            | Reason::Paused
            | Reason::Evicted
            | Reason::Unavailable
            | Reason::Unreachable
            | Reason::Tls
            | Reason::LeaseLost => 14,
            Reason::CallTimeout => 4,
            Reason::ClientBody => 13,
        }
    }

    fn explain(self) -> &'static str {
        match self {
            Reason::QueueFull => "every permit is held and the wait queue is full (max_queued)",
            Reason::PermitTimeout => "no permit within permit_timeout",
            Reason::RateLimited => {
                "the rate limit would let the request start only after permit_timeout"
            }
            Reason::Paused => {
                "the upstream asked for a pause (Retry-After) that outlasts permit_timeout"
            }
            Reason::Evicted => {
                "the wait queue was full and a request of a heavier class took this one's place"
            }
            Reason::Unavailable => "the budget's permit store is unavailable",
            Reason::CallTimeout => "the upstream did not answer within call_timeout",
            Reason::Unreachable => "the upstream cannot be reached",
            Reason::Tls => "the TLS handshake with the upstream failed (the log says why)",
            Reason::ClientBody => {
                "the request's body broke off or was malformed on its way from the client"
            }
            Reason::LeaseLost => {
                "the request's fleet lease was lost before the upstream answered, and the budget drops such calls (on_lost = \"cancel\")"
            }
        }
    }
}

impl From<&AcquireError> for Reason {
    fn from(e: &AcquireError) -> Reason {
        match e {
            AcquireError::QueueFull { .. } => Reason::QueueFull,
            AcquireError::PermitTimeout => Reason::PermitTimeout,
            AcquireError::RateLimited { .. } => Reason::RateLimited,
            AcquireError::Paused { .. } => Reason::Paused,
            AcquireError::Evicted { .. } => Reason::Evicted,
            _ => Reason::Unavailable,
        }
    }
}

/// The header that says the proxy answered a request itself, and why.
pub(crate) const REFUSED_HEADER: &str = "x-inflight-refused";

/// The proxy's answer for `reason`, for a request through `budget`; `retry_after` is the
/// refusal's own estimate of when to try again ([`AcquireError::retry_after`]), if it has one.
///
/// A refusal carries `Retry-After`, in seconds rounded up, where an honest estimate exists: for
/// a rate-limited one, the time until the rate limit would admit a new request in time; for a
/// pause the upstream asked for, the time until it ends; for a full queue, the queued calls
/// ahead times the mean call time measured so far, over the limit. A missed permit deadline,
/// or a full queue before any call was measured, carries none.
///
/// To a gRPC request (`grpc`) the answer is a gRPC trailers-only response instead: HTTP 200
/// with `grpc-status` (see [`Reason::grpc_code`]), `grpc-message` naming the budget and the
/// reason, and `grpc-retry-pushback-ms` where `Retry-After` would be sent (in milliseconds,
/// rounded up), in one HEADERS frame that ends the stream.
pub(crate) fn answer(
    budget: &Budget,
    reason: Reason,
    retry_after: Option<Duration>,
    grpc: bool,
) -> Response<ProxyBody> {
    let text = format!(
        "inflight: budget {:?}: {} ({})",
        budget.name(),
        reason.explain(),
        reason.as_str()
    );
    let wait = if reason == Reason::RateLimited {
        budget.rate_limited_for()
    } else {
        retry_after
    };
    if grpc {
        let mut response = Response::new(ProxyBody::empty());
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        headers.insert(grpc::STATUS, HeaderValue::from(reason.grpc_code()));
        if let Ok(message) = HeaderValue::from_str(&grpc::message(&text)) {
            headers.insert(grpc::MESSAGE, message);
        }
        headers.insert(REFUSED_HEADER, HeaderValue::from_static(reason.as_str()));
        if let Some(wait) = wait {
            let ms = wait.as_nanos().div_ceil(1_000_000);
            headers.insert(grpc::PUSHBACK, HeaderValue::from(ms as u64));
        }
        return response;
    }
    let mut response = Response::new(ProxyBody::full(text + "\n"));
    *response.status_mut() = reason.status();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(REFUSED_HEADER, HeaderValue::from_static(reason.as_str()));
    if let Some(wait) = wait {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_seconds(wait)));
    }
    response
}

/// Whole seconds, rounded up, at least 1: `Retry-After` has no finer unit, and 0 would invite
/// a retry that is refused again.
fn retry_seconds(wait: Duration) -> u64 {
    let whole = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    whole.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_evicted_request_is_told_so_not_that_the_store_is_down() {
        let e = AcquireError::Evicted { retry_after: None };
        assert_eq!(Reason::from(&e), Reason::Evicted);
        assert_eq!(Reason::Evicted.as_str(), "evicted");
        assert_eq!(Reason::Evicted.status(), StatusCode::SERVICE_UNAVAILABLE);
    }

    /// The codes the guide's table promises, reason by reason.
    #[test]
    fn each_reason_has_the_grpc_status_the_guide_names() {
        let expected = [
            (Reason::RateLimited, 8),
            (Reason::QueueFull, 14),
            (Reason::PermitTimeout, 14),
            (Reason::Paused, 14),
            (Reason::Evicted, 14),
            (Reason::Unavailable, 14),
            (Reason::LeaseLost, 14),
            (Reason::Unreachable, 14),
            (Reason::Tls, 14),
            (Reason::CallTimeout, 4),
            (Reason::ClientBody, 13),
        ];
        for (reason, code) in expected {
            assert_eq!(reason.grpc_code(), code, "{}", reason.as_str());
        }
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_seconds(Duration::ZERO), 1);
        assert_eq!(retry_seconds(Duration::from_millis(1)), 1);
        assert_eq!(retry_seconds(Duration::from_secs(2)), 2);
        assert_eq!(retry_seconds(Duration::from_millis(2001)), 3);
    }
}
