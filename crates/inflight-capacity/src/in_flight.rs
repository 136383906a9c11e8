//! Calls in flight as the target saw them: [`InFlightSource`] names where the target reports
//! them (a JSON endpoint and a JSON pointer), a private reader polls it during each level, and
//! [`TargetInFlight`] is what one level read.
//!
//! The client knows how many calls it keeps in flight; only the target knows how many it is
//! serving. Many services report that count themselves (a stats or debug endpoint: the sim's
//! `GET /stats` has `records.in_service`). Read next to the client's concurrency, it shows the
//! capacity directly: at 16 calls in flight against a service of capacity 6, the service says 6
//! and the other 10 are waiting or refused.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::call::root_causes;
use crate::duration::fmt_duration;
use crate::target::{is_loopback, Target, TargetError};

/// How long one reading may take before it counts as failed.
pub const READ_TIMEOUT: Duration = Duration::from_secs(1);

/// Why an in-flight source was refused before any reading.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// No `#` separates the URL from the JSON pointer.
    #[error("`{0}` has no JSON pointer: expected URL#/json/pointer, e.g. http://127.0.0.1:7070/stats#/records/in_service")]
    NoPointer(String),
    /// The URL is not an `http://` URL with a host.
    #[error(transparent)]
    Url(#[from] TargetError),
    /// The pointer is not an RFC 6901 JSON pointer.
    #[error("`{pointer}` is not a JSON pointer: {reason}")]
    Pointer { pointer: String, reason: String },
}

/// Why one reading of the target's calls in flight failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// No connection could be opened.
    #[error("cannot reach it: {0}")]
    Unreachable(String),
    /// No complete answer within [`READ_TIMEOUT`].
    #[error("no answer within {}", fmt_duration(*.0))]
    Timeout(Duration),
    /// The connection failed below HTTP, or the answer was not HTTP.
    #[error("no HTTP answer: {0}")]
    Transport(String),
    /// Answered with a status other than 2xx (the status and the start of the body).
    #[error("it answered {0}")]
    Status(String),
    /// The answer is not JSON.
    #[error("its answer is not JSON: {0}")]
    NotJson(String),
    /// Nothing in the answer at the pointer; `near` says what is at the deepest part that exists.
    #[error("its answer has nothing at {pointer}{near}")]
    Missing { pointer: String, near: String },
    /// The value at the pointer is not a number of calls (a string, an object, a negative number, ...).
    #[error("{pointer} is {found}, not a number of calls")]
    NotCount { pointer: String, found: String },
}

/// Where the target reports its own calls in flight: an endpoint that answers a `GET` with JSON,
/// and a JSON pointer (RFC 6901) to a number in that answer.
///
/// Written on the command line as one `URL#POINTER`: the pointer takes the place of the URL's
/// fragment, which is never sent. The pointer is read as typed (RFC 6901's string form: `~1`
/// for a `/` and `~0` for a `~` inside a key; no percent-decoding).
///
/// ```
/// use inflight_capacity::InFlightSource;
///
/// let source: InFlightSource = "http://127.0.0.1:7070/stats#/records/in_service".parse()?;
/// assert_eq!(source.url().path(), "/stats");
/// assert_eq!(source.pointer(), "/records/in_service");
/// assert!(source.is_loopback());
/// assert_eq!(source.to_string(), "http://127.0.0.1:7070/stats#/records/in_service");
/// assert!("http://127.0.0.1:7070/stats".parse::<InFlightSource>().is_err());
/// # Ok::<(), inflight_capacity::SourceError>(())
/// ```
#[derive(Debug, Clone)]
pub struct InFlightSource {
    url: reqwest::Url,
    pointer: String,
}

impl InFlightSource {
    /// `GET url` and read the number at `pointer` (empty for a bare number).
    ///
    /// # Errors
    ///
    /// [`SourceError::Url`] for a URL that is not `http://` with a host;
    /// [`SourceError::Pointer`] for a pointer that is neither empty nor starts with `/`, or has a
    /// `~` not followed by `0` or `1`.
    pub fn new(url: &str, pointer: &str) -> Result<InFlightSource, SourceError> {
        check_pointer(pointer)?;
        // The pointer stands where a fragment would; one in `url` is never sent anyway.
        let mut url = Target::new(url)?.url().clone();
        url.set_fragment(None);
        Ok(InFlightSource {
            url,
            pointer: pointer.to_string(),
        })
    }

    /// The endpoint polled.
    pub fn url(&self) -> &reqwest::Url {
        &self.url
    }

    /// The JSON pointer to the number.
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// Whether the endpoint is on this machine, by the same rule as [`Target::is_loopback`].
    pub fn is_loopback(&self) -> bool {
        is_loopback(&self.url)
    }
}

impl std::str::FromStr for InFlightSource {
    type Err = SourceError;

    /// `URL#POINTER`, split at the first `#`.
    fn from_str(s: &str) -> Result<InFlightSource, SourceError> {
        let (url, pointer) = s
            .split_once('#')
            .ok_or_else(|| SourceError::NoPointer(s.to_string()))?;
        InFlightSource::new(url, pointer)
    }
}

impl fmt::Display for InFlightSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.url, self.pointer)
    }
}

fn check_pointer(pointer: &str) -> Result<(), SourceError> {
    let bad = |reason: &str| {
        Err(SourceError::Pointer {
            pointer: pointer.to_string(),
            reason: reason.to_string(),
        })
    };
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return bad("it must start with `/` (or be empty for an answer that is a bare number)");
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return bad("`~` must be followed by 0 (for `~`) or 1 (for `/`)");
        }
    }
    Ok(())
}

/// The number at `pointer` in a JSON answer: a finite number, 0 or more.
pub(crate) fn extract(body: &[u8], pointer: &str) -> Result<f64, ReadError> {
    let doc: Value =
        serde_json::from_slice(body).map_err(|e| ReadError::NotJson(not_json(body, &e)))?;
    let Some(value) = doc.pointer(pointer) else {
        return Err(ReadError::Missing {
            pointer: pointer.to_string(),
            near: near(&doc, pointer),
        });
    };
    let not_count = |found: String| ReadError::NotCount {
        pointer: shown(pointer),
        found,
    };
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(v) if v.is_finite() && v >= 0.0 => Ok(v),
            _ => Err(not_count(format!("negative ({n})"))),
        },
        Value::String(s) => Err(not_count(format!("the string {}", quoted(s)))),
        Value::Null => Err(not_count("null".to_string())),
        Value::Bool(b) => Err(not_count(b.to_string())),
        Value::Array(a) => Err(not_count(format!("an array of {}", a.len()))),
        Value::Object(_) => Err(not_count(format!("an object ({})", keys(value)))),
    }
}

/// The pointer as a message shows it (the empty pointer is the whole answer).
fn shown(pointer: &str) -> String {
    if pointer.is_empty() {
        "the answer".to_string()
    } else {
        pointer.to_string()
    }
}

fn quoted(s: &str) -> String {
    let short: String = s.chars().take(40).collect();
    if short.len() < s.len() {
        format!("\"{short}...\"")
    } else {
        format!("\"{short}\"")
    }
}

fn not_json(body: &[u8], e: &serde_json::Error) -> String {
    let text = String::from_utf8_lossy(body);
    let text: String = text.trim().chars().take(60).collect();
    if text.is_empty() {
        format!("{e} (the answer is empty)")
    } else {
        format!("{e} (it starts `{text}`)")
    }
}

/// What exists at the deepest part of `pointer` that resolves: the keys of an object, the length
/// of an array, or the kind of a scalar, so a misspelled key is easy to fix.
fn near(doc: &Value, pointer: &str) -> String {
    let mut at = String::new();
    let mut value = doc;
    for token in pointer.split('/').skip(1) {
        let next = format!("{at}/{token}");
        match doc.pointer(&next) {
            Some(v) => {
                value = v;
                at = next;
            }
            None => break,
        }
    }
    let place = if at.is_empty() {
        "the answer".to_string()
    } else {
        at
    };
    match value {
        Value::Object(_) => format!(" ({place} has {})", keys(value)),
        Value::Array(a) => format!(" ({place} is an array of {})", a.len()),
        other => format!(" ({place} is {other})"),
    }
}

/// An object's keys, as `keys a, b, c` (at most 12) or `no keys`.
fn keys(value: &Value) -> String {
    let Value::Object(map) = value else {
        return String::new();
    };
    if map.is_empty() {
        return "no keys".to_string();
    }
    let mut names: Vec<&str> = map.keys().map(String::as_str).take(12).collect();
    if map.len() > names.len() {
        names.push("...");
    }
    format!("keys {}", names.join(", "))
}

/// Reads the source over its own client, so its connection is never one of the level's.
#[derive(Debug)]
pub(crate) struct Reader {
    client: reqwest::Client,
    source: InFlightSource,
}

impl Reader {
    pub(crate) fn new(source: InFlightSource) -> Result<Reader, reqwest::Error> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .http1_only()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(1)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(READ_TIMEOUT)
            .build()?;
        Ok(Reader { client, source })
    }

    pub(crate) fn source(&self) -> &InFlightSource {
        &self.source
    }

    /// One reading.
    pub(crate) async fn read(&self) -> Result<f64, ReadError> {
        let fail = |e: reqwest::Error| {
            if e.is_timeout() {
                ReadError::Timeout(READ_TIMEOUT)
            } else if e.is_connect() {
                ReadError::Unreachable(root_causes(&e))
            } else {
                ReadError::Transport(root_causes(&e))
            }
        };
        let response = self
            .client
            .get(self.source.url().clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(fail)?;
        let status = response.status();
        let body = response.bytes().await.map_err(fail)?;
        if !status.is_success() {
            return Err(ReadError::Status(crate::call::status_detail(status, &body)));
        }
        extract(&body, &self.source.pointer)
    }

    /// Reads every `every` (one reading at a time; a slow one delays the next) into `into`,
    /// until dropped.
    pub(crate) async fn poll(&self, every: Duration, into: &Readings) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let at = Instant::now();
            let reading = self.read().await;
            into.record(at, reading);
        }
    }
}

/// The readings of one level.
#[derive(Debug, Default)]
pub(crate) struct Readings {
    values: Mutex<Vec<(Instant, f64)>>,
    failed: AtomicU64,
    first_failure: OnceLock<String>,
}

impl Readings {
    fn record(&self, at: Instant, reading: Result<f64, ReadError>) {
        match reading {
            Ok(v) => self
                .values
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((at, v)),
            Err(e) => {
                self.failed.fetch_add(1, Ordering::SeqCst);
                let _ = self.first_failure.set(e.to_string());
            }
        }
    }

    /// The summary of the readings taken in `window` (start and end), or of all of them.
    pub(crate) fn summary(&self, window: Option<(Instant, Instant)>) -> TargetInFlight {
        let values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        let taken: Vec<f64> = values
            .iter()
            .filter(|(at, _)| window.is_none_or(|(start, end)| *at >= start && *at <= end))
            .map(|&(_, v)| v)
            .collect();
        TargetInFlight::of(
            &taken,
            self.failed.load(Ordering::SeqCst),
            self.first_failure.get().cloned(),
        )
    }
}

/// The target's calls in flight during one level, as it reported them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetInFlight {
    /// The most calls in flight one reading showed (`null` without a reading).
    pub max: Option<f64>,
    /// The mean of the readings.
    pub mean: Option<f64>,
    /// Readings behind `max` and `mean`: those taken while every caller was busy (the level's
    /// steady window), or all of the level's when it had none.
    pub samples: u64,
    /// Readings that failed during the level (counted, not fatal).
    pub failed: u64,
    /// Why the first of them failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
}

impl TargetInFlight {
    /// The summary of `values`, with `failed` readings that failed.
    pub fn of(values: &[f64], failed: u64, first_failure: Option<String>) -> TargetInFlight {
        let some = !values.is_empty();
        TargetInFlight {
            max: some.then(|| values.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            mean: some.then(|| values.iter().sum::<f64>() / values.len() as f64),
            samples: values.len() as u64,
            failed,
            first_failure,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATS: &str = r#"{"scenario": "slow-write", "records": {"seen": 9, "in_service": 6, "peak_in_service": 6},
        "enrich": {"in_service": 0}, "load": 2.5, "name": "sim", "gone": null, "list": [1, 2], "neg": -1,
        "a/b": {"~c": 3}}"#;

    fn read(pointer: &str) -> Result<f64, ReadError> {
        extract(STATS.as_bytes(), pointer)
    }

    #[test]
    fn the_pointer_picks_a_number() {
        assert_eq!(read("/records/in_service"), Ok(6.0));
        assert_eq!(read("/load"), Ok(2.5));
        assert_eq!(read("/list/1"), Ok(2.0));
        // RFC 6901 escapes: `~1` is `/`, `~0` is `~`.
        assert_eq!(read("/a~1b/~0c"), Ok(3.0));
        assert_eq!(extract(b" 4 ", ""), Ok(4.0));
    }

    #[test]
    fn a_missing_key_names_what_is_there() {
        let e = read("/records/in_sevice").unwrap_err();
        assert_eq!(
            e.to_string(),
            "its answer has nothing at /records/in_sevice (/records has keys seen, in_service, peak_in_service)"
        );
        let e = read("/record/in_service").unwrap_err().to_string();
        assert!(
            e.starts_with("its answer has nothing at /record/in_service (the answer has keys "),
            "{e}"
        );
        let e = read("/list/7").unwrap_err().to_string();
        assert!(e.ends_with("(/list is an array of 2)"), "{e}");
        let e = read("/load/x").unwrap_err().to_string();
        assert!(e.ends_with("(/load is 2.5)"), "{e}");
    }

    #[test]
    fn what_is_not_a_count_is_refused() {
        let e = |p: &str| read(p).unwrap_err().to_string();
        assert_eq!(
            e("/records"),
            "/records is an object (keys seen, in_service, peak_in_service), not a number of calls"
        );
        assert_eq!(
            e("/name"),
            "/name is the string \"sim\", not a number of calls"
        );
        assert_eq!(e("/gone"), "/gone is null, not a number of calls");
        assert_eq!(e("/list"), "/list is an array of 2, not a number of calls");
        assert_eq!(e("/neg"), "/neg is negative (-1), not a number of calls");
        assert_eq!(
            extract(b"true", "").unwrap_err().to_string(),
            "the answer is true, not a number of calls"
        );
    }

    #[test]
    fn an_answer_that_is_not_json_is_quoted() {
        let e = extract(b"<html>busy</html>", "/x").unwrap_err().to_string();
        assert!(
            e.starts_with("its answer is not JSON: expected value"),
            "{e}"
        );
        assert!(e.ends_with("(it starts `<html>busy</html>`)"), "{e}");
        let e = extract(b"", "/x").unwrap_err().to_string();
        assert!(e.ends_with("(the answer is empty)"), "{e}");
    }

    #[test]
    fn sources_are_url_hash_pointer() {
        let s: InFlightSource = "http://[::1]:9/stats#/records/in_service".parse().unwrap();
        assert_eq!(s.pointer(), "/records/in_service");
        assert!(s.is_loopback());
        // The first `#` splits; a later one belongs to the pointer.
        let s: InFlightSource = "http://localhost/s#/a#b".parse().unwrap();
        assert_eq!(s.pointer(), "/a#b");
        let s: InFlightSource = "http://10.1.2.3/count#".parse().unwrap();
        assert_eq!((s.pointer(), s.is_loopback()), ("", false));

        let err = |s: &str| s.parse::<InFlightSource>().unwrap_err().to_string();
        assert!(
            err("http://127.0.0.1/stats").contains("expected URL#/json/pointer"),
            "{}",
            err("http://127.0.0.1/stats")
        );
        assert!(err("http://127.0.0.1/stats#records").contains("must start with `/`"));
        assert!(err("http://127.0.0.1/stats#/a~2").contains("`~` must be followed by 0"));
        assert!(err("http://127.0.0.1/stats#/a~").contains("`~` must be followed by 0"));
        assert!(err("https://127.0.0.1/stats#/a").contains("only http://"));
        assert!(err("stats#/a").contains("is not a URL"));
    }

    #[test]
    fn a_summary_has_max_mean_and_failures() {
        let t = TargetInFlight::of(&[2.0, 6.0, 4.0], 1, Some("x".into()));
        assert_eq!(
            (t.max, t.mean, t.samples, t.failed),
            (Some(6.0), Some(4.0), 3, 1)
        );
        let none = TargetInFlight::of(&[], 5, None);
        assert_eq!((none.max, none.mean, none.samples), (None, None, 0));
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["max"], 6.0);
        assert_eq!(json["samples"], 3);
    }

    #[test]
    fn readings_outside_the_window_are_left_out() {
        let r = Readings::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        r.record(at(0), Ok(1.0));
        r.record(at(10), Ok(6.0));
        r.record(at(20), Ok(5.0));
        r.record(at(30), Err(ReadError::Timeout(READ_TIMEOUT)));
        r.record(at(40), Ok(0.0));
        let all = r.summary(None);
        assert_eq!((all.samples, all.max, all.failed), (4, Some(6.0), 1));
        assert_eq!(all.first_failure.as_deref(), Some("no answer within 1s"));
        let steady = r.summary(Some((at(10), at(20))));
        assert_eq!((steady.samples, steady.mean), (2, Some(5.5)));
    }
}
