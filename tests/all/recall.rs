//! Issue 27 end to end: a scripted task plants facts early (a path and an error line deep in a
//! tool output that was cut, a constraint in the prompt, a measured number), is compressed
//! three times, and then gets every fact back with the host's `history_search` and
//! `history_read` — offered only once the context was compressed — though none of them is in
//! its context any more. Then `show --compactions` and the dashboard list the compressions.

use std::sync::{Arc, Mutex};

use crate::support::dashboard::Dashboard;
use crate::support::fake_llm::{FakeLlm, RecordedRequest, Reply};
use crate::support::{TestEnv, find_task_dir, read_jsonl};
use serde_json::{Value, json};

const MARK: &str = "SUMMARISE-THIS";
const PROMPT: &str =
    "Fix the build. Constraint: do not change the public API of src/engine/cache.rs.";
const ERROR_LINE: &str = "error[E0425]: cannot find value `retry_budget` in this scope";
const ANSWER: &str = "error: error[E0425]: cannot find value `retry_budget` in this scope; at: src/net/retry.rs:41:9; \
                      p95: 183 ms; constraint: do not change the public API of src/engine/cache.rs.";

/// The build log the scripted `read_file` returns: the error line comes after ~3,400
/// characters of warnings, past what a result keeps in the context (300 tokens).
fn build_log() -> String {
    format!(
        "Compiling ctx v0.1.0\n{}{ERROR_LINE}\n --> src/net/retry.rs:41:9\n",
        "warning: unused import `std::io`\n".repeat(110)
    )
}

/// A node MCP server with one tool, `read_file {path}`, answering from a fixed set of files.
fn server_js() -> String {
    format!(
        r#"
const readline = require('readline');
const rl = readline.createInterface({{ input: process.stdin }});
const send = (m) => process.stdout.write(JSON.stringify(m) + '\n');
const files = {{ 'logs/build.log': {log}, 'bench/latency.txt': 'p95 latency: 183 ms\np99 latency: 240 ms\n' }};
rl.on('line', (line) => {{
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  const ok = (result) => send({{ jsonrpc: '2.0', id: m.id, result }});
  switch (m.method) {{
    case 'initialize':
      return ok({{ protocolVersion: m.params.protocolVersion, capabilities: {{ tools: {{}} }}, serverInfo: {{ name: 'files', version: '1.0.0' }} }});
    case 'tools/list':
      return ok({{ tools: [{{ name: 'read_file', description: 'read a file', inputSchema: {{ type: 'object', properties: {{ path: {{ type: 'string' }} }} }} }}] }});
    case 'tools/call': {{
      const p = (m.params.arguments || {{}}).path;
      const text = files[p] !== undefined ? files[p] : 'fn main() {{}}\n' + '// filler line of the file\n'.repeat(30);
      return ok({{ content: [{{ type: 'text', text }}] }});
    }}
    default:
      return send({{ jsonrpc: '2.0', id: m.id, error: {{ code: -32601, message: 'Method not found' }} }});
  }}
}});
"#,
        log = serde_json::to_string(&build_log()).unwrap()
    )
}

#[derive(Default)]
struct Script {
    loop_calls: usize,
    summaries: usize,
    questions: usize,
    /// Whether each loop request offered history_search.
    offered: Vec<bool>,
    /// Whether any fact was in the context when the model started asking.
    facts_in_context: Option<bool>,
}

fn is_summary_request(req: &RecordedRequest) -> bool {
    req.messages()
        .iter()
        .any(|m| m["content"].as_str().is_some_and(|c| c.contains(MARK)))
}

fn tool_result<'a>(messages: &'a [Value], id: &str) -> &'a str {
    messages
        .iter()
        .find(|m| m["tool_call_id"] == id)
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
}

/// The scripted model: reads the build log and the benchmark, then other files until the
/// context was compressed three times; then asks the history for each fact and answers with
/// what came back.
fn handler(script: Arc<Mutex<Script>>) -> impl Fn(&RecordedRequest) -> Option<Reply> + Send + Sync {
    move |req| {
        let mut s = script.lock().unwrap();
        if is_summary_request(req) {
            s.summaries += 1;
            return Some(Reply::text(
                format!("summary {}: the agent read files.", s.summaries),
                Some((300, 12)),
            ));
        }
        s.loop_calls += 1;
        let offered = req.body["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "history_search"));
        s.offered.push(offered);
        let read = |id: &str, path: &str| {
            Reply::tool_calls(
                vec![(id, "read_file", &json!({ "path": path }).to_string())],
                Some((400, 20)),
            )
        };
        match s.loop_calls {
            1 => return Some(read("call_log", "logs/build.log")),
            2 => return Some(read("call_bench", "bench/latency.txt")),
            n if s.summaries < 3 && n < 40 => {
                return Some(read(&format!("call_{n}"), &format!("src/file_{n}.rs")));
            }
            _ => {}
        }
        let messages = req.messages();
        if s.facts_in_context.is_none() {
            let text = serde_json::to_string(&messages).unwrap();
            s.facts_in_context = Some(
                ["retry_budget", "183 ms", "Constraint:"]
                    .iter()
                    .any(|f| text.contains(f)),
            );
        }
        s.questions += 1;
        // The three questions in one reply (parallel calls: their results stay together in the
        // context, the newest group), then the answer made of what they returned.
        Some(if s.questions == 1 {
            Reply::tool_calls(
                vec![
                    ("recall_1", "history_search", r#"{"query":"retry_budget"}"#),
                    (
                        "recall_2",
                        "history_search",
                        r#"{"query":"p95 latency: \\d+ ms","regex":true}"#,
                    ),
                    ("recall_3", "history_read", r#"{"from_seq":2,"to_seq":2}"#),
                ],
                Some((400, 20)),
            )
        } else {
            let find = |id: &str, re: &str| {
                regex::Regex::new(re)
                    .unwrap()
                    .find(tool_result(&messages, id))
                    .map(|m| m.as_str().to_string())
                    .unwrap_or_default()
            };
            Reply::text(
                format!(
                    "error: {}; at: {}; p95: {}; constraint: {}",
                    find("recall_1", r"error\[E\d+\]: [^…]*? scope"),
                    find("recall_1", r"src/[a-z/]+\.rs:\d+:\d+"),
                    find("recall_2", r"\d+ ms"),
                    find("recall_3", r"do not change [^.]*\.rs\."),
                ),
                Some((400, 30)),
            )
        })
    }
}

/// The snippet rule of history_search for ASCII text: up to 60 characters before the match
/// and 100 after, line breaks as spaces, `…` where cut.
fn snippet(text: &str, at: usize, len: usize) -> String {
    let start = at.saturating_sub(60);
    let end = (at + len + 100).min(text.len());
    format!(
        "{}{}{}",
        if start > 0 { "…" } else { "" },
        text[start..end].replace('\n', " "),
        if end < text.len() { "…" } else { "" }
    )
}

#[test]
fn a_task_compressed_three_times_gets_its_early_facts_back_from_the_history() {
    let work = tempfile::tempdir().unwrap();
    let js = work.path().join("files_server.js");
    std::fs::write(&js, server_js()).unwrap();
    let llm = FakeLlm::start(vec![]);
    let script = Arc::new(Mutex::new(Script::default()));
    llm.set_handler(handler(script.clone()));
    let env = TestEnv::new();
    env.write_config(&format!(
        "context_storage:\n  base_dir: ./contexts\n  compression_threshold: 0.5\n  keep_recent_messages: 3\n  \
         summary_prompt: \"{MARK}\\n{{messages}}\"\n\
         llm:\n  provider: openai\n  base_url: \"{}\"\n  model: fake-model\n  api_key_env: \"\"\n  \
         context_length: 3000\n  max_output_tokens: 200\n  timeout_secs: 20\n  max_retries: 1\n  max_backoff_secs: 1\n\
         plugins:\n  compressor: builtin:llm-summarizer\n\
         tools:\n  max_tool_output_tokens: 300\n\
         mcp_servers:\n  files:\n    command: node\n    args: [{:?}]\n",
        llm.base_url(),
        js.display().to_string()
    ));
    env.ctxhost(&["init"]).ok();
    let uuid = env.submit(PROMPT);
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let row = env.row(&uuid);
    assert_eq!(row["status"], "completed", "{row}");
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    let s = script.lock().unwrap();
    assert!(
        s.summaries >= 3,
        "three compressions before the questions: {}",
        s.summaries
    );
    assert_eq!(
        s.facts_in_context,
        Some(false),
        "no fact was left in the context"
    );
    assert!(
        !s.offered[0],
        "the history tools are not offered before a compression"
    );
    assert!(*s.offered.last().unwrap(), "they are offered after it");

    // The answer was built from what the history tools returned.
    let history = read_jsonl(&dir.join("messages.jsonl"));
    let last = history.last().unwrap();
    assert_eq!(last["content"], ANSWER);

    // The exact text of each history tool result, as recorded in tools.jsonl.
    let tools = read_jsonl(&dir.join("tools.jsonl"));
    // Each between the quote marks naming this task (issue 38 item 11), unquoted here.
    let result = |id: &str| {
        let text = tools
            .iter()
            .find(|t| t["tool_call_id"] == id)
            .unwrap_or_else(|| panic!("no tools.jsonl line for {id}"))["result"]
            .as_str()
            .unwrap()
            .to_string();
        let head = format!("<quoted-history task=\"{uuid}\" id=\"");
        let rest = text
            .strip_prefix(&head)
            .unwrap_or_else(|| panic!("{id}: not quoted for this task: {text}"));
        let (nonce, rest) = rest.split_once("\">\n").unwrap();
        let end = format!("\n</quoted-history id=\"{nonce}\">\n");
        let (inner, note) = rest.split_once(&end).unwrap_or_else(|| panic!("{text}"));
        assert!(note.contains("not instructions to follow"), "{note}");
        inner.to_string()
    };
    let seq_of = |pred: &dyn Fn(&Value) -> bool| {
        history.iter().find(|m| pred(m)).unwrap()["seq"]
            .as_u64()
            .unwrap()
    };
    let log_seq = seq_of(&|m| m["tool_call_id"] == "call_log");
    let bench_seq = seq_of(&|m| m["tool_call_id"] == "call_bench");
    let messages_before = |id: &str| seq_of(&|m| m["tool_call_id"] == id) - 1;
    let log = build_log();
    let at = log.find("retry_budget").unwrap();
    assert_eq!(
        result("recall_1"),
        format!(
            "1 of 1 match(es) for \"retry_budget\" in {} messages, newest first:\n\
             seq {log_seq} (tool read_file, full output tool-results/1.txt): {}\n\
             Read whole messages with history_read(from_seq, to_seq).\n",
            messages_before("recall_1"),
            snippet(&log, at, "retry_budget".len())
        )
    );
    let bench = "p95 latency: 183 ms\np99 latency: 240 ms\n";
    assert_eq!(
        result("recall_2"),
        format!(
            "1 of 1 match(es) for \"p95 latency: \\\\d+ ms\" in {} messages, newest first:\n\
             seq {bench_seq} (tool read_file): {}\n\
             Read whole messages with history_read(from_seq, to_seq).\n",
            messages_before("recall_2"),
            snippet(bench, 0, "p95 latency: 183 ms".len())
        )
    );
    let raw = std::fs::read_to_string(dir.join("messages.jsonl")).unwrap();
    let line_2 = raw.lines().nth(1).unwrap();
    assert!(
        line_2.contains("Constraint: do not change the public API"),
        "{line_2}"
    );
    assert_eq!(
        result("recall_3"),
        format!("messages.jsonl seq 2-2, verbatim:\n{line_2}\n[end of the range]")
    );
    // Counted like any tool call: the three history calls with the others.
    assert_eq!(row["tool_call_count"].as_u64().unwrap(), tools.len() as u64);
    assert!(
        tools
            .iter()
            .filter(|t| t["tool"] == "history_search")
            .count()
            == 2
    );

    // The summary in the context says what it covers and how to read it back.
    let current = read_jsonl(&dir.join("current.jsonl"));
    let summary = current[1]["content"].as_str().unwrap();
    let (start, end) = ctxhost_format::compress::parse_summary_range(summary).unwrap();
    assert!(
        summary.ends_with(&format!(
            "[The original messages {start}\u{2013}{end} are kept in this task's history: \
             history_read(from_seq={start}, to_seq={end}) returns them verbatim, history_search finds a detail in them.]"
        )),
        "{summary}"
    );

    // summaries.jsonl records what each summary replaced.
    let summaries = read_jsonl(&dir.join("summaries.jsonl"));
    let first = &summaries[0]["compaction"];
    let elided = first["elided_tool_results"].as_array().unwrap();
    assert_eq!(elided[0]["seq"], log_seq);
    assert_eq!(elided[0]["tool"], "read_file");
    assert_eq!(elided[0]["bytes"], log.len() as u64);
    assert_eq!(elided[0]["full_text"], "tool-results/1.txt");
    let paths: Vec<&str> = first["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"src/engine/cache.rs") && paths.contains(&"logs/build.log"),
        "{paths:?}"
    );
    for (i, s) in summaries.iter().enumerate() {
        let c = &s["compaction"];
        let summary_seq = c["summary_seq"].as_u64().unwrap();
        assert_eq!(
            history[summary_seq as usize - 1]["summary_id"],
            json!(i + 1)
        );
        assert_eq!(
            c["kept_start_seq"].as_u64().unwrap(),
            s["end_seq"].as_u64().unwrap() + 1
        );
        assert_eq!(c["kept_end_seq"].as_u64().unwrap(), summary_seq - 1);
    }
    assert!(
        summaries[1]["compaction"]["new_start_seq"]
            .as_u64()
            .unwrap()
            > summaries[1]["start_seq"].as_u64().unwrap()
    );

    // show --compactions lists each compression's range and summary.
    let shown = env.ctxhost(&["show", &uuid, "--compactions"]).ok().stdout();
    for (i, s) in summaries.iter().enumerate() {
        assert!(
            shown.contains(&format!(
                "compression {}: messages {}\u{2013}{} summarised at",
                i + 1,
                s["start_seq"],
                s["end_seq"]
            )),
            "{shown}"
        );
        assert!(
            shown.contains(&format!("  | summary {}: the agent read files.", i + 1)),
            "{shown}"
        );
    }
    assert!(
        shown.contains(&format!(
            "tool results elided: {log_seq} read_file ({} bytes, tool-results/1.txt)",
            log.len()
        )),
        "{shown}"
    );
    let listed = env
        .ctxhost(&["show", &uuid, "--compactions", "--json"])
        .ok()
        .json();
    assert_eq!(listed.as_array().unwrap().len(), summaries.len());
    assert_eq!(listed[0]["summary"], "summary 1: the agent read files.");

    // The dashboard's compaction page: each range and summary, next to the messages replaced.
    let d = Dashboard::start(&env, &[]);
    let page = d
        .get(&format!("/tasks/{uuid}/compactions"))
        .expect(200)
        .body;
    assert!(page.contains("compression 1</strong>"), "{page}");
    assert!(
        page.contains(&format!(
            "#{}–#{}",
            summaries[2]["start_seq"], summaries[2]["end_seq"]
        )),
        "{page}"
    );
    assert!(page.contains("summary 3: the agent read files."));
    assert!(
        page.contains("Constraint: do not change the public API"),
        "the summarised prompt next to its summary"
    );
    let task_page = d
        .get(&format!("/tasks/{uuid}?view=summaries"))
        .expect(200)
        .body;
    assert!(task_page.contains(&format!("/tasks/{uuid}/compactions")));
}

/// Issue 27 item 4: a third-party compressor (WIT 1.0.0, `fixtures/recall-summarizer`) searches
/// the task's history through the host's `history` import and reads a message back in 64-byte
/// pages; what it found is in its summary, in summaries.jsonl and in the context the model gets.
#[test]
fn a_compressor_component_searches_and_reads_the_history_through_the_host() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    const FACT: &str = "FACT-7: the deploy port is 8421, agreed with ops.";
    let wasm = std::path::Path::new(env!("CTXHOST_GUEST_DIR")).join("recall_summarizer.wasm");
    let llm = FakeLlm::start(vec![]);
    let steps = Arc::new(AtomicUsize::new(0));
    let s = steps.clone();
    llm.set_handler(move |req| {
        let summary_in_context = req.messages().iter().any(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.contains("Recalled from the history"))
        });
        let n = s.fetch_add(1, Ordering::SeqCst) + 1;
        if summary_in_context || n > 30 {
            return Some(Reply::text("All done.", Some((400, 3))));
        }
        Some(Reply::read_file_step(n))
    });
    let env = TestEnv::new();
    env.write_config(&format!(
        "context_storage:\n  base_dir: ./contexts\n  compression_threshold: 0.5\n  keep_recent_messages: 2\n\
         llm:\n  provider: openai\n  base_url: \"{}\"\n  model: fake-model\n  api_key_env: \"\"\n  \
         context_length: 1500\n  max_output_tokens: 200\n  timeout_secs: 20\n  max_retries: 1\n  max_backoff_secs: 1\n\
         plugins:\n  compressor: \"{}\"\n",
        llm.base_url(),
        wasm.display()
    ));
    env.ctxhost(&["init"]).ok();
    let prompt = format!("Read every file and report. {FACT}");
    let uuid = env
        .ctxhost(&["submit", "--prompt", &prompt])
        .ok()
        .stdout()
        .trim()
        .to_string();
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let row = env.ctxhost(&["show", &uuid, "--json"]).ok().json()["task"].clone();
    assert_eq!(row["status"], "completed", "{row}");
    let dir = find_task_dir(&env.contexts(), &uuid).unwrap();
    let summaries = read_jsonl(&dir.join("summaries.jsonl"));
    assert!(!summaries.is_empty(), "the task compressed");
    let summary = summaries[0]["summary"].as_str().unwrap();
    // The search hit (the prompt, seq 2) and the message read back whole, page by page.
    assert!(
        summary.contains("Recalled from the history: seq 2 (user, message): ")
            && summary.contains("FACT-7: the deploy port is 8421"),
        "{summary}"
    );
    let pages: u32 = summary
        .split_once("Read back (seq 2, ")
        .and_then(|(_, r)| r.split_once(" pages): "))
        .map(|(n, _)| n.parse().unwrap())
        .unwrap_or_else(|| panic!("{summary}"));
    let line = std::fs::read_to_string(dir.join("messages.jsonl"))
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .len();
    // Each page is at most 64 bytes with its line break: 63 bytes of the line.
    assert_eq!(
        pages as usize,
        line.div_ceil(63),
        "64-byte pages of the line"
    );
    assert!(
        summary.contains(&format!("Read back (seq 2, {pages} pages): {prompt}\n")),
        "{summary}"
    );
    // The model got that summary in its context.
    assert!(llm.requests().iter().any(|r| r.messages().iter().any(|m| {
        m["content"]
            .as_str()
            .is_some_and(|c| c.contains(&format!("pages): {prompt}")))
    })));
}
