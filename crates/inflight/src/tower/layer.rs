//! [`BudgetLayer`] and the classifiers that tell a budget's limit how a response went.

use std::fmt;

use tower_layer::Layer;

use super::BudgetService;
use crate::limit::Outcome;
use crate::Budget;

/// Applies a [`Budget`] to a service: see [the module](super).
#[derive(Clone)]
pub struct BudgetLayer<C = DefaultClassifier> {
    budget: Budget,
    classify: C,
}

impl BudgetLayer {
    /// A layer that runs every request through `budget`, with [`DefaultClassifier`].
    pub fn new(budget: Budget) -> BudgetLayer {
        BudgetLayer {
            budget,
            classify: DefaultClassifier,
        }
    }
}

impl<C> BudgetLayer<C> {
    /// Uses `classify` to tell the budget's limit what each result says about the dependency's
    /// load (an HTTP 503 or 429 returned as a response is an overload; a 404 says nothing).
    ///
    /// ```
    /// use inflight::limit::Outcome;
    /// use inflight::tower::BudgetLayer;
    /// use inflight::{Budget, BudgetConfig};
    ///
    /// let budget = Budget::new("records", BudgetConfig::new(6)).unwrap();
    /// let layer = BudgetLayer::new(budget).classify(|r: &Result<u16, std::io::Error>| match r {
    ///     Ok(429 | 503) | Err(_) => Outcome::Overload,
    ///     Ok(s) if (400..500).contains(s) => Outcome::Ignore,
    ///     Ok(_) => Outcome::Success,
    /// });
    /// # let _ = layer;
    /// ```
    pub fn classify<D>(self, classify: D) -> BudgetLayer<D> {
        BudgetLayer {
            budget: self.budget,
            classify,
        }
    }

    /// The budget every request goes through.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }
}

impl<S, C: Clone> Layer<S> for BudgetLayer<C> {
    type Service = BudgetService<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        BudgetService::new(inner, self.budget.clone(), self.classify.clone())
    }
}

impl<C> fmt::Debug for BudgetLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetLayer")
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

/// Tells a budget's limit what a result says about the dependency's load.
pub trait Classify<T, E> {
    /// The outcome of one request.
    fn classify(&self, result: &Result<T, E>) -> Outcome;
}

/// An `Ok` is a success, an `Err` an overload signal (as [`Budget::call`] classifies).
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultClassifier;

impl<T, E> Classify<T, E> for DefaultClassifier {
    fn classify(&self, result: &Result<T, E>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::Overload,
        }
    }
}

impl<T, E, F> Classify<T, E> for F
where
    F: Fn(&Result<T, E>) -> Outcome,
{
    fn classify(&self, result: &Result<T, E>) -> Outcome {
        self(result)
    }
}
