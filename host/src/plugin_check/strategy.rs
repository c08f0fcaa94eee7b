//! The strategy suite: the hooks on a scratch task, through the same driver as the agent loop
//! ([`crate::agent::strategy::StrategyDriver`]: decisions held to the host's rules, planning
//! entries committed with them), with a fake LLM whose one answer reads as a plan, a passed
//! verification and a reflection that keeps the plan:
//! - `start` on a fresh task (system prompt + prompt) gives a decision the host accepts;
//! - `after-tools` after a failed tool call, `after-reply` after an answer: accepted decisions;
//! - a new instance on the same files answers the next reply (no state kept in memory only);
//! - the planning history it left reads back (every line, the fold's rules);
//! - with a failing LLM, `start` returns its own error or an accepted decision, never a trap.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ctxhost_format::files::{CURRENT, MESSAGES};
use ctxhost_format::planning::Hook;
use ctxhost_format::{ChatMessage, HistoryLine, ToolCall};

use super::harness::*;
use crate::agent::strategy::StrategyDriver;
use crate::runtime::{
    Completion, Decision, LlmImport, LoadedPlugin, Runtime, RuntimeError, StrategyConfig,
    TaskState, ToolOutcome, Usage,
};
use crate::task::{PlanningStore, SharedPlanning};
use crate::task_dir::TaskDir;

/// The fake LLM's one answer: a plan, a passed verification and a reflection without revision.
pub(super) const CANNED_REPLY: &str = r#"{"goal": "Answer the question", "steps": [{"id": 1, "description": "Look at the code"}, {"id": 2, "description": "Answer"}], "passed": true, "problems": "", "assessment": "On track.", "revise": false}"#;

const UUID: &str = "00000000-0000-4000-8000-00000000c0de";

/// An [`LlmImport`] answering [`CANNED_REPLY`] (or failing), counting its calls.
struct CannedLlm {
    fail: bool,
    calls: Arc<Mutex<u32>>,
}

impl LlmImport for CannedLlm {
    fn complete(
        &mut self,
        _file: &str,
        _max_output_tokens: u32,
        _deadline: std::time::Instant,
    ) -> Result<Completion, String> {
        *self.calls.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        if self.fail {
            return Err("HTTP 503 from http://127.0.0.1:1/v1/chat/completions (fake LLM)".into());
        }
        Ok(Completion {
            message: ChatMessage::text("assistant", CANNED_REPLY),
            usage: Some(Usage::default()),
        })
    }
}

/// A scratch task's context as the suite builds it: its directory and the seq of the last line
/// it appended to messages.jsonl (the suite is the only writer of the history, so it keeps the
/// count instead of reading the file back at every append).
struct ScratchContext {
    dir: PathBuf,
    seq: u64,
}

impl ScratchContext {
    /// A fresh scratch task: system prompt and prompt.
    fn fresh(scratch: &Scratch, name: &str) -> Result<ScratchContext, String> {
        let mut ctx = ScratchContext {
            dir: scratch.task(name)?,
            seq: 0,
        };
        ctx.append(&ChatMessage::text(
            "system",
            "You are a coding agent. Use the tools; answer briefly.",
        ))?;
        ctx.append(&ChatMessage::text("user", "What does src/main.rs print?"))?;
        Ok(ctx)
    }

    /// Append `m` to messages.jsonl (next seq) and current.jsonl; returns its seq.
    fn append(&mut self, m: &ChatMessage) -> Result<u64, String> {
        let seq = self.seq + 1;
        let line = HistoryLine::of(seq, m, "2026-01-02T03:04:05.000Z");
        for (file, text) in [
            (MESSAGES, serde_json::to_string(&line).map_err(e)?),
            (CURRENT, serde_json::to_string(m).map_err(e)?),
        ] {
            let mut f = OpenOptions::new()
                .append(true)
                .create(true)
                .open(self.dir.join(file))
                .map_err(e)?;
            writeln!(f, "{text}").map_err(e)?;
        }
        self.seq = seq;
        Ok(seq)
    }

    /// The task state the hooks get after `steps_done` steps.
    fn state(&self, steps_done: u32) -> TaskState {
        TaskState {
            prompt: "What does src/main.rs print?".into(),
            steps_done,
            seq: self.seq,
            context_file: CURRENT.into(),
            context_tokens: 200,
            tools_file: None,
        }
    }

    /// Apply a `proceed` message to the context, as the agent loop does.
    fn apply(&mut self, d: &Decision) -> Result<(), String> {
        if let Decision::Proceed(Some(m)) = d {
            self.append(&ChatMessage::text("user", m.clone()))?;
        }
        Ok(())
    }
}

/// The handle on the scratch task directory `dir` (the planning store reads and writes
/// through it, as in a task).
fn task_dir(dir: &Path) -> Result<TaskDir, String> {
    TaskDir::open(dir).map_err(|err| format!("cannot open {}: {err}", dir.display()))
}

fn driver(
    runtime: &Runtime,
    plugin: &LoadedPlugin,
    dir: &Path,
    fail: bool,
    calls: &Arc<Mutex<u32>>,
) -> Result<StrategyDriver, String> {
    let planning = SharedPlanning::new(
        PlanningStore::open(&task_dir(dir)?, UUID).map_err(|err| format!("{err:#}"))?,
    );
    let llm = CannedLlm {
        fail,
        calls: calls.clone(),
    };
    let instance = runtime
        .strategy(plugin, dir, Box::new(llm), Box::new(planning.clone()))
        .map_err(e)?;
    Ok(StrategyDriver::new(
        instance,
        planning,
        StrategyConfig {
            max_steps: 20,
            context_length: 8192,
            max_output_tokens: Some(512),
            settings: crate::config::StrategySection::default().settings_json(),
        },
    ))
}

fn describe(d: &Decision) -> String {
    match d {
        Decision::Proceed(None) => "proceed".into(),
        Decision::Proceed(Some(m)) => format!("proceed with a message of {} bytes", m.len()),
        Decision::Finish => "finish".into(),
        Decision::Fail(r) => format!("fail ({r})"),
    }
}

pub(super) fn strategy_suite(
    runtime: &Runtime,
    plugin: &LoadedPlugin,
    scratch: &Scratch,
    suite: &mut Suite,
) {
    let calls = Arc::new(Mutex::new(0u32));
    let mut ctx = match ScratchContext::fresh(scratch, "strategy") {
        Ok(c) => c,
        Err(err) => return suite.record("scratch task", Err(err)),
    };
    let dir = ctx.dir.clone();
    let mut first = match driver(runtime, plugin, &dir, false, &calls) {
        Ok(d) => d,
        Err(err) => return suite.record("instantiate", Err(err)),
    };
    let ts = || "2026-01-02T03:04:05.000Z".to_string();

    // start
    let outcome = (|| {
        let st = ctx.state(0);
        let d = first
            .hook(Hook::Start, &st, ts(), |s, c, t| s.start(c, t))
            .map_err(|err| format!("{err:#}"))?;
        ctx.apply(&d)?;
        Ok::<_, String>(d)
    })();
    let start_ok = outcome.is_ok();
    suite.record(
        "start",
        outcome.map(|d| format!("{}; {} side call(s)", describe(&d), first.stats().llm_calls)),
    );
    if !start_ok {
        return;
    }

    // after-tools with a failed call
    let outcome = (|| {
        let call = ToolCall::new("call_1", "read_text_file", r#"{"path":"src/main.rs"}"#);
        ctx.append(&ChatMessage::assistant_calls(vec![call.clone()]))?;
        ctx.append(&ChatMessage::tool_result(
            &call,
            "Error: ENOENT: no such file src/main.rs",
        ))?;
        let reply = ChatMessage::assistant_calls(vec![call]);
        let outcomes = [ToolOutcome {
            call_id: "call_1".into(),
            name: "read_text_file".into(),
            success: false,
            error: Some("Error: ENOENT: no such file src/main.rs".into()),
        }];
        let st = ctx.state(1);
        let d = first
            .hook(Hook::AfterTools, &st, ts(), |s, c, t| {
                s.after_tools(c, t, &reply, &outcomes)
            })
            .map_err(|err| format!("{err:#}"))?;
        ctx.apply(&d)?;
        Ok(d)
    })();
    suite.record(
        "after-tools (a failed tool call)",
        outcome.map(|d| describe(&d)),
    );

    // after-reply
    let outcome = (|| {
        let reply = ChatMessage::text("assistant", "It prints hello.");
        ctx.append(&reply)?;
        let st = ctx.state(2);
        let d = first
            .hook(Hook::AfterReply, &st, ts(), |s, c, t| {
                s.after_reply(c, t, &reply)
            })
            .map_err(|err| format!("{err:#}"))?;
        ctx.apply(&d)?;
        Ok(d)
    })();
    let finished = matches!(outcome, Ok(Decision::Finish));
    suite.record("after-reply", outcome.map(|d| describe(&d)));
    drop(first);

    // A new instance on the same files.
    let outcome = (|| {
        if finished {
            return Ok("the task finished at the last reply; nothing left to continue".to_string());
        }
        let mut second = driver(runtime, plugin, &dir, false, &calls)?;
        let reply = ChatMessage::text("assistant", "Done: it prints hello.");
        ctx.append(&reply)?;
        let st = ctx.state(3);
        let d = second
            .hook(Hook::AfterReply, &st, ts(), |s, c, t| {
                s.after_reply(c, t, &reply)
            })
            .map_err(|err| format!("{err:#}"))?;
        Ok(format!(
            "a new instance answered the next reply: {}",
            describe(&d)
        ))
    })();
    suite.record("state lives in the task directory", outcome);

    // The planning history it left.
    let outcome = match task_dir(&dir)
        .and_then(|d| PlanningStore::read(&d, UUID).map_err(|err| format!("{err:#}")))
    {
        Ok(None) => Ok("no planning history (the strategy wrote none)".to_string()),
        Ok(Some(h)) if h.uncommitted > 0 => {
            Err(format!("{} line(s) after the last decision", h.uncommitted))
        }
        Ok(Some(h)) => Ok(format!(
            "{} line(s); latest plan: {}; {} reflection(s), {} verification(s)",
            h.lines,
            h.latest
                .as_ref()
                .map(|p| format!("{} step(s)", p.steps.len()))
                .unwrap_or_else(|| "none".into()),
            h.reflections,
            h.verifications
        )),
        Err(err) => Err(format!("{err:#}")),
    };
    suite.record("planning history reads back", outcome);
    suite.record(
        "side calls",
        Ok(format!(
            "{} llm call(s) over the hooks (at most {} per hook)",
            *calls.lock().unwrap_or_else(|p| p.into_inner()),
            crate::runtime::MAX_LLM_CALLS_PER_HOOK
        )),
    );

    // A failing LLM.
    let outcome = (|| {
        let down = ScratchContext::fresh(scratch, "strategy-llm-down")?;
        let failing = Arc::new(Mutex::new(0u32));
        let mut d = driver(runtime, plugin, &down.dir, true, &failing)?;
        let st = down.state(0);
        match d.hook(Hook::Start, &st, ts(), |s, c, t| s.start(c, t)) {
            Ok(decision) => Ok(format!("{} without the LLM", describe(&decision))),
            Err(err) => match err.downcast_ref::<RuntimeError>() {
                Some(r) if is_plugin_error(r) => Ok(format!("its own error: {r}")),
                _ => Err(format!("{err:#}")),
            },
        }
    })();
    suite.record("start with a failing LLM", outcome);
}
