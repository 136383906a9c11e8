//! A cgroup hierarchy with quotas on chosen levels and an affinity mask, commands started inside
//! it, and the CPU budget a process there reads.

use std::ffi::OsStr;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use inflight_cpu::{CpuBudget, Enforcement, QuotaGroup, PERIOD_US};

/// One setting to run the runtimes in.
pub struct Case {
    pub name: &'static str,
    /// The quota of each level, from the created group down to the process's own cgroup; `None`
    /// is no limit. cgroup v1 refuses a child's quota above its parent's, so none is.
    pub quotas: &'static [Option<f64>],
    /// Restrict the affinity mask to one CPU.
    pub one_cpu: bool,
}

/// Eleven settings that set the rules apart: a quota on the own cgroup, rounded up or down; on a
/// parent or grandparent, which only some rules read; a tight level under a looser one; and an
/// affinity mask of one CPU.
pub const CASES: &[Case] = &[
    Case {
        name: "no quota",
        quotas: &[None],
        one_cpu: false,
    },
    Case {
        name: "own 0.5",
        quotas: &[Some(0.5)],
        one_cpu: false,
    },
    Case {
        name: "own 1.0",
        quotas: &[Some(1.0)],
        one_cpu: false,
    },
    Case {
        name: "own 1.5",
        quotas: &[Some(1.5)],
        one_cpu: false,
    },
    Case {
        name: "parent 0.5",
        quotas: &[Some(0.5), None],
        one_cpu: false,
    },
    Case {
        name: "parent 1.0",
        quotas: &[Some(1.0), None],
        one_cpu: false,
    },
    Case {
        name: "grandparent 0.5",
        quotas: &[Some(0.5), None, None],
        one_cpu: false,
    },
    Case {
        name: "parent 1.5, own 0.5",
        quotas: &[Some(1.5), Some(0.5)],
        one_cpu: false,
    },
    Case {
        name: "grandparent 2.0, parent 0.5",
        quotas: &[Some(2.0), Some(0.5), None],
        one_cpu: false,
    },
    Case {
        name: "one CPU, no quota",
        quotas: &[None],
        one_cpu: true,
    },
    Case {
        name: "one CPU, parent 0.5",
        quotas: &[Some(0.5), None],
        one_cpu: true,
    },
];

/// A case set up: the created group (removed with its sub-cgroups on drop), the process's cgroup
/// in it, and the CPU to pin to.
pub struct Placement {
    _group: QuotaGroup,
    procs: PathBuf,
    cpu: Option<usize>,
}

impl Placement {
    /// Builds `case`'s hierarchy under a fresh [`QuotaGroup`]; the error says which step failed.
    pub fn create(case: &Case) -> Result<Placement, String> {
        let group = QuotaGroup::create(1.0).map_err(|e| e.to_string())?;
        let enforcement = group.enforcement();
        let mut dir = group.path().to_path_buf();
        let (first, below) = case.quotas.split_first().expect("a case has a level");
        set_quota(&dir, enforcement, *first)?;
        for (depth, quota) in below.iter().enumerate() {
            if enforcement == Enforcement::CgroupV2 {
                // Children get cpu.max only once their parent hands them the controller.
                write(&dir.join("cgroup.subtree_control"), "+cpu")?;
            }
            dir = dir.join(format!("level{}", depth + 1));
            std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            if quota.is_some() {
                set_quota(&dir, enforcement, *quota)?;
            }
        }
        let cpu = if case.one_cpu {
            Some(first_allowed_cpu().ok_or("cannot read this process's affinity mask")?)
        } else {
            None
        };
        Ok(Placement {
            _group: group,
            procs: dir.join("cgroup.procs"),
            cpu,
        })
    }

    /// `program args` started in the case's cgroup (a shell joins it, then execs) with the case's
    /// affinity mask, and none of the variables that override a runtime's choice.
    pub fn command<S: AsRef<OsStr>>(&self, program: &Path, args: &[S]) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", r#"echo $$ > "$0" && exec "$@""#])
            .arg(&self.procs)
            .arg(program)
            .args(args);
        for var in OVERRIDES {
            cmd.env_remove(var);
        }
        if let Some(cpu) = self.cpu {
            // SAFETY: an all-zero cpu_set_t is a valid empty set; `cpu` is below CPU_SETSIZE as
            // it came from sched_getaffinity.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            unsafe { libc::CPU_SET(cpu, &mut set) };
            // SAFETY: the hook runs in the forked child before exec and only makes a syscall.
            unsafe {
                cmd.pre_exec(move || {
                    let size = std::mem::size_of::<libc::cpu_set_t>();
                    if libc::sched_setaffinity(0, size, &set) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        cmd
    }

    /// The budget a process placed here reads: a shell in the case's cgroup and mask copies its
    /// `/proc/self` files next to a link to this machine's `/sys`, and `detect_in` reads them.
    pub fn budget(&self) -> Result<CpuBudget, String> {
        let root = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let proc_self = root.path().join("proc/self");
        std::fs::create_dir_all(&proc_self).map_err(|e| e.to_string())?;
        std::os::unix::fs::symlink("/sys", root.path().join("sys")).map_err(|e| e.to_string())?;
        let script = r#"cat /proc/self/cgroup > "$1/cgroup" && cat /proc/self/mountinfo > "$1/mountinfo" && cat /proc/self/status > "$1/status""#;
        let out = self
            .command(
                Path::new("sh"),
                &[
                    OsStr::new("-c"),
                    OsStr::new(script),
                    OsStr::new("snapshot"),
                    proc_self.as_os_str(),
                ],
            )
            .output()
            .map_err(|e| format!("sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "copying /proc/self failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        CpuBudget::detect_in(root.path()).map_err(|e| e.to_string())
    }
}

/// Environment variables with which a runtime's parallelism is set by hand.
const OVERRIDES: &[&str] = &[
    "GOMAXPROCS",
    "GODEBUG",
    "JAVA_TOOL_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "_JAVA_OPTIONS",
    "PYTHON_CPU_COUNT",
    "NODE_OPTIONS",
];

fn set_quota(dir: &Path, enforcement: Enforcement, cpus: Option<f64>) -> Result<(), String> {
    let quota = cpus.map(|c| (c * PERIOD_US as f64).round() as u64);
    match enforcement {
        Enforcement::CgroupV2 => write(
            &dir.join("cpu.max"),
            &match quota {
                Some(q) => format!("{q} {PERIOD_US}"),
                None => format!("max {PERIOD_US}"),
            },
        ),
        _ => {
            write(&dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
            write(
                &dir.join("cpu.cfs_quota_us"),
                &quota.map_or("-1".to_string(), |q| q.to_string()),
            )
        }
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("write {text:?} to {}: {e}", path.display()))
}

/// The lowest-numbered CPU this process may run on.
fn first_allowed_cpu() -> Option<usize> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; sched_getaffinity writes at most its
    // size; CPU_ISSET reads within it for every index below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        (0..libc::CPU_SETSIZE as usize).find(|&cpu| libc::CPU_ISSET(cpu, &set))
    }
}
