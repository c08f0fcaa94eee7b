//! Streamed replies and reasoning for Anthropic and Ollama (issue 26): against the fake
//! server's strict Messages API (which refuses a request whose last assistant turn with
//! `tool_use` lacks its signed thinking, or carries a changed signature) and its Ollama
//! newline-delimited JSON.
//!
//! - a streamed Anthropic task with thinking and three tool calls: each request sends the
//!   thinking block of the reply before it byte for byte, first in the assistant turn; the
//!   blocks are kept in messages.jsonl and current.jsonl; usage counts thinking as output;
//! - a cut Anthropic stream is sent again, the partial kept in `failed-streams/`;
//! - an unstreamed Anthropic reply: its thinking block kept with the body's bytes and sent back;
//! - a streamed Ollama task with `think: true`: thinking kept as a reasoning item.

use serde_json::{Value, json};

use crate::support::anthropic_api::{self, CacheUsage};
use crate::support::fake_llm::{FakeLlm, RecordedRequest, Reply, ollama_thinking};
use crate::support::{TestEnv, config_yaml, read_jsonl};

/// An environment for `llm` with `provider`, `llm.stream: true` and the `llm` keys `extra`
/// (each line `  key: value\n`), initialised.
fn streaming_env(llm: &FakeLlm, provider: &str, extra: &str) -> TestEnv {
    env_for(llm, provider, true, extra)
}

/// [`streaming_env`] with `llm.stream: stream`.
fn env_for(llm: &FakeLlm, provider: &str, stream: bool, extra: &str) -> TestEnv {
    let env = TestEnv::new();
    let yaml = config_yaml(&llm.base_url(), provider, "").replace(
        "max_backoff_secs: 2",
        &format!("max_backoff_secs: 1\n  stream: {stream}\n{extra}"),
    );
    env.write_config(&yaml);
    env.ctxhost(&["init"]).ok();
    env
}

/// Submits `prompt`, runs it; returns (row, completed task dir).
fn run(env: &TestEnv, prompt: &str) -> (Value, std::path::PathBuf) {
    let uuid = env.submit(prompt);
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    let row = env.row(&uuid);
    (row, env.contexts().join("completed").join(&uuid))
}

/// The assistant messages of a JSONL file.
fn assistant(file: &std::path::Path) -> Vec<Value> {
    read_jsonl(file)
        .into_iter()
        .filter(|m| m["role"] == "assistant")
        .collect()
}

/// The thinking block the fake sent to request `index`, as its JSON text in the API's order.
fn thinking_text(index: usize) -> String {
    let b = anthropic_api::thinking_block(index);
    format!(
        r#"{{"type":"thinking","thinking":{},"signature":{}}}"#,
        b["thinking"], b["signature"]
    )
}

const ANTHROPIC_THINKING: &str = "  max_output_tokens: 4096\n  thinking: 2048\n";

#[test]
fn a_streamed_anthropic_task_with_thinking_replays_each_signed_block_before_its_tool_use() {
    let step = |n: usize| {
        Reply::tool_calls(
            vec![(
                &format!("toolu_0{n}"),
                "list_directory",
                &format!(r#"{{"path":"dir{n}"}}"#),
            )],
            Some((0, 20 + n as u64)),
        )
    };
    let llm = FakeLlm::start(vec![
        step(1),
        step(2),
        step(3),
        Reply::text("Listed three folders.", Some((0, 9))),
    ]);
    let env = streaming_env(&llm, "anthropic", ANTHROPIC_THINKING);
    let (row, dir) = run(&env, "List three folders");
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(llm.anthropic_rejections(), Vec::<String>::new());
    let reqs: Vec<RecordedRequest> = llm.requests();
    assert_eq!(reqs.len(), 4);
    for (i, q) in reqs.iter().enumerate() {
        assert_eq!(q.body["stream"], true, "{}", q.body);
        assert_eq!(
            q.body["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert!(q.body.get("temperature").is_none());
        if i == 0 {
            continue;
        }
        // The last assistant turn: the thinking of the reply to request i-1, then its tool_use.
        let turns = q.body["messages"].as_array().unwrap();
        let last = turns
            .iter()
            .rev()
            .find(|t| t["role"] == "assistant")
            .unwrap();
        let types: Vec<&str> = last["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["thinking", "tool_use"], "{last}");
        assert_eq!(last["content"][0], anthropic_api::thinking_block(i - 1));
        // Byte for byte, as received.
        let raw = String::from_utf8(q.raw_body.clone()).unwrap();
        assert!(
            raw.contains(&format!("{},{{\"type\":\"tool_use\"", thinking_text(i - 1))),
            "request {i}: {raw}"
        );
        // Every earlier turn's thinking too, in its place.
        for k in 0..i {
            assert!(raw.contains(&thinking_text(k)), "request {i}, block {k}");
        }
    }
    // Stored on the assistant messages of both files, provider-tagged, as received.
    for file in ["messages.jsonl", "current.jsonl"] {
        let replies = assistant(&dir.join(file));
        assert_eq!(replies.len(), 4, "{file}");
        for (i, m) in replies.iter().enumerate() {
            assert_eq!(
                m["reasoning"],
                json!([{"provider": "anthropic", "type": "thinking", "data": thinking_text(i)}]),
                "{file} reply {i}"
            );
        }
    }
    // Usage: the API's input counts (cache included); output = scripted tokens + thinking.
    let usage = llm.anthropic_usage();
    let inputs: u64 = usage.iter().map(CacheUsage::total).sum();
    let thinking: u64 = (0..4)
        .map(|i| {
            ctxhost_format::estimate_tokens(
                anthropic_api::thinking_block(i)["thinking"]
                    .as_str()
                    .unwrap(),
            )
        })
        .sum();
    let outputs = 21 + 22 + 23 + 9 + thinking;
    assert_eq!(
        row["total_tokens"].as_u64(),
        Some(inputs + outputs),
        "{row}"
    );
    let read: u64 = usage.iter().map(|u| u.cache_read_input_tokens).sum();
    assert_eq!(row["cache_read_tokens"].as_u64(), Some(read));
    let written: u64 = usage.iter().map(|u| u.cache_creation_input_tokens).sum();
    assert_eq!(row["cache_creation_tokens"].as_u64(), Some(written));
    let stream = std::fs::read_to_string(dir.join("reply.stream")).unwrap();
    assert!(stream.contains("event: message_stop"), "{stream}");
    assert!(stream.contains("signature_delta"), "{stream}");
}

#[test]
fn a_cut_anthropic_stream_is_sent_again_and_the_partial_kept() {
    let whole = Reply::text("The whole answer.", Some((0, 5)));
    // message_start, the thinking block's start and its first piece: then the line drops.
    let llm = FakeLlm::start(vec![Reply::stream_cut(whole.clone(), 3), whole]);
    let env = streaming_env(&llm, "anthropic", ANTHROPIC_THINKING);
    let (row, dir) = run(&env, "Answer");
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(llm.request_count(), 2);
    let replies = assistant(&dir.join("messages.jsonl"));
    assert_eq!(replies.len(), 1, "the partial is never appended");
    assert_eq!(replies[0]["content"], "The whole answer.");
    assert_eq!(
        replies[0]["reasoning"][0]["data"],
        json!(thinking_text(1)),
        "the thinking of the reply that arrived whole"
    );
    let failed = std::fs::read_to_string(dir.join("failed-streams/1.stream")).unwrap();
    assert!(failed.contains("event: message_start"), "{failed}");
    assert!(failed.contains("thinking_delta"), "{failed}");
    assert!(!failed.contains("message_stop"), "{failed}");
    assert!(!dir.join("failed-streams/2.stream").exists());
}

/// A stream that ends inside a line (the connection closed mid-event, the JSON half sent) is
/// cut, so it is sent again: Anthropic's SSE and Ollama's NDJSON, read by
/// `common::fold_stream_lines`.
#[test]
fn a_stream_cut_inside_a_line_is_sent_again_for_anthropic_and_ollama() {
    for (provider, extra) in [("anthropic", ANTHROPIC_THINKING), ("ollama", "")] {
        let whole = Reply::text("The whole answer.", Some((0, 5)));
        let llm = FakeLlm::start(vec![Reply::stream_torn(whole.clone(), 2), whole]);
        let env = streaming_env(&llm, provider, extra);
        let (row, dir) = run(&env, "Answer");
        assert_eq!(row["status"], "completed", "{provider}: {row}");
        assert_eq!(llm.request_count(), 2, "{provider}");
        let replies = assistant(&dir.join("messages.jsonl"));
        assert_eq!(
            replies.len(),
            1,
            "{provider}: the partial is never appended"
        );
        assert_eq!(replies[0]["content"], "The whole answer.", "{provider}");
        let failed = std::fs::read_to_string(dir.join("failed-streams/1.stream")).unwrap();
        assert!(
            !failed.ends_with('\n'),
            "{provider}: cut inside a line: {failed}"
        );
    }
}

#[test]
fn the_fake_refuses_a_last_tool_use_turn_without_its_signed_thinking_or_with_a_changed_one() {
    let block = anthropic_api::thinking_block(0);
    let request = |assistant: Value| RecordedRequest {
        index: 1,
        method: "POST".into(),
        path: anthropic_api::MESSAGES_PATH.into(),
        headers: vec![("anthropic-version".into(), "2023-06-01".into())],
        body: json!({"model": "m", "max_tokens": 4096,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": assistant},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}]},
        ]}),
        raw_body: Vec::new(),
        at: std::time::Instant::now(),
        connection: 0,
    };
    let tool_use = json!({"type": "tool_use", "id": "t1", "name": "ls", "input": {}});
    assert_eq!(
        anthropic_api::check_request(&request(json!([block.clone(), tool_use.clone()])), None),
        Ok(())
    );
    let (code, _, message) =
        anthropic_api::check_request(&request(json!([tool_use.clone()])), None).unwrap_err();
    assert_eq!(code, 400);
    assert!(
        message.starts_with("messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`"),
        "{message}"
    );
    let mut changed = block.clone();
    changed["thinking"] = json!(format!("{} ", block["thinking"].as_str().unwrap()));
    let (_, _, message) =
        anthropic_api::check_request(&request(json!([changed, tool_use])), None).unwrap_err();
    assert_eq!(
        message,
        "messages.1.content.0: Invalid `signature` in `thinking` block"
    );
}

#[test]
fn a_streamed_ollama_task_folds_ndjson_and_keeps_the_thinking() {
    let llm = FakeLlm::start(vec![
        Reply::tool_calls(
            vec![("x", "list_directory", r#"{"path":"."}"#)],
            Some((30, 6)),
        ),
        Reply::text("One folder, nothing else.", Some((50, 7))),
    ]);
    let env = streaming_env(&llm, "ollama", "  thinking: adaptive\n");
    let (row, dir) = run(&env, "Look around");
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(row["tool_call_count"], 1);
    assert_eq!(row["total_tokens"].as_u64(), Some(36 + 57), "{row}");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    for q in &reqs {
        assert_eq!(q.path, "/api/chat");
        assert_eq!(
            (&q.body["stream"], &q.body["think"]),
            (&json!(true), &json!(true))
        );
    }
    let replies = assistant(&dir.join("messages.jsonl"));
    assert_eq!(replies.len(), 2);
    assert_eq!(
        replies[0]["tool_calls"][0]["function"]["name"],
        "list_directory"
    );
    assert_eq!(
        replies[0]["tool_calls"][0]["function"]["arguments"],
        r#"{"path":"."}"#
    );
    assert_eq!(replies[1]["content"], "One folder, nothing else.");
    for (i, m) in replies.iter().enumerate() {
        assert_eq!(
            m["reasoning"],
            json!([{"provider": "ollama", "type": "thinking",
                "data": Value::String(ollama_thinking(i)).to_string()}])
        );
    }
    // Not sent back: Ollama does not need it.
    assert!(!String::from_utf8_lossy(&reqs[1].raw_body).contains("thinking\""));
    let stream = std::fs::read_to_string(dir.join("reply.stream")).unwrap();
    assert!(stream.lines().count() > 3, "{stream}");
    let last: Value = serde_json::from_str(stream.lines().last().unwrap()).unwrap();
    assert_eq!(
        (&last["done"], &last["eval_count"]),
        (&json!(true), &json!(7))
    );
}

#[test]
fn an_unstreamed_anthropic_reply_keeps_its_thinking_bytes_and_sends_them_back() {
    let llm = FakeLlm::start(vec![
        Reply::tool_calls(
            vec![("toolu_1", "list_directory", r#"{"path":"."}"#)],
            Some((0, 8)),
        ),
        Reply::text("Done.", Some((0, 2))),
    ]);
    let env = env_for(&llm, "anthropic", false, ANTHROPIC_THINKING);
    let (row, dir) = run(&env, "Look");
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(llm.anthropic_rejections(), Vec::<String>::new());
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs[0].body.get("stream").is_none(), "{}", reqs[0].body);
    // The block as the whole body had it (the fake writes its keys in its own order).
    let sent = anthropic_api::thinking_block(0).to_string();
    let replies = assistant(&dir.join("current.jsonl"));
    assert_eq!(
        replies[0]["reasoning"],
        json!([{"provider": "anthropic", "type": "thinking", "data": sent}])
    );
    let raw = String::from_utf8(reqs[1].raw_body.clone()).unwrap();
    assert!(
        raw.contains(&format!("[{sent},{{\"type\":\"tool_use\"")),
        "{raw}"
    );
}

/// The three formats that read server-sent events: (name, provider, `llm` keys, top-level
/// YAML).
const SSE_FORMATS: [(&str, &str, &str, &str); 3] = [
    ("openai-chat", "openai", "", ""),
    ("anthropic-messages", "anthropic", ANTHROPIC_THINKING, ""),
    (
        "openai-responses",
        "openai",
        "",
        "plugins:\n  request_format: builtin:openai-responses\n",
    ),
];

/// A streaming environment for one of [`SSE_FORMATS`].
fn sse_env(llm: &FakeLlm, (_, provider, llm_extra, extra): (&str, &str, &str, &str)) -> TestEnv {
    let env = TestEnv::new();
    let yaml = config_yaml(&llm.base_url(), provider, extra).replace(
        "max_backoff_secs: 2",
        &format!("max_backoff_secs: 1\n  stream: true\n{llm_extra}"),
    );
    env.write_config(&yaml);
    env.ctxhost(&["init"]).ok();
    env
}

/// Issue 37 item 1: every event's JSON spread over several `data:` lines (with `id:` fields
/// and comments), as the event-stream rules allow: a whole task with a tool call completes in
/// each format, its reply and tool call as sent.
#[test]
fn events_whose_json_spans_several_data_lines_fold_in_every_format() {
    for format in SSE_FORMATS {
        let name = format.0;
        let llm = FakeLlm::start(vec![
            Reply::multi_line_data(Reply::tool_calls(
                vec![("call_m1", "list_directory", r#"{"path":"."}"#)],
                Some((20, 5)),
            )),
            Reply::multi_line_data(Reply::text("Listed: one folder.", Some((30, 6)))),
        ]);
        let env = sse_env(&llm, format);
        let (row, dir) = run(&env, "List the folder");
        assert_eq!(row["status"], "completed", "{name}: {row}");
        assert_eq!(llm.request_count(), 2, "{name}");
        assert_eq!(row["tool_call_count"], 1, "{name}");
        let replies = assistant(&dir.join("messages.jsonl"));
        assert_eq!(replies.len(), 2, "{name}");
        assert_eq!(
            replies[0]["tool_calls"][0]["function"]["arguments"], r#"{"path":"."}"#,
            "{name}"
        );
        assert_eq!(replies[1]["content"], "Listed: one folder.", "{name}");
        let stream = std::fs::read_to_string(dir.join("reply.stream")).unwrap();
        assert!(
            stream.contains("\ndata:  \""),
            "{name}: multi-line: {stream}"
        );
        assert!(!dir.join("failed-streams").exists(), "{name}");
    }
}

/// Issue 37 item 2: an error the provider sends inside the stream after HTTP 200 is retried as
/// its status would be: a transient one (`overloaded_error`, OpenAI's `server_error`) is sent
/// again after a back-off, the partial kept in `failed-streams/`; `invalid_request_error` is
/// final, the request sent once.
#[test]
fn an_error_inside_a_stream_is_retried_when_transient_and_final_otherwise() {
    for format in SSE_FORMATS {
        let name = format.0;
        let whole = Reply::text("The whole answer.", Some((10, 2)));
        let llm = FakeLlm::start(vec![
            Reply::stream_error(whole.clone(), 3, "overloaded_error"),
            whole,
        ]);
        let env = sse_env(&llm, format);
        let (row, dir) = run(&env, "Answer");
        assert_eq!(row["status"], "completed", "{name}: {row}");
        let reqs = llm.requests();
        assert_eq!(reqs.len(), 2, "{name}");
        let waited = reqs[1].at - reqs[0].at;
        assert!(
            waited >= std::time::Duration::from_millis(250),
            "{name}: sent again after {waited:?}, no back-off"
        );
        let replies = assistant(&dir.join("messages.jsonl"));
        assert_eq!(replies.len(), 1, "{name}: the partial is never appended");
        assert_eq!(replies[0]["content"], "The whole answer.", "{name}");
        let failed = std::fs::read_to_string(dir.join("failed-streams/1.stream")).unwrap();
        assert!(
            failed.contains("overloaded_error (fake)"),
            "{name}: {failed}"
        );

        let llm = FakeLlm::start(vec![Reply::stream_error(
            Reply::text("Never whole.", Some((10, 2))),
            3,
            "invalid_request_error",
        )]);
        let env = sse_env(&llm, format);
        let (row, _) = run(&env, "Answer");
        assert_eq!(row["status"], "failed", "{name}: {row}");
        assert_eq!(llm.request_count(), 1, "{name}: final, not sent again");
        let error = row["error_message"].as_str().unwrap();
        assert!(
            error.contains("invalid_request_error (fake)"),
            "{name}: {error}"
        );
    }
}

/// Issue 37 item 14: one rule for the size of a reply in every format: `llm.max_response_mib`
/// bounds the reply folded from a stream (as an unstreamed body), not the stream's framing —
/// the Responses API repeats the text in its closing events, and each chat-completions chunk
/// wraps a few characters in ~150 bytes. A reply within the limit completes in every format;
/// one over it fails naming the setting, and is not sent again.
#[test]
fn the_reply_size_limit_is_the_same_rule_in_every_format() {
    for format in SSE_FORMATS {
        let name = format.0;
        let small = "a".repeat(100_000);
        let big = "b".repeat(1_100_000);
        let llm = FakeLlm::start(vec![
            Reply::text(small.clone(), Some((10, 2))),
            Reply::text(big, Some((10, 2))),
        ]);
        let one_mib = (
            format.0,
            format.1,
            &*format!("{}  max_response_mib: 1\n", format.2),
            format.3,
        );
        let env = sse_env(&llm, one_mib);
        let (row, dir) = run(&env, "Answer small");
        assert_eq!(row["status"], "completed", "{name}: {row}");
        let stream = std::fs::metadata(dir.join("reply.stream")).unwrap().len();
        assert!(
            stream > 1 << 20,
            "{name}: the framing is past the limit: {stream}"
        );
        assert_eq!(assistant(&dir.join("messages.jsonl"))[0]["content"], small);
        let (row, _) = run(&env, "Answer big");
        assert_eq!(row["status"], "failed", "{name}: {row}");
        let error = row["error_message"].as_str().unwrap();
        assert!(
            error.contains("larger than the limit of 1048576 bytes (llm.max_response_mib)"),
            "{name}: {error}"
        );
        assert_eq!(llm.request_count(), 2, "{name}: not sent again");
    }
}
