//! An HTTP client for the sim's control endpoints (`/stats`, `/scenario`), as a lab run uses them.

use std::time::Duration;

/// A request to the sim that failed: where, and what went wrong.
#[derive(Debug, Clone, thiserror::Error)]
#[error("talking to the sim at {url}: {message}")]
pub struct SimClientError {
    pub url: String,
    pub message: String,
}

/// The sim's control endpoints at one loopback URL.
#[derive(Debug, Clone)]
pub struct SimClient {
    client: reqwest::Client,
    url: String,
}

impl SimClient {
    /// A client for the sim at `url` (already checked to be loopback).
    pub fn new(url: String) -> Result<SimClient, SimClientError> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| SimClientError {
                url: url.clone(),
                message: e.to_string(),
            })?;
        Ok(SimClient { client, url })
    }

    /// The sim's base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// An error about this sim.
    pub fn error(&self, message: impl std::fmt::Display) -> SimClientError {
        SimClientError {
            url: self.url.clone(),
            message: message.to_string(),
        }
    }

    async fn json(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<serde_json::Value, SimClientError> {
        let response = req.send().await.map_err(|e| self.error(with_causes(&e)))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| self.error(with_causes(&e)))?;
        if !status.is_success() {
            return Err(self.error(format!("{status}: {}", excerpt(text.trim()))));
        }
        serde_json::from_str(&text).map_err(|e| {
            self.error(format!(
                "not the sim? its answer is not JSON ({e}): {}",
                excerpt(text.trim())
            ))
        })
    }

    /// `GET /stats`.
    pub async fn stats(&self) -> Result<serde_json::Value, SimClientError> {
        self.json(self.client.get(format!("{}/stats", self.url)))
            .await
    }

    /// `POST /scenario`: switches scenario, reseeds its RNG and resets the stats.
    pub async fn set_scenario(
        &self,
        name: &str,
        seed: u64,
        time_scale: f64,
    ) -> Result<(), SimClientError> {
        let body = serde_json::json!({ "name": name, "seed": seed, "time_scale": time_scale });
        self.json(
            self.client
                .post(format!("{}/scenario", self.url))
                .json(&body),
        )
        .await
        .map(|_| ())
    }

    /// Waits (bounded) until no write from an earlier run is still inside the system of record,
    /// so one run's leftovers cannot crowd the next.
    pub async fn wait_idle(&self, limit: Duration) -> Result<(), SimClientError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let stats = self.stats().await?;
            let busy = stats["records"]["in_service"].as_u64().unwrap_or(0);
            if busy == 0 || tokio::time::Instant::now() >= deadline {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The most of another server's answer an error quotes.
const MAX_EXCERPT: usize = 200;

/// `text` cut to [`MAX_EXCERPT`] characters, on one line.
fn excerpt(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let count = one_line.chars().count();
    if count > MAX_EXCERPT {
        let cut: String = one_line.chars().take(MAX_EXCERPT).collect();
        format!("{cut}... ({count} characters in all)")
    } else {
        one_line
    }
}

/// An error with its causes, `a: b: c`, for errors (like reqwest's) whose message leaves them out.
fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The number at `v[a][b]`, if there is one.
pub fn u64_at(v: &serde_json::Value, a: &str, b: &str) -> Option<u64> {
    v.get(a)?.get(b)?.as_u64()
}

#[cfg(test)]
mod tests {
    use super::excerpt;

    #[test]
    fn another_servers_page_is_quoted_in_short() {
        let page = format!("<html>\n<body>{}</body></html>", "word ".repeat(10_000));
        let e = excerpt(&page);
        assert!(e.len() < 300, "{}", e.len());
        assert!(e.starts_with("<html> <body>word"), "{e}");
        assert!(e.ends_with("characters in all)"), "{e}");
        assert_eq!(excerpt("short"), "short");
    }
}
