//! Summarising to_summarize.jsonl through the host's `llm` import, with every request inside
//! the model's window.
//!
//! The messages are rendered as plain text ([`render_message`]) and packed in order into chunks
//! of at most the request budget ([`request_budget`]); a message larger than the budget is cut
//! (head and tail kept, on character boundaries). One chunk → one request, whose answer is the
//! summary. Several chunks → one request each, then the partial summaries are merged, as many
//! at a time as fit, until one is left: each partial is first cut to half the budget, so every
//! merge request holds at least two of them and each round at least halves their number.
//!
//! One compression sends at most [`MAX_REQUESTS`] requests: at most [`MAX_CHUNKS`] chunks and
//! their merges, within the host's default budget of 16 LLM calls per compression
//! (`context_storage.max_llm_calls_per_compression`). When the messages would need more
//! chunks (a context far over a small window), they are first cut to a share of a chunk
//! each, long ones losing their middles, and when even that is too much, the oldest after the
//! first are left out with a note ([`plan_summary_input`]); their full text stays in
//! messages.jsonl.
//!
//! A request is [`SUMMARY_REQUEST`]: a system instruction and a user message, the config's
//! summary prompt with `{messages}` replaced by the chunk (appended after a blank line when
//! the prompt has no placeholder).

use ctxhost_plugin::format::compress::{
    Chunk, Chunker, SummaryInputPlan, cut_to_tokens, omitted_messages_note, plan_summary_input,
    render_message, request_budget,
};
use ctxhost_plugin::format::{ChatMessage, estimate_tokens};

use crate::files::SUMMARY_REQUEST;
use ctxhost_plugin::compressor::CompressConfig;
use ctxhost_plugin::jsonl::{LineWriter, require_lines};
use ctxhost_plugin::llm;
use ctxhost_plugin::log::{Level, log};
use ctxhost_plugin::types::PluginError;

/// System instruction of a request that summarises messages.
const SUMMARIZE_INSTRUCTION: &str = "You write the summary of a part of a conversation between a coding agent, \
its user and its tools, so that the agent can continue the task from the summary alone. Answer with the summary only.";

/// System instruction of a request that merges partial summaries.
const MERGE_INSTRUCTION: &str = "You merge partial summaries of consecutive parts of one conversation between a \
coding agent, its user and its tools into one summary, so that the agent can continue the task from it alone. \
Answer with the summary only.";

/// Put before the partial summaries in a merge request.
const MERGE_HEADER: &str =
    "Partial summaries of consecutive parts of the conversation, oldest first:\n\n";

/// The most chunks the messages of one compression are packed into.
pub const MAX_CHUNKS: usize = 8;

/// The most requests one compression sends: [`MAX_CHUNKS`], then at most one fewer merges
/// (each merge request holds at least two partial summaries).
pub const MAX_REQUESTS: usize = 2 * MAX_CHUNKS - 1;

// Within the host's default call budget of one compression
// (`context_storage.max_llm_calls_per_compression`, 16).
const _: () = assert!(MAX_REQUESTS <= 16);

/// The placeholder of the summary prompt.
const PLACEHOLDER: &str = "{messages}";

/// The result of summarising.
pub struct Summary {
    /// The summary text (trimmed, non-empty).
    pub text: String,
    /// Requests sent (one per chunk, plus the merges).
    pub requests: u32,
    /// Chunks the messages were packed into.
    pub chunks: u32,
}

/// Sends summary requests for one compression.
pub struct Summarizer<'a> {
    config: &'a CompressConfig,
    /// Tokens of the window a request may fill with the text to summarise.
    budget: u64,
    /// Tokens reserved for each answer (`max-output-tokens` of every request).
    reserve: u32,
    requests: u32,
}

impl<'a> Summarizer<'a> {
    /// A summariser for `config`. The reply reserve is reserve-output-tokens, but at most half
    /// the window (a summary needs less than a full answer; the agent's max_output_tokens may be
    /// close to the whole window). Errors: `invalid-input` when the window leaves no room for a
    /// request.
    pub fn new(config: &'a CompressConfig) -> Result<Summarizer<'a>, PluginError> {
        let reserve = config
            .reserve_output_tokens
            .min(u32::try_from(config.context_length / 2).unwrap_or(u32::MAX));
        if reserve < config.reserve_output_tokens {
            log(
                Level::Info,
                &format!(
                    "reserve-output-tokens {} is more than half of context-length {}: summary requests reserve {reserve}",
                    config.reserve_output_tokens, config.context_length
                ),
            );
        }
        let prompt = config.summary_prompt.replacen(PLACEHOLDER, "", 1);
        let prompt_tokens = estimate_tokens(&prompt)
            + estimate_tokens(SUMMARIZE_INSTRUCTION).max(estimate_tokens(MERGE_INSTRUCTION))
            + estimate_tokens(MERGE_HEADER)
            + 1;
        let budget = request_budget(config.context_length, reserve.into(), prompt_tokens)
            .map_err(PluginError::InvalidInput)?;
        Ok(Summarizer {
            config,
            budget,
            reserve,
            requests: 0,
        })
    }

    /// Summarises the chat message lines of `file` (read twice: their sizes, then their text).
    ///
    /// Errors: `llm` when a request fails or the model answers with an empty summary (naming
    /// which request); `invalid-input`/`io` for the file.
    pub fn summarize_file(mut self, file: &str) -> Result<Summary, PluginError> {
        let mut sizes = Vec::new();
        let mut reader = require_lines(file)?;
        while let Some((_, message)) = reader.next_value::<ChatMessage>()? {
            sizes.push(estimate_tokens(&render_message(&message)));
        }
        let plan = plan_summary_input(&sizes, self.budget, MAX_CHUNKS);
        if plan != (SummaryInputPlan { cap: None, omit: 0 }) {
            log(
                Level::Info,
                &format!(
                    "the {} messages to summarise ({} tokens) need more than {MAX_CHUNKS} requests of {} tokens: \
                     each is cut to {} tokens{}",
                    sizes.len(),
                    sizes.iter().sum::<u64>(),
                    self.budget,
                    plan.cap.unwrap_or(self.budget),
                    if plan.omit > 0 {
                        format!(" and the {} oldest after the first are left out", plan.omit)
                    } else {
                        String::new()
                    }
                ),
            );
        }
        let mut reader = require_lines(file)?;
        let mut chunker = Chunker::new(self.budget);
        let mut parts = Vec::new();
        let mut chunks = 0u32;
        let mut index = 0usize;
        while let Some((_, message)) = reader.next_value::<ChatMessage>()? {
            let piece = if index == 1 && plan.omit > 0 {
                Some(omitted_messages_note(plan.omit))
            } else if index >= 1 && index <= plan.omit {
                None
            } else {
                let text = render_message(&message);
                Some(match plan.cap {
                    Some(cap) => cut_to_tokens(&text, cap).into_owned(),
                    None => text,
                })
            };
            index += 1;
            if let Some(chunk) = piece.and_then(|piece| chunker.push(&piece)) {
                chunks += 1;
                parts.push(self.ask(SUMMARIZE_INSTRUCTION, "", &chunk.text)?);
            }
        }
        if let Some(chunk) = chunker.finish() {
            chunks += 1;
            parts.push(self.ask(SUMMARIZE_INSTRUCTION, "", &chunk.text)?);
        }
        while parts.len() > 1 {
            parts = self.merge_round(parts)?;
        }
        let text = parts.pop().ok_or_else(|| {
            PluginError::Internal(format!("{file} holds no message to summarise"))
        })?;
        Ok(Summary {
            text,
            requests: self.requests,
            chunks,
        })
    }

    /// One round of merging: partial summaries packed into chunks (each cut to half the
    /// budget, so a chunk holds at least two), one request per chunk of two or more.
    fn merge_round(&mut self, parts: Vec<String>) -> Result<Vec<String>, PluginError> {
        let half = (self.budget - 1) / 2;
        let mut chunker = Chunker::new(self.budget);
        let mut merged = Vec::with_capacity(parts.len().div_ceil(2));
        for part in parts {
            if let Some(chunk) = chunker.push(&cut_to_tokens(&part, half)) {
                merged.push(self.merge(chunk)?);
            }
        }
        if let Some(chunk) = chunker.finish() {
            merged.push(self.merge(chunk)?);
        }
        Ok(merged)
    }

    fn merge(&mut self, chunk: Chunk) -> Result<String, PluginError> {
        if chunk.pieces == 1 {
            return Ok(chunk.text);
        }
        self.ask(MERGE_INSTRUCTION, MERGE_HEADER, &chunk.text)
    }

    /// Writes one request and asks the model; returns the trimmed answer.
    fn ask(&mut self, instruction: &str, header: &str, text: &str) -> Result<String, PluginError> {
        self.requests += 1;
        let n = self.requests;
        // The user message is the prompt with `header` + `text` in place of its first
        // placeholder (after a blank line when it has none), written piece by piece: `text`
        // may be a chunk as large as the window, never copied here.
        let prompt = self.config.summary_prompt.as_str();
        let pieces = match prompt.split_once(PLACEHOLDER) {
            Some((before, after)) => [before, header, text, after],
            None => [prompt, "\n\n", header, text],
        };
        let mut request = LineWriter::create(SUMMARY_REQUEST)?;
        request.json(&ChatMessage::text("system", instruction))?;
        request.text_message("user", &pieces)?;
        request.finish_unsynced()?;
        let completion = llm::complete(SUMMARY_REQUEST, self.reserve).map_err(|e| match e {
            PluginError::Llm(reason) => PluginError::Llm(format!("summary request {n}: {reason}")),
            other => other,
        })?;
        let answer = completion.message.content.unwrap_or_default();
        let answer = answer.trim();
        if answer.is_empty() {
            return Err(PluginError::Llm(format!(
                "summary request {n}: the model answered with an empty summary"
            )));
        }
        Ok(answer.to_string())
    }
}
