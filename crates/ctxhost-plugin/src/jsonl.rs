//! JSONL files of the task directory, a line at a time (paths relative to the task directory,
//! which the host preopens as `.`): reading chat messages ([`read_messages`], [`MessageReader`]),
//! writing a new file ([`LineWriter`]) and appending one whole line ([`append_json_line`]).
//! Errors are `plugin-error`s naming the file and, when reading, the 1-based line
//! (`current.jsonl line 3: not valid: missing field `role``).
//!
//! Whole files are never loaded: a 200 MB history costs one line of memory.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Write};

use crate::format::ChatMessage;
use crate::format::jsonl::{JsonlError, LineReader};
use crate::types::PluginError;

/// `io` error `<what>: <OS error>`, e.g. `opening current.jsonl: Permission denied`.
pub fn io_error(what: impl std::fmt::Display, e: io::Error) -> PluginError {
    PluginError::Io(format!("{what}: {e}"))
}

/// A failed read is `io`; a line that is not UTF-8 or not the expected shape is
/// `invalid-input`; either way the text names the file and line.
impl From<JsonlError> for PluginError {
    fn from(e: JsonlError) -> Self {
        match e {
            JsonlError::Io { .. } => PluginError::Io(e.to_string()),
            JsonlError::Invalid { .. } => PluginError::InvalidInput(e.to_string()),
        }
    }
}

/// A line reader of `file` (blank lines skipped, line numbers counted), or `None` when the
/// file does not exist.
pub fn open_lines(file: &str) -> Result<Option<LineReader<BufReader<File>>>, PluginError> {
    match File::open(file) {
        Ok(f) => Ok(Some(LineReader::new(BufReader::new(f), file))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(format!("opening {file}"), e)),
    }
}

/// A line reader of `file`, which must exist (`io` error `opening <file>: no such file`).
pub fn require_lines(file: &str) -> Result<LineReader<BufReader<File>>, PluginError> {
    open_lines(file)?.ok_or_else(|| PluginError::Io(format!("opening {file}: no such file")))
}

/// Streams the chat message lines of `file` (e.g. `current.jsonl`): an iterator of
/// `(line number, message)`, one line in memory at a time.
pub struct MessageReader {
    lines: LineReader<BufReader<File>>,
}

impl Iterator for MessageReader {
    type Item = Result<(u64, ChatMessage), PluginError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.lines
            .next_value::<ChatMessage>()
            .map_err(PluginError::from)
            .transpose()
    }
}

/// A [`MessageReader`] over `file`, which must exist.
pub fn read_messages(file: &str) -> Result<MessageReader, PluginError> {
    Ok(MessageReader {
        lines: require_lines(file)?,
    })
}

/// The first non-blank line of `file`, as written (e.g. the system prompt of `current.jsonl`,
/// to copy it byte for byte). `invalid-input` when the file is empty.
pub fn first_line(file: &str) -> Result<String, PluginError> {
    let mut reader = require_lines(file)?;
    match reader.next_line()? {
        Some((_, text)) => Ok(text.to_string()),
        None => Err(PluginError::InvalidInput(format!("{file} is empty"))),
    }
}

/// A JSONL file being written, one whole line per call. Create it, write lines, then
/// [`LineWriter::finish`] (which flushes and syncs); a writer dropped without `finish` leaves
/// a file the host must not use (delete it, e.g. with [`crate::Cleanup`]).
pub struct LineWriter {
    file: String,
    out: BufWriter<File>,
}

impl LineWriter {
    /// Creates (or truncates) `file`.
    pub fn create(file: &str) -> Result<LineWriter, PluginError> {
        let f = File::create(file).map_err(|e| io_error(format!("creating {file}"), e))?;
        Ok(LineWriter {
            file: file.to_string(),
            out: BufWriter::new(f),
        })
    }

    /// Writes `text` (one line, without its `\n`) and a `\n`.
    pub fn line(&mut self, text: &str) -> Result<(), PluginError> {
        self.out
            .write_all(text.as_bytes())
            .and_then(|_| self.out.write_all(b"\n"))
            .map_err(|e| io_error(format!("writing {}", self.file), e))
    }

    /// Writes `value` as one JSON line (e.g. a [`ChatMessage`]).
    pub fn json(&mut self, value: &impl serde::Serialize) -> Result<(), PluginError> {
        let text = serde_json::to_string(value).map_err(|e| {
            PluginError::Internal(format!("serialising a line of {}: {e}", self.file))
        })?;
        self.line(&text)
    }

    /// Flushes, syncs and closes the file.
    pub fn finish(self) -> Result<(), PluginError> {
        let file = self.file;
        let f = self
            .out
            .into_inner()
            .map_err(|e| io_error(format!("writing {file}"), e.into_error()))?;
        f.sync_all()
            .map_err(|e| io_error(format!("syncing {file}"), e))
    }
}

/// Appends `value` as one whole JSON line to `file` (created if missing) and syncs it: the
/// line is built in memory and written with one `write_all`, so a reader never sees half a
/// line.
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

/// The WIT record of a chat message line.
pub fn to_wit(m: &ChatMessage) -> crate::types::ChatMessage {
    crate::types::ChatMessage {
        role: m.role.clone(),
        content: m.content.clone(),
        tool_calls: m
            .calls()
            .iter()
            .map(|c| crate::types::ToolCall {
                id: c.id.clone(),
                name: c.function.name.clone(),
                arguments: c.function.arguments.clone(),
            })
            .collect(),
        tool_call_id: m.tool_call_id.clone(),
        tool_name: m.tool_name.clone(),
    }
}

/// The chat message line of a WIT record (no `tool_calls` key when there are none).
pub fn from_wit(m: &crate::types::ChatMessage) -> ChatMessage {
    ChatMessage {
        role: m.role.clone(),
        content: m.content.clone(),
        tool_calls: if m.tool_calls.is_empty() {
            None
        } else {
            Some(
                m.tool_calls
                    .iter()
                    .map(|c| crate::format::ToolCall::new(&c.id, &c.name, &c.arguments))
                    .collect(),
            )
        },
        tool_call_id: m.tool_call_id.clone(),
        tool_name: m.tool_name.clone(),
        ..Default::default()
    }
}
