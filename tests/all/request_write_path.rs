//! The builtin request formats' fast write path, through the component boundary, against the
//! reference: random current.jsonl files (the message store's lines: Unicode, escapes, control
//! characters, tool calls and results, blank lines, some messages larger than the component's
//! 256 KiB read block) are turned into request.json by `builtin:openai-chat`,
//! `builtin:ollama-chat` and `builtin:prompted-tools`; the `messages` of each body must parse
//! equal to what the reference path (`ctxhost_format::stream::write_chat_array`, every line
//! parsed and re-serialised, with the same shape's reference conversion) gives for the same
//! file. crates/ctxhost-format/tests/request_write_path.rs checks the same natively over many
//! more, and stranger, files.

use std::cell::RefCell;
use std::fs;

use ctxhost::runtime::{RequestConfig, RequestFormat};
use ctxhost_format::shape::MessageShape;
use ctxhost_format::shape::ollama::OllamaShape;
use ctxhost_format::shape::openai::OpenAiShape;
use ctxhost_format::shape::prompted::PromptedShape;
use ctxhost_format::stream::write_chat_array;
use ctxhost_format::{ChatMessage, ToolCall, body, prompted};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::Value;
use tempfile::TempDir;

use crate::support::components::request_format;

const TOOLS: &str = r#"[{"type":"function","function":{"name":"read_file","description":"Read a file.","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}]"#;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any::<String>(),
        4 => "[a-z \\n\"\\\\\u{1b}é上😀\t/]{0,80}",
        // Now and then a message larger than the component's read block.
        1 => (0usize..3).prop_map(|k| "line \"quoted\" \\ é\n".repeat(20_000 + k * 7_000)),
    ]
}

fn call() -> impl Strategy<Value = ToolCall> {
    (
        text(),
        "[a-z_]{1,12}",
        prop_oneof![Just("{}".to_string()), text()],
    )
        .prop_map(|(id, name, args)| ToolCall::new(id, name, args))
}

fn message() -> impl Strategy<Value = ChatMessage> {
    prop_oneof![
        (
            prop_oneof![Just("user"), Just("assistant"), Just("system")],
            text()
        )
            .prop_map(|(role, t)| ChatMessage::text(role, t)),
        proptest::collection::vec(call(), 1..3).prop_map(ChatMessage::assistant_calls),
        (call(), text()).prop_map(|(c, t)| ChatMessage::tool_result(&c, t)),
        proptest::option::of(text()).prop_map(|content| ChatMessage {
            role: "assistant".into(),
            content,
            ..Default::default()
        }),
    ]
}

fn history() -> impl Strategy<Value = String> {
    proptest::collection::vec((message(), any::<bool>()), 1..10).prop_map(|messages| {
        let mut file = String::new();
        for (m, blank) in messages {
            if blank {
                file.push_str("  \n");
            }
            file.push_str(&serde_json::to_string(&m).unwrap());
            file.push('\n');
        }
        file
    })
}

fn instance(name: &str, task: &TempDir) -> RequestFormat {
    request_format(&format!("builtin:{name}"), task.path())
}

/// The reference `messages` of `input` in `shape`.
fn reference(input: &str, mut shape: impl MessageShape) -> Value {
    let mut out = Vec::new();
    write_chat_array(input.as_bytes(), "current.jsonl", &mut out, |m| {
        shape.reference(m)
    })
    .unwrap();
    serde_json::from_slice(&out).unwrap()
}

#[test]
fn component_requests_parse_equal_to_the_reference() {
    let task = tempfile::tempdir().unwrap();
    fs::write(task.path().join("tools.json"), TOOLS).unwrap();
    let formats: Vec<(&str, RefCell<RequestFormat>)> =
        ["openai-chat", "ollama-chat", "prompted-tools"]
            .into_iter()
            .map(|name| (name, RefCell::new(instance(name, &task))))
            .collect();
    let tools = body::parse_tools(TOOLS.as_bytes(), "tools.json").unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    runner
        .run(&history(), |input| {
            fs::write(task.path().join("current.jsonl"), &input).unwrap();
            for (name, format) in &formats {
                let config = RequestConfig {
                    model: "m".into(),
                    messages_file: "current.jsonl".into(),
                    request_file: "request.json".into(),
                    tools_file: Some("tools.json".into()),
                    max_output_tokens: None,
                    temperature: None,
                    stream: false,
                    stream_usage: false,
                    reasoning: None,
                };
                let info = format.borrow_mut().write_request(&config).unwrap();
                let text = fs::read(task.path().join("request.json")).unwrap();
                prop_assert_eq!(info.bytes, text.len() as u64);
                let body: Value = serde_json::from_slice(&text).expect("request.json is JSON");
                let expected = match *name {
                    "openai-chat" => reference(&input, OpenAiShape),
                    "ollama-chat" => reference(&input, OllamaShape),
                    _ => reference(&input, PromptedShape::new(prompted::tools_prompt(&tools))),
                };
                prop_assert_eq!(&body["messages"], &expected, "{}", name);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_line_that_is_not_a_chat_message_is_named_and_leaves_no_request() {
    let task = tempfile::tempdir().unwrap();
    let good = serde_json::to_string(&ChatMessage::text("user", "hi \"there\"")).unwrap();
    for (bad, what) in [
        (
            format!("{good}\n\n{{\"role\":\"user\",\"content\":\"\\ud800\"}}\n"),
            "line 3: not valid: unexpected end of hex escape",
        ),
        (
            format!("{good}\n{{\"role\":\"user\",\"content\":\"a\u{1}b\"}}\n"),
            "line 2: not valid: control character",
        ),
        (
            format!("{good}\n{{\"role\":\"user\",\"content\":\"torn"),
            "line 2: not valid: EOF while parsing",
        ),
    ] {
        fs::write(task.path().join("current.jsonl"), &bad).unwrap();
        for name in ["openai-chat", "ollama-chat", "prompted-tools"] {
            let mut format = instance(name, &task);
            let config = RequestConfig {
                model: "m".into(),
                messages_file: "current.jsonl".into(),
                request_file: "request.json".into(),
                tools_file: None,
                max_output_tokens: None,
                temperature: None,
                stream: false,
                stream_usage: false,
                reasoning: None,
            };
            let err = format.write_request(&config).unwrap_err().to_string();
            assert!(
                err.contains(&format!("current.jsonl {what}")),
                "{name}: {err}"
            );
            assert!(!task.path().join("request.json").exists(), "{name}");
        }
    }
    // Invalid UTF-8.
    let mut bytes = format!("{good}\n").into_bytes();
    bytes.extend_from_slice(b"{\"role\":\"user\",\"content\":\"\xff\"}\n");
    fs::write(task.path().join("current.jsonl"), &bytes).unwrap();
    let mut format = instance("openai-chat", &task);
    let config = RequestConfig {
        model: "m".into(),
        messages_file: "current.jsonl".into(),
        request_file: "request.json".into(),
        tools_file: None,
        max_output_tokens: None,
        temperature: None,
        stream: false,
        stream_usage: false,
        reasoning: None,
    };
    let err = format.write_request(&config).unwrap_err().to_string();
    assert!(
        err.contains("current.jsonl line 2: not valid UTF-8"),
        "{err}"
    );
}
