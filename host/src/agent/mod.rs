//! The agent loop of one task (DESIGN §4), run inside the task's own process on its
//! [`TaskContext`], driven by the task's strategy component ([`strategy::StrategyDriver`]).
//!
//! The host owns every step that touches the outside world or the context's rules; the
//! strategy decides between them:
//! 1. If current.jsonl is empty: add the system prompt (with the context inherited from an
//!    earlier task of the same key, [`crate::task::inheritance`]), then the task's user
//!    message. A resumed task already has them and never gets them again.
//! 2. Strategy hook `start` (before the first model call): it may add a message (a plan).
//! 3. Model call, at most `agent.max_steps` in all: make sure the context about to be sent
//!    keeps every invariant, repairing what is safe ([`TaskContext::ensure_sendable`]);
//!    compress if the compressor says so (the latest plan is then stated again, so a summary
//!    cannot lose it); fsync the context files (step boundary); write request.json from
//!    current.jsonl with the request format plugin; POST it; parse response.json with the
//!    plugin; append the assistant message (its tool-call ids made unique in the
//!    conversation); add the call and its tokens to the task's row (provider usage when given,
//!    estimate otherwise; prompt-cache reads and writes counted apart too); delete
//!    request.json and response.json (both are kept when the call fails, and the error says
//!    so).
//!    - A reply that cannot be read or is empty is asked for again, up to
//!      [`MAX_MALFORMED_REPLY_RETRIES`] times (not a stream cut off: the exchange already
//!      sent it again `llm.max_retries` times).
//!    - A provider answer that the context is too long ([`crate::llm::overflow`]) compresses
//!      the context for a window a quarter smaller ([`OVERFLOW_WINDOW_FACTOR`], for the rest
//!      of the task) and sends again, up to [`MAX_OVERFLOW_RETRIES`] times.
//! 4. Every tool call of the reply is made by the [`ToolRunner`], recorded by the task's
//!    [`crate::task::ToolStore`], and answered with a `tool` message; then hook `after-tools`.
//!    A call whose arguments are not valid JSON (a reply cut at the output token limit) is not
//!    made: it is answered with an error that says so, and the next request sends `{}` as its
//!    arguments (the history keeps them as they came).
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
//! A model call gives way to the same requests ([`crate::llm::Interruption`]): no retry or
//! back-off wait starts after one, and a reply in flight gets `llm.interrupt_grace_secs`; a call
//! given up is recorded in llm_calls.jsonl, not counted, and sent again on resume.
//!
//! Resuming (after a pause or a crash) starts from the files alone ([`Agent::resume_point`]):
//! the context's last message says which step comes next — unanswered tool calls are made
//! first; a round of tool results, or a reply without tool calls, goes to its hook again (which
//! uses the decision it recorded, if it returned before the task stopped); a task with only its
//! prompt asks `start` again.

pub mod exchange;
pub mod llm_import;
mod reply_check;
pub mod strategy;
mod window;
pub mod without_reasoning;

pub use reply_check::{MAX_MALFORMED_REPLY_RETRIES, MAX_REPLY_PREFIX_BYTES};
use reply_check::{normalise_reply, reject_empty_reply, text_prefix};
use window::record_compaction;
pub use window::{MAX_COMPACTION_FAILURES, MAX_OVERFLOW_RETRIES, OVERFLOW_WINDOW_FACTOR};

use anyhow::{Context, anyhow, bail};
use ctxhost_format::files::{CURRENT, MESSAGES, REQUEST, RESPONSE};
use ctxhost_format::planning::{Hook, bounded};
use ctxhost_format::{ChatMessage, ToolCall, ToolStatus};

use crate::compaction::{CompactionError, CompactionOutcome, compact_framed};
use crate::config::Config;
use crate::db::now_rfc3339;
use crate::invariants::arguments_error;
use crate::invariants::pairing::invalid_arguments_text;
use crate::invariants::queries::{self, Tail};
use crate::llm::Interruption;
use crate::runtime::{
    Compressor, Decision, HookCall, Reply, RequestConfig, RequestFormat, RuntimeError, Strategy,
    StrategyConfig, TaskState, ToolOutcome,
};
use crate::task::{CallRecord, Interrupt, TaskContext, UsageDelta};
use crate::tools::CallOutcome;
pub use crate::tools::{NoTools, ToolRunner};
use crate::untrusted;
use exchange::{Exchange, ExchangeError, exchange_checked};
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
    /// Times the provider answered that the context was too long: each makes the window the
    /// compressor works with [`OVERFLOW_WINDOW_FACTOR`] smaller, for the rest of the process.
    pub context_overflows: u32,
    /// Estimated tokens of the tool definitions sent with every request (read when the loop
    /// starts): the messages get the window minus these.
    tool_definition_tokens: u64,
    /// Tells whether an LLM call of the compressor or the strategy gave way to a pause or
    /// stop ([`Agent::with_interrupt_probe`]); `None`: their calls never do.
    interrupt_probe: Option<llm_import::InterruptProbe>,
    /// The server refused `stream_options` (`llm.stream_usage`) once: the process's later
    /// calls leave it out.
    stream_usage_refused: bool,
    /// Called at the end of every round of tool calls (the step boundary where the workspace
    /// may have changed): the task's `changes.patch` is written there
    /// ([`Agent::with_step_end`]).
    step_end: Option<StepEnd<'a>>,
}

/// What [`Agent::with_step_end`] runs at each step boundary; it never fails the task (it logs).
pub type StepEnd<'a> = Box<dyn FnMut(&TaskContext) + 'a>;

impl<'a> Agent<'a> {
    /// An agent loop with `config`, the request `format`, the `compressor` (`None`: compression
    /// off), the `tools` and the `strategy`.
    pub fn new(
        config: &'a Config,
        format: &'a mut RequestFormat,
        compressor: Option<&'a mut Compressor>,
        tools: &'a mut dyn ToolRunner,
        strategy: &'a mut StrategyDriver,
    ) -> Agent<'a> {
        Agent {
            config,
            format,
            compressor,
            tools,
            strategy,
            compaction_failures: 0,
            context_overflows: 0,
            tool_definition_tokens: 0,
            interrupt_probe: None,
            stream_usage_refused: false,
            step_end: None,
        }
    }

    /// Run `f` at the end of every round of tool calls, after the last result is recorded and
    /// before the strategy's `after-tools` hook (also on a round an interrupt cut short).
    pub fn with_step_end(mut self, f: StepEnd<'a>) -> Agent<'a> {
        self.step_end = Some(f);
        self
    }

    /// The probe given to the `llm` imports of the compressor and the strategy
    /// ([`llm_import::HostLlm::interruptible`]): when one of their calls gave way to a pause or
    /// stop, the component's failure is that pause or stop, not the task's failure.
    pub fn with_interrupt_probe(mut self, probe: llm_import::InterruptProbe) -> Agent<'a> {
        self.interrupt_probe = Some(probe);
        self
    }
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
        self.read_tool_definitions(ctx);
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
                    let Some(d) = self.ask(ctx, Hook::Start, steps, |s, c, t| s.start(c, t))?
                    else {
                        return self.gave_way(ctx);
                    };
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
                    for fix in ctx.ensure_sendable()? {
                        tracing::warn!(uuid = %ctx.uuid(), "context repaired before sending it: current.jsonl {fix}");
                    }
                    if !self.maybe_compress(ctx)? {
                        return self.gave_way(ctx);
                    }
                    steps += 1;
                    let Some(reply) = self.llm_step(ctx, steps)? else {
                        // The call gave way to a pause or stop request: honour it now.
                        return match self.interrupted(ctx)? {
                            Some(outcome) => Ok(outcome),
                            None => bail!(
                                "LLM call {steps} was given up for a pause or stop request that is gone"
                            ),
                        };
                    };
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
                            self.end_step(ctx);
                            return Ok(outcome);
                        }
                        outcomes.push(self.tool_call(ctx, call)?);
                    }
                    // Step boundary: the tools of this step are done.
                    self.end_step(ctx);
                    // Safe point: after the last result (a call interrupted by a pause or
                    // stop ends this run here; a resume goes on with the strategy's hook).
                    if let Some(outcome) = self.interrupted(ctx)? {
                        return Ok(outcome);
                    }
                    Next::AfterTools { reply, outcomes }
                }
                Next::AfterTools { reply, outcomes } => {
                    let Some(d) = self.ask(ctx, Hook::AfterTools, steps, |s, c, t| {
                        s.after_tools(c, t, &reply, &outcomes)
                    })?
                    else {
                        return self.gave_way(ctx);
                    };
                    self.apply(ctx, d)?
                }
                Next::Answered { reply } => {
                    let Some(d) = self.ask(ctx, Hook::AfterReply, steps, |s, c, t| {
                        s.after_reply(c, t, &reply)
                    })?
                    else {
                        return self.gave_way(ctx);
                    };
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

    /// The step-boundary callback ([`Agent::with_step_end`]), if any.
    fn end_step(&mut self, ctx: &TaskContext) {
        if let Some(f) = self.step_end.as_mut() {
            f(ctx);
        }
    }

    /// Estimate the tool definitions sent with every request (the messages get the window
    /// minus these) and give a tool result its share of what they leave of the window. Done
    /// when the loop starts and when the offered tools change (after a compression).
    fn read_tool_definitions(&mut self, ctx: &mut TaskContext) {
        self.tool_definition_tokens = self
            .tools
            .tools_file()
            .and_then(|f| ctx.dir().read(&f).ok())
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .map(|text| ctxhost_format::estimate_tokens(&text))
            .unwrap_or(0);
        // The host's own tools (history_search, history_read) are left out of the result's
        // share: a result does not shrink when they are added after a compression.
        let cap = self.config.tool_output_cap_for(
            self.config.llm.context_length.saturating_sub(
                self.tool_definition_tokens
                    .saturating_sub(self.tools.host_definition_tokens()),
            ),
        );
        ctx.tools().set_max_output_tokens(cap);
        self.tools.set_max_output_tokens(cap);
    }

    /// A compression was installed (`before` → `after` tokens, its summary's id when it made
    /// one): count it ([`record_compaction`]) and tell the tool runner, which may offer more
    /// tools from now on (the history tools).
    fn compressed(
        &mut self,
        ctx: &mut TaskContext,
        before: u64,
        after: u64,
        summary_id: Option<u64>,
    ) -> anyhow::Result<()> {
        record_compaction(ctx, before, after, summary_id)?;
        self.tools
            .context_compressed()
            .context("offering the history tools after the compression")?;
        self.read_tool_definitions(ctx);
        Ok(())
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

    /// Ask the strategy's `hook` (through `call`) at the context's current position. `None`:
    /// the hook failed because one of its LLM calls gave way to a pause or stop.
    fn ask(
        &mut self,
        ctx: &mut TaskContext,
        hook: Hook,
        steps: u32,
        call: impl FnOnce(&mut Strategy, &StrategyConfig, &TaskState) -> Result<HookCall, RuntimeError>,
    ) -> anyhow::Result<Option<Decision>> {
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
        let _span = crate::telemetry::genai::strategy(hook.as_str(), self.strategy.component());
        match self.strategy.hook(hook, &state, now_rfc3339(), call) {
            Ok(decision) => Ok(Some(decision)),
            Err(e) if self.took_gave_way() => {
                tracing::info!(uuid = %ctx.uuid(), ?hook, "strategy hook given up: its LLM call gave way to a pause or stop request ({e:#})");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether an LLM call of the compressor or the strategy gave way to a pause or stop since
    /// this was last asked.
    fn took_gave_way(&self) -> bool {
        self.interrupt_probe
            .as_ref()
            .is_some_and(llm_import::InterruptProbe::take_gave_way)
    }

    /// The outcome after a component's LLM call gave way to a pause or stop: that pause or
    /// stop, read from the row (it cannot be gone: requests are only cleared by resume).
    fn gave_way(&mut self, ctx: &TaskContext) -> anyhow::Result<Outcome> {
        match self.interrupted(ctx)? {
            Some(outcome) => Ok(outcome),
            None => bail!(
                "a component's LLM call was given up for a pause or stop request that is gone"
            ),
        }
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
        let mut span = crate::telemetry::genai::tool(&call.function.name, &call.id);
        let recorded = self.make_call(ctx, call)?;
        crate::telemetry::genai::tool_done(&mut span, recorded.status == ToolStatus::Success);
        let key = self.config.api_key().ok().flatten();
        crate::telemetry::genai::content(
            &mut span,
            "gen_ai.tool.call.arguments",
            || call.function.arguments.clone(),
            key.as_deref(),
        );
        crate::telemetry::genai::content(
            &mut span,
            "gen_ai.tool.call.result",
            || recorded.content.clone(),
            key.as_deref(),
        );
        drop(span);
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

    /// Make one tool call of the model and record it. A call whose arguments are not valid JSON
    /// is not made: it gets an error result saying what happened.
    fn make_call(
        &mut self,
        ctx: &mut TaskContext,
        call: &ctxhost_format::ToolCall,
    ) -> anyhow::Result<crate::task::RecordedCall> {
        let what = || {
            format!(
                "tool call {} ({})",
                untrusted::name(&call.id),
                untrusted::name(&call.function.name)
            )
        };
        if let Some(reason) = arguments_error(&call.function.arguments) {
            tracing::warn!(uuid = %ctx.uuid(), id = %untrusted::name(&call.id), tool = %untrusted::name(&call.function.name), "tool call arguments are not valid JSON ({reason}); answering with an error");
            let text = invalid_arguments_text(call, &reason);
            return ctx
                .tools()
                .record(call, &CallOutcome::Error(text), std::time::Duration::ZERO)
                .with_context(what);
        }
        let tools = &mut *self.tools;
        ctx.tools().run(call, |c| tools.call(c)).with_context(what)
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

    /// One LLM call; returns the assistant message as appended. A malformed or empty reply is
    /// asked for again (up to [`MAX_MALFORMED_REPLY_RETRIES`] times); a "context too long"
    /// answer compresses the context and sends it again (up to [`MAX_OVERFLOW_RETRIES`] times).
    fn llm_step(
        &mut self,
        ctx: &mut TaskContext,
        step: u32,
    ) -> anyhow::Result<Option<ChatMessage>> {
        let (mut malformed, mut overflows) = (0u32, 0u32);
        // Sent again once without the reasoning items the provider could not decrypt.
        let mut drop_reasoning = false;
        loop {
            // Step boundary: what was appended so far is on disk before we wait on the network.
            ctx.sync()?;
            let tokens_before = ctx
                .store()
                .current_token_count()
                .context("message store: current-token-count")?;
            let provider = self.config.llm.provider.to_string();
            let mut span =
                crate::telemetry::genai::chat(&provider, &self.config.llm.model, "agent");
            let started = std::time::Instant::now();
            let result = self.send(ctx, drop_reasoning);
            let mut record = CallRecord {
                step,
                context_tokens: tokens_before,
                context_length: self.config.llm.context_length,
                threshold_tokens: self.compressor.as_ref().map(|_| {
                    (self.window() as f64 * self.config.context_storage.compression_threshold)
                        as u64
                }),
                request_bytes: 0,
                duration_ms: started.elapsed().as_millis() as u64,
                usage: None,
                error: None,
                interrupted: false,
            };
            let e = match result {
                Ok(done) => {
                    crate::telemetry::genai::chat_done(
                        &mut span,
                        done.reply.model.as_deref(),
                        done.reply.usage,
                        done.reply.finish_reason.as_deref(),
                    );
                    crate::telemetry::genai::content(
                        &mut span,
                        "gen_ai.output.messages",
                        || {
                            // A text in a file: its start (the span's attribute is bounded).
                            let mut m = done.reply.message.clone();
                            if let Some(f) = &done.reply.content_file {
                                m.content = Some(text_prefix(ctx.dir(), f));
                            }
                            serde_json::to_string(&[&m]).unwrap_or_default()
                        },
                        self.config.api_key().ok().flatten().as_deref(),
                    );
                    drop(span);
                    if let Some(refused) = &done.refused_stream_usage {
                        // The refused request, as a failed call of its own (the request
                        // without the argument was one more of the call's budget).
                        self.stream_usage_refused = true;
                        let error = format!(
                            "LLM call {step} failed: {refused}; sent again without stream_options \
                             (the server does not take it: the reply's usage is unknown, and later \
                             calls leave it out; set llm.stream_usage: false for this server)"
                        );
                        tracing::warn!(uuid = %ctx.uuid(), step, "{error}");
                        let failed = CallRecord {
                            request_bytes: done.request.bytes,
                            error: Some(&error),
                            ..record.clone()
                        };
                        ctx.calls().record_call(&failed, &now_rfc3339());
                    }
                    record.request_bytes = done.request.bytes;
                    record.usage = done.reply.usage;
                    ctx.calls().record_call(&record, &now_rfc3339());
                    return self.record_reply(ctx, step, done, tokens_before).map(Some);
                }
                Err(e) => e,
            };
            span.fail(&e.error_type(), &e.error_type());
            drop(span);
            let interrupted = e.is_interrupted();
            let retry_without_reasoning =
                !drop_reasoning && without_reasoning::is_invalid_encrypted_content(&e);
            let error = if interrupted {
                format!("LLM call {step} ended by a pause or stop request: {e}")
            } else if retry_without_reasoning {
                format!(
                    "LLM call {step} failed: {e}; sent again without the reasoning items \
                     (the provider's recovery for {})",
                    without_reasoning::INVALID_ENCRYPTED_CONTENT
                )
            } else {
                format!("LLM call {step} failed: {e}")
            };
            // request.json is kept after a failed call, except one that gave way to a pause
            // or stop: the error tells its size then.
            record.request_bytes = e.request_bytes().unwrap_or_else(|| {
                ctx.dir()
                    .metadata(REQUEST)
                    .ok()
                    .flatten()
                    .map_or(0, |m| m.len())
            });
            record.error = Some(&error);
            record.interrupted = interrupted;
            ctx.calls().record_call(&record, &now_rfc3339());
            if interrupted {
                // Not a failure: the provider did not answer (the call is not counted), and a
                // resumed task sends the request again.
                tracing::info!(uuid = %ctx.uuid(), step, "LLM call {step} given up: pause or stop requested");
                return Ok(None);
            }
            if let ExchangeError::Rejected { usage_tokens, .. } = &e {
                ctx.update_statistics(UsageDelta::llm_call(*usage_tokens))?;
            } else if matches!(e, ExchangeError::Read { .. }) {
                // The provider answered: count the call (usage unknown).
                ctx.update_statistics(UsageDelta::llm_call(0))?;
            }
            if retry_without_reasoning {
                drop_reasoning = true;
                tracing::warn!(uuid = %ctx.uuid(), step, "LLM call {step}: the provider could not decrypt a reasoning item ({}); sending it again without the reasoning items", without_reasoning::INVALID_ENCRYPTED_CONTENT);
                continue;
            }
            if e.is_malformed_reply() && malformed < MAX_MALFORMED_REPLY_RETRIES {
                malformed += 1;
                tracing::warn!(uuid = %ctx.uuid(), step, attempt = malformed, "LLM call {step}: {e}; asking again");
                continue;
            }
            if e.is_context_overflow() {
                if overflows < MAX_OVERFLOW_RETRIES {
                    overflows += 1;
                    if !self.compress_after_overflow(ctx, step, &e)? {
                        // Gave way to a pause or stop: the caller honours it.
                        return Ok(None);
                    }
                    continue;
                }
                bail!(
                    "LLM call {step} failed: {e}; the provider still finds the context too long after {overflows} \
                     compression(s) for a smaller window: set llm.context_length (now {}) to the model's real window \
                     (for a local server, the context size it was started with)",
                    self.config.llm.context_length
                );
            }
            if e.is_malformed_reply() {
                bail!(
                    "LLM call {step} failed: {e} (asked {} time(s))",
                    malformed + 1
                );
            }
            bail!("LLM call {step} failed: {e}");
        }
    }

    /// Write the request from the context, POST it and read the reply; an empty reply is
    /// rejected (its files kept). The POST gives way to a pause or stop request of the task
    /// (the task's row, as at the safe points), with `llm.interrupt_grace_secs` for a reply in
    /// flight ([`crate::llm::Interruption`]).
    /// `drop_reasoning`: from a copy of the context without the Responses API's reasoning
    /// items ([`without_reasoning`]: the provider could not decrypt one).
    fn send(
        &mut self,
        ctx: &mut TaskContext,
        drop_reasoning: bool,
    ) -> Result<Exchange, ExchangeError> {
        let mut messages_file = ctx.current_file().unwrap_or_else(|_| CURRENT.to_string());
        let ctx: &TaskContext = ctx;
        if drop_reasoning {
            let provider = ctxhost_format::responses::PROVIDER;
            match without_reasoning::write(ctx.dir(), &messages_file, provider) {
                Ok(n) => {
                    tracing::info!(uuid = %ctx.uuid(), messages = n, "request written without the reasoning items of {n} message(s)");
                    messages_file = without_reasoning::WITHOUT_REASONING.to_string();
                }
                Err(e) => {
                    tracing::warn!(uuid = %ctx.uuid(), "cannot write the context without its reasoning items ({e:#}): sending it as it is");
                }
            }
        }
        let llm = &self.config.llm;
        let requested = || match ctx.interrupt() {
            Ok(interrupt) => interrupt.is_some(),
            Err(e) => {
                tracing::warn!(uuid = %ctx.uuid(), "cannot read the task's pause/stop requests during the LLM call: {e:#}");
                false
            }
        };
        let interruption = Interruption {
            requested: &requested,
            grace: std::time::Duration::from_secs(llm.interrupt_grace_secs),
        };
        let config = RequestConfig {
            model: llm.model.clone(),
            messages_file,
            request_file: REQUEST.to_string(),
            tools_file: self.tools.tools_file(),
            max_output_tokens: llm.max_output_tokens,
            temperature: llm.temperature,
            stream: llm.stream,
            stream_usage: llm.stream_usage() && !self.stream_usage_refused,
            reasoning: llm.reasoning(),
        };
        let done = exchange_checked(
            self.format,
            ctx.transport(),
            ctx.dir(),
            &config,
            RESPONSE,
            None,
            Some(&interruption),
            &reject_empty_reply,
        );
        if drop_reasoning
            && let Err(e) = ctx
                .dir()
                .remove_file_if_exists(without_reasoning::WITHOUT_REASONING)
        {
            tracing::warn!(uuid = %ctx.uuid(), "cannot delete {}: {e}", ctx.dir().show(without_reasoning::WITHOUT_REASONING));
        }
        done
    }

    /// Append the reply of a completed exchange (host rules applied: [`normalise_reply`], ids
    /// unique in the conversation) and count the call.
    fn record_reply(
        &mut self,
        ctx: &mut TaskContext,
        step: u32,
        done: Exchange,
        tokens_before: u64,
    ) -> anyhow::Result<ChatMessage> {
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
        crate::failpoint::kill_if_set("agent:reply-read");
        let mut message = normalise_reply(reply.message);
        for (old, new) in ctx.make_call_ids_unique(&mut message)? {
            tracing::debug!(uuid = %ctx.uuid(), step, "tool call id {old:?} is already used in the conversation: {new}");
        }
        let added = match &reply.content_file {
            None => ctx.store().add_message(&message, &now_rfc3339()),
            Some(file) => ctx.store().add_message_file(&message, file, &now_rfc3339()),
        }
        .context("appending the assistant message")?;
        crate::failpoint::kill_if_set("agent:reply-appended");
        if let Some(file) = &reply.content_file {
            // Appended: what the loop keeps of the text is its start (the hooks get it), and
            // the file goes. A crash before this leaves it to crash repair, which deletes it
            // as a temporary (the context then ends with the reply, or the call is made again).
            message.content = Some(text_prefix(ctx.dir(), file));
            if let Err(e) = ctx.dir().remove_file_if_exists(file) {
                tracing::warn!(uuid = %ctx.uuid(), "cannot delete {}: {e}", ctx.dir().show(file));
            }
        }
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

#[cfg(test)]
mod tests {
    use super::window::summary_tokens_in;
    use super::*;
    use ctxhost_format::ToolCall;

    #[test]
    fn the_summary_of_a_context_is_found_on_its_second_line_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = crate::task_dir::TaskDir::open(tmp.path()).unwrap();
        let line = |m: &ChatMessage| serde_json::to_string(m).unwrap() + "\n";
        let system = ChatMessage::text("system", "be brief");
        let summary =
            ctxhost_format::compress::summary_message(2, 40, &"the agent read files. ".repeat(50));
        std::fs::write(
            tmp.path().join("current.jsonl"),
            line(&system) + &line(&summary) + &line(&ChatMessage::text("user", "go on")),
        )
        .unwrap();
        assert_eq!(
            summary_tokens_in(&dir, "current.jsonl"),
            Some(ctxhost_format::estimate_message_tokens(&summary))
        );
        // No summary at line 2 (one later is not the context's summary), or no file.
        std::fs::write(
            tmp.path().join("current.jsonl"),
            line(&system) + &line(&ChatMessage::text("user", "go")) + &line(&summary),
        )
        .unwrap();
        assert_eq!(summary_tokens_in(&dir, "current.jsonl"), None);
        assert_eq!(summary_tokens_in(&dir, "missing.jsonl"), None);
    }

    #[test]
    fn a_reply_gets_the_assistant_role_and_arguments() {
        let m = ChatMessage {
            role: "model".into(),
            content: None,
            tool_calls: Some(vec![
                ToolCall::new("", "a", ""),
                ToolCall::new("x", "b", "{\"p\":1}"),
            ]),
            ..Default::default()
        };
        let n = normalise_reply(m);
        assert_eq!(n.role, "assistant");
        let args: Vec<_> = n
            .calls()
            .iter()
            .map(|c| c.function.arguments.as_str())
            .collect();
        assert_eq!(args, ["{}", "{\"p\":1}"]);
    }

    #[test]
    fn empty_tool_call_list_becomes_none() {
        let m = ChatMessage {
            role: "assistant".into(),
            content: Some("hi".into()),
            tool_calls: Some(vec![]),
            ..Default::default()
        };
        assert_eq!(normalise_reply(m).tool_calls, None);
    }
}
