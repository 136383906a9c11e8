//! The proxy benchmark: its parts against each other on loopback (`parts`), the logic of a run
//! on made-up measurements (`logic`), and `proxy-bench run` end to end against the real
//! upstream and the real `inflight proxy` (`run`).

mod logic;
mod parts;
mod run;
mod support;
