//! The published JSON Schemas (`docs/schemas/`, draft 2020-12) against what ctxhost writes.
//!
//! One environment runs the representative scenarios — tools over MCP (results, an error, an
//! output cut to `tool-results/`), several compressions, a pause and a resume, a task process
//! killed and repaired, a failing provider — and every file and line of every task directory
//! must match its schema, with every file and line kind seen at least once. (Every other test
//! checks its own task directories too, when its `TestEnv` is dropped: `support::conformance`.)
//! Then `ctxhost fsck` must name lines planted to break the schemas, with file, line and field.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ctxhost::schemas::Schema;
use serde_json::{Value, json};

use crate::support::conformance::check_tree;
use crate::support::fake_llm::{FakeLlm, RecordedRequest, Reply};
use crate::support::task::TaskBuilder;
use crate::support::{TestEnv, config_yaml, find_task_dir, wait_until};

/// Marker of the summary prompt, to tell a compressor's requests from the agent loop's.
const MARK: &str = "SUMMARISE-THIS";

fn is_summary_request(req: &RecordedRequest) -> bool {
    req.messages()
        .iter()
        .any(|m| m["content"].as_str().is_some_and(|c| c.contains(MARK)))
}

/// A sample folder for the filesystem server: a short file and one long enough to be cut.
fn sample_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), "Hello from the sample.\n").unwrap();
    let long: String = (0..300)
        .map(|i| format!("line {i} of a long file\n"))
        .collect();
    std::fs::write(dir.path().join("long.txt"), long).unwrap();
    dir
}

fn env_with_tools_and_compression(llm: &FakeLlm, sample: &Path) -> TestEnv {
    let extra = format!(
        "mcp_servers:\n  fs:\n    command: {:?}\n    args: [{:?}]\n\
         tools:\n  max_tool_output_tokens: 128\n\
         plugins:\n  compressor: builtin:llm-summarizer\n",
        crate::support::filesystem_server_bin()
            .display()
            .to_string(),
        sample.display().to_string()
    );
    let yaml = config_yaml(&llm.base_url(), "openai", &extra)
        .replace(
            "context_storage:\n  base_dir: ./contexts\n",
            &format!(
                "context_storage:\n  base_dir: ./contexts\n  compression_threshold: 0.5\n  \
                 keep_recent_messages: 3\n  summary_prompt: \"{MARK}\\n{{messages}}\"\n"
            ),
        )
        .replace(
            "context_length: 8192",
            // The MCP filesystem server's tool definitions take ~2,700 tokens of every request:
            // the window the messages get is what is left (issue 11).
            "context_length: 4700\n  max_output_tokens: 200",
        );
    let env = TestEnv::new();
    env.write_config(&yaml);
    env.ctxhost(&["init"]).ok();
    env
}

/// A worker (`run --once`) in the background, its log in a file of the test directory.
fn spawn_worker(env: &TestEnv) -> std::process::Child {
    let mut cmd = env.ctxhost_cmd(&["run", "--once", "--poll-ms", "20"]).cmd;
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(env.root().join("worker.log")).unwrap());
    cmd.spawn().unwrap()
}

#[test]
fn every_file_of_the_representative_scenarios_matches_its_schema() {
    let sample = sample_dir();
    let llm = FakeLlm::start(vec![]);
    let env = env_with_tools_and_compression(&llm, sample.path());

    // 1. Tools and compression: a result, an error, a cut output, then calls with long
    //    arguments until the context has been compressed several times.
    let steps = Arc::new(AtomicUsize::new(0));
    let s = steps.clone();
    llm.set_handler(move |req| {
        if is_summary_request(req) {
            return Some(Reply::text(
                "Summary: the agent read hello.txt and long.txt.",
                Some((300, 12)),
            ));
        }
        let n = s.fetch_add(1, Ordering::SeqCst) + 1;
        let call = |path: &str, note: usize| {
            let args = json!({"path": path, "note": "x".repeat(note)}).to_string();
            Reply::tool_calls(
                vec![(&format!("call_{n}"), "read_text_file", &args)],
                Some((400, 50)),
            )
        };
        Some(match n {
            1 => call("hello.txt", 0),
            2 => call("missing.txt", 0),
            3 => call("long.txt", 0),
            4..=12 => call("hello.txt", 900),
            _ => Reply::text("All files read.", Some((500, 5))),
        })
    });
    let tools_task = env.submit("Read the files.");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let r = env.row(&tools_task);
    assert_eq!(r["status"], "completed", "{r}");
    assert!(r["compression_count"].as_u64().unwrap() >= 2, "{r}");

    // 2. Pause while a call is in flight, resume, finish.
    llm.set_handler(|req| {
        let answered = req.messages().last().is_some_and(|m| m["role"] == "tool");
        Some(if answered {
            Reply::text("Done after a pause.", Some((30, 4)))
        } else {
            Reply::delay(
                Duration::from_millis(500),
                Reply::tool_calls(
                    vec![("call_p", "read_text_file", r#"{"path":"hello.txt"}"#)],
                    Some((30, 6)),
                ),
            )
        })
    });
    let paused_task = env.submit("Pause me.");
    let mut worker = spawn_worker(&env);
    assert!(wait_until(Duration::from_secs(60), || env
        .row(&paused_task)["status"]
        == "running"));
    env.ctxhost(&["pause", &paused_task, "--wait", "--timeout", "60"])
        .ok();
    assert!(worker.wait().unwrap().success());
    assert_eq!(env.row(&paused_task)["status"], "paused");
    env.ctxhost(&["resume", &paused_task]).ok();
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let r = env.row(&paused_task);
    assert_eq!(
        (r["status"].as_str(), r["resume_count"].as_u64()),
        (Some("completed"), Some(1)),
        "{r}"
    );

    // 3. A task process killed mid-call: repaired and run again by the worker.
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    llm.set_handler(move |req| {
        let answered = req.messages().last().is_some_and(|m| m["role"] == "tool");
        Some(match (c.fetch_add(1, Ordering::SeqCst), answered) {
            (0, _) => Reply::delay(Duration::from_secs(30), Reply::text("too late", None)),
            (_, false) => Reply::tool_calls(
                vec![("call_k", "read_text_file", r#"{"path":"hello.txt"}"#)],
                Some((20, 5)),
            ),
            (_, true) => Reply::text("Finished after a crash.", Some((25, 5))),
        })
    });
    let crashed_task = env.submit("Crash me.");
    let mut worker = spawn_worker(&env);
    let mut pid = 0;
    assert!(wait_until(Duration::from_secs(60), || {
        let r = env.row(&crashed_task);
        pid = r["process_id"].as_i64().unwrap_or(0);
        r["status"] == "running" && calls.load(Ordering::SeqCst) >= 1
    }));
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(worker.wait().unwrap().success());
    let r = env.row(&crashed_task);
    assert_eq!(
        (r["status"].as_str(), r["crash_count"].as_u64()),
        (Some("completed"), Some(1)),
        "{r}"
    );

    // 4. A provider that keeps failing: the task fails, its request kept for debugging.
    llm.set_handler(|_| Some(Reply::status(500, "upstream down", &[])));
    let failed_task = env.submit("Fail me.");
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).fails();
    assert_eq!(env.row(&failed_task)["status"], "failed");

    // Every file and line matches its schema, and every kind was produced.
    let report = check_tree(&env.contexts());
    assert!(
        report.mismatches.is_empty(),
        "{}",
        report.mismatches.join("\n")
    );
    assert_eq!(report.dirs, 4, "{report:?}");
    let expected: &[(Schema, &[&str])] = &[
        (Schema::Metadata, &[""]),
        (Schema::TaskState, &[""]),
        (Schema::ToolDefinitions, &[""]),
        (
            Schema::Messages,
            &["plain message", "tool call", "tool result", "summary"],
        ),
        (
            Schema::Current,
            &["plain message", "tool call", "tool result"],
        ),
        (Schema::Summaries, &[""]),
        (Schema::Tools, &["success", "error"]),
        (Schema::LlmCalls, &["call", "summary_call", "compression"]),
    ];
    for (schema, kinds) in expected {
        for kind in *kinds {
            assert!(
                report.seen(*schema, kind) > 0,
                "no {schema} {kind:?} was produced: {report:?}"
            );
        }
    }
    // A substantial run, not a handful of lines (100 with the window above).
    assert!(report.lines > 50, "{}", report.summary());
    eprintln!("schema conformance of the scenarios: {}", report.summary());
    let tools_dir = find_task_dir(&env.contexts(), &tools_task).unwrap();
    assert!(
        tools_dir.join("tool-results").is_dir(),
        "a cut output was spilled"
    );

    // fsck, with the schemas built into the binary, agrees.
    let fsck = env.ctxhost(&["fsck", "--json"]).ok().json();
    assert_eq!(fsck["problems"], json!([]), "{fsck}");
}

/// Replace line `n` (1-based) of `path` with `f(line)`.
fn edit_line(path: &Path, n: usize, f: impl FnOnce(Value) -> Value) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let v: Value = serde_json::from_str(&lines[n - 1]).unwrap();
    lines[n - 1] = f(v).to_string();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// Give everything below `dir` (and `dir`) the modes ctxhost creates (0700 folders, 0600 files),
/// so that files this test plants are not also reported as `loose-mode`.
fn owner_only(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = if dir.is_dir() { 0o700 } else { 0o600 };
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap();
    if dir.is_dir() {
        for e in std::fs::read_dir(dir).unwrap() {
            owner_only(&e.unwrap().path());
        }
    }
}

fn edit_json(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

#[test]
fn fsck_names_each_line_that_does_not_match_its_schema() {
    let mut env = TestEnv::new();
    env.expect_nonconforming("it plants lines that break the schemas for fsck to find");
    env.write_config(&config_yaml("http://127.0.0.1:9", "openai", ""));
    env.ctxhost(&["init"]).ok();
    let tasks = TaskBuilder::new(&env.contexts());
    let uuid = tasks.paused();
    let dir = tasks.dir_of(&uuid);
    std::fs::write(
        dir.join("metadata.json"),
        serde_json::to_vec_pretty(&json!({
            "uuid": uuid, "task_key": {"task_source": "local", "owner": null, "repo": null,
            "task_type": null, "task_id": null}, "created_at": "2026-01-02T03:04:05.000Z",
            "process_id": 7, "hostname": "h", "config": {"llm_provider": "openai", "model": "m",
            "context_length": 8192, "compression_threshold": 0.7}, "user": null}))
        .unwrap(),
    )
    .unwrap();
    owner_only(&dir);
    assert_eq!(
        env.ctxhost(&["fsck", "--json"]).ok().json()["problems"],
        json!([]),
        "the task starts sound"
    );

    // A number as text, an unknown field, a missing field, a bad timestamp and a summary id
    // written as a string (no reader takes one: it is a line that breaks its schema).
    edit_line(&dir.join("messages.jsonl"), 1, |mut v| {
        v["tokens"] = json!("12");
        v
    });
    edit_line(&dir.join("current.jsonl"), 2, |mut v| {
        v["name"] = json!("bob");
        v
    });
    edit_json(&dir.join("metadata.json"), |v| {
        v.as_object_mut().unwrap().remove("hostname");
    });
    edit_json(&dir.join("task_state.json"), |v| {
        v["paused_at"] = json!("yesterday")
    });
    let summary = json!({"id": "sum-1", "start_seq": 2, "end_seq": 2, "summary": "s",
        "original_tokens": 10, "summary_tokens": 2, "ratio": 0.2,
        "timestamp": "2026-01-02T03:04:05.000Z"});
    let call = json!({"type": "call", "n": 1, "timestamp": "2026-01-02T03:04:05.000Z",
        "context_tokens": 10, "context_length": 8192, "duration_ms": 3, "status": "fine"});
    std::fs::write(dir.join("summaries.jsonl"), format!("{summary}\n")).unwrap();
    std::fs::write(dir.join("llm_calls.jsonl"), format!("{call}\n")).unwrap();
    std::fs::write(
        dir.join("tools.json"),
        r#"[{"type": "function", "function": {"name": "read file"}}]"#,
    )
    .unwrap();
    owner_only(&dir);

    let out = env.ctxhost(&["fsck", "--json"]).fails().json();
    let problems = out["problems"].as_array().unwrap();
    let found: Vec<(String, String, Option<u64>, String)> = problems
        .iter()
        .map(|p| {
            (
                p["kind"].as_str().unwrap().to_string(),
                Path::new(p["path"].as_str().unwrap())
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
                p["line"].as_u64(),
                p["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expect = |file: &str, line: Option<u64>, message: &str| {
        assert!(
            found.iter().any(|(k, f, l, m)| k == "schema-mismatch"
                && f == file
                && *l == line
                && m == message),
            "no schema-mismatch {file}:{line:?}: {message}\n{found:#?}"
        );
    };
    expect(
        "metadata.json",
        None,
        "does not match docs/schemas/metadata.schema.json: \"hostname\" is a required property",
    );
    expect(
        "task_state.json",
        None,
        "does not match docs/schemas/task_state.schema.json: /paused_at: \"yesterday\" is not a \"date-time\"",
    );
    expect(
        "messages.jsonl",
        Some(1),
        "does not match docs/schemas/messages.schema.json as a plain message line: /tokens: \"12\" is not of type \"integer\"",
    );
    expect(
        "current.jsonl",
        Some(2),
        "does not match docs/schemas/current.schema.json as a plain message line: Additional properties are not allowed ('name' was unexpected)",
    );
    expect(
        "llm_calls.jsonl",
        Some(1),
        "does not match docs/schemas/llm_calls.schema.json as a call line: /status: \"fine\" is not one of \"ok\", \"error\" or \"interrupted\"",
    );
    expect(
        "tools.json",
        None,
        "does not match docs/schemas/tool_definitions.schema.json: /0/function: \"parameters\" is a required property; /0/function/name: \"read file\" does not match \"^[A-Za-z0-9_-]{1,64}$\"",
    );
    let schema_problems = found
        .iter()
        .filter(|(k, ..)| k == "schema-mismatch")
        .count();
    assert!(
        found.iter().any(|(k, f, l, m)| k == "schema-mismatch"
            && f == "summaries.jsonl"
            && *l == Some(1)
            && m.contains("/id: \"sum-1\" is not of type \"integer\"")),
        "{found:#?}"
    );
    assert_eq!(schema_problems, 7, "{found:#?}");
    assert!(
        problems
            .iter()
            .all(|p| p["kind"] != "schema-mismatch" || p["fixable"] == false)
    );

    // The human form names file:line; --repair leaves them all (none is fixable).
    let text = env.ctxhost(&["fsck"]).fails().stdout();
    assert!(
        text.contains("messages.jsonl:1: does not match docs/schemas/messages.schema.json"),
        "{text}"
    );
    let repaired = env.ctxhost(&["fsck", "--repair", "--json"]).fails().json();
    let remaining: Vec<&str> = repaired["remaining"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(remaining, ["schema-mismatch"; 7], "{repaired}");
}

/// fsck knows the reasoning items of an assistant message and `is_error` of a tool result
/// (issue 26): well-formed ones pass; a malformed item is named by file and line, whether it
/// breaks the schema (no `data`) or its `data` is not the JSON text of an item of its type.
#[test]
fn fsck_knows_reasoning_items_and_names_a_malformed_one_by_file_and_line() {
    let mut env = TestEnv::new();
    env.expect_nonconforming("it plants malformed reasoning items for fsck to find");
    env.write_config(&config_yaml("http://127.0.0.1:9", "openai", ""));
    env.ctxhost(&["init"]).ok();
    let tasks = TaskBuilder::new(&env.contexts());
    let uuid = tasks.paused();
    let dir = tasks.dir_of(&uuid);
    let thinking = json!({"provider": "anthropic", "type": "thinking",
        "data": r#"{"type":"thinking","thinking":"Read a.txt.","signature":"c2ln"}"#});
    let content = json!({"provider": "openai-chat", "type": "reasoning_content",
        "data": "\"Then answer.\""});
    let call = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
        "type": "function", "function": {"name": "read_text_file",
        "arguments": "{\"path\":\"a.txt\"}"}}], "reasoning": [thinking, content]});
    let result = json!({"role": "tool", "content": "Error: no such file",
        "tool_call_id": "c1", "tool_name": "read_text_file", "is_error": true});
    let append = |name: &str, lines: &[Value]| {
        let path = dir.join(name);
        let mut text = std::fs::read_to_string(&path).unwrap();
        for l in lines {
            text.push_str(&l.to_string());
            text.push('\n');
        }
        std::fs::write(&path, text).unwrap();
    };
    let history = |seq: u64, m: &Value| {
        let mut h = m.clone();
        h["seq"] = json!(seq);
        h["timestamp"] = json!("2025-01-01T00:00:01.000Z");
        h["tokens"] = json!(12);
        h
    };
    append("messages.jsonl", &[history(3, &call), history(4, &result)]);
    append("current.jsonl", &[call.clone(), result.clone()]);
    owner_only(&dir);
    assert_eq!(
        env.ctxhost(&["fsck", "--json"]).ok().json()["problems"],
        json!([]),
        "well-formed reasoning items and is_error pass"
    );
    // `show` and `show --follow` show the readable reasoning, never the signature.
    for args in [
        vec!["show", uuid.as_str()],
        vec!["show", uuid.as_str(), "--follow"],
    ] {
        let out = env.ctxhost(&args).ok().stdout();
        assert!(out.contains("thinking: Read a.txt."), "{args:?}: {out}");
        assert!(out.contains("thinking: Then answer."), "{args:?}: {out}");
        assert!(!out.contains("c2ln"), "{args:?}: {out}");
    }
    let events = env
        .ctxhost(&["show", uuid.as_str(), "--follow", "--json"])
        .ok()
        .stdout();
    assert!(
        events.contains(
            r#"{"event":"reasoning","seq":3,"label":"anthropic thinking","text":"Read a.txt."}"#
        ),
        "{events}"
    );

    // messages.jsonl line 3: an item without `data`; current.jsonl line 3: `data` cut off;
    // current.jsonl line 4: reasoning on a tool result.
    edit_line(&dir.join("messages.jsonl"), 3, |mut v| {
        v["reasoning"][1].as_object_mut().unwrap().remove("data");
        v
    });
    edit_line(&dir.join("current.jsonl"), 3, |mut v| {
        v["reasoning"][0]["data"] = json!(r#"{"type":"thinking","thinking":"Read a"#);
        v
    });
    edit_line(&dir.join("current.jsonl"), 4, |mut v| {
        v["reasoning"] = json!([content]);
        v
    });
    owner_only(&dir);
    let out = env.ctxhost(&["fsck", "--json"]).fails().json();
    let found: Vec<(String, Option<u64>, String)> = out["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "schema-mismatch")
        .map(|p| {
            (
                Path::new(p["path"].as_str().unwrap())
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
                p["line"].as_u64(),
                p["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let has = |file: &str, line: u64, part: &str| {
        assert!(
            found
                .iter()
                .any(|(f, l, m)| f == file && *l == Some(line) && m.contains(part)),
            "no {file}:{line} containing {part:?}: {found:#?}"
        );
    };
    has("messages.jsonl", 3, "\"data\" is a required property");
    has(
        "current.jsonl",
        3,
        "does not match docs/schemas/current.schema.json: /reasoning/0/data: not JSON text",
    );
    has("current.jsonl", 4, "'reasoning' was unexpected");
    assert_eq!(found.len(), 3, "{found:#?}");
    let text = env.ctxhost(&["fsck"]).fails().stdout();
    assert!(
        text.contains(
            "current.jsonl:3: does not match docs/schemas/current.schema.json: /reasoning/0/data"
        ),
        "{text}"
    );
}
