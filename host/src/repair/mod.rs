//! Repairs of a task directory whose process died (DESIGN §7), as plain file operations done by
//! the host before any component opens the files, through the directory's [`TaskDir`] handle.
//!
//! - [`TaskDir::remove_foreign_entries`]: symbolic links (a component cannot make one; an older
//!   ctxhost let it), FIFOs, sockets and devices are deleted first, so nothing below ever meets
//!   one.
//! - [`tail`]: a JSONL file whose last line was cut by a crash loses that line (kept in
//!   `<file>.torn`); a complete last line missing its `\n` gets it.
//! - [`reconcile`]: current.jsonl gets the history lines it lacks at its end (messages only, and
//!   no tool result that answers nothing).
//! - [`pairing`]: current.jsonl's tool calls and results paired again (duplicate or orphan
//!   results dropped, calls left without a result answered, invalid arguments replaced),
//!   recorded in messages.jsonl ([`crate::invariants::pairing`]).
//! - [`nul`]: lines of NUL bytes (a filesystem that lost a write) removed from a JSONL file.
//! - [`close_pending_calls`]: an assistant message at the end of current.jsonl whose tool calls
//!   have no result gets an [`INTERRUPTED_TEXT`] `tool` message for each missing id, appended to
//!   messages.jsonl (next seq) and current.jsonl, so the context can be sent again.
//! - [`remove_temporaries`]: request/response bodies and the compressors' work files
//!   ([`ctxhost_format::files::TEMPORARY_FILES`]).
//! - [`readers`]: the directory's JSONL files and history counts (shared with `ctxhost fsck`).
//!
//! A repair that rewrites or cuts messages.jsonl or current.jsonl ([`tail`], [`pairing`],
//! [`nul`]) first deletes the checkpoints that count that file
//! ([`crate::checkpoint::remove_describing`], the one place that knows which do); appends keep
//! them (a checkpoint counts a prefix).
//!
//! [`repair_task_dir`] runs them (but [`nul`]: only `ctxhost fsck --repair` removes bytes from
//! the middle of a file) and returns what it did ([`RepairReport`]).
//! Every function streams its files (one line, or a bounded window of lines, in memory).

pub mod nul;
pub mod pairing;
pub mod readers;
pub mod reconcile;
pub mod tail;

use anyhow::Context;
use ctxhost_format::files::{CURRENT, DEBUG_FILES, MESSAGES, is_temporary};
use ctxhost_format::{ChatMessage, HistoryLine};

use crate::invariants::context_check::ContextCheck;
use crate::invariants::queries::pending_tool_calls_in;
use crate::task_dir::TaskDir;

pub use crate::history_stats::{HistoryStats, history_stats};
pub use readers::{jsonl_files, last_seq_in};
pub use reconcile::{RECONCILE_WINDOW, reconcile_current};
pub use tail::{Tail, TailAction, TailFix, cut_from, fix_torn_tail, inspect_tail, torn_name};

/// Content of the `tool` message that answers a tool call whose result was lost in a crash.
pub const INTERRUPTED_TEXT: &str = "error: interrupted: the task process stopped before this tool call's result was recorded; \
call the tool again if you still need its result";

/// Answer every pending tool call at the end of current.jsonl ([`pending_tool_calls_in`]) with an
/// [`INTERRUPTED_TEXT`] `tool` message, appended to messages.jsonl (next seq, `timestamp`)
/// and then to current.jsonl, like the message store does. Returns the ids answered.
pub fn close_pending_calls(dir: &TaskDir, timestamp: &str) -> anyhow::Result<Vec<String>> {
    let pending = pending_tool_calls_in(dir, CURRENT)?;
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let last_seq = last_seq_in(dir)?;
    let mut ids = Vec::new();
    for (seq, call) in (last_seq + 1..).zip(pending) {
        let message = ChatMessage::tool_result(&call, INTERRUPTED_TEXT);
        let line = HistoryLine::of(seq, &message, timestamp);
        for (name, text) in [
            (MESSAGES, serde_json::to_string(&line)?),
            (CURRENT, serde_json::to_string(&message)?),
        ] {
            dir.append_line(name, &text)
                .with_context(|| format!("cannot append to {}", dir.show(name)))?;
        }
        ids.push(call.id);
    }
    for name in [MESSAGES, CURRENT] {
        dir.sync_file(name)
            .with_context(|| format!("cannot fsync {}", dir.show(name)))?;
    }
    Ok(ids)
}

/// Delete the step temporaries of `dir` ([`is_temporary`]); with `keep_debug`, the
/// request/response bodies ([`DEBUG_FILES`]) stay. Returns the names deleted.
pub fn remove_temporaries(dir: &TaskDir, keep_debug: bool) -> anyhow::Result<Vec<String>> {
    let mut removed = Vec::new();
    let entries = dir
        .entries(None)
        .with_context(|| format!("cannot list {}", dir.path().display()))?;
    for (name, meta) in entries {
        if is_temporary(&name)
            && !(keep_debug && DEBUG_FILES.contains(&name.as_str()))
            && meta.is_file()
        {
            dir.remove_file(&name)
                .with_context(|| format!("cannot delete {}", dir.show(&name)))?;
            removed.push(name);
        }
    }
    Ok(removed)
}

/// What [`repair_task_dir`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Symbolic links deleted (names relative to the task directory).
    pub links: Vec<String>,
    /// Temporaries deleted (names).
    pub removed: Vec<String>,
    /// Last lines cut or terminated.
    pub tails: Vec<TailFix>,
    /// Seqs of history lines appended to current.jsonl.
    pub appended_to_current: Vec<u64>,
    /// Tool call ids answered with an interrupted result.
    pub interrupted: Vec<String>,
    /// Repairs of current.jsonl's tool-call pairing.
    pub pairing: Vec<crate::invariants::pairing::PairingFix>,
}

impl RepairReport {
    /// Nothing was changed.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
            && self.removed.is_empty()
            && self.tails.is_empty()
            && self.appended_to_current.is_empty()
            && self.interrupted.is_empty()
            && self.pairing.is_empty()
    }

    /// One sentence per change, for logs and reports.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.links.is_empty() {
            out.push(format!(
                "deleted link(s) or special file(s) left in the task directory: {}",
                self.links.join(", ")
            ));
        }
        out.extend(self.tails.iter().map(|t| t.to_string()));
        if !self.removed.is_empty() {
            out.push(format!(
                "deleted leftover temporaries: {}",
                self.removed.join(", ")
            ));
        }
        if !self.appended_to_current.is_empty() {
            out.push(format!(
                "appended to {CURRENT} the messages.jsonl line(s) it lacked: seq {:?}",
                self.appended_to_current
            ));
        }
        if !self.interrupted.is_empty() {
            out.push(format!(
                "answered tool call(s) {:?} with an interrupted result",
                self.interrupted
            ));
        }
        for f in &self.pairing {
            out.push(format!("{CURRENT} {f} (recorded in {MESSAGES})"));
        }
        out
    }
}

/// Repair the task directory `dir` (no process may be using it): delete symbolic links and
/// temporaries, fix torn last lines of every JSONL file (cut bytes kept in `*.torn`), append
/// to current.jsonl the history lines it lacks, repair its tool-call pairing
/// ([`pairing::repair_context`]), and, with `close_pending`, answer unanswered tool calls at its
/// end as interrupted (a paused task keeps them: the next run makes those calls). Errors: a
/// context that cannot be repaired, naming file and line.
pub fn repair_task_dir(
    dir: &TaskDir,
    close_pending: bool,
    timestamp: &str,
) -> anyhow::Result<RepairReport> {
    repair_task_dir_from(dir, close_pending, timestamp, &mut ContextCheck::default())
}

/// [`repair_task_dir`], its check of current.jsonl's pairing from the checked prefix `check`
/// on ([`pairing::repair_context_from`]): what a resumed task does, with the check it saved.
pub fn repair_task_dir_from(
    dir: &TaskDir,
    close_pending: bool,
    timestamp: &str,
    check: &mut ContextCheck,
) -> anyhow::Result<RepairReport> {
    let links = dir
        .remove_foreign_entries()
        .with_context(|| format!("cannot remove the links in {}", dir.path().display()))?;
    let mut report = RepairReport {
        links,
        removed: remove_temporaries(dir, false)?,
        ..Default::default()
    };
    for file in jsonl_files(dir)? {
        if let Some(fix) = fix_torn_tail(dir, &file, true)? {
            report.tails.push(fix);
        }
    }
    report.appended_to_current = reconcile_current(dir, true)?;
    report.pairing = pairing::repair_context_from(dir, timestamp, true, check)?;
    if close_pending {
        report.interrupted = close_pending_calls(dir, timestamp)?;
    }
    Ok(report)
}

/// Helpers of the repair tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::fs::{self, File};
    use std::io::{BufRead, BufReader};
    use std::path::Path;

    use ctxhost_format::files::{CURRENT, MESSAGES};
    use ctxhost_format::{ChatMessage, HistoryLine, ToolCall};

    /// A small file's lines.
    pub fn lines_of(path: &Path) -> Vec<String> {
        BufReader::new(File::open(path).unwrap())
            .lines()
            .map(|l| l.unwrap())
            .collect()
    }

    pub fn sys() -> ChatMessage {
        ChatMessage::text("system", "be brief")
    }
    pub fn call(ids: &[&str]) -> ChatMessage {
        ChatMessage::assistant_calls(
            ids.iter()
                .map(|i| ToolCall::new(*i, "read", "{}"))
                .collect(),
        )
    }
    pub fn result(id: &str) -> ChatMessage {
        ChatMessage::tool_result(&ToolCall::new(id, "read", "{}"), "ok")
    }

    /// A prompt and one answered tool call: system, user, a call `a`, its result.
    pub fn one_round() -> Vec<ChatMessage> {
        vec![
            sys(),
            ChatMessage::text("user", "go"),
            call(&["a"]),
            result("a"),
        ]
    }

    /// Write messages.jsonl with `history` (seq 1..) and current.jsonl with `current`.
    pub fn write_task(dir: &Path, history: &[ChatMessage], current: &[ChatMessage]) {
        let mut h = String::new();
        for (i, m) in history.iter().enumerate() {
            let line = HistoryLine::of(i as u64 + 1, m, "2025-01-01T00:00:00.000Z");
            h.push_str(&serde_json::to_string(&line).unwrap());
            h.push('\n');
        }
        fs::write(dir.join(MESSAGES), h).unwrap();
        let mut c = String::new();
        for m in current {
            c.push_str(&serde_json::to_string(m).unwrap());
            c.push('\n');
        }
        fs::write(dir.join(CURRENT), c).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use std::fs::{self, OpenOptions};
    use std::io::Write;

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
        let task = TaskDir::open(dir.path()).unwrap();
        let pending = pending_tool_calls_in(&task, CURRENT).unwrap();
        assert_eq!(
            pending.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
            ["a", "c"]
        );
        let ids = close_pending_calls(&task, "2025-01-01T00:00:01.000Z").unwrap();
        assert_eq!(ids, ["a", "c"]);
        crate::invariants::check_context_file(&task, CURRENT, false).unwrap();
        let h: Vec<HistoryLine> = lines_of(&dir.path().join(MESSAGES))
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            h.iter().map(|l| l.seq).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5, 6]
        );
        assert_eq!(h[4].tool_call_id.as_deref(), Some("a"));
        assert_eq!(h[5].content.as_deref(), Some(INTERRUPTED_TEXT));
        assert!(close_pending_calls(&task, "t").unwrap().is_empty());
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
            .open(d.join(CURRENT))
            .unwrap();
        f.write_all(&half.as_bytes()[..half.len() / 2]).unwrap();
        fs::write(d.join("request.json"), "{}").unwrap();
        fs::write(d.join("compressed.jsonl"), "{").unwrap();
        fs::write(d.join(".metadata.json.tmp-12"), "{").unwrap();
        fs::write(d.join("tools.jsonl"), "{\"seq\":1").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", d.join("notes.jsonl")).unwrap();
        let task = TaskDir::open(d).unwrap();
        let report = repair_task_dir(&task, true, "2025-01-01T00:00:02.000Z").unwrap();
        assert_eq!(report.links, ["notes.jsonl"]);
        assert_eq!(
            report.removed,
            [".metadata.json.tmp-12", "compressed.jsonl", "request.json"]
        );
        assert_eq!(report.tails.len(), 2, "{report:?}");
        assert_eq!(report.appended_to_current, [3]);
        assert_eq!(report.interrupted, ["a"]);
        assert_eq!(report.describe().len(), 6);
        crate::invariants::check_context_file(&task, CURRENT, false).unwrap();
        assert_eq!(history_stats(&task, MESSAGES).unwrap().last_seq, 4);
        assert_eq!(fs::read(d.join("tools.jsonl")).unwrap(), b"");
        // A second pass finds nothing.
        assert!(repair_task_dir(&task, true, "t").unwrap().is_empty());
    }

    /// A repair that cuts or rewrites a file deletes the checkpoints that count it, and only
    /// those; one that only appends keeps them.
    #[test]
    fn repairs_that_change_a_file_delete_the_checkpoints_that_count_it() {
        use crate::checkpoint::FILES;
        use ctxhost_format::files::{CONTEXT_CHECKPOINT, HISTORY_CHECKPOINT, STORE_CHECKPOINT};
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let task = TaskDir::open(d).unwrap();
        let plant = || {
            for name in FILES {
                fs::write(d.join(name), "{}").unwrap();
            }
        };
        let left = || -> Vec<&str> { FILES.into_iter().filter(|f| task.is_file(f)).collect() };
        let torn = |name: &str| {
            let mut f = OpenOptions::new().append(true).open(d.join(name)).unwrap();
            f.write_all(b"{\"role\":\"us").unwrap();
        };

        // Appends only (a history line current.jsonl lacked): all kept.
        let history = one_round();
        write_task(d, &history, &history[..3]);
        plant();
        let report = repair_task_dir(&task, true, "t").unwrap();
        assert_eq!(report.appended_to_current, [4]);
        assert_eq!(left(), FILES);

        // current.jsonl's torn last line cut: the store's and the context check's go.
        torn(CURRENT);
        let report = repair_task_dir(&task, true, "t").unwrap();
        assert_eq!(report.tails.len(), 1, "{report:?}");
        assert_eq!(left(), [HISTORY_CHECKPOINT]);

        // messages.jsonl's: the store's and the history's.
        plant();
        torn(MESSAGES);
        repair_task_dir(&task, true, "t").unwrap();
        assert_eq!(left(), [CONTEXT_CHECKPOINT]);

        // current.jsonl rewritten by the pairing repair (a duplicate tool result).
        plant();
        let mut dup = history.clone();
        dup.push(result("a"));
        write_task(d, &history, &dup);
        let report = repair_task_dir(&task, true, "t").unwrap();
        assert!(!report.pairing.is_empty(), "{report:?}");
        assert_eq!(left(), [HISTORY_CHECKPOINT]);

        // NUL bytes removed from messages.jsonl (`ctxhost fsck --repair`).
        plant();
        let text = fs::read(d.join(MESSAGES)).unwrap();
        fs::write(d.join(MESSAGES), [&[0u8; 8][..], b"\n", &text].concat()).unwrap();
        assert!(nul::remove_nul_bytes(&task, MESSAGES).unwrap().is_some());
        assert_eq!(left(), [CONTEXT_CHECKPOINT]);
        assert!(!task.is_file(STORE_CHECKPOINT));
    }
}
