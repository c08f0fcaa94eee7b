//! `read-response`: a Messages API response body → reply
//! (`ctxhost_plugin::format::anthropic::parse_response`). Usage: `prompt-tokens` is all input tokens
//! (`input_tokens` + `cache_creation_input_tokens` + `cache_read_input_tokens`),
//! `completion-tokens` is `output_tokens`, `cache-read-tokens` and `cache-creation-tokens` are
//! `cache_read_input_tokens` and `cache_creation_input_tokens`. A count that is not a whole
//! number ≥ 0 counts as 0, and a `usage` that is not an object is ignored, each with a warning
//! in the host log: the reply is used.

use ctxhost_plugin::format::anthropic::parse_response;

use ctxhost_plugin::request::{self as common, bad_shape};
use ctxhost_plugin::request_format::Reply;
use ctxhost_plugin::types::{PluginError, Usage};

/// Parses the response in `file`. Errors (`invalid-input`): see
/// [`common::read_response_json`] (an `{"type":"error","error":{"type","message"}}` body is
/// reported with its message and type), plus a body that is not a Messages API response.
pub fn read_response(file: &str) -> Result<Reply, PluginError> {
    let value = common::read_response_json(file)?;
    let parsed = parse_response(&value).map_err(|what| bad_shape(file, what, &value))?;
    if let Some(warning) = &parsed.usage_warning {
        ctxhost_plugin::logging::warn(&format!("{file}: {warning}"));
    }
    let usage = parsed.usage.map(|u| Usage {
        cache_read_tokens: u.cache_read_input_tokens,
        cache_creation_tokens: u.cache_creation_input_tokens,
        ..common::usage(Some(u.prompt_tokens()), Some(u.output_tokens), None)
    });
    Ok(Reply {
        message: common::to_wit(parsed.message),
        usage,
        finish_reason: parsed.finish_reason,
    })
}
