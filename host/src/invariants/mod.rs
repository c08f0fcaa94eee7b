//! The context invariants the host enforces whatever a component returns (DESIGN.md §5).
//!
//! Pure checks over chat message lists, fed one message at a time so a context file of any size
//! is checked in constant memory (plus the ids of the tool calls still waiting for an answer):
//!
//! 1. the first message is the system prompt, and no other message is a system message;
//! 2. every `tool` message answers a tool call of the assistant message right before its run of
//!    tool messages (OpenAI's rule), each id at most once;
//! 3. every tool call is answered before the next non-tool message (and, unless the caller allows
//!    a pending tail, before the end);
//! 4. every tool call's arguments are a JSON object ([`is_valid_arguments`]): providers and chat
//!    templates parse them when the context is sent again.
//!
//! [`check_context_file`] streams a JSONL file through the checker and names file and line;
//! [`context_check::ContextCheck`] does the same from a checked prefix on (kept in
//! `context_checkpoint.json`), so the check before every request reads only what was appended.
//! [`Violation::is_repairable`] tells which breaks [`pairing`] repairs (a duplicate or orphan
//! result is dropped, a call without result answered, invalid arguments replaced) — the host
//! runs it before every request and on resume, recording what it did in messages.jsonl
//! ([`crate::repair::pairing`]).
//! [`ids`] keeps tool-call ids unique in the whole conversation.
//! [`queries`] answers what the host asks about a context (final answer, pending tool calls);
//! [`kept_tail`] checks that a compression kept the messages it keeps verbatim.

pub mod context_check;
pub mod ids;
pub mod kept_tail;
pub mod pairing;
pub mod queries;

use std::collections::BTreeSet;

use ctxhost_format::{ChatMessage, estimate_message_tokens};

use crate::task_dir::TaskDir;

/// A broken invariant, naming the 1-based message index (= line number in a JSONL file without
/// blank lines) where it was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// The context holds no message at all.
    #[error("the context is empty (it must start with the system prompt)")]
    Empty,
    /// The first message is not a system message.
    #[error("message {index}: the first message must be the system prompt, found role {role:?}")]
    SystemNotFirst {
        /// 1-based index of the message (its line in a JSONL file without blank lines).
        index: u64,
        /// The role found.
        role: String,
    },
    /// A system message after the first.
    #[error(
        "message {index}: a second system message (only the first message may be a system prompt)"
    )]
    ExtraSystem {
        /// 1-based index of the message (its line in a JSONL file without blank lines).
        index: u64,
    },
    /// A role other than system/user/assistant/tool.
    #[error("message {index}: unknown role {role:?}")]
    UnknownRole {
        /// 1-based index of the message (its line in a JSONL file without blank lines).
        index: u64,
        /// The role found.
        role: String,
    },
    /// A tool message whose id answers no pending tool call.
    #[error(
        "message {index}: tool result for {id:?} answers no tool call of the assistant message before it"
    )]
    OrphanToolResult {
        /// 1-based index of the message (its line in a JSONL file without blank lines).
        index: u64,
        /// The tool call id.
        id: String,
    },
    /// A second tool message for a call that already has its result.
    #[error("message {index}: a second tool result for {id:?}, whose call already has a result")]
    DuplicateToolResult {
        /// 1-based index of the message (its line in a JSONL file without blank lines).
        index: u64,
        /// The tool call id.
        id: String,
    },
    /// A tool call whose arguments are not a JSON object.
    #[error("message {index}: the arguments of tool call {id:?} are not a JSON object: {reason}")]
    InvalidToolArguments {
        /// 1-based index of the message (its line in a JSONL file without blank lines).
        index: u64,
        /// The tool call id.
        id: String,
        /// What is wrong (serde's message).
        reason: String,
    },
    /// A tool message without `tool_call_id`.
    #[error("message {index}: tool message without tool_call_id")]
    MissingToolCallId {
        /// 1-based index of the message (its line in a JSONL file without blank lines).
        index: u64,
    },
    /// Tool calls left unanswered when a non-tool message (or the end) came.
    #[error("message {index}: tool call(s) {ids:?} of an earlier assistant message have no result")]
    UnansweredToolCalls {
        /// 1-based index of the message (its line in a JSONL file without blank lines).
        index: u64,
        /// The tool call ids.
        ids: Vec<String>,
    },
    /// Two tool calls of one assistant message share an id.
    #[error("message {index}: duplicate tool call id {id:?}")]
    DuplicateToolCallId {
        /// 1-based index of the message (its line in a JSONL file without blank lines).
        index: u64,
        /// The tool call id.
        id: String,
    },
}

impl Violation {
    /// Whether [`pairing::PairingRepair`] can repair it without losing what the model was told:
    /// a duplicate or orphan tool result or one without `tool_call_id` (dropped; the history
    /// keeps it), tool calls without a result (answered), arguments that are not JSON
    /// (replaced by `{}`). The others (no or a misplaced system prompt, an unknown role, two
    /// calls of one message sharing an id) need a human.
    pub fn is_repairable(&self) -> bool {
        matches!(
            self,
            Violation::OrphanToolResult { .. }
                | Violation::DuplicateToolResult { .. }
                | Violation::MissingToolCallId { .. }
                | Violation::UnansweredToolCalls { .. }
                | Violation::InvalidToolArguments { .. }
        )
    }

    /// The 1-based index of the message where it was found (`None` for an empty context).
    pub fn index(&self) -> Option<u64> {
        match self {
            Violation::Empty => None,
            Violation::SystemNotFirst { index, .. }
            | Violation::ExtraSystem { index }
            | Violation::UnknownRole { index, .. }
            | Violation::OrphanToolResult { index, .. }
            | Violation::DuplicateToolResult { index, .. }
            | Violation::InvalidToolArguments { index, .. }
            | Violation::MissingToolCallId { index }
            | Violation::UnansweredToolCalls { index, .. }
            | Violation::DuplicateToolCallId { index, .. } => Some(*index),
        }
    }
}

/// Whether `arguments` (a tool call's `function.arguments`) is JSON text of an object, as
/// OpenAI's format requires and chat templates (llama.cpp, vLLM) and Anthropic's `tool_use.input`
/// parse. Text cut by the output token limit is not.
pub fn is_valid_arguments(arguments: &str) -> bool {
    arguments_error(arguments).is_none()
}

/// Why `arguments` is not JSON text of an object ([`is_valid_arguments`]), or `None`.
pub fn arguments_error(arguments: &str) -> Option<String> {
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(serde_json::Value::Object(_)) => None,
        Ok(other) => Some(format!(
            "a JSON {} where an object was expected",
            match other {
                serde_json::Value::Null => "null",
                serde_json::Value::Bool(_) => "boolean",
                serde_json::Value::Number(_) => "number",
                serde_json::Value::String(_) => "string",
                serde_json::Value::Array(_) => "array",
                serde_json::Value::Object(_) => "object",
            }
        )),
        Err(e) => Some(e.to_string()),
    }
}

/// What a successful check saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextSummary {
    /// Messages checked.
    pub messages: u64,
    /// Their estimated tokens ([`estimate_message_tokens`]).
    pub tokens: u64,
}

/// Streaming checker: feed messages in order with [`ContextChecker::push`], then call
/// [`ContextChecker::finish`]. Its state (serialisable: what a checkpoint keeps) is the counts
/// and the ids of the last assistant message's calls.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextChecker {
    summary: ContextSummary,
    /// Ids of the last assistant message's tool calls not yet answered.
    pending: BTreeSet<String>,
    /// Ids of the last assistant message's tool calls already answered.
    answered: BTreeSet<String>,
}

impl ContextChecker {
    /// A checker that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the messages pushed so far add up to.
    pub fn summary(&self) -> ContextSummary {
        self.summary
    }

    /// Check the next message.
    pub fn push(&mut self, message: &ChatMessage) -> Result<(), Violation> {
        self.push_counted(message, estimate_message_tokens(message))
    }

    /// [`ContextChecker::push`] of a message whose estimated tokens are `tokens` (counted by the
    /// caller: a line too long to hold has its long text counted as it is read, and left out
    /// of `message`).
    pub fn push_counted(&mut self, message: &ChatMessage, tokens: u64) -> Result<(), Violation> {
        let index = self.summary.messages + 1;
        match message.role.as_str() {
            "system" if index == 1 => {}
            "system" => return Err(Violation::ExtraSystem { index }),
            role if index == 1 => {
                return Err(Violation::SystemNotFirst {
                    index,
                    role: role.to_string(),
                });
            }
            "tool" => {
                let Some(id) = &message.tool_call_id else {
                    return Err(Violation::MissingToolCallId { index });
                };
                if self.answered.contains(id) {
                    return Err(Violation::DuplicateToolResult {
                        index,
                        id: id.clone(),
                    });
                }
                if !self.pending.remove(id) {
                    return Err(Violation::OrphanToolResult {
                        index,
                        id: id.clone(),
                    });
                }
                self.answered.insert(id.clone());
            }
            "user" | "assistant" => {
                self.expect_no_pending(index)?;
                self.answered.clear();
                for call in message.calls() {
                    if !self.pending.insert(call.id.clone()) {
                        return Err(Violation::DuplicateToolCallId {
                            index,
                            id: call.id.clone(),
                        });
                    }
                    if let Some(reason) = arguments_error(&call.function.arguments) {
                        return Err(Violation::InvalidToolArguments {
                            index,
                            id: call.id.clone(),
                            reason,
                        });
                    }
                }
            }
            role => {
                return Err(Violation::UnknownRole {
                    index,
                    role: role.to_string(),
                });
            }
        }
        self.summary.messages = index;
        self.summary.tokens += tokens;
        Ok(())
    }

    /// End of the context. With `allow_pending_tail`, the last assistant message's tool calls
    /// may still be waiting for results (a context saved between a tool call and its results).
    pub fn finish(self, allow_pending_tail: bool) -> Result<ContextSummary, Violation> {
        if self.summary.messages == 0 {
            return Err(Violation::Empty);
        }
        if !allow_pending_tail {
            self.expect_no_pending(self.summary.messages + 1)?;
        }
        Ok(self.summary)
    }

    fn expect_no_pending(&self, index: u64) -> Result<(), Violation> {
        if self.pending.is_empty() {
            Ok(())
        } else {
            Err(Violation::UnansweredToolCalls {
                index,
                ids: self.pending.iter().cloned().collect(),
            })
        }
    }
}

/// Check a list of messages (all tool calls answered).
pub fn check_messages<'a>(
    messages: impl IntoIterator<Item = &'a ChatMessage>,
) -> Result<ContextSummary, Violation> {
    let mut checker = ContextChecker::new();
    for m in messages {
        checker.push(m)?;
    }
    checker.finish(false)
}

/// Why a context file failed its check.
#[derive(Debug, thiserror::Error)]
pub enum ContextFileError {
    /// The file could not be read.
    #[error("{file}: {source}")]
    Io {
        /// The file.
        file: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is not a chat message.
    #[error("{file}:{line}: not a chat message line: {reason}")]
    Parse {
        /// The file.
        file: String,
        /// 1-based line number.
        line: u64,
        /// The parse error.
        reason: String,
    },
    /// A line is longer than [`context_check::MAX_CONTEXT_LINE_BYTES`]: not read whole.
    #[error(
        "{file}:{line}: longer than {max} bytes, more than any context that can be sent holds; not read"
    )]
    LineTooLong {
        /// The file.
        file: String,
        /// 1-based line number.
        line: u64,
        /// The cap (bytes).
        max: usize,
    },
    /// A message breaks an invariant.
    #[error("{file}:{line}: {violation}")]
    Violation {
        /// The file.
        file: String,
        /// 1-based line number.
        line: u64,
        /// Which invariant.
        violation: Violation,
    },
    /// The end of the file breaks an invariant (empty, or tool calls left unanswered).
    #[error("{file}: {violation}")]
    AtEnd {
        /// The file.
        file: String,
        /// Which invariant.
        violation: Violation,
    },
}

/// Stream the JSONL file `name` of the task directory `dir` (chat message lines) through
/// [`ContextChecker`]. Blank lines are skipped; errors name the file and its 1-based line
/// number. (A check from nothing: [`context_check::ContextCheck::check`].)
pub fn check_context_file(
    dir: &TaskDir,
    name: &str,
    allow_pending_tail: bool,
) -> Result<ContextSummary, ContextFileError> {
    context_check::ContextCheck::default().check(dir, name, allow_pending_tail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxhost_format::ToolCall;
    use proptest::prelude::*;

    fn sys() -> ChatMessage {
        ChatMessage::text("system", "you are an agent")
    }
    fn user(t: &str) -> ChatMessage {
        ChatMessage::text("user", t)
    }
    fn call(ids: &[&str]) -> ChatMessage {
        ChatMessage::assistant_calls(
            ids.iter()
                .map(|id| ToolCall::new(*id, "read", "{}"))
                .collect(),
        )
    }
    fn result(id: &str) -> ChatMessage {
        ChatMessage::tool_result(&ToolCall::new(id, "read", "{}"), "ok")
    }

    #[test]
    fn a_well_formed_context_passes_and_counts_tokens() {
        let ctx = vec![
            sys(),
            user("hi"),
            call(&["a", "b"]),
            result("b"),
            result("a"),
            user("ok"),
        ];
        let s = check_messages(&ctx).unwrap();
        assert_eq!(s.messages, 6);
        assert_eq!(
            s.tokens,
            ctx.iter().map(estimate_message_tokens).sum::<u64>()
        );
    }

    #[test]
    fn system_prompt_must_be_first_and_alone() {
        assert_eq!(check_messages(&[]), Err(Violation::Empty));
        assert!(matches!(
            check_messages(&[user("hi")]),
            Err(Violation::SystemNotFirst { index: 1, .. })
        ));
        assert_eq!(
            check_messages(&[sys(), sys()]),
            Err(Violation::ExtraSystem { index: 2 })
        );
    }

    #[test]
    fn orphan_and_unanswered_tool_messages_are_named() {
        assert_eq!(
            check_messages(&[sys(), result("x")]),
            Err(Violation::OrphanToolResult {
                index: 2,
                id: "x".into()
            })
        );
        assert_eq!(
            check_messages(&[sys(), call(&["a", "b"]), result("a"), user("next")]),
            Err(Violation::UnansweredToolCalls {
                index: 4,
                ids: vec!["b".into()]
            })
        );
        assert_eq!(
            check_messages(&[sys(), call(&["a"]), result("a"), result("a")]),
            Err(Violation::DuplicateToolResult {
                index: 4,
                id: "a".into()
            })
        );
        let mut bad = call(&["a"]);
        bad.tool_calls.as_mut().unwrap()[0].function.arguments = r#"{"path": "a.t"#.into();
        assert!(matches!(
            check_messages(&[sys(), bad, result("a")]),
            Err(Violation::InvalidToolArguments { index: 2, .. })
        ));
        assert_eq!(
            check_messages(&[sys(), call(&["a", "a"])]),
            Err(Violation::DuplicateToolCallId {
                index: 2,
                id: "a".into()
            })
        );
    }

    #[test]
    fn a_pending_tail_is_allowed_only_when_asked() {
        let mut c = ContextChecker::new();
        for m in [sys(), call(&["a"])] {
            c.push(&m).unwrap();
        }
        assert_eq!(c.finish(true).unwrap().messages, 2);
        assert!(matches!(
            check_messages(&[sys(), call(&["a"])]),
            Err(Violation::UnansweredToolCalls { index: 3, .. })
        ));
    }

    #[test]
    fn file_check_names_file_and_line() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        let path = tmp.path().join("current.jsonl");
        let lines = [
            serde_json::to_string(&sys()).unwrap(),
            String::new(),
            serde_json::to_string(&result("zz")).unwrap(),
        ];
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let err = check_context_file(&dir, "current.jsonl", false)
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("current.jsonl:3: message 2: tool result for \"zz\" answers no tool call of the assistant message before it"), "{err}");

        std::fs::write(&path, "{\"role\":\"system\",\"content\":\"s\"}\n{torn").unwrap();
        let err = check_context_file(&dir, "current.jsonl", false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("current.jsonl:2: not a chat message line"),
            "{err}"
        );
    }

    /// A random well-formed context: system prompt, then user turns and assistant turns, some
    /// with (parallel) tool calls answered in a random order.
    fn arb_context() -> impl Strategy<Value = Vec<ChatMessage>> {
        let turn = prop_oneof![
            "[a-z 上下文]{0,20}".prop_map(|t| vec![user(&t)]),
            (1usize..4, any::<u64>()).prop_map(|(n, seed)| {
                let ids: Vec<String> = (0..n).map(|i| format!("c{seed}_{i}")).collect();
                let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                let mut turn = vec![call(&refs)];
                let mut answers: Vec<ChatMessage> = ids.iter().map(|id| result(id)).collect();
                answers.rotate_left((seed % n as u64) as usize);
                turn.extend(answers);
                turn
            }),
        ];
        proptest::collection::vec(turn, 0..20).prop_map(|turns| {
            let mut ctx = vec![sys()];
            ctx.extend(turns.into_iter().flatten());
            ctx
        })
    }

    proptest! {
        #[test]
        fn well_formed_contexts_pass(ctx in arb_context()) {
            prop_assert_eq!(check_messages(&ctx).unwrap().messages, ctx.len() as u64);
        }

        #[test]
        fn dropping_any_tool_message_or_its_call_is_caught(ctx in arb_context(), pick in any::<prop::sample::Index>()) {
            let tool_positions: Vec<usize> = ctx.iter().enumerate().filter(|(_, m)| m.role == "tool").map(|(i, _)| i).collect();
            prop_assume!(!tool_positions.is_empty());
            let i = *pick.get(&tool_positions);
            let mut without_result = ctx.clone();
            without_result.remove(i);
            prop_assert!(check_messages(&without_result).is_err());
            // Remove the assistant message that made the call instead: its results become orphans.
            let call_at = (0..i).rev().find(|&j| ctx[j].role == "assistant").unwrap();
            let mut without_call = ctx.clone();
            without_call.remove(call_at);
            prop_assert!(check_messages(&without_call).is_err());
        }
    }
}
