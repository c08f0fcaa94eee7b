//! `ctxhost fsck`: check that tasks.db and the `contexts/` tree agree and that every task
//! directory's files are sound; with `--repair`, fix what can be fixed without losing data.
//!
//! Checks:
//! - every row's status agrees with where its directory is: `queued` → none yet or `paused/`
//!   (a resumed or recovered task waiting for its process), `running` → `running/` (a task
//!   whose process is gone is reported), `paused` → `paused/`, `completed`/`failed`/`stopped`
//!   → `completed/` (none when `ctxhost cleanup` deleted it, or the task never started);
//!   a directory in two places; a directory with no row; an entry that is not a task directory;
//! - in each task directory: metadata.json and task_state.json parse; every line of every JSONL
//!   file parses as its format (messages.jsonl → history lines, current.jsonl → chat messages,
//!   summaries.jsonl, tools.jsonl; others as JSON objects), the last line included (a torn
//!   last line is reported); messages.jsonl seq runs 1..n without gaps or duplicates;
//!   current.jsonl keeps the context invariants ([`crate::invariants`]; unanswered tool calls at
//!   its end are allowed except for a completed task: a paused task makes them when resumed)
//!   and is not behind messages.jsonl; no step temporaries are left (a failed task may keep its
//!   request/response for debugging); summary ids are JSON numbers (the old string form
//!   `"sum-N"` of ctxhost 0.1 is reported).
//!
//! A task whose process is alive is checked read-only and its last line is not judged (it may
//! be being written). Every problem names the file and, where there is one, the line.
//!
//! `--repair` fixes: a running task whose process is gone (crash recovery, as the worker does:
//! repaired, requeued or failed); a directory in the wrong state folder for a task that no
//! process runs (moved to agree with the status); torn last lines (cut, the bytes kept in
//! `<file>.torn`; a complete line only missing its newline gets it); current.jsonl behind
//! messages.jsonl (the missing lines appended); leftover temporaries (deleted); string summary
//! ids (rewritten as numbers, [`crate::summary_ids::rewrite`]). Everything
//! else (a bad line in the middle, a seq gap, an orphan tool result, a missing directory) is
//! reported for a human. After repairing, the tree is checked again and what remains is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use ctxhost_format::{ChatMessage, HistoryLine, SummaryLine, ToolLine};
use serde::Serialize;

use crate::cleanup::DELETING_PREFIX;
use crate::db::{Db, Status, TaskRow};
use crate::invariants::{ContextChecker, Violation};
use crate::layout::{DirState, Layout, Metadata, hostname, parse_uuid};
use crate::recovery::{process_runs_task, recover_task};
use crate::repair::{
    CURRENT_FILE, DEBUG_FILES, MESSAGES_FILE, fix_torn_tail, is_temporary, jsonl_files,
    reconcile_current, remove_temporaries,
};
use crate::summary_ids::{self, OldId, split_old_id};

/// What kind of problem (`kebab-case` in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemKind {
    /// A `running` task whose process is gone (this host).
    DeadProcess,
    /// The directory is in the wrong state folder for the status.
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
    /// A summary id written as a string (`"sum-3"`, ctxhost 0.1 / WIT 0.1.0) where the spec
    /// has a number.
    OldSummaryId,
    /// metadata.json or task_state.json does not parse.
    BadFile,
    /// A file or folder could not be read.
    Unreadable,
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    pub kind: ProblemKind,
    /// The task, when the problem belongs to one.
    pub uuid: Option<String>,
    /// The file or directory.
    pub path: Option<String>,
    /// 1-based line of the file, when the problem is at a line.
    pub line: Option<u64>,
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
/// uses `max_crashes`, as the worker does), then check again.
pub fn fsck(
    db: &Db,
    layout: &Layout,
    repair: bool,
    max_crashes: u32,
) -> anyhow::Result<FsckReport> {
    let mut first = check(db, layout)?;
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
    for (i, p) in first.problems.iter().enumerate() {
        if p.fixable
            && let Some(u) = &p.uuid
        {
            by_task.entry(u.clone()).or_default().push(i);
        }
    }
    for (uuid, indexes) in by_task {
        let outcome = repair_task(db, layout, &uuid, &indexes, &first.problems, max_crashes);
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
    let second = check(db, layout)?;
    Ok(FsckReport {
        tasks: first.tasks,
        dirs: first.dirs,
        problems: first.problems,
        remaining: second.problems,
    })
}

/// Repair the fixable problems `indexes` of task `uuid`; returns what was done.
fn repair_task(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    indexes: &[usize],
    problems: &[Problem],
    max_crashes: u32,
) -> anyhow::Result<String> {
    let kinds: BTreeSet<ProblemKind> = indexes.iter().map(|i| problems[*i].kind).collect();
    let row = db.get(uuid)?;
    if kinds.contains(&ProblemKind::DeadProcess)
        && let Some(row) = &row
    {
        let cause = format!(
            "task process {} is gone (found by ctxhost fsck)",
            row.process_id
                .map(|p| p.to_string())
                .unwrap_or_else(|| "?".into())
        );
        return Ok(
            match recover_task(db, layout, uuid, row.process_id, &cause, max_crashes)? {
                Some(r) => format!("recovered: {}", r.message),
                None => "the task changed meanwhile; nothing done".to_string(),
            },
        );
    }
    let mut done = Vec::new();
    if kinds.contains(&ProblemKind::DirMismatch)
        && let Some(row) = &row
    {
        // Read again: only a task that no process runs is moved.
        let target = expected_state(row.status);
        if let (Some(target), Some((from, _))) = (target, layout.find_task_dir(uuid))
            && row.status != Status::Running
            && from != target
        {
            layout.move_task_dir(uuid, from, target)?;
            done.push(format!("moved the directory from {from}/ to {target}/"));
        }
    }
    let file_kinds = [
        ProblemKind::TornLine,
        ProblemKind::TemporaryFile,
        ProblemKind::CurrentBehind,
    ];
    if file_kinds.iter().any(|k| kinds.contains(k))
        && let Some((_, dir)) = layout.find_task_dir(uuid)
    {
        let keep_debug = row.as_ref().is_some_and(|r| r.status == Status::Failed);
        let removed = remove_temporaries(&dir, keep_debug)?;
        if !removed.is_empty() {
            done.push(format!("deleted {}", removed.join(", ")));
        }
        for file in jsonl_files(&dir)? {
            if let Some(fix) = fix_torn_tail(&file, true)? {
                done.push(fix.to_string());
            }
        }
        let appended = reconcile_current(&dir, true)?;
        if !appended.is_empty() {
            done.push(format!("appended seq {appended:?} to {CURRENT_FILE}"));
        }
    }
    if kinds.contains(&ProblemKind::OldSummaryId)
        && let Some((_, dir)) = layout.find_task_dir(uuid)
    {
        done.push(summary_ids::rewrite(&dir)?.to_string());
    }
    Ok(if done.is_empty() {
        "nothing left to do".to_string()
    } else {
        done.join("; ")
    })
}

/// Where a task with `status` keeps its directory when no process runs it.
fn expected_state(status: Status) -> Option<DirState> {
    match status {
        Status::Queued | Status::Paused => Some(DirState::Paused),
        Status::Running => None,
        Status::Completed | Status::Failed | Status::Stopped => Some(DirState::Completed),
    }
}

/// One read-only pass.
struct Pass {
    tasks: usize,
    dirs: usize,
    problems: Vec<Problem>,
}

fn problem(
    kind: ProblemKind,
    uuid: Option<&str>,
    path: Option<&Path>,
    line: Option<u64>,
    message: impl Into<String>,
    fixable: bool,
) -> Problem {
    Problem {
        kind,
        uuid: uuid.map(str::to_string),
        path: path.map(|p| p.display().to_string()),
        line,
        message: message.into(),
        fixable,
        repaired: None,
    }
}

fn check(db: &Db, layout: &Layout) -> anyhow::Result<Pass> {
    let host = hostname();
    let rows: Vec<TaskRow> = db.list(&Default::default())?;
    let mut problems = Vec::new();

    // Where each task directory is.
    let mut found: BTreeMap<String, Vec<DirState>> = BTreeMap::new();
    for state in DirState::ALL {
        let folder = layout.state_dir(state);
        let entries = match fs::read_dir(&folder) {
            Ok(e) => e,
            Err(e) => {
                problems.push(problem(
                    ProblemKind::Unreadable,
                    None,
                    Some(&folder),
                    None,
                    format!("cannot list: {e}"),
                    false,
                ));
                continue;
            }
        };
        let mut names: Vec<(String, PathBuf)> = entries
            .flatten()
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .collect();
        names.sort();
        for (name, path) in names {
            if state == DirState::Completed && name.starts_with(DELETING_PREFIX) {
                problems.push(problem(
                    ProblemKind::InterruptedCleanup,
                    None,
                    Some(&path),
                    None,
                    "left by an interrupted `ctxhost cleanup`; run it again to finish deleting it",
                    false,
                ));
            } else if parse_uuid(&name).ok().as_deref() == Some(name.as_str()) && path.is_dir() {
                found.entry(name).or_default().push(state);
            } else {
                problems.push(problem(
                    ProblemKind::NotATaskDir,
                    None,
                    Some(&path),
                    None,
                    "not a task directory (task directories are named by their UUID)",
                    false,
                ));
            }
        }
    }
    let dirs = found.values().map(Vec::len).sum();

    let mut with_row = BTreeSet::new();
    for row in &rows {
        let uuid = row.uuid.as_str();
        with_row.insert(uuid.to_string());
        let states = found.get(uuid).cloned().unwrap_or_default();
        let on_this_host = row.hostname.as_deref() == Some(host.as_str());
        let alive = row.status == Status::Running
            && (!on_this_host || row.process_id.is_some_and(|p| process_runs_task(p, uuid)));
        if row.status == Status::Running && !alive {
            problems.push(problem(
                ProblemKind::DeadProcess,
                Some(uuid),
                None,
                None,
                format!(
                    "running, but its process {} on {host} is gone (the worker or `ctxhost recover` repairs and requeues it)",
                    row.process_id.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
                ),
                true,
            ));
        }
        if states.len() > 1 {
            let list: Vec<String> = states.iter().map(|s| format!("{s}/")).collect();
            problems.push(problem(
                ProblemKind::DuplicateDir,
                Some(uuid),
                None,
                None,
                format!(
                    "has a directory in more than one place: {}",
                    list.join(", ")
                ),
                false,
            ));
            continue;
        }
        let here = states.first().copied();
        let expected = expected_state(row.status);
        match (row.status, here, expected) {
            // A running task: its process owns the directory (it may not have created it yet,
            // or be moving it to paused/).
            (Status::Running, Some(DirState::Completed), _) if alive => problems.push(problem(
                ProblemKind::DirMismatch,
                Some(uuid),
                Some(&layout.task_dir(DirState::Completed, uuid)),
                None,
                "status running but the directory is in completed/",
                false,
            )),
            (Status::Running, _, _) => {}
            (Status::Queued, None, _) => {}
            (status, None, _) => {
                let gone_by_design = row.files_deleted_at.is_some()
                    || (status.is_final() && row.started_at.is_none());
                if !gone_by_design {
                    problems.push(problem(
                        ProblemKind::MissingDir,
                        Some(uuid),
                        None,
                        None,
                        format!(
                            "status {status} but its directory is missing (expected {}/)",
                            expected.map(|s| s.dir_name()).unwrap_or("?")
                        ),
                        false,
                    ));
                }
            }
            (status, Some(at), Some(want)) if at != want => problems.push(problem(
                ProblemKind::DirMismatch,
                Some(uuid),
                Some(&layout.task_dir(at, uuid)),
                None,
                format!("status {status} but the directory is in {at}/ (expected {want}/)"),
                true,
            )),
            _ => {}
        }
        if let Some(state) = here {
            let dir = layout.task_dir(state, uuid);
            check_dir(
                &dir,
                Some(uuid),
                alive,
                row.status != Status::Completed,
                row.status == Status::Failed,
                &mut problems,
            );
        }
    }
    for (uuid, states) in &found {
        if with_row.contains(uuid) {
            continue;
        }
        for state in states {
            let dir = layout.task_dir(*state, uuid);
            problems.push(problem(
                ProblemKind::DirWithoutRow,
                Some(uuid),
                Some(&dir),
                None,
                format!("no row in {}", db.path().display()),
                false,
            ));
            check_dir(&dir, Some(uuid), false, true, true, &mut problems);
        }
    }
    Ok(Pass {
        tasks: rows.len(),
        dirs,
        problems,
    })
}

/// The format a JSONL file's lines must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineFormat {
    History,
    Context,
    Summary,
    Tool,
    Object,
}

fn format_of(path: &Path) -> LineFormat {
    match path.file_name().and_then(|n| n.to_str()) {
        Some(MESSAGES_FILE) => LineFormat::History,
        Some(CURRENT_FILE) => LineFormat::Context,
        Some("summaries.jsonl") => LineFormat::Summary,
        Some("tools.jsonl") => LineFormat::Tool,
        _ => LineFormat::Object,
    }
}

/// Check the files of one task directory. `live`: a process is using it (read-only, the last
/// line is not judged); `allow_pending`: unanswered tool calls may end current.jsonl;
/// `keep_debug`: request/response bodies are not temporaries (a failed task).
fn check_dir(
    dir: &Path,
    uuid: Option<&str>,
    live: bool,
    allow_pending: bool,
    keep_debug: bool,
    problems: &mut Vec<Problem>,
) {
    for (name, parse) in [
        (
            crate::layout::METADATA_FILE,
            (|b: &[u8]| serde_json::from_slice::<Metadata>(b).map(|_| ()))
                as fn(&[u8]) -> serde_json::Result<()>,
        ),
        (crate::task_state::TASK_STATE_FILE, |b: &[u8]| {
            serde_json::from_slice::<crate::task_state::TaskState>(b).map(|_| ())
        }),
    ] {
        let path = dir.join(name);
        if let Ok(bytes) = fs::read(&path)
            && let Err(e) = parse(&bytes)
            && !live
        {
            problems.push(problem(
                ProblemKind::BadFile,
                uuid,
                Some(&path),
                None,
                format!("does not parse: {e}"),
                false,
            ));
        }
    }
    if !live && let Ok(entries) = fs::read_dir(dir) {
        let mut names: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| is_temporary(n) && !(keep_debug && DEBUG_FILES.contains(&n.as_str())))
            .collect();
        names.sort();
        for n in names {
            problems.push(problem(
                ProblemKind::TemporaryFile,
                uuid,
                Some(&dir.join(&n)),
                None,
                "a step's temporary file left behind",
                true,
            ));
        }
    }
    let files = match jsonl_files(dir) {
        Ok(f) => f,
        Err(e) => {
            problems.push(problem(
                ProblemKind::Unreadable,
                uuid,
                Some(dir),
                None,
                format!("{e:#}"),
                false,
            ));
            return;
        }
    };
    let mut clean = BTreeSet::new();
    for file in &files {
        if check_jsonl(file, uuid, live, allow_pending, problems) {
            clean.insert(
                file.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    // Only two sound files can be matched up.
    if !live && clean.contains(MESSAGES_FILE) && clean.contains(CURRENT_FILE) {
        match reconcile_current(dir, false) {
            Ok(missing) if !missing.is_empty() => problems.push(problem(
                ProblemKind::CurrentBehind,
                uuid,
                Some(&dir.join(CURRENT_FILE)),
                None,
                format!("lacks the last line(s) of {MESSAGES_FILE}: seq {missing:?}"),
                true,
            )),
            Ok(_) => {}
            Err(e) => problems.push(problem(
                ProblemKind::Unreconcilable,
                uuid,
                Some(&dir.join(CURRENT_FILE)),
                None,
                format!("{e:#}"),
                false,
            )),
        }
    }
}

/// Check every line of one JSONL file; returns whether it has no line problem.
fn check_jsonl(
    path: &Path,
    uuid: Option<&str>,
    live: bool,
    allow_pending: bool,
    problems: &mut Vec<Problem>,
) -> bool {
    let before = problems.len();
    let format = format_of(path);
    let mut reader = match File::open(path) {
        Ok(f) => BufReader::new(f),
        Err(e) => {
            problems.push(problem(
                ProblemKind::Unreadable,
                uuid,
                Some(path),
                None,
                format!("cannot open: {e}"),
                false,
            ));
            return false;
        }
    };
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut offset = 0u64;
    let mut expected_seq = 1u64;
    let mut checker = (format == LineFormat::Context).then(ContextChecker::new);
    let mut messages = 0u64;
    loop {
        buf.clear();
        let n = match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                problems.push(problem(
                    ProblemKind::Unreadable,
                    uuid,
                    Some(path),
                    Some(line_no + 1),
                    format!("cannot read: {e}"),
                    false,
                ));
                return false;
            }
        };
        line_no += 1;
        let start = offset;
        offset += n as u64;
        let terminated = buf.last() == Some(&b'\n');
        let is_last = reader.fill_buf().map(|b| b.is_empty()).unwrap_or(true);
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            if !terminated && !live {
                problems.push(problem(
                    ProblemKind::TornLine,
                    uuid,
                    Some(path),
                    Some(line_no),
                    format!("torn last line ({n} bytes at byte offset {start}, no newline)"),
                    true,
                ));
            }
            continue;
        }
        let parsed = parse_line(format, text);
        match parsed {
            Err(e) if is_last && live && !terminated => {
                // Being written by the task's process.
                let _ = e;
                break;
            }
            Err(e) if is_last => {
                problems.push(problem(
                    ProblemKind::TornLine,
                    uuid,
                    Some(path),
                    Some(line_no),
                    format!("torn last line ({n} bytes at byte offset {start}): {e}"),
                    true,
                ));
                break;
            }
            Err(e) => {
                problems.push(problem(
                    ProblemKind::BadLine,
                    uuid,
                    Some(path),
                    Some(line_no),
                    format!("not a valid line: {e}"),
                    false,
                ));
                // Later seq / invariant findings would only repeat this one.
                checker = None;
                expected_seq = 0;
                continue;
            }
            Ok(parsed) => {
                if !terminated && !live {
                    problems.push(problem(
                        ProblemKind::TornLine,
                        uuid,
                        Some(path),
                        Some(line_no),
                        "the last line lacks its newline".to_string(),
                        true,
                    ));
                }
                let old_id = match &parsed {
                    Parsed::History(_, old) => old.as_ref().map(|o| o.describe("summary_id")),
                    Parsed::Summary(old) => old.as_ref().map(|o| o.describe("id")),
                    _ => None,
                };
                if let Some(message) = old_id {
                    problems.push(problem(
                        ProblemKind::OldSummaryId,
                        uuid,
                        Some(path),
                        Some(line_no),
                        message,
                        !live,
                    ));
                }
                match parsed {
                    Parsed::History(seq, _) if expected_seq != 0 => {
                        if seq != expected_seq {
                            let what = if seq < expected_seq {
                                "repeated or out of order"
                            } else {
                                "a gap"
                            };
                            problems.push(problem(
                                ProblemKind::SeqGap,
                                uuid,
                                Some(path),
                                Some(line_no),
                                format!("seq {seq} where {expected_seq} was expected ({what}; seq runs 1..n)"),
                                false,
                            ));
                        }
                        expected_seq = seq + 1;
                    }
                    Parsed::Message(m) => {
                        messages += 1;
                        if let Some(c) = checker.as_mut()
                            && let Err(v) = c.push(&m)
                        {
                            problems.push(problem(
                                ProblemKind::ContextInvariant,
                                uuid,
                                Some(path),
                                Some(line_no),
                                v.to_string(),
                                false,
                            ));
                            checker = None;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    if let Some(c) = checker
        && messages > 0
    {
        match c.finish(allow_pending || live) {
            Ok(_) | Err(Violation::Empty) => {}
            Err(v) => problems.push(problem(
                ProblemKind::ContextInvariant,
                uuid,
                Some(path),
                None,
                format!("at the end: {v}"),
                false,
            )),
        }
    }
    problems.len() == before
}

enum Parsed {
    /// A history line: its seq, and its `summary_id` if written in an old string form.
    History(u64, Option<OldId>),
    Message(ChatMessage),
    /// A summaries.jsonl line, with its `id` if written in an old string form.
    Summary(Option<OldId>),
    Other,
}

fn parse_line(format: LineFormat, text: &str) -> Result<Parsed, String> {
    let e = |e: serde_json::Error| e.to_string();
    Ok(match format {
        // Only summary lines carry a `summary_id`: the others take the direct path.
        LineFormat::History if text.contains("\"summary_id\"") => {
            let (value, old) = split_old_id(text, "summary_id").map_err(e)?;
            let line: HistoryLine = serde_json::from_value(value).map_err(e)?;
            Parsed::History(line.seq, old)
        }
        LineFormat::History => Parsed::History(
            serde_json::from_str::<HistoryLine>(text).map_err(e)?.seq,
            None,
        ),
        LineFormat::Context => {
            Parsed::Message(serde_json::from_str::<ChatMessage>(text).map_err(e)?)
        }
        LineFormat::Summary => {
            let (value, old) = split_old_id(text, "id").map_err(e)?;
            serde_json::from_value::<SummaryLine>(value).map_err(e)?;
            Parsed::Summary(old)
        }
        LineFormat::Tool => {
            serde_json::from_str::<ToolLine>(text).map_err(e)?;
            Parsed::Other
        }
        LineFormat::Object => {
            let v: serde_json::Value = serde_json::from_str(text).map_err(e)?;
            if !v.is_object() {
                return Err(format!(
                    "a JSON {} where an object was expected",
                    kind_of(&v)
                ));
            }
            Parsed::Other
        }
    })
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{NewTask, TaskKey};
    use ctxhost_format::ToolCall;

    const A: &str = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a01";

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
        })
        .unwrap();
        db.claim(uuid, 1, "elsewhere", "openai", "m", 1).unwrap();
        db.finish(uuid, Status::Completed, None).unwrap();
        let dir = layout.task_dir(DirState::Completed, uuid);
        fs::create_dir_all(&dir).unwrap();
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
        fs::write(dir.join(MESSAGES_FILE), h).unwrap();
        fs::write(dir.join(CURRENT_FILE), c).unwrap();
        dir
    }

    fn setup() -> (tempfile::TempDir, Layout, Db) {
        let d = tempfile::tempdir().unwrap();
        let layout = Layout::new(d.path().join("contexts"));
        layout.ensure().unwrap();
        let db = Db::open(layout.root()).unwrap();
        (d, layout, db)
    }

    #[test]
    fn a_sound_tree_has_no_problem() {
        let (_d, layout, db) = setup();
        completed_task(&layout, &db, A);
        let r = fsck(&db, &layout, false, 3).unwrap();
        assert_eq!((r.tasks, r.dirs), (1, 1));
        assert!(r.problems.is_empty(), "{:#?}", r.problems);
    }

    #[test]
    fn each_fault_is_named_with_file_and_line_and_the_fixable_ones_repaired() {
        let (_d, layout, db) = setup();
        let dir = completed_task(&layout, &db, A);
        // Torn last line of messages.jsonl, a temporary, a seq gap is planted in a second task.
        let mut m = fs::read_to_string(dir.join(MESSAGES_FILE)).unwrap();
        m.push_str("{\"seq\":6,\"ro");
        fs::write(dir.join(MESSAGES_FILE), &m).unwrap();
        fs::write(dir.join("response.json"), "{}").unwrap();
        fs::write(layout.state_dir(DirState::Paused).join("notes.txt"), "x").unwrap();
        let r = fsck(&db, &layout, false, 3).unwrap();
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
        let r = fsck(&db, &layout, true, 3).unwrap();
        assert!(r.problems[1].repaired.is_some() && r.problems[2].repaired.is_some());
        assert_eq!(r.remaining.len(), 1, "{:#?}", r.remaining);
        assert_eq!(r.remaining[0].kind, ProblemKind::NotATaskDir);
        assert!(dir.join("messages.jsonl.torn").exists());
    }

    #[test]
    fn seq_gaps_orphans_and_mismatches() {
        let (_d, layout, db) = setup();
        let dir = completed_task(&layout, &db, A);
        // Seq gap: drop line 2 of messages.jsonl.
        let m = fs::read_to_string(dir.join(MESSAGES_FILE)).unwrap();
        let lines: Vec<&str> = m.lines().collect();
        let gap: String = [lines[0], lines[2], lines[3], lines[4]]
            .iter()
            .map(|l| format!("{l}\n"))
            .collect();
        fs::write(dir.join(MESSAGES_FILE), gap).unwrap();
        // Orphan tool result in current.jsonl at line 3.
        let c = fs::read_to_string(dir.join(CURRENT_FILE)).unwrap();
        let mut cl: Vec<String> = c.lines().map(str::to_string).collect();
        let orphan = ChatMessage {
            role: "tool".into(),
            content: Some("?".into()),
            tool_call_id: Some("nobody".into()),
            ..Default::default()
        };
        cl.insert(2, serde_json::to_string(&orphan).unwrap());
        fs::write(dir.join(CURRENT_FILE), cl.join("\n") + "\n").unwrap();
        // Mismatch: the completed task's directory in running/.
        layout
            .move_task_dir(A, DirState::Completed, DirState::Running)
            .unwrap();
        let r = fsck(&db, &layout, false, 3).unwrap();
        let got: Vec<(ProblemKind, Option<u64>)> =
            r.problems.iter().map(|p| (p.kind, p.line)).collect();
        assert_eq!(
            got,
            [
                (ProblemKind::DirMismatch, None),
                (ProblemKind::ContextInvariant, Some(3)),
                (ProblemKind::SeqGap, Some(2)),
            ],
            "{:#?}",
            r.problems
        );
        let r = fsck(&db, &layout, true, 3).unwrap();
        assert!(r.problems[0].repaired.is_some());
        assert!(layout.task_dir(DirState::Completed, A).is_dir());
        let left: Vec<ProblemKind> = r.remaining.iter().map(|p| p.kind).collect();
        assert_eq!(left, [ProblemKind::ContextInvariant, ProblemKind::SeqGap]);
    }

    #[test]
    fn dirs_without_rows_and_missing_dirs_are_reported() {
        let (_d, layout, db) = setup();
        completed_task(&layout, &db, A);
        fs::remove_dir_all(layout.task_dir(DirState::Completed, A)).unwrap();
        let stray = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a02";
        fs::create_dir_all(layout.task_dir(DirState::Paused, stray)).unwrap();
        let r = fsck(&db, &layout, true, 3).unwrap();
        let kinds: Vec<ProblemKind> = r.remaining.iter().map(|p| p.kind).collect();
        assert_eq!(kinds, [ProblemKind::MissingDir, ProblemKind::DirWithoutRow]);
        // Once cleanup marked it, a missing directory is expected.
        db.mark_files_deleted(A).unwrap();
        let r = fsck(&db, &layout, false, 3).unwrap();
        assert_eq!(r.problems.len(), 1);
    }
}
