//! What the benchmark asks of the machine: each side pinned to its own CPU ([`Pinning`]), an
//! open-files limit high enough for the idle connections ([`raise_open_files`]), and the load
//! average it ran under ([`load_average`]).

use std::io;

use serde::Serialize;

use super::ProxyBenchError;

/// Where the proxy under test and the client side (the load generator and the upstream) run.
#[derive(Debug, Clone, Serialize)]
pub struct Pinning {
    /// The CPU of the proxy under test.
    pub proxy_cpu: usize,
    /// The CPU of the load generator and the upstream.
    pub load_cpu: usize,
    /// Whether both CPUs could be used: `false` leaves every process where the scheduler puts it.
    pub applied: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Pinning {
    /// Pins the calling thread to `load_cpu`, when this process may run on both `proxy_cpu` and
    /// `load_cpu` (and they differ). Threads started after inherit the mask: call it before the
    /// runtime starts its threads.
    pub fn pin_this_thread(proxy_cpu: usize, load_cpu: usize) -> Pinning {
        let unpinned = |note: String| Pinning {
            proxy_cpu,
            load_cpu,
            applied: false,
            note: Some(note),
        };
        if proxy_cpu == load_cpu {
            return unpinned(format!(
                "the proxy and the load generator were given the same CPU ({proxy_cpu})"
            ));
        }
        let allowed = match allowed_cpus() {
            Ok(cpus) => cpus,
            Err(e) => return unpinned(format!("cannot read this process's CPU affinity: {e}")),
        };
        if let Some(missing) = [proxy_cpu, load_cpu]
            .into_iter()
            .find(|c| !allowed.contains(c))
        {
            return unpinned(format!(
                "CPU {missing} is not among the CPUs this process may use ({allowed:?})"
            ));
        }
        if let Err(e) = set_affinity(load_cpu) {
            return unpinned(format!("cannot pin to CPU {load_cpu}: {e}"));
        }
        Pinning {
            proxy_cpu,
            load_cpu,
            applied: true,
            note: None,
        }
    }

    /// Makes `cmd`'s child run on `cpu` from its first instruction (as `taskset -c` would), when
    /// the pinning is applied; also ends the child (SIGKILL) if this process dies first.
    pub(crate) fn prepare(&self, cmd: &mut std::process::Command, cpu: usize) {
        sys::prepare(cmd, self.applied.then_some(cpu));
    }
}

/// The CPUs the calling thread may run on.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    sys::allowed_cpus()
}

fn set_affinity(cpu: usize) -> io::Result<()> {
    sys::set_affinity(cpu)
}

#[cfg(target_os = "linux")]
mod sys {
    use std::io;
    use std::os::unix::process::CommandExt as _;

    pub(super) fn prepare(cmd: &mut std::process::Command, cpu: Option<usize>) {
        let set = cpu.map(cpu_set);
        // SAFETY: the hook runs in the forked child before exec and only makes system calls
        // (sched_setaffinity, prctl), which are async-signal-safe; it does not allocate.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(set) = set {
                    let size = std::mem::size_of::<libc::cpu_set_t>();
                    if libc::sched_setaffinity(0, size, &set) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                Ok(())
            });
        }
    }

    fn cpu_set(cpu: usize) -> libc::cpu_set_t {
        // SAFETY: an all-zero cpu_set_t is a valid empty set; CPU_SET writes within it for a CPU
        // below CPU_SETSIZE, which the callers' CPUs are (they came from sched_getaffinity).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if cpu < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(cpu, &mut set);
            }
            set
        }
    }

    pub(super) fn set_affinity(cpu: usize) -> io::Result<()> {
        let set = cpu_set(cpu);
        // SAFETY: `set` is a valid cpu_set_t of the size given; pid 0 is the calling thread.
        let rc =
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub(super) fn allowed_cpus() -> io::Result<Vec<usize>> {
        // SAFETY: an all-zero cpu_set_t is a valid empty set; sched_getaffinity writes at most its
        // size; CPU_ISSET reads within it for every index below CPU_SETSIZE.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok((0..libc::CPU_SETSIZE as usize)
                .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
                .collect())
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::io;

    pub(super) fn prepare(_cmd: &mut std::process::Command, _cpu: Option<usize>) {}

    pub(super) fn set_affinity(_cpu: usize) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "CPU affinity is set on Linux only",
        ))
    }

    pub(super) fn allowed_cpus() -> io::Result<Vec<usize>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "CPU affinity is read on Linux only",
        ))
    }
}

/// The CPUs process `pid`'s first thread may run on, from `/proc/PID/status`.
pub fn cpus_of(pid: u32) -> io::Result<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| io::Error::other("no Cpus_allowed_list"))
}

/// How many threads process `pid` has now.
pub fn threads_of(pid: u32) -> io::Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/task"))?.count())
}

/// Raises this process's limit on open files to at least `needed` (the soft limit, and the hard
/// one too where it is lower and this process may raise it); children inherit it. Returns the
/// soft limit now.
///
/// # Errors
///
/// [`ProxyBenchError::Plan`] saying what the limit is and how to raise it, when it cannot reach
/// `needed`.
pub fn raise_open_files(needed: u64) -> Result<u64, ProxyBenchError> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(ProxyBenchError::Io(io::Error::last_os_error()));
    }
    if limit.rlim_cur >= needed {
        return Ok(limit.rlim_cur);
    }
    let (cur, max) = (limit.rlim_cur, limit.rlim_max);
    let wanted = libc::rlimit {
        rlim_cur: needed,
        rlim_max: max.max(needed),
    };
    // SAFETY: setrlimit reads the struct given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) } != 0 {
        let e = io::Error::last_os_error();
        return Err(ProxyBenchError::Plan(format!(
            "the limit on open files is {cur} (hard limit {max}) and {needed} are needed for the idle connections; raising it failed ({e}): run as root, raise it first (`ulimit -n {needed}`), or pass a lower --idle-connections"
        )));
    }
    Ok(needed)
}

/// Per CPU, the time the host ran something else while the CPU had work (the `steal` column of
/// `/proc/stat`, counted by a virtual machine's kernel; 0 on bare metal), in milliseconds, at
/// the kernel's tick resolution (10 ms at the usual `USER_HZ` of 100).
pub fn steal_ms() -> Option<Vec<f64>> {
    steal_of(
        &std::fs::read_to_string("/proc/stat").ok()?,
        clock_ticks_per_s()?,
    )
}

fn steal_of(stat: &str, ticks_per_s: f64) -> Option<Vec<f64>> {
    let mut steal = Vec::new();
    for line in stat.lines() {
        let mut fields = line.split_whitespace();
        let Some(cpu) = fields.next().and_then(|f| f.strip_prefix("cpu")) else {
            continue;
        };
        let Ok(index) = cpu.parse::<usize>() else {
            continue; // the `cpu` line: all CPUs together
        };
        // user nice system idle iowait irq softirq steal
        let ticks: u64 = fields.nth(7)?.parse().ok()?;
        if steal.len() <= index {
            steal.resize(index + 1, 0.0);
        }
        steal[index] = ticks as f64 * 1000.0 / ticks_per_s;
    }
    (!steal.is_empty()).then_some(steal)
}

#[cfg(target_os = "linux")]
fn clock_ticks_per_s() -> Option<f64> {
    // SAFETY: sysconf reads a configuration value and has no other effect.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then_some(hz as f64)
}

#[cfg(not(target_os = "linux"))]
fn clock_ticks_per_s() -> Option<f64> {
    None
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` has them (`"0.52 0.61 0.70"`).
pub fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let fields: Vec<&str> = text.split_whitespace().take(3).collect();
    (fields.len() == 3).then(|| fields.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_thread_may_run_somewhere() {
        assert!(!allowed_cpus().unwrap().is_empty());
        assert!(!cpus_of(std::process::id()).unwrap().is_empty());
        assert!(threads_of(std::process::id()).unwrap() >= 1);
        assert_eq!(load_average().unwrap().split(' ').count(), 3);
    }

    #[test]
    fn steal_is_read_per_cpu_from_the_eighth_column() {
        let stat = "cpu  10 0 5 100 0 0 0 9 0 0\n\
                    cpu0 5 0 2 50 0 0 0 3 0 0\n\
                    cpu1 5 0 3 50 0 0 0 6 0 0\n\
                    intr 12345\n";
        assert_eq!(steal_of(stat, 100.0), Some(vec![30.0, 60.0]));
        assert_eq!(steal_of("intr 1\n", 100.0), None);
        assert!(steal_ms().is_some_and(|s| !s.is_empty()));
    }

    #[test]
    fn the_same_cpu_twice_is_not_pinned() {
        let p = Pinning::pin_this_thread(0, 0);
        assert!(!p.applied);
        assert!(p.note.unwrap().contains("same CPU"));
    }

    #[test]
    fn a_cpu_out_of_reach_is_said_and_not_pinned() {
        let p = Pinning::pin_this_thread(1000, 0);
        assert!(!p.applied);
        assert!(p.note.unwrap().contains("CPU 1000 is not among"));
    }

    #[test]
    fn a_limit_already_high_enough_stays() {
        let now = raise_open_files(1).unwrap();
        assert!(now >= 1);
    }
}
