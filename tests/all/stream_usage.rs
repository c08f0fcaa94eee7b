//! `llm.stream_usage` (issue 37 item 4): `builtin:openai-chat` asks for the usage of a streamed
//! reply (`stream_options: {"include_usage": true}`) only when the setting says so (on by
//! default for `provider: openai`, off for the OpenAI-compatible local servers). A strict server
//! that answers such a request with HTTP 400 naming `stream_options` gets the call once more
//! without it, within the call's budget of `1 + max_retries` requests, recorded in
//! llm_calls.jsonl; the usage of that reply is unknown (absent, not 0), and the task's later
//! calls leave the argument out.

use std::path::Path;

use serde_json::Value;

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, config_yaml, find_task_dir, read_jsonl};

/// The lines of llm_calls.jsonl that record agent-loop calls.
fn call_lines(dir: &Path) -> Vec<Value> {
    read_jsonl(&dir.join("llm_calls.jsonl"))
        .into_iter()
        .filter(|l| l["type"] == "call")
        .collect()
}

/// A config for `provider` at the fake, with `llm` keys `extra_llm` (YAML lines indented by
/// two spaces) added to its `llm` section.
fn env_with(llm: &FakeLlm, provider: &str, extra_llm: &str) -> TestEnv {
    let env = TestEnv::new();
    let yaml = config_yaml(&llm.base_url(), provider, "").replace(
        "max_backoff_secs: 2",
        &format!("max_backoff_secs: 2{extra_llm}"),
    );
    env.write_config(&yaml);
    env.ctxhost(&["init"]).ok();
    env
}

fn run(env: &TestEnv) -> (String, Value) {
    let uuid = env.submit("Read a file, then say done.");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let row = env.row(&uuid);
    (uuid, row)
}

/// The requests' `stream_options`, in order (`Null` where absent).
fn stream_options(llm: &FakeLlm) -> Vec<Value> {
    llm.requests()
        .iter()
        .map(|r| r.body.get("stream_options").cloned().unwrap_or(Value::Null))
        .collect()
}

#[test]
fn a_server_refusing_stream_options_gets_the_call_again_without_it_and_the_usage_is_unknown() {
    let llm = FakeLlm::start(vec![
        Reply::read_file_step(1),
        Reply::text("Done.", Some((10, 2))),
    ]);
    llm.set_refuse_stream_options(true);
    let env = env_with(&llm, "openai", "");
    let (uuid, row) = run(&env);
    assert_eq!(row["status"], "completed", "{row}");

    // Asked once with it (the default for provider openai), refused, asked again without it;
    // the next step never sends it again.
    assert_eq!(
        stream_options(&llm),
        vec![
            serde_json::json!({"include_usage": true}),
            Value::Null,
            Value::Null
        ]
    );
    assert!(llm.requests().iter().all(|r| r.body["stream"] == true));
    assert_eq!(
        llm.openai_rejections(),
        vec!["Unrecognized request argument supplied: stream_options".to_string()]
    );

    // llm_calls.jsonl: the refused request as a failed call saying what happened, then the
    // call that answered, whose usage is unknown: no token counts at all, not zeros.
    let dir = find_task_dir(&env.contexts(), &uuid).expect("task directory");
    let calls = call_lines(&dir);
    assert_eq!(calls.len(), 3, "{calls:#?}");
    assert_eq!(calls[0]["n"], 1);
    assert_eq!(calls[0]["status"], "error", "{}", calls[0]);
    let error = calls[0]["error"].as_str().unwrap();
    assert!(
        error.contains("HTTP 400") && error.contains("stream_options"),
        "{error}"
    );
    assert!(
        error.contains("sent again without stream_options"),
        "{error}"
    );
    for call in &calls[1..] {
        assert_eq!(call["status"], "ok", "{call}");
        for key in ["prompt_tokens", "completion_tokens", "total_tokens"] {
            assert!(call.get(key).is_none(), "{key} is unknown: {call}");
        }
    }
    assert_eq!(calls[1]["n"], 1);
    assert_eq!(calls[2]["n"], 2);
}

/// The request without `stream_options` is one more request of the same call: with
/// `max_retries: 0` (a budget of one request) the 400 is final and nothing else is sent.
#[test]
fn the_request_without_stream_options_counts_in_the_calls_budget() {
    let llm = FakeLlm::start(vec![Reply::text("Done.", Some((10, 2)))]);
    llm.set_refuse_stream_options(true);
    let env = TestEnv::new();
    let yaml =
        config_yaml(&llm.base_url(), "openai", "").replace("max_retries: 2", "max_retries: 0");
    env.write_config(&yaml);
    env.ctxhost(&["init"]).ok();
    let uuid = env.submit("Say done.");
    // The task fails: `run` says so in its exit code.
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    let row = env.row(&uuid);
    assert_eq!(row["status"], "failed", "{row}");
    assert_eq!(llm.request_count(), 1);
    let error = row["error_message"].as_str().unwrap_or_default();
    assert!(error.contains("stream_options"), "{row}");
}

#[test]
fn stream_usage_false_never_sends_stream_options() {
    for (provider, extra) in [
        ("openai", "\n  stream_usage: false"),
        // The default of the OpenAI-compatible local servers.
        ("vllm", ""),
        ("llamacpp", ""),
    ] {
        let llm = FakeLlm::start(vec![
            Reply::read_file_step(1),
            Reply::text("Done.", Some((10, 2))),
        ]);
        llm.set_refuse_stream_options(true);
        let env = env_with(&llm, provider, extra);
        let (uuid, row) = run(&env);
        assert_eq!(row["status"], "completed", "{provider}: {row}");
        assert_eq!(
            stream_options(&llm),
            vec![Value::Null, Value::Null],
            "{provider}"
        );
        assert!(
            llm.requests().iter().all(|r| r.body["stream"] == true),
            "{provider}: still streamed"
        );
        assert!(llm.openai_rejections().is_empty(), "{provider}");
        let dir = find_task_dir(&env.contexts(), &uuid).expect("task directory");
        let calls = call_lines(&dir);
        assert_eq!(calls.len(), 2, "{provider}: {calls:#?}");
        assert!(
            calls.iter().all(|c| c.get("total_tokens").is_none()),
            "{provider}: usage unknown, not 0: {calls:#?}"
        );
    }
}

/// With `stream_usage` on, a server that accepts `stream_options` reports the usage, which is
/// recorded as usual.
#[test]
fn stream_usage_true_reports_the_usage_of_a_streamed_reply() {
    let llm = FakeLlm::start(vec![Reply::text("Done.", Some((10, 2)))]);
    let env = env_with(&llm, "vllm", "\n  stream_usage: true");
    let (uuid, row) = run(&env);
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(
        stream_options(&llm),
        vec![serde_json::json!({"include_usage": true})]
    );
    let dir = find_task_dir(&env.contexts(), &uuid).expect("task directory");
    let calls = call_lines(&dir);
    assert_eq!(calls[0]["total_tokens"], 12, "{calls:#?}");
}
