//! WIT chat messages → `ctxhost_format` line shapes.

use ctxhost_format::{ChatMessage, ToolCall};

use crate::ctxhost::plugin::types::ChatMessage as WitMessage;

/// The on-disk shape of a WIT message (an empty tool-call list is omitted).
pub fn to_format(m: WitMessage) -> ChatMessage {
    let calls: Vec<ToolCall> = m
        .tool_calls
        .into_iter()
        .map(|c| ToolCall::new(c.id, c.name, c.arguments))
        .collect();
    ChatMessage {
        role: m.role,
        content: m.content,
        tool_calls: (!calls.is_empty()).then_some(calls),
        tool_call_id: m.tool_call_id,
        tool_name: m.tool_name,
    }
}
