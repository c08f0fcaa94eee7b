//! `builtin:anthropic-messages` and `llm.provider: anthropic`:
//!
//! - the request for the golden contexts (`tests/golden/current.jsonl`: parallel tool calls,
//!   unicode, blank lines; `current_compressed.jsonl`: the same after a compression, with the
//!   summary), snapshotted (`tests/all/snapshots/all__anthropic__*.snap`) and checked field by field;
//! - the replies of `tests/golden/responses/anthropic_*.json`: text, tool use, max tokens, error
//!   bodies;
//! - end to end against the fake server's Anthropic side (`tests/all/support/anthropic_api.rs`, which
//!   refuses what the API refuses and accounts the prompt cache): a task with parallel tool calls
//!   and a compression, overload (529) and error replies, the key sent as `x-api-key`;
//! - prompt-cache tokens in the task's row, `show` and `stats` (Anthropic's reads and writes,
//!   OpenAI's `cached_tokens`);
//! - the closing figure: the input tokens a scripted 30-step task is billed with and without the
//!   cache breakpoints (`cargo test -p ctxhost --test anthropic -- --nocapture billing`).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::anthropic_api::{CacheUsage, error_reply};
use crate::support::components::{golden, request_format};
use crate::support::fake_llm::{FakeLlm, RecordedRequest, Reply};
use crate::support::{TestEnv, find_task_dir, read_jsonl};
use ctxhost::llm::{AuthScheme, Transport, TransportConfig, TransportError};
use ctxhost::runtime::{
    PluginError, Reply as FormatReply, RequestConfig, RequestFormat, RuntimeError, Usage,
};
use ctxhost_format::{ChatMessage, ToolCall};
use serde_json::{Value, json};
use tempfile::TempDir;

// ---------------------------------------------------------------------------------------------
// The component on golden inputs.

/// A task directory holding the golden context `context` as current.jsonl and tools.json, and
/// an instance of `builtin:anthropic-messages` on it.
fn format(context: &str) -> (TempDir, RequestFormat) {
    let task = tempfile::tempdir().unwrap();
    fs::copy(golden(context), task.path().join("current.jsonl")).unwrap();
    fs::copy(golden("tools.json"), task.path().join("tools.json")).unwrap();
    let instance = request_format("builtin:anthropic-messages", task.path());
    (task, instance)
}

fn config() -> RequestConfig {
    RequestConfig {
        model: "claude-sonnet-4-5".to_string(),
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

/// Writes the request for `context` and returns (body text, parsed body).
fn write(context: &str, cfg: &RequestConfig, messages: u64) -> (String, Value) {
    let (task, mut f) = format(context);
    let info = f.write_request(cfg).unwrap();
    let text = fs::read_to_string(task.path().join(&cfg.request_file)).unwrap();
    assert_eq!(info.endpoint_path, "/v1/messages");
    assert_eq!(info.messages, messages);
    assert_eq!(info.bytes, text.len() as u64);
    let value: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the request is not JSON: {e}\n{text}"));
    (text, value)
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// The golden tools in Anthropic's shape.
fn golden_tools() -> Value {
    let tools: Value =
        serde_json::from_str(&fs::read_to_string(golden("tools.json")).unwrap()).unwrap();
    Value::Array(
        tools
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let f = &t["function"];
                json!({"name": f["name"], "description": f["description"], "input_schema": f["parameters"]})
            })
            .collect(),
    )
}

/// The content of line `n` (0-based, blank lines skipped) of a golden context.
fn golden_content(context: &str, n: usize) -> String {
    let text = fs::read_to_string(golden(context)).unwrap();
    let line = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .nth(n)
        .unwrap();
    serde_json::from_str::<ChatMessage>(line)
        .unwrap()
        .content
        .unwrap()
}

#[test]
fn golden_request_has_the_messages_api_structure() {
    let (text, body) = write("current.jsonl", &config(), 6);
    let keys: Vec<&String> = body.as_object().unwrap().keys().collect(); // sorted
    assert_eq!(
        keys,
        [
            "max_tokens",
            "messages",
            "model",
            "system",
            "temperature",
            "tools"
        ]
    );
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["max_tokens"], 512);
    assert_eq!(body["temperature"].to_string(), "0.2");
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": golden_content("current.jsonl", 0), "cache_control": ephemeral()}])
    );
    assert_eq!(body["tools"], golden_tools());
    let turns = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = turns.iter().map(|t| t["role"].as_str().unwrap()).collect();
    // user | assistant (parallel tool_use) | user (both results) | assistant (answer).
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
    assert_eq!(
        turns[0]["content"],
        json!([{"type": "text", "text": golden_content("current.jsonl", 1), "cache_control": ephemeral()}])
    );
    assert_eq!(
        turns[1]["content"],
        json!([
            {"type": "tool_use", "id": "call_a1", "name": "read_text_file", "input": {"path": "src/main.rs"}},
            {"type": "tool_use", "id": "call_b2", "name": "list_directory", "input": {"path": "src"}},
        ])
    );
    assert_eq!(
        turns[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "call_a1", "content": "fn main() {\n    println!(\"hi\");\n}\n"},
            {"type": "tool_result", "tool_use_id": "call_b2", "content": "[FILE] main.rs\n[FILE] lib.rs",
             "cache_control": ephemeral()},
        ])
    );
    assert_eq!(
        turns[3]["content"],
        json!([{"type": "text", "text": golden_content("current.jsonl", 5)}])
    );
    assert!(
        !text.contains("tool_name") && !text.contains("tool_call_id"),
        "{text}"
    );
    insta::assert_snapshot!("anthropic_messages_request", text);
}

#[test]
fn compressed_request_marks_the_summary_and_the_last_two_user_turns() {
    let cfg = RequestConfig {
        temperature: None,
        max_output_tokens: None,
        ..config()
    };
    let (text, body) = write("current_compressed.jsonl", &cfg, 6);
    assert!(body.get("temperature").is_none());
    assert_eq!(body["max_tokens"], 4096, "max_tokens is always set");
    let turns = body["messages"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    // The summary and the next user message are one turn; the summary ends the stable prefix.
    let first = turns[0]["content"].as_array().unwrap();
    assert_eq!(first.len(), 2);
    assert!(
        first[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Summary of the conversation so far (messages 2–9):\n")
    );
    assert_eq!(first[0]["cache_control"], ephemeral());
    assert_eq!(first[1]["cache_control"], ephemeral());
    let results = turns[2]["content"].as_array().unwrap();
    assert_eq!(results.len(), 2, "the blank line is skipped");
    assert!(results[0].get("cache_control").is_none());
    assert_eq!(results[1]["cache_control"], ephemeral());
    let marks = text.matches("\"cache_control\"").count();
    assert_eq!(marks, 4, "system, summary, previous and last user turn");
    insta::assert_snapshot!("anthropic_messages_request_compressed", text);
}

/// The component's own error of a failed call, or a panic naming what came back instead.
fn plugin_error<T: std::fmt::Debug>(r: Result<T, RuntimeError>) -> PluginError {
    match r {
        Err(RuntimeError::Plugin { error, .. }) => error,
        other => panic!("expected a plugin error, got {other:?}"),
    }
}

#[test]
fn bad_inputs_and_settings_are_named_and_leave_no_request() {
    let (task, mut f) = format("current.jsonl");
    let cfg = RequestConfig {
        temperature: Some(1.5),
        ..config()
    };
    assert_eq!(
        plugin_error(f.write_request(&cfg)),
        PluginError::InvalidInput(
            "temperature 1.5 is outside 0–1, the range Anthropic accepts".into()
        )
    );
    let mut current = fs::read_to_string(task.path().join("current.jsonl")).unwrap();
    current.push_str("{\"role\":\"user\",\"content\":\"torn\n");
    fs::write(task.path().join("current.jsonl"), &current).unwrap();
    let err = plugin_error(f.write_request(&config()));
    assert!(
        matches!(&err, PluginError::InvalidInput(t) if t.starts_with("current.jsonl line 8: not valid:")),
        "{err:?}"
    );
    assert!(!task.path().join("request.json").exists());
    fs::write(
        task.path().join("current.jsonl"),
        "{\"role\":\"system\",\"content\":\"s\"}\n",
    )
    .unwrap();
    assert_eq!(
        plugin_error(f.write_request(&config())),
        PluginError::InvalidInput(
            "current.jsonl holds no user or assistant message to send (the API needs one)".into()
        )
    );
    let cfg = RequestConfig {
        messages_file: "missing.jsonl".into(),
        ..config()
    };
    let err = plugin_error(f.write_request(&cfg));
    assert!(
        matches!(&err, PluginError::Io(t) if t.starts_with("opening missing.jsonl:")),
        "{err:?}"
    );
    assert!(!task.path().join("request.json").exists());
}

/// Parses the golden response body `file`; `Err` is the component's error.
fn read(file: &str) -> Result<FormatReply, PluginError> {
    let (task, mut f) = format("current.jsonl");
    fs::copy(
        golden(&format!("responses/{file}")),
        task.path().join("response.json"),
    )
    .unwrap();
    match f.read_response("response.json", false) {
        Ok(reply) => Ok(reply),
        Err(e) => Err(plugin_error::<()>(Err(e))),
    }
}

/// Usage with `prompt` input tokens of which `cache` = (read, written).
fn usage(prompt: u64, completion: u64, cache: (u64, u64)) -> Option<Usage> {
    Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
        cache_read_tokens: cache.0,
        cache_creation_tokens: cache.1,
        reasoning_tokens: 0,
    })
}

#[test]
fn replies_are_mapped_back_to_the_openai_shape() {
    assert_eq!(
        read("anthropic_text.json").unwrap(),
        FormatReply {
            message: ChatMessage::text(
                "assistant",
                "Done: the path now reads \"C:/temp/new\". 上下文 ✅"
            ),
            // input 21 + cache creation 188 + cache read 1803.
            usage: usage(2012, 17, (1803, 188)),
            finish_reason: Some("stop".into()),
            model: Some("claude-sonnet-4-5".into()),
            content_file: None,
        }
    );
    let reply = read("anthropic_tool_use.json").unwrap();
    assert_eq!(
        reply.message.content.as_deref(),
        Some("I'll read the file and list the folder.")
    );
    assert_eq!(
        reply.message.calls(),
        [
            ToolCall::new(
                "toolu_01A09q90qw90lq917835lq9",
                "read_text_file",
                "{\"path\":\"src/main.rs\"}"
            ),
            ToolCall::new(
                "toolu_01B7dk3l2k3j4h5g6f7d8s9",
                "list_directory",
                "{\"path\":\"src\"}"
            ),
        ]
    );
    assert_eq!(
        (reply.usage, reply.finish_reason.as_deref()),
        (usage(2095, 91, (0, 0)), Some("tool_calls"))
    );
    let reply = read("anthropic_max_tokens.json").unwrap();
    assert_eq!(reply.finish_reason.as_deref(), Some("length"));
}

#[test]
fn error_and_foreign_bodies_say_what_is_wrong() {
    let invalid = |file: &str| match read(file).unwrap_err() {
        PluginError::InvalidInput(text) => text,
        other => panic!("{file}: {other:?}"),
    };
    assert_eq!(
        invalid("anthropic_overloaded.json"),
        "response.json: the provider answered with an error: Overloaded (type: overloaded_error)"
    );
    assert!(invalid("anthropic_invalid_request.json").contains(
        "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_01. \
             Each `tool_use` block must have a corresponding `tool_result` block in the next \
             message. (type: invalid_request_error)"
    ));
    assert!(
        invalid("openai_text.json")
            .starts_with("response.json: the response has no content array; it starts with: {")
    );
    assert!(invalid("html_502.html").starts_with("response.json is not JSON"));
}

/// A 20 MB context is streamed (twice): the component's memory stays far below its size.
#[test]
fn a_large_context_is_streamed_in_bounded_memory() {
    let (task, mut f) = format("current.jsonl");
    let mut out = std::io::BufWriter::new(fs::File::create(task.path().join("big.jsonl")).unwrap());
    let system = serde_json::to_string(&ChatMessage::text("system", "s")).unwrap();
    std::io::Write::write_all(&mut out, format!("{system}\n").as_bytes()).unwrap();
    for i in 0..2_000 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let line = serde_json::to_string(&ChatMessage::text(role, "x".repeat(10_000))).unwrap();
        std::io::Write::write_all(&mut out, format!("{line}\n").as_bytes()).unwrap();
    }
    drop(out);
    let cfg = RequestConfig {
        messages_file: "big.jsonl".into(),
        ..config()
    };
    let info = f.write_request(&cfg).unwrap();
    let peak = f.memory_peak_bytes();
    println!(
        "anthropic-messages: {} messages, {} request bytes, guest memory peak {} KiB",
        info.messages,
        info.bytes,
        peak / 1024
    );
    assert_eq!(info.messages, 2_001);
    assert!(info.bytes > 20_000_000);
    assert!(
        peak < 4 * 1024 * 1024,
        "guest memory grew to {peak} bytes for a 20 MB context"
    );
}

// ---------------------------------------------------------------------------------------------
// The transport's headers and retries.

fn anthropic_transport(base_url: &str, key: &str) -> Transport {
    let mut cfg = TransportConfig::new(base_url);
    cfg.api_key = Some(key.to_string());
    cfg.auth = AuthScheme::Anthropic;
    cfg.max_retries = 2;
    Transport::new(cfg).with_initial_backoff(std::time::Duration::from_millis(10))
}

/// POSTs a minimal valid Messages API request through `t`.
fn post(t: &Transport) -> (Result<ctxhost::llm::PostOutcome, TransportError>, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let body =
        json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    fs::write(dir.path().join("request.json"), body.to_string()).unwrap();
    let task = ctxhost::task_dir::TaskDir::open(dir.path()).unwrap();
    let r = t.post_file("/v1/messages", &task, "request.json", "response.json");
    (r, dir)
}

#[test]
fn the_key_goes_in_x_api_key_with_the_version_and_overload_is_retried() {
    let llm = FakeLlm::start(vec![
        error_reply(529, "overloaded_error", "Overloaded"),
        error_reply(529, "overloaded_error", "Overloaded"),
        Reply::text("hi", Some((0, 1))),
    ]);
    llm.expect_anthropic_key("sk-ant-test-1");
    let t = anthropic_transport(&llm.base_url(), "sk-ant-test-1");
    let (r, dir) = post(&t);
    let outcome = r.unwrap();
    assert_eq!(outcome.attempts, 3, "two 529s, then the answer");
    let reply: Value =
        serde_json::from_slice(&fs::read(dir.path().join("response.json")).unwrap()).unwrap();
    assert_eq!(reply["content"][0]["text"], "hi");
    for req in llm.requests() {
        assert_eq!(req.header("x-api-key"), Some("sk-ant-test-1"));
        assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(req.header("authorization"), None, "no Bearer for Anthropic");
    }
    assert!(llm.anthropic_rejections().is_empty());
}

#[test]
fn errors_name_the_provider_message_and_request_id_and_retry_only_where_they_should() {
    // Persistent overload: every attempt made, the API's message in the error.
    let llm = FakeLlm::start(vec![]);
    llm.set_default(error_reply(529, "overloaded_error", "Overloaded"));
    let (r, _dir) = post(&anthropic_transport(&llm.base_url(), "sk-ant-any"));
    let e = r.unwrap_err();
    assert_eq!((e.status(), e.attempts()), (Some(529), 3));
    let text = e.to_string();
    assert!(
        text.contains("HTTP 529 Overloaded after 3 attempt(s): Overloaded (type: overloaded_error) (request id req_fake)"),
        "{text}"
    );

    // A wrong key: 401, not retried, the key never in the error.
    let llm = FakeLlm::start(vec![]);
    llm.expect_anthropic_key("sk-ant-right");
    let (r, _dir) = post(&anthropic_transport(&llm.base_url(), "sk-ant-wrong-key"));
    let e = r.unwrap_err();
    assert_eq!((e.status(), e.attempts()), (Some(401), 1));
    let text = e.to_string();
    assert!(
        text.contains("invalid x-api-key (type: authentication_error)"),
        "{text}"
    );
    assert!(!text.contains("sk-ant-wrong-key"), "{text}");

    // `x-should-retry: false` on an overload is obeyed; `true` on a 400 too.
    let llm = FakeLlm::start(vec![Reply::status(
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        &[("x-should-retry", "false")],
    )]);
    let (r, _dir) = post(&anthropic_transport(&llm.base_url(), "sk-ant-any"));
    assert_eq!(r.unwrap_err().attempts(), 1);
    let llm = FakeLlm::start(vec![
        Reply::status(400, "{}", &[("x-should-retry", "true")]),
        Reply::text("ok", None),
    ]);
    let (r, _dir) = post(&anthropic_transport(&llm.base_url(), "sk-ant-any"));
    assert_eq!(r.unwrap().attempts, 2);
}

// ---------------------------------------------------------------------------------------------
// End to end: the ctxhost binary against the fake server's Anthropic side.

/// The test key's environment variable and value.
const KEY_VAR: &str = "CTXHOST_TEST_ANTHROPIC_KEY";
const KEY: &str = "sk-ant-test-0123456789";

/// Marker of the summary prompt, to tell summary requests from agent-loop requests.
const MARK: &str = "SUMMARISE-THIS";

fn is_summary_request(req: &RecordedRequest) -> bool {
    req.raw_body
        .windows(MARK.len())
        .any(|w| w == MARK.as_bytes())
}

/// A config for provider anthropic at `base_url` (key from [`KEY_VAR`]), tools reading
/// `workspace` with the MCP filesystem server, compression at `threshold` × `window`.
fn anthropic_config(base_url: &str, workspace: &Path, window: u64, threshold: f64) -> String {
    format!(
        "context_storage:\n  base_dir: ./contexts\n  compression_threshold: {threshold}\n  keep_recent_messages: 4\n  \
         summary_prompt: \"{MARK}\\n{{messages}}\"\n\
         llm:\n  provider: anthropic\n  base_url: \"{base_url}\"\n  model: claude-fake\n  api_key_env: {KEY_VAR}\n  \
         context_length: {window}\n  max_output_tokens: 512\n  timeout_secs: 20\n  max_retries: 2\n  max_backoff_secs: 1\n\
         agent:\n  max_steps: 60\n\
         mcp_servers:\n  fs:\n    command: {:?}\n    args: [{:?}]\n",
        crate::support::filesystem_server_bin()
            .display()
            .to_string(),
        workspace.display().to_string()
    )
}

fn anthropic_env(yaml: &str) -> TestEnv {
    let mut env = TestEnv::new();
    env.write_config(yaml);
    env.set_env(KEY_VAR, KEY);
    env.ctxhost(&["init"]).ok();
    env
}

/// Submits `prompt`, runs it, returns (row, task dir).
fn run_task(env: &TestEnv, prompt: &str) -> (Value, PathBuf) {
    let uuid = env
        .ctxhost(&["submit", "--prompt", prompt])
        .ok()
        .stdout()
        .trim()
        .to_string();
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    let row = env.ctxhost(&["show", &uuid, "--json"]).ok().json()["task"].clone();
    (
        row,
        find_task_dir(&env.contexts(), &uuid).expect("task dir"),
    )
}

/// No file under `dir` contains `secret`.
fn assert_no_secret(dir: &Path, secret: &str) {
    for entry in fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            assert_no_secret(&p, secret);
        } else {
            let bytes = fs::read(&p).unwrap();
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{} holds the API key",
                p.display()
            );
        }
    }
}

/// `n` deterministic source-like files `file_01.rs`... of growing size in a new directory.
fn workspace(n: usize) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    for i in 1..=n {
        let mut text = format!("//! Module {i} of the sample workspace.\n\n");
        for j in 0..(40 + 12 * (i % 7)) {
            text.push_str(&format!(
                "/// Returns the {j}th value of series {i}.\npub fn series_{i}_{j}(x: u64) -> u64 {{\n    x.wrapping_mul({}) ^ {}\n}}\n\n",
                i * 31 + j,
                j * 17 + i
            ));
        }
        fs::write(dir.path().join(format!("file_{i:02}.rs")), text).unwrap();
    }
    dir
}

#[test]
fn a_task_with_tool_calls_and_a_compression_runs_against_the_fake_anthropic_server() {
    let ws = workspace(6);
    let llm = FakeLlm::start(vec![]);
    llm.expect_anthropic_key(KEY);
    llm.set_anthropic_min_cache_tokens(256);
    let loop_calls = Arc::new(AtomicUsize::new(0));
    let (l, root) = (loop_calls.clone(), ws.path().to_path_buf());
    llm.set_handler(move |req| {
        if is_summary_request(req) {
            return Some(Reply::text(
                "The agent read file_01.rs to file_04.rs: series functions.",
                Some((0, 20)),
            ));
        }
        let n = l.fetch_add(1, Ordering::SeqCst) + 1;
        let path = |i: usize| json!({"path": root.join(format!("file_{i:02}.rs"))}).to_string();
        Some(match n {
            // Two parallel calls, then one call per step, then the answer.
            1 => Reply::tool_calls(
                vec![
                    ("toolu_01a", "read_text_file", &path(1)),
                    ("toolu_01b", "read_text_file", &path(2)),
                ],
                Some((0, 40)),
            ),
            2..=5 => Reply::tool_calls(
                vec![(&format!("toolu_0{n}"), "read_text_file", &path(n + 1))],
                Some((0, 30)),
            ),
            _ => Reply::text(
                "Every file defines series functions. 完成 ✅",
                Some((0, 12)),
            ),
        })
    });
    let env = anthropic_env(&anthropic_config(&llm.base_url(), ws.path(), 12_000, 0.6));
    let (row, dir) = run_task(&env, "Read the six files and tell me what they define.");

    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(
        llm.anthropic_rejections(),
        Vec::<String>::new(),
        "the API refused a request"
    );
    assert_eq!(row["llm_provider"], "anthropic");
    assert_eq!(row["tool_call_count"], 6);
    let compressions = row["compression_count"].as_u64().unwrap();
    assert!(compressions >= 1, "{row}");
    let reqs = llm.requests();
    let summaries = reqs.iter().filter(|r| is_summary_request(r)).count() as u64;
    assert_eq!(summaries, compressions);
    assert_eq!(loop_calls.load(Ordering::SeqCst), 6);
    assert_eq!(row["llm_call_count"].as_u64().unwrap(), 6 + summaries);

    for req in &reqs {
        assert_eq!(req.path, "/v1/messages");
        assert_eq!(req.header("x-api-key"), Some(KEY));
        assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(req.header("authorization"), None);
        assert_eq!(req.body["model"], "claude-fake");
        assert_eq!(req.body["max_tokens"], 512);
    }
    // Agent-loop requests: system prompt marked, tools in Anthropic's shape; after a compression
    // the summary opens the first user turn and is marked.
    let loop_reqs: Vec<&RecordedRequest> = reqs.iter().filter(|r| !is_summary_request(r)).collect();
    for req in &loop_reqs {
        assert_eq!(req.body["system"][0]["cache_control"], ephemeral());
        let tools = req.body["tools"].as_array().unwrap();
        assert!(
            tools
                .iter()
                .any(|t| t["name"] == "read_text_file" && t["input_schema"].is_object())
        );
    }
    let last = loop_reqs.last().unwrap();
    let first_block = &last.body["messages"][0]["content"][0];
    assert!(
        first_block["text"]
            .as_str()
            .unwrap()
            .starts_with("Summary of the conversation so far"),
        "{first_block}"
    );
    assert_eq!(first_block["cache_control"], ephemeral());
    // The second request's first call: two tool_use blocks answered in one user turn.
    let second = &loop_reqs[1].body["messages"];
    assert_eq!(second[1]["content"].as_array().unwrap().len(), 2);
    assert_eq!(second[2]["content"][0]["type"], "tool_result");
    assert_eq!(second[2]["content"][1]["tool_use_id"], "toolu_01b");

    // Tokens: what the provider reported, cache included, every call.
    let usage = llm.anthropic_usage();
    assert_eq!(usage.len(), reqs.len());
    assert!(
        usage.iter().any(|u| u.cache_read_input_tokens > 0),
        "later calls read the cached prefix: {usage:?}"
    );
    let outputs: u64 = 40 + 4 * 30 + 12 + 20 * summaries;
    let inputs: u64 = usage.iter().map(CacheUsage::total).sum();
    assert_eq!(row["total_tokens"].as_u64().unwrap(), inputs + outputs);
    let read: u64 = usage.iter().map(|u| u.cache_read_input_tokens).sum();
    let written: u64 = usage.iter().map(|u| u.cache_creation_input_tokens).sum();
    assert_eq!(row["cache_read_tokens"].as_u64(), Some(read));
    assert_eq!(row["cache_creation_tokens"].as_u64(), Some(written));
    // `stats` shows them per model.
    let stats = env.ctxhost(&["stats", "--json"]).ok().json();
    let model = &stats["by_model"][0];
    assert_eq!(model["model"], "claude-fake");
    assert_eq!(model["cache_read_tokens"].as_u64(), Some(read));
    assert_eq!(model["cache_creation_tokens"].as_u64(), Some(written));
    let table = env.ctxhost(&["stats"]).ok().stdout();
    assert!(
        table.contains("CACHE_READ") && table.contains(&read.to_string()),
        "{table}"
    );
    let uuid = row["uuid"].as_str().unwrap();
    let show = env.ctxhost(&["show", uuid]).ok().stdout();
    assert!(
        show.contains(&format!(
            "prompt cache:  {read} tokens read, {written} written"
        )),
        "{show}"
    );

    // The history is whole and the answer is the last message; the key is nowhere.
    let history = read_jsonl(&dir.join("messages.jsonl"));
    assert_eq!(
        history.last().unwrap()["content"],
        "Every file defines series functions. 完成 ✅"
    );
    ctxhost::invariants::check_context_file(
        &ctxhost::task_dir::TaskDir::open(&dir).unwrap(),
        "current.jsonl",
        false,
    )
    .unwrap();
    assert_no_secret(&env.contexts(), KEY);
    assert!(!dir.join("request.json").exists());
}

#[test]
fn overload_is_retried_and_a_refused_request_fails_the_task_with_the_api_message() {
    let ws = workspace(1);
    let llm = FakeLlm::start(vec![
        error_reply(529, "overloaded_error", "Overloaded"),
        Reply::text("Fine after the overload.", Some((0, 5))),
        error_reply(
            400,
            "invalid_request_error",
            "prompt is too long: 210000 tokens > 200000 maximum",
        ),
    ]);
    llm.expect_anthropic_key(KEY);
    let env = anthropic_env(&anthropic_config(&llm.base_url(), ws.path(), 12_000, 0.7));
    let (row, _) = run_task(&env, "Say something.");
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(llm.request_count(), 2, "one retry after the 529");

    let (row, dir) = run_task(&env, "Say something else.");
    assert_eq!(row["status"], "failed", "{row}");
    let err = row["error_message"].as_str().unwrap();
    assert!(
        err.contains("HTTP 400") && err.contains("after 1 attempt(s): prompt is too long: 210000 tokens > 200000 maximum (type: invalid_request_error) (request id req_fake)"),
        "{err}"
    );
    assert_eq!(llm.request_count(), 3, "a 400 is not retried");
    assert!(dir.join("request.json").exists(), "kept for debugging");
    assert_no_secret(&env.contexts(), KEY);
}

#[test]
fn openai_cached_tokens_are_counted_in_the_stats_too() {
    let completion = |content: Value, cached: u64| {
        Reply::json(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-x",
            "choices": [{"index": 0, "message": content, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 2000, "completion_tokens": 10, "total_tokens": 2010,
                      "prompt_tokens_details": {"cached_tokens": cached}}
        }))
    };
    let llm = FakeLlm::start(vec![
        completion(
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "nope", "arguments": "{}"}}]}),
            0,
        ),
        completion(json!({"role": "assistant", "content": "Done."}), 1920),
    ]);
    let env = TestEnv::new();
    env.write_config(&crate::support::config_yaml(&llm.base_url(), "openai", ""));
    env.ctxhost(&["init"]).ok();
    let (row, _) = run_task(&env, "Do it.");
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(row["total_tokens"], 4020);
    assert_eq!(row["cache_read_tokens"], 1920);
    assert_eq!(row["cache_creation_tokens"], 0);
    let stats = env.ctxhost(&["stats", "--json"]).ok().json();
    assert_eq!(stats["by_model"][0]["cache_read_tokens"], 1920);
    assert_eq!(stats["total"]["cache_read_tokens"], 1920);
}

// ---------------------------------------------------------------------------------------------
// The closing figure.

/// A scripted 30-step task (29 file reads, then the answer) with compressions, run once; the fake
/// server's prompt-cache accounting gives the input tokens billed with the breakpoints ctxhost
/// sets, and the same requests without them (every input token at the full price).
#[test]
fn billing_of_a_30_step_task_with_and_without_cache_breakpoints() {
    const STEPS: usize = 30;
    let ws = workspace(STEPS - 1);
    let llm = FakeLlm::start(vec![]);
    llm.expect_anthropic_key(KEY);
    let loop_calls = Arc::new(AtomicUsize::new(0));
    let (l, root) = (loop_calls.clone(), ws.path().to_path_buf());
    llm.set_handler(move |req| {
        if is_summary_request(req) {
            return Some(Reply::text(
                "The agent is reading file_NN.rs in order; each defines series_N_M functions \
                 returning x.wrapping_mul(a) ^ b. Nothing else found yet.",
                Some((0, 60)),
            ));
        }
        let n = l.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= STEPS {
            return Some(Reply::text(
                "All files define series functions.",
                Some((0, 20)),
            ));
        }
        let args = json!({"path": root.join(format!("file_{n:02}.rs"))}).to_string();
        Some(Reply::tool_calls(
            vec![(&format!("toolu_{n:02}"), "read_text_file", &args)],
            Some((0, 40)),
        ))
    });
    let env = anthropic_env(&anthropic_config(&llm.base_url(), ws.path(), 32_000, 0.7));
    let (row, _) = run_task(
        &env,
        "Read file_01.rs to file_29.rs one by one, then summarise.",
    );
    assert_eq!(row["status"], "completed", "{row}");
    assert!(llm.anthropic_rejections().is_empty());
    assert_eq!(loop_calls.load(Ordering::SeqCst), STEPS);

    let reqs = llm.requests();
    let usage = llm.anthropic_usage();
    let (mut agent, mut summary) = (Vec::new(), Vec::new());
    for (req, u) in reqs.iter().zip(&usage) {
        if is_summary_request(req) {
            summary.push(*u)
        } else {
            agent.push(*u)
        }
    }
    let sum = |us: &[CacheUsage]| {
        us.iter().fold(CacheUsage::default(), |a, u| CacheUsage {
            input_tokens: a.input_tokens + u.input_tokens,
            cache_creation_input_tokens: a.cache_creation_input_tokens
                + u.cache_creation_input_tokens,
            cache_read_input_tokens: a.cache_read_input_tokens + u.cache_read_input_tokens,
        })
    };
    let (a, s, all) = (sum(&agent), sum(&summary), sum(&usage));
    println!(
        "30-step task: {} agent calls, {} summary calls, {} compressions",
        agent.len(),
        summary.len(),
        row["compression_count"]
    );
    println!(
        "{:<14} {:>12} {:>12} {:>12} {:>14} {:>16} {:>7}",
        "calls",
        "input",
        "cache write",
        "cache read",
        "billed (no bp)",
        "billed (with bp)",
        "ratio"
    );
    for (name, u) in [("agent loop", a), ("summaries", s), ("all", all)] {
        println!(
            "{:<14} {:>12} {:>12} {:>12} {:>14} {:>16.0} {:>7.3}",
            name,
            u.input_tokens,
            u.cache_creation_input_tokens,
            u.cache_read_input_tokens,
            u.total(),
            u.billed(),
            u.billed() / u.total() as f64
        );
    }
    println!("per agent call (input, write, read):");
    for (i, u) in agent.iter().enumerate() {
        println!(
            "  {:>2}: {:>6} {:>6} {:>6}",
            i + 1,
            u.input_tokens,
            u.cache_creation_input_tokens,
            u.cache_read_input_tokens
        );
    }
    assert!(row["compression_count"].as_u64().unwrap() >= 1, "{row}");
    assert!(
        all.billed() < 0.5 * all.total() as f64,
        "the breakpoints should more than halve the input bill: {all:?}"
    );
    // Only the part after the last breakpoint is ever billed as plain input: the new messages.
    assert!(a.input_tokens < a.total() / 20, "{a:?}");
}

// The tests above that touch the task store, once more on PostgreSQL.
crate::support::store::postgres_variants!(
    a_task_with_tool_calls_and_a_compression_runs_against_the_fake_anthropic_server,
    overload_is_retried_and_a_refused_request_fails_the_task_with_the_api_message,
    openai_cached_tokens_are_counted_in_the_stats_too,
    billing_of_a_30_step_task_with_and_without_cache_breakpoints,
);

/// Issue 25 item 11: a failed tool call is recorded with `is_error: true` on its tool line
/// (current.jsonl and messages.jsonl) and sent as a `tool_result` with `is_error: true`; a
/// successful one has neither.
#[test]
fn a_failed_tool_call_is_sent_as_an_error_result() {
    let ws = workspace(1);
    let llm = FakeLlm::start(vec![]);
    llm.expect_anthropic_key(KEY);
    let root = ws.path().to_path_buf();
    let n = Arc::new(AtomicUsize::new(0));
    llm.set_handler(move |_| {
        let path = json!({"path": root.join("file_01.rs")}).to_string();
        Some(match n.fetch_add(1, Ordering::SeqCst) {
            0 => Reply::tool_calls(
                vec![
                    ("toolu_ok", "read_text_file", &path),
                    ("toolu_bad", "no_such_tool", "{}"),
                ],
                Some((0, 20)),
            ),
            _ => Reply::text("Done.", Some((0, 2))),
        })
    });
    let env = anthropic_env(&anthropic_config(&llm.base_url(), ws.path(), 100_000, 0.9));
    let (row, dir) = run_task(&env, "Read file_01.rs.");
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(llm.anthropic_rejections(), Vec::<String>::new());

    let second = &llm.requests()[1];
    let results: Vec<&Value> = second.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["content"].as_array().unwrap())
        .filter(|b| b["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2, "{}", second.body);
    let by_id = |id: &str| *results.iter().find(|b| b["tool_use_id"] == id).unwrap();
    assert_eq!(by_id("toolu_bad")["is_error"], true);
    assert!(by_id("toolu_ok").get("is_error").is_none());

    for file in ["current.jsonl", "messages.jsonl"] {
        let lines: Vec<Value> = fs::read_to_string(dir.join(file))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let tool = |id: &str| {
            lines
                .iter()
                .find(|l| l["role"] == "tool" && l["tool_call_id"] == id)
                .unwrap()
                .clone()
        };
        assert_eq!(tool("toolu_bad")["is_error"], true, "{file}");
        assert!(tool("toolu_ok").get("is_error").is_none(), "{file}");
    }
}
