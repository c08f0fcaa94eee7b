//! Retention benchmark (issue 27): how many facts planted early in a task the model still
//! has after three compressions, with the summaries only (`context_storage.recall: false`)
//! and with the summaries plus the history tools (`recall: true`).
//!
//! ```text
//! cargo build -p ctxhost --bin ctxhost --example bench_retention
//! target/debug/examples/bench_retention --ctxhost target/debug/ctxhost [--tasks 5]
//! ```
//! (`scripts/bench-retention.sh` does both.) Each task plants four facts: a user constraint
//! (in the prompt), an error line and the file path it names (deep in a build log that a tool
//! returns, past what the context keeps of a result: only tool-results/ has them), and a
//! measured number (a short tool result). The task then reads other files until the context
//! was compressed three times, and asks for each fact. The model is scripted (the tests' fake
//! LLM): it answers a fact from its context when it is there, else, when the history tools are
//! offered, with `history_search` (a regular expression for that kind of fact) and what it
//! returned; else "unknown". The fake summaries say nothing about the facts ("summary N: the
//! agent read files."), so what the summaries keep is not measured here — a real model's
//! summaries are (`scripts/bench-retention.sh` with a local model, see bench/README.md).
//! Needs node (the scripted MCP server that returns the files).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/all/support/anthropic_api.rs"]
mod anthropic_api;
#[path = "../../tests/all/support/api_schema.rs"]
mod api_schema;
#[path = "../../tests/all/support/fake_llm.rs"]
mod fake_llm;
#[path = "../../tests/all/support/http.rs"]
mod http;
#[path = "../../tests/all/support/openai_api.rs"]
mod openai_api;
#[path = "../../tests/all/support/responses_api.rs"]
mod responses_api;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use fake_llm::{FakeLlm, RecordedRequest, Reply};
use serde_json::{Value, json};

const MARK: &str = "SUMMARISE-THIS";
const KINDS: [&str; 4] = [
    "file path",
    "error line",
    "user constraint",
    "measured number",
];
/// What the scripted model looks for, per kind of fact (also its history_search query).
const PATTERNS: [&str; 4] = [
    r"src/mod_\d+/handler\.rs",
    r"error\[E\d+\]: cannot find value `\w+` in this scope",
    r"keep the public API of [\w:]+ unchanged",
    r"p95 latency: \d+ ms",
];

/// The four facts of task `i`.
fn facts(i: usize) -> [String; 4] {
    [
        format!("src/mod_{i}/handler.rs"),
        format!("error[E04{i}5]: cannot find value `budget_{i}` in this scope"),
        format!("keep the public API of crate_{i}::Cache unchanged"),
        format!("p95 latency: {} ms", 180 + 7 * i),
    ]
}

fn server_js(f: &[String; 4]) -> String {
    let log = format!(
        "Compiling app v0.1.0\n{}{}\n --> {}:41:9\n",
        "warning: unused import `std::io`\n".repeat(110),
        f[1],
        f[0]
    );
    let bench = format!("{}\np99 latency: 400 ms\n", f[3]);
    format!(
        r#"
const rl = require('readline').createInterface({{ input: process.stdin }});
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
const files = {{ 'logs/build.log': {log}, 'bench/latency.txt': {bench} }};
rl.on('line', (line) => {{
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  const ok = (result) => send({{ jsonrpc: '2.0', id: m.id, result }});
  if (m.method === 'initialize') return ok({{ protocolVersion: m.params.protocolVersion, capabilities: {{ tools: {{}} }}, serverInfo: {{ name: 'files', version: '1.0.0' }} }});
  if (m.method === 'tools/list') return ok({{ tools: [{{ name: 'read_file', description: 'read a file', inputSchema: {{ type: 'object', properties: {{ path: {{ type: 'string' }} }} }} }}] }});
  if (m.method === 'tools/call') {{
    const p = (m.params.arguments || {{}}).path;
    return ok({{ content: [{{ type: 'text', text: files[p] !== undefined ? files[p] : 'fn main() {{}}\n' + '// filler line of the file\n'.repeat(30) }}] }});
  }}
  send({{ jsonrpc: '2.0', id: m.id, error: {{ code: -32601, message: 'Method not found' }} }});
}});
"#,
        log = serde_json::to_string(&log).unwrap(),
        bench = serde_json::to_string(&bench).unwrap()
    )
}

#[derive(Default)]
struct Script {
    loop_calls: usize,
    summaries: usize,
    answers: [Option<String>; 4],
    asked: Option<usize>,
    searches: usize,
    /// Model calls of the answering phase sent to the local model (`--llm-url`).
    forwarded: usize,
}

/// The question the local model is asked once the context was compressed three times (`--llm-url`):
/// added as the last user message of every request of the answering phase, in both modes.
const QUESTION: &str = "Stop reading files. Answer now, from what you know of this task: \
     1. the file path the build error names, 2. the exact error line, 3. the constraint I set, \
     4. the p95 latency measured. If something is not in this conversation, search the history \
     with the history_search tool when it is offered.";

/// Model calls of the answering phase the local model gets (tool calls included).
const MAX_FORWARDED: usize = 4;

/// `body` sent to the chat completions endpoint under `base` (the local model); its reply body.
fn forward(base: &str, body: &Value) -> String {
    let url = format!("{}/v1/chat/completions", base.trim_end_matches('/'));
    match ureq::post(&url)
        .timeout(std::time::Duration::from_secs(600))
        .set("Content-Type", "application/json")
        .send_string(&body.to_string())
    {
        Ok(r) => r.into_string().unwrap(),
        Err(e) => panic!("local model at {url}: {e}"),
    }
}

/// A scripted tool call in the prompted-tools protocol (`ctxhost_format::prompted`): the
/// reply text the local model would write.
fn prompted_call(name: &str, arguments: &Value) -> Reply {
    Reply::text(
        json!({ "tool": name, "arguments": arguments }).to_string(),
        Some((400, 20)),
    )
}

/// The fake LLM in front of a local model (`--llm-url`): the reading phase is scripted (tool
/// calls written as text, the prompted-tools protocol); the summaries and the answering phase
/// (with [`QUESTION`] added) are the local model's own replies.
fn local_handler(
    script: Arc<Mutex<Script>>,
    base: String,
) -> impl Fn(&RecordedRequest) -> Option<Reply> + Send + Sync {
    move |req| {
        let mut s = script.lock().unwrap();
        let messages = req.messages();
        if messages
            .iter()
            .any(|m| m["content"].as_str().is_some_and(|c| c.contains(MARK)))
        {
            s.summaries += 1;
            return Some(Reply::raw(forward(&base, &req.body)));
        }
        s.loop_calls += 1;
        match s.loop_calls {
            1 => {
                return Some(prompted_call(
                    "read_file",
                    &json!({"path": "logs/build.log"}),
                ));
            }
            2 => {
                return Some(prompted_call(
                    "read_file",
                    &json!({"path": "bench/latency.txt"}),
                ));
            }
            n if s.summaries < 3 && n < 60 => {
                return Some(prompted_call(
                    "read_file",
                    &json!({"path": format!("src/file_{n}.rs")}),
                ));
            }
            _ => {}
        }
        if s.forwarded >= MAX_FORWARDED {
            return Some(Reply::text("(no answer within the steps given)", None));
        }
        s.forwarded += 1;
        let mut body = req.body.clone();
        body["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": QUESTION}));
        let reply = forward(&base, &body);
        let text: Value = serde_json::from_str(&reply).unwrap_or(Value::Null);
        let content = text["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or("");
        if content.contains("history_search") || content.contains("history_read") {
            s.searches += 1;
        }
        let shown: String = content.chars().take(300).collect();
        eprintln!("  answering call {}: {shown:?}", s.forwarded);
        Some(Reply::raw(reply))
    }
}

/// The distinctive part of each fact of task `i` that a correct answer of the local model
/// must contain (it may word the rest its own way).
fn fact_keys(i: usize) -> [String; 4] {
    [
        format!("src/mod_{i}/handler.rs"),
        format!("E04{i}5"),
        format!("crate_{i}::Cache"),
        format!("{}", 180 + 7 * i),
    ]
}

fn find(re: &str, text: &str) -> Option<String> {
    regex::Regex::new(re)
        .unwrap()
        .find(text)
        .map(|m| m.as_str().to_string())
}

fn handler(script: Arc<Mutex<Script>>) -> impl Fn(&RecordedRequest) -> Option<Reply> + Send + Sync {
    move |req| {
        let mut s = script.lock().unwrap();
        let messages = req.messages();
        if messages
            .iter()
            .any(|m| m["content"].as_str().is_some_and(|c| c.contains(MARK)))
        {
            s.summaries += 1;
            return Some(Reply::text(
                format!("summary {}: the agent read files.", s.summaries),
                Some((300, 12)),
            ));
        }
        s.loop_calls += 1;
        let read = |id: String, path: String| {
            Reply::tool_calls(
                vec![(&id, "read_file", &json!({ "path": path }).to_string())],
                Some((400, 20)),
            )
        };
        match s.loop_calls {
            1 => return Some(read("call_log".into(), "logs/build.log".into())),
            2 => return Some(read("call_bench".into(), "bench/latency.txt".into())),
            n if s.summaries < 3 && n < 60 => {
                return Some(read(format!("call_{n}"), format!("src/file_{n}.rs")));
            }
            _ => {}
        }
        if let Some(k) = s.asked.take() {
            let id = format!("ask_{k}");
            let result = messages
                .iter()
                .find(|m| m["tool_call_id"] == id.as_str())
                .and_then(|m| m["content"].as_str())
                .unwrap_or("");
            s.answers[k] = Some(find(PATTERNS[k], result).unwrap_or_else(|| "unknown".into()));
        }
        let context: String = messages
            .iter()
            .map(|m| {
                format!(
                    "{} {}\n",
                    m["content"].as_str().unwrap_or(""),
                    m["tool_calls"]
                )
            })
            .collect();
        let offered = req.body["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "history_search"));
        for (k, pattern) in PATTERNS.iter().enumerate() {
            if s.answers[k].is_some() {
                continue;
            }
            if let Some(v) = find(pattern, &context) {
                s.answers[k] = Some(v);
            } else if offered {
                s.asked = Some(k);
                s.searches += 1;
                let args = json!({ "query": pattern, "regex": true }).to_string();
                return Some(Reply::tool_calls(
                    vec![(&format!("ask_{k}"), "history_search", &args)],
                    Some((400, 20)),
                ));
            } else {
                s.answers[k] = Some("unknown".into());
            }
        }
        let answer: Vec<String> = s
            .answers
            .iter()
            .map(|a| a.clone().unwrap_or_default())
            .collect();
        Some(Reply::text(answer.join("\n"), Some((400, 30))))
    }
}

/// Run task `i` with `recall` on or off; the facts answered correctly, per kind, and the
/// compressions and history searches it made.
fn run_task(
    ctxhost: &Path,
    i: usize,
    recall: bool,
    local: Option<&str>,
) -> ([bool; 4], usize, usize) {
    let work = tempfile::tempdir().unwrap();
    let f = facts(i);
    let js = work.path().join("files_server.js");
    std::fs::write(&js, server_js(&f)).unwrap();
    let llm = FakeLlm::start(vec![]);
    let script = Arc::new(Mutex::new(Script::default()));
    match local {
        Some(base) => llm.set_handler(local_handler(script.clone(), base.to_string())),
        None => llm.set_handler(handler(script.clone())),
    }
    let format = if local.is_some() {
        "  request_format: builtin:prompted-tools\n"
    } else {
        ""
    };
    std::fs::write(
        work.path().join("config.yaml"),
        format!(
            "context_storage:\n  base_dir: ./contexts\n  compression_threshold: 0.5\n  keep_recent_messages: 3\n  recall: {recall}\n  \
             summary_prompt: \"{MARK}\\n{{messages}}\"\n\
             llm:\n  provider: openai\n  base_url: \"{}\"\n  model: fake-model\n  api_key_env: \"\"\n  \
             context_length: 3000\n  max_output_tokens: 200\n  timeout_secs: 900\n  max_retries: 1\n  max_backoff_secs: 1\n  stream: false\n\
             plugins:\n  compressor: builtin:llm-summarizer\n{format}\
             tools:\n  max_tool_output_tokens: 300\n\
             mcp_servers:\n  files:\n    command: node\n    args: [{:?}]\n",
            llm.base_url(),
            js.display().to_string()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(ctxhost)
            .args(args)
            .current_dir(work.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ctxhost {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    run(&["init"]);
    let prompt = format!(
        "Fix the build. Constraint: {}. When done, report the failing file, the error line, my constraint and the p95 latency.",
        f[2]
    );
    let uuid = run(&["submit", "--prompt", &prompt]).trim().to_string();
    run(&["run", "--once", "--poll-ms", "20"]);
    let row: Value = serde_json::from_str(&run(&["show", &uuid, "--json"])).unwrap();
    let answer = row["result"].as_str().unwrap_or("");
    let lines: Vec<&str> = answer.lines().collect();
    let correct = match local {
        // The local model words its answer its own way: each fact's distinctive part counts.
        Some(_) => {
            let keys = fact_keys(i);
            std::array::from_fn(|k| answer.contains(keys[k].as_str()))
        }
        None => std::array::from_fn(|k| lines.get(k) == Some(&f[k].as_str())),
    };
    if local.is_some() {
        eprintln!("task {i} recall={recall}: answer {answer:?}");
    }
    let s = script.lock().unwrap();
    (correct, s.summaries, s.searches)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut ctxhost, mut tasks) = (PathBuf::from("target/debug/ctxhost"), 5usize);
    let mut local: Option<String> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--ctxhost" => ctxhost = args.next().expect("--ctxhost PATH").into(),
            "--tasks" => {
                tasks = args
                    .next()
                    .expect("--tasks N")
                    .parse()
                    .expect("--tasks: a number")
            }
            "--llm-url" => local = Some(args.next().expect("--llm-url URL")),
            other => panic!(
                "unknown argument {other:?}; usage: bench_retention [--ctxhost PATH] [--tasks N] [--llm-url URL]"
            ),
        }
    }
    let ctxhost =
        std::fs::canonicalize(&ctxhost).unwrap_or_else(|e| panic!("{}: {e}", ctxhost.display()));
    println!(
        "| model | context | tasks | compressions per task | {} | facts answered correctly |",
        KINDS.join(" | ")
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    // Task by task, both modes of a task one after the other (the same run, the same tasks).
    let mut per_kind = [[0usize; 4]; 2];
    let mut compressions: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
    let mut searches = [0usize; 2];
    for i in 0..tasks {
        for (mode, recall) in [false, true].into_iter().enumerate() {
            let (correct, c, n) = run_task(&ctxhost, i, recall, local.as_deref());
            eprintln!(
                "task {i} recall={recall}: correct {correct:?}, {c} compressions, {n} searches"
            );
            for (count, ok) in per_kind[mode].iter_mut().zip(correct) {
                *count += ok as usize;
            }
            compressions[mode].push(c);
            searches[mode] += n;
        }
    }
    let model = match local {
        Some(_) => "Qwen2.5-Coder-0.5B (local, prompted tools)",
        None => "scripted (fake LLM)",
    };
    for (mode, recall) in [false, true].into_iter().enumerate() {
        let total: usize = per_kind[mode].iter().sum();
        println!(
            "| {model} | {} | {tasks} | {}–{} | {} | {total}/{} ({:.0} %) |",
            if recall && local.is_some() {
                format!(
                    "summaries + history tools ({} replies calling them)",
                    searches[mode]
                )
            } else if recall {
                format!("summaries + history tools ({} searches)", searches[mode])
            } else {
                "summaries only".into()
            },
            compressions[mode].iter().min().unwrap(),
            compressions[mode].iter().max().unwrap(),
            per_kind[mode]
                .iter()
                .map(|n| format!("{n}/{tasks}"))
                .collect::<Vec<_>>()
                .join(" | "),
            4 * tasks,
            100.0 * total as f64 / (4 * tasks) as f64
        );
    }
}
