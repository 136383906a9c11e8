//! [`Grants`]: the leases this process waits for in the fleet's queue, and the word, heard on
//! the process's own channel, that one of them was granted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

/// The waiting leases of one process (one Redis connection set), by id.
///
/// A grant is told once, on a pub/sub channel that can drop it (a reconnect): waiters still ask
/// again after a bounded pause, and everyone asks again at once when the channel is heard
/// again after a gap ([`Grants::set_live`]).
#[derive(Debug, Default)]
pub(crate) struct Grants {
    slots: Mutex<HashMap<Arc<str>, Arc<Slot>>>,
    /// Whether grants are heard now: the listener is subscribed.
    live: AtomicBool,
    /// Woken when grants start being heard.
    went_live: Notify,
}

#[derive(Debug, Default)]
struct Slot {
    granted: AtomicBool,
    /// The latest `(epoch, version)` of the budget a word for this id was told at, when the word
    /// said it (`id@epoch.version`, the shares script's): a process whose own answer came from
    /// later than that has nothing to ask.
    told_at: Mutex<Option<(u64, u64)>>,
    /// The latest turn handed over to this id (`id@epoch.version+holds.term_ms`), not taken yet.
    handed: Mutex<Option<Handed>>,
    /// Words may have been missed: the channel was not heard for a while (see
    /// [`Grants::set_live`]).
    gap: AtomicBool,
    /// One waiter per slot, so `notify_one`: a word that comes before the waiter waits is kept.
    changed: Notify,
}

/// A turn of a share handed over to a process by another's report: what it holds now on the
/// server, as of the budget's `(epoch, version)`, and the time to its term's end (zero: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handed {
    pub(crate) at: (u64, u64),
    pub(crate) holds: usize,
    pub(crate) term: std::time::Duration,
}

/// One waiting lease's place in [`Grants`]; leaves it when dropped.
pub(crate) struct Ticket {
    grants: Arc<Grants>,
    id: Arc<str>,
    slot: Arc<Slot>,
}

impl Grants {
    /// Starts listening for the grant of lease `id`.
    pub(crate) fn register(self: &Arc<Self>, id: &Arc<str>) -> Ticket {
        let slot = Arc::new(Slot::default());
        self.lock().insert(id.clone(), slot.clone());
        Ticket {
            grants: self.clone(),
            id: id.clone(),
            slot,
        }
    }

    /// The server granted lease `id`, or told process `id` to report (`id@epoch.version`: at
    /// that state of the budget).
    pub(crate) fn grant(&self, word: &str) {
        let (id, at, handed) = parse_word(word);
        if let Some(slot) = self.lock().get(id) {
            if let Some(at) = at {
                let mut told = slot.told_at.lock().unwrap_or_else(PoisonError::into_inner);
                *told = Some(told.map_or(at, |t| t.max(at)));
            }
            if let Some(handed) = handed {
                let mut latest = slot.handed.lock().unwrap_or_else(PoisonError::into_inner);
                if latest.is_none_or(|h| h.at < handed.at) {
                    *latest = Some(handed);
                }
            }
            slot.granted.store(true, Ordering::Release);
            slot.changed.notify_one();
        }
    }

    /// Grants are heard (`true`: subscribed) or not. Either way, every waiter asks again: on
    /// going live, grants may have been told while nobody listened, and a restarted Redis has
    /// lost its queue; on going deaf, waiters switch to asking after short pauses.
    pub(crate) fn set_live(&self, live: bool) {
        let was = self.live.swap(live, Ordering::AcqRel);
        if live != was {
            if live {
                self.went_live.notify_waiters();
            }
            for slot in self.lock().values() {
                slot.gap.store(true, Ordering::Release);
                slot.changed.notify_one();
            }
        }
    }

    pub(crate) fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// Returns once grants are heard.
    pub(crate) async fn until_live(&self) {
        loop {
            let went_live = self.went_live.notified();
            tokio::pin!(went_live);
            went_live.as_mut().enable();
            if self.is_live() {
                return;
            }
            went_live.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A word heard on a grants channel: `id`, `id@epoch.version` or
/// `id@epoch.version+holds.term_ms` (anything past the id that does not parse is left out).
fn parse_word(word: &str) -> (&str, Option<(u64, u64)>, Option<Handed>) {
    let Some((id, rest)) = word.split_once('@') else {
        return (word, None, None);
    };
    let pair = |s: &str| -> Option<(u64, u64)> {
        let (a, b) = s.split_once('.')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    };
    let (at, turn) = match rest.split_once('+') {
        Some((at, turn)) => (pair(at), pair(turn)),
        None => (pair(rest), None),
    };
    let handed = at.zip(turn).and_then(|(at, (holds, ms))| {
        Some(Handed {
            at,
            holds: usize::try_from(holds).ok()?,
            term: std::time::Duration::from_millis(ms),
        })
    });
    (id, at, handed)
}

impl Ticket {
    /// Whether the channel went deaf or live since the last call: words may have been missed,
    /// and a wake then asks for a report whatever the last word said.
    pub(crate) fn take_gap(&self) -> bool {
        self.slot.gap.swap(false, Ordering::AcqRel)
    }

    /// The latest turn handed over to this id since the last call, if any.
    pub(crate) fn take_handed(&self) -> Option<Handed> {
        self.slot
            .handed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Whether the server said this lease was granted.
    pub(crate) fn is_granted(&self) -> bool {
        self.slot.granted.load(Ordering::Acquire)
    }

    /// The latest `(epoch, version)` this id was told at, if a word said it.
    pub(crate) fn told_at(&self) -> Option<(u64, u64)> {
        *self
            .slot
            .told_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets a wake to ask again that came before now, for a waiter whose answer just came
    /// and covers it; a grant is kept (see [`Ticket::is_granted`]). Always `true`.
    pub(crate) fn settle(&self) -> bool {
        let wake = self.slot.changed.notified();
        tokio::pin!(wake);
        wake.as_mut().enable();
        true
    }

    /// Returns when the lease is granted, or when its waiter should ask again.
    pub(crate) async fn changed(&self) {
        self.slot.changed.notified().await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.grants.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_grant_told_before_its_waiter_waits_is_kept() {
        let grants = Arc::new(Grants::default());
        let id: Arc<str> = Arc::from("a");
        let ticket = grants.register(&id);
        grants.grant("a");
        grants.grant("unknown");
        tokio::time::timeout(std::time::Duration::from_secs(1), ticket.changed())
            .await
            .unwrap();
        assert!(ticket.is_granted());
        drop(ticket);
        assert!(grants.lock().is_empty());
    }

    #[test]
    fn a_word_with_the_budgets_state_keeps_the_latest() {
        let grants = Arc::new(Grants::default());
        let id: Arc<str> = Arc::from("p");
        let ticket = grants.register(&id);
        assert_eq!(ticket.told_at(), None);
        grants.grant("p@5.7");
        grants.grant("p@5.3");
        grants.grant("p@x.1");
        assert_eq!(ticket.told_at(), Some((5, 7)));
        grants.grant("p@6.1");
        assert_eq!(ticket.told_at(), Some((6, 1)));
        assert!(ticket.is_granted());
        assert_eq!(ticket.take_handed(), None);
        grants.grant("p@6.4+2.150");
        grants.grant("p@6.3+1.0");
        grants.grant("p@6.9+x.1");
        assert_eq!(ticket.told_at(), Some((6, 9)));
        let handed = Handed {
            at: (6, 4),
            holds: 2,
            term: std::time::Duration::from_millis(150),
        };
        assert_eq!(ticket.take_handed(), Some(handed));
        assert_eq!(ticket.take_handed(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_settled_wake_is_forgotten_and_a_grant_kept() {
        let grants = Arc::new(Grants::default());
        let id: Arc<str> = Arc::from("a");
        let ticket = grants.register(&id);
        grants.set_live(true);
        assert!(ticket.settle());
        let waited =
            tokio::time::timeout(std::time::Duration::from_secs(1), ticket.changed()).await;
        assert!(waited.is_err(), "the wake of going live was forgotten");
        grants.grant("a");
        ticket.settle();
        assert!(ticket.is_granted());
    }

    #[tokio::test(start_paused = true)]
    async fn going_deaf_wakes_every_waiter_to_ask_after_short_pauses() {
        let grants = Arc::new(Grants::default());
        grants.set_live(true);
        let id: Arc<str> = Arc::from("a");
        let ticket = grants.register(&id);
        grants.set_live(false);
        tokio::time::timeout(std::time::Duration::from_secs(1), ticket.changed())
            .await
            .unwrap();
        assert!(!ticket.is_granted() && !grants.is_live());
    }

    #[tokio::test(start_paused = true)]
    async fn going_live_wakes_every_waiter_to_ask_again() {
        let grants = Arc::new(Grants::default());
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let (a, b) = (grants.register(&a), grants.register(&b));
        let live = tokio::spawn({
            let grants = grants.clone();
            async move { grants.until_live().await }
        });
        grants.set_live(true);
        live.await.unwrap();
        for ticket in [&a, &b] {
            tokio::time::timeout(std::time::Duration::from_secs(1), ticket.changed())
                .await
                .unwrap();
            assert!(!ticket.is_granted());
        }
    }
}
