//! The context window of a task's requests: its size ([`Agent::window`]: the configured window
//! less the tool definitions, smaller after each "context too long" answer), whether a context
//! fits it, compressing when the compressor's threshold says so or the provider refused the
//! context, and the error naming the largest message when nothing can make it fit.

use super::*;

impl Agent<'_> {
    /// The window the messages have, and the compressor works with: `llm.context_length` minus
    /// the tool definitions sent with every request, made [`OVERFLOW_WINDOW_FACTOR`] smaller by
    /// each "context too long" answer of the provider (the token estimate is evidently low for
    /// its tokenizer).
    pub(super) fn window(&self) -> u64 {
        let mut window = self
            .config
            .llm
            .context_length
            .saturating_sub(self.tool_definition_tokens);
        for _ in 0..self.context_overflows {
            window = window * OVERFLOW_WINDOW_FACTOR.0 / OVERFLOW_WINDOW_FACTOR.1;
        }
        window.max(crate::config::MIN_TOOL_OUTPUT_CAP)
    }

    /// Whether a context of `tokens` leaves the reply its reserve in the window.
    pub(super) fn fits_window(&self, tokens: u64) -> bool {
        tokens + u64::from(self.config.reserve_output_tokens()) <= self.window()
    }

    /// The provider said the context is too long: compress it for a smaller window, whatever
    /// the threshold says. `false`: the compression gave way to a pause or stop.
    pub(super) fn compress_after_overflow(
        &mut self,
        ctx: &mut TaskContext,
        step: u32,
        error: &ExchangeError,
    ) -> anyhow::Result<bool> {
        self.context_overflows += 1;
        let window = self.window();
        let tokens = ctx.store().current_token_count()?;
        tracing::warn!(uuid = %ctx.uuid(), step, tokens, window, "LLM call {step}: the provider says the context is too long; compressing it for a window of {window} tokens and sending it again");
        let Some(compressor) = self.compressor.as_deref_mut() else {
            bail!(
                "LLM call {step} failed: {error}; the context ({tokens} estimated tokens) is too long for the model and \
                 no compressor is configured (plugins.compressor: none): configure one (e.g. builtin:llm-summarizer), \
                 or set llm.context_length to the model's real window"
            );
        };
        let cfg = self.config.compress_config_for(window);
        let dir = ctx.dir().clone();
        let recall = self.config.context_storage.recall;
        match compact_framed(ctx.store(), compressor, &dir, &cfg, &now_rfc3339, true, recall) {
            Ok(CompactionOutcome::Compressed {
                after_tokens,
                summary_id,
                ..
            }) => {
                self.compressed(ctx, tokens, after_tokens, summary_id)?;
                tracing::info!(uuid = %ctx.uuid(), before_tokens = tokens, after_tokens, "context compressed after the provider's answer");
                self.restate_plan(ctx)?;
                Ok(true)
            }
            Ok(CompactionOutcome::NotNeeded) => Ok(true),
            Err(CompactionError::StillOverThreshold { tokens: after, .. }) => {
                self.compressed(ctx, tokens, after, None)?;
                tracing::warn!(uuid = %ctx.uuid(), tokens = after, "compressed, still over the threshold of the smaller window; sending it");
                Ok(true)
            }
            Err(e) if self.took_gave_way() => {
                tracing::info!(uuid = %ctx.uuid(), step, "compression given up: its LLM call gave way to a pause or stop request ({e})");
                Ok(false)
            }
            Err(e) => Err(anyhow!(e).context(format!(
                "LLM call {step} failed: {error}; the context ({tokens} estimated tokens) could not be compressed \
                 further for a window of {window} tokens: the model's window is smaller than llm.context_length ({}) \
                 says — set it to the model's real window (for a local server, the context size it was started with)",
                self.config.llm.context_length
            ))),
        }
    }

    /// Why the context cannot be sent: it does not leave the reply its reserve in the window
    /// even after compressing. Names what is too big and what would help.
    pub(super) fn window_exceeded(&self, ctx: &mut TaskContext, tokens: u64) -> anyhow::Error {
        let window = self.window();
        let reserve = self.config.reserve_output_tokens();
        let largest = ctx
            .current_file()
            .ok()
            .and_then(|f| largest_message_in(ctx.dir(), &f));
        let summary = ctx
            .current_file()
            .ok()
            .and_then(|f| summary_tokens_in(ctx.dir(), &f));
        let advice = match &largest {
            // A summary larger than its share: the model ignored the summary request's
            // max_tokens, or the reserve is too large for the window.
            _ if summary.is_some_and(|t| t > window / 4) => format!(
                "the summary the compressor made is {} tokens, more than a quarter of the window: the model \
                 answered the summary request at length (it may ignore max_tokens); lower llm.max_output_tokens \
                 (the summary requests' reply limit, {reserve}), or use a model with a larger window \
                 (llm.context_length)",
                summary.unwrap_or(0)
            ),
            Some(m) if m.part == LargestPart::ToolCallArguments => format!(
                "the largest message ({}), the model's own call of {}, has {} tokens of tool-call arguments of \
                 its {} tokens; a tool call is kept whole with its results by every compression: the model \
                 wrote arguments too large for the window — ask for smaller steps, lower llm.max_output_tokens \
                 (the reply reserve, {reserve}), or use a model with a larger window (llm.context_length)",
                m.place,
                m.tool.as_deref().unwrap_or("a tool"),
                m.part_tokens,
                m.tokens
            ),
            Some(m) if m.role == "tool" => format!(
                "the largest message ({}), a result of {} ({} tokens), is kept whole by every compression: \
                 lower tools.max_tool_output_tokens (the effective cap for this window is {}), or use a model \
                 with a larger window (llm.context_length)",
                m.place,
                m.tool.as_deref().unwrap_or("a tool"),
                m.tokens,
                self.config.tool_output_cap_for(window)
            ),
            Some(m) => format!(
                "the largest message ({}, {}, {} tokens) is kept whole by every compression: shorten it, lower \
                 llm.max_output_tokens (the reply reserve, {reserve}), or use a model with a larger window \
                 (llm.context_length)",
                m.role, m.place, m.tokens
            ),
            None => "use a model with a larger window (llm.context_length)".to_string(),
        };
        let tools = if self.tool_definition_tokens > 0 {
            format!(
                ", after {} tokens of tool definitions,",
                self.tool_definition_tokens
            )
        } else {
            String::new()
        };
        anyhow!(
            "the context is {tokens} tokens, more than the window leaves ({window} tokens{tools} minus {reserve} \
             reserved for the reply): {advice}"
        )
    }

    /// The compression check before each LLM call ([`crate::compaction`]). With no compressor
    /// configured this does nothing. A failed compression leaves the context as it was and is
    /// logged; the task goes on while the context still fits the window, and fails after
    /// [`MAX_COMPACTION_FAILURES`] failures in a row. A context still over the threshold after
    /// compressing (the newest tool-call group alone is that large) goes on while it fits the
    /// window; one that does not fails the task, naming what is too big. `false`: the
    /// compression gave way to a pause or stop (its LLM call did), the context as it was.
    pub(super) fn maybe_compress(&mut self, ctx: &mut TaskContext) -> anyhow::Result<bool> {
        // What the history holds before the compressor runs is counted (the first step's
        // system prompt and prompt too), so a compressor that replaces it is caught at the
        // next step boundary ([`TaskContext::verify_history`]).
        ctx.verify_history()?;
        let window = self.window();
        let Some(compressor) = self.compressor.as_deref_mut() else {
            return Ok(true);
        };
        let cfg = self.config.compress_config_for(window);
        let dir = ctx.dir().clone();
        let recall = self.config.context_storage.recall;
        match compact_framed(
            ctx.store(),
            compressor,
            &dir,
            &cfg,
            &now_rfc3339,
            false,
            recall,
        ) {
            Ok(CompactionOutcome::NotNeeded) => Ok(true),
            Ok(CompactionOutcome::Compressed {
                before_tokens,
                after_tokens,
                summary_id,
            }) => {
                self.compaction_failures = 0;
                self.compressed(ctx, before_tokens, after_tokens, summary_id)?;
                let summaries = ctx.summaries().count().unwrap_or(0);
                tracing::info!(uuid = %ctx.uuid(), before_tokens, after_tokens, summary = ?summary_id, summaries, "context compressed");
                crate::failpoint::kill_if_set("agent:compressed");
                self.restate_plan(ctx)?;
                Ok(true)
            }
            Err(
                e @ CompactionError::StillOverThreshold {
                    before_tokens,
                    tokens,
                    ..
                },
            ) => {
                // The smaller context is installed and valid; count it.
                self.compaction_failures = 0;
                self.compressed(ctx, before_tokens, tokens, None)?;
                if self.fits_window(tokens) {
                    tracing::warn!(uuid = %ctx.uuid(), tokens, "{e}; it still fits the window: going on");
                    return Ok(true);
                }
                Err(self.window_exceeded(ctx, tokens))
            }
            Err(e) if self.took_gave_way() => {
                // Not a failure: the context is as it was; a resumed task compresses again.
                tracing::info!(uuid = %ctx.uuid(), "compression given up: its LLM call gave way to a pause or stop request ({e})");
                Ok(false)
            }
            Err(e) => {
                self.compaction_failures += 1;
                let tokens = ctx
                    .store()
                    .current_token_count()
                    .context("message store: current-token-count")?;
                if !self.fits_window(tokens) {
                    return Err(self
                        .window_exceeded(ctx, tokens)
                        .context(format!("compression failed: {e}")));
                }
                if self.compaction_failures >= MAX_COMPACTION_FAILURES {
                    return Err(anyhow!(e).context(format!(
                        "compression failed {} time(s) in a row with the context at {tokens} of {window} tokens",
                        self.compaction_failures
                    )));
                }
                // The error may quote what the compressor wrote (ids, a line): bounded, escaped.
                let shown = untrusted::text(&e.to_string(), untrusted::MAX_LOG_BYTES).into_owned();
                tracing::warn!(uuid = %ctx.uuid(), tokens, failures = self.compaction_failures, "{shown}");
                Ok(true)
            }
        }
    }
}

/// Compression failures in a row (the context left as it was each time) after which the task
/// fails instead of calling the LLM with an over-threshold context again.
pub const MAX_COMPACTION_FAILURES: u32 = 3;

/// A "context too long" answer of the provider is met by compressing and sending again this
/// many times per LLM call before the task fails.
pub const MAX_OVERFLOW_RETRIES: u32 = 2;

/// Each "context too long" answer makes the window the compressor works with this much smaller
/// (numerator, denominator): 3/4.
pub const OVERFLOW_WINDOW_FACTOR: (u64, u64) = (3, 4);

/// Which part of a message is the largest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LargestPart {
    /// Its text (`content`).
    Content,
    /// The arguments of its tool calls (an assistant message).
    ToolCallArguments,
    /// Its reasoning items.
    Reasoning,
}

/// The largest message of a context file, for the window-exceeded error.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Largest {
    /// `line N of current.jsonl`.
    place: String,
    /// Its role.
    role: String,
    /// The tool it answers or (for tool-call arguments) the largest call's tool.
    tool: Option<String>,
    /// Its estimated tokens.
    tokens: u64,
    /// Its largest part and that part's estimated tokens.
    part: LargestPart,
    part_tokens: u64,
}

/// The message of the context file `name` of `dir` with the most estimated tokens, and its
/// largest part (one pass, one line in memory; `None` when the file cannot be read).
fn largest_message_in(dir: &crate::task_dir::TaskDir, name: &str) -> Option<Largest> {
    let mut lines = queries::open_lines(dir, name).ok()??;
    let mut best: Option<Largest> = None;
    while let Ok(Some((line_no, text))) = lines.next_line() {
        let Ok(m) = serde_json::from_str::<ChatMessage>(text) else {
            continue;
        };
        let tokens = ctxhost_format::estimate_message_tokens(&m);
        if best.as_ref().is_some_and(|b| b.tokens >= tokens) {
            continue;
        }
        let content = m
            .content
            .as_deref()
            .map_or(0, ctxhost_format::estimate_tokens);
        let biggest_call = m
            .calls()
            .iter()
            .max_by_key(|c| c.function.arguments.len())
            .map(|c| c.function.name.clone());
        let arguments: u64 = m
            .calls()
            .iter()
            .map(|c| ctxhost_format::estimate_tokens(&c.function.arguments))
            .sum();
        let reasoning: u64 = m
            .reasoning
            .iter()
            .map(|r| ctxhost_format::estimate_tokens(&r.data))
            .sum();
        let (part, part_tokens) = if arguments > content && arguments >= reasoning {
            (LargestPart::ToolCallArguments, arguments)
        } else if reasoning > content {
            (LargestPart::Reasoning, reasoning)
        } else {
            (LargestPart::Content, content)
        };
        best = Some(Largest {
            place: format!("line {line_no} of {}", dir.show(name)),
            tool: if part == LargestPart::ToolCallArguments {
                biggest_call
            } else {
                m.tool_name.clone()
            },
            role: m.role,
            tokens,
            part,
            part_tokens,
        });
    }
    best
}

/// Estimated tokens of the summary message of the context file `name` (its second line, when
/// it is one); `None` when it has none or cannot be read. At most two lines are read, each
/// capped at [`crate::compaction::MAX_FIRST_LINE_BYTES`].
pub(super) fn summary_tokens_in(dir: &crate::task_dir::TaskDir, name: &str) -> Option<u64> {
    let mut lines = queries::open_lines(dir, name)
        .ok()??
        .max_line_bytes(crate::compaction::MAX_FIRST_LINE_BYTES);
    lines.next_line().ok()??;
    let (_, line) = lines.next_line().ok()??;
    let message: ChatMessage = serde_json::from_str(line).ok()?;
    let content = message.content.as_deref()?;
    ctxhost_format::compress::parse_summary_range(content)?;
    Some(ctxhost_format::estimate_message_tokens(&message))
}

/// Count a compression that was installed (`before` → `after` tokens, its summary's id when it
/// made one): a line in llm_calls.jsonl and the task's compression counter.
pub(super) fn record_compaction(
    ctx: &TaskContext,
    before: u64,
    after: u64,
    summary_id: Option<u64>,
) -> anyhow::Result<()> {
    ctx.calls()
        .record_compression(before, after, summary_id, &now_rfc3339());
    ctx.update_statistics(UsageDelta::compression())
}
