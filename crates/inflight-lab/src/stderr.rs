//! Lines for the user on stderr that a closed stderr loses instead of panicking
//! (`eprintln!` panics once the reader has gone, as after `inflight lab run 2>&1 | head`).

use std::io::Write;

/// Writes `line` and a newline to stderr; a failed write loses the line and nothing else.
pub(crate) fn line(line: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(line).and_then(|()| err.write_all(b"\n"));
}
