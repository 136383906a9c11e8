//! [`BenchError`]: why the pool benchmark could not run a pool size, or could not start.

use std::time::Duration;

use inflight_cpu::CgroupError;

/// Why the pool benchmark stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    #[error("cannot enforce a quota of {cpus} CPUs: {source}")]
    Quota {
        cpus: f64,
        #[source]
        source: CgroupError,
    },
    /// The quota is more CPUs than this process can use (`std::thread::available_parallelism()`):
    /// the pools could never use it, and the report would name a limit that was not one.
    #[error("a quota of {cpus} CPUs is more than the {available} CPU{} this process can use, so it would limit nothing; give at most {available}", if *.available == 1 { "" } else { "s" })]
    MoreThanAvailable { cpus: f64, available: usize },
    #[error("cannot start the pool {pool} child process: {source}")]
    Spawn {
        pool: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("the pool {pool} child process did not finish within {limit:?} and was killed")]
    Timeout { pool: usize, limit: Duration },
    #[error("the pool {pool} child process failed ({status}): {stderr}")]
    Child {
        pool: usize,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("the pool {pool} child process printed no result: {reason}")]
    Output { pool: usize, reason: String },
    #[error("interrupted while pool {pool} ran; its child process was stopped")]
    Interrupted { pool: usize },
}

impl BenchError {
    /// The pool size that was running, for the errors that happen while one runs.
    pub fn pool(&self) -> Option<usize> {
        match self {
            BenchError::Quota { .. } | BenchError::MoreThanAvailable { .. } => None,
            BenchError::Spawn { pool, .. }
            | BenchError::Timeout { pool, .. }
            | BenchError::Child { pool, .. }
            | BenchError::Output { pool, .. }
            | BenchError::Interrupted { pool } => Some(*pool),
        }
    }
}
