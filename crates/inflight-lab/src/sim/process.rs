//! A sim started as a child process (`inflight sim --port 0`): started, its URL read from its
//! first line, and stopped (or killed and reaped when dropped).

use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::runner::loopback_base;

/// How to start the sim: the `inflight` binary and the flags it gets.
#[derive(Debug, Clone, PartialEq)]
pub struct SimCommand {
    /// The `inflight` binary, run as `inflight sim`.
    pub exe: PathBuf,
    /// The scenarios file; the sim's built-in scenarios when `None`.
    pub scenarios_file: Option<PathBuf>,
    pub time_scale: f64,
    pub seed: u64,
}

/// Why the sim did not start.
#[derive(Debug, thiserror::Error)]
pub enum SimProcessError {
    #[error("interrupted while the sim started")]
    Interrupted,
    #[error("cannot start `{what}`")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the sim did not start: {0}")]
    Start(String),
}

/// A sim this process started: killed and reaped when stopped or dropped.
pub struct SimProcess {
    child: Child,
    url: String,
}

impl SimProcess {
    /// Starts the sim and waits (up to 20 s) for the line saying where it listens; gives up, killing
    /// it, if `interrupt` resolves first.
    pub async fn start(
        command: &SimCommand,
        interrupt: impl Future<Output = ()>,
    ) -> Result<SimProcess, SimProcessError> {
        let mut cmd = Command::new(&command.exe);
        cmd.arg("sim")
            .args(["--port", "0", "--exit-on-stdin-close"]);
        if let Some(file) = &command.scenarios_file {
            cmd.arg("--scenarios").arg(file);
        }
        cmd.arg("--time-scale")
            .arg(command.time_scale.to_string())
            .arg("--seed")
            .arg(command.seed.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A process group of its own: a Ctrl-C at the terminal reaches only the lab, which
            // then stops the sim itself, so that the sim never goes away under a lab that does
            // not yet know it was interrupted.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|source| SimProcessError::Spawn {
            what: format!("{} sim", command.exe.display()),
            source,
        })?;
        // Pass its messages on whole lines at a time, marked, so they never split one of ours.
        let stderr = child.stderr.take().expect("stderr is piped");
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                crate::stderr::line(format_args!("sim: {line}"));
            }
        });
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::select! {
            line = tokio::time::timeout(Duration::from_secs(20), lines.next_line()) => line,
            _ = interrupt => {
                let _ = child.kill().await;
                return Err(SimProcessError::Interrupted);
            }
        };
        let line = match first {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => {
                let status = child.wait().await.ok();
                return Err(SimProcessError::Start(format!(
                    "it exited ({}) before saying where it listens",
                    status.map_or("unknown status".to_string(), |s| s.to_string())
                )));
            }
            Ok(Err(e)) => {
                let _ = child.kill().await;
                return Err(SimProcessError::Start(format!("reading its output: {e}")));
            }
            Err(_) => {
                let _ = child.kill().await;
                return Err(SimProcessError::Start(
                    "it did not say where it listens within 20 s".to_string(),
                ));
            }
        };
        let url = parse_listening_line(&line).ok_or_else(|| {
            SimProcessError::Start(format!(
                "unexpected first line `{line}` (expected `inflight sim listening on http://127.0.0.1:<port>`)"
            ))
        })?;
        // Keep draining its stdout so it can never block on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(SimProcess { child, url })
    }

    /// Where it listens.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Closes its stdin (it exits by itself) and waits briefly; kills it if it lingers.
    pub async fn stop(mut self) {
        drop(self.child.stdin.take());
        // SIGTERM would also do; closing stdin is the path that also covers a killed lab.
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The URL in the sim's `inflight sim listening on http://127.0.0.1:<port>` line.
pub fn parse_listening_line(line: &str) -> Option<String> {
    let url = line.trim().strip_prefix("inflight sim listening on ")?;
    loopback_base(url).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_line_is_parsed() {
        assert_eq!(
            parse_listening_line("inflight sim listening on http://127.0.0.1:4123\n").as_deref(),
            Some("http://127.0.0.1:4123")
        );
        assert_eq!(
            parse_listening_line("listening on http://127.0.0.1:4123"),
            None
        );
        assert_eq!(
            parse_listening_line("inflight sim listening on http://10.1.1.1:4123"),
            None
        );
    }
}
