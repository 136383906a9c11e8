//! CPU instructions a proxy executes, counted by `perf stat -e instructions` attached to its
//! processes over a load step's measured time, where the machine counts them: many virtual
//! machines expose no hardware counters, and `perf` then says `<not supported>`. [`probe`] finds
//! out once, at the start of a run.

use std::io::Read as _;
use std::process::{Child, Command, Stdio};

use serde::Serialize;

/// Whether instructions are counted in a run, and why not when not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstructionsStatus {
    /// Whether `perf stat -e instructions` counts here.
    pub measured: bool,
    /// The tool used (`perf`).
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

    /// `instructions: not measured (REASON)` or `instructions: perf stat -e instructions`.
    pub fn describe(&self) -> String {
        match &self.reason {
            Some(reason) if !self.measured => format!("instructions: not measured ({reason})"),
            _ => "instructions: counted with perf stat -e instructions, attached to each proxy's processes over the measured time".into(),
        }
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
