//! [`PlanningStore`]: a task's planning history, `planning/{uuid}.jsonl` (DESIGN.md §11, the
//! spec's PlanningHistoryStore: `save_plan`, `has_plan`, `get_latest_plan`, `append_entry`).
//! The host is its one writer; a strategy component reaches it through the `planning` import
//! ([`SharedPlanning`]).
//!
//! Hooks and commits: the agent loop calls [`PlanningStore::begin`] before a strategy hook; the
//! entries the hook saves are checked and held in memory (its own reads see them) until
//! [`PlanningStore::commit`] appends them with the hook's `decision` line in one write and
//! fsyncs the file — or [`PlanningStore::abort`] drops them when the hook failed. A hook that
//! wrote nothing and made no side call commits nothing (asking it again is harmless).
//!
//! On open, lines after the last `decision` (a hook whose process died mid-append) are cut,
//! their bytes kept in `planning/{uuid}.jsonl.torn`, like a torn last line; a torn last line
//! itself was already cut by crash repair ([`crate::repair`]).
//!
//! Every read and write goes through the task directory's [`TaskDir`] handle (DESIGN.md §8):
//! the strategy component can write in its task directory too, so a link named `planning` or
//! `planning/{uuid}.jsonl` is refused, never followed, and a FIFO there is not read.
//!
//! Format and fold: [`ctxhost_format::planning`].

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::Context;
use ctxhost_format::files::PLANNING_DIR;
use ctxhost_format::jsonl::LineReader;
use ctxhost_format::planning::{
    DecisionBody, Hook, MAX_NOTE_BYTES, MAX_TEXT_BYTES, Plan, PlanBody, PlanningHistory,
    PlanningLine, Stamp, bounded, history_file,
};

use crate::runtime::{PlanningEntry, PlanningImport};
use crate::task_dir::TaskDir;

/// Most entries one hook may write (a hook asking for more gets an error).
pub const MAX_ENTRIES_PER_HOOK: usize = 64;
/// Most lines [`PlanningStore::entries`] returns (the latest ones).
pub const MAX_ENTRIES_LISTED: usize = 1_000;
/// Longest reflection trigger, bytes.
const MAX_TRIGGER_BYTES: usize = 64;

/// The planning history of one task.
#[derive(Debug)]
pub struct PlanningStore {
    dir: TaskDir,
    /// `planning/{uuid}.jsonl`, relative to `dir`.
    name: String,
    history: PlanningHistory,
    /// The current hook's stamp and its lines (not yet written), and the history as the hook
    /// sees it (committed lines and its own).
    hook: Option<HookBatch>,
}

#[derive(Debug)]
struct HookBatch {
    stamp: Stamp,
    lines: Vec<PlanningLine>,
    view: PlanningHistory,
}

/// Open the file `name` of `dir` for reading if it exists, as a regular file (a link is
/// refused; a FIFO or device is not read).
fn open_history(dir: &TaskDir, name: &str) -> anyhow::Result<Option<std::fs::File>> {
    match dir.open_read(name) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot open {}", dir.show(name))),
    }
}

/// Read the planning history `name` (planning/{uuid}.jsonl) of `dir` and fold it. Returns the
/// fold and the byte offset where the committed lines end. Errors name the file and line.
fn read_history(dir: &TaskDir, name: &str) -> anyhow::Result<(PlanningHistory, u64)> {
    let mut history = PlanningHistory::default();
    let Some(file) = open_history(dir, name)? else {
        return Ok((history, 0));
    };
    let shown = dir.show(name);
    let mut reader = BufReader::new(file);
    let mut buf = Vec::new();
    let (mut offset, mut committed_end, mut line_no) = (0u64, 0u64, 0u64);
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("cannot read {shown}"))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        offset += n as u64;
        if buf.trim_ascii().is_empty() {
            if history.uncommitted == 0 {
                committed_end = offset;
            }
            continue;
        }
        let line: PlanningLine = serde_json::from_slice(&buf)
            .with_context(|| format!("{shown} line {line_no}: not a planning-history line"))?;
        let commit = matches!(line, PlanningLine::Decision(_));
        history
            .push(line)
            .map_err(|e| anyhow::anyhow!("{shown} line {line_no}: {e}"))?;
        if commit {
            committed_end = offset;
        }
    }
    Ok((history, committed_end))
}

impl PlanningStore {
    /// The planning history of task `uuid` in the task directory `dir` (the file need not
    /// exist: a task without a plan has none). Cuts uncommitted lines (see the module doc).
    /// Errors: a line that does not parse or breaks the history's rules, naming file and line;
    /// a link in place of the folder or the file.
    pub fn open(dir: &TaskDir, uuid: &str) -> anyhow::Result<PlanningStore> {
        let name = history_file(uuid);
        let (mut history, committed_end) = read_history(dir, &name)?;
        if history.uncommitted > 0 {
            crate::repair::cut_from(dir, &name, committed_end, true)?;
            tracing::warn!(
                file = %dir.show(&name),
                lines = history.uncommitted,
                "cut the planning entries of a strategy hook that never returned (kept in the .torn file)"
            );
            history.uncommitted = 0;
        }
        Ok(PlanningStore {
            dir: dir.clone(),
            name,
            history,
            hook: None,
        })
    }

    /// Cut the uncommitted lines of task `uuid`'s planning history in the task directory `dir`
    /// (for `ctxhost fsck --repair`); returns how many were cut (kept in the `.torn` file).
    pub fn repair(dir: &TaskDir, uuid: &str) -> anyhow::Result<u64> {
        let name = history_file(uuid);
        let (history, committed_end) = read_history(dir, &name)?;
        if history.uncommitted > 0 {
            crate::repair::cut_from(dir, &name, committed_end, true)?;
        }
        Ok(history.uncommitted)
    }

    /// Read the planning history of task `uuid` in the task directory `dir` without changing
    /// anything (for `ctxhost show` and context inheritance): `None` when the task has none.
    pub fn read(dir: &TaskDir, uuid: &str) -> anyhow::Result<Option<PlanningHistory>> {
        let name = history_file(uuid);
        let exists = dir
            .metadata(&name)
            .with_context(|| format!("cannot read {}", dir.show(&name)))?
            .is_some();
        if !exists {
            return Ok(None);
        }
        Ok(Some(read_history(dir, &name)?.0))
    }

    /// The file's full path (`planning/{uuid}.jsonl` in the task directory), for messages
    /// only: every access goes through the task directory's handle.
    pub fn path(&self) -> PathBuf {
        self.dir.file_path(&self.name)
    }

    /// The committed history.
    pub fn history(&self) -> &PlanningHistory {
        &self.history
    }

    /// The latest committed plan, when it has steps (what goes back into the context after a
    /// compression).
    pub fn latest_plan(&self) -> Option<&Plan> {
        self.history.latest.as_ref().filter(|p| !p.steps.is_empty())
    }

    /// The decision recorded for `hook` at context position `seq`, if the last committed hook
    /// was that one (it returned, but its decision may not have been applied yet).
    pub fn recorded_decision(&self, hook: Hook, seq: u64) -> Option<&DecisionBody> {
        self.history
            .last_decision
            .as_ref()
            .filter(|d| d.at.hook == hook && d.at.seq == seq)
    }

    /// A hook starts: entries saved until [`PlanningStore::commit`] carry `stamp`.
    pub fn begin(&mut self, stamp: Stamp) {
        self.hook = Some(HookBatch {
            stamp,
            lines: Vec::new(),
            view: self.history.clone(),
        });
    }

    /// The hook failed: drop its entries.
    pub fn abort(&mut self) {
        self.hook = None;
    }

    /// The hook returned `decision` (its `at` is replaced by the hook's stamp): append its
    /// entries and the decision in one write and fsync, when it wrote entries or made side
    /// calls (`decision.llm_calls`); otherwise write nothing. Returns whether it wrote.
    pub fn commit(&mut self, mut decision: DecisionBody) -> anyhow::Result<bool> {
        let Some(batch) = self.hook.take() else {
            anyhow::bail!("planning: commit without a hook");
        };
        if batch.lines.is_empty() && decision.llm_calls == 0 {
            return Ok(false);
        }
        decision.at = batch.stamp.clone();
        let mut lines = batch.lines;
        lines.push(PlanningLine::Decision(decision));
        let mut bytes = Vec::new();
        for l in &lines {
            serde_json::to_writer(&mut bytes, l).context("serialize a planning line")?;
            bytes.push(b'\n');
        }
        let shown = self.dir.show(&self.name);
        let created = !self.dir.is_dir(PLANNING_DIR);
        if created {
            self.dir
                .create_dir(PLANNING_DIR)
                .with_context(|| format!("cannot create {}", self.dir.show(PLANNING_DIR)))?;
        }
        let mut f = self
            .dir
            .open_append(&self.name)
            .with_context(|| format!("cannot open {shown} for appending"))?;
        f.write_all(&bytes)
            .and_then(|_| f.sync_data())
            .with_context(|| format!("cannot append to {shown}"))?;
        if created {
            self.dir
                .sync_dir(PLANNING_DIR)
                .and_then(|_| self.dir.sync())
                .with_context(|| format!("cannot fsync {}", self.dir.show(PLANNING_DIR)))?;
        }
        for l in lines {
            // Checked when saved; a failure here would be a bug of this module.
            if let Err(e) = self.history.push(l) {
                tracing::error!(file = %shown, "planning history: {e}");
            }
        }
        Ok(true)
    }

    fn batch(&mut self) -> Result<&mut HookBatch, String> {
        let batch = self
            .hook
            .as_mut()
            .ok_or_else(|| "the planning history can only be written during a hook".to_string())?;
        if batch.lines.len() >= MAX_ENTRIES_PER_HOOK {
            return Err(format!(
                "a hook may write at most {MAX_ENTRIES_PER_HOOK} planning entries"
            ));
        }
        Ok(batch)
    }

    /// The history as the current hook sees it (committed lines and its own).
    fn view(&self) -> &PlanningHistory {
        self.hook.as_ref().map(|b| &b.view).unwrap_or(&self.history)
    }

    /// Check `line` against the hook's view, then hold it.
    fn hold(&mut self, line: PlanningLine) -> Result<(), String> {
        let batch = self.batch()?;
        let mut view = batch.view.clone();
        view.apply(line.clone())?;
        batch.view = view;
        batch.lines.push(line);
        Ok(())
    }

    /// The committed lines as JSON text (the latest [`MAX_ENTRIES_LISTED`]), then the hook's.
    pub fn entries(&self) -> anyhow::Result<Vec<String>> {
        let mut out = std::collections::VecDeque::new();
        if let Some(f) = open_history(&self.dir, &self.name)? {
            let mut lines = LineReader::new(BufReader::new(f), self.dir.show(&self.name));
            let mut read = 0u64;
            while let Some((_, text)) = lines.next_line()? {
                if read >= self.history.lines {
                    break;
                }
                read += 1;
                if out.len() == MAX_ENTRIES_LISTED {
                    out.pop_front();
                }
                out.push_back(text.to_string());
            }
        }
        if let Some(b) = &self.hook {
            for l in &b.lines {
                if out.len() == MAX_ENTRIES_LISTED {
                    out.pop_front();
                }
                out.push_back(serde_json::to_string(l)?);
            }
        }
        Ok(out.into())
    }
}

impl PlanningImport for PlanningStore {
    fn save_plan(&mut self, plan: Plan, note: Option<String>) -> Result<(), String> {
        let first = !self.view().has_plan();
        let note = note
            .map(|n| bounded(n.trim(), MAX_NOTE_BYTES))
            .filter(|n| !n.is_empty());
        if first && plan.steps.is_empty() && note.is_none() {
            return Err("steps: a first plan without steps needs a note saying why".to_string());
        }
        plan.validate(first)?;
        let stamp = self.batch()?.stamp.clone();
        let body = PlanBody {
            at: stamp,
            goal: plan.goal,
            steps: plan.steps,
            note,
        };
        self.hold(if first {
            PlanningLine::Plan(body)
        } else {
            PlanningLine::Revision(body)
        })
    }

    fn has_plan(&mut self) -> bool {
        self.view().has_plan()
    }

    fn latest_plan(&mut self) -> Option<Plan> {
        self.view().latest.clone()
    }

    fn append_entry(&mut self, entry: PlanningEntry) -> Result<(), String> {
        let at = self.batch()?.stamp.clone();
        let line = match entry {
            PlanningEntry::Progress {
                step_id,
                status,
                note,
            } => PlanningLine::Progress {
                at,
                step_id,
                status,
                note: note
                    .map(|n| bounded(n.trim(), MAX_NOTE_BYTES))
                    .filter(|n| !n.is_empty()),
            },
            PlanningEntry::Reflection { trigger, text } => {
                let trigger = trigger.trim();
                if trigger.is_empty()
                    || trigger.len() > MAX_TRIGGER_BYTES
                    || trigger.chars().any(char::is_control)
                {
                    return Err(format!(
                        "reflection.trigger: one word of at most {MAX_TRIGGER_BYTES} bytes without control characters (tool-error, interval, ...)"
                    ));
                }
                PlanningLine::Reflection {
                    at,
                    trigger: trigger.to_string(),
                    text: bounded(text.trim(), MAX_TEXT_BYTES),
                }
            }
            PlanningEntry::Verification { verdict, text } => PlanningLine::Verification {
                at,
                verdict,
                text: bounded(text.trim(), MAX_TEXT_BYTES),
            },
        };
        self.hold(line)
    }

    fn entries(&mut self) -> Vec<String> {
        PlanningStore::entries(self).unwrap_or_else(|e| {
            tracing::warn!("planning history: {e:#}");
            Vec::new()
        })
    }
}

/// A task's [`PlanningStore`] shared by the agent loop and the strategy component's `planning`
/// import (one process, one thread at a time; the lock is never held across a component call).
#[derive(Debug, Clone)]
pub struct SharedPlanning(Arc<Mutex<PlanningStore>>);

impl SharedPlanning {
    /// Share `store`.
    pub fn new(store: PlanningStore) -> SharedPlanning {
        SharedPlanning(Arc::new(Mutex::new(store)))
    }

    /// The store (a poisoned lock is taken over: the store's state is whole after every call).
    pub fn lock(&self) -> MutexGuard<'_, PlanningStore> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl PlanningImport for SharedPlanning {
    fn save_plan(&mut self, plan: Plan, note: Option<String>) -> Result<(), String> {
        self.lock().save_plan(plan, note)
    }

    fn has_plan(&mut self) -> bool {
        self.lock().has_plan()
    }

    fn latest_plan(&mut self) -> Option<Plan> {
        PlanningImport::latest_plan(&mut *self.lock())
    }

    fn append_entry(&mut self, entry: PlanningEntry) -> Result<(), String> {
        self.lock().append_entry(entry)
    }

    fn entries(&mut self) -> Vec<String> {
        PlanningImport::entries(&mut *self.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxhost_format::planning::{Action, StepStatus, Verdict};
    use std::fs::{self, OpenOptions};

    /// A temporary task directory and its handle.
    fn task_dir() -> (tempfile::TempDir, TaskDir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = TaskDir::open(tmp.path()).unwrap();
        (tmp, dir)
    }

    fn stamp(seq: u64, hook: Hook) -> Stamp {
        Stamp {
            timestamp: "2026-01-02T03:04:05.000Z".into(),
            seq,
            step: 1,
            hook,
        }
    }

    fn decision(llm_calls: u32) -> DecisionBody {
        DecisionBody {
            at: stamp(0, Hook::Start),
            action: Action::Proceed,
            message: Some("go".into()),
            reason: None,
            llm_calls,
            duration_ms: 1,
        }
    }

    fn plan(n: u32) -> Plan {
        ctxhost_format::planning::parse_plan(&format!(
            "[{}]",
            (1..=n)
                .map(|i| format!("\"s{i}\""))
                .collect::<Vec<_>>()
                .join(",")
        ))
        .unwrap()
    }

    #[test]
    fn a_hook_commits_its_entries_with_its_decision_and_sees_them_before() {
        let (_tmp, dir) = task_dir();
        let mut s = PlanningStore::open(&dir, "u").unwrap();
        assert!(!s.path().exists());
        s.begin(stamp(2, Hook::Start));
        assert!(!s.has_plan());
        s.save_plan(plan(2), None).unwrap();
        assert!(s.has_plan(), "the hook sees its own plan");
        s.append_entry(PlanningEntry::Progress {
            step_id: 1,
            status: StepStatus::InProgress,
            note: None,
        })
        .unwrap();
        assert_eq!(PlanningStore::entries(&s).unwrap().len(), 2);
        assert!(!s.history().has_plan(), "not committed yet");
        assert!(s.commit(decision(1)).unwrap());
        assert!(s.history().has_plan());
        assert_eq!(s.recorded_decision(Hook::Start, 2).unwrap().llm_calls, 1);
        assert!(s.recorded_decision(Hook::AfterReply, 2).is_none());
        let text = fs::read_to_string(s.path()).unwrap();
        let kinds: Vec<&str> = text
            .lines()
            .map(|l| serde_json::from_str::<PlanningLine>(l).unwrap().kind())
            .collect();
        assert_eq!(kinds, ["plan", "progress", "decision"]);
        // A second "first plan" becomes a revision.
        s.begin(stamp(5, Hook::AfterTools));
        s.save_plan(plan(3), Some("tool failed".into())).unwrap();
        s.commit(decision(1)).unwrap();
        assert_eq!(s.history().revisions, 1);
        let reopened = PlanningStore::open(&dir, "u").unwrap();
        assert_eq!(reopened.history(), s.history());
        assert_eq!(reopened.latest_plan().unwrap().steps.len(), 3);
    }

    #[test]
    fn pure_hooks_write_nothing_and_aborted_hooks_leave_no_trace() {
        let (_tmp, dir) = task_dir();
        let mut s = PlanningStore::open(&dir, "u").unwrap();
        s.begin(stamp(2, Hook::Start));
        assert!(!s.commit(decision(0)).unwrap());
        assert!(!s.path().exists());
        s.begin(stamp(2, Hook::Start));
        s.save_plan(plan(1), None).unwrap();
        s.abort();
        assert!(!s.has_plan() && !s.path().exists());
    }

    #[test]
    fn bad_entries_are_refused_naming_the_field() {
        let (_tmp, dir) = task_dir();
        let mut s = PlanningStore::open(&dir, "u").unwrap();
        assert!(
            s.save_plan(plan(1), None)
                .unwrap_err()
                .contains("during a hook")
        );
        s.begin(stamp(2, Hook::Start));
        assert!(
            s.save_plan(Plan::default(), None)
                .unwrap_err()
                .contains("note")
        );
        s.save_plan(Plan::default(), Some("the model gave no plan".into()))
            .unwrap();
        let e = s
            .append_entry(PlanningEntry::Progress {
                step_id: 1,
                status: StepStatus::Done,
                note: None,
            })
            .unwrap_err();
        assert!(e.contains("step 1"), "{e}");
        // A revision needs steps.
        assert!(s.save_plan(Plan::default(), Some("x".into())).is_err());
        let e = s
            .append_entry(PlanningEntry::Reflection {
                trigger: "a\nb".into(),
                text: "t".into(),
            })
            .unwrap_err();
        assert!(e.starts_with("reflection.trigger"), "{e}");
        s.append_entry(PlanningEntry::Verification {
            verdict: Verdict::Failed,
            text: "x".repeat(20_000),
        })
        .unwrap();
        s.commit(decision(0)).unwrap();
        assert_eq!(
            s.history().no_plan_reason.as_deref(),
            Some("the model gave no plan")
        );
        assert_eq!(s.history().failed_verifications, 1);
        assert!(s.latest_plan().is_none(), "a plan without steps is no plan");
    }

    #[test]
    fn uncommitted_lines_are_cut_on_open_and_kept_aside() {
        let (_tmp, dir) = task_dir();
        let mut s = PlanningStore::open(&dir, "u").unwrap();
        s.begin(stamp(2, Hook::Start));
        s.save_plan(plan(2), None).unwrap();
        s.commit(decision(1)).unwrap();
        let committed = fs::read(s.path()).unwrap();
        // A hook whose process died mid-append: a progress line without its decision.
        let orphan = serde_json::to_string(&PlanningLine::Progress {
            at: stamp(4, Hook::AfterReply),
            step_id: 1,
            status: StepStatus::Done,
            note: None,
        })
        .unwrap();
        let mut f = OpenOptions::new().append(true).open(s.path()).unwrap();
        writeln!(f, "{orphan}").unwrap();
        let read = PlanningStore::read(&dir, "u").unwrap().unwrap();
        assert_eq!(read.uncommitted, 1, "read-only sees it as uncommitted");
        let s = PlanningStore::open(&dir, "u").unwrap();
        assert_eq!(fs::read(s.path()).unwrap(), committed);
        assert_eq!(
            fs::read_to_string(dir.file_path(&crate::repair::torn_name(&history_file("u"))))
                .unwrap(),
            format!("{orphan}\n")
        );
        assert_eq!(
            s.latest_plan().unwrap().steps[0].status,
            StepStatus::Pending
        );
    }

    #[test]
    fn a_bad_line_is_named() {
        let (tmp, dir) = task_dir();
        fs::create_dir(tmp.path().join("planning")).unwrap();
        fs::write(tmp.path().join("planning/u.jsonl"), "{\"type\":\"plan\"}\n").unwrap();
        let e = PlanningStore::open(&dir, "u").unwrap_err();
        assert!(
            format!("{e:#}").contains("planning/u.jsonl line 1"),
            "{e:#}"
        );
    }
}
