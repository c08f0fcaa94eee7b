//! The compression rules of the builtin compressors (DESIGN.md §6), for compressors of your
//! own, so that what you write is what the host and crash recovery expect:
//!
//! - when: [`over_threshold`] (strictly more than `context-length × threshold` tokens);
//! - where to cut: [`line_kind`] for each line of current.jsonl, then [`plan_tail`] (what the
//!   builtins do), which keeps the `keep-recent-messages` most recent messages, moves the cut
//!   earlier so an assistant message with tool calls and all of its results stay on the same
//!   side (the host rejects a context with a tool result whose call is gone), and, with
//!   `keep-recent-tokens`, keeps fewer so the tail fits that many tokens: older groups are
//!   compressed too, down to the newest message's group, whose older tool results are cut
//!   ([`shrunk_result`]) when it alone is too large. [`cut_point`] is the count rule alone;
//! - what a compressor may do to what it keeps: nothing, except mask or cut an older tool
//!   result with its mark ([`mask_placeholder`], [`shrunk_result`]; the host's check is
//!   [`is_marked_reduction`]). A kept message with other text is rejected by the host;
//! - what replaces the old part: [`summary_message`], a `user` message right after the system
//!   prompt whose content starts `Summary of the conversation so far (messages S–E):\n`. The
//!   next compression and crash recovery recognise it by that prefix ([`is_summary_line`]);
//!   a context whose summary is in another shape still works, but its old summary is then
//!   summarised as an ordinary message;
//! - the summary's record: [`next_summary_id`] and [`append_summary`] (summaries.jsonl), and
//!   [`tail_seqs`] for the messages.jsonl seqs the summary covers;
//! - a summary request that fits the window: [`render_message`], [`cut_to_tokens`],
//!   [`Chunker`], [`request_budget`].
//!
//! Token counts are [`crate::tokens`] estimates.

use std::collections::VecDeque;

use serde::Deserialize;
use serde::de::IgnoredAny;

pub use crate::format::compress::{
    Chunk, Chunker, LineKind, MASK_PREFIX, MIN_SHRUNK_RESULT_TOKENS, SHRUNK_NOTE_PREFIX,
    SUMMARY_PREFIX, TailPlan, cut_point, cut_to_tokens, group_start, is_marked_reduction,
    is_masked, is_summary_line, mask_placeholder, over_threshold, parse_summary_range, plan_tail,
    render_message, request_budget, shrunk_result, summary_content, summary_message,
};
pub use crate::format::files::{
    COMPRESSED, CURRENT, MESSAGES, SUMMARIES, SUMMARY_REQUEST, TO_SUMMARIZE, TOOLS, UNSUMMARIZED,
};

use crate::format::{ChatMessage, SummaryLine};
use crate::jsonl::{append_json_line, io_error, require_lines};
use crate::types::PluginError;

/// The [`LineKind`] of the message at 0-based `index` of a context (a summary of an earlier
/// compression at index 1 is [`LineKind::Summary`]).
pub fn line_kind(index: usize, message: &ChatMessage) -> LineKind {
    if is_summary_line(index, message) {
        LineKind::Summary
    } else {
        LineKind::from_role(&message.role)
    }
}

/// The id of the next summary: one more than the largest id in summaries.jsonl and than its
/// line count; 1 when the file does not exist.
pub fn next_summary_id() -> Result<u64, PluginError> {
    match std::fs::File::open(SUMMARIES) {
        Ok(f) => crate::format::summary_id::next_id(std::io::BufReader::new(f))
            .map_err(|e| io_error(format!("reading {SUMMARIES}"), e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(1),
        Err(e) => Err(io_error(format!("opening {SUMMARIES}"), e)),
    }
}

/// Appends the summary `id` of messages `start_seq..=end_seq` to summaries.jsonl (`{id,
/// start_seq, end_seq, summary, original_tokens, summary_tokens, ratio, timestamp}`, one
/// synced line) and returns the line. `summary_tokens` is the estimate of `summary`.
pub fn append_summary(
    id: u64,
    start_seq: u64,
    end_seq: u64,
    summary: &str,
    original_tokens: u64,
) -> Result<SummaryLine, PluginError> {
    let summary_tokens = crate::tokens::estimate_tokens(summary);
    let line = SummaryLine {
        id,
        start_seq,
        end_seq,
        summary: summary.to_string(),
        original_tokens,
        summary_tokens,
        ratio: if original_tokens == 0 {
            0.0
        } else {
            summary_tokens as f64 / original_tokens as f64
        },
        timestamp: crate::format::time::now_rfc3339_utc(),
    };
    append_json_line(SUMMARIES, &line)?;
    Ok(line)
}

/// The fields of a history line needed by [`tail_seqs`].
#[derive(Deserialize)]
struct SeqOnly {
    seq: u64,
    role: String,
    #[serde(default)]
    summary_id: Option<IgnoredAny>,
}

/// The messages.jsonl seqs of the last `m` history lines that are messages, oldest first:
/// neither summaries (`summary_id`) nor the host's context-repair notes (a `system` line after
/// the first; the system prompt is never among a context's last messages). current.jsonl holds
/// the system prompt, maybe a summary, then the last such lines of the history, so
/// `tail_seqs(n)` for its `n` other messages gives each one's seq. One pass over
/// messages.jsonl, `m` numbers in memory.
///
/// Errors: `invalid-input` when a line does not parse or messages.jsonl has fewer than `m`
/// such lines; `io`.
pub fn tail_seqs(m: usize) -> Result<VecDeque<u64>, PluginError> {
    let mut ring = VecDeque::with_capacity(m.min(1 << 16));
    if m == 0 {
        return Ok(ring);
    }
    let mut reader = require_lines(MESSAGES)?;
    while let Some((_, line)) = reader.next_value::<SeqOnly>()? {
        if line.summary_id.is_some() || line.role == "system" {
            continue;
        }
        if ring.len() == m {
            ring.pop_front();
        }
        ring.push_back(line.seq);
    }
    if ring.len() < m {
        return Err(PluginError::InvalidInput(format!(
            "{MESSAGES} has {} messages that are not summaries, but {CURRENT} holds {m} after the system \
             prompt: the two files do not match",
            ring.len()
        )));
    }
    Ok(ring)
}
