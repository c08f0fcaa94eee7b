//! Changing a task's lifecycle from outside: `pause`, `resume`, `stop`, `retry`, `recover`. A
//! refusal (the task is not in a state that allows it) is a [`Refused`] error saying which state
//! it is in and what to do (the CLI exits 1 with it; the web dashboard answers 409).

use std::time::{Duration, Instant};

use anyhow::bail;

use crate::db::{Db, Status, TaskRow};
use crate::fsck::{Problem, ProblemKind};
use crate::layout::Layout;
use crate::lifecycle::{self, DirFix, Transition};

/// The task's state does not allow the operation; the text says which state it is in and what
/// to do instead.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Return early with a [`Refused`] error (the arguments of `format!`).
macro_rules! refuse {
    ($($arg:tt)*) => {
        return Err(Refused(format!($($arg)*)).into())
    };
}

/// Ask running task `uuid` to pause at its next safe point, with an optional `reason`.
pub fn pause(db: &Db, uuid: &str, reason: Option<&str>) -> anyhow::Result<()> {
    if db.request_pause(uuid, reason)? {
        return Ok(());
    }
    match db.get(uuid)?.map(|r| r.status) {
        Some(Status::Queued) => refuse!(
            "task {uuid} is queued, not running: only a running task can be paused (`ctxhost stop {uuid}` takes it out of the queue)"
        ),
        Some(Status::Paused) => {
            refuse!("task {uuid} is already paused (`ctxhost resume {uuid}` queues it again)")
        }
        Some(s) => refuse!("task {uuid} is {s}: only a running task can be paused"),
        None => bail!("task {uuid} disappeared from the database"),
    }
}

/// Queue paused task `uuid` again (its directory stays in `paused/` until a process claims it).
/// Its directory must pass `ctxhost fsck`'s checks first, as for [`retry`]
/// ([`require_sound_files`]).
///
/// Errors: the task is not paused, or its directory has problems (each named with file and
/// line; `ctxhost fsck --repair` fixes what it can).
pub fn resume(db: &Db, layout: &Layout, uuid: &str) -> anyhow::Result<()> {
    resume_with(db, layout, None, uuid)
}

/// [`resume`] on a host whose tree is a working copy of the bucket `remote`: a directory that
/// is not here, or older here than in the bucket (the task paused on another host), is
/// checked in a copy downloaded from the bucket ([`crate::remote::view::for_reading`]); the
/// process that claims the task downloads it (or takes that copy) as for any claim.
pub fn resume_with(
    db: &Db,
    layout: &Layout,
    remote: Option<&crate::remote::Store>,
    uuid: &str,
) -> anyhow::Result<()> {
    let Some(row) = db.get(uuid)? else {
        bail!("task {uuid} disappeared from the database")
    };
    // Only a paused task can be resumed: any other status is refused below, by what it is.
    if row.status == Status::Paused {
        require_sound_files_with(layout, remote, &row, Requeue::Resume)?;
    }
    if lifecycle::apply(db, layout, uuid, &Transition::Resume)?.is_some() {
        return Ok(());
    }
    let Some(now) = db.get(uuid)? else {
        bail!("task {uuid} disappeared from the database")
    };
    match now.status {
        Status::Running if now.pause_requested => refuse!(
            "task {uuid} is running (a pause was requested and not honoured yet): only a paused task can be resumed"
        ),
        Status::Queued => refuse!("task {uuid} is already queued"),
        s => refuse!("task {uuid} is {s}: only a paused task can be resumed"),
    }
}

/// Queue failed task `uuid` again, to continue from its context (`ctxhost retry`): its
/// directory must pass `ctxhost fsck`'s checks (tool calls waiting at the end of current.jsonl
/// are fine: the task makes them; [`require_sound_files`]); it moves from `completed/` to `paused/`
/// ([`Transition::Retry`]). A failed task that never ran (no directory) starts afresh.
///
/// Errors: the task is not failed, its files were deleted by cleanup, or its directory has
/// problems (each named with file and line; `ctxhost fsck --repair` fixes what it can).
pub fn retry(db: &Db, layout: &Layout, uuid: &str) -> anyhow::Result<()> {
    retry_with(db, layout, None, uuid)
}

/// [`retry`] on a host whose tree is a working copy of the bucket `remote` (the task failed on
/// another host): its directory is checked as [`resume_with`] does.
pub fn retry_with(
    db: &Db,
    layout: &Layout,
    remote: Option<&crate::remote::Store>,
    uuid: &str,
) -> anyhow::Result<()> {
    let Some(row) = db.get(uuid)? else {
        bail!("task {uuid} disappeared from the database")
    };
    match row.status {
        Status::Failed => {}
        Status::Completed | Status::Stopped => refuse!(
            "task {uuid} is {}: only a failed task can be retried (submit a new task instead)",
            row.status
        ),
        s => refuse!("task {uuid} is {s}: only a failed task can be retried"),
    }
    if row.files_deleted_at.is_some() {
        refuse!(
            "task {uuid} cannot be retried: `ctxhost cleanup` deleted its files (submit a new task instead)"
        );
    }
    require_sound_files_with(layout, remote, &row, Requeue::Retry)?;
    if lifecycle::apply(db, layout, uuid, &Transition::Retry)?.is_none() {
        let now = db.get(uuid)?.map(|r| r.status);
        refuse!(
            "task {uuid} changed meanwhile (it is {}); nothing done",
            now.map(|s| s.to_string()).unwrap_or_else(|| "gone".into())
        );
    }
    Ok(())
}

/// Which command queues a task again, for [`require_sound_files`]'s message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// `ctxhost resume` (a paused task).
    Resume,
    /// `ctxhost retry` (a failed task).
    Retry,
}

impl Requeue {
    /// The subcommand: `resume` or `retry`.
    fn command(self) -> &'static str {
        match self {
            Requeue::Resume => "resume",
            Requeue::Retry => "retry",
        }
    }

    /// `resumed` or `retried`.
    fn done(self) -> &'static str {
        match self {
            Requeue::Resume => "resumed",
            Requeue::Retry => "retried",
        }
    }
}

/// Problems a task may be queued with, and what becomes of each (the warning `resume` and
/// `retry` print): its process repairs it when it starts
/// ([`crate::repair::repair_task_dir_from`]; the planning history's uncommitted lines when it
/// is opened), or it does not hinder the task. A context invariant counts only when fsck calls
/// it fixable. Every other problem refuses.
const QUEUED_WITH: &[(ProblemKind, &str)] = &[
    (ProblemKind::Symlink, "the task deletes it when it starts"),
    (
        ProblemKind::SpecialFile,
        "the task deletes it when it starts",
    ),
    (
        ProblemKind::TemporaryFile,
        "the task deletes it when it starts",
    ),
    (
        ProblemKind::TornLine,
        "the task cuts it when it starts, keeping it in the file's .torn",
    ),
    (
        ProblemKind::CurrentBehind,
        "the task appends the lines when it starts",
    ),
    (
        ProblemKind::ContextInvariant,
        "the task repairs it when it starts, recording the repair in messages.jsonl",
    ),
    (
        ProblemKind::UncommittedPlanning,
        "the task cuts them when it opens its planning history",
    ),
    (
        ProblemKind::BadCheckpoint,
        // The problem's own text says what the task and `--repair` do with it.
        "harmless to the task",
    ),
    (
        ProblemKind::LooseMode,
        "harmless to the task; `ctxhost fsck --repair` makes it owner-only",
    ),
];

/// What becomes of `problem` when its task is queued ([`QUEUED_WITH`]); `None`: it refuses.
fn queued_with(problem: &Problem) -> Option<&'static str> {
    if !problem.fixable {
        return None;
    }
    QUEUED_WITH
        .iter()
        .find(|(kind, _)| *kind == problem.kind)
        .map(|(_, what)| *what)
}

/// The gate before a task no process uses is queued again (`ctxhost resume`, `ctxhost retry`,
/// and the dashboard's buttons), on what `ctxhost fsck` reports for the directory of `row`
/// ([`crate::fsck::check_task_dir`]): a problem its process repairs when it starts or that
/// does not hinder it ([`QUEUED_WITH`]: a torn last line, a pairing fault of the three shapes,
/// a link, a leftover temporary, a stale checkpoint, a loose mode) is logged as a warning
/// saying what becomes of it, and the task is queued; any other (a line of NUL bytes, a line that does not parse, a seq gap, an
/// unrepairable context, a missing file) refuses, since the task would fail on
/// it. Tool calls waiting at the end of current.jsonl are not a problem (the task makes them).
/// A task with no directory passes only when it never ran (a failed task that failed before
/// it started); a paused task, or one that ran, without its directory is refused (it cannot
/// continue from a context it lost).
///
/// Errors: a [`Refused`] listing every problem that refuses (`FILE:LINE: what`, and whether
/// `ctxhost fsck --repair` can fix it), with the command to run next.
pub fn require_sound_files(layout: &Layout, row: &TaskRow, requeue: Requeue) -> anyhow::Result<()> {
    require_sound_files_with(layout, None, row, requeue)
}

/// [`require_sound_files`] on a working copy of the bucket `remote`: the directory checked is
/// the one [`crate::remote::view::for_reading`] gives (the bucket's latest when this host's copy
/// is missing or older).
pub fn require_sound_files_with(
    layout: &Layout,
    remote: Option<&crate::remote::Store>,
    row: &TaskRow,
    requeue: Requeue,
) -> anyhow::Result<()> {
    let uuid = row.uuid.as_str();
    // Where the directory is, before anything changes: the row is queued only if the
    // lifecycle can then put the directory where a queued task keeps it. A directory in two
    // state folders (or in one no transition explains) would be refused after the row
    // changed, leaving a queued task whose process fails at start.
    let found = lifecycle::find_dirs(layout, uuid);
    match lifecycle::dir_fix(Status::Queued, false, &found) {
        DirFix::Duplicate => refuse!(
            "task {uuid} cannot be {}: it has a directory in each of {} (`ctxhost fsck` reports it; keep the \
             right one, then `ctxhost {} {uuid}` again)",
            requeue.done(),
            found
                .iter()
                .map(|s| format!("{s}/"))
                .collect::<Vec<_>>()
                .join(", "),
            requeue.command()
        ),
        DirFix::Unexplained { at } => refuse!(
            "task {uuid} cannot be {}: its directory is in {at}/, where no {} task keeps it (see `ctxhost fsck`)",
            requeue.done(),
            row.status
        ),
        _ => {}
    }
    // A working copy of a bucket (`context_storage.remote`) need not hold the task, or all of
    // it: the claim fetches the directory from the bucket (each object checked) before the
    // task process opens it. A task set aside because the bucket could not be reached at its
    // claim has nothing here but its task_state.json.
    let working_copy = crate::db::binding::working_copies();
    let remote = remote.filter(|_| row.files_deleted_at.is_none());
    let Some((_, dir)) = crate::remote::view::for_reading(remote, layout, uuid)? else {
        if working_copy {
            return Ok(());
        }
        if row.status == Status::Paused || row.started_at.is_some() {
            refuse!(
                "task {uuid} cannot be {}: its directory is missing from {} (`ctxhost fsck` reports it), so it \
                 cannot continue from its context; submit a new task instead",
                requeue.done(),
                layout.root().display()
            );
        }
        return Ok(());
    };
    let (queued, refusing): (Vec<Problem>, Vec<Problem>) =
        crate::fsck::check_task_dir(&dir, uuid, row.status)
            .into_iter()
            .filter(|p| !(working_copy && p.kind == crate::fsck::ProblemKind::MissingFile))
            .partition(|p| queued_with(p).is_some());
    if refusing.is_empty() {
        for p in &queued {
            tracing::warn!(%uuid, "{p} ({})", queued_with(p).unwrap_or_default());
        }
        return Ok(());
    }
    let list: Vec<String> = refusing
        .iter()
        .map(|p| {
            let how = if p.fixable {
                "`ctxhost fsck --repair` fixes this"
            } else {
                "no repair can fix this"
            };
            format!("  {p} ({how})")
        })
        .collect();
    let next = if refusing.iter().all(|p| p.fixable) {
        format!(
            "run `ctxhost fsck --repair` (it fixes what can be fixed without losing data), then `ctxhost {} {uuid}` again",
            requeue.command()
        )
    } else if refusing.iter().any(|p| p.fixable) {
        "`ctxhost fsck --repair` fixes some of them, not all: the task cannot continue from its context; \
         submit a new task instead"
            .to_string()
    } else {
        "no repair can fix them: the task cannot continue from its context; submit a new task instead"
            .to_string()
    };
    refuse!(
        "task {uuid} cannot be {}: its files have {} problem(s) it would fail on; {next}:\n{}",
        requeue.done(),
        refusing.len(),
        list.join("\n")
    )
}

/// What [`stop`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The task was running: its process stops at its next safe point.
    Requested,
    /// No process had the task: it is `stopped` now (it was `queued` or `paused`), its
    /// directory in `completed/`.
    Now {
        /// The status it had.
        was: Status,
    },
}

/// Stop task `uuid`: at once if no process runs it, else at its next safe point.
pub fn stop(db: &Db, layout: &Layout, uuid: &str) -> anyhow::Result<Stopped> {
    // A claim or a resume may change the status between two statements: try each way a few times.
    for _ in 0..4 {
        if db.request_stop(uuid)? {
            return Ok(Stopped::Requested);
        }
        if let Some(was) = lifecycle::apply(db, layout, uuid, &Transition::StopWaiting)? {
            return Ok(Stopped::Now { was });
        }
        if let Some(status) = db.get(uuid)?.map(|r| r.status)
            && status.is_final()
        {
            refuse!("task {uuid} is already {status}");
        }
    }
    refuse!("task {uuid} kept changing state; try again")
}

/// Poll the row of `uuid` every 50 ms until `done(status)` or `timeout`; returns the last
/// status. Errors when the timeout passes, saying the status it is still in.
pub fn wait_for(
    db: &Db,
    uuid: &str,
    timeout: Duration,
    done: impl Fn(Status) -> bool,
) -> anyhow::Result<Status> {
    let end = Instant::now() + timeout;
    loop {
        let status = db
            .get(uuid)?
            .map(|r| r.status)
            .ok_or_else(|| anyhow::anyhow!("task {uuid} disappeared from the database"))?;
        if done(status) {
            return Ok(status);
        }
        if Instant::now() >= end {
            bail!(
                "task {uuid} is still {status} after {} s; its process honours the request at its next safe point (between steps)",
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
