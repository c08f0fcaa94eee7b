//! The guard a compressor holds during `compress`: it removes the temporary files and, unless
//! the compression succeeded, the new context file, so a failed compression leaves the task
//! directory as it found it. Compiled into the compressor components with
//! `#[path = "../../shared/cleanup.rs"] mod cleanup;` (it logs through that crate's `log`
//! import).

use std::fs;
use std::io;

use crate::ctxhost::plugin::log::{Level, log};

/// Removes `temporaries` when dropped — on success and on every error path — and the output
/// file too unless [`Cleanup::keep_output`] was called. A file that cannot be removed is
/// logged as a warning (a missing one is fine).
pub struct Cleanup {
    temporaries: &'static [&'static str],
    output: Option<&'static str>,
}

impl Cleanup {
    /// A guard for `temporaries` (may be empty) and `output` (the new context file).
    pub fn new(temporaries: &'static [&'static str], output: &'static str) -> Cleanup {
        Cleanup {
            temporaries,
            output: Some(output),
        }
    }

    /// The output is handed to the host: keep it.
    pub fn keep_output(&mut self) {
        self.output = None;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for file in self.temporaries.iter().copied() {
            remove(file, "the temporary ");
        }
        if let Some(file) = self.output {
            remove(file, "");
        }
    }
}

/// Removes `file`, logging a failure as `cannot delete <what><file>: <error>`.
fn remove(file: &str, what: &str) {
    if let Err(e) = fs::remove_file(file)
        && e.kind() != io::ErrorKind::NotFound
    {
        log(Level::Warn, &format!("cannot delete {what}{file}: {e}"));
    }
}
