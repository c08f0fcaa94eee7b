//! Questions the host asks about a context, next to the invariants they rely on: is its last
//! message a final answer, which tool calls at its end still wait for a result. Pure functions
//! over messages ([`pending_tool_calls`], [`final_answer`]), and their versions over a context
//! file (`current.jsonl`: one chat message per line), which read it from its end: only the
//! last lines, so a resumed task pays the same whatever the size of its context.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader};
use std::path::Path;

use anyhow::Context;
use ctxhost_format::jsonl::LineReader;
use ctxhost_format::tail::BackwardLines;
use ctxhost_format::{ChatMessage, ToolCall};

/// The tool calls of the last assistant message that have no `tool` message after it, in the
/// order the model made them. Empty when the context ends with every call answered (or has
/// none). Feed the context's messages in order.
pub fn pending_tool_calls(messages: impl IntoIterator<Item = ChatMessage>) -> Vec<ToolCall> {
    let mut pending: Vec<ToolCall> = Vec::new();
    for m in messages {
        track_pending(&mut pending, m);
    }
    pending
}

/// One step of [`pending_tool_calls`]: `m` answers a pending call, or starts a new list.
fn track_pending(pending: &mut Vec<ToolCall>, m: ChatMessage) {
    match m.role.as_str() {
        "tool" => {
            if let Some(id) = &m.tool_call_id
                && let Some(i) = pending.iter().position(|c| &c.id == id)
            {
                pending.remove(i);
            }
        }
        _ => *pending = m.calls().to_vec(),
    }
}

/// The final answer `last` (a context's last message) is, if it is one: the text of an
/// assistant message without tool calls (the agent loop's definition of a final answer).
pub fn final_answer(last: &ChatMessage) -> Option<String> {
    (last.role == "assistant" && last.calls().is_empty())
        .then(|| last.content.clone())
        .flatten()
        .filter(|c| !c.trim().is_empty())
}

/// A line reader over `path`, or `None` when the file does not exist. Errors name the file.
pub fn open_lines(path: &Path) -> anyhow::Result<Option<LineReader<BufReader<File>>>> {
    match File::open(path) {
        Ok(f) => Ok(Some(LineReader::new(
            BufReader::new(f),
            path.display().to_string(),
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot open {}", path.display())),
    }
}

/// The last message of the context file `path` (`None` when empty or missing), read from the
/// end of the file: only its last line is read and parsed. Errors name the file and the byte
/// offset of a last line that is not a chat message.
pub fn last_message_in(path: &Path) -> anyhow::Result<Option<ChatMessage>> {
    let Some(mut lines) = open_backwards(path)? else {
        return Ok(None);
    };
    Ok(lines.prev_value::<ChatMessage>()?.map(|(_, m)| m))
}

/// [`pending_tool_calls`] of the context file `path`, read from its end: the `tool` messages
/// at its end and the message before them, whatever the file's size. Same result as feeding
/// every message to [`pending_tool_calls`]: only the last non-`tool` message's calls can be
/// pending, and each `tool` message after it answers the first pending call with its id.
pub fn pending_tool_calls_in(path: &Path) -> anyhow::Result<Vec<ToolCall>> {
    let Some(mut lines) = open_backwards(path)? else {
        return Ok(Vec::new());
    };
    // Ids answered after the last non-tool message, with how many times each.
    let mut answered: HashMap<String, usize> = HashMap::new();
    while let Some((_, m)) = lines.prev_value::<ChatMessage>()? {
        if m.role == "tool" {
            if let Some(id) = m.tool_call_id {
                *answered.entry(id).or_default() += 1;
            }
            continue;
        }
        let mut pending = Vec::new();
        for call in m.calls() {
            match answered.get_mut(&call.id) {
                Some(n) if *n > 0 => *n -= 1,
                _ => pending.push(call.clone()),
            }
        }
        return Ok(pending);
    }
    Ok(Vec::new())
}

/// A backward line reader over `path` ([`BackwardLines`]), or `None` when it does not exist.
pub fn open_backwards(path: &Path) -> anyhow::Result<Option<BackwardLines<File>>> {
    match File::open(path) {
        Ok(f) => Ok(Some(BackwardLines::from_end(
            f,
            path.display().to_string(),
        )?)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot open {}", path.display())),
    }
}

/// The final answer the context file `path` already ends with ([`final_answer`] of its last
/// message). A process that died after appending it, before the task was marked completed,
/// leaves such a context; the next run completes the task without asking the model again.
pub fn final_answer_in(path: &Path) -> anyhow::Result<Option<String>> {
    Ok(last_message_in(path)?.as_ref().and_then(final_answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(ids: &[&str]) -> ChatMessage {
        ChatMessage::assistant_calls(
            ids.iter()
                .map(|i| ToolCall::new(*i, "read", "{}"))
                .collect(),
        )
    }
    fn result(id: &str) -> ChatMessage {
        ChatMessage::tool_result(&ToolCall::new(id, "read", "{}"), "ok")
    }

    #[test]
    fn pending_calls_are_the_unanswered_calls_of_the_last_assistant_message() {
        let ids = |v: Vec<ToolCall>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
        let sys = ChatMessage::text("system", "s");
        assert!(pending_tool_calls([sys.clone()]).is_empty());
        assert_eq!(
            ids(pending_tool_calls([
                sys.clone(),
                call(&["a", "b", "c"]),
                result("b")
            ])),
            ["a", "c"]
        );
        assert!(pending_tool_calls([call(&["a"]), result("a")]).is_empty());
        // An earlier message's calls no longer count once a new message comes.
        assert!(pending_tool_calls([call(&["a"]), ChatMessage::text("user", "u")]).is_empty());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("current.jsonl");
        let text: String = [sys, call(&["x", "y"]), result("x")]
            .iter()
            .map(|m| serde_json::to_string(m).unwrap() + "\n")
            .collect();
        std::fs::write(&p, text).unwrap();
        assert_eq!(ids(pending_tool_calls_in(&p).unwrap()), ["y"]);
    }

    #[test]
    fn a_final_answer_is_an_assistant_text_without_calls() {
        assert_eq!(
            final_answer(&ChatMessage::text("assistant", "the end")).as_deref(),
            Some("the end")
        );
        assert_eq!(final_answer(&ChatMessage::text("assistant", "  ")), None);
        assert_eq!(final_answer(&ChatMessage::text("user", "hi")), None);
        assert_eq!(final_answer(&call(&["a"])), None);
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            final_answer_in(&dir.path().join("none.jsonl")).unwrap(),
            None
        );
    }

    use proptest::prelude::*;

    /// A message of a small alphabet: user text, assistant text or calls (ids may repeat),
    /// tool results (for ids that may or may not be waiting).
    fn message() -> impl Strategy<Value = ChatMessage> {
        let id = prop::sample::select(vec!["a", "b", "c"]);
        prop_oneof![
            Just(ChatMessage::text("user", "u")),
            Just(ChatMessage::text("assistant", "t")),
            prop::collection::vec(id.clone(), 0..4).prop_map(|ids| call(&ids)),
            id.prop_map(result),
        ]
    }

    proptest! {
        /// Reading from the end gives what streaming every message gives.
        #[test]
        fn the_backward_reads_agree_with_the_streaming_definitions(
            messages in prop::collection::vec(message(), 0..12),
            blank_every in 0usize..4,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("current.jsonl");
            let mut text = String::new();
            for (i, m) in messages.iter().enumerate() {
                text.push_str(&serde_json::to_string(m).unwrap());
                text.push('\n');
                if blank_every > 0 && i % blank_every == 0 {
                    text.push_str("  \n");
                }
            }
            std::fs::write(&p, text).unwrap();
            let ids = |v: Vec<ToolCall>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
            prop_assert_eq!(
                ids(pending_tool_calls_in(&p).unwrap()),
                ids(pending_tool_calls(messages.clone()))
            );
            prop_assert_eq!(last_message_in(&p).unwrap(), messages.last().cloned());
        }
    }
}
