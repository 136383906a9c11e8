//! [`Caller`]: one HTTP client sending the target's calls, and the [`Outcome`] of each.

use std::error::Error as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::target::Target;

/// How one call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Answered 2xx, the body read in full.
    Ok,
    /// Answered with another status; `detail` is the reason and the start of the body.
    Status { code: u16, detail: String },
    /// No complete answer within the per-call timeout.
    Timeout,
    /// Failed below HTTP; `connect` when no connection could be opened.
    Transport { connect: bool, detail: String },
}

/// Sends the target's calls over one pooled client, numbering them for the body's `{n}`.
#[derive(Debug)]
pub(crate) struct Caller {
    client: reqwest::Client,
    target: Target,
    next: AtomicU64,
}

impl Caller {
    pub(crate) fn new(target: Target, timeout: Duration) -> Result<Caller, reqwest::Error> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .http1_only()
            .tcp_nodelay(true)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .build()?;
        Ok(Caller {
            client,
            target,
            next: AtomicU64::new(1),
        })
    }

    /// Sends the next call and waits for its whole answer; returns how it ended and how long it took.
    pub(crate) async fn call(&self) -> (Outcome, Duration) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let outcome = match self.target.request(&self.client, n).send().await {
            Ok(response) => {
                let status = response.status();
                match response.bytes().await {
                    Ok(_) if status.is_success() => Outcome::Ok,
                    Ok(body) => Outcome::Status {
                        code: status.as_u16(),
                        detail: status_detail(status, &body),
                    },
                    Err(e) => failure(&e),
                }
            }
            Err(e) => failure(&e),
        };
        (outcome, started.elapsed())
    }
}

pub(crate) fn status_detail(status: reqwest::StatusCode, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text: String = text.trim().chars().take(200).collect();
    if text.is_empty() {
        status.to_string()
    } else {
        format!("{status}: {text}")
    }
}

fn failure(e: &reqwest::Error) -> Outcome {
    if e.is_timeout() {
        Outcome::Timeout
    } else {
        Outcome::Transport {
            connect: e.is_connect(),
            detail: root_causes(e),
        }
    }
}

/// The error's causes below reqwest's own "error sending request for url (...)", joined by `: `.
pub(crate) fn root_causes(e: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.contains(&text) {
            parts.push(text);
        }
        source = s.source();
    }
    if parts.is_empty() {
        e.to_string()
    } else {
        parts.join(": ")
    }
}
