//! Shared by the compression tests and `host/benches/compression.rs`: one runtime with the
//! builtin store and compressors, a scripted fake `LlmImport`, and [`Task`], a task directory
//! built message by message through the real message store.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ctxhost::compaction::{CompactionError, CompactionOutcome, compact_if_needed};
use ctxhost::config::DEFAULT_SUMMARY_PROMPT;
use ctxhost::runtime::{
    Completion, CompressConfig, Compressor, LlmImport, LoadedPlugin, MessageStore, PluginKind,
    PluginSource, Runtime, RuntimeLimits,
};
use ctxhost_format::compress::{LineKind, is_summary_line};
use ctxhost_format::{ChatMessage, ToolCall, ToolLine, ToolStatus, estimate_message_tokens};
use std::collections::VecDeque;

pub const TS: &str = "2026-01-02T03:04:05.000Z";
/// Files a compressor may create and must not leave behind after a failure.
pub const TEMPORARIES: [&str; 4] = [
    "to_summarize.jsonl",
    "unsummarized.jsonl",
    "summary_request.jsonl",
    "compressed.jsonl",
];

// ---------------------------------------------------------------------------------------------
// Runtime, task directories, the fake LLM

/// The two compressors under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Summarizer,
    Masking,
}

/// One runtime and the three builtins, shared by every test of this binary.
pub struct Env {
    pub rt: Runtime,
    pub store: LoadedPlugin,
    pub summarizer: LoadedPlugin,
    pub masking: LoadedPlugin,
}

pub fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compression-test-cache");
        let rt = Runtime::new(&cache, RuntimeLimits::default()).expect("runtime");
        let load = |name: &str, kind| {
            rt.load(&name.parse::<PluginSource>().unwrap(), kind)
                .unwrap()
        };
        let store = load("builtin:jsonl-store", PluginKind::MessageStore);
        let summarizer = load("builtin:llm-summarizer", PluginKind::Compressor);
        let masking = load("builtin:observation-masking", PluginKind::Compressor);
        Env {
            rt,
            store,
            summarizer,
            masking,
        }
    })
}

/// One `llm.complete` call as the fake saw it.
#[derive(Debug, Clone)]
pub struct LlmCall {
    pub messages: Vec<ChatMessage>,
    pub max_output_tokens: u32,
}

#[derive(Default)]
pub struct LlmState {
    /// Scripted answers, in order; when empty, a short summary naming the call number.
    pub replies: VecDeque<Result<String, String>>,
    pub calls: Vec<LlmCall>,
    /// Time spent inside `complete` (reading the request file included).
    pub time: Duration,
}

/// The fake `llm` import: reads the request file the component wrote, records it, answers from
/// the script. Cloning shares the record.
#[derive(Clone)]
pub struct FakeLlm {
    pub dir: PathBuf,
    pub state: Arc<Mutex<LlmState>>,
}

impl FakeLlm {
    pub fn new(dir: &Path) -> FakeLlm {
        FakeLlm {
            dir: dir.to_path_buf(),
            state: Arc::default(),
        }
    }

    pub fn script(self, replies: impl IntoIterator<Item = Result<String, String>>) -> FakeLlm {
        self.state.lock().unwrap().replies.extend(replies);
        self
    }

    pub fn calls(&self) -> Vec<LlmCall> {
        self.state.lock().unwrap().calls.clone()
    }
}

impl LlmImport for FakeLlm {
    fn complete(
        &mut self,
        messages_file: &str,
        max_output_tokens: u32,
        _deadline: std::time::Instant,
    ) -> Result<Completion, String> {
        assert!(
            !messages_file.is_empty()
                && !messages_file.contains("..")
                && !messages_file.starts_with('/'),
            "request file {messages_file:?} must be a plain relative path"
        );
        let started = Instant::now();
        let messages = read_jsonl::<ChatMessage>(&self.dir.join(messages_file));
        let mut state = self.state.lock().unwrap();
        state.time += started.elapsed();
        state.calls.push(LlmCall {
            messages,
            max_output_tokens,
        });
        let n = state.calls.len();
        let reply = state
            .replies
            .pop_front()
            .unwrap_or_else(|| Ok(format!("summary {n}: the agent worked.")));
        reply.map(|text| Completion {
            message: ChatMessage::text("assistant", text),
            usage: None,
        })
    }
}

pub fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> Vec<T> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display())))
        .collect()
}

/// Where a message of current.jsonl comes from in messages.jsonl (the test's model).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A history line with this seq.
    Seq(u64),
    /// A summary of seqs S..=E.
    Summary(u64, u64),
}

/// A task directory with a message store, a tools.jsonl the test writes like the agent does,
/// and the model of where each context line comes from.
pub struct Task {
    pub dir: tempfile::TempDir,
    pub store: MessageStore,
    pub origins: Vec<Origin>,
    pub tools_seq: u64,
    pub log_tools: bool,
    pub next_call: u64,
}

impl Task {
    pub fn new(system: &str) -> Task {
        let dir = tempfile::tempdir().unwrap();
        let mut store = env().rt.message_store(&env().store, dir.path()).unwrap();
        store.open().unwrap();
        let mut task = Task {
            dir,
            store,
            origins: Vec::new(),
            tools_seq: 0,
            log_tools: true,
            next_call: 0,
        };
        task.add(&ChatMessage::text("system", system));
        task
    }

    /// The task directory's handle, as the host reaches it.
    pub fn dir_handle(&self) -> ctxhost::task_dir::TaskDir {
        ctxhost::task_dir::TaskDir::open(self.dir.path()).unwrap()
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// Appends `m` through the store (and a tools.jsonl line for a tool result).
    pub fn add(&mut self, m: &ChatMessage) {
        let added = self.store.add_message(m, TS).unwrap();
        self.origins.push(Origin::Seq(added.seq));
        if m.role == "tool" && self.log_tools {
            self.tools_seq += 1;
            let line = ToolLine {
                seq: self.tools_seq,
                tool: m.tool_name.clone().unwrap_or_default(),
                tool_call_id: m.tool_call_id.clone(),
                args: serde_json::json!({}),
                result: m.content.clone(),
                status: ToolStatus::Success,
                error: None,
                duration_ms: 1,
                timestamp: TS.into(),
            };
            let mut text = serde_json::to_string(&line).unwrap();
            text.push('\n');
            use std::io::Write;
            fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.path("tools.jsonl"))
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
    }

    pub fn add_all(&mut self, ms: &[ChatMessage]) {
        for m in ms {
            self.add(m);
        }
    }

    pub fn compressor(&self, kind: Kind, llm: &FakeLlm) -> Compressor {
        let plugin = match kind {
            Kind::Summarizer => &env().summarizer,
            Kind::Masking => &env().masking,
        };
        env()
            .rt
            .compressor(plugin, self.dir.path(), Box::new(llm.clone()))
            .unwrap()
    }

    /// One compaction step with `kind` (a fresh compressor instance, as the agent makes).
    #[allow(clippy::result_large_err)] // the error type is ctxhost::compaction's
    pub fn compact(
        &mut self,
        kind: Kind,
        config: &CompressConfig,
        llm: &FakeLlm,
    ) -> Result<CompactionOutcome, CompactionError> {
        let mut compressor = self.compressor(kind, llm);
        let dir = self.dir_handle();
        compact_if_needed(&mut self.store, &mut compressor, &dir, config, &|| {
            TS.to_string()
        })
    }

    pub fn bytes(&self, file: &str) -> Vec<u8> {
        fs::read(self.path(file)).unwrap_or_default()
    }

    pub fn context(&self) -> Vec<ChatMessage> {
        read_jsonl(&self.path("current.jsonl"))
    }

    pub fn tokens(&mut self) -> u64 {
        self.store.current_token_count().unwrap()
    }

    pub fn leftovers(&self) -> Vec<&'static str> {
        TEMPORARIES
            .into_iter()
            .filter(|f| self.path(f).exists())
            .collect()
    }

    /// A fresh tool call id: unique per task, or `call_{i}` per turn like providers that number
    /// calls per reply.
    pub fn call_id(&mut self, i: usize, repeat: bool) -> String {
        self.next_call += 1;
        if repeat {
            format!("call_{i}")
        } else {
            format!("call_{}", self.next_call)
        }
    }
}

/// Settings with the count bound only (`keep_recent_tokens` 0), so a test knows the cut.
pub fn config(context_length: u64, keep: u32) -> CompressConfig {
    CompressConfig {
        context_length,
        threshold: 0.7,
        keep_recent_messages: keep,
        keep_recent_tokens: 0,
        summary_prompt: DEFAULT_SUMMARY_PROMPT.to_string(),
        reserve_output_tokens: 256,
    }
}

pub fn user(t: &str) -> ChatMessage {
    ChatMessage::text("user", t)
}
pub fn assistant(t: &str) -> ChatMessage {
    ChatMessage::text("assistant", t)
}
pub fn calls(ids: &[&str], name: &str) -> ChatMessage {
    ChatMessage {
        role: "assistant".into(),
        content: None,
        tool_calls: Some(
            ids.iter()
                .map(|id| ToolCall::new(*id, name, r#"{"path":"src/main.rs"}"#))
                .collect(),
        ),
        ..Default::default()
    }
}
pub fn result(id: &str, name: &str, content: &str) -> ChatMessage {
    ChatMessage {
        role: "tool".into(),
        content: Some(content.into()),
        tool_call_id: Some(id.into()),
        tool_name: Some(name.into()),
        ..Default::default()
    }
}

pub fn kinds(context: &[ChatMessage]) -> Vec<LineKind> {
    context
        .iter()
        .enumerate()
        .map(|(i, m)| {
            if is_summary_line(i, m) {
                LineKind::Summary
            } else {
                LineKind::from_role(&m.role)
            }
        })
        .collect()
}

pub fn tokens_of(ms: &[ChatMessage]) -> u64 {
    ms.iter().map(estimate_message_tokens).sum()
}

/// Every recorded summary request fits the window with room for the reply.
pub fn requests_fit(calls: &[LlmCall], config: &CompressConfig) -> Result<(), String> {
    for (i, c) in calls.iter().enumerate() {
        let tokens = tokens_of(&c.messages);
        // reserve_output_tokens, at most half the window.
        let reserve = (config.reserve_output_tokens as u64).min(config.context_length / 2);
        if c.max_output_tokens as u64 != reserve {
            return Err(format!(
                "request {} asked for {} output tokens, expected {reserve}",
                i + 1,
                c.max_output_tokens
            ));
        }
        if tokens + c.max_output_tokens as u64 > config.context_length {
            return Err(format!(
                "request {} has {tokens} tokens + {} reserved > window {}",
                i + 1,
                c.max_output_tokens,
                config.context_length
            ));
        }
        if c.messages.len() != 2 || c.messages[0].role != "system" || c.messages[1].role != "user" {
            return Err(format!(
                "request {} is not a system + user message pair",
                i + 1
            ));
        }
    }
    Ok(())
}
