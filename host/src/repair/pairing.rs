//! Repairing the tool-call pairing of current.jsonl as files ([`crate::invariants::pairing`]
//! applied to the task directory): run on resume and by crash recovery (before the message store
//! opens), by `ctxhost fsck --repair`, and by the agent loop before a request when the context
//! it is about to send breaks a repairable invariant (it then reopens the message store).
//!
//! What it writes, in this order:
//! 1. messages.jsonl (append-only): each result it gives to a call left without one, as a `tool`
//!    line (next seq), then one **context-repair note**: a `system` line after the first
//!    ([`HistoryLine::is_note`]), content `[context repair] current.jsonl: …` listing every
//!    repair. Readers that rebuild or match the context from the history skip notes.
//! 2. current.jsonl, replaced atomically by the repaired context (streamed through a temporary
//!    file): duplicates and orphans left out, answers inserted after the results their call
//!    has, invalid arguments replaced by `{}`.
//!
//! A crash between the two leaves the history with the records and current.jsonl unrepaired:
//! the next run repairs it again (and records it again). An unrepairable context is an error
//! naming the file and line; nothing is written then.

use std::io::{self, BufReader};

use anyhow::{Context, anyhow};
use ctxhost_format::files::{CURRENT, MESSAGES};
use ctxhost_format::jsonl::{LineReader, to_line, write_line};
use ctxhost_format::{ChatMessage, HistoryLine};

use super::readers::last_seq_in;
use crate::invariants::ContextFileError;
use crate::invariants::context_check::ContextCheck;
use crate::invariants::pairing::{PairingFix, PairingRepair};
use crate::task_dir::TaskDir;

/// Start of the content of a context-repair note in messages.jsonl.
pub const NOTE_PREFIX: &str = "[context repair] ";

/// Whether current.jsonl of `dir` needs [`repair_context`]: it breaks a repairable invariant
/// (with `allow_pending_tail`, calls waiting at its end are fine). Errors: an unrepairable
/// break or a line that does not parse, naming file and line; a missing file is sound.
pub fn needs_repair(dir: &TaskDir, allow_pending_tail: bool) -> Result<bool, ContextFileError> {
    needs_repair_from(dir, allow_pending_tail, &mut ContextCheck::default())
}

/// [`needs_repair`] from the checked prefix `check` on (only what follows it is read while its
/// mark holds, [`ContextCheck::check`]); `check` then covers the whole file.
pub fn needs_repair_from(
    dir: &TaskDir,
    allow_pending_tail: bool,
    check: &mut ContextCheck,
) -> Result<bool, ContextFileError> {
    if !dir.is_file(CURRENT) {
        return Ok(false);
    }
    match check.check(dir, CURRENT, allow_pending_tail) {
        Ok(_) => Ok(false),
        Err(ContextFileError::Violation { violation, .. })
        | Err(ContextFileError::AtEnd { violation, .. })
            if violation.is_repairable() =>
        {
            Ok(true)
        }
        Err(ContextFileError::AtEnd {
            violation: crate::invariants::Violation::Empty,
            ..
        }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Repair the tool-call pairing of current.jsonl in `dir` (see the module docs); `timestamp`
/// (RFC 3339 UTC) dates the history lines. With `allow_pending_tail`, calls waiting at the end
/// stay (a paused task makes them when it runs again). Returns the repairs made (none: nothing
/// was written). No component may be using the files.
pub fn repair_context(
    dir: &TaskDir,
    timestamp: &str,
    allow_pending_tail: bool,
) -> anyhow::Result<Vec<PairingFix>> {
    repair_context_from(
        dir,
        timestamp,
        allow_pending_tail,
        &mut ContextCheck::default(),
    )
}

/// [`repair_context`], its check from the checked prefix `check` on ([`needs_repair_from`]).
pub fn repair_context_from(
    dir: &TaskDir,
    timestamp: &str,
    allow_pending_tail: bool,
    check: &mut ContextCheck,
) -> anyhow::Result<Vec<PairingFix>> {
    if !needs_repair_from(dir, allow_pending_tail, check)? {
        return Ok(Vec::new());
    }
    let append = |text: String| {
        dir.append_line(MESSAGES, &text)
            .with_context(|| format!("cannot append to {}", dir.show(MESSAGES)))
    };
    // A first pass to learn the repairs (nothing written yet).
    let fixes = stream(dir, allow_pending_tail, &mut io::sink())?;
    if fixes.is_empty() {
        return Ok(fixes);
    }
    // 1. The history: answers, then the note.
    let mut seq = last_seq_in(dir)?;
    for answer in fixes.iter().filter_map(PairingFix::answer) {
        seq += 1;
        append(to_line(&history_line(seq, &answer, timestamp))?)?;
    }
    seq += 1;
    let note = ChatMessage::text("system", note_text(&fixes));
    append(to_line(&history_line(seq, &note, timestamp))?)?;
    dir.sync_file(MESSAGES)
        .with_context(|| format!("cannot sync {}", dir.show(MESSAGES)))?;
    // 2. current.jsonl (the checkpoints that count the old one go first: a crash in between
    // costs the next open a full read, never a verdict on the wrong file).
    crate::checkpoint::remove_describing(dir, CURRENT)?;
    let mut again = Vec::new();
    dir.write_atomic_with(CURRENT, |out| {
        again = stream(dir, allow_pending_tail, out).map_err(io::Error::other)?;
        Ok(())
    })
    .with_context(|| format!("cannot replace {}", dir.show(CURRENT)))?;
    debug_assert_eq!(again, fixes);
    for f in &fixes {
        tracing::warn!(dir = %dir.path().display(), "context repair: {CURRENT} {f}");
    }
    Ok(fixes)
}

/// `[context repair] current.jsonl: <fix>; <fix>…`: the note recorded in messages.jsonl.
pub fn note_text(fixes: &[PairingFix]) -> String {
    let list: Vec<String> = fixes.iter().map(ToString::to_string).collect();
    format!("{NOTE_PREFIX}{CURRENT}: {}", list.join("; "))
}

/// Stream `current` through [`PairingRepair`], writing the repaired context to `out`.
fn stream(
    dir: &TaskDir,
    allow_pending_tail: bool,
    out: &mut dyn io::Write,
) -> anyhow::Result<Vec<PairingFix>> {
    let file = dir.show(CURRENT);
    let f = dir
        .open_read(CURRENT)
        .with_context(|| format!("cannot open {file}"))?;
    let mut lines = LineReader::new(BufReader::new(f), file.clone());
    let mut repair = PairingRepair::new();
    while let Some((line, message)) = lines.next_value::<ChatMessage>()? {
        let write = repair
            .push(message)
            .map_err(|v| anyhow!("{file}:{line}: {v} (not repairable)"))?;
        for m in write {
            write_line(out, &m)?;
        }
    }
    let (tail, fixes) = repair
        .finish(allow_pending_tail)
        .map_err(|v| anyhow!("{file}: {v}"))?;
    for m in tail {
        write_line(out, &m)?;
    }
    Ok(fixes)
}

/// The messages.jsonl line of `message` at `seq`.
fn history_line(seq: u64, message: &ChatMessage, timestamp: &str) -> HistoryLine {
    HistoryLine::of(seq, message, timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::check_context_file;
    use crate::repair::testing::*;
    use ctxhost_format::ToolCall;
    use std::path::Path;

    fn td(p: &Path) -> TaskDir {
        TaskDir::open(p).unwrap()
    }

    fn history(dir: &Path) -> Vec<HistoryLine> {
        lines_of(&dir.join(MESSAGES))
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn an_unanswered_call_in_the_middle_is_answered_and_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = [
            sys(),
            ChatMessage::text("user", "fix"),
            call(&["call_X"]),
            ChatMessage::text("user", "never mind"),
        ];
        write_task(dir.path(), &ctx, &ctx);
        let fixes = repair_context(&td(dir.path()), "2025-01-01T00:00:09.000Z", false).unwrap();
        assert_eq!(fixes.len(), 1);
        check_context_file(&td(dir.path()), CURRENT, false).unwrap();
        let h = history(dir.path());
        assert_eq!(h.len(), 6);
        assert_eq!(
            (h[4].seq, h[4].role.as_str(), h[4].tool_call_id.as_deref()),
            (5, "tool", Some("call_X"))
        );
        assert!(h[5].is_note() && !h[4].is_note() && !h[0].is_note());
        assert!(
            h[5].content
                .as_deref()
                .unwrap()
                .starts_with("[context repair] current.jsonl: line 4: answered tool call call_X"),
            "{:?}",
            h[5].content
        );
        // Sound now: a second pass does nothing, and reconciling copies nothing back.
        assert!(
            repair_context(&td(dir.path()), "t", false)
                .unwrap()
                .is_empty()
        );
        assert!(
            crate::repair::reconcile_current(&td(dir.path()), false)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn an_unrepairable_context_names_file_and_line_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = [
            sys(),
            ChatMessage::assistant_calls(vec![
                ToolCall::new("a", "read", "{}"),
                ToolCall::new("a", "read", "{}"),
            ]),
        ];
        write_task(dir.path(), &ctx, &ctx);
        let before = std::fs::read(dir.path().join(MESSAGES)).unwrap();
        let e = repair_context(&td(dir.path()), "t", false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("current.jsonl:2:"), "{e}");
        assert_eq!(std::fs::read(dir.path().join(MESSAGES)).unwrap(), before);
    }
}
