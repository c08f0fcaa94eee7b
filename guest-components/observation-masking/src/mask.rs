//! Masking old tool results, in four streaming passes:
//!
//! 1. current.jsonl: the kind and estimated tokens of each line → the kept tail ([`plan_tail`],
//!    the same as the summariser's: tool call groups stay whole, at most `keep-recent-tokens`
//!    tokens down to the newest message's group);
//! 2. current.jsonl: the tool results before the cut, and the older results of the newest group
//!    the plan cuts, that are not masked yet (candidates), and how often each tool_call_id
//!    occurs in the context;
//! 3. tools.jsonl: for each candidate id, the seqs of its last lines — the context is a tail of
//!    the task, so the k-th of c results with one id in the context is the k-th of the last c
//!    tools.jsonl lines with that id (ids repeat with providers that number calls per turn);
//! 4. current.jsonl → compressed.jsonl: candidates whose placeholder is smaller get it as their
//!    content; every other line is copied unchanged.

use std::collections::{HashMap, VecDeque};

use ctxhost_plugin::format::compress::{LineKind, is_masked, mask_placeholder, plan_tail};
use ctxhost_plugin::format::{ChatMessage, estimate_message_tokens, estimate_tokens};
use serde::Deserialize;

use crate::files::{COMPRESSED, CURRENT, TOOLS};
use ctxhost_plugin::jsonl::{LineWriter, open_lines, require_lines};
use ctxhost_plugin::types::PluginError;

/// What a masking did.
pub struct Masked {
    /// Tool results masked.
    pub results: usize,
    /// Estimated tokens saved.
    pub tokens_saved: u64,
    /// Of those, how many had no tools.jsonl line (named by tool_call_id instead).
    pub not_found: usize,
}

/// A tool result that may be masked.
struct Candidate {
    /// 0-based message index in current.jsonl.
    index: usize,
    tool_call_id: String,
    /// Which occurrence of `tool_call_id` in the context this is (0-based).
    occurrence: usize,
    /// Estimated tokens of its content.
    tokens: u64,
}

/// The fields of a tools.jsonl line needed here.
#[derive(Deserialize)]
struct ToolRef {
    seq: u64,
    #[serde(default)]
    tool_call_id: Option<String>,
}

fn parse<'a, T: Deserialize<'a>>(line: u64, text: &'a str) -> Result<T, PluginError> {
    serde_json::from_str(text).map_err(|e| {
        PluginError::InvalidInput(format!("{CURRENT} line {line}: not a chat message: {e}"))
    })
}

/// Writes compressed.jsonl: current.jsonl with the tool results older than the kept tail
/// (`keep` most recent messages, at most `keep_tokens` tokens; see [`plan_tail`]) and the older
/// results of the newest group the plan cuts replaced by placeholders.
///
/// Errors: `internal` when nothing can be made smaller (no unmasked tool result outside the
/// window, or all shorter than their placeholder); `invalid-input`/`io` for the files.
pub fn mask(keep: usize, keep_tokens: u64) -> Result<Masked, PluginError> {
    // Pass 1: kinds and tokens.
    let mut kinds = Vec::new();
    let mut tokens = Vec::new();
    let mut reader = require_lines(CURRENT)?;
    while let Some((line, text)) = reader.next_line()? {
        let message = parse::<ChatMessage>(line, text)?;
        tokens.push(estimate_message_tokens(&message));
        let kind = LineKind::from_role(&message.role);
        if (kinds.is_empty()) != (kind == LineKind::System) {
            return Err(PluginError::InvalidInput(format!(
                "{CURRENT} line {line}: only the first message may be, and must be, the system prompt"
            )));
        }
        kinds.push(kind);
    }
    if kinds.is_empty() {
        return Err(PluginError::InvalidInput(format!(
            "{CURRENT} is empty: there is no context to compress"
        )));
    }
    let plan = plan_tail(&kinds, &tokens, keep, keep_tokens);
    let cut = plan.cut;
    let in_tail: std::collections::HashSet<usize> = plan.shrink.iter().map(|(i, _)| *i).collect();

    // Pass 2: candidates and occurrences.
    let mut candidates = Vec::new();
    let mut occurrences: HashMap<String, usize> = HashMap::new();
    let mut reader = require_lines(CURRENT)?;
    let mut index = 0usize;
    while let Some((line, text)) = reader.next_line()? {
        if kinds[index] == LineKind::Tool {
            let m: ChatMessage = parse(line, text)?;
            if let Some(id) = m.tool_call_id {
                let seen = occurrences.entry(id.clone()).or_default();
                let content = m.content.as_deref().unwrap_or("");
                if (index < cut || in_tail.contains(&index)) && !is_masked(content) {
                    candidates.push(Candidate {
                        index,
                        tool_call_id: id,
                        occurrence: *seen,
                        tokens: estimate_tokens(content),
                    });
                }
                *seen += 1;
            }
        }
        index += 1;
    }
    let stale = kinds[1..cut]
        .iter()
        .filter(|k| **k == LineKind::Tool)
        .count()
        + in_tail.len();
    if candidates.is_empty() {
        return Err(nothing_to_mask(stale, keep));
    }

    // Pass 3: tools.jsonl seqs of the candidate ids.
    let mut seqs: HashMap<&str, VecDeque<u64>> = HashMap::new();
    for c in &candidates {
        seqs.entry(c.tool_call_id.as_str()).or_default();
    }
    if let Some(mut reader) = open_lines(TOOLS)? {
        while let Some((_, tool)) = reader.next_value::<ToolRef>()? {
            let Some(id) = tool.tool_call_id else {
                continue;
            };
            if let Some(ring) = seqs.get_mut(id.as_str()) {
                if ring.len() == occurrences[&id] {
                    ring.pop_front();
                }
                ring.push_back(tool.seq);
            }
        }
    }

    // Placeholders that make a result smaller.
    let mut masks: Vec<(usize, String)> = Vec::new();
    let mut done = Masked {
        results: 0,
        tokens_saved: 0,
        not_found: 0,
    };
    for c in &candidates {
        let ring = &seqs[c.tool_call_id.as_str()];
        let missing = occurrences[&c.tool_call_id] - ring.len();
        let seq = c.occurrence.checked_sub(missing).map(|i| ring[i]);
        let placeholder = mask_placeholder(seq, &c.tool_call_id);
        let tokens = estimate_tokens(&placeholder);
        if tokens < c.tokens {
            done.results += 1;
            done.tokens_saved += c.tokens - tokens;
            done.not_found += usize::from(seq.is_none());
            masks.push((c.index, placeholder));
        }
    }
    if masks.is_empty() {
        return Err(nothing_to_mask(stale, keep));
    }

    // Pass 4: the new context.
    let mut out = LineWriter::create(COMPRESSED)?;
    let mut next = masks.into_iter().peekable();
    let mut reader = require_lines(CURRENT)?;
    let mut index = 0usize;
    while let Some((line, text)) = reader.next_line()? {
        match next.next_if(|(i, _)| *i == index) {
            Some((_, placeholder)) => {
                let mut m: ChatMessage = parse(line, text)?;
                m.content = Some(placeholder);
                out.json(&m)?;
            }
            None => out.line(text)?,
        }
        index += 1;
    }
    out.finish_unsynced()?;
    Ok(done)
}

fn nothing_to_mask(stale: usize, keep: usize) -> PluginError {
    PluginError::Internal(format!(
        "masking makes nothing smaller: of the {stale} tool result(s) in {CURRENT} older than the {keep} most \
         recent messages, none is unmasked and longer than its placeholder; the context was left as it was"
    ))
}
