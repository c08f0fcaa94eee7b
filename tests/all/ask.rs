//! `ctxhost ask` (a task run in the foreground, printed as it goes), `show --follow` (a task
//! printed while a worker runs it), the `llm` flags over the config, Ctrl-C, and the smaller
//! terminal conveniences (completions, `tasks` beyond `--limit`, config key suggestions, the
//! prompt size limit), against the fake LLM.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::support::fake_llm::{FakeLlm, RecordedRequest, Reply};
use crate::support::{TestEnv, find_task_dir, read_jsonl, wait_until};

/// Marker of the summary prompt, to tell summary requests from agent-loop requests.
const MARK: &str = "SUMMARISE-THIS";

fn is_summary_request(req: &RecordedRequest) -> bool {
    req.messages()
        .iter()
        .any(|m| m["content"].as_str().is_some_and(|c| c.contains(MARK)))
}

/// A fake LLM: summaries for summary requests; `steps` tool calls with long arguments (the
/// context grows ~200 tokens a step), then "The answer is 42."
fn scripted_llm(steps: usize) -> FakeLlm {
    let llm = FakeLlm::start(vec![]);
    let calls = Arc::new(AtomicUsize::new(0));
    llm.set_handler(move |req| {
        if is_summary_request(req) {
            return Some(Reply::text("summary: files were read.", Some((300, 12))));
        }
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n > steps {
            return Some(Reply::text("The answer is 42.", Some((400, 3))));
        }
        Some(Reply::read_file_step(n))
    });
    llm
}

/// A config whose small window (1,500 tokens, threshold 0.5) the scripted task crosses (no
/// built-in tools: their definitions would take a third of it).
fn compressing_config(base_url: &str) -> String {
    format!(
        "context_storage:\n  base_dir: ./contexts\n  compression_threshold: 0.5\n  keep_recent_messages: 3\n  \
         summary_prompt: \"{MARK}\\n{{messages}}\"\n\
         llm:\n  provider: openai\n  base_url: \"{base_url}\"\n  model: fake-model\n  api_key_env: \"\"\n  \
         context_length: 1500\n  max_output_tokens: 200\n  timeout_secs: 20\n  max_retries: 1\n  max_backoff_secs: 1\n\
         plugins:\n  compressor: builtin:llm-summarizer\ntools:\n  builtin: false\n"
    )
}

/// The UUID `ask` printed last (`task UUID`).
fn printed_uuid(stdout: &str) -> String {
    stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("task "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .unwrap_or_else(|| panic!("no `task UUID` line in:\n{stdout}"))
}

#[test]
fn ask_prints_replies_tool_calls_compressions_and_the_answer_of_an_ordinary_task() {
    let llm = scripted_llm(6);
    let env = TestEnv::new();
    env.write_config(&compressing_config(&llm.base_url()));
    let out = env.ctxhost(&["ask", "Read every file and report."]).ok();
    let stdout = out.stdout();
    // The tool call with its arguments, and a bounded view of its result.
    assert!(
        stdout.contains("tool call: read_text_file {\"note\":\"xxxx"),
        "{stdout}"
    );
    assert!(stdout.contains("  error ("), "{stdout}");
    assert!(
        stdout.contains("│ error: no such tool \"read_text_file\""),
        "{stdout}"
    );
    // A compression line with the token counts and the summary's id.
    let compression = stdout
        .lines()
        .find(|l| l.starts_with("compression: context "))
        .unwrap_or_else(|| panic!("no compression line:\n{stdout}"));
    assert!(
        compression.contains(" → ") && compression.ends_with(", summary 1"),
        "{compression}"
    );
    // The answer, the counters and the UUID at the end: the answer as it streamed (llm.stream
    // is on by default), or under `answer:` when the reply was whole before `ask` looked.
    assert!(
        stdout.contains("answer:\nThe answer is 42.\n")
            || stdout.contains("The answer is 42.\ncompleted in "),
        "{stdout}"
    );
    let uuid = printed_uuid(&stdout);
    let row = env.row(&uuid);
    let counters = format!(
        "{} LLM calls, 6 tool calls, {} tokens, {} compression",
        row["llm_call_count"],
        crate_thousands(row["total_tokens"].as_i64().unwrap()),
        row["compression_count"]
    );
    assert!(stdout.contains(&counters), "{counters} in:\n{stdout}");
    assert!(stdout.contains("completed in "), "{stdout}");
    // The answer is printed once.
    assert_eq!(stdout.matches("The answer is 42.").count(), 1, "{stdout}");

    // The task is one like any other: its row and files.
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(row["tool_call_count"], 6);
    assert!(row["compression_count"].as_i64().unwrap() >= 1, "{row}");
    assert_eq!(row["task_source"], "local");
    assert_eq!(row["model"], "fake-model");
    assert!(
        row["process_id"].as_i64().is_some() && row["worker_id"].is_string(),
        "{row}"
    );
    let dir = env.contexts().join("completed").join(&uuid);
    let messages = read_jsonl(&dir.join("messages.jsonl"));
    assert_eq!(messages[1]["content"], "Read every file and report.");
    assert_eq!(
        messages.last().unwrap()["content"],
        "The answer is 42.",
        "{messages:?}"
    );
    assert_eq!(read_jsonl(&dir.join("tools.jsonl")).len(), 6);
    assert!(!read_jsonl(&dir.join("summaries.jsonl")).is_empty());
    assert!(dir.join("metadata.json").is_file());
    let show = env.ctxhost(&["show", &uuid, "--json"]).ok().json();
    assert_eq!(show["result"], "The answer is 42.");
}

fn crate_thousands(n: i64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[test]
fn ask_json_prints_one_event_per_line() {
    let llm = FakeLlm::start(vec![
        Reply::tool_calls(
            vec![("call_1", "read_text_file", r#"{"path":"a.txt"}"#)],
            Some((50, 10)),
        ),
        Reply::text("Done: a.txt is empty.", Some((80, 5))),
    ]);
    let env = TestEnv::for_llm(&llm, "");
    let out = env.ctxhost(&["ask", "--json", "What is in a.txt?"]).ok();
    let events: Vec<Value> = out
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"task"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"end"), "{kinds:?}");
    let call = events.iter().find(|e| e["event"] == "tool_call").unwrap();
    assert_eq!(call["name"], "read_text_file");
    assert_eq!(call["arguments"], r#"{"path":"a.txt"}"#);
    let result = events.iter().find(|e| e["event"] == "tool_result").unwrap();
    assert_eq!(result["id"], "call_1");
    assert_eq!(result["status"], "error");
    let reply = events.iter().find(|e| e["event"] == "reply").unwrap();
    assert_eq!(reply["text"], "Done: a.txt is empty.");
    assert_eq!(reply["final"], true);
    let end = events.last().unwrap();
    assert_eq!(end["status"], "completed");
    assert_eq!(end["answer"], "Done: a.txt is empty.");
    assert_eq!(end["llm_calls"], 2);
    assert_eq!(end["tool_calls"], 1);
    assert_eq!(end["tokens"], 145);
    assert_eq!(
        env.row(end["uuid"].as_str().unwrap())["status"],
        "completed"
    );
}

#[test]
fn ask_runs_on_the_defaults_when_flags_name_the_model() {
    let llm = FakeLlm::start(vec![Reply::text("Hello from the flags.", Some((10, 2)))]);
    let env = TestEnv::new();
    // No config.yaml at all.
    let url = llm.base_url();
    let out = env
        .ctxhost(&[
            "ask",
            "--provider",
            "llamacpp",
            "--base-url",
            &url,
            "--model",
            "tiny",
            "--context-length",
            "4096",
            "Say hello",
        ])
        .ok();
    let stdout = out.stdout();
    assert!(stdout.contains("Hello from the flags."), "{stdout}");
    let uuid = printed_uuid(&stdout);
    let row = env.row(&uuid);
    assert_eq!(
        (&row["llm_provider"], &row["model"], &row["context_length"]),
        (
            &Value::from("llamacpp"),
            &Value::from("tiny"),
            &Value::from(4096)
        )
    );
    assert_eq!(llm.requests()[0].body["model"], "tiny");
    assert!(!env.config_path().exists());

    // A bad value is a usage error naming the key; nothing is queued.
    let bad = env
        .ctxhost(&["ask", "--base-url", "ftp://x", "Say hello"])
        .fails();
    assert_eq!(bad.code(), Some(2));
    assert!(bad.stderr().contains("llm.base_url"), "{}", bad.stderr());
}

#[test]
fn ask_says_so_when_its_task_process_cannot_start_the_task() {
    let llm = FakeLlm::start(vec![]);
    let mut env = TestEnv::for_llm(&llm, "");
    env.set_env(ctxhost::failpoint::FAILPOINT_ENV, "task-exec:exit");
    let out = env.ctxhost(&["ask", "Never runs"]).fails();
    assert_eq!(out.code(), Some(1));
    let e = out.stderr();
    assert!(
        e.contains("the task process exited (exit status 3) before it started task"),
        "{e}"
    );
    // The first line names the task.
    let uuid = printed_uuid(&out.stdout());
    assert_eq!(env.row(&uuid)["status"], "queued");
    assert_eq!(llm.request_count(), 0);
}

#[test]
fn ask_follows_its_task_when_a_worker_claims_it_first() {
    let llm = FakeLlm::start(vec![]);
    // Slow: the task still runs under the worker when our late process gives up.
    llm.set_default(Reply::delay(
        Duration::from_secs(4),
        Reply::text("Done by the worker.", Some((10, 2))),
    ));
    let env = TestEnv::for_llm(&llm, "");
    env.ctxhost(&["init"]).ok();
    let mut worker = env.ctxhost_cmd(&["run", "--poll-ms", "20"]).spawn();
    // Our task process is slow to start: the worker claims the task first.
    let mut ask = env.ctxhost_cmd(&["ask", "Who runs me?"]);
    ask.cmd
        .env(ctxhost::failpoint::FAILPOINT_ENV, "task-exec:late");
    let out = ask.cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    // SAFETY: kill with the pid of our own child; SIGTERM ends the worker (nothing runs).
    unsafe { libc::kill(worker.id() as i32, libc::SIGTERM) };
    worker.wait().unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("another process claimed task") && !stderr.contains("died"),
        "{stderr}"
    );
    // The worker's reply is shown once: as it streamed (no `answer:` header then), or under
    // `answer:` when the follower first saw it recorded; which one depends on timing.
    assert_eq!(stdout.matches("Done by the worker.").count(), 1, "{stdout}");
    let uuid = printed_uuid(&stdout);
    assert_eq!(env.row(&uuid)["status"], "completed");
}

#[test]
fn init_writes_a_config_for_a_local_server() {
    let env = TestEnv::new();
    std::fs::remove_file(env.config_path()).ok();
    env.ctxhost(&[
        "init",
        "--provider",
        "llamacpp",
        "--base-url",
        "http://127.0.0.1:8089",
    ])
    .ok();
    let yaml = std::fs::read_to_string(env.config_path()).unwrap();
    assert!(yaml.contains("\n  provider: llamacpp\n"), "{yaml}");
    assert!(
        yaml.contains("\n  base_url: \"http://127.0.0.1:8089\"\n"),
        "{yaml}"
    );
    let config = ctxhost::config::Config::load(&env.config_path()).unwrap();
    assert_eq!(config.llm.provider, ctxhost::config::Provider::Llamacpp);
    assert_eq!(
        config.llm.base_url.as_deref(),
        Some("http://127.0.0.1:8089")
    );
    // An existing config is kept: flags that would be ignored are refused.
    let again = env.ctxhost(&["init", "--provider", "ollama"]).fails();
    assert_eq!(again.code(), Some(2));
    assert!(
        again.stderr().contains("is kept as it is"),
        "{}",
        again.stderr()
    );
}

/// Sends SIGINT to `pid`.
fn interrupt(pid: u32) {
    // SAFETY: kill(2) with a valid signal number has no memory-safety preconditions.
    let r = unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
    assert_eq!(r, 0, "kill SIGINT {pid}");
}

#[test]
fn ctrl_c_pauses_the_task_of_ask_and_it_resumes_to_completion() {
    let llm = FakeLlm::start(vec![
        Reply::delay(
            Duration::from_secs(3),
            Reply::tool_calls(
                vec![("call_1", "read_text_file", r#"{"path":"a.txt"}"#)],
                Some((50, 10)),
            ),
        ),
        Reply::text("Finished after the pause.", Some((80, 5))),
    ]);
    let env = TestEnv::for_llm(&llm, "");
    let mut child = env.ctxhost_cmd(&["ask", "Take your time"]).spawn();
    // Ctrl-C while the slow reply is awaited.
    assert!(
        wait_until(Duration::from_secs(20), || llm.request_count() == 1),
        "the LLM call never started"
    );
    interrupt(child.id());
    let status = child.wait().unwrap();
    let mut stdout = String::new();
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    // Interrupted: the shell's 130, not success (issue 38, item 2).
    assert_eq!(status.code(), Some(130), "{status}: {stdout}\n{stderr}");
    assert!(stderr.contains("pausing…"), "{stderr}");
    assert!(stderr.contains("Ctrl-C again to stop"), "{stderr}");
    let uuid = printed_uuid(&stdout);
    assert!(stdout.contains("paused"), "{stdout}");
    assert!(
        stderr.contains(&format!("ctxhost resume {uuid} && ctxhost run --once")),
        "{stderr}"
    );
    let row = env.row(&uuid);
    assert_eq!(row["status"], "paused", "{row}");
    assert!(
        find_task_dir(&env.contexts(), &uuid)
            .unwrap()
            .starts_with(env.contexts().join("paused"))
    );

    env.ctxhost(&["resume", &uuid]).ok();
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let row = env.row(&uuid);
    assert_eq!(row["status"], "completed", "{row}");
    let show = env.ctxhost(&["show", &uuid, "--json"]).ok().json();
    assert_eq!(show["result"], "Finished after the pause.");
}

#[test]
fn a_second_ctrl_c_stops_the_task_of_ask() {
    let llm = FakeLlm::start(vec![Reply::delay(
        Duration::from_secs(2),
        Reply::tool_calls(
            vec![("call_1", "read_text_file", r#"{"path":"a.txt"}"#)],
            Some((50, 10)),
        ),
    )]);
    // Unstreamed: the first Ctrl-C waits for the reply in flight (a stream gives way at once).
    let env = TestEnv::for_llm_unstreamed(&llm, "");
    let mut child = env
        .ctxhost_cmd(&["ask", "--json", "Take your time"])
        .spawn();
    assert!(
        wait_until(Duration::from_secs(20), || llm.request_count() == 1),
        "the LLM call never started"
    );
    interrupt(child.id());
    std::thread::sleep(Duration::from_millis(300));
    interrupt(child.id());
    let status = child.wait().unwrap();
    let mut stdout = String::new();
    use std::io::Read;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{status}: {stdout}");
    let end: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(end["event"], "end");
    assert_eq!(end["status"], "stopped", "{stdout}");
    assert_eq!(env.row(end["uuid"].as_str().unwrap())["status"], "stopped");
    assert_eq!(llm.request_count(), 1);
}

#[test]
fn show_follow_prints_a_task_a_worker_runs_while_it_runs() {
    let llm = FakeLlm::start(vec![
        Reply::tool_calls(
            vec![("call_1", "read_text_file", r#"{"path":"b.txt"}"#)],
            Some((50, 10)),
        ),
        Reply::delay(
            Duration::from_secs(2),
            Reply::text("Followed to the end.", Some((80, 5))),
        ),
    ]);
    let env = TestEnv::for_llm(&llm, "");
    let uuid = env.submit("Read b.txt");
    let mut worker = env
        .ctxhost_cmd(&["run", "--once", "--poll-ms", "20"])
        .spawn();
    // Start following while the task runs (the second reply is slow).
    assert!(
        wait_until(Duration::from_secs(20), || llm.request_count() >= 2),
        "the task never reached its second call"
    );
    let follow = env.ctxhost(&["show", &uuid[..8], "--follow"]).ok();
    let stdout = follow.stdout();
    assert!(stdout.contains("> Read b.txt"), "{stdout}");
    assert!(
        stdout.contains("tool call: read_text_file {\"path\":\"b.txt\"}"),
        "{stdout}"
    );
    // The answer as it streamed, or under `answer:` when it was whole before the look.
    assert!(
        stdout.contains("answer:\nFollowed to the end.")
            || stdout.contains("Followed to the end.\ncompleted"),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("Followed to the end.").count(),
        1,
        "{stdout}"
    );
    assert!(stdout.contains("completed"), "{stdout}");
    assert!(worker.wait().unwrap().success());
    // It started before the task ended: the row was running when it began.
    let first = stdout.lines().next().unwrap();
    assert!(first.contains("running"), "{first}");
}

#[test]
fn ctrl_c_makes_run_pause_its_running_task_start_no_more_and_exit() {
    // A slow tool call: the pause is honoured before the tool runs.
    let llm = FakeLlm::start(vec![Reply::delay(
        Duration::from_secs(3),
        Reply::tool_calls(
            vec![("call_1", "read_text_file", r#"{"path":"c.txt"}"#)],
            Some((10, 2)),
        ),
    )]);
    let env = TestEnv::for_llm(&llm, "");
    let first = env.submit("Slow one");
    let second = env.submit("Never started");
    let mut worker = env
        .ctxhost_cmd(&["run", "--once", "--max-parallel", "1", "--poll-ms", "20"])
        .spawn();
    assert!(
        wait_until(Duration::from_secs(20), || llm.request_count() == 1),
        "the LLM call never started"
    );
    interrupt(worker.id());
    let status = worker.wait().unwrap();
    let mut stderr = String::new();
    use std::io::Read;
    worker
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("Ctrl-C again to stop them"), "{stderr}");
    assert!(
        stderr.contains(&format!("ctxhost resume {first}")),
        "{stderr}"
    );
    assert_eq!(env.row(&first)["status"], "paused");
    // No new task was taken after the Ctrl-C.
    assert_eq!(env.row(&second)["status"], "queued");
    assert_eq!(llm.request_count(), 1);
}

#[test]
fn completions_tasks_beyond_the_limit_config_key_suggestions_and_the_prompt_limit() {
    let env = TestEnv::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = env.ctxhost(&["completions", shell]).ok().stdout();
        assert!(
            out.contains("ask") && out.contains("--follow"),
            "{shell}: {out}"
        );
    }
    env.ctxhost(&["init"]).ok();
    for i in 0..3 {
        env.submit(&format!("task {i}"));
    }
    let out = env.ctxhost(&["tasks", "--limit", "2"]).ok();
    assert_eq!(out.stdout().lines().count(), 3, "{}", out.stdout());
    assert!(
        out.stderr().contains("… 1 more task (--limit 2 shows 2"),
        "{}",
        out.stderr()
    );
    let all = env.ctxhost(&["tasks", "--limit", "3"]).ok();
    assert!(!all.stderr().contains("more task"), "{}", all.stderr());

    env.write_config("llm:\n  modle: x\n");
    let bad = env.ctxhost(&["tasks"]).fails();
    assert!(
        bad.stderr().contains("did you mean `model`?"),
        "{}",
        bad.stderr()
    );
    env.write_config("");

    let big = env.root().join("big.md");
    std::fs::write(&big, "x".repeat(1024 * 1024 + 5)).unwrap();
    let out = env
        .ctxhost(&["submit", "--prompt-file", big.to_str().unwrap()])
        .fails();
    assert_eq!(out.code(), Some(2));
    let e = out.stderr();
    assert!(
        e.contains("the prompt is 1,048,581 bytes, over the limit of 1,048,576 bytes (1 MiB)"),
        "{e}"
    );
}

// The tests above that touch the task store, once more on PostgreSQL.
crate::support::store::postgres_variants!(
    ask_json_prints_one_event_per_line,
    ctrl_c_pauses_the_task_of_ask_and_it_resumes_to_completion,
    show_follow_prints_a_task_a_worker_runs_while_it_runs,
    completions_tasks_beyond_the_limit_config_key_suggestions_and_the_prompt_limit,
);

/// Issue 38: a failed `ask` prints its error once (it was printed three times: the LLM call's
/// line, the task process's WARN and ERROR logs, and the end's `error:` line).
#[test]
fn a_failed_ask_prints_its_error_once() {
    let port = crate::support::unused_port();
    let env = TestEnv::new();
    env.write_config(
        &crate::support::config_yaml(&format!("http://127.0.0.1:{port}"), "openai", "")
            .replace("max_retries: 2", "max_retries: 0"),
    );
    env.ctxhost(&["init"]).ok();
    let out = env.ctxhost(&["ask", "Say ok"]).fails();
    let printed = format!("{}{}", out.stdout(), out.stderr());
    assert_eq!(
        printed.matches("Connection refused").count(),
        1,
        "{printed}"
    );
    assert!(out.stdout().contains("failed in "), "{printed}");
}
