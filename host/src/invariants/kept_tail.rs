//! The kept tail of a compression: the most recent messages a compressor keeps reach the new
//! context as they were (DESIGN.md §6: "the N most recent messages are kept").
//!
//! The tail the host expects is the `keep-recent-messages` most recent messages of the old
//! context, moved earlier so a tool call keeps its results ([`ctxhost_format::compress::cut_point`]).
//! A compressor may keep fewer (a tail bounded by `keep-recent-tokens`, or when they alone do
//! not fit the window) or more, may rewrite older messages (observation masking does), and may
//! mask or cut an older tool result it keeps with the mark that says so and where the full text
//! is ([`ctxhost_format::compress::is_marked_reduction`]: the builtins do this to the older
//! results of the newest tool-call group when it alone is over the token bound). What it may
//! not do is keep a message with other text: [`check_kept_tail`] compares the last `j` messages
//! of both files, where `j` is the expected tail's length, at most the new context's messages
//! after its first two lines (the system prompt and a summary): a context that is only the
//! system prompt and a summary keeps nothing and is not checked here. Every compared message is
//! verbatim, except a tool result other than the newest message, which may be a marked
//! reduction. Both files are streamed; only the `j` compared messages are held in memory.
//! Messages compare as chat messages (key order and an empty `tool_calls` list do not matter;
//! text, role, tool calls and ids do).

use crate::task_dir::TaskDir;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader};

use ctxhost_format::ChatMessage;
use ctxhost_format::compress::{LineKind, cut_point, is_marked_reduction, is_summary_line};

/// Why the kept tail check failed.
#[derive(Debug, thiserror::Error)]
pub enum KeptTailError {
    /// A kept message differs from the message it was kept from.
    #[error(
        "kept message {position} of {kept} (line {new_line} of the new context, role {role}) is not a verbatim copy of line {old_line} of the old context: {difference}; a compressor may keep fewer messages, or mask or cut an older tool result with its mark, but the messages it keeps must be kept as they were (keep-recent-messages {keep})"
    )]
    Rewritten {
        /// 1-based position within the compared tail.
        position: usize,
        /// Messages compared.
        kept: usize,
        /// 1-based message number in the new context.
        new_line: usize,
        /// 1-based message number in the old context.
        old_line: usize,
        /// The old message's role.
        role: String,
        /// What differs (`content`, `role`, `tool_calls`, ...).
        difference: String,
        /// `keep-recent-messages`.
        keep: usize,
    },
    /// A file could not be read or a line is not a chat message.
    #[error("{file}: {reason}")]
    Read {
        /// The file's name.
        file: String,
        /// What went wrong, with the line.
        reason: String,
    },
}

/// What [`check_kept_tail`] compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptTail {
    /// Length of the tail the host expects (`keep` moved earlier for tool groups).
    pub expected: usize,
    /// Messages compared (and found verbatim or, for older tool results, marked reductions).
    pub compared: usize,
    /// Of those, the tool results masked or cut with their mark.
    pub reduced: usize,
}

/// Check that the new context `new` ends with the old context `old`'s kept tail, verbatim (see
/// the module doc for which messages are compared); both are files of `dir` (opened through it:
/// no link followed). `keep` is `keep-recent-messages`.
pub fn check_kept_tail(
    dir: &TaskDir,
    old: &str,
    new: &str,
    keep: usize,
) -> Result<KeptTail, KeptTailError> {
    let (old_count, expected) = {
        let mut kinds = Vec::new();
        for_each_message(dir, old, |i, m| {
            kinds.push(if is_summary_line(i, m) {
                LineKind::Summary
            } else {
                LineKind::from_role(&m.role)
            });
        })?;
        (kinds.len(), kinds.len() - cut_point(&kinds, keep))
    };
    let mut new_count: usize = 0;
    for_each_message(dir, new, |_, _| new_count += 1)?;
    let compared = expected.min(new_count.saturating_sub(2));
    let old_tail = tail(dir, old, old_count, compared)?;
    let new_tail = tail(dir, new, new_count, compared)?;
    let mut reduced = 0;
    for (k, (o, n)) in old_tail.iter().zip(new_tail.iter()).enumerate() {
        let newest = k + 1 == compared;
        if !newest && is_reduced_result(o, n) {
            reduced += 1;
            continue;
        }
        if let Some(difference) = difference(o, n) {
            return Err(KeptTailError::Rewritten {
                position: k + 1,
                kept: compared,
                new_line: new_count - compared + k + 1,
                old_line: old_count - compared + k + 1,
                role: o.role.clone(),
                difference,
                keep,
            });
        }
    }
    Ok(KeptTail {
        expected,
        compared,
        reduced,
    })
}

/// Whether `new` is the tool result `old` with its content masked or cut with the mark that
/// says so ([`is_marked_reduction`]), everything else unchanged.
fn is_reduced_result(old: &ChatMessage, new: &ChatMessage) -> bool {
    old.role == "tool"
        && new.role == "tool"
        && old.tool_call_id == new.tool_call_id
        && old.tool_name == new.tool_name
        && new.calls().is_empty()
        && is_marked_reduction(
            old.content.as_deref().unwrap_or(""),
            new.content.as_deref().unwrap_or(""),
        )
}

/// The first field in which `new` differs from `old`, described; `None` when they are equal.
pub fn difference(old: &ChatMessage, new: &ChatMessage) -> Option<String> {
    let calls = |m: &ChatMessage| m.calls().to_vec();
    if old.role != new.role {
        Some(format!("role {:?} became {:?}", old.role, new.role))
    } else if old.content != new.content {
        let chars = |c: &Option<String>| c.as_deref().map(|s| s.chars().count()).unwrap_or(0);
        Some(format!(
            "its content changed ({} characters became {})",
            chars(&old.content),
            chars(&new.content)
        ))
    } else if calls(old) != calls(new) {
        Some("its tool calls changed".to_string())
    } else if old.tool_call_id != new.tool_call_id {
        Some("its tool_call_id changed".to_string())
    } else if old.tool_name != new.tool_name {
        Some("its tool_name changed".to_string())
    } else {
        None
    }
}

/// Calls `f(index, message)` for each chat message line of `path` (blank lines skipped).
fn for_each_message(
    dir: &TaskDir,
    name: &str,
    mut f: impl FnMut(usize, &ChatMessage),
) -> Result<(), KeptTailError> {
    let read = |reason: String| KeptTailError::Read {
        file: name.to_string(),
        reason,
    };
    let file = dir.open_read(name).map_err(|e| read(e.to_string()))?;
    let mut index = 0;
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| read(format!("line {}: {e}", i + 1)))?;
        if line.trim().is_empty() {
            continue;
        }
        let m: ChatMessage = serde_json::from_str(&line)
            .map_err(|e| read(format!("line {}: not a chat message: {e}", i + 1)))?;
        f(index, &m);
        index += 1;
    }
    Ok(())
}

/// The last `n` of the `count` messages of `path`.
fn tail(
    dir: &TaskDir,
    path: &str,
    count: usize,
    n: usize,
) -> Result<VecDeque<ChatMessage>, KeptTailError> {
    let mut out = VecDeque::with_capacity(n);
    if n == 0 {
        return Ok(out);
    }
    let skip = count - n;
    for_each_message(dir, path, |i, m| {
        if i >= skip {
            out.push_back(m.clone());
        }
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxhost_format::ToolCall;

    fn write(dir: &std::path::Path, name: &str, messages: &[ChatMessage]) -> &'static str {
        let path = dir.join(name);
        let text: String = messages
            .iter()
            .map(|m| serde_json::to_string(m).unwrap() + "\n")
            .collect();
        std::fs::write(&path, text).unwrap();
        Box::leak(name.to_string().into_boxed_str())
    }

    fn context() -> Vec<ChatMessage> {
        let mut call = ChatMessage::text("assistant", "");
        call.content = None;
        call.tool_calls = Some(vec![ToolCall::new("c1", "read", "{}")]);
        let mut result = ChatMessage::text("tool", "file text");
        result.tool_call_id = Some("c1".into());
        vec![
            ChatMessage::text("system", "sys"),
            ChatMessage::text("user", "task"),
            ChatMessage::text("assistant", "a1"),
            ChatMessage::text("user", "u2"),
            call,
            result,
            ChatMessage::text("assistant", "done"),
        ]
    }

    #[test]
    fn a_verbatim_tail_passes_and_the_cut_moves_to_the_tool_call() {
        let dir = tempfile::tempdir().unwrap();
        let old = context();
        let old_path = write(dir.path(), "old.jsonl", &old);
        // keep 2 → the cut lands on the tool result and moves to its call: 3 kept.
        let mut new = vec![old[0].clone(), ChatMessage::text("user", "summary")];
        new.extend_from_slice(&old[4..]);
        let new_path = write(dir.path(), "new.jsonl", &new);
        let kept =
            check_kept_tail(&TaskDir::open(dir.path()).unwrap(), old_path, new_path, 2).unwrap();
        assert_eq!(
            kept,
            KeptTail {
                expected: 3,
                compared: 3,
                reduced: 0
            }
        );
    }

    #[test]
    fn a_rewritten_kept_message_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let old = context();
        let old_path = write(dir.path(), "old.jsonl", &old);
        let mut new = vec![old[0].clone(), ChatMessage::text("user", "summary")];
        new.extend_from_slice(&old[4..]);
        new[4].content = Some("done, rewritten".into());
        let new_path = write(dir.path(), "new.jsonl", &new);
        let err = check_kept_tail(&TaskDir::open(dir.path()).unwrap(), old_path, new_path, 2)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("kept message 3 of 3 (line 5 of the new context, role assistant)"),
            "{err}"
        );
        assert!(err.contains("line 7 of the old context"), "{err}");
        assert!(err.contains("content changed"), "{err}");
    }

    #[test]
    fn only_a_summary_keeps_nothing_and_masking_older_messages_is_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let old = context();
        let old_path = write(dir.path(), "old.jsonl", &old);
        let only_summary = write(
            dir.path(),
            "summary.jsonl",
            &[old[0].clone(), ChatMessage::text("user", "summary")],
        );
        assert_eq!(
            check_kept_tail(
                &TaskDir::open(dir.path()).unwrap(),
                old_path,
                only_summary,
                5
            )
            .unwrap()
            .compared,
            0
        );
        let mut masked = old.clone();
        masked[2].content = Some("[masked]".into());
        let masked = write(dir.path(), "masked.jsonl", &masked);
        assert_eq!(
            check_kept_tail(&TaskDir::open(dir.path()).unwrap(), old_path, masked, 3)
                .unwrap()
                .compared,
            3
        );
    }

    /// A system prompt, the task, then parallel calls c1 and c2 with long results: the newest
    /// message is c2's result.
    fn parallel_context() -> Vec<ChatMessage> {
        let mut call = ChatMessage::text("assistant", "");
        call.content = None;
        call.tool_calls = Some(vec![
            ToolCall::new("c1", "read", "{}"),
            ToolCall::new("c2", "read", "{}"),
        ]);
        let result = |id: &str, fill: char| {
            let mut m = ChatMessage::text(
                "tool",
                format!("{id} head {} {id} tail", fill.to_string().repeat(8000)),
            );
            m.tool_call_id = Some(id.into());
            m
        };
        vec![
            ChatMessage::text("system", "sys"),
            ChatMessage::text("user", "task"),
            ChatMessage::text("assistant", "a1"),
            ChatMessage::text("user", "u2"),
            call,
            result("c1", 'x'),
            result("c2", 'y'),
        ]
    }

    #[test]
    fn a_shorter_tail_and_older_results_cut_or_masked_with_their_mark_pass() {
        use ctxhost_format::compress::{mask_placeholder, shrunk_result};
        let dir = tempfile::tempdir().unwrap();
        let task = TaskDir::open(dir.path()).unwrap();
        let old = parallel_context();
        let old_path = write(dir.path(), "old.jsonl", &old);
        // A token-bounded tail: only the newest group kept (keep 5 expects 5).
        let mut new = vec![old[0].clone(), ChatMessage::text("user", "summary")];
        new.extend_from_slice(&old[4..]);
        let short = write(dir.path(), "short.jsonl", &new);
        let kept = check_kept_tail(&task, old_path, short, 5).unwrap();
        assert_eq!((kept.expected, kept.compared, kept.reduced), (5, 3, 0));
        // c1's result cut (head and tail, with the note), then masked instead.
        let c1 = old[5].content.clone().unwrap();
        for content in [
            shrunk_result(&c1, 200, Some(4), "c1"),
            mask_placeholder(Some(4), "c1"),
        ] {
            new[3].content = Some(content);
            let cut = write(dir.path(), "cut.jsonl", &new);
            let kept = check_kept_tail(&task, old_path, cut, 5).unwrap();
            assert_eq!((kept.compared, kept.reduced), (3, 1));
        }
    }

    #[test]
    fn the_newest_message_cut_or_an_older_result_edited_is_a_rewrite() {
        use ctxhost_format::compress::shrunk_result;
        let dir = tempfile::tempdir().unwrap();
        let task = TaskDir::open(dir.path()).unwrap();
        let old = parallel_context();
        let old_path = write(dir.path(), "old.jsonl", &old);
        let mut base = vec![old[0].clone(), ChatMessage::text("user", "summary")];
        base.extend_from_slice(&old[4..]);

        let mut newest_cut = base.clone();
        let c2 = old[6].content.clone().unwrap();
        newest_cut[4].content = Some(shrunk_result(&c2, 200, Some(5), "c2"));
        let path = write(dir.path(), "newest.jsonl", &newest_cut);
        let err = check_kept_tail(&task, old_path, path, 5)
            .unwrap_err()
            .to_string();
        assert!(err.contains("kept message 3 of 3"), "{err}");

        let mut edited = base.clone();
        let c1 = old[5].content.clone().unwrap();
        edited[3].content =
            Some(shrunk_result(&c1, 200, Some(4), "c1").replace("c1 head", "c1 HEAD"));
        let path = write(dir.path(), "edited.jsonl", &edited);
        let err = check_kept_tail(&task, old_path, path, 5)
            .unwrap_err()
            .to_string();
        assert!(err.contains("kept message 2 of 3"), "{err}");
        assert!(err.contains("content changed"), "{err}");
    }
}
