//! `ctxhost plugin check PATH|builtin:NAME [--json]`: the conformance suite a plugin component
//! must pass before an operator points config at it.
//!
//! The component's world and WIT version are read from its exports; then the suite of that
//! kind runs against real instances in a scratch task directory under the system temp dir
//! (removed afterwards):
//! - message store: open on an empty directory, appends (CJK text, a tool call and its result),
//!   counts, the exact line formats of messages.jsonl / current.jsonl (`ctxhost_format`),
//!   token counts, `recreate-current-context` (identity, shorter, malformed source),
//!   `record-summary`, reopening in a new instance, and a large history (20,000 messages,
//!   ~20 MB per file) with the instance's linear memory staying under 16 MiB, which catches a
//!   store that reads whole files;
//! - request format: a golden current.jsonl (unicode, escapes, blank lines, a tool call) and a
//!   model name with a quote → request.json that is JSON with the model and every message;
//!   malformed input; sample responses for the format's endpoint (`/v1/chat/completions`:
//!   OpenAI bodies, `/api/chat`: Ollama bodies, `/v1/messages`: Anthropic bodies), an HTML error
//!   page, a provider error object; a request in Anthropic's shape (top-level `system`, content
//!   blocks) is read as the equivalent list of messages;
//! - compressor: `should-compress` around its threshold; `compress` of an over-threshold
//!   context with a fake LLM returning a fixed summary (system prompt first, tool pairs intact,
//!   fewer tokens, recent messages kept, current.jsonl untouched, temporaries removed), and with
//!   a failing LLM (error, context untouched).
//!
//! Report: the world, the WIT version, and each check with pass/fail and the reason. `--json`
//! prints `{"component","world","version","passed","checks":[{"name","passed","detail"}]}`.

use std::collections::BTreeSet;
use std::fmt::Display;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ctxhost_format::summary_id::OnDisk;
use ctxhost_format::{ChatMessage, HistoryLine, ToolCall, estimate_message_tokens};
use serde_json::{Value, json};

use crate::invariants::check_context_file;
use crate::runtime::{
    Completion, CompressConfig, LlmImport, LoadedPlugin, PluginError, PluginKind, PluginSource,
    RequestConfig, Runtime, RuntimeError, RuntimeLimits, Usage, WitVersion,
};

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked, e.g. `count-messages after 3 appends`.
    pub name: String,
    pub passed: bool,
    /// What was seen (on success) or what is wrong (on failure).
    pub detail: String,
}

/// The result of checking one component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// `builtin:NAME` or the path, as given.
    pub component: String,
    /// The world it implements (`message-store-plugin`, ...), when it could be loaded.
    pub world: Option<String>,
    /// The WIT version of its plugin interface, e.g. `0.1.0`.
    pub version: Option<String>,
    pub checks: Vec<Check>,
}

impl CheckReport {
    /// Whether every check passed (and there was at least one).
    pub fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.passed)
    }

    /// `{"component","world","version","passed","checks":[{"name","passed","detail"}]}`;
    /// `world`/`version` are `null` when the component could not be loaded.
    pub fn to_json(&self) -> Value {
        json!({
            "component": self.component,
            "world": self.world,
            "version": self.version,
            "passed": self.passed(),
            "checks": self.checks.iter().map(|c| json!({
                "name": c.name, "passed": c.passed, "detail": c.detail,
            })).collect::<Vec<_>>(),
        })
    }

    /// The human-readable report: a header, one `PASS`/`FAIL` line per check, a verdict.
    pub fn to_text(&self) -> String {
        let mut out = format!("plugin check: {}\n", self.component);
        match (&self.world, &self.version) {
            (Some(world), Some(version)) => {
                out.push_str(&format!("  world {world}, WIT version {version}\n"))
            }
            _ => out.push_str("  world: unknown (the component could not be loaded)\n"),
        }
        for c in &self.checks {
            let mark = if c.passed { "PASS" } else { "FAIL" };
            out.push_str(&format!("  {mark}  {}: {}\n", c.name, c.detail));
        }
        let passed = self.checks.iter().filter(|c| c.passed).count();
        let verdict = if self.passed() {
            "conforms"
        } else {
            "does NOT conform"
        };
        out.push_str(&format!(
            "{passed} of {} checks passed: {} {verdict}\n",
            self.checks.len(),
            self.component
        ));
        out
    }
}

/// Tunables of the suites.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Messages appended in the message store's large-history check (default 20,000).
    pub large_messages: u64,
    /// Bytes of content per message in that check (default 1,000).
    pub large_message_bytes: usize,
    /// Largest linear memory a message store may use in that check (default 16 MiB).
    pub memory_budget_bytes: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            large_messages: 20_000,
            large_message_bytes: 1_000,
            memory_budget_bytes: 16 * 1024 * 1024,
        }
    }
}

/// `ctxhost plugin check`: check `path_or_builtin` (a `.wasm` path or `builtin:NAME`) with
/// default limits and options, print the report to stdout (JSON with `json`), and return
/// whether it passed (the caller exits 0 / 1).
///
/// Errors only when the check cannot run at all (no temp directory, engine setup failed); a
/// component that cannot be loaded is a failed report, not an error.
pub fn run(path_or_builtin: &str, json: bool) -> anyhow::Result<bool> {
    let scratch = Scratch::new("check-cache")?;
    let runtime = Runtime::new(scratch.path(), RuntimeLimits::default())?;
    let report = check(&runtime, path_or_builtin, &CheckOptions::default());
    if json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(report.passed())
}

/// Run the conformance suite of whatever kind `source` is on `runtime`.
pub fn check(runtime: &Runtime, source: &str, options: &CheckOptions) -> CheckReport {
    let mut report = CheckReport {
        component: source.to_string(),
        world: None,
        version: None,
        checks: Vec::new(),
    };
    let plugin = match source
        .parse::<PluginSource>()
        .and_then(|s| runtime.load_any(&s))
    {
        Ok(p) => p,
        Err(e) => {
            report.checks.push(Check {
                name: "load".into(),
                passed: false,
                detail: e.to_string(),
            });
            return report;
        }
    };
    report.world = Some(plugin.kind().world().to_string());
    report.version = Some(plugin.wit_version().to_string());
    let mut suite = Suite { checks: Vec::new() };
    suite.record(
        "load",
        Ok(format!(
            "exports {}{}; compiled for this host ({:?})",
            plugin.kind().export_name_at(plugin.wit()),
            if plugin.wit() == WitVersion::CURRENT {
                String::new()
            } else {
                format!(
                    " (an older WIT version, run through the host's {} shim; the current one is {})",
                    plugin.wit(),
                    WitVersion::CURRENT
                )
            },
            plugin.cache_outcome()
        )),
    );
    match Scratch::new("check") {
        Ok(scratch) => match plugin.kind() {
            PluginKind::MessageStore => {
                message_store_suite(runtime, &plugin, &scratch, options, &mut suite)
            }
            PluginKind::RequestFormat => {
                request_format_suite(runtime, &plugin, &scratch, &mut suite)
            }
            PluginKind::Compressor => compressor_suite(runtime, &plugin, &scratch, &mut suite),
        },
        Err(e) => suite.record(
            "scratch directory",
            Err(format!("cannot create a temporary task directory: {e}")),
        ),
    }
    report.checks = suite.checks;
    report
}

/// Collects check results.
struct Suite {
    checks: Vec<Check>,
}

type Outcome = Result<String, String>;

impl Suite {
    fn record(&mut self, name: &str, outcome: Outcome) {
        let (passed, detail) = match outcome {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        self.checks.push(Check {
            name: name.to_string(),
            passed,
            detail,
        });
    }
}

/// `Err(format!(..))` unless `cond`.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

fn e(err: impl Display) -> String {
    err.to_string()
}

/// A directory under the system temp dir, removed on drop.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn new(what: &str) -> std::io::Result<Scratch> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path =
            std::env::temp_dir().join(format!("ctxhost-{what}-{}-{nanos}", std::process::id()));
        fs::create_dir(&path)?;
        Ok(Scratch { path })
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// A new, empty task directory `name` inside.
    fn task(&self, name: &str) -> Result<PathBuf, String> {
        let dir = self.path.join(name);
        fs::create_dir(&dir).map_err(|err| format!("creating {}: {err}", dir.display()))?;
        Ok(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

// ---------------------------------------------------------------------------------------------
// Shared helpers

/// Every non-blank line of `path` parsed as `T`, naming file and line on error.
fn read_lines<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, String> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let file = fs::File::open(path).map_err(|err| format!("{name}: {err}"))?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|err| format!("{name} line {}: {err}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(
            serde_json::from_str(&line)
                .map_err(|err| format!("{name} line {}: {err}: {line}", i + 1))?,
        );
    }
    Ok(out)
}

fn write_lines<T: serde::Serialize>(path: &Path, items: &[T]) -> Result<(), String> {
    let mut text = String::new();
    for item in items {
        text.push_str(&serde_json::to_string(item).map_err(e)?);
        text.push('\n');
    }
    fs::write(path, text).map_err(|err| format!("writing {}: {err}", path.display()))
}

/// `m` with `tool_calls: Some(vec![])` read as `None`, for comparisons.
fn normalized(m: &ChatMessage) -> ChatMessage {
    let mut m = m.clone();
    if m.tool_calls.as_ref().is_some_and(|c| c.is_empty()) {
        m.tool_calls = None;
    }
    m
}

fn tool_call_message(id: &str, name: &str, arguments: &str) -> ChatMessage {
    ChatMessage {
        role: "assistant".into(),
        content: None,
        tool_calls: Some(vec![ToolCall::new(id, name, arguments)]),
        ..Default::default()
    }
}

fn tool_result(id: &str, name: &str, content: &str) -> ChatMessage {
    ChatMessage {
        role: "tool".into(),
        content: Some(content.into()),
        tool_call_id: Some(id.into()),
        tool_name: Some(name.into()),
        ..Default::default()
    }
}

fn is_plugin_error(err: &RuntimeError) -> bool {
    matches!(err, RuntimeError::Plugin { .. })
}

fn names_line(message: &str, line: u64) -> bool {
    message.contains(&format!("line {line}")) || message.contains(&format!(":{line}"))
}

// ---------------------------------------------------------------------------------------------
// Message store

const CJK_TEXT: &str = "请总结上下文压缩的设计。\"quoted\" back\\slash\nnew line 😀 — こんにちは";

fn sample_messages() -> Vec<ChatMessage> {
    vec![
        ChatMessage::text("user", CJK_TEXT),
        tool_call_message("call_1", "read_text_file", r#"{"path":"src/main.rs"}"#),
        tool_result(
            "call_1",
            "read_text_file",
            "fn main() {\n    println!(\"hi\");\n}\n",
        ),
    ]
}

const TIMESTAMPS: [&str; 3] = [
    "2026-01-02T03:04:05Z",
    "2026-01-02T03:04:06Z",
    "2026-01-02T03:04:07Z",
];

fn message_store_suite(
    runtime: &Runtime,
    plugin: &LoadedPlugin,
    scratch: &Scratch,
    options: &CheckOptions,
    suite: &mut Suite,
) {
    let dir = match scratch.task("store") {
        Ok(d) => d,
        Err(err) => return suite.record("task directory", Err(err)),
    };
    let mut store = match runtime.message_store(plugin, &dir) {
        Ok(s) => s,
        Err(err) => return suite.record("instantiate", Err(e(err))),
    };
    let messages = sample_messages();
    let mut added = Vec::new();

    suite.record(
        "open on an empty task directory",
        (|| {
            let stats = store.open().map_err(e)?;
            ensure!(
                stats.history_count == 0 && stats.current_count == 0 && stats.current_tokens == 0,
                "expected all-zero stats, got {stats:?}"
            );
            ensure!(
                !dir.join("messages.jsonl").exists(),
                "open created messages.jsonl (it must create no file)"
            );
            ensure!(
                !dir.join("current.jsonl").exists(),
                "open created current.jsonl (it must create no file)"
            );
            Ok("history 0, current 0, tokens 0; no file created".to_string())
        })(),
    );

    suite.record(
        "add-message ×3 (CJK text, a tool call, its result)",
        (|| {
            for (m, ts) in messages.iter().zip(TIMESTAMPS) {
                added.push(store.add_message(m, ts).map_err(e)?);
            }
            let seqs: Vec<u64> = added.iter().map(|a| a.seq).collect();
            ensure!(seqs == [1, 2, 3], "seqs {seqs:?}, expected [1, 2, 3]");
            ensure!(
                added.iter().all(|a| a.tokens > 0),
                "a message was counted as 0 tokens: {added:?}"
            );
            Ok(format!(
                "seqs 1, 2, 3; tokens {:?}",
                added.iter().map(|a| a.tokens).collect::<Vec<_>>()
            ))
        })(),
    );

    suite.record(
        "count-messages",
        (|| {
            let n = store.count_messages().map_err(e)?;
            ensure!(n == 3, "count-messages returned {n} after 3 appends");
            Ok("3".to_string())
        })(),
    );

    suite.record(
        "messages.jsonl lines",
        (|| {
            let lines: Vec<HistoryLine> = read_lines(&dir.join("messages.jsonl"))?;
            ensure!(lines.len() == 3, "{} lines, expected 3", lines.len());
            for (i, (line, m)) in lines.iter().zip(&messages).enumerate() {
                let n = i as u64 + 1;
                ensure!(
                    line.seq == n,
                    "line {n}: seq {} (seq must run 1..n without gaps)",
                    line.seq
                );
                ensure!(
                    normalized(&line.to_chat()) == normalized(m),
                    "line {n}: {:?} differs from the message added {:?}",
                    line.to_chat(),
                    m
                );
                ensure!(
                    line.timestamp == TIMESTAMPS[i],
                    "line {n}: timestamp {:?}, expected {:?}",
                    line.timestamp,
                    TIMESTAMPS[i]
                );
                if let Some(a) = added.get(i) {
                    ensure!(
                        line.tokens == a.tokens,
                        "line {n}: tokens {} but add-message returned {}",
                        line.tokens,
                        a.tokens
                    );
                }
                ensure!(line.summary_id.is_none(), "line {n}: unexpected summary_id");
            }
            let raw = fs::read(dir.join("messages.jsonl")).map_err(e)?;
            ensure!(
                raw.ends_with(b"\n"),
                "the last line is not newline-terminated"
            );
            Ok("3 HistoryLine lines, seq 1..3, content and timestamps as added".to_string())
        })(),
    );

    suite.record(
        "current.jsonl lines",
        (|| {
            let lines: Vec<ChatMessage> = read_lines(&dir.join("current.jsonl"))?;
            ensure!(lines.len() == 3, "{} lines, expected 3", lines.len());
            for (i, (line, m)) in lines.iter().zip(&messages).enumerate() {
                ensure!(
                    normalized(line) == normalized(m),
                    "line {}: {line:?} differs from the message added {m:?}",
                    i + 1
                );
            }
            let raw = fs::read_to_string(dir.join("current.jsonl")).map_err(e)?;
            ensure!(
                raw.contains("\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\""),
                "tool calls are not in OpenAI shape: {raw}"
            );
            Ok("3 OpenAI chat message lines equal to the messages added".to_string())
        })(),
    );

    suite.record(
        "current-context-file",
        (|| {
            let f = store.current_context_file().map_err(e)?;
            ensure!(
                f.trim_start_matches("./") == "current.jsonl",
                "returned {f:?}, expected \"current.jsonl\""
            );
            Ok(f)
        })(),
    );

    let mut tokens_before = 0;
    suite.record(
        "current-token-count",
        (|| {
            let t = store.current_token_count().map_err(e)?;
            let sum: u64 = added.iter().map(|a| a.tokens).sum();
            ensure!(t > 0, "0 tokens for 3 messages");
            ensure!(
                t == sum,
                "{t} tokens, but the appended messages were {sum} tokens"
            );
            tokens_before = t;
            Ok(format!("{t} tokens (= the sum of the appended messages)"))
        })(),
    );

    suite.record(
        "recreate-current-context from a copy of current.jsonl",
        (|| {
            fs::copy(dir.join("current.jsonl"), dir.join("recreate_src.jsonl")).map_err(e)?;
            let stats = store
                .recreate_current_context("recreate_src.jsonl")
                .map_err(e)?;
            ensure!(
                stats.current_count == 3,
                "current-count {} after recreating from 3 lines",
                stats.current_count
            );
            ensure!(
                stats.history_count == 3,
                "history-count {} (the history must not change)",
                stats.history_count
            );
            ensure!(
                stats.current_tokens == tokens_before,
                "recounted {} tokens, the running count was {tokens_before}",
                stats.current_tokens
            );
            let t = store.current_token_count().map_err(e)?;
            ensure!(
                t == stats.current_tokens,
                "current-token-count {t} differs from the recount {}",
                stats.current_tokens
            );
            ensure!(
                !dir.join("recreate_src.jsonl").exists(),
                "the source file was not deleted"
            );
            let lines: Vec<ChatMessage> = read_lines(&dir.join("current.jsonl"))?;
            ensure!(
                lines
                    .iter()
                    .map(normalized)
                    .eq(messages.iter().map(normalized)),
                "current.jsonl changed content"
            );
            Ok(format!("3 messages, {t} tokens, source deleted"))
        })(),
    );

    let short = vec![
        ChatMessage::text("system", "You are a coding agent."),
        ChatMessage::text(
            "user",
            "Summary of the work so far: read src/main.rs; 上下文。",
        ),
    ];
    let mut short_tokens = 0;
    suite.record(
        "recreate-current-context from a shorter context",
        (|| {
            write_lines(&dir.join("recreate_short.jsonl"), &short)?;
            let stats = store
                .recreate_current_context("recreate_short.jsonl")
                .map_err(e)?;
            ensure!(
                stats.current_count == 2,
                "current-count {}, expected 2",
                stats.current_count
            );
            ensure!(
                stats.history_count == 3,
                "history-count {}, expected 3",
                stats.history_count
            );
            let t = store.current_token_count().map_err(e)?;
            ensure!(
                t > 0 && t == stats.current_tokens,
                "current-token-count {t}, recount {}",
                stats.current_tokens
            );
            let host: u64 = short.iter().map(estimate_message_tokens).sum();
            ensure!(
                t < tokens_before,
                "{t} tokens for 2 short messages, not fewer than the {tokens_before} before"
            );
            let lines: Vec<ChatMessage> = read_lines(&dir.join("current.jsonl"))?;
            ensure!(
                lines
                    .iter()
                    .map(normalized)
                    .eq(short.iter().map(normalized)),
                "current.jsonl is not the source's messages"
            );
            let history: Vec<HistoryLine> = read_lines(&dir.join("messages.jsonl"))?;
            ensure!(
                history.len() == 3,
                "messages.jsonl changed to {} lines",
                history.len()
            );
            short_tokens = t;
            Ok(format!(
                "2 messages, {t} tokens (host estimate {host}); history still 3"
            ))
        })(),
    );

    suite.record("recreate-current-context rejects a malformed source", (|| {
        let before = fs::read(dir.join("current.jsonl")).map_err(e)?;
        let text = format!("{}\n{{\"role\": \"user\", \"content\n", serde_json::to_string(&short[0]).map_err(e)?);
        fs::write(dir.join("recreate_bad.jsonl"), text).map_err(e)?;
        match store.recreate_current_context("recreate_bad.jsonl") {
            Ok(stats) => return Err(format!("accepted a source whose line 2 is not JSON ({stats:?})")),
            Err(err) => {
                ensure!(is_plugin_error(&err), "expected an invalid-input error, got {err}");
                ensure!(
                    matches!(err.plugin_error(), Some(PluginError::InvalidInput(m)) if names_line(m, 2)),
                    "expected invalid-input naming line 2, got {err}"
                );
            }
        }
        ensure!(fs::read(dir.join("current.jsonl")).map_err(e)? == before, "current.jsonl changed");
        let t = store.current_token_count().map_err(e)?;
        ensure!(t == short_tokens, "current-token-count {t} changed (was {short_tokens})");
        Ok("invalid-input naming line 2; current.jsonl and counts unchanged".to_string())
    })());

    suite.record(
        "record-summary",
        (|| {
            let before = fs::read(dir.join("current.jsonl")).map_err(e)?;
            let summary = ChatMessage::text("assistant", "Summary: the agent read src/main.rs.");
            let a = store
                .record_summary(&summary, 1, "2026-01-02T03:05:00Z")
                .map_err(e)?;
            ensure!(a.seq == 4, "seq {}, expected 4", a.seq);
            let lines: Vec<HistoryLine> = read_lines(&dir.join("messages.jsonl"))?;
            ensure!(
                lines.len() == 4,
                "messages.jsonl has {} lines, expected 4",
                lines.len()
            );
            let last = &lines[3];
            ensure!(
                last.seq == 4 && last.role == "assistant",
                "last line {last:?}"
            );
            ensure!(
                last.summary_id == Some(1),
                "summary_id {:?}, expected 1",
                last.summary_id
            );
            // The spec's form is a JSON number; a 0.1.0 store was given (and writes) `"sum-1"`.
            let raw: Vec<Value> = read_lines(&dir.join("messages.jsonl"))?;
            let written = raw[3].get("summary_id").and_then(OnDisk::classify);
            match plugin.wit() {
                WitVersion::V0_1_0 => ensure!(
                    matches!(written, Some(OnDisk::Number(1) | OnDisk::Legacy(_, 1))),
                    "summary_id written as {}, expected 1 or \"sum-1\"",
                    raw[3]["summary_id"]
                ),
                WitVersion::V0_2_0 => ensure!(
                    written == Some(OnDisk::Number(1)),
                    "summary_id written as {}, expected the JSON number 1",
                    raw[3]["summary_id"]
                ),
            }
            ensure!(
                last.content == summary.content,
                "content {:?}",
                last.content
            );
            ensure!(
                fs::read(dir.join("current.jsonl")).map_err(e)? == before,
                "current.jsonl changed (summaries go to messages.jsonl only)"
            );
            Ok("seq 4 with summary_id in messages.jsonl; current.jsonl unchanged".to_string())
        })(),
    );
    drop(store);

    suite.record(
        "a new instance sees the same state",
        (|| {
            let mut again = runtime.message_store(plugin, &dir).map_err(e)?;
            let stats = again.open().map_err(e)?;
            ensure!(
                stats.history_count == 4,
                "history-count {}, expected 4",
                stats.history_count
            );
            ensure!(
                stats.current_count == 2,
                "current-count {}, expected 2",
                stats.current_count
            );
            ensure!(
                stats.current_tokens == short_tokens,
                "current-tokens {}, expected {short_tokens}",
                stats.current_tokens
            );
            let a = again
                .add_message(&ChatMessage::text("user", "next"), "2026-01-02T03:06:00Z")
                .map_err(e)?;
            ensure!(a.seq == 5, "the next append got seq {}, expected 5", a.seq);
            Ok(format!(
                "history 4, current 2, {short_tokens} tokens; next seq 5"
            ))
        })(),
    );

    suite.record(
        &format!(
            "large history ({} messages) in bounded memory",
            options.large_messages
        ),
        large_history(runtime, plugin, scratch, options),
    );
}

fn large_history(
    runtime: &Runtime,
    plugin: &LoadedPlugin,
    scratch: &Scratch,
    options: &CheckOptions,
) -> Outcome {
    let dir = scratch.task("store-large")?;
    let budget = options.memory_budget_bytes;
    let mut store = runtime.message_store(plugin, &dir).map_err(e)?;
    store.open().map_err(e)?;
    let filler = "x".repeat(options.large_message_bytes.saturating_sub(40));
    let started = Instant::now();
    let mut tokens = 0;
    for i in 1..=options.large_messages {
        let role = if i % 2 == 1 { "user" } else { "assistant" };
        let m = ChatMessage::text(role, format!("message {i} 上下文 {filler}"));
        let a = store.add_message(&m, "2026-01-02T03:04:05Z").map_err(e)?;
        ensure!(a.seq == i, "append {i} got seq {}", a.seq);
        tokens += a.tokens;
    }
    let elapsed = started.elapsed();
    ensure!(
        store.current_token_count().map_err(e)? == tokens,
        "current-token-count differs from the sum of appends"
    );
    let append_peak = store.memory_peak_bytes();
    drop(store);
    let mut again = runtime.message_store(plugin, &dir).map_err(e)?;
    let stats = again.open().map_err(e)?;
    ensure!(
        stats.history_count == options.large_messages
            && stats.current_count == options.large_messages,
        "reopened: {stats:?}, expected {} messages",
        options.large_messages
    );
    ensure!(
        stats.current_tokens == tokens,
        "reopened: {} tokens, expected {tokens}",
        stats.current_tokens
    );
    let open_peak = again.memory_peak_bytes();
    let size = fs::metadata(dir.join("messages.jsonl"))
        .map(|m| m.len())
        .unwrap_or(0);
    let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
    ensure!(
        append_peak <= budget && open_peak <= budget,
        "linear memory reached {:.1} MiB while appending and {:.1} MiB while opening a {:.1} MiB history; the \
         budget is {:.0} MiB (the store must stream files, not load them)",
        mib(append_peak),
        mib(open_peak),
        size as f64 / (1024.0 * 1024.0),
        mib(budget)
    );
    Ok(format!(
        "{} appends in {:.1} s ({:.0} µs each), messages.jsonl {:.1} MiB; peak linear memory {:.1} MiB appending, \
         {:.1} MiB reopening (budget {:.0} MiB)",
        options.large_messages,
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / options.large_messages.max(1) as f64,
        size as f64 / (1024.0 * 1024.0),
        mib(append_peak),
        mib(open_peak),
        mib(budget)
    ))
}

// ---------------------------------------------------------------------------------------------
// Request format

const MODEL: &str = "qwen\"2.5-coder:0.5b";
const UNICODE_TEXT: &str = "Résumé: 上下文压缩 \"quoted\" back\\slash\ttab\nnewline 😀 \u{1} end";

fn golden_context() -> Vec<ChatMessage> {
    vec![
        ChatMessage::text("system", "You are a coding agent."),
        ChatMessage::text("user", UNICODE_TEXT),
        tool_call_message("call_1", "read_text_file", r#"{"path":"src/main.rs"}"#),
        tool_result("call_1", "read_text_file", "fn main() {}\n"),
        ChatMessage::text("assistant", "Done."),
    ]
}

const TOOLS_JSON: &str = r#"[{"type":"function","function":{"name":"read_text_file","description":"Read a text file","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}]"#;

fn request_format_suite(
    runtime: &Runtime,
    plugin: &LoadedPlugin,
    scratch: &Scratch,
    suite: &mut Suite,
) {
    let dir = match scratch.task("format") {
        Ok(d) => d,
        Err(err) => return suite.record("task directory", Err(err)),
    };
    let mut format = match runtime.request_format(plugin, &dir) {
        Ok(f) => f,
        Err(err) => return suite.record("instantiate", Err(e(err))),
    };
    let context = golden_context();
    let mut endpoint = String::new();
    let mut request: Option<Value> = None;

    suite.record(
        "write-request",
        (|| {
            // Blank and whitespace-only lines between messages must be skipped.
            let mut text = String::new();
            for (i, m) in context.iter().enumerate() {
                text.push_str(&serde_json::to_string(m).map_err(e)?);
                text.push('\n');
                if i == 1 {
                    text.push('\n');
                }
                if i == 3 {
                    text.push_str("   \n");
                }
            }
            fs::write(dir.join("current.jsonl"), text).map_err(e)?;
            fs::write(dir.join("tools.json"), TOOLS_JSON).map_err(e)?;
            let config = RequestConfig {
                model: MODEL.into(),
                messages_file: "current.jsonl".into(),
                request_file: "request.json".into(),
                tools_file: Some("tools.json".into()),
                max_output_tokens: Some(256),
                temperature: Some(0.2),
            };
            let info = format.write_request(&config).map_err(e)?;
            let size = fs::metadata(dir.join("request.json"))
                .map_err(|err| format!("request.json: {err}"))?
                .len();
            ensure!(
                info.messages == 5,
                "reported {} messages, expected 5 (blank lines are not messages)",
                info.messages
            );
            ensure!(
                info.bytes == size,
                "reported {} bytes, request.json has {size}",
                info.bytes
            );
            ensure!(
                info.endpoint_path.starts_with('/'),
                "endpoint path {:?} does not start with /",
                info.endpoint_path
            );
            endpoint = info.endpoint_path.clone();
            Ok(format!(
                "{} bytes, 5 messages, endpoint {}",
                info.bytes, info.endpoint_path
            ))
        })(),
    );

    suite.record(
        "request.json is JSON with the model and every message",
        (|| {
            let raw = fs::read_to_string(dir.join("request.json"))
                .map_err(|err| format!("request.json: {err}"))?;
            let mut v: Value = serde_json::from_str(&raw)
                .map_err(|err| format!("request.json is not JSON: {err}"))?;
            ensure!(
                v.get("model").and_then(Value::as_str) == Some(MODEL),
                "model is {:?}, expected {MODEL:?}",
                v.get("model")
            );
            let view = message_view(&v).ok_or("no \"messages\" array")?;
            v["messages"] = Value::Array(view);
            let msgs = v["messages"].as_array().ok_or("no \"messages\" array")?;
            ensure!(
                msgs.len() == 5,
                "{} messages, expected 5 (blank lines skipped)",
                msgs.len()
            );
            let roles: Vec<&str> = msgs
                .iter()
                .map(|m| m.get("role").and_then(Value::as_str).unwrap_or("?"))
                .collect();
            // A tool result may be sent as a `user` message by formats for models without
            // native tool calling.
            ensure!(
                roles[..3] == ["system", "user", "assistant"]
                    && matches!(roles[3], "tool" | "user")
                    && roles[4] == "assistant",
                "roles {roles:?}, expected system, user, assistant, tool (or user), assistant"
            );
            request = Some(v);
            Ok(format!("model {MODEL:?}, 5 messages with roles in order"))
        })(),
    );

    suite.record("unicode, escapes and tool calls preserved", (|| {
        let v = request.as_ref().ok_or("no request to inspect")?;
        let msgs = v["messages"].as_array().ok_or("no messages")?;
        ensure!(msgs[1].get("content").and_then(Value::as_str) == Some(UNICODE_TEXT), "user content became {:?}", msgs[1].get("content"));
        let call = msgs[2].to_string();
        ensure!(call.contains("read_text_file") && call.contains("src/main.rs"), "the tool call is missing from message 3: {call}");
        let result = msgs[3].to_string();
        ensure!(result.contains("fn main() {}"), "the tool result is missing from message 4: {result}");
        Ok("CJK, emoji, quotes, backslash, control characters intact; tool call and result present".to_string())
    })());

    suite.record(
        "tools offered",
        (|| {
            let v = request.as_ref().ok_or("no request to inspect")?;
            if let Some(tools) = v.get("tools").and_then(Value::as_array) {
                ensure!(tools.len() == 1, "{} tools, expected 1", tools.len());
                ensure!(
                    tools[0].to_string().contains("read_text_file"),
                    "tool definition lost: {}",
                    tools[0]
                );
                return Ok("\"tools\" array with the one tool".to_string());
            }
            let system = v["messages"][0].to_string();
            ensure!(
                system.contains("read_text_file"),
                "neither a \"tools\" array nor the tool in the system prompt"
            );
            Ok("tool described in the system prompt".to_string())
        })(),
    );

    suite.record("write-request rejects a malformed line", (|| {
        fs::write(dir.join("bad.jsonl"), "{\"role\":\"system\",\"content\":\"x\"}\n{\"role\": \"user\", \"content\n").map_err(e)?;
        let config = RequestConfig {
            model: "m".into(),
            messages_file: "bad.jsonl".into(),
            request_file: "bad_request.json".into(),
            ..Default::default()
        };
        match format.write_request(&config) {
            Ok(info) => Err(format!("accepted a file whose line 2 is not JSON ({info:?})")),
            Err(err) => {
                ensure!(
                    matches!(err.plugin_error(), Some(PluginError::InvalidInput(m)) if names_line(m, 2)),
                    "expected invalid-input naming line 2, got {err}"
                );
                Ok(e(err))
            }
        }
    })());

    let samples = response_samples(&endpoint, plugin.wit());
    if samples.is_empty() {
        suite.record(
            "read-response",
            Ok(format!(
                "skipped: no sample responses for endpoint {endpoint:?}"
            )),
        );
    }
    for (i, sample) in samples.into_iter().enumerate() {
        let file = format!("response_{i}.json");
        let outcome = fs::write(dir.join(&file), sample.body)
            .map_err(e)
            .and_then(|_| {
                let got = format.read_response(&file);
                (sample.expect)(got)
            });
        suite.record(sample.name, outcome);
    }
}

/// The messages of a request body as one list in OpenAI's shape, whatever the provider's: a
/// top-level `system` (Anthropic's Messages API, a string or text blocks) becomes a first
/// `system` message, and content given as a list of blocks gets its text blocks joined as
/// `content` (the blocks are kept under `blocks`). `None` without a `messages` array.
fn message_view(body: &Value) -> Option<Vec<Value>> {
    let joined = |blocks: &[Value]| -> String {
        blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect()
    };
    let mut out = Vec::new();
    match body.get("system") {
        Some(Value::String(s)) => out.push(json!({"role": "system", "content": s})),
        Some(Value::Array(blocks)) => {
            out.push(json!({"role": "system", "content": joined(blocks)}))
        }
        _ => {}
    }
    for m in body.get("messages")?.as_array()? {
        let mut m = m.clone();
        if let Some(blocks) = m.get("content").and_then(Value::as_array).cloned() {
            m["content"] = Value::from(joined(&blocks));
            m["blocks"] = Value::Array(blocks);
        }
        out.push(m);
    }
    Some(out)
}

struct ResponseSample {
    name: &'static str,
    body: String,
    expect: Box<dyn Fn(Result<crate::runtime::Reply, RuntimeError>) -> Outcome>,
}

/// Sample responses for the provider behind `endpoint`. The OpenAI text reply reports 8 cached
/// prompt tokens (`prompt_tokens_details.cached_tokens`), expected as `cache-read-tokens` from a
/// 0.2.0 component, the Anthropic one 7 read and 3 written (`cache_read_input_tokens`,
/// `cache_creation_input_tokens`); a 0.1.0 component cannot report them (0).
fn response_samples(endpoint: &str, wit: WitVersion) -> Vec<ResponseSample> {
    let (openai_cached, anthropic_cache) = match wit {
        WitVersion::V0_1_0 => (0, (0, 0)),
        WitVersion::V0_2_0 => (8, (7, 3)),
    };
    const TEXT: &str = "Hello 世界 \"x\" \\ 😀";
    let text_reply =
        |usage: Usage| -> Box<dyn Fn(Result<crate::runtime::Reply, RuntimeError>) -> Outcome> {
            Box::new(move |got| {
                let r = got.map_err(e)?;
                ensure!(r.message.role == "assistant", "role {:?}", r.message.role);
                ensure!(
                    r.message.content.as_deref() == Some(TEXT),
                    "content {:?}, expected {TEXT:?}",
                    r.message.content
                );
                ensure!(
                    r.message.calls().is_empty(),
                    "unexpected tool calls {:?}",
                    r.message.tool_calls
                );
                ensure!(
                    r.usage == Some(usage),
                    "usage {:?}, expected {usage:?}",
                    r.usage
                );
                ensure!(
                    r.finish_reason.as_deref() == Some("stop"),
                    "finish reason {:?}",
                    r.finish_reason
                );
                Ok(format!(
                    "assistant text, usage {}/{}/{} (cache read {})",
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    usage.total_tokens,
                    usage.cache_read_tokens
                ))
            })
        };
    let tool_reply = |want_id: Option<&'static str>| -> Box<dyn Fn(Result<crate::runtime::Reply, RuntimeError>) -> Outcome> {
        Box::new(move |got| {
            let r = got.map_err(e)?;
            let calls = r.message.calls();
            ensure!(calls.len() == 1, "{} tool calls, expected 1", calls.len());
            let c = &calls[0];
            ensure!(c.function.name == "list_directory", "tool name {:?}", c.function.name);
            let args: Value = serde_json::from_str(&c.function.arguments)
                .map_err(|err| format!("arguments {:?} are not JSON text: {err}", c.function.arguments))?;
            ensure!(args == json!({"path": "."}), "arguments {args}");
            match want_id {
                Some(id) => ensure!(c.id == id, "id {:?}, expected {id:?}", c.id),
                None => ensure!(!c.id.is_empty(), "empty tool call id (one must be made up when the provider gives none)"),
            }
            Ok(format!("tool call {} list_directory({})", c.id, c.function.arguments))
        })
    };
    let rejected = |needle: Option<&'static str>| -> Box<dyn Fn(Result<crate::runtime::Reply, RuntimeError>) -> Outcome> {
        Box::new(move |got| match got {
            Ok(r) => Err(format!("accepted it as {:?}", r.message)),
            Err(err) => {
                ensure!(is_plugin_error(&err), "expected a plugin error, got {err}");
                if let Some(needle) = needle {
                    ensure!(err.to_string().contains(needle), "the error does not quote the provider's message: {err}");
                }
                Ok(e(err))
            }
        })
    };
    let html = "<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>".to_string();
    match endpoint {
        "/v1/chat/completions" => vec![
            ResponseSample {
                name: "read-response: OpenAI text reply with usage",
                body: json!({
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": TEXT}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17,
                              "prompt_tokens_details": {"cached_tokens": 8}}
                })
                .to_string(),
                expect: text_reply(Usage { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17, cache_read_tokens: openai_cached, cache_creation_tokens: 0 }),
            },
            ResponseSample {
                name: "read-response: OpenAI tool call reply",
                body: json!({
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_9", "type": "function", "function": {"name": "list_directory", "arguments": "{\"path\":\".\"}"}}
                    ]}, "finish_reason": "tool_calls"}]
                })
                .to_string(),
                expect: tool_reply(Some("call_9")),
            },
            ResponseSample {
                name: "read-response: provider error object",
                body: json!({"error": {"message": "model qwen not found", "type": "invalid_request_error"}}).to_string(),
                expect: rejected(Some("model qwen not found")),
            },
            ResponseSample { name: "read-response: HTML error page", body: html, expect: rejected(None) },
        ],
        "/api/chat" => vec![
            ResponseSample {
                name: "read-response: Ollama text reply with usage",
                body: json!({
                    "model": "m", "created_at": "2026-01-02T03:04:05Z",
                    "message": {"role": "assistant", "content": TEXT},
                    "done": true, "done_reason": "stop", "prompt_eval_count": 12, "eval_count": 5
                })
                .to_string(),
                expect: text_reply(Usage { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17, ..Usage::default() }),
            },
            ResponseSample {
                name: "read-response: Ollama tool call reply",
                body: json!({
                    "model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [
                        {"function": {"name": "list_directory", "arguments": {"path": "."}}}
                    ]}, "done": true, "done_reason": "stop"
                })
                .to_string(),
                expect: tool_reply(None),
            },
            ResponseSample {
                name: "read-response: provider error object",
                body: json!({"error": "model 'qwen' not found"}).to_string(),
                expect: rejected(Some("model 'qwen' not found")),
            },
            ResponseSample { name: "read-response: HTML error page", body: html, expect: rejected(None) },
        ],
        "/v1/messages" => vec![
            ResponseSample {
                name: "read-response: Anthropic text reply with usage (cache tokens in the prompt)",
                body: json!({
                    "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                    "content": [{"type": "text", "text": TEXT}], "stop_reason": "end_turn",
                    "usage": {"input_tokens": 2, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 7, "output_tokens": 5}
                })
                .to_string(),
                expect: text_reply(Usage { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17, cache_read_tokens: anthropic_cache.0, cache_creation_tokens: anthropic_cache.1 }),
            },
            ResponseSample {
                name: "read-response: Anthropic tool_use reply",
                body: json!({
                    "type": "message", "role": "assistant", "stop_reason": "tool_use",
                    "content": [{"type": "tool_use", "id": "toolu_9", "name": "list_directory", "input": {"path": "."}}]
                })
                .to_string(),
                expect: tool_reply(Some("toolu_9")),
            },
            ResponseSample {
                name: "read-response: provider error object",
                body: json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}).to_string(),
                expect: rejected(Some("Overloaded")),
            },
            ResponseSample { name: "read-response: HTML error page", body: html, expect: rejected(None) },
        ],
        _ => Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Compressor

const FIXED_SUMMARY: &str =
    "SUMMARY: the agent listed the repository and read four files; nothing is broken.";

/// One `llm.complete` call as the fake LLM saw it.
#[derive(Debug, Clone)]
struct LlmCall {
    messages_file: String,
    /// Messages in the file, or why it could not be read.
    messages: Result<Vec<ChatMessage>, String>,
    max_output_tokens: u32,
}

/// An [`LlmImport`] answering every request with [`FIXED_SUMMARY`] (or failing), recording
/// what it was asked.
struct FakeLlm {
    dir: PathBuf,
    fail: bool,
    calls: Arc<Mutex<Vec<LlmCall>>>,
}

impl LlmImport for FakeLlm {
    fn complete(
        &mut self,
        messages_file: &str,
        max_output_tokens: u32,
    ) -> Result<Completion, String> {
        let messages = read_lines::<ChatMessage>(&self.dir.join(messages_file));
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(LlmCall {
                messages_file: messages_file.to_string(),
                messages,
                max_output_tokens,
            });
        if self.fail {
            return Err(
                "HTTP 500 from http://127.0.0.1:1/v1/chat/completions after 3 attempts (fake LLM)"
                    .to_string(),
            );
        }
        Ok(Completion {
            message: ChatMessage::text("assistant", FIXED_SUMMARY),
            usage: Some(Usage {
                prompt_tokens: 100,
                completion_tokens: 20,
                total_tokens: 120,
                ..Usage::default()
            }),
        })
    }
}

/// A context of `turns` rounds (question, tool call, tool result, answer) after a system
/// prompt, as current.jsonl and messages.jsonl.
fn write_synthetic_task(dir: &Path, turns: usize) -> Result<Vec<ChatMessage>, String> {
    let mut context = vec![ChatMessage::text(
        "system",
        "You are a coding agent. Use the tools; answer briefly.",
    )];
    for t in 1..=turns {
        let id = format!("call_{t}");
        context.push(ChatMessage::text(
            "user",
            format!(
                "Step {t}: look at file_{t}.rs and explain it. {}",
                "Details. ".repeat(20)
            ),
        ));
        context.push(tool_call_message(
            &id,
            "read_text_file",
            &format!("{{\"path\":\"file_{t}.rs\"}}"),
        ));
        context.push(tool_result(
            &id,
            "read_text_file",
            &format!("// file {t}\n{}", "fn item() -> u32 { 42 }\n".repeat(12)),
        ));
        context.push(ChatMessage::text(
            "assistant",
            format!(
                "file_{t}.rs defines item() returning 42. {}",
                "Noted. ".repeat(10)
            ),
        ));
    }
    let history: Vec<HistoryLine> = context
        .iter()
        .enumerate()
        .map(|(i, m)| HistoryLine {
            seq: i as u64 + 1,
            role: m.role.clone(),
            content: m.content.clone(),
            timestamp: "2026-01-02T03:04:05Z".into(),
            tokens: estimate_message_tokens(m),
            tool_name: m.tool_name.clone(),
            tool_calls: m.tool_calls.clone(),
            tool_call_id: m.tool_call_id.clone(),
            summary_id: None,
        })
        .collect();
    write_lines(&dir.join("current.jsonl"), &context)?;
    write_lines(&dir.join("messages.jsonl"), &history)?;
    Ok(context)
}

fn compress_config(context_tokens: u64) -> CompressConfig {
    // The context is at 90 % of the window: over a 0.7 threshold.
    CompressConfig {
        context_length: context_tokens * 10 / 9,
        threshold: 0.7,
        keep_recent_messages: 5,
        summary_prompt: "Summarize the conversation so far for the agent to continue:\n{messages}"
            .into(),
        reserve_output_tokens: 256,
    }
}

fn compressor_suite(
    runtime: &Runtime,
    plugin: &LoadedPlugin,
    scratch: &Scratch,
    suite: &mut Suite,
) {
    let dir = match scratch.task("compress") {
        Ok(d) => d,
        Err(err) => return suite.record("task directory", Err(err)),
    };
    let calls = Arc::new(Mutex::new(Vec::new()));
    let llm = FakeLlm {
        dir: dir.clone(),
        fail: false,
        calls: calls.clone(),
    };
    let mut compressor = match runtime.compressor(plugin, &dir, Box::new(llm)) {
        Ok(c) => c,
        Err(err) => return suite.record("instantiate", Err(e(err))),
    };

    suite.record("should-compress around the threshold", (|| {
        let config = CompressConfig {
            context_length: 1000,
            threshold: 0.5,
            keep_recent_messages: 5,
            summary_prompt: "{messages}".into(),
            reserve_output_tokens: 100,
        };
        let mut seen = Vec::new();
        for (tokens, want) in [(0, false), (499, false), (500, false), (501, true), (5000, true)] {
            let got = compressor.should_compress(tokens, &config).map_err(e)?;
            ensure!(got == want, "should-compress({tokens}) with window 1000 × 0.5 returned {got}, expected {want}");
            seen.push(format!("{tokens}→{got}"));
        }
        Ok(seen.join(", "))
    })());

    let context = match write_synthetic_task(&dir, 12) {
        Ok(c) => c,
        Err(err) => return suite.record("synthetic context", Err(err)),
    };
    let original_tokens: u64 = context.iter().map(estimate_message_tokens).sum();
    let config = compress_config(original_tokens);
    let current_before = fs::read(dir.join("current.jsonl")).unwrap_or_default();

    let result = compressor.compress(&config);
    let result = match result {
        Ok(r) => {
            suite.record(
                "compress an over-threshold context",
                Ok(format!(
                    "{} messages / {original_tokens} tokens in a {}-token window → {}",
                    context.len(),
                    config.context_length,
                    r.context_file
                )),
            );
            r
        }
        Err(err) => return suite.record("compress an over-threshold context", Err(e(err))),
    };
    let new_path = dir.join(&result.context_file);

    suite.record(
        "the new context is a separate file of chat messages",
        (|| {
            let name = result.context_file.trim_start_matches("./");
            ensure!(
                name != "current.jsonl",
                "compress wrote current.jsonl itself (it must write a new file)"
            );
            ensure!(
                !Path::new(name).is_absolute() && !name.contains(".."),
                "context file {name:?} is outside the task directory"
            );
            let lines: Vec<ChatMessage> = read_lines(&new_path)?;
            Ok(format!("{name}: {} messages", lines.len()))
        })(),
    );

    let new_context: Vec<ChatMessage> = read_lines(&new_path).unwrap_or_default();

    suite.record(
        "system prompt first, tool calls paired",
        (|| {
            ensure!(
                new_context.first() == Some(&context[0]),
                "the first message is {:?}, not the system prompt",
                new_context.first()
            );
            let summary = check_context_file(&new_path, false).map_err(e)?;
            Ok(format!(
                "{} messages pass the host's invariants",
                summary.messages
            ))
        })(),
    );

    suite.record(
        "fewer tokens, recent messages kept",
        (|| {
            let tokens: u64 = new_context.iter().map(estimate_message_tokens).sum();
            ensure!(
                tokens < original_tokens,
                "{tokens} tokens, not fewer than the original {original_tokens}"
            );
            ensure!(
                new_context.last() == context.last(),
                "the last message was not kept verbatim"
            );
            Ok(format!(
                "{original_tokens} → {tokens} tokens; last message kept"
            ))
        })(),
    );

    suite.record("summary from the llm import", (|| {
        let calls = calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if calls.is_empty() {
            ensure!(result.summary.is_none(), "reported a summary without asking the LLM");
            return Ok("the strategy does not call the LLM".to_string());
        }
        for c in &calls {
            let msgs = c.messages.as_ref().map_err(|err| format!("llm.complete({:?}): {err}", c.messages_file))?;
            let tokens: u64 = msgs.iter().map(estimate_message_tokens).sum();
            ensure!(
                tokens + c.max_output_tokens as u64 <= config.context_length,
                "a summary request of {tokens} tokens + {} output does not fit the {}-token window",
                c.max_output_tokens,
                config.context_length
            );
        }
        let text = serde_json::to_string(&new_context).map_err(e)?;
        ensure!(text.contains("SUMMARY: the agent listed"), "the new context does not contain the LLM's summary");
        if let Some(s) = &result.summary {
            ensure!(s.start_seq >= 1 && s.start_seq <= s.end_seq, "summary covers seq {}..{}", s.start_seq, s.end_seq);
            ensure!(s.summary.contains("SUMMARY: the agent listed"), "summary text {:?}", s.summary);
            // The spec's form is a JSON number; a 0.1.0 compressor writes strings (`sum-N`, or its
            // own scheme, which the host's shim numbered).
            let lines: Vec<Value> = read_lines(&dir.join("summaries.jsonl"))?;
            let legacy = plugin.wit() == WitVersion::V0_1_0;
            let found = lines.iter().filter_map(|l| l.get("id").and_then(OnDisk::classify)).any(|id| match id {
                OnDisk::Number(n) => n == s.id,
                OnDisk::Legacy(_, n) => legacy && n == s.id,
                OnDisk::Unreadable(_) => legacy,
            });
            ensure!(found, "summaries.jsonl has no line with id {} (a JSON number)", s.id);
        }
        Ok(format!("{} llm.complete call(s), each fits the window; summary in the new context", calls.len()))
    })());

    suite.record(
        "current.jsonl untouched, temporaries removed",
        (|| {
            ensure!(
                fs::read(dir.join("current.jsonl")).map_err(e)? == current_before,
                "current.jsonl was modified"
            );
            let allowed: BTreeSet<&str> = [
                "current.jsonl",
                "messages.jsonl",
                "summaries.jsonl",
                "tools.jsonl",
                result.context_file.trim_start_matches("./"),
            ]
            .into_iter()
            .collect();
            let mut extra = Vec::new();
            for entry in fs::read_dir(&dir).map_err(e)? {
                let name = entry.map_err(e)?.file_name().to_string_lossy().to_string();
                if !allowed.contains(name.as_str()) {
                    extra.push(name);
                }
            }
            ensure!(extra.is_empty(), "left behind {extra:?}");
            Ok("no stray files".to_string())
        })(),
    );
    drop(compressor);

    suite.record(
        "compress with a failing LLM leaves the context as it was",
        (|| {
            let dir = scratch.task("compress-fail")?;
            let context = write_synthetic_task(&dir, 12)?;
            let before = fs::read(dir.join("current.jsonl")).map_err(e)?;
            let calls = Arc::new(Mutex::new(Vec::new()));
            let llm = FakeLlm {
                dir: dir.clone(),
                fail: true,
                calls: calls.clone(),
            };
            let mut compressor = runtime.compressor(plugin, &dir, Box::new(llm)).map_err(e)?;
            let tokens: u64 = context.iter().map(estimate_message_tokens).sum();
            let outcome = compressor.compress(&compress_config(tokens));
            let called = !calls.lock().unwrap_or_else(|p| p.into_inner()).is_empty();
            ensure!(
                fs::read(dir.join("current.jsonl")).map_err(e)? == before,
                "current.jsonl was modified"
            );
            match outcome {
                Err(err) => {
                    ensure!(
                        is_plugin_error(&err),
                        "expected the component's error, got {err}"
                    );
                    ensure!(called, "failed without calling the LLM: {err}");
                    Ok(e(err))
                }
                Ok(r) if !called => Ok(format!(
                    "the strategy does not call the LLM ({})",
                    r.context_file
                )),
                Ok(r) => Err(format!(
                    "reported success ({}) although the LLM failed",
                    r.context_file
                )),
            }
        })(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_json_has_the_agreed_shape() {
        let r = CheckReport {
            component: "builtin:x".into(),
            world: Some("message-store-plugin".into()),
            version: Some("0.1.0".into()),
            checks: vec![
                Check {
                    name: "a".into(),
                    passed: true,
                    detail: "ok".into(),
                },
                Check {
                    name: "b".into(),
                    passed: false,
                    detail: "bad".into(),
                },
            ],
        };
        let v = r.to_json();
        assert_eq!(v["passed"], false);
        assert_eq!(v["checks"][1]["detail"], "bad");
        assert!(r.to_text().contains("FAIL  b: bad"));
        assert!(r.to_text().contains("1 of 2 checks passed"));
    }

    #[test]
    fn synthetic_context_is_valid_and_over_threshold() {
        let s = Scratch::new("unit").unwrap();
        let dir = s.task("t").unwrap();
        let context = write_synthetic_task(&dir, 12).unwrap();
        check_context_file(&dir.join("current.jsonl"), false).unwrap();
        let tokens: u64 = context.iter().map(estimate_message_tokens).sum();
        let c = compress_config(tokens);
        assert!(tokens as f64 > c.context_length as f64 * c.threshold);
    }
}
