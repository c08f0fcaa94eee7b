//! The messages.jsonl seqs of the messages in current.jsonl.
//!
//! current.jsonl holds the system prompt, maybe a summary, then a tail of the history: its
//! other messages are the last M history lines of messages.jsonl that are messages — neither
//! summaries (`summary_id`) nor the host's context-repair notes (a `system` line after the
//! first). One pass over messages.jsonl keeps the last M such seqs.

use std::collections::VecDeque;

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::ctxhost::plugin::types::PluginError;
use crate::files::MESSAGES;
use crate::jsonl_files::require_lines;

/// The fields of a history line needed here (serde skips the rest without keeping it).
#[derive(Deserialize)]
struct SeqOnly {
    seq: u64,
    role: String,
    #[serde(default)]
    summary_id: Option<IgnoredAny>,
}

/// The seqs of the last `m` message lines of messages.jsonl (not summaries, not notes; the
/// system prompt is never among the last `m` of a context's tail), oldest first.
///
/// Errors: `invalid-input` when a line does not parse or messages.jsonl has fewer than `m`
/// such lines (it does not match current.jsonl); `io`.
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
            "{MESSAGES} has {} messages that are not summaries, but current.jsonl holds {m} after the system \
             prompt: the two files do not match",
            ring.len()
        )));
    }
    Ok(ring)
}
