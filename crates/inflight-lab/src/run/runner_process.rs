//! One runner process (`inflight lab runner`) of a run: started inside its own CPU-quota cgroup
//! before its async runtime starts, its output collected, and killed and reaped before the
//! cgroup is dropped.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};

use inflight_cpu::QuotaGroup;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin, Command};
use tokio::task::JoinHandle;

use crate::results::RunResult;
use crate::runner::RunnerArgs;

/// A started runner.
pub(crate) struct RunnerProcess {
    child: Child,
    /// Held until the runner ends: `Child::wait` would close it, and the runner exits when it
    /// closes.
    stdin: Option<ChildStdin>,
    out: JoinHandle<Vec<u8>>,
    err: JoinHandle<Vec<u8>>,
    /// Dropped only once the runner is reaped, so the group is empty and can be removed.
    group: Option<QuotaGroup>,
}

/// How a runner ended, as far as the lab is concerned.
pub(crate) enum RunnerEnd {
    /// It printed a run result; `said` is what it wrote on stderr, if anything.
    Done {
        result: Box<RunResult>,
        said: String,
    },
    /// A signal meant for the lab (Ctrl-C, SIGTERM, SIGHUP) ended it: interrupted, not broken.
    Interrupted,
    /// It failed; the message says how.
    Failed(String),
}

/// Spawns `cmd` with its stdout and stderr piped, inside `group` when given, in a process group of
/// its own (a Ctrl-C at the terminal reaches the lab alone, which stops its children itself), and
/// killed if its handle is dropped.
pub(crate) fn spawn_in(
    mut cmd: std::process::Command,
    group: Option<&QuotaGroup>,
) -> std::io::Result<Child> {
    cmd.process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(group) = group {
        group.prepare_command(&mut cmd);
    }
    let mut cmd = Command::from(cmd);
    cmd.kill_on_drop(true);
    cmd.spawn()
}

impl RunnerProcess {
    /// Starts `exe` as a runner with `args`, inside `group` when given, in a process group of
    /// its own: a Ctrl-C at the terminal reaches the lab alone, which stops the runner itself
    /// and so always knows it was interrupted.
    pub(crate) fn spawn(
        exe: &Path,
        args: &RunnerArgs,
        group: Option<QuotaGroup>,
    ) -> std::io::Result<RunnerProcess> {
        let mut cmd = std::process::Command::new(exe);
        cmd.args(args.command_line()).stdin(Stdio::piped());
        let mut child = spawn_in(cmd, group.as_ref())?;
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let out = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = stdout.read_to_end(&mut buf).await;
            buf
        });
        let err = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = stderr.read_to_end(&mut buf).await;
            buf
        });
        Ok(RunnerProcess {
            child,
            stdin,
            out,
            err,
            group,
        })
    }

    /// Waits until the runner exits.
    pub(crate) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Kills and reaps the runner, then removes its cgroup.
    pub(crate) async fn kill(mut self) {
        let _ = self.child.kill().await;
        drop(self.group.take());
    }

    /// What the runner's exit `status` and output say, once it has exited.
    pub(crate) async fn finish(mut self, status: std::io::Result<ExitStatus>) -> RunnerEnd {
        drop(self.stdin.take());
        drop(self.group.take());
        let out = (&mut self.out).await.unwrap_or_default();
        let err = (&mut self.err).await.unwrap_or_default();
        let status = match status {
            Ok(status) => status,
            Err(e) => return RunnerEnd::Failed(e.to_string()),
        };
        let said = String::from_utf8_lossy(&err).trim().to_string();
        // A runner ended by Ctrl-C, SIGTERM or SIGHUP (sent to the whole process group, or to
        // it alone) was interrupted, not broken.
        {
            use std::os::unix::process::ExitStatusExt;
            if matches!(status.signal(), Some(1 | 2 | 15)) {
                return RunnerEnd::Interrupted;
            }
        }
        if !status.success() {
            return RunnerEnd::Failed(format!(
                "exited with {status}: {}",
                if said.is_empty() {
                    "(no message)"
                } else {
                    &said
                }
            ));
        }
        match serde_json::from_slice(&out) {
            Ok(result) => RunnerEnd::Done {
                result: Box::new(result),
                said,
            },
            Err(e) => RunnerEnd::Failed(format!(
                "its output is not a run result ({e}): {}",
                String::from_utf8_lossy(&out)
                    .chars()
                    .take(200)
                    .collect::<String>()
            )),
        }
    }
}
