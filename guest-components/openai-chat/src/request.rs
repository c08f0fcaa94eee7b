//! `write-request`: the OpenAI chat-completions request body.

use std::io::{self, Write};

use ctxhost_plugin::format::ChatMessage;
use ctxhost_plugin::format::raw::RawMessage;
use ctxhost_plugin::format::reply::{reasoning_content_text, reasoning_field};
use ctxhost_plugin::format::shape::MessageShape;
use ctxhost_plugin::format::shape::openai::OpenAiShape;
use serde::Serialize;
use serde_json::Value;

use ctxhost_plugin::request as common;
use ctxhost_plugin::request_format::{RequestConfig, RequestInfo};
use ctxhost_plugin::types::PluginError;

/// Where the request is posted, relative to the provider's base URL.
pub const ENDPOINT_PATH: &str = "/v1/chat/completions";

/// Writes `{"model","messages":[...],"stream":false,"max_tokens"?,"temperature"?,
/// "reasoning_effort"?,"tools"?}`
/// (`"stream":true` when `config.stream_reply`, with `"stream_options":{"include_usage":true}`
/// when `config.stream_usage` too: strict OpenAI-compatible servers refuse the argument)
/// (messages in OpenAI's shape, `ctxhost_plugin::format::shape::openai`, with each assistant
/// message's kept `reasoning_content` when `reasoning.send-reasoning-content`; an empty tools
/// array is left out: OpenAI rejects `"tools":[]`).
pub fn write_request(config: &RequestConfig) -> Result<RequestInfo, PluginError> {
    let (max_tokens, temperature) = (config.max_output_tokens, config.temperature);
    let stream = config.stream_reply;
    let stream_usage = config.stream_usage;
    let effort = config.reasoning.as_ref().and_then(|r| r.effort.clone());
    let shape = ChatShape {
        send_reasoning_content: config
            .reasoning
            .as_ref()
            .is_some_and(|r| r.send_reasoning_content),
    };
    common::write_request(config, ENDPOINT_PATH, shape, |out, tools| {
        if stream && stream_usage {
            out.write_all(b",\"stream\":true,\"stream_options\":{\"include_usage\":true}")?;
        } else if stream {
            out.write_all(b",\"stream\":true")?;
        } else {
            out.write_all(b",\"stream\":false")?;
        }
        if let Some(n) = max_tokens {
            write!(out, ",\"max_tokens\":{n}")?;
        }
        if let Some(t) = temperature {
            out.write_all(b",\"temperature\":")?;
            write_json(out, &t)?;
        }
        if let Some(effort) = &effort {
            out.write_all(b",\"reasoning_effort\":")?;
            write_json(out, effort)?;
        }
        if let Some(tools) = tools.filter(|t| !t.is_empty()) {
            out.write_all(b",\"tools\":")?;
            write_json(out, &Value::Array(tools))?;
        }
        Ok(())
    })
}

/// OpenAI's shape, plus `"reasoning_content"` (the kept text, `""` when none) on every
/// assistant message when `send_reasoning_content` (DeepSeek's thinking mode with tools
/// refuses a tool-calling assistant message without it); a text that came as `reasoning`
/// (newer vLLM, OpenRouter) goes back as `"reasoning"` ([`reasoning_field`]).
#[derive(Clone)]
struct ChatShape {
    send_reasoning_content: bool,
}

impl MessageShape for ChatShape {
    type Reference = Value;

    fn write_raw<W: Write>(&mut self, m: &RawMessage<'_>, out: &mut W) -> io::Result<()> {
        if !self.send_reasoning_content || !m.role.is("assistant") {
            return OpenAiShape.write_raw(m, out);
        }
        let mut buf = Vec::new();
        OpenAiShape.write_raw(m, &mut buf)?;
        // OpenAiShape writes one object: drop its closing brace to add the field.
        buf.pop();
        out.write_all(&buf)?;
        let items: Vec<_> = m.reasoning.iter().map(|r| r.to_item()).collect();
        write!(out, ",\"{}\":", reasoning_field(&items))?;
        write_json(out, &reasoning_content_text(&items))?;
        out.write_all(b"}")
    }

    fn reference(&mut self, m: ChatMessage) -> Value {
        let text = reasoning_content_text(&m.reasoning);
        let field = reasoning_field(&m.reasoning);
        let assistant = m.role == "assistant";
        let mut v = serde_json::to_value(OpenAiShape.reference(m)).unwrap_or(Value::Null);
        if self.send_reasoning_content
            && assistant
            && let Some(o) = v.as_object_mut()
        {
            o.insert(field.into(), Value::String(text));
        }
        v
    }
}

fn write_json(out: &mut dyn Write, value: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer(out, value).map_err(io::Error::from)
}
