//! Reading current.jsonl twice, a line at a time: [`scan`] learns what each line is and
//! weighs (for the cut rule, [`ctxhost_plugin::format::compress::plan_tail`]), [`split`] writes the
//! part to summarise and the kept part to their temporaries, cutting the older tool results
//! the plan names.

use ctxhost_plugin::format::compress::{
    LineKind, is_summary_line, parse_summary_range, shrunk_result,
};
use ctxhost_plugin::format::{ChatMessage, estimate_message_tokens};
use serde::Deserialize;

use crate::files::{CURRENT, TO_SUMMARIZE, UNSUMMARIZED, for_each_raw};
use ctxhost_plugin::jsonl::{LineWriter, require_lines};
use ctxhost_plugin::types::PluginError;

/// What current.jsonl holds.
pub struct Scan {
    /// The kind of every message line, in order (index 0 is the system prompt).
    pub kinds: Vec<LineKind>,
    /// The estimated tokens of every message line (`estimate_message_tokens`), in order.
    pub tokens: Vec<u64>,
    /// The seq range of an earlier summary at line 2, if there is one.
    pub previous: Option<(u64, u64)>,
}

impl Scan {
    /// Messages in `from..to` that are history lines (not the system prompt, not a summary).
    pub fn history_lines(&self, from: usize, to: usize) -> u64 {
        self.kinds[from..to]
            .iter()
            .filter(|k| !matches!(k, LineKind::System | LineKind::Summary))
            .count() as u64
    }
}

fn parse<'a, T: Deserialize<'a>>(line: u64, text: &'a str) -> Result<T, PluginError> {
    serde_json::from_str(text).map_err(|e| {
        PluginError::InvalidInput(format!("{CURRENT} line {line}: not a chat message: {e}"))
    })
}

/// The kinds of current.jsonl's lines. Errors: `invalid-input` when it is empty, a line does
/// not parse, or the first message is not the system prompt; `io`.
pub fn scan() -> Result<Scan, PluginError> {
    let mut reader = require_lines(CURRENT)?;
    let mut kinds = Vec::new();
    let mut tokens = Vec::new();
    let mut previous = None;
    for_each_raw(&mut reader, |line, text| {
        let index = kinds.len();
        let m: ChatMessage = parse(line, text)?;
        tokens.push(estimate_message_tokens(&m));
        let kind = if is_summary_line(index, &m) {
            previous = m.content.as_deref().and_then(parse_summary_range);
            LineKind::Summary
        } else {
            LineKind::from_role(&m.role)
        };
        if (index == 0) != (kind == LineKind::System) {
            return Err(PluginError::InvalidInput(if index == 0 {
                format!("{CURRENT} line {line}: the first message must be the system prompt")
            } else {
                format!("{CURRENT} line {line}: a second system message")
            }));
        }
        kinds.push(kind);
        Ok(())
    })?;
    if kinds.is_empty() {
        return Err(PluginError::InvalidInput(format!(
            "{CURRENT} is empty: there is no context to compress"
        )));
    }
    Ok(Scan {
        kinds,
        tokens,
        previous,
    })
}

/// Estimated tokens of the three parts of current.jsonl.
pub struct Split {
    /// The system prompt.
    pub system_tokens: u64,
    /// Lines `1..cut` (written to to_summarize.jsonl).
    pub summarized_tokens: u64,
    /// Lines `cut..` (written to unsummarized.jsonl), after cutting.
    pub kept_tokens: u64,
    /// Older tool results of the kept part that were cut.
    pub shrunk: usize,
}

/// Writes lines `1..cut` of current.jsonl to to_summarize.jsonl and lines `cut..` to
/// unsummarized.jsonl, counting the tokens of each part. Kept lines are copied unchanged,
/// except the tool results of `shrink` (`(index, content budget)`, sorted), whose content is cut
/// to the budget ([`shrunk_result`]).
pub fn split(cut: usize, shrink: &[(usize, u64)]) -> Result<Split, PluginError> {
    let mut reader = require_lines(CURRENT)?;
    let mut old = LineWriter::create(TO_SUMMARIZE)?;
    let mut kept = LineWriter::create(UNSUMMARIZED)?;
    let mut parts = Split {
        system_tokens: 0,
        summarized_tokens: 0,
        kept_tokens: 0,
        shrunk: 0,
    };
    let mut index = 0usize;
    let mut shrink = shrink.iter().peekable();
    for_each_raw(&mut reader, |line, text| {
        let mut message = parse::<ChatMessage>(line, text)?;
        let tokens = estimate_message_tokens(&message);
        if index == 0 {
            parts.system_tokens = tokens;
        } else if index < cut {
            parts.summarized_tokens += tokens;
            old.line(text)?;
        } else if let Some((_, budget)) = shrink.next_if(|(i, _)| *i == index) {
            let content = message.content.take().unwrap_or_default();
            let id = message.tool_call_id.clone().unwrap_or_default();
            message.content = Some(shrunk_result(&content, *budget, None, &id));
            parts.kept_tokens += estimate_message_tokens(&message);
            parts.shrunk += 1;
            kept.json(&message)?;
        } else {
            parts.kept_tokens += tokens;
            kept.line(text)?;
        }
        index += 1;
        Ok(())
    })?;
    old.finish_unsynced()?;
    kept.finish_unsynced()?;
    Ok(parts)
}
