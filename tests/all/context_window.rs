//! Compaction that makes room whenever the window allows it (issue 11, items 1–3), end to end:
//! the `ctxhost` binary against the fake LLM, with the real MCP filesystem server where a task
//! reads files.
//!
//! - four ~13 KB source files read one per turn with the defaults (window 8192, threshold 0.7,
//!   keep 5, tool cap 4000): the task completes, every request fits the window;
//! - a 4096 window with the default tool cap: a file read is cut to a share of the window and
//!   the task completes; a newest message no compression can shrink fails with advice that works;
//! - the provider's "context too long" answers, in each provider's wording: the context is
//!   compressed and sent again, a bounded number of times.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ctxhost_format::{ChatMessage, estimate_message_tokens};
use serde_json::{Value, json};

use crate::support::fake_llm::{FakeLlm, RecordedRequest, Reply};
use crate::support::{TestEnv, config_yaml, filesystem_server_bin, find_task_dir, read_jsonl};

/// Whether `req` is one of the summariser's requests (its system instructions, in the first
/// message or, for Anthropic, in `system`).
pub fn is_summary_request(req: &RecordedRequest) -> bool {
    let first = req
        .messages()
        .first()
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    let system = req
        .body
        .get("system")
        .map(Value::to_string)
        .unwrap_or_default();
    [first, system].iter().any(|text| {
        text.contains("You write the summary") || text.contains("You merge partial summaries")
    })
}

/// The chat messages of a request, as ctxhost would count them.
fn messages_of(req: &RecordedRequest) -> Vec<ChatMessage> {
    req.messages()
        .into_iter()
        .map(|m| serde_json::from_value(m).unwrap())
        .collect()
}

/// Estimated tokens of a request: its messages and its tool definitions.
fn request_tokens(req: &RecordedRequest) -> u64 {
    let messages: u64 = messages_of(req).iter().map(estimate_message_tokens).sum();
    let tools = req
        .body
        .get("tools")
        .map(|t| ctxhost_format::estimate_tokens(&t.to_string()))
        .unwrap_or(0);
    messages + tools
}

/// About `bytes` of plausible Rust source, distinct per `n`.
fn source_file(n: usize, bytes: usize) -> String {
    let mut s = format!("//! Module {n}: parsing and checking of configuration records.\n\n");
    let mut i = 0;
    while s.len() < bytes {
        i += 1;
        s.push_str(&format!(
            "/// Returns the checked value of field {i} of record {n}, or an error naming it.\n\
             pub fn field_{n}_{i}(input: &str) -> Result<u64, String> {{\n    \
             input.trim().parse::<u64>().map_err(|e| format!(\"field {i}: {{e}}\"))\n}}\n\n"
        ));
    }
    s
}

/// A worker environment: config with `extra` YAML appended, MCP filesystem server on `sample`.
fn env_with_files(llm: &FakeLlm, sample: &Path, extra: &str) -> TestEnv {
    let env = TestEnv::new();
    let mcp = format!(
        "mcp_servers:\n  fs:\n    command: \"{}\"\n    args: [\"{}\"]\n",
        filesystem_server_bin().display(),
        sample.display()
    );
    env.write_config(&config_yaml(
        &llm.base_url(),
        "openai",
        &format!("{mcp}{extra}"),
    ));
    env.ctxhost(&["init"]).ok();
    env
}

fn submit_and_run(env: &TestEnv, prompt: &str) -> (String, Value) {
    let uuid = env
        .ctxhost(&["submit", "--prompt", prompt])
        .ok()
        .stdout()
        .trim()
        .to_string();
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    let row = env.ctxhost(&["show", &uuid, "--json"]).ok().json()["task"].clone();
    (uuid, row)
}

/// A fake LLM for a task that reads `files` one per turn, then answers: summary requests get a
/// short summary; loop request n ≤ files.len() calls read_text_file on file n.
fn reader_llm(files: Vec<String>) -> (FakeLlm, Arc<AtomicUsize>) {
    let llm = FakeLlm::start(vec![]);
    let loop_calls = Arc::new(AtomicUsize::new(0));
    let l = loop_calls.clone();
    llm.set_handler(move |req| {
        if is_summary_request(req) {
            return Some(Reply::text(
                "The agent is reading the project's source files one by one to report on them.",
                Some((500, 20)),
            ));
        }
        let n = l.fetch_add(1, Ordering::SeqCst);
        Some(match files.get(n) {
            Some(path) => Reply::tool_calls(
                vec![(
                    &format!("call_{}", n + 1),
                    "read_text_file",
                    &json!({ "path": path }).to_string(),
                )],
                None,
            ),
            None => Reply::text(
                "All four files read: they parse configuration records.",
                None,
            ),
        })
    });
    (llm, loop_calls)
}

#[test]
fn four_13_kb_file_reads_complete_with_the_default_settings() {
    let sample = tempfile::tempdir().unwrap();
    let files: Vec<String> = (1..=4)
        .map(|n| {
            let p = sample.path().join(format!("module_{n}.rs"));
            std::fs::write(&p, source_file(n, 13_000)).unwrap();
            p.display().to_string()
        })
        .collect();
    let (llm, loop_calls) = reader_llm(files.clone());
    // The defaults: window 8192 (config_yaml), threshold 0.7, keep 5, tool cap 4000.
    let env = env_with_files(&llm, sample.path(), "");
    let (uuid, row) = submit_and_run(&env, "Read module_1.rs to module_4.rs and report.");

    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(
        loop_calls.load(Ordering::SeqCst),
        5,
        "4 reads and the answer"
    );
    let compressions = row["compression_count"].as_u64().unwrap();
    assert!(compressions >= 1, "{row}");

    let requests = llm.requests();
    let loop_requests: Vec<&RecordedRequest> =
        requests.iter().filter(|r| !is_summary_request(r)).collect();
    let reserve = 1024;
    let sizes: Vec<u64> = loop_requests.iter().map(|r| request_tokens(r)).collect();
    for (i, tokens) in sizes.iter().enumerate() {
        assert!(
            tokens + reserve <= 8192,
            "loop request {} holds {tokens} tokens: no room for the reply in the 8192 window",
            i + 1
        );
    }
    // Each read reached the model whole, in the request right after it.
    for (n, path) in files.iter().enumerate() {
        let content = std::fs::read_to_string(path).unwrap();
        let next = messages_of(loop_requests[n + 1]);
        assert!(
            next.iter()
                .any(|m| m.role == "tool" && m.content.as_deref() == Some(content.as_str())),
            "read {} is not in loop request {}",
            n + 1,
            n + 2
        );
    }
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    let tools: Vec<Value> = read_jsonl(&dir.join("tools.jsonl"));
    assert_eq!(tools.len(), 4);
    assert!(tools.iter().all(|t| t["status"] == "success"));
    assert!(!dir.join("tool-results").exists(), "no read was cut");
    let summaries: Vec<Value> = read_jsonl(&dir.join("summaries.jsonl"));
    ctxhost::invariants::check_context_file(
        &ctxhost::task_dir::TaskDir::open(&dir).unwrap(),
        "current.jsonl",
        false,
    )
    .unwrap();
    // The figures for the report.
    eprintln!(
        "four reads: {compressions} compression(s); loop request tokens {sizes:?}; summaries (original → summary tokens): {:?}",
        summaries
            .iter()
            .map(|s| (
                s["original_tokens"].as_u64().unwrap(),
                s["summary_tokens"].as_u64().unwrap()
            ))
            .collect::<Vec<_>>()
    );
}

#[test]
fn with_a_4096_window_a_file_read_is_cut_to_a_share_of_it_and_the_task_completes() {
    let sample = tempfile::tempdir().unwrap();
    let path = sample.path().join("big.rs");
    let text = source_file(1, 13_000);
    std::fs::write(&path, &text).unwrap();
    let (llm, _) = reader_llm(vec![path.display().to_string()]);
    // Window 4096, the default tool cap 4000 (no `tools` section).
    let env = env_with_files(&llm, sample.path(), "");
    env.write_config(
        &std::fs::read_to_string(env.config_path())
            .unwrap()
            .replace("context_length: 8192", "context_length: 4096"),
    );
    let (uuid, row) = submit_and_run(&env, "Read big.rs and report.");
    assert_eq!(row["status"], "completed", "{row}");
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    let tools: Vec<Value> = read_jsonl(&dir.join("tools.jsonl"));
    let result = tools[0]["result"].as_str().unwrap();
    assert!(
        result.contains("the full output is in tool-results/1.txt"),
        "{}",
        &result[result.len() - 200..]
    );
    // Cut to what the window leaves after the tool definitions, the reply reserve and a summary
    // as long as a reply (at least 256 tokens); the full text kept.
    let first = &llm.requests()[0];
    let tool_tokens = request_tokens(first)
        - messages_of(first)
            .iter()
            .map(estimate_message_tokens)
            .sum::<u64>();
    let cap = 4096u64.saturating_sub(tool_tokens + 2 * 1024).max(256);
    assert!(
        ctxhost_format::estimate_tokens(result) <= cap,
        "{} > {cap}",
        ctxhost_format::estimate_tokens(result)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("tool-results/1.txt")).unwrap(),
        text
    );
    let last = llm
        .requests()
        .into_iter()
        .rfind(|r| !is_summary_request(r))
        .unwrap();
    assert!(
        request_tokens(&last) + 1024 <= 4096,
        "{}",
        request_tokens(&last)
    );
}

#[test]
fn a_newest_message_no_compression_can_shrink_fails_with_advice_that_works() {
    let llm = FakeLlm::start(vec![]);
    let env = TestEnv::new();
    env.write_config(
        &config_yaml(&llm.base_url(), "openai", "")
            .replace("context_length: 8192", "context_length: 4096"),
    );
    env.ctxhost(&["init"]).ok();
    // A prompt of ~5000 tokens in a 4096 window.
    let prompt = "Explain this log line by line.\n".repeat(700);
    let (_, row) = submit_and_run(&env, &prompt);
    assert_eq!(row["status"], "failed", "{row}");
    let error = row["error_message"].as_str().unwrap();
    assert!(
        error.contains("the largest message (user, line 2 of ")
            && error.contains("shorten it")
            && error.contains("larger window (llm.context_length)"),
        "{error}"
    );
    for useless in ["keep_recent_messages", "keep-recent-messages"] {
        assert!(!error.contains(useless), "advice that cannot help: {error}");
    }
    assert_eq!(llm.request_count(), 0, "nothing was sent");
}

#[test]
fn huge_tool_call_arguments_are_named_not_the_small_result_after_them() {
    let llm = FakeLlm::start(vec![]);
    let env = TestEnv::new();
    env.write_config(
        &config_yaml(&llm.base_url(), "openai", "")
            .replace("context_length: 8192", "context_length: 4096"),
    );
    env.ctxhost(&["init"]).ok();
    // The model's reply calls a tool with ~6000 tokens of arguments; the tool (unknown) answers
    // with a short error. Every compression keeps that call and its result whole.
    let args = json!({ "path": "notes.md", "text": "lorem ipsum dolor sit amet ".repeat(900) })
        .to_string();
    llm.set_handler(move |req| {
        if is_summary_request(req) {
            return Some(Reply::text("The agent wrote notes.", Some((100, 10))));
        }
        Some(Reply::tool_calls(
            vec![("call_1", "write_notes", &args)],
            None,
        ))
    });
    let (_, row) = submit_and_run(&env, "Write the notes.");
    assert_eq!(row["status"], "failed", "{row}");
    let error = row["error_message"].as_str().unwrap();
    assert!(
        error.contains("the largest message (line 3 of ")
            && error.contains("the model's own call of write_notes")
            && error.contains("tokens of tool-call arguments"),
        "{error}"
    );
    assert!(
        !error.contains("a result of"),
        "blames the small result: {error}"
    );
}

/// How providers say the context is too long: (provider of the config, HTTP status, body).
const OVERFLOW_ANSWERS: &[(&str, u16, &str)] = &[
    (
        "openai",
        400,
        r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9013 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
    ),
    (
        "ollama",
        400,
        r#"{"error":"the input length exceeds the context length"}"#,
    ),
    (
        "llamacpp",
        400,
        r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9013,"n_ctx":8192}}"#,
    ),
    (
        "llamacpp",
        500,
        r#"{"error":{"code":500,"message":"the request exceeds the available context size. try increasing the context size or enable context shift","type":"exceed_context_size_error"}}"#,
    ),
    (
        "vllm",
        400,
        r#"{"object":"error","message":"This model's maximum context length is 8192 tokens. However, you requested 10037 tokens (9013 in the messages, 1024 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
    ),
    (
        "lmstudio",
        400,
        r#"{"error":"Trying to keep the first 9013 tokens when context the overflows. However, the model is loaded with context length of only 8192 tokens, which is not enough. Try to load the model with a larger context length, or provide a shorter input"}"#,
    ),
    (
        "anthropic",
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 9013 tokens > 8192 maximum"}}"#,
    ),
];

/// A fake LLM whose loop gets `turns` tool calls with long arguments (history to summarise),
/// then `overflows` "too long" answers, then a final answer; summary requests get a summary.
fn overflowing_llm(turns: usize, overflows: usize, status: u16, body: &'static str) -> FakeLlm {
    let llm = FakeLlm::start(vec![]);
    let n = Arc::new(AtomicUsize::new(0));
    llm.set_handler(move |req| {
        if is_summary_request(req) {
            return Some(Reply::text("The agent wrote notes with the tool.", None));
        }
        let i = n.fetch_add(1, Ordering::SeqCst);
        Some(if i < turns {
            // About 1000 tokens a turn: 4 turns stay under the threshold, and the kept tail's
            // token bound moves for each smaller window.
            let args =
                json!({ "note": format!("{i}: {}", "observation ".repeat(330)) }).to_string();
            Reply::tool_calls(vec![(&format!("call_{i}"), "write_note", &args)], None)
        } else if i < turns + overflows {
            Reply::status(status, body, &[])
        } else {
            Reply::text("Done after compressing.", None)
        })
    });
    llm
}

#[test]
fn a_context_too_long_answer_in_any_wording_compresses_and_sends_again() {
    for (provider, status, body) in OVERFLOW_ANSWERS {
        let llm = overflowing_llm(4, 1, *status, body);
        let env = TestEnv::new();
        env.write_config(&config_yaml(&llm.base_url(), provider, ""));
        env.ctxhost(&["init"]).ok();
        let (uuid, row) = submit_and_run(&env, "Take notes.");
        assert_eq!(row["status"], "completed", "{provider} {status}: {row}");
        assert_eq!(row["compression_count"], 1, "{provider}: {row}");
        let loop_requests: Vec<RecordedRequest> = llm
            .requests()
            .into_iter()
            .filter(|r| !is_summary_request(r))
            .collect();
        assert_eq!(loop_requests.len(), 4 + 1 + 1, "{provider}");
        let (too_long, again) = (&loop_requests[4], &loop_requests[5]);
        let size = |r: &RecordedRequest| r.body["messages"].to_string().len();
        assert!(
            size(again) < size(too_long),
            "{provider}: the retry is not smaller"
        );
        let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
        assert_eq!(
            read_jsonl(&dir.join("summaries.jsonl")).len(),
            1,
            "{provider}"
        );
        // The 500 of an old llama.cpp is not retried as it is.
        assert_eq!(
            llm.requests().len(),
            loop_requests.len() + 1,
            "{provider}: one summary request, no blind retry"
        );
    }
}

#[test]
fn a_provider_that_keeps_saying_too_long_fails_the_task_after_a_bounded_number_of_tries() {
    let (_, status, body) = OVERFLOW_ANSWERS[0];
    let llm = overflowing_llm(4, usize::MAX / 2, status, body);
    let env = TestEnv::new();
    env.write_config(&config_yaml(&llm.base_url(), "openai", ""));
    env.ctxhost(&["init"]).ok();
    let (_, row) = submit_and_run(&env, "Take notes.");
    assert_eq!(row["status"], "failed", "{row}");
    let error = row["error_message"].as_str().unwrap();
    assert!(
        error.contains("context_length_exceeded")
            && error.contains("still finds the context too long after 2 compression(s)")
            && error.contains("set llm.context_length (now 8192) to the model's real window"),
        "{error}"
    );
    let loop_requests = llm
        .requests()
        .into_iter()
        .filter(|r| !is_summary_request(r))
        .count();
    assert_eq!(loop_requests, 4 + 1 + 2, "the first answer and two retries");
}
