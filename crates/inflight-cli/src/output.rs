//! Shared output helpers: error printing and pipe handling.

/// Print an error and its chain of causes to stderr, the way a user should see it.
pub fn print_error(err: &anyhow::Error) {
    log_line(format_args!("error: {err}"));
    for cause in err.chain().skip(1) {
        log_line(format_args!("  caused by: {cause}"));
    }
}

/// Restore the default SIGPIPE action so that `inflight ... | head` ends quietly instead of
/// panicking on a closed stdout. Only for commands that write to no socket: with the default
/// action a write to a socket its peer closed (a `writev`, which cannot be told not to signal)
/// kills the process without a word, so a server or a client keeps Rust's (ignored: the write
/// fails with `EPIPE`).
pub fn reset_sigpipe() {
    // SAFETY: setting a signal disposition to SIG_DFL at startup, before any threads exist.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Writes `line` to stderr, as a long-running process logs: a stderr whose reader has gone
/// (`EPIPE`) or that was closed loses the line, and the process goes on (`eprintln!` would
/// panic).
pub fn log_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(line).and_then(|()| err.write_all(b"\n"));
}

/// Writes `text` to stdout, as a command prints its result. A reader that has gone
/// (`inflight fleet status | head -1`) takes nothing more and is no error (`print!` would
/// panic); any other failure is returned.
pub fn out(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        done => done,
    }
}

/// `println!` through [`out`]: `outln!(...)?` prints a line of a command's result.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::out(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` through [`log_line`]: a line for the user that a closed stderr loses.
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::output::log_line(format_args!($($arg)*))
    };
}

pub(crate) use {note, outln};
