//! The Redis that fleet budgets (`scope = "fleet"`) keep their permits in during a lab run: the
//! one `--redis-url` names, or a `redis-server` the lab starts on a free loopback port, without
//! persistence, and stops when the lab ends.

use std::process::Stdio;
use std::time::Duration;

use redis::ConnectionAddr;
use tokio::process::{Child, Command};

use super::error::LabError;

/// How long a Redis may take to answer its first PING.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// A Redis the lab talks to; the server is killed on drop when the lab started it.
#[derive(Debug)]
pub struct LabRedis {
    url: String,
    client: redis::Client,
    server: Option<Child>,
}

impl LabRedis {
    /// The Redis at `url`, which must be on loopback and answer a PING.
    pub async fn connect(url: &str) -> Result<LabRedis, LabError> {
        let client = loopback_client(url)?;
        let redis = LabRedis {
            url: url.to_string(),
            client,
            server: None,
        };
        redis.ping(Duration::from_secs(5)).await.map_err(|e| {
            LabError::Invalid(format!("no Redis answers at --redis-url {url}: {e}"))
        })?;
        Ok(redis)
    }

    /// Starts a `redis-server` on a free port of 127.0.0.1 and waits until it answers.
    pub async fn start() -> Result<LabRedis, LabError> {
        let mut last = String::new();
        // A port found free may be taken before the server binds it: try a few.
        for _ in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|source| LabError::Spawn {
                    what: "a loopback port for redis-server".to_string(),
                    source,
                })?
                .port();
            let mut command = Command::new("redis-server");
            command
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                // Stopped by the lab, not by the terminal's Ctrl-C (see `SimProcess::start`).
                .process_group(0)
                .kill_on_drop(true);
            let child = command.spawn().map_err(|source| {
                if source.kind() == std::io::ErrorKind::NotFound {
                    LabError::Invalid(
                        "a strategy keeps its budget in Redis (scope = \"fleet\"), and redis-server is not installed: install it (apt-get install redis-server) or give --redis-url".to_string(),
                    )
                } else {
                    LabError::Spawn {
                        what: "redis-server".to_string(),
                        source,
                    }
                }
            })?;
            let url = format!("redis://127.0.0.1:{port}");
            let redis = LabRedis {
                client: loopback_client(&url)?,
                url,
                server: Some(child),
            };
            match redis.ping(READY_WITHIN).await {
                Ok(()) => return Ok(redis),
                Err(e) => {
                    last = e;
                    redis.stop().await;
                }
            }
        }
        Err(LabError::Invalid(format!(
            "the redis-server the lab started did not answer within {READY_WITHIN:?}: {last}"
        )))
    }

    /// Its URL, as runners are given it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether the lab started this server (and stops it).
    pub fn started_here(&self) -> bool {
        self.server.is_some()
    }

    /// Deletes what fleet budgets named `budgets` keep in Redis, so that a run starts with every
    /// permit free (no lease of a runner killed in an earlier run lingers).
    pub async fn clear(&self, budgets: &[&str]) -> Result<(), LabError> {
        let keys: Vec<String> = budgets
            .iter()
            .flat_map(|b| inflight_redis::budget_keys(b))
            .collect();
        let mut conn = self.connection().await?;
        redis::cmd("DEL")
            .arg(&keys)
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| self.error(&e.to_string()))
    }

    /// Stops the server if the lab started it.
    pub async fn stop(mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill().await;
        }
    }

    async fn connection(&self) -> Result<redis::aio::MultiplexedConnection, LabError> {
        tokio::time::timeout(
            Duration::from_secs(5),
            self.client.get_multiplexed_async_connection(),
        )
        .await
        .map_err(|_| self.error("no answer within 5 s"))?
        .map_err(|e| self.error(&e.to_string()))
    }

    fn error(&self, message: &str) -> LabError {
        LabError::Invalid(format!("Redis at {}: {message}", self.url))
    }

    /// PINGs until the server answers or `within` has passed; the last error otherwise.
    async fn ping(&self, within: Duration) -> Result<(), String> {
        let start = tokio::time::Instant::now();
        let mut last = String::from("no answer");
        while start.elapsed() < within {
            let attempt = async {
                let mut conn = self
                    .client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| e.to_string())?;
                redis::cmd("PING")
                    .query_async::<String>(&mut conn)
                    .await
                    .map_err(|e| e.to_string())
            };
            match tokio::time::timeout(Duration::from_secs(1), attempt).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) => last = e,
                Err(_) => last = "no answer within 1 s".to_string(),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(last)
    }
}

/// Checks that `url` is a Redis URL on a loopback TCP address; the error says what is wrong.
pub fn check_url(url: &str) -> Result<(), LabError> {
    loopback_client(url).map(drop)
}

/// A client for `url`, refused unless it names a loopback TCP address.
fn loopback_client(url: &str) -> Result<redis::Client, LabError> {
    let bad = |why: &str| {
        LabError::Invalid(format!(
            "--redis-url {url}: {why} (the lab talks to loopback only, e.g. redis://127.0.0.1:6379)"
        ))
    };
    let client = redis::Client::open(url).map_err(|e| bad(&e.to_string()))?;
    match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, _)
            if matches!(host.as_str(), "127.0.0.1" | "localhost" | "::1" | "[::1]") =>
        {
            Ok(client)
        }
        ConnectionAddr::Tcp(host, _) => Err(bad(&format!("{host} is not a loopback address"))),
        _ => Err(bad("not a plain TCP address")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_redis_urls_are_taken() {
        assert!(loopback_client("redis://127.0.0.1:6379").is_ok());
        assert!(loopback_client("redis://localhost:6379/0").is_ok());
        for bad in [
            "redis://10.0.0.1:6379",
            "redis://example.com:6379",
            "http://127.0.0.1:6379",
            "not a url",
        ] {
            let e = loopback_client(bad).unwrap_err().to_string();
            assert!(e.contains("--redis-url") && e.contains(bad), "{bad}: {e}");
        }
    }
}
