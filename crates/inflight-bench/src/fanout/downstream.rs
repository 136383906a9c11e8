//! [`Downstream`]: the stand-in dependency the fan-out strategies call, which counts the callers
//! inside it; and [`Delay`], the timer it sleeps on.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::gauge::PeakGauge;
use crate::timer::PreciseTimer;

/// Which timer the stand-in downstream sleeps on.
#[derive(Clone)]
pub enum Delay {
    /// `tokio::time::sleep` (1 ms ticks, deadlines rounded up).
    Tokio,
    /// A [`PreciseTimer`] (tens of microseconds of slack).
    Precise(PreciseTimer),
}

impl Delay {
    /// `tokio` or `precise`.
    pub fn name(&self) -> &'static str {
        match self {
            Delay::Tokio => "tokio",
            Delay::Precise(_) => "precise",
        }
    }

    /// Completes after `d` on this timer.
    pub fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        match self {
            Delay::Tokio => Box::pin(tokio::time::sleep(d)),
            Delay::Precise(t) => Box::pin(t.sleep(d)),
        }
    }
}

/// The stand-in dependency: each call waits `delay`, and the downstream counts how many callers
/// are inside it at once and remembers the most it saw.
pub struct Downstream {
    delay: Duration,
    timer: Delay,
    inside: PeakGauge,
    calls: AtomicU64,
}

impl Downstream {
    pub fn new(delay: Duration, timer: Delay) -> Downstream {
        Downstream {
            delay,
            timer,
            inside: PeakGauge::new(),
            calls: AtomicU64::new(0),
        }
    }

    /// One call: counted inside from entry until it returns (or is dropped).
    pub async fn call(&self, _id: usize) {
        let _inside = self.inside.enter();
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.timer.sleep(self.delay).await;
    }

    /// The most callers that were inside at once.
    pub fn peak(&self) -> usize {
        to_usize(self.inside.peak())
    }

    /// Calls made so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Callers inside now.
    pub fn in_flight(&self) -> usize {
        to_usize(self.inside.current())
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}
