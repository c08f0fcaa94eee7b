//! What a compression leaves behind for its readers (issue 27): the summary message says how
//! to get the originals back ([`frame_summary`]), and the summary's line in summaries.jsonl
//! records what it replaced ([`record_replaced`], the `compaction` object of
//! `docs/schemas/summaries.schema.json`).
//!
//! Both run after the compressor's context was checked and before it is installed; both are
//! additions to what the compressor wrote, so a failure is logged and the compression goes on.

use std::io::{BufReader, Read};

use ctxhost_format::compress::{is_summary_line, parse_summary_range};
use ctxhost_format::files::SUMMARIES;
use ctxhost_format::jsonl::{LineReader, to_line};
use ctxhost_format::{ChatMessage, SummaryLine};
use serde::{Deserialize, Serialize};

use crate::history::{self, ElidedResult};
use crate::task_dir::TaskDir;

/// Longest line of a context file [`frame_summary`] reads (the system prompt, the summary).
const MAX_LINE_BYTES: u64 = 64 * 1024 * 1024;

/// Largest summaries.jsonl [`record_replaced`] rewrites, bytes (one line per compression).
const MAX_SUMMARIES_BYTES: u64 = 256 * 1024 * 1024;

/// Start of the note [`frame_summary`] appends to a summary message.
pub const RECALL_NOTE_PREFIX: &str = "[The original messages ";

/// The note appended to the summary of messages `start..=end`.
pub fn recall_note(start: u64, end: u64) -> String {
    format!(
        "{RECALL_NOTE_PREFIX}{start}\u{2013}{end} are kept in this task's history: \
         history_read(from_seq={start}, to_seq={end}) returns them verbatim, history_search finds a detail in them.]"
    )
}

/// Append [`recall_note`] to the summary message (line 2) of the context file `file`, when it
/// has one without the note. Returns whether it did. Errors: reading or replacing the file.
pub fn frame_summary(dir: &TaskDir, file: &str) -> anyhow::Result<bool> {
    use std::io::BufRead;
    let mut reader = BufReader::new(dir.open_read(file)?);
    let mut first = Vec::new();
    let mut second = Vec::new();
    (&mut reader)
        .take(MAX_LINE_BYTES)
        .read_until(b'\n', &mut first)?;
    (&mut reader)
        .take(MAX_LINE_BYTES)
        .read_until(b'\n', &mut second)?;
    if !first.ends_with(b"\n") || !second.ends_with(b"\n") {
        return Ok(false);
    }
    let Ok(mut message) = serde_json::from_slice::<ChatMessage>(&second) else {
        return Ok(false);
    };
    if !is_summary_line(1, &message) {
        return Ok(false);
    }
    let content = message.content.take().unwrap_or_default();
    let Some((start, end)) = parse_summary_range(&content) else {
        return Ok(false);
    };
    if content.contains(RECALL_NOTE_PREFIX) {
        return Ok(false);
    }
    message.content = Some(format!("{content}\n\n{}", recall_note(start, end)));
    let line = to_line(&message)?;
    // The rest of the file is copied as it is, a block at a time.
    dir.write_atomic_with(file, |w| {
        w.write_all(&first)?;
        w.write_all(line.as_bytes())?;
        w.write_all(b"\n")?;
        std::io::copy(&mut reader, w).map(|_| ())
    })?;
    Ok(true)
}

/// The `compaction` object of a summaries.jsonl line: what the compression replaced and kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replaced {
    /// Seq of the summary's own line in messages.jsonl.
    pub summary_seq: u64,
    /// First message this summary took in that no earlier summary covered (`start_seq` when
    /// there was none; the rest of its range is the earlier summary, summarised again).
    pub new_start_seq: u64,
    /// Messages kept verbatim after the summary in the new context: `kept_start_seq..=
    /// kept_end_seq` (none when the end is before the start).
    pub kept_start_seq: u64,
    /// Last message kept verbatim (the one before the summary's line).
    pub kept_end_seq: u64,
    /// Tool results of `new_start_seq..=end_seq`, now only in the history.
    pub elided_tool_results: Vec<ElidedResult>,
    /// File paths mentioned in `new_start_seq..=end_seq` (at most [`history::MAX_PATHS`]).
    pub paths: Vec<String>,
}

/// Add the `compaction` object ([`Replaced`]) to the line of summary `summary_id` that the
/// compressor appended to summaries.jsonl after byte `mark` (its length before the
/// compression); `summary_seq` is the summary's line in messages.jsonl. The file is replaced
/// atomically. Returns whether the line was found.
pub fn record_replaced(
    dir: &TaskDir,
    mark: u64,
    summary_id: u64,
    summary_seq: u64,
) -> anyhow::Result<bool> {
    let bytes = dir.read_bounded(SUMMARIES, MAX_SUMMARIES_BYTES)?;
    let mark = (mark as usize).min(bytes.len());
    // The end of the last summary before this compression.
    let previous_end = {
        let mut lines = LineReader::new(BufReader::new(&bytes[..mark]), dir.show(SUMMARIES));
        let mut end = None;
        while let Some((_, s)) = lines.next_value::<SummaryLine>()? {
            end = Some(s.end_seq);
        }
        end
    };
    let tail = std::str::from_utf8(&bytes[mark..])?;
    let mut found = false;
    let mut out = bytes[..mark].to_vec();
    for line in tail.lines() {
        let mut value: serde_json::Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(_) => {
                out.extend_from_slice(line.as_bytes());
                out.push(b'\n');
                continue;
            }
        };
        match serde_json::from_value::<SummaryLine>(value.clone()) {
            Ok(s) if s.id == summary_id && !found => {
                let new_start = previous_end
                    .map_or(s.start_seq, |e| (e + 1).max(s.start_seq))
                    .min(s.end_seq.max(s.start_seq));
                let c = history::coverage(dir, new_start, s.end_seq)?;
                let replaced = Replaced {
                    summary_seq,
                    new_start_seq: new_start,
                    kept_start_seq: s.end_seq + 1,
                    kept_end_seq: summary_seq.saturating_sub(1),
                    elided_tool_results: c.tool_results,
                    paths: c.paths,
                };
                if let Some(o) = value.as_object_mut() {
                    o.insert("compaction".into(), serde_json::to_value(&replaced)?);
                }
                found = true;
            }
            _ => {}
        }
        out.extend_from_slice(to_line(&value)?.as_bytes());
        out.push(b'\n');
    }
    if found {
        dir.write_atomic(SUMMARIES, &out)?;
    }
    Ok(found)
}

/// The `compaction` object of a summaries.jsonl line read as JSON, if it has one.
pub fn replaced_of(line: &serde_json::Value) -> Option<Replaced> {
    serde_json::from_value(line.get("compaction")?.clone()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxhost_format::compress::summary_message;
    use ctxhost_format::{HistoryLine, ToolCall};

    #[test]
    fn the_summary_message_says_how_to_read_the_originals_once() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let line = |m: &ChatMessage| serde_json::to_string(m).unwrap() + "\n";
        let summary = summary_message(2, 9, "the agent read files.");
        std::fs::write(
            tmp.path().join("c.jsonl"),
            line(&ChatMessage::text("system", "s"))
                + &line(&summary)
                + &line(&ChatMessage::text("user", "go")),
        )
        .unwrap();
        assert!(frame_summary(&dir, "c.jsonl").unwrap());
        assert!(!frame_summary(&dir, "c.jsonl").unwrap(), "framed once");
        let lines: Vec<ChatMessage> = std::fs::read_to_string(tmp.path().join("c.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines[1].content.as_deref().unwrap(),
            "Summary of the conversation so far (messages 2\u{2013}9):\nthe agent read files.\n\n\
             [The original messages 2\u{2013}9 are kept in this task's history: history_read(from_seq=2, to_seq=9) \
             returns them verbatim, history_search finds a detail in them.]"
        );
        assert_eq!(lines[2], ChatMessage::text("user", "go"));
        assert_eq!(
            parse_summary_range(lines[1].content.as_deref().unwrap()),
            Some((2, 9))
        );
    }

    #[test]
    fn the_summary_line_records_what_it_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let call = ToolCall::new("c1", "read_file", r#"{"path":"src/a.rs"}"#);
        let messages = [
            ChatMessage::text("system", "s"),
            ChatMessage::text("user", "edit notes/todo.md"),
            ChatMessage::assistant_calls(vec![call.clone()]),
            ChatMessage::tool_result(&call, "fn a() {}"),
            ChatMessage::text("assistant", "done"),
            ChatMessage::text("user", "next"),
        ];
        let text: String = messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                serde_json::to_string(&HistoryLine::of(i as u64 + 1, m, "t")).unwrap() + "\n"
            })
            .collect();
        std::fs::write(tmp.path().join("messages.jsonl"), text).unwrap();
        let s = |id: u64, start: u64, end: u64| {
            serde_json::json!({"id": id, "start_seq": start, "end_seq": end, "summary": "x",
                "original_tokens": 10, "summary_tokens": 1, "ratio": 0.1, "timestamp": "t"})
            .to_string()
                + "\n"
        };
        let first = s(1, 2, 2);
        std::fs::write(tmp.path().join(SUMMARIES), first.clone() + &s(2, 2, 4)).unwrap();
        assert!(record_replaced(&dir, first.len() as u64, 2, 7).unwrap());
        let text = std::fs::read_to_string(tmp.path().join(SUMMARIES)).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            replaced_of(&lines[0]),
            None,
            "an earlier line is left as it was"
        );
        assert_eq!(
            replaced_of(&lines[1]).unwrap(),
            Replaced {
                summary_seq: 7,
                new_start_seq: 3,
                kept_start_seq: 5,
                kept_end_seq: 6,
                elided_tool_results: vec![ElidedResult {
                    seq: 4,
                    tool: Some("read_file".into()),
                    bytes: 9,
                    full_text: None
                }],
                paths: vec!["src/a.rs".into()],
            }
        );
        // The line still reads as a summary line.
        let _: SummaryLine = serde_json::from_value(lines[1].clone()).unwrap();
        assert!(!record_replaced(&dir, text.len() as u64, 3, 8).unwrap());
    }
}
