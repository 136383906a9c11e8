//! [`CapacityError`]: why a sweep could not start.

use std::time::Duration;

use crate::bounds::MIN_CALLS_PER_CALLER;
use crate::duration::fmt_duration;
use crate::in_flight::ReadError;
use crate::suggest::SuggestError;

/// Why a sweep could not start; once it runs, whatever happens is in the report instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CapacityError {
    /// A setting is out of range (a zero duration, a tolerance outside 0..1).
    #[error("{0}")]
    Setting(String),
    /// The calls per level leave too few per caller at the highest level for a steady
    /// measurement (each caller's first call only warms up).
    #[error("{per_level} calls per level is below {} per caller at the highest level {level} ({needed}): each caller's first call only warms up", MIN_CALLS_PER_CALLER)]
    TooFewRequests {
        per_level: u64,
        level: u32,
        needed: u64,
    },
    /// The budget name cannot head a `[budgets.NAME]` table.
    #[error(transparent)]
    Name(#[from] SuggestError),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client")]
    Client(#[source] reqwest::Error),
    /// No connection could be opened to the target.
    #[error("cannot reach {url}: {detail}")]
    Unreachable { url: String, detail: String },
    /// A connection opened but what came back was not an HTTP/1.1 answer.
    #[error("{url} did not answer as an HTTP/1.1 server: {detail}")]
    NotHttp { url: String, detail: String },
    /// The first call had no answer within the per-call timeout.
    #[error("{url} did not answer the first call within {}", fmt_duration(*.timeout))]
    NoAnswer { url: String, timeout: Duration },
    /// The first call was answered with a client error (4xx): the URL, method or body is wrong,
    /// and measuring it would measure nothing.
    #[error(
        "{url} answered the first call with {detail}: check the URL, method, headers and body"
    )]
    Refused { url: String, detail: String },
    /// The first reading of the target's calls in flight failed: the source is wrong or down,
    /// and every level would read nothing.
    #[error("cannot read calls in flight from {from}: {error}")]
    InFlight { from: String, error: ReadError },
    /// Ctrl-C arrived before any level was measured.
    #[error("interrupted before the first level")]
    Interrupted,
}
