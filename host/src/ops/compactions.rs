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

/// The compaction record of a task: the compressions whose summary line reads, and the lines
/// of summaries.jsonl that do not (each naming the file and line), so one bad line hides
/// nothing else.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Record {
    /// Every compression that made a summary, oldest first.
    pub compactions: Vec<Compaction>,
    /// `summaries.jsonl line N: why`, one per line that does not read.
    pub unreadable: Vec<String>,
}

/// The compaction record of the task in `dir` ([`Record`]). A summary line that is not JSON or
/// not a summary is named in [`Record::unreadable`] and the others are read; a line that cannot
/// be read at all (not UTF-8, longer than [`MAX_LINE_BYTES`]) ends the reading there, named
/// the same way. Errors: summaries.jsonl or messages.jsonl cannot be opened or read (named).
pub fn compactions(dir: &TaskDir) -> anyhow::Result<Record> {
    let mut record = Record::default();
    let Some(file) = dir.open_read_if_exists(SUMMARIES)? else {
        return Ok(record);
    };
    let shown = dir.show(SUMMARIES);
    let mut lines =
        LineReader::new(BufReader::new(file), shown.clone()).max_line_bytes(MAX_LINE_BYTES);
    loop {
        let (line_no, text) = match lines.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(ctxhost_format::jsonl::JsonlError::Invalid {
                file,
                line,
                message,
            }) => {
                record.unreadable.push(format!(
                    "{file} line {line}: {message} (the lines after it were not read)"
                ));
                break;
            }
            Err(e) => return Err(e.into()),
        };
        let summary = serde_json::from_str::<serde_json::Value>(text).and_then(|value| {
            let replaced = replaced_of(&value);
            serde_json::from_value::<SummaryLine>(value).map(|s| (s, replaced))
        });
        match summary {
            Ok((summary, replaced)) => record.compactions.push(Compaction {
                summary_seq: replaced.as_ref().map(|r| r.summary_seq),
                kept: replaced
                    .as_ref()
                    .map(|r| (r.kept_start_seq, r.kept_end_seq)),
                replaced,
                summary,
            }),
            Err(e) => record.unreadable.push(format!(
                "{shown} line {line_no}: not a summary line ({e}); not shown"
            )),
        }
    }
    let out = &mut record.compactions;
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
    Ok(record)
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
/// verbatim, the elided tool results, the paths and the summary, then the summary lines that do
/// not read (terminal-safe).
pub fn render(record: &Record) -> String {
    use crate::untrusted::terminal;
    let mut out = String::new();
    if record.compactions.is_empty() {
        out.push_str("no compression made a summary in this task\n");
    }
    for c in &record.compactions {
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
    for bad in &record.unreadable {
        out.push_str(&format!("unreadable: {}\n", terminal(bad)));
    }
    out
}
