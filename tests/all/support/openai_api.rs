//! What the fake LLM server ([`super::fake_llm`]) knows of OpenAI's chat completions API, used
//! for requests to `POST /v1/chat/completions`: [`check_request`] refuses, as strict
//! OpenAI-compatible gateways do, a message with a field the API does not define for its role.
//! A refused request gets a 400 with OpenAI's error body instead of the scripted reply, and is
//! counted in [`super::fake_llm::FakeLlm::openai_rejections`].
#![allow(dead_code)]

use serde_json::{Value, json};

use super::fake_llm::{RecordedRequest, Reply};

/// The path of the chat completions API.
pub const CHAT_PATH: &str = "/v1/chat/completions";

/// The fields the API defines for a message of `role` (`None`: a role it does not know).
fn allowed_fields(role: &str) -> Option<&'static [&'static str]> {
    Some(match role {
        "system" | "developer" | "user" => &["role", "content", "name"],
        "assistant" => &[
            "role",
            "content",
            "name",
            "tool_calls",
            "refusal",
            "audio",
            "function_call",
        ],
        "tool" => &["role", "content", "tool_call_id"],
        _ => return None,
    })
}

/// Checks the request's `messages` against the API's message shapes. `Err(message)` with the
/// text a strict gateway answers, e.g. `messages[3]: name is not supported for tool messages`.
/// With `deepseek_thinking`, as DeepSeek's thinking mode: an assistant message may carry
/// `reasoning_content`, and one with `tool_calls` must ("The reasoning_content in the thinking
/// mode must be passed back to the API.").
pub fn check_request(req: &RecordedRequest, deepseek_thinking: bool) -> Result<(), String> {
    let Some(messages) = req.body.get("messages").and_then(Value::as_array) else {
        return Ok(());
    };
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let Some(allowed) = allowed_fields(role) else {
            return Err(format!("messages[{i}]: unknown role {role:?}"));
        };
        let thinking_field =
            |k: &str| deepseek_thinking && role == "assistant" && k == "reasoning_content";
        if deepseek_thinking
            && role == "assistant"
            && m.get("tool_calls").is_some()
            && m.get("reasoning_content").and_then(Value::as_str).is_none()
        {
            return Err(
                "The reasoning_content in the thinking mode must be passed back to the API."
                    .to_string(),
            );
        }
        if let Some(obj) = m.as_object()
            && let Some(key) = obj
                .keys()
                .find(|k| !allowed.contains(&k.as_str()) && !thinking_field(k))
        {
            return Err(format!(
                "messages[{i}]: {key} is not supported for {role} messages"
            ));
        }
        if role == "tool" && m.get("tool_call_id").and_then(Value::as_str).is_none() {
            return Err(format!(
                "messages[{i}]: tool messages need a string tool_call_id"
            ));
        }
    }
    Ok(())
}

/// With `refuse_stream_options`, as a strict OpenAI-compatible server that does not know the
/// argument (e.g. one answering `Unrecognized request argument supplied: stream_options`):
/// `Err((message, param))` for a body carrying `stream_options`.
pub fn check_arguments(
    req: &RecordedRequest,
    refuse_stream_options: bool,
) -> Result<(), (String, &'static str)> {
    if refuse_stream_options && req.body.get("stream_options").is_some() {
        return Err((
            "Unrecognized request argument supplied: stream_options".to_string(),
            "stream_options",
        ));
    }
    Ok(())
}

/// The 400 reply for a refused request: `{"error":{"message","type":"invalid_request_error",
/// "param":"messages","code":null}}`.
pub fn error_reply(message: &str) -> Reply {
    error_reply_for(message, "messages")
}

/// [`error_reply`] naming the argument `param`.
pub fn error_reply_for(message: &str, param: &str) -> Reply {
    Reply::status(
        400,
        json!({"error": {"message": message, "type": "invalid_request_error",
            "param": param, "code": null}})
        .to_string(),
        &[],
    )
}
