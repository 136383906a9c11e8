//! Memory per idle client connection: the resident memory of a proxy's processes before and
//! after opening many keep-alive connections that each made one request and then stay idle.

use std::path::Path;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use serde::Serialize;

use super::load::Connection;
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

/// How many processes the trees rooted at `pids` have, and their summed `VmRSS` in KiB.
fn rss_of_trees(pids: &[u32]) -> Result<(usize, u64), ProxyBenchError> {
    let members = trees(Path::new("/proc"), pids)?;
    if members.is_empty() {
        return Err(ProxyBenchError::Plan(format!(
            "none of the processes {pids:?} is running"
        )));
    }
    let mut kib = 0;
    for pid in &members {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        kib += status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    Ok((members.len(), kib))
}

/// The running processes among `roots` and all their descendants, from `proc`'s `stat` files.
fn trees(proc: &Path, roots: &[u32]) -> Result<Vec<u32>, ProxyBenchError> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir(proc)? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // A process may end while it is read.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some(ppid) = parent_of(&stat) {
            parents.push((pid, ppid));
        }
    }
    let mut members: Vec<u32> = roots
        .iter()
        .copied()
        .filter(|r| parents.iter().any(|(p, _)| p == r))
        .collect();
    let mut i = 0;
    while i < members.len() {
        let parent = members[i];
        for (pid, ppid) in &parents {
            if *ppid == parent && !members.contains(pid) {
                members.push(*pid);
            }
        }
        i += 1;
    }
    Ok(members)
}

/// The parent pid in a `/proc/PID/stat` line: the fourth field, after the `(comm)` that may
/// itself hold spaces and parentheses.
fn parent_of(stat: &str) -> Option<u32> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_past_a_command_with_spaces_and_parentheses() {
        let stat = "4242 (nginx: worker (x)) S 4241 4241 4241 0 -1 4194560";
        assert_eq!(parent_of(stat), Some(4241));
        assert_eq!(parent_of("garbage"), None);
    }

    #[test]
    fn a_tree_has_its_root_and_every_descendant() {
        let dir = tempfile::tempdir().unwrap();
        for (pid, ppid) in [(10, 1), (11, 10), (12, 11), (13, 1), (14, 10)] {
            let d = dir.path().join(pid.to_string());
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("stat"), format!("{pid} (p) S {ppid} 0 0")).unwrap();
        }
        let mut got = trees(dir.path(), &[10, 99]).unwrap();
        got.sort_unstable();
        assert_eq!(got, vec![10, 11, 12, 14]);
    }

    #[test]
    fn this_process_has_a_resident_size() {
        let (n, kib) = rss_of_trees(&[std::process::id()]).unwrap();
        assert!(n >= 1);
        assert!(kib > 0);
    }
}
