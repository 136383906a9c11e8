//! [`BudgetService`]: a service whose requests go through a budget.

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

use tower_service::Service;

use super::{BudgetError, Classify};
use crate::budget::CallGuard;
use crate::Budget;

/// A service whose every request takes a permit from a [`Budget`] in its response future; made
/// by [`BudgetLayer`](super::BudgetLayer).
#[derive(Clone)]
pub struct BudgetService<S, C> {
    inner: S,
    budget: Budget,
    classify: C,
}

impl<S, C> BudgetService<S, C> {
    pub(crate) fn new(inner: S, budget: Budget, classify: C) -> Self {
        BudgetService {
            inner,
            budget,
            classify,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The budget every request goes through.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }
}

/// The response future of a [`BudgetService`].
pub type ResponseFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, BudgetError<E>>> + Send>>;

impl<S, C, Req> Service<Req> for BudgetService<S, C>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Send,
    C: Classify<S::Response, S::Error> + Clone + Send + 'static,
    Req: Send + 'static,
{
    type Response = S::Response;
    type Error = BudgetError<S::Error>;
    type Future = ResponseFuture<S::Response, S::Error>;

    /// Always ready: the permit, and the inner service's readiness, are waited for in the
    /// response future.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let mut inner = self.inner.clone();
        let budget = self.budget.clone();
        let classify = self.classify.clone();
        Box::pin(async move {
            let permit = budget
                .acquire_owned()
                .await
                .map_err(BudgetError::Rejected)?;
            let guard = CallGuard::start(permit);
            let call = async {
                poll_fn(|cx| inner.poll_ready(cx)).await?;
                inner.call(request).await
            };
            #[cfg(feature = "tracing")]
            let call = tracing::Instrument::instrument(
                call,
                tracing::debug_span!("inflight.call", budget = %budget.name()),
            );
            let result = match guard.timeout() {
                Some(limit) => match tokio::time::timeout(limit, call).await {
                    Ok(result) => result,
                    Err(_) => {
                        guard.timed_out();
                        return Err(BudgetError::Timeout);
                    }
                },
                None => call.await,
            };
            guard.finish(result.is_ok(), classify.classify(&result));
            result.map_err(BudgetError::Inner)
        })
    }
}

impl<S: fmt::Debug, C> fmt::Debug for BudgetService<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetService")
            .field("inner", &self.inner)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}
