//! Streaming a JSONL file of chat messages into a JSON array, one line in memory at a time:
//! the core of a request format's `write-request`.
//!
//! - [`copy_chat_array`]: the fast path every builtin request format uses: lines read in large
//!   blocks, validated without building a value, their bytes copied (and reshaped only where
//!   the provider's shape differs, [`crate::shape`]);
//! - [`write_chat_array`]: the reference: every line parsed into a [`ChatMessage`], converted,
//!   re-serialised. Kept for tests, which check that both give the same request.

use std::io::{self, BufRead, Read, Seek, Write};

use serde::Serialize;

use crate::ChatMessage;
use crate::jsonl::{BlockLineReader, JsonlError, LineReader, NextLine};
use crate::long_line::{self, Limits, LongCopy};
use crate::raw;
use crate::shape::MessageShape;

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

pub use crate::jsonl::ArrayError;

/// Writes `[m1,m2,...]` to `out`, where `m` is `shape`'s JSON of each chat message line of
/// `messages` (the file `file`; blank lines skipped). Returns the number of messages written.
///
/// `messages` is read in blocks of [`crate::jsonl::BLOCK_BYTES`] (it needs no buffering of
/// its own); `out` should be buffered (e.g. a 64 KiB `BufWriter`): each message is written in
/// several small pieces. Each line is validated ([`raw::parse_line`]: UTF-8, JSON grammar,
/// [`ChatMessage`]'s fields and types) before any of it is written, and the output is
/// assembled from complete JSON values of the line, so it is valid JSON whatever the input
/// holds. Accepts and refuses exactly the lines [`write_chat_array`] does, and the output
/// parses to the same value.
///
/// Errors: [`ArrayError::Read`] naming the file and line of a line that is not a chat message
/// (same text as [`write_chat_array`]), [`ArrayError::Write`].
///
/// Memory: one block and one line; a line longer than the block (256 KiB) is not held but
/// copied through fixed buffers ([`crate::long_line`]: `messages` is seeked to copy its long
/// strings, and `shape` cloned in case the line must be read whole after all).
pub fn copy_chat_array<R, W, S>(
    messages: R,
    file: &str,
    out: &mut W,
    shape: &mut S,
) -> Result<u64, ArrayError>
where
    R: Read + Seek,
    W: Write,
    S: MessageShape + Clone,
{
    let lines = BlockLineReader::new(messages, file);
    copy_lines(lines, out, shape, long_line::LIMITS, &mut |_| {})
}

/// [`copy_chat_array`] over `lines`, a line longer than `limits.line` read as a long line
/// ([`crate::long_line`]); `copied` is told how each long line was copied.
pub(crate) fn copy_lines<R, W, S>(
    mut lines: BlockLineReader<R>,
    out: &mut W,
    shape: &mut S,
    limits: Limits,
    copied: &mut dyn FnMut(LongCopy),
) -> Result<u64, ArrayError>
where
    R: Read + Seek,
    W: Write,
    S: MessageShape + Clone,
{
    out.write_all(b"[").map_err(ArrayError::Write)?;
    let file = lines.file().to_string();
    let mut count = 0u64;
    loop {
        let (line, bytes) = match lines.next_bounded(limits.line).map_err(ArrayError::Read)? {
            None => break,
            Some(NextLine::Line(line, bytes)) => (line, bytes),
            Some(NextLine::Long { line, offset }) => {
                let how = long_line::copy_long(
                    &mut lines,
                    (line, offset),
                    limits,
                    count == 0,
                    out,
                    shape,
                )?;
                if how != LongCopy::Blank {
                    count += 1;
                }
                copied(how);
                continue;
            }
        };
        let message = raw::parse_line(bytes).map_err(|message| {
            ArrayError::Read(JsonlError::Invalid {
                file: file.clone(),
                line,
                message,
            })
        })?;
        if count > 0 {
            out.write_all(b",").map_err(ArrayError::Write)?;
        }
        shape.write_raw(&message, out).map_err(ArrayError::Write)?;
        count += 1;
    }
    out.write_all(b"]").map_err(ArrayError::Write)?;
    Ok(count)
}

/// The reference of [`copy_chat_array`]: writes `[m1,m2,...]` to `out`, where `m` is
/// `convert(message)` serialised as JSON for each chat message line of `messages` (the file
/// `file`; blank lines skipped). Returns the number of messages written.
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
    use crate::shape::openai::OpenAiShape;

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
        let fast = copy_chat_array(
            io::Cursor::new(input.as_bytes()),
            "current.jsonl",
            &mut Vec::new(),
            &mut OpenAiShape,
        )
        .unwrap_err();
        assert_eq!(fast.to_string(), err.to_string());
    }

    #[test]
    fn copy_writes_the_lines_bytes() {
        let input = "\n{\"role\":\"system\",\"content\":\"s\"}\r\n\n{\"role\":\"user\",\"content\":\"a \\\"q\\\"\\n\u{e9}\"}";
        let mut out = Vec::new();
        let n = copy_chat_array(
            io::Cursor::new(input),
            "c.jsonl",
            &mut out,
            &mut OpenAiShape,
        )
        .unwrap();
        assert_eq!(n, 2);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"a \\\"q\\\"\\n\u{e9}\"}]"
        );
    }

    #[test]
    fn copy_reports_bad_utf8_and_a_torn_last_line() {
        let bad: &[u8] =
            b"{\"role\":\"user\",\"content\":\"a\"}\n{\"role\":\"user\",\"content\":\"\xff\"}\n";
        let err = copy_chat_array(
            io::Cursor::new(bad),
            "c.jsonl",
            &mut Vec::new(),
            &mut OpenAiShape,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "c.jsonl line 2: not valid UTF-8");
        let torn = "{\"role\":\"user\",\"content\":\"a\"}\n\n{\"role\":\"user\",\"con";
        let err = copy_chat_array(
            io::Cursor::new(torn),
            "c.jsonl",
            &mut Vec::new(),
            &mut OpenAiShape,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("c.jsonl line 3: not valid: EOF while parsing"),
            "{err}"
        );
    }
}
