//! Reasoning kept and replayed (issue 26): `builtin:openai-responses` against the strict fake
//! Responses API (encrypted reasoning items sent back byte for byte before the function calls
//! they came with; usage with cached and reasoning tokens), streamed and not; and an
//! OpenAI-compatible server's `reasoning_content` kept in the history but never sent back.

use serde_json::{Value, json};

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, config_yaml, read_jsonl};

/// An initialised environment for `llm` (provider openai) with the `llm` keys `llm_extra`
/// (each line `  key: value\n`) and the top-level YAML `extra`.
fn env_for(llm: &FakeLlm, llm_extra: &str, extra: &str) -> TestEnv {
    let env = TestEnv::new();
    let yaml = config_yaml(&llm.base_url(), "openai", extra).replace(
        "max_backoff_secs: 2",
        &format!("max_backoff_secs: 1\n{llm_extra}"),
    );
    env.write_config(&yaml);
    env.ctxhost(&["init"]).ok();
    env
}

const RESPONSES: &str = "plugins:\n  request_format: builtin:openai-responses\n";

/// A task with reasoning and a tool call on the Responses format, streamed or not: the second
/// request replays the encrypted reasoning item byte for byte before its function call.
fn reasoning_is_replayed_before_its_function_call(stream: bool) {
    let llm = FakeLlm::start(vec![
        Reply::reasoning(
            "The user wants a listing; call list_directory.",
            Reply::tool_calls(
                vec![("call_r1", "list_directory", r#"{"path":"."}"#)],
                Some((100, 40)),
            ),
        ),
        Reply::reasoning(
            "The listing answers it.",
            Reply::text("All done: the directory is listed.", Some((200, 20))),
        ),
    ]);
    let env = env_for(
        &llm,
        &format!("  stream: {stream}\n  reasoning_effort: high\n"),
        RESPONSES,
    );
    let uuid = env.submit("List the directory");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    assert_eq!(llm.responses_rejections(), Vec::<String>::new());
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["total_tokens"], 140 + 220, "{r}");
    assert_eq!(r["cache_read_tokens"], 50 + 100, "cached_tokens: {r}");

    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    for q in &reqs {
        assert_eq!(q.path, "/v1/responses");
        let b = &q.body;
        assert_eq!(b["store"], false);
        assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(b["reasoning"], json!({"effort": "high"}));
        assert_eq!(b["stream"], stream);
        // Issue 37 item 11: reasoning tokens count against it: the provider's default unless
        // llm.max_output_tokens is set (it is not in this config).
        assert!(b.get("max_output_tokens").is_none(), "{b}");
        assert!(
            b["instructions"].as_str().is_some_and(|s| !s.is_empty()),
            "the system prompt is the instructions: {b}"
        );
        // No tool servers are configured here: the tool call is answered as unknown (the
        // function tools' shape is unit-tested in ctxhost-format's responses::request).
        assert!(b.get("tools").is_none());
        assert!(b.get("messages").is_none());
    }

    // Stored on the assistant message, as received.
    let dir = env.contexts().join("completed").join(&uuid);
    let messages = read_jsonl(&dir.join("messages.jsonl"));
    let assistant: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(assistant.len(), 2);
    let kept = assistant[0]["reasoning"].as_array().unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0]["provider"], "openai-responses");
    assert_eq!(kept[0]["type"], "reasoning");
    let data = kept[0]["data"].as_str().unwrap();
    let item: Value = serde_json::from_str(data).unwrap();
    assert_eq!(item["id"], "rs_fake_0");
    assert!(item["encrypted_content"].as_str().unwrap().ends_with("+/="));
    assert_eq!(
        assistant[1]["reasoning"][0]["provider"], "openai-responses",
        "the final answer's reasoning is kept too"
    );
    assert_eq!(
        assistant[0]["tool_calls"][0]["id"], "call_r1",
        "the call_id is the tool call id"
    );

    // Replayed byte for byte, in its place before the function call.
    let raw = String::from_utf8(reqs[1].raw_body.clone()).unwrap();
    assert!(raw.contains(data), "byte-identical reasoning item in {raw}");
    let kinds: Vec<&str> = reqs[1].body["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "message",
            "reasoning",
            "function_call",
            "function_call_output"
        ]
    );
    let input = &reqs[1].body["input"];
    assert_eq!(input[0]["role"], "user");
    assert_eq!(
        input[2],
        json!({"type": "function_call", "call_id": "call_r1", "name": "list_directory",
            "arguments": "{\"path\":\".\"}"})
    );
    assert_eq!(input[3]["call_id"], "call_r1");
    assert!(input[3]["output"].is_string());

    // Reasoning tokens in the call log.
    let calls: Vec<Value> = read_jsonl(&dir.join("llm_calls.jsonl"))
        .into_iter()
        .filter(|l| l["type"] == "call")
        .collect();
    let reasoning: Vec<&Value> = calls.iter().map(|c| &c["reasoning_tokens"]).collect();
    assert_eq!(reasoning, [&json!(20), &json!(10)]);
}

#[test]
fn responses_reasoning_is_replayed_before_its_function_call() {
    reasoning_is_replayed_before_its_function_call(false);
}

#[test]
fn responses_streamed_reasoning_is_replayed_before_its_function_call() {
    reasoning_is_replayed_before_its_function_call(true);
}

#[test]
fn a_responses_stream_cut_inside_a_line_is_sent_again() {
    let llm = FakeLlm::start(vec![
        Reply::stream_torn(Reply::text("A partial answer", Some((5, 5))), 3),
        Reply::text("Whole.", Some((10, 2))),
    ]);
    let env = env_for(&llm, "  stream: true\n", RESPONSES);
    let uuid = env.submit("Answer");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(llm.request_count(), 2);
    let dir = env.contexts().join("completed").join(&uuid);
    let failed = std::fs::read_to_string(dir.join("failed-streams/1.stream")).unwrap();
    assert!(!failed.ends_with('\n'), "cut inside a line: {failed}");
}

#[test]
fn a_responses_stream_cut_off_is_sent_again() {
    let llm = FakeLlm::start(vec![
        Reply::stream_cut(
            Reply::reasoning("half", Reply::text("A partial answer", Some((5, 5)))),
            4,
        ),
        Reply::text("Whole.", Some((10, 2))),
    ]);
    let env = env_for(&llm, "  stream: true\n", RESPONSES);
    let uuid = env.submit("Answer");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(llm.request_count(), 2);
    let dir = env.contexts().join("completed").join(&uuid);
    let replies: Vec<Value> = read_jsonl(&dir.join("messages.jsonl"))
        .into_iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0]["content"], "Whole.");
    assert!(
        replies[0].get("reasoning").is_none(),
        "the cut stream's reasoning is never kept"
    );
}

/// `reasoning_content` of an OpenAI-compatible server, streamed or not: kept on the assistant
/// message in messages.jsonl and current.jsonl, never sent back (the strict fake refuses a
/// field chat completions does not define).
fn reasoning_content_is_kept_and_not_sent_back(stream: bool) {
    let llm = FakeLlm::start(vec![
        Reply::reasoning(
            "Thinking about \"files\" …",
            Reply::tool_calls(
                vec![("c1", "list_directory", r#"{"path":"."}"#)],
                Some((30, 9)),
            ),
        ),
        Reply::reasoning("Enough.", Reply::text("Listed.", Some((40, 3)))),
    ]);
    let env = env_for(&llm, &format!("  stream: {stream}\n"), "");
    let uuid = env.submit("List");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    assert_eq!(llm.openai_rejections(), Vec::<String>::new());
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    let dir = env.contexts().join("completed").join(&uuid);
    for file in ["messages.jsonl", "current.jsonl"] {
        let assistant: Vec<Value> = read_jsonl(&dir.join(file))
            .into_iter()
            .filter(|m| m["role"] == "assistant")
            .collect();
        assert_eq!(
            assistant[0]["reasoning"],
            json!([{"provider": "openai-chat", "type": "reasoning_content",
                "data": "\"Thinking about \\\"files\\\" …\""}]),
            "{file}"
        );
        assert_eq!(
            assistant[1]["reasoning"][0]["data"], "\"Enough.\"",
            "{file}"
        );
    }
    let second = &llm.requests()[1];
    let raw = String::from_utf8(second.raw_body.clone()).unwrap();
    assert!(!raw.contains("reasoning_content"), "not sent back: {raw}");
    assert!(!raw.contains("Thinking about"), "not sent back: {raw}");
    assert_eq!(
        second
            .messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count(),
        1
    );
}

#[test]
fn reasoning_content_is_kept_and_not_sent_back_unstreamed() {
    reasoning_content_is_kept_and_not_sent_back(false);
}

#[test]
fn reasoning_content_is_kept_and_not_sent_back_streamed() {
    reasoning_content_is_kept_and_not_sent_back(true);
}

#[test]
fn reasoning_content_is_sent_back_when_asked_as_deepseek_requires() {
    let llm = FakeLlm::start(vec![
        Reply::reasoning(
            "Plan: list it.",
            Reply::tool_calls(
                vec![("d1", "list_directory", r#"{"path":"."}"#)],
                Some((30, 9)),
            ),
        ),
        Reply::text("Listed.", Some((40, 3))),
    ]);
    llm.set_deepseek_thinking(true);
    let env = env_for(
        &llm,
        "  stream: true\n  send_reasoning_content: true\n  reasoning_effort: high\n",
        "",
    );
    let uuid = env.submit("List");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    assert_eq!(llm.openai_rejections(), Vec::<String>::new());
    assert_eq!(env.row(&uuid)["status"], "completed");
    let reqs = llm.requests();
    assert_eq!(reqs[0].body["reasoning_effort"], "high");
    let assistant: Vec<Value> = reqs[1]
        .messages()
        .into_iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(assistant.len(), 1);
    assert_eq!(assistant[0]["reasoning_content"], "Plan: list it.");
    assert_eq!(assistant[0]["tool_calls"][0]["id"], "d1");
}

/// A request to the fake Responses API with `input` (stateless, as the format sends it).
fn responses_request(index: usize, input: Value) -> crate::support::fake_llm::RecordedRequest {
    let body = json!({"model": "m", "input": input, "store": false,
        "include": ["reasoning.encrypted_content"]});
    crate::support::fake_llm::RecordedRequest {
        index,
        method: "POST".into(),
        path: "/v1/responses".into(),
        headers: Vec::new(),
        raw_body: body.to_string().into_bytes(),
        body,
        at: std::time::Instant::now(),
        connection: 0,
    }
}

#[test]
fn the_fake_responses_api_refuses_what_the_real_one_refuses() {
    use crate::support::responses_api::Issued;
    let mut issued = Issued::default();
    let first = responses_request(
        0,
        json!([{"type": "message", "role": "user", "content": "go"}]),
    );
    issued.check_request(&first).unwrap();
    let rendered = issued
        .render(
            &Reply::reasoning(
                "think",
                Reply::tool_calls(vec![("call_x", "read", "{}")], None),
            ),
            &first,
        )
        .unwrap();
    let item = rendered.body["output"][0].clone();
    assert_eq!(item["type"], "reasoning");
    let call =
        json!({"type": "function_call", "call_id": "call_x", "name": "read", "arguments": "{}"});
    let output = json!({"type": "function_call_output", "call_id": "call_x", "output": "r"});
    let user = json!({"type": "message", "role": "user", "content": "go"});
    // As the format sends it: accepted.
    issued
        .check_request(&responses_request(1, json!([user, item, call, output])))
        .unwrap();
    // The function call without its reasoning item.
    let e = issued
        .check_request(&responses_request(2, json!([user, call, output])))
        .unwrap_err();
    assert!(e.contains("without its required 'reasoning' item"), "{e}");
    // The reasoning item changed by a byte.
    let mut altered = item.clone();
    let enc = altered["encrypted_content"]
        .as_str()
        .unwrap()
        .replacen('0', "1", 1);
    altered["encrypted_content"] = json!(enc);
    let e = issued
        .check_request(&responses_request(3, json!([user, altered, call, output])))
        .unwrap_err();
    assert!(e.contains("could not be verified"), "{e}");
    // A result whose call is not in the input.
    let e = issued
        .check_request(&responses_request(4, json!([user, output])))
        .unwrap_err();
    assert!(
        e.contains("No tool call found for function call output with call_id call_x"),
        "{e}"
    );
}

#[test]
fn a_model_without_reasoning_gets_no_include_and_no_unreplayable_item() {
    // "fake-model" is no reasoning family and no effort is set: no `include` (OpenAI refuses
    // it for gpt-4o and the like), so a reasoning item comes without encrypted content, is
    // kept, and is not sent back (a stateless request cannot refer to it).
    let llm = FakeLlm::start(vec![
        Reply::reasoning(
            "hidden",
            Reply::tool_calls(vec![("c9", "list_directory", r#"{"path":"."}"#)], None),
        ),
        Reply::text("Done.", None),
    ]);
    let env = env_for(&llm, "", RESPONSES);
    let uuid = env.submit("List");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    assert_eq!(llm.responses_rejections(), Vec::<String>::new());
    assert_eq!(env.row(&uuid)["status"], "completed");
    let reqs = llm.requests();
    assert!(reqs[0].body.get("include").is_none(), "{}", reqs[0].body);
    let kinds: Vec<&str> = reqs[1].body["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["message", "function_call", "function_call_output"]);
    let dir = env.contexts().join("completed").join(&uuid);
    let kept = read_jsonl(&dir.join("messages.jsonl"));
    let assistant = kept.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(
        assistant["reasoning"][0]["data"],
        r#"{"id":"rs_fake_0","summary":[],"type":"reasoning"}"#
    );
}

/// An environment for `llm` with provider anthropic, extended thinking on and `llm.stream`.
fn anthropic_thinking_env(llm: &FakeLlm, stream: bool) -> TestEnv {
    let env = TestEnv::new();
    let yaml = config_yaml(&llm.base_url(), "anthropic", "").replace(
        "max_backoff_secs: 2",
        &format!(
            "max_backoff_secs: 1\n  stream: {stream}\n  max_output_tokens: 4096\n  thinking: 2048\n"
        ),
    );
    env.write_config(&yaml);
    env.ctxhost(&["init"]).ok();
    env
}

/// A reply with interleaved thinking as current Claude models send it: thinking, a tool call,
/// more thinking (signed, with an empty text), a second call, then text; each thinking block
/// signed for its place ([`anthropic_api::signature_at`]).
fn interleaved_content() -> Vec<Value> {
    use crate::support::anthropic_api::signature_at;
    let a = "List it first, then \"again\" →";
    vec![
        json!({"type": "thinking", "thinking": a, "signature": signature_at(a, 0)}),
        json!({"type": "tool_use", "id": "toolu_1", "name": "list_directory", "input": {"path": "."}}),
        json!({"type": "thinking", "thinking": "", "signature": signature_at("", 2)}),
        json!({"type": "tool_use", "id": "toolu_2", "name": "list_directory", "input": {"path": "."}}),
        json!({"type": "text", "text": "Listed twice."}),
    ]
}

/// Issue 37 item 7: the reply `[thinking A, tool_use t1, thinking B, tool_use t2, text]` is
/// sent back in exactly that order (the fake, as the API, refuses the latest assistant turn's
/// thinking blocks moved: `[A, B, text, t1, t2]` got a 400 and failed the task for good).
fn interleaved_anthropic_thinking_is_sent_back_in_its_order(stream: bool) {
    let content = interleaved_content();
    let llm = FakeLlm::start(vec![
        Reply::json(
            json!({"id": "msg_i", "type": "message", "role": "assistant",
            "model": "claude-fake", "content": content, "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 20}}),
        ),
        Reply::text("Done.", Some((30, 5))),
    ]);
    let env = anthropic_thinking_env(&llm, stream);
    let uuid = env.submit("List the directory twice");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    assert_eq!(llm.anthropic_rejections(), Vec::<String>::new());
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    let turns = reqs[1].body["messages"].as_array().unwrap();
    let last = turns.iter().rfind(|t| t["role"] == "assistant").unwrap();
    assert_eq!(last["content"], Value::Array(content.clone()));
    // The order is kept with the message, as a reasoning item of its own.
    let dir = env.contexts().join("completed").join(&uuid);
    let kept = read_jsonl(&dir.join("messages.jsonl"));
    let reply = kept.iter().find(|m| m["role"] == "assistant").unwrap();
    let kinds: Vec<&str> = reply["reasoning"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["thinking", "thinking", "order"]);
}

#[test]
fn interleaved_anthropic_thinking_is_sent_back_in_its_order_unstreamed() {
    interleaved_anthropic_thinking_is_sent_back_in_its_order(false);
}

#[test]
fn interleaved_anthropic_thinking_is_sent_back_in_its_order_streamed() {
    interleaved_anthropic_thinking_is_sent_back_in_its_order(true);
}

#[test]
fn the_fake_anthropic_api_refuses_moved_thinking_in_the_latest_assistant_turn() {
    use crate::support::anthropic_api::check_request;
    let content = interleaved_content();
    let request = |assistant: Vec<Value>| {
        let body = json!({"model": "m", "max_tokens": 4096,
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": assistant},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "b"}]}]});
        crate::support::fake_llm::RecordedRequest {
            index: 1,
            method: "POST".into(),
            path: "/v1/messages".into(),
            headers: vec![("anthropic-version".into(), "2023-06-01".into())],
            raw_body: body.to_string().into_bytes(),
            body,
            at: std::time::Instant::now(),
            connection: 0,
        }
    };
    check_request(&request(content.clone()), None).unwrap();
    // As ctxhost sent it before: thinking first, text, then the calls.
    let moved = vec![
        content[0].clone(),
        content[2].clone(),
        content[4].clone(),
        content[1].clone(),
        content[3].clone(),
    ];
    let (code, kind, message) = check_request(&request(moved), None).unwrap_err();
    assert_eq!((code, kind), (400, "invalid_request_error"));
    assert!(
        message.starts_with("messages.1.content.1: `thinking` or `redacted_thinking` blocks in the latest assistant message cannot be modified"),
        "{message}"
    );
}

/// Issue 37 item 7, Responses: `[rs_a, fc_a, rs_b, fc_b]` is sent back in that order (the
/// fake, as the API, refuses a reasoning item not followed by the function call that followed
/// it: `[rs_a, rs_b, fc_a, fc_b]` got a 400).
fn interleaved_responses_reasoning_is_sent_back_in_its_order(stream: bool) {
    let rs = |id: &str| {
        json!({"id": id, "type": "reasoning", "summary": [],
            "encrypted_content": format!("gAAAA-{id}+/=")})
    };
    let fc = |id: &str| {
        json!({"id": format!("fc_{id}"), "type": "function_call", "call_id": id,
            "name": "list_directory", "arguments": "{\"path\":\".\"}", "status": "completed"})
    };
    let output = vec![rs("rs_a"), fc("call_a"), rs("rs_b"), fc("call_b")];
    let llm = FakeLlm::start(vec![
        Reply::json(
            json!({"id": "resp_i", "object": "response", "created_at": 1,
            "status": "completed", "error": null, "incomplete_details": null,
            "model": "o4-mini", "output": output,
            "usage": {"input_tokens": 10, "output_tokens": 20, "total_tokens": 30}}),
        ),
        Reply::text("Done.", Some((30, 5))),
    ]);
    let env = env_for(
        &llm,
        &format!("  stream: {stream}\n  reasoning_effort: high\n"),
        RESPONSES,
    );
    let uuid = env.submit("List the directory twice");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    assert_eq!(llm.responses_rejections(), Vec::<String>::new());
    assert_eq!(env.row(&uuid)["status"], "completed");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    let sent: Vec<String> = reqs[1].body["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!(
                "{} {}",
                i["type"].as_str().unwrap(),
                i["id"].as_str().or(i["call_id"].as_str()).unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        sent,
        [
            "message ",
            "reasoning rs_a",
            "function_call call_a",
            "reasoning rs_b",
            "function_call call_b",
            "function_call_output call_a",
            "function_call_output call_b",
        ]
    );
}

#[test]
fn interleaved_responses_reasoning_is_sent_back_in_its_order_unstreamed() {
    interleaved_responses_reasoning_is_sent_back_in_its_order(false);
}

#[test]
fn interleaved_responses_reasoning_is_sent_back_in_its_order_streamed() {
    interleaved_responses_reasoning_is_sent_back_in_its_order(true);
}

/// Issue 37 item 8: a reasoning item the provider can no longer decrypt (made under another
/// key) gets 400 `invalid_encrypted_content`; the request is sent again once without the
/// reasoning items (OpenAI's documented recovery), and llm_calls.jsonl records the refused call.
#[test]
fn invalid_encrypted_content_is_sent_again_once_without_the_reasoning_items() {
    use crate::support::responses_api::STALE_KEY;
    let output = vec![
        json!({"id": "rs_old", "type": "reasoning", "summary": [],
            "encrypted_content": format!("{STALE_KEY}gAAAA")}),
        json!({"id": "fc_1", "type": "function_call", "call_id": "call_1",
            "name": "list_directory", "arguments": "{\"path\":\".\"}", "status": "completed"}),
    ];
    let llm = FakeLlm::start(vec![
        Reply::json(
            json!({"id": "resp_1", "object": "response", "created_at": 1,
            "status": "completed", "error": null, "incomplete_details": null,
            "model": "o4-mini", "output": output,
            "usage": {"input_tokens": 10, "output_tokens": 20, "total_tokens": 30}}),
        ),
        Reply::text("Done.", Some((30, 5))),
    ]);
    let env = env_for(
        &llm,
        "  stream: false\n  reasoning_effort: low\n",
        RESPONSES,
    );
    let uuid = env.submit("List the directory");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    let rejections = llm.responses_rejections();
    assert_eq!(rejections.len(), 1, "{rejections:?}");
    assert!(rejections[0].contains("rs_old could not be verified"));
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 3);
    let types = |i: usize| -> Vec<String> {
        reqs[i].body["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["type"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        types(1),
        [
            "message",
            "reasoning",
            "function_call",
            "function_call_output"
        ]
    );
    assert_eq!(
        types(2),
        ["message", "function_call", "function_call_output"]
    );
    let dir = env.contexts().join("completed").join(&uuid);
    let calls = read_jsonl(&dir.join("llm_calls.jsonl"));
    let steps: Vec<(&str, bool)> = calls
        .iter()
        .filter(|c| c.get("n").is_some())
        .map(|c| (c["status"].as_str().unwrap(), c.get("error").is_some()))
        .collect();
    assert_eq!(steps.len(), 3, "{calls:?}");
    let refused = calls.iter().find(|c| c.get("error").is_some()).unwrap();
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.contains("invalid_encrypted_content")
            && error.contains("sent again without the reasoning items"),
        "{error}"
    );
    // The history keeps the item; only that request left it out.
    let kept = read_jsonl(&dir.join("messages.jsonl"));
    assert!(
        kept.iter()
            .any(|m| m["reasoning"][0]["type"] == "reasoning")
    );
    assert!(!dir.join("current.no-reasoning.jsonl.tmp").exists());
}

/// Issue 37 item 10: a vLLM / OpenRouter reply carrying its reasoning as `reasoning` keeps it
/// under that name, and with `llm.send_reasoning_content` it goes back as `reasoning` (a
/// `reasoning_content` one as `reasoning_content`), through the builtin openai-chat format.
#[test]
fn reasoning_goes_back_under_the_field_it_came_in() {
    use ctxhost::runtime::{ReasoningConfig, RequestConfig};
    for (field, stream) in [
        ("reasoning", false),
        ("reasoning_content", false),
        ("reasoning", true),
    ] {
        let task = tempfile::tempdir().unwrap();
        let mut f = crate::support::components::request_format("builtin:openai-chat", task.path());
        let message = json!({"role": "assistant", "content": null, field: "Plan: list it.",
            "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "list_directory", "arguments": "{}"}}]});
        let body = if stream {
            let delta =
                json!({"choices": [{"index": 0, "delta": message, "finish_reason": "tool_calls"}]});
            format!("data: {delta}\n\ndata: [DONE]\n\n")
        } else {
            json!({"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]})
                .to_string()
        };
        std::fs::write(task.path().join("response.json"), body).unwrap();
        let reply = f.read_response("response.json", stream).unwrap();
        assert_eq!(reply.message.reasoning.len(), 1);
        assert_eq!(
            reply.message.reasoning[0].kind, field,
            "kept under its field's name"
        );

        let call = &reply.message.calls()[0];
        let lines = [
            ctxhost_format::ChatMessage::text("user", "List"),
            reply.message.clone(),
            ctxhost_format::ChatMessage::tool_result(call, "a.txt"),
        ];
        let text: String = lines
            .iter()
            .map(|m| serde_json::to_string(m).unwrap() + "\n")
            .collect();
        std::fs::write(task.path().join("current.jsonl"), text).unwrap();
        let config = RequestConfig {
            model: "m".into(),
            messages_file: "current.jsonl".into(),
            request_file: "request.json".into(),
            tools_file: None,
            max_output_tokens: None,
            temperature: None,
            stream: false,
            stream_usage: false,
            reasoning: Some(ReasoningConfig {
                send_reasoning_content: true,
                ..ReasoningConfig::default()
            }),
        };
        f.write_request(&config).unwrap();
        let sent: Value = serde_json::from_str(
            &std::fs::read_to_string(task.path().join("request.json")).unwrap(),
        )
        .unwrap();
        let assistant = &sent["messages"][1];
        assert_eq!(assistant[field], "Plan: list it.", "{assistant}");
        let other = if field == "reasoning" {
            "reasoning_content"
        } else {
            "reasoning"
        };
        assert!(assistant.get(other).is_none(), "{assistant}");
    }
}
