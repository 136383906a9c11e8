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

/// The most characters of a message a report quotes from an answer, on one line.
pub(crate) const QUOTE_CHARS: usize = 120;

/// The status, and the start of the body on one line: `503 Service Unavailable: overloaded`.
pub(crate) fn status_detail(status: reqwest::StatusCode, body: &[u8]) -> String {
    let text = one_line(&String::from_utf8_lossy(body));
    if text.is_empty() {
        status.to_string()
    } else {
        format!("{status}: {text}")
    }
}

/// `text` on one line of at most [`QUOTE_CHARS`] characters: an HTML page by its `<title>`
/// (`... (an HTML page)`), anything else with each run of whitespace, line breaks included, made
/// one space; a cut is marked `...`. Idempotent, so a message made one line can be made so again.
pub(crate) fn one_line(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let title = lower.find("<title>").and_then(|start| {
        let start = start + "<title>".len();
        let end = start + lower[start..].find("</title>")?;
        // ASCII lowercasing keeps byte offsets, so they index `text` too.
        text.get(start..end)
    });
    let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = match title.map(flat) {
        Some(title) if !title.is_empty() => format!("{title} (an HTML page)"),
        _ => flat(text),
    };
    if line.chars().count() <= QUOTE_CHARS {
        line
    } else {
        let kept: String = line.chars().take(QUOTE_CHARS - 3).collect();
        format!("{}...", kept.trim_end())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_quoted_on_one_short_line() {
        let page = "<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n<body>\r\n<center><h1>503 Service Temporarily Unavailable</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n";
        let detail = status_detail(reqwest::StatusCode::SERVICE_UNAVAILABLE, page.as_bytes());
        assert_eq!(
            detail,
            "503 Service Unavailable: 503 Service Temporarily Unavailable (an HTML page)"
        );
        let json = br#"{"error":"system of record is full: 6 in service and 6 waiting"}"#;
        assert_eq!(
            status_detail(reqwest::StatusCode::SERVICE_UNAVAILABLE, json),
            r#"503 Service Unavailable: {"error":"system of record is full: 6 in service and 6 waiting"}"#
        );
        let long = "line one\n\n  line two\t".repeat(20);
        let quoted = one_line(&long);
        assert!(!quoted.contains('\n') && !quoted.contains('\t'), "{quoted}");
        assert!(quoted.starts_with("line one line two line one"), "{quoted}");
        assert!(quoted.ends_with("...") && quoted.chars().count() <= QUOTE_CHARS);
        assert_eq!(one_line(&quoted), quoted);
        assert_eq!(
            status_detail(reqwest::StatusCode::BAD_GATEWAY, b" \n "),
            "502 Bad Gateway"
        );
    }
}
