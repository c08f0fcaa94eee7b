//! `read-response` of the OpenAI chat-completions API (`builtin:openai-chat`, and the reply
//! of `builtin:prompted-tools`): a response body → reply.
//!
//! Accepts `{"choices":[{"message":{"role","content","tool_calls"?},"finish_reason"?}],
//! "usage"?:{"prompt_tokens","completion_tokens","total_tokens",
//! "prompt_tokens_details"?:{"cached_tokens"?}}}` (`cached_tokens`, the prompt tokens served from
//! OpenAI's prompt cache, becomes `cache-read-tokens`). Lenient where servers
//! differ: `content` may be `null`, a string or an array of `{"type":"text","text"}` parts; a
//! tool call's `arguments` may be an object (serialised to JSON text) and its `id` may be
//! missing or repeated (`call_<n>` is generated, unique within the reply); `total_tokens` defaults to the
//! sum of the other two.

use serde::Deserialize;
use serde_json::Value;

use super::bad_shape;
use crate::format::reply::{ProviderToolCall, assistant_message};
use crate::request_format::Reply;
use crate::types::{PluginError, Usage};

#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<UsageIn>,
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
}

#[derive(Deserialize)]
struct UsageIn {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptTokensDetails>,
}

/// OpenAI `usage.prompt_tokens_details` (`null` or absent on servers that do not cache).
#[derive(Deserialize)]
struct PromptTokensDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// Parses the response in `file`. Errors (`invalid-input`): see [`super::read_response_json`],
/// plus missing or empty `choices`, a choice without `message`, an unexpected shape.
pub fn read_response(file: &str) -> Result<Reply, PluginError> {
    let value = super::read_response_json(file)?;
    let response: Response = serde_json::from_value(value.clone())
        .map_err(|e| bad_shape(file, format_args!("not a chat completion ({e})"), &value))?;
    let Some(choice) = response.choices.and_then(|c| c.into_iter().next()) else {
        return Err(bad_shape(file, "the response has no choices", &value));
    };
    let Some(message) = choice.message else {
        return Err(bad_shape(file, "choice 0 has no message", &value));
    };
    let message = assistant_message(
        message.role,
        content_text(message.content),
        message.tool_calls.unwrap_or_default(),
    );
    let usage = response.usage.map(|u| {
        let cached = u.prompt_tokens_details.and_then(|d| d.cached_tokens);
        Usage {
            cache_read_tokens: cached.unwrap_or(0),
            ..super::usage(u.prompt_tokens, u.completion_tokens, u.total_tokens)
        }
    });
    Ok(Reply {
        message: super::to_wit(message),
        usage,
        finish_reason: choice.finish_reason,
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
