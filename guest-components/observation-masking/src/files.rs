//! The files of the task directory this component touches (paths relative to the preopened
//! task directory) and line-level file helpers.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Write};

use ctxhost_format::jsonl::{JsonlError, LineReader};

use crate::ctxhost::plugin::types::PluginError;

/// The live context (read only).
pub const CURRENT: &str = "current.jsonl";
/// The tool call log (read only): where the full text of a masked result stays.
pub const TOOLS: &str = "tools.jsonl";
/// The new context handed to the host.
pub const COMPRESSED: &str = "compressed.jsonl";

/// `io` error: `<what>: <OS error>`.
pub fn io_error(what: impl std::fmt::Display, e: io::Error) -> PluginError {
    PluginError::Io(format!("{what}: {e}"))
}

/// A JSONL reading error as a plugin error (`io` or `invalid-input`, naming file and line).
pub fn jsonl_error(e: JsonlError) -> PluginError {
    match e {
        JsonlError::Io { .. } => PluginError::Io(e.to_string()),
        JsonlError::Invalid { .. } => PluginError::InvalidInput(e.to_string()),
    }
}

/// A line reader of `file`, or `None` when it does not exist.
pub fn open_lines(file: &str) -> Result<Option<LineReader<BufReader<File>>>, PluginError> {
    match File::open(file) {
        Ok(f) => Ok(Some(LineReader::new(BufReader::new(f), file))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(format!("opening {file}"), e)),
    }
}

/// A line reader of `file`, which must exist.
pub fn require_lines(file: &str) -> Result<LineReader<BufReader<File>>, PluginError> {
    open_lines(file)?.ok_or_else(|| PluginError::Io(format!("opening {file}: no such file")))
}

/// A JSONL file being written, one whole line per [`LineWriter::line`].
pub struct LineWriter {
    file: &'static str,
    out: BufWriter<File>,
}

impl LineWriter {
    /// Creates (or truncates) `file`.
    pub fn create(file: &'static str) -> Result<LineWriter, PluginError> {
        let f = File::create(file).map_err(|e| io_error(format!("creating {file}"), e))?;
        Ok(LineWriter {
            file,
            out: BufWriter::new(f),
        })
    }

    /// Writes `text` and a `\n`.
    pub fn line(&mut self, text: &str) -> Result<(), PluginError> {
        self.out
            .write_all(text.as_bytes())
            .and_then(|_| self.out.write_all(b"\n"))
            .map_err(|e| io_error(format!("writing {}", self.file), e))
    }

    /// Writes `value` as one JSON line.
    pub fn json(&mut self, value: &impl serde::Serialize) -> Result<(), PluginError> {
        let text = serde_json::to_string(value).map_err(|e| {
            PluginError::Internal(format!("serialising a line of {}: {e}", self.file))
        })?;
        self.line(&text)
    }

    /// Flushes and closes the file.
    pub fn finish(self) -> Result<(), PluginError> {
        let file = self.file;
        self.out
            .into_inner()
            .map_err(|e| io_error(format!("writing {file}"), e.into_error()))?;
        Ok(())
    }
}

/// Deletes the new context file when dropped, unless [`RemoveOnError::keep`] was called.
pub struct RemoveOnError {
    file: Option<&'static str>,
}

impl RemoveOnError {
    /// A guard for `file`.
    pub fn new(file: &'static str) -> RemoveOnError {
        RemoveOnError { file: Some(file) }
    }

    /// The file is handed to the host: keep it.
    pub fn keep(&mut self) {
        self.file = None;
    }
}

impl Drop for RemoveOnError {
    fn drop(&mut self) {
        if let Some(file) = self.file
            && let Err(e) = fs::remove_file(file)
            && e.kind() != io::ErrorKind::NotFound
        {
            crate::warn(&format!("cannot delete {file}: {e}"));
        }
    }
}
