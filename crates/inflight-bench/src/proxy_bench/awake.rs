//! [`AwakeCpu`]: the load generator's CPU kept out of its deep idle states while latency is
//! measured, so that each scheduled send starts on a CPU that is polling, not halted.
//!
//! On a virtual machine an idle CPU halts, and waking it for the next timer costs the guest a
//! trip through the host: measured on this project's 2-vCPU machine (Firecracker, `haltpoll`),
//! an open loop of 10,000 requests a second sent with a send lag p99 of 644 µs with the load CPU
//! allowed to halt and 79 µs with it polling. The open loop discards runs whose send lag p99 is
//! over 100 µs, so a halting generator CPU discards nearly all of them. Only the load CPU is
//! kept awake: the CPU of the proxy under test idles as it would in production, for every proxy
//! alike.
//!
//! The states are the kernel's own switches, `/sys/devices/system/cpu/cpuN/cpuidle/stateK/
//! disable`, for every state with an exit latency above 0 (the polling state has 0). They are
//! set back as they were when the guard drops, which a Ctrl-C or SIGTERM of the benchmark
//! reaches. A SIGKILL leaves them switched off until a reboot or `echo 0` into each: a later run
//! takes them as it finds them, off, and leaves them so.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// Deep idle states of one CPU switched off until this drops.
#[derive(Debug)]
pub struct AwakeCpu {
    /// Each `disable` file written, with what it held before.
    restore: Vec<(PathBuf, String)>,
}

/// Whether the load CPU can be kept awake, for the run's document and its first lines.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AwakeStatus {
    /// The CPU.
    pub cpu: usize,
    /// Whether its deep idle states are switched off during the latency runs.
    pub applied: bool,
    /// The states switched off (their names), when applied.
    pub states: Vec<String>,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl AwakeStatus {
    /// `cpu` left to idle as it will, for the reason `note` gives.
    pub fn not_applied(cpu: usize, note: String) -> AwakeStatus {
        AwakeStatus {
            cpu,
            applied: false,
            states: Vec::new(),
            note: Some(note),
        }
    }

    /// One line for the run's progress.
    pub fn describe(&self) -> String {
        match (&self.note, self.applied) {
            (_, true) => format!(
                "load CPU {} kept out of its idle states {} during latency runs (polls instead)",
                self.cpu,
                self.states.join(", ")
            ),
            (Some(note), false) => format!(
                "load CPU {} NOT kept awake during latency runs: {note}",
                self.cpu
            ),
            (None, false) => format!("load CPU {} NOT kept awake during latency runs", self.cpu),
        }
    }
}

const CPU_ROOT: &str = "/sys/devices/system/cpu";

impl AwakeCpu {
    /// Switches off `cpu`'s idle states deeper than polling, or says why it cannot.
    ///
    /// # Errors
    ///
    /// A message naming the file that could not be read or written (not root, no cpuidle
    /// driver); whatever was switched off before the failure is switched back on.
    pub fn hold(cpu: usize) -> Result<AwakeCpu, String> {
        AwakeCpu::hold_in(Path::new(CPU_ROOT), cpu)
    }

    fn hold_in(root: &Path, cpu: usize) -> Result<AwakeCpu, String> {
        let mut guard = AwakeCpu {
            restore: Vec::new(),
        };
        for state in deep_states(root, cpu)? {
            let disable = state.path.join("disable");
            let before = read(&disable)?;
            if before.trim() == "1" {
                continue;
            }
            std::fs::write(&disable, "1")
                .map_err(|e| format!("cannot write {}: {e}", disable.display()))?;
            guard.restore.push((disable, before));
        }
        Ok(guard)
    }

    /// Tries [`AwakeCpu::hold`] and lets go at once: what the run will be able to do.
    pub fn probe(cpu: usize) -> AwakeStatus {
        AwakeCpu::probe_in(Path::new(CPU_ROOT), cpu)
    }

    fn probe_in(root: &Path, cpu: usize) -> AwakeStatus {
        let states = deep_states(root, cpu).and_then(|states| {
            if states.is_empty() {
                return Err("it has no idle state deeper than polling".into());
            }
            AwakeCpu::hold_in(root, cpu)?;
            Ok(states.into_iter().map(|s| s.name).collect())
        });
        match states {
            Ok(states) => AwakeStatus {
                cpu,
                applied: true,
                states,
                note: None,
            },
            Err(note) => AwakeStatus::not_applied(cpu, note),
        }
    }
}

impl Drop for AwakeCpu {
    fn drop(&mut self) {
        for (path, before) in self.restore.drain(..).rev() {
            if let Err(e) = std::fs::write(&path, before.trim()) {
                eprintln!(
                    "proxy-bench: warning: cannot set {} back to {}: {e}",
                    path.display(),
                    before.trim()
                );
            }
        }
    }
}

struct State {
    path: PathBuf,
    name: String,
}

/// `cpu`'s idle states with an exit latency above 0, in the kernel's order.
fn deep_states(root: &Path, cpu: usize) -> Result<Vec<State>, String> {
    let dir = root.join(format!("cpu{cpu}")).join("cpuidle");
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot list {} (no cpuidle driver?): {e}", dir.display()))?;
    let mut states = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
            .path();
        let Some(index) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("state"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let latency = read(&path.join("latency"))?;
        let latency: u64 = latency.trim().parse().map_err(|_| {
            format!(
                "{} is not a number: {latency:?}",
                path.join("latency").display()
            )
        })?;
        if latency == 0 {
            continue;
        }
        let name = read(&path.join("name"))?.trim().to_string();
        states.push((index, State { path, name }));
    }
    states.sort_by_key(|(index, _)| *index);
    Ok(states.into_iter().map(|(_, s)| s).collect())
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(root: &Path, cpu: usize, k: u32, name: &str, latency: u64, disable: &str) {
        let dir = root.join(format!("cpu{cpu}/cpuidle/state{k}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("name"), format!("{name}\n")).unwrap();
        std::fs::write(dir.join("latency"), format!("{latency}\n")).unwrap();
        std::fs::write(dir.join("disable"), format!("{disable}\n")).unwrap();
    }

    fn disabled(root: &Path, cpu: usize, k: u32) -> String {
        std::fs::read_to_string(root.join(format!("cpu{cpu}/cpuidle/state{k}/disable")))
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn deep_states_are_switched_off_while_held_and_back_on_after() {
        let root = tempfile::tempdir().unwrap();
        state(root.path(), 0, 0, "POLL", 0, "0");
        state(root.path(), 0, 1, "haltpoll idle", 1, "0");
        state(root.path(), 0, 2, "C6", 200, "1");
        state(root.path(), 1, 1, "haltpoll idle", 1, "0");
        let guard = AwakeCpu::hold_in(root.path(), 0).unwrap();
        assert_eq!(disabled(root.path(), 0, 0), "0", "polling stays allowed");
        assert_eq!(disabled(root.path(), 0, 1), "1");
        assert_eq!(
            disabled(root.path(), 1, 1),
            "0",
            "the other CPU is left alone"
        );
        drop(guard);
        assert_eq!(disabled(root.path(), 0, 1), "0");
        assert_eq!(
            disabled(root.path(), 0, 2),
            "1",
            "a state off before stays off"
        );
    }

    #[test]
    fn the_probe_names_the_states_or_says_why_not() {
        let root = tempfile::tempdir().unwrap();
        state(root.path(), 0, 0, "POLL", 0, "0");
        state(root.path(), 0, 1, "haltpoll idle", 1, "0");
        let status = AwakeCpu::probe_in(root.path(), 0);
        assert!(status.applied, "{status:?}");
        assert_eq!(status.states, ["haltpoll idle"]);
        assert_eq!(disabled(root.path(), 0, 1), "0", "the probe lets go");

        let status = AwakeCpu::probe_in(root.path(), 3);
        assert!(!status.applied);
        assert!(
            status.note.as_deref().unwrap().contains("cpu3/cpuidle"),
            "{status:?}"
        );
        assert!(status.describe().contains("NOT kept awake"));

        let polling_only = tempfile::tempdir().unwrap();
        state(polling_only.path(), 0, 0, "POLL", 0, "0");
        let status = AwakeCpu::probe_in(polling_only.path(), 0);
        assert!(!status.applied);
        assert!(status.note.unwrap().contains("no idle state deeper"));
    }
}
