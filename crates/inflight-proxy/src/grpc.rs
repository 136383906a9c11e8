//! gRPC over the proxy: whether a request is gRPC, the status an upstream's answer carries
//! (`grpc-status`, in a trailers-only answer's headers or in the trailers) and its pushback
//! (`grpc-retry-pushback-ms`), and how the proxy's own answers read to a gRPC client.

use std::time::Duration;

use hyper::header::{HeaderMap, CONTENT_TYPE};
use inflight::limit::{Outcome, Verdict};

use crate::config::Protocol;

/// The header of a gRPC answer's status code.
pub(crate) const STATUS: &str = "grpc-status";
/// The header of a gRPC answer's message, percent-encoded.
pub(crate) const MESSAGE: &str = "grpc-message";
/// The header in which a server says when a client may retry, in milliseconds (gRPC A6).
pub(crate) const PUSHBACK: &str = "grpc-retry-pushback-ms";

/// `OK`.
pub(crate) const OK: u32 = 0;

/// Whether a request with `headers`, to a budget whose clients speak `protocol`, is gRPC: the
/// budget says so, or the request's `content-type` is `application/grpc` (with any suffix).
pub(crate) fn requested(headers: &HeaderMap, protocol: Protocol) -> bool {
    protocol == Protocol::Grpc
        || headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.get(..16)
                    .is_some_and(|head| head.eq_ignore_ascii_case("application/grpc"))
            })
}

/// The status code in `headers` (a trailers-only answer's, or trailers), if there is one.
pub(crate) fn status(headers: &HeaderMap) -> Option<u32> {
    headers.get(STATUS)?.to_str().ok()?.trim().parse().ok()
}

/// The server's pushback in `headers`, if it gave a non-negative one: a negative or malformed
/// value means "do not retry" (gRPC A6), and tells the budget of no pause.
pub(crate) fn pushback(headers: &HeaderMap) -> Option<Duration> {
    let ms: i64 = headers.get(PUSHBACK)?.to_str().ok()?.trim().parse().ok()?;
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// What the gRPC status in `headers` tells the budget, if there is one: whether the call went
/// well, and the verdict for its limit (overload, with the pushback as the pause the upstream
/// asked for, when the code is one of `overload`).
pub(crate) fn judge(headers: &HeaderMap, overload: &[u32]) -> Option<(bool, Verdict)> {
    let code = status(headers)?;
    if overload.contains(&code) {
        let verdict = Verdict::from(Outcome::Overload);
        let verdict = match pushback(headers) {
            Some(wait) => verdict.with_retry_after(wait),
            None => verdict,
        };
        return Some((false, verdict));
    }
    Some((code == OK, Outcome::Success.into()))
}

/// One gRPC method's counters of calls that ended (`inflight_proxy_grpc_calls_total`): one per
/// status code (0 to 16), then `none`.
pub(crate) type GrpcTally = std::sync::Arc<[metrics::Counter; 18]>;

/// Counts a gRPC call that ended with `status` (`None`: its answer carried no status); a code
/// past the 17 gRPC defines counts as `UNKNOWN`, as gRPC clients read it.
pub(crate) fn grpc_ended(tally: &GrpcTally, status: Option<u32>) {
    let i = match status {
        Some(code) if code <= 16 => code as usize,
        Some(_) => 2,
        None => 17,
    };
    tally[i].increment(1);
}

/// `text` as a `grpc-message` value: percent-encoded outside printable ASCII, and `%` itself
/// (gRPC's HTTP/2 protocol).
pub(crate) fn message(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn grpc_is_the_content_type_or_the_budget() {
        assert!(requested(
            &headers(&[("content-type", "application/grpc+proto")]),
            Protocol::Http
        ));
        assert!(requested(
            &headers(&[("content-type", "application/grpc")]),
            Protocol::Http
        ));
        assert!(!requested(
            &headers(&[("content-type", "application/json")]),
            Protocol::Http
        ));
        assert!(requested(&HeaderMap::new(), Protocol::Grpc));
    }

    #[test]
    fn overload_codes_and_pushback_are_read() {
        let busy = headers(&[("grpc-status", "8"), ("grpc-retry-pushback-ms", "250")]);
        let (ok, verdict) = judge(&busy, &[8, 14]).unwrap();
        assert!(!ok);
        assert_eq!(
            verdict,
            Verdict::from(Outcome::Overload).with_retry_after(Duration::from_millis(250))
        );
        let never = headers(&[("grpc-status", "14"), ("grpc-retry-pushback-ms", "-1")]);
        assert_eq!(
            judge(&never, &[8, 14]).unwrap().1,
            Verdict::from(Outcome::Overload)
        );
        let not_found = headers(&[("grpc-status", "5")]);
        assert_eq!(
            judge(&not_found, &[8, 14]),
            Some((false, Outcome::Success.into()))
        );
        assert_eq!(
            judge(&headers(&[("grpc-status", "0")]), &[8]),
            Some((true, Outcome::Success.into()))
        );
        assert_eq!(judge(&HeaderMap::new(), &[8]), None);
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(
            message("budget \"r\": 100% full\n"),
            "budget \"r\": 100%25 full%0A"
        );
        assert_eq!(message("é"), "%C3%A9");
    }
}
