//! A Messages API response → the OpenAI-shaped assistant message, usage and finish reason.
//!
//! Accepts `{"type":"message","role":"assistant","content":[block,...],"stop_reason"?,
//! "usage"?:{"input_tokens","output_tokens","cache_creation_input_tokens"?,
//! "cache_read_input_tokens"?}}`:
//! - `text` blocks are joined (in order, nothing between them: the API splits one text into
//!   several blocks, e.g. around citations) into the message content, `None` when there is none;
//! - `tool_use` blocks `{"id","name","input"}` become OpenAI tool calls with `input` as the
//!   arguments' JSON text (ids kept; missing or repeated ones made unique, see
//!   [`crate::reply::unique_call_ids`]);
//! - `thinking` / `redacted_thinking` blocks become the message's reasoning items (provider
//!   `anthropic`, data the block's JSON text exactly as in the body: [`reasoning_items`], read
//!   from the body's bytes by the caller), kept in their order; server tool blocks are left out.
//!
//! Error bodies (`{"type":"error","error":{"type","message"}}`) are recognised by
//! [`crate::body::provider_error`] before this parser runs.

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::block_order::{Order, Part};
use crate::reply::{
    ProviderFunction, ProviderToolCall, TokenCount, assistant_message, invalid_counts,
};
use crate::{ChatMessage, ReasoningItem};

/// The `usage` of a response (tokens). The API counts a request's input in three parts:
/// `input_tokens` (after the last cache breakpoint, billed at the input price),
/// `cache_creation_input_tokens` (written to the cache, 1.25 × the input price) and
/// `cache_read_input_tokens` (read from the cache, 0.1 × the input price).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AnthropicUsage {
    /// Prompt tokens after the last cache breakpoint.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Prompt tokens written to the cache.
    pub cache_creation_input_tokens: u64,
    /// Prompt tokens read from the cache.
    pub cache_read_input_tokens: u64,
}

impl AnthropicUsage {
    /// All input tokens of the request (OpenAI's `prompt_tokens`): the three parts together.
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
    }
}

/// A parsed response.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedReply {
    /// The assistant message (OpenAI shape).
    pub message: ChatMessage,
    /// The usage, when the response has one.
    pub usage: Option<AnthropicUsage>,
    /// `stop_reason` as an OpenAI `finish_reason` ([`finish_reason`]).
    pub finish_reason: Option<String>,
    /// `model`: the model that answered.
    pub model: Option<String>,
    /// What was wrong with the `usage` (counts that are not token counts, counted as 0; a
    /// `usage` that is not an object, ignored), for the log: the reply is used all the same.
    pub usage_warning: Option<String>,
    /// Thinking blocks of a streamed reply left out of the message's reasoning: cut (no
    /// `content_block_stop`) or unsigned, so they could never be sent back.
    pub dropped_reasoning: u64,
    /// The file the text was written to when a streamed reply's text passed the threshold of
    /// [`super::stream::AnthropicStream::with_content_file`] (the message's `content` is then
    /// `None`); `None` otherwise.
    pub content_file: Option<String>,
    /// The order of the reply's blocks (thinking, text, tool use) as sent. A streamed reply's
    /// message already carries its record ([`crate::block_order`]); for a whole body the
    /// caller adds `order.item(PROVIDER)` after [`reasoning_items`].
    pub order: Order,
}

#[derive(Deserialize)]
struct UsageIn {
    #[serde(default)]
    input_tokens: TokenCount,
    #[serde(default)]
    output_tokens: TokenCount,
    #[serde(default)]
    cache_creation_input_tokens: TokenCount,
    #[serde(default)]
    cache_read_input_tokens: TokenCount,
}

/// Parses a response body (already parsed as JSON and checked not to be an error object).
///
/// Errors (a text saying what is wrong): a `type` other than `message`, `content` missing or
/// not an array, a block that is not an object, a `tool_use` without a name. A malformed
/// `usage` does not fail the reply ([`ParsedReply::usage_warning`]).
pub fn parse_response(body: &Value) -> Result<ParsedReply, String> {
    if let Some(kind) = body.get("type").and_then(Value::as_str)
        && kind != "message"
    {
        return Err(format!("not a Messages API response (type `{kind}`)"));
    }
    let Some(blocks) = body.get("content").and_then(Value::as_array) else {
        return Err("the response has no content array".to_string());
    };
    let mut text: Option<String> = None;
    let mut calls = Vec::new();
    let mut order = Order::new();
    for (i, block) in blocks.iter().enumerate() {
        let Some(kind) = block.get("type").and_then(Value::as_str) else {
            return Err(format!("content block {i} has no type"));
        };
        match kind {
            "text" => {
                let t = block.get("text").and_then(Value::as_str).unwrap_or("");
                text.get_or_insert_with(String::new).push_str(t);
                order.push(Part::Text(t.len()));
            }
            "tool_use" => {
                let Some(name) = block.get("name").and_then(Value::as_str) else {
                    return Err(format!("tool_use block {i} has no name"));
                };
                calls.push(ProviderToolCall {
                    id: block.get("id").and_then(Value::as_str).map(str::to_string),
                    function: ProviderFunction {
                        name: name.to_string(),
                        arguments: block.get("input").cloned(),
                    },
                });
                order.push(Part::ToolCall);
            }
            // As [`reasoning_items`] keeps them.
            "thinking" | "redacted_thinking" => order.push(Part::Reasoning),
            _ => {}
        }
    }
    let role = body.get("role").and_then(Value::as_str).map(str::to_string);
    let (usage, usage_warning) = match body.get("usage").filter(|u| !u.is_null()) {
        Some(u) => read_usage(u),
        None => (None, None),
    };
    Ok(ParsedReply {
        order,
        content_file: None,
        message: assistant_message(role, text, calls),
        usage,
        finish_reason: body
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(finish_reason),
        model: body
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string),
        usage_warning,
        dropped_reasoning: 0,
    })
}

/// A Messages API `usage` object read leniently: counts that are not token counts count as 0
/// and a `usage` that is not an object is ignored, each with the warning to log.
pub(crate) fn read_usage(u: &Value) -> (Option<AnthropicUsage>, Option<String>) {
    match serde_json::from_value::<UsageIn>(u.clone()) {
        Ok(u) => (
            Some(AnthropicUsage {
                input_tokens: u.input_tokens.value().unwrap_or(0),
                output_tokens: u.output_tokens.value().unwrap_or(0),
                cache_creation_input_tokens: u.cache_creation_input_tokens.value().unwrap_or(0),
                cache_read_input_tokens: u.cache_read_input_tokens.value().unwrap_or(0),
            }),
            invalid_counts(&[
                ("usage.input_tokens", &u.input_tokens),
                ("usage.output_tokens", &u.output_tokens),
                (
                    "usage.cache_creation_input_tokens",
                    &u.cache_creation_input_tokens,
                ),
                ("usage.cache_read_input_tokens", &u.cache_read_input_tokens),
            ]),
        ),
        Err(e) => (
            None,
            Some(format!(
                "usage ignored: not a usage object ({e}); the reply is used"
            )),
        ),
    }
}

/// Where a reasoning item of the Messages API comes from (its `provider`).
pub const PROVIDER: &str = "anthropic";

/// The `thinking` and `redacted_thinking` blocks of the response body `body` (its bytes), in
/// order, as reasoning items whose data is each block's JSON text exactly as in the body, so
/// the signature and text are sent back unchanged. A body that is not a Messages API response
/// gives none (the parse of its value reports that).
pub fn reasoning_items(body: &[u8]) -> Vec<ReasoningItem> {
    #[derive(Deserialize)]
    struct Body<'a> {
        #[serde(borrow, default)]
        content: Vec<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Kind {
        #[serde(rename = "type", default)]
        kind: Option<String>,
    }
    let Ok(parsed) = serde_json::from_slice::<Body<'_>>(body) else {
        return Vec::new();
    };
    parsed
        .content
        .into_iter()
        .filter_map(|raw| {
            let kind = serde_json::from_str::<Kind>(raw.get()).ok()?.kind?;
            matches!(kind.as_str(), "thinking" | "redacted_thinking").then(|| ReasoningItem {
                provider: PROVIDER.to_string(),
                kind,
                data: raw.get().to_string(),
            })
        })
        .collect()
}

/// OpenAI's `finish_reason` for a `stop_reason`: `end_turn` and `stop_sequence` → `stop`,
/// `tool_use` → `tool_calls`, `max_tokens` and `model_context_window_exceeded` → `length`,
/// `refusal` → `content_filter`; anything else (`pause_turn`, ...) as given.
pub fn finish_reason(stop_reason: &str) -> String {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" | "model_context_window_exceeded" => "length",
        "refusal" => "content_filter",
        other => other,
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolCall;
    use serde_json::json;

    #[test]
    fn text_and_tool_use_blocks() {
        let body = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Reading "},
                {"type": "text", "text": "both. 上下文"},
                {"type": "tool_use", "id": "toolu_01", "name": "read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_01", "name": "list", "input": {}},
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 30,
                "cache_creation_input_tokens": 100, "cache_read_input_tokens": 2000}
        });
        let r = parse_response(&body).unwrap();
        assert_eq!(r.message.content.as_deref(), Some("Reading both. 上下文"));
        assert_eq!(
            r.message.calls(),
            [
                ToolCall::new("toolu_01", "read", r#"{"path":"a"}"#),
                ToolCall::new("call_2", "list", "{}"),
            ]
        );
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        let u = r.usage.unwrap();
        assert_eq!(u.prompt_tokens(), 2112);
        assert_eq!(u.output_tokens, 30);
    }

    #[test]
    fn plain_answer_without_usage_details() {
        let body = json!({"type": "message", "role": "assistant",
            "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 5, "output_tokens": 2, "cache_creation_input_tokens": null}});
        let r = parse_response(&body).unwrap();
        assert_eq!(r.message, ChatMessage::text("assistant", "Done."));
        assert_eq!(
            r.usage,
            Some(AnthropicUsage {
                input_tokens: 5,
                output_tokens: 2,
                ..AnthropicUsage::default()
            })
        );
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
        let empty = parse_response(&json!({"type": "message", "content": []})).unwrap();
        assert_eq!(empty.message.content, None);
        assert_eq!((empty.usage, empty.finish_reason), (None, None));
    }

    #[test]
    fn wrong_shapes_say_what_is_wrong() {
        assert_eq!(
            parse_response(&json!({"choices": []})).unwrap_err(),
            "the response has no content array"
        );
        assert_eq!(
            parse_response(&json!({"type": "completion", "content": []})).unwrap_err(),
            "not a Messages API response (type `completion`)"
        );
        assert_eq!(
            parse_response(&json!({"content": [{"type": "tool_use", "input": {}}]})).unwrap_err(),
            "tool_use block 0 has no name"
        );
        // A bad count counts as 0; the reply is used.
        let r = parse_response(
            &json!({"content": [], "usage": {"input_tokens": "x", "output_tokens": 4}}),
        )
        .unwrap();
        assert_eq!(
            r.usage.map(|u| (u.input_tokens, u.output_tokens)),
            Some((0, 4))
        );
        assert_eq!(
            r.usage_warning.as_deref(),
            Some(
                "usage.input_tokens is \"x\": not a token count, counted as 0 (the reply is used)"
            )
        );
        let r = parse_response(&json!({"content": [], "usage": "lots"})).unwrap();
        assert_eq!(r.usage, None);
        assert!(r.usage_warning.unwrap().starts_with("usage ignored"));
    }

    #[test]
    fn stop_reasons() {
        for (s, f) in [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("tool_use", "tool_calls"),
            ("max_tokens", "length"),
            ("refusal", "content_filter"),
            ("pause_turn", "pause_turn"),
        ] {
            assert_eq!(finish_reason(s), f);
        }
    }

    #[test]
    fn thinking_blocks_are_reasoning_items_with_the_bodys_bytes() {
        let body = br#"{"type":"message","role":"assistant","content":[
            {"type":"thinking", "thinking":"a \u00e9 b","signature":"s1"},
            {"type":"text","text":"x"},
            {"signature":"s2","type":"thinking","thinking":""},
            {"type":"redacted_thinking","data":"EmwK"},
            {"type":"tool_use","id":"t","name":"ls","input":{}}]}"#;
        let items = reasoning_items(body);
        let got: Vec<_> = items
            .iter()
            .map(|i| (i.provider.as_str(), i.kind.as_str(), i.data.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "anthropic",
                    "thinking",
                    r#"{"type":"thinking", "thinking":"a \u00e9 b","signature":"s1"}"#
                ),
                (
                    "anthropic",
                    "thinking",
                    r#"{"signature":"s2","type":"thinking","thinking":""}"#
                ),
                (
                    "anthropic",
                    "redacted_thinking",
                    r#"{"type":"redacted_thinking","data":"EmwK"}"#
                ),
            ]
        );
        assert!(reasoning_items(b"[1]").is_empty());
    }
}
