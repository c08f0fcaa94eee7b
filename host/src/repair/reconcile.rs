//! current.jsonl behind messages.jsonl: the message store appends to messages.jsonl first, then
//! to current.jsonl, so a crash in between leaves current.jsonl without the last history
//! line(s); [`reconcile_current`] finds them (and appends them). Both files are read from
//! their end: a resumed task pays for the lines it lacks, not for the size of its history.
//!
//! Only messages are copied: summaries and context-repair notes
//! ([`ctxhost_format::HistoryLine::is_message`]) never are, nor is a `tool` line that answers no
//! call waiting at the end of current.jsonl (an orphan or second result in the history, or an
//! answer a context repair already put in its place): copying it would make a context the
//! provider rejects.

use anyhow::{Context, bail};
use ctxhost_format::HistoryLine;
use ctxhost_format::compress::parse_summary_range;
use ctxhost_format::files::{CURRENT, MESSAGES};

use crate::invariants::pairing::same_message_sent;
use crate::invariants::queries::{
    bounded, last_message_in, open_backwards, open_lines, pending_tool_calls_in, track_pending,
};
use crate::task_dir::TaskDir;
use ctxhost_format::jsonl::to_line;

/// History lines kept in memory while looking for the lines current.jsonl lacks.
pub const RECONCILE_WINDOW: usize = 256;

/// The history lines current.jsonl lacks at its end (see the module docs), by seq, and
/// whether current.jsonl must be rebuilt from the whole history (it is empty or missing while
/// messages.jsonl holds messages and no summary). With `apply`, they are appended (or
/// current.jsonl rebuilt atomically). Errors when the two files cannot be matched up (the
/// last message of current.jsonl is not among the last [`RECONCILE_WINDOW`] history lines).
pub fn reconcile_current(dir: &TaskDir, apply: bool) -> anyhow::Result<Vec<u64>> {
    let messages = dir.file_path(MESSAGES);
    let current = dir.file_path(CURRENT);
    let Some(last) = last_message_in(dir, CURRENT)? else {
        return rebuild_current(dir, apply);
    };
    if dir
        .open_read_if_exists(MESSAGES)
        .with_context(|| format!("cannot open {}", messages.display()))?
        .is_none()
    {
        bail!(
            "{} is missing while {} holds the context: the history of the task is lost (restore \
             it from a backup)",
            messages.display(),
            current.display()
        );
    }
    // The history read from its end, up to the newest message line the same as current's last
    // message as sent (fewest missing lines first).
    let window = window_from_end(dir, |h| same_message_sent(&h.to_chat(), &last))?;
    let lines: Vec<&HistoryLine> = window.lines.iter().collect();
    let last_summary_seq = window.last_summary_seq;
    let matched = window.matched;
    let missing: Vec<&HistoryLine> = match matched {
        Some(i) => lines[i + 1..].to_vec(),
        None => {
            // Right after a compression that kept no message, current.jsonl ends with the
            // summary message: what follows the summary line in the history is missing.
            let is_summary = last.role == "user"
                && last
                    .content
                    .as_deref()
                    .and_then(parse_summary_range)
                    .is_some();
            match (is_summary, last_summary_seq) {
                (true, Some(s)) if lines.first().is_none_or(|f| f.seq < s) => {
                    lines.iter().copied().filter(|h| h.seq > s).collect()
                }
                _ => bail!(
                    "{}: its last message is not among the last {RECONCILE_WINDOW} messages of {}; cannot tell which lines it lacks",
                    current.display(),
                    messages.display()
                ),
            }
        }
    };
    // Only what answers a call waiting at the end of current.jsonl, or starts a new message.
    let mut pending = pending_tool_calls_in(dir, CURRENT)?;
    let mut copy = Vec::with_capacity(missing.len());
    for h in missing {
        let m = h.to_chat();
        let answers_pending = m
            .tool_call_id
            .as_ref()
            .is_some_and(|id| pending.iter().any(|c| &c.id == id));
        if m.role == "tool" && !answers_pending {
            tracing::debug!(
                seq = h.seq,
                "{}: not copying a tool result that answers no waiting call",
                messages.display()
            );
            continue;
        }
        track_pending(&mut pending, m.clone());
        copy.push((h.seq, m));
    }
    if apply {
        let ctx = || format!("cannot append to {}", current.display());
        for (_, m) in &copy {
            dir.append_line(CURRENT, &to_line(m)?).with_context(ctx)?;
        }
        if !copy.is_empty() {
            dir.sync_file(CURRENT).with_context(ctx)?;
        }
    }
    Ok(copy.iter().map(|(seq, _)| *seq).collect())
}

/// The last message lines of messages.jsonl ([`window_from_end`]).
struct Window {
    /// At most [`RECONCILE_WINDOW`] message lines (no summary, no note), oldest first, ending
    /// with the file's last one.
    lines: Vec<HistoryLine>,
    /// Index in `lines` of the line accepted by the match, if one was (the oldest kept).
    matched: Option<usize>,
    /// Seq of the newest summary line among (and after) the lines read.
    last_summary_seq: Option<u64>,
}

/// Reads messages.jsonl of `dir` from its end, keeping message lines (summaries and
/// context-repair notes skipped, [`HistoryLine::is_message`]) until one is accepted by
/// `is_match` or [`RECONCILE_WINDOW`] are kept (or the file starts); notes the newest summary
/// line met. Only those lines are read, whatever the size of the history.
fn window_from_end(
    dir: &TaskDir,
    mut is_match: impl FnMut(&HistoryLine) -> bool,
) -> anyhow::Result<Window> {
    let mut newest_first = Vec::new();
    let mut last_summary_seq = None;
    let mut matched = false;
    if let Some(mut lines) = open_backwards(dir, MESSAGES)? {
        while let Some((_, h)) = lines.prev_value::<HistoryLine>().map_err(bounded)? {
            if h.summary_id.is_some() {
                last_summary_seq = last_summary_seq.or(Some(h.seq));
                continue;
            }
            if h.is_note() {
                continue;
            }
            matched = is_match(&h);
            newest_first.push(h);
            if matched || newest_first.len() == RECONCILE_WINDOW {
                break;
            }
        }
    }
    newest_first.reverse();
    Ok(Window {
        matched: matched.then_some(0),
        lines: newest_first,
        last_summary_seq,
    })
}

/// current.jsonl of `dir` is empty or missing: when messages.jsonl holds messages and no
/// summary (the first history line(s) were written, current.jsonl never), current.jsonl is
/// rebuilt from its message lines (with `apply`, atomically); returns their seqs. Reads the
/// whole history (this only happens before a task's first LLM call).
fn rebuild_current(dir: &TaskDir, apply: bool) -> anyhow::Result<Vec<u64>> {
    let messages = dir.file_path(MESSAGES);
    let current = dir.file_path(CURRENT);
    let mut last_summary_seq: Option<u64> = None;
    let mut message_lines = 0u64;
    if let Some(mut lines) = open_lines(dir, MESSAGES)? {
        while let Some((_, h)) = lines.next_value::<HistoryLine>()? {
            if h.summary_id.is_some() {
                last_summary_seq = Some(h.seq);
            } else if !h.is_note() {
                message_lines += 1;
            }
        }
    }
    if message_lines == 0 {
        return Ok(Vec::new());
    }
    if last_summary_seq.is_some() {
        bail!(
            "{} is empty but {} holds a compressed history: the context cannot be rebuilt",
            current.display(),
            messages.display()
        );
    }
    let mut seqs = Vec::new();
    let mut text = String::new();
    if let Some(mut lines) = open_lines(dir, MESSAGES)? {
        while let Some((_, h)) = lines.next_value::<HistoryLine>()? {
            if !h.is_message() {
                continue;
            }
            seqs.push(h.seq);
            text.push_str(&to_line(&h.to_chat())?);
            text.push('\n');
        }
    }
    if apply {
        dir.write_atomic(CURRENT, text.as_bytes())
            .with_context(|| format!("cannot write {}", current.display()))?;
    }
    Ok(seqs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repair::testing::*;
    use ctxhost_format::ChatMessage;
    use std::fs;
    use std::path::Path;

    /// [`reconcile_current`] on the task directory at `dir`.
    fn reconcile(dir: &Path, apply: bool) -> anyhow::Result<Vec<u64>> {
        reconcile_current(&TaskDir::open(dir).unwrap(), apply)
    }

    /// current.jsonl at `dir` keeps the context invariants.
    fn assert_sound(dir: &Path) {
        crate::invariants::check_context_file(&TaskDir::open(dir).unwrap(), CURRENT, false)
            .unwrap();
    }

    #[test]
    fn current_gets_the_history_lines_it_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let history = one_round();
        write_task(dir.path(), &history, &history[..3]);
        assert_eq!(reconcile(dir.path(), false).unwrap(), [4]);
        assert_eq!(lines_of(&dir.path().join(CURRENT)).len(), 3, "dry run");
        assert_eq!(reconcile(dir.path(), true).unwrap(), [4]);
        assert_eq!(reconcile(dir.path(), true).unwrap(), Vec::<u64>::new());
        assert_sound(dir.path());
    }

    #[test]
    fn an_empty_current_is_rebuilt_from_an_uncompressed_history() {
        let dir = tempfile::tempdir().unwrap();
        write_task(dir.path(), &[sys()], &[]);
        assert_eq!(reconcile(dir.path(), true).unwrap(), [1]);
        let lines = lines_of(&dir.path().join(CURRENT));
        assert_eq!(
            serde_json::from_str::<ChatMessage>(&lines[0]).unwrap(),
            sys()
        );
        // Both empty: nothing to do.
        let empty = tempfile::tempdir().unwrap();
        assert!(reconcile(empty.path(), true).unwrap().is_empty());
    }

    /// A context without its history (messages.jsonl deleted, or a symbolic link in its place
    /// removed by the repair) says so, not that the two files do not match.
    #[test]
    fn a_missing_history_behind_a_context_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let history = [sys(), ChatMessage::text("user", "go")];
        write_task(dir.path(), &history, &history);
        fs::remove_file(dir.path().join(MESSAGES)).unwrap();
        let err = reconcile_current(&TaskDir::open(dir.path()).unwrap(), true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("messages.jsonl is missing while")
                && err.contains("the history of the task is lost"),
            "{err}"
        );
        assert_eq!(lines_of(&dir.path().join(CURRENT)).len(), 2, "untouched");
    }

    #[test]
    fn after_a_compression_the_lines_after_the_summary_are_matched() {
        let dir = tempfile::tempdir().unwrap();
        let history = [
            sys(),
            ChatMessage::text("user", "go"),
            ChatMessage::text("assistant", "thinking"),
            ChatMessage::text("user", "more"),
        ];
        write_task(dir.path(), &history, &[]);
        // A summary line (seq 5), then one new message (seq 6) that current lacks; current is
        // system + summary message only (nothing kept).
        let summary = HistoryLine {
            seq: 5,
            role: "assistant".into(),
            content: Some("they talked".into()),
            timestamp: "t".into(),
            tokens: 3,
            tool_name: None,
            tool_calls: None,
            tool_call_id: None,
            is_error: false,
            reasoning: Vec::new(),
            summary_id: Some(1),
        };
        let new = HistoryLine {
            seq: 6,
            summary_id: None,
            role: "assistant".into(),
            content: Some("next".into()),
            ..summary.clone()
        };
        let mut text = fs::read_to_string(dir.path().join(MESSAGES)).unwrap();
        for h in [&summary, &new] {
            text.push_str(&serde_json::to_string(h).unwrap());
            text.push('\n');
        }
        fs::write(dir.path().join(MESSAGES), text).unwrap();
        let current = [
            sys(),
            ctxhost_format::compress::summary_message(1, 4, "they talked"),
        ];
        let body: String = current
            .iter()
            .map(|m| serde_json::to_string(m).unwrap() + "\n")
            .collect();
        fs::write(dir.path().join(CURRENT), body).unwrap();
        assert_eq!(reconcile(dir.path(), true).unwrap(), [6]);
        assert_eq!(reconcile(dir.path(), true).unwrap(), Vec::<u64>::new());
    }

    #[test]
    fn an_orphan_or_second_result_in_the_history_is_not_copied() {
        let dir = tempfile::tempdir().unwrap();
        let mut history = one_round();
        history.extend([result("a"), result("zz")]);
        write_task(dir.path(), &history, &history[..4]);
        assert!(reconcile(dir.path(), true).unwrap().is_empty());
        assert_sound(dir.path());
        // A crash between the two appends: the waiting call's result is still copied.
        write_task(dir.path(), &history[..4], &history[..3]);
        assert_eq!(reconcile(dir.path(), true).unwrap(), [4]);
    }

    #[test]
    fn an_unmatched_current_is_an_error_naming_both_files() {
        let dir = tempfile::tempdir().unwrap();
        write_task(
            dir.path(),
            &[sys(), ChatMessage::text("user", "go")],
            &[sys(), ChatMessage::text("user", "something else")],
        );
        let e = reconcile(dir.path(), true).unwrap_err().to_string();
        assert!(
            e.contains("current.jsonl") && e.contains("messages.jsonl"),
            "{e}"
        );
    }
}
