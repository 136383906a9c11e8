//! The processes a proxy runs as (a process and its descendants, such as nginx's master and
//! workers), their resident memory and the CPU time they used, read from `/proc`.

use std::path::Path;
use std::time::Duration;

use super::ProxyBenchError;

/// How many processes the trees rooted at `pids` have, and their summed `VmRSS` in KiB.
pub(crate) fn rss_of_trees(pids: &[u32]) -> Result<(usize, u64), ProxyBenchError> {
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

/// The running processes of the trees rooted at `pids`: the roots and all their descendants.
pub(crate) fn members_of_trees(pids: &[u32]) -> Result<Vec<u32>, ProxyBenchError> {
    trees(Path::new("/proc"), pids)
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

/// The CPU time (user and system) the processes of the trees rooted at `pids` have used so far.
/// Threads are included; descendants that already exited are not.
pub(crate) fn cpu_of_trees(pids: &[u32]) -> Result<Duration, ProxyBenchError> {
    let members = trees(Path::new("/proc"), pids)?;
    let mut ticks = 0u64;
    for pid in &members {
        // A process may end while it is read.
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            ticks += cpu_ticks_of(&stat).unwrap_or(0);
        }
    }
    Ok(Duration::from_secs_f64(
        ticks as f64 / clock_ticks_per_second(),
    ))
}

/// utime + stime, the 14th and 15th fields of a `/proc/PID/stat` line.
fn cpu_ticks_of(stat: &str) -> Option<u64> {
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    // After the command: state (3), ppid (4), ... utime is field 14, the 12th from here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

fn clock_ticks_per_second() -> f64 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if hz > 0 {
            return hz as f64;
        }
    }
    100.0
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
    fn cpu_time_is_read_past_the_command() {
        let stat = "7 (a (b) c) S 1 7 7 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1000";
        assert_eq!(cpu_ticks_of(stat), Some(300));
        assert_eq!(cpu_ticks_of("7 (x) S 1"), None);
    }

    #[test]
    fn this_process_uses_cpu_time() {
        let before = cpu_of_trees(&[std::process::id()]).unwrap();
        let t0 = std::time::Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < Duration::from_millis(100) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        std::hint::black_box(x);
        let after = cpu_of_trees(&[std::process::id()]).unwrap();
        assert!(after > before, "{before:?} -> {after:?}");
    }

    #[test]
    fn this_process_has_a_resident_size() {
        let (n, kib) = rss_of_trees(&[std::process::id()]).unwrap();
        assert!(n >= 1);
        assert!(kib > 0);
    }
}
