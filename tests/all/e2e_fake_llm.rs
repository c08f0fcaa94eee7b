//! End to end against the fake OpenAI-compatible server (tests/all/support/fake_llm.rs): the real
//! `ctxhost` binary submits tasks, runs the worker (one child process per task), and the
//! files, rows and counters it leaves are checked exactly.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use crate::support::fake_llm::{FakeLlm, RecordedRequest, Reply};
use crate::support::{TestEnv, config_yaml, find_task_dir, read_json, read_jsonl, wait_until};
use serde_json::Value;

fn run_once(env: &TestEnv, extra_args: &[&str]) {
    let mut args = vec!["run", "--once", "--poll-ms", "20"];
    args.extend_from_slice(extra_args);
    env.ctxhost(&args).ok();
}

/// `run --once` when a task it runs fails: exit status 1, naming the failures on stderr.
fn run_once_failing(env: &TestEnv, extra_args: &[&str]) {
    let mut args = vec!["run", "--once", "--poll-ms", "20"];
    args.extend_from_slice(extra_args);
    let out = env.ctxhost(&args);
    assert_eq!(out.code(), Some(1), "{}", out.stderr());
    assert!(out.stderr().contains("failed"), "{}", out.stderr());
}

/// The first user message of a request (the task's prompt).
fn prompt_of(req: &RecordedRequest) -> String {
    req.messages()
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Whether the last message of a request is a tool result.
fn last_is_tool(req: &RecordedRequest) -> bool {
    req.messages().last().is_some_and(|m| m["role"] == "tool")
}

/// The checks every finished task directory passes: in completed/, every JSONL line parses,
/// messages.jsonl seq is 1..n, current.jsonl starts with the system prompt, metadata.json is
/// well-formed. Returns (messages.jsonl lines, current.jsonl lines).
fn check_finished_dir(env: &TestEnv, uuid: &str) -> (Vec<Value>, Vec<Value>) {
    let dir = find_task_dir(&env.contexts(), uuid).expect("task directory exists");
    assert_eq!(
        dir,
        env.contexts().join("completed").join(uuid),
        "finished task not in completed/"
    );
    assert!(!env.contexts().join("running").join(uuid).exists());
    let messages = read_jsonl(&dir.join("messages.jsonl"));
    let seqs: Vec<u64> = messages
        .iter()
        .map(|m| m["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(
        seqs,
        (1..=messages.len() as u64).collect::<Vec<_>>(),
        "messages.jsonl seq has gaps"
    );
    for m in &messages {
        assert!(
            m["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
            "timestamp not RFC 3339 UTC: {m}"
        );
        assert!(m["tokens"].as_u64().is_some(), "{m}");
    }
    let current = read_jsonl(&dir.join("current.jsonl"));
    assert_eq!(current[0]["role"], "system");
    assert_eq!(current[1]["role"], "user");
    if dir.join("tools.jsonl").exists() {
        read_jsonl(&dir.join("tools.jsonl"));
    }
    let meta = read_json(&dir.join("metadata.json"));
    assert_eq!(meta["uuid"], uuid);
    assert_eq!(meta["config"]["model"], "fake-model");
    assert_eq!(meta["config"]["llm_provider"], "openai");
    assert_eq!(meta["config"]["context_length"], 8192);
    assert_eq!(meta["task_key"]["task_source"], "local");
    assert!(meta["process_id"].as_u64().is_some() && meta["hostname"].as_str().is_some());
    (messages, current)
}

#[test]
fn task_completes_with_exact_counters_and_clean_files() {
    let llm = FakeLlm::start(vec![
        Reply::tool_calls(
            vec![("call_1", "read_text_file", r#"{"path":"src/main.rs"}"#)],
            Some((50, 10)),
        ),
        Reply::text("All done: main.rs prints hello.", Some((80, 5))),
    ]);
    let env = TestEnv::for_llm(&llm, "");
    let uuid = env.submit("Explain src/main.rs");
    run_once(&env, &[]);

    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["llm_call_count"], 2);
    assert_eq!(r["tool_call_count"], 1);
    assert_eq!(r["total_tokens"], 60 + 85);
    assert_eq!(r["compression_count"], 0);
    assert_eq!(r["error_message"], Value::Null);
    assert_eq!(r["model"], "fake-model");
    assert!(r["started_at"].is_string() && r["completed_at"].is_string());

    let (messages, current) = check_finished_dir(&env, &uuid);
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
    assert_eq!(messages[1]["content"], "Explain src/main.rs");
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(messages[3]["tool_call_id"], "call_1");
    assert_eq!(messages[3]["tool_name"], "read_text_file");
    assert_eq!(
        messages[3]["content"],
        r#"error: no such tool "read_text_file" (no tools are configured)"#
    );
    assert_eq!(current.len(), 5);
    assert_eq!(current[3]["tool_call_id"], "call_1");
    let dir = env.contexts().join("completed").join(&uuid);
    assert!(
        !dir.join("request.json").exists(),
        "request.json left behind"
    );
    assert!(
        !dir.join("response.json").exists(),
        "response.json left behind"
    );
    let tools = read_jsonl(&dir.join("tools.jsonl"));
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["seq"], 1);
    assert_eq!(tools[0]["tool"], "read_text_file");
    assert_eq!(tools[0]["status"], "error");
    assert_eq!(tools[0]["args"]["path"], "src/main.rs");
    assert_eq!(tools[0]["tool_call_id"], "call_1");

    // What the server saw: the system prompt first, then the tool result answering call_1.
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(reqs[0].body["model"], "fake-model");
    assert_eq!(reqs[0].messages()[0]["role"], "system");
    let second = reqs[1].messages();
    assert_eq!(second.len(), 4);
    assert_eq!(second[3]["role"], "tool");
    assert_eq!(second[3]["tool_call_id"], "call_1");
    assert!(
        reqs.iter().all(|r| r.header("authorization").is_none()),
        "no key configured, none sent"
    );

    // show prints the final answer as the result.
    let show = env.ctxhost(&["show", &uuid, "--json"]).ok().json();
    assert_eq!(show["result"], "All done: main.rs prints hello.");
    assert_eq!(show["dir_state"], "completed");
    let text = env.ctxhost(&["show", &uuid]).ok().stdout();
    assert!(text.contains("All done: main.rs prints hello."), "{text}");
    assert!(
        text.contains("counters:      2 LLM calls, 1 tool call, 145 tokens, 0 compressions"),
        "{text}"
    );

    let stats = env.ctxhost(&["stats", "--json"]).ok().json();
    assert_eq!(stats["by_status"]["completed"], 1);
    assert_eq!(stats["total"]["total_tokens"], 145);
    assert_eq!(stats["total"]["llm_calls"], 2);
    assert_eq!(stats["by_model"][0]["model"], "fake-model");
}

#[test]
fn tokens_are_estimated_when_the_provider_reports_no_usage() {
    let llm = FakeLlm::start(vec![Reply::text("The answer is 42.", None)]);
    let env = TestEnv::for_llm(&llm, "");
    let uuid = env.submit("What is six times seven?");
    run_once(&env, &[]);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    let (messages, _) = check_finished_dir(&env, &uuid);
    assert_eq!(messages.len(), 3);
    // Estimate = tokens of the context sent (system + user) + tokens of the reply.
    let expected: u64 = messages.iter().map(|m| m["tokens"].as_u64().unwrap()).sum();
    assert!(expected > 0);
    assert_eq!(r["total_tokens"].as_u64().unwrap(), expected);
    let dir = env.contexts().join("completed").join(&uuid);
    assert!(
        !dir.join("tools.jsonl").exists(),
        "no tool call, no tools.jsonl"
    );
    let text = env.ctxhost(&["show", &uuid]).ok().stdout();
    assert!(
        text.contains(&format!(
            "counters:      1 LLM call, 0 tool calls, {expected} tokens, 0 compressions"
        )),
        "{text}"
    );
}

#[test]
fn several_tool_calls_in_one_reply_each_get_an_answer() {
    let llm = FakeLlm::start(vec![
        Reply::tool_calls(
            vec![
                ("a1", "list_directory", r#"{"path":"."}"#),
                ("a2", "grep", "not json"),
            ],
            Some((40, 8)),
        ),
        Reply::text("Nothing to do.", Some((70, 4))),
    ]);
    let env = TestEnv::for_llm(&llm, "");
    let uuid = env.submit("Look around");
    run_once(&env, &[]);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["tool_call_count"], 2);
    assert_eq!(r["total_tokens"], 48 + 74);
    let (messages, _) = check_finished_dir(&env, &uuid);
    let answered: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(answered, ["a1", "a2"]);
    // The strict fake refuses a tool message with a field the chat completions API does not
    // define for it (issue 25 item 10: `name`); the second request carried both results.
    assert_eq!(llm.openai_rejections(), Vec::<String>::new());
    let sent = llm.requests()[1].messages();
    let tool_messages: Vec<&Value> = sent.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tool_messages.len(), 2);
    for m in tool_messages {
        assert!(m.get("name").is_none(), "{m}");
    }
    let tools = read_jsonl(
        &env.contexts()
            .join("completed")
            .join(&uuid)
            .join("tools.jsonl"),
    );
    assert_eq!(
        tools
            .iter()
            .map(|t| t["seq"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(tools[1]["args"], "not json");
}

#[test]
fn persistent_500_fails_the_task_and_keeps_request_and_history() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::status(
        500,
        r#"{"error":{"message":"model overloaded"}}"#,
        &[],
    ));
    let env = TestEnv::for_llm(&llm, "");
    let uuid = env.submit("Do something");
    run_once_failing(&env, &[]);

    let r = env.row(&uuid);
    assert_eq!(r["status"], "failed", "{r}");
    let err = r["error_message"].as_str().unwrap();
    assert!(err.contains("500"), "{err}");
    assert!(err.contains("request.json kept"), "{err}");
    assert_eq!(r["llm_call_count"], 0);
    assert_eq!(r["total_tokens"], 0);
    // 1 attempt + llm.max_retries (2).
    assert_eq!(llm.request_count(), 3);

    let (messages, _) = check_finished_dir(&env, &uuid);
    assert_eq!(messages.len(), 2, "history intact: system + user");
    let dir = env.contexts().join("completed").join(&uuid);
    let request = read_json(&dir.join("request.json"));
    assert_eq!(request["model"], "fake-model");
    assert_eq!(request["messages"][1]["content"], "Do something");
}

#[test]
fn unreadable_responses_fail_with_clear_messages() {
    // One task per kind of bad answer; the handler picks the reply from the task's prompt.
    let llm = FakeLlm::start(vec![]);
    llm.set_handler(|req| {
        Some(match prompt_of(req).as_str() {
            "invalid json" => Reply::raw("{\"choices\": [ this is not json"),
            "no choices" => Reply::raw(r#"{"id":"x","object":"chat.completion","choices":[]}"#),
            "html page" => {
                Reply::raw("<!DOCTYPE html><html><body><h1>Welcome to nginx</h1></body></html>")
            }
            "html 502" => Reply::status(
                502,
                "<html><body><h1>502 Bad Gateway</h1></body></html>",
                &[],
            ),
            other => panic!("unexpected prompt {other:?}"),
        })
    });
    let env = TestEnv::for_llm(&llm, "");
    let cases = ["invalid json", "no choices", "html page", "html 502"];
    let uuids: Vec<String> = cases.iter().map(|c| env.submit(c)).collect();
    run_once_failing(&env, &["--max-parallel", "2"]);

    for (case, uuid) in cases.iter().zip(&uuids) {
        let r = env.row(uuid);
        assert_eq!(r["status"], "failed", "{case}: {r}");
        let err = r["error_message"].as_str().unwrap();
        let lower = err.to_lowercase();
        match *case {
            "invalid json" => assert!(
                lower.contains("json") && err.contains("response could not be read"),
                "{err}"
            ),
            "no choices" => assert!(lower.contains("choices"), "{err}"),
            "html page" => assert!(lower.contains("html"), "{err}"),
            "html 502" => assert!(err.contains("502") && err.contains("Bad Gateway"), "{err}"),
            _ => unreachable!(),
        }
        let (messages, _) = check_finished_dir(&env, uuid);
        assert_eq!(messages.len(), 2, "{case}: history intact");
        let dir = env.contexts().join("completed").join(uuid);
        assert!(
            dir.join("request.json").is_file(),
            "{case}: request.json kept"
        );
        if *case != "html 502" {
            assert!(
                dir.join("response.json").is_file(),
                "{case}: response.json kept"
            );
            assert!(err.contains("response.json kept"), "{err}");
            // A reply that cannot be read is asked for again (issue 11): each answer counts.
            assert_eq!(
                r["llm_call_count"],
                1 + u64::from(ctxhost::agent::MAX_MALFORMED_REPLY_RETRIES),
                "{case}: the provider answered each time it was asked"
            );
        }
    }
}

#[test]
fn step_limit_fails_the_task_after_answering_every_call() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::tool_calls(
        vec![("c", "loop_forever", "{}")],
        Some((10, 1)),
    ));
    let env = TestEnv::for_llm(&llm, "agent:\n  max_steps: 3\n");
    let uuid = env.submit("never ends");
    run_once_failing(&env, &[]);
    let r = env.row(&uuid);
    assert_eq!(r["status"], "failed", "{r}");
    assert!(
        r["error_message"]
            .as_str()
            .unwrap()
            .contains("step limit of 3 reached"),
        "{r}"
    );
    assert_eq!(r["llm_call_count"], 3);
    assert_eq!(r["tool_call_count"], 3);
    assert_eq!(r["total_tokens"], 33);
    let (messages, _) = check_finished_dir(&env, &uuid);
    // system, user, then 3 × (assistant call, tool answer): no call left unanswered.
    assert_eq!(messages.len(), 8);
    assert_eq!(messages.last().unwrap()["role"], "tool");
}

#[test]
fn ten_tasks_on_four_workers_all_complete_with_exact_counters() {
    let llm = FakeLlm::start(vec![]);
    llm.set_handler(|req| {
        Some(if last_is_tool(req) {
            Reply::text(format!("finished {}", prompt_of(req)), Some((30, 5)))
        } else {
            Reply::tool_calls(
                vec![("call_x", "read_text_file", r#"{"path":"a"}"#)],
                Some((20, 5)),
            )
        })
    });
    let env = TestEnv::for_llm(&llm, "");
    let uuids: Vec<String> = (0..10)
        .map(|i| env.submit(&format!("task number {i}")))
        .collect();
    run_once(&env, &["--max-parallel", "4"]);

    let mut pids = BTreeSet::new();
    for (i, uuid) in uuids.iter().enumerate() {
        let r = env.row(uuid);
        assert_eq!(r["status"], "completed", "{r}");
        assert_eq!(r["llm_call_count"], 2, "{r}");
        assert_eq!(r["tool_call_count"], 1, "{r}");
        assert_eq!(r["total_tokens"], 25 + 35, "{r}");
        pids.insert(r["process_id"].as_i64().unwrap());
        check_finished_dir(&env, uuid);
        let show = env.ctxhost(&["show", uuid, "--json"]).ok().json();
        assert_eq!(show["result"], format!("finished task number {i}"));
    }
    assert_eq!(pids.len(), 10, "one process per task");
    assert_eq!(llm.request_count(), 20);
    let stats = env.ctxhost(&["stats", "--json"]).ok().json();
    assert_eq!(stats["by_status"]["completed"], 10);
    assert_eq!(stats["total"]["total_tokens"], 600);
    assert_eq!(stats["total"]["tool_calls"], 10);
}

#[test]
fn a_killed_task_process_fails_its_task_and_harms_no_other() {
    let llm = FakeLlm::start(vec![]);
    llm.set_handler(|req| {
        Some(if prompt_of(req) == "slow" {
            Reply::delay(
                Duration::from_secs(30),
                Reply::text("too late", Some((1, 1))),
            )
        } else {
            Reply::text("quick answer", Some((3, 2)))
        })
    });
    // One crash fails the task (by default a killed task is repaired and run again, see
    // tests/lifecycle.rs and tests/crash_torture.rs).
    let env = TestEnv::for_llm(&llm, "worker:\n  max_crashes: 1\n");
    let slow = env.submit("slow");
    let mut worker = env
        .ctxhost_cmd(&["run", "--once", "--poll-ms", "20", "--max-parallel", "2"])
        .spawn();

    // Wait until the slow task's process is waiting on the LLM, then kill it.
    let mut pid = None;
    assert!(
        wait_until(Duration::from_secs(60), || {
            let r = env.row(&slow);
            pid = r["process_id"].as_i64();
            r["status"] == "running" && llm.requests().iter().any(|q| prompt_of(q) == "slow")
        }),
        "the slow task never started"
    );
    let quick = env.submit("quick");
    let pid = pid.unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());

    let status = worker.wait().unwrap();
    // The worker survived the crash of a child; it exits 1 because a task it ran failed.
    assert_eq!(status.code(), Some(1), "the worker ended with {status}");
    let r = env.row(&slow);
    assert_eq!(r["status"], "failed", "{r}");
    let err = r["error_message"].as_str().unwrap();
    assert!(
        err.contains("signal 9") && err.contains(&pid.to_string()),
        "{err}"
    );
    assert_eq!(r["crash_count"], 1);
    // Status and directory agree.
    assert!(env.contexts().join("completed").join(&slow).is_dir());
    let messages = read_jsonl(
        &env.contexts()
            .join("completed")
            .join(&slow)
            .join("messages.jsonl"),
    );
    assert_eq!(messages.len(), 2);

    let q = env.row(&quick);
    assert_eq!(q["status"], "completed", "{q}");
    assert_eq!(q["total_tokens"], 5);
}

#[test]
fn api_key_comes_from_the_environment_and_is_never_written() {
    let llm = FakeLlm::start(vec![Reply::text("ok", Some((1, 1)))]);
    let mut env = TestEnv::new();
    let yaml = config_yaml(&llm.base_url(), "openai", "")
        .replace("api_key_env: \"\"", "api_key_env: CTXHOST_TEST_KEY");
    env.write_config(&yaml);
    env.set_env("CTXHOST_TEST_KEY", "sk-test-secret-123");
    let uuid = env.submit("hello");
    run_once(&env, &[]);
    assert_eq!(env.row(&uuid)["status"], "completed");
    assert_eq!(
        llm.requests()[0].header("authorization"),
        Some("Bearer sk-test-secret-123")
    );
    assert_no_secret(&env.contexts(), "sk-test-secret-123");
}

#[test]
fn a_missing_api_key_stops_run_before_any_task_naming_the_variable() {
    let llm = FakeLlm::start(vec![]);
    let env = TestEnv::new();
    let yaml = config_yaml(&llm.base_url(), "openai", "")
        .replace("api_key_env: \"\"", "api_key_env: CTXHOST_UNSET_KEY_VAR");
    env.write_config(&yaml);
    let uuid = env.submit("hello");
    // `run` checks the key before starting any task process: exit 2, the task untouched.
    let out = env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    assert_eq!(out.code(), Some(2), "{}", out.stderr());
    let err = out.stderr();
    assert!(
        err.contains("llm.api_key_env") && err.contains("CTXHOST_UNSET_KEY_VAR"),
        "{err}"
    );
    assert_eq!(env.row(&uuid)["status"], "queued");
    assert_eq!(llm.request_count(), 0);

    // A task process started some other way still fails the task naming the variable.
    env.ctxhost(&["task-exec", &uuid]).fails();
    let r = env.row(&uuid);
    assert_eq!(r["status"], "failed");
    let err = r["error_message"].as_str().unwrap();
    assert!(
        err.contains("llm.api_key_env") && err.contains("CTXHOST_UNSET_KEY_VAR"),
        "{err}"
    );
    assert_eq!(llm.request_count(), 0);
    assert!(env.contexts().join("completed").join(&uuid).is_dir());
}

/// No file under `dir` contains `secret`.
fn assert_no_secret(dir: &Path, secret: &str) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            assert_no_secret(&p, secret);
        } else {
            let bytes = std::fs::read(&p).unwrap();
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{} holds the API key",
                p.display()
            );
        }
    }
}

// The tests above that touch the task store, once more on PostgreSQL.
crate::support::store::postgres_variants!(
    task_completes_with_exact_counters_and_clean_files,
    tokens_are_estimated_when_the_provider_reports_no_usage,
    several_tool_calls_in_one_reply_each_get_an_answer,
    persistent_500_fails_the_task_and_keeps_request_and_history,
    unreadable_responses_fail_with_clear_messages,
    step_limit_fails_the_task_after_answering_every_call,
    ten_tasks_on_four_workers_all_complete_with_exact_counters,
    a_killed_task_process_fails_its_task_and_harms_no_other,
    api_key_comes_from_the_environment_and_is_never_written,
    a_missing_api_key_stops_run_before_any_task_naming_the_variable,
);

/// A reply whose `usage` holds counts that are not token counts (negative, fractional, text)
/// is used: the bad counts count as 0 with a warning naming them; an OpenAI reply whose
/// `usage` is not an object, and an Ollama reply with a negative `eval_count`, alike.
#[test]
fn invalid_usage_counts_count_as_zero_and_the_reply_is_used() {
    let reply = |usage: Value| {
        Reply::json(serde_json::json!({
            "choices": [{"message": {"role": "assistant", "content": "Fine answer."},
                         "finish_reason": "stop"}],
            "usage": usage,
        }))
    };
    let llm = FakeLlm::start(vec![
        reply(
            serde_json::json!({"prompt_tokens": 30, "completion_tokens": -1, "total_tokens": 1.5}),
        ),
        reply(serde_json::json!("lots")),
    ]);
    let env = TestEnv::for_llm(&llm, "");
    let first = env.submit("first");
    let out = env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let log = out.stderr();
    assert!(
        log.contains("usage.completion_tokens is -1, usage.total_tokens is 1.5: not a token count, counted as 0"),
        "{log}"
    );
    let r = env.row(&first);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["llm_call_count"], 1);
    // total_tokens invalid (0) as reported: the counts the provider gave are used as they are.
    let second = env.submit("second");
    let out = env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    assert!(
        out.stderr().contains("usage ignored: not a usage object"),
        "{}",
        out.stderr()
    );
    let r = env.row(&second);
    assert_eq!(r["status"], "completed", "{r}");
    assert!(r["total_tokens"].as_u64().unwrap() > 0, "estimated: {r}");

    // Ollama's counts.
    let llm = FakeLlm::start(vec![Reply::json(serde_json::json!({
        "model": "m", "message": {"role": "assistant", "content": "Ollama answer."},
        "done": true, "prompt_eval_count": 12, "eval_count": -3,
    }))]);
    let env = TestEnv::new();
    env.write_config(&config_yaml(&llm.base_url(), "ollama", ""));
    env.ctxhost(&["init"]).ok();
    let uuid = env.submit("third");
    let out = env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    assert!(
        out.stderr()
            .contains("eval_count is -3: not a token count, counted as 0"),
        "{}",
        out.stderr()
    );
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["total_tokens"], 12);

    // Anthropic's counts.
    let llm = FakeLlm::start(vec![Reply::json(serde_json::json!({
        "type": "message", "role": "assistant", "stop_reason": "end_turn",
        "content": [{"type": "text", "text": "Claude answer."}],
        "usage": {"input_tokens": 20, "output_tokens": "many"},
    }))]);
    let env = TestEnv::new();
    env.write_config(&config_yaml(&llm.base_url(), "anthropic", ""));
    env.ctxhost(&["init"]).ok();
    let uuid = env.submit("fourth");
    let out = env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    assert!(
        out.stderr()
            .contains("usage.output_tokens is \"many\": not a token count, counted as 0"),
        "{}",
        out.stderr()
    );
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["total_tokens"], 20);
}

/// Issue 25 item 6: a provider's usage count past i64 (`prompt_tokens: 18446744073709551615`)
/// used to saturate into the row and overflow it into a REAL on the next call, after which
/// `ctxhost tasks` failed for the whole store. Each count of one call is bounded
/// (`ctxhost::runtime::MAX_USAGE_TOKENS`) with a warning; and a counter that is not an integer
/// (a REAL written by an older ctxhost, put in directly here) does not break the listing: the
/// row is listed, the value read as the nearest integer, with a warning naming task and column.
#[test]
fn a_huge_usage_is_bounded_and_a_bad_counter_never_breaks_a_listing() {
    const HUGE: u64 = u64::MAX;
    let max = ctxhost::runtime::MAX_USAGE_TOKENS;
    let usage =
        serde_json::json!({"prompt_tokens": HUGE, "completion_tokens": 5, "total_tokens": HUGE});
    let llm = FakeLlm::start(vec![
        Reply::json(serde_json::json!({
            "choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "read_text_file", "arguments": "{}"}}]},
                "finish_reason": "tool_calls"}],
            "usage": usage,
        })),
        Reply::json(serde_json::json!({
            "choices": [{"message": {"role": "assistant", "content": "Done."},
                         "finish_reason": "stop"}],
            "usage": usage,
        })),
    ]);
    let env = TestEnv::for_llm(&llm, "");
    let uuid = env.submit("count me");
    let out = env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    assert!(
        out.stderr()
            .contains(&format!("the provider's usage reports more than {max} tokens in prompt_tokens, total_tokens for one call")),
        "{}",
        out.stderr()
    );
    let r = env.row(&uuid);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["llm_call_count"], 2);
    assert_eq!(r["total_tokens"].as_u64().unwrap(), 2 * max, "{r}");
    let tasks = env.ctxhost(&["tasks", "--json"]).ok().json();
    assert_eq!(tasks[0]["total_tokens"].as_u64().unwrap(), 2 * max);

    // A REAL in the counter, as the old overflow left it: still listed.
    let other = env.submit("another");
    let c = rusqlite::Connection::open(env.contexts().join("tasks.db")).unwrap();
    c.execute(
        "UPDATE tasks SET total_tokens = 1.8446744073709552e19 WHERE uuid = ?1",
        [&other],
    )
    .unwrap();
    let kind: String = c
        .query_row(
            "SELECT typeof(total_tokens) FROM tasks WHERE uuid = ?1",
            [&other],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kind, "real");
    drop(c);
    let listed = env.ctxhost(&["tasks"]).ok();
    assert!(
        listed.stdout().contains(&other[..8]) && listed.stdout().contains(&uuid[..8]),
        "{}",
        listed.stdout()
    );
    assert!(
        listed.stderr().contains(&format!(
            "task {other}: its counter total_tokens holds the real number 18446744073709552000, not an integer; read as {}",
            i64::MAX
        )),
        "{}",
        listed.stderr()
    );
    let json = env.ctxhost(&["tasks", "--json"]).ok().json();
    let row = json
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["uuid"] == other.as_str())
        .unwrap();
    assert_eq!(row["total_tokens"].as_i64(), Some(i64::MAX));
    assert_eq!(env.row(&other)["status"], "queued");
}
