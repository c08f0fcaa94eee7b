//! `read-response`: an Ollama `/api/chat` response body → reply.
//!
//! Accepts `{"model"?,"message":{"role","content","tool_calls"?:[{"function":{"name","arguments"}}]},
//! "done":true,"done_reason"?,"prompt_eval_count"?,"eval_count"?}`. Tool calls become OpenAI
//! shaped: `id` as given or generated (`call_<n>`, n from 1, unique within the reply),
//! `arguments` serialised to JSON text. `finish_reason` is `tool_calls` when the model called
//! tools, else `done_reason`. Usage comes from `prompt_eval_count` / `eval_count` (either may
//! be missing, e.g. when the prompt was cached); a count that is not a whole number ≥ 0 counts
//! as 0 with a warning in the host log ([`TokenCount`]). `message.thinking` (a model's thinking
//! with `"think": true`) becomes a reasoning item (provider `ollama`, type `thinking`, data the
//! text as a JSON string), kept in the history; it is not sent back (Ollama does not need it).
//!
//! A streamed reply (newline-delimited JSON) is folded a line at a time
//! (`ctxhost_plugin::format::ndjson::OllamaStream`) into the same parts.

use ctxhost_plugin::format::ReasoningItem;
use ctxhost_plugin::format::ndjson::{OllamaReply, OllamaStream};
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
    #[serde(default)]
    model: Option<String>,
}

#[derive(Deserialize)]
struct MessageIn {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
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
    Ok(reply(
        file,
        OllamaReply {
            role: message.role,
            content: message.content,
            thinking: message.thinking.filter(|t| !t.is_empty()),
            tool_calls: message.tool_calls.unwrap_or_default(),
            done_reason: response.done_reason,
            prompt_eval_count: response.prompt_eval_count,
            eval_count: response.eval_count,
            model: response.model,
            content_file: None,
        },
    ))
}

/// Folds the streamed reply in `file` (`read-response` with `streamed`). Errors: `stream-cut`
/// for a stream cut off before its `"done":true` line; `invalid-input` naming the file and line
/// for a line that is not a chat piece or the server's error line; `io`.
pub fn read_stream(file: &str) -> Result<Reply, PluginError> {
    let r = common::fold_stream(file, OllamaStream::with_content_file(common::content_sink()))?;
    Ok(reply(file, r))
}

/// The reply of a whole or folded response (module doc).
fn reply(file: &str, r: OllamaReply) -> Reply {
    let mut message = assistant_message(r.role, r.content, r.tool_calls);
    if let Some(thinking) = r.thinking {
        message.reasoning.push(ReasoningItem {
            provider: "ollama".to_string(),
            kind: "thinking".to_string(),
            data: serde_json::Value::String(thinking).to_string(),
        });
    }
    let finish_reason = if message.calls().is_empty() {
        r.done_reason
    } else {
        Some("tool_calls".to_string())
    };
    if let Some(warning) = invalid_counts(&[
        ("prompt_eval_count", &r.prompt_eval_count),
        ("eval_count", &r.eval_count),
    ]) {
        ctxhost_plugin::logging::warn(&format!("{file}: {warning}"));
    }
    let (prompt, completion) = (r.prompt_eval_count.value(), r.eval_count.value());
    let usage =
        (prompt.is_some() || completion.is_some()).then(|| common::usage(prompt, completion, None));
    Reply {
        message: common::to_wit(message),
        usage,
        finish_reason,
        model: r.model,
        content_file: r.content_file,
    }
}
