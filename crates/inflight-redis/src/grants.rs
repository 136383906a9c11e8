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
    /// One waiter per slot, so `notify_one`: a word that comes before the waiter waits is kept.
    changed: Notify,
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

    /// The server granted lease `id`.
    pub(crate) fn grant(&self, id: &str) {
        if let Some(slot) = self.lock().get(id) {
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

impl Ticket {
    /// Whether the server said this lease was granted.
    pub(crate) fn is_granted(&self) -> bool {
        self.slot.granted.load(Ordering::Acquire)
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
