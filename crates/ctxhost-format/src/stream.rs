//! Streaming a JSONL file of chat messages into a JSON array, one line in memory at a time:
//! the core of a request format's `write-request`.

use std::fmt;
use std::io::{self, BufRead, Write};

use serde::Serialize;

use crate::ChatMessage;
use crate::jsonl::{JsonlError, LineReader};

/// A writer that counts the bytes written through it.
pub struct CountingWriter<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> CountingWriter<W> {
    /// Wraps `inner` with a count of 0.
    pub fn new(inner: W) -> Self {
        CountingWriter { inner, bytes: 0 }
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The wrapped writer.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Why [`write_chat_array`] failed.
#[derive(Debug)]
pub enum ArrayError {
    /// A line of the messages file could not be read or is not a chat message.
    Read(JsonlError),
    /// Writing the output failed.
    Write(io::Error),
}

impl fmt::Display for ArrayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArrayError::Read(e) => write!(f, "{e}"),
            ArrayError::Write(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ArrayError {}

/// Writes `[m1,m2,...]` to `out`, where `m` is `convert(message)` serialised as JSON for each
/// chat message line of `messages` (the file `file`; blank lines skipped). Returns the number
/// of messages written.
///
/// Every line is parsed and re-serialised, so the output is valid JSON whatever the input
/// holds. Errors: [`ArrayError::Read`] naming the file and line of a line that is not a chat
/// message, [`ArrayError::Write`].
pub fn write_chat_array<R, W, T>(
    messages: R,
    file: &str,
    out: &mut W,
    mut convert: impl FnMut(ChatMessage) -> T,
) -> Result<u64, ArrayError>
where
    R: BufRead,
    W: Write,
    T: Serialize,
{
    let mut lines = LineReader::new(messages, file);
    out.write_all(b"[").map_err(ArrayError::Write)?;
    let mut count = 0u64;
    while let Some((_, message)) = lines
        .next_value::<ChatMessage>()
        .map_err(ArrayError::Read)?
    {
        if count > 0 {
            out.write_all(b",").map_err(ArrayError::Write)?;
        }
        serde_json::to_writer(&mut *out, &convert(message))
            .map_err(|e| ArrayError::Write(e.into()))?;
        count += 1;
    }
    out.write_all(b"]").map_err(ArrayError::Write)?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_json_array_without_empty_elements() {
        let input = "\n{\"role\":\"system\",\"content\":\"s\"}\n\n{\"role\":\"user\",\"content\":\"a \\\"q\\\"\"}\n\n";
        let mut out = CountingWriter::new(Vec::new());
        let n = write_chat_array(input.as_bytes(), "c.jsonl", &mut out, |m| m).unwrap();
        assert_eq!(n, 2);
        assert_eq!(out.bytes(), out.into_inner().len() as u64);
        let mut out = Vec::new();
        write_chat_array(input.as_bytes(), "c.jsonl", &mut out, |m| m.role).unwrap();
        assert_eq!(out, b"[\"system\",\"user\"]");
    }

    #[test]
    fn empty_input_is_an_empty_array() {
        let mut out = Vec::new();
        assert_eq!(
            write_chat_array("\n\n".as_bytes(), "c", &mut out, |m| m).unwrap(),
            0
        );
        assert_eq!(out, b"[]");
    }

    #[test]
    fn a_non_chat_line_names_file_and_line() {
        let input = "{\"role\":\"user\",\"content\":\"a\"}\n[1,2]\n";
        let err = write_chat_array(input.as_bytes(), "current.jsonl", &mut Vec::new(), |m| m)
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("current.jsonl line 2: not valid:"),
            "{err}"
        );
    }
}
