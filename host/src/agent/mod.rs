//! The agent loop of one task (DESIGN §4), run inside the task's own process.
//!
//! 1. If current.jsonl is empty: add the system prompt, then the task's user message (a resumed
//!    task already has them and never gets them again).
//! 2. Loop, at most `agent.max_steps` LLM calls: compress if the compressor says so; fsync the
//!    context files (step boundary); write request.json from current.jsonl with the request
//!    format plugin; POST it; parse response.json with the plugin; append the assistant
//!    message; add the call and its tokens to the task's row (provider usage when given,
//!    estimate otherwise; prompt-cache reads and writes counted apart too); delete request.json and response.json (both are kept when the call
//!    fails, and the error says so).
//! 3. Every tool call of the reply gets a `tool` message through the [`ToolRunner`].
//! 4. A reply without tool calls is the final answer: the task is complete.
//!
//! Safe points: before each LLM call and before each tool call (so after each tool result), the
//! loop asks [`Agent::interrupts`] whether the task should pause or stop; if so it returns
//! [`Outcome::Paused`] / [`Outcome::Stopped`] with every line written whole. A task paused
//! between tool calls has an assistant message with unanswered calls at the end of
//! current.jsonl: when it is resumed, the loop first makes those calls.

pub mod exchange;
pub mod llm_import;
pub mod tools;

use std::path::Path;

use anyhow::{Context, anyhow, bail};
use ctxhost_format::ChatMessage;

use crate::compaction::{CompactionError, CompactionOutcome, compact_if_needed};
use crate::config::Config;
use crate::db::{Db, now_rfc3339};
use crate::llm::Transport;
use crate::runtime::{CompressConfig, Compressor, MessageStore, RequestConfig, RequestFormat};
use exchange::{ExchangeError, exchange};
pub use tools::{NoTools, ToolRunner};

/// Request body file of the current LLM call, in the task directory.
pub const REQUEST_FILE: &str = "request.json";
/// Response body file of the current LLM call, in the task directory.
pub const RESPONSE_FILE: &str = "response.json";
/// History file of the message store (fsynced at step boundaries).
pub const MESSAGES_FILE: &str = "messages.jsonl";

/// How a task's loop ended (errors are `Err`, and fail the task).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The model gave a final answer (its text, also the last line of messages.jsonl).
    Completed { answer: String },
    /// A pause was requested; the loop stopped at a safe point (`reason` from `ctxhost pause`).
    Paused { reason: Option<String> },
    /// A stop was requested; the loop stopped at a safe point.
    Stopped,
}

/// What the task's owner asked for, as seen at a safe point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interrupt {
    /// Pause (`ctxhost pause`), with its reason.
    Pause { reason: Option<String> },
    /// Stop (`ctxhost stop`).
    Stop,
}

/// Asked at every safe point: `Ok(None)` to go on. The task process answers from the task's
/// row (`pause_requested`, `stop_requested`).
pub type InterruptCheck<'a> = dyn FnMut() -> anyhow::Result<Option<Interrupt>> + 'a;

/// The task being run.
#[derive(Debug, Clone, Copy)]
pub struct TaskInput<'a> {
    /// Canonical UUID (the `tasks` row).
    pub uuid: &'a str,
    /// The user message that starts the task.
    pub prompt: &'a str,
    /// The task directory (`contexts/running/{uuid}/`).
    pub dir: &'a Path,
    /// Steps (LLM calls of the loop that got an answer) made for this task by earlier
    /// processes (0 on a first run); they count against `agent.max_steps`.
    pub steps_done: u32,
}

/// What the loop works with: settings, the task's row, its plugins, transport and tools.
pub struct Agent<'a> {
    pub config: &'a Config,
    pub db: &'a Db,
    /// Opened message store (its `open` has been called).
    pub store: &'a mut MessageStore,
    pub format: &'a mut RequestFormat,
    /// `None` when `plugins.compressor` is `none`.
    pub compressor: Option<&'a mut Compressor>,
    pub transport: &'a Transport,
    pub tools: &'a mut dyn ToolRunner,
    /// Compression failures in a row (reset by a successful compression).
    pub compaction_failures: u32,
    /// Pause/stop requests, asked at every safe point (`None`: never interrupted).
    pub interrupts: Option<&'a mut InterruptCheck<'a>>,
}

impl Agent<'_> {
    /// Run the loop of `task` to its end. `Err` fails the task; the message says which step
    /// and what (transport error with status and URL, unreadable response, plugin error,
    /// step limit).
    pub fn run(&mut self, task: &TaskInput<'_>) -> anyhow::Result<Outcome> {
        self.start(task)?;
        let max_steps = self.config.agent.max_steps;
        let mut steps = task.steps_done;
        // A task paused between tool calls left some unanswered: make them first.
        let current = task.dir.join(
            self.store
                .current_context_file()
                .context("message store: current-context-file")?,
        );
        // A process that died after the final answer was appended: the task is done.
        if let Some(answer) = crate::repair::final_answer(&current)? {
            tracing::info!(uuid = %task.uuid, "the context already ends with the final answer");
            return Ok(Outcome::Completed { answer });
        }
        let mut calls = crate::repair::pending_tool_calls(&current)?;
        if !calls.is_empty() {
            tracing::info!(uuid = %task.uuid, calls = calls.len(), "making the tool calls left unanswered when the task paused");
        }
        loop {
            for call in &calls {
                // Safe point: before each tool call (after the previous result).
                if let Some(outcome) = self.interrupted()? {
                    return Ok(outcome);
                }
                let message = self
                    .tools
                    .run(call)
                    .with_context(|| format!("tool call {} ({})", call.id, call.function.name))?;
                debug_assert_eq!(message.tool_call_id.as_deref(), Some(call.id.as_str()));
                self.store
                    .add_message(&message, &now_rfc3339())
                    .with_context(|| format!("appending the result of tool call {}", call.id))?;
                self.db.add_usage(task.uuid, 0, 1, 0, 0)?;
            }
            // Safe point: before the LLM call (and before a compression, which may call it too).
            if let Some(outcome) = self.interrupted()? {
                return Ok(outcome);
            }
            if steps >= max_steps {
                bail!("step limit of {max_steps} reached (agent.max_steps) without a final answer");
            }
            self.maybe_compress(task)?;
            steps += 1;
            let reply = self.llm_step(task, steps)?;
            calls = reply.calls().to_vec();
            if calls.is_empty() {
                let answer = reply.content.unwrap_or_default();
                tracing::info!(uuid = %task.uuid, steps, "final answer received");
                return Ok(Outcome::Completed { answer });
            }
        }
    }

    /// The outcome to return at a safe point when a pause or stop was requested.
    fn interrupted(&mut self) -> anyhow::Result<Option<Outcome>> {
        let Some(check) = self.interrupts.as_deref_mut() else {
            return Ok(None);
        };
        Ok(match check()? {
            None => None,
            Some(Interrupt::Stop) => Some(Outcome::Stopped),
            Some(Interrupt::Pause { reason }) => Some(Outcome::Paused { reason }),
        })
    }

    /// Step 1: a fresh context gets the system prompt, then the user's message. A resumed one
    /// is left as it is.
    fn start(&mut self, task: &TaskInput<'_>) -> anyhow::Result<()> {
        let stats_count = self
            .store
            .count_messages()
            .context("message store: count-messages")?;
        let current_tokens = self
            .store
            .current_token_count()
            .context("message store: current-token-count")?;
        let current_file = task
            .dir
            .join(self.store.current_context_file().context("message store")?);
        let current_empty = std::fs::metadata(&current_file)
            .map(|m| m.len() == 0)
            .unwrap_or(true);
        if !current_empty {
            tracing::info!(uuid = %task.uuid, messages = stats_count, tokens = current_tokens, "continuing the context");
            return Ok(());
        }
        if stats_count > 0 {
            bail!(
                "{} is empty but {} holds {stats_count} messages: the context must be repaired before the task can go on",
                current_file.display(),
                task.dir.join(MESSAGES_FILE).display()
            );
        }
        let system = ChatMessage::text("system", self.config.agent.system_prompt.clone());
        self.store
            .add_message(&system, &now_rfc3339())
            .context("adding the system prompt")?;
        let user = ChatMessage::text("user", task.prompt.to_string());
        self.store
            .add_message(&user, &now_rfc3339())
            .context("adding the task's prompt")?;
        Ok(())
    }

    /// One LLM call; returns the assistant message as appended.
    fn llm_step(&mut self, task: &TaskInput<'_>, step: u32) -> anyhow::Result<ChatMessage> {
        let dir = task.dir;
        let current = self
            .store
            .current_context_file()
            .context("message store: current-context-file")?;
        // Step boundary: what was appended so far is on disk before we wait on the network.
        crate::layout::sync_file(&dir.join(MESSAGES_FILE))?;
        crate::layout::sync_file(&dir.join(&current))?;
        self.tools.sync()?;

        let tokens_before = self
            .store
            .current_token_count()
            .context("message store: current-token-count")?;
        let llm = &self.config.llm;
        let config = RequestConfig {
            model: llm.model.clone(),
            messages_file: current.clone(),
            request_file: REQUEST_FILE.to_string(),
            tools_file: self.tools.tools_file(),
            max_output_tokens: llm.max_output_tokens,
            temperature: llm.temperature,
        };
        let done = match exchange(self.format, self.transport, dir, &config, RESPONSE_FILE) {
            Ok(done) => done,
            Err(e) => {
                if matches!(e, ExchangeError::Read { .. }) {
                    // The provider answered: count the call (usage unknown).
                    self.db.add_usage(task.uuid, 1, 0, 0, 0)?;
                }
                bail!("LLM call {step} failed: {e}");
            }
        };
        tracing::debug!(uuid = %task.uuid, step, bytes = done.request.bytes, messages = done.request.messages,
            tokens = tokens_before, status = done.post.status, attempts = done.post.attempts, "LLM call done");
        let reply = done.reply;
        if let Some(u) = reply.usage {
            // Parts of the call's tokens, counted with them below.
            self.db
                .add_cache_tokens(task.uuid, u.cache_read_tokens, u.cache_creation_tokens)?;
        }
        let message = normalise_reply(reply.message, step);
        if message.calls().is_empty()
            && message
                .content
                .as_deref()
                .is_none_or(|c| c.trim().is_empty())
        {
            self.db.add_usage(
                task.uuid,
                1,
                0,
                reply.usage.map(|u| u.total_tokens).unwrap_or(0),
                0,
            )?;
            bail!(
                "LLM call {step}: the model returned an empty answer (no content and no tool calls; finish_reason: {})",
                reply.finish_reason.as_deref().unwrap_or("none")
            );
        }
        let added = self
            .store
            .add_message(&message, &now_rfc3339())
            .context("appending the assistant message")?;
        let tokens = match reply.usage {
            Some(u) if u.total_tokens > 0 => u.total_tokens,
            // Estimate: what was sent plus what came back.
            _ => tokens_before + added.tokens,
        };
        self.db.add_usage(task.uuid, 1, 0, tokens, 0)?;
        if reply.finish_reason.as_deref() == Some("length") {
            tracing::warn!(uuid = %task.uuid, step, "the model's answer was cut at llm.max_output_tokens");
        }
        Ok(message)
    }

    /// The compression check before each LLM call ([`crate::compaction`]). With no compressor
    /// configured this does nothing. A failed compression leaves the context as it was and is
    /// logged; the task goes on while the context still fits the window, and fails after
    /// [`MAX_COMPACTION_FAILURES`] failures in a row. A context still over the threshold after
    /// compressing fails the task at once (compressing again could not help).
    fn maybe_compress(&mut self, task: &TaskInput<'_>) -> anyhow::Result<()> {
        let Some(compressor) = self.compressor.as_deref_mut() else {
            return Ok(());
        };
        let cs = &self.config.context_storage;
        let cfg = CompressConfig {
            context_length: self.config.llm.context_length,
            threshold: cs.compression_threshold,
            keep_recent_messages: cs.keep_recent_messages,
            summary_prompt: cs.summary_prompt.clone(),
            reserve_output_tokens: self.config.llm.max_output_tokens.unwrap_or(1024),
        };
        match compact_if_needed(self.store, compressor, task.dir, &cfg, &now_rfc3339) {
            Ok(CompactionOutcome::NotNeeded) => Ok(()),
            Ok(CompactionOutcome::Compressed {
                before_tokens,
                after_tokens,
                summary_id,
            }) => {
                self.compaction_failures = 0;
                self.db.add_usage(task.uuid, 0, 0, 0, 1)?;
                tracing::info!(uuid = %task.uuid, before_tokens, after_tokens, summary = ?summary_id, "context compressed");
                Ok(())
            }
            Err(e @ CompactionError::StillOverThreshold { .. }) => {
                // The smaller context is installed and valid; count it, then stop.
                self.db.add_usage(task.uuid, 0, 0, 0, 1)?;
                Err(e.into())
            }
            Err(e) => {
                self.compaction_failures += 1;
                let tokens = self
                    .store
                    .current_token_count()
                    .context("message store: current-token-count")?;
                if self.compaction_failures >= MAX_COMPACTION_FAILURES
                    || tokens >= cfg.context_length
                {
                    return Err(anyhow!(e).context(format!(
                        "compression failed {} time(s) in a row with the context at {tokens} of {} tokens",
                        self.compaction_failures, cfg.context_length
                    )));
                }
                tracing::warn!(uuid = %task.uuid, tokens, failures = self.compaction_failures, "{e}");
                Ok(())
            }
        }
    }
}

/// Compression failures in a row (the context left as it was each time) after which the task
/// fails instead of calling the LLM with an over-threshold context again.
pub const MAX_COMPACTION_FAILURES: u32 = 3;

/// The host's rules for an assistant reply, whatever the format plugin returned: role
/// `assistant`; every tool call has a non-empty id, unique within the reply
/// (`call_{step}_{i}` is assigned where it is missing or repeated) and the `function` type.
fn normalise_reply(mut message: ChatMessage, step: u32) -> ChatMessage {
    message.role = "assistant".to_string();
    message.tool_call_id = None;
    message.tool_name = None;
    if let Some(calls) = message.tool_calls.as_mut() {
        let mut seen = std::collections::HashSet::new();
        for (i, call) in calls.iter_mut().enumerate() {
            if call.id.trim().is_empty() || !seen.insert(call.id.clone()) {
                call.id = format!("call_{step}_{}", i + 1);
                seen.insert(call.id.clone());
            }
            call.kind = "function".to_string();
        }
        if calls.is_empty() {
            message.tool_calls = None;
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxhost_format::ToolCall;

    #[test]
    fn reply_ids_are_made_unique_and_present() {
        let m = ChatMessage {
            role: "model".into(),
            content: None,
            tool_calls: Some(vec![
                ToolCall::new("", "a", "{}"),
                ToolCall::new("x", "b", "{}"),
                ToolCall::new("x", "c", "{}"),
            ]),
            ..Default::default()
        };
        let n = normalise_reply(m, 3);
        assert_eq!(n.role, "assistant");
        let ids: Vec<_> = n.calls().iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_3_1", "x", "call_3_3"]);
    }

    #[test]
    fn empty_tool_call_list_becomes_none() {
        let m = ChatMessage {
            role: "assistant".into(),
            content: Some("hi".into()),
            tool_calls: Some(vec![]),
            ..Default::default()
        };
        assert_eq!(normalise_reply(m, 1).tool_calls, None);
    }
}
