//! Never send a context the provider will reject (issue 11, items 4–7), end to end with the
//! `ctxhost` binary against the fake LLM:
//!
//! - the three task directories of `../shared/cases/pairing/` (copied to
//!   `support/fixtures/pairing/`), used as the cases README says: put in `paused/`;
//!   `ctxhost resume` queues each with a warning naming file and line (fsck reports it); run,
//!   the request never holds the broken shape, the repair is recorded in messages.jsonl,
//!   `ctxhost fsck` reports each before and nothing after; an unrepairable context fails the
//!   task naming file and line; an orphan line of messages.jsonl is not copied into current.jsonl;
//! - tool-call arguments that are not JSON (a reply cut at max_tokens);
//! - tool-call ids made up turn after turn (Ollama sends none);
//! - a reply with a lone surrogate escape, an empty answer: asked again, files kept on failure.

use std::fs;
use std::path::{Path, PathBuf};

use ctxhost::invariants::check_messages;
use ctxhost_format::ChatMessage;
use serde_json::Value;

use crate::support::fake_llm::{FakeLlm, RecordedRequest, Reply};
use crate::support::task::TaskBuilder;
use crate::support::{TestEnv, config_yaml, find_task_dir, read_jsonl, repo_root};

fn env_for(llm: &FakeLlm, provider: &str) -> TestEnv {
    let env = TestEnv::new();
    env.write_config(&config_yaml(&llm.base_url(), provider, ""));
    env.ctxhost(&["init"]).ok();
    env
}

fn row(env: &TestEnv, uuid: &str) -> Value {
    env.ctxhost(&["show", uuid, "--json"]).ok().json()["task"].clone()
}

fn run_once(env: &TestEnv) {
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
}

fn submit_and_run(env: &TestEnv, prompt: &str) -> (String, Value, PathBuf) {
    let uuid = env
        .ctxhost(&["submit", "--prompt", prompt])
        .ok()
        .stdout()
        .trim()
        .to_string();
    run_once(env);
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    (uuid.clone(), row(env, &uuid), dir)
}

/// The messages of a request as chat messages (OpenAI shape).
fn messages_of(req: &RecordedRequest) -> Vec<ChatMessage> {
    req.messages()
        .into_iter()
        .map(|m| serde_json::from_value(m).unwrap())
        .collect()
}

fn fixture(case: &str) -> PathBuf {
    repo_root()
        .join("tests/all/support/fixtures/pairing")
        .join(case)
}

/// A paused task whose directory holds the files of pairing case `case` (the cases README:
/// submit, put the files in `paused/{uuid}/`, the row paused as a paused task's is).
fn paused_case(env: &TestEnv, case: &str) -> (String, PathBuf) {
    let tasks = TaskBuilder::new(&env.contexts());
    let uuid = tasks.paused();
    let dir = tasks.dir_of(&uuid);
    for f in ["messages.jsonl", "current.jsonl"] {
        fs::copy(fixture(case).join(f), dir.join(f)).unwrap();
        // Owner-only, as ctxhost writes its files (fsck reports anything looser).
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir.join(f), fs::Permissions::from_mode(0o600)).unwrap();
    }
    (uuid, dir)
}

/// `ctxhost fsck --json` problems of kind `kind` for `file` of task `uuid`: (line, message).
fn fsck_problems(env: &TestEnv, uuid: &str, kind: &str) -> Vec<(Option<u64>, String)> {
    let report = env.ctxhost(&["fsck", "--json"]).json();
    report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == kind && p["uuid"] == uuid)
        .map(|p| {
            (
                p["line"].as_u64(),
                p["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The context-repair notes of messages.jsonl (a `system` line after the first).
fn notes(dir: &Path) -> Vec<String> {
    read_jsonl(&dir.join("messages.jsonl"))
        .iter()
        .filter(|h| h["role"] == "system" && h["seq"].as_u64() > Some(1))
        .map(|h| h["content"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_three_pairing_cases_are_repaired_recorded_and_never_sent() {
    // (case, line fsck names, what the violation says, what the note says)
    let cases = [
        (
            "duplicate_result",
            5,
            "a second tool result for \"call_A\"",
            "line 5: dropped a second result for tool call call_A",
        ),
        (
            "unanswered_middle",
            4,
            "tool call(s) [\"call_X\"] of an earlier assistant message have no result",
            "line 4: answered tool call call_X (read_file) of line 3",
        ),
        (
            "orphan_tool",
            5,
            "tool result for \"call_Z\" answers no tool call",
            "line 5: dropped a tool result for call_Z",
        ),
    ];
    for (case, line, violation, note) in cases {
        let llm = FakeLlm::start(vec![Reply::text("Fixed a.txt.", None)]);
        let env = env_for(&llm, "openai");
        let (uuid, dir) = paused_case(&env, case);

        // fsck reports it, at its line, as something --repair can fix.
        let found = fsck_problems(&env, &uuid, "context-invariant");
        assert_eq!(found.len(), 1, "{case}: {found:?}");
        assert_eq!(found[0].0, Some(line), "{case}: {found:?}");
        assert!(found[0].1.contains(violation), "{case}: {}", found[0].1);

        // `ctxhost resume` queues it, warning about what fsck reports (file and line); the
        // task process repairs it before its first request.
        let resumed = env.ctxhost(&["resume", &uuid]).ok();
        assert!(
            resumed
                .stderr()
                .contains(&format!("current.jsonl:{line}: "))
                && resumed
                    .stderr()
                    .contains("the task repairs it when it starts"),
            "{case}: {}",
            resumed.stderr()
        );
        run_once(&env);
        assert_eq!(row(&env, &uuid)["status"], "completed", "{case}");
        let requests = llm.requests();
        assert_eq!(requests.len(), 1, "{case}");
        let sent = messages_of(&requests[0]);
        check_messages(&sent).unwrap_or_else(|v| panic!("{case}: the request breaks {v}"));
        match case {
            "duplicate_result" => {
                let results: Vec<&ChatMessage> = sent.iter().filter(|m| m.role == "tool").collect();
                assert_eq!(results.len(), 1, "{case}");
                assert_eq!(results[0].content.as_deref(), Some("contents of a.txt"));
            }
            "unanswered_middle" => {
                let roles: Vec<&str> = sent.iter().map(|m| m.role.as_str()).collect();
                assert_eq!(
                    roles,
                    ["system", "user", "assistant", "tool", "user"],
                    "{case}"
                );
                assert_eq!(sent[3].tool_call_id.as_deref(), Some("call_X"));
                assert!(
                    sent[3]
                        .content
                        .as_deref()
                        .unwrap()
                        .contains("no result was recorded")
                );
            }
            _ => {
                assert!(
                    sent.iter()
                        .all(|m| m.content.as_deref() != Some("stray result")),
                    "{case}"
                );
                assert_eq!(sent.len(), 6, "{case}");
            }
        }
        let dir = find_task_dir(&env.contexts(), &uuid).unwrap_or(dir);
        let recorded = notes(&dir);
        assert_eq!(recorded.len(), 1, "{case}: {recorded:?}");
        assert!(
            recorded[0].starts_with("[context repair] current.jsonl: ")
                && recorded[0].contains(note),
            "{case}: {}",
            recorded[0]
        );
        // The history keeps every line it had (append-only) and the seqs run on.
        let history = read_jsonl(&dir.join("messages.jsonl"));
        let seqs: Vec<u64> = history.iter().map(|h| h["seq"].as_u64().unwrap()).collect();
        assert_eq!(
            seqs,
            (1..=history.len() as u64).collect::<Vec<_>>(),
            "{case}"
        );
        let fsck = env.ctxhost(&["fsck"]);
        assert_eq!(fsck.code(), Some(0), "{case}: {}", fsck.stdout());
    }
}

#[test]
fn fsck_repair_fixes_a_pairing_case_without_running_the_task() {
    let llm = FakeLlm::start(vec![]);
    let env = env_for(&llm, "openai");
    let (uuid, dir) = paused_case(&env, "orphan_tool");
    let out = env.ctxhost(&["fsck", "--repair"]);
    assert_eq!(out.code(), Some(0), "{}", out.stdout());
    assert!(
        out.stdout().contains("[context repair]"),
        "{}",
        out.stdout()
    );
    let current = fs::read_to_string(dir.join("current.jsonl")).unwrap();
    assert!(!current.contains("stray result"));
    assert_eq!(notes(&dir).len(), 1);
    assert!(fsck_problems(&env, &uuid, "context-invariant").is_empty());
}

#[test]
fn an_orphan_line_of_messages_jsonl_is_not_copied_into_current_jsonl() {
    // A crash left messages.jsonl one line ahead of current.jsonl, and that line is an orphan
    // result: neither resume nor `fsck --repair` copies it.
    let llm = FakeLlm::start(vec![Reply::text("Done.", None)]);
    let env = env_for(&llm, "openai");
    let (uuid, dir) = paused_case(&env, "orphan_tool");
    let current: Vec<String> = fs::read_to_string(fixture("orphan_tool").join("current.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    // current.jsonl without the orphan and what follows it: it ends with call_A's result.
    fs::write(dir.join("current.jsonl"), current[..4].join("\n") + "\n").unwrap();
    let history = fs::read_to_string(dir.join("messages.jsonl")).unwrap();
    let history: Vec<&str> = history.lines().collect();
    fs::write(dir.join("messages.jsonl"), history[..5].join("\n") + "\n").unwrap();
    env.ctxhost(&["fsck", "--repair"]);
    assert!(
        !fs::read_to_string(dir.join("current.jsonl"))
            .unwrap()
            .contains("call_Z")
    );
    env.ctxhost(&["resume", &uuid]).ok();
    run_once(&env);
    assert_eq!(row(&env, &uuid)["status"], "completed");
    let sent = messages_of(&llm.requests()[0]);
    check_messages(&sent).unwrap();
    assert!(
        sent.iter()
            .all(|m| m.tool_call_id.as_deref() != Some("call_Z"))
    );
}

#[test]
fn an_unrepairable_context_fails_the_task_naming_file_and_line_and_sends_nothing() {
    let llm = FakeLlm::start(vec![]);
    let env = env_for(&llm, "openai");
    let (uuid, dir) = paused_case(&env, "orphan_tool");
    // Two calls of one message sharing an id: which result answers which cannot be told.
    let mut lines: Vec<String> = fs::read_to_string(dir.join("current.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines[2] = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_A","type":"function","function":{"name":"read_file","arguments":"{}"}},{"id":"call_A","type":"function","function":{"name":"read_file","arguments":"{}"}}]}"#.to_string();
    fs::write(dir.join("current.jsonl"), lines.join("\n") + "\n").unwrap();
    // `ctxhost resume` refuses it: the task would fail on it (fsck reports line 3, not
    // fixable) ...
    let refused = env.ctxhost(&["resume", &uuid]).fails();
    assert_eq!(refused.code(), Some(1));
    assert!(
        refused.stderr().contains("current.jsonl:3: ")
            && refused.stderr().contains("problem(s) it would fail on"),
        "{}",
        refused.stderr()
    );
    // ... and queued all the same (no gate: a crashed task is requeued without one), it fails
    // before sending anything.
    TaskBuilder::new(&env.contexts()).requeue(&uuid);
    run_once(&env);
    let row = row(&env, &uuid);
    assert_eq!(row["status"], "failed");
    let error = row["error_message"].as_str().unwrap();
    assert!(error.contains("current.jsonl:3"), "{error}");
    assert!(error.contains("duplicate tool call id"), "{error}");
    assert_eq!(llm.request_count(), 0);
}

#[test]
fn tool_call_arguments_cut_by_max_tokens_get_an_error_result_and_valid_json_goes_back() {
    let cut = r#"{"path": "src/main.rs", "content": "fn main() {\n    println!(\"hel"#;
    let llm = FakeLlm::start(vec![
        Reply::tool_calls(vec![("call_w", "write_file", cut)], None),
        Reply::text("I will write it in parts.", None),
    ]);
    let env = env_for(&llm, "openai");
    let (uuid, row, dir) = submit_and_run(&env, "Write src/main.rs.");
    assert_eq!(row["status"], "completed", "{row}");
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let sent = messages_of(&requests[1]);
    check_messages(&sent).unwrap();
    let call = sent.iter().find(|m| !m.calls().is_empty()).unwrap();
    assert_eq!(call.calls()[0].function.arguments, "{}");
    let result = sent.iter().find(|m| m.role == "tool").unwrap();
    let text = result.content.as_deref().unwrap();
    assert!(
        text.contains("not valid JSON")
            && text.contains("output token limit")
            && text.contains("the call was not made"),
        "{text}"
    );
    // The original stays in messages.jsonl; the repair is noted there; tools.jsonl has the
    // call as an error with the text it came with.
    let history = read_jsonl(&dir.join("messages.jsonl"));
    let original = history.iter().find(|h| h["tool_calls"].is_array()).unwrap();
    assert_eq!(original["tool_calls"][0]["function"]["arguments"], cut);
    let recorded = notes(&dir);
    assert_eq!(recorded.len(), 1);
    assert!(
        recorded[0].contains("not valid JSON") && recorded[0].contains("call_w"),
        "{}",
        recorded[0]
    );
    let tools = read_jsonl(&dir.join("tools.jsonl"));
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["status"], "error");
    assert_eq!(tools[0]["args"], cut);
    assert_eq!(env.ctxhost(&["fsck"]).code(), Some(0));
    let _ = uuid;
}

#[test]
fn made_up_tool_call_ids_are_unique_in_the_conversation() {
    // Ollama sends no ids: the format makes up `call_1` for every reply.
    let llm = FakeLlm::start(vec![
        Reply::tool_calls(vec![("", "list_directory", r#"{"path":"."}"#)], None),
        Reply::tool_calls(vec![("", "list_directory", r#"{"path":"src"}"#)], None),
        Reply::tool_calls(
            vec![
                ("", "read_text_file", r#"{"path":"a"}"#),
                ("", "read_text_file", r#"{"path":"b"}"#),
            ],
            None,
        ),
        Reply::text("Done.", None),
    ]);
    let env = env_for(&llm, "ollama");
    let (_, row, dir) = submit_and_run(&env, "Look around.");
    assert_eq!(row["status"], "completed", "{row}");
    let history = read_jsonl(&dir.join("messages.jsonl"));
    let ids: Vec<String> = history
        .iter()
        .flat_map(|h| h["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 4);
    let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), 4, "ids repeat: {ids:?}");
    // Every result answers its own call.
    let answered: Vec<String> = history
        .iter()
        .filter(|h| h["role"] == "tool")
        .map(|h| h["tool_call_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(answered, ids);
    let current: Vec<ChatMessage> = read_jsonl(&dir.join("current.jsonl"))
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    check_messages(&current).unwrap();
}

/// An OpenAI reply body whose content holds a lone surrogate escape (not a Unicode scalar).
const LONE_SURROGATE: &str = r#"{"id":"x","object":"chat.completion","model":"fake-model","choices":[{"index":0,"message":{"role":"assistant","content":"half an emoji: \ud83d"},"finish_reason":"stop"}]}"#;

#[test]
fn a_malformed_or_empty_reply_is_asked_for_again() {
    for (what, bad) in [
        ("lone surrogate", Reply::raw(LONE_SURROGATE)),
        ("empty answer", Reply::text("", Some((40, 0)))),
    ] {
        let llm = FakeLlm::start(vec![bad, Reply::text("Done.", Some((40, 2)))]);
        let env = env_for(&llm, "openai");
        let (_, row, dir) = submit_and_run(&env, "Say done.");
        assert_eq!(row["status"], "completed", "{what}: {row}");
        assert_eq!(row["llm_call_count"], 2, "{what}: both calls counted");
        assert_eq!(llm.request_count(), 2, "{what}");
        for f in ["request.json", "response.json"] {
            assert!(!dir.join(f).exists(), "{what}: {f} left behind");
        }
    }
}

#[test]
fn a_reply_that_stays_malformed_fails_the_task_keeping_request_and_response() {
    // The raw body is one JSON body (kept as response.json); the empty answer is streamed
    // (llm.stream is on by default: its raw stream is kept as reply.stream).
    for (what, bad, says, kept) in [
        (
            "lone surrogate",
            Reply::raw(LONE_SURROGATE),
            "the response could not be read",
            "response.json",
        ),
        (
            "empty answer",
            Reply::text("  ", None),
            "empty answer",
            "reply.stream",
        ),
    ] {
        let llm = FakeLlm::start(vec![]);
        llm.set_default(bad);
        let env = env_for(&llm, "openai");
        let (_, row, dir) = submit_and_run(&env, "Say done.");
        assert_eq!(row["status"], "failed", "{what}: {row}");
        let error = row["error_message"].as_str().unwrap();
        assert!(
            error.contains(says)
                && error.contains("asked 3 time(s)")
                && error.contains("kept in the task directory"),
            "{what}: {error}"
        );
        assert_eq!(llm.request_count(), 3, "{what}: the first ask and two more");
        assert_eq!(row["llm_call_count"], 3, "{what}");
        assert!(dir.join("request.json").is_file(), "{what}");
        assert!(dir.join(kept).is_file(), "{what}: {kept}");
        // A failed task keeps them for debugging: fsck does not call them leftovers.
        assert_eq!(env.ctxhost(&["fsck"]).code(), Some(0), "{what}");
    }
}
