//! [`search`]: history lines matching a [`Query`], newest first.
//!
//! One forward pass over summaries.jsonl (one line per compression), then one over
//! messages.jsonl, keeping only the newest `limit` matches: memory is `limit` snippets plus one
//! line, whatever the history's size. A `tool` message whose result was cut for the context
//! (its content ends with the tool store's note naming `tool-results/N.txt`) is searched in
//! that file's full text instead. A summary line of messages.jsonl is matched through its line
//! in summaries.jsonl, which says which messages it covers. The history tools' own calls and
//! results are left out ([`super::is_history_tool`]).

use std::collections::{HashMap, VecDeque};
use std::io::BufReader;
use std::ops::Range;

use ctxhost_format::files::{MESSAGES, SUMMARIES, TOOL_RESULTS_DIR};
use ctxhost_format::jsonl::{BlockLineReader, LineReader, NextLine};
use ctxhost_format::{HistoryLine, SummaryLine};

use super::{HistoryError, MAX_LINE_BYTES, MAX_RESULT_FILE_BYTES, snippet};
use crate::task_dir::TaskDir;

/// Most matches one search returns.
pub const MAX_LIMIT: usize = 100;

/// Longest pattern (words or regular expression), bytes.
pub const MAX_PATTERN_BYTES: usize = 1000;

/// Compiled size limit of a regular expression, bytes (the `regex` crate's `size_limit`): a
/// pattern that compiles larger is refused, so a search cannot take the host's memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Characters of context shown before and after a match.
const SNIPPET_BEFORE: usize = 60;
const SNIPPET_AFTER: usize = 100;

/// What to look for.
#[derive(Debug, Clone)]
pub enum Query {
    /// Every word must occur in the line, in any case and order.
    Words(Vec<regex::Regex>),
    /// A regular expression (the `regex` crate's syntax; `(?i)` for any case).
    Regex(regex::Regex),
}

impl Query {
    /// Words separated by white space, matched case-insensitively, all of them required.
    /// Errors: no word, or a text over [`MAX_PATTERN_BYTES`].
    pub fn words(text: &str) -> Result<Query, HistoryError> {
        check_len(text)?;
        let words = text
            .split_whitespace()
            .map(|w| build(&regex::escape(w), true))
            .collect::<Result<Vec<_>, _>>()?;
        if words.is_empty() {
            return Err(HistoryError::Argument(
                "`query` is empty: give the words to search for".into(),
            ));
        }
        Ok(Query::Words(words))
    }

    /// A regular expression. Errors: a pattern that does not compile (the `regex` crate's
    /// message), that compiles larger than its size limit, or is over [`MAX_PATTERN_BYTES`].
    pub fn regex(pattern: &str) -> Result<Query, HistoryError> {
        check_len(pattern)?;
        if pattern.is_empty() {
            return Err(HistoryError::Argument("`query` is empty".into()));
        }
        Ok(Query::Regex(build(pattern, false)?))
    }

    /// Where `text` matches: the earliest match (for words, when every word occurs).
    pub fn find(&self, text: &str) -> Option<Range<usize>> {
        match self {
            Query::Regex(r) => r.find(text).map(|m| m.range()),
            Query::Words(words) => {
                let mut first: Option<Range<usize>> = None;
                for w in words {
                    let m = w.find(text)?.range();
                    if first.as_ref().is_none_or(|f| m.start < f.start) {
                        first = Some(m);
                    }
                }
                first
            }
        }
    }
}

fn check_len(text: &str) -> Result<(), HistoryError> {
    if text.len() > MAX_PATTERN_BYTES {
        return Err(HistoryError::Argument(format!(
            "`query` is {} bytes, more than {MAX_PATTERN_BYTES}",
            text.len()
        )));
    }
    Ok(())
}

fn build(pattern: &str, case_insensitive: bool) -> Result<regex::Regex, HistoryError> {
    regex::RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            HistoryError::Argument(format!("`query` is not a valid regular expression: {e}"))
        })
}

/// Where a match was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HitSource {
    /// The message's line in messages.jsonl.
    Message,
    /// The full text of a cut tool result (`tool-results/N.txt`, relative to the task dir).
    ToolResultFile(String),
    /// A summary (summaries.jsonl), covering messages `start_seq..=end_seq`.
    Summary {
        /// The summary's id.
        id: u64,
        /// First message summarised.
        start_seq: u64,
        /// Last message summarised.
        end_seq: u64,
    },
}

/// One match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Seq of the line in messages.jsonl (for a summary, the seq of its line there; 0 when
    /// messages.jsonl has none).
    pub seq: u64,
    /// The message's role (`summary` for a summary).
    pub role: String,
    /// For a tool result or an assistant's tool calls: the tool's name (the first call's).
    pub tool_name: Option<String>,
    /// Where the match is.
    pub source: HitSource,
    /// The match with some context, on one line.
    pub snippet: String,
}

/// What [`search`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The newest matches, newest first, at most the limit.
    pub hits: Vec<Hit>,
    /// Matches in all (more than `hits` when the limit cut them).
    pub total: u64,
    /// Messages searched (lines of messages.jsonl).
    pub messages: u64,
}

/// The newest `limit` (1..=[`MAX_LIMIT`]) lines of the history of `dir` that match `query`
/// (module doc). Errors: an unreadable file or line (naming it), a limit out of range.
pub fn search(dir: &TaskDir, query: &Query, limit: usize) -> Result<Found, HistoryError> {
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(HistoryError::Argument(format!(
            "`limit` is {limit}: it must be from 1 to {MAX_LIMIT}"
        )));
    }
    let mut total = 0u64;
    // Summaries first: one line per compression, in the order they were made, so the newest
    // `limit` of their matches are all that can be among the newest `limit` in all.
    let mut summary_hits: VecDeque<(u64, Hit)> = VecDeque::with_capacity(limit + 1);
    if let Some(mut lines) = open(dir, SUMMARIES)? {
        while let Some((_, s)) = lines.next_value::<SummaryLine>()? {
            if let Some(at) = query.find(&s.summary) {
                total += 1;
                if summary_hits.len() == limit {
                    summary_hits.pop_front();
                }
                summary_hits.push_back((
                    s.id,
                    Hit {
                        seq: 0,
                        role: "summary".into(),
                        tool_name: None,
                        source: HitSource::Summary {
                            id: s.id,
                            start_seq: s.start_seq,
                            end_seq: s.end_seq,
                        },
                        snippet: snippet(&s.summary, at, SNIPPET_BEFORE, SNIPPET_AFTER),
                    },
                ));
            }
        }
    }
    let mut summary_seq: HashMap<u64, u64> = HashMap::new();
    let mut newest: VecDeque<Hit> = VecDeque::with_capacity(limit + 1);
    let mut messages = 0u64;
    if let Some(mut lines) = open_blocks(dir, MESSAGES)? {
        loop {
            let line = match lines.next_bounded(MAX_LINE_BYTES)? {
                None => break,
                Some(NextLine::Line(n, bytes)) => serde_json::from_slice::<HistoryLine>(bytes)
                    .map_err(|e| {
                        HistoryError::Line(ctxhost_format::jsonl::JsonlError::Invalid {
                            file: dir.show(MESSAGES),
                            line: n,
                            message: format!("not valid: {e}"),
                        })
                    })?,
                // A line too long to hold (a reply of more than 64 MiB): read past in blocks,
                // unsearched; the lines after it are searched as usual.
                Some(NextLine::Long { .. }) => {
                    lines.read_long_line(|_| ())?;
                    messages += 1;
                    continue;
                }
            };
            messages += 1;
            if let Some(id) = line.summary_id {
                summary_seq.insert(id, line.seq);
                continue;
            }
            let Some(hit) = match_line(dir, query, &line)? else {
                continue;
            };
            total += 1;
            newest.push_back(hit);
            if newest.len() > limit {
                newest.pop_front();
            }
        }
    }
    let mut hits: Vec<Hit> = newest.into_iter().collect();
    for (id, mut hit) in summary_hits {
        hit.seq = summary_seq.get(&id).copied().unwrap_or(0);
        hits.push(hit);
    }
    // Newest first; a summary before the messages of the same seq (it cannot share one).
    hits.sort_by_key(|h| std::cmp::Reverse(h.seq));
    hits.truncate(limit);
    Ok(Found {
        hits,
        total,
        messages,
    })
}

fn open(
    dir: &TaskDir,
    name: &str,
) -> Result<Option<LineReader<BufReader<std::fs::File>>>, HistoryError> {
    match dir.open_read_if_exists(name) {
        Ok(Some(f)) => Ok(Some(
            LineReader::new(BufReader::with_capacity(64 * 1024, f), dir.show(name))
                .max_line_bytes(MAX_LINE_BYTES),
        )),
        Ok(None) => Ok(None),
        Err(e) => Err(HistoryError::io(dir, name, e)),
    }
}

fn open_blocks(
    dir: &TaskDir,
    name: &str,
) -> Result<Option<BlockLineReader<std::fs::File>>, HistoryError> {
    match dir.open_read_if_exists(name) {
        Ok(Some(f)) => Ok(Some(BlockLineReader::new(f, dir.show(name)))),
        Ok(None) => Ok(None),
        Err(e) => Err(HistoryError::io(dir, name, e)),
    }
}

/// The match of one history line: its cut tool result's full text, else its content, else
/// its tool calls (`name(arguments)`).
fn match_line(
    dir: &TaskDir,
    query: &Query,
    line: &HistoryLine,
) -> Result<Option<Hit>, HistoryError> {
    let tool_name = line.tool_name.clone().or_else(|| {
        line.tool_calls
            .as_ref()
            .and_then(|c| c.first())
            .map(|c| c.function.name.clone())
    });
    let hit = |source: HitSource, text: &str, at: Range<usize>| Hit {
        seq: line.seq,
        role: line.role.clone(),
        tool_name: tool_name.clone(),
        source,
        snippet: snippet(text, at, SNIPPET_BEFORE, SNIPPET_AFTER),
    };
    if line
        .tool_name
        .as_deref()
        .is_some_and(super::is_history_tool)
    {
        return Ok(None);
    }
    let content = line.content.as_deref().unwrap_or("");
    if line.role == "tool"
        && let Some(file) = spilled_file(content)
    {
        let read = dir.open_read_if_exists(&file).and_then(|f| {
            f.map(|f| {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(
                    &mut std::io::Read::take(f, MAX_RESULT_FILE_BYTES),
                    &mut bytes,
                )
                .map(|_| bytes)
            })
            .transpose()
        });
        match read {
            Ok(Some(bytes)) => {
                let text = String::from_utf8_lossy(&bytes);
                if let Some(at) = query.find(&text) {
                    return Ok(Some(hit(HitSource::ToolResultFile(file), &text, at)));
                }
                return Ok(None);
            }
            // Gone (deleted by hand): the cut text in the message is what is left.
            Ok(None) => {}
            Err(e) => return Err(HistoryError::io(dir, &file, e)),
        }
    }
    if let Some(at) = query.find(content) {
        return Ok(Some(hit(HitSource::Message, content, at)));
    }
    for call in line.tool_calls.iter().flatten() {
        if super::is_history_tool(&call.function.name) {
            continue;
        }
        let text = format!("{}({})", call.function.name, call.function.arguments);
        if let Some(at) = query.find(&text) {
            return Ok(Some(hit(HitSource::Message, &text, at)));
        }
    }
    Ok(None)
}

/// The `tool-results/N.txt` named by the tool store's note at the end of a cut result.
pub(crate) fn spilled_file(content: &str) -> Option<String> {
    let marker = format!("the full output is in {TOOL_RESULTS_DIR}/");
    let rest = content.strip_suffix(']')?;
    let at = rest.rfind(&marker)?;
    let name = &rest[at + marker.len()..];
    let n = name.strip_suffix(".txt")?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| format!("{TOOL_RESULTS_DIR}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxhost_format::{ChatMessage, ToolCall};

    fn history(dir: &std::path::Path, messages: &[HistoryLine]) {
        let text: String = messages
            .iter()
            .map(|m| serde_json::to_string(m).unwrap() + "\n")
            .collect();
        std::fs::write(dir.join(MESSAGES), text).unwrap();
    }

    fn line(seq: u64, m: ChatMessage) -> HistoryLine {
        HistoryLine {
            seq,
            role: m.role,
            content: m.content,
            timestamp: "2026-01-01T00:00:00.000Z".into(),
            tokens: 1,
            tool_name: m.tool_name,
            tool_calls: m.tool_calls,
            tool_call_id: m.tool_call_id,
            summary_id: None,
            is_error: m.is_error,
            reasoning: m.reasoning,
        }
    }

    #[test]
    fn words_match_in_any_case_and_order_and_all_are_needed() {
        let q = Query::words("Error  main.rs").unwrap();
        assert_eq!(q.find("in MAIN.RS: error E0425"), Some(3..10));
        assert_eq!(q.find("error only"), None);
        assert!(Query::words("  ").is_err());
        let e = Query::regex("(unclosed").unwrap_err().to_string();
        assert!(e.contains("not a valid regular expression"), "{e}");
        let e = Query::regex("a{1000}{1000}").unwrap_err().to_string();
        assert!(e.contains("regular expression"), "{e}");
    }

    #[test]
    fn newest_matches_first_with_cut_results_and_summaries() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        std::fs::create_dir(tmp.path().join("tool-results")).unwrap();
        std::fs::write(
            tmp.path().join("tool-results/2.txt"),
            "head\n...\nthe hidden fact: PORT=8421 deep in the output\n",
        )
        .unwrap();
        let call = ToolCall::new("c1", "read_file", r#"{"path":"src/port.rs"}"#);
        let mut summary = line(6, ChatMessage::text("assistant", "the agent found PORT"));
        summary.summary_id = Some(1);
        history(
            tmp.path(),
            &[
                line(1, ChatMessage::text("system", "be brief")),
                line(
                    2,
                    ChatMessage::text("user", "Find the port. Keep PORT below 9000."),
                ),
                line(3, ChatMessage::assistant_calls(vec![call.clone()])),
                line(
                    4,
                    ChatMessage::tool_result(
                        &call,
                        "head\n\n[output cut: showing 4 of 50 characters (~1 of ~12 tokens); the full output is in tool-results/2.txt]",
                    ),
                ),
                line(5, ChatMessage::text("assistant", "nothing here")),
                summary,
            ],
        );
        std::fs::write(
            tmp.path().join(SUMMARIES),
            serde_json::json!({"id": 1, "start_seq": 2, "end_seq": 5, "summary": "the agent found PORT",
                "original_tokens": 100, "summary_tokens": 5, "ratio": 0.05,
                "timestamp": "2026-01-01T00:00:00.000Z"})
            .to_string()
                + "\n",
        )
        .unwrap();
        let found = search(&dir, &Query::words("port").unwrap(), 10).unwrap();
        let seqs: Vec<u64> = found.hits.iter().map(|h| h.seq).collect();
        assert_eq!(seqs, [6, 4, 3, 2]);
        assert_eq!(found.total, 4);
        assert_eq!(found.messages, 6);
        assert_eq!(
            found.hits[0].source,
            HitSource::Summary {
                id: 1,
                start_seq: 2,
                end_seq: 5
            }
        );
        assert_eq!(
            found.hits[1].source,
            HitSource::ToolResultFile("tool-results/2.txt".into())
        );
        assert!(
            found.hits[1].snippet.contains("PORT=8421"),
            "{:?}",
            found.hits[1]
        );
        assert_eq!(found.hits[1].tool_name.as_deref(), Some("read_file"));
        assert_eq!(
            found.hits[2].snippet,
            r#"read_file({"path":"src/port.rs"})"#
        );
        // The limit keeps the newest; the total counts them all.
        let found = search(&dir, &Query::regex(r"PORT=\d+|below \d+").unwrap(), 1).unwrap();
        assert_eq!(found.hits.len(), 1);
        assert_eq!(found.hits[0].seq, 4);
        assert_eq!(found.total, 2);
        assert!(search(&dir, &Query::words("x").unwrap(), 0).is_err());
        assert!(search(&dir, &Query::words("x").unwrap(), MAX_LIMIT + 1).is_err());
    }

    #[test]
    fn a_spilled_file_is_named_only_by_the_tool_stores_note() {
        assert_eq!(
            spilled_file("abc\n\n[output cut: x; the full output is in tool-results/12.txt]"),
            Some("tool-results/12.txt".into())
        );
        assert_eq!(
            spilled_file("the full output is in tool-results/../x.txt]"),
            None
        );
        assert_eq!(spilled_file("plain"), None);
    }
}
