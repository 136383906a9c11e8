//! Helpers shared by the command-line tests.

#![allow(dead_code)]

use assert_cmd::Command;

/// The `inflight` binary built for this test run.
pub fn inflight() -> Command {
    Command::cargo_bin("inflight").expect("the inflight binary is built")
}

/// Whether this process runs as root (cgroup tests need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
