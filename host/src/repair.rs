//! Repairs of a task directory whose process died (DESIGN §7), as plain file operations done by
//! the host before any component opens the files.
//!
//! - [`fix_torn_tail`]: a JSONL file whose last line was cut by a crash (no `\n`, or not JSON)
//!   loses that line; the cut bytes are kept in `<file>.torn`. A last line that is complete JSON
//!   but lacks its `\n` only gets the `\n`.
//! - [`reconcile_current`]: the message store appends to messages.jsonl first, then to
//!   current.jsonl, so a crash in between leaves current.jsonl without the last history
//!   line(s); they are appended.
//! - [`close_pending_calls`]: an assistant message at the end of current.jsonl whose tool calls
//!   have no result gets an [`INTERRUPTED_TEXT`] `tool` message for each missing id, appended to
//!   messages.jsonl (next seq) and current.jsonl, so the context can be sent again.
//! - [`remove_temporaries`]: request/response bodies and the compressors' work files.
//!
//! [`repair_task_dir`] runs them in that order and returns what it did ([`RepairReport`]).
//! Every function streams its files (one line, or a bounded window of lines, in memory).

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ctxhost_format::compress::parse_summary_range;
use ctxhost_format::jsonl::LineReader;
use ctxhost_format::{ChatMessage, HistoryLine, ToolCall, estimate_message_tokens};

use crate::layout::{append_line, atomic_write, sync_file};

/// The full history (written by the message store).
pub const MESSAGES_FILE: &str = "messages.jsonl";
/// The live context (written by the message store).
pub const CURRENT_FILE: &str = "current.jsonl";
/// Suffix of the file that keeps the bytes cut from a torn line (`messages.jsonl.torn`).
pub const TORN_SUFFIX: &str = ".torn";

/// Content of the `tool` message that answers a tool call whose result was lost in a crash.
pub const INTERRUPTED_TEXT: &str = "error: interrupted: the task process stopped before this tool call's result was recorded; \
call the tool again if you still need its result";

/// Files that only exist during one step (request/response bodies, compression work files).
/// After a crash they are stale: the step is redone from current.jsonl.
pub const TEMPORARY_FILES: &[&str] = &[
    "request.json",
    "response.json",
    "llm_request.json",
    "llm_response.json",
    "current.jsonl.tmp",
    "to_summarize.jsonl",
    "unsummarized.jsonl",
    "summary_request.jsonl",
    "compressed.jsonl",
];

/// Request/response bodies a failed task keeps for debugging (not temporaries once it failed).
pub const DEBUG_FILES: &[&str] = &[
    "request.json",
    "response.json",
    "llm_request.json",
    "llm_response.json",
];

/// History lines kept in memory while looking for the lines current.jsonl lacks.
pub const RECONCILE_WINDOW: usize = 256;

/// Chunk size for reading a file backwards to its last line.
const BACK_CHUNK: u64 = 64 * 1024;

/// Whether `name` is a temporary of a step: one of [`TEMPORARY_FILES`], or a temporary of an
/// atomic replace (`*.tmp`, `.NAME.tmp-PID`).
pub fn is_temporary(name: &str) -> bool {
    TEMPORARY_FILES.contains(&name)
        || name.ends_with(".tmp")
        || (name.starts_with('.') && name.contains(".tmp-"))
}

/// What [`fix_torn_tail`] did to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailAction {
    /// The last line was cut at `offset`: `bytes` bytes, saved to `saved_to` when asked.
    Cut {
        bytes: u64,
        saved_to: Option<PathBuf>,
    },
    /// The last line was complete JSON without its `\n`: the `\n` was added.
    Terminated,
}

/// A repaired last line: the file, the byte offset where the last line starts, and what was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailFix {
    pub file: PathBuf,
    pub offset: u64,
    pub action: TailAction,
}

impl std::fmt::Display for TailFix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.action {
            TailAction::Cut { bytes, saved_to } => {
                write!(
                    f,
                    "{}: cut a torn last line of {bytes} bytes at byte offset {}",
                    self.file.display(),
                    self.offset
                )?;
                if let Some(p) = saved_to {
                    write!(f, " (kept in {})", p.display())?;
                }
                Ok(())
            }
            TailAction::Terminated => write!(
                f,
                "{}: added the missing newline to the last line (byte offset {})",
                self.file.display(),
                self.offset
            ),
        }
    }
}

/// The state of a file's last line, as [`inspect_tail`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tail {
    /// Empty file, or the last line ends with `\n` and is a JSON object.
    Sound,
    /// The last line (starting at `offset`, `len` bytes without any `\n`) is not a JSON object.
    Torn { offset: u64, len: u64 },
    /// The last line is a JSON object but has no `\n` (starts at `offset`).
    Unterminated { offset: u64 },
}

/// Look at the last line of `path` (read backwards, so the size of the file does not matter).
pub fn inspect_tail(path: &Path) -> io::Result<Tail> {
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(Tail::Sound);
    }
    let mut last = [0u8; 1];
    f.seek(SeekFrom::Start(len - 1))?;
    f.read_exact(&mut last)?;
    let terminated = last[0] == b'\n';
    let end = if terminated { len - 1 } else { len };
    let start = last_line_start(&mut f, end)?;
    let mut line = vec![0u8; (end - start) as usize];
    f.seek(SeekFrom::Start(start))?;
    f.read_exact(&mut line)?;
    let is_object = serde_json::from_slice::<serde_json::Value>(&line).is_ok_and(|v| v.is_object());
    let blank = line.iter().all(u8::is_ascii_whitespace);
    Ok(if is_object && terminated {
        Tail::Sound
    } else if is_object {
        Tail::Unterminated { offset: start }
    } else if blank && terminated {
        // A blank last line is skipped by every reader.
        Tail::Sound
    } else {
        Tail::Torn {
            offset: start,
            len: len - start,
        }
    })
}

/// Offset of the first byte after the last `\n` before `end` (0 when there is none).
fn last_line_start(f: &mut File, end: u64) -> io::Result<u64> {
    let mut pos = end;
    let mut buf = vec![0u8; BACK_CHUNK as usize];
    while pos > 0 {
        let n = pos.min(BACK_CHUNK);
        let from = pos - n;
        f.seek(SeekFrom::Start(from))?;
        f.read_exact(&mut buf[..n as usize])?;
        if let Some(i) = buf[..n as usize].iter().rposition(|b| *b == b'\n') {
            return Ok(from + i as u64 + 1);
        }
        pos = from;
    }
    Ok(0)
}

/// Repair the last line of the JSONL file `path` if a crash tore it (see [`Tail`]): a torn line
/// is cut (its bytes appended to `<path>.torn` when `save_torn`), an unterminated complete line
/// gets its `\n`. A missing file is fine. Returns what was done, `None` when nothing was needed.
pub fn fix_torn_tail(path: &Path, save_torn: bool) -> anyhow::Result<Option<TailFix>> {
    let tail = match inspect_tail(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let ctx = || format!("cannot repair {}", path.display());
    match tail {
        Tail::Sound => Ok(None),
        Tail::Unterminated { offset } => {
            let mut f = OpenOptions::new()
                .append(true)
                .open(path)
                .with_context(ctx)?;
            f.write_all(b"\n").with_context(ctx)?;
            f.sync_all().with_context(ctx)?;
            Ok(Some(TailFix {
                file: path.to_path_buf(),
                offset,
                action: TailAction::Terminated,
            }))
        }
        Tail::Torn { offset, len } => {
            let mut saved_to = None;
            if save_torn {
                let mut cut = vec![0u8; len as usize];
                let mut f = File::open(path).with_context(ctx)?;
                f.seek(SeekFrom::Start(offset)).with_context(ctx)?;
                f.read_exact(&mut cut).with_context(ctx)?;
                let torn = torn_path(path);
                let mut out = OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&torn)
                    .with_context(|| format!("cannot write {}", torn.display()))?;
                out.write_all(&cut)
                    .and_then(|_| out.write_all(b"\n"))
                    .and_then(|_| out.sync_all())
                    .with_context(|| format!("cannot write {}", torn.display()))?;
                saved_to = Some(torn);
            }
            let f = OpenOptions::new()
                .write(true)
                .open(path)
                .with_context(ctx)?;
            f.set_len(offset).with_context(ctx)?;
            f.sync_all().with_context(ctx)?;
            Ok(Some(TailFix {
                file: path.to_path_buf(),
                offset,
                action: TailAction::Cut {
                    bytes: len,
                    saved_to,
                },
            }))
        }
    }
}

/// `<path>.torn`: where the bytes of a cut line are kept.
pub fn torn_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(TORN_SUFFIX);
    path.with_file_name(name)
}

/// The JSONL files of a task directory that are not temporaries: `*.jsonl` at its top level
/// and in `planning/`, sorted by path.
pub fn jsonl_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for sub in [dir.to_path_buf(), dir.join("planning")] {
        let entries = match fs::read_dir(&sub) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot list {}", sub.display())),
        };
        for entry in entries {
            let entry = entry.with_context(|| format!("cannot list {}", sub.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".jsonl") && !is_temporary(&name) && entry.path().is_file() {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Counts of messages.jsonl ([`history_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HistoryStats {
    /// Non-blank lines.
    pub lines: u64,
    /// Seq of the last line (0 when empty).
    pub last_seq: u64,
    /// Assistant messages that are not summaries: the agent loop's LLM calls that got an answer
    /// (what `agent.max_steps` counts).
    pub agent_steps: u64,
}

/// Stream `path` (messages.jsonl) and count its lines, last seq and agent steps. A missing
/// file is empty. Errors name the file and line of a line that does not parse.
pub fn history_stats(path: &Path) -> anyhow::Result<HistoryStats> {
    let mut stats = HistoryStats::default();
    let Some(mut lines) = open_lines(path)? else {
        return Ok(stats);
    };
    while let Some((_, h)) = lines.next_value::<HistoryLine>()? {
        stats.lines += 1;
        stats.last_seq = h.seq;
        if h.role == "assistant" && h.summary_id.is_none() {
            stats.agent_steps += 1;
        }
    }
    Ok(stats)
}

fn open_lines(path: &Path) -> anyhow::Result<Option<LineReader<BufReader<File>>>> {
    match File::open(path) {
        Ok(f) => Ok(Some(LineReader::new(
            BufReader::new(f),
            path.display().to_string(),
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot open {}", path.display())),
    }
}

/// The last message of a context file (`None` when empty or missing).
fn last_context_message(path: &Path) -> anyhow::Result<Option<ChatMessage>> {
    let Some(mut lines) = open_lines(path)? else {
        return Ok(None);
    };
    let mut last = None;
    while let Some((_, m)) = lines.next_value::<ChatMessage>()? {
        last = Some(m);
    }
    Ok(last)
}

/// The history lines current.jsonl lacks at its end (see the module docs), by seq, and
/// whether current.jsonl must be rebuilt from the whole history (it is empty or missing while
/// messages.jsonl holds messages and no summary). With `apply`, they are appended (or
/// current.jsonl rebuilt atomically). Errors when the two files cannot be matched up (the
/// last message of current.jsonl is not among the last [`RECONCILE_WINDOW`] history lines).
pub fn reconcile_current(dir: &Path, apply: bool) -> anyhow::Result<Vec<u64>> {
    let messages = dir.join(MESSAGES_FILE);
    let current = dir.join(CURRENT_FILE);
    // The last RECONCILE_WINDOW non-summary history lines, and the seq of the last summary.
    let mut window: VecDeque<HistoryLine> = VecDeque::with_capacity(RECONCILE_WINDOW + 1);
    let mut last_summary_seq: Option<u64> = None;
    let mut non_summary_total = 0u64;
    if let Some(mut lines) = open_lines(&messages)? {
        while let Some((_, h)) = lines.next_value::<HistoryLine>()? {
            if h.summary_id.is_some() {
                last_summary_seq = Some(h.seq);
                continue;
            }
            non_summary_total += 1;
            if window.len() == RECONCILE_WINDOW {
                window.pop_front();
            }
            window.push_back(h);
        }
    }
    let Some(last) = last_context_message(&current)? else {
        if non_summary_total == 0 {
            return Ok(Vec::new());
        }
        if last_summary_seq.is_some() {
            bail!(
                "{} is empty but {} holds a compressed history: the context cannot be rebuilt",
                current.display(),
                messages.display()
            );
        }
        // The first history line(s) were written, current.jsonl never: rebuild it from them.
        let mut seqs = Vec::new();
        let mut text = String::new();
        if let Some(mut lines) = open_lines(&messages)? {
            while let Some((_, h)) = lines.next_value::<HistoryLine>()? {
                seqs.push(h.seq);
                text.push_str(&serde_json::to_string(&h.to_chat())?);
                text.push('\n');
            }
        }
        if apply {
            atomic_write(&current, text.as_bytes())?;
        }
        return Ok(seqs);
    };
    let lines: Vec<&HistoryLine> = window.iter().collect();
    // Fewest missing lines first: the last history line equal to current's last message.
    let matched = (0..lines.len())
        .map(|k| lines.len() - 1 - k)
        .find(|&i| lines[i].to_chat() == last);
    let missing: Vec<&HistoryLine> = match matched {
        Some(i) => lines[i + 1..].to_vec(),
        None => {
            // Right after a compression that kept no message, current.jsonl ends with the
            // summary message: what follows the summary line in the history is missing.
            let is_summary = last.role == "user"
                && last
                    .content
                    .as_deref()
                    .and_then(parse_summary_range)
                    .is_some();
            match (is_summary, last_summary_seq) {
                (true, Some(s)) if lines.first().is_none_or(|f| f.seq < s) => {
                    lines.iter().copied().filter(|h| h.seq > s).collect()
                }
                _ => bail!(
                    "{}: its last message is not among the last {RECONCILE_WINDOW} messages of {}; cannot tell which lines it lacks",
                    current.display(),
                    messages.display()
                ),
            }
        }
    };
    if apply {
        for h in &missing {
            append_line(&current, &serde_json::to_string(&h.to_chat())?)?;
        }
        if !missing.is_empty() {
            sync_file(&current)?;
        }
    }
    Ok(missing.iter().map(|h| h.seq).collect())
}

/// The tool calls of the last assistant message of the context file `path` that have no
/// `tool` message after it, in the order the model made them. Empty when the context ends
/// with every call answered (or has none).
pub fn pending_tool_calls(path: &Path) -> anyhow::Result<Vec<ToolCall>> {
    let mut pending: Vec<ToolCall> = Vec::new();
    let Some(mut lines) = open_lines(path)? else {
        return Ok(pending);
    };
    while let Some((_, m)) = lines.next_value::<ChatMessage>()? {
        match m.role.as_str() {
            "tool" => {
                if let Some(id) = &m.tool_call_id
                    && let Some(i) = pending.iter().position(|c| &c.id == id)
                {
                    pending.remove(i);
                }
            }
            _ => pending = m.calls().to_vec(),
        }
    }
    Ok(pending)
}

/// The final answer a context already ends with: the text of a last assistant message without
/// tool calls (the loop's definition of a final answer). A process that died after appending
/// it, before the task was marked completed, leaves such a context; the next run completes the
/// task without asking the model again.
pub fn final_answer(path: &Path) -> anyhow::Result<Option<String>> {
    Ok(last_context_message(path)?.and_then(|m| {
        (m.role == "assistant" && m.calls().is_empty())
            .then_some(m.content)
            .flatten()
            .filter(|c| !c.trim().is_empty())
    }))
}

/// Answer every pending tool call at the end of current.jsonl ([`pending_tool_calls`]) with an
/// [`INTERRUPTED_TEXT`] `tool` message, appended to messages.jsonl (next seq, `timestamp`)
/// and then to current.jsonl, like the message store does. Returns the ids answered.
pub fn close_pending_calls(dir: &Path, timestamp: &str) -> anyhow::Result<Vec<String>> {
    let current = dir.join(CURRENT_FILE);
    let messages = dir.join(MESSAGES_FILE);
    let pending = pending_tool_calls(&current)?;
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let last_seq = history_stats(&messages)?.last_seq;
    let mut ids = Vec::new();
    for (seq, call) in (last_seq + 1..).zip(pending) {
        let message = ChatMessage::tool_result(&call, INTERRUPTED_TEXT);
        let line = HistoryLine {
            seq,
            role: message.role.clone(),
            content: message.content.clone(),
            timestamp: timestamp.to_string(),
            tokens: estimate_message_tokens(&message),
            tool_name: message.tool_name.clone(),
            tool_calls: None,
            tool_call_id: message.tool_call_id.clone(),
            summary_id: None,
        };
        append_line(&messages, &serde_json::to_string(&line)?)?;
        append_line(&current, &serde_json::to_string(&message)?)?;
        ids.push(call.id);
    }
    sync_file(&messages)?;
    sync_file(&current)?;
    Ok(ids)
}

/// Delete the step temporaries of `dir` ([`is_temporary`]); with `keep_debug`, the
/// request/response bodies ([`DEBUG_FILES`]) stay. Returns the names deleted.
pub fn remove_temporaries(dir: &Path, keep_debug: bool) -> anyhow::Result<Vec<String>> {
    let mut removed = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
    };
    let mut names: Vec<String> = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_temporary(&name)
            && !(keep_debug && DEBUG_FILES.contains(&name.as_str()))
            && entry.path().is_file()
        {
            names.push(name);
        }
    }
    names.sort();
    for name in names {
        let p = dir.join(&name);
        fs::remove_file(&p).with_context(|| format!("cannot delete {}", p.display()))?;
        removed.push(name);
    }
    Ok(removed)
}

/// What [`repair_task_dir`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Temporaries deleted (names).
    pub removed: Vec<String>,
    /// Last lines cut or terminated.
    pub tails: Vec<TailFix>,
    /// Seqs of history lines appended to current.jsonl.
    pub appended_to_current: Vec<u64>,
    /// Tool call ids answered with an interrupted result.
    pub interrupted: Vec<String>,
}

impl RepairReport {
    /// Nothing was changed.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty()
            && self.tails.is_empty()
            && self.appended_to_current.is_empty()
            && self.interrupted.is_empty()
    }

    /// One sentence per change, for logs and reports.
    pub fn describe(&self) -> Vec<String> {
        let mut out: Vec<String> = self.tails.iter().map(|t| t.to_string()).collect();
        if !self.removed.is_empty() {
            out.push(format!(
                "deleted leftover temporaries: {}",
                self.removed.join(", ")
            ));
        }
        if !self.appended_to_current.is_empty() {
            out.push(format!(
                "appended to {CURRENT_FILE} the messages.jsonl line(s) it lacked: seq {:?}",
                self.appended_to_current
            ));
        }
        if !self.interrupted.is_empty() {
            out.push(format!(
                "answered tool call(s) {:?} with an interrupted result",
                self.interrupted
            ));
        }
        out
    }
}

/// Repair the task directory `dir` (no process may be using it): delete temporaries, fix torn
/// last lines of every JSONL file (cut bytes kept in `*.torn`), append to current.jsonl the
/// history lines it lacks, and, with `close_pending`, answer unanswered tool calls at its end
/// as interrupted (a paused task keeps them: the next run makes those calls).
pub fn repair_task_dir(
    dir: &Path,
    close_pending: bool,
    timestamp: &str,
) -> anyhow::Result<RepairReport> {
    let mut report = RepairReport {
        removed: remove_temporaries(dir, false)?,
        ..Default::default()
    };
    for file in jsonl_files(dir)? {
        if let Some(fix) = fix_torn_tail(&file, true)? {
            report.tails.push(fix);
        }
    }
    report.appended_to_current = reconcile_current(dir, true)?;
    if close_pending {
        report.interrupted = close_pending_calls(dir, timestamp)?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    /// A small file's lines.
    fn lines_of(path: &Path) -> Vec<String> {
        BufReader::new(File::open(path).unwrap())
            .lines()
            .map(|l| l.unwrap())
            .collect()
    }

    fn sys() -> ChatMessage {
        ChatMessage::text("system", "be brief")
    }
    fn call(ids: &[&str]) -> ChatMessage {
        ChatMessage::assistant_calls(
            ids.iter()
                .map(|i| ToolCall::new(*i, "read", "{}"))
                .collect(),
        )
    }
    fn result(id: &str) -> ChatMessage {
        ChatMessage::tool_result(&ToolCall::new(id, "read", "{}"), "ok")
    }

    /// Write messages.jsonl with `history` (seq 1..) and current.jsonl with `current`.
    fn write_task(dir: &Path, history: &[ChatMessage], current: &[ChatMessage]) {
        let mut h = String::new();
        for (i, m) in history.iter().enumerate() {
            let line = HistoryLine {
                seq: i as u64 + 1,
                role: m.role.clone(),
                content: m.content.clone(),
                timestamp: "2025-01-01T00:00:00.000Z".into(),
                tokens: estimate_message_tokens(m),
                tool_name: m.tool_name.clone(),
                tool_calls: m.tool_calls.clone(),
                tool_call_id: m.tool_call_id.clone(),
                summary_id: None,
            };
            h.push_str(&serde_json::to_string(&line).unwrap());
            h.push('\n');
        }
        fs::write(dir.join(MESSAGES_FILE), h).unwrap();
        let mut c = String::new();
        for m in current {
            c.push_str(&serde_json::to_string(m).unwrap());
            c.push('\n');
        }
        fs::write(dir.join(CURRENT_FILE), c).unwrap();
    }

    #[test]
    fn a_torn_last_line_is_cut_and_kept_aside() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.jsonl");
        fs::write(&p, "{\"a\":1}\n{\"a\":2}\n{\"a\":").unwrap();
        let fix = fix_torn_tail(&p, true).unwrap().unwrap();
        assert_eq!(fix.offset, 16);
        assert_eq!(
            fix.action,
            TailAction::Cut {
                bytes: 5,
                saved_to: Some(torn_path(&p))
            }
        );
        assert!(fix.to_string().contains("byte offset 16"), "{fix}");
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n{\"a\":2}\n");
        assert_eq!(fs::read_to_string(torn_path(&p)).unwrap(), "{\"a\":\n");
        // Sound now: nothing more to do.
        assert_eq!(fix_torn_tail(&p, true).unwrap(), None);
    }

    #[test]
    fn a_complete_line_without_newline_is_terminated_not_cut() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.jsonl");
        fs::write(&p, "{\"a\":1}\n{\"a\":2}").unwrap();
        let fix = fix_torn_tail(&p, false).unwrap().unwrap();
        assert_eq!(fix.action, TailAction::Terminated);
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n{\"a\":2}\n");
    }

    #[test]
    fn a_terminated_garbage_last_line_is_cut_and_a_single_torn_line_empties_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.jsonl");
        fs::write(&p, "{\"a\":1}\n{\"a\":{\"a\":1}\n").unwrap();
        let fix = fix_torn_tail(&p, false).unwrap().unwrap();
        assert_eq!(fix.offset, 8);
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n");
        fs::write(&p, "{\"se").unwrap();
        fix_torn_tail(&p, false).unwrap().unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"");
        assert_eq!(
            fix_torn_tail(&dir.path().join("none.jsonl"), true).unwrap(),
            None
        );
    }

    #[test]
    fn a_long_last_line_is_found_across_read_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.jsonl");
        let long = format!("{{\"a\":\"{}\"}}", "x".repeat(200_000));
        fs::write(&p, format!("{long}\n{}", &long[..150_000])).unwrap();
        let fix = fix_torn_tail(&p, false).unwrap().unwrap();
        assert_eq!(fix.offset, long.len() as u64 + 1);
        assert_eq!(fs::read_to_string(&p).unwrap(), format!("{long}\n"));
    }

    #[test]
    fn current_gets_the_history_lines_it_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let history = [
            sys(),
            ChatMessage::text("user", "go"),
            call(&["a"]),
            result("a"),
        ];
        write_task(dir.path(), &history, &history[..3]);
        assert_eq!(reconcile_current(dir.path(), false).unwrap(), [4]);
        assert_eq!(lines_of(&dir.path().join(CURRENT_FILE)).len(), 3, "dry run");
        assert_eq!(reconcile_current(dir.path(), true).unwrap(), [4]);
        assert_eq!(
            reconcile_current(dir.path(), true).unwrap(),
            Vec::<u64>::new()
        );
        crate::invariants::check_context_file(&dir.path().join(CURRENT_FILE), false).unwrap();
    }

    #[test]
    fn an_empty_current_is_rebuilt_from_an_uncompressed_history() {
        let dir = tempfile::tempdir().unwrap();
        write_task(dir.path(), &[sys()], &[]);
        assert_eq!(reconcile_current(dir.path(), true).unwrap(), [1]);
        let lines = lines_of(&dir.path().join(CURRENT_FILE));
        assert_eq!(
            serde_json::from_str::<ChatMessage>(&lines[0]).unwrap(),
            sys()
        );
        // Both empty: nothing to do.
        let empty = tempfile::tempdir().unwrap();
        assert!(reconcile_current(empty.path(), true).unwrap().is_empty());
    }

    #[test]
    fn after_a_compression_the_lines_after_the_summary_are_matched() {
        let dir = tempfile::tempdir().unwrap();
        let history = [
            sys(),
            ChatMessage::text("user", "go"),
            ChatMessage::text("assistant", "thinking"),
            ChatMessage::text("user", "more"),
        ];
        write_task(dir.path(), &history, &[]);
        // A summary line (seq 5), then one new message (seq 6) that current lacks; current is
        // system + summary message only (nothing kept).
        let summary = HistoryLine {
            seq: 5,
            role: "assistant".into(),
            content: Some("they talked".into()),
            timestamp: "t".into(),
            tokens: 3,
            tool_name: None,
            tool_calls: None,
            tool_call_id: None,
            summary_id: Some(1),
        };
        let new = HistoryLine {
            seq: 6,
            summary_id: None,
            role: "assistant".into(),
            content: Some("next".into()),
            ..summary.clone()
        };
        let mut text = fs::read_to_string(dir.path().join(MESSAGES_FILE)).unwrap();
        for h in [&summary, &new] {
            text.push_str(&serde_json::to_string(h).unwrap());
            text.push('\n');
        }
        fs::write(dir.path().join(MESSAGES_FILE), text).unwrap();
        let current = [
            sys(),
            ctxhost_format::compress::summary_message(1, 4, "they talked"),
        ];
        let body: String = current
            .iter()
            .map(|m| serde_json::to_string(m).unwrap() + "\n")
            .collect();
        fs::write(dir.path().join(CURRENT_FILE), body).unwrap();
        assert_eq!(reconcile_current(dir.path(), true).unwrap(), [6]);
        assert_eq!(
            reconcile_current(dir.path(), true).unwrap(),
            Vec::<u64>::new()
        );
    }

    #[test]
    fn an_unmatched_current_is_an_error_naming_both_files() {
        let dir = tempfile::tempdir().unwrap();
        write_task(
            dir.path(),
            &[sys(), ChatMessage::text("user", "go")],
            &[sys(), ChatMessage::text("user", "something else")],
        );
        let e = reconcile_current(dir.path(), true).unwrap_err().to_string();
        assert!(
            e.contains("current.jsonl") && e.contains("messages.jsonl"),
            "{e}"
        );
    }

    #[test]
    fn unanswered_calls_get_interrupted_results_in_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let history = [
            sys(),
            ChatMessage::text("user", "go"),
            call(&["a", "b", "c"]),
            result("b"),
        ];
        write_task(dir.path(), &history, &history);
        let pending = pending_tool_calls(&dir.path().join(CURRENT_FILE)).unwrap();
        assert_eq!(
            pending.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
            ["a", "c"]
        );
        let ids = close_pending_calls(dir.path(), "2025-01-01T00:00:01.000Z").unwrap();
        assert_eq!(ids, ["a", "c"]);
        crate::invariants::check_context_file(&dir.path().join(CURRENT_FILE), false).unwrap();
        let h: Vec<HistoryLine> = lines_of(&dir.path().join(MESSAGES_FILE))
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            h.iter().map(|l| l.seq).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5, 6]
        );
        assert_eq!(h[4].tool_call_id.as_deref(), Some("a"));
        assert_eq!(h[5].content.as_deref(), Some(INTERRUPTED_TEXT));
        assert!(close_pending_calls(dir.path(), "t").unwrap().is_empty());
    }

    #[test]
    fn a_whole_directory_is_repaired_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let history = [sys(), ChatMessage::text("user", "go"), call(&["a"])];
        // Crash: the assistant line reached messages.jsonl, current.jsonl got half of it.
        write_task(d, &history, &history[..2]);
        let half = serde_json::to_string(&history[2]).unwrap();
        let mut f = OpenOptions::new()
            .append(true)
            .open(d.join(CURRENT_FILE))
            .unwrap();
        f.write_all(&half.as_bytes()[..half.len() / 2]).unwrap();
        fs::write(d.join("request.json"), "{}").unwrap();
        fs::write(d.join("compressed.jsonl"), "{").unwrap();
        fs::write(d.join(".metadata.json.tmp-12"), "{").unwrap();
        fs::write(d.join("tools.jsonl"), "{\"seq\":1").unwrap();
        let report = repair_task_dir(d, true, "2025-01-01T00:00:02.000Z").unwrap();
        assert_eq!(
            report.removed,
            [".metadata.json.tmp-12", "compressed.jsonl", "request.json"]
        );
        assert_eq!(report.tails.len(), 2, "{report:?}");
        assert_eq!(report.appended_to_current, [3]);
        assert_eq!(report.interrupted, ["a"]);
        assert_eq!(report.describe().len(), 5);
        crate::invariants::check_context_file(&d.join(CURRENT_FILE), false).unwrap();
        assert_eq!(history_stats(&d.join(MESSAGES_FILE)).unwrap().last_seq, 4);
        assert_eq!(fs::read(d.join("tools.jsonl")).unwrap(), b"");
        // A second pass finds nothing.
        assert!(repair_task_dir(d, true, "t").unwrap().is_empty());
    }

    #[test]
    fn a_final_answer_at_the_end_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(CURRENT_FILE);
        assert_eq!(final_answer(&p).unwrap(), None);
        write_task(
            dir.path(),
            &[],
            &[sys(), ChatMessage::text("user", "go"), call(&["a"])],
        );
        assert_eq!(final_answer(&p).unwrap(), None);
        write_task(
            dir.path(),
            &[],
            &[sys(), ChatMessage::text("assistant", "the end")],
        );
        assert_eq!(final_answer(&p).unwrap().as_deref(), Some("the end"));
    }

    #[test]
    fn history_stats_count_agent_steps_without_summaries() {
        let dir = tempfile::tempdir().unwrap();
        write_task(
            dir.path(),
            &[
                sys(),
                ChatMessage::text("user", "go"),
                call(&["a"]),
                result("a"),
                ChatMessage::text("assistant", "done"),
            ],
            &[],
        );
        let s = history_stats(&dir.path().join(MESSAGES_FILE)).unwrap();
        assert_eq!((s.lines, s.last_seq, s.agent_steps), (5, 5, 2));
    }

    #[test]
    fn temporaries_are_recognised() {
        for t in [
            "request.json",
            "current.jsonl.tmp",
            "x.tmp",
            ".metadata.json.tmp-42",
            "to_summarize.jsonl",
        ] {
            assert!(is_temporary(t), "{t}");
        }
        for f in [
            "messages.jsonl",
            "metadata.json",
            "task_state.json",
            "tools.jsonl",
            "messages.jsonl.torn",
        ] {
            assert!(!is_temporary(f), "{f}");
        }
    }
}
