//! A task's history read back (issue 27): what a compression summarised stays reachable.
//!
//! Functions over one task directory ([`TaskDir`]), streaming its files so memory stays flat
//! whatever the history's size (one line, or one cut tool result, in memory at a time):
//!
//! - [`search()`]: history lines matching words or a regular expression, newest first, from
//!   messages.jsonl, the full text of cut tool results (tool-results/) and summaries.jsonl.
//! - [`read()`]: the lines of messages.jsonl from one seq to another, verbatim, bounded by a
//!   token budget, saying where to continue.
//! - [`read_full()`]: the full text of a tool output cut in messages.jsonl
//!   (`tool-results/N.txt`), a window at a time from a byte offset.
//! - [`coverage()`]: what a seq range holds that a summary replaces (tool results and their
//!   size, file paths mentioned), for summaries.jsonl and the compaction record.
//!
//! The agent loop offers them to the model as the host's own tools ([`crate::tools::history`]);
//! they take plain values and return plain values, so another caller (a host import for
//! components) is a thin shim over them.

mod coverage;
mod full;
mod read;
mod search;

pub use coverage::{Coverage, ElidedResult, MAX_PATHS, coverage};
pub use full::{FullPage, read_full};
pub use read::{Budget, LineWindow, Position, ReadResult, for_each_line, read};
pub use search::{Found, Hit, HitSource, MAX_LIMIT, MAX_PATTERN_BYTES, Query, search};

/// The name the model calls [`search()`] by: its calls and their results are left out of
/// searches (a search would otherwise find itself and the matches it returned before).
pub const SEARCH_TOOL: &str = "history_search";
/// The name the model calls [`read()`] by (left out of searches too).
pub const READ_TOOL: &str = "history_read";

/// Whether `tool` is one of the history tools.
pub fn is_history_tool(tool: &str) -> bool {
    tool == SEARCH_TOOL || tool == READ_TOOL
}

/// Longest line of messages.jsonl or summaries.jsonl read, bytes: a longer one is an error
/// naming the file and line (the message store never writes one).
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Most bytes of one tool-results/ file searched (its first part, when larger).
pub const MAX_RESULT_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Why a history function failed: a file that cannot be read, a line that is not what the
/// format says (both name the file), or an argument out of range (names the argument).
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// A file of the task directory could not be opened or read.
    #[error("{file}: {message}")]
    Io {
        /// The file, as shown to users.
        file: String,
        /// What failed.
        message: String,
    },
    /// A line is not valid JSONL of its format.
    #[error("{0}")]
    Line(#[from] ctxhost_format::jsonl::JsonlError),
    /// An argument is out of range or malformed; the text says which and why.
    #[error("{0}")]
    Argument(String),
}

impl HistoryError {
    fn io(dir: &crate::task_dir::TaskDir, name: &str, e: impl std::fmt::Display) -> HistoryError {
        HistoryError::Io {
            file: dir.show(name),
            message: e.to_string(),
        }
    }
}

/// Most bytes of a search hit's snippet (the WIT's `history-hit.snippet`: "at most a few
/// hundred bytes"), its `…` marks included.
pub const MAX_SNIPPET_BYTES: usize = 400;

/// Most bytes of the match itself shown in a snippet (a longer match is cut there).
const MAX_MATCH_BYTES: usize = 160;

/// `text` around byte range `at` as one line: at most `before` characters before and `after`
/// characters after the match (the match cut to [`MAX_MATCH_BYTES`]), line breaks as spaces,
/// `…` where cut; at most [`MAX_SNIPPET_BYTES`] bytes in all.
pub(crate) fn snippet(
    text: &str,
    at: std::ops::Range<usize>,
    before: usize,
    after: usize,
) -> String {
    // A match longer than the bound (a regex that matched megabytes): its start only.
    if at.end - at.start > MAX_MATCH_BYTES {
        let end = text.floor_char_boundary(at.start + MAX_MATCH_BYTES);
        let end = if end == at.start {
            text.ceil_char_boundary(at.start + 1)
        } else {
            end
        };
        let mut out = around(&text[..end], at.start..end, before, 0);
        if !out.ends_with('…') {
            out.push('…');
        }
        return bounded_snippet(out);
    }
    bounded_snippet(around(text, at, before, after))
}

/// `s` cut to [`MAX_SNIPPET_BYTES`] (at a character boundary, with `…`).
fn bounded_snippet(mut s: String) -> String {
    if s.len() > MAX_SNIPPET_BYTES {
        s.truncate(s.floor_char_boundary(MAX_SNIPPET_BYTES - '…'.len_utf8()));
        s.push('…');
    }
    s
}

fn around(text: &str, at: std::ops::Range<usize>, before: usize, after: usize) -> String {
    let start = text[..at.start]
        .char_indices()
        .rev()
        .nth(before.saturating_sub(1))
        .map_or(0, |(i, _)| i);
    let start = if at.start == 0 { 0 } else { start };
    let end = text[at.end..]
        .char_indices()
        .nth(after)
        .map_or(text.len(), |(i, _)| at.end + i);
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.extend(
        text[start..end]
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c }),
    );
    if end < text.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snippet_is_one_line_around_the_match() {
        let text = "line one\nthe error: E0425 here\nlast";
        let at = text.find("E0425").unwrap();
        let s = snippet(text, at..at + 5, 7, 5);
        assert_eq!(s, "…error: E0425 here…");
        assert_eq!(snippet("abc", 0..1, 10, 10), "abc");
        let wide = "é".repeat(20);
        let s = snippet(&wide, 20..22, 3, 3);
        assert_eq!(s, format!("…{}…", "é".repeat(7)));
    }

    /// Issue 38 item 8: a snippet held the whole match (400 KB seen; the WIT promises a few
    /// hundred bytes).
    #[test]
    fn a_snippet_of_a_huge_match_is_a_few_hundred_bytes() {
        let text = format!("before {} after", "x".repeat(400_000));
        let s = snippet(&text, 7..400_007, 60, 100);
        assert!(s.len() <= MAX_SNIPPET_BYTES, "{}", s.len());
        assert!(s.starts_with("before xxx") && s.ends_with('…'), "{s}");
        let wide = "€".repeat(1000);
        let s = snippet(&wide, 0..wide.len(), 60, 100);
        assert!(s.len() <= MAX_SNIPPET_BYTES && s.starts_with('€'), "{s}");
        // Wide characters around a short match are bounded too.
        let text = format!("{}match{}", "€".repeat(100), "€".repeat(200));
        let s = snippet(&text, 300..305, 60, 100);
        assert!(s.len() <= MAX_SNIPPET_BYTES, "{}", s.len());
        assert!(s.contains("match"), "{s}");
    }
}
