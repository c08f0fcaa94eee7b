//! `read-response`: a Messages API response body → reply
//! (`ctxhost_format::anthropic::parse_response`). Usage: `prompt-tokens` is all input tokens
//! (`input_tokens` + `cache_creation_input_tokens` + `cache_read_input_tokens`),
//! `completion-tokens` is `output_tokens`, `cache-read-tokens` and `cache-creation-tokens` are
//! `cache_read_input_tokens` and `cache_creation_input_tokens`. A count that is not a whole
//! number ≥ 0 counts as 0, and a `usage` that is not an object is ignored, each with a warning
//! in the host log: the reply is used.

use ctxhost_format::anthropic::parse_response;

use crate::common::{self, bad_shape};
use crate::ctxhost::plugin::log::{Level, log};
use crate::ctxhost::plugin::types::{PluginError, Usage};
use crate::exports::ctxhost::plugin::request_format::Reply;

/// Parses the response in `file`. Errors (`invalid-input`): see
/// [`common::read_response_json`] (an `{"type":"error","error":{"type","message"}}` body is
/// reported with its message and type), plus a body that is not a Messages API response.
pub fn read_response(file: &str) -> Result<Reply, PluginError> {
    let value = common::read_response_json(file)?;
    let parsed = parse_response(&value).map_err(|what| bad_shape(file, what, &value))?;
    if let Some(warning) = &parsed.usage_warning {
        log(Level::Warn, &format!("{file}: {warning}"));
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
