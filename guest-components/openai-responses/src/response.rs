//! `read-response`: a Responses API response object, or its stream, → reply.
//!
//! Usage: `prompt-tokens` is `input_tokens`, `completion-tokens` `output_tokens` (reasoning
//! included), `cache-read-tokens` `input_tokens_details.cached_tokens`, `reasoning-tokens`
//! `output_tokens_details.reasoning_tokens`. A count that is not a whole number ≥ 0 counts as
//! 0, and a `usage` that is not an object is ignored, each with a warning in the host log: the
//! reply is used.

use std::io::{BufRead, BufReader};

use ctxhost_plugin::format::ReasoningItem;
use ctxhost_plugin::format::reply::{
    ProviderFunction, ProviderToolCall, assistant_message, invalid_counts,
};
use ctxhost_plugin::format::responses::{
    Folded, PROVIDER, REASONING, ResponsesStream, ResponsesUsage, parse_response,
};
use ctxhost_plugin::jsonl::io_error;
use ctxhost_plugin::request::{self as common, bad_shape};
use ctxhost_plugin::request_format::Reply;
use ctxhost_plugin::types::{PluginError, Usage};
use serde_json::Value;

/// Parses the response in `file`. Errors (`invalid-input`): see
/// [`common::read_response_json`] (an `{"error":{...}}` body is the provider's error), a body
/// that is not a response, a failed or unfinished response.
pub fn read_response(file: &str) -> Result<Reply, PluginError> {
    let value = common::read_response_json(file)?;
    let text = value.to_string();
    let folded = parse_response(&text).map_err(|what| bad_shape(file, what, &value))?;
    Ok(reply(file, folded))
}

/// Parses the raw stream in `file` (`read-response` with `streamed`), folded a line at a time
/// by `ResponsesStream` (never read whole). Errors (`invalid-input`, naming the file and
/// line): a stream cut off before `response.completed`, an event that is not JSON, the
/// provider's error event or failed response; `io`.
pub fn read_stream(file: &str) -> Result<Reply, PluginError> {
    let f = std::fs::File::open(file).map_err(|e| io_error(format!("opening {file}"), e))?;
    let mut reader = BufReader::new(f);
    let mut fold = ResponsesStream::new();
    let mut line = Vec::new();
    let bad = |e: String| PluginError::InvalidInput(format!("{file} (streamed reply): {e}"));
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| io_error(format!("reading {file}"), e))?;
        if n == 0 {
            break;
        }
        let text = String::from_utf8_lossy(&line);
        fold.line(text.strip_suffix('\n').unwrap_or(&text))
            .map_err(bad)?;
    }
    Ok(reply(file, fold.finish().map_err(bad)?))
}

/// The reply of a folded response: the assistant message with its reasoning items, the usage.
fn reply(file: &str, f: Folded) -> Reply {
    let calls = f
        .calls
        .into_iter()
        .map(|c| ProviderToolCall {
            id: Some(c.call_id),
            function: ProviderFunction {
                name: c.name,
                arguments: Some(Value::String(c.arguments)),
            },
        })
        .collect();
    let mut message = assistant_message(None, f.content, calls);
    message.reasoning = f
        .reasoning
        .into_iter()
        .map(|data| ReasoningItem {
            provider: PROVIDER.to_string(),
            kind: REASONING.to_string(),
            data,
        })
        .collect();
    Reply {
        message: common::to_wit(message),
        usage: f.usage.and_then(|u| usage_of(file, u)),
        finish_reason: Some(f.finish_reason),
        content_file: None,
    }
}

/// The usage of `value` (the response's `usage`), read leniently (module doc).
fn usage_of(file: &str, value: Value) -> Option<Usage> {
    let u: ResponsesUsage = match serde_json::from_value(value) {
        Ok(u) => u,
        Err(e) => {
            ctxhost_plugin::logging::warn(&format!(
                "{file}: usage ignored: not a usage object ({e}); the reply is used"
            ));
            return None;
        }
    };
    let (cached, reasoning) = (u.cached(), u.reasoning());
    if let Some(warning) = invalid_counts(&[
        ("usage.input_tokens", &u.input_tokens),
        ("usage.output_tokens", &u.output_tokens),
        ("usage.total_tokens", &u.total_tokens),
        ("usage.input_tokens_details.cached_tokens", &cached),
        ("usage.output_tokens_details.reasoning_tokens", &reasoning),
    ]) {
        ctxhost_plugin::logging::warn(&format!("{file}: {warning}"));
    }
    Some(Usage {
        cache_read_tokens: cached.value().unwrap_or(0),
        reasoning_tokens: reasoning.value().unwrap_or(0),
        ..common::usage(
            u.input_tokens.value(),
            u.output_tokens.value(),
            u.total_tokens.value(),
        )
    })
}
