//! Streaming JSONL reading with line numbers, one line in memory at a time, and writing JSONL
//! lines that every reader splits the same way.
//!
//! Used by the components (message store, request formats) and the host alike: a file is read
//! through a [`BufRead`], blank lines (only whitespace) are skipped, and every error names the
//! file and the 1-based line number, e.g. `current.jsonl line 3: not valid: missing field
//! `role` at line 1 column 17`.
//!
//! Writing: [`to_line`] / [`write_line`] serialise one value as one line with
//! [`LineFormatter`], which writes U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR as the
//! escapes `\u2028` / `\u2029`. Both are legal unescaped inside a JSON string, but readers that
//! split text into lines on every Unicode line break (Python's `str.splitlines`, JavaScript
//! before ES2019) would cut such a line in two. [`escape_line_separators`] does the same to a
//! line that is already JSON text (copied from another file).

use std::borrow::Cow;
use std::fmt;
use std::io::{self, BufRead, Read, Write};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why reading a JSONL file failed. `Display` names the file and, where known, the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonlError {
    /// Reading failed (OS error text); `line` is the line being read, if any.
    Io {
        /// The file, as shown in messages.
        file: String,
        /// 1-based line number.
        line: Option<u64>,
        /// What is wrong.
        message: String,
    },
    /// Line `line` is not UTF-8 or not the expected JSON shape.
    Invalid {
        /// The file, as shown in messages.
        file: String,
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        message: String,
    },
}

impl fmt::Display for JsonlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonlError::Io {
                file,
                line: Some(line),
                message,
            } => {
                write!(f, "reading {file} line {line}: {message}")
            }
            JsonlError::Io {
                file,
                line: None,
                message,
            } => write!(f, "reading {file}: {message}"),
            JsonlError::Invalid {
                file,
                line,
                message,
            } => write!(f, "{file} line {line}: {message}"),
        }
    }
}

impl std::error::Error for JsonlError {}

/// The escape written for U+2028 LINE SEPARATOR.
const LS_ESCAPE: &[u8] = b"\\u2028";
/// The escape written for U+2029 PARAGRAPH SEPARATOR.
const PS_ESCAPE: &[u8] = b"\\u2029";

/// serde_json's compact formatter, except that U+2028 and U+2029 inside strings (keys
/// included) are written as `\u2028` / `\u2029`, so the line holds no character that any
/// reader takes for a line break. The JSON value is the same.
#[derive(Debug, Clone, Copy, Default)]
pub struct LineFormatter;

impl serde_json::ser::Formatter for LineFormatter {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut rest = fragment;
        while let Some(i) = rest.find(['\u{2028}', '\u{2029}']) {
            writer.write_all(&rest.as_bytes()[..i])?;
            // Both characters are 3 bytes in UTF-8: E2 80 A8 / E2 80 A9.
            writer.write_all(if rest.as_bytes()[i + 2] == 0xA8 {
                LS_ESCAPE
            } else {
                PS_ESCAPE
            })?;
            rest = &rest[i + 3..];
        }
        writer.write_all(rest.as_bytes())
    }
}

/// `value` as one JSONL line (no `\n`), written with [`LineFormatter`].
///
/// Errors: serde's, for a value that cannot be serialised (e.g. a map with non-string keys).
pub fn to_line<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let mut out = Vec::with_capacity(128);
    write_value(&mut out, value)?;
    // The formatter writes valid UTF-8 (serde_json's own output plus ASCII escapes).
    String::from_utf8(out).map_err(|e| serde_json::Error::io(io::Error::other(e)))
}

/// Writes `value` as one JSONL line and its `\n` to `writer` ([`LineFormatter`]).
pub fn write_line<W: Write + ?Sized, T: Serialize + ?Sized>(
    writer: &mut W,
    value: &T,
) -> serde_json::Result<()> {
    write_value(&mut *writer, value)?;
    writer.write_all(b"\n").map_err(serde_json::Error::io)
}

/// Writes `value` with [`LineFormatter`] (no line terminator).
pub fn write_value<W: Write, T: Serialize + ?Sized>(
    writer: W,
    value: &T,
) -> serde_json::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(writer, LineFormatter);
    value.serialize(&mut ser)
}

/// Writes the chat message line `{"role":<role>,"content":<the pieces joined>}` and its `\n`
/// to `out`: the same bytes as [`to_line`] of `ChatMessage::text(role, pieces.concat())`
/// (U+2028 / U+2029 escaped too), without joining the pieces. Each is escaped and written in
/// turn, so at most one piece's escaped copy is in memory. Errors: `out`'s.
pub fn write_text_message<W: Write + ?Sized>(
    out: &mut W,
    role: &str,
    pieces: &[&str],
) -> io::Result<()> {
    let mut escaped = Vec::new();
    let escape = |text: &str, escaped: &mut Vec<u8>| {
        escaped.clear();
        // A string always serialises (into a Vec, without error).
        write_value(&mut *escaped, text).map_err(io::Error::other)
    };
    out.write_all(b"{\"role\":")?;
    escape(role, &mut escaped)?;
    out.write_all(&escaped)?;
    out.write_all(b",\"content\":\"")?;
    for piece in pieces {
        escape(piece, &mut escaped)?;
        // `"…"`: JSON escapes each character alone, so the pieces' insides one after the
        // other are the inside of the whole text.
        out.write_all(&escaped[1..escaped.len() - 1])?;
    }
    out.write_all(b"\"}\n")
}

/// `line` (JSON text) with U+2028 / U+2029 replaced by their escapes. Outside strings JSON
/// text cannot hold either character, so this never changes the value; borrowed when there is
/// nothing to replace.
pub fn escape_line_separators(line: &str) -> Cow<'_, str> {
    if !line.contains(['\u{2028}', '\u{2029}']) {
        return Cow::Borrowed(line);
    }
    Cow::Owned(
        line.replace('\u{2028}', "\\u2028")
            .replace('\u{2029}', "\\u2029"),
    )
}

/// Reads a JSONL file line by line into one reused buffer.
///
/// [`LineReader::next_line`] yields `(line number, text)` for each non-blank line, the text
/// without its line terminator (`\n` or `\r\n`). Line numbers count every line, blank or not,
/// so they match what an editor shows.
///
/// A line is held whole in memory; for a file a component or a crash may have written, cap
/// it with [`LineReader::max_line_bytes`]: a longer line is then an error, read no further.
pub struct LineReader<R> {
    reader: R,
    file: String,
    buf: String,
    line: u64,
    max_line_bytes: Option<usize>,
}

impl<R: BufRead> LineReader<R> {
    /// A reader of `reader`; `file` is the name used in errors. Lines are not capped.
    pub fn new(reader: R, file: impl Into<String>) -> Self {
        LineReader {
            reader,
            file: file.into(),
            buf: String::new(),
            line: 0,
            max_line_bytes: None,
        }
    }

    /// Cap lines at `max` bytes (the terminator not counted): of a longer line no more than
    /// `max + 2` bytes are read, and [`LineReader::next_line`] fails with
    /// [`JsonlError::Invalid`] naming the file and line. The reader is not to be used after
    /// that error.
    pub fn max_line_bytes(mut self, max: usize) -> Self {
        self.max_line_bytes = Some(max);
        self
    }

    /// The file name given to [`LineReader::new`].
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The next non-blank line, or `None` at end of file.
    ///
    /// Errors: [`JsonlError::Invalid`] for a line that is not UTF-8 or is longer than the cap
    /// ([`LineReader::max_line_bytes`]), [`JsonlError::Io`] for a failed read.
    pub fn next_line(&mut self) -> Result<Option<(u64, &str)>, JsonlError> {
        loop {
            // The buffer is reused: its bytes are read into, then checked as UTF-8 in place.
            let mut bytes = std::mem::take(&mut self.buf).into_bytes();
            bytes.clear();
            self.line += 1;
            let read = match self.max_line_bytes {
                None => self.reader.read_until(b'\n', &mut bytes),
                // `\r\n` is not counted: up to max + 2 bytes make a line within the cap.
                Some(max) => (&mut self.reader)
                    .take(max as u64 + 2)
                    .read_until(b'\n', &mut bytes),
            }
            .map_err(|e| self.read_error(e))?;
            if read == 0 {
                return Ok(None);
            }
            if let Some(max) = self.max_line_bytes {
                let content = bytes
                    .strip_suffix(b"\n")
                    .map_or(&bytes[..], |l| l.strip_suffix(b"\r").unwrap_or(l));
                if content.len() > max {
                    return Err(JsonlError::Invalid {
                        file: self.file.clone(),
                        line: self.line,
                        message: format!("longer than {max} bytes; not read"),
                    });
                }
            }
            self.buf = String::from_utf8(bytes).map_err(|_| JsonlError::Invalid {
                file: self.file.clone(),
                line: self.line,
                message: "not valid UTF-8".to_string(),
            })?;
            if !self.buf.trim().is_empty() {
                break;
            }
        }
        Ok(Some((self.line, self.buf.trim_end_matches(['\n', '\r']))))
    }

    /// The next non-blank line parsed as a `T`, or `None` at end of file.
    ///
    /// Errors: as [`LineReader::next_line`], plus [`JsonlError::Invalid`] with serde's message
    /// when the line is not a `T`.
    pub fn next_value<T: DeserializeOwned>(&mut self) -> Result<Option<(u64, T)>, JsonlError> {
        let Some((line, text)) = self.next_line()? else {
            return Ok(None);
        };
        match serde_json::from_str(text) {
            Ok(value) => Ok(Some((line, value))),
            Err(e) => Err(JsonlError::Invalid {
                file: self.file.clone(),
                line,
                message: format!("not valid: {e}"),
            }),
        }
    }

    fn read_error(&self, e: io::Error) -> JsonlError {
        if e.kind() == io::ErrorKind::InvalidData {
            JsonlError::Invalid {
                file: self.file.clone(),
                line: self.line,
                message: "not valid UTF-8".to_string(),
            }
        } else {
            JsonlError::Io {
                file: self.file.clone(),
                line: Some(self.line),
                message: e.to_string(),
            }
        }
    }
}

/// Reads a JSONL file in large blocks and hands out its lines as slices of the block, without
/// copying them: the reader of the request build (one WASI read per block instead of one per
/// 8 KiB, no per-line copy).
///
/// Same contract as [`LineReader`]: [`BlockLineReader::next_line`] yields `(line number,
/// bytes)` for each non-blank line (blank = only whitespace, as `str::trim` sees it), without
/// its `\n` or `\r\n`; line numbers count every line; errors name the file and line. UTF-8 is
/// checked by the caller (e.g. [`crate::raw::parse_line`]), in the same pass as the rest.
/// The block grows to hold a line longer than it.
pub struct BlockLineReader<R> {
    reader: R,
    file: String,
    buf: Vec<u8>,
    /// Start of the unread part of `buf`.
    start: usize,
    /// End of the bytes read into `buf`.
    end: usize,
    eof: bool,
    line: u64,
    /// Offset in the file of `buf[0]`.
    base: u64,
    /// Offset in the file of the line last returned.
    line_offset: u64,
    /// Where in `buf` the line last returned is.
    last: (usize, usize),
}

/// What [`BlockLineReader::next_bounded`] found.
#[derive(Debug)]
pub enum NextLine<'a> {
    /// A non-blank line: (line number, bytes), as [`BlockLineReader::next_line`].
    Line(u64, &'a [u8]),
    /// A line longer than the caller holds, not read yet: its line number and byte offset in
    /// the file.
    Long {
        /// The line number (from 1).
        line: u64,
        /// Where the line starts in the file.
        offset: u64,
    },
}

/// A line of [`BlockLineReader::next_line_at`]: `(line number, byte offset in the file, bytes)`.
pub type LineAt<'a> = (u64, u64, &'a [u8]);

/// What [`BlockLineReader::next_bounded_at`] found.
#[derive(Debug)]
pub enum NextLineAt<'a> {
    /// A non-blank line with its offset, as [`BlockLineReader::next_line_at`].
    Line(LineAt<'a>),
    /// A line longer than the caller holds, not read yet ([`NextLine::Long`]).
    Long {
        /// The line number (from 1).
        line: u64,
        /// Where the line starts in the file.
        offset: u64,
    },
}

/// Bytes a [`BlockLineReader`] reads at a time: wasmtime's WASI hands out at most 64 KiB per
/// read, so a block holds a few reads' worth of lines.
pub const BLOCK_BYTES: usize = 256 * 1024;

impl<R: Read> BlockLineReader<R> {
    /// A reader of `reader` (read in blocks of [`BLOCK_BYTES`]; no buffering needed below it);
    /// `file` is the name used in errors.
    pub fn new(reader: R, file: impl Into<String>) -> Self {
        Self::with_block_bytes(reader, file, BLOCK_BYTES)
    }

    /// [`BlockLineReader::new`] with blocks of `block` bytes (at least 1) instead of
    /// [`BLOCK_BYTES`].
    pub fn with_block_bytes(reader: R, file: impl Into<String>, block: usize) -> Self {
        BlockLineReader {
            reader,
            file: file.into(),
            buf: vec![0; block.max(1)],
            start: 0,
            end: 0,
            eof: false,
            line: 0,
            base: 0,
            line_offset: 0,
            last: (0, 0),
        }
    }

    /// This reader with blocks of `block` bytes (at least 1) instead of [`BLOCK_BYTES`]; call
    /// it before the first read.
    pub fn block_bytes(mut self, block: usize) -> Self {
        self.buf = vec![0; block.max(1)];
        self
    }

    /// A reader of `reader` already at byte `offset` of the file (offsets reported by
    /// [`BlockLineReader::line_offset`] count from the file's start; line numbers from 1 at
    /// `offset`).
    pub fn at_offset(reader: R, file: impl Into<String>, offset: u64) -> Self {
        BlockLineReader {
            base: offset,
            line_offset: offset,
            ..BlockLineReader::new(reader, file)
        }
    }

    /// The byte offset in the file where the line last returned by
    /// [`BlockLineReader::next_line`] starts (the same offset
    /// [`crate::tail::BackwardLines::prev_line`] gives for it).
    pub fn line_offset(&self) -> u64 {
        self.line_offset
    }

    /// The file name given to [`BlockLineReader::new`].
    pub fn file(&self) -> &str {
        &self.file
    }

    /// [`BlockLineReader::next_line`] with the line's byte offset.
    pub fn next_line_at(&mut self) -> Result<Option<LineAt<'_>>, JsonlError> {
        match self.next_line()? {
            None => Ok(None),
            Some((line, _)) => Ok(Some((line, self.line_offset, self.last_line()))),
        }
    }

    /// The bytes of the line last returned.
    fn last_line(&self) -> &[u8] {
        &self.buf[self.last.0..self.last.1]
    }

    /// The next non-blank line as bytes (not yet checked to be UTF-8), or `None` at end of
    /// file.
    ///
    /// Errors: [`JsonlError::Io`] for a failed read.
    pub fn next_line(&mut self) -> Result<Option<(u64, &[u8])>, JsonlError> {
        match self.next_bounded(usize::MAX)? {
            None => Ok(None),
            Some(NextLine::Line(line, _)) => Ok(Some((line, self.last_line()))),
            // Not reached: a line only stops the reader past `usize::MAX` bytes.
            Some(NextLine::Long { .. }) => Err(JsonlError::Io {
                file: self.file.clone(),
                line: Some(self.line),
                message: "line too long to hold".to_string(),
            }),
        }
    }

    /// [`BlockLineReader::next_line`] for a caller that does not hold a line of more than
    /// `max` bytes (at least the block size is held anyway): such a line is returned as
    /// [`NextLine::Long`], with none of its bytes consumed yet, and the caller must then read
    /// it with [`BlockLineReader::read_long_line`] before asking for the next line. A long
    /// line is not checked for being blank (the caller's reading of it decides).
    ///
    /// Errors: [`JsonlError::Io`] for a failed read.
    pub fn next_bounded(&mut self, max: usize) -> Result<Option<NextLine<'_>>, JsonlError> {
        let (from, to) = loop {
            let Some((from, to, next)) = self.next_raw_line(max)? else {
                return Ok(None);
            };
            if next == usize::MAX {
                self.line += 1;
                self.line_offset = self.base + from as u64;
                return Ok(Some(NextLine::Long {
                    line: self.line,
                    offset: self.line_offset,
                }));
            }
            self.line += 1;
            self.start = next;
            let mut to = to;
            while to > from && self.buf[to - 1] == b'\r' {
                to -= 1;
            }
            if !is_blank(&self.buf[from..to]) {
                break (from, to);
            }
        };
        self.line_offset = self.base + from as u64;
        self.last = (from, to);
        Ok(Some(NextLine::Line(self.line, &self.buf[from..to])))
    }

    /// [`BlockLineReader::next_bounded`] with a line's byte offset.
    ///
    /// Errors: [`JsonlError::Io`] for a failed read.
    pub fn next_bounded_at(&mut self, max: usize) -> Result<Option<NextLineAt<'_>>, JsonlError> {
        match self.next_bounded(max)? {
            None => Ok(None),
            Some(NextLine::Line(line, _)) => Ok(Some(NextLineAt::Line((
                line,
                self.line_offset,
                self.last_line(),
            )))),
            Some(NextLine::Long { line, offset }) => Ok(Some(NextLineAt::Long { line, offset })),
        }
    }

    /// Reads the rest of the line [`BlockLineReader::next_bounded`] returned as
    /// [`NextLine::Long`], handing its bytes to `sink` a block at a time (without its `\n`;
    /// a `\r` before it is handed on), and returns the line's length in bytes. The reader is
    /// then at the next line.
    ///
    /// Errors: [`JsonlError::Io`] for a failed read.
    pub fn read_long_line(&mut self, mut sink: impl FnMut(&[u8])) -> Result<u64, JsonlError> {
        let mut length = 0u64;
        loop {
            let unread = &self.buf[self.start..self.end];
            if let Some(at) = memchr_newline(unread) {
                sink(&unread[..at]);
                self.start += at + 1;
                return Ok(length + at as u64);
            }
            sink(unread);
            length += unread.len() as u64;
            self.base += self.end as u64;
            self.start = 0;
            self.end = 0;
            if self.eof {
                return Ok(length);
            }
            self.fill()?;
        }
    }

    /// The reader below (e.g. to seek in it; its position must be restored before the next
    /// read through `self`).
    pub fn reader_mut(&mut self) -> &mut R {
        &mut self.reader
    }

    /// The next line's bytes as `(from, to, start of the line after)` in `buf`, `to`
    /// excluding the `\n`; `None` at end of file; `(from, _, usize::MAX)` when the line is
    /// longer than `max` and the block is full (nothing consumed).
    fn next_raw_line(&mut self, max: usize) -> Result<Option<(usize, usize, usize)>, JsonlError> {
        let mut searched = self.start;
        loop {
            if let Some(at) = memchr_newline(&self.buf[searched..self.end]) {
                let newline = searched + at;
                return Ok(Some((self.start, newline, newline + 1)));
            }
            searched = self.end;
            if self.eof {
                if self.start == self.end {
                    return Ok(None);
                }
                return Ok(Some((self.start, self.end, self.end)));
            }
            // Make room: move the partial line to the front, grow when it fills the block.
            if self.start > 0 {
                self.base += self.start as u64;
                self.buf.copy_within(self.start..self.end, 0);
                searched -= self.start;
                self.end -= self.start;
                self.start = 0;
            }
            if self.end == self.buf.len() {
                if self.end >= max {
                    return Ok(Some((0, self.end, usize::MAX)));
                }
                let grown = self.buf.len() * 2;
                self.buf.resize(grown, 0);
            }
            self.fill()?;
        }
    }

    /// One read into the free end of `buf` (sets `eof` at the end of the file).
    fn fill(&mut self) -> Result<(), JsonlError> {
        loop {
            match self.reader.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(JsonlError::Io {
                        file: self.file.clone(),
                        line: Some(self.line + 1),
                        message: e.to_string(),
                    });
                }
            }
            return Ok(());
        }
    }
}

/// Whether `bytes` is only whitespace, as `str::trim` sees it (not UTF-8 is not blank). A
/// line whose first non-space byte is `{` (a JSON object) is decided without decoding it.
pub(crate) fn is_blank(bytes: &[u8]) -> bool {
    match bytes.iter().position(|b| !b.is_ascii_whitespace()) {
        None => true,
        Some(i) if bytes[i] == b'{' => false,
        Some(_) => std::str::from_utf8(bytes).is_ok_and(|t| t.trim().is_empty()),
    }
}

/// The index of the first `\n` in `bytes`, 8 bytes at a time.
fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES << 7;
    let mut chunks = bytes.chunks_exact(8);
    let mut offset = 0;
    for chunk in chunks.by_ref() {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word) ^ (ONES * b'\n' as u64);
        // The lowest byte flagged by the zero-byte test is exact (borrows only run upwards).
        let zero = word.wrapping_sub(ONES) & !word & HIGH;
        if zero != 0 {
            return Some(offset + zero.trailing_zeros() as usize / 8);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|b| *b == b'\n')
        .map(|i| offset + i)
}

/// Calls `f(line number, value)` for every non-blank line of `reader` parsed as a `T`;
/// returns how many values were read.
///
/// Stops at the first error: a line that does not parse ([`JsonlError`], converted into `E`)
/// or an error returned by `f`.
pub fn for_each_line<T, R, E>(
    reader: R,
    file: &str,
    mut f: impl FnMut(u64, T) -> Result<(), E>,
) -> Result<u64, E>
where
    T: DeserializeOwned,
    R: BufRead,
    E: From<JsonlError>,
{
    let mut lines = LineReader::new(reader, file);
    let mut count = 0;
    while let Some((line, value)) = lines.next_value::<T>()? {
        f(line, value)?;
        count += 1;
    }
    Ok(count)
}

/// Why writing a JSON array of chat messages from a JSONL file failed
/// ([`crate::stream::write_chat_array`] and the long-line copy of [`crate::long_line`]).
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

#[cfg(test)]
mod tests {

    #[test]
    fn a_text_message_written_in_pieces_is_the_line_of_the_joined_text() {
        let cases: &[&[&str]] = &[
            &[],
            &[""],
            &["plain"],
            &[
                "Summarise:\n\n",
                "Partial summaries:\n\n",
                "a \"quote\" \\ back\tslash",
                "",
            ],
            &[
                "ctrl \u{1} \u{1f} ",
                "sep \u{2028} \u{2029} ",
                "é 上下文 😀",
                "\r\n",
            ],
        ];
        for pieces in cases {
            let mut out = Vec::new();
            write_text_message(&mut out, "user", pieces).unwrap();
            let whole = crate::ChatMessage::text("user", pieces.concat());
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!("{}\n", to_line(&whole).unwrap()),
                "{pieces:?}"
            );
        }
    }

    use super::*;
    use crate::ChatMessage;

    #[test]
    fn skips_blank_lines_and_counts_every_line() {
        let input = "{\"role\":\"user\",\"content\":\"a\"}\n\n  \r\n{\"role\":\"user\",\"content\":\"b\"}\r\n";
        let mut seen = Vec::new();
        let n =
            for_each_line::<ChatMessage, _, JsonlError>(input.as_bytes(), "c.jsonl", |line, m| {
                seen.push((line, m.content.unwrap()));
                Ok(())
            })
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(seen, vec![(1, "a".to_string()), (4, "b".to_string())]);
    }

    #[test]
    fn last_line_without_newline_is_read() {
        let mut r = LineReader::new("x\ny".as_bytes(), "f");
        assert_eq!(r.next_line().unwrap(), Some((1, "x")));
        assert_eq!(r.next_line().unwrap(), Some((2, "y")));
        assert_eq!(r.next_line().unwrap(), None);
    }

    #[test]
    fn malformed_line_names_file_and_line() {
        let input = "{\"role\":\"user\",\"content\":\"a\"}\n{\"role\":\"us";
        let err = for_each_line::<ChatMessage, _, JsonlError>(
            input.as_bytes(),
            "current.jsonl",
            |_, _| Ok(()),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("current.jsonl line 2: not valid: "),
            "{text}"
        );
        assert!(matches!(err, JsonlError::Invalid { line: 2, .. }));
    }

    #[test]
    fn line_separators_are_escaped_and_round_trip() {
        let text = "a\u{2028}b\u{2029}c — ok\n\"q\"";
        let m = ChatMessage::text("user", text);
        let line = to_line(&m).unwrap();
        assert!(!line.contains(['\u{2028}', '\u{2029}']), "{line}");
        assert!(
            line.contains("a\\u2028b\\u2029c — ok\\n\\\"q\\\""),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<ChatMessage>(&line).unwrap(), m);
        // The same bytes as serde_json's compact output when there is nothing to escape.
        let plain = ChatMessage::text("user", "plain é 上");
        assert_eq!(
            to_line(&plain).unwrap(),
            serde_json::to_string(&plain).unwrap()
        );
        // Keys are strings too; a line read back from Python-style splitting stays whole.
        let map: std::collections::BTreeMap<String, u8> = [("k\u{2028}".to_string(), 1)].into();
        assert_eq!(to_line(&map).unwrap(), "{\"k\\u2028\":1}");
        let mut out = Vec::new();
        write_line(&mut out, &m).unwrap();
        assert_eq!(out, format!("{line}\n").into_bytes());
        // Raw JSON text from elsewhere.
        let raw = serde_json::to_string(&m).unwrap();
        assert!(raw.contains('\u{2028}'));
        assert_eq!(escape_line_separators(&raw), line);
        assert!(matches!(escape_line_separators(&line), Cow::Borrowed(_)));
    }

    #[test]
    fn invalid_utf8_is_invalid_input() {
        let input: &[u8] = b"{\"role\":\"user\"}\n\xff\xfe\n";
        let mut r = LineReader::new(input, "m.jsonl");
        r.next_line().unwrap();
        let err = r.next_line().unwrap_err();
        assert_eq!(err.to_string(), "m.jsonl line 2: not valid UTF-8");
    }

    #[test]
    fn a_line_over_the_cap_is_an_error_naming_file_and_line_and_is_not_read_whole() {
        // Lines of exactly the cap pass, with `\n` or `\r\n`, last line or not.
        let input = "abcd\n\nefgh\r\nijkl";
        let mut r = LineReader::new(input.as_bytes(), "f").max_line_bytes(4);
        assert_eq!(r.next_line().unwrap(), Some((1, "abcd")));
        assert_eq!(r.next_line().unwrap(), Some((3, "efgh")));
        assert_eq!(r.next_line().unwrap(), Some((4, "ijkl")));
        assert_eq!(r.next_line().unwrap(), None);

        // A huge line: an error after reading at most cap + 2 bytes of it.
        struct Counting<R>(R, usize);
        impl<R: Read> Read for Counting<R> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.0.read(buf)?;
                self.1 += n;
                Ok(n)
            }
        }
        let huge = format!("{{}}\n{}\n", "x".repeat(1 << 20));
        let mut counted = Counting(huge.as_bytes(), 0);
        let mut r = LineReader::new(
            io::BufReader::with_capacity(16, &mut counted),
            "current.jsonl",
        )
        .max_line_bytes(64);
        assert_eq!(r.next_line().unwrap(), Some((1, "{}")));
        let err = r.next_line().unwrap_err();
        assert_eq!(
            err.to_string(),
            "current.jsonl line 2: longer than 64 bytes; not read"
        );
        drop(r);
        assert!(counted.1 <= 3 + 66 + 16, "{} bytes read", counted.1);
        // A cut in the middle of a UTF-8 character is still reported as too long.
        let mut r = LineReader::new("ééé\n".as_bytes(), "f").max_line_bytes(3);
        assert!(
            r.next_line()
                .unwrap_err()
                .to_string()
                .contains("longer than 3 bytes")
        );
    }
}
