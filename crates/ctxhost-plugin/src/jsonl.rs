//! JSONL files of the task directory, a line at a time (paths relative to the task directory,
//! which the host preopens as `.`): reading chat messages ([`read_messages`], [`MessageReader`]),
//! writing a new file ([`LineWriter`]) and appending one whole line ([`append_json_line`]).
//! Every line written has U+2028 / U+2029 escaped (`\u2028`, `\u2029`), as the host writes
//! them, so readers that split on them still see whole lines.
//! Errors are `plugin-error`s naming the file and, when reading, the 1-based line
//! (`current.jsonl line 3: not valid: missing field `role``).
//!
//! Whole files are never loaded: a 200 MB history costs one line of memory.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Write};

use crate::format::ChatMessage;
use crate::format::jsonl::{
    JsonlError, LineReader, escape_line_separators, to_line, write_text_message,
};
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

/// A buffered reader of `file`, or `None` when it does not exist.
pub fn open_if_exists(file: &str) -> Result<Option<BufReader<File>>, PluginError> {
    match File::open(file) {
        Ok(f) => Ok(Some(BufReader::new(f))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(format!("opening {file}"), e)),
    }
}

/// A line reader of `file` (blank lines skipped, line numbers counted), or `None` when the
/// file does not exist.
pub fn open_lines(file: &str) -> Result<Option<LineReader<BufReader<File>>>, PluginError> {
    Ok(open_if_exists(file)?.map(|reader| LineReader::new(reader, file)))
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
/// [`LineWriter::finish`] (which flushes and syncs) or [`LineWriter::finish_unsynced`]; a
/// writer dropped without either leaves a file the host must not use (delete it, e.g. with
/// [`crate::Cleanup`]).
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

    /// Writes `text` (one line of JSON text, without its `\n`; its U+2028 / U+2029 escaped)
    /// and a `\n`.
    pub fn line(&mut self, text: &str) -> Result<(), PluginError> {
        self.out
            .write_all(escape_line_separators(text).as_bytes())
            .and_then(|_| self.out.write_all(b"\n"))
            .map_err(|e| io_error(format!("writing {}", self.file), e))
    }

    /// Writes `value` as one JSON line (e.g. a [`ChatMessage`]).
    pub fn json(&mut self, value: &impl serde::Serialize) -> Result<(), PluginError> {
        let text = to_line(value).map_err(|e| {
            PluginError::Internal(format!("serialising a line of {}: {e}", self.file))
        })?;
        self.line(&text)
    }

    /// Writes the chat message line `{"role":<role>,"content":<the pieces joined>}` without
    /// joining the pieces ([`crate::format::jsonl::write_text_message`]: the same bytes as
    /// [`LineWriter::json`] of `ChatMessage::text(role, pieces.concat())`), so a message
    /// around a large text (a summary request around its chunk of the context) is never put
    /// together in memory.
    pub fn text_message(&mut self, role: &str, pieces: &[&str]) -> Result<(), PluginError> {
        write_text_message(&mut self.out, role, pieces)
            .map_err(|e| io_error(format!("writing {}", self.file), e))
    }

    /// Flushes and closes the file without syncing it: for temporaries, and for a
    /// compressor's output, which the host copies into current.jsonl and syncs itself.
    pub fn finish_unsynced(self) -> Result<(), PluginError> {
        self.flush().map(drop)
    }

    fn flush(self) -> Result<File, PluginError> {
        let file = self.file;
        self.out
            .into_inner()
            .map_err(|e| io_error(format!("writing {file}"), e.into_error()))
    }

    /// Flushes, syncs and closes the file.
    pub fn finish(self) -> Result<(), PluginError> {
        let file = self.file.clone();
        self.flush()?
            .sync_all()
            .map_err(|e| io_error(format!("syncing {file}"), e))
    }
}

/// Appends `value` as one whole JSON line to `file` (created if missing) and syncs it: the
/// line is built in memory and written with one `write_all`, so a reader never sees half a
/// line.
pub fn append_json_line(file: &str, value: &impl serde::Serialize) -> Result<(), PluginError> {
    let mut line = to_line(value)
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

/// A chat message line as the WIT record (`tool-calls` empty when the line has none).
impl From<ChatMessage> for crate::types::ChatMessage {
    fn from(m: ChatMessage) -> Self {
        crate::types::ChatMessage {
            role: m.role,
            content: m.content,
            tool_calls: m
                .tool_calls
                .unwrap_or_default()
                .into_iter()
                .map(|c| crate::types::ToolCall {
                    id: c.id,
                    name: c.function.name,
                    arguments: c.function.arguments,
                })
                .collect(),
            tool_call_id: m.tool_call_id,
            tool_name: m.tool_name,
            is_error: m.is_error,
            reasoning: m
                .reasoning
                .into_iter()
                .map(|r| crate::types::ReasoningItem {
                    provider: r.provider,
                    kind: r.kind,
                    data: r.data,
                })
                .collect(),
        }
    }
}

/// A WIT record as the chat message line (no `tool_calls` key when there are none).
impl From<crate::types::ChatMessage> for ChatMessage {
    fn from(m: crate::types::ChatMessage) -> Self {
        let calls: Vec<crate::format::ToolCall> = m
            .tool_calls
            .into_iter()
            .map(|c| crate::format::ToolCall::new(c.id, c.name, c.arguments))
            .collect();
        ChatMessage {
            role: m.role,
            content: m.content,
            tool_calls: (!calls.is_empty()).then_some(calls),
            tool_call_id: m.tool_call_id,
            tool_name: m.tool_name,
            is_error: m.is_error,
            reasoning: m
                .reasoning
                .into_iter()
                .map(|r| crate::format::ReasoningItem {
                    provider: r.provider,
                    kind: r.kind,
                    data: r.data,
                })
                .collect(),
        }
    }
}
