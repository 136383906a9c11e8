//! [`BudgetLayer`]: a [`Budget`](crate::Budget) around any `tower::Service` (feature `tower`).
//!
//! Every request through the service takes a permit from the budget (and so passes its queue
//! bound, permit deadline, rate limit and shared store), then runs under the budget's call
//! timeout; its outcome feeds the budget's limit if the limit learns.
//!
//! # Where the permit is taken
//!
//! In the response future, not in `poll_ready`. `poll_ready` is always ready (it forwards only
//! an error of the inner service's own readiness, which it drives inside the future, under the
//! permit). So:
//!
//! - an idle keep-alive connection holds nothing: hyper calls `poll_ready` before any request
//!   exists, and a limit that reserved there would give permits to connections that send nothing;
//! - queue full, permit timeout and rate limit are per-request errors, returned from the response
//!   future, as [`Budget::call`](crate::Budget::call) returns them;
//! - there is no backpressure through `poll_ready`: a balancer choosing among endpoints by
//!   readiness sees every endpoint ready. tower's own `ConcurrencyLimit` reserves in `poll_ready`
//!   for that case, at the price of idle holders and of a wait with no deadline.
//!
//! The response future is boxed (one allocation per request).
//!
//! # Back-pressure
//!
//! [`BudgetLayer::http`] classifies `http::Response`s with [`HttpClassifier`]: a 429 or 503 is
//! an overload, and its `Retry-After` (or `retry-after-ms`) pauses the budget, so that no new
//! request goes out before the dependency said to come back. [`BudgetLayer::read_retry_after`]
//! adds the same reading to any classifier. A request the budget refuses fails with a
//! [`BudgetError`] whose [`retry_after`](BudgetError::retry_after) a server built on the layer
//! can answer with, as its own `Retry-After`.
//!
//! # Priority classes
//!
//! For a budget with [`Classes`](crate::Classes), each request waits for its permit in a class:
//! the one its [`RequestClass`] extension names, with
//! [`class_from_extension`](BudgetLayer::class_from_extension) (a layer ahead of this one that
//! knows the caller inserts it), or the one a function of the request returns, with
//! [`class_by`](BudgetLayer::class_by). A request with neither, or one naming a class the
//! budget lacks, is in the budget's default class; so is every request of a layer told
//! nothing.
//!
//! # Examples
//!
//! A client whose calls to one dependency go through its budget:
//!
//! ```
//! use std::time::Duration;
//! use inflight::tower::BudgetLayer;
//! use inflight::{Budget, BudgetConfig};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let records = Budget::new(
//!     "records",
//!     BudgetConfig::new(6).max_queued(6).call_timeout(Duration::from_secs(2)),
//! )
//! .unwrap();
//! // Any service: here one that answers at once.
//! let write = service_fn(|id: u32| async move { Ok::<_, std::io::Error>(id * 2) });
//! let svc = BudgetLayer::new(records.clone()).layer(write);
//! assert_eq!(svc.oneshot(21).await.unwrap(), 42);
//! assert_eq!(records.snapshot().admitted, 1);
//! # }
//! ```

mod class;
mod error;
mod held;
mod layer;
mod service;

pub use class::{ClassOf, FromExtension, NoClass, RequestClass};
pub use error::BudgetError;
pub use held::HeldCall;
pub use layer::{BudgetLayer, Classify, DefaultClassifier, HttpClassifier, ReadRetryAfter};
pub use service::BudgetService;
