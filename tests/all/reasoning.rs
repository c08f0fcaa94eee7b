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
