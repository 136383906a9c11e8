//! [`FanoutError`]: why a fan-out round failed.

/// Why a fan-out round failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FanoutError {
    #[error("the budget rejected a call: {0}")]
    Budget(String),
    #[error("a spawned job failed: {0}")]
    Join(#[from] tokio::task::JoinError),
    #[error("invalid settings: {0}")]
    Invalid(String),
}
