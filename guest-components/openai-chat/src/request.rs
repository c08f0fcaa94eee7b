//! `write-request`: the OpenAI chat-completions request body.

use std::io::{self, Write};

use ctxhost_format::{ChatMessage, ToolCall};
use serde::Serialize;
use serde_json::Value;

use crate::common;
use crate::ctxhost::plugin::types::PluginError;
use crate::exports::ctxhost::plugin::request_format::{RequestConfig, RequestInfo};

/// Where the request is posted, relative to the provider's base URL.
pub const ENDPOINT_PATH: &str = "/v1/chat/completions";

/// One element of `messages`, with only fields OpenAI accepts: `tool_calls` on assistant
/// messages, `tool_call_id` and `name` (ctxhost's `tool_name`) on tool messages.
#[derive(Serialize)]
struct OpenAiMessage {
    role: String,
    /// `null` only for an assistant message that calls tools; `""` for other absent content.
    content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<ToolCall>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
}

fn to_openai(m: ChatMessage) -> OpenAiMessage {
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
        name: m.tool_name.filter(|_| tool),
        tool_calls,
        tool_call_id: m.tool_call_id.filter(|_| tool),
    }
}

/// Writes `{"model","messages":[...],"stream":false,"max_tokens"?,"temperature"?,"tools"?}`
/// (an empty tools array is left out: OpenAI rejects `"tools":[]`).
pub fn write_request(config: &RequestConfig) -> Result<RequestInfo, PluginError> {
    let (max_tokens, temperature) = (config.max_output_tokens, config.temperature);
    common::write_request(config, ENDPOINT_PATH, to_openai, |out, tools| {
        out.write_all(b",\"stream\":false")?;
        if let Some(n) = max_tokens {
            write!(out, ",\"max_tokens\":{n}")?;
        }
        if let Some(t) = temperature {
            out.write_all(b",\"temperature\":")?;
            write_json(out, &t)?;
        }
        if let Some(tools) = tools.filter(|t| !t.is_empty()) {
            out.write_all(b",\"tools\":")?;
            write_json(out, &Value::Array(tools))?;
        }
        Ok(())
    })
}

fn write_json(out: &mut dyn Write, value: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer(out, value).map_err(io::Error::from)
}
