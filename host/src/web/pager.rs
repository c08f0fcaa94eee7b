//! Pages of a JSON Lines file by byte offsets, so a page of a 256 MiB history costs what a page
//! of a small one does: seek, read a bounded number of lines, stop.
//!
//! - [`read_page`]: the lines starting at an offset ([`Anchor::From`]), the lines ending before
//!   one ([`Anchor::Before`]), or the last lines of the file ([`Anchor::Last`]). An offset in the
//!   middle of a line snaps to a line boundary (forward for `From`, back for `Before`).
//! - [`find_seq`]: binary search for the line whose `seq` is the first ≥ a target, in
//!   `O(log(file size))` short reads (messages.jsonl and tools.jsonl number their lines).
//! - [`read_window`]: a window of raw bytes of any file (request.json, a spilled tool output),
//!   cut on UTF-8 character boundaries.
//!
//! Memory per call is bounded by [`Limits`]: at most `max_lines` lines, each kept up to
//! `max_line_bytes` (the rest of a longer line is skipped, its length still counted), and the
//! page stops once `max_page_bytes` are kept. A last line without its `\n` (being written, or
//! torn by a crash) is returned with `complete: false`.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};

/// Bounds of one page.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Lines per page.
    pub max_lines: usize,
    /// Bytes kept of one line (longer lines are cut; `PagedLine::cut` says so).
    pub max_line_bytes: usize,
    /// Bytes kept over the whole page (at least one line is always returned).
    pub max_page_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_lines: 50,
            max_line_bytes: 256 * 1024,
            max_page_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Where a page starts or ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// Lines starting at this byte offset (snapped forward to a line start).
    From(u64),
    /// Lines ending before this byte offset (snapped back to a line start).
    Before(u64),
    /// The last lines of the file.
    Last,
}

/// One line of a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagedLine {
    /// Byte offset of the line's first byte.
    pub offset: u64,
    /// Length of the whole line in bytes, without its `\n`.
    pub len: u64,
    /// The line's bytes, at most `max_line_bytes` of them.
    pub bytes: Vec<u8>,
    /// The line was longer than `max_line_bytes`; `bytes` holds its beginning.
    pub cut: bool,
    /// The line ends with `\n` (false: the last line is being written or was torn).
    pub complete: bool,
}

/// A page of lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub lines: Vec<PagedLine>,
    /// Offset of the first line (where the previous page ends).
    pub start: u64,
    /// Offset just after the last line (where the next page starts).
    pub end: u64,
    /// Size of the file when it was read.
    pub file_len: u64,
}

impl Page {
    /// There are lines before this page.
    pub fn has_before(&self) -> bool {
        self.start > 0
    }

    /// There are lines after this page.
    pub fn has_after(&self) -> bool {
        self.end < self.file_len
    }
}

const CHUNK: usize = 64 * 1024;

/// Read one line starting at the reader's position: keep up to `max` bytes, skip the rest.
/// Returns `None` at end of file, else `(kept bytes, full length without \n, had \n)`.
fn read_line_capped<R: BufRead>(r: &mut R, max: usize) -> io::Result<Option<(Vec<u8>, u64, bool)>> {
    let mut kept = Vec::new();
    let mut len = 0u64;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok((len > 0).then_some((kept, len, false)));
        }
        let (take, newline) = match memchr(b'\n', buf) {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        let room = max.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..take.min(room)]);
        len += take as u64;
        r.consume(take + usize::from(newline));
        if newline {
            return Ok(Some((kept, len, true)));
        }
    }
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|b| *b == needle)
}

/// Whether `offset` is a line start: 0, the file's end, or just after a `\n`.
fn is_line_start(file: &mut File, offset: u64, len: u64) -> io::Result<bool> {
    if offset == 0 || offset >= len {
        return Ok(true);
    }
    file.seek(SeekFrom::Start(offset - 1))?;
    let mut b = [0u8; 1];
    file.read_exact(&mut b)?;
    Ok(b[0] == b'\n')
}

/// The first line start at or after `offset` (`len` when there is none).
fn next_line_start(file: &mut File, offset: u64, len: u64) -> io::Result<u64> {
    if is_line_start(file, offset, len)? {
        return Ok(offset.min(len));
    }
    file.seek(SeekFrom::Start(offset))?;
    let mut r = BufReader::with_capacity(CHUNK, &mut *file);
    let mut pos = offset;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(len);
        }
        if let Some(i) = memchr(b'\n', buf) {
            return Ok(pos + i as u64 + 1);
        }
        let n = buf.len();
        pos += n as u64;
        r.consume(n);
    }
}

/// Starts of up to `count` lines that end before `end` (a line start), scanning backwards in
/// chunks; stops early once `max_scan` bytes were scanned and at least one start was found.
/// Returns the earliest start found.
fn start_of_lines_before(
    file: &mut File,
    end: u64,
    count: usize,
    max_scan: u64,
) -> io::Result<u64> {
    if end == 0 {
        return Ok(0);
    }
    // The byte at end-1 is the '\n' of the line before `end` (or the file's last byte).
    let mut pos = end - 1;
    let mut found = 0usize;
    let mut earliest;
    let mut buf = vec![0u8; CHUNK];
    while pos > 0 {
        let chunk_start = pos.saturating_sub(CHUNK as u64);
        let n = (pos - chunk_start) as usize;
        file.seek(SeekFrom::Start(chunk_start))?;
        file.read_exact(&mut buf[..n])?;
        for i in (0..n).rev() {
            if buf[i] == b'\n' {
                earliest = chunk_start + i as u64 + 1;
                found += 1;
                if found == count || (end - earliest >= max_scan && found > 0) {
                    return Ok(earliest);
                }
            }
        }
        pos = chunk_start;
    }
    Ok(0)
}

/// Read a page of `file` at `anchor` within `limits`.
pub fn read_page(file: &mut File, anchor: Anchor, limits: Limits) -> io::Result<Page> {
    let len = file.metadata()?.len();
    let limits = Limits {
        max_lines: limits.max_lines.max(1),
        ..limits
    };
    let last_page = |file: &mut File| {
        start_of_lines_before(file, len, limits.max_lines, limits.max_page_bytes as u64)
    };
    let (start, stop) = match anchor {
        Anchor::From(o) => (next_line_start(file, o.min(len), len)?, len),
        Anchor::Last => (last_page(file)?, len),
        Anchor::Before(o) if o >= len => (last_page(file)?, len),
        Anchor::Before(o) => {
            // Snap back to the start of the line that contains `o`.
            let end = if is_line_start(file, o, len)? {
                o
            } else {
                start_of_lines_before(file, o + 1, 1, u64::MAX)?
            };
            let s =
                start_of_lines_before(file, end, limits.max_lines, limits.max_page_bytes as u64)?;
            (s, end)
        }
    };
    file.seek(SeekFrom::Start(start))?;
    let mut r = BufReader::with_capacity(CHUNK, &mut *file);
    let mut lines = Vec::new();
    let mut pos = start;
    let mut kept = 0usize;
    while pos < stop
        && lines.len() < limits.max_lines
        && (kept < limits.max_page_bytes || lines.is_empty())
    {
        let Some((bytes, line_len, complete)) = read_line_capped(&mut r, limits.max_line_bytes)?
        else {
            break;
        };
        kept += bytes.len();
        lines.push(PagedLine {
            offset: pos,
            len: line_len,
            cut: (bytes.len() as u64) < line_len,
            bytes,
            complete,
        });
        pos += line_len + u64::from(complete);
    }
    Ok(Page {
        lines,
        start,
        end: pos.max(start),
        file_len: len,
    })
}

/// The `seq` of a line, read from its first bytes: the value of the first `"seq":` key when
/// the line starts with it (as ctxhost writes its lines), else from the parsed line.
pub fn seq_of(line: &[u8]) -> Option<u64> {
    let head = &line[..line.len().min(64)];
    let key = b"\"seq\":";
    if let Some(i) = head.windows(key.len()).position(|w| w == key) {
        let digits: Vec<u8> = head[i + key.len()..]
            .iter()
            .skip_while(|b| **b == b' ')
            .take_while(|b| b.is_ascii_digit())
            .copied()
            .collect();
        if let Ok(s) = std::str::from_utf8(&digits).unwrap_or("").parse() {
            return Some(s);
        }
    }
    serde_json::from_slice::<serde_json::Value>(line)
        .ok()?
        .get("seq")?
        .as_u64()
}

/// Offset of the first line whose `seq` is ≥ `target` (`file_len` when none is), by binary
/// search over byte offsets. Lines must be in increasing `seq` order; an unreadable line counts
/// as smaller than any target.
pub fn find_seq(file: &mut File, target: u64) -> io::Result<u64> {
    let len = file.metadata()?.len();
    const HEAD: usize = 4096;
    let seq_at = |file: &mut File, offset: u64| -> io::Result<Option<u64>> {
        file.seek(SeekFrom::Start(offset))?;
        let mut r = BufReader::with_capacity(HEAD, &mut *file);
        Ok(read_line_capped(&mut r, 1 << 20)?.and_then(|(b, _, _)| seq_of(&b)))
    };
    let mut lo = 0u64;
    let mut hi = len;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let s = next_line_start(file, mid, len)?;
        if s >= hi {
            // No line starts in [mid, hi): only the line at `lo` is left to look at.
            if seq_at(file, lo)?.is_some_and(|q| q >= target) {
                hi = lo;
            } else {
                lo = next_line_start(file, lo + 1, len)?;
            }
            continue;
        }
        if seq_at(file, s)?.is_some_and(|q| q >= target) {
            hi = s;
        } else {
            lo = next_line_start(file, s + 1, len)?;
        }
    }
    Ok(lo)
}

/// A window of raw bytes of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// The text (invalid UTF-8 inside the window shown as U+FFFD).
    pub text: String,
    /// Offset of the window's first byte.
    pub start: u64,
    /// Offset just after its last byte.
    pub end: u64,
    pub file_len: u64,
}

/// Up to `size` bytes of `file` from `offset`, both ends moved to UTF-8 character boundaries
/// (the start forward past continuation bytes, the end back before an incomplete character).
pub fn read_window(file: &mut File, offset: u64, size: usize) -> io::Result<Window> {
    let len = file.metadata()?.len();
    let mut start = offset.min(len);
    file.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::with_capacity(size.min(len.saturating_sub(start) as usize) + 4);
    file.take(size as u64 + 3).read_to_end(&mut buf)?;
    // Skip continuation bytes at the start (at most 3: a character is at most 4 bytes).
    let skip = buf
        .iter()
        .take(3)
        .take_while(|b| (**b & 0xC0) == 0x80)
        .count();
    start += skip as u64;
    let mut body = buf.split_off(skip);
    if body.len() > size {
        let mut cut = size;
        // Move back to the start of a character.
        while cut > 0 && (body[cut] & 0xC0) == 0x80 {
            cut -= 1;
        }
        body.truncate(cut.max(1).min(body.len()));
    }
    let end = start + body.len() as u64;
    Ok(Window {
        text: String::from_utf8_lossy(&body).into_owned(),
        start,
        end,
        file_len: len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_with(lines: &[String], tail: &str) -> (tempfile::NamedTempFile, File) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
        f.write_all(tail.as_bytes()).unwrap();
        let file = File::open(f.path()).unwrap();
        (f, file)
    }

    fn seq_lines(n: u64) -> Vec<String> {
        (1..=n)
            .map(|i| {
                format!(
                    "{{\"seq\":{i},\"content\":\"{}\"}}",
                    "x".repeat((i % 7) as usize * 10)
                )
            })
            .collect()
    }

    fn seqs(p: &Page) -> Vec<u64> {
        p.lines.iter().map(|l| seq_of(&l.bytes).unwrap()).collect()
    }

    const SMALL: Limits = Limits {
        max_lines: 3,
        max_line_bytes: 1024,
        max_page_bytes: 1 << 20,
    };

    #[test]
    fn pages_walk_forward_and_backward_over_the_same_lines() {
        let (_t, mut f) = file_with(&seq_lines(8), "");
        let last = read_page(&mut f, Anchor::Last, SMALL).unwrap();
        assert_eq!(seqs(&last), [6, 7, 8]);
        assert!(last.has_before() && !last.has_after());
        let prev = read_page(&mut f, Anchor::Before(last.start), SMALL).unwrap();
        assert_eq!(seqs(&prev), [3, 4, 5]);
        assert_eq!(prev.end, last.start);
        let first = read_page(&mut f, Anchor::Before(prev.start), SMALL).unwrap();
        assert_eq!(seqs(&first), [1, 2]);
        assert!(!first.has_before());
        let next = read_page(&mut f, Anchor::From(first.end), SMALL).unwrap();
        assert_eq!(seqs(&next), [3, 4, 5]);
        let start = read_page(&mut f, Anchor::From(0), SMALL).unwrap();
        assert_eq!(seqs(&start), [1, 2, 3]);
        // Offsets inside a line snap to line boundaries.
        let inside = read_page(&mut f, Anchor::From(start.lines[1].offset + 3), SMALL).unwrap();
        assert_eq!(seqs(&inside), [3, 4, 5]);
        let inside = read_page(&mut f, Anchor::Before(start.lines[2].offset + 3), SMALL).unwrap();
        assert_eq!(seqs(&inside), [1, 2]);
        // Past the end: the last page; From past the end: empty.
        assert_eq!(
            seqs(&read_page(&mut f, Anchor::Before(u64::MAX), SMALL).unwrap()),
            [6, 7, 8]
        );
        assert!(
            read_page(&mut f, Anchor::From(u64::MAX), SMALL)
                .unwrap()
                .lines
                .is_empty()
        );
    }

    #[test]
    fn long_lines_are_cut_and_a_torn_tail_is_flagged() {
        let mut lines = seq_lines(2);
        lines.push(format!(
            "{{\"seq\":3,\"content\":\"{}\"}}",
            "y".repeat(5000)
        ));
        let (_t, mut f) = file_with(&lines, "{\"seq\":4,\"cont");
        let limits = Limits {
            max_lines: 10,
            max_line_bytes: 100,
            max_page_bytes: 1 << 20,
        };
        let p = read_page(&mut f, Anchor::From(0), limits).unwrap();
        assert_eq!(p.lines.len(), 4);
        assert!(p.lines[2].cut && p.lines[2].complete);
        assert_eq!(p.lines[2].bytes.len(), 100);
        assert_eq!(p.lines[2].len, lines[2].len() as u64);
        assert!(!p.lines[3].complete);
        assert_eq!(p.end, p.file_len);
        let last = read_page(
            &mut f,
            Anchor::Last,
            Limits {
                max_lines: 1,
                ..limits
            },
        )
        .unwrap();
        assert_eq!(last.lines[0].bytes, b"{\"seq\":4,\"cont");
    }

    #[test]
    fn page_byte_budget_stops_the_page_but_keeps_one_line() {
        let (_t, mut f) = file_with(&seq_lines(20), "");
        let limits = Limits {
            max_lines: 50,
            max_line_bytes: 1024,
            max_page_bytes: 1,
        };
        let p = read_page(&mut f, Anchor::From(0), limits).unwrap();
        assert_eq!(p.lines.len(), 1);
        let p = read_page(&mut f, Anchor::Last, limits).unwrap();
        assert_eq!(seqs(&p), [20]);
    }

    #[test]
    fn find_seq_lands_on_the_line() {
        let (_t, mut f) = file_with(&seq_lines(1000), "");
        for target in [1, 2, 3, 499, 500, 999, 1000] {
            let off = find_seq(&mut f, target).unwrap();
            let p = read_page(&mut f, Anchor::From(off), SMALL).unwrap();
            assert_eq!(seqs(&p)[0], target, "target {target}");
        }
        assert_eq!(find_seq(&mut f, 0).unwrap(), 0);
        let len = f.metadata().unwrap().len();
        assert_eq!(find_seq(&mut f, 1001).unwrap(), len);
        let (_t, mut empty) = file_with(&[], "");
        assert_eq!(find_seq(&mut empty, 5).unwrap(), 0);
    }

    #[test]
    fn seq_is_read_from_the_head_or_the_parsed_line() {
        assert_eq!(seq_of(b"{\"seq\":42,\"role\":\"user\"}"), Some(42));
        assert_eq!(seq_of(b"{\"role\":\"user\",\"seq\": 7}"), Some(7));
        assert_eq!(seq_of(b"garbage"), None);
    }

    #[test]
    fn windows_cut_on_character_boundaries() {
        let (_t, mut f) = file_with(&[], "aé€😀b");
        // a(1) é(2) €(3) 😀(4) b(1) = 11 bytes.
        let w = read_window(&mut f, 0, 4).unwrap();
        assert_eq!(w.text, "aé");
        assert_eq!((w.start, w.end), (0, 3));
        let w = read_window(&mut f, 2, 4).unwrap();
        assert_eq!(w.text, "€");
        assert_eq!(w.start, 3);
        let w = read_window(&mut f, w.end, 100).unwrap();
        assert_eq!(w.text, "😀b");
        assert_eq!(w.end, w.file_len);
    }
}
