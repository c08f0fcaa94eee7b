//! `read-response`: a Messages API response body → reply
//! (`ctxhost_plugin::format::anthropic::parse_response`). Usage: `prompt-tokens` is all input tokens
//! (`input_tokens` + `cache_creation_input_tokens` + `cache_read_input_tokens`),
//! `completion-tokens` is `output_tokens`, `cache-read-tokens` and `cache-creation-tokens` are
//! `cache_read_input_tokens` and `cache_creation_input_tokens`. A count that is not a whole
//! number ≥ 0 counts as 0, and a `usage` that is not an object is ignored, each with a warning
//! in the host log: the reply is used. Thinking counts as output tokens (the API counts it in
//! `output_tokens`; it does not report it apart, so `reasoning-tokens` is 0).
//!
//! `thinking` and `redacted_thinking` blocks are returned as the message's reasoning items
//! (provider `anthropic`; data the block's JSON exactly as received), which the host stores on
//! the assistant message and the request sends back while thinking is on.

use ctxhost_plugin::format::anthropic::{
    AnthropicStream, PROVIDER, ParsedReply, parse_response, reasoning_items,
};

use ctxhost_plugin::request::{self as common, bad_shape};
use ctxhost_plugin::request_format::Reply;
use ctxhost_plugin::types::{PluginError, Usage};

/// Parses the response in `file`. Errors (`invalid-input`): see
/// [`common::read_response_json`] (an `{"type":"error","error":{"type","message"}}` body is
/// reported with its message and type), plus a body that is not a Messages API response.
pub fn read_response(file: &str) -> Result<Reply, PluginError> {
    let (bytes, value) = common::read_response_bytes(file)?;
    let mut parsed = parse_response(&value).map_err(|what| bad_shape(file, what, &value))?;
    parsed.message.reasoning = reasoning_items(&bytes);
    // Interleaved thinking: the blocks' order, to send them back in it.
    let order = parsed.order.item(PROVIDER);
    parsed.message.reasoning.extend(order);
    Ok(reply(file, parsed))
}

/// Folds the streamed reply in `file` (server-sent events, `read-response` with `streamed`) a
/// line at a time (`ctxhost_plugin::format::anthropic::AnthropicStream`). Errors: `stream-cut`
/// for a stream cut off before `message_stop`; `invalid-input` naming the file and line for a
/// line that is not an event or the provider's `error` event; `io`.
pub fn read_stream(file: &str) -> Result<Reply, PluginError> {
    let parsed = common::fold_stream(
        file,
        AnthropicStream::with_content_file(common::content_sink()),
    )?;
    if parsed.dropped_reasoning > 0 {
        ctxhost_plugin::logging::warn(&format!(
            "{file}: {} thinking block(s) left out: cut or unsigned, so never sent back",
            parsed.dropped_reasoning
        ));
    }
    Ok(reply(file, parsed))
}

/// The reply of a parsed response, its usage warning logged.
fn reply(file: &str, parsed: ParsedReply) -> Reply {
    if let Some(warning) = &parsed.usage_warning {
        ctxhost_plugin::logging::warn(&format!("{file}: {warning}"));
    }
    let usage = parsed.usage.map(|u| Usage {
        cache_read_tokens: u.cache_read_input_tokens,
        cache_creation_tokens: u.cache_creation_input_tokens,
        ..common::usage(Some(u.prompt_tokens()), Some(u.output_tokens), None)
    });
    Reply {
        message: common::to_wit(parsed.message),
        usage,
        finish_reason: parsed.finish_reason,
        model: parsed.model,
        content_file: parsed.content_file,
    }
}
