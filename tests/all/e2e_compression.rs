//! End to end: a long scripted task (fake LLM) whose context crosses the compression threshold
//! several times, with each builtin compressor chosen by config on the same binary.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::fake_llm::{FakeLlm, RecordedRequest, Reply};
use crate::support::{TestEnv, find_task_dir, read_jsonl};
use serde_json::Value;

/// Marker of our summary prompt, to tell summary requests from agent-loop requests.
const MARK: &str = "SUMMARISE-THIS";
/// Agent-loop steps before the scripted final answer.
const STEPS: usize = 14;

fn is_summary_request(req: &RecordedRequest) -> bool {
    req.messages()
        .iter()
        .any(|m| m["content"].as_str().is_some_and(|c| c.contains(MARK)))
}

/// A fake LLM: summary requests get a short summary; the loop gets STEPS tool calls with long
/// arguments (so the context grows by ~200 tokens a step), then a final answer.
fn scripted_llm() -> (FakeLlm, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let llm = FakeLlm::start(vec![]);
    let loop_calls = Arc::new(AtomicUsize::new(0));
    let summary_calls = Arc::new(AtomicUsize::new(0));
    let (l, s) = (loop_calls.clone(), summary_calls.clone());
    llm.set_handler(move |req| {
        if is_summary_request(req) {
            let n = s.fetch_add(1, Ordering::SeqCst) + 1;
            return Some(Reply::text(
                format!("summary {n}: the agent read files."),
                Some((300, 12)),
            ));
        }
        let n = l.fetch_add(1, Ordering::SeqCst) + 1;
        if n > STEPS {
            return Some(Reply::text("All done.", Some((400, 3))));
        }
        Some(Reply::read_file_step(n))
    });
    (llm, loop_calls, summary_calls)
}

fn config(base_url: &str, compressor: &str) -> String {
    format!(
        "context_storage:\n  base_dir: ./contexts\n  compression_threshold: 0.5\n  keep_recent_messages: 3\n  \
         summary_prompt: \"{MARK}\\n{{messages}}\"\n\
         llm:\n  provider: openai\n  base_url: \"{base_url}\"\n  model: fake-model\n  api_key_env: \"\"\n  \
         context_length: 1500\n  max_output_tokens: 200\n  timeout_secs: 20\n  max_retries: 1\n  max_backoff_secs: 1\n\
         plugins:\n  compressor: {compressor}\n"
    )
}

/// Runs one task to its end and returns (row, task dir).
fn run_task(env: &TestEnv) -> (Value, std::path::PathBuf) {
    env.ctxhost(&["init"]).ok();
    let uuid = env
        .ctxhost(&["submit", "--prompt", "Read every file and report."])
        .ok()
        .stdout()
        .trim()
        .to_string();
    env.ctxhost(&["run", "--once", "--poll-ms", "20"]).ok();
    let row = env.ctxhost(&["show", &uuid, "--json"]).ok().json()["task"].clone();
    let dir = find_task_dir(&env.contexts(), &uuid).expect("task directory");
    (row, dir)
}

/// Checks shared by both compressors: the context is valid, starts with the system prompt, and
/// the history is complete (every loop message is in messages.jsonl, seq 1..n).
fn check_context_and_history(dir: &std::path::Path) -> (Vec<Value>, Vec<Value>) {
    ctxhost::invariants::check_context_file(
        &ctxhost::task_dir::TaskDir::open(dir).unwrap(),
        "current.jsonl",
        false,
    )
    .expect("current.jsonl keeps the invariants");
    let current = read_jsonl(&dir.join("current.jsonl"));
    assert_eq!(current[0]["role"], "system");
    let history = read_jsonl(&dir.join("messages.jsonl"));
    let seqs: Vec<u64> = history.iter().map(|m| m["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=history.len() as u64).collect::<Vec<_>>());
    let non_summary = history
        .iter()
        .filter(|m| m.get("summary_id").is_none())
        .count();
    // system + user + STEPS × (assistant call + tool result) + final answer.
    assert_eq!(
        non_summary,
        2 + 2 * STEPS + 1,
        "nothing outside the summaries is lost from messages.jsonl"
    );
    for f in [
        "to_summarize.jsonl",
        "unsummarized.jsonl",
        "compressed.jsonl",
        "request.json",
        "llm_request.json",
    ] {
        assert!(!dir.join(f).exists(), "{f} left behind");
    }
    (current, history)
}

#[test]
fn llm_summarizer_compresses_several_times_and_the_task_completes() {
    let (llm, loop_calls, summary_calls) = scripted_llm();
    let env = TestEnv::new();
    env.write_config(&config(&llm.base_url(), "builtin:llm-summarizer"));
    let (row, dir) = run_task(&env);

    assert_eq!(row["status"], "completed", "{row}");
    let compressions = row["compression_count"].as_u64().unwrap();
    assert!(
        compressions >= 3,
        "expected the threshold to be crossed several times, got {compressions}"
    );
    let summaries = summary_calls.load(Ordering::SeqCst) as u64;
    assert_eq!(
        summaries, compressions,
        "one summary request per compression (the parts fit the window)"
    );
    assert_eq!(loop_calls.load(Ordering::SeqCst), STEPS + 1);
    assert_eq!(
        row["llm_call_count"].as_u64().unwrap(),
        STEPS as u64 + 1 + summaries,
        "every LLM call counted"
    );
    assert_eq!(
        row["total_tokens"].as_u64().unwrap(),
        (STEPS as u64) * 600 + 403 + summaries * 312,
        "total_tokens is the sum of the provider's usage"
    );

    let (current, history) = check_context_and_history(&dir);
    assert_eq!(current[1]["role"], "user");
    assert!(
        current[1]["content"]
            .as_str()
            .unwrap()
            .starts_with("Summary of the conversation so far")
    );
    assert!(
        current[1]["content"]
            .as_str()
            .unwrap()
            .contains(&format!("summary {summaries}"))
    );

    let lines = read_jsonl(&dir.join("summaries.jsonl"));
    assert_eq!(lines.len() as u64, compressions);
    let mut last_end = 0;
    for (i, s) in lines.iter().enumerate() {
        // Summary ids are JSON numbers from 1 (the spec's form).
        assert_eq!(s["id"], serde_json::json!(i + 1));
        let (start, end) = (
            s["start_seq"].as_u64().unwrap(),
            s["end_seq"].as_u64().unwrap(),
        );
        assert!(
            start <= end && end > last_end,
            "summary ranges move forward: {s}"
        );
        assert!(s["summary_tokens"].as_u64().unwrap() < s["original_tokens"].as_u64().unwrap());
        last_end = end;
        // The summary is also in the history, with its id.
        assert!(
            history
                .iter()
                .any(|m| m["summary_id"] == s["id"] && m["content"] == s["summary"])
        );
    }
    // Every agent-loop request the model saw fit the window (estimate, tokens ≈ bytes / 4).
    for req in llm.requests().iter().filter(|r| !is_summary_request(r)) {
        let tokens =
            ctxhost_format::estimate_tokens(&serde_json::to_string(&req.messages()).unwrap());
        assert!(
            tokens < 1500,
            "a request of ~{tokens} tokens was sent to a 1500-token window"
        );
    }
}

/// The same scripted task (the model reads a large file 8 times, then answers) with the
/// compressor named in config: the binary is the same, only `plugins.compressor` changes.
fn run_reading_task(compressor: &str) -> (TestEnv, Value, std::path::PathBuf, usize) {
    let sample = tempfile::tempdir().unwrap();
    std::fs::write(
        sample.path().join("big.txt"),
        "The quick brown fox. ".repeat(100),
    )
    .unwrap();
    let big = sample.path().join("big.txt").display().to_string();
    let llm = FakeLlm::start(vec![]);
    let loop_calls = Arc::new(AtomicUsize::new(0));
    let summary_calls = Arc::new(AtomicUsize::new(0));
    let (l, s) = (loop_calls.clone(), summary_calls.clone());
    llm.set_handler(move |req| {
        if is_summary_request(req) {
            s.fetch_add(1, Ordering::SeqCst);
            return Some(Reply::text(
                "summary: the agent read big.txt several times.",
                Some((300, 12)),
            ));
        }
        let n = l.fetch_add(1, Ordering::SeqCst) + 1;
        if n > 8 {
            return Some(Reply::text("It is about a fox.", Some((400, 5))));
        }
        let args = serde_json::json!({ "path": big }).to_string();
        Some(Reply::tool_calls(
            vec![(&format!("call_{n}"), "read_text_file", &args)],
            Some((400, 20)),
        ))
    });
    let env = TestEnv::new();
    let yaml = config(&llm.base_url(), compressor)
        .replace("context_length: 1500", "context_length: 4100")
        + &format!(
            "mcp_servers:\n  fs:\n    command: {:?}\n    args: [{:?}]\n",
            crate::support::filesystem_server_bin()
                .display()
                .to_string(),
            sample.path().display().to_string()
        );
    env.write_config(&yaml);
    let (row, dir) = run_task(&env);
    assert_eq!(loop_calls.load(Ordering::SeqCst), 9, "{row}");
    (env, row, dir, summary_calls.load(Ordering::SeqCst))
}

#[test]
fn switching_compressors_is_a_config_change_on_the_same_binary() {
    // Each read returns ~530 tokens; the threshold is 2,000 (0.5 × 4,000).
    let (_env, row, dir, summaries) = run_reading_task("builtin:observation-masking");
    assert_eq!(row["status"], "completed", "{row}");
    assert!(row["compression_count"].as_u64().unwrap() >= 2, "{row}");
    assert_eq!(summaries, 0, "observation masking never asks the LLM");
    assert!(!dir.join("summaries.jsonl").exists());
    let current = read_jsonl(&dir.join("current.jsonl"));
    ctxhost::invariants::check_context_file(
        &ctxhost::task_dir::TaskDir::open(&dir).unwrap(),
        "current.jsonl",
        false,
    )
    .unwrap();
    let tool_results: Vec<&str> = current
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(tool_results.len(), 8, "masking keeps every tool message");
    let masked: Vec<&&str> = tool_results
        .iter()
        .filter(|c| c.starts_with("[tool result masked: "))
        .collect();
    assert!(
        !masked.is_empty() && masked.len() < 8,
        "old results masked, recent ones kept: {tool_results:?}"
    );
    // A placeholder names the tools.jsonl line holding the full text.
    let tools = read_jsonl(&dir.join("tools.jsonl"));
    assert!(masked[0].contains("tools.jsonl seq 1"), "{}", masked[0]);
    assert!(
        tools[0]["result"]
            .as_str()
            .unwrap()
            .contains("quick brown fox")
    );

    let (_env2, row, dir, summaries) = run_reading_task("builtin:llm-summarizer");
    assert_eq!(row["status"], "completed", "{row}");
    assert!(
        summaries >= 1 && row["compression_count"].as_u64().unwrap() >= 1,
        "{row}"
    );
    let current = read_jsonl(&dir.join("current.jsonl"));
    assert!(
        current[1]["content"]
            .as_str()
            .unwrap()
            .starts_with("Summary of the conversation so far")
    );
    assert!(!current.iter().any(|m| {
        m["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("[tool result masked"))
    }));
}

// The tests above that touch the task store, once more on PostgreSQL.
crate::support::store::postgres_variants!(
    llm_summarizer_compresses_several_times_and_the_task_completes,
    switching_compressors_is_a_config_change_on_the_same_binary,
);
