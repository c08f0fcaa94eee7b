//! A native test harness: run a compressor's or a strategy's logic under `cargo test` on the
//! host (no wasm build, no ctxhost), in a temporary task directory, with a mock `llm` that
//! answers from canned replies and records every request.
//!
//! Only on native targets (`cfg(not(target_arch = "wasm32"))`): there [`crate::llm`],
//! [`crate::planning`] and [`crate::log`] are served by this module instead of the host
//! imports, with the same signatures, so the plugin's code runs unchanged. Export the component
//! only on wasm (`#[cfg(target_arch = "wasm32")] ctxhost_plugin::export_compressor!(Mine);`):
//! the export's symbol names do not link natively. Run the tests with the host's target, e.g.
//! `cargo test --target x86_64-unknown-linux-gnu` (a project of `ctxhost plugin new` builds
//! for wasm32-wasip2 by default; its `cargo test-native` alias does this).
//!
//! ```ignore
//! use ctxhost_plugin::testing::{MockLlm, TaskDir};
//! let task = TaskDir::with_context(&messages)?;          // current.jsonl + messages.jsonl
//! let mut llm = MockLlm::replying(["The user asked for X."]);
//! let result = task.run(&mut llm, || Compressor::compress(config))?;
//! assert_eq!(llm.requests.len(), 1);
//! assert!(task.read("compressed.jsonl")?.contains("Summary of the conversation"));
//! ```
//!
//! [`TaskDir::run`] makes the task directory the process's current directory while the call
//! runs (a component's relative paths resolve against its task directory), so runs are
//! serialised by a process-wide lock: tests in one binary may run in parallel, their `run`
//! calls take turns.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::format::ChatMessage;
use crate::types::PluginError;

/// One request the code under test made through `llm::complete`.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmRequest {
    /// The messages of the request file, in order.
    pub messages: Vec<ChatMessage>,
    /// The `max-output-tokens` it asked for.
    pub max_output_tokens: u32,
}

/// A mock of the task's LLM: each `llm::complete` gets the next canned reply (the last one
/// repeats), or the error given to [`MockLlm::failing`]; every request is recorded.
#[derive(Debug, Clone, Default)]
pub struct MockLlm {
    replies: VecDeque<String>,
    failure: Option<String>,
    /// The requests made so far, oldest first.
    pub requests: Vec<LlmRequest>,
    /// The planning history's lines so far (JSON, as the host writes them, without its
    /// stamps): `{"type":"plan",…}`, `revision`, `progress`, `reflection`, `verification`.
    pub planning: Vec<String>,
    /// What the code logged: (level, message).
    pub logs: Vec<(crate::log::Level, String)>,
    plan: Option<crate::planning::Plan>,
}

impl MockLlm {
    /// A mock answering with `replies` in turn (the last one repeats; none: every call fails).
    pub fn replying<I, S>(replies: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MockLlm {
            replies: replies.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }

    /// A mock whose every call fails with `PluginError::Llm(error)` (as a provider outage).
    pub fn failing(error: impl Into<String>) -> Self {
        MockLlm {
            failure: Some(error.into()),
            ..Default::default()
        }
    }

    fn complete(&mut self, file: &str, max: u32) -> Result<crate::llm::Completion, PluginError> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| PluginError::Io(format!("reading {file}: {e}")))?;
        let mut messages = Vec::new();
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let message = serde_json::from_str(line).map_err(|e| {
                PluginError::InvalidInput(format!("{file} line {}: not a chat message: {e}", n + 1))
            })?;
            messages.push(message);
        }
        self.requests.push(LlmRequest {
            messages,
            max_output_tokens: max,
        });
        if let Some(error) = &self.failure {
            return Err(PluginError::Llm(error.clone()));
        }
        let reply = match self.replies.len() {
            0 => return Err(PluginError::Llm("MockLlm: no reply given".into())),
            1 => self.replies[0].clone(),
            _ => self.replies.pop_front().unwrap_or_default(),
        };
        Ok(crate::llm::Completion {
            message: ChatMessage::text("assistant", reply).into(),
            usage: None,
        })
    }
}

/// A temporary task directory (removed when dropped) to run plugin code in.
#[derive(Debug)]
pub struct TaskDir {
    dir: PathBuf,
}

/// Serialises [`TaskDir::run`]: the current directory is the process's.
static CURRENT_DIR: Mutex<()> = Mutex::new(());

thread_local! {
    /// The mock of the `run` in progress on this thread.
    static MOCK: RefCell<Option<MockLlm>> = const { RefCell::new(None) };
}

impl TaskDir {
    /// An empty task directory under the system's temporary directory.
    pub fn new() -> io::Result<TaskDir> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = base.join(format!("ctxhost-plugin-test-{}-{n}", std::process::id()));
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok(TaskDir { dir }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// A task directory whose context is `messages`: current.jsonl holds them, messages.jsonl
    /// the same messages with their seqs (from 1), timestamps and token estimates, as the
    /// builtin message store writes them.
    pub fn with_context(messages: &[ChatMessage]) -> io::Result<TaskDir> {
        let task = TaskDir::new()?;
        let mut current = String::new();
        let mut history = String::new();
        for (i, m) in messages.iter().enumerate() {
            current.push_str(&serde_json::to_string(m).map_err(io::Error::other)?);
            current.push('\n');
            let mut line = serde_json::to_value(m).map_err(io::Error::other)?;
            if let Some(fields) = line.as_object_mut() {
                fields.insert("seq".into(), (i as u64 + 1).into());
                fields.insert("timestamp".into(), "2026-01-01T00:00:00Z".into());
                fields.insert(
                    "tokens".into(),
                    crate::format::estimate_message_tokens(m).into(),
                );
            }
            history.push_str(&line.to_string());
            history.push('\n');
        }
        task.write("current.jsonl", &current)?;
        task.write("messages.jsonl", &history)?;
        Ok(task)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Write `text` to `file` (relative to the task directory).
    pub fn write(&self, file: &str, text: &str) -> io::Result<()> {
        std::fs::write(self.dir.join(file), text)
    }

    /// The text of `file` (relative to the task directory).
    pub fn read(&self, file: &str) -> io::Result<String> {
        std::fs::read_to_string(self.dir.join(file))
    }

    /// The chat messages of a JSONL `file` (e.g. the new context a compressor wrote).
    pub fn messages(&self, file: &str) -> io::Result<Vec<ChatMessage>> {
        self.read(file)?
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).map_err(io::Error::other))
            .collect()
    }

    /// Whether `file` exists in the task directory.
    pub fn exists(&self, file: &str) -> bool {
        self.dir.join(file).exists()
    }

    /// Run `f` as the host would call the component: with the task directory as the current
    /// directory and `llm` answering `llm::complete` (and keeping the planning history and
    /// the log). The current directory is restored afterwards, also when `f` panics.
    pub fn run<T>(&self, llm: &mut MockLlm, f: impl FnOnce() -> T) -> T {
        let _turn = CURRENT_DIR.lock().unwrap_or_else(|e| e.into_inner());
        /// Restores the current directory and clears this thread's mock, also on a panic.
        struct Restore(Option<PathBuf>);
        impl Drop for Restore {
            fn drop(&mut self) {
                if let Some(dir) = self.0.take() {
                    let _ = std::env::set_current_dir(dir);
                }
                MOCK.with(|m| m.borrow_mut().take());
            }
        }
        let restore = Restore(std::env::current_dir().ok());
        MOCK.with(|m| *m.borrow_mut() = Some(std::mem::take(llm)));
        if let Err(e) = std::env::set_current_dir(&self.dir) {
            panic!("entering the task directory {}: {e}", self.dir.display());
        }
        let out = f();
        if let Some(mock) = MOCK.with(|m| m.borrow_mut().take()) {
            *llm = mock;
        }
        drop(restore);
        out
    }
}

impl Drop for TaskDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The mock of the `run` in progress, or a panic naming the mistake.
fn with_mock<T>(what: &str, f: impl FnOnce(&mut MockLlm) -> T) -> T {
    MOCK.with(|m| match m.borrow_mut().as_mut() {
        Some(mock) => f(mock),
        None => panic!("{what} called outside TaskDir::run (ctxhost_plugin::testing)"),
    })
}

/// The native `llm` import.
pub(crate) fn llm_complete(
    file: &str,
    max_output_tokens: u32,
) -> Result<crate::llm::Completion, PluginError> {
    with_mock("llm::complete", |mock| {
        mock.complete(file, max_output_tokens)
    })
}

/// The native `log` import: recorded when inside [`TaskDir::run`], always printed to stderr.
pub(crate) fn log(level: crate::log::Level, message: &str) {
    eprintln!("[{level:?}] {message}");
    MOCK.with(|m| {
        if let Some(mock) = m.borrow_mut().as_mut() {
            mock.logs.push((level, message.to_string()));
        }
    });
}

fn status_name(status: crate::planning::StepStatus) -> &'static str {
    use crate::planning::StepStatus;
    match status {
        StepStatus::Pending => "pending",
        StepStatus::InProgress => "in-progress",
        StepStatus::Done => "done",
        StepStatus::Skipped => "skipped",
    }
}

/// The native `planning` import, in memory (re-exported as [`crate::planning`]).
#[doc(hidden)]
pub mod planning {
    use super::{status_name, with_mock};
    use crate::planning::{Entry, Plan, Verdict};
    use crate::types::PluginError;
    use serde_json::json;

    pub fn save_plan(plan: &Plan, note: Option<&str>) -> Result<(), PluginError> {
        if plan.steps.len() > 50 {
            return Err(PluginError::InvalidInput(
                "plan.steps: more than 50 steps".into(),
            ));
        }
        with_mock("planning::save_plan", |mock| {
            let kind = if mock.plan.is_some() {
                "revision"
            } else {
                "plan"
            };
            let steps: Vec<_> = plan
                .steps
                .iter()
                .map(|s| json!({"id": s.id, "description": s.description, "status": status_name(s.status)}))
                .collect();
            let mut line = json!({"type": kind, "goal": plan.goal, "steps": steps});
            if let Some(note) = note {
                line["note"] = note.into();
            }
            mock.planning.push(line.to_string());
            mock.plan = Some(plan.clone());
            Ok(())
        })
    }

    pub fn has_plan() -> bool {
        with_mock("planning::has_plan", |mock| mock.plan.is_some())
    }

    pub fn get_latest_plan() -> Option<Plan> {
        with_mock("planning::get_latest_plan", |mock| mock.plan.clone())
    }

    pub fn append_entry(entry: &Entry) -> Result<(), PluginError> {
        with_mock("planning::append_entry", |mock| {
            let line = match entry {
                Entry::Progress(p) => {
                    let Some(step) = mock
                        .plan
                        .as_mut()
                        .and_then(|plan| plan.steps.iter_mut().find(|s| s.id == p.step_id))
                    else {
                        return Err(PluginError::InvalidInput(format!(
                            "progress.step-id: {} is not a step of the latest plan",
                            p.step_id
                        )));
                    };
                    step.status = p.status;
                    json!({"type": "progress", "step_id": p.step_id, "status": status_name(p.status), "note": p.note})
                }
                Entry::Reflection(r) => {
                    json!({"type": "reflection", "trigger": r.trigger, "text": r.text})
                }
                Entry::Verification(v) => {
                    let verdict = match v.verdict {
                        Verdict::Passed => "passed",
                        Verdict::Failed => "failed",
                        Verdict::Unclear => "unclear",
                    };
                    json!({"type": "verification", "verdict": verdict, "text": v.text})
                }
            };
            mock.planning.push(line.to_string());
            Ok(())
        })
    }

    pub fn entries() -> Vec<String> {
        with_mock("planning::entries", |mock| mock.planning.clone())
    }
}
