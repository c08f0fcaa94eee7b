//! `write-request`: an OpenAI chat-completions body without `tools`, the tools described in
//! the system prompt.
//!
//! Messages are converted one by one while streaming the messages file:
//! - the first message: the tools prompt (`prompted::tools_prompt`) is appended to it when it
//!   is the system prompt, else put before its content;
//! - an assistant message with tool calls: its text followed by one `{"tool", "arguments"}`
//!   JSON line per call (what the model is asked to write);
//! - a tool message: a user message `Result of NAME:\n...`;
//! - tool fields are dropped, absent content is `""`.

use std::io;

use ctxhost_format::{ChatMessage, body, prompted};
use serde::Serialize;

use crate::common;
use crate::ctxhost::plugin::types::PluginError;
use crate::exports::ctxhost::plugin::request_format::{RequestConfig, RequestInfo};

/// Where the request is posted, relative to the provider's base URL.
pub const ENDPOINT_PATH: &str = "/v1/chat/completions";

/// One element of `messages`: plain role and text.
#[derive(Serialize)]
struct TextMessage {
    role: String,
    content: String,
}

/// Converts the history for a model that only reads text; `prompt` is the tools prompt (empty
/// when no tools are offered).
struct Converter {
    prompt: String,
    first: bool,
}

impl Converter {
    fn convert(&mut self, m: ChatMessage) -> TextMessage {
        let first = std::mem::replace(&mut self.first, false);
        let mut content = m.content.clone().unwrap_or_default();
        let role = match m.role.as_str() {
            "tool" => {
                content = prompted::result_text(m.tool_name.as_deref(), &content);
                "user".to_string()
            }
            "assistant" if !m.calls().is_empty() => {
                let calls: Vec<String> = m
                    .calls()
                    .iter()
                    .map(|c| prompted::call_text(&c.function.name, &c.function.arguments))
                    .collect();
                let calls = calls.join("\n");
                content = if content.trim().is_empty() {
                    calls
                } else {
                    format!("{}\n{calls}", content.trim_end())
                };
                m.role
            }
            _ => m.role,
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

/// Writes `{"model","messages":[...],"stream":false,"max_tokens"?,"temperature"?}`.
/// Errors: those of `common::write_request`, plus a tools file that is not a JSON array of
/// objects (`invalid-input`).
pub fn write_request(config: &RequestConfig) -> Result<RequestInfo, PluginError> {
    let tools = match &config.tools_file {
        Some(file) => {
            body::parse_tools(&common::read_file(file)?, file).map_err(PluginError::InvalidInput)?
        }
        None => Vec::new(),
    };
    let mut converter = Converter {
        prompt: prompted::tools_prompt(&tools),
        first: true,
    };
    // The tools go into the prompt, never into a `tools` field.
    let config = RequestConfig {
        tools_file: None,
        ..config.clone()
    };
    let (max_tokens, temperature) = (config.max_output_tokens, config.temperature);
    common::write_request(
        &config,
        ENDPOINT_PATH,
        |m| converter.convert(m),
        |out, _| {
            out.write_all(b",\"stream\":false")?;
            if let Some(n) = max_tokens {
                write!(out, ",\"max_tokens\":{n}")?;
            }
            if let Some(t) = temperature {
                out.write_all(b",\"temperature\":")?;
                serde_json::to_writer(&mut *out, &t).map_err(io::Error::from)?;
            }
            Ok(())
        },
    )
}
