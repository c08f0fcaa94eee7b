//! Ollama's `/api/chat` (`builtin:ollama-chat`): an element of `messages` is
//! `{"role","content","tool_calls"?,"tool_name"?}`: `content` is always a string, tool calls
//! are `{"function":{"name","arguments"}}` with the arguments as a JSON object, a tool result
//! names its tool in `tool_name`.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::{Map, Value};

use super::{MessageShape, field, json};
use crate::ChatMessage;
use crate::raw::RawMessage;

/// The Ollama shape (stateless).
#[derive(Debug, Clone, Copy, Default)]
pub struct OllamaShape;

/// The reference shape of one element of `messages`.
#[derive(Serialize)]
pub struct OllamaMessage {
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

impl MessageShape for OllamaShape {
    type Reference = OllamaMessage;

    fn write_raw<W: Write>(&mut self, m: &RawMessage<'_>, out: &mut W) -> io::Result<()> {
        out.write_all(b"{\"role\":")?;
        out.write_all(m.role.json())?;
        match m.content {
            Some(content) => field(out, "content", content)?,
            None => out.write_all(b",\"content\":\"\"")?,
        }
        if !m.tool_calls.is_empty() {
            out.write_all(b",\"tool_calls\":[")?;
            for (i, call) in m.tool_calls.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                out.write_all(b"{\"function\":{\"name\":")?;
                out.write_all(call.name.json())?;
                out.write_all(b",\"arguments\":")?;
                json(out, &arguments_object(&call.arguments.value()))?;
                out.write_all(b"}}")?;
            }
            out.write_all(b"]")?;
        }
        if let Some(name) = m.tool_name.filter(|_| m.role.is("tool")) {
            field(out, "tool_name", name)?;
        }
        out.write_all(b"}")
    }

    fn reference(&mut self, m: ChatMessage) -> OllamaMessage {
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
}

/// Tool-call arguments as the JSON object Ollama requires. Text that is not a JSON object
/// (the model wrote broken JSON) is kept as `{"_raw": "<text>"}`: Ollama rejects anything
/// but an object there, and the model should still see what it wrote.
pub fn arguments_object(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => map,
        _ if text.trim().is_empty() => Map::new(),
        _ => Map::from_iter([("_raw".to_string(), Value::String(text.to_string()))]),
    }
}
