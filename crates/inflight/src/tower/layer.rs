//! [`BudgetLayer`] and the classifiers that tell a budget's limit how a response went.

use std::fmt;

use tower_layer::Layer;

use super::{BudgetService, FromExtension, NoClass};
use crate::limit::{Outcome, Verdict};
use crate::{Budget, RetryAfter};

/// Applies a [`Budget`] to a service: see [the module](super).
///
/// `C` tells the budget's limit how each response went ([`Classify`]); `K` says which of the
/// budget's priority classes each request is in ([`ClassOf`](super::ClassOf)): by default none,
/// so every request is in the budget's default class.
#[derive(Clone)]
pub struct BudgetLayer<C = DefaultClassifier, K = NoClass> {
    budget: Budget,
    classify: C,
    class: K,
}

impl BudgetLayer {
    /// A layer that runs every request through `budget`, with [`DefaultClassifier`].
    pub fn new(budget: Budget) -> BudgetLayer {
        BudgetLayer {
            budget,
            classify: DefaultClassifier,
            class: NoClass,
        }
    }
}

impl BudgetLayer<HttpClassifier> {
    /// A layer for a client of an HTTP dependency: [`HttpClassifier`] calls a 429 or 503 an
    /// overload and reads its `Retry-After` (or `retry-after-ms`), which pauses the budget.
    pub fn http(budget: Budget) -> BudgetLayer<HttpClassifier> {
        BudgetLayer {
            budget,
            classify: HttpClassifier,
            class: NoClass,
        }
    }
}

impl<C, K> BudgetLayer<C, K> {
    /// Keeps the classifier, and reads `Retry-After` (or `retry-after-ms`) from the
    /// `http::Response`s it calls an overload: see [`ReadRetryAfter`].
    pub fn read_retry_after(self) -> BudgetLayer<ReadRetryAfter<C>, K> {
        BudgetLayer {
            budget: self.budget,
            classify: ReadRetryAfter(self.classify),
            class: self.class,
        }
    }

    /// Puts each request in the priority class `class_of` returns for it (`None`, or a name
    /// the budget has no class for: the budget's default class). Any
    /// `Fn(&Req) -> Option<R>` with `R: Into<RequestClass>` will do, or a
    /// [`ClassOf`](super::ClassOf) of your own.
    ///
    /// ```
    /// use inflight::tower::BudgetLayer;
    /// use inflight::{Budget, BudgetConfig, Classes};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let classes = Classes::new().class("interactive", 4).class("batch", 1);
    /// let records = Budget::new("records", BudgetConfig::new(6).classes(classes)).unwrap();
    /// let layer = BudgetLayer::new(records).class_by(|req: &http::Request<()>| {
    ///     let batch = req.uri().path().starts_with("/export");
    ///     Some(if batch { "batch" } else { "interactive" })
    /// });
    /// let svc = layer.layer(service_fn(|_req: http::Request<()>| async {
    ///     Ok::<_, std::io::Error>(http::Response::new(()))
    /// }));
    /// let response = svc.oneshot(http::Request::new(())).await.unwrap();
    /// # let _ = response;
    /// # }
    /// ```
    pub fn class_by<L>(self, class_of: L) -> BudgetLayer<C, L> {
        BudgetLayer {
            budget: self.budget,
            classify: self.classify,
            class: class_of,
        }
    }

    /// Puts each `http::Request` in the priority class of its
    /// [`RequestClass`](super::RequestClass) extension, inserted by a layer ahead of this one
    /// (a request without one: the budget's default class).
    ///
    /// ```
    /// use inflight::tower::{BudgetLayer, RequestClass};
    /// use inflight::{Budget, BudgetConfig, Classes};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let classes = Classes::new().class("interactive", 4).class("batch", 1);
    /// let records = Budget::new("records", BudgetConfig::new(6).classes(classes)).unwrap();
    /// let svc = BudgetLayer::new(records)
    ///     .class_from_extension()
    ///     .layer(service_fn(|_req: http::Request<()>| async {
    ///         Ok::<_, std::io::Error>(http::Response::new(()))
    ///     }));
    /// let mut request = http::Request::new(());
    /// request.extensions_mut().insert(RequestClass::new("interactive"));
    /// svc.oneshot(request).await.unwrap();
    /// # }
    /// ```
    pub fn class_from_extension(self) -> BudgetLayer<C, FromExtension> {
        self.class_by(FromExtension)
    }

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
    pub fn classify<D>(self, classify: D) -> BudgetLayer<D, K> {
        BudgetLayer {
            budget: self.budget,
            classify,
            class: self.class,
        }
    }

    /// The budget every request goes through.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }
}

impl<S, C: Clone, K: Clone> Layer<S> for BudgetLayer<C, K> {
    type Service = BudgetService<S, C, K>;

    fn layer(&self, inner: S) -> Self::Service {
        BudgetService::new(
            inner,
            self.budget.clone(),
            self.classify.clone(),
            self.class.clone(),
        )
    }
}

impl<C, K> fmt::Debug for BudgetLayer<C, K> {
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

    /// The outcome with what else the result says: the dependency's retry-after, or that the
    /// request failed before the dependency answered. By default, [`Classify::classify`]'s
    /// outcome alone.
    fn verdict(&self, result: &Result<T, E>) -> Verdict {
        self.classify(result).into()
    }
}

/// For an HTTP client: a 429 or 503 is an overload, with the response's `Retry-After` (or
/// `retry-after-ms`) as its retry-after; an error (the request never got an answer) a failure;
/// anything else a success.
///
/// ```
/// use std::time::Duration;
/// use inflight::limit::Outcome;
/// use inflight::tower::{Classify, HttpClassifier};
///
/// let busy = http::Response::builder().status(429).header("retry-after", "3").body(()).unwrap();
/// let v = HttpClassifier.verdict(&Ok::<_, std::io::Error>(busy));
/// assert_eq!(v.outcome(), Outcome::Overload);
/// assert_eq!(v.retry_after(), Some(Duration::from_secs(3)));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpClassifier;

impl<B, E> Classify<http::Response<B>, E> for HttpClassifier {
    fn classify(&self, result: &Result<http::Response<B>, E>) -> Outcome {
        match result {
            Ok(r) if matches!(r.status().as_u16(), 429 | 503) => Outcome::Overload,
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::Overload,
        }
    }

    fn verdict(&self, result: &Result<http::Response<B>, E>) -> Verdict {
        match result {
            Err(_) => Verdict::failure(),
            Ok(_) => with_header_hint(self.classify(result).into(), result),
        }
    }
}

/// A classifier of `http::Response`s (any [`Classify`], a closure included) whose overloads
/// also carry the response's `Retry-After` (or `retry-after-ms`), which pauses the budget. A
/// value that cannot be read gives no hint (and is logged with the `tracing` feature); a
/// retry-after the inner classifier gave itself is kept.
///
/// ```
/// use std::time::Duration;
/// use inflight::limit::Outcome;
/// use inflight::tower::{Classify, ReadRetryAfter};
///
/// let classify = ReadRetryAfter(|r: &Result<http::Response<()>, std::io::Error>| match r {
///     Ok(r) if r.status() == 503 => Outcome::Overload,
///     _ => Outcome::Success,
/// });
/// let busy = http::Response::builder().status(503).header("retry-after", "120").body(()).unwrap();
/// assert_eq!(classify.verdict(&Ok(busy)).retry_after(), Some(Duration::from_secs(120)));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadRetryAfter<C>(pub C);

impl<B, E, C: Classify<http::Response<B>, E>> Classify<http::Response<B>, E> for ReadRetryAfter<C> {
    fn classify(&self, result: &Result<http::Response<B>, E>) -> Outcome {
        self.0.classify(result)
    }

    fn verdict(&self, result: &Result<http::Response<B>, E>) -> Verdict {
        with_header_hint(self.0.verdict(result), result)
    }
}

/// `verdict`, with the response's retry-after if it is an overload that has none yet.
fn with_header_hint<B, E>(verdict: Verdict, result: &Result<http::Response<B>, E>) -> Verdict {
    let Ok(response) = result else {
        return verdict;
    };
    if verdict.outcome() != Outcome::Overload || verdict.retry_after().is_some() {
        return verdict;
    }
    match RetryAfter::from_headers(response.headers()) {
        Ok(Some(delay)) => verdict.with_retry_after(delay),
        Ok(None) => verdict,
        Err(_e) => {
            #[cfg(feature = "tracing")]
            tracing::info!(error = %_e, "ignored an unreadable retry-after");
            verdict
        }
    }
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
