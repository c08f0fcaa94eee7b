//! `read-response` of the OpenAI chat-completions API (`builtin:openai-chat`, and the reply
//! of `builtin:prompted-tools`): a response body → reply.
//!
//! Accepts `{"model"?,"choices":[{"message":{"role","content","tool_calls"?},"finish_reason"?}],
//! "usage"?:{"prompt_tokens","completion_tokens","total_tokens",
//! "prompt_tokens_details"?:{"cached_tokens"?}}}` (`cached_tokens`, the prompt tokens served from
//! OpenAI's prompt cache, becomes `cache-read-tokens`; `completion_tokens_details.reasoning_tokens`
//! becomes `reasoning-tokens`). The reasoning text of OpenAI-compatible servers
//! (`message.reasoning_content`, or a string `message.reasoning`) is kept on the message as a
//! reasoning item (provider `openai-chat`, type the field's name, `reasoning_content` or
//! `reasoning`, data the text as a JSON string); the chat shape sends it back, under the same
//! field, only when `send-reasoning-content` asks for it. Lenient where servers
//! differ: `content` may be `null`, a string or an array of `{"type":"text","text"}` parts; a
//! tool call's `arguments` may be an object (serialised to JSON text) and its `id` may be
//! missing or repeated (`call_<n>` is generated, unique within the reply); `total_tokens` defaults to the
//! sum of the other two. A `usage` count that is not a whole number ≥ 0 counts as 0, and a
//! `usage` that is not an object is ignored, each with a warning in the host log: the reply is
//! used ([`TokenCount`]).

use serde::Deserialize;
use serde_json::Value;

use super::bad_shape;
use crate::format::reply::{
    ProviderToolCall, REASONING_CONTENT, REASONING_FIELD, TokenCount, assistant_message,
    invalid_counts, reasoning_content_item,
};
use crate::request_format::Reply;
use crate::types::{PluginError, Usage};

#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    /// Read as [`UsageIn`] apart, so a malformed one cannot fail the reply.
    #[serde(default)]
    usage: Option<Value>,
    /// The model that answered; read when a string.
    #[serde(default)]
    model: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<MessageIn>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct MessageIn {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<ProviderToolCall>>,
    /// `reasoning_content` (DeepSeek, vLLM, llama.cpp, LM Studio).
    #[serde(default)]
    reasoning_content: Option<Value>,
    /// `reasoning` (newer vLLM, OpenRouter); read when a string.
    #[serde(default)]
    reasoning: Option<Value>,
}

#[derive(Deserialize)]
struct UsageIn {
    #[serde(default)]
    prompt_tokens: TokenCount,
    #[serde(default)]
    completion_tokens: TokenCount,
    #[serde(default)]
    total_tokens: TokenCount,
    #[serde(default)]
    prompt_tokens_details: Option<PromptTokensDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionTokensDetails>,
}

/// OpenAI `usage.completion_tokens_details` (reasoning models).
#[derive(Deserialize)]
struct CompletionTokensDetails {
    #[serde(default)]
    reasoning_tokens: TokenCount,
}

/// OpenAI `usage.prompt_tokens_details` (`null` or absent on servers that do not cache).
#[derive(Deserialize)]
struct PromptTokensDetails {
    #[serde(default)]
    cached_tokens: TokenCount,
}

/// Parses the response in `file`. Errors (`invalid-input`): see [`super::read_response_json`],
/// plus missing or empty `choices`, a choice without `message`, an unexpected shape.
pub fn read_response(file: &str) -> Result<Reply, PluginError> {
    let value = super::read_response_json(file)?;
    let response = Response::deserialize(&value)
        .map_err(|e| bad_shape(file, format_args!("not a chat completion ({e})"), &value))?;
    let Some(choice) = response.choices.and_then(|c| c.into_iter().next()) else {
        return Err(bad_shape(file, "the response has no choices", &value));
    };
    let Some(message) = choice.message else {
        return Err(bad_shape(file, "choice 0 has no message", &value));
    };
    // Kept under the field it came in, to go back under it.
    let reasoning = match (&message.reasoning_content, &message.reasoning) {
        (Some(Value::String(r)), _) => Some((REASONING_CONTENT, r.clone())),
        (_, Some(Value::String(r))) => Some((REASONING_FIELD, r.clone())),
        _ => None,
    };
    let mut message = assistant_message(
        message.role,
        content_text(message.content),
        message.tool_calls.unwrap_or_default(),
    );
    message
        .reasoning
        .extend(reasoning.and_then(|(field, r)| reasoning_content_item(field, &r)));
    let usage = response
        .usage
        .filter(|u| !u.is_null())
        .and_then(|u| usage_of(file, u));
    Ok(Reply {
        message: super::to_wit(message),
        usage,
        finish_reason: choice.finish_reason,
        model: match response.model {
            Some(Value::String(m)) => Some(m),
            _ => None,
        },
        content_file: None,
    })
}

/// Parses the raw stream in `file` (`read-response` with `streamed`: the server-sent events of
/// a request with `"stream":true`), folded a line at a time by
/// `ctxhost_format::sse::OpenAiStream` (never read whole); the usage chunk's `usage` is read
/// as a whole body's. Errors: `stream-cut` for a stream cut off before `data: [DONE]` or a
/// `finish_reason`; `invalid-input` naming the file and line for a data line that is not a
/// chunk or the provider's error chunk; `io`. A text past
/// `ctxhost_format::content_file::CONTENT_FILE_THRESHOLD` is written to `reply.content` as it
/// is folded and returned as `content-file` ([`super::content_sink`]).
pub fn read_stream(file: &str) -> Result<Reply, PluginError> {
    use std::io::BufRead;
    let f = std::fs::File::open(file)
        .map_err(|e| crate::jsonl::io_error(format!("opening {file}"), e))?;
    let mut reader = std::io::BufReader::new(f);
    let mut fold = ctxhost_format::sse::OpenAiStream::with_content_file(super::content_sink());
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| crate::jsonl::io_error(format!("reading {file}"), e))?;
        if n == 0 {
            break;
        }
        let text = String::from_utf8_lossy(&line);
        match text.strip_suffix('\n') {
            Some(whole) => fold.line(whole).map_err(|e| super::fold_error(file, e))?,
            // The stream ended inside its last line.
            None => fold
                .last_line(&text)
                .map_err(|e| super::fold_error(file, e))?,
        }
    }
    let r = fold.finish().map_err(|e| super::fold_error(file, e))?;
    let mut message = assistant_message(r.role, r.content, r.tool_calls);
    message.reasoning.extend(
        r.reasoning
            .as_deref()
            .and_then(|text| reasoning_content_item(r.reasoning_field, text)),
    );
    Ok(Reply {
        message: super::to_wit(message),
        usage: r.usage.and_then(|u| usage_of(file, u)),
        finish_reason: r.finish_reason,
        model: r.model,
        content_file: r.content_file,
    })
}

/// The usage of `value` (the response's `usage`), read leniently (module doc).
fn usage_of(file: &str, value: Value) -> Option<Usage> {
    let u: UsageIn = match serde_json::from_value(value) {
        Ok(u) => u,
        Err(e) => {
            crate::logging::warn(&format!(
                "{file}: usage ignored: not a usage object ({e}); the reply is used"
            ));
            return None;
        }
    };
    let cached = u
        .prompt_tokens_details
        .map(|d| d.cached_tokens)
        .unwrap_or_default();
    let reasoning = u
        .completion_tokens_details
        .map(|d| d.reasoning_tokens)
        .unwrap_or_default();
    if let Some(warning) = invalid_counts(&[
        ("usage.prompt_tokens", &u.prompt_tokens),
        ("usage.completion_tokens", &u.completion_tokens),
        ("usage.total_tokens", &u.total_tokens),
        ("usage.prompt_tokens_details.cached_tokens", &cached),
        (
            "usage.completion_tokens_details.reasoning_tokens",
            &reasoning,
        ),
    ]) {
        crate::logging::warn(&format!("{file}: {warning}"));
    }
    Some(Usage {
        cache_read_tokens: cached.value().unwrap_or(0),
        reasoning_tokens: reasoning.value().unwrap_or(0),
        ..super::usage(
            u.prompt_tokens.value(),
            u.completion_tokens.value(),
            u.total_tokens.value(),
        )
    })
}

/// Message content as text: a string, the `text` of content parts joined, `None` for null.
fn content_text(content: Option<Value>) -> Option<String> {
    match content? {
        Value::Null => None,
        Value::String(s) => Some(s),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
        ),
        other => Some(other.to_string()),
    }
}
