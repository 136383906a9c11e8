//! CPU instructions a proxy executes per answer, counted one of two ways. `perf stat -e
//! instructions` attaches to the proxy's processes over a saturation step's measured time, where
//! the machine counts them: many virtual machines expose no hardware counters, and `perf` then
//! says `<not supported>`; [`probe`] finds out once, at the start of a run. Callgrind (valgrind)
//! counts them anywhere, in user space only and some fifty times slower: a fresh proxy runs
//! under it and serves a fixed number of requests at the pace it can (`Callgrind`).

use std::ffi::OsString;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde::Serialize;

/// How a run counts instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `perf stat -e instructions` over each saturation step, where the machine supports it.
    Perf,
    /// A separate step per proxy and repeat under callgrind.
    Callgrind,
    /// Not at all.
    Off,
}

/// Whether instructions are counted in a run, and why not when not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstructionsStatus {
    /// Whether they are counted.
    pub measured: bool,
    /// The tool: `perf` or `callgrind`.
    pub tool: &'static str,
    /// Why they are not counted, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl InstructionsStatus {
    /// Not counted, for `reason`.
    pub fn not_measured(reason: impl Into<String>) -> InstructionsStatus {
        InstructionsStatus {
            measured: false,
            tool: "perf",
            reason: Some(reason.into()),
        }
    }

    /// `instructions: not measured (REASON)`, or how they are counted.
    pub fn describe(&self) -> String {
        match (&self.reason, self.tool) {
            (Some(reason), _) if !self.measured => format!("instructions: not measured ({reason})"),
            (_, "callgrind") => "instructions: counted with callgrind (user space only), a fresh proxy under valgrind serving a fixed number of requests, per repeat".into(),
            _ => "instructions: counted with perf stat -e instructions, attached to each proxy's processes over the saturation step's measured time".into(),
        }
    }
}

/// Runs `valgrind --version` and `callgrind_control --version` and says whether both ran.
pub fn probe_callgrind() -> InstructionsStatus {
    for tool in ["valgrind", "callgrind_control"] {
        let ran = Command::new(tool)
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Err(e) = ran {
            return InstructionsStatus {
                measured: false,
                tool: "callgrind",
                reason: Some(format!("{tool} cannot be run: {e}; install valgrind")),
            };
        }
    }
    InstructionsStatus {
        measured: true,
        tool: "callgrind",
        reason: None,
    }
}

/// Runs `perf stat -e instructions -x, -- true` and says whether it counted.
pub fn probe() -> InstructionsStatus {
    let output = Command::new("perf")
        .args(["stat", "-e", "instructions", "-x,", "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match output {
        Err(e) => InstructionsStatus::not_measured(format!("perf cannot be run: {e}")),
        Ok(out) => match parse_count(&String::from_utf8_lossy(&out.stderr)) {
            Ok(_) => InstructionsStatus {
                measured: true,
                tool: "perf",
                reason: None,
            },
            Err(CountError::NotSupported) => {
                InstructionsStatus::not_measured("perf stat unsupported here")
            }
            Err(CountError::Other(why)) => {
                InstructionsStatus::not_measured(format!("perf stat failed: {why}"))
            }
        },
    }
}

/// Why `perf stat` gave no count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CountError {
    /// The event is `<not supported>` (or `<not counted>`) on this machine.
    NotSupported,
    /// Anything else, with perf's words.
    Other(String),
}

/// The instructions counted in `perf stat -x,` output (`COUNT,UNIT,instructions,...` lines;
/// several are summed).
pub fn parse_count(stderr: &str) -> Result<u64, CountError> {
    let mut total = None;
    for line in stderr.lines() {
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() < 3 || !fields[2].starts_with("instructions") {
            continue;
        }
        let count = fields[0].trim();
        if count.starts_with("<not") {
            return Err(CountError::NotSupported);
        }
        let n: u64 = count
            .parse()
            .map_err(|_| CountError::Other(format!("cannot read the count in {line:?}")))?;
        total = Some(total.unwrap_or(0) + n);
    }
    total.ok_or_else(|| {
        let said = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        CountError::Other(format!("no instructions line in its output {said:?}"))
    })
}

/// A `perf stat` attached to some processes until [`Counter::stop`].
pub(crate) struct Counter {
    child: Child,
}

impl Counter {
    /// Attaches `perf stat -e instructions` to `pids` (every thread they have now).
    pub(crate) fn start(pids: &[u32]) -> std::io::Result<Counter> {
        let list = pids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let child = Command::new("perf")
            .args(["stat", "-e", "instructions", "-x,", "-p", &list])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        Ok(Counter { child })
    }

    /// Stops the count (SIGINT, as Ctrl-C would) and reads it.
    pub(crate) fn stop(mut self) -> Result<u64, String> {
        let pid = libc::pid_t::try_from(self.child.id()).map_err(|e| e.to_string())?;
        // SAFETY: kill has no memory preconditions; the pid is our own child, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let mut stderr = String::new();
        if let Some(mut s) = self.child.stderr.take() {
            let _ = s.read_to_string(&mut stderr);
        }
        let _ = self.child.wait();
        parse_count(&stderr).map_err(|e| match e {
            CountError::NotSupported => "perf stat unsupported here".to_string(),
            CountError::Other(why) => why,
        })
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What a callgrind step counted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallgrindReport {
    /// Requests sent in the counted window (after the warm-up ones).
    pub requests: usize,
    /// Of those, answered with a 2xx status.
    pub ok: u64,
    /// Instructions (callgrind's `Ir`, user space) of all the proxy's processes in the window.
    pub instructions: u64,
    /// That per 2xx answer.
    pub per_answer: Option<f64>,
    /// Level-1 data cache misses (reads and writes) in callgrind's simulation of this CPU's
    /// caches, in the window; `None` when the dump has no cache events.
    pub l1d_misses: Option<u64>,
    /// That per 2xx answer.
    pub l1d_misses_per_answer: Option<f64>,
    /// The processes counted (nginx: master and worker).
    pub processes: usize,
}

/// Runs a proxy under callgrind, each of its processes writing to its own file in a folder,
/// and reads the counts between two dumps.
#[derive(Debug, Clone)]
pub(crate) struct Callgrind {
    dir: PathBuf,
    prefix: String,
}

impl Callgrind {
    /// Callgrind files named `PREFIX.PID.N` in `dir`.
    pub(crate) fn new(dir: &Path, prefix: &str) -> Callgrind {
        Callgrind {
            dir: dir.to_path_buf(),
            prefix: prefix.to_string(),
        }
    }

    /// `cmd` run under `valgrind --tool=callgrind` (its children forked too, as nginx's worker),
    /// with its cache simulation on: it counts the level-1 data cache misses beside the
    /// instructions (the instruction count does not change).
    pub(crate) fn wrap(&self, cmd: &Command) -> Command {
        let mut wrapped = Command::new("valgrind");
        let mut out = OsString::from("--callgrind-out-file=");
        out.push(self.dir.join(format!("{}.%p", self.prefix)));
        wrapped
            .arg("--tool=callgrind")
            .arg("--cache-sim=yes")
            .arg(out)
            .arg(cmd.get_program())
            .args(cmd.get_args());
        if let Some(dir) = cmd.get_current_dir() {
            wrapped.current_dir(dir);
        }
        wrapped
    }

    /// Asks callgrind in each of `pids` to write its counts since the last dump to a new file
    /// (and start counting from zero).
    pub(crate) fn dump(&self, pids: &[u32]) -> Result<(), String> {
        for pid in pids {
            let out = Command::new("callgrind_control")
                .arg("--dump")
                .arg(pid.to_string())
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("callgrind_control cannot be run: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "callgrind_control --dump {pid} failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        Ok(())
    }

    /// The counts in the last dump of each of `pids`, summed.
    pub(crate) fn last_totals(&self, pids: &[u32]) -> Result<Totals, String> {
        let mut sum = Totals {
            instructions: 0,
            l1d_misses: Some(0),
        };
        for pid in pids {
            let stem = format!("{}.{pid}.", self.prefix);
            let last = std::fs::read_dir(&self.dir)
                .map_err(|e| format!("cannot read {}: {e}", self.dir.display()))?
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let n: u32 = name.strip_prefix(&stem)?.parse().ok()?;
                    Some((n, e.path()))
                })
                .max_by_key(|(n, _)| *n)
                .ok_or_else(|| format!("callgrind wrote no dump for process {pid}"))?
                .1;
            let text = std::fs::read_to_string(&last)
                .map_err(|e| format!("cannot read {}: {e}", last.display()))?;
            let one = parse_totals(&text)
                .ok_or_else(|| format!("no totals line in {}", last.display()))?;
            sum.instructions += one.instructions;
            sum.l1d_misses = sum.l1d_misses.zip(one.l1d_misses).map(|(a, b)| a + b);
        }
        Ok(sum)
    }
}

/// The counts of a callgrind dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// `Ir`: instructions executed.
    pub instructions: u64,
    /// `D1mr` + `D1mw`: level-1 data cache read and write misses, when the dump has both
    /// (callgrind run with `--cache-sim=yes`).
    pub l1d_misses: Option<u64>,
}

/// The `totals:` (or `summary:`) line of a callgrind dump, its columns named by the
/// `events:` line.
pub fn parse_totals(text: &str) -> Option<Totals> {
    let events: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("events:"))?
        .split_whitespace()
        .collect();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("totals:"))
        .or_else(|| text.lines().find_map(|l| l.strip_prefix("summary:")))?;
    let values: Vec<u64> = line
        .split_whitespace()
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    // A dump leaves out trailing zero columns.
    let of = |name: &str| {
        let i = events.iter().position(|e| *e == name)?;
        Some(values.get(i).copied().unwrap_or(0))
    };
    Some(Totals {
        instructions: of("Ir")?,
        l1d_misses: of("D1mr").zip(of("D1mw")).map(|(r, w)| r + w),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_count_and_a_refusal() {
        assert_eq!(
            parse_count("123456,,instructions,2000000,100.00,,\n"),
            Ok(123456)
        );
        assert_eq!(
            parse_count("10,,instructions:u,1,100.00,,\n5,,instructions:u,1,100.00,,\n"),
            Ok(15)
        );
        assert_eq!(
            parse_count("<not supported>,,instructions,0,100.00,,\n"),
            Err(CountError::NotSupported)
        );
        assert!(matches!(
            parse_count("Error: no such process\n"),
            Err(CountError::Other(_))
        ));
    }

    #[test]
    fn reads_a_callgrind_dump() {
        let dump = "version: 1\ncmd: inflight proxy\npart: 3\nevents: Ir\nsummary: 8521100\nfl=(1) x\n1 2\ntotals: 8521100\n";
        let ir = |instructions| Totals {
            instructions,
            l1d_misses: None,
        };
        assert_eq!(parse_totals(dump), Some(ir(8521100)));
        assert_eq!(parse_totals("events: Ir\nsummary: 985\n"), Some(ir(985)));
        assert_eq!(parse_totals("events: Ir\n"), None);
        assert_eq!(parse_totals("summary: 985\n"), None);
        // With the cache simulation: the misses are D1mr + D1mw, wherever they stand.
        let cache =
            "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\nsummary: 1000 300 200 40 25 17\n";
        assert_eq!(
            parse_totals(cache),
            Some(Totals {
                instructions: 1000,
                l1d_misses: Some(42),
            })
        );
        let trailing = "events: Ir Dr Dw I1mr D1mr D1mw\ntotals: 1000 300 200 40 25\n";
        assert_eq!(parse_totals(trailing).unwrap().l1d_misses, Some(25));
    }

    #[test]
    fn a_command_runs_under_callgrind_with_a_file_per_process() {
        let cg = Callgrind::new(Path::new("/tmp/x"), "callgrind.nginx");
        let mut cmd = Command::new("nginx");
        cmd.args(["-p", "/tmp/x/nginx"]);
        let wrapped = cg.wrap(&cmd);
        assert_eq!(wrapped.get_program(), "valgrind");
        let args: Vec<_> = wrapped
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "--tool=callgrind",
                "--cache-sim=yes",
                "--callgrind-out-file=/tmp/x/callgrind.nginx.%p",
                "nginx",
                "-p",
                "/tmp/x/nginx"
            ]
        );
    }

    #[test]
    fn says_why_not() {
        let s = InstructionsStatus::not_measured("perf stat unsupported here");
        assert_eq!(
            s.describe(),
            "instructions: not measured (perf stat unsupported here)"
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["measured"], false);
        assert_eq!(json["reason"], "perf stat unsupported here");
    }
}
