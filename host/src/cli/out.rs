//! Results on stdout. A reader that stops early (`ctxhost tasks | head -1`) closes the pipe:
//! the next write fails with `BrokenPipe`, which [`outln!`] returns as an error and
//! [`super::main`] turns into a quiet exit 0 ([`is_closed_pipe`]) — no panic, no message.

use std::io::{self, Write};

/// Writes `args` and a newline to stdout. Errors: the write failed (a closed pipe included).
pub(crate) fn line(args: std::fmt::Arguments<'_>) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_fmt(args)?;
    out.write_all(b"\n")
}

/// `println!` that returns the write error from the enclosing function (`?`, into
/// `anyhow::Error`) instead of panicking on a closed pipe.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::out::line(format_args!($($arg)*)).map_err(::anyhow::Error::from)?
    };
}
pub(crate) use outln;

/// Whether `error` (any link of its chain) is a write to a closed pipe.
pub(crate) fn is_closed_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}
