//! The files of the task directory this component touches (paths relative to the preopened
//! task directory) and the line-level helpers only it needs (the common ones are in
//! `ctxhost_plugin::jsonl`).

use std::io::BufRead;

use ctxhost_plugin::format::jsonl::LineReader;

use ctxhost_plugin::jsonl::{LineWriter, require_lines};
use ctxhost_plugin::types::PluginError;

/// The live context (read only).
pub const CURRENT: &str = ctxhost_plugin::format::files::CURRENT;
/// Summaries of every compression (appended).
pub const SUMMARIES: &str = ctxhost_plugin::format::files::SUMMARIES;
/// Temporary: the messages being summarised (raw lines of current.jsonl).
pub const TO_SUMMARIZE: &str = ctxhost_plugin::format::files::TO_SUMMARIZE;
/// Temporary: the kept messages (raw lines of current.jsonl).
pub const UNSUMMARIZED: &str = ctxhost_plugin::format::files::UNSUMMARIZED;
/// Temporary: one summary request (system instruction + user message), for `llm.complete`.
pub const SUMMARY_REQUEST: &str = ctxhost_plugin::format::files::SUMMARY_REQUEST;
/// The new context handed to the host.
pub const COMPRESSED: &str = ctxhost_plugin::format::files::COMPRESSED;

/// Copies every non-blank line of `from` to `to`, unchanged.
pub fn copy_lines(from: &str, to: &mut LineWriter) -> Result<(), PluginError> {
    let mut reader = require_lines(from)?;
    while let Some((_, text)) = reader.next_line()? {
        to.line(text)?;
    }
    Ok(())
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
