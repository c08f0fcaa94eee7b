//! `ctxhost plugin try PLUGIN --context current.jsonl [--reply TEXT | --replies FILE]`: one
//! call of a component's world on a copy of a context, in a second, without a task or network.
//!
//! The context (chat messages, one JSON object a line, as current.jsonl) is copied into a
//! temporary task directory as current.jsonl and messages.jsonl; then, by the world:
//! - compressor: one `compress` (window: the context's tokens ÷ 0.9, so it is over a 0.7
//!   threshold; 5 recent messages kept);
//! - request format: `write-request` of the context, then `read-response` of the first canned
//!   reply wrapped in the body of the format's endpoint (OpenAI, Ollama or Anthropic);
//! - message store: `open`, then `add-message` of a user message holding the first canned reply;
//! - strategy: the `start` hook through the agent loop's driver (the decision held to the
//!   host's rules, planning entries committed with it).
//!
//! The `llm` import answers each request with the next canned reply (the last one repeats).
//! The instance gets the limits a task's would (`runtime.memory_limit_mib`,
//! `runtime.call_timeout_secs`, … of `--config`: [`TryOptions::limits`]); a Ctrl-C interrupts a
//! compressor's or strategy's call at once ([`TryOptions::interrupt`]). What the component
//! prints (stdout and stderr) is logged at info level, each line tagged with the component and
//! the hook ([`crate::runtime::output`]).
//! The report: what the call returned, the files it wrote or changed (name, size), the LLM
//! requests it made (each message's role and its first [`SHOWN_CHARS`] characters), and the
//! host's invariant checks on the resulting context file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, anyhow};
use ctxhost_format::files::CURRENT;
use ctxhost_format::{ChatMessage, estimate_message_tokens};

use super::compressor::{compress_config, write_task};
use super::harness::{Scratch, parse_lines, read_lines};
use crate::agent::strategy::StrategyDriver;
use crate::invariants::check_context_file;
use crate::runtime::{
    Completion, LlmImport, PluginKind, RequestConfig, Runtime, StrategyConfig, TaskState, Usage,
};
use crate::task::{PlanningStore, SharedPlanning};
use ctxhost_format::planning::Hook;

/// Characters of each LLM request message shown in the report.
pub const SHOWN_CHARS: usize = 160;

/// Largest `--context` file `plugin try` reads, in bytes (64 MiB: twice the default
/// `llm.max_request_mib`, so no context that could be sent is refused).
pub const MAX_CONTEXT_BYTES: u64 = 64 << 20;
/// Largest `--replies` file `plugin try` reads, in bytes (16 MiB: the default
/// `llm.max_response_mib`).
pub const MAX_REPLIES_BYTES: u64 = 16 << 20;

/// The bytes of `path`, at most `max` of them (a larger file, or an endless one such as
/// /dev/zero or a FIFO that keeps writing, is an error naming `flag` and the limit, not read
/// to the end).
fn read_bounded(flag: &str, path: &Path, max: u64) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let file = fs::File::open(path).with_context(|| format!("{flag} {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("{flag} {}", path.display()))?;
    if bytes.len() as u64 > max {
        anyhow::bail!(
            "{flag} {}: larger than {} MiB, more than `plugin try` reads",
            path.display(),
            max >> 20
        );
    }
    Ok(bytes)
}

/// What `plugin try` runs on.
#[derive(Debug, Clone)]
pub struct TryOptions {
    /// The context to copy: chat messages, one JSON object a line.
    pub context: PathBuf,
    /// Canned LLM replies, used in order; the last repeats. Empty: `canned reply`.
    pub replies: Vec<String>,
    /// The limits of the instance (a task's: [`crate::config::Config::runtime_limits`]).
    pub limits: crate::runtime::RuntimeLimits,
    /// Asked while a compressor's or strategy's call runs: a request interrupts it
    /// ([`crate::runtime::RuntimeError::Interrupted`]). `None`: the call runs to its deadline.
    pub interrupt: Option<crate::interrupt::InterruptProbe>,
}

/// The replies of a `--replies FILE`: one reply per line, or a JSON array of strings.
///
/// # Errors
/// The file cannot be read, is larger than [`MAX_REPLIES_BYTES`], is not UTF-8, is a JSON
/// array that is not of strings, or holds no reply.
pub fn read_replies(path: &Path) -> anyhow::Result<Vec<String>> {
    let bytes = read_bounded("--replies", path, MAX_REPLIES_BYTES)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| anyhow!("--replies {}: not UTF-8 text: {e}", path.display()))?;
    let replies: Vec<String> = if text.trim_start().starts_with('[') {
        serde_json::from_str(&text)
            .with_context(|| format!("--replies {}: not a JSON array of strings", path.display()))?
    } else {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect()
    };
    if replies.is_empty() {
        anyhow::bail!(
            "--replies {}: no replies in it (one reply a line, or a JSON array of strings)",
            path.display()
        );
    }
    Ok(replies)
}

/// The LLM requests made: each request's messages, or why its file could not be read.
type Requests = Arc<Mutex<Vec<Result<Vec<ChatMessage>, String>>>>;

/// An LLM answering from canned replies, recording the requests' messages.
struct CannedLlm {
    dir: PathBuf,
    replies: Vec<String>,
    requests: Requests,
    interrupt: Option<crate::interrupt::InterruptProbe>,
}

impl LlmImport for CannedLlm {
    fn interrupt_probe(&self) -> Option<crate::interrupt::InterruptProbe> {
        self.interrupt.clone()
    }

    fn complete(
        &mut self,
        messages_file: &str,
        _max_output_tokens: u32,
        _deadline: std::time::Instant,
    ) -> Result<Completion, String> {
        let messages = read_lines::<ChatMessage>(&self.dir.join(messages_file));
        let mut requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        let n = requests.len();
        requests.push(messages);
        let reply = self
            .replies
            .get(n)
            .or(self.replies.last())
            .cloned()
            .unwrap_or_else(|| "canned reply".to_string());
        Ok(Completion {
            message: ChatMessage::text("assistant", &reply),
            usage: Some(Usage::default()),
        })
    }
}

/// `plugin try`: [`try_plugin`] with the runtime of `plugin check` (its compile cache) and
/// `options.limits`.
///
/// # Errors
/// As [`try_plugin`].
pub fn run(source: &str, options: &TryOptions) -> anyhow::Result<String> {
    let fallback;
    let cache = match super::check_cache_dir() {
        Some(dir) => dir,
        None => {
            fallback = Scratch::new("try-cache")?;
            fallback.path().to_path_buf()
        }
    };
    let runtime = Runtime::new(&cache, options.limits)?;
    try_plugin(&runtime, source, options)
}

/// Run one call of `source`'s world as the module doc says; the report as text.
///
/// # Errors
/// The component does not load, the context cannot be read, the call fails (the component's
/// error as the runtime names it), or a strategy's decision breaks the host's rules.
pub fn try_plugin(runtime: &Runtime, source: &str, options: &TryOptions) -> anyhow::Result<String> {
    let plugin = crate::plugins::load_plugin(runtime, "component", source, None)?;
    let bytes = read_bounded("--context", &options.context, MAX_CONTEXT_BYTES)?;
    let name = options
        .context
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let context: Vec<ChatMessage> = parse_lines(&name, bytes.as_slice())
        .map_err(|e| anyhow!("--context {}: {e}", options.context.display()))?;
    let scratch = Scratch::new("try")?;
    let dir = scratch.task("task").map_err(|e| anyhow!(e))?;
    write_task(&dir, &context).map_err(|e| anyhow!(e))?;
    let mut before = listing(&dir);
    let first_reply = options
        .replies
        .first()
        .cloned()
        .unwrap_or_else(|| "canned reply".to_string());
    let requests: Requests = Arc::default();
    let llm = CannedLlm {
        dir: dir.clone(),
        replies: options.replies.clone(),
        requests: requests.clone(),
        interrupt: options.interrupt.clone(),
    };
    let mut out = String::new();
    writeln!(
        out,
        "component {source}: world {}, WIT {}; context {} ({} messages)",
        plugin.kind().world(),
        plugin.wit_version(),
        options.context.display(),
        context.len()
    )?;
    let checked_file: String = match plugin.kind() {
        PluginKind::Compressor => {
            let tokens: u64 = context.iter().map(estimate_message_tokens).sum();
            let config = compress_config(tokens.max(1));
            let mut compressor = runtime.compressor(&plugin, &dir, Box::new(llm))?;
            let result = compressor.compress(&config)?;
            writeln!(out, "compress returned: {result:?}")?;
            result.context_file.trim_start_matches("./").to_string()
        }
        PluginKind::RequestFormat => {
            let mut format = runtime.request_format(&plugin, &dir)?;
            let info = format.write_request(&RequestConfig {
                model: "try-model".into(),
                messages_file: CURRENT.into(),
                request_file: "request.json".into(),
                ..Default::default()
            })?;
            writeln!(out, "write-request returned: {info:?}")?;
            let body = response_body(&info.endpoint_path, &first_reply)?;
            fs::write(dir.join("response.json"), &body)?;
            // The host wrote it, not the component.
            before.insert("response.json".to_string(), body.len() as u64);
            let reply = format.read_response("response.json", false)?;
            writeln!(out, "read-response returned: {reply:?}")?;
            CURRENT.to_string()
        }
        PluginKind::MessageStore => {
            let mut store = runtime.message_store(&plugin, &dir)?;
            let stats = store.open()?;
            writeln!(out, "open returned: {stats:?}")?;
            let added = store.add_message(
                &ChatMessage::text("user", &first_reply),
                "2026-01-02T03:04:05Z",
            )?;
            writeln!(out, "add-message returned: {added:?}")?;
            CURRENT.to_string()
        }
        PluginKind::Strategy => {
            let planning = SharedPlanning::new(PlanningStore::open(
                &crate::task_dir::TaskDir::open(&dir)?,
                "00000000-0000-4000-8000-0000000007e1",
            )?);
            let instance =
                runtime.strategy(&plugin, &dir, Box::new(llm), Box::new(planning.clone()))?;
            let mut driver = StrategyDriver::new(
                instance,
                planning,
                StrategyConfig {
                    max_steps: 20,
                    context_length: 8192,
                    max_output_tokens: Some(512),
                    settings: crate::config::StrategySection::default().settings_json(),
                },
            );
            let prompt = context
                .iter()
                .find(|m| m.role == "user")
                .and_then(|m| m.content.clone())
                .unwrap_or_default();
            let state = TaskState {
                prompt,
                steps_done: 0,
                seq: context.len() as u64,
                context_file: CURRENT.into(),
                context_tokens: context.iter().map(estimate_message_tokens).sum(),
                tools_file: None,
            };
            let decision = driver
                .hook(
                    Hook::Start,
                    &state,
                    "2026-01-02T03:04:05.000Z".into(),
                    |s, c, t| s.start(c, t),
                )
                .map_err(|e| anyhow!("{e:#}"))?;
            writeln!(out, "start returned: {decision:?}")?;
            CURRENT.to_string()
        }
    };
    let after = listing(&dir);
    writeln!(out, "files written:")?;
    let mut wrote = 0;
    for (name, size) in &after {
        if before.get(name) != Some(size) {
            writeln!(out, "  {name} ({size} bytes)")?;
            wrote += 1;
        }
    }
    if wrote == 0 {
        writeln!(out, "  none")?;
    }
    let requests = requests.lock().unwrap_or_else(|p| p.into_inner());
    writeln!(out, "llm requests: {}", requests.len())?;
    for (i, request) in requests.iter().enumerate() {
        match request {
            Ok(messages) => {
                writeln!(out, "  request {}: {} messages", i + 1, messages.len())?;
                for m in messages {
                    let text = m.content.as_deref().unwrap_or("");
                    let shown: String = text.chars().take(SHOWN_CHARS).collect();
                    let more = if shown.len() < text.len() { "…" } else { "" };
                    writeln!(out, "    {}: {:?}{more}", m.role, shown)?;
                }
            }
            Err(e) => writeln!(out, "  request {}: unreadable: {e}", i + 1)?,
        }
    }
    let task_dir = crate::task_dir::TaskDir::open(&dir)?;
    match check_context_file(&task_dir, &checked_file, false) {
        Ok(summary) => writeln!(
            out,
            "invariants: PASS {checked_file}: {} messages pass the host's invariants",
            summary.messages
        )?,
        Err(e) => writeln!(out, "invariants: FAIL {checked_file}: {e}")?,
    }
    Ok(out)
}

/// Every file under `dir` (relative name → size in bytes).
fn listing(dir: &Path) -> BTreeMap<String, u64> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(path),
                Ok(m) => {
                    let name = path.strip_prefix(dir).unwrap_or(&path);
                    files.insert(name.display().to_string(), m.len());
                }
                Err(_) => {}
            }
        }
    }
    files
}

/// A provider response whose assistant text is `text`, in the shape of `endpoint`'s API.
fn response_body(endpoint: &str, text: &str) -> anyhow::Result<String> {
    let body = match endpoint {
        "/api/chat" => serde_json::json!({
            "model": "try-model", "done": true,
            "message": {"role": "assistant", "content": text},
            "prompt_eval_count": 10, "eval_count": 5
        }),
        "/v1/messages" => serde_json::json!({
            "type": "message", "role": "assistant", "model": "try-model",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 5}
        }),
        _ => serde_json::json!({
            "object": "chat.completion", "model": "try-model",
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        }),
    };
    Ok(serde_json::to_string(&body)?)
}
