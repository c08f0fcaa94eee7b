//! Tools over MCP (issue 5): the registry and the task's tool store against the real
//! `@modelcontextprotocol/server-filesystem` (installed at the repository root by `npm ci`) and a
//! small scripted MCP server (node) for crashes, hangs and name clashes; the
//! `builtin:prompted-tools` request format through the runtime; and end to end, the `ctxhost`
//! binary with `mcp_servers` configured against the fake LLM (tests/all/support).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use ctxhost::task::{RecordedCall, ToolStore};
use ctxhost::tools::{
    CallOutcome, McpServerConfig, TOOL_DEFINITIONS_FILE, ToolError, ToolRegistry, ToolsConfig,
};
use ctxhost_format::files::TOOLS as TOOLS_JOURNAL_FILE;
use ctxhost_format::{ToolCall, ToolLine, ToolStatus, estimate_tokens};
use serde_json::{Value, json};

/// A sample directory: hello.txt, src/main.rs, docs/ (empty).
fn sample_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hello.txt"),
        "Hello from the sample directory.\nSecond line.\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(
        dir.path().join("src/main.rs"),
        "fn main() { println!(\"hi\"); }\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("docs")).unwrap();
    dir
}

fn fs_servers(sample: &Path) -> BTreeMap<String, McpServerConfig> {
    BTreeMap::from([(
        "fs".to_string(),
        McpServerConfig {
            command: crate::support::filesystem_server_bin()
                .display()
                .to_string(),
            args: vec![sample.display().to_string()],
            env: BTreeMap::new(),
            cwd: None,
            ..Default::default()
        },
    )])
}

fn config(max_tool_output_tokens: u64) -> ToolsConfig {
    ToolsConfig {
        max_tool_output_tokens,
        call_timeout_secs: 20,
        start_timeout_secs: 30,
        ..ToolsConfig::default()
    }
}

fn tool_lines(task_dir: &Path) -> Vec<ToolLine> {
    std::fs::read_to_string(task_dir.join(TOOLS_JOURNAL_FILE))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("tools.jsonl line {l:?}: {e}")))
        .collect()
}

fn args(v: Value) -> String {
    v.to_string()
}

/// Run tool `name` as the model's call `call_{seq}`.
fn run(
    journal: &mut ToolStore,
    registry: &mut ToolRegistry,
    name: &str,
    arguments: &str,
) -> Result<RecordedCall, ToolError> {
    let call = ToolCall::new(format!("call_{}", journal.next_seq()), name, arguments);
    journal.run(&call, |c| {
        registry.call(&c.function.name, &c.function.arguments)
    })
}

#[test]
fn filesystem_tools_are_listed_and_offered_in_openai_shape() {
    let sample = sample_dir();
    let task = tempfile::tempdir().unwrap();
    let registry = ToolRegistry::start(
        &fs_servers(sample.path()),
        &config(4000),
        &Default::default(),
    )
    .unwrap();
    let names: Vec<&str> = registry.tools().iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"read_text_file"), "{names:?}");
    assert!(names.contains(&"list_directory"), "{names:?}");
    assert!(
        registry
            .tools()
            .iter()
            .all(|t| t.server == "fs" && t.name == t.mcp_name)
    );

    let file = registry
        .write_tools_file(&ctxhost::task_dir::TaskDir::open(task.path()).unwrap())
        .unwrap();
    assert_eq!(file.as_deref(), Some(TOOL_DEFINITIONS_FILE));
    let defs: Value =
        serde_json::from_slice(&std::fs::read(task.path().join(TOOL_DEFINITIONS_FILE)).unwrap())
            .unwrap();
    let defs = defs.as_array().unwrap();
    assert_eq!(defs.len(), names.len());
    let read = defs
        .iter()
        .find(|d| d["function"]["name"] == "read_text_file")
        .unwrap();
    assert_eq!(read["type"], "function");
    assert_eq!(read["function"]["parameters"]["type"], "object");
    assert!(
        read["function"]["parameters"]["properties"]["path"].is_object(),
        "{read}"
    );
    assert!(!read["function"]["description"].as_str().unwrap().is_empty());
}

#[test]
fn calls_return_results_and_land_in_tools_jsonl() {
    let sample = sample_dir();
    let task = tempfile::tempdir().unwrap();
    let mut registry = ToolRegistry::start(
        &fs_servers(sample.path()),
        &config(4000),
        &Default::default(),
    )
    .unwrap();
    let mut journal = ToolStore::open(
        &ctxhost::task_dir::TaskDir::open(task.path()).unwrap(),
        4000,
    )
    .unwrap();

    let hello = sample.path().join("hello.txt").display().to_string();
    let read = run(
        &mut journal,
        &mut registry,
        "read_text_file",
        &args(json!({ "path": hello })),
    )
    .unwrap();
    assert_eq!(read.seq, 1);
    assert_eq!(read.status, ToolStatus::Success);
    assert_eq!(
        read.content,
        "Hello from the sample directory.\nSecond line.\n"
    );
    assert_eq!(read.spilled_to, None);

    let list = run(
        &mut journal,
        &mut registry,
        "list_directory",
        &args(json!({ "path": sample.path().display().to_string() })),
    )
    .unwrap();
    assert_eq!(list.seq, 2);
    assert_eq!(list.status, ToolStatus::Success);
    for entry in ["[FILE] hello.txt", "[DIR] src", "[DIR] docs"] {
        assert!(
            list.content.contains(entry),
            "{entry} not in {:?}",
            list.content
        );
    }

    let lines = tool_lines(task.path());
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (lines[0].seq, lines[0].tool.as_str(), lines[0].status),
        (1, "read_text_file", ToolStatus::Success)
    );
    assert_eq!(lines[0].args, json!({ "path": hello }));
    assert_eq!(lines[0].tool_call_id.as_deref(), Some("call_1"));
    assert_eq!(lines[0].result.as_deref(), Some(read.content.as_str()));
    assert_eq!(lines[0].error, None);
    assert_eq!(
        (lines[1].seq, lines[1].tool.as_str()),
        (2, "list_directory")
    );
    assert_eq!(lines[1].result.as_deref(), Some(list.content.as_str()));
    for l in &lines {
        assert!(
            chrono::DateTime::parse_from_rfc3339(&l.timestamp).is_ok(),
            "{}",
            l.timestamp
        );
    }

    // The tool message answers the call with its id and name.
    let call = ToolCall::new("call_7", "read_text_file", "{}");
    let msg = read.to_message(&call);
    assert_eq!(
        (
            msg.role.as_str(),
            msg.tool_call_id.as_deref(),
            msg.tool_name.as_deref()
        ),
        ("tool", Some("call_7"), Some("read_text_file"))
    );
    assert_eq!(msg.content.as_deref(), Some(read.content.as_str()));
}

#[test]
fn unknown_tool_and_tool_errors_are_error_results_and_the_server_keeps_working() {
    let sample = sample_dir();
    let task = tempfile::tempdir().unwrap();
    let mut registry = ToolRegistry::start(
        &fs_servers(sample.path()),
        &config(4000),
        &Default::default(),
    )
    .unwrap();
    let mut journal = ToolStore::open(
        &ctxhost::task_dir::TaskDir::open(task.path()).unwrap(),
        4000,
    )
    .unwrap();

    let unknown = run(&mut journal, &mut registry, "delete_everything", "{}").unwrap();
    assert_eq!(unknown.status, ToolStatus::Error);
    assert!(
        unknown.content.contains("`delete_everything`"),
        "{}",
        unknown.content
    );
    assert!(
        unknown.content.contains("read_text_file"),
        "lists available tools: {}",
        unknown.content
    );

    let missing = sample.path().join("no-such-file.txt").display().to_string();
    let err = run(
        &mut journal,
        &mut registry,
        "read_text_file",
        &args(json!({ "path": missing })),
    )
    .unwrap();
    assert_eq!(err.status, ToolStatus::Error);
    assert!(err.content.starts_with("Error"), "{}", err.content);
    assert!(
        err.content.contains("no-such-file.txt") || err.content.contains("ENOENT"),
        "{}",
        err.content
    );

    let bad_args = run(
        &mut journal,
        &mut registry,
        "read_text_file",
        "[\"not an object\"]",
    )
    .unwrap();
    assert_eq!(bad_args.status, ToolStatus::Error);
    assert!(
        bad_args.content.contains("expected a JSON object"),
        "{}",
        bad_args.content
    );

    let ok = run(
        &mut journal,
        &mut registry,
        "read_text_file",
        &args(json!({ "path": sample.path().join("src/main.rs") })),
    )
    .unwrap();
    assert_eq!(ok.status, ToolStatus::Success);
    assert!(ok.content.contains("println!"));

    let lines = tool_lines(task.path());
    let statuses: Vec<ToolStatus> = lines.iter().map(|l| l.status).collect();
    assert_eq!(
        statuses,
        [
            ToolStatus::Error,
            ToolStatus::Error,
            ToolStatus::Error,
            ToolStatus::Success
        ]
    );
    assert_eq!(lines[0].error.as_deref(), Some(unknown.content.as_str()));
    assert_eq!(lines[1].error.as_deref(), Some(err.content.as_str()));
    assert!(lines[..3].iter().all(|l| l.result.is_none()));
    assert_eq!(
        lines.iter().map(|l| l.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
}

#[test]
fn huge_result_is_cut_on_a_char_boundary_and_spilled_in_full() {
    let sample = sample_dir();
    let task = tempfile::tempdir().unwrap();
    // Odd ASCII prefix, then 2-, 3- and 4-byte characters, so the cut lands next to multi-byte
    // sequences whatever the budget.
    let big: String = format!("x{}", "é上🎉a".repeat(40_000));
    std::fs::write(sample.path().join("big.txt"), &big).unwrap();
    let max_tokens = 500;
    let mut registry = ToolRegistry::start(
        &fs_servers(sample.path()),
        &config(max_tokens),
        &Default::default(),
    )
    .unwrap();
    let mut journal = ToolStore::open(
        &ctxhost::task_dir::TaskDir::open(task.path()).unwrap(),
        max_tokens,
    )
    .unwrap();

    let path = sample.path().join("big.txt").display().to_string();
    let r = run(
        &mut journal,
        &mut registry,
        "read_text_file",
        &args(json!({ "path": path })),
    )
    .unwrap();
    assert_eq!(r.status, ToolStatus::Success);
    assert_eq!(r.spilled_to.as_deref(), Some("tool-results/1.txt"));
    let full = std::fs::read(task.path().join("tool-results/1.txt")).unwrap();
    assert_eq!(
        full,
        big.as_bytes(),
        "the spill file holds the whole output"
    );

    let (kept, note) = r.content.split_once("\n\n[output cut: ").expect("cut note");
    assert!(big.starts_with(kept), "kept text is a prefix of the output");
    assert!(kept.len() > 100 && kept.len() < big.len());
    assert!(
        note.contains("tool-results/1.txt")
            && note.contains(&format!("of {} characters", big.chars().count())),
        "{note}"
    );
    assert!(
        estimate_tokens(&r.content) <= max_tokens,
        "{} tokens",
        estimate_tokens(&r.content)
    );

    let lines = tool_lines(task.path());
    assert_eq!(
        lines[0].result.as_deref(),
        Some(r.content.as_str()),
        "tools.jsonl keeps what the model saw"
    );
}

#[test]
fn a_server_that_cannot_start_gives_a_clear_error() {
    let missing = BTreeMap::from([(
        "broken".to_string(),
        McpServerConfig {
            command: "ctxhost-no-such-mcp-server".into(),
            args: vec!["--dir".into(), "/tmp".into()],
            env: BTreeMap::new(),
            cwd: None,
            ..Default::default()
        },
    )]);
    let err =
        ToolRegistry::start(&missing, &config(4000), &Default::default()).expect_err("must fail");
    assert!(matches!(err, ToolError::Start { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("MCP server `broken`"), "{msg}");
    assert!(
        msg.contains("ctxhost-no-such-mcp-server --dir /tmp"),
        "{msg}"
    );
    assert!(msg.contains("No such file"), "{msg}");

    // Starts, prints to stderr and exits before the handshake.
    let dies = BTreeMap::from([(
        "quitter".to_string(),
        McpServerConfig {
            command: "sh".into(),
            args: vec![
                "-c".into(),
                "echo 'cannot open database' >&2; exit 3".into(),
            ],
            env: BTreeMap::new(),
            cwd: None,
            ..Default::default()
        },
    )]);
    let msg = ToolRegistry::start(&dies, &config(4000), &Default::default())
        .expect_err("must fail")
        .to_string();
    assert!(
        msg.contains("MCP server `quitter`") && msg.contains("failed to start"),
        "{msg}"
    );
    assert!(
        msg.contains("cannot open database"),
        "quotes the server's stderr: {msg}"
    );

    let bad_cwd = BTreeMap::from([(
        "fs".to_string(),
        McpServerConfig {
            command: "sh".into(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: Some("/nonexistent/ctxhost-dir".into()),
            ..Default::default()
        },
    )]);
    let msg = ToolRegistry::start(&bad_cwd, &config(4000), &Default::default())
        .expect_err("must fail")
        .to_string();
    assert!(
        msg.contains("mcp_servers.fs.cwd") && msg.contains("/nonexistent/ctxhost-dir"),
        "{msg}"
    );
}

/// A scripted MCP server (node, newline-delimited JSON-RPC over stdio). Tools: `echo`
/// (returns `text`), `env` (the names of its environment variables), `fail` (an `isError`
/// result), `hang` (never answers), `crash` (writes to stderr and exits 3).
const FAKE_SERVER_JS: &str = r#"
const readline = require('readline');
const rl = readline.createInterface({ input: process.stdin });
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
const tool = (name) => ({ name, description: 'fake ' + name, inputSchema: { type: 'object', properties: { text: { type: 'string' } } } });
rl.on('line', (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return; // notification
  const ok = (result) => send({ jsonrpc: '2.0', id: m.id, result });
  switch (m.method) {
    case 'initialize':
      return ok({ protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'fake', version: '1.0.0' } });
    case 'tools/list':
      return ok({ tools: ['echo', 'env', 'fail', 'hang', 'crash'].map(tool) });
    case 'tools/call': {
      const a = m.params.arguments || {};
      switch (m.params.name) {
        case 'echo': return ok({ content: [{ type: 'text', text: String(a.text) }] });
        case 'env': return ok({ content: [{ type: 'text', text: JSON.stringify(Object.keys(process.env).sort()) }] });
        case 'fail': return ok({ content: [{ type: 'text', text: 'boom: the tool failed' }], isError: true });
        case 'hang': return;
        case 'crash': process.stderr.write('fake server: crashing on purpose\n'); process.exit(3);
      }
      return send({ jsonrpc: '2.0', id: m.id, error: { code: -32602, message: 'unknown tool ' + m.params.name } });
    }
    default:
      return send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'Method not found' } });
  }
});
"#;

fn fake_server(dir: &Path, env: &[(&str, &str)]) -> McpServerConfig {
    let script = dir.join("fake_mcp_server.js");
    std::fs::write(&script, FAKE_SERVER_JS).unwrap();
    McpServerConfig {
        command: "node".into(),
        args: vec![script.display().to_string()],
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        cwd: Some(dir.to_path_buf()),
        ..Default::default()
    }
}

#[test]
fn clashing_tool_names_get_server_prefixes_and_route_to_their_server() {
    let dir = tempfile::tempdir().unwrap();
    let servers = BTreeMap::from([
        ("alpha".to_string(), fake_server(dir.path(), &[])),
        ("beta".to_string(), fake_server(dir.path(), &[])),
        (
            "fs".to_string(),
            fs_servers(dir.path()).remove("fs").unwrap(),
        ),
    ]);
    let mut registry = ToolRegistry::start(&servers, &config(4000), &Default::default()).unwrap();
    let names: Vec<&str> = registry.tools().iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"alpha__echo") && names.contains(&"beta__echo"),
        "{names:?}"
    );
    assert!(
        names.contains(&"read_text_file"),
        "no clash, no prefix: {names:?}"
    );
    assert!(!names.contains(&"echo"));
    let defs = registry.openai_tools();
    let alpha_echo = defs
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["function"]["name"] == "alpha__echo")
        .unwrap();
    assert!(
        alpha_echo["function"]["description"]
            .as_str()
            .unwrap()
            .contains("`alpha`"),
        "{alpha_echo}"
    );

    let out = registry
        .call("beta__echo", r#"{"text":"via beta"}"#)
        .unwrap();
    assert_eq!(out, CallOutcome::Success("via beta".into()));
    match registry.call("echo", "{}").unwrap() {
        CallOutcome::Error(e) => {
            assert!(e.contains("alpha__echo") && e.contains("beta__echo"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn servers_get_only_path_home_and_their_configured_env() {
    let dir = tempfile::tempdir().unwrap();
    let servers = BTreeMap::from([(
        "fake".to_string(),
        fake_server(dir.path(), &[("FAKE_LEVEL", "3")]),
    )]);
    let mut registry = ToolRegistry::start(&servers, &config(4000), &Default::default()).unwrap();
    let CallOutcome::Success(text) = registry.call("env", "").unwrap() else {
        panic!("env tool failed")
    };
    let keys: Vec<String> = serde_json::from_str(&text).unwrap();
    // CTXHOST_PROCESS_GROUP: the mark that finds the server's setsid descendants at a stop.
    let allowed = ["CTXHOST_PROCESS_GROUP", "FAKE_LEVEL", "HOME", "PATH"];
    assert!(
        keys.iter().all(|k| allowed.contains(&k.as_str())),
        "unexpected variables: {keys:?}"
    );
    assert!(
        keys.contains(&"FAKE_LEVEL".to_string()) && keys.contains(&"PATH".to_string()),
        "{keys:?}"
    );
}

#[test]
fn is_error_and_timeouts_are_error_results_a_crash_is_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let task = tempfile::tempdir().unwrap();
    let servers = BTreeMap::from([("fake".to_string(), fake_server(dir.path(), &[]))]);
    let cfg = ToolsConfig {
        call_timeout_secs: 1,
        ..config(4000)
    };
    let mut registry = ToolRegistry::start(&servers, &cfg, &Default::default()).unwrap();
    let mut journal = ToolStore::open(
        &ctxhost::task_dir::TaskDir::open(task.path()).unwrap(),
        4000,
    )
    .unwrap();

    let fail = run(&mut journal, &mut registry, "fail", "{}").unwrap();
    assert_eq!(fail.status, ToolStatus::Error);
    assert_eq!(fail.content, "Error: boom: the tool failed");

    let hang = run(&mut journal, &mut registry, "hang", "{}").unwrap();
    assert_eq!(hang.status, ToolStatus::Error);
    assert!(
        hang.content.contains("did not answer within 1 s"),
        "{}",
        hang.content
    );

    let echo = run(
        &mut journal,
        &mut registry,
        "echo",
        r#"{"text":"still alive"}"#,
    )
    .unwrap();
    assert_eq!(
        (echo.status, echo.content.as_str()),
        (ToolStatus::Success, "still alive")
    );

    let err = run(&mut journal, &mut registry, "crash", "{}").expect_err("a crash ends the task");
    assert!(matches!(err, ToolError::Died { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("MCP server `fake`") && msg.contains("fake_mcp_server.js"),
        "{msg}"
    );
    assert!(msg.contains("crashing on purpose"), "quotes stderr: {msg}");

    // Gone for good: the next call fails the same way, without hanging.
    let again = registry
        .call("echo", r#"{"text":"x"}"#)
        .expect_err("server is gone");
    assert!(matches!(again, ToolError::Died { .. }), "{again:?}");

    let lines = tool_lines(task.path());
    assert_eq!(lines.len(), 4, "the fatal call is recorded too");
    assert_eq!(lines[3].status, ToolStatus::Error);
    assert!(
        lines[3]
            .error
            .as_deref()
            .unwrap()
            .contains("stopped working"),
        "{:?}",
        lines[3].error
    );
    assert!(
        lines[1].duration_ms >= 1000,
        "the hang took the whole timeout: {}",
        lines[1].duration_ms
    );
}

#[test]
fn close_stops_the_servers() {
    let sample = sample_dir();
    let mut registry = ToolRegistry::start(
        &fs_servers(sample.path()),
        &config(4000),
        &Default::default(),
    )
    .unwrap();
    let pids_before = crate::support::filesystem_server_pids(sample.path());
    assert!(!pids_before.is_empty(), "the filesystem server runs");
    registry.close();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !crate::support::filesystem_server_pids(sample.path()).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "server still running after close"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Closing again is harmless; calls after close are errors, not hangs.
    registry.close();
    let err = registry
        .call("read_text_file", "{}")
        .expect_err("no server after close");
    assert!(err.to_string().contains("already shut down"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// builtin:prompted-tools, through the host runtime.

fn prompted_tools(task: &Path) -> ctxhost::runtime::RequestFormat {
    use ctxhost::runtime::{PluginKind, Runtime, RuntimeLimits};
    let runtime = Runtime::new(&task.join(".cache"), RuntimeLimits::default()).unwrap();
    let plugin = runtime
        .load(
            &"builtin:prompted-tools".parse().unwrap(),
            PluginKind::RequestFormat,
        )
        .unwrap();
    runtime.request_format(&plugin, task).unwrap()
}

fn request_config(tools_file: Option<String>) -> ctxhost::runtime::RequestConfig {
    ctxhost::runtime::RequestConfig {
        model: "qwen2.5-coder-0.5b".into(),
        messages_file: "current.jsonl".into(),
        request_file: "request.json".into(),
        tools_file,
        max_output_tokens: Some(256),
        temperature: Some(0.0),
        stream: false,
        stream_usage: false,
        reasoning: None,
    }
}

#[test]
fn prompted_tools_describes_the_real_tools_in_the_system_prompt_and_flattens_history() {
    let sample = sample_dir();
    let task = tempfile::tempdir().unwrap();
    let registry = ToolRegistry::start(
        &fs_servers(sample.path()),
        &config(4000),
        &Default::default(),
    )
    .unwrap();
    let tools_file = registry
        .write_tools_file(&ctxhost::task_dir::TaskDir::open(task.path()).unwrap())
        .unwrap();
    let history = [
        json!({"role":"system","content":"You are a coding agent."}),
        json!({"role":"user","content":"What does hello.txt say?"}),
        json!({"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
            "function":{"name":"read_text_file","arguments":"{\"path\":\"hello.txt\"}"}}]}),
        json!({"role":"tool","content":"Hello from the sample directory.","tool_call_id":"call_1","tool_name":"read_text_file"}),
    ];
    let lines: String = history.iter().map(|m| format!("{m}\n")).collect();
    std::fs::write(task.path().join("current.jsonl"), lines).unwrap();

    let mut format = prompted_tools(task.path());
    let info = format.write_request(&request_config(tools_file)).unwrap();
    assert_eq!(
        (info.endpoint_path.as_str(), info.messages),
        ("/v1/chat/completions", 4)
    );
    let body: Value =
        serde_json::from_slice(&std::fs::read(task.path().join("request.json")).unwrap()).unwrap();
    assert!(body.get("tools").is_none(), "no native tools: {body}");
    assert_eq!(
        (body["model"].as_str(), body["max_tokens"].as_u64()),
        (Some("qwen2.5-coder-0.5b"), Some(256))
    );
    let messages = body["messages"].as_array().unwrap();
    let system = messages[0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("You are a coding agent.\n\n# Tools"),
        "{system}"
    );
    for tool in registry.tools() {
        assert!(
            system.contains(&format!("- {}(", tool.name)),
            "{} missing from {system}",
            tool.name
        );
    }
    assert!(
        system.contains(r#"{"tool": "TOOL_NAME", "arguments": {"#),
        "{system}"
    );
    assert_eq!(
        messages[2],
        json!({"role":"assistant","content":r#"{"tool": "read_text_file", "arguments": {"path":"hello.txt"}}"#})
    );
    assert_eq!(
        messages[3],
        json!({"role":"user","content":format!(
            "Result of read_text_file:\nHello from the sample directory.\n{}",
            ctxhost_format::prompted::RESULT_NUDGE
        )})
    );
    assert!(
        messages
            .iter()
            .all(|m| m.as_object().unwrap().len() == 2 && m["content"].is_string()),
        "{body}"
    );

    // Without tools the system prompt is sent unchanged.
    let mut format = prompted_tools(task.path());
    format.write_request(&request_config(None)).unwrap();
    let body: Value =
        serde_json::from_slice(&std::fs::read(task.path().join("request.json")).unwrap()).unwrap();
    assert_eq!(body["messages"][0]["content"], "You are a coding agent.");
}

/// A chat completion whose assistant content is `text`.
fn completion(text: &str) -> String {
    json!({"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"finish_reason":"stop",
        "message":{"role":"assistant","content":text}}],"usage":{"prompt_tokens":50,"completion_tokens":9,"total_tokens":59}})
    .to_string()
}

#[test]
fn prompted_tools_turns_golden_replies_into_openai_tool_calls() {
    let task = tempfile::tempdir().unwrap();
    let mut format = prompted_tools(task.path());
    // (reply text, expected call (name, arguments), expected content)
    type Case<'a> = (&'a str, Option<(&'a str, &'a str)>, Option<&'a str>);
    let cases: [Case; 4] = [
        (
            r#"{"tool": "read_text_file", "arguments": {"path": "hello.txt"}}"#,
            Some(("read_text_file", r#"{"path":"hello.txt"}"#)),
            None,
        ),
        (
            "```json\n{\"tool\": \"list_directory\", \"arguments\": {\"path\": \".\"}}\n```",
            Some(("list_directory", r#"{"path":"."}"#)),
            None,
        ),
        (
            "{\"tool\": \"read_text_file\", \"arguments\": {\"path\": \"src/main.rs\"}}\nI will read main.rs first.",
            Some(("read_text_file", r#"{"path":"src/main.rs"}"#)),
            Some("I will read main.rs first."),
        ),
        (
            "hello.txt says hello from the sample directory.",
            None,
            Some("hello.txt says hello from the sample directory."),
        ),
    ];
    for (text, call, content) in cases {
        std::fs::write(task.path().join("response.json"), completion(text)).unwrap();
        let reply = format.read_response("response.json", false).unwrap();
        assert_eq!(reply.message.role, "assistant");
        assert_eq!(reply.message.content.as_deref(), content, "{text}");
        assert_eq!(reply.usage.as_ref().map(|u| u.total_tokens), Some(59));
        match call {
            Some((name, arguments)) => {
                assert_eq!(
                    reply.message.calls(),
                    [ToolCall::new("call_1", name, arguments)],
                    "{text}"
                );
                assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
            }
            None => {
                assert_eq!(reply.message.tool_calls, None, "{text}");
                assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// End to end: the ctxhost binary, the fake LLM, the real filesystem server.

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, config_yaml, read_jsonl};

/// `mcp_servers` with the filesystem server over `sample`, plus `extra` YAML.
fn e2e_env(llm: &FakeLlm, sample: &Path, extra: &str) -> TestEnv {
    let yaml = format!(
        "mcp_servers:\n  fs:\n    command: {:?}\n    args: [{:?}]\n{extra}",
        crate::support::filesystem_server_bin()
            .display()
            .to_string(),
        sample.display().to_string()
    );
    let env = TestEnv::new();
    env.write_config(&config_yaml(&llm.base_url(), "openai", &yaml));
    env.ctxhost(&["init"]).ok();
    env
}

/// Submit `prompt`, run the worker until the queue is empty, return the task's uuid and row.
fn run_task(env: &TestEnv, prompt: &str) -> (String, Value) {
    let uuid = env
        .ctxhost(&["submit", "--prompt", prompt])
        .ok()
        .stdout()
        .trim()
        .to_string();
    let run = env.ctxhost(&["run", "--once", "--poll-ms", "20"]);
    let row = env.ctxhost(&["show", &uuid, "--json"]).ok().json()["task"].clone();
    // `run --once` exits 1 when the task failed, 0 otherwise.
    let expected = if row["status"] == "failed" { 1 } else { 0 };
    assert_eq!(run.code(), Some(expected), "{row}\n{}", run.stderr());
    (uuid, row)
}

#[test]
fn e2e_native_tool_calls_reach_the_filesystem_server_with_exact_counters() {
    let sample = sample_dir();
    let s = |p: &str| sample.path().join(p).display().to_string();
    let list_args = json!({ "path": s("") }).to_string();
    let read_args = json!({ "path": s("hello.txt") }).to_string();
    let missing_args = json!({ "path": s("missing.txt") }).to_string();
    let llm = FakeLlm::start(vec![
        Reply::tool_calls(
            vec![
                ("call_a", "list_directory", &list_args),
                ("call_b", "read_text_file", &read_args),
            ],
            Some((100, 20)),
        ),
        Reply::tool_calls(
            vec![
                ("call_c", "delete_everything", "{}"),
                ("call_d", "read_text_file", &missing_args),
            ],
            Some((150, 15)),
        ),
        Reply::text("hello.txt greets the reader.", Some((200, 8))),
    ]);
    let env = e2e_env(&llm, sample.path(), "");
    let (uuid, row) = run_task(&env, "What does hello.txt say?");

    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(row["llm_call_count"], 3);
    assert_eq!(row["tool_call_count"], 4);
    assert_eq!(row["total_tokens"], 120 + 165 + 208);
    assert_eq!(row["error_message"], Value::Null);

    // The model was offered the server's tools, natively.
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .expect("tools in the request")
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        offered.contains(&"read_text_file") && offered.contains(&"list_directory"),
        "{offered:?}"
    );

    let dir = env.contexts().join("completed").join(&uuid);
    let tools = read_jsonl(&dir.join("tools.jsonl"));
    let summary: Vec<(u64, &str, &str, &str)> = tools
        .iter()
        .map(|l| {
            (
                l["seq"].as_u64().unwrap(),
                l["tool"].as_str().unwrap(),
                l["tool_call_id"].as_str().unwrap(),
                l["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (1, "list_directory", "call_a", "success"),
            (2, "read_text_file", "call_b", "success"),
            (3, "delete_everything", "call_c", "error"),
            (4, "read_text_file", "call_d", "error"),
        ]
    );
    assert_eq!(
        tools[1]["result"],
        "Hello from the sample directory.\nSecond line.\n"
    );
    assert_eq!(tools[1]["args"], json!({ "path": s("hello.txt") }));

    // current.jsonl: each tool message answers its call, in order, with what tools.jsonl holds.
    let current = read_jsonl(&dir.join("current.jsonl"));
    let roles: Vec<&str> = current
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "tool",
            "tool",
            "assistant",
            "tool",
            "tool",
            "assistant"
        ]
    );
    let answers: Vec<&Value> = current.iter().filter(|m| m["role"] == "tool").collect();
    for (msg, line) in answers.iter().zip(&tools) {
        assert_eq!(msg["tool_call_id"], line["tool_call_id"]);
        assert_eq!(msg["tool_name"], line["tool"]);
        let recorded = line.get("result").or_else(|| line.get("error")).unwrap();
        assert_eq!(&msg["content"], recorded);
    }
    assert!(
        answers[0]["content"]
            .as_str()
            .unwrap()
            .contains("[FILE] hello.txt")
    );
    let unknown = answers[2]["content"].as_str().unwrap();
    assert!(
        unknown.contains("`delete_everything`") && unknown.contains("read_text_file"),
        "{unknown}"
    );
    assert!(
        answers[3]["content"].as_str().unwrap().starts_with("Error"),
        "{}",
        answers[3]["content"]
    );
    let calls = &current[2]["tool_calls"];
    assert_eq!(
        (calls[0]["id"].as_str(), calls[1]["id"].as_str()),
        (Some("call_a"), Some("call_b"))
    );

    // The second request carried the results back with their ids.
    let second = requests[1].messages();
    let results: Vec<(&str, &str)> = second
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap(),
                m["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        results[1],
        ("call_b", "Hello from the sample directory.\nSecond line.\n")
    );
    assert!(
        dir.join("tools.json").exists(),
        "tool definitions kept with the task"
    );
    assert_no_server_left(sample.path());
}

#[test]
fn e2e_prompted_tools_give_the_same_ids_and_spill_huge_results() {
    let sample = sample_dir();
    let big = "ü".repeat(30_000) + "END";
    std::fs::write(sample.path().join("big.txt"), &big).unwrap();
    let s = |p: &str| sample.path().join(p).display().to_string();
    let llm = FakeLlm::start(vec![
        Reply::text(
            format!(
                "I will read it.\n```json\n{{\"tool\": \"read_text_file\", \"arguments\": {{\"path\": {:?}}}}}\n```",
                s("big.txt")
            ),
            Some((300, 30)),
        ),
        Reply::text(
            json!({"tool": "list_directory", "arguments": {"path": s("")}}).to_string(),
            Some((400, 20)),
        ),
        Reply::text("big.txt is a long run of ü.", Some((500, 10))),
    ]);
    let extra = "plugins:\n  request_format: builtin:prompted-tools\ntools:\n  max_tool_output_tokens: 300\n";
    let env = e2e_env(&llm, sample.path(), extra);
    let (uuid, row) = run_task(&env, "What is in big.txt?");

    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(row["llm_call_count"], 3);
    assert_eq!(row["tool_call_count"], 2);
    assert_eq!(row["total_tokens"], 330 + 420 + 510);

    let dir = env.contexts().join("completed").join(&uuid);
    let current = read_jsonl(&dir.join("current.jsonl"));
    // OpenAI-shaped calls in current.jsonl, as with native tools.
    assert_eq!(current[2]["content"], "I will read it.");
    assert_eq!(
        current[2]["tool_calls"],
        json!([{"id": "call_1", "type": "function",
                "function": {"name": "read_text_file", "arguments": json!({"path": s("big.txt")}).to_string()}}])
    );
    assert_eq!(
        (
            current[3]["role"].as_str(),
            current[3]["tool_call_id"].as_str()
        ),
        (Some("tool"), Some("call_1"))
    );
    assert_eq!(current[4]["content"], Value::Null);
    // The format makes up `call_1` again for the second call: the host renames it so that ids
    // are unique in the whole conversation (step 2's first call: `call_5_1`, see invariants::ids).
    let second_id = current[4]["tool_calls"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(second_id, "call_1");
    assert!(second_id.starts_with("call_"), "{second_id}");
    assert_eq!(
        current[4]["tool_calls"][0]["function"]["name"],
        "list_directory"
    );
    assert_eq!(current[5]["tool_call_id"], second_id.as_str());
    assert_eq!(current[6]["content"], "big.txt is a long run of ü.");

    // The huge result: cut in the context, whole in tool-results/1.txt.
    let cut = current[3]["content"].as_str().unwrap();
    let (kept, note) = cut.split_once("\n\n[output cut: ").expect("cut note");
    assert!(big.starts_with(kept) && kept.len() < big.len());
    assert!(note.contains("tool-results/1.txt"), "{note}");
    assert!(estimate_tokens(cut) <= 300);
    assert_eq!(
        std::fs::read_to_string(dir.join("tool-results/1.txt")).unwrap(),
        big
    );

    // What the model saw: no native tools, the tools in the system prompt, history as text.
    let requests = llm.requests();
    assert!(requests.iter().all(|r| r.body.get("tools").is_none()));
    let third = requests[2].messages();
    assert!(
        third[0]["content"]
            .as_str()
            .unwrap()
            .contains("- read_text_file("),
        "{}",
        third[0]["content"]
    );
    assert_eq!(third[2]["role"], "assistant");
    assert_eq!(
        third[2]["content"],
        format!(
            "I will read it.\n{{\"tool\": \"read_text_file\", \"arguments\": {}}}",
            json!({"path": s("big.txt")})
        )
    );
    assert_eq!(third[3]["role"], "user");
    assert!(
        third[3]["content"]
            .as_str()
            .unwrap()
            .starts_with("Result of read_text_file:\nüü")
    );
    assert!(
        third[5]["content"]
            .as_str()
            .unwrap()
            .starts_with("Result of list_directory:\n")
    );
    assert_no_server_left(sample.path());
}

#[test]
fn e2e_a_server_that_cannot_start_fails_the_task_with_its_name() {
    let llm = FakeLlm::start(vec![Reply::text("unused", None)]);
    let yaml = "mcp_servers:\n  broken:\n    command: ctxhost-no-such-mcp-server\n    args: [\"--root\", \"/srv\"]\n";
    let env = TestEnv::new();
    env.write_config(&config_yaml(&llm.base_url(), "openai", yaml));
    env.ctxhost(&["init"]).ok();
    let (_, row) = run_task(&env, "Anything");
    assert_eq!(row["status"], "failed", "{row}");
    let error = row["error_message"].as_str().unwrap();
    assert!(error.contains("MCP server `broken`"), "{error}");
    assert!(
        error.contains("ctxhost-no-such-mcp-server --root /srv"),
        "{error}"
    );
    assert_eq!(row["llm_call_count"], 0);
    assert_eq!(
        llm.request_count(),
        0,
        "no LLM call without the task's tools"
    );
}

/// The filesystem servers of `sample` have exited (the task process stops them when it ends).
fn assert_no_server_left(sample: &Path) {
    assert!(
        crate::support::wait_until(Duration::from_secs(10), || {
            crate::support::filesystem_server_pids(sample).is_empty()
        }),
        "filesystem server still running after the task ended: {:?}",
        crate::support::filesystem_server_pids(sample)
    );
}

// The tests above that touch the task store, once more on PostgreSQL.
crate::support::store::postgres_variants!(
    e2e_native_tool_calls_reach_the_filesystem_server_with_exact_counters,
    e2e_prompted_tools_give_the_same_ids_and_spill_huge_results,
    e2e_a_server_that_cannot_start_fails_the_task_with_its_name,
);
