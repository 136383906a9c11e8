//! [`BudgetService`]: a service whose requests go through a budget.

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

use tower_service::Service;

use super::{BudgetError, Classify};
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
            budget
                .call_with(
                    move |result: &Result<S::Response, S::Error>| classify.verdict(result),
                    || async move {
                        poll_fn(|cx| inner.poll_ready(cx)).await?;
                        inner.call(request).await
                    },
                )
                .await
                .map_err(BudgetError::from)
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
