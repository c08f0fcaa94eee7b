//! `ctxhost plugin try`: one call of each builtin's world on a copy of a context, the LLM
//! answered from canned replies; the report shows what the call returned, the files it wrote,
//! the LLM requests it made and the invariant checks.

use std::path::Path;

use crate::support::TestEnv;

const REPLY: &str = "Summary: read 8 files.";

/// A context of a system prompt, a prompt and 8 rounds of tool call, result and answer.
fn write_context(path: &Path) {
    let mut lines = vec![
        serde_json::json!({"role": "system", "content": "You are a coding agent."}),
        serde_json::json!({"role": "user", "content": "Fix the bug in src/main.rs"}),
    ];
    for i in 0..8 {
        lines.push(
            serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("c{i}"), "type": "function", "function": {"name": "read_text_file",
             "arguments": format!("{{\"path\":\"src/f{i}.rs\"}}")}}]}),
        );
        lines.push(
            serde_json::json!({"role": "tool", "content": "fn x() {}\n".repeat(40),
            "tool_call_id": format!("c{i}"), "tool_name": "read_text_file"}),
        );
        lines.push(serde_json::json!({"role": "assistant", "content": format!("Read file {i}.")}));
    }
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

fn try_builtin(env: &TestEnv, name: &str, extra: &[&str]) -> String {
    let mut args = vec!["plugin", "try", name, "--context", "current.jsonl"];
    args.extend_from_slice(extra);
    env.ctxhost(&args).ok().stdout()
}

/// The number after `llm requests: `.
fn llm_requests(out: &str) -> usize {
    out.lines()
        .find_map(|l| l.strip_prefix("llm requests: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `llm requests:` line in\n{out}"))
}

#[test]
fn plugin_try_runs_one_call_of_each_builtin() {
    let env = TestEnv::new();
    write_context(&env.root().join("current.jsonl"));
    let context_before = std::fs::read(env.root().join("current.jsonl")).unwrap();
    std::fs::write(
        env.root().join("replies.json"),
        serde_json::to_string(&[REPLY]).unwrap(),
    )
    .unwrap();

    let out = try_builtin(
        &env,
        "builtin:llm-summarizer",
        &["--replies", "replies.json"],
    );
    assert!(
        out.starts_with(
            "component builtin:llm-summarizer: world compressor-plugin, WIT 1.0.0; context \
             current.jsonl (26 messages)\ncompress returned: CompressResult { context_file: "
        ),
        "{out}"
    );
    assert!(out.contains(&format!("summary: \"{REPLY}\"")), "{out}");
    assert!(out.contains("files written:\n  "), "{out}");
    assert!(llm_requests(&out) >= 1, "{out}");
    assert!(
        out.contains("  request 1: 2 messages\n    system: \""),
        "{out}"
    );
    assert!(
        out.contains("messages pass the host's invariants") && out.contains("invariants: PASS "),
        "{out}"
    );

    let out = try_builtin(&env, "builtin:openai-chat", &["--reply", REPLY]);
    assert!(
        out.contains(
            "write-request returned: RequestInfo { endpoint_path: \"/v1/chat/completions\""
        ),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "read-response returned: Reply {{ message: ChatMessage {{ role: \"assistant\", content: Some(\"{REPLY}\")"
        )),
        "{out}"
    );
    assert!(out.contains("files written:\n  request.json ("), "{out}");
    assert!(
        !out.contains("response.json"),
        "the host's canned response is not the component's: {out}"
    );
    assert_eq!(llm_requests(&out), 0, "{out}");
    assert!(
        out.contains("invariants: PASS current.jsonl: 26 messages"),
        "{out}"
    );

    let out = try_builtin(&env, "builtin:jsonl-store", &["--reply", REPLY]);
    assert!(
        out.contains("open returned: StoreStats { history_count: 26, current_count: 26"),
        "{out}"
    );
    assert!(
        out.contains("add-message returned: AddedMessage { seq: 27"),
        "{out}"
    );
    assert!(
        out.contains("  current.jsonl (") && out.contains("  messages.jsonl ("),
        "{out}"
    );
    assert!(
        out.contains("invariants: PASS current.jsonl: 27 messages"),
        "{out}"
    );

    let out = try_builtin(&env, "builtin:react", &[]);
    assert!(out.contains("world strategy-plugin"), "{out}");
    assert!(out.contains("start returned: Proceed"), "{out}");
    assert!(
        out.contains("invariants: PASS current.jsonl: 26 messages"),
        "{out}"
    );

    // The given context is only copied.
    assert_eq!(
        std::fs::read(env.root().join("current.jsonl")).unwrap(),
        context_before
    );
}

#[test]
fn plugin_try_names_an_unreadable_context() {
    let env = TestEnv::new();
    std::fs::write(
        env.root().join("bad.jsonl"),
        "{\"role\":\"user\",\"content\":\"hi\"}\nnot json\n",
    )
    .unwrap();
    let out = env.ctxhost(&[
        "plugin",
        "try",
        "builtin:jsonl-store",
        "--context",
        "bad.jsonl",
    ]);
    assert_ne!(out.code(), Some(0));
    assert!(
        out.stderr()
            .contains("--context bad.jsonl: bad.jsonl line 2"),
        "{}",
        out.stderr()
    );
}

#[test]
fn plugin_try_refuses_endless_and_empty_inputs_without_reading_them_whole() {
    let env = TestEnv::new();
    write_context(&env.root().join("current.jsonl"));
    std::fs::write(env.root().join("empty.txt"), "\n\n").unwrap();
    std::fs::write(env.root().join("none.json"), "[]").unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["plugin", "try", "builtin:llm-summarizer"];
        all.extend_from_slice(args);
        let out = env.ctxhost(&all);
        assert_ne!(out.code(), Some(0), "{args:?}");
        out.stderr()
    };
    // An endless file (read whole, it took 7 GB in 5 s) is refused at the limit.
    let err = run(&["--context", "/dev/zero", "--reply", "x"]);
    assert!(
        err.contains("--context /dev/zero: larger than 64 MiB"),
        "{err}"
    );
    let err = run(&["--context", "current.jsonl", "--replies", "/dev/zero"]);
    assert!(
        err.contains("--replies /dev/zero: larger than 16 MiB"),
        "{err}"
    );
    // A --replies file without a reply is an error, not the default reply.
    for file in ["empty.txt", "none.json"] {
        let err = run(&["--context", "current.jsonl", "--replies", file]);
        assert!(
            err.contains(&format!("--replies {file}: no replies in it")),
            "{err}"
        );
    }
}
