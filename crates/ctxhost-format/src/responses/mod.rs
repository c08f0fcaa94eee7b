//! OpenAI's Responses API (`POST /v1/responses`), the pure part of the
//! `builtin:openai-responses` request format: tested natively here, compiled into the component.
//!
//! - [`request`]: chat messages (current.jsonl) → the request body: leading system messages
//!   become `instructions`, the rest input items (`message`, `function_call`,
//!   `function_call_output`), each assistant message's reasoning items replayed verbatim before
//!   its text and function calls; `store: false` with `include: ["reasoning.encrypted_content"]`.
//! - [`response`]: a whole response object (`{"output":[...],"status","usage",...}`) → the parts
//!   of a reply ([`Folded`]).
//! - [`stream`]: the same from a streamed response's server-sent events, a line at a time.
//!
//! Shapes follow OpenAI's API reference (Responses: create, the response object, streaming
//! events; reasoning: "encrypted reasoning items" for stateless use with `store: false`).

pub mod request;
pub mod response;
pub mod stream;

use serde::Deserialize;

use crate::reply::TokenCount;

pub use request::{BodyError, RequestSettings, responses_tool, write_request};
pub use response::parse_response;
pub use stream::ResponsesStream;

/// Where the request is posted, relative to the provider's base URL.
pub const ENDPOINT_PATH: &str = "/v1/responses";

/// The `provider` of the reasoning items this format keeps (WIT `reasoning-item`).
pub const PROVIDER: &str = "openai-responses";

/// The `type` of a reasoning output item (and of the reasoning items kept).
pub const REASONING: &str = "reasoning";

/// A reply read from a whole response or folded from a stream: the assistant's text, its
/// function calls, its reasoning items (each the item's JSON text exactly as received, with
/// `encrypted_content`), the finish reason in OpenAI chat terms and the raw `usage`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Folded {
    /// The `output_text` (and `refusal`) parts of the `message` items, joined; `None` when
    /// there were none.
    pub content: Option<String>,
    /// The `function_call` items, in output order.
    pub calls: Vec<FunctionCallItem>,
    /// The `reasoning` items' JSON text, in output order.
    pub reasoning: Vec<String>,
    /// `stop` (completed, no calls), `tool_calls` (completed with calls), `length` (incomplete:
    /// `max_output_tokens`), `content_filter` (incomplete: `content_filter`), or the
    /// incomplete reason as given.
    pub finish_reason: String,
    /// The response's `usage` object, if any (read with [`ResponsesUsage`]).
    pub usage: Option<serde_json::Value>,
    /// The response's `model`: the model that answered.
    pub model: Option<String>,
    /// The file the joined text was written to when a streamed reply's text passed the
    /// threshold of [`stream::ResponsesStream::with_content_file`] (`content` is then `None`).
    pub content_file: Option<String>,
    /// The order of the output items (reasoning, message, function call) as sent; its
    /// record ([`crate::block_order::Order::item`]) goes with the reasoning items so a request
    /// sends them back in it.
    pub order: crate::block_order::Order,
}

/// A `function_call` output item: `{"type":"function_call","call_id","name","arguments"}`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct FunctionCallItem {
    /// The id a `function_call_output` answers (`call_...`), not the item's own `id`.
    #[serde(default)]
    pub call_id: String,
    /// The function's name.
    #[serde(default)]
    pub name: String,
    /// The arguments as JSON text, as the model wrote them.
    #[serde(default)]
    pub arguments: String,
}

/// The Responses API's `usage`: `{"input_tokens","input_tokens_details":{"cached_tokens"},
/// "output_tokens","output_tokens_details":{"reasoning_tokens"},"total_tokens"}` (tokens;
/// `reasoning_tokens` are part of `output_tokens`, `cached_tokens` of `input_tokens`). Counts
/// are read leniently ([`TokenCount`]).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ResponsesUsage {
    /// `input_tokens`.
    #[serde(default)]
    pub input_tokens: TokenCount,
    /// `output_tokens`.
    #[serde(default)]
    pub output_tokens: TokenCount,
    /// `total_tokens`.
    #[serde(default)]
    pub total_tokens: TokenCount,
    /// `input_tokens_details`.
    #[serde(default)]
    pub input_tokens_details: Option<InputDetails>,
    /// `output_tokens_details`.
    #[serde(default)]
    pub output_tokens_details: Option<OutputDetails>,
}

/// `usage.input_tokens_details`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct InputDetails {
    /// Input tokens served from the prompt cache.
    #[serde(default)]
    pub cached_tokens: TokenCount,
}

/// `usage.output_tokens_details`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct OutputDetails {
    /// Output tokens spent on reasoning.
    #[serde(default)]
    pub reasoning_tokens: TokenCount,
}

impl ResponsesUsage {
    /// `usage.input_tokens_details.cached_tokens` (absent when not reported).
    pub fn cached(&self) -> TokenCount {
        self.input_tokens_details
            .as_ref()
            .map(|d| d.cached_tokens.clone())
            .unwrap_or_default()
    }

    /// `usage.output_tokens_details.reasoning_tokens` (absent when not reported).
    pub fn reasoning(&self) -> TokenCount {
        self.output_tokens_details
            .as_ref()
            .map(|d| d.reasoning_tokens.clone())
            .unwrap_or_default()
    }
}

/// The finish reason (OpenAI chat terms) of a response with `status` and, when incomplete,
/// `incomplete_details.reason`. Errors: `failed` (with the response's error text), a status
/// that is not final (`in_progress`, `queued`: a background response, which this format does
/// not ask for), an unknown status.
pub(crate) fn finish_reason(
    status: Option<&str>,
    incomplete_reason: Option<&str>,
    error: Option<String>,
    has_calls: bool,
) -> Result<String, String> {
    if let Some(e) = error {
        return Err(format!("the response failed: {e}"));
    }
    match status {
        None | Some("completed") => Ok(if has_calls { "tool_calls" } else { "stop" }.to_string()),
        Some("incomplete") => Ok(match incomplete_reason {
            Some("max_output_tokens") | None => "length".to_string(),
            Some(other) => other.to_string(),
        }),
        Some("failed") => Err("the response failed (status `failed`, no error given)".to_string()),
        Some(other) => Err(format!(
            "the response has status `{other}`, not a finished one (completed or incomplete)"
        )),
    }
}

/// The text of a response's non-null `error` object: `message (code: c)`.
pub(crate) fn error_text(error: Option<&serde_json::Value>) -> Option<String> {
    let error = error.filter(|e| !e.is_null())?;
    let message = error
        .get("message")
        .and_then(|m| m.as_str())
        .map_or_else(|| error.to_string(), str::to_string);
    Some(match error.get("code").and_then(|c| c.as_str()) {
        Some(code) => format!("{message} (code: {code})"),
        None => message,
    })
}
