//! `write-request`: the Ollama `/api/chat` request body.

use std::io::{self, Write};

use ctxhost_format::ChatMessage;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::common;
use crate::ctxhost::plugin::types::PluginError;
use crate::exports::ctxhost::plugin::request_format::{RequestConfig, RequestInfo};

/// Where the request is posted, relative to the provider's base URL.
pub const ENDPOINT_PATH: &str = "/api/chat";

/// One element of `messages` in Ollama's shape: `content` is always a string, tool calls carry
/// their arguments as a JSON object, tool results name their tool in `tool_name`.
#[derive(Serialize)]
struct OllamaMessage {
    role: String,
    content: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<OllamaCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_name: Option<String>,
}

#[derive(Serialize)]
struct OllamaCall {
    function: OllamaFunction,
}

#[derive(Serialize)]
struct OllamaFunction {
    name: String,
    arguments: Map<String, Value>,
}

fn to_ollama(m: ChatMessage) -> OllamaMessage {
    let tool_calls = m
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|c| OllamaCall {
            function: OllamaFunction {
                name: c.function.name,
                arguments: arguments_object(&c.function.arguments),
            },
        })
        .collect();
    OllamaMessage {
        content: m.content.unwrap_or_default(),
        tool_calls,
        tool_name: m.tool_name.filter(|_| m.role == "tool"),
        role: m.role,
    }
}

/// Tool-call arguments as the JSON object Ollama requires. Text that is not a JSON object
/// (the model wrote broken JSON) is kept as `{"_raw": "<text>"}`: Ollama rejects anything
/// but an object there, and the model should still see what it wrote.
fn arguments_object(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => map,
        _ if text.trim().is_empty() => Map::new(),
        _ => Map::from_iter([("_raw".to_string(), Value::String(text.to_string()))]),
    }
}

/// Writes `{"model","messages":[...],"stream":false,"options"?,"tools"?}`; `options` holds
/// `num_predict` (max output tokens) and `temperature` when set; an empty tools array is left
/// out.
pub fn write_request(config: &RequestConfig) -> Result<RequestInfo, PluginError> {
    let (max_tokens, temperature) = (config.max_output_tokens, config.temperature);
    common::write_request(config, ENDPOINT_PATH, to_ollama, |out, tools| {
        out.write_all(b",\"stream\":false")?;
        // Written by hand, not through a `Value`: that would widen the f32 temperature to f64
        // (0.2 → 0.20000000298023224).
        match (max_tokens, temperature) {
            (None, None) => {}
            (Some(n), None) => write!(out, ",\"options\":{{\"num_predict\":{n}}}")?,
            (max, Some(t)) => {
                out.write_all(b",\"options\":{")?;
                if let Some(n) = max {
                    write!(out, "\"num_predict\":{n},")?;
                }
                out.write_all(b"\"temperature\":")?;
                write_json(out, &t)?;
                out.write_all(b"}")?;
            }
        }
        if let Some(tools) = tools.filter(|t| !t.is_empty()) {
            out.write_all(b",\"tools\":")?;
            write_json(out, &tools)?;
        }
        Ok(())
    })
}

fn write_json(out: &mut dyn Write, value: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer(out, value).map_err(io::Error::from)
}
