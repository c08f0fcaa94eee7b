//! OpenAI chat completions (`builtin:openai-chat`): an element of `messages` is
//! `{"role","content","tool_calls"?,"tool_call_id"?}` with only the fields the chat completions
//! API defines for each role: `tool_calls` on assistant messages (left out when empty), and a
//! tool message is exactly `{"role":"tool","content","tool_call_id"}` (ctxhost's `tool_name` is
//! not sent: the API defines no `name` on tool messages, and strict OpenAI-compatible gateways
//! refuse it with "name is not supported"). `content` is `null` only for an assistant message
//! that calls tools, `""` for other absent content.

use std::io::{self, Write};

use serde::Serialize;

use super::{MessageShape, field};
use crate::raw::RawMessage;
use crate::{ChatMessage, ToolCall};

/// The OpenAI shape (stateless).
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenAiShape;

/// The reference shape of one element of `messages`.
#[derive(Serialize)]
pub struct OpenAiMessage {
    role: String,
    content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<ToolCall>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
}

impl MessageShape for OpenAiShape {
    type Reference = OpenAiMessage;

    fn write_raw<W: Write>(&mut self, m: &RawMessage<'_>, out: &mut W) -> io::Result<()> {
        let role = m.role.value();
        let tool = role == "tool";
        let calls = if role == "assistant" {
            &m.tool_calls[..]
        } else {
            &[]
        };
        out.write_all(b"{\"role\":")?;
        out.write_all(m.role.json())?;
        match m.content {
            Some(content) => field(out, "content", content)?,
            None if calls.is_empty() => out.write_all(b",\"content\":\"\"")?,
            None => out.write_all(b",\"content\":null")?,
        }
        if !calls.is_empty() {
            out.write_all(b",\"tool_calls\":[")?;
            for (i, call) in calls.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                out.write_all(b"{\"id\":")?;
                out.write_all(call.id.json())?;
                match call.kind {
                    Some(kind) => field(out, "type", kind)?,
                    None => out.write_all(b",\"type\":\"function\"")?,
                }
                out.write_all(b",\"function\":{\"name\":")?;
                out.write_all(call.name.json())?;
                field(out, "arguments", call.arguments)?;
                out.write_all(b"}}")?;
            }
            out.write_all(b"]")?;
        }
        if let Some(id) = m.tool_call_id.filter(|_| tool) {
            field(out, "tool_call_id", id)?;
        }
        out.write_all(b"}")
    }

    fn reference(&mut self, m: ChatMessage) -> OpenAiMessage {
        let assistant = m.role == "assistant";
        let tool = m.role == "tool";
        let tool_calls = m.tool_calls.filter(|c| assistant && !c.is_empty());
        let content = match m.content {
            None if tool_calls.is_none() => Some(String::new()),
            content => content,
        };
        OpenAiMessage {
            role: m.role,
            content,
            tool_calls,
            tool_call_id: m.tool_call_id.filter(|_| tool),
        }
    }
}
