//! [`FleetRate`]: a rate limit shared by a fleet, kept as a GCRA in Redis on the server's clock.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::FleetUnavailable;
use crate::RedisFleet;

/// How fast calls may start across every process that uses a rate limit of the same name: one
/// every `interval`, with up to `burst` back to back after a quiet spell.
///
/// The state is one key in Redis (`inflight:{name}:rate`), updated by a GCRA script that reads
/// the server's clock, so the processes' own clocks never matter. Each check is one round trip.
///
/// ```no_run
/// use std::time::Duration;
/// use inflight_redis::RedisFleet;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let fleet = RedisFleet::new("redis://127.0.0.1:6379")?;
/// // 100 calls a second across the fleet, 10 at once after a pause.
/// let llm = fleet.rate("llm", Duration::from_millis(10), 10);
/// llm.acquire(None).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct FleetRate {
    fleet: RedisFleet,
    name: Arc<str>,
    interval: Duration,
    burst: u32,
}

/// Why a [`FleetRate`] let no call start.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RateError {
    /// The rate limit lets the next call start only after this long (past the deadline, for
    /// [`FleetRate::acquire`]).
    #[error("the fleet rate limit lets the next call start in {0:?}")]
    NotUntil(Duration),
    /// Redis could not be asked.
    #[error(transparent)]
    Unavailable(FleetUnavailable),
}

impl FleetRate {
    pub(crate) fn new(fleet: RedisFleet, name: &str, interval: Duration, burst: u32) -> FleetRate {
        FleetRate {
            fleet,
            name: Arc::from(name),
            interval,
            burst: burst.max(1),
        }
    }

    /// Lets one call start now, or says how long until one could.
    ///
    /// # Errors
    ///
    /// [`RateError::NotUntil`] when the limit says wait; [`RateError::Unavailable`] when Redis
    /// cannot be asked.
    pub async fn try_acquire(&self) -> Result<(), RateError> {
        let check = self
            .fleet
            .server()
            .gcra(&self.name, self.interval, self.burst);
        let unavailable = |reason| {
            RateError::Unavailable(FleetUnavailable::new(
                &self.name,
                self.fleet.address(),
                reason,
            ))
        };
        match tokio::time::timeout(self.fleet.op_timeout(), check).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(wait))) => Err(RateError::NotUntil(wait)),
            Ok(Err(e)) => Err(unavailable(e)),
            Err(_) => Err(unavailable(Arc::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no answer in time",
            )))),
        }
    }

    /// Waits until the limit lets one call start, asking again when the server says a slot is
    /// due; refuses at once when that is after `deadline`.
    ///
    /// # Errors
    ///
    /// [`RateError::NotUntil`] when the next slot comes after `deadline`;
    /// [`RateError::Unavailable`] when Redis cannot be asked.
    pub async fn acquire(&self, deadline: Option<Instant>) -> Result<(), RateError> {
        loop {
            match self.try_acquire().await {
                Err(RateError::NotUntil(wait)) => {
                    let at = Instant::now() + wait;
                    if deadline.is_some_and(|d| at > d) {
                        return Err(RateError::NotUntil(wait));
                    }
                    tokio::time::sleep_until(at).await;
                }
                other => return other,
            }
        }
    }
}
