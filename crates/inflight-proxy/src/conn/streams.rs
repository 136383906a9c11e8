//! HTTP/2: the answers of a connection's streams, as its watchdog sees them. hyper stops
//! polling an answer's body while its client gives the stream no room (its window spent), so a
//! client that stops reading one stream is seen only from outside: each answer notes since
//! when it has waited for room ([`StreamWait`]), and the watchdog ends the call of one that
//! waited `idle_timeout` ([`Streams::cut_stalled`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::call::{CallSlot, Early};

/// How many answers the list keeps, dead ones included, before it drops the dead: doubled
/// from the live ones at each pass, so that each answer costs one push and, amortized, one
/// look.
const FIRST_PRUNE: usize = 64;

/// One answer's stream.
pub(crate) struct StreamWait {
    /// Milliseconds since the connection's epoch, plus one, at which the answer handed hyper a
    /// frame and hyper has not asked for the next since: 0 while hyper asks.
    since: AtomicU64,
    /// The call the answer holds, if any.
    call: Option<Arc<CallSlot>>,
    /// Whether its call was ended for its client's stall.
    cut: AtomicBool,
}

impl StreamWait {
    /// hyper asks for the next frame: the client has room for it.
    pub(crate) fn asked(&self) {
        self.since.store(0, Ordering::Relaxed);
    }

    /// A frame was handed to hyper at `now` (milliseconds since the connection's epoch).
    pub(crate) fn handed(&self, now: u64) {
        self.since.store(now + 1, Ordering::Relaxed);
    }
}

/// The connection's answers still being sent.
#[derive(Default)]
pub(crate) struct Streams {
    list: Mutex<List>,
}

#[derive(Default)]
struct List {
    waits: Vec<Weak<StreamWait>>,
    prune_at: usize,
}

/// What a look at the connection's answers found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Stalled {
    /// Answers found stalled now: their calls ended (a refusal of the proxy's own holds none).
    pub(crate) cut_now: usize,
    /// Of them, those that held a call.
    pub(crate) calls_ended: usize,
    /// Answers whose calls were ended at an earlier look, their streams still open.
    pub(crate) cut_before: usize,
}

impl Streams {
    /// Watches an answer that holds `call` (if any) until it is dropped.
    pub(crate) fn watch(&self, call: Option<Arc<CallSlot>>) -> Arc<StreamWait> {
        let wait = Arc::new(StreamWait {
            since: AtomicU64::new(0),
            call,
            cut: AtomicBool::new(false),
        });
        let mut list = self.list.lock().unwrap_or_else(PoisonError::into_inner);
        if list.waits.len() >= list.prune_at.max(FIRST_PRUNE) {
            list.waits.retain(|w| w.strong_count() > 0);
            list.prune_at = list.waits.len() * 2;
        }
        list.waits.push(Arc::downgrade(&wait));
        wait
    }

    /// Ends, as its client's doing, the call of each answer that has waited `limit`
    /// milliseconds or more for room at `now` (milliseconds since the connection's epoch).
    pub(crate) fn cut_stalled(&self, now: u64, limit: u64) -> Stalled {
        let mut stalled = Stalled::default();
        let mut due = Vec::new();
        {
            let mut list = self.list.lock().unwrap_or_else(PoisonError::into_inner);
            list.waits.retain(|w| {
                let Some(wait) = w.upgrade() else {
                    return false;
                };
                let since = wait.since.load(Ordering::Relaxed);
                if wait.cut.load(Ordering::Relaxed) {
                    stalled.cut_before += 1;
                } else if since != 0 && now.saturating_sub(since - 1) >= limit {
                    wait.cut.store(true, Ordering::Relaxed);
                    stalled.cut_now += 1;
                    due.push(wait);
                }
                true
            });
            list.prune_at = list.waits.len() * 2;
        }
        // Outside the lock: ending a call gives its permit back, which may grant a waiter.
        for wait in due {
            if let Some(call) = &wait.call {
                stalled.calls_ended += 1;
                call.expire(Early::ClientStopped);
            }
        }
        stalled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_cut_once_it_has_waited_the_limit_and_counted_as_cut_after() {
        let streams = Streams::default();
        let reading = streams.watch(None);
        let stalled = streams.watch(None);
        reading.handed(100);
        reading.asked();
        stalled.handed(100);
        assert_eq!(streams.cut_stalled(599, 500), Stalled::default());
        let first = streams.cut_stalled(600, 500);
        assert_eq!(
            (first.cut_now, first.calls_ended, first.cut_before),
            (1, 0, 0)
        );
        let second = streams.cut_stalled(1100, 500);
        assert_eq!((second.cut_now, second.cut_before), (0, 1));
        drop(stalled);
        assert_eq!(streams.cut_stalled(1600, 500), Stalled::default());
        drop(reading);
    }

    #[test]
    fn dropped_answers_leave_the_list() {
        let streams = Streams::default();
        let kept = streams.watch(None);
        for _ in 0..10_000 {
            drop(streams.watch(None));
        }
        let len = streams.list.lock().unwrap().waits.len();
        assert!(len <= 2 * FIRST_PRUNE, "{len} entries for 1 live answer");
        drop(kept);
    }
}
