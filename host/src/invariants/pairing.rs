//! Repairing tool-call pairing in a context, one message at a time (Codex's
//! `ensure_call_outputs_present` / `remove_orphan_outputs`, streamed): what the host does to a
//! context about to be sent that breaks a repairable invariant ([`Violation::is_repairable`]).
//!
//! - [`drop_duplicate_result`]: a second `tool` message for a call that already has its result
//!   is dropped (the first answer is what the model acted on);
//! - [`drop_orphan_result`]: a `tool` message that answers no call of the assistant message
//!   before its run (or has no `tool_call_id`) is dropped;
//! - [`answer_unanswered_calls`]: calls without a result when the next user or assistant message
//!   comes (or the context ends) get one, right after the results they have:
//!   [`UNANSWERED_TEXT`], or [`invalid_arguments_text`] for a call whose arguments are not JSON;
//! - [`sanitize_arguments`]: a call whose arguments are not a JSON object is sent with `{}` (the
//!   history keeps the original text).
//!
//! [`PairingRepair`] applies them while streaming (constant memory but for the ids of one
//! assistant message); [`repair_pairing`] does it to a list. A break that is not repairable
//! (no system prompt first, a second system message, an unknown role, two calls of one message
//! sharing an id) is returned as the [`Violation`].

use std::collections::BTreeSet;
use std::fmt;

use ctxhost_format::{ChatMessage, ToolCall};

use super::{Violation, arguments_error};

/// Content of the result given to a tool call that was left without one (the conversation moved
/// on, or the context ended).
pub const UNANSWERED_TEXT: &str = "error: no result was recorded for this tool call (the conversation went on without it); \
call the tool again if you still need its result";

/// Content of the error result given to a tool call whose arguments are not a JSON object (a
/// reply cut by the output token limit leaves them unfinished): says what happened and what to
/// do. `reason` is the parse error.
pub fn invalid_arguments_text(call: &ToolCall, reason: &str) -> String {
    format!(
        "Error: the call was not made: its arguments are not valid JSON ({reason}; {} characters received). \
         The reply was probably cut off at the output token limit. Call {} again with complete arguments; \
         split long content over several calls.",
        call.function.arguments.chars().count(),
        call.function.name
    )
}

/// One repair, at a 1-based message index of the input (its line in a file without blank lines).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairingFix {
    /// A second result for a call that already had one, dropped.
    DroppedDuplicate {
        /// Where it was.
        index: u64,
        /// Its `tool_call_id`.
        id: String,
    },
    /// A result that answers no call (or has no `tool_call_id`), dropped.
    DroppedOrphan {
        /// Where it was.
        index: u64,
        /// Its `tool_call_id`, if it had one.
        id: Option<String>,
    },
    /// A call without result, answered (inserted before message `before`, or at the end).
    Answered {
        /// The message the answer was inserted before (`None`: at the end of the context).
        before: Option<u64>,
        /// The assistant message that made the call.
        call_index: u64,
        /// The call.
        call: ToolCall,
        /// Whether it was answered with [`invalid_arguments_text`] (else [`UNANSWERED_TEXT`]).
        invalid_arguments: bool,
    },
    /// A call's arguments that are not a JSON object, replaced by `{}`.
    SanitizedArguments {
        /// The assistant message.
        index: u64,
        /// The call's id.
        id: String,
        /// The parse error.
        reason: String,
    },
}

impl PairingFix {
    /// The answer inserted, for [`PairingFix::Answered`].
    pub fn answer(&self) -> Option<ChatMessage> {
        match self {
            PairingFix::Answered {
                call,
                invalid_arguments,
                ..
            } => Some(answer_for(call, *invalid_arguments)),
            _ => None,
        }
    }
}

impl fmt::Display for PairingFix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PairingFix::DroppedDuplicate { index, id } => write!(
                f,
                "line {index}: dropped a second result for tool call {id}, which already had one"
            ),
            PairingFix::DroppedOrphan {
                index,
                id: Some(id),
            } => write!(
                f,
                "line {index}: dropped a tool result for {id}, which answers no tool call of the assistant message before it"
            ),
            PairingFix::DroppedOrphan { index, id: None } => {
                write!(
                    f,
                    "line {index}: dropped a tool result without tool_call_id"
                )
            }
            PairingFix::Answered {
                before,
                call_index,
                call,
                invalid_arguments,
            } => {
                let why = if *invalid_arguments {
                    "with an error (its arguments are not valid JSON)"
                } else {
                    "as having no result"
                };
                match before {
                    Some(b) => write!(
                        f,
                        "line {b}: answered tool call {} ({}) of line {call_index}, left without a result, {why}",
                        call.id, call.function.name
                    ),
                    None => write!(
                        f,
                        "end: answered tool call {} ({}) of line {call_index}, left without a result, {why}",
                        call.id, call.function.name
                    ),
                }
            }
            PairingFix::SanitizedArguments { index, id, reason } => write!(
                f,
                "line {index}: the arguments of tool call {id} are not valid JSON ({reason}); sent as {{}} (the original is in messages.jsonl)"
            ),
        }
    }
}

/// The result that answers `call` when it has none: [`invalid_arguments_text`] when its
/// arguments are not a JSON object, else [`UNANSWERED_TEXT`].
fn answer_for(call: &ToolCall, invalid_arguments: bool) -> ChatMessage {
    match arguments_error(&call.function.arguments).filter(|_| invalid_arguments) {
        Some(reason) => ChatMessage::tool_result(call, invalid_arguments_text(call, &reason)),
        None => ChatMessage::tool_result(call, UNANSWERED_TEXT),
    }
}

/// Whether `message` is a second result for a call of the current assistant message
/// (`answered`: the ids answered so far).
pub fn drop_duplicate_result(message: &ChatMessage, answered: &BTreeSet<String>) -> bool {
    message.role == "tool"
        && message
            .tool_call_id
            .as_ref()
            .is_some_and(|id| answered.contains(id))
}

/// Whether `message` is a result that answers none of the calls still waiting (`pending`), or
/// has no `tool_call_id`. (Check [`drop_duplicate_result`] first.)
pub fn drop_orphan_result(message: &ChatMessage, pending: &[ToolCall]) -> bool {
    message.role == "tool"
        && message
            .tool_call_id
            .as_ref()
            .is_none_or(|id| !pending.iter().any(|c| &c.id == id))
}

/// The results for `pending` (calls left without one), in the order the model made the calls.
pub fn answer_unanswered_calls(pending: &[ToolCall]) -> Vec<ChatMessage> {
    pending
        .iter()
        .map(|c| answer_for(c, arguments_error(&c.function.arguments).is_some()))
        .collect()
}

/// Replaces the arguments of `message`'s tool calls that are not a JSON object with `{}`;
/// returns `(id, reason)` of each call changed.
pub fn sanitize_arguments(message: &mut ChatMessage) -> Vec<(String, String)> {
    let mut changed = Vec::new();
    for call in message.tool_calls.iter_mut().flatten() {
        if let Some(reason) = arguments_error(&call.function.arguments) {
            call.function.arguments = "{}".to_string();
            changed.push((call.id.clone(), reason));
        }
    }
    changed
}

/// Whether `history` (a message as messages.jsonl keeps it) is the message `sent` (as
/// current.jsonl holds it): equal, or equal once the arguments that are not JSON are replaced
/// ([`sanitize_arguments`]), as a context repair sends them.
pub fn same_message_sent(history: &ChatMessage, sent: &ChatMessage) -> bool {
    if history == sent {
        return true;
    }
    let mut h = history.clone();
    !sanitize_arguments(&mut h).is_empty() && &h == sent
}

/// Streaming repair: feed the messages in order with [`PairingRepair::push`] (which returns what
/// to write in place of each), then [`PairingRepair::finish`].
#[derive(Debug, Default)]
pub struct PairingRepair {
    index: u64,
    /// Calls of the last assistant message without a result yet (arguments as the model wrote
    /// them), and that message's index.
    pending: Vec<ToolCall>,
    call_index: u64,
    /// Ids of the last assistant message's calls already answered.
    answered: BTreeSet<String>,
    fixes: Vec<PairingFix>,
}

impl PairingRepair {
    /// A repair that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The repairs made so far.
    pub fn fixes(&self) -> &[PairingFix] {
        &self.fixes
    }

    /// The next message; returns the messages to write in its place (answers inserted before
    /// it, then it unless dropped, its arguments sanitized). Errors: a break that cannot be
    /// repaired.
    pub fn push(&mut self, mut message: ChatMessage) -> Result<Vec<ChatMessage>, Violation> {
        self.index += 1;
        let index = self.index;
        match message.role.as_str() {
            "system" if index == 1 => Ok(vec![message]),
            "system" => Err(Violation::ExtraSystem { index }),
            role if index == 1 => Err(Violation::SystemNotFirst {
                index,
                role: role.to_string(),
            }),
            "tool" => {
                if drop_duplicate_result(&message, &self.answered) {
                    self.fixes.push(PairingFix::DroppedDuplicate {
                        index,
                        id: message.tool_call_id.unwrap_or_default(),
                    });
                    return Ok(Vec::new());
                }
                if drop_orphan_result(&message, &self.pending) {
                    self.fixes.push(PairingFix::DroppedOrphan {
                        index,
                        id: message.tool_call_id,
                    });
                    return Ok(Vec::new());
                }
                let id = message.tool_call_id.clone().unwrap_or_default();
                self.pending.retain(|c| c.id != id);
                self.answered.insert(id);
                Ok(vec![message])
            }
            "user" | "assistant" => {
                let mut out = self.close_pending(Some(index));
                self.answered.clear();
                let mut seen = BTreeSet::new();
                for call in message.calls() {
                    if !seen.insert(call.id.clone()) {
                        return Err(Violation::DuplicateToolCallId {
                            index,
                            id: call.id.clone(),
                        });
                    }
                }
                self.pending = message.calls().to_vec();
                self.call_index = index;
                for (id, reason) in sanitize_arguments(&mut message) {
                    self.fixes
                        .push(PairingFix::SanitizedArguments { index, id, reason });
                }
                out.push(message);
                Ok(out)
            }
            role => Err(Violation::UnknownRole {
                index,
                role: role.to_string(),
            }),
        }
    }

    /// End of the context: the answers to append, and every repair made. With
    /// `allow_pending_tail`, calls still waiting at the end stay so (the agent loop makes them:
    /// a task paused between tool calls) unless their arguments are not JSON (those get their
    /// error result now: the call cannot be made). Errors: an empty context.
    pub fn finish(
        mut self,
        allow_pending_tail: bool,
    ) -> Result<(Vec<ChatMessage>, Vec<PairingFix>), Violation> {
        if self.index == 0 {
            return Err(Violation::Empty);
        }
        let out = if allow_pending_tail {
            let (invalid, valid): (Vec<ToolCall>, Vec<ToolCall>) = self
                .pending
                .drain(..)
                .partition(|c| arguments_error(&c.function.arguments).is_some());
            let answers = self.answer(invalid, None);
            self.pending = valid;
            answers
        } else {
            self.close_pending(None)
        };
        Ok((out, self.fixes))
    }

    /// Answers for every call still waiting, before message `before` (`None`: at the end).
    fn close_pending(&mut self, before: Option<u64>) -> Vec<ChatMessage> {
        let pending = std::mem::take(&mut self.pending);
        self.answer(pending, before)
    }

    fn answer(&mut self, calls: Vec<ToolCall>, before: Option<u64>) -> Vec<ChatMessage> {
        let answers = answer_unanswered_calls(&calls);
        for call in calls {
            let invalid_arguments = arguments_error(&call.function.arguments).is_some();
            self.answered.insert(call.id.clone());
            self.fixes.push(PairingFix::Answered {
                before,
                call_index: self.call_index,
                call,
                invalid_arguments,
            });
        }
        answers
    }
}

/// [`PairingRepair`] over a list: the repaired messages and the repairs made (none for a sound
/// context, which comes back unchanged).
pub fn repair_pairing(
    messages: impl IntoIterator<Item = ChatMessage>,
    allow_pending_tail: bool,
) -> Result<(Vec<ChatMessage>, Vec<PairingFix>), Violation> {
    let mut repair = PairingRepair::new();
    let mut out = Vec::new();
    for m in messages {
        out.extend(repair.push(m)?);
    }
    let (tail, fixes) = repair.finish(allow_pending_tail)?;
    out.extend(tail);
    Ok((out, fixes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::check_messages;

    fn sys() -> ChatMessage {
        ChatMessage::text("system", "s")
    }
    fn user(t: &str) -> ChatMessage {
        ChatMessage::text("user", t)
    }
    fn call(ids: &[&str]) -> ChatMessage {
        ChatMessage::assistant_calls(
            ids.iter()
                .map(|id| ToolCall::new(*id, "read_file", r#"{"path":"a.txt"}"#))
                .collect(),
        )
    }
    fn result(id: &str, text: &str) -> ChatMessage {
        ChatMessage::tool_result(&ToolCall::new(id, "read_file", "{}"), text)
    }

    #[test]
    fn a_sound_context_is_unchanged() {
        let ctx = vec![
            sys(),
            user("go"),
            call(&["a", "b"]),
            result("b", "2"),
            result("a", "1"),
        ];
        let (out, fixes) = repair_pairing(ctx.clone(), false).unwrap();
        assert_eq!(out, ctx);
        assert!(fixes.is_empty());
    }

    #[test]
    fn the_three_shapes_of_the_pairing_cases_are_repaired() {
        // duplicate_result
        let (out, fixes) = repair_pairing(
            [
                sys(),
                user("fix"),
                call(&["call_A"]),
                result("call_A", "contents"),
                result("call_A", "error: interrupted"),
            ],
            false,
        )
        .unwrap();
        assert_eq!(out.len(), 4);
        assert_eq!(out[3].content.as_deref(), Some("contents"));
        assert_eq!(
            fixes,
            [PairingFix::DroppedDuplicate {
                index: 5,
                id: "call_A".into()
            }]
        );
        // unanswered_middle
        let (out, fixes) = repair_pairing(
            [sys(), user("fix"), call(&["call_X"]), user("never mind")],
            false,
        )
        .unwrap();
        assert_eq!(
            out.iter().map(|m| m.role.as_str()).collect::<Vec<_>>(),
            ["system", "user", "assistant", "tool", "user"]
        );
        assert_eq!(out[3].tool_call_id.as_deref(), Some("call_X"));
        assert_eq!(out[3].content.as_deref(), Some(UNANSWERED_TEXT));
        assert!(matches!(
            &fixes[..],
            [PairingFix::Answered {
                before: Some(4),
                call_index: 3,
                invalid_arguments: false,
                ..
            }]
        ));
        assert_eq!(fixes[0].answer().unwrap(), out[3]);
        // orphan_tool
        let (out, fixes) = repair_pairing(
            [
                sys(),
                user("fix"),
                call(&["call_A"]),
                result("call_A", "contents"),
                result("call_Z", "stray"),
                ChatMessage::text("assistant", "read it"),
                user("go on"),
            ],
            false,
        )
        .unwrap();
        assert_eq!(out.len(), 6);
        assert!(out.iter().all(|m| m.content.as_deref() != Some("stray")));
        assert_eq!(
            fixes,
            [PairingFix::DroppedOrphan {
                index: 5,
                id: Some("call_Z".into())
            }]
        );
        for f in &fixes {
            assert!(f.to_string().starts_with("line 5: dropped"), "{f}");
        }
    }

    #[test]
    fn invalid_arguments_are_sanitized_and_an_unanswered_call_gets_the_error() {
        let mut cut = call(&["c1"]);
        cut.tool_calls.as_mut().unwrap()[0].function.arguments = r#"{"path": "src/ma"#.into();
        let (out, fixes) = repair_pairing([sys(), user("go"), cut.clone()], true).unwrap();
        assert_eq!(out[2].calls()[0].function.arguments, "{}");
        let answer = out[3].content.as_deref().unwrap();
        assert!(
            answer.contains("not valid JSON") && answer.contains("output token limit"),
            "{answer}"
        );
        assert_eq!(fixes.len(), 2, "{fixes:?}");
        // Answered by the loop already: only the arguments change.
        let (out, fixes) = repair_pairing(
            [sys(), user("go"), cut, result("c1", "Error: not made")],
            false,
        )
        .unwrap();
        assert_eq!(out[3].content.as_deref(), Some("Error: not made"));
        assert!(matches!(
            &fixes[..],
            [PairingFix::SanitizedArguments { index: 3, .. }]
        ));
        check_messages(&out).unwrap();
    }

    #[test]
    fn a_pending_tail_stays_when_allowed_and_is_answered_otherwise() {
        let ctx = [sys(), user("go"), call(&["a", "b"]), result("a", "1")];
        let (out, fixes) = repair_pairing(ctx.clone(), true).unwrap();
        assert_eq!(out.len(), 4);
        assert!(fixes.is_empty());
        let (out, fixes) = repair_pairing(ctx, false).unwrap();
        assert_eq!(out[4].tool_call_id.as_deref(), Some("b"));
        assert!(matches!(
            &fixes[..],
            [PairingFix::Answered { before: None, .. }]
        ));
        check_messages(&out).unwrap();
    }

    #[test]
    fn unrepairable_breaks_are_returned() {
        assert_eq!(
            repair_pairing([user("hi")], false).unwrap_err(),
            Violation::SystemNotFirst {
                index: 1,
                role: "user".into()
            }
        );
        assert_eq!(
            repair_pairing([sys(), sys()], false).unwrap_err(),
            Violation::ExtraSystem { index: 2 }
        );
        assert!(matches!(
            repair_pairing([sys(), call(&["a", "a"])], false).unwrap_err(),
            Violation::DuplicateToolCallId { index: 2, .. }
        ));
        assert_eq!(repair_pairing([], false).unwrap_err(), Violation::Empty);
    }

    proptest::proptest! {
        /// Whatever is dropped from or added to a sound context, the repair gives one that
        /// passes the checker (or names an unrepairable break).
        #[test]
        fn repaired_contexts_pass_the_checker(
            turns in proptest::collection::vec((0u8..6, 0usize..3), 0..25)
        ) {
            let mut ctx = vec![sys()];
            let mut n = 0;
            for (kind, k) in turns {
                n += 1;
                let id = format!("c{}", n - k.min(n));
                ctx.push(match kind {
                    0 => user("u"),
                    1 => ChatMessage::text("assistant", "a"),
                    2 => call(&[&format!("c{n}")]),
                    3 => call(&[&format!("c{n}"), &format!("d{n}")]),
                    _ => result(&id, "r"),
                });
            }
            let (out, _) = repair_pairing(ctx, false).unwrap();
            check_messages(&out).unwrap();
        }
    }
}
