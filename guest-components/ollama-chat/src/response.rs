//! `read-response`: an Ollama `/api/chat` response body → reply.
//!
//! Accepts `{"message":{"role","content","tool_calls"?:[{"function":{"name","arguments"}}]},
//! "done":true,"done_reason"?,"prompt_eval_count"?,"eval_count"?}`. Tool calls become OpenAI
//! shaped: `id` as given or generated (`call_<n>`, n from 1, unique within the reply),
//! `arguments` serialised to JSON text. `finish_reason` is `tool_calls` when the model called
//! tools, else `done_reason`. Usage comes from `prompt_eval_count` / `eval_count` (either may
//! be missing, e.g. when the prompt was cached); a count that is not a whole number ≥ 0 counts
//! as 0 with a warning in the host log ([`TokenCount`]).

use ctxhost_plugin::format::reply::{
    ProviderToolCall, TokenCount, assistant_message, invalid_counts,
};
use serde::Deserialize;

use ctxhost_plugin::request::{self as common, bad_shape};
use ctxhost_plugin::request_format::Reply;
use ctxhost_plugin::types::PluginError;

#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    message: Option<MessageIn>,
    #[serde(default)]
    done: Option<bool>,
    #[serde(default)]
    done_reason: Option<String>,
    #[serde(default)]
    prompt_eval_count: TokenCount,
    #[serde(default)]
    eval_count: TokenCount,
}

#[derive(Deserialize)]
struct MessageIn {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ProviderToolCall>>,
}

/// Parses the response in `file`. Errors (`invalid-input`): see
/// [`common::read_response_json`], plus a missing `message`, `"done":false` (a partial,
/// streamed reply), an unexpected shape.
pub fn read_response(file: &str) -> Result<Reply, PluginError> {
    let value = common::read_response_json(file)?;
    let response = Response::deserialize(&value).map_err(|e| {
        bad_shape(
            file,
            format_args!("not an Ollama chat response ({e})"),
            &value,
        )
    })?;
    if response.done == Some(false) {
        return Err(bad_shape(
            file,
            "the reply is not done (\"done\":false: a partial, streamed reply)",
            &value,
        ));
    }
    let Some(message) = response.message else {
        return Err(bad_shape(file, "the response has no message", &value));
    };
    let message = assistant_message(
        message.role,
        message.content,
        message.tool_calls.unwrap_or_default(),
    );
    let finish_reason = if message.calls().is_empty() {
        response.done_reason
    } else {
        Some("tool_calls".to_string())
    };
    if let Some(warning) = invalid_counts(&[
        ("prompt_eval_count", &response.prompt_eval_count),
        ("eval_count", &response.eval_count),
    ]) {
        ctxhost_plugin::logging::warn(&format!("{file}: {warning}"));
    }
    let (prompt, completion) = (
        response.prompt_eval_count.value(),
        response.eval_count.value(),
    );
    let usage =
        (prompt.is_some() || completion.is_some()).then(|| common::usage(prompt, completion, None));
    Ok(Reply {
        message: common::to_wit(message),
        usage,
        finish_reason,
    })
}
