//! JSONL files of the task directory (paths relative to the preopened task directory), a
//! line at a time: opening for reading ([`open_lines`], [`require_lines`]), writing a new file
//! ([`LineWriter`]) and appending one whole line ([`append_json_line`]). Every line written has
//! U+2028 / U+2029 escaped (`ctxhost_format::jsonl::to_line`), so readers that split on them
//! see whole lines. Errors are `plugin-error`s naming the file.
//!
//! Compiled into the components that keep JSONL files with
//! `#[path = "../../shared/jsonl_files.rs"] mod jsonl_files;`, next to
//! `shared/plugin_error.rs` (as `mod plugin_error`), whose `io_error` it uses.

// Each component uses only some of these helpers.
#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Write};

use ctxhost_format::jsonl::{LineReader, escape_line_separators, to_line};

use crate::ctxhost::plugin::types::PluginError;
use crate::plugin_error::io_error;

/// A buffered reader of `file`, or `None` when it does not exist.
pub fn open_if_exists(file: &str) -> Result<Option<BufReader<File>>, PluginError> {
    match File::open(file) {
        Ok(f) => Ok(Some(BufReader::new(f))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(format!("opening {file}"), e)),
    }
}

/// A line reader of `file`, or `None` when it does not exist.
pub fn open_lines(file: &str) -> Result<Option<LineReader<BufReader<File>>>, PluginError> {
    Ok(open_if_exists(file)?.map(|reader| LineReader::new(reader, file)))
}

/// A line reader of `file`, which must exist (`io` error `opening <file>: no such file`).
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

    /// Writes `text` (JSON text, its U+2028 / U+2029 escaped) and a `\n`.
    pub fn line(&mut self, text: &str) -> Result<(), PluginError> {
        self.out
            .write_all(escape_line_separators(text).as_bytes())
            .and_then(|_| self.out.write_all(b"\n"))
            .map_err(|e| io_error(format!("writing {}", self.file), e))
    }

    /// Writes `value` as one JSON line.
    pub fn json(&mut self, value: &impl serde::Serialize) -> Result<(), PluginError> {
        let text = to_line(value).map_err(|e| {
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

/// Appends `value` as one whole JSON line to `file` (created if missing): the line is built
/// in memory and written with one `write_all`, so a reader never sees half a line.
pub fn append_json_line(file: &str, value: &impl serde::Serialize) -> Result<(), PluginError> {
    append(file, value).map(drop)
}

/// [`append_json_line`], then syncs the file's data to disk.
pub fn append_json_line_synced(
    file: &str,
    value: &impl serde::Serialize,
) -> Result<(), PluginError> {
    append(file, value)?
        .sync_data()
        .map_err(|e| io_error(format!("syncing {file}"), e))
}

/// Appends the line; returns the file, still open.
fn append(file: &str, value: &impl serde::Serialize) -> Result<File, PluginError> {
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
    Ok(f)
}
