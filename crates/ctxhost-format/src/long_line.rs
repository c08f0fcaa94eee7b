//! A chat message line too long to hold (a 20 MB assistant reply in current.jsonl) copied into
//! a request through fixed buffers, with exactly the bytes the whole-line path writes.
//!
//! The line is read a block at a time ([`crate::jsonl::BlockLineReader::read_long_line`]) by a
//! [`Compactor`], which keeps a small copy of it: every string longer than
//! [`Limits::string`] is checked as it goes by (UTF-8, escapes, UTF-16 surrogates paired, no
//! control characters: what serde_json requires to decode it into a `String`) and replaced by
//! a placeholder string `"\/\/ctxhost-long-N\/\/"`, its place in the file remembered; runs of
//! JSON white space outside strings become one space. The compact line is validated and
//! shaped as usual ([`crate::raw::parse_line`], [`crate::shape::MessageShape::write_raw`]) into
//! a small buffer, and each placeholder in that output is replaced by the original string's
//! bytes, copied from the file (the reader is seeked there and back) 64 KiB at a time.
//!
//! The copy is the whole-line path's output only when the shape copied each long string's
//! JSON text verbatim, once. So the whole line is read and held after all (the previous
//! behaviour, memory as long as the line) when: the shape decoded a placeholder
//! ([`crate::raw::RawStr::value`] notes it), the output does not hold each placeholder exactly
//! once in its quoted form, the line already holds the placeholder's text, a long string is
//! not valid, the compact line is refused by [`crate::raw::parse_line`] (so the error text,
//! columns included, is the reference's), it has no long string, or it grows past
//! [`Limits::compact`] (a line of many short values). Of the builtin shapes, OpenAI's copies
//! every string; Ollama decodes tool-call arguments and prompted tools decodes a tool result's
//! or a tool-calling message's text, so those fall back when that text is long.

#[cfg(test)]
use std::cell::Cell;
use std::io::{self, Read, Seek, SeekFrom, Write};

use crate::jsonl::{self, ArrayError, BlockLineReader, JsonlError};
use crate::raw;
use crate::shape::MessageShape;

pub(crate) use crate::placeholder::take_decoded;
use crate::placeholder::{MARKER, MARKER_END};

/// Bytes copied from the file per read when a long string is spliced into the output.
const COPY_BYTES: usize = 64 * 1024;

#[cfg(test)]
thread_local! {
    /// Long lines spliced by [`LongLine::splice`] on this thread (tests check the path is
    /// taken).
    pub(crate) static SPLICED: Cell<u64> = const { Cell::new(0) };
}

/// The sizes that decide how a line is read, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A line longer than this (and than the reader's block) is read as a long line.
    pub line: usize,
    /// In a long line, a string longer than this (its opening quote included) becomes a
    /// placeholder.
    pub string: usize,
    /// A long line's compact copy may grow to this before the line falls back.
    pub compact: usize,
}

/// Longest line read whole (then parsed from memory), bytes: 256 KiB. A longer one is parsed
/// as it is read, its text and reasoning skipped (the host's history counts): slower, but nothing
/// of it is held (the buffer is what a long line costs the task process).
pub const MAX_WHOLE_LINE_BYTES: usize = 256 * 1024;

/// Reads one line into `buf` (its `\n` included), but stops after more than `cap` bytes:
/// returns the bytes read (0 at the end).
pub fn read_line_capped(
    reader: &mut impl io::BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
) -> io::Result<usize> {
    let mut total = 0;
    loop {
        let (done, used) = {
            let available = match reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                return Ok(total);
            }
            let room = cap + 1 - buf.len().min(cap + 1);
            match available.iter().take(room).position(|b| *b == b'\n') {
                Some(i) => {
                    buf.extend_from_slice(&available[..=i]);
                    (true, i + 1)
                }
                None => {
                    let used = available.len().min(room);
                    buf.extend_from_slice(&available[..used]);
                    (buf.len() > cap, used)
                }
            }
        };
        reader.consume(used);
        total += used;
        if done {
            return Ok(total);
        }
    }
}

/// The limits of the request build: lines over one block (256 KiB), strings over 16 KiB,
/// compact copies up to 256 KiB.
pub const LIMITS: Limits = Limits {
    line: jsonl::BLOCK_BYTES,
    string: 16 * 1024,
    compact: 256 * 1024,
};

/// How a long line was copied (for tests and measurements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongCopy {
    /// Through the compact copy and fixed buffers.
    Spliced,
    /// The whole line was read and held (see the module doc for when).
    Whole,
    /// The line was blank (only white space): nothing written.
    Blank,
}

/// The scanner of a long line's bytes (see the module doc): feed it the line's bytes in
/// order ([`Compactor::push`]), then take the compact line ([`Compactor::finish`]). It also
/// counts each long string's estimated tokens ([`crate::tokens::estimate_tokens`] of its
/// decoded text), for readers that need them without the text.
pub struct Compactor {
    limits: Limits,
    /// The compact line.
    compact: Vec<u8>,
    /// File offsets `[from, to)` of each long string, quotes included.
    spans: Vec<(u64, u64)>,
    /// The quarter tokens of each long string's decoded text.
    quarters: Vec<u64>,
    /// Whether every long string so far has a character that is not white space
    /// (`char::is_whitespace`, what `str::trim` strips).
    long_non_blank: bool,
    /// File offset of the next byte.
    pos: u64,
    /// The line cannot be compacted (fall back).
    failed: bool,
    /// The compact copy outgrew [`Limits::compact`] (the line's validity is not known).
    overflow: bool,
    /// The last byte outside strings was white space.
    space: bool,
    string: Option<StringState>,
}

/// Where a [`Compactor`] is inside a string.
struct StringState {
    /// Index of its opening quote in `compact`.
    at: usize,
    /// File offset of its opening quote.
    from: u64,
    /// Longer than [`Limits::string`]: no longer copied.
    long: bool,
    escape: Escape,
    /// After a leading surrogate: 1 = `\` expected, 2 = `u` expected, 3 = in its hex digits.
    low: u8,
    /// UTF-8 continuation bytes still expected, and the range of the next one.
    utf8: (u8, u8, u8),
    /// The character being decoded (UTF-8 bits so far, or a leading surrogate's value).
    code: u32,
    /// Quarter tokens of the text decoded so far ([`crate::tokens::char_quarter_tokens`]).
    quarters: u64,
    /// A character that is not white space was decoded.
    non_blank: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Escape {
    None,
    Backslash,
    /// `\u` with this many hex digits left and the value so far.
    Hex(u8, u32),
}

impl Compactor {
    /// A scanner of the line starting at file offset `offset` (only used to say where the long
    /// strings are).
    pub fn new(offset: u64, limits: Limits) -> Self {
        Compactor {
            limits,
            compact: Vec::new(),
            spans: Vec::new(),
            quarters: Vec::new(),
            long_non_blank: true,
            pos: offset,
            failed: false,
            overflow: false,
            space: false,
            string: None,
        }
    }

    /// Scans the next bytes of the line (without its `\n`).
    pub fn push(&mut self, bytes: &[u8]) {
        if self.failed {
            return;
        }
        for &c in bytes {
            if !self.byte(c) {
                self.failed = true;
                self.overflow = self.compact.len() > self.limits.compact;
                return;
            }
            self.pos += 1;
        }
    }

    /// Scans one byte; `false` when the line cannot be compacted.
    fn byte(&mut self, c: u8) -> bool {
        let Some(s) = self.string.as_mut() else {
            match c {
                b'"' => {
                    self.string = Some(StringState {
                        at: self.compact.len(),
                        from: self.pos,
                        long: false,
                        escape: Escape::None,
                        low: 0,
                        utf8: (0, 0, 0),
                        code: 0,
                        quarters: 0,
                        non_blank: false,
                    });
                    self.compact.push(c);
                    self.space = false;
                }
                b' ' | b'\t' | b'\n' | b'\r' => {
                    if !self.space {
                        self.compact.push(b' ');
                    }
                    self.space = true;
                }
                _ => {
                    self.compact.push(c);
                    self.space = false;
                }
            }
            return self.compact.len() <= self.limits.compact;
        };
        let Some(closing) = s.check(c) else {
            return false;
        };
        if closing {
            let long = s.long;
            let from = s.from;
            let quarters = s.quarters;
            let non_blank = s.non_blank;
            self.string = None;
            if long {
                self.long_non_blank &= non_blank;
                self.spans.push((from, self.pos + 1));
                self.quarters.push(quarters);
                self.compact.push(b'"');
                self.compact.extend_from_slice(MARKER);
                self.compact
                    .extend_from_slice((self.spans.len() - 1).to_string().as_bytes());
                self.compact.extend_from_slice(MARKER_END);
            }
            self.compact.push(b'"');
            return self.compact.len() <= self.limits.compact;
        }
        if !s.long {
            self.compact.push(c);
            if self.compact.len() - s.at > self.limits.string {
                self.compact.truncate(s.at);
                s.long = true;
            }
        }
        true
    }

    /// The compact line: the line with each long string replaced by the placeholder
    /// `"\/\/ctxhost-long-N\/\/"` (N from 0, in the line's order), or `None` when the line
    /// must be read whole instead: it has no long string, holds a placeholder's text of its
    /// own, is cut inside a string, has a long string serde_json would not decode, or its
    /// compact copy outgrew [`Limits::compact`].
    pub fn finish(&self) -> Option<&[u8]> {
        let ok = !self.failed && self.string.is_none() && !self.spans.is_empty();
        // The line's own text must not hold a placeholder's.
        (ok && count(&self.compact, MARKER) == self.spans.len()).then_some(&self.compact[..])
    }
}

/// What [`Compactor::judge`] can say of a line's JSON validity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged<'a> {
    /// The compact line is valid JSON (of the same shape: object, array...) exactly when the
    /// line is: parse it instead.
    Compact(&'a [u8]),
    /// The line is not valid JSON: a string of it is not valid, or it ends inside a string.
    Invalid,
    /// Not known: the compact copy outgrew [`Limits::compact`] (read the line whole).
    Unknown,
}

impl Compactor {
    /// Whether the line scanned is valid JSON, judged from the compact copy (white space
    /// runs and long strings do not change a line's validity or its value's type).
    pub fn judge(&self) -> Judged<'_> {
        if self.overflow {
            Judged::Unknown
        } else if self.failed || self.string.is_some() {
            Judged::Invalid
        } else {
            Judged::Compact(&self.compact)
        }
    }

    /// The index N of the long string whose placeholder is the JSON text `json` (exactly
    /// `"\/\/ctxhost-long-N\/\/"`, as in [`Compactor::finish`]'s line: no string of the line
    /// itself is spelled so).
    pub fn placeholder(&self, json: &[u8]) -> Option<usize> {
        let digits = json
            .strip_prefix(b"\"")?
            .strip_prefix(MARKER)?
            .strip_suffix(b"\"")?
            .strip_suffix(MARKER_END)?;
        let n: usize = std::str::from_utf8(digits).ok()?.parse().ok()?;
        (n < self.spans.len() && digits.iter().all(u8::is_ascii_digit)).then_some(n)
    }

    /// [`crate::tokens::estimate_tokens`] of the decoded text of long string `index`.
    pub fn tokens(&self, index: usize) -> u64 {
        self.quarters.get(index).copied().unwrap_or(0).div_ceil(4)
    }

    /// Whether every long string has a character that is not white space
    /// (`char::is_whitespace`, what `str::trim` strips): then a reader that asks only whether
    /// a text is blank gets the same answer from its placeholder (whose text starts with `//`)
    /// as from the string.
    pub fn long_strings_non_blank(&self) -> bool {
        self.long_non_blank
    }
}

impl StringState {
    /// Counts the decoded character `code` (a UTF-16 surrogate never reaches here).
    fn count(&mut self, code: u32) {
        let c = char::from_u32(code);
        self.non_blank |= c.is_none_or(|c| !c.is_whitespace());
        self.quarters += c.map_or(2, crate::tokens::char_quarter_tokens);
    }

    /// Checks the next byte of the string: `Some(true)` for its closing quote, `None` when
    /// serde_json would not decode the string.
    fn check(&mut self, c: u8) -> Option<bool> {
        if self.utf8.0 > 0 {
            let (left, lo, hi) = self.utf8;
            if c < lo || c > hi {
                return None;
            }
            self.utf8 = (left - 1, 0x80, 0xBF);
            self.code = (self.code << 6) | (c & 0x3F) as u32;
            if left == 1 {
                self.count(self.code);
            }
            return Some(false);
        }
        match self.escape {
            Escape::Backslash => {
                match (self.low, c) {
                    (2, b'u') | (0, b'u') => {
                        if self.low == 2 {
                            self.low = 3;
                        }
                        self.escape = Escape::Hex(4, 0);
                    }
                    (0, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                        self.escape = Escape::None;
                        // `\f`, `\n`, `\r`, `\t` decode to white space.
                        self.non_blank |= !matches!(c, b'f' | b'n' | b'r' | b't');
                        self.quarters += 1;
                    }
                    _ => return None,
                }
                return Some(false);
            }
            Escape::Hex(left, value) => {
                let digit = (c as char).to_digit(16)?;
                let value = value * 16 + digit;
                if left > 1 {
                    self.escape = Escape::Hex(left - 1, value);
                    return Some(false);
                }
                self.escape = Escape::None;
                let trailing = (0xDC00..=0xDFFF).contains(&value);
                if self.low == 3 {
                    if !trailing {
                        return None;
                    }
                    self.low = 0;
                    self.count(0x10000 + ((self.code - 0xD800) << 10) + (value - 0xDC00));
                } else if trailing {
                    return None;
                } else if (0xD800..=0xDBFF).contains(&value) {
                    self.low = 1;
                    self.code = value;
                } else {
                    self.count(value);
                }
                return Some(false);
            }
            Escape::None => {}
        }
        if self.low == 1 {
            if c != b'\\' {
                return None;
            }
            self.low = 2;
            self.escape = Escape::Backslash;
            return Some(false);
        }
        match c {
            b'"' => return Some(true),
            b'\\' => self.escape = Escape::Backslash,
            0..=0x1F => return None,
            0x20..=0x7F => {
                self.non_blank |= c != b' ';
                self.quarters += 1;
            }
            0xC2..=0xDF => self.utf8 = (1, 0x80, 0xBF),
            0xE0 => self.utf8 = (2, 0xA0, 0xBF),
            0xED => self.utf8 = (2, 0x80, 0x9F),
            0xE1..=0xEF => self.utf8 = (2, 0x80, 0xBF),
            0xF0 => self.utf8 = (3, 0x90, 0xBF),
            0xF1..=0xF3 => self.utf8 = (3, 0x80, 0xBF),
            0xF4 => self.utf8 = (3, 0x80, 0x8F),
            _ => return None,
        }
        if c >= 0xC2 {
            self.code = (c & (0x3F >> self.utf8.0)) as u32;
        }
        Some(false)
    }
}

/// Occurrences of `needle` in `haystack`.
fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

/// The placeholders of `piece` (a shape's output for a compact line with `spans` long
/// strings) as `(from, to, index)` byte ranges, quotes included, in order; `None` unless each
/// placeholder appears at most once (exactly once when `all`), quoted, and no other text holds
/// the marker.
fn placeholders(piece: &[u8], spans: usize, all: bool) -> Option<Vec<(usize, usize, usize)>> {
    let mut found = Vec::with_capacity(spans);
    let mut seen = vec![false; spans];
    let mut from = 0;
    while let Some(at) = find(&piece[from..], MARKER) {
        let at = from + at;
        if at == 0 || piece[at - 1] != b'"' {
            return None;
        }
        let digits = at + MARKER.len();
        let end = digits
            + piece[digits..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
        let index: usize = std::str::from_utf8(&piece[digits..end])
            .ok()?
            .parse()
            .ok()?;
        let close = end + MARKER_END.len();
        if !piece[end..].starts_with(MARKER_END) || piece.get(close) != Some(&b'"') {
            return None;
        }
        if index >= spans || std::mem::replace(&mut seen[index], true) {
            return None;
        }
        found.push((at - 1, close + 1, index));
        from = close + 1;
    }
    (!all || found.len() == spans).then_some(found)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A long line read through a [`Compactor`] ([`scan_long`]): its compact copy, and where the
/// line is in the file, to copy its long strings from there ([`LongLine::splice`]) or read it
/// whole after all ([`LongLine::read_whole`]).
pub(crate) struct LongLine {
    compactor: Compactor,
    /// The line number (from 1).
    pub line: u64,
    /// Where the line starts in the file.
    pub offset: u64,
    /// Its length in bytes, without its `\n`.
    pub length: u64,
}

/// Why [`LongLine::splice`] failed.
#[derive(Debug)]
pub(crate) enum SpliceError {
    /// Reading the file (seeking or reading a long string) failed.
    Read(io::Error),
    /// Writing the output failed.
    Write(io::Error),
}

/// Reads the long line that `lines` just returned as [`crate::jsonl::NextLine::Long`] (line
/// number `line`, at file offset `offset`) through a [`Compactor`] with `limits`; `lines` is
/// then at the next line. Memory: the compact copy (at most [`Limits::compact`] and a string's
/// [`Limits::string`]).
///
/// Errors: [`JsonlError::Io`] for a failed read.
pub(crate) fn scan_long<R: Read>(
    lines: &mut BlockLineReader<R>,
    (line, offset): (u64, u64),
    limits: Limits,
) -> Result<LongLine, JsonlError> {
    let mut compactor = Compactor::new(offset, limits);
    let length = lines.read_long_line(|bytes| compactor.push(bytes))?;
    Ok(LongLine {
        compactor,
        line,
        offset,
        length,
    })
}

impl LongLine {
    /// The compact line ([`Compactor::finish`]), or `None` when the line must be read whole.
    pub fn compact(&self) -> Option<&[u8]> {
        self.compactor.finish()
    }

    /// [`Compactor::long_strings_non_blank`].
    pub fn long_strings_non_blank(&self) -> bool {
        self.compactor.long_strings_non_blank()
    }

    /// Writes `piece` (output made from the compact line's message) to `out`, each
    /// placeholder in it replaced by the JSON text of its long string, copied from `reader`
    /// (the file `lines` reads: seeked to each string and back) 64 KiB at a time. Returns
    /// `false`, having written nothing, when a placeholder appears more than once in `piece`
    /// (or, with `all`, not at all), or not as a whole quoted string: the output would not be
    /// the whole line's. Whether the maker of `piece` decoded a placeholder is the caller's
    /// to check ([`take_decoded`]).
    ///
    /// Errors: [`SpliceError`].
    pub fn splice<R: Read + Seek, W: Write>(
        &self,
        piece: &[u8],
        all: bool,
        reader: &mut R,
        out: &mut W,
    ) -> Result<bool, SpliceError> {
        let Some(found) = placeholders(piece, self.compactor.spans.len(), all) else {
            return Ok(false);
        };
        let resume = reader.stream_position().map_err(SpliceError::Read)?;
        let mut buf = vec![0u8; COPY_BYTES.min(self.length as usize + 1)];
        let mut done = 0;
        for (from, to, index) in found {
            out.write_all(&piece[done..from])
                .map_err(SpliceError::Write)?;
            let (start, end) = self.compactor.spans[index];
            reader
                .seek(SeekFrom::Start(start))
                .map_err(SpliceError::Read)?;
            let mut left = end - start;
            while left > 0 {
                let n = left.min(buf.len() as u64) as usize;
                reader
                    .read_exact(&mut buf[..n])
                    .map_err(SpliceError::Read)?;
                out.write_all(&buf[..n]).map_err(SpliceError::Write)?;
                left -= n as u64;
            }
            done = to;
        }
        out.write_all(&piece[done..]).map_err(SpliceError::Write)?;
        reader
            .seek(SeekFrom::Start(resume))
            .map_err(SpliceError::Read)?;
        #[cfg(test)]
        SPLICED.with(|n| n.set(n.get() + 1));
        Ok(true)
    }

    /// The whole line's bytes, read again from `reader` (its position restored), without the
    /// `\r`s before its `\n`: what the whole-line path reads (memory: the line).
    ///
    /// Errors: a failed seek or read; `OutOfMemory` when the line cannot be held.
    pub fn read_whole<R: Read + Seek>(&self, reader: &mut R) -> io::Result<Vec<u8>> {
        let resume = reader.stream_position()?;
        reader.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(self.length as usize)
            .map_err(|e| io::Error::new(io::ErrorKind::OutOfMemory, e.to_string()))?;
        reader.by_ref().take(self.length).read_to_end(&mut bytes)?;
        reader.seek(SeekFrom::Start(resume))?;
        while bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
        Ok(bytes)
    }
}

/// Clears the note that a placeholder was decoded ([`crate::raw::RawStr::value`] sets it):
/// call it before making output from a compact line, and [`take_decoded`] after.
pub(crate) fn clear_decoded() {
    take_decoded();
}

/// Reads the long line (line number `line`, at file offset `offset`) that `lines` just
/// returned as [`crate::jsonl::NextLine::Long`] and writes its message in `shape` to `out`,
/// preceded by `,` unless `first`. Same output and errors as the whole-line path.
pub(crate) fn copy_long<R, W, S>(
    lines: &mut BlockLineReader<R>,
    at: (u64, u64),
    limits: Limits,
    first: bool,
    out: &mut W,
    shape: &mut S,
) -> Result<LongCopy, ArrayError>
where
    R: Read + Seek,
    W: Write,
    S: MessageShape + Clone,
{
    let long = scan_long(lines, at, limits).map_err(ArrayError::Read)?;
    let file = lines.file().to_string();
    let line = long.line;
    let io_err = |e: io::Error| {
        ArrayError::Read(JsonlError::Io {
            file: file.clone(),
            line: Some(line),
            message: e.to_string(),
        })
    };
    if let Some(compact) = long.compact()
        && let Ok(message) = raw::parse_line(compact)
    {
        let saved = shape.clone();
        clear_decoded();
        let mut piece = Vec::new();
        if !first {
            piece.push(b',');
        }
        shape
            .write_raw(&message, &mut piece)
            .map_err(ArrayError::Write)?;
        let spliced = !take_decoded()
            && long
                .splice(&piece, true, lines.reader_mut(), out)
                .map_err(|e| match e {
                    SpliceError::Read(e) => io_err(e),
                    SpliceError::Write(e) => ArrayError::Write(e),
                })?;
        if spliced {
            return Ok(LongCopy::Spliced);
        }
        *shape = saved;
    }
    // The whole line, as the whole-line path reads it.
    let bytes = long.read_whole(lines.reader_mut()).map_err(io_err)?;
    if jsonl::is_blank(&bytes) {
        return Ok(LongCopy::Blank);
    }
    let message = raw::parse_line(&bytes).map_err(|message| {
        ArrayError::Read(JsonlError::Invalid {
            file: file.clone(),
            line,
            message,
        })
    })?;
    if !first {
        out.write_all(b",").map_err(ArrayError::Write)?;
    }
    shape.write_raw(&message, out).map_err(ArrayError::Write)?;
    Ok(LongCopy::Whole)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use proptest::prelude::*;

    use super::*;
    use crate::shape::ollama::OllamaShape;
    use crate::shape::openai::OpenAiShape;
    use crate::shape::prompted::PromptedShape;
    use crate::stream::copy_lines;

    /// Small limits, so that short test lines are long lines.
    const SMALL: Limits = Limits {
        line: 64,
        string: 8,
        compact: 4096,
    };

    /// The request array of `input` with `limits` and a block of `block` bytes, and how each
    /// long line was copied.
    fn copy<S: MessageShape + Clone>(
        input: &[u8],
        shape: S,
        limits: Limits,
        block: usize,
    ) -> (Result<Vec<u8>, String>, Vec<LongCopy>) {
        let mut shape = shape;
        let mut out = Vec::new();
        let mut how = Vec::new();
        let lines = BlockLineReader::with_block_bytes(Cursor::new(input), "current.jsonl", block);
        let result = copy_lines(lines, &mut out, &mut shape, limits, &mut |h| how.push(h))
            .map(|_| out)
            .map_err(|e| e.to_string());
        (result, how)
    }

    /// The whole-line path (no line is long).
    fn whole<S: MessageShape + Clone>(input: &[u8], shape: S) -> Result<Vec<u8>, String> {
        let limits = Limits {
            line: usize::MAX,
            ..LIMITS
        };
        let (out, how) = copy(input, shape, limits, 64);
        assert!(how.is_empty());
        out
    }

    /// A JSON string of `text`, each character written raw or escaped as `choice` says.
    fn json_string(text: &str, choice: &[u8]) -> String {
        let mut s = String::from("\"");
        for (i, c) in text.chars().enumerate() {
            let pick = choice.get(i % choice.len().max(1)).copied().unwrap_or(0) % 3;
            let mut units = [0u16; 2];
            match (c, pick) {
                ('"', _) => s.push_str("\\\""),
                ('\\', _) => s.push_str("\\\\"),
                ('/', 1) => s.push_str("\\/"),
                ('\n', 0) => s.push_str("\\n"),
                ('\t', 0) => s.push_str("\\t"),
                (c, 1) | (c @ '\0'..='\u{1f}', _) => {
                    for u in c.encode_utf16(&mut units) {
                        s.push_str(&format!("\\u{:04x}", u));
                    }
                }
                (c, _) => s.push(c),
            }
        }
        s.push('"');
        s
    }

    fn text() -> impl Strategy<Value = String> {
        "[a-z \"\\\\/\n\t\u{0}-\u{1f}\u{e9}\u{20ac}\u{1F600}\u{7f}]{0,60}"
    }

    /// A chat message line from random texts: user/system/assistant/tool, tool calls,
    /// reasoning, an unknown field, white space between tokens.
    fn line() -> impl Strategy<Value = String> {
        (
            0..5u8,
            proptest::collection::vec(text(), 6),
            proptest::collection::vec(any::<u8>(), 1..8),
            any::<bool>(),
        )
            .prop_map(|(kind, t, choice, spaced)| {
                let j = |i: usize| json_string(&t[i], &choice);
                let sep = if spaced { " , " } else { "," };
                match kind {
                    0 => format!("{{\"role\":\"user\"{sep}\"content\":{}}}", j(0)),
                    1 => format!("{{\"role\":\"system\",\"content\":{}}}", j(0)),
                    2 => format!(
                        "{{\"role\":\"assistant\",\"content\":{}{sep}\"tool_calls\":[{{\"id\":{},\"type\":\"function\",\"function\":{{\"name\":{},\"arguments\":{}}}}},{{\"id\":\"c2\",\"function\":{{\"name\":\"n\",\"arguments\":{}}}}}],\"reasoning\":[{{\"provider\":\"anthropic\",\"type\":\"thinking\",\"data\":{}}}]}}",
                        j(0),
                        j(1),
                        j(2),
                        j(3),
                        j(4),
                        j(5)
                    ),
                    3 => format!(
                        "{{\"role\":\"tool\",\"content\":{},\"tool_call_id\":{}{sep}\"tool_name\":{},\"is_error\":true}}",
                        j(0),
                        j(1),
                        j(2)
                    ),
                    _ => format!(
                        "{{ \"x\" : [1, {{\"y\": {}}}], \"role\" : \"assistant\" , \"content\" : {} }}",
                        j(1),
                        j(0)
                    ),
                }
            })
    }

    /// CI found it (proptest, 2026-12-02): a line of exactly the block's length is long (its
    /// `\n` does not fit), so it may be spliced; the request is the whole-line path's.
    #[test]
    fn a_line_as_long_as_the_block_is_long_and_copied_exactly() {
        let line = "{\"role\":\"user\",\"content\":\"\\\\\\u0000\u{1F600}\u{e9}/\\\"a\\\\/\\u0000a\u{7f}/\\\"/\\\"\\\"\\\\a\\u0000a\"}";
        assert_eq!(line.len(), 75);
        let (fast, how) = copy(line.as_bytes(), OpenAiShape, SMALL, 75);
        assert_eq!(fast, whole(line.as_bytes(), OpenAiShape));
        assert!(how.len() <= 1, "{how:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// A history whose lines are all long gives byte for byte the whole-line path's
        /// request in every shape; with OpenAI's shape (which copies every string) no long
        /// line is held whole.
        #[test]
        fn long_lines_give_the_whole_line_request(
            lines in proptest::collection::vec(line(), 1..6),
            block in 16usize..80,
        ) {
            let input = lines.join("\n\r\n");
            let input = input.as_bytes();
            let (fast, how) = copy(input, OpenAiShape, SMALL, block);
            prop_assert_eq!(&fast, &whole(input, OpenAiShape));
            // Only a long line can be spliced: one over the limit, or one that does not fit a
            // block with its `\n` (a line of exactly `block` bytes is long).
            let spliceable = lines
                .iter()
                .filter(|l| l.len() >= block.max(SMALL.line))
                .count();
            prop_assert!(how.iter().filter(|h| **h == LongCopy::Spliced).count() <= spliceable);
            prop_assert_eq!(
                copy(input, OllamaShape, SMALL, block).0,
                whole(input, OllamaShape)
            );
            let prompted = PromptedShape::new("Tools: t".to_string());
            prop_assert_eq!(
                copy(input, prompted.clone(), SMALL, block).0,
                whole(input, prompted)
            );
        }

        /// A long string's token count is the estimate of its decoded text, however it is
        /// escaped, and its placeholder names it.
        #[test]
        fn long_strings_are_counted_as_their_text(
            texts in proptest::collection::vec(text(), 1..4),
            choice in proptest::collection::vec(any::<u8>(), 1..8),
        ) {
            let strings: Vec<String> = texts.iter().map(|t| json_string(t, &choice)).collect();
            let line = format!("{{\"x\":[{}]}}", strings.join(","));
            let mut c = Compactor::new(0, SMALL);
            for piece in line.as_bytes().chunks(5) {
                c.push(piece);
            }
            let long: Vec<&String> = texts
                .iter()
                .zip(&strings)
                .filter(|(_, s)| s.len() > SMALL.string + 1)
                .map(|(t, _)| t)
                .collect();
            if long.is_empty() {
                prop_assert!(c.finish().is_none());
            } else {
                #[derive(serde::Deserialize)]
                struct X<'a> {
                    #[serde(borrow)]
                    x: Vec<&'a serde_json::value::RawValue>,
                }
                let compact: X = serde_json::from_slice(c.finish().unwrap()).unwrap();
                let mut n = 0;
                for (i, text) in texts.iter().enumerate() {
                    let raw = compact.x[i].get();
                    let got: String = serde_json::from_str(raw).unwrap();
                    match c.placeholder(raw.as_bytes()) {
                        Some(index) => {
                            prop_assert_eq!(index, n);
                            prop_assert_eq!(c.tokens(index), crate::tokens::estimate_tokens(long[n]));
                            n += 1;
                        }
                        None => prop_assert_eq!(&got, text),
                    }
                }
                prop_assert_eq!(n, long.len());
            }
        }

        /// A long string that is not valid (or a line that is not a message) gives the
        /// whole-line path's error, file, line and column included.
        #[test]
        fn bad_long_lines_give_the_whole_line_error(
            good in line(),
            bad in prop_oneof![
                Just("\"\\ud800x\"".to_string()),
                Just("\"\\udc00\"".to_string()),
                Just("\"\\ud800\\u0041\"".to_string()),
                Just("\"\\q\"".to_string()),
                Just("\"\\u12g4\"".to_string()),
                Just("\"tab\there\"".to_string()),
                Just("\"\u{e9}".to_string()),
                Just("7".to_string()),
            ],
            pad in "[a-z]{20,40}",
        ) {
            let bad_line = format!(
                "{{\"role\":\"user\",\"content\":\"{pad}\",\"extra\":{bad}}}"
            );
            let input = format!("{good}\n{bad_line}\n");
            let expected = whole(input.as_bytes(), OpenAiShape);
            prop_assert_eq!(copy(input.as_bytes(), OpenAiShape, SMALL, 32).0, expected);
        }
    }

    #[test]
    fn a_line_of_several_megabytes_is_spliced_at_the_real_limits() {
        let text: String = "d\u{e9}j\u{e0} \"vu\"\n\u{1F600}\\/"
            .chars()
            .cycle()
            .take(1_500_000)
            .collect();
        let calls = serde_json::json!([{"id": "c1", "type": "function",
            "function": {"name": "read", "arguments": text.clone()}}]);
        let input = format!(
            "{{\"role\":\"system\",\"content\":\"s\"}}\n{}\n{}\n",
            serde_json::json!({"role": "assistant", "content": text, "tool_calls": calls}),
            serde_json::json!({"role": "tool", "content": "ok", "tool_call_id": "c1"}),
        );
        let (fast, how) = copy(input.as_bytes(), OpenAiShape, LIMITS, jsonl::BLOCK_BYTES);
        assert_eq!(how, [LongCopy::Spliced]);
        let fast = fast.unwrap();
        assert_eq!(fast, whole(input.as_bytes(), OpenAiShape).unwrap());
        let value: serde_json::Value = serde_json::from_slice(&fast).unwrap();
        assert_eq!(value[1]["content"], text);
        assert_eq!(value[1]["tool_calls"][0]["function"]["arguments"], text);
    }

    #[test]
    fn a_line_holding_the_placeholder_text_is_read_whole() {
        let input = "{\"role\":\"user\",\"content\":\"\\/\\/ctxhost-long-0\\/\\/\",\"x\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789\"}\n";
        let (fast, how) = copy(input.as_bytes(), OpenAiShape, SMALL, 16);
        assert_eq!(how, [LongCopy::Whole]);
        assert_eq!(fast, whole(input.as_bytes(), OpenAiShape));
    }

    #[test]
    fn a_long_blank_line_is_skipped() {
        let input = format!(
            "{}\n{{\"role\":\"user\",\"content\":\"a\"}}\n",
            " ".repeat(200)
        );
        let (fast, how) = copy(input.as_bytes(), OpenAiShape, SMALL, 16);
        assert_eq!(how, [LongCopy::Blank]);
        assert_eq!(fast.unwrap(), b"[{\"role\":\"user\",\"content\":\"a\"}]");
    }
}
