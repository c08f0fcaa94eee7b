//! The builtin request formats (`builtin:openai-chat`, `builtin:ollama-chat`) run through the
//! host runtime on golden inputs:
//!
//! - `write-request` on `tests/golden/current.jsonl` (+ `tools.json`): the body is valid JSON
//!   with the provider's structure, and its exact bytes are snapshotted
//!   (`tests/snapshots/request_snapshots__*.snap`, reviewed by eye);
//! - `read-response` on the provider bodies of `tests/golden/responses/`: the parsed reply, or
//!   the error naming what is wrong.

use std::fs;

use ctxhost::runtime::{PluginError, Reply, RequestConfig, RequestFormat, RuntimeError, Usage};
use ctxhost_format::{ChatMessage, ToolCall};
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::support::components::{golden, request_format};

/// A task directory holding the golden current.jsonl and tools.json, and an instance of the
/// builtin request format `name` on it.
fn format(name: &str) -> (TempDir, RequestFormat) {
    let task = tempfile::tempdir().unwrap();
    fs::copy(golden("current.jsonl"), task.path().join("current.jsonl")).unwrap();
    fs::copy(golden("tools.json"), task.path().join("tools.json")).unwrap();
    let instance = request_format(&format!("builtin:{name}"), task.path());
    (task, instance)
}

fn config(model: &str) -> RequestConfig {
    RequestConfig {
        model: model.to_string(),
        messages_file: "current.jsonl".to_string(),
        request_file: "request.json".to_string(),
        tools_file: Some("tools.json".to_string()),
        max_output_tokens: Some(512),
        temperature: Some(0.2),
        stream: false,
        stream_usage: false,
        reasoning: None,
    }
}

/// Writes the request for `cfg` and returns (body text, parsed body), checking the reported
/// byte count and endpoint.
fn write(name: &str, cfg: &RequestConfig, endpoint: &str, messages: u64) -> (String, Value) {
    let (task, mut f) = format(name);
    let info = f.write_request(cfg).unwrap();
    let text = fs::read_to_string(task.path().join(&cfg.request_file)).unwrap();
    assert_eq!(info.endpoint_path, endpoint);
    assert_eq!(info.messages, messages);
    assert_eq!(info.bytes, text.len() as u64);
    assert!(
        !text.contains(",,") && !text.contains("[,") && !text.contains(",]"),
        "{text}"
    );
    let value: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{name}: request is not JSON: {e}\n{text}"));
    (text, value)
}

fn golden_tools() -> Value {
    serde_json::from_str(&fs::read_to_string(golden("tools.json")).unwrap()).unwrap()
}

/// The golden user message, as parsed from current.jsonl.
fn golden_user_text() -> String {
    let line = fs::read_to_string(golden("current.jsonl"))
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .to_string();
    serde_json::from_str::<ChatMessage>(&line)
        .unwrap()
        .content
        .unwrap()
}

#[test]
fn openai_request_has_openai_structure() {
    let (text, body) = write(
        "openai-chat",
        &config("gpt-4o-mini"),
        "/v1/chat/completions",
        6,
    );
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["stream"], false);
    assert_eq!(body["max_tokens"], 512);
    assert_eq!(body["temperature"].to_string(), "0.2");
    assert_eq!(body["tools"], golden_tools());
    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "tool", "assistant"]
    );
    assert_eq!(messages[1]["content"], golden_user_text());
    // Assistant with parallel tool calls: content null, calls in OpenAI shape.
    assert!(messages[2]["content"].is_null());
    assert_eq!(messages[2]["tool_calls"][1]["id"], "call_b2");
    assert_eq!(messages[2]["tool_calls"][1]["type"], "function");
    assert_eq!(
        messages[2]["tool_calls"][1]["function"]["arguments"],
        "{\"path\":\"src\"}"
    );
    // Tool results: exactly what the chat completions API defines for a tool message (issue
    // 25 item 10: no `name`, which strict gateways refuse; ctxhost's tool_name stays home).
    for tool in &messages[3..5] {
        let mut keys: Vec<&String> = tool.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["content", "role", "tool_call_id"], "{tool}");
    }
    assert_eq!(messages[3]["tool_call_id"], "call_a1");
    assert!(!text.contains("tool_name"), "{text}");
    for m in messages {
        let keys: Vec<&String> = m.as_object().unwrap().keys().collect();
        assert!(
            keys.iter().all(|k| {
                ["role", "content", "tool_calls", "tool_call_id"].contains(&k.as_str())
            })
        );
    }
    insta::assert_snapshot!("openai_chat_request", text);
}

#[test]
fn ollama_request_has_ollama_structure() {
    let (text, body) = write("ollama-chat", &config("qwen2.5-coder:0.5b"), "/api/chat", 6);
    assert_eq!(body["model"], "qwen2.5-coder:0.5b");
    assert_eq!(body["stream"], false);
    assert_eq!(
        body["options"],
        json!({"num_predict": 512, "temperature": 0.2})
    );
    assert_eq!(body["options"]["temperature"].to_string(), "0.2");
    assert_eq!(body["tools"], golden_tools());
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 6);
    assert_eq!(messages[1]["content"], golden_user_text());
    // Content is always a string; tool-call arguments are objects; no ids.
    assert_eq!(messages[2]["content"], "");
    assert_eq!(
        messages[2]["tool_calls"],
        json!([
            {"function": {"name": "read_text_file", "arguments": {"path": "src/main.rs"}}},
            {"function": {"name": "list_directory", "arguments": {"path": "src"}}}
        ])
    );
    assert_eq!(
        messages[4],
        json!({"role": "tool", "content": "[FILE] main.rs\n[FILE] lib.rs", "tool_name": "list_directory"})
    );
    assert!(!text.contains("tool_call_id"), "{text}");
    insta::assert_snapshot!("ollama_chat_request", text);
}

#[test]
fn model_name_and_settings_are_escaped_or_left_out() {
    let model = "my \"quoted\" model\\v1\n";
    for (name, endpoint) in [
        ("openai-chat", "/v1/chat/completions"),
        ("ollama-chat", "/api/chat"),
    ] {
        let cfg = RequestConfig {
            tools_file: None,
            max_output_tokens: None,
            temperature: None,
            ..config(model)
        };
        let (_, body) = write(name, &cfg, endpoint, 6);
        assert_eq!(body["model"], model, "{name}");
        let keys: Vec<&String> = body.as_object().unwrap().keys().collect(); // sorted
        assert_eq!(keys, ["messages", "model", "stream"], "{name}");
    }
}

#[test]
fn empty_tools_array_is_left_out() {
    for name in ["openai-chat", "ollama-chat"] {
        let (task, mut f) = format(name);
        fs::write(task.path().join("tools.json"), "[]").unwrap();
        f.write_request(&config("m")).unwrap();
        let body: Value =
            serde_json::from_slice(&fs::read(task.path().join("request.json")).unwrap()).unwrap();
        assert!(body.get("tools").is_none(), "{name}: {body}");
    }
}

/// The component's own error of a failed call, or a panic naming what came back instead.
fn plugin_error<T: std::fmt::Debug>(r: Result<T, RuntimeError>) -> PluginError {
    match r {
        Err(RuntimeError::Plugin { error, .. }) => error,
        other => panic!("expected a plugin error, got {other:?}"),
    }
}

#[test]
fn bad_input_files_are_named_and_leave_no_request() {
    for name in ["openai-chat", "ollama-chat"] {
        let (task, mut f) = format(name);
        let mut current = fs::read_to_string(task.path().join("current.jsonl")).unwrap();
        current.push_str("{\"role\":\"user\",\"content\":\"torn\n");
        fs::write(task.path().join("current.jsonl"), &current).unwrap();
        let err = plugin_error(f.write_request(&config("m")));
        let PluginError::InvalidInput(text) = &err else {
            panic!("{name}: {err:?}")
        };
        assert!(
            text.starts_with("current.jsonl line 8: not valid:"),
            "{name}: {text}"
        );
        assert!(
            !task.path().join("request.json").exists(),
            "{name}: partial request left behind"
        );

        fs::write(
            task.path().join("current.jsonl"),
            "{\"role\":\"user\",\"content\":\"hi\"}\n",
        )
        .unwrap();
        fs::write(task.path().join("tools.json"), "{\"type\":\"function\"}").unwrap();
        let err = plugin_error(f.write_request(&config("m")));
        assert_eq!(
            err,
            PluginError::InvalidInput(
                "tools.json must hold a JSON array of tool definitions, not an object".into()
            ),
            "{name}"
        );

        fs::write(task.path().join("current.jsonl"), "\n\n").unwrap();
        let cfg = RequestConfig {
            tools_file: None,
            ..config("m")
        };
        let err = plugin_error(f.write_request(&cfg));
        assert_eq!(
            err,
            PluginError::InvalidInput("current.jsonl holds no chat messages".into()),
            "{name}"
        );

        let cfg = RequestConfig {
            messages_file: "missing.jsonl".into(),
            ..cfg
        };
        let err = plugin_error(f.write_request(&cfg));
        assert!(
            matches!(&err, PluginError::Io(t) if t.starts_with("opening missing.jsonl:")),
            "{name}: {err:?}"
        );
    }
}

/// Parses the golden response body `file` with the builtin format `name`.
fn read(name: &str, file: &str) -> Result<Reply, RuntimeError> {
    let (task, mut f) = format(name);
    fs::copy(
        golden(&format!("responses/{file}")),
        task.path().join("response.json"),
    )
    .unwrap();
    f.read_response("response.json", false)
}

fn invalid_input(name: &str, file: &str) -> String {
    match plugin_error(read(name, file)) {
        PluginError::InvalidInput(text) => text,
        other => panic!("{name} {file}: {other:?}"),
    }
}

fn usage(prompt_tokens: u64, completion_tokens: u64, total_tokens: u64) -> Option<Usage> {
    Some(Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens,
        ..Usage::default()
    })
}

#[test]
fn openai_cached_prompt_tokens_become_cache_read_tokens() {
    // OpenAI reports prompt-cache hits as `usage.prompt_tokens_details.cached_tokens` (part of
    // `prompt_tokens`); servers without a cache send no details (or `null`): 0.
    let reply = read("openai-chat", "openai_cached.json").unwrap();
    assert_eq!(
        reply.usage,
        Some(Usage {
            prompt_tokens: 2006,
            completion_tokens: 300,
            total_tokens: 2306,
            cache_read_tokens: 1920,
            cache_creation_tokens: 0,
            reasoning_tokens: 0,
        })
    );
    let plain = read("openai-chat", "openai_text.json")
        .unwrap()
        .usage
        .unwrap();
    assert_eq!(
        (plain.cache_read_tokens, plain.cache_creation_tokens),
        (0, 0)
    );
    // prompted-tools parses OpenAI bodies with the same code.
    let prompted = read("prompted-tools", "openai_cached.json").unwrap();
    assert_eq!(prompted.usage.map(|u| u.cache_read_tokens), Some(1920));
}

#[test]
fn openai_replies_are_parsed() {
    let text = "Done: the path now reads \"C:/temp/new\". 上下文 ✅";
    assert_eq!(
        read("openai-chat", "openai_text.json").unwrap(),
        Reply {
            message: ChatMessage::text("assistant", text),
            usage: usage(412, 17, 429),
            finish_reason: Some("stop".into()),
            model: Some("gpt-4o-mini-2024-07-18".into()),
            content_file: None,
        }
    );

    let reply = read("openai-chat", "openai_tool_calls.json").unwrap();
    assert_eq!(reply.message.content, None);
    assert_eq!(
        reply.message.calls(),
        [
            ToolCall::new("call_Xa1", "read_text_file", "{\"path\":\"src/main.rs\"}"),
            ToolCall::new("call_Yb2", "list_directory", "{\"path\":\"src\"}"),
        ]
    );
    assert_eq!(
        (reply.usage, reply.finish_reason.as_deref()),
        (usage(300, 40, 340), Some("tool_calls"))
    );

    // Arguments sent as objects and calls without ids (some local servers).
    let reply = read("openai-chat", "openai_object_arguments.json").unwrap();
    assert_eq!(
        reply.message.calls(),
        [
            ToolCall::new("call_1", "read_text_file", "{\"path\":\"a.txt\"}"),
            ToolCall::new("call_2", "list_directory", "{\"path\":\".\"}"),
        ]
    );
    assert_eq!(reply.usage, None);
}

#[test]
fn openai_bad_bodies_say_what_is_wrong() {
    assert_eq!(
        invalid_input("openai-chat", "openai_error.json"),
        "response.json: the provider answered with an error: The model `gpt-9` does not exist or you do not have \
         access to it. (type: invalid_request_error, code: model_not_found)"
    );
    let html = invalid_input("openai-chat", "html_502.html");
    assert!(
        html.starts_with(
            "response.json is not JSON (line 1, column 1: expected value); it starts with: <html>"
        ),
        "{html}"
    );
    assert!(html.contains("502 Bad Gateway"), "{html}");
    let empty = invalid_input("openai-chat", "openai_empty_choices.json");
    assert!(
        empty.starts_with("response.json: the response has no choices; it starts with: {"),
        "{empty}"
    );
    // An Ollama body is not a chat completion either.
    assert!(
        invalid_input("openai-chat", "ollama_text.json")
            .starts_with("response.json: the response has no choices")
    );
}

#[test]
fn ollama_replies_are_parsed() {
    let text = "Done: the path now reads \"C:/temp/new\". 上下文 ✅";
    assert_eq!(
        read("ollama-chat", "ollama_text.json").unwrap(),
        Reply {
            message: ChatMessage::text("assistant", text),
            usage: usage(398, 21, 419),
            finish_reason: Some("stop".into()),
            model: Some("qwen2.5-coder:0.5b".into()),
            content_file: None,
        }
    );

    let reply = read("ollama-chat", "ollama_tool_calls.json").unwrap();
    assert_eq!(reply.message.content.as_deref(), Some(""));
    assert_eq!(
        reply.message.calls(),
        [
            ToolCall::new("call_1", "read_text_file", "{\"path\":\"src/main.rs\"}"),
            ToolCall::new("call_2", "list_directory", "{\"depth\":1,\"path\":\"src\"}"),
        ]
    );
    assert_eq!(
        (reply.usage, reply.finish_reason.as_deref()),
        (usage(310, 44, 354), Some("tool_calls"))
    );
}

#[test]
fn ollama_bad_bodies_say_what_is_wrong() {
    assert_eq!(
        invalid_input("ollama-chat", "ollama_error.json"),
        "response.json: the provider answered with an error: model \"qwen9\" not found, try pulling it first"
    );
    let partial = invalid_input("ollama-chat", "ollama_partial.json");
    assert!(
        partial.starts_with("response.json: the reply is not done"),
        "{partial}"
    );
    let html = invalid_input("ollama-chat", "html_502.html");
    assert!(html.starts_with("response.json is not JSON"), "{html}");
    assert!(
        invalid_input("ollama-chat", "openai_text.json")
            .starts_with("response.json: the response has no message")
    );
}

#[test]
fn missing_response_file_is_an_io_error() {
    for name in ["openai-chat", "ollama-chat"] {
        let (_task, mut f) = format(name);
        let err = plugin_error(f.read_response("nope.json", false));
        assert!(
            matches!(&err, PluginError::Io(t) if t.starts_with("opening nope.json:")),
            "{name}: {err:?}"
        );
    }
}

/// A 20 MB context is streamed: the component's memory stays far below the file's size.
#[test]
fn large_context_is_streamed_in_bounded_memory() {
    let line =
        serde_json::to_string(&ChatMessage::text("user", "x".repeat(10_000))).unwrap() + "\n";
    for name in ["openai-chat", "ollama-chat"] {
        let (task, mut f) = format(name);
        let file = fs::File::create(task.path().join("big.jsonl")).unwrap();
        let mut out = std::io::BufWriter::new(file);
        for _ in 0..2_000 {
            std::io::Write::write_all(&mut out, line.as_bytes()).unwrap();
        }
        drop(out);
        let cfg = RequestConfig {
            messages_file: "big.jsonl".into(),
            ..config("m")
        };
        let info = f.write_request(&cfg).unwrap();
        let peak = f.memory_peak_bytes();
        println!(
            "{name}: {} messages, {} request bytes, guest memory peak {} KiB",
            info.messages,
            info.bytes,
            peak / 1024
        );
        assert_eq!(info.messages, 2_000);
        assert!(info.bytes > 20_000_000);
        assert!(
            peak < 4 * 1024 * 1024,
            "{name}: guest memory grew to {peak} bytes for a 20 MB context"
        );
    }
}

/// Issue 37 item 12: the host learns whether a request is streamed from the format, never by
/// reading request.json back (that parse was half the CPU of a 64 MiB step): the builtins ask
/// for a stream when told to, except `builtin:prompted-tools`, which always writes
/// `"stream": false` and so is asked for none.
#[test]
fn the_host_knows_which_builtin_formats_write_a_streamed_request() {
    for (name, streams) in [
        ("openai-chat", true),
        ("openai-responses", true),
        ("anthropic-messages", true),
        ("ollama-chat", true),
        ("prompted-tools", false),
    ] {
        let (_task, f) = format(name);
        assert_eq!(f.reads_streams(), streams, "builtin:{name}");
    }
}

/// Issue 37 item 9: the builtin formats' bodies for the golden context and tools validate
/// against each API's official request schema (tests/golden/api-schemas: OpenAI's OpenAPI
/// document, the Anthropic SDK's types). Responses function tools need `strict` (and
/// `parameters`): without `strict: false` the API makes every optional parameter required.
#[test]
fn request_bodies_validate_against_the_official_schemas() {
    use crate::support::api_schema::{Api, check};
    let mut cfg = config("o4-mini");
    cfg.temperature = None;
    for stream in [false, true] {
        cfg.stream = stream;
        for (name, endpoint, api) in [
            ("openai-responses", "/v1/responses", Api::Responses),
            ("openai-chat", "/v1/chat/completions", Api::ChatCompletions),
            ("anthropic-messages", "/v1/messages", Api::Messages),
        ] {
            let (_, body) = write(name, &cfg, endpoint, 6);
            check(api, &body).unwrap_or_else(|e| panic!("{name}: {e}\n{body}"));
        }
    }
    let (_, body) = write("openai-responses", &cfg, "/v1/responses", 6);
    for tool in body["tools"].as_array().unwrap() {
        assert_eq!(tool["strict"], false, "{tool}");
    }
    // The schema does refuse a function tool without `strict` (as every body was sent before).
    let mut old = body.clone();
    old["tools"][0].as_object_mut().unwrap().remove("strict");
    let e = check(Api::Responses, &old).unwrap_err();
    assert!(e.contains("/tools/0"), "{e}");
}
