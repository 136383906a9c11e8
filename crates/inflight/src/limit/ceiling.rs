//! [`Ceiling`]: the memory of where a dependency refused, so that a limit probes above it only
//! rarely, and by one.

/// Quiet windows before the first probe above a refusal, in a dependency that has not lost
/// capacity since the limit started (or since a probe found more).
const LONG_WAIT: u32 = 16;
/// Quiet windows before the first probe above a refusal that came soon after the dependency lost
/// capacity: it is changing, and may come back.
const SHORT_WAIT: u32 = 2;
/// The longest wait: a capacity that grows is found within this many quiet windows.
const MAX_WAIT: u32 = 32;

/// What a limit should do about a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The call was refused above every level that held: a probe failed. Go back to this level,
    /// which held a full window.
    FallBack(usize),
    /// The call was refused at a level that had held: the dependency lost capacity. Cut.
    Loss,
}

/// Where a dependency refused, and how long to wait before probing above it again.
///
/// A dependency with no queue (it serves N and refuses the N+1st at once) shows its capacity only
/// by refusing: latency stays flat up to the limit. A limit that grows whenever the latency allows
/// pays a refusal for every probe above N. As TCP CUBIC remembers the window where loss happened
/// and approaches it slowly, this remembers the calls in flight at the refusal and lets the limit
/// reach that level again only after `wait` full windows without refusal, a wait that doubles with
/// each probe refused (up to [`MAX_WAIT`]), so the probes grow rare where the capacity stays put.
/// A probe that holds a full window clears the memory, and the limit grows from there as from a
/// start: a capacity that grew is found within at most [`MAX_WAIT`] quiet windows and a few more.
///
/// A refusal at a level that had held (a dependency that lost capacity) is answered by the
/// limit's usual cut, and forgets what held: the levels that hold are learnt again.
#[derive(Debug, Clone)]
pub(super) struct Ceiling {
    /// In-flight calls at the refused probe.
    at: Option<usize>,
    /// The highest limit whose window was full and saw no refusal, since the last loss (0: none).
    held: usize,
    /// Full windows without refusal since the last refused probe.
    quiet: u32,
    /// Quiet windows needed before probing at `at` again.
    wait: u32,
    /// The wait the next refused probe sets.
    next_wait: u32,
}

impl Default for Ceiling {
    fn default() -> Ceiling {
        Ceiling {
            at: None,
            held: 0,
            quiet: 0,
            wait: 0,
            next_wait: LONG_WAIT,
        }
    }
}

impl Ceiling {
    /// Whether the limit may grow to `next` calls now.
    pub(super) fn allows(&self, next: usize) -> bool {
        match self.at {
            Some(at) => next < at || self.quiet >= self.wait,
            None => true,
        }
    }

    /// A window at `limit` ended full with no refusal in it. True if it was a probe that held:
    /// the capacity grew (or the refusal was a passing one), and how far is unknown.
    pub(super) fn held(&mut self, limit: usize) -> bool {
        self.held = self.held.max(limit);
        match self.at {
            Some(at) if limit >= at => {
                self.at = None;
                self.quiet = 0;
                self.next_wait = LONG_WAIT;
                true
            }
            Some(_) => {
                self.quiet = self.quiet.saturating_add(1);
                false
            }
            None => false,
        }
    }

    /// A call granted with `in_flight` calls in flight (itself included) was refused, and the
    /// limit may answer it (one answer per round trip).
    pub(super) fn refused(&mut self, in_flight: usize) -> Refusal {
        if self.held > 0 && in_flight > self.held {
            self.at = Some(in_flight.min(self.at.unwrap_or(usize::MAX)));
            self.quiet = 0;
            self.wait = self.next_wait;
            self.next_wait = self.next_wait.saturating_mul(2).min(MAX_WAIT);
            Refusal::FallBack(self.held)
        } else {
            *self = Ceiling {
                next_wait: SHORT_WAIT,
                ..Ceiling::default()
            };
            Refusal::Loss
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_probe_falls_back_and_waits_longer_each_time() {
        let mut c = Ceiling::default();
        assert_eq!(c.refused(7), Refusal::Loss, "nothing held yet");
        c.held(6);
        assert_eq!(c.refused(7), Refusal::FallBack(6));
        assert!(c.allows(6) && !c.allows(7));
        for _ in 0..SHORT_WAIT {
            assert!(!c.allows(7));
            c.held(6);
        }
        assert!(c.allows(7), "probes after the wait");
        assert_eq!(c.refused(7), Refusal::FallBack(6));
        for _ in 0..SHORT_WAIT * 2 - 1 {
            c.held(6);
        }
        assert!(!c.allows(7), "the wait doubled");
        c.held(6);
        assert!(c.allows(7));
        assert!(c.held(7), "the probe held");
        assert!(c.allows(100), "a probe that held clears the memory");
    }

    #[test]
    fn a_refusal_at_a_level_that_held_is_a_loss() {
        let mut c = Ceiling::default();
        c.held(9);
        assert_eq!(c.refused(8), Refusal::Loss);
        c.held(4);
        assert_eq!(c.refused(5), Refusal::FallBack(4));
        assert_eq!(c.wait, SHORT_WAIT, "soon after a loss the wait is short");
    }
}
