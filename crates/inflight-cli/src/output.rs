//! Shared output helpers: error printing and pipe handling.

/// Print an error and its chain of causes to stderr, the way a user should see it.
pub fn print_error(err: &anyhow::Error) {
    eprintln!("error: {err}");
    for cause in err.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
}

/// Restore the default SIGPIPE action so that `inflight ... | head` ends quietly instead of
/// panicking on a closed stdout.
pub fn reset_sigpipe() {
    // SAFETY: setting a signal disposition to SIG_DFL at startup, before any threads exist.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
