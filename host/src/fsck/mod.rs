//! `ctxhost fsck`: check that tasks.db and the `contexts/` tree agree and that every task
//! directory's files are sound; with `--repair`, fix what can be fixed without losing data.
//!
//! Checks ([`tree`] for the rows and the tree, [`files`] for the files of each task directory):
//! - every row's status agrees with where its directory is ([`crate::lifecycle::dir_rule`]):
//!   `queued` → none yet or `paused/` (a resumed or recovered task waiting for its process),
//!   `running` → `running/` (a task whose process is gone, or whose lease expired, is reported), `paused` → `paused/`,
//!   `completed`/`failed`/`stopped` → `completed/` (none when `ctxhost cleanup` deleted it, or
//!   the task never started). A directory where the status it had before keeps it is the
//!   in-between state of a transition a crash interrupted ([`crate::lifecycle::dir_fix`]); one
//!   that no transition explains is a mismatch; a directory in two places; a directory with no
//!   row; an entry that is not a task directory; a cleanup interrupted half-way;
//! - in each task directory: metadata.json and task_state.json parse; every line of every JSONL
//!   file parses as its format (messages.jsonl → history lines, current.jsonl → chat messages,
//!   summaries.jsonl, tools.jsonl; others as JSON objects), the last line included (a torn
//!   last line is reported); messages.jsonl seq runs 1..n without gaps or duplicates;
//!   current.jsonl keeps the context invariants ([`crate::invariants`]; unanswered tool calls at
//!   its end are allowed except for a completed task: a paused task makes them when resumed)
//!   and is not behind messages.jsonl; no step temporaries are left (a failed task may keep its
//!   request/response for debugging); every file and line with a published JSON Schema
//!   (metadata.json, task_state.json, tools.json, and the lines of messages.jsonl,
//!   current.jsonl, summaries.jsonl, tools.jsonl, llm_calls.jsonl, planning/*.jsonl) matches it
//!   ([`crate::schemas`]; a mismatch names the file, the line, the line kind, the field and what
//!   is wrong);
//!   no symbolic link (the host never follows one);
//!   a git workspace (workspace.json) whose base commit is in its repository and whose
//!   changes.patch applies to it (`git apply --check`);
//!   the checkpoints (store_checkpoint.json, history_checkpoint.json, context_checkpoint.json)
//!   parse, match their schemas and still describe the files they count ([`checkpoints`]);
//!   the planning history (`planning/{uuid}.jsonl`) reads as planning lines that keep its
//!   rules (one first plan, valid plans, progress of steps the plan has) and ends with a
//!   hook's decision (lines after it: a hook whose process died mid-append);
//! - modes: `contexts/`, its folders, tasks.db and every task directory and file are
//!   owner-only (0700 folders, 0600 files); anything the group or others may access is
//!   reported.
//!
//! Before the tree, tasks.db itself ([`crate::db::Db::health`]): SQLite's integrity check, the
//! columns of the `tasks` table, a write transaction — a database `ctxhost submit` would reject
//! is reported (and, when not even its rows can be listed, nothing else is checked).
//!
//! A task whose process is alive is checked read-only and its last line is not judged (it may
//! be being written). Every problem names the file and, where there is one, the line.
//!
//! `--repair` fixes ([`fixes`], reusing the crash-repair readers and fixes of
//! [`crate::repair`]): a running task whose process is gone or whose lease expired (crash
//! recovery, as the worker does: repaired, requeued or failed); an interrupted transition or cleanup (finished, as recovery
//! does); a directory in the wrong state folder for a task that no process runs (moved to agree
//! with the status); torn last lines (cut, the bytes kept in
//! `<file>.torn`; a complete line only missing its newline gets it); current.jsonl behind
//! messages.jsonl (the missing lines appended); leftover temporaries (deleted); uncommitted planning lines
//! (cut, kept in `<file>.torn`, as the task itself does when it resumes); symbolic links in a
//! task directory (deleted); loose modes (tightened to 0600 / 0700); bad checkpoints, and any a
//! fix above left stale (deleted: the next open reads the files whole and writes new ones). Everything
//! else (a bad line in the middle, a seq gap, an orphan tool result, a missing directory) is
//! reported for a human. After repairing, the tree is checked again and what remains is reported.

mod checkpoints;
mod files;
pub mod fixes;
pub mod remote;
mod schema_check;
pub mod tree;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::db::{Db, Status};
use crate::layout::Layout;

/// What kind of problem (`kebab-case` in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemKind {
    /// A `running` task whose process is gone (this host).
    DeadProcess,
    /// A `running` task whose lease expired (its host died or lost the database), or that
    /// has none.
    ExpiredLease,
    /// The row has its new status but the directory is still where the old status kept it: a
    /// transition interrupted between its two halves (recovery finishes it).
    InterruptedTransition,
    /// The directory is in a state folder no transition into the status leaves it in.
    DirMismatch,
    /// The task has a directory in more than one state folder.
    DuplicateDir,
    /// The status needs a directory and there is none.
    MissingDir,
    /// A task directory with no row in tasks.db.
    DirWithoutRow,
    /// An entry of a state folder that is not a task directory.
    NotATaskDir,
    /// A `.deleting-` directory of an interrupted `ctxhost cleanup`.
    InterruptedCleanup,
    /// The last line of a JSONL file is torn (or lacks its newline).
    TornLine,
    /// A line (not the last) that does not parse.
    BadLine,
    /// messages.jsonl seq is not 1..n.
    SeqGap,
    /// current.jsonl breaks a context invariant.
    ContextInvariant,
    /// current.jsonl lacks the last line(s) of messages.jsonl.
    CurrentBehind,
    /// current.jsonl and messages.jsonl cannot be matched up.
    Unreconcilable,
    /// A step temporary left behind.
    TemporaryFile,
    /// A planning-history line that breaks its rules (a second first plan, an invalid plan,
    /// progress of a step the plan lacks).
    PlanningRule,
    /// Planning-history lines after the last decision: a strategy hook whose process died
    /// mid-append.
    UncommittedPlanning,
    /// A file or line that is JSON but does not match its published schema
    /// (`docs/schemas/`, [`crate::schemas`]): a missing or unknown field, a wrong type.
    SchemaMismatch,
    /// metadata.json, task_state.json or tools.json does not parse.
    BadFile,
    /// A checkpoint (store_checkpoint.json, history_checkpoint.json, context_checkpoint.json)
    /// that does not parse, breaks its schema, is of another version or no longer describes the
    /// file it counts: a derived cache its reader ignores; `--repair` deletes it.
    BadCheckpoint,
    /// A file the task needs is missing (messages.jsonl of a task that has a context).
    MissingFile,
    /// A JSONL line holds NUL bytes (a write lost by the filesystem).
    NulBytes,
    /// tasks.db is damaged: SQLite's integrity check fails, the `tasks` table lacks a column,
    /// or the database cannot be written.
    DatabaseDamaged,
    /// A symbolic link in a task directory.
    Symlink,
    /// A FIFO, socket or device in a task directory (the host opens none; it holds no data).
    SpecialFile,
    /// A file or folder under `contexts/` that the group or others may access (ctxhost creates
    /// files 0600 and folders 0700).
    LooseMode,
    /// A file or folder could not be read.
    Unreadable,
    /// The bucket (`context_storage.remote`) holds no manifest of a task that ran, or one that
    /// does not parse ([`remote`]).
    RemoteManifest,
    /// An object a task's manifest names is missing from the bucket or has another size.
    RemoteObject,
    /// Objects of a task whose files `ctxhost cleanup` deleted are left in the bucket.
    RemoteLeftover,
    /// An object of a task that no manifest names (a sync that did not commit).
    RemoteUnreferenced,
    /// A task's git workspace cannot be rebuilt: the base commit of its workspace.json is not
    /// in the repository (a managed worktree's mirror, a user's checkout), or that checkout is
    /// gone.
    WorkspaceBase,
    /// A task's `changes.patch` does not apply to the base commit of its workspace.json
    /// (`git apply --check`).
    WorkspacePatch,
    /// This host's copy of a task no process runs is ahead of the bucket: files changed since
    /// the manifest this host last synced, which the bucket still holds (a sync that failed,
    /// e.g. the final one while the bucket could not be reached); `--repair` uploads it.
    RemoteBehind,
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    /// What kind of problem.
    pub kind: ProblemKind,
    /// The task, when the problem belongs to one.
    pub uuid: Option<String>,
    /// The file or directory.
    pub path: Option<String>,
    /// 1-based line of the file, when the problem is at a line.
    pub line: Option<u64>,
    /// What is wrong, for a human.
    pub message: String,
    /// `--repair` can fix it without losing data.
    pub fixable: bool,
    /// What `--repair` did about it (`None`: not repaired).
    pub repaired: Option<String>,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.path, self.line) {
            (Some(p), Some(l)) => write!(f, "{p}:{l}: {}", self.message),
            (Some(p), None) => write!(f, "{p}: {}", self.message),
            _ => match &self.uuid {
                Some(u) => write!(f, "task {u}: {}", self.message),
                None => f.write_str(&self.message),
            },
        }
    }
}

/// What `fsck` found and did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FsckReport {
    /// Rows checked.
    pub tasks: usize,
    /// Task directories checked.
    pub dirs: usize,
    /// Every problem found by the first pass (with `repaired` set by `--repair`).
    pub problems: Vec<Problem>,
    /// Problems still there at the end (after `--repair`, from a second pass).
    pub remaining: Vec<Problem>,
}
/// Check `layout` against `db`; with `repair`, fix what can be fixed (recovering a dead task
/// uses `max_crashes` and holds it with a lease of `lease`, as the worker does), then check
/// again.
pub fn fsck(
    db: &Db,
    layout: &Layout,
    repair: bool,
    max_crashes: u32,
    lease: std::time::Duration,
) -> anyhow::Result<FsckReport> {
    let sqlite_file = (db.dialect() == crate::db::Dialect::Sqlite)
        .then(|| layout.root().join(crate::db::DB_FILE));
    let damaged: Vec<Problem> = db
        .health()
        .into_iter()
        .map(|message| {
            let advice = match &sqlite_file {
                Some(_) => "With no ctxhost process running, keep a copy and rebuild it from what SQLite can \
                     still read, e.g. `sqlite3 tasks.db \".recover\" | sqlite3 tasks.rebuilt.db`, then put the \
                     rebuilt file in its place"
                    .to_string(),
                None => format!(
                    "Check the PostgreSQL database {} (its server's log, the role's rights)",
                    db.location()
                ),
            };
            problem(
                ProblemKind::DatabaseDamaged,
                None,
                sqlite_file.as_deref(),
                None,
                format!("{message}; `ctxhost submit` and the worker fail on it. {advice}"),
                false,
            )
        })
        .collect();
    let mut first = match tree::check(db, layout) {
        Ok(mut pass) => {
            pass.problems.splice(0..0, damaged);
            pass
        }
        // The rows cannot even be listed: report the database and stop there.
        Err(e) if !damaged.is_empty() => {
            tracing::debug!("listing the tasks failed: {e:#}");
            return Ok(FsckReport {
                tasks: 0,
                dirs: 0,
                problems: damaged.clone(),
                remaining: damaged,
            });
        }
        Err(e) => return Err(e),
    };
    if !repair {
        let remaining = first.problems.clone();
        return Ok(FsckReport {
            tasks: first.tasks,
            dirs: first.dirs,
            problems: first.problems,
            remaining,
        });
    }
    let mut by_task: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, p) in first.problems.iter_mut().enumerate() {
        if !p.fixable {
            continue;
        }
        match &p.uuid {
            Some(u) => by_task.entry(u.clone()).or_default().push(i),
            // Outside any task directory only modes are fixed.
            None if p.kind == ProblemKind::LooseMode => {
                if let Some(path) = &p.path {
                    p.repaired = Some(match fixes::tighten(Path::new(path)) {
                        Ok(what) => what,
                        Err(e) => {
                            p.message.push_str(&format!(" (repair failed: {e:#})"));
                            continue;
                        }
                    });
                }
            }
            None => {}
        }
    }
    for (uuid, indexes) in by_task {
        let outcome = fixes::repair_task(
            db,
            layout,
            &uuid,
            &indexes,
            &first.problems,
            max_crashes,
            lease,
        );
        for i in indexes {
            first.problems[i].repaired = Some(match &outcome {
                Ok(what) => what.clone(),
                Err(e) => {
                    first.problems[i]
                        .message
                        .push_str(&format!(" (repair failed: {e:#})"));
                    continue;
                }
            });
        }
    }
    let mut second = tree::check(db, layout)?;
    let still: Vec<Problem> = first
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::DatabaseDamaged)
        .cloned()
        .collect();
    second.problems.splice(0..0, still);
    Ok(FsckReport {
        tasks: first.tasks,
        dirs: first.dirs,
        problems: first.problems,
        remaining: second.problems,
    })
}

/// How `fsck` judges the files of a task with `status` that no process uses: whether tool calls
/// waiting at the end of current.jsonl are allowed (`allow_pending`: every status but
/// `completed`, whose process made or gave up every call) and whether request/response bodies
/// are kept for debugging rather than reported as temporaries (`keep_debug`: `failed` only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileRules {
    /// Unanswered tool calls may end current.jsonl (the task makes them when it continues).
    pub allow_pending: bool,
    /// request.json / response.json of a failed LLM call are kept, not reported.
    pub keep_debug: bool,
    /// messages.jsonl must be there: a paused or completed task wrote its history (a failed
    /// one may have failed before its first line).
    pub needs_history: bool,
}

impl FileRules {
    /// The rules for a task with `status` (the same for the tree pass of `ctxhost fsck` and
    /// for [`check_task_dir`]).
    pub fn for_status(status: Status) -> FileRules {
        FileRules {
            allow_pending: status != Status::Completed,
            keep_debug: status == Status::Failed,
            needs_history: matches!(status, Status::Paused | Status::Completed),
        }
    }

    /// The rules for a directory with no row: nothing is known of its task.
    pub fn lenient() -> FileRules {
        FileRules {
            allow_pending: true,
            keep_debug: true,
            needs_history: false,
        }
    }
}

/// The problems of one task directory's files, as `ctxhost fsck` reports them for a task with
/// `status` that no process uses (read-only, [`FileRules::for_status`]): what `ctxhost retry`
/// and `ctxhost resume` require to be empty before they queue the task
/// ([`crate::ops::control::require_sound_files`]).
pub fn check_task_dir(dir: &Path, uuid: &str, status: Status) -> Vec<Problem> {
    let rules = FileRules::for_status(status);
    let mut problems = Vec::new();
    files::check_dir(dir, Some(uuid), false, &rules, &mut problems);
    problems
}

/// One read-only pass.
pub(crate) struct Pass {
    pub(crate) tasks: usize,
    pub(crate) dirs: usize,
    pub(crate) problems: Vec<Problem>,
}

pub(crate) fn problem(
    kind: ProblemKind,
    uuid: Option<&str>,
    path: Option<&Path>,
    line: Option<u64>,
    message: impl Into<String>,
    fixable: bool,
) -> Problem {
    // A message may quote what a component wrote (a line, an id): bounded and escaped.
    let message = message.into();
    let message = crate::untrusted::text(&message, crate::untrusted::MAX_ERROR_BYTES).into_owned();
    Problem {
        kind,
        uuid: uuid.map(str::to_string),
        path: path.map(|p| p.display().to_string()),
        line,
        message,
        fixable,
        repaired: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{TestStore, store_tests};
    use crate::db::{NewTask, TaskKey};
    use crate::layout::DirState;
    use crate::lifecycle::{Claim, Owner, Transition, apply};
    use ctxhost_format::files::{CURRENT, MESSAGES};
    use ctxhost_format::{ChatMessage, HistoryLine, ToolCall};
    use std::path::PathBuf;

    /// `std::fs`, with files and folders made owner-only as ctxhost makes them.
    mod fs {
        pub use std::fs::*;
        use std::os::unix::fs::PermissionsExt;
        use std::path::Path;

        pub fn write(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
            std::fs::write(&path, bytes)?;
            std::fs::set_permissions(path, Permissions::from_mode(0o600))
        }

        pub fn create_dir_all(path: impl AsRef<Path>) -> std::io::Result<()> {
            std::fs::create_dir_all(&path)?;
            std::fs::set_permissions(path, Permissions::from_mode(0o700))
        }
    }

    const A: &str = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a01";
    const LEASE: std::time::Duration = std::time::Duration::from_secs(30);

    fn history_line(seq: u64, m: &ChatMessage) -> String {
        serde_json::to_string(&HistoryLine {
            seq,
            role: m.role.clone(),
            content: m.content.clone(),
            timestamp: "2025-01-01T00:00:00.000Z".into(),
            tokens: 1,
            tool_name: m.tool_name.clone(),
            tool_calls: m.tool_calls.clone(),
            tool_call_id: m.tool_call_id.clone(),
            is_error: m.is_error,
            reasoning: m.reasoning.clone(),
            summary_id: None,
        })
        .unwrap()
    }

    /// A completed task with a sound directory in completed/.
    fn completed_task(layout: &Layout, db: &Db, uuid: &str) -> PathBuf {
        db.insert_queued(&NewTask {
            uuid: uuid.into(),
            key: TaskKey {
                task_source: "local".into(),
                ..Default::default()
            },
            prompt: "go".into(),
            user: None,
            llm_provider: "openai".into(),
            model: "m".into(),
            context_length: 1,
            no_inherit: false,
            workspace: None,
        })
        .unwrap();
        let mut claim = Claim::test(1);
        claim.hostname = "elsewhere".into();
        apply(db, layout, uuid, &Transition::Claim(&claim)).unwrap();
        let t = Transition::Finish {
            owner: Owner::test(1),
            status: Status::Completed,
            error: None,
        };
        apply(db, layout, uuid, &t).unwrap();
        let dir = layout.task_dir(DirState::Completed, uuid);
        let msgs = [
            ChatMessage::text("system", "s"),
            ChatMessage::text("user", "go"),
            ChatMessage {
                role: "assistant".into(),
                tool_calls: Some(vec![ToolCall::new("c1", "read", "{}")]),
                ..Default::default()
            },
            ChatMessage {
                role: "tool".into(),
                content: Some("ok".into()),
                tool_call_id: Some("c1".into()),
                ..Default::default()
            },
            ChatMessage::text("assistant", "done"),
        ];
        let h: String = msgs
            .iter()
            .enumerate()
            .map(|(i, m)| history_line(i as u64 + 1, m) + "\n")
            .collect();
        let c: String = msgs
            .iter()
            .map(|m| serde_json::to_string(m).unwrap() + "\n")
            .collect();
        fs::write(dir.join(MESSAGES), h).unwrap();
        fs::write(dir.join(CURRENT), c).unwrap();
        dir
    }

    fn setup(store: &TestStore) -> (Layout, Db) {
        let layout = Layout::new(store.contexts());
        layout.ensure().unwrap();
        (layout, store.open())
    }

    store_tests! {
        fn a_sound_tree_has_no_problem(store: &TestStore) {
            let (layout, db) = setup(store);
            completed_task(&layout, &db, A);
            let r = fsck(&db, &layout, false, 3, LEASE).unwrap();
            assert_eq!((r.tasks, r.dirs), (1, 1));
            assert!(r.problems.is_empty(), "{:#?}", r.problems);
        }

        fn each_fault_is_named_with_file_and_line_and_the_fixable_ones_repaired(store: &TestStore) {
            let (layout, db) = setup(store);
            let dir = completed_task(&layout, &db, A);
            // Torn last line of messages.jsonl, a temporary, a seq gap is planted in a second task.
            let mut m = fs::read_to_string(dir.join(MESSAGES)).unwrap();
            m.push_str("{\"seq\":6,\"ro");
            fs::write(dir.join(MESSAGES), &m).unwrap();
            fs::write(dir.join("response.json"), "{}").unwrap();
            fs::write(layout.state_dir(DirState::Paused).join("notes.txt"), "x").unwrap();
            let r = fsck(&db, &layout, false, 3, LEASE).unwrap();
            let kinds: Vec<ProblemKind> = r.problems.iter().map(|p| p.kind).collect();
            assert_eq!(
                kinds,
                [
                    ProblemKind::NotATaskDir,
                    ProblemKind::TemporaryFile,
                    ProblemKind::TornLine
                ],
                "{:#?}",
                r.problems
            );
            let torn = &r.problems[2];
            assert_eq!(torn.line, Some(6));
            assert!(
                torn.to_string()
                    .contains("messages.jsonl:6: torn last line"),
                "{torn}"
            );
            let r = fsck(&db, &layout, true, 3, LEASE).unwrap();
            assert!(r.problems[1].repaired.is_some() && r.problems[2].repaired.is_some());
            assert_eq!(r.remaining.len(), 1, "{:#?}", r.remaining);
            assert_eq!(r.remaining[0].kind, ProblemKind::NotATaskDir);
            assert!(dir.join("messages.jsonl.torn").exists());
        }

        fn seq_gaps_orphans_and_mismatches(store: &TestStore) {
            let (layout, db) = setup(store);
            let dir = completed_task(&layout, &db, A);
            // Seq gap: drop line 2 of messages.jsonl.
            let m = fs::read_to_string(dir.join(MESSAGES)).unwrap();
            let lines: Vec<&str> = m.lines().collect();
            let gap: String = [lines[0], lines[2], lines[3], lines[4]]
                .iter()
                .map(|l| format!("{l}\n"))
                .collect();
            fs::write(dir.join(MESSAGES), gap).unwrap();
            // Orphan tool result in current.jsonl at line 3.
            let c = fs::read_to_string(dir.join(CURRENT)).unwrap();
            let mut cl: Vec<String> = c.lines().map(str::to_string).collect();
            let orphan = ChatMessage {
                role: "tool".into(),
                content: Some("?".into()),
                tool_call_id: Some("nobody".into()),
                ..Default::default()
            };
            cl.insert(2, serde_json::to_string(&orphan).unwrap());
            fs::write(dir.join(CURRENT), cl.join("\n") + "\n").unwrap();
            // A finish interrupted between its row and its directory: the completed task's
            // directory still in running/.
            fs::rename(
                layout.task_dir(DirState::Completed, A),
                layout.task_dir(DirState::Running, A),
            )
            .unwrap();
            let r = fsck(&db, &layout, false, 3, LEASE).unwrap();
            let got: Vec<(ProblemKind, Option<u64>)> =
                r.problems.iter().map(|p| (p.kind, p.line)).collect();
            assert_eq!(
                got,
                [
                    (ProblemKind::InterruptedTransition, None),
                    (ProblemKind::ContextInvariant, Some(3)),
                    (ProblemKind::SeqGap, Some(2)),
                ],
                "{:#?}",
                r.problems
            );
            let r = fsck(&db, &layout, true, 3, LEASE).unwrap();
            assert!(r.problems[0].repaired.is_some());
            assert!(layout.task_dir(DirState::Completed, A).is_dir());
            // The orphan result is dropped from current.jsonl (and the repair noted in
            // messages.jsonl); the seq gap needs a human.
            assert!(r.problems[1].repaired.is_some(), "{:#?}", r.problems[1]);
            let left: Vec<ProblemKind> = r.remaining.iter().map(|p| p.kind).collect();
            assert_eq!(left, [ProblemKind::SeqGap]);
        }

        fn llm_calls_lines_are_checked(store: &TestStore) {
            let (layout, db) = setup(store);
            let dir = completed_task(&layout, &db, A);
            let log = crate::task::CallLog::new(&crate::task_dir::TaskDir::open(&dir).unwrap());
            log.record_compression(900, 300, Some(1), "2026-01-01T00:00:00.000Z");
            let r = fsck(&db, &layout, false, 3, LEASE).unwrap();
            assert!(r.problems.is_empty(), "{:#?}", r.problems);
            let mut text = fs::read_to_string(log.path()).unwrap();
            text.push_str("{\"type\":\"call\",\"n\":\"x\"}\n");
            fs::write(log.path(), text).unwrap();
            log.record_compression(800, 200, Some(2), "2026-01-01T00:00:01.000Z");
            let r = fsck(&db, &layout, false, 3, LEASE).unwrap();
            let got: Vec<(ProblemKind, Option<u64>)> =
                r.problems.iter().map(|p| (p.kind, p.line)).collect();
            // JSON that is not a call line: named against its schema (not re-reported as a bad
            // line).
            assert_eq!(
                got,
                [(ProblemKind::SchemaMismatch, Some(2))],
                "{:#?}",
                r.problems
            );
            assert!(
                r.problems[0]
                    .message
                    .starts_with("does not match docs/schemas/llm_calls.schema.json as a call line: "),
                "{}",
                r.problems[0].message
            );
            // A line that is not JSON at all is a bad line.
            let mut text = fs::read_to_string(log.path()).unwrap();
            text.push_str("not json\n");
            fs::write(log.path(), text).unwrap();
            log.record_compression(700, 100, Some(3), "2026-01-01T00:00:02.000Z");
            let r = fsck(&db, &layout, false, 3, LEASE).unwrap();
            let got: Vec<(ProblemKind, Option<u64>)> =
                r.problems.iter().map(|p| (p.kind, p.line)).collect();
            assert_eq!(
                got,
                [
                    (ProblemKind::SchemaMismatch, Some(2)),
                    (ProblemKind::BadLine, Some(4))
                ],
                "{:#?}",
                r.problems
            );
        }

        fn another_hosts_task_with_an_expired_lease_is_found_and_recovered(store: &TestStore) {
            let (layout, db) = setup(store);
            db.insert_queued(&NewTask {
                uuid: A.into(),
                key: TaskKey {
                    task_source: "local".into(),
                    ..Default::default()
                },
                prompt: "go".into(),
                user: None,
                llm_provider: "openai".into(),
                model: "m".into(),
                context_length: 1,
                no_inherit: false,
                workspace: None,
            })
            .unwrap();
            let mut claim = Claim::test(std::process::id());
            claim.hostname = "other-host".into();
            claim.lease = std::time::Duration::from_millis(200);
            apply(&db, &layout, A, &Transition::Claim(&claim)).unwrap();
            // Its lease is good: another host's task is alive, whatever its pid here.
            assert!(fsck(&db, &layout, false, 3, LEASE).unwrap().problems.is_empty());
            std::thread::sleep(std::time::Duration::from_millis(300));
            let r = fsck(&db, &layout, false, 3, LEASE).unwrap();
            assert_eq!(r.problems.len(), 1, "{:#?}", r.problems);
            let p = &r.problems[0];
            assert_eq!((p.kind, p.fixable), (ProblemKind::ExpiredLease, true));
            assert!(p.message.contains("lease expired") && p.message.contains("other-host"), "{p}");
            let r = fsck(&db, &layout, true, 3, LEASE).unwrap();
            assert!(r.problems[0].repaired.as_deref().unwrap_or("").starts_with("recovered"), "{:#?}", r.problems);
            assert!(r.remaining.is_empty(), "{:#?}", r.remaining);
            let row = db.get(A).unwrap().unwrap();
            assert_eq!((row.status, row.crash_count), (Status::Queued, 1));
            assert!(layout.task_dir(DirState::Paused, A).is_dir());
        }

        fn dirs_without_rows_and_missing_dirs_are_reported(store: &TestStore) {
            let (layout, db) = setup(store);
            completed_task(&layout, &db, A);
            fs::remove_dir_all(layout.task_dir(DirState::Completed, A)).unwrap();
            let stray = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a02";
            fs::create_dir_all(layout.task_dir(DirState::Paused, stray)).unwrap();
            let r = fsck(&db, &layout, true, 3, LEASE).unwrap();
            let kinds: Vec<ProblemKind> = r.remaining.iter().map(|p| p.kind).collect();
            assert_eq!(kinds, [ProblemKind::MissingDir, ProblemKind::DirWithoutRow]);
            // Once cleanup marked it, a missing directory is expected.
            crate::lifecycle::row::mark_files_deleted(&db, A).unwrap();
            let r = fsck(&db, &layout, false, 3, LEASE).unwrap();
            assert_eq!(r.problems.len(), 1);
        }
    }
}
