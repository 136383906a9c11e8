//! [`Backoff`]: the pauses of a caller waiting for a fleet lease, jittered so that the waiters
//! of a fleet do not ask Redis in lockstep.

use std::time::Duration;

/// Pauses that double from `first` to `max`, each drawn between half and all of its nominal
/// value.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            next: first.min(max),
            max,
        }
    }

    /// The next pause.
    pub(crate) fn pause(&mut self) -> Duration {
        let nominal = self.next;
        self.next = (self.next * 2).min(self.max);
        nominal.mul_f64(rand::random::<f64>().mul_add(0.5, 0.5))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap_and_stay_within_their_jitter() {
        let ms = Duration::from_millis;
        let mut backoff = Backoff::new(ms(10), ms(200));
        for nominal in [10, 20, 40, 80, 160, 200, 200] {
            let pause = backoff.pause();
            assert!(
                pause >= ms(nominal) / 2 && pause <= ms(nominal),
                "{pause:?}"
            );
        }
    }
}
