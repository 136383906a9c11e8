//! [`CpuBudget`]: how much CPU this process may use: host CPUs, the affinity mask, and the CPU
//! quota of every cgroup level from the process's own cgroup up to the root.

use std::io;
use std::path::{Path, PathBuf};

use crate::mounts::{self, FsKind};

/// Which cgroup hierarchies the machine uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// No cgroup hierarchy was found (or `/proc` was not readable).
    None,
    /// cgroup v1 hierarchies only.
    V1,
    /// The unified cgroup v2 hierarchy only.
    V2,
    /// v1 controller hierarchies next to a cgroup2 mount (systemd's "hybrid" layout).
    Hybrid,
}

impl CgroupVersion {
    /// `none`, `v1`, `v2` or `hybrid`.
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupVersion::None => "none",
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
            CgroupVersion::Hybrid => "hybrid",
        }
    }
}

/// Which hierarchy the `cpu` controller of this process is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuController {
    V1,
    V2,
}

impl CpuController {
    /// `v1` or `v2`.
    pub fn as_str(self) -> &'static str {
        match self {
            CpuController::V1 => "v1",
            CpuController::V2 => "v2",
        }
    }
}

/// The CPU limit one cgroup level sets.
#[derive(Debug, Clone, PartialEq)]
pub enum Limit {
    /// `max` (v2) or `-1` (v1): no limit at this level.
    Unlimited,
    /// A CFS quota: `quota_us` of CPU time per `period_us`.
    Quota { quota_us: u64, period_us: u64 },
    /// No limit file here (the root cgroup, or the controller is not enabled for this cgroup).
    Absent,
    /// The file exists but cannot be read or parsed; the reason says which and why.
    Unknown(String),
}

impl Limit {
    /// The quota in CPUs (`quota / period`), if this level sets one.
    pub fn cpus(&self) -> Option<f64> {
        match self {
            Limit::Quota {
                quota_us,
                period_us,
            } => Some(*quota_us as f64 / *period_us as f64),
            _ => None,
        }
    }

    /// A short human reading: `max`, `50000/100000 us (0.50 CPUs)`, `none`, `unknown (...)`.
    pub fn describe(&self) -> String {
        match self {
            Limit::Unlimited => "unlimited".to_string(),
            Limit::Quota {
                quota_us,
                period_us,
            } => format!(
                "{quota_us}/{period_us} us = {:.2} CPUs",
                *quota_us as f64 / *period_us as f64
            ),
            Limit::Absent => "no limit file".to_string(),
            Limit::Unknown(why) => format!("unknown ({why})"),
        }
    }
}

/// One level of the cgroup hierarchy, from the process's own cgroup up to the mount root.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelLimit {
    /// The cgroup's path in its hierarchy, as `/proc/self/cgroup` spells it (`/a/b`).
    pub cgroup: String,
    /// The directory read.
    pub dir: PathBuf,
    pub limit: Limit,
}

/// Whether the process is limited by a CPU quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaStatus {
    /// At least one level sets a quota; `quota_cpus` is the tightest.
    Limited,
    /// Every level was read and none sets a quota.
    Unlimited,
    /// No level sets a readable quota and at least one could not be read.
    Unknown,
}

impl QuotaStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaStatus::Limited => "limited",
            QuotaStatus::Unlimited => "unlimited",
            QuotaStatus::Unknown => "unknown",
        }
    }
}

/// Why a CPU budget could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    #[error("cannot parse {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error("cannot read {path}: {error}")]
    Io {
        path: PathBuf,
        /// The OS error, shown in the message (not repeated as a separate cause).
        error: io::Error,
    },
}

/// The CPU budget of a process.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuBudget {
    /// Logical CPUs online on the host.
    pub host_cpus: usize,
    /// CPUs in the process's affinity mask (`sched_getaffinity`, or `Cpus_allowed_list`).
    pub affinity_cpus: usize,
    pub cgroup_version: CgroupVersion,
    /// The hierarchy that holds the `cpu` controller for this process, if any.
    pub cpu_controller: Option<CpuController>,
    /// The process's cgroup in that hierarchy (`/proc/self/cgroup`).
    pub cgroup_path: Option<String>,
    /// Every level from the process's cgroup up to the root of the mounted hierarchy.
    pub levels: Vec<LevelLimit>,
    pub quota_status: QuotaStatus,
    /// The tightest quota of all levels, in CPUs; `None` when unlimited or unknown.
    pub quota_cpus: Option<f64>,
    /// `min(affinity_cpus, quota_cpus)`.
    pub effective_cpus: f64,
    /// Things a reader should know: unreadable files, a namespace boundary, fallbacks.
    pub notes: Vec<String>,
}

impl CpuBudget {
    /// The budget of the running process, from `/proc/self` and `/sys/fs/cgroup`.
    pub fn detect() -> Result<CpuBudget, DetectError> {
        let host = host_cpus_sysconf();
        let affinity = affinity_cpus_syscall().unwrap_or(host);
        detect_from(Path::new("/"), host, affinity, Vec::new())
    }

    /// The budget as the files under `root` describe it: `root/proc/self/{cgroup,mountinfo,status}`,
    /// `root/sys/devices/system/cpu/online` and the cgroup mounts prefixed by `root`. For tests and
    /// for inspecting a copy of another machine's files.
    pub fn detect_in(root: &Path) -> Result<CpuBudget, DetectError> {
        let mut notes = Vec::new();
        let online = root.join("sys/devices/system/cpu/online");
        let host = match read_optional(&online)? {
            Some(text) => parse_cpu_list(&text).map_err(|reason| DetectError::Parse {
                path: online.clone(),
                reason,
            })?,
            None => {
                notes.push(format!(
                    "{} is missing: host CPUs are this machine's",
                    online.display()
                ));
                host_cpus_sysconf()
            }
        };
        let status = root.join("proc/self/status");
        let affinity = match read_optional(&status)? {
            Some(text) => match text
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            {
                Some(list) => parse_cpu_list(list).map_err(|reason| DetectError::Parse {
                    path: status.clone(),
                    reason,
                })?,
                None => {
                    notes.push(format!(
                        "{} has no Cpus_allowed_list: affinity taken as all host CPUs",
                        status.display()
                    ));
                    host
                }
            },
            None => {
                notes.push(format!(
                    "{} is missing: affinity taken as all host CPUs",
                    status.display()
                ));
                host
            }
        };
        // `Cpus_allowed_list` is the mask as set, which may name CPUs that are offline;
        // `sched_getaffinity` (what `detect` uses) reports only the online ones.
        let affinity = if affinity > host {
            notes.push(format!(
                "{} allows {affinity} CPUs but only {host} are online: affinity taken as {host}",
                status.display()
            ));
            host
        } else {
            affinity
        };
        detect_from(root, host, affinity, notes)
    }

    /// The pool size for CPU-bound work: the whole CPUs of the budget, at least 1. A fractional
    /// remainder is left as headroom: one more busy thread would run past the quota every period
    /// and be throttled until the next one.
    pub fn recommended_pool(&self) -> usize {
        (self.effective_cpus.floor() as usize).max(1)
    }

    /// The limit of the process's own cgroup (the leaf), in CPUs, as runtimes that read only that
    /// level see it.
    pub fn leaf_quota_cpus(&self) -> Option<f64> {
        self.levels.first().and_then(|l| l.limit.cpus())
    }

    /// The level that sets the tightest quota.
    pub fn tightest_level(&self) -> Option<&LevelLimit> {
        self.levels
            .iter()
            .filter(|l| l.limit.cpus().is_some())
            .min_by(|a, b| {
                a.limit
                    .cpus()
                    .unwrap_or(f64::MAX)
                    .total_cmp(&b.limit.cpus().unwrap_or(f64::MAX))
            })
    }
}

fn detect_from(
    root: &Path,
    host_cpus: usize,
    affinity_cpus: usize,
    mut notes: Vec<String>,
) -> Result<CpuBudget, DetectError> {
    let mountinfo_path = root.join("proc/self/mountinfo");
    let cgroup_path = root.join("proc/self/cgroup");
    let mut budget = CpuBudget {
        host_cpus,
        affinity_cpus,
        cgroup_version: CgroupVersion::None,
        cpu_controller: None,
        cgroup_path: None,
        levels: Vec::new(),
        quota_status: QuotaStatus::Unlimited,
        quota_cpus: None,
        effective_cpus: affinity_cpus as f64,
        notes: Vec::new(),
    };
    let (Some(mountinfo), Some(proc_cgroup)) = (
        read_optional(&mountinfo_path)?,
        read_optional(&cgroup_path)?,
    ) else {
        notes.push(format!(
            "{} or {} is missing: no cgroup information, the budget is the affinity mask",
            mountinfo_path.display(),
            cgroup_path.display()
        ));
        budget.notes = notes;
        return Ok(budget);
    };
    let mounts = mounts::parse_mountinfo(&mountinfo).map_err(|reason| DetectError::Parse {
        path: mountinfo_path.clone(),
        reason,
    })?;
    let entries = mounts::parse_proc_cgroup(&proc_cgroup).map_err(|reason| DetectError::Parse {
        path: cgroup_path.clone(),
        reason,
    })?;

    let has_v1 = mounts
        .iter()
        .any(|m| m.kind == FsKind::V1 && m.controllers.iter().any(|c| !c.starts_with("name=")))
        || entries
            .iter()
            .any(|e| e.hierarchy_id != 0 && e.controllers.iter().any(|c| !c.starts_with("name=")));
    let v2 = mounts::v2_mount(&mounts);
    budget.cgroup_version = match (has_v1, v2.is_some()) {
        (true, true) => CgroupVersion::Hybrid,
        (true, false) => CgroupVersion::V1,
        (false, true) => CgroupVersion::V2,
        (false, false) => CgroupVersion::None,
    };

    let v1_cpu = mounts::cpu_v1_mount(&mounts).and_then(|m| {
        entries
            .iter()
            .find(|e| e.controllers.iter().any(|c| c == "cpu"))
            .map(|e| (m, e))
    });
    let v2_entry = entries.iter().find(|e| e.hierarchy_id == 0);
    if let Some((mount, entry)) = v1_cpu {
        budget.cpu_controller = Some(CpuController::V1);
        budget.cgroup_path = Some(entry.path.clone());
        budget.levels = walk_levels(root, mount, &entry.path, &mut notes, read_v1_limit);
    } else if let (Some(mount), Some(entry)) = (v2, v2_entry) {
        let controllers_file =
            mounts::join_under(root, &mount.mount_point).join("cgroup.controllers");
        let controllers = read_optional(&controllers_file).ok().flatten();
        match controllers {
            Some(text) if !mounts::lists_cpu(&text) => notes.push(format!(
                "cgroup2 is mounted at {} without the cpu controller, and no cgroup v1 hierarchy has it: nothing limits CPU time",
                mount.mount_point.display()
            )),
            _ => {
                budget.cpu_controller = Some(CpuController::V2);
                budget.cgroup_path = Some(entry.path.clone());
                budget.levels = walk_levels(root, mount, &entry.path, &mut notes, read_v2_limit);
            }
        }
    } else {
        notes.push("no cgroup hierarchy with the cpu controller holds this process".to_string());
    }

    let quotas: Vec<f64> = budget
        .levels
        .iter()
        .filter_map(|l| l.limit.cpus())
        .collect();
    let unknown = budget
        .levels
        .iter()
        .any(|l| matches!(l.limit, Limit::Unknown(_)));
    budget.quota_cpus = quotas.iter().copied().reduce(f64::min);
    budget.quota_status = match (budget.quota_cpus, unknown) {
        (Some(_), _) => QuotaStatus::Limited,
        (None, true) => QuotaStatus::Unknown,
        (None, false) => QuotaStatus::Unlimited,
    };
    if unknown {
        notes.push(
            "at least one level's limit could not be read: the real quota may be tighter than shown"
                .to_string(),
        );
    }
    budget.effective_cpus = match budget.quota_cpus {
        Some(q) => q.min(affinity_cpus as f64),
        None => affinity_cpus as f64,
    };
    budget.notes = notes;
    Ok(budget)
}

/// The levels from the process's cgroup up to the mount's root, leaf first.
fn walk_levels(
    root: &Path,
    mount: &mounts::CgroupMount,
    proc_path: &str,
    notes: &mut Vec<String>,
    read: fn(&Path) -> Limit,
) -> Vec<LevelLimit> {
    let (leaf_dir, mut components, note) = mounts::cgroup_dir(root, mount, proc_path);
    if let Some(note) = note {
        notes.push(note);
    }
    if mount.root != "/" {
        notes.push(format!(
            "the hierarchy is mounted from {:?}: levels above it are not visible from here",
            mount.root
        ));
    }
    let base = mount.root.trim_end_matches('/').to_string();
    let mut levels = Vec::new();
    let mut dir = leaf_dir;
    loop {
        let cgroup = if components.is_empty() {
            if base.is_empty() {
                "/".to_string()
            } else {
                base.clone()
            }
        } else {
            format!("{base}/{}", components.join("/"))
        };
        levels.push(LevelLimit {
            cgroup,
            limit: read(&dir),
            dir: dir.clone(),
        });
        if components.pop().is_none() {
            break;
        }
        dir.pop();
    }
    levels
}

fn read_v2_limit(dir: &Path) -> Limit {
    let path = dir.join("cpu.max");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Limit::Absent,
        Err(e) => return Limit::Unknown(format!("cannot read {}: {e}", path.display())),
    };
    parse_cpu_max(&text).unwrap_or_else(|why| {
        Limit::Unknown(format!("{}: {why} in {:?}", path.display(), text.trim()))
    })
}

/// Parses a v2 `cpu.max`: `max 100000`, `50000 100000`, or a lone `max`.
pub(crate) fn parse_cpu_max(text: &str) -> Result<Limit, String> {
    let mut fields = text.split_whitespace();
    let quota = fields.next().ok_or("empty file")?;
    let period = match fields.next() {
        Some(p) => Some(
            p.parse::<u64>()
                .map_err(|_| format!("period {p:?} is not a number"))?,
        ),
        None => None,
    };
    if fields.next().is_some() {
        return Err(format!("expected 'QUOTA PERIOD', got {:?}", text.trim()));
    }
    if quota == "max" {
        return Ok(Limit::Unlimited);
    }
    let quota_us = quota.parse::<u64>().map_err(|e| {
        if quota.bytes().all(|b| b.is_ascii_digit()) {
            format!("quota {quota:?} is too large ({e})")
        } else {
            format!("quota {quota:?} is neither 'max' nor a number")
        }
    })?;
    let period_us = period.ok_or("quota without a period")?;
    if period_us == 0 || quota_us == 0 {
        return Err(format!(
            "quota {quota_us} / period {period_us} is not a valid limit"
        ));
    }
    Ok(Limit::Quota {
        quota_us,
        period_us,
    })
}

fn read_v1_limit(dir: &Path) -> Limit {
    let quota_path = dir.join("cpu.cfs_quota_us");
    let quota = match std::fs::read_to_string(&quota_path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Limit::Absent,
        Err(e) => return Limit::Unknown(format!("cannot read {}: {e}", quota_path.display())),
    };
    let quota = quota.trim();
    if quota == "-1" {
        return Limit::Unlimited;
    }
    let Ok(quota_us) = quota.parse::<u64>() else {
        return Limit::Unknown(format!(
            "{}: {quota:?} is neither -1 nor a number",
            quota_path.display()
        ));
    };
    let period_path = dir.join("cpu.cfs_period_us");
    let period = match std::fs::read_to_string(&period_path) {
        Ok(t) => t,
        Err(e) => return Limit::Unknown(format!("cannot read {}: {e}", period_path.display())),
    };
    match period.trim().parse::<u64>() {
        Ok(period_us) if period_us > 0 && quota_us > 0 => Limit::Quota {
            quota_us,
            period_us,
        },
        _ => Limit::Unknown(format!(
            "{}: period {:?} with quota {quota_us} is not a valid limit",
            period_path.display(),
            period.trim()
        )),
    }
}

/// One past the highest CPU number accepted in a CPU list (the kernel's `NR_CPUS` is at most 8192).
const MAX_CPU_ID: usize = 1 << 16;

/// Counts the CPUs in a kernel CPU list such as `0-3,8,10-11`.
pub(crate) fn parse_cpu_list(text: &str) -> Result<usize, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty CPU list".to_string());
    }
    let mut count = 0usize;
    for part in text.split(',') {
        let part = part.trim();
        let bad = || format!("bad CPU list entry {part:?} in {text:?}");
        let n = match part.split_once('-') {
            Some((a, b)) => {
                let a: usize = a.trim().parse().map_err(|_| bad())?;
                let b: usize = b.trim().parse().map_err(|_| bad())?;
                if b < a || b >= MAX_CPU_ID {
                    return Err(bad());
                }
                b - a + 1
            }
            None => {
                if part.parse::<usize>().map_err(|_| bad())? >= MAX_CPU_ID {
                    return Err(bad());
                }
                1
            }
        };
        count = count
            .checked_add(n)
            .filter(|c| *c <= MAX_CPU_ID)
            .ok_or_else(|| format!("CPU list {text:?} names more than {MAX_CPU_ID} CPUs"))?;
    }
    Ok(count)
}

fn read_optional(path: &Path) -> Result<Option<String>, DetectError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(DetectError::Io {
            path: path.to_path_buf(),
            error,
        }),
    }
}

fn host_cpus_sysconf() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|n| *n > 0).unwrap_or(1)
}

/// The number of CPUs in this process's affinity mask.
fn affinity_cpus_syscall() -> Option<usize> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; sched_getaffinity writes at most
    // size_of::<cpu_set_t>() bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        let n = libc::CPU_COUNT(&set);
        usize::try_from(n).ok().filter(|n| *n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_max() {
        assert_eq!(parse_cpu_max("max 100000\n"), Ok(Limit::Unlimited));
        assert_eq!(parse_cpu_max("max"), Ok(Limit::Unlimited));
        assert_eq!(
            parse_cpu_max("50000 100000"),
            Ok(Limit::Quota {
                quota_us: 50000,
                period_us: 100000
            })
        );
        assert!(parse_cpu_max("").is_err());
        assert!(parse_cpu_max("50000").is_err());
        assert!(parse_cpu_max("lots 100000").is_err());
        assert!(parse_cpu_max("50000 0").is_err());
        assert!(parse_cpu_max("1 2 3").is_err());
    }

    #[test]
    fn parses_cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n"), Ok(7));
        assert_eq!(parse_cpu_list("0"), Ok(1));
        assert!(parse_cpu_list("").is_err());
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a-b").is_err());
        // Absurd ranges are errors, not an overflow.
        assert!(parse_cpu_list("0-18446744073709551615").is_err());
        assert!(parse_cpu_list("99999999").is_err());
        assert!(parse_cpu_list("0-60000,0-60000").is_err());
    }

    #[test]
    fn real_detection_is_consistent() {
        let b = CpuBudget::detect().expect("this machine's budget");
        assert!(b.host_cpus >= 1);
        assert!(b.affinity_cpus >= 1 && b.affinity_cpus <= b.host_cpus);
        assert!(b.effective_cpus > 0.0 && b.effective_cpus <= b.affinity_cpus as f64);
        assert!(b.recommended_pool() >= 1);
    }
}
