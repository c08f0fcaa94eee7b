//! Questions the host asks about a context, next to the invariants they rely on: is its last
//! message a final answer, which tool calls at its end still wait for a result. Pure functions
//! over messages ([`pending_calls`], [`track_pending`], [`final_answer`]), and their versions
//! over a context file (`current.jsonl`: one chat message per line), which read it from its
//! end: only the last lines, so a resumed task pays the same whatever the size of its context.
//!
//! Which calls wait for a result has one rule, the pairing invariants' (see
//! [`super::pairing`]): a call is answered by any `tool` message after its assistant message
//! that names its id in `tool_call_id`. A second result for the same id answers nothing more
//! (the pairing repair drops it as a duplicate), and two calls of one message never share an id
//! (a [`super::Violation::DuplicateToolCallId`]; the host makes recorded ids unique).

use std::fs::File;
use std::io::BufReader;

use anyhow::Context;
use ctxhost_format::jsonl::LineReader;
use ctxhost_format::tail::{BackwardLines, TailError};
use ctxhost_format::{ChatMessage, ToolCall};

use crate::task_dir::TaskDir;

/// Whether `answer` is a result for `call`: a `tool` message naming the call's id.
fn answers(answer: &ChatMessage, call: &ToolCall) -> bool {
    answer.role == "tool" && answer.tool_call_id.as_deref() == Some(call.id.as_str())
}

/// The calls of a tool round still waiting for a result: those of `reply` (an assistant
/// message) that no message of `answers` (the `tool` messages after it) names in its
/// `tool_call_id`, in call order (the module's rule).
pub fn pending_calls(reply: &ChatMessage, answers: &[ChatMessage]) -> Vec<ToolCall> {
    reply
        .calls()
        .iter()
        .filter(|c| !answers.iter().any(|a| self::answers(a, c)))
        .cloned()
        .collect()
}

/// [`pending_calls`] one message at a time: `pending` holds the calls still waiting after the
/// messages fed so far; a `tool` message `m` answers those it names, any other message starts
/// a new round with its own calls (none for a message without calls).
pub fn track_pending(pending: &mut Vec<ToolCall>, m: ChatMessage) {
    match m.role.as_str() {
        "tool" => pending.retain(|c| !answers(&m, c)),
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

/// A line reader over the file `name` of `dir`, or `None` when it does not exist. Errors
/// name the file.
pub fn open_lines(
    dir: &TaskDir,
    name: &str,
) -> anyhow::Result<Option<LineReader<BufReader<File>>>> {
    match dir.open_read_if_exists(name) {
        Ok(Some(f)) => Ok(Some(LineReader::new(BufReader::new(f), dir.show(name)))),
        Ok(None) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot open {}", dir.show(name))),
    }
}

/// The last message of the context file `name` of `dir` (`None` when empty or missing), read
/// from the end of the file: only its last line is read and parsed. Errors name the file and
/// the byte offset of a last line that is not a chat message.
pub fn last_message_in(dir: &TaskDir, name: &str) -> anyhow::Result<Option<ChatMessage>> {
    let Some(mut lines) = open_backwards(dir, name)? else {
        return Ok(None);
    };
    prev_message(&mut lines)
}

/// The tool calls at the end of the context file `name` of `dir` still waiting for a result:
/// the `pending` of its [`tail_in`] when it ends with a tool round, else none. Read from its
/// end (the `tool` messages at its end and the message before them), whatever the file's size;
/// the same as feeding every message to [`track_pending`].
pub fn pending_tool_calls_in(dir: &TaskDir, name: &str) -> anyhow::Result<Vec<ToolCall>> {
    Ok(match tail_in(dir, name)? {
        Tail::ToolRound { pending, .. } => pending,
        _ => Vec::new(),
    })
}

/// A backward line reader over the file `name` of `dir` ([`BackwardLines`]), or `None` when it
/// does not exist. Errors name the file.
pub fn open_backwards(dir: &TaskDir, name: &str) -> anyhow::Result<Option<BackwardLines<File>>> {
    match dir.open_read_if_exists(name) {
        Ok(Some(f)) => Ok(Some(
            BackwardLines::from_end(f, dir.show(name)).map_err(bounded)?,
        )),
        Ok(None) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot open {}", dir.show(name))),
    }
}

/// The previous chat message of `lines` (`None` at the start of the file).
fn prev_message(lines: &mut BackwardLines<File>) -> anyhow::Result<Option<ChatMessage>> {
    Ok(lines
        .prev_value::<ChatMessage>()
        .map_err(bounded)?
        .map(|(_, m)| m))
}

/// A backward read's error as the host reports it: serde quotes the value it did not expect,
/// which a component wrote, so the text is bounded and escaped ([`crate::untrusted::text`]).
pub fn bounded(e: TailError) -> anyhow::Error {
    anyhow::anyhow!(
        "{}",
        crate::untrusted::text(&e.to_string(), crate::untrusted::MAX_ERROR_BYTES)
    )
}

/// Where a context ends, as the agent loop resumes from it ([`tail_in`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tail {
    /// No message.
    Empty,
    /// A `system` or `user` message: ready for a model call (or, for the task's first prompt,
    /// for the strategy's start).
    Prompt,
    /// An assistant reply without tool calls.
    Answer(ChatMessage),
    /// An assistant reply with tool calls, followed by the `tool` messages answering some or
    /// all of them (`answers`, in order); `pending` are the calls still unanswered.
    ToolRound {
        /// The assistant message that made the calls.
        reply: ChatMessage,
        /// The `tool` messages after it.
        answers: Vec<ChatMessage>,
        /// Its calls without an answer, in call order.
        pending: Vec<ToolCall>,
    },
}

/// How the context file `name` of `dir` ends ([`Tail`]), read from its end: the `tool`
/// messages at its end and the message before them. Same result as streaming the file through
/// the loop's rule (a `tool` message continues the tool round before it; after anything but an
/// assistant message with calls it leaves a prompt).
pub fn tail_in(dir: &TaskDir, name: &str) -> anyhow::Result<Tail> {
    let Some(mut lines) = open_backwards(dir, name)? else {
        return Ok(Tail::Empty);
    };
    let mut answers = Vec::new();
    let before = loop {
        match prev_message(&mut lines)? {
            Some(m) if m.role == "tool" => answers.push(m),
            other => break other,
        }
    };
    answers.reverse();
    Ok(match before {
        None if answers.is_empty() => Tail::Empty,
        Some(m) if m.role == "assistant" && !m.calls().is_empty() => {
            let pending = pending_calls(&m, &answers);
            Tail::ToolRound {
                reply: m,
                answers,
                pending,
            }
        }
        Some(m) if m.role == "assistant" && answers.is_empty() => Tail::Answer(m),
        _ => Tail::Prompt,
    })
}

/// The ids of every tool call in the history file `name` of `dir` (messages.jsonl, streamed;
/// empty when missing). A full read: the host keeps these ids incrementally
/// ([`crate::task::HistoryCounts::call_ids`], for [`super::ids::make_call_ids_unique`]); this is
/// the reference the tests (unit and `tests/all/lifecycle.rs`) compare those counts with, hence
/// public.
pub fn call_ids_in(dir: &TaskDir, name: &str) -> anyhow::Result<crate::invariants::ids::CallIds> {
    let mut ids = crate::invariants::ids::CallIds::default();
    let Some(mut lines) = open_lines(dir, name)? else {
        return Ok(ids);
    };
    while let Some((_, h)) = lines.next_value::<ctxhost_format::HistoryLine>()? {
        ids.extend(h.tool_calls.iter().flatten().map(|c| c.id.as_str()));
    }
    Ok(ids)
}

/// The final answer the context file `name` of `dir` already ends with ([`final_answer`] of
/// its last message). A process that died after appending it, before the task was marked
/// completed, leaves such a context; the next run completes the task without asking the model
/// again.
pub fn final_answer_in(dir: &TaskDir, name: &str) -> anyhow::Result<Option<String>> {
    Ok(last_message_in(dir, name)?.as_ref().and_then(final_answer))
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

    /// The calls still waiting after `messages`, streamed through [`track_pending`] (the
    /// definition [`pending_tool_calls_in`]'s backward read must agree with).
    fn pending_tool_calls(messages: impl IntoIterator<Item = ChatMessage>) -> Vec<ToolCall> {
        let mut pending: Vec<ToolCall> = Vec::new();
        for m in messages {
            track_pending(&mut pending, m);
        }
        pending
    }

    #[test]
    fn a_tool_rounds_pending_calls_are_those_no_answer_names_in_call_order() {
        let ids = |v: Vec<ToolCall>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
        let reply = call(&["a", "b", "c"]);
        assert_eq!(ids(pending_calls(&reply, &[])), ["a", "b", "c"]);
        assert_eq!(
            ids(pending_calls(&reply, &[result("c"), result("a")])),
            ["b"]
        );
        // An answer to a call of another round changes nothing.
        assert_eq!(ids(pending_calls(&reply, &[result("z")])), ["a", "b", "c"]);
        assert!(pending_calls(&ChatMessage::text("assistant", "done"), &[]).is_empty());
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
        // A second result for an answered id answers nothing more (the pairing rule).
        assert_eq!(
            ids(pending_tool_calls([
                call(&["a", "b"]),
                result("a"),
                result("a")
            ])),
            ["b"]
        );
        // An earlier message's calls no longer count once a new message comes.
        assert!(pending_tool_calls([call(&["a"]), ChatMessage::text("user", "u")]).is_empty());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("current.jsonl");
        let text: String = [sys, call(&["x", "y"]), result("x")]
            .iter()
            .map(|m| serde_json::to_string(m).unwrap() + "\n")
            .collect();
        std::fs::write(&p, text).unwrap();
        let task = TaskDir::open(dir.path()).unwrap();
        assert_eq!(
            ids(pending_tool_calls_in(&task, "current.jsonl").unwrap()),
            ["y"]
        );
    }

    #[test]
    fn the_tail_says_where_the_loop_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("current.jsonl");
        let task = TaskDir::open(dir.path()).unwrap();
        let write = |ms: &[ChatMessage]| {
            let text: String = ms
                .iter()
                .map(|m| serde_json::to_string(m).unwrap() + "\n")
                .collect();
            std::fs::write(&p, text).unwrap();
        };
        assert_eq!(tail_in(&task, "current.jsonl").unwrap(), Tail::Empty);
        let sys = ChatMessage::text("system", "s");
        let user = ChatMessage::text("user", "u");
        write(&[sys.clone(), user.clone()]);
        assert_eq!(tail_in(&task, "current.jsonl").unwrap(), Tail::Prompt);
        let answer = ChatMessage::text("assistant", "done");
        write(&[sys.clone(), user.clone(), answer.clone()]);
        assert_eq!(
            tail_in(&task, "current.jsonl").unwrap(),
            Tail::Answer(answer)
        );
        write(&[sys.clone(), user.clone(), call(&["a", "b"]), result("b")]);
        match tail_in(&task, "current.jsonl").unwrap() {
            Tail::ToolRound {
                answers, pending, ..
            } => {
                assert_eq!(answers.len(), 1);
                assert_eq!(pending.len(), 1);
                assert_eq!(pending[0].id, "a");
            }
            other => panic!("{other:?}"),
        }
        write(&[
            sys,
            user,
            call(&["a"]),
            result("a"),
            ChatMessage::text("user", "next"),
        ]);
        assert_eq!(tail_in(&task, "current.jsonl").unwrap(), Tail::Prompt);
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
        let task = TaskDir::open(dir.path()).unwrap();
        assert_eq!(final_answer_in(&task, "none.jsonl").unwrap(), None);
    }

    use proptest::prelude::*;

    /// A message of a small alphabet: user text, assistant text or calls (ids may repeat),
    /// tool results (for ids that may or may not be waiting).
    fn message() -> impl Strategy<Value = ChatMessage> {
        let id = prop::sample::select(vec!["a", "b", "c"]);
        prop_oneof![
            Just(ChatMessage::text("system", "s")),
            Just(ChatMessage::text("user", "u")),
            Just(ChatMessage::text("assistant", "t")),
            prop::collection::vec(id.clone(), 0..4).prop_map(|ids| call(&ids)),
            id.prop_map(result),
        ]
    }

    /// [`tail_in`]'s rule, streamed over every message (the definition the backward read
    /// must agree with).
    fn tail_streamed(messages: &[ChatMessage]) -> Tail {
        let mut tail = Tail::Empty;
        for m in messages.iter().cloned() {
            tail = match (tail, m) {
                (
                    Tail::ToolRound {
                        reply, mut answers, ..
                    },
                    m,
                ) if m.role == "tool" => {
                    answers.push(m);
                    Tail::ToolRound {
                        reply,
                        answers,
                        pending: Vec::new(),
                    }
                }
                (_, m) if m.role == "assistant" && !m.calls().is_empty() => Tail::ToolRound {
                    reply: m,
                    answers: Vec::new(),
                    pending: Vec::new(),
                },
                (_, m) if m.role == "assistant" => Tail::Answer(m),
                (_, _) => Tail::Prompt,
            };
        }
        if let Tail::ToolRound { reply, answers, .. } = tail {
            let pending = pending_calls(&reply, &answers);
            return Tail::ToolRound {
                reply,
                answers,
                pending,
            };
        }
        tail
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
            let task = TaskDir::open(dir.path()).unwrap();
            let ids = |v: Vec<ToolCall>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
            prop_assert_eq!(
                ids(pending_tool_calls_in(&task, "current.jsonl").unwrap()),
                ids(pending_tool_calls(messages.clone()))
            );
            prop_assert_eq!(
                last_message_in(&task, "current.jsonl").unwrap(),
                messages.last().cloned()
            );
            prop_assert_eq!(tail_in(&task, "current.jsonl").unwrap(), tail_streamed(&messages));
        }
    }
}
