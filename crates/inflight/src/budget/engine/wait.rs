//! Waiting: in the queue, in a class's lane, out a pause, for a pace turn and for a rate slot,
//! each within the caller's deadline, and the guards that undo a wait that ends early.

use super::*;

impl Engine {
    /// Joins the queue (if its bound allows) and waits for a local permit until `deadline`.
    pub(super) async fn wait_in_queue(
        &self,
        class: Option<usize>,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<(), AcquireError> {
        // try_take just failed, so every permit was held (or callers of some class wait).
        let limit = self.permits.limit();
        self.stats.all_held(limit);
        if let Some(queue) = &self.class_queue {
            return self
                .wait_in_class(
                    queue,
                    class.unwrap_or(self.default_class),
                    limit,
                    deadline,
                    attempt,
                )
                .await;
        }
        let ahead = match self.config.max_queued {
            // An unbounded queue always has a place: one plain add, no compare-and-swap loop.
            None => self.waiting.fetch_add(1, Relaxed),
            // Take a place only if one is free: an unconditional add (undone on rejection) would
            // let `waiting` show more than `max_queued` for a moment to anyone reading it.
            Some(max_queued) => match self
                .waiting
                .fetch_update(Relaxed, Relaxed, |n| (n < max_queued).then_some(n + 1))
            {
                Ok(ahead) => ahead,
                Err(ahead) => {
                    attempt.ended = true;
                    return Err(AcquireError::QueueFull {
                        retry_after: self.queue_estimate(ahead, limit),
                    });
                }
            },
        };
        self.stats.queued(ahead + 1);
        let _place = QueuePlace(&self.waiting);
        // One place in the semaphore's queue for the whole wait: a pause that moves wakes the
        // caller to check its deadline against it, and must not cost it its place.
        let take = std::pin::pin!(async {
            self.permits.take().await;
            Woke::Granted
        });
        // The semaphore's queue never evicts: its only turn is a grant.
        self.wait_in_line(take, deadline, attempt).await.map(drop)
    }

    /// Waits for `turn` (a place in a queue, kept for the whole wait) until `deadline`, waking
    /// to weigh the deadline against the pause whenever it moves; returns how the turn came
    /// ([`Woke::Granted`] or [`Woke::Evicted`]).
    pub(super) async fn wait_in_line<F: Future<Output = Woke>>(
        &self,
        mut turn: std::pin::Pin<&mut F>,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<Woke, AcquireError> {
        let mut timer = std::pin::pin!(deadline.map(tokio::time::sleep_until));
        loop {
            let turn_or_deadline = std::future::poll_fn(|cx| {
                use std::task::Poll;
                if let Poll::Ready(woke) = turn.as_mut().poll(cx) {
                    return Poll::Ready(woke);
                }
                if let Some(timer) = timer.as_mut().as_pin_mut() {
                    if timer.poll(cx).is_ready() {
                        return Poll::Ready(Woke::Deadline);
                    }
                }
                Poll::Pending
            });
            match self
                .until_pause_moves(turn_or_deadline, deadline, attempt)
                .await?
            {
                Some(Woke::Deadline) => {
                    attempt.ended = true;
                    return Err(AcquireError::PermitTimeout);
                }
                Some(turned) => return Ok(turned),
                None => {}
            }
        }
    }

    /// The one wait of every gate: `what` until it is ready, or `None` as soon as the pause
    /// moves (a pause that starts, moves or ends), so that the caller weighs its deadline again.
    ///
    /// The pause's signal is enabled *before* the pause is checked against `deadline` (a pause
    /// that outlasts it refuses at once), and `what` is first polled after both: a pause that
    /// moves between the check and the wait is never missed.
    pub(super) async fn until_pause_moves<F: Future>(
        &self,
        what: F,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<Option<F::Output>, AcquireError> {
        let changed = self.pause.changed();
        let mut changed = std::pin::pin!(changed);
        changed.as_mut().enable();
        self.check_pause(Instant::now(), deadline, attempt)?;
        let mut what = std::pin::pin!(what);
        Ok(std::future::poll_fn(|cx| {
            use std::task::Poll;
            if let Poll::Ready(done) = what.as_mut().poll(cx) {
                return Poll::Ready(Some(done));
            }
            match changed.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await)
    }

    /// [`Engine::wait_in_queue`] for a budget with classes: the caller waits in `class`'s lane
    /// of `queue`, until its turn, its deadline, or a heavier caller takes its place.
    pub(super) async fn wait_in_class(
        &self,
        queue: &ClassQueue,
        class: usize,
        limit: usize,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<(), AcquireError> {
        let class_waiting = &self.stats.class(class).waiting;
        let joined = queue.join(
            class,
            &self.permits,
            &self.waiting,
            class_waiting,
            self.config.max_queued,
        );
        let (ticket, ahead) = match joined {
            Ok(joined) => joined,
            Err(full) => {
                attempt.ended = true;
                return Err(AcquireError::QueueFull {
                    retry_after: self.queue_estimate(full.ahead, limit),
                });
            }
        };
        self.stats.queued(ahead + 1);
        // As in the semaphore's queue: one place for the whole wait, whatever the pause does.
        let turn = std::pin::pin!(async move {
            match ticket.await {
                Turn::Granted => Woke::Granted,
                Turn::Evicted => Woke::Evicted,
            }
        });
        match self.wait_in_line(turn, deadline, attempt).await? {
            Woke::Evicted => {
                attempt.ended = true;
                Err(AcquireError::Evicted {
                    retry_after: self.queue_estimate(self.waiting(), limit),
                })
            }
            _ => Ok(()),
        }
    }

    /// Refuses the caller if a pause in force at `now` ends after its `deadline`.
    pub(super) fn check_pause(
        &self,
        now: Instant,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<(), AcquireError> {
        if !self.pause.is_set() {
            return Ok(());
        }
        match (self.pause.until(now), deadline) {
            (Some(until), Some(d)) if until > d => {
                attempt.ended = true;
                Err(AcquireError::Paused {
                    retry_after: until - now,
                })
            }
            _ => Ok(()),
        }
    }

    /// Sleeps, holding the local permit, until the pause in force ends (however often it
    /// moves), then until the pace's slot if a pace is in force; refuses at once when either
    /// would end after `deadline`.
    pub(super) async fn wait_out_pause(
        &self,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<(), AcquireError> {
        loop {
            self.sleep_out_pause(deadline, attempt).await?;
            if !self.pause.is_paced() {
                return Ok(());
            }
            let slot = self.wait_for_turn(deadline, attempt).await?;
            // A cold start's slot, reached after a refusal started the pace: a slot in the pace.
            if !slot.is_some_and(|s| self.pause.pace().superseded(&s)) {
                break;
            }
        }
        // A pause begun during the wait for the slot is waited out too (with no second slot).
        if self.pause.until(Instant::now()).is_some() {
            self.sleep_out_pause(deadline, attempt).await?;
        }
        Ok(())
    }

    /// Waits for the pace's slot, holding the local permit; the slot once reached (`None` when
    /// the pace had lapsed).
    pub(super) async fn wait_for_turn(
        &self,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<Option<PaceSlot>, AcquireError> {
        let pace = self.pause.pace();
        let now = Instant::now();
        let slot = match self.pause.reserve(now, deadline) {
            Ok(PaceTurn::Free) => return Ok(None),
            Ok(PaceTurn::At(slot)) => slot,
            Err(wait) => {
                attempt.ended = true;
                return Err(AcquireError::Paused { retry_after: wait });
            }
        };
        // A caller dropped while it sleeps gives its slot back if nobody lined up behind it.
        let held = HeldTurn {
            pause: &self.pause,
            slot: Some(slot),
        };
        let at = held.slot.as_ref().map_or(now, |s| s.at);
        let mut sleep = std::pin::pin!(tokio::time::sleep_until(at));
        loop {
            // A pause begun meanwhile that ends past the deadline refuses at once.
            let slept = self
                .until_pause_moves(sleep.as_mut(), deadline, attempt)
                .await?
                .is_some();
            if slept || held.slot.as_ref().is_some_and(|s| pace.cold_ended(s)) {
                break;
            }
        }
        Ok(held.used())
    }

    /// Sleeps until the pause in force ends (however often it moves), or refuses at once when
    /// it would end after `deadline`.
    pub(super) async fn sleep_out_pause(
        &self,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<(), AcquireError> {
        loop {
            // Read after the pause is checked: the end of the pause in force then, if any.
            let out = async {
                match self.pause.until(Instant::now()) {
                    Some(until) => {
                        tokio::time::sleep_until(until).await;
                        false
                    }
                    None => true,
                }
            };
            if self.until_pause_moves(out, deadline, attempt).await? == Some(true) {
                return Ok(());
            }
        }
    }

    /// The pause gate for a caller that will not wait: refused while a pause is in force, or
    /// while a pace is and its next slot is not now.
    #[cold]
    pub(super) fn try_pass_pause(&self) -> Result<(), TryAcquireError> {
        let now = Instant::now();
        if self.pause.until(now).is_some() {
            return Err(TryAcquireError::Paused);
        }
        if self.pause.is_paced() && self.pause.reserve(now, Some(now)).is_err() {
            return Err(TryAcquireError::Paused);
        }
        Ok(())
    }

    /// When a place in the queue may free, for a caller refused with `ahead` queued before it
    /// and `limit` permits: (ahead + 1) x the mean call time / limit; at least the pause in
    /// force. `None` before any call was measured (and no pause is in force).
    pub(super) fn queue_estimate(&self, ahead: usize, limit: usize) -> Option<Duration> {
        let now = Instant::now();
        let pause = self.pause.until(now).map(|until| until - now);
        let estimate = self.stats.mean_call().map(|mean| {
            let turns = u32::try_from(ahead.saturating_add(1)).unwrap_or(u32::MAX);
            let limit = u32::try_from(limit.max(1)).unwrap_or(u32::MAX);
            mean.saturating_mul(turns) / limit
        });
        match (estimate, pause) {
            (Some(e), Some(p)) => Some(e.max(p)),
            (e, p) => e.or(p),
        }
    }

    /// Reserves the next rate slot and sleeps until it, or refuses at once if it comes after
    /// `deadline`.
    #[cfg(feature = "rate")]
    pub(super) async fn wait_for_slot(
        &self,
        rate: &Gcra,
        deadline: Option<Instant>,
        attempt: &mut Attempt<'_>,
    ) -> Result<(), AcquireError> {
        let now = Instant::now();
        let slot = match rate.reserve(now, deadline) {
            Ok(slot) => slot,
            Err(wait) => {
                attempt.ended = true;
                return Err(AcquireError::RateLimited { retry_after: wait });
            }
        };
        if slot.at > now {
            let at = slot.at;
            // A caller dropped while it sleeps gives its slot back if nobody queued behind it.
            let held = HeldSlot {
                rate,
                slot: Some(slot),
            };
            tokio::time::sleep_until(at).await;
            held.used();
        }
        Ok(())
    }
}

/// What woke a caller waiting in the queue.
pub(super) enum Woke {
    Granted,
    Evicted,
    Deadline,
}

/// One pass through the gates after the fast path failed: gives back a local permit it took and
/// counts a caller dropped before any outcome as cancelled.
pub(super) struct Attempt<'a> {
    pub(super) engine: &'a Engine,
    pub(super) holds_local: bool,
    pub(super) ended: bool,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if self.holds_local {
            self.engine.give_back();
        }
        if !self.ended {
            self.engine.stats.cancelled();
        }
    }
}

/// A caller of a budget with classes before its outcome: counts it as cancelled for its class
/// if it is dropped first.
pub(super) struct ClassPending<'a> {
    pub(super) stats: &'a super::super::stats::ClassStats,
    pub(super) ended: bool,
}

impl Drop for ClassPending<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.stats.cancelled();
        }
    }
}

/// A reserved rate slot not yet reached; given back if its caller leaves first.
#[cfg(feature = "rate")]
pub(super) struct HeldSlot<'a> {
    pub(super) rate: &'a Gcra,
    pub(super) slot: Option<Slot>,
}

#[cfg(feature = "rate")]
impl HeldSlot<'_> {
    fn used(mut self) {
        self.slot = None;
    }
}

#[cfg(feature = "rate")]
impl Drop for HeldSlot<'_> {
    fn drop(&mut self) {
        if let Some(slot) = &self.slot {
            self.rate.cancel(slot);
        }
    }
}

/// A pace slot not yet reached; given back if its caller leaves first.
pub(super) struct HeldTurn<'a> {
    pub(super) pause: &'a Pause,
    pub(super) slot: Option<PaceSlot>,
}

impl HeldTurn<'_> {
    fn used(mut self) -> Option<PaceSlot> {
        self.slot.take()
    }
}

impl Drop for HeldTurn<'_> {
    fn drop(&mut self) {
        if let Some(slot) = &self.slot {
            self.pause.pace().cancel(slot);
        }
    }
}

/// A caller's place in the queue; leaving it, by any path, lowers `waiting`.
pub(super) struct QueuePlace<'a>(pub(super) &'a AtomicUsize);

impl Drop for QueuePlace<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}
