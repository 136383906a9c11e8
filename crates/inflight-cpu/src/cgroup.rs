//! [`QuotaGroup`]: a fresh cgroup with a CPU quota (v2 `cpu.max` or v1 `cpu.cfs_quota_us`),
//! processes placed in it, its throttling counters, and its removal on drop.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::mounts::{self, CgroupMount};

/// The CFS period every [`QuotaGroup`] uses: 100 ms, the kernel's default.
pub const PERIOD_US: u64 = 100_000;

/// The smallest quota the kernel accepts (1 ms per period).
const MIN_QUOTA_US: u64 = 1_000;

/// How a CPU limit is enforced.
///
/// With the `serde` feature it serializes as [`Enforcement::as_str`] spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum Enforcement {
    /// A cgroup v1 `cpu` controller (`cpu.cfs_quota_us`).
    CgroupV1,
    /// A cgroup v2 `cpu` controller (`cpu.max`).
    CgroupV2,
    /// Not enforced.
    None,
}

impl Enforcement {
    /// `cgroup-v1`, `cgroup-v2` or `none`, the spelling used in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::CgroupV1 => "cgroup-v1",
            Enforcement::CgroupV2 => "cgroup-v2",
            Enforcement::None => "none",
        }
    }
}

impl std::fmt::Display for Enforcement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A cgroup's CFS bandwidth counters (`cpu.stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThrottleStats {
    /// Periods in which the group had runnable work.
    pub nr_periods: u64,
    /// Periods in which the group ran out of quota and was throttled.
    pub nr_throttled: u64,
    /// Total time the group's threads spent throttled.
    pub throttled: Duration,
}

impl ThrottleStats {
    /// The change from `earlier` to `self` (counters only grow; saturates if they were reset).
    pub fn since(&self, earlier: &ThrottleStats) -> ThrottleStats {
        ThrottleStats {
            nr_periods: self.nr_periods.saturating_sub(earlier.nr_periods),
            nr_throttled: self.nr_throttled.saturating_sub(earlier.nr_throttled),
            throttled: self.throttled.saturating_sub(earlier.throttled),
        }
    }
}

/// Why a CPU limit cannot be enforced with a cgroup, and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error(
        "invalid cpu count {0}: it must be a finite number of at least 0.01 (the kernel's smallest quota, 1 ms per 100 ms period)"
    )]
    InvalidCpus(f64),
    #[error("cannot read {path}: {error}")]
    ProcFs {
        path: PathBuf,
        /// The OS error, shown in the message (not repeated as a separate cause).
        error: io::Error,
    },
    #[error("cannot parse {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error(
        "no cgroup cpu controller is available: {detail}; \
         fix: run on a host or container where the cpu controller is mounted (cgroup v2 with `cpu` in cgroup.controllers, or a cgroup v1 `cpu` hierarchy), or pass --no-limit to run without a quota"
    )]
    NoCpuController { detail: String },
    #[error(
        "the cgroup v2 cpu controller is not delegated to {path}: {detail}; \
         fix: as root, `echo +cpu > {parent}/cgroup.subtree_control`, or run under systemd with Delegate=yes (e.g. `systemd-run --scope -p Delegate=yes ...`)"
    )]
    NotDelegated {
        path: PathBuf,
        parent: PathBuf,
        detail: String,
    },
    #[error(
        "permission denied creating or writing {path}{who}; \
         fix: run as root, or delegate a cgroup subtree to this user (`systemd-run --user --scope -p Delegate=yes ...`) and run inside it"
    )]
    PermissionDenied { path: PathBuf, who: String },
    #[error(
        "the cgroup filesystem at {mount} is mounted read-only (common inside containers); \
         fix: run the container with a writable cgroup mount (e.g. docker/podman `--cgroupns=private` with cgroup v2, or `--privileged`), or run on the host"
    )]
    ReadOnly { mount: PathBuf },
    #[error(
        "the kernel refused quota {quota_us}/{period_us} us at {path}: {error}; \
         a parent cgroup may have a smaller quota (cgroup v1 requires a child's quota to fit in its parent's)"
    )]
    QuotaRejected {
        path: PathBuf,
        quota_us: u64,
        period_us: u64,
        /// The OS error, shown in the message (not repeated as a separate cause).
        error: io::Error,
    },
    #[error("cannot {action} {path}: {error}")]
    Io {
        action: &'static str,
        path: PathBuf,
        /// The OS error, shown in the message (not repeated as a separate cause).
        error: io::Error,
    },
}

fn euid_note() -> String {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 {
        String::new()
    } else {
        format!(" (not root: running as uid {euid})")
    }
}

/// Maps an I/O error on a cgroup file to the error that says why, and how to fix it.
fn io_err(
    action: &'static str,
    path: &Path,
    mount: &CgroupMount,
    source: io::Error,
) -> CgroupError {
    match source.raw_os_error() {
        Some(libc::EROFS) => CgroupError::ReadOnly {
            mount: mount.mount_point.clone(),
        },
        Some(libc::EACCES) | Some(libc::EPERM) => CgroupError::PermissionDenied {
            path: path.to_path_buf(),
            who: euid_note(),
        },
        _ => CgroupError::Io {
            action,
            path: path.to_path_buf(),
            error: source,
        },
    }
}

/// Refuses a cgroup mount that is read-only before anything is tried in it.
fn check_writable(mount: &CgroupMount) -> Result<(), CgroupError> {
    if mount.read_only {
        return Err(CgroupError::ReadOnly {
            mount: mount.mount_point.clone(),
        });
    }
    Ok(())
}

/// The kernel refused (EINVAL) to write `quota_us` per [`PERIOD_US`] to `path`.
fn quota_rejected(path: &Path, quota_us: u64, error: io::Error) -> CgroupError {
    CgroupError::QuotaRejected {
        path: path.to_path_buf(),
        quota_us,
        period_us: PERIOD_US,
        error,
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A cgroup this process created, with a CPU quota; removed when dropped.
///
/// Processes are placed in it with [`QuotaGroup::add_pid`] or, before they run their first
/// instruction, with [`QuotaGroup::prepare_command`]. For `tokio::process::Command`, use
/// `QuotaGroup::prepare_tokio_command` (feature `tokio`, on by default), or prepare a `std::process::Command` and convert it with
/// `tokio::process::Command::from(std_cmd)`.
#[derive(Debug)]
pub struct QuotaGroup {
    path: PathBuf,
    enforcement: Enforcement,
    cpus: f64,
    quota_us: u64,
    /// `<path>/cgroup.procs` as a C string, built up front so the pre-exec hook need not allocate.
    procs_c: CString,
}

/// The CPUs this process can use (as std reads them: affinity and quota; 1 when they cannot be
/// read), if a quota of `cpus` is more than that. Such a quota gives a process in its group
/// no more than those CPUs, so results labelled with `cpus` would be mislabelled.
///
/// ```
/// let available = std::thread::available_parallelism().map_or(1, |n| n.get());
/// assert_eq!(inflight_cpu::more_than_available(available as f64), None);
/// assert_eq!(inflight_cpu::more_than_available(available as f64 + 1.0), Some(available));
/// ```
pub fn more_than_available(cpus: f64) -> Option<usize> {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus > available as f64 + 1e-9).then_some(available)
}

impl QuotaGroup {
    /// Creates a fresh cgroup (unique name `inflight-<pid>-<n>`) with a CPU quota of `cpus`
    /// (fractional allowed; quota = cpus x period, period 100 ms) under the v2 or v1 cpu mount found.
    ///
    /// cgroup v2 is used when its `cpu` controller is available, else a v1 `cpu` hierarchy.
    /// Under v1 the group is a child of this process's own cgroup; under v2 (where a cgroup with
    /// processes cannot hand controllers to children) it is a sibling of it, or a child of the root.
    pub fn create(cpus: f64) -> Result<QuotaGroup, CgroupError> {
        // A quota below the kernel's minimum is refused rather than silently raised: the group
        // would enforce more CPU than asked for.
        let quota = cpus * PERIOD_US as f64;
        if !quota.is_finite() || quota.round() < MIN_QUOTA_US as f64 {
            return Err(CgroupError::InvalidCpus(cpus));
        }
        let quota_us = quota.round() as u64;
        let root = Path::new("/");
        let mountinfo_path = Path::new("/proc/self/mountinfo");
        let cgroup_path = Path::new("/proc/self/cgroup");
        let mountinfo = read_proc(mountinfo_path)?;
        let proc_cgroup = read_proc(cgroup_path)?;
        let mounts = mounts::parse_mountinfo(&mountinfo).map_err(|reason| CgroupError::Parse {
            path: mountinfo_path.into(),
            reason,
        })?;
        let entries =
            mounts::parse_proc_cgroup(&proc_cgroup).map_err(|reason| CgroupError::Parse {
                path: cgroup_path.into(),
                reason,
            })?;

        let mut v2_problem = None;
        if let Some(v2) = mounts::v2_mount(&mounts) {
            let controllers = std::fs::read_to_string(v2.mount_point.join("cgroup.controllers"))
                .unwrap_or_default();
            if mounts::lists_cpu(&controllers) {
                let own = entries.iter().find(|e| e.hierarchy_id == 0);
                match Self::create_v2(root, v2, own.map(|e| e.path.as_str()), cpus, quota_us) {
                    Ok(group) => return Ok(group),
                    // A v1 cpu hierarchy may still work on a hybrid host; keep the v2 reason.
                    Err(e) => v2_problem = Some(e),
                }
            }
        }
        if let Some(v1) = mounts::cpu_v1_mount(&mounts) {
            let own = entries
                .iter()
                .find(|e| e.controllers.iter().any(|c| c == "cpu"))
                .map(|e| e.path.as_str())
                .unwrap_or("/");
            return Self::create_v1(root, v1, own, cpus, quota_us);
        }
        if let Some(e) = v2_problem {
            return Err(e);
        }
        let detail = match mounts::v2_mount(&mounts) {
            Some(v2) => format!(
                "cgroup2 is mounted at {} but `cpu` is not in its cgroup.controllers (it may be bound to a cgroup v1 hierarchy, or disabled), and no cgroup v1 hierarchy has the cpu controller",
                v2.mount_point.display()
            ),
            None => "no cgroup2 mount and no cgroup v1 hierarchy with the cpu controller in /proc/self/mountinfo".to_string(),
        };
        Err(CgroupError::NoCpuController { detail })
    }

    fn unique_name() -> String {
        format!(
            "inflight-{}-{}",
            std::process::id(),
            NEXT_ID.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn create_v1(
        prefix: &Path,
        mount: &CgroupMount,
        own: &str,
        cpus: f64,
        quota_us: u64,
    ) -> Result<QuotaGroup, CgroupError> {
        check_writable(mount)?;
        let (base, _, _) = mounts::cgroup_dir(prefix, mount, own);
        let group = Self::create_in(&base, mount, Enforcement::CgroupV1, cpus, quota_us)?;
        let period = group.path.join("cpu.cfs_period_us");
        std::fs::write(&period, PERIOD_US.to_string())
            .map_err(|e| io_err("write", &period, mount, e))?;
        let quota = group.path.join("cpu.cfs_quota_us");
        std::fs::write(&quota, quota_us.to_string()).map_err(|e| match e.raw_os_error() {
            Some(libc::EINVAL) => quota_rejected(&quota, quota_us, e),
            _ => io_err("write", &quota, mount, e),
        })?;
        Ok(group)
    }

    fn create_v2(
        prefix: &Path,
        mount: &CgroupMount,
        own: Option<&str>,
        cpus: f64,
        quota_us: u64,
    ) -> Result<QuotaGroup, CgroupError> {
        check_writable(mount)?;
        let mount_dir = mounts::join_under(prefix, &mount.mount_point);
        let (own_dir, components, _) = mounts::cgroup_dir(prefix, mount, own.unwrap_or("/"));
        // The root cgroup may hold processes and still give controllers to children; any other
        // cgroup that holds us cannot ("no internal processes"), so the new group goes beside ours,
        // in a parent whose subtree_control already has `cpu` if our cgroup has the controller.
        let base = if components.is_empty() {
            let control = mount_dir.join("cgroup.subtree_control");
            let current = std::fs::read_to_string(&control).unwrap_or_default();
            if !mounts::lists_cpu(&current) {
                std::fs::write(&control, "+cpu").map_err(|e| match e.raw_os_error() {
                    Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => {
                        io_err("write", &control, mount, e)
                    }
                    _ => CgroupError::NotDelegated {
                        path: mount_dir.clone(),
                        parent: mount_dir.clone(),
                        detail: format!("writing +cpu to {} failed: {e}", control.display()),
                    },
                })?;
            }
            mount_dir
        } else {
            let own_controllers =
                std::fs::read_to_string(own_dir.join("cgroup.controllers")).unwrap_or_default();
            let parent = own_dir.parent().unwrap_or(&mount_dir).to_path_buf();
            if !mounts::lists_cpu(&own_controllers) {
                return Err(CgroupError::NotDelegated {
                    path: own_dir.clone(),
                    parent,
                    detail: "`cpu` is not in this process's cgroup.controllers".to_string(),
                });
            }
            parent
        };
        let group = Self::create_in(&base, mount, Enforcement::CgroupV2, cpus, quota_us)?;
        let max = group.path.join("cpu.max");
        std::fs::write(&max, format!("{quota_us} {PERIOD_US}")).map_err(|e| {
            match e.raw_os_error() {
                Some(libc::ENOENT) => CgroupError::NotDelegated {
                    path: group.path.clone(),
                    parent: base.clone(),
                    detail: "the new cgroup has no cpu.max".to_string(),
                },
                Some(libc::EINVAL) => quota_rejected(&max, quota_us, e),
                _ => io_err("write", &max, mount, e),
            }
        })?;
        Ok(group)
    }

    /// Creates a uniquely named group directory in `base` (after sweeping away stale ones there),
    /// with no quota written yet.
    fn create_in(
        base: &Path,
        mount: &CgroupMount,
        enforcement: Enforcement,
        cpus: f64,
        quota_us: u64,
    ) -> Result<QuotaGroup, CgroupError> {
        sweep_stale(base);
        let path = base.join(Self::unique_name());
        std::fs::create_dir(&path).map_err(|e| io_err("create cgroup", &path, mount, e))?;
        Ok(QuotaGroup::new(path, enforcement, cpus, quota_us))
    }

    fn new(path: PathBuf, enforcement: Enforcement, cpus: f64, quota_us: u64) -> QuotaGroup {
        let procs = path.join("cgroup.procs");
        // A path from mountinfo cannot contain NUL; fall back to an empty string defensively.
        let procs_c = CString::new(procs.as_os_str().as_bytes()).unwrap_or_default();
        QuotaGroup {
            path,
            enforcement,
            cpus,
            quota_us,
            procs_c,
        }
    }

    /// How the quota is enforced (`cgroup-v1` or `cgroup-v2`).
    pub fn enforcement(&self) -> Enforcement {
        self.enforcement
    }

    /// The CPU quota asked for, in CPUs.
    pub fn cpus(&self) -> f64 {
        self.cpus
    }

    /// The quota written, in microseconds per [`PERIOD_US`].
    pub fn quota_us(&self) -> u64 {
        self.quota_us
    }

    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves process `pid` (all its threads) into this cgroup.
    pub fn add_pid(&self, pid: u32) -> io::Result<()> {
        std::fs::write(self.path.join("cgroup.procs"), pid.to_string())
    }

    /// Makes `cmd`'s child join this cgroup before it execs, so the child's runtime sees the quota
    /// from its first instruction.
    pub fn prepare_command(&self, cmd: &mut std::process::Command) {
        let procs = self.procs_c.clone();
        // SAFETY: the hook runs in the forked child before exec; it only calls async-signal-safe
        // functions (getpid, open, write, close) and does not allocate.
        unsafe {
            cmd.pre_exec(move || join_cgroup(&procs));
        }
    }

    /// [`QuotaGroup::prepare_command`] for a `tokio::process::Command` (feature `tokio`).
    #[cfg(feature = "tokio")]
    pub fn prepare_tokio_command(&self, cmd: &mut tokio::process::Command) {
        let procs = self.procs_c.clone();
        // SAFETY: as in `prepare_command`: async-signal-safe calls only, no allocation.
        unsafe {
            cmd.pre_exec(move || join_cgroup(&procs));
        }
    }

    /// The group's CFS throttling counters so far.
    pub fn throttle_stats(&self) -> io::Result<ThrottleStats> {
        throttle_stats_at(&self.path)
    }

    /// Removes the cgroup now (its sub-cgroups first), retrying for up to 2 s while member
    /// processes exit. [`Drop`] does the same and ignores the result.
    pub fn remove(mut self) -> io::Result<()> {
        let result = remove_tree(&self.path, Duration::from_secs(2));
        self.path = PathBuf::new();
        result
    }
}

impl Drop for QuotaGroup {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = remove_tree(&self.path, Duration::from_secs(2));
        }
    }
}

/// The pre-exec hook: writes this process's pid to `procs`.
fn join_cgroup(procs: &CString) -> io::Result<()> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut buf = [0u8; 20];
    let mut n = pid.unsigned_abs();
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // SAFETY: `procs` is a valid NUL-terminated path; the flags are valid.
    let fd = unsafe { libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let digits = &buf[start..];
    // SAFETY: `fd` is open for writing; `digits` is a valid buffer of that length.
    let written = unsafe { libc::write(fd, digits.as_ptr().cast(), digits.len()) };
    let err = if written < 0 {
        Some(io::Error::last_os_error())
    } else {
        None
    };
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    match err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The CFS throttling counters of the cgroup directory `dir` (its `cpu.stat`, v1 or v2), for a
/// cgroup this process did not create, such as its own.
pub fn throttle_stats_at(dir: &Path) -> io::Result<ThrottleStats> {
    let text = std::fs::read_to_string(dir.join("cpu.stat"))?;
    Ok(parse_cpu_stat(&text))
}

/// Parses `cpu.stat`: v1 has `throttled_time` in ns, v2 `throttled_usec`.
pub(crate) fn parse_cpu_stat(text: &str) -> ThrottleStats {
    let mut stats = ThrottleStats::default();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(key), Some(value)) = (it.next(), it.next()) else {
            continue;
        };
        let Ok(value) = value.parse::<u64>() else {
            continue;
        };
        match key {
            "nr_periods" => stats.nr_periods = value,
            "nr_throttled" => stats.nr_throttled = value,
            "throttled_time" => stats.throttled = Duration::from_nanos(value),
            "throttled_usec" => stats.throttled = Duration::from_micros(value),
            _ => {}
        }
    }
    stats
}

/// Removes groups named `inflight-<pid>-<n>` in `base` whose process is gone and that hold no
/// process: the leftovers of a run that was killed (SIGKILL) before its `Drop` could run.
/// Best effort: a group that cannot be removed is left as it is.
fn sweep_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = stale_owner(&name.to_string_lossy()) else {
            continue;
        };
        if Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        let procs = std::fs::read_to_string(entry.path().join("cgroup.procs")).unwrap_or_default();
        if procs.trim().is_empty() {
            let _ = remove_tree(&entry.path(), Duration::ZERO);
        }
    }
}

/// The pid in a group name `inflight-<pid>-<n>`.
fn stale_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("inflight-")?;
    let (pid, n) = rest.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Removes a cgroup directory and any sub-cgroups, deepest first, retrying on EBUSY until
/// `patience` runs out (processes leave a cgroup only once they have fully exited).
fn remove_tree(path: &Path, patience: Duration) -> io::Result<()> {
    let deadline = Instant::now() + patience;
    loop {
        match remove_once(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn remove_once(path: &Path) -> io::Result<()> {
    // cgroupfs lists control files as regular files: only directories are sub-cgroups.
    for entry in std::fs::read_dir(path)?.flatten() {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            remove_once(&entry.path())?;
        }
    }
    std::fs::remove_dir(path)
}

fn read_proc(path: &Path) -> Result<String, CgroupError> {
    std::fs::read_to_string(path).map_err(|error| CgroupError::ProcFs {
        path: path.to_path_buf(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v1_and_v2_cpu_stat() {
        let v1 = parse_cpu_stat("nr_periods 10\nnr_throttled 4\nthrottled_time 2500000\n");
        assert_eq!(v1.nr_periods, 10);
        assert_eq!(v1.nr_throttled, 4);
        assert_eq!(v1.throttled, Duration::from_micros(2500));
        let v2 = parse_cpu_stat("usage_usec 5\nnr_periods 3\nnr_throttled 2\nthrottled_usec 700\n");
        assert_eq!(v2.nr_throttled, 2);
        assert_eq!(v2.throttled, Duration::from_micros(700));
        assert_eq!(
            parse_cpu_stat("garbage\nnr_throttled x\n"),
            ThrottleStats::default()
        );
    }

    #[test]
    fn rejects_bad_cpu_counts() {
        for bad in [0.0, -1.0, 0.001, 0.0049, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                QuotaGroup::create(bad),
                Err(CgroupError::InvalidCpus(_))
            ));
        }
    }

    #[test]
    fn stale_group_names() {
        assert_eq!(stale_owner("inflight-1234-0"), Some(1234));
        assert_eq!(stale_owner("inflight-1234-17"), Some(1234));
        assert_eq!(stale_owner("inflight-x-0"), None);
        assert_eq!(stale_owner("inflight-1234"), None);
        assert_eq!(stale_owner("other-1234-0"), None);
    }

    #[test]
    fn enforcement_spellings() {
        assert_eq!(Enforcement::CgroupV1.as_str(), "cgroup-v1");
        assert_eq!(Enforcement::CgroupV2.as_str(), "cgroup-v2");
        assert_eq!(Enforcement::None.to_string(), "none");
    }

    #[cfg(feature = "serde")]
    #[test]
    fn enforcement_serializes_as_spelled() {
        for e in [
            Enforcement::CgroupV1,
            Enforcement::CgroupV2,
            Enforcement::None,
        ] {
            let json = serde_json::to_string(&e).unwrap();
            assert_eq!(json, format!("\"{}\"", e.as_str()));
            assert_eq!(serde_json::from_str::<Enforcement>(&json).unwrap(), e);
        }
    }
}
