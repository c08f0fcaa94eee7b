//! `show --compactions` and the dashboard's compaction record: each compression of a task
//! that made a summary — the messages it summarised, the summary, what it kept verbatim, the
//! tool results it elided and the files it mentions — read from summaries.jsonl (and, for a
//! task recorded before summaries.jsonl said so, from messages.jsonl).

use std::collections::HashMap;
use std::io::BufReader;

use ctxhost_format::files::{MESSAGES, SUMMARIES};
use ctxhost_format::jsonl::LineReader;
use ctxhost_format::{HistoryLine, SummaryLine};
use serde::Serialize;

use crate::compaction_record::{Replaced, replaced_of};
use crate::history::MAX_LINE_BYTES;
use crate::task_dir::TaskDir;

/// One compression that made a summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Compaction {
    /// The summary's line in summaries.jsonl.
    #[serde(flatten)]
    pub summary: SummaryLine,
    /// Seq of the summary's line in messages.jsonl (`None` when it has none).
    pub summary_seq: Option<u64>,
    /// Messages kept verbatim after the summary in the new context (`None` when not known).
    pub kept: Option<(u64, u64)>,
    /// What it replaced, when summaries.jsonl recorded it (ctxhost with history tools).
    pub replaced: Option<Replaced>,
}

impl Compaction {
    /// The first message this summary took in that no earlier summary covered (its start when
    /// not recorded).
    pub fn new_start_seq(&self) -> u64 {
        self.replaced
            .as_ref()
            .map_or(self.summary.start_seq, |r| r.new_start_seq)
    }
}

/// Every compression of the task in `dir` that made a summary, oldest first. Errors name the
/// file and line that cannot be read.
pub fn compactions(dir: &TaskDir) -> anyhow::Result<Vec<Compaction>> {
    let mut out = Vec::new();
    let Some(file) = dir.open_read_if_exists(SUMMARIES)? else {
        return Ok(out);
    };
    let mut lines =
        LineReader::new(BufReader::new(file), dir.show(SUMMARIES)).max_line_bytes(MAX_LINE_BYTES);
    while let Some((_, value)) = lines.next_value::<serde_json::Value>()? {
        let replaced = replaced_of(&value);
        let summary: SummaryLine = serde_json::from_value(value).map_err(|e| {
            anyhow::anyhow!(
                "{}: a summary line that does not read: {e}",
                dir.show(SUMMARIES)
            )
        })?;
        out.push(Compaction {
            summary_seq: replaced.as_ref().map(|r| r.summary_seq),
            kept: replaced
                .as_ref()
                .map(|r| (r.kept_start_seq, r.kept_end_seq)),
            replaced,
            summary,
        });
    }
    if out.iter().any(|c| c.summary_seq.is_none()) {
        // Older records: the summary's seq from messages.jsonl (one pass, one line at a time).
        let seqs = summary_seqs(dir)?;
        for c in out.iter_mut().filter(|c| c.summary_seq.is_none()) {
            c.summary_seq = seqs.get(&c.summary.id).copied();
            c.kept = c
                .summary_seq
                .map(|s| (c.summary.end_seq + 1, s.saturating_sub(1)));
        }
    }
    Ok(out)
}

fn summary_seqs(dir: &TaskDir) -> anyhow::Result<HashMap<u64, u64>> {
    let mut seqs = HashMap::new();
    if let Some(file) = dir.open_read_if_exists(MESSAGES)? {
        let mut lines = LineReader::new(BufReader::new(file), dir.show(MESSAGES))
            .max_line_bytes(MAX_LINE_BYTES);
        while let Some((_, line)) = lines.next_value::<HistoryLine>()? {
            if let Some(id) = line.summary_id {
                seqs.insert(id, line.seq);
            }
        }
    }
    Ok(seqs)
}

/// The messages `from..=to` of messages.jsonl, at most `max` of them, each content cut to
/// `max_chars` characters (for a view next to the summary). Errors name the file and line.
pub fn messages(
    dir: &TaskDir,
    from: u64,
    to: u64,
    max: usize,
    max_chars: usize,
) -> anyhow::Result<Vec<HistoryLine>> {
    let mut out = Vec::new();
    crate::history::for_each_line(dir, from, to, |line| {
        let mut line = line;
        if let Some(c) = &mut line.content
            && c.chars().count() > max_chars
        {
            let cut: String = c.chars().take(max_chars).collect();
            *c = format!("{cut}…");
        }
        out.push(line);
        out.len() < max
    })?;
    Ok(out)
}

/// `show --compactions` as text: per compression its range, when, the sizes, what was kept
/// verbatim, the elided tool results, the paths and the summary (terminal-safe).
pub fn render(list: &[Compaction]) -> String {
    use crate::untrusted::terminal;
    if list.is_empty() {
        return "no compression made a summary in this task\n".to_string();
    }
    let mut out = String::new();
    for c in list {
        let s = &c.summary;
        out.push_str(&format!(
            "compression {}: messages {}\u{2013}{} summarised at {} ({} → {} tokens)\n",
            s.id, s.start_seq, s.end_seq, s.timestamp, s.original_tokens, s.summary_tokens
        ));
        if c.new_start_seq() > s.start_seq {
            out.push_str(&format!(
                "  new in this summary: messages {}\u{2013}{} (before them, the previous summary)\n",
                c.new_start_seq(),
                s.end_seq
            ));
        }
        match c.kept {
            Some((a, b)) if a <= b => {
                out.push_str(&format!("  kept verbatim: messages {a}\u{2013}{b}\n"))
            }
            Some(_) => out.push_str("  kept verbatim: none\n"),
            None => {}
        }
        if let Some(seq) = c.summary_seq {
            out.push_str(&format!("  summary: message {seq} of the history\n"));
        }
        if let Some(r) = &c.replaced {
            if !r.elided_tool_results.is_empty() {
                let list: Vec<String> = r
                    .elided_tool_results
                    .iter()
                    .map(|t| {
                        format!(
                            "{} {} ({} bytes{})",
                            t.seq,
                            terminal(t.tool.as_deref().unwrap_or("?")),
                            t.bytes,
                            t.full_text
                                .as_deref()
                                .map(|f| format!(", {f}"))
                                .unwrap_or_default()
                        )
                    })
                    .collect();
                out.push_str(&format!("  tool results elided: {}\n", list.join("; ")));
            }
            if !r.paths.is_empty() {
                let paths: Vec<String> = r.paths.iter().map(|p| terminal(p).into_owned()).collect();
                out.push_str(&format!("  paths mentioned: {}\n", paths.join(", ")));
            }
        }
        for line in s.summary.lines() {
            out.push_str(&format!("  | {}\n", terminal(line)));
        }
        out.push_str(&format!(
            "  originals: ctxhost's history_read(from_seq={}, to_seq={}) or messages.jsonl\n\n",
            c.new_start_seq(),
            s.end_seq
        ));
    }
    out
}
