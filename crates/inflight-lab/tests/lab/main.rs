//! The lab's tests: one integration binary, a module per area, helpers in `support`. The sim, the
//! runner and the metrics run over real HTTP on 127.0.0.1; the hypotheses and the report are
//! checked on a fixed results file.

mod hypothesis;
mod metrics;
mod report;
mod runner;
mod sim;
mod summary;
mod support;
