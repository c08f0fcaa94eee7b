//! Prompted tools (`builtin:prompted-tools`), for models without native tool calls: an element
//! of `messages` is plain `{"role","content"}` text (OpenAI's shape, no tool fields):
//! - the first message: the tools prompt ([`crate::prompted::tools_prompt`]) is appended to it
//!   when it is the system prompt, else put before its content;
//! - an assistant message with tool calls: its text followed by one `{"tool","arguments"}` JSON
//!   line per call ([`crate::prompted::call_text`], what the model is asked to write);
//! - a tool message: a user message `Result of NAME:\n...` ([`crate::prompted::result_text`]);
//! - absent content is `""`.
//!
//! Only those messages are decoded and re-encoded; every other one is copied.

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
        let converted = role == "tool"
            || (role == "assistant" && !m.tool_calls.is_empty())
            || (first && !self.prompt.is_empty());
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
