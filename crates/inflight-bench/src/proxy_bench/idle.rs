//! Memory per idle client connection: the resident memory of a proxy's processes before and
//! after opening many keep-alive connections that each made one request and then stay idle.

use std::time::Duration;

use futures::stream::{self, StreamExt};
use serde::Serialize;

use super::client::Connection;
use super::procs::rss_of_trees;
use super::{ProxyBenchError, Target};

/// How many connections are opened (and make their one request) at once.
const OPENING_AT_ONCE: usize = 16;

/// One idle-connection measurement.
#[derive(Debug, Clone)]
pub struct IdlePlan {
    /// Where the connections go.
    pub target: Target,
    /// How many connections to open and hold.
    pub connections: usize,
    /// The processes whose memory is summed: each with its descendants (nginx's workers).
    pub pids: Vec<u32>,
    /// How long the connections stay idle before the memory is read again.
    pub settle: Duration,
    /// A request with no full answer after this fails its connection.
    pub request_timeout: Duration,
}

/// What an idle-connection measurement found.
#[derive(Debug, Clone, Serialize)]
pub struct IdleReport {
    /// Connections asked for.
    pub connections: usize,
    /// Connections that got a 2xx answer to their request.
    pub opened: usize,
    /// Of those, still open when the memory was read again.
    pub still_open: usize,
    /// The processes measured (the given ones and their descendants).
    pub processes: usize,
    /// Their summed resident memory before, KiB.
    pub rss_before_kib: u64,
    /// After the connections were opened and had stayed idle, KiB.
    pub rss_after_kib: u64,
    /// The growth per connection opened, KiB.
    pub kib_per_connection: f64,
    /// The growth per 1,000 connections, MiB.
    pub mib_per_1000: f64,
}

/// Runs `plan`.
///
/// # Errors
///
/// [`ProxyBenchError::Plan`] when no process to measure is left or none of the connections
/// could be opened; [`ProxyBenchError::Io`] when `/proc` cannot be read.
pub async fn run(plan: IdlePlan) -> Result<IdleReport, ProxyBenchError> {
    if plan.connections == 0 {
        return Err(ProxyBenchError::Plan(
            "connections must be at least 1".into(),
        ));
    }
    let before = rss_of_trees(&plan.pids)?;
    let opened: Vec<Connection> = stream::iter(0..plan.connections)
        .map(|_| {
            let target = plan.target.clone();
            let timeout = plan.request_timeout;
            async move {
                let mut conn = Connection::new(target, timeout);
                match conn.get().await {
                    Some((status, _)) if (200..300).contains(&status) => Some(conn),
                    _ => None,
                }
            }
        })
        .buffer_unordered(OPENING_AT_ONCE)
        .filter_map(|c| async move { c })
        .collect()
        .await;
    if opened.is_empty() {
        return Err(ProxyBenchError::Plan(format!(
            "none of {} connections to {} got an answer",
            plan.connections, plan.target.host
        )));
    }
    tokio::time::sleep(plan.settle).await;
    let after = rss_of_trees(&plan.pids)?;
    let still_open = opened.iter().filter(|c| c.is_open()).count();
    let grown = after.1.saturating_sub(before.1);
    let per = grown as f64 / opened.len() as f64;
    Ok(IdleReport {
        connections: plan.connections,
        opened: opened.len(),
        still_open,
        processes: after.0,
        rss_before_kib: before.1,
        rss_after_kib: after.1,
        kib_per_connection: per,
        mib_per_1000: per * 1000.0 / 1024.0,
    })
}
