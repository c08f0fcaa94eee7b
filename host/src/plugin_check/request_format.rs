//! The request-format suite: a golden current.jsonl and a quoted model name → request.json with
//! the model and every message (a request in Anthropic's shape read as the equivalent list);
//! malformed input; sample responses of the format's endpoint, an HTML error page, a provider
//! error object.

use ctxhost_format::files::{CURRENT, REQUEST, TOOL_DEFINITIONS};
use std::fs;

use ctxhost_format::ChatMessage;
use serde_json::{Value, json};

use super::harness::*;
use crate::runtime::{LoadedPlugin, PluginError, RequestConfig, Runtime, RuntimeError, Usage};

pub(super) const MODEL: &str = "qwen\"2.5-coder:0.5b";
pub(super) const UNICODE_TEXT: &str =
    "Résumé: 上下文压缩 \"quoted\" back\\slash\ttab\nnewline 😀 \u{1} end";

pub(super) fn golden_context() -> Vec<ChatMessage> {
    vec![
        ChatMessage::text("system", "You are a coding agent."),
        ChatMessage::text("user", UNICODE_TEXT),
        tool_call_message("call_1", "read_text_file", r#"{"path":"src/main.rs"}"#),
        tool_result("call_1", "read_text_file", "fn main() {}\n"),
        ChatMessage::text("assistant", "Done."),
    ]
}

pub(super) const TOOLS_JSON: &str = r#"[{"type":"function","function":{"name":"read_text_file","description":"Read a text file","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}]"#;

pub(super) fn request_format_suite(
    runtime: &Runtime,
    plugin: &LoadedPlugin,
    scratch: &Scratch,
    suite: &mut Suite,
) {
    let dir = match scratch.task("format") {
        Ok(d) => d,
        Err(err) => return suite.record("task directory", Err(err)),
    };
    let mut format = match runtime.request_format(plugin, &dir) {
        Ok(f) => f,
        Err(err) => return suite.record("instantiate", Err(e(err))),
    };
    let context = golden_context();
    let mut endpoint = String::new();
    let mut request: Option<Value> = None;

    suite.record(
        "write-request",
        (|| {
            // Blank and whitespace-only lines between messages must be skipped.
            let mut text = String::new();
            for (i, m) in context.iter().enumerate() {
                text.push_str(&serde_json::to_string(m).map_err(e)?);
                text.push('\n');
                if i == 1 {
                    text.push('\n');
                }
                if i == 3 {
                    text.push_str("   \n");
                }
            }
            fs::write(dir.join(CURRENT), text).map_err(e)?;
            fs::write(dir.join(TOOL_DEFINITIONS), TOOLS_JSON).map_err(e)?;
            let config = RequestConfig {
                model: MODEL.into(),
                messages_file: "current.jsonl".into(),
                request_file: "request.json".into(),
                tools_file: Some("tools.json".into()),
                max_output_tokens: Some(256),
                temperature: Some(0.2),
                stream: false,
                stream_usage: false,
                reasoning: None,
            };
            let info = format.write_request(&config).map_err(e)?;
            let size = fs::metadata(dir.join(REQUEST))
                .map_err(|err| format!("request.json: {err}"))?
                .len();
            ensure!(
                info.messages == 5,
                "reported {} messages, expected 5 (blank lines are not messages)",
                info.messages
            );
            ensure!(
                info.bytes == size,
                "reported {} bytes, request.json has {size}",
                info.bytes
            );
            ensure!(
                info.endpoint_path.starts_with('/'),
                "endpoint path {:?} does not start with /",
                info.endpoint_path
            );
            endpoint = info.endpoint_path.clone();
            Ok(format!(
                "{} bytes, 5 messages, endpoint {}",
                info.bytes, info.endpoint_path
            ))
        })(),
    );

    suite.record(
        "request.json is JSON with the model and every message",
        (|| {
            let raw = fs::read_to_string(dir.join(REQUEST))
                .map_err(|err| format!("request.json: {err}"))?;
            let mut v: Value = serde_json::from_str(&raw)
                .map_err(|err| format!("request.json is not JSON: {err}"))?;
            ensure!(
                v.get("model").and_then(Value::as_str) == Some(MODEL),
                "model is {:?}, expected {MODEL:?}",
                v.get("model")
            );
            let view = message_view(&v).ok_or("no \"messages\" array")?;
            v["messages"] = Value::Array(view);
            let msgs = v["messages"].as_array().ok_or("no \"messages\" array")?;
            ensure!(
                msgs.len() == 5,
                "{} messages, expected 5 (blank lines skipped)",
                msgs.len()
            );
            let roles: Vec<&str> = msgs
                .iter()
                .map(|m| m.get("role").and_then(Value::as_str).unwrap_or("?"))
                .collect();
            // A tool result may be sent as a `user` message by formats for models without
            // native tool calling.
            ensure!(
                roles[..3] == ["system", "user", "assistant"]
                    && matches!(roles[3], "tool" | "user")
                    && roles[4] == "assistant",
                "roles {roles:?}, expected system, user, assistant, tool (or user), assistant"
            );
            request = Some(v);
            Ok(format!("model {MODEL:?}, 5 messages with roles in order"))
        })(),
    );

    suite.record("unicode, escapes and tool calls preserved", (|| {
        let v = request.as_ref().ok_or("no request to inspect")?;
        let msgs = v["messages"].as_array().ok_or("no messages")?;
        ensure!(msgs[1].get("content").and_then(Value::as_str) == Some(UNICODE_TEXT), "user content became {:?}", msgs[1].get("content"));
        let call = msgs[2].to_string();
        ensure!(call.contains("read_text_file") && call.contains("src/main.rs"), "the tool call is missing from message 3: {call}");
        let result = msgs[3].to_string();
        ensure!(result.contains("fn main() {}"), "the tool result is missing from message 4: {result}");
        Ok("CJK, emoji, quotes, backslash, control characters intact; tool call and result present".to_string())
    })());

    suite.record(
        "tools offered",
        (|| {
            let v = request.as_ref().ok_or("no request to inspect")?;
            if let Some(tools) = v.get("tools").and_then(Value::as_array) {
                ensure!(tools.len() == 1, "{} tools, expected 1", tools.len());
                ensure!(
                    tools[0].to_string().contains("read_text_file"),
                    "tool definition lost: {}",
                    tools[0]
                );
                return Ok("\"tools\" array with the one tool".to_string());
            }
            let system = v["messages"][0].to_string();
            ensure!(
                system.contains("read_text_file"),
                "neither a \"tools\" array nor the tool in the system prompt"
            );
            Ok("tool described in the system prompt".to_string())
        })(),
    );

    suite.record("write-request rejects a malformed line", (|| {
        fs::write(dir.join("bad.jsonl"), "{\"role\":\"system\",\"content\":\"x\"}\n{\"role\": \"user\", \"content\n").map_err(e)?;
        let config = RequestConfig {
            model: "m".into(),
            messages_file: "bad.jsonl".into(),
            request_file: "bad_request.json".into(),
            ..Default::default()
        };
        match format.write_request(&config) {
            Ok(info) => Err(format!("accepted a file whose line 2 is not JSON ({info:?})")),
            Err(err) => {
                ensure!(
                    matches!(err.plugin_error(), Some(PluginError::InvalidInput(m)) if names_line(m, 2)),
                    "expected invalid-input naming line 2, got {err}"
                );
                Ok(e(err))
            }
        }
    })());

    let samples = response_samples(&endpoint);
    if samples.is_empty() {
        suite.record(
            "read-response",
            Ok(format!(
                "skipped: no sample responses for endpoint {endpoint:?}"
            )),
        );
    }
    for (i, sample) in samples.into_iter().enumerate() {
        let file = format!("response_{i}.json");
        let outcome = fs::write(dir.join(&file), sample.body)
            .map_err(e)
            .and_then(|_| {
                let got = format.read_response(&file, false);
                (sample.expect)(got)
            });
        suite.record(sample.name, outcome);
    }
}

/// The messages of a request body as one list in OpenAI's shape, whatever the provider's: a
/// top-level `system` (Anthropic's Messages API, a string or text blocks) becomes a first
/// `system` message, and content given as a list of blocks gets its text blocks joined as
/// `content` (the blocks are kept under `blocks`); a Responses API body's `instructions` and
/// `input` items are read as messages ([`responses_view`]). `None` without a `messages` (or
/// `input`) array.
pub(super) fn message_view(body: &Value) -> Option<Vec<Value>> {
    if body.get("messages").is_none()
        && let Some(input) = body.get("input").and_then(Value::as_array)
    {
        return Some(responses_view(body.get("instructions"), input));
    }
    let joined = |blocks: &[Value]| -> String {
        blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect()
    };
    let mut out = Vec::new();
    match body.get("system") {
        Some(Value::String(s)) => out.push(json!({"role": "system", "content": s})),
        Some(Value::Array(blocks)) => {
            out.push(json!({"role": "system", "content": joined(blocks)}))
        }
        _ => {}
    }
    for m in body.get("messages")?.as_array()? {
        let mut m = m.clone();
        if let Some(blocks) = m.get("content").and_then(Value::as_array).cloned() {
            m["content"] = Value::from(joined(&blocks));
            m["blocks"] = Value::Array(blocks);
        }
        out.push(m);
    }
    Some(out)
}

/// A Responses API body's `instructions` (a first `system` message) and `input` items as
/// OpenAI chat messages: a `message` item as `{role, content}`, `function_call` items as the
/// `tool_calls` of an assistant message (the one just before, or a new one), a
/// `function_call_output` as a `tool` message; `reasoning` items are left out.
fn responses_view(instructions: Option<&Value>, input: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(Value::String(s)) = instructions {
        out.push(json!({"role": "system", "content": s}));
    }
    let mut calls_open = false;
    for item in input {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                let call = json!({"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}});
                let last_assistant = out.last().is_some_and(|m: &Value| m["role"] == "assistant");
                if !(calls_open || last_assistant) {
                    out.push(json!({"role": "assistant", "content": null}));
                }
                if let Some(m) = out.last_mut() {
                    match m.get_mut("tool_calls").and_then(Value::as_array_mut) {
                        Some(calls) => calls.push(call),
                        None => m["tool_calls"] = json!([call]),
                    }
                }
                calls_open = true;
                continue;
            }
            Some("function_call_output") => out.push(
                json!({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]}),
            ),
            Some("reasoning") => continue,
            _ => out.push(json!({"role": item["role"], "content": item["content"]})),
        }
        calls_open = false;
    }
    out
}

pub(super) struct ResponseSample {
    name: &'static str,
    body: String,
    expect: Box<dyn Fn(Result<crate::runtime::Reply, RuntimeError>) -> Outcome>,
}

/// Sample responses for the provider behind `endpoint`. The OpenAI text reply reports 8 cached
/// prompt tokens (`prompt_tokens_details.cached_tokens`), expected as `cache-read-tokens`, the
/// Anthropic one 7 read and 3 written (`cache_read_input_tokens`,
/// `cache_creation_input_tokens`).
pub(super) fn response_samples(endpoint: &str) -> Vec<ResponseSample> {
    let (openai_cached, anthropic_cache) = (8, (7, 3));
    const TEXT: &str = "Hello 世界 \"x\" \\ 😀";
    let text_reply =
        |usage: Usage| -> Box<dyn Fn(Result<crate::runtime::Reply, RuntimeError>) -> Outcome> {
            Box::new(move |got| {
                let r = got.map_err(e)?;
                ensure!(r.message.role == "assistant", "role {:?}", r.message.role);
                ensure!(
                    r.message.content.as_deref() == Some(TEXT),
                    "content {:?}, expected {TEXT:?}",
                    r.message.content
                );
                ensure!(
                    r.message.calls().is_empty(),
                    "unexpected tool calls {:?}",
                    r.message.tool_calls
                );
                ensure!(
                    r.usage == Some(usage),
                    "usage {:?}, expected {usage:?}",
                    r.usage
                );
                ensure!(
                    r.finish_reason.as_deref() == Some("stop"),
                    "finish reason {:?}",
                    r.finish_reason
                );
                Ok(format!(
                    "assistant text, usage {}/{}/{} (cache read {})",
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    usage.total_tokens,
                    usage.cache_read_tokens
                ))
            })
        };
    let tool_reply = |want_id: Option<&'static str>| -> Box<dyn Fn(Result<crate::runtime::Reply, RuntimeError>) -> Outcome> {
        Box::new(move |got| {
            let r = got.map_err(e)?;
            let calls = r.message.calls();
            ensure!(calls.len() == 1, "{} tool calls, expected 1", calls.len());
            let c = &calls[0];
            ensure!(c.function.name == "list_directory", "tool name {:?}", c.function.name);
            let args: Value = serde_json::from_str(&c.function.arguments)
                .map_err(|err| format!("arguments {:?} are not JSON text: {err}", c.function.arguments))?;
            ensure!(args == json!({"path": "."}), "arguments {args}");
            match want_id {
                Some(id) => ensure!(c.id == id, "id {:?}, expected {id:?}", c.id),
                None => ensure!(!c.id.is_empty(), "empty tool call id (one must be made up when the provider gives none)"),
            }
            Ok(format!("tool call {} list_directory({})", c.id, c.function.arguments))
        })
    };
    let rejected = |needle: Option<&'static str>| -> Box<dyn Fn(Result<crate::runtime::Reply, RuntimeError>) -> Outcome> {
        Box::new(move |got| match got {
            Ok(r) => Err(format!("accepted it as {:?}", r.message)),
            Err(err) => {
                ensure!(is_plugin_error(&err), "expected a plugin error, got {err}");
                if let Some(needle) = needle {
                    ensure!(err.to_string().contains(needle), "the error does not quote the provider's message: {err}");
                }
                Ok(e(err))
            }
        })
    };
    let html = "<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>".to_string();
    match endpoint {
        "/v1/chat/completions" => vec![
            ResponseSample {
                name: "read-response: OpenAI text reply with usage",
                body: json!({
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": TEXT}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17,
                              "prompt_tokens_details": {"cached_tokens": 8}}
                })
                .to_string(),
                expect: text_reply(Usage { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17, cache_read_tokens: openai_cached, cache_creation_tokens: 0, reasoning_tokens: 0 }),
            },
            ResponseSample {
                name: "read-response: OpenAI tool call reply",
                body: json!({
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_9", "type": "function", "function": {"name": "list_directory", "arguments": "{\"path\":\".\"}"}}
                    ]}, "finish_reason": "tool_calls"}]
                })
                .to_string(),
                expect: tool_reply(Some("call_9")),
            },
            ResponseSample {
                name: "read-response: provider error object",
                body: json!({"error": {"message": "model qwen not found", "type": "invalid_request_error"}}).to_string(),
                expect: rejected(Some("model qwen not found")),
            },
            ResponseSample { name: "read-response: HTML error page", body: html, expect: rejected(None) },
        ],
        "/api/chat" => vec![
            ResponseSample {
                name: "read-response: Ollama text reply with usage",
                body: json!({
                    "model": "m", "created_at": "2026-01-02T03:04:05Z",
                    "message": {"role": "assistant", "content": TEXT},
                    "done": true, "done_reason": "stop", "prompt_eval_count": 12, "eval_count": 5
                })
                .to_string(),
                expect: text_reply(Usage { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17, ..Usage::default() }),
            },
            ResponseSample {
                name: "read-response: Ollama tool call reply",
                body: json!({
                    "model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [
                        {"function": {"name": "list_directory", "arguments": {"path": "."}}}
                    ]}, "done": true, "done_reason": "stop"
                })
                .to_string(),
                expect: tool_reply(None),
            },
            ResponseSample {
                name: "read-response: provider error object",
                body: json!({"error": "model 'qwen' not found"}).to_string(),
                expect: rejected(Some("model 'qwen' not found")),
            },
            ResponseSample { name: "read-response: HTML error page", body: html, expect: rejected(None) },
        ],
        "/v1/messages" => vec![
            ResponseSample {
                name: "read-response: Anthropic text reply with usage (cache tokens in the prompt)",
                body: json!({
                    "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                    "content": [{"type": "text", "text": TEXT}], "stop_reason": "end_turn",
                    "usage": {"input_tokens": 2, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 7, "output_tokens": 5}
                })
                .to_string(),
                expect: text_reply(Usage { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17, cache_read_tokens: anthropic_cache.0, cache_creation_tokens: anthropic_cache.1, reasoning_tokens: 0 }),
            },
            ResponseSample {
                name: "read-response: Anthropic tool_use reply",
                body: json!({
                    "type": "message", "role": "assistant", "stop_reason": "tool_use",
                    "content": [{"type": "tool_use", "id": "toolu_9", "name": "list_directory", "input": {"path": "."}}]
                })
                .to_string(),
                expect: tool_reply(Some("toolu_9")),
            },
            ResponseSample {
                name: "read-response: provider error object",
                body: json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}).to_string(),
                expect: rejected(Some("Overloaded")),
            },
            ResponseSample { name: "read-response: HTML error page", body: html, expect: rejected(None) },
        ],
        "/v1/responses" => vec![
            ResponseSample {
                name: "read-response: Responses API text reply with usage",
                body: json!({
                    "id": "resp_1", "object": "response", "status": "completed", "error": null,
                    "output": [{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": TEXT, "annotations": []}]}],
                    "usage": {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 8},
                        "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 17}
                })
                .to_string(),
                expect: text_reply(Usage { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17, cache_read_tokens: openai_cached, cache_creation_tokens: 0, reasoning_tokens: 0 }),
            },
            ResponseSample {
                name: "read-response: Responses API function call reply",
                body: json!({
                    "object": "response", "status": "completed",
                    "output": [{"type": "function_call", "id": "fc_1", "call_id": "call_9",
                        "name": "list_directory", "arguments": "{\"path\":\".\"}"}]
                })
                .to_string(),
                expect: tool_reply(Some("call_9")),
            },
            ResponseSample {
                name: "read-response: provider error object",
                body: json!({"error": {"message": "model qwen not found", "type": "invalid_request_error"}}).to_string(),
                expect: rejected(Some("model qwen not found")),
            },
            ResponseSample { name: "read-response: HTML error page", body: html, expect: rejected(None) },
        ],
        _ => Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Compressor
