//! The guard a compressor holds during `compress`.

use std::fs;
use std::io;

use crate::logging;

/// Removes `temporaries` when dropped — on success and on every error path — and the output
/// file too unless [`Cleanup::keep_output`] was called, so a failed compression leaves the
/// task directory as it found it (`plugin check` looks for stray files). A file that cannot
/// be removed is logged as a warning (a missing one is fine).
pub struct Cleanup {
    temporaries: Vec<String>,
    output: Option<String>,
}

impl Cleanup {
    /// A guard for `temporaries` (may be empty) and `output` (the new context file).
    pub fn new(temporaries: &[&str], output: &str) -> Cleanup {
        Cleanup {
            temporaries: temporaries.iter().map(|s| s.to_string()).collect(),
            output: Some(output.to_string()),
        }
    }

    /// The output is handed to the host: keep it.
    pub fn keep_output(&mut self) {
        self.output = None;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for file in &self.temporaries {
            remove(file, "the temporary ");
        }
        if let Some(file) = &self.output {
            remove(file, "");
        }
    }
}

/// Removes `file`, logging a failure as `cannot delete <what><file>: <error>`.
fn remove(file: &str, what: &str) {
    if let Err(e) = fs::remove_file(file)
        && e.kind() != io::ErrorKind::NotFound
    {
        logging::warn(&format!("cannot delete {what}{file}: {e}"));
    }
}
