//! The files of the task directory this component touches (paths relative to the preopened
//! task directory) and the line-level helpers only it needs (the common ones are in
//! `shared/jsonl_files.rs`).

use std::io::BufRead;

use ctxhost_format::jsonl::LineReader;
use ctxhost_format::summary_id;

use crate::ctxhost::plugin::types::PluginError;
use crate::jsonl_files::{LineWriter, require_lines};

/// The live context (read only).
pub const CURRENT: &str = ctxhost_format::files::CURRENT;
/// The full history (read only): seqs of the summarised messages.
pub const MESSAGES: &str = ctxhost_format::files::MESSAGES;
/// Summaries of every compression (appended).
pub const SUMMARIES: &str = ctxhost_format::files::SUMMARIES;
/// Temporary: the messages being summarised (raw lines of current.jsonl).
pub const TO_SUMMARIZE: &str = ctxhost_format::files::TO_SUMMARIZE;
/// Temporary: the kept messages (raw lines of current.jsonl).
pub const UNSUMMARIZED: &str = ctxhost_format::files::UNSUMMARIZED;
/// Temporary: one summary request (system instruction + user message), for `llm.complete`.
pub const SUMMARY_REQUEST: &str = ctxhost_format::files::SUMMARY_REQUEST;
/// The new context handed to the host.
pub const COMPRESSED: &str = ctxhost_format::files::COMPRESSED;

/// Copies every non-blank line of `from` to `to`, unchanged.
pub fn copy_lines(from: &str, to: &mut LineWriter) -> Result<(), PluginError> {
    let mut reader = require_lines(from)?;
    while let Some((_, text)) = reader.next_line()? {
        to.line(text)?;
    }
    Ok(())
}

/// The id of the next summary: one more than the largest id in summaries.jsonl (numbers, or
/// the old `"sum-N"` strings) and than its line count; 1 when the file does not exist.
pub fn next_summary_id() -> Result<u64, PluginError> {
    let io = |e: std::io::Error| PluginError::Io(format!("reading {SUMMARIES}: {e}"));
    match std::fs::File::open(SUMMARIES) {
        Ok(f) => summary_id::next_id(std::io::BufReader::new(f), None).map_err(io),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(1),
        Err(e) => Err(io(e)),
    }
}

/// The first non-blank line of `file`, as written.
pub fn first_line(file: &str) -> Result<String, PluginError> {
    let mut reader = require_lines(file)?;
    match reader.next_line()? {
        Some((_, text)) => Ok(text.to_string()),
        None => Err(PluginError::InvalidInput(format!("{file} is empty"))),
    }
}

/// Reads `reader` to the end, calling `f` for each non-blank line (line number, text).
pub fn for_each_raw<R: BufRead>(
    reader: &mut LineReader<R>,
    mut f: impl FnMut(u64, &str) -> Result<(), PluginError>,
) -> Result<(), PluginError> {
    while let Some((line, text)) = reader.next_line()? {
        f(line, text)?;
    }
    Ok(())
}
