//! `read-response`: the chat completion (parsed by `builtin:openai-chat`'s code,
//! `ctxhost_plugin::request::openai`), then the
//! reply text parsed for JSON tool calls (`ctxhost_plugin::format::prompted::parse_reply`).
//!
//! Native `tool_calls`, if the server sent any, are kept as they are. Otherwise calls found in
//! the text become `tool_calls` with ids `call_1`, `call_2`, ... (unique within the reply),
//! the message content is the remaining prose (`None` when there is none), and
//! `finish_reason` becomes `tool_calls`, as with a native tool call.

use ctxhost_plugin::format::prompted;
use ctxhost_plugin::format::reply::unique_call_ids;

use ctxhost_plugin::request::openai;
use ctxhost_plugin::request_format::Reply;
use ctxhost_plugin::types::{PluginError, ToolCall};
/// Parses the response in `file`. Errors: those of `builtin:openai-chat`'s `read-response`.
pub fn read_response(file: &str) -> Result<Reply, PluginError> {
    let mut reply = openai::read_response(file)?;
    if !reply.message.tool_calls.is_empty() {
        return Ok(reply);
    }
    let Some(text) = reply.message.content.as_deref() else {
        return Ok(reply);
    };
    let parsed = prompted::parse_reply(text);
    if parsed.calls.is_empty() {
        return Ok(reply);
    }
    let ids = unique_call_ids(parsed.calls.iter().map(|_| None));
    reply.message.tool_calls = parsed
        .calls
        .into_iter()
        .zip(ids)
        .map(|(c, id)| ToolCall {
            id,
            name: c.name,
            arguments: c.arguments,
        })
        .collect();
    reply.message.content = parsed.content;
    reply.finish_reason = Some("tool_calls".to_string());
    Ok(reply)
}
