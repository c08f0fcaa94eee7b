//! `read-response`: an Ollama `/api/chat` response body → reply.
//!
//! Accepts `{"message":{"role","content","tool_calls"?:[{"function":{"name","arguments"}}]},
//! "done":true,"done_reason"?,"prompt_eval_count"?,"eval_count"?}`. Tool calls become OpenAI
//! shaped: `id` as given or generated (`call_<n>`, n from 1, unique within the reply),
//! `arguments` serialised to JSON text. `finish_reason` is `tool_calls` when the model called
//! tools, else `done_reason`. Usage comes from `prompt_eval_count` / `eval_count` (either may
//! be missing, e.g. when the prompt was cached).

use ctxhost_format::{ChatMessage, ToolCall, body};
use serde::Deserialize;
use serde_json::Value;

use crate::common::{self, bad_shape};
use crate::ctxhost::plugin::types::{PluginError, Usage};
use crate::exports::ctxhost::plugin::request_format::Reply;

#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    message: Option<MessageIn>,
    #[serde(default)]
    done: Option<bool>,
    #[serde(default)]
    done_reason: Option<String>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    #[serde(default)]
    eval_count: Option<u64>,
}

#[derive(Deserialize)]
struct MessageIn {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<CallIn>>,
}

#[derive(Deserialize)]
struct CallIn {
    #[serde(default)]
    id: Option<String>,
    function: FunctionIn,
}

#[derive(Deserialize)]
struct FunctionIn {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

/// Parses the response in `file`. Errors (`invalid-input`): see
/// [`common::read_response_json`], plus a missing `message`, `"done":false` (a partial,
/// streamed reply), an unexpected shape.
pub fn read_response(file: &str) -> Result<Reply, PluginError> {
    let value = common::read_response_json(file)?;
    let response: Response = serde_json::from_value(value.clone()).map_err(|e| {
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
    let calls = message.tool_calls.unwrap_or_default();
    let ids = common::unique_call_ids(calls.iter().map(|c| c.id.clone()));
    let tool_calls: Vec<ToolCall> = calls
        .into_iter()
        .zip(ids)
        .map(|(c, id)| {
            ToolCall::new(
                id,
                c.function.name,
                body::arguments_text(c.function.arguments.as_ref()),
            )
        })
        .collect();
    let finish_reason = if tool_calls.is_empty() {
        response.done_reason
    } else {
        Some("tool_calls".to_string())
    };
    let message = ChatMessage {
        role: message.role.unwrap_or_else(|| "assistant".to_string()),
        content: message.content,
        tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
        tool_call_id: None,
        tool_name: None,
    };
    let usage =
        (response.prompt_eval_count.is_some() || response.eval_count.is_some()).then(|| {
            let (prompt, completion) = (
                response.prompt_eval_count.unwrap_or(0),
                response.eval_count.unwrap_or(0),
            );
            Usage {
                prompt_tokens: prompt,
                completion_tokens: completion,
                total_tokens: prompt + completion,
            }
        });
    Ok(Reply {
        message: common::to_wit(message),
        usage,
        finish_reason,
    })
}
