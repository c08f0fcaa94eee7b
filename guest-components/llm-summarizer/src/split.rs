//! Reading current.jsonl twice, a line at a time: [`scan`] learns what each line is (for the
//! cut rule), [`split`] writes the part to summarise and the kept part to their temporaries.

use ctxhost_format::compress::{LineKind, is_summary_line, parse_summary_range};
use ctxhost_format::{ChatMessage, estimate_message_tokens};
use serde::Deserialize;

use crate::ctxhost::plugin::types::PluginError;
use crate::files::{CURRENT, TO_SUMMARIZE, UNSUMMARIZED, for_each_raw};
use crate::jsonl_files::{LineWriter, require_lines};

/// What current.jsonl holds.
pub struct Scan {
    /// The kind of every message line, in order (index 0 is the system prompt).
    pub kinds: Vec<LineKind>,
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

/// Only the role of a line (serde skips the rest without keeping it).
#[derive(Deserialize)]
struct RoleOnly {
    role: String,
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
    let mut previous = None;
    for_each_raw(&mut reader, |line, text| {
        let index = kinds.len();
        let kind = if index == 1 {
            let m: ChatMessage = parse(line, text)?;
            if is_summary_line(1, &m) {
                previous = m.content.as_deref().and_then(parse_summary_range);
                LineKind::Summary
            } else {
                LineKind::from_role(&m.role)
            }
        } else {
            LineKind::from_role(&parse::<RoleOnly>(line, text)?.role)
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
    Ok(Scan { kinds, previous })
}

/// Estimated tokens of the three parts of current.jsonl.
pub struct Split {
    /// The system prompt.
    pub system_tokens: u64,
    /// Lines `1..cut` (written to to_summarize.jsonl).
    pub summarized_tokens: u64,
    /// Lines `cut..` (written to unsummarized.jsonl).
    pub kept_tokens: u64,
}

/// Writes lines `1..cut` of current.jsonl to to_summarize.jsonl and lines `cut..` to
/// unsummarized.jsonl, unchanged, counting the tokens of each part.
pub fn split(cut: usize) -> Result<Split, PluginError> {
    let mut reader = require_lines(CURRENT)?;
    let mut old = LineWriter::create(TO_SUMMARIZE)?;
    let mut kept = LineWriter::create(UNSUMMARIZED)?;
    let mut parts = Split {
        system_tokens: 0,
        summarized_tokens: 0,
        kept_tokens: 0,
    };
    let mut index = 0usize;
    for_each_raw(&mut reader, |line, text| {
        let tokens = estimate_message_tokens(&parse::<ChatMessage>(line, text)?);
        if index == 0 {
            parts.system_tokens = tokens;
        } else if index < cut {
            parts.summarized_tokens += tokens;
            old.line(text)?;
        } else {
            parts.kept_tokens += tokens;
            kept.line(text)?;
        }
        index += 1;
        Ok(())
    })?;
    old.finish()?;
    kept.finish()?;
    Ok(parts)
}
