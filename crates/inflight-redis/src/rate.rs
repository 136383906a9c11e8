//! [`FleetRate`]: a rate limit shared by a fleet, kept as a GCRA in Redis on the server's clock;
//! and the rate gate of a fleet budget's store ([`RedisStore::rate`](crate::RedisStore::rate)).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use inflight::store::StoreError;
use inflight::Rate;
use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::{FleetError, FleetUnavailable};
use crate::fallback::Fail;
use crate::server::Server;

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
#[derive(Clone)]
pub struct FleetRate {
    server: Arc<dyn Server>,
    op_timeout: Duration,
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

impl std::fmt::Debug for FleetRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetRate")
            .field("address", &self.server.address())
            .field("name", &self.name)
            .field("interval", &self.interval)
            .field("burst", &self.burst)
            .finish()
    }
}

impl FleetRate {
    /// A rate named `name` kept in `server`, each check bounded by `op_timeout`.
    pub(crate) fn new(
        server: Arc<dyn Server>,
        op_timeout: Duration,
        name: &str,
        interval: Duration,
        burst: u32,
    ) -> FleetRate {
        FleetRate {
            server,
            op_timeout,
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
        let check = self.server.gcra(&self.name, self.interval, self.burst);
        let unavailable = |reason| {
            RateError::Unavailable(FleetUnavailable::new(
                &self.name,
                (self.server.address(), self.server.slot_of(&self.name)),
                reason,
            ))
        };
        match tokio::time::timeout(self.op_timeout, check).await {
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

/// The rate gate of a fleet budget, taken by its store after the fleet lease: the next slot of
/// one GCRA in Redis (`inflight:{name}:rate`, the script of [`FleetRate`]), reserved in the order
/// callers reach Redis, or refused at once when it comes after the caller's deadline.
///
/// While Redis cannot be asked, [`Fail::Local`] falls back to a gate of the same rate in this
/// process alone (so a fleet of N replicas lets up to N times the rate through until Redis
/// answers again), and [`Fail::Closed`] refuses.
#[derive(Debug)]
pub(crate) struct RateGate {
    rate: Rate,
    interval: Duration,
    burst: u32,
    local: LocalGcra,
    /// When the last slot the fleet's GCRA told of comes: a caller asking before it waits.
    next_slot: Mutex<Option<Instant>>,
}

impl RateGate {
    /// A gate of `rate` with `burst`, checked as a budget checks its own.
    pub(crate) fn new(rate: Rate, burst: u32) -> Result<RateGate, FleetError> {
        let interval = rate
            .interval()
            .filter(|i| *i >= Duration::from_micros(1))
            .ok_or_else(|| {
                FleetError::Invalid(format!(
                    "rate must be a positive finite rate of at most 1000000/s, got {rate}"
                ))
            })?;
        if burst == 0 {
            return Err(FleetError::Invalid(
                "burst must be at least 1, got 0".to_string(),
            ));
        }
        Ok(RateGate {
            rate,
            interval,
            burst,
            local: LocalGcra::new(interval, burst),
            next_slot: Mutex::new(None),
        })
    }

    pub(crate) fn rate_limit(&self) -> (Rate, u32) {
        (self.rate, self.burst)
    }

    /// Waits for this caller's slot, or refuses: [`StoreError::RateLimited`] at once when the
    /// slot comes after `deadline`. `fleet_lease` says whether the caller's lease came from
    /// Redis; one from the fallback (Redis is down) takes the local gate without asking.
    pub(crate) async fn take(
        &self,
        engine: &Engine,
        budget: &str,
        deadline: Option<Instant>,
        fleet_lease: bool,
    ) -> Result<(), StoreError> {
        if !fleet_lease {
            return self.take_local(deadline).await;
        }
        let settings = engine.settings();
        let asked = Instant::now();
        let max_wait = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(asked));
        let op_deadline = match deadline {
            Some(d) => d.min(asked + settings.op_timeout),
            None => asked + settings.op_timeout,
        };
        let answer = tokio::time::timeout_at(
            op_deadline,
            engine
                .server()
                .reserve_rate(budget, self.interval, self.burst, max_wait),
        )
        .await;
        let reason = match answer {
            Ok(Ok(Ok(wait))) => {
                let at = Instant::now() + wait;
                // A slot that had to be waited for puts the next one an interval later; one
                // of the burst says nothing of the next.
                self.saw_slot(if wait.is_zero() {
                    at
                } else {
                    at + self.interval
                });
                tokio::time::sleep_until(at).await;
                return Ok(());
            }
            Ok(Ok(Err(retry_after))) => {
                self.saw_slot(Instant::now() + retry_after);
                engine.rate_limited();
                return Err(StoreError::RateLimited { retry_after });
            }
            Ok(Err(error)) => error,
            Err(_) if deadline.is_some_and(|d| Instant::now() >= d) => {
                return Err(StoreError::Timeout)
            }
            Err(_) => Arc::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {:?}", settings.op_timeout),
            )),
        };
        match settings.fail {
            Fail::Local(_) => {
                tracing::debug!(budget, error = %reason, "fleet rate: redis cannot be asked; the local rate applies");
                self.take_local(deadline).await
            }
            Fail::Closed => Err(StoreError::unavailable(FleetUnavailable::new(
                budget,
                (engine.address(), engine.server().slot_of(budget)),
                reason,
            ))),
        }
    }

    /// The fleet's GCRA said a new caller's slot comes no earlier than `at`.
    fn saw_slot(&self, at: Instant) {
        *self
            .next_slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(at);
    }

    /// How long from now until a new caller would get its slot within `permit_timeout`, as
    /// far as the last answer of the fleet's GCRA tells (others' slots, unseen here, may push
    /// it further).
    pub(crate) fn limited_for(&self, permit_timeout: Option<Duration>) -> Duration {
        let now = Instant::now();
        let next = self
            .next_slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .unwrap_or(now);
        let wait = next.saturating_duration_since(now);
        match permit_timeout {
            Some(deadline) => wait.saturating_sub(deadline),
            None => Duration::ZERO,
        }
    }

    async fn take_local(&self, deadline: Option<Instant>) -> Result<(), StoreError> {
        let now = Instant::now();
        match self.local.reserve(now, deadline) {
            Ok(at) => {
                tokio::time::sleep_until(at).await;
                Ok(())
            }
            Err(retry_after) => {
                self.saw_slot(Instant::now() + retry_after);
                Err(StoreError::RateLimited { retry_after })
            }
        }
    }
}

/// A GCRA in this process, on tokio's clock, with the same arithmetic as the script: the
/// fallback of a [`RateGate`]. A slot whose caller left before it came stays used.
#[derive(Debug)]
struct LocalGcra {
    interval: Duration,
    tolerance: Duration,
    tat: Mutex<Option<Instant>>,
}

impl LocalGcra {
    fn new(interval: Duration, burst: u32) -> LocalGcra {
        LocalGcra {
            interval,
            tolerance: interval.saturating_mul(burst.max(1) - 1),
            tat: Mutex::new(None),
        }
    }

    /// Reserves the next slot if it comes no later than `deadline`: when it is; otherwise
    /// reserves nothing and says how long the wait would have been.
    fn reserve(&self, now: Instant, deadline: Option<Instant>) -> Result<Instant, Duration> {
        let mut tat = self.tat.lock().unwrap_or_else(PoisonError::into_inner);
        let current = tat.unwrap_or(now).max(now);
        let at = current.checked_sub(self.tolerance).unwrap_or(now).max(now);
        if deadline.is_some_and(|d| at > d) {
            return Err(at - now);
        }
        *tat = Some(current + self.interval);
        Ok(at)
    }
}
