//! Prompted tools (`builtin:prompted-tools`), for models without native tool calls: an element
//! of `messages` is plain `{"role","content"}` text (OpenAI's shape, no tool fields):
//! - the first message: the tools prompt ([`crate::prompted::tools_prompt`]) is appended to it
//!   when it is the system prompt, else put before its content;
//! - an assistant message with tool calls: its text followed by one `{"tool","arguments"}` JSON
//!   line per call ([`crate::prompted::call_text`], what the model is asked to write);
//! - a tool message: a user message `Result of NAME:\n...` ([`crate::prompted::result_text`]);
//! - absent content is `""`.
//!
//! Only the first message and assistant messages with tool calls are decoded and re-encoded; a
//! tool result's content is copied between its escaped head and tail, every other message is
//! copied.

use std::io::{self, Write};

use serde::Serialize;

use super::{MessageShape, field, json};
use crate::ChatMessage;
use crate::prompted;
use crate::raw::RawMessage;

/// The prompted-tools shape: remembers whether the first message was written.
#[derive(Debug, Clone)]
pub struct PromptedShape {
    /// The tools prompt (empty when no tools are offered).
    prompt: String,
    first: bool,
}

impl PromptedShape {
    /// The shape for a request offering the tools described by `prompt`
    /// ([`crate::prompted::tools_prompt`]; empty when no tools are offered).
    pub fn new(prompt: String) -> Self {
        PromptedShape {
            prompt,
            first: true,
        }
    }

    /// The converted role and content of a message the model must see as text.
    fn text(
        &self,
        first: bool,
        role: String,
        content: String,
        tool_name: Option<&str>,
        calls: &[(String, String)],
    ) -> TextMessage {
        let mut content = content;
        let role = if role == "tool" {
            content = prompted::result_text(tool_name, &content);
            "user".to_string()
        } else {
            if role == "assistant" && !calls.is_empty() {
                let calls: Vec<String> = calls
                    .iter()
                    .map(|(name, arguments)| prompted::call_text(name, arguments))
                    .collect();
                let calls = calls.join("\n");
                content = if content.trim().is_empty() {
                    calls
                } else {
                    format!("{}\n{calls}", content.trim_end())
                };
            }
            role
        };
        if first && !self.prompt.is_empty() {
            content = if role == "system" {
                format!("{}\n\n{}", content.trim_end(), self.prompt)
            } else {
                format!("{}\n\n{content}", self.prompt)
            };
        }
        TextMessage { role, content }
    }
}

/// Writes a tool message as the user message `Result of NAME:\nCONTENT\n` +
/// [`prompted::RESULT_NUDGE`] ([`prompted::result_text`]) with the content's JSON text copied
/// between the escaped head and tail, not decoded. Returns `false`, having written nothing,
/// when the content ends in a `\u000a` escape (then the caller decodes it).
fn splice_result<W: Write>(m: &RawMessage<'_>, out: &mut W) -> io::Result<bool> {
    let inner = match m.content {
        Some(content) => {
            let json = content.json();
            &json[1..json.len() - 1]
        }
        None => &b""[..],
    };
    if inner.ends_with(b"u000a") || inner.ends_with(b"u000A") {
        return Ok(false);
    }
    // Ends with an escaped newline: `\n` after an even run of other backslashes.
    let backslashes = |end: usize| {
        inner[..end]
            .iter()
            .rev()
            .take_while(|b| **b == b'\\')
            .count()
    };
    let newline = inner.last() == Some(&b'n') && backslashes(inner.len() - 1) % 2 == 1;
    let name = m.tool_name.map(|n| n.value());
    let name = name
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or("the tool call");
    let head = serde_json::to_string(&format!("Result of {name}:\n")).map_err(io::Error::from)?;
    let tail = format!(
        "{}{}",
        if newline { "" } else { "\n" },
        prompted::RESULT_NUDGE
    );
    let tail = serde_json::to_string(&tail).map_err(io::Error::from)?;
    out.write_all(b"{\"role\":\"user\",\"content\":")?;
    out.write_all(&head.as_bytes()[..head.len() - 1])?;
    out.write_all(inner)?;
    out.write_all(&tail.as_bytes()[1..])?;
    out.write_all(b"}")?;
    Ok(true)
}

/// One element of `messages`: plain role and text.
#[derive(Serialize)]
pub struct TextMessage {
    role: String,
    content: String,
}

impl MessageShape for PromptedShape {
    type Reference = TextMessage;

    fn write_raw<W: Write>(&mut self, m: &RawMessage<'_>, out: &mut W) -> io::Result<()> {
        let first = std::mem::replace(&mut self.first, false);
        let role = m.role.value();
        let takes_prompt = first && !self.prompt.is_empty();
        if role == "tool" && !takes_prompt && splice_result(m, out)? {
            return Ok(());
        }
        let converted =
            role == "tool" || (role == "assistant" && !m.tool_calls.is_empty()) || takes_prompt;
        if converted {
            let calls: Vec<(String, String)> = m
                .tool_calls
                .iter()
                .map(|c| {
                    (
                        c.name.value().into_owned(),
                        c.arguments.value().into_owned(),
                    )
                })
                .collect();
            let content = m
                .content
                .map(|c| c.value().into_owned())
                .unwrap_or_default();
            let tool_name = m.tool_name.map(|n| n.value());
            let text = self.text(
                first,
                role.into_owned(),
                content,
                tool_name.as_deref(),
                &calls,
            );
            return json(out, &text);
        }
        out.write_all(b"{\"role\":")?;
        out.write_all(m.role.json())?;
        match m.content {
            Some(content) => field(out, "content", content)?,
            None => out.write_all(b",\"content\":\"\"")?,
        }
        out.write_all(b"}")
    }

    fn reference(&mut self, m: ChatMessage) -> TextMessage {
        let first = std::mem::replace(&mut self.first, false);
        let calls: Vec<(String, String)> = m
            .calls()
            .iter()
            .map(|c| (c.function.name.clone(), c.function.arguments.clone()))
            .collect();
        self.text(
            first,
            m.role,
            m.content.unwrap_or_default(),
            m.tool_name.as_deref(),
            &calls,
        )
    }
}
