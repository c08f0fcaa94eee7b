//! Reading a JSONL file backwards from its end (or from any byte offset), one line at a time:
//! the questions a resumed task asks (its context's last message, the tool calls still pending
//! at its end, which history lines current.jsonl lacks) only need the last few lines, so they
//! cost the same whatever the file's size.
//!
//! Memory: one read block ([`BLOCK`]) plus the longest line returned.

use std::fmt;
use std::io::{self, Read, Seek, SeekFrom};

use serde::de::DeserializeOwned;

/// Bytes read per step backwards (doubled while a line is longer, up to [`MAX_BLOCK`]).
pub const BLOCK: usize = 64 * 1024;
/// Largest single read.
pub const MAX_BLOCK: usize = 4 * 1024 * 1024;

/// Why reading a file backwards failed. `Display` names the file and the byte offset of the
/// line (line numbers are unknown when reading from the end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailError {
    /// Reading failed (OS error text).
    Io {
        /// The file, as shown in messages.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// The line starting at byte `offset` is not UTF-8 or not the expected JSON shape.
    Invalid {
        /// The file, as shown in messages.
        file: String,
        /// Byte offset where the line starts.
        offset: u64,
        /// What is wrong.
        message: String,
    },
}

impl fmt::Display for TailError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TailError::Io { file, message } => write!(f, "reading {file}: {message}"),
            TailError::Invalid {
                file,
                offset,
                message,
            } => write!(f, "{file}: the line at byte offset {offset}: {message}"),
        }
    }
}

impl std::error::Error for TailError {}

/// What [`BackwardLines::prev_line_bounded`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum BackLine<'a> {
    /// A non-blank line: `(offset, bytes)`, as [`BackwardLines::prev_line`].
    Line(u64, &'a [u8]),
    /// A line longer than the caller holds, not kept.
    Long {
        /// Where the line starts.
        offset: u64,
        /// Where it ends (before its `\n`; a `\r` before that is included).
        end: u64,
    },
}

/// The lines of a file, last first. [`BackwardLines::prev_line`] yields `(offset, bytes)` of
/// each non-blank line before the current position: the byte offset where the line starts and
/// its bytes without the terminator (`\n` or `\r\n`). A last line without `\n` counts as a
/// line.
pub struct BackwardLines<R> {
    reader: R,
    file: String,
    /// File bytes `[start, end)`; `end` is where the next line returned ends.
    data: Vec<u8>,
    start: u64,
    end: u64,
    block: usize,
}

impl<R: Read + Seek> BackwardLines<R> {
    /// Lines of `reader` ending at byte `end` (the file's size to read from its end). `file`
    /// names it in errors.
    pub fn new(reader: R, end: u64, file: impl Into<String>) -> Self {
        BackwardLines {
            reader,
            file: file.into(),
            data: Vec::new(),
            start: end,
            end,
            block: BLOCK,
        }
    }

    /// Lines of `reader` from its end.
    pub fn from_end(mut reader: R, file: impl Into<String>) -> Result<Self, TailError> {
        let file = file.into();
        let end = reader
            .seek(SeekFrom::End(0))
            .map_err(|e| io_err(&file, e))?;
        Ok(Self::new(reader, end, file))
    }

    /// The file, as shown in messages.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Byte offset where the lines returned so far start (the file's size before the first
    /// call).
    pub fn position(&self) -> u64 {
        self.end
    }

    /// Whether the byte before the current position is `\n` (false at the start of the file).
    pub fn ends_with_newline(&mut self) -> Result<bool, TailError> {
        if self.end == 0 {
            return Ok(false);
        }
        if self.start == self.end {
            self.read_more()?;
        }
        Ok(self.data[(self.end - 1 - self.start) as usize] == b'\n')
    }

    /// The previous non-blank line, `None` at the start of the file.
    pub fn prev_line(&mut self) -> Result<Option<(u64, &[u8])>, TailError> {
        loop {
            if self.end == 0 {
                return Ok(None);
            }
            if self.start == self.end {
                self.read_more()?;
            }
            // The line ends before its `\n` (a last line may have none).
            let terminated = self.data[(self.end - 1 - self.start) as usize] == b'\n';
            let line_end = self.end - u64::from(terminated);
            let newline = loop {
                let rel = (line_end - self.start) as usize;
                if let Some(i) = self.data[..rel].iter().rposition(|b| *b == b'\n') {
                    break Some(self.start + i as u64);
                }
                if self.start == 0 {
                    break None;
                }
                self.read_more()?;
            };
            let line_start = newline.map_or(0, |p| p + 1);
            self.end = line_start;
            let from = (line_start - self.start) as usize;
            let mut to = (line_end - self.start) as usize;
            if to > from && self.data[to - 1] == b'\r' {
                to -= 1;
            }
            if self.data[from..to].iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some((line_start, &self.data[from..to])));
        }
    }

    /// [`BackwardLines::prev_line`] for a caller that does not hold a line of more than `max`
    /// bytes: such a line is returned as [`BackLine::Long`] (its start found by reading
    /// backwards a block at a time, none of it kept; it is not checked for being blank).
    /// Memory: `max` and a block.
    pub fn prev_line_bounded(&mut self, max: usize) -> Result<Option<BackLine<'_>>, TailError> {
        loop {
            if self.end == 0 {
                return Ok(None);
            }
            if self.start == self.end {
                self.read_more()?;
            }
            let terminated = self.data[(self.end - 1 - self.start) as usize] == b'\n';
            let line_end = self.end - u64::from(terminated);
            let newline = loop {
                let rel = (line_end - self.start) as usize;
                if let Some(i) = self.data[..rel].iter().rposition(|b| *b == b'\n') {
                    break Some(self.start + i as u64);
                }
                if self.start == 0 {
                    break None;
                }
                if rel > max {
                    let offset = self.skip_to_line_start()?;
                    return Ok(Some(BackLine::Long {
                        offset,
                        end: line_end,
                    }));
                }
                self.read_more()?;
            };
            let line_start = newline.map_or(0, |p| p + 1);
            self.end = line_start;
            let from = (line_start - self.start) as usize;
            let mut to = (line_end - self.start) as usize;
            if to > from && self.data[to - 1] == b'\r' {
                to -= 1;
            }
            if self.data[from..to].iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some(BackLine::Line(line_start, &self.data[from..to])));
        }
    }

    /// For a line too long to hold, none of whose bytes in `data` hold a `\n`: finds where it
    /// starts reading backwards a [`BLOCK`] at a time (nothing kept) and moves there.
    fn skip_to_line_start(&mut self) -> Result<u64, TailError> {
        self.data.clear();
        self.block = BLOCK;
        let mut chunk = vec![0u8; BLOCK];
        let mut at = self.start;
        let line_start = loop {
            if at == 0 {
                break 0;
            }
            let n = at.min(BLOCK as u64) as usize;
            let from = at - n as u64;
            self.reader
                .seek(SeekFrom::Start(from))
                .and_then(|_| self.reader.read_exact(&mut chunk[..n]))
                .map_err(|e| io_err(&self.file, e))?;
            if let Some(i) = chunk[..n].iter().rposition(|b| *b == b'\n') {
                break from + i as u64 + 1;
            }
            at = from;
        };
        self.start = line_start;
        self.end = line_start;
        Ok(line_start)
    }

    /// The previous non-blank line parsed as `T`; errors name the file and the line's offset.
    pub fn prev_value<T: DeserializeOwned>(&mut self) -> Result<Option<(u64, T)>, TailError> {
        let file = self.file.clone();
        match self.prev_line()? {
            None => Ok(None),
            Some((offset, bytes)) => serde_json::from_slice(bytes)
                .map(|v| Some((offset, v)))
                .map_err(|e| TailError::Invalid {
                    file,
                    offset,
                    message: format!("not valid: {e}"),
                }),
        }
    }

    /// Prepends the block before `start` to `data` (and drops what lies after `end`).
    fn read_more(&mut self) -> Result<(), TailError> {
        let rel_end = (self.end - self.start) as usize;
        self.data.truncate(rel_end);
        let n = self.start.min(self.block as u64) as usize;
        if n == 0 {
            return Ok(());
        }
        let from = self.start - n as u64;
        let mut chunk = vec![0u8; n];
        self.reader
            .seek(SeekFrom::Start(from))
            .and_then(|_| self.reader.read_exact(&mut chunk))
            .map_err(|e| io_err(&self.file, e))?;
        chunk.extend_from_slice(&self.data);
        self.data = chunk;
        self.start = from;
        // A line longer than a block: read bigger steps next time.
        if rel_end > self.block / 2 {
            self.block = (self.block * 2).min(MAX_BLOCK);
        }
        Ok(())
    }
}

fn io_err(file: &str, e: io::Error) -> TailError {
    TailError::Io {
        file: file.to_string(),
        message: e.to_string(),
    }
}

/// The last non-blank line of `reader` before byte `end`, parsed as `T`, with its offset.
pub fn last_value_before<T: DeserializeOwned, R: Read + Seek>(
    reader: R,
    end: u64,
    file: &str,
) -> Result<Option<(u64, T)>, TailError> {
    BackwardLines::new(reader, end, file).prev_value()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn all_backwards(text: &str, block: usize) -> Vec<(u64, String)> {
        let mut r = BackwardLines::new(Cursor::new(text.as_bytes()), text.len() as u64, "f");
        r.block = block;
        let mut out = Vec::new();
        while let Some((off, line)) = r.prev_line().unwrap() {
            out.push((off, String::from_utf8(line.to_vec()).unwrap()));
        }
        out
    }

    fn all_forwards(text: &str) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        let mut off = 0u64;
        for raw in text.split_inclusive('\n') {
            let line = raw.strip_suffix('\n').unwrap_or(raw);
            let line = line.strip_suffix('\r').unwrap_or(line);
            if !line.bytes().all(|b| b.is_ascii_whitespace()) {
                out.push((off, line.to_string()));
            }
            off += raw.len() as u64;
        }
        out.reverse();
        out
    }

    #[test]
    fn lines_come_back_last_first_with_their_offsets_whatever_the_block_size() {
        let long = "y".repeat(300);
        let texts = [
            String::new(),
            "\n".to_string(),
            "a".to_string(),
            "a\n".to_string(),
            "a\nb".to_string(),
            "a\n\n  \nb\r\n".to_string(),
            format!("{long}\nshort\n{long}\n\n{long}"),
            "\n\nx\n\n".to_string(),
        ];
        for t in &texts {
            for block in [1, 2, 3, 7, 64, BLOCK] {
                assert_eq!(
                    all_backwards(t, block),
                    all_forwards(t),
                    "{t:?} block {block}"
                );
            }
        }
    }

    /// Bounded: a line over the bound comes back as its offsets, none of it held; the others
    /// as `prev_line` gives them.
    #[test]
    fn lines_over_the_bound_come_back_as_their_offsets() {
        let long = "y".repeat(300);
        let texts = [
            format!("{long}\nshort\n{long}\n\n{long}"),
            format!("a\n{long}\r\nb\n"),
            format!("{long}\n"),
            "a\n\n  \nb\r\n".to_string(),
        ];
        for t in &texts {
            for block in [1, 3, 64, BLOCK] {
                let mut r = BackwardLines::new(Cursor::new(t.as_bytes()), t.len() as u64, "f");
                r.block = block;
                let mut got = Vec::new();
                while let Some(l) = r.prev_line_bounded(100).unwrap() {
                    got.push(match l {
                        BackLine::Line(off, bytes) => {
                            (off, String::from_utf8(bytes.to_vec()).unwrap())
                        }
                        BackLine::Long { offset, end } => {
                            let line = &t[offset as usize..end as usize];
                            (offset, line.strip_suffix('\r').unwrap_or(line).to_string())
                        }
                    });
                    assert!(
                        r.data.len() <= 100 + 2 * block.max(BLOCK),
                        "{}",
                        r.data.len()
                    );
                }
                assert_eq!(got, all_forwards(t), "{t:?} block {block}");
            }
        }
    }

    #[test]
    fn values_parse_and_a_bad_line_is_named_by_offset() {
        let text = "{\"a\":1}\n{\"a\":2}\n{\"a\":\n";
        let mut r = BackwardLines::from_end(Cursor::new(text.as_bytes()), "x.jsonl").unwrap();
        let e = r.prev_value::<serde_json::Value>().unwrap_err();
        assert!(
            e.to_string()
                .starts_with("x.jsonl: the line at byte offset 16: not valid"),
            "{e}"
        );
        let v: (u64, serde_json::Value) = last_value_before(Cursor::new(text.as_bytes()), 16, "x")
            .unwrap()
            .unwrap();
        assert_eq!((v.0, v.1["a"].as_u64()), (8, Some(2)));
    }
}
