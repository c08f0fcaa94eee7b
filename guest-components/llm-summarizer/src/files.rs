//! The files of the task directory this component touches (paths relative to the preopened
//! task directory), line-level file helpers, and the guard that removes temporaries.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Write};

use ctxhost_format::jsonl::{JsonlError, LineReader};

use crate::ctxhost::plugin::types::PluginError;

/// The live context (read only).
pub const CURRENT: &str = "current.jsonl";
/// The full history (read only): seqs of the summarised messages.
pub const MESSAGES: &str = "messages.jsonl";
/// Summaries of every compression (appended).
pub const SUMMARIES: &str = "summaries.jsonl";
/// Temporary: the messages being summarised (raw lines of current.jsonl).
pub const TO_SUMMARIZE: &str = "to_summarize.jsonl";
/// Temporary: the kept messages (raw lines of current.jsonl).
pub const UNSUMMARIZED: &str = "unsummarized.jsonl";
/// Temporary: one summary request (system instruction + user message), for `llm.complete`.
pub const SUMMARY_REQUEST: &str = "summary_request.jsonl";
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

/// Copies every non-blank line of `from` to `to`, unchanged.
pub fn copy_lines(from: &str, to: &mut LineWriter) -> Result<(), PluginError> {
    let mut reader = require_lines(from)?;
    while let Some((_, text)) = reader.next_line().map_err(jsonl_error)? {
        to.line(text)?;
    }
    Ok(())
}

/// Non-blank lines of `file` (0 when it does not exist).
pub fn count_lines(file: &str) -> Result<u64, PluginError> {
    let Some(mut reader) = open_lines(file)? else {
        return Ok(0);
    };
    let mut n = 0;
    while reader.next_line().map_err(jsonl_error)?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// Appends `value` as one whole JSON line to `file` (created if missing) and syncs it.
pub fn append_json_line(file: &str, value: &impl serde::Serialize) -> Result<(), PluginError> {
    let mut line = serde_json::to_string(value)
        .map_err(|e| PluginError::Internal(format!("serialising a line of {file}: {e}")))?;
    line.push('\n');
    let mut f = OpenOptions::new()
        .append(true)
        .create(true)
        .open(file)
        .map_err(|e| io_error(format!("opening {file}"), e))?;
    f.write_all(line.as_bytes())
        .map_err(|e| io_error(format!("appending to {file}"), e))?;
    f.sync_data()
        .map_err(|e| io_error(format!("syncing {file}"), e))
}

/// The first non-blank line of `file`, as written.
pub fn first_line(file: &str) -> Result<String, PluginError> {
    let mut reader = require_lines(file)?;
    match reader.next_line().map_err(jsonl_error)? {
        Some((_, text)) => Ok(text.to_string()),
        None => Err(PluginError::InvalidInput(format!("{file} is empty"))),
    }
}

/// Removes the temporaries when dropped — on success and on every error path — and the new
/// context file too unless [`Cleanup::keep_output`] was called.
pub struct Cleanup {
    temporaries: &'static [&'static str],
    output: Option<&'static str>,
}

impl Cleanup {
    /// A guard for `temporaries` and `output`.
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
        for file in self.temporaries.iter().copied().chain(self.output) {
            if let Err(e) = fs::remove_file(file)
                && e.kind() != io::ErrorKind::NotFound
            {
                crate::warn(&format!("cannot delete the temporary {file}: {e}"));
            }
        }
    }
}

/// Reads `reader` to the end, calling `f` for each non-blank line (line number, text).
pub fn for_each_raw<R: BufRead>(
    reader: &mut LineReader<R>,
    mut f: impl FnMut(u64, &str) -> Result<(), PluginError>,
) -> Result<(), PluginError> {
    while let Some((line, text)) = reader.next_line().map_err(jsonl_error)? {
        f(line, text)?;
    }
    Ok(())
}
