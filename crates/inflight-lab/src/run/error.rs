//! Why a lab run stopped.

use std::path::PathBuf;

use crate::sim::client::SimClientError;
use crate::sim::process::SimProcessError;

/// Why the lab stopped.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("interrupted; stopped the runner and the sim and removed the cgroups")]
    Interrupted,
    #[error("cannot enforce a CPU limit of {cpus} CPUs: {message}")]
    NoLimit { cpus: f64, message: String },
    #[error("cannot start `{what}`")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the sim did not start: {0}")]
    SimStart(String),
    #[error(transparent)]
    Sim(#[from] SimClientError),
    #[error("run {run}: the runner failed: {message}")]
    Runner { run: String, message: String },
    #[error("run {run}: the proxy in front of the sim failed: {message}")]
    Proxy { run: String, message: String },
    #[error("{0}")]
    Invalid(String),
    #[error("cannot save the finished runs in {}", path.display())]
    Save {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl From<SimProcessError> for LabError {
    fn from(e: SimProcessError) -> LabError {
        match e {
            SimProcessError::Interrupted => LabError::Interrupted,
            SimProcessError::Spawn { what, source } => LabError::Spawn { what, source },
            SimProcessError::Start(message) => LabError::SimStart(message),
        }
    }
}
