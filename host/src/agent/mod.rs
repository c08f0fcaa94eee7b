//! The agent loop of one task (DESIGN §4), run inside the task's own process on its
//! [`TaskContext`], driven by the task's strategy component ([`strategy::StrategyDriver`]).
//!
//! The host owns every step that touches the outside world or the context's rules; the
//! strategy decides between them:
//! 1. If current.jsonl is empty: add the system prompt (with the context inherited from an
//!    earlier task of the same key, [`crate::task::inheritance`]), then the task's user
//!    message. A resumed task already has them and never gets them again.
//! 2. Strategy hook `start` (before the first model call): it may add a message (a plan).
//! 3. Model call, at most `agent.max_steps` in all: compress if the compressor says so (the
//!    latest plan is then stated again, so a summary cannot lose it); fsync the context files;
//!    write request.json from current.jsonl with the request format plugin; POST it; parse
//!    response.json with the plugin; append the assistant message; add the call and its tokens
//!    to the task's row (provider usage when given, estimate otherwise; prompt-cache reads and
//!    writes counted apart too); delete request.json and response.json (both are kept when the
//!    call fails, and the error says so).
//! 4. Every tool call of the reply is made by the [`ToolRunner`], recorded by the task's
//!    [`crate::task::ToolStore`], and answered with a `tool` message; then hook `after-tools`.
//! 5. A reply without tool calls goes to hook `after-reply`: `finish` completes the task with it
//!    as the final answer; `proceed` adds the strategy's message and goes back to 3.
//!
//! Whatever a hook returns, the host checks it ([`strategy::check_decision`]), records it with
//! the hook's planning entries before applying it, and keeps the limits, safe points and
//! invariants. `builtin:react` (the default) only ever finishes on a reply without tool calls,
//! which is today's loop.
//!
//! Safe points: before each model call and before each tool call (so after each tool result), the
//! loop asks the task's row ([`TaskContext::interrupt`]) whether the task should pause or stop;
//! if so it returns [`Outcome::Paused`] / [`Outcome::Stopped`] with every line written whole.
//!
//! Resuming (after a pause or a crash) starts from the files alone ([`Agent::resume_point`]):
//! the context's last message says which step comes next — unanswered tool calls are made
//! first; a round of tool results, or a reply without tool calls, goes to its hook again (which
//! uses the decision it recorded, if it returned before the task stopped); a task with only its
//! prompt asks `start` again.

pub mod exchange;
pub mod llm_import;
pub mod strategy;

use anyhow::{Context, anyhow, bail};
use ctxhost_format::files::{MESSAGES, REQUEST, RESPONSE};
use ctxhost_format::planning::{Hook, bounded};
use ctxhost_format::{ChatMessage, ToolCall, ToolStatus};

use crate::compaction::{CompactionError, CompactionOutcome, compact_if_needed};
use crate::config::Config;
use crate::db::now_rfc3339;
use crate::invariants::queries::{self, Tail};
use crate::runtime::{
    CompressConfig, Compressor, Decision, HookCall, RequestConfig, RequestFormat, RuntimeError,
    Strategy, StrategyConfig, TaskState, ToolOutcome,
};
use crate::task::{CallRecord, Interrupt, TaskContext, UsageDelta};
pub use crate::tools::{NoTools, ToolRunner};
use crate::untrusted;
use exchange::{ExchangeError, exchange};
use strategy::StrategyDriver;

/// Messages of a task's context before its first model call: the system prompt and the task's
/// prompt.
pub const PRELUDE_MESSAGES: u64 = 2;

/// The start of the message that states the latest plan again after a compression.
pub const PLAN_RESTATED: &str = "The context was compressed. The plan so far:";

/// Longest tool error text given to a strategy, bytes.
const MAX_TOOL_ERROR_BYTES: usize = 2_000;

/// How a task's loop ended (errors are `Err`, and fail the task).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The model gave a final answer (its text, also the last line of messages.jsonl).
    Completed {
        /// The answer's text.
        answer: String,
    },
    /// A pause was requested; the loop stopped at a safe point (`reason` from `ctxhost pause`).
    Paused {
        /// The `--reason` given.
        reason: Option<String>,
    },
    /// A stop was requested; the loop stopped at a safe point.
    Stopped,
}

/// What the loop does next. Kept in memory while the process runs; a resumed task derives it
/// from its files ([`Agent::resume_point`]).
#[derive(Debug)]
enum Next {
    /// Hook `start`.
    Start,
    /// A model call.
    Call,
    /// The tool calls `pending` of `reply`; `outcomes` of those already made.
    Tools {
        reply: ChatMessage,
        pending: Vec<ToolCall>,
        outcomes: Vec<ToolOutcome>,
    },
    /// Hook `after-tools` for `reply`.
    AfterTools {
        reply: ChatMessage,
        outcomes: Vec<ToolOutcome>,
    },
    /// Hook `after-reply` for `reply`, a reply without tool calls.
    Answered { reply: ChatMessage },
}

/// What the loop works with besides the task's context: settings, the request format, the
/// compressor, the tools and the strategy.
pub struct Agent<'a> {
    /// The config in effect.
    pub config: &'a Config,
    /// The agent loop's request format instance.
    pub format: &'a mut RequestFormat,
    /// `None` when `plugins.compressor` is `none`.
    pub compressor: Option<&'a mut Compressor>,
    /// Runs the model's tool calls.
    pub tools: &'a mut dyn ToolRunner,
    /// The task's strategy and planning history.
    pub strategy: &'a mut StrategyDriver,
    /// Compression failures in a row (reset by a successful compression).
    pub compaction_failures: u32,
}

impl Agent<'_> {
    /// The strategy settings every hook gets, from `config`.
    pub fn strategy_config(config: &Config) -> StrategyConfig {
        StrategyConfig {
            max_steps: config.agent.max_steps,
            context_length: config.llm.context_length,
            max_output_tokens: config.llm.max_output_tokens,
            settings: config.strategy.settings_json(),
        }
    }

    /// Run the loop of the task in `ctx` to its end. `Err` fails the task; the message says
    /// which step and what (transport error with status and URL, unreadable response, plugin
    /// error, a strategy's refused decision, step limit).
    pub fn run(&mut self, ctx: &mut TaskContext) -> anyhow::Result<Outcome> {
        self.start(ctx)?;
        let max_steps = self.config.agent.max_steps;
        let mut steps = ctx.steps_done();
        if ctx.history_ends_with_summary() {
            // The process died between installing a compressed context and stating the plan.
            self.restate_plan(ctx)?;
        }
        let mut next = self.resume_point(ctx)?;
        loop {
            next = match next {
                Next::Start => {
                    let d = self.ask(ctx, Hook::Start, steps, |s, c, t| s.start(c, t))?;
                    self.apply(ctx, d)?
                }
                Next::Call => {
                    // Safe point: before the model call (and before a compression, which may
                    // call it too).
                    if let Some(outcome) = self.interrupted(ctx)? {
                        return Ok(outcome);
                    }
                    if steps >= max_steps {
                        bail!(
                            "step limit of {max_steps} reached (agent.max_steps) without a final answer"
                        );
                    }
                    self.maybe_compress(ctx)?;
                    steps += 1;
                    let reply = self.llm_step(ctx, steps)?;
                    if reply.calls().is_empty() {
                        Next::Answered { reply }
                    } else {
                        Next::Tools {
                            pending: reply.calls().to_vec(),
                            reply,
                            outcomes: Vec::new(),
                        }
                    }
                }
                Next::Tools {
                    reply,
                    pending,
                    mut outcomes,
                } => {
                    for call in &pending {
                        // Safe point: before each tool call (after the previous result).
                        if let Some(outcome) = self.interrupted(ctx)? {
                            return Ok(outcome);
                        }
                        outcomes.push(self.tool_call(ctx, call)?);
                    }
                    Next::AfterTools { reply, outcomes }
                }
                Next::AfterTools { reply, outcomes } => {
                    let d = self.ask(ctx, Hook::AfterTools, steps, |s, c, t| {
                        s.after_tools(c, t, &reply, &outcomes)
                    })?;
                    self.apply(ctx, d)?
                }
                Next::Answered { reply } => {
                    let d = self.ask(ctx, Hook::AfterReply, steps, |s, c, t| {
                        s.after_reply(c, t, &reply)
                    })?;
                    if d == Decision::Finish {
                        tracing::info!(uuid = %ctx.uuid(), steps, "final answer received");
                        return Ok(Outcome::Completed {
                            answer: reply.content.unwrap_or_default(),
                        });
                    }
                    self.apply(ctx, d)?
                }
            };
        }
    }

    /// Where a task picks up from its files (module doc).
    fn resume_point(&mut self, ctx: &mut TaskContext) -> anyhow::Result<Next> {
        let current = ctx.current_file()?;
        Ok(match queries::tail_in(ctx.dir(), &current)? {
            Tail::Empty => bail!(
                "{} is empty after the task started",
                ctx.dir().show(&current)
            ),
            Tail::Prompt => {
                let count = ctx
                    .store()
                    .count_messages()
                    .context("message store: count-messages")?;
                if count <= PRELUDE_MESSAGES {
                    Next::Start
                } else {
                    Next::Call
                }
            }
            Tail::Answer(reply) => Next::Answered { reply },
            Tail::ToolRound {
                reply,
                answers,
                pending,
            } => {
                let outcomes = outcomes_of(ctx, &answers)?;
                if pending.is_empty() {
                    Next::AfterTools { reply, outcomes }
                } else {
                    tracing::info!(uuid = %ctx.uuid(), calls = pending.len(), "making the tool calls left unanswered when the task paused");
                    Next::Tools {
                        reply,
                        pending,
                        outcomes,
                    }
                }
            }
        })
    }

    /// Ask the strategy's `hook` (through `call`) at the context's current position.
    fn ask(
        &mut self,
        ctx: &mut TaskContext,
        hook: Hook,
        steps: u32,
        call: impl FnOnce(&mut Strategy, &StrategyConfig, &TaskState) -> Result<HookCall, RuntimeError>,
    ) -> anyhow::Result<Decision> {
        let state = TaskState {
            prompt: ctx.prompt().to_string(),
            steps_done: steps,
            seq: ctx
                .store()
                .count_messages()
                .context("message store: count-messages")?,
            context_file: ctx.current_file()?,
            context_tokens: ctx
                .store()
                .current_token_count()
                .context("message store: current-token-count")?,
            tools_file: self.tools.tools_file(),
        };
        self.strategy.hook(hook, &state, now_rfc3339(), call)
    }

    /// Apply a checked decision other than `finish`: `proceed` adds its message (a `user`
    /// message) and goes on to the next model call; `fail` fails the task.
    fn apply(&mut self, ctx: &mut TaskContext, decision: Decision) -> anyhow::Result<Next> {
        match decision {
            Decision::Proceed(message) => {
                if let Some(text) = message {
                    ctx.store()
                        .add_message(&ChatMessage::text("user", text), &now_rfc3339())
                        .context("adding the strategy's message")?;
                }
                Ok(Next::Call)
            }
            Decision::Fail(reason) => Err(anyhow!(
                "strategy {} failed the task: {reason}",
                self.strategy.component()
            )),
            Decision::Finish => Err(anyhow!(
                "strategy {}: `finish` where no final answer is",
                self.strategy.component()
            )),
        }
    }

    /// Make one tool call with the [`ToolRunner`], record it, answer it in the context.
    fn tool_call(&mut self, ctx: &mut TaskContext, call: &ToolCall) -> anyhow::Result<ToolOutcome> {
        let tools = &mut *self.tools;
        let recorded = ctx.tools().run(call, |c| tools.call(c)).with_context(|| {
            format!(
                "tool call {} ({})",
                untrusted::name(&call.id),
                untrusted::name(&call.function.name)
            )
        })?;
        let message = recorded.to_message(call);
        ctx.store()
            .add_message(&message, &now_rfc3339())
            .with_context(|| {
                format!(
                    "appending the result of tool call {}",
                    untrusted::name(&call.id)
                )
            })?;
        ctx.update_statistics(UsageDelta::tool_call())?;
        let success = recorded.status == ToolStatus::Success;
        Ok(ToolOutcome {
            call_id: call.id.clone(),
            name: call.function.name.clone(),
            success,
            error: (!success).then(|| bounded(&recorded.content, MAX_TOOL_ERROR_BYTES)),
        })
    }

    /// After a compression: the latest plan (with steps) goes back into the context as a `user`
    /// message, so a summary cannot lose it.
    fn restate_plan(&mut self, ctx: &mut TaskContext) -> anyhow::Result<()> {
        let plan = self.strategy.planning().lock().latest_plan().cloned();
        let Some(plan) = plan else {
            return Ok(());
        };
        let mut text = format!("{PLAN_RESTATED}\n{}", plan.render());
        if let Some(step) = plan.current_step() {
            text.push_str(&format!(
                "\n\nContinue with step {}: {}",
                step.id,
                step.description.trim()
            ));
        }
        ctx.store()
            .add_message(&ChatMessage::text("user", text), &now_rfc3339())
            .context("stating the plan again after the compression")?;
        tracing::info!(uuid = %ctx.uuid(), steps = plan.steps.len(), "latest plan stated again after the compression");
        Ok(())
    }

    /// The outcome to return at a safe point when a pause or stop was requested.
    fn interrupted(&mut self, ctx: &TaskContext) -> anyhow::Result<Option<Outcome>> {
        Ok(match ctx.interrupt()? {
            None => None,
            Some(Interrupt::Stop) => Some(Outcome::Stopped),
            Some(Interrupt::Pause { reason }) => Some(Outcome::Paused { reason }),
        })
    }

    /// Step 1: a fresh context gets the system prompt, then the user's message. A resumed one
    /// is left as it is.
    fn start(&mut self, ctx: &mut TaskContext) -> anyhow::Result<()> {
        let stats_count = ctx
            .store()
            .count_messages()
            .context("message store: count-messages")?;
        let current_tokens = ctx
            .store()
            .current_token_count()
            .context("message store: current-token-count")?;
        let current_file = ctx.current_file()?;
        let current_empty = ctx
            .dir()
            .metadata(&current_file)
            .ok()
            .flatten()
            .is_none_or(|m| m.len() == 0);
        if !current_empty && stats_count == 1 {
            // A process killed between the system prompt and the task's prompt: add the latter.
            let user = ChatMessage::text("user", ctx.prompt().to_string());
            ctx.store()
                .add_message(&user, &now_rfc3339())
                .context("adding the task's prompt")?;
            return Ok(());
        }
        if !current_empty {
            tracing::info!(uuid = %ctx.uuid(), messages = stats_count, tokens = current_tokens, "continuing the context");
            return Ok(());
        }
        if stats_count > 0 {
            bail!(
                "{} is empty but {} holds {stats_count} messages: the context must be repaired before the task can go on",
                ctx.dir().show(&current_file),
                ctx.dir().show(MESSAGES)
            );
        }
        let mut system_prompt = self.config.agent.system_prompt.clone();
        if let Some(inherited) = ctx.inherited() {
            system_prompt.push_str("\n\n");
            system_prompt.push_str(inherited);
        }
        let system = ChatMessage::text("system", system_prompt);
        ctx.store()
            .add_message(&system, &now_rfc3339())
            .context("adding the system prompt")?;
        let user = ChatMessage::text("user", ctx.prompt().to_string());
        ctx.store()
            .add_message(&user, &now_rfc3339())
            .context("adding the task's prompt")?;
        Ok(())
    }

    /// One LLM call; returns the assistant message as appended.
    fn llm_step(&mut self, ctx: &mut TaskContext, step: u32) -> anyhow::Result<ChatMessage> {
        let current = ctx.current_file()?;
        // Step boundary: what was appended so far is on disk before we wait on the network.
        ctx.sync()?;

        let tokens_before = ctx
            .store()
            .current_token_count()
            .context("message store: current-token-count")?;
        let llm = &self.config.llm;
        let config = RequestConfig {
            model: llm.model.clone(),
            messages_file: current.clone(),
            request_file: REQUEST.to_string(),
            tools_file: self.tools.tools_file(),
            max_output_tokens: llm.max_output_tokens,
            temperature: llm.temperature,
        };
        let started = std::time::Instant::now();
        let result = exchange(
            self.format,
            ctx.transport(),
            ctx.dir(),
            &config,
            RESPONSE,
            None,
        );
        let mut record = CallRecord {
            step,
            context_tokens: tokens_before,
            context_length: llm.context_length,
            threshold_tokens: self.compressor.as_ref().map(|_| {
                (llm.context_length as f64 * self.config.context_storage.compression_threshold)
                    as u64
            }),
            request_bytes: 0,
            duration_ms: started.elapsed().as_millis() as u64,
            usage: None,
            error: None,
        };
        let done = match result {
            Ok(done) => done,
            Err(e) => {
                let error = format!("LLM call {step} failed: {e}");
                // request.json is kept after a failed call: its size is known.
                record.request_bytes = ctx
                    .dir()
                    .metadata(REQUEST)
                    .ok()
                    .flatten()
                    .map_or(0, |m| m.len());
                record.error = Some(&error);
                ctx.calls().record_call(&record, &now_rfc3339());
                if matches!(e, ExchangeError::Read { .. }) {
                    // The provider answered: count the call (usage unknown).
                    ctx.update_statistics(UsageDelta::llm_call(0))?;
                }
                bail!("{error}");
            }
        };
        record.request_bytes = done.request.bytes;
        record.usage = done.reply.usage;
        tracing::debug!(uuid = %ctx.uuid(), step, bytes = done.request.bytes, messages = done.request.messages,
            tokens = tokens_before, status = done.post.status, attempts = done.post.attempts, "LLM call done");
        let reply = done.reply;
        if let Some(u) = reply.usage {
            // Parts of the call's tokens, counted with them below.
            ctx.update_statistics(UsageDelta {
                cache_read_tokens: u.cache_read_tokens,
                cache_creation_tokens: u.cache_creation_tokens,
                ..UsageDelta::default()
            })?;
        }
        let message = normalise_reply(reply.message, step);
        if message.calls().is_empty()
            && message
                .content
                .as_deref()
                .is_none_or(|c| c.trim().is_empty())
        {
            let error = format!("LLM call {step}: the model returned an empty answer");
            record.error = Some(&error);
            ctx.calls().record_call(&record, &now_rfc3339());
            ctx.update_statistics(UsageDelta::llm_call(
                reply.usage.map(|u| u.total_tokens).unwrap_or(0),
            ))?;
            bail!(
                "LLM call {step}: the model returned an empty answer (no content and no tool calls; finish_reason: {})",
                untrusted::name(reply.finish_reason.as_deref().unwrap_or("none"))
            );
        }
        ctx.calls().record_call(&record, &now_rfc3339());
        let added = ctx
            .store()
            .add_message(&message, &now_rfc3339())
            .context("appending the assistant message")?;
        let tokens = match reply.usage {
            Some(u) if u.total_tokens > 0 => u.total_tokens,
            // Estimate: what was sent plus what came back.
            _ => tokens_before + added.tokens,
        };
        ctx.update_statistics(UsageDelta::llm_call(tokens))?;
        if reply.finish_reason.as_deref() == Some("length") {
            tracing::warn!(uuid = %ctx.uuid(), step, "the model's answer was cut at llm.max_output_tokens");
        }
        Ok(message)
    }

    /// The compression check before each LLM call ([`crate::compaction`]). With no compressor
    /// configured this does nothing. A failed compression leaves the context as it was and is
    /// logged; the task goes on while the context still fits the window, and fails after
    /// [`MAX_COMPACTION_FAILURES`] failures in a row. A context still over the threshold after
    /// compressing fails the task at once (compressing again could not help).
    fn maybe_compress(&mut self, ctx: &mut TaskContext) -> anyhow::Result<()> {
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
        let dir = ctx.dir().clone();
        match compact_if_needed(ctx.store(), compressor, &dir, &cfg, &now_rfc3339) {
            Ok(CompactionOutcome::NotNeeded) => Ok(()),
            Ok(CompactionOutcome::Compressed {
                before_tokens,
                after_tokens,
                summary_id,
            }) => {
                ctx.calls().record_compression(
                    before_tokens,
                    after_tokens,
                    summary_id,
                    &now_rfc3339(),
                );
                self.compaction_failures = 0;
                ctx.update_statistics(UsageDelta::compression())?;
                let summaries = ctx.summaries().count().unwrap_or(0);
                tracing::info!(uuid = %ctx.uuid(), before_tokens, after_tokens, summary = ?summary_id, summaries, "context compressed");
                crate::failpoint::kill_if_set("agent:compressed");
                self.restate_plan(ctx)
            }
            Err(e @ CompactionError::StillOverThreshold { .. }) => {
                // The smaller context is installed and valid; count it, then stop.
                ctx.update_statistics(UsageDelta::compression())?;
                Err(e.into())
            }
            Err(e) => {
                self.compaction_failures += 1;
                let tokens = ctx
                    .store()
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
                // The error may quote what the compressor wrote (ids, a line): bounded, escaped.
                let shown = untrusted::text(&e.to_string(), untrusted::MAX_LOG_BYTES).into_owned();
                tracing::warn!(uuid = %ctx.uuid(), tokens, failures = self.compaction_failures, "{shown}");
                Ok(())
            }
        }
    }
}

/// The outcomes of the tool calls `answers` answered (a resumed task's last tool round): the
/// status tools.jsonl recorded, or, for a call without a line there (its result was written
/// by crash repair), an error.
fn outcomes_of(ctx: &TaskContext, answers: &[ChatMessage]) -> anyhow::Result<Vec<ToolOutcome>> {
    let ids: Vec<&str> = answers
        .iter()
        .filter_map(|a| a.tool_call_id.as_deref())
        .collect();
    let statuses = ctx.tools_ref().statuses(&ids)?;
    Ok(answers
        .iter()
        .map(|a| {
            let id = a.tool_call_id.clone().unwrap_or_default();
            let success = statuses.get(&id) == Some(&ToolStatus::Success);
            ToolOutcome {
                call_id: id,
                name: a.tool_name.clone().unwrap_or_default(),
                success,
                error: (!success)
                    .then(|| bounded(a.content.as_deref().unwrap_or(""), MAX_TOOL_ERROR_BYTES)),
            }
        })
        .collect())
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
