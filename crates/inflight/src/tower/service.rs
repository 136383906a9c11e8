//! [`BudgetService`]: a service whose requests go through a budget.

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

use tower_service::Service;

use super::{BudgetError, ClassOf, Classify, NoClass};
use crate::Budget;

/// A service whose every request takes a permit from a [`Budget`] in its response future; made
/// by [`BudgetLayer`](super::BudgetLayer).
///
/// A request waits for its permit in the priority class `K` finds for it (see
/// [`ClassOf`]); by default, the budget's default class.
#[derive(Clone)]
pub struct BudgetService<S, C, K = NoClass> {
    inner: S,
    budget: Budget,
    classify: C,
    class: K,
}

impl<S, C, K> BudgetService<S, C, K> {
    pub(crate) fn new(inner: S, budget: Budget, classify: C, class: K) -> Self {
        BudgetService {
            inner,
            budget,
            classify,
            class,
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

impl<S, C, K, Req> Service<Req> for BudgetService<S, C, K>
where
    K: ClassOf<Req>,
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
        let class = self.class.class_of(&request);
        Box::pin(async move {
            let classify = move |result: &Result<S::Response, S::Error>| classify.verdict(result);
            let call = || async move {
                poll_fn(|cx| inner.poll_ready(cx)).await?;
                inner.call(request).await
            };
            match class {
                Some(class) => budget.call_with_in(class.name(), classify, call).await,
                None => budget.call_with(classify, call).await,
            }
            .map_err(BudgetError::from)
        })
    }
}

impl<S: fmt::Debug, C, K> fmt::Debug for BudgetService<S, C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetService")
            .field("inner", &self.inner)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}
