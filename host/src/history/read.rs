//! [`read`]: lines of messages.jsonl from one seq to another, verbatim, within a token budget.
//!
//! The first wanted line is found by bisecting the file on byte offsets (seqs run from 1
//! without gaps, so they grow with the offset): a few reads, whatever the file's size. From
//! there the lines are read one at a time until the range or the budget ends.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};

use ctxhost_format::estimate_tokens;
use ctxhost_format::files::MESSAGES;
use ctxhost_format::jsonl::LineReader;

use super::{HistoryError, MAX_LINE_BYTES};
use crate::bound;
use crate::task_dir::TaskDir;

/// Bisecting stops when the part left is smaller than this, bytes; it is then read forward.
const SCAN_BYTES: u64 = 64 * 1024;

/// What [`read`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    /// The lines, verbatim, each ending in `\n` (a line longer than the whole budget is cut,
    /// with a note saying so).
    pub text: String,
    /// Seqs of the first and last line given (`None` when the range holds no line).
    pub seqs: Option<(u64, u64)>,
    /// Where to continue when the budget ended before `to`.
    pub next: Option<u64>,
    /// Seq of the last line of messages.jsonl seen (the history's length when the read went
    /// to its end).
    pub last_seq_seen: u64,
}

#[derive(serde::Deserialize)]
struct SeqOnly {
    seq: u64,
}

/// The lines of messages.jsonl of `dir` with seq `from..=to`, as long as their estimated
/// tokens stay within `max_tokens` (at least one line is given, cut if need be). Errors: `from`
/// of 0 or after `to` (naming the argument), an unreadable file or line (naming it).
pub fn read(
    dir: &TaskDir,
    from: u64,
    to: u64,
    max_tokens: u64,
) -> Result<ReadResult, HistoryError> {
    if from == 0 {
        return Err(HistoryError::Argument(
            "`from_seq` must be at least 1".into(),
        ));
    }
    if to < from {
        return Err(HistoryError::Argument(format!(
            "`to_seq` ({to}) is before `from_seq` ({from})"
        )));
    }
    let mut result = ReadResult {
        text: String::new(),
        seqs: None,
        next: None,
        last_seq_seen: 0,
    };
    let Some(mut file) = dir
        .open_read_if_exists(MESSAGES)
        .map_err(|e| HistoryError::io(dir, MESSAGES, e))?
    else {
        return Ok(result);
    };
    let start = seek_before(&mut file, from).map_err(|e| HistoryError::io(dir, MESSAGES, e))?;
    file.seek(SeekFrom::Start(start))
        .map_err(|e| HistoryError::io(dir, MESSAGES, e))?;
    let mut lines = LineReader::new(
        BufReader::with_capacity(64 * 1024, file),
        dir.show(MESSAGES),
    )
    .max_line_bytes(MAX_LINE_BYTES);
    let budget = max_tokens.saturating_sub(bound::NOTE_RESERVE_TOKENS).max(1);
    let mut used = 0u64;
    while let Some((_, text)) = lines.next_line()? {
        let seq = serde_json::from_str::<SeqOnly>(text)
            .map_err(|e| {
                HistoryError::Argument(format!("{}: a line without a seq: {e}", dir.show(MESSAGES)))
            })?
            .seq;
        result.last_seq_seen = seq;
        if seq < from {
            continue;
        }
        if seq > to {
            break;
        }
        let tokens = estimate_tokens(text) + 1;
        if used + tokens > budget {
            if result.seqs.is_some() {
                result.next = Some(seq);
                break;
            }
            // One line larger than the whole budget: its head, and the next line after it.
            let cut = bound::cut_point(text, max_tokens).map_or(text.len(), |c| c.kept_bytes);
            result.text.push_str(&text[..cut]);
            result.text.push_str(&format!(
                "\n[line seq {seq} cut: showing {} of {} characters]\n",
                text[..cut].chars().count(),
                text.chars().count()
            ));
            result.seqs = Some((seq, seq));
            if seq < to {
                result.next = Some(seq + 1);
            }
            break;
        }
        used += tokens;
        result.text.push_str(text);
        result.text.push('\n');
        result.seqs = Some((result.seqs.map_or(seq, |s| s.0), seq));
    }
    Ok(result)
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
        buf.clear();
        // The rest of the line holding `mid - 1`: the next line starts after it.
        let skipped = reader.read_until(b'\n', &mut buf)? as u64;
        let line_start = mid - 1 + skipped;
        buf.clear();
        (&mut reader)
            .take(MAX_LINE_BYTES as u64)
            .read_until(b'\n', &mut buf)?;
        match serde_json::from_slice::<SeqOnly>(&buf) {
            Ok(line) if line.seq < from => lo = line_start,
            _ => hi = mid,
        }
    }
    Ok(lo)
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
        let r = read(&dir, 1500, 1502, 10_000).unwrap();
        assert_eq!(r.text, lines[1499..1502].join("\n") + "\n");
        assert_eq!((r.seqs, r.next), (Some((1500, 1502)), None));
        // A budget of about two lines: two given, continue from the third.
        let line_tokens = estimate_tokens(&lines[0]) + 1;
        let r = read(
            &dir,
            10,
            20,
            2 * line_tokens + bound::NOTE_RESERVE_TOKENS + 1,
        )
        .unwrap();
        assert_eq!(r.seqs, Some((10, 11)));
        assert_eq!(r.next, Some(12));
        // Past the end: nothing, and how long the history is.
        let r = read(&dir, 5000, 6000, 1000).unwrap();
        assert_eq!((r.seqs, r.last_seq_seen), (None, 3000));
        // Every start is found by the bisection.
        for from in [1, 2, 999, 2999, 3000] {
            let r = read(&dir, from, from, 1000).unwrap();
            assert_eq!(
                r.text,
                format!("{}\n", lines[from as usize - 1]),
                "from {from}"
            );
        }
        assert!(read(&dir, 0, 3, 100).is_err());
        assert!(read(&dir, 4, 3, 100).is_err());
    }

    #[test]
    fn a_line_over_the_whole_budget_is_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        write_history(tmp.path(), 3, 5000);
        let r = read(&dir, 2, 3, 200).unwrap();
        assert_eq!(r.seqs, Some((2, 2)));
        assert_eq!(r.next, Some(3));
        assert!(r.text.contains("[line seq 2 cut: showing"), "{}", r.text);
        assert!(estimate_tokens(&r.text) <= 200, "{}", r.text.len());
    }
}
