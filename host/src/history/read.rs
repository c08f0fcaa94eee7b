//! [`read`]: lines of messages.jsonl from one seq to another, verbatim, within a token budget.
//!
//! The first wanted line is found by bisecting the file on byte offsets (seqs run from 1
//! without gaps, so they grow with the offset): a few reads, whatever the file's size. From
//! there the lines are read one at a time until the range or the budget ends.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};

use ctxhost_format::estimate_tokens;
use ctxhost_format::files::MESSAGES;
use ctxhost_format::jsonl::{BlockLineReader, LineReader, NextLine};

use super::{HistoryError, MAX_LINE_BYTES};
use crate::bound;
use crate::task_dir::TaskDir;

/// Bisecting stops when the part left is smaller than this, bytes; it is then read forward.
const SCAN_BYTES: u64 = 64 * 1024;

/// Where [`read`] starts or continues: a line of messages.jsonl and a byte offset into its
/// text, so a line longer than one read's budget can be read in several windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The line's seq (from 1).
    pub seq: u64,
    /// Bytes of the line's JSON text already read (0: from its start); moved back to a
    /// character boundary when it falls inside a character, past the end reads nothing of it.
    pub offset: u64,
}

impl Position {
    /// The start of line `seq`.
    pub fn line(seq: u64) -> Position {
        Position { seq, offset: 0 }
    }
}

/// How much one [`read`] may return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Estimated tokens (the agent's tool results: `max_tool_output_tokens`), a note's room
    /// ([`bound::NOTE_RESERVE_TOKENS`]) kept free.
    Tokens(u64),
    /// Bytes of text (a component's `history.read`).
    Bytes(u64),
}

impl Budget {
    /// What the text of the lines may cost in all.
    pub(super) fn limit(self) -> u64 {
        match self {
            Budget::Tokens(t) => t.saturating_sub(bound::NOTE_RESERVE_TOKENS).max(1),
            Budget::Bytes(b) => b.max(1),
        }
    }

    /// What `text` and its line break cost.
    pub(super) fn cost(self, text: &str) -> u64 {
        match self {
            Budget::Tokens(_) => estimate_tokens(text) + 1,
            Budget::Bytes(_) => text.len() as u64 + 1,
        }
    }

    /// Most bytes of text the budget can hold (a character costs at least a quarter token and
    /// is at most 4 bytes): what to read of a file before cutting it with [`Budget::window`].
    pub(super) fn max_bytes(self) -> u64 {
        match self {
            Budget::Tokens(t) => t.saturating_mul(16),
            Budget::Bytes(b) => b,
        }
        .max(4)
    }

    /// Bytes of `text` (which does not fit) given as a window: as much as the budget holds, at
    /// least one character, cut at a character boundary.
    pub(super) fn window(self, text: &str) -> usize {
        let cut = match self {
            Budget::Tokens(t) => bound::cut_point(text, t).map_or(text.len(), |c| c.kept_bytes),
            Budget::Bytes(b) => {
                text.floor_char_boundary(usize::try_from(b.saturating_sub(1)).unwrap_or(usize::MAX))
            }
        };
        if cut == 0 {
            text.ceil_char_boundary(1)
        } else {
            cut
        }
    }
}

/// A line of which [`read`] gave only a part (bytes `start..end` of its `len`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineWindow {
    /// The line's seq.
    pub seq: u64,
    /// First byte of the line's text given.
    pub start: u64,
    /// Byte after the last one given.
    pub end: u64,
    /// Bytes of the whole line's text (without its line break).
    pub len: u64,
}

/// What [`read`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    /// The lines, verbatim, each ending in `\n`; the first or only line may be a part of its
    /// line ([`ReadResult::window`]).
    pub text: String,
    /// Seqs of the first and last line given (`None` when the range holds no line).
    pub seqs: Option<(u64, u64)>,
    /// A line given only in part: it started at an offset, or it did not fit the budget.
    pub window: Option<LineWindow>,
    /// Where to continue when the budget ended before `to` (inside a line when its offset is
    /// not 0).
    pub next: Option<Position>,
    /// Seq of the last line of messages.jsonl seen (the history's length when the read went
    /// to its end).
    pub last_seq_seen: u64,
}

#[derive(serde::Deserialize)]
struct SeqOnly {
    seq: u64,
}

/// The lines of messages.jsonl of `dir` from `from` (a seq, and an offset into its line) to seq
/// `to`, as long as they fit `budget`; a line that does not fit alone is given as a window of
/// it, with [`ReadResult::next`] inside it, so every byte can be read. Errors: a seq of 0 or
/// `to` before `from` (naming the argument), an unreadable file or line (naming it).
pub fn read(
    dir: &TaskDir,
    from: Position,
    to: u64,
    budget: Budget,
) -> Result<ReadResult, HistoryError> {
    if from.seq == 0 {
        return Err(HistoryError::Argument(
            "`from_seq` must be at least 1".into(),
        ));
    }
    if to < from.seq {
        return Err(HistoryError::Argument(format!(
            "`to_seq` ({to}) is before `from_seq` ({})",
            from.seq
        )));
    }
    let mut result = ReadResult {
        text: String::new(),
        seqs: None,
        window: None,
        next: None,
        last_seq_seen: 0,
    };
    let Some(mut file) = dir
        .open_read_if_exists(MESSAGES)
        .map_err(|e| HistoryError::io(dir, MESSAGES, e))?
    else {
        return Ok(result);
    };
    let start = seek_before(&mut file, from.seq).map_err(|e| HistoryError::io(dir, MESSAGES, e))?;
    file.seek(SeekFrom::Start(start))
        .map_err(|e| HistoryError::io(dir, MESSAGES, e))?;
    let mut lines = BlockLineReader::new(file, dir.show(MESSAGES));
    let limit = budget.limit();
    let mut used = 0u64;
    loop {
        let (n, bytes) = match lines.next_bounded(MAX_LINE_BYTES)? {
            None => break,
            Some(NextLine::Line(n, bytes)) => (n, bytes),
            Some(NextLine::Long { .. }) => {
                // A line too long to hold (a reply of more than 64 MiB): read in blocks.
                if long_line(&mut lines, dir, from, to, budget, &mut result)? {
                    break;
                }
                continue;
            }
        };
        let text = std::str::from_utf8(bytes).map_err(|_| {
            HistoryError::Line(ctxhost_format::jsonl::JsonlError::Invalid {
                file: dir.show(MESSAGES),
                line: n,
                message: "not valid UTF-8".into(),
            })
        })?;
        let seq = serde_json::from_str::<SeqOnly>(text)
            .map_err(|e| {
                HistoryError::Argument(format!("{}: a line without a seq: {e}", dir.show(MESSAGES)))
            })?
            .seq;
        result.last_seq_seen = seq;
        if seq < from.seq {
            continue;
        }
        if seq > to {
            break;
        }
        let skip = if seq == from.seq {
            text.floor_char_boundary(usize::try_from(from.offset).unwrap_or(usize::MAX))
        } else {
            0
        };
        let rest = &text[skip..];
        let len = text.len() as u64;
        let cost = budget.cost(rest);
        if used + cost > limit {
            if result.seqs.is_some() {
                result.next = Some(Position::line(seq));
                break;
            }
            // One line larger than the whole budget: a window of it, and where it goes on.
            let end = skip + budget.window(rest);
            result.text.push_str(&text[skip..end]);
            result.text.push('\n');
            result.seqs = Some((seq, seq));
            result.window = Some(LineWindow {
                seq,
                start: skip as u64,
                end: end as u64,
                len,
            });
            if end < text.len() {
                result.next = Some(Position {
                    seq,
                    offset: end as u64,
                });
            } else if seq < to {
                result.next = Some(Position::line(seq + 1));
            }
            break;
        }
        used += cost;
        result.text.push_str(rest);
        result.text.push('\n');
        if skip > 0 {
            result.window = Some(LineWindow {
                seq,
                start: skip as u64,
                end: len,
                len,
            });
        }
        result.seqs = Some((result.seqs.map_or(seq, |s| s.0), seq));
    }
    Ok(result)
}

/// Bytes at the start of a long line searched for its `"seq"`.
const SEQ_PREFIX_BYTES: usize = 256;

/// The seq of a line from its first bytes (`{"seq":N,…`, as the message store writes it).
fn seq_of_prefix(prefix: &[u8]) -> Option<u64> {
    let key = b"\"seq\":";
    let at = prefix.windows(key.len()).position(|w| w == key)? + key.len();
    let digits: Vec<u8> = prefix[at..]
        .iter()
        .skip_while(|b| **b == b' ')
        .take_while(|b| b.is_ascii_digit())
        .copied()
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

/// [`read`]'s handling of a line longer than [`MAX_LINE_BYTES`], read in blocks (never held
/// whole): skipped when outside the range, given as a window (at most what `budget` holds,
/// from `from.offset` when it is `from`'s line) when it is the first line of the page, else
/// the page ends before it. Returns whether the page is done. Errors: a line without a seq
/// in its first bytes, a failed read.
fn long_line(
    lines: &mut BlockLineReader<File>,
    dir: &TaskDir,
    from: Position,
    to: u64,
    budget: Budget,
    result: &mut ReadResult,
) -> Result<bool, HistoryError> {
    let skip_from = |seq: u64| if seq == from.seq { from.offset } else { 0 };
    let cap = budget.max_bytes();
    let mut prefix: Vec<u8> = Vec::new();
    let mut seq: Option<u64> = None;
    let mut window: Vec<u8> = Vec::new();
    let mut window_start = 0u64;
    let mut pos = 0u64;
    let mut wanted = None::<bool>;
    let len = lines.read_long_line(|block| {
        if seq.is_none() && prefix.len() < SEQ_PREFIX_BYTES {
            let take = (SEQ_PREFIX_BYTES - prefix.len()).min(block.len());
            prefix.extend_from_slice(&block[..take]);
            if prefix.len() == SEQ_PREFIX_BYTES {
                seq = seq_of_prefix(&prefix);
            }
        }
        if wanted.is_none() && prefix.len() == SEQ_PREFIX_BYTES {
            wanted = Some(seq.is_some_and(|s| s >= from.seq && s <= to && result.seqs.is_none()));
            // Three bytes before the offset, to move it back to a character's start.
            window_start = seq.map_or(0, skip_from).saturating_sub(3);
            // The window's bytes in earlier blocks are in the prefix (it was not full then).
            if wanted == Some(true) && window_start < pos {
                window.extend_from_slice(&prefix[window_start as usize..pos as usize]);
            }
        }
        if wanted == Some(true) {
            let block_end = pos + block.len() as u64;
            let want_end = window_start.saturating_add(cap + 3);
            if block_end > window_start && pos < want_end {
                let a = window_start.saturating_sub(pos) as usize;
                let b = (want_end.min(block_end) - pos) as usize;
                window.extend_from_slice(&block[a..b]);
            }
        }
        pos += block.len() as u64;
    })?;
    let seq = seq.or_else(|| seq_of_prefix(&prefix)).ok_or_else(|| {
        HistoryError::Argument(format!(
            "{}: a line of {len} bytes without a seq at its start",
            dir.show(MESSAGES)
        ))
    })?;
    result.last_seq_seen = seq;
    if seq < from.seq {
        return Ok(false);
    }
    if seq > to {
        return Ok(true);
    }
    if result.seqs.is_some() {
        result.next = Some(Position::line(seq));
        return Ok(true);
    }
    // The window: from the offset (moved back to a character's start), whole characters.
    let offset = skip_from(seq).min(len);
    let mut at = (offset - window_start) as usize;
    while at > 0 && at < window.len() && window[at] & 0xC0 == 0x80 {
        at -= 1;
    }
    let start = window_start + at as u64;
    let bytes = &window[at.min(window.len())..];
    let bytes = &bytes[..bytes.len().min(cap as usize)];
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => {
            return Err(HistoryError::Line(
                ctxhost_format::jsonl::JsonlError::Invalid {
                    file: dir.show(MESSAGES),
                    line: seq,
                    message: "not valid UTF-8".into(),
                },
            ));
        }
    };
    let keep = if budget.cost(text) <= budget.limit() {
        text.len()
    } else {
        budget.window(text)
    };
    let end = start + keep as u64;
    result.text.push_str(&text[..keep]);
    result.text.push('\n');
    result.seqs = Some((seq, seq));
    result.window = Some(LineWindow {
        seq,
        start,
        end,
        len,
    });
    if end < len {
        result.next = Some(Position { seq, offset: end });
    } else if seq < to {
        result.next = Some(Position::line(seq + 1));
    }
    Ok(true)
}

/// Call `f` with each line of messages.jsonl of `dir` with seq `from..=to`, parsed, in order,
/// until it returns `false`. Errors: an unreadable file or line (naming it).
pub fn for_each_line(
    dir: &TaskDir,
    from: u64,
    to: u64,
    mut f: impl FnMut(ctxhost_format::HistoryLine) -> bool,
) -> Result<(), HistoryError> {
    let Some(mut file) = dir
        .open_read_if_exists(MESSAGES)
        .map_err(|e| HistoryError::io(dir, MESSAGES, e))?
    else {
        return Ok(());
    };
    let start = seek_before(&mut file, from).map_err(|e| HistoryError::io(dir, MESSAGES, e))?;
    file.seek(SeekFrom::Start(start))
        .map_err(|e| HistoryError::io(dir, MESSAGES, e))?;
    let mut lines = LineReader::new(
        BufReader::with_capacity(64 * 1024, file),
        dir.show(MESSAGES),
    )
    .max_line_bytes(MAX_LINE_BYTES);
    while let Some((_, line)) = lines.next_value::<ctxhost_format::HistoryLine>()? {
        if line.seq < from {
            continue;
        }
        if line.seq > to || !f(line) {
            break;
        }
    }
    Ok(())
}

/// A byte offset of `file` at a line start such that every line before it has a seq below
/// `from` (bisecting: module doc); 0 when in doubt.
pub(super) fn seek_before(file: &mut File, from: u64) -> std::io::Result<u64> {
    let len = file.metadata()?.len();
    let (mut lo, mut hi) = (0u64, len);
    let mut buf = Vec::new();
    while hi - lo > SCAN_BYTES {
        let mid = lo + (hi - lo) / 2;
        file.seek(SeekFrom::Start(mid - 1))?;
        let mut reader = BufReader::with_capacity(16 * 1024, &mut *file);
        // The rest of the line holding `mid - 1` (read past, not kept: it may be a line of
        // hundreds of MiB): the next line starts after it.
        let skipped = skip_line(&mut reader)?;
        let line_start = mid - 1 + skipped;
        // Its seq from its first bytes when it is there (a line of many MiB is not read
        // whole), else from the whole line (at most MAX_LINE_BYTES).
        buf.clear();
        (&mut reader)
            .take(SEQ_PREFIX_BYTES as u64)
            .read_until(b'\n', &mut buf)?;
        let mut seq = seq_of_prefix(&buf);
        if seq.is_none() {
            if buf.last() != Some(&b'\n') {
                (&mut reader)
                    .take(MAX_LINE_BYTES as u64)
                    .read_until(b'\n', &mut buf)?;
            }
            seq = serde_json::from_slice::<SeqOnly>(&buf).map(|l| l.seq).ok();
        }
        match seq {
            Some(seq) if seq < from => lo = line_start,
            _ => hi = mid,
        }
    }
    Ok(lo)
}

/// Read past the rest of the line `reader` is in, its `\n` included, without keeping it;
/// returns the bytes read.
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<u64> {
    let mut skipped = 0u64;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(skipped);
        }
        match buf.iter().position(|b| *b == b'\n') {
            Some(at) => {
                reader.consume(at + 1);
                return Ok(skipped + at as u64 + 1);
            }
            None => {
                let n = buf.len();
                reader.consume(n);
                skipped += n as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxhost_format::{ChatMessage, HistoryLine};

    fn write_history(dir: &std::path::Path, n: u64, filler: usize) -> Vec<String> {
        let lines: Vec<String> = (1..=n)
            .map(|seq| {
                let m = ChatMessage::text("user", format!("message {seq} {}", "x".repeat(filler)));
                serde_json::to_string(&HistoryLine::of(seq, &m, "2026-01-01T00:00:00.000Z"))
                    .unwrap()
            })
            .collect();
        std::fs::write(dir.join(MESSAGES), lines.join("\n") + "\n").unwrap();
        lines
    }

    #[test]
    fn reads_a_range_verbatim_and_says_where_to_continue() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let lines = write_history(tmp.path(), 3000, 100);
        let r = read(&dir, Position::line(1500), 1502, Budget::Tokens(10_000)).unwrap();
        assert_eq!(r.text, lines[1499..1502].join("\n") + "\n");
        assert_eq!((r.seqs, r.next), (Some((1500, 1502)), None));
        // A budget of about two lines: two given, continue from the third.
        let line_tokens = estimate_tokens(&lines[0]) + 1;
        let r = read(
            &dir,
            Position::line(10),
            20,
            Budget::Tokens(2 * line_tokens + bound::NOTE_RESERVE_TOKENS + 1),
        )
        .unwrap();
        assert_eq!(r.seqs, Some((10, 11)));
        assert_eq!(r.next, Some(Position::line(12)));
        assert_eq!(r.window, None);
        // Past the end: nothing, and how long the history is.
        let r = read(&dir, Position::line(5000), 6000, Budget::Tokens(1000)).unwrap();
        assert_eq!((r.seqs, r.last_seq_seen), (None, 3000));
        // Every start is found by the bisection.
        for from in [1, 2, 999, 2999, 3000] {
            let r = read(&dir, Position::line(from), from, Budget::Tokens(1000)).unwrap();
            assert_eq!(
                r.text,
                format!("{}\n", lines[from as usize - 1]),
                "from {from}"
            );
        }
        assert!(read(&dir, Position::line(0), 3, Budget::Tokens(100)).is_err());
        assert!(read(&dir, Position::line(4), 3, Budget::Tokens(100)).is_err());
    }

    #[test]
    fn a_line_over_the_whole_budget_is_read_in_windows_to_its_end() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        // Line 2 holds 300 KB with multi-byte characters: windows of it, then line 3.
        let long = ChatMessage::text("tool", format!("start {} end", "é→x".repeat(50_000)));
        let lines: Vec<String> = [
            ChatMessage::text("user", "one"),
            long,
            ChatMessage::text("assistant", "three"),
        ]
        .iter()
        .enumerate()
        .map(|(i, m)| {
            serde_json::to_string(&HistoryLine::of(
                i as u64 + 1,
                m,
                "2026-01-01T00:00:00.000Z",
            ))
            .unwrap()
        })
        .collect();
        std::fs::write(tmp.path().join(MESSAGES), lines.join("\n") + "\n").unwrap();
        for budget in [Budget::Tokens(2000), Budget::Bytes(7001)] {
            let mut at = Position::line(2);
            let mut got = String::new();
            let mut windows = 0;
            loop {
                let r = read(&dir, at, 3, budget).unwrap();
                let w = r.window.expect("a window of line 2");
                assert_eq!(
                    (w.seq, w.start, w.len),
                    (2, at.offset, lines[1].len() as u64)
                );
                if let Budget::Bytes(b) = budget {
                    assert!(r.text.len() as u64 <= b, "{}", r.text.len());
                }
                let (part, rest) = r.text.split_once('\n').unwrap();
                got.push_str(part);
                windows += 1;
                match r.next {
                    Some(p) if p.seq == 2 => {
                        assert_eq!((r.seqs, p.offset), (Some((2, 2)), w.end));
                        at = p;
                    }
                    // The end of line 2: line 3 comes with it when it fits, else next.
                    Some(p) => {
                        assert_eq!((r.seqs, p, rest), (Some((2, 2)), Position::line(3), ""));
                        break;
                    }
                    None => {
                        assert_eq!(
                            (r.seqs, rest),
                            (Some((2, 3)), format!("{}\n", lines[2]).as_str())
                        );
                        break;
                    }
                }
            }
            assert_eq!(got, lines[1], "the windows join to the line, byte for byte");
            assert!(windows > 10, "{windows} windows");
        }
        // An offset inside a character is moved back to its start; from the middle of a line
        // with room to spare, the rest of it and the next line come.
        let mid = lines[1].len() / 2;
        let r = read(
            &dir,
            Position {
                seq: 2,
                offset: mid as u64,
            },
            3,
            Budget::Bytes(10_000_000),
        )
        .unwrap();
        let back = lines[1].floor_char_boundary(mid);
        assert_eq!(r.text, format!("{}\n{}\n", &lines[1][back..], lines[2]));
        assert_eq!(
            r.window.map(|w| (w.start, w.end)),
            Some((back as u64, lines[1].len() as u64))
        );
        assert_eq!((r.seqs, r.next), (Some((2, 3)), None));
    }

    /// Issue 38 item 8: after one reply over 64 MiB (which `content-file` accepts) every
    /// later search and read of the task failed; the long line is read past in blocks.
    #[test]
    fn a_line_over_64_mib_is_read_in_blocks_and_the_history_after_it_still_reads() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        // The long line written as the store writes one (seq first), without serde: a 64 MiB
        // string through serde_json takes long in a debug build.
        let half = "x".repeat(MAX_LINE_BYTES / 2);
        let huge = format!("HUGE {half}{} {half}€€ END", "€".repeat(100));
        let line = |seq: u64, role: &str, text: &str| {
            format!(
                r#"{{"seq":{seq},"role":"{role}","content":"{text}","timestamp":"t","tokens":1}}"#
            )
        };
        let lines = [
            line(1, "user", "one"),
            line(2, "assistant", &huge),
            line(3, "user", "the needle after it"),
        ];
        assert!(lines[1].len() > MAX_LINE_BYTES);
        let mut text = lines.join("\n");
        text.push('\n');
        std::fs::write(tmp.path().join(MESSAGES), text).unwrap();
        // From the start: line 1 whole, then the page ends before the long line.
        let r = read(&dir, Position::line(1), 3, Budget::Bytes(1 << 20)).unwrap();
        assert_eq!(r.text, format!("{}\n", lines[0]));
        assert_eq!(r.next, Some(Position::line(2)));
        // The long line: a window of it from its start, and where it goes on.
        let r = read(&dir, Position::line(2), 3, Budget::Bytes(1 << 20)).unwrap();
        let w = r.window.unwrap();
        assert_eq!((w.seq, w.start, w.len), (2, 0, lines[1].len() as u64));
        assert!(r.text.len() <= 1 << 20 && w.end > 0);
        assert_eq!(r.text, format!("{}\n", &lines[1][..w.end as usize]));
        assert_eq!(
            r.next,
            Some(Position {
                seq: 2,
                offset: w.end
            })
        );
        // From the middle of it (inside a character: moved back), then its end.
        let mid = lines[1].find('€').unwrap() as u64 + 1;
        let r = read(
            &dir,
            Position {
                seq: 2,
                offset: mid,
            },
            2,
            Budget::Bytes(1000),
        )
        .unwrap();
        let w = r.window.unwrap();
        let back = lines[1].floor_char_boundary(mid as usize);
        assert_eq!(w.start, back as u64);
        assert_eq!(r.text, format!("{}\n", &lines[1][back..w.end as usize]));
        let near_end = lines[1].len() as u64 - 20;
        let r = read(
            &dir,
            Position {
                seq: 2,
                offset: near_end,
            },
            3,
            Budget::Bytes(1000),
        )
        .unwrap();
        assert_eq!(r.text, format!("{}\n", &lines[1][near_end as usize..]));
        assert_eq!(r.next, Some(Position::line(3)));
        // The line after it reads, and so does a search.
        let r = read(&dir, Position::line(3), 3, Budget::Bytes(1000)).unwrap();
        assert_eq!(r.text, format!("{}\n", lines[2]));
        assert_eq!(r.last_seq_seen, 3);
        let found =
            crate::history::search(&dir, &crate::history::Query::words("needle").unwrap(), 10)
                .unwrap();
        assert_eq!(found.hits.len(), 1);
        assert_eq!((found.hits[0].seq, found.messages), (3, 3));
    }

    #[test]
    fn a_line_over_the_whole_budget_is_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        write_history(tmp.path(), 3, 5000);
        let r = read(&dir, Position::line(2), 3, Budget::Tokens(200)).unwrap();
        assert_eq!(r.seqs, Some((2, 2)));
        let end = r.window.unwrap().end;
        assert_eq!(
            r.next,
            Some(Position {
                seq: 2,
                offset: end
            })
        );
        assert!(estimate_tokens(&r.text) <= 200, "{}", r.text.len());
    }
}
