//! The in-memory baseline of the context benchmarks: what an agent that keeps its conversation
//! in memory does to build one request.
//!
//! Read every line of a chat-message JSONL file (ctxhost's `current.jsonl` shape, DESIGN §2)
//! into a `Vec<serde_json::Value>`, build the OpenAI chat-completions body as one `Value`
//! (`{"model","messages":[...],"stream":false,"max_tokens"?}`, `tool_name` renamed to OpenAI's
//! `name` on tool messages as `builtin:openai-chat` does), serialise it to a byte buffer (the
//! HTTP body), and write that buffer to a file.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use serde_json::{Map, Value, json};

/// What [`build_request`] produced.
#[derive(Debug, Clone, Copy)]
pub struct Built {
    /// Messages read (non-blank lines).
    pub messages: u64,
    /// Bytes of the serialised request body.
    pub bytes: u64,
}

/// Build the request body for the messages in `messages_file` entirely in memory and write it
/// to `request_file`.
///
/// Errors name the file and, for a bad line, its 1-based line number.
pub fn build_request(
    messages_file: &Path,
    request_file: &Path,
    model: &str,
    max_tokens: Option<u32>,
) -> Result<Built, String> {
    let file = File::open(messages_file)
        .map_err(|e| format!("cannot open {}: {e}", messages_file.display()))?;
    let mut messages: Vec<Value> = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| format!("{} line {}: {e}", messages_file.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let mut v: Value = serde_json::from_str(&line)
            .map_err(|e| format!("{} line {}: {e}", messages_file.display(), i + 1))?;
        if let Some(obj) = v.as_object_mut()
            && let Some(name) = obj.remove("tool_name")
            && obj.get("role").and_then(Value::as_str) == Some("tool")
        {
            obj.insert("name".to_string(), name);
        }
        messages.push(v);
    }
    let count = messages.len() as u64;
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(false));
    if let Some(n) = max_tokens {
        body.insert("max_tokens".into(), json!(n));
    }
    let bytes =
        serde_json::to_vec(&Value::Object(body)).map_err(|e| format!("serialising: {e}"))?;
    let mut out = File::create(request_file)
        .map_err(|e| format!("cannot create {}: {e}", request_file.display()))?;
    out.write_all(&bytes)
        .and_then(|_| out.flush())
        .map_err(|e| format!("cannot write {}: {e}", request_file.display()))?;
    Ok(Built {
        messages: count,
        bytes: bytes.len() as u64,
    })
}
