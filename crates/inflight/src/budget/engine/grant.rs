//! Granting: the fast paths, the grant with and without classes, and the try-grants.

use super::wait::*;
use super::*;

impl Engine {
    /// Whether every caller must pass a gate beyond the local permit.
    #[inline]
    pub(super) fn has_more_gates(&self) -> bool {
        !self.plain_gates
    }

    /// The one way in for a caller that will not wait: a permit now if one is free and nobody
    /// waits, for a caller of `class` (ignored by a budget without classes); it never overtakes
    /// a waiter of any class.
    #[inline]
    pub(crate) fn try_grant(&self, class: usize) -> Result<Grant, TryAcquireError> {
        let Some(queue) = &self.class_queue else {
            return self
                .try_gates()
                .inspect_err(|e| self.stats.refused_at_once(e));
        };
        let stats = self.stats.class(class);
        let result = if queue.has_waiters() {
            Err(TryAcquireError::NoPermits)
        } else {
            self.try_gates()
        };
        match result {
            Ok(mut grant) => {
                grant.class = class;
                stats.admitted_at_once();
                Ok(grant)
            }
            Err(e) => {
                self.stats.refused_at_once(&e);
                stats.refused_at_once(&e);
                Err(e)
            }
        }
    }

    /// [`Engine::try_grant`], its refusals not yet counted.
    #[inline]
    fn try_gates(&self) -> Result<Grant, TryAcquireError> {
        if self.pause.is_set() {
            self.try_pass_pause()?;
        }
        if self.plain_gates {
            return self.grant_at_once().ok_or(TryAcquireError::NoPermits);
        }
        if self.store.is_some() {
            return Err(TryAcquireError::WouldWait);
        }
        #[cfg(feature = "rate")]
        if let Some(rate) = &self.rate {
            if !self.permits.try_take() {
                return Err(TryAcquireError::NoPermits);
            }
            let now = Instant::now();
            return match rate.reserve(now, Some(now)) {
                Ok(_) => Ok(self.admitted_at_once(Some(now))),
                Err(_) => {
                    self.give_back();
                    Err(TryAcquireError::RateLimited)
                }
            };
        }
        self.grant_at_once().ok_or(TryAcquireError::NoPermits)
    }

    #[inline]
    pub(super) fn grant_at_once(&self) -> Option<Grant> {
        if !self.permits.try_take() {
            return None;
        }
        Some(self.admitted_at_once(None))
    }

    /// Counts a permit taken without waiting; `now` if the clock was read already.
    #[inline]
    pub(super) fn admitted_at_once(&self, now: Option<Instant>) -> Grant {
        let in_flight = self.permits.in_flight();
        self.stats.admitted_at_once(in_flight);
        Grant {
            granted: now.or_else(|| self.learner.is_some().then(Instant::now)),
            in_flight,
            class: 0,
            lease: None,
        }
    }

    /// The one way in for a caller that may wait: every gate, for a caller of `class` (an
    /// index from [`Engine::class_of`]; ignored by a budget without classes), with a permit
    /// deadline no later than `by` besides its own. A caller with no deadline of its own takes a
    /// free permit at once when nobody waits and no other gate is up.
    ///
    /// Cancel safe: a future dropped at any point holds nothing afterwards, and a caller dropped
    /// while waiting is counted as cancelled.
    ///
    /// The wait is boxed: its future is about a kilobyte, and every future that awaits this one
    /// (a caller's, the proxy's per request) would carry that room and copy it at each move,
    /// though most callers take a permit at once. A caller that waits pays one allocation.
    pub(crate) async fn grant(
        &self,
        class: usize,
        by: Option<Instant>,
    ) -> Result<Grant, AcquireError> {
        match &self.class_queue {
            None => {
                if by.is_none() {
                    if let Some(grant) = self.grant_fast() {
                        return Ok(grant);
                    }
                }
                Box::pin(self.grant_traced(None, by)).await
            }
            Some(queue) => {
                // The fast path of a budget with classes: a free permit, nobody waiting in any
                // class, no other gate.
                if by.is_none()
                    && self.plain_classed_gates()
                    && !queue.has_waiters()
                    && self.permits.try_take()
                {
                    return Ok(self.admitted_in_at_once(class, None));
                }
                Box::pin(self.grant_classed(class, by)).await
            }
        }
    }

    /// The fast path: a permit free now, nobody waiting, and no other gate.
    #[inline]
    pub(crate) fn grant_fast(&self) -> Option<Grant> {
        if self.has_more_gates() || self.pause.is_set() {
            return None;
        }
        self.grant_at_once()
    }

    pub(super) async fn grant_traced(
        &self,
        class: Option<usize>,
        by: Option<Instant>,
    ) -> Result<Grant, AcquireError> {
        #[cfg(feature = "tracing")]
        {
            use tracing::Instrument;
            let span = tracing::debug_span!("inflight.permit_wait", budget = %self.name);
            self.grant_after_wait(class, by).instrument(span).await
        }
        #[cfg(not(feature = "tracing"))]
        self.grant_after_wait(class, by).await
    }

    /// Every gate for a caller of `class` in a budget with classes, counting its outcome for the
    /// class as well.
    pub(super) async fn grant_classed(
        &self,
        class: usize,
        by: Option<Instant>,
    ) -> Result<Grant, AcquireError> {
        let stats = self.stats.class(class);
        let mut pending = ClassPending {
            stats,
            ended: false,
        };
        let result = self.grant_traced(Some(class), by).await;
        pending.ended = true;
        if let Err(e) = &result {
            stats.refused(e);
        }
        result
    }

    /// `class`'s own permit deadline, else the budget's.
    pub(super) fn permit_timeout(&self, class: Option<usize>) -> Option<Duration> {
        let own = match (class, &self.config.classes) {
            (Some(i), Some(classes)) => classes.classes.get(i).and_then(|c| c.permit_timeout),
            _ => None,
        };
        own.or(self.config.permit_timeout)
    }

    /// Takes a free permit for a caller that did not wait, unless someone waits for one.
    #[inline]
    pub(super) fn take_now(&self) -> bool {
        match &self.class_queue {
            Some(queue) if queue.has_waiters() => false,
            _ => self.permits.try_take(),
        }
    }

    /// Gives back a permit that was taken: to the local permits, then to the next waiter of a class
    /// queue if anyone waits there.
    #[inline]
    pub(super) fn give_back(&self) {
        self.permits.give_back();
        if let Some(queue) = &self.class_queue {
            queue.returned(&self.permits);
        }
    }

    /// Every gate after the fast path, counting a refusal: the one place the waiting grants
    /// count theirs, by the error's kind.
    pub(super) async fn grant_after_wait(
        &self,
        class: Option<usize>,
        by: Option<Instant>,
    ) -> Result<Grant, AcquireError> {
        let result = self.pass_gates(class, by).await;
        if let Err(e) = &result {
            self.stats.refused(e);
        }
        result
    }

    /// [`Engine::grant_after_wait`], its refusals not yet counted.
    async fn pass_gates(
        &self,
        class: Option<usize>,
        by: Option<Instant>,
    ) -> Result<Grant, AcquireError> {
        let start = Instant::now();
        // A deadline too far to represent is no deadline.
        let own = self
            .permit_timeout(class)
            .and_then(|t| start.checked_add(t));
        let deadline = match (own, by) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut attempt = Attempt {
            engine: self,
            holds_local: false,
            ended: false,
        };
        // A pause that outlasts the deadline refuses before the queue.
        self.check_pause(start, deadline, &mut attempt)?;
        if !self.take_now() {
            self.wait_in_queue(class, deadline, &mut attempt).await?;
        }
        attempt.holds_local = true;
        let in_flight = self.permits.in_flight();
        if self.pause.is_set() {
            self.wait_out_pause(deadline, &mut attempt).await?;
        }
        #[cfg(feature = "rate")]
        if let Some(rate) = &self.rate {
            self.wait_for_slot(rate, deadline, &mut attempt).await?;
        }
        let mut lease = None;
        if let Some(store) = &self.store {
            match store.acquire(&self.name, deadline).await {
                Ok(l) => {
                    self.leased.fetch_add(1, Relaxed);
                    lease = Some(Box::new(l));
                }
                Err(StoreError::Timeout) => {
                    attempt.ended = true;
                    return Err(AcquireError::PermitTimeout);
                }
                Err(StoreError::RateLimited { retry_after }) => {
                    attempt.ended = true;
                    return Err(AcquireError::RateLimited { retry_after });
                }
                Err(e) => {
                    attempt.ended = true;
                    return Err(AcquireError::Unavailable(e));
                }
            }
        }
        attempt.holds_local = false;
        attempt.ended = true;
        let granted = Instant::now();
        self.stats.admitted_after(granted - start);
        if let Some(class) = class {
            self.stats.class(class).admitted_after(granted - start);
        }
        Ok(Grant {
            granted: Some(granted),
            in_flight,
            class: class.unwrap_or(0),
            lease,
        })
    }

    /// The index of the class a call names: its place among the budget's classes, or the
    /// default class's for a name it does not have (0 for a budget without classes).
    pub(crate) fn class_of(&self, name: &str) -> usize {
        match &self.config.classes {
            Some(classes) => classes
                .index_of(name)
                .or_else(|| classes.default_index())
                .unwrap_or(0),
            None => 0,
        }
    }

    /// Whether a caller of a budget with classes passes no gate beyond the local permit now.
    #[inline]
    pub(super) fn plain_classed_gates(&self) -> bool {
        #[cfg(feature = "rate")]
        let rate = self.rate.is_some();
        #[cfg(not(feature = "rate"))]
        let rate = false;
        !rate && self.store.is_none() && !self.pause.is_set()
    }

    /// Counts a permit taken without waiting by a caller of `class`.
    #[inline]
    pub(super) fn admitted_in_at_once(&self, class: usize, now: Option<Instant>) -> Grant {
        let mut grant = self.admitted_at_once(now);
        grant.class = class;
        self.stats.class(class).admitted_at_once();
        grant
    }

    /// The class of a call that names none.
    pub(crate) fn default_class(&self) -> usize {
        self.default_class
    }

    /// Per class, for the snapshot; empty for a budget without classes.
    pub(crate) fn class_snapshots(&self) -> Vec<super::super::ClassSnapshot> {
        match &self.config.classes {
            Some(classes) => classes
                .iter()
                .zip(self.stats.classes())
                .map(|(class, stats)| stats.snapshot(class))
                .collect(),
            None => Vec::new(),
        }
    }
}
