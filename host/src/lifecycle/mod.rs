//! A task's lifecycle (DESIGN.md §3): its statuses, where each keeps the task directory, the
//! allowed transitions, and [`apply`], the only code that changes a status or moves a task
//! directory.
//!
//! ```text
//! status      directory (at rest)                       transitions out
//! queued      none (never ran) or paused/{uuid}         → running (claim), stopped
//! running     running/{uuid}                            → paused, completed, failed, stopped (its process);
//!                                                         queued, paused, stopped, failed (recovery)
//! paused      paused/{uuid}                             → queued (resume), stopped
//! completed   completed/{uuid}, or none (never ran,     none
//! failed        or files deleted by cleanup)            → queued (retry: `ctxhost retry`)
//! stopped                                               none
//! ```
//! ([`dir_rule`] and [`allowed`] are that table, as exhaustive matches.)
//!
//! # The one order of a transition
//! [`apply`] always does, in this order, all of it holding the tree lock ([`lock_tree`]):
//! 1. files the new status needs, written in the directory where it is now (task_state.json
//!    when the task pauses);
//! 2. **the row**: one conditional `UPDATE` ([`row`]), the commit point. It decides races (two
//!    processes claiming one task, a claim and a stop); when it does not match, nothing else
//!    happens;
//! 3. **the directory**: moved (one `rename`, both folders fsynced), created (a claimed task
//!    without a directory) or deleted (cleanup), to where [`dir_rule`] keeps it for the new
//!    status.
//!
//! The lock spans the row and the directory so that no other transition comes between them:
//! were the directory step taken later, on its own, a pause's move to `paused/` could land
//! after a resume and the next claim had already put the task back in `running/`, leaving a
//! running task without its directory there. So, under the lock, a task's row and directory
//! always agree, but for the in-between state a crash leaves. (No statement holds a database
//! transaction open while it waits for the lock, so the two cannot deadlock.)
//!
//! [`task_state`] is the pause record (task_state.json) step 1 writes.
//!
//! A crash between 2 and 3 leaves exactly one kind of in-between state: **the row has the new
//! status and the directory is still where a status that can change into it keeps it** (or,
//! for cleanup, the row marks the files deleted and the directory is still there). [`dir_fix`]
//! recognises it ([`DirFix::Move`], [`DirFix::Delete`]); recovery ([`complete_interrupted`],
//! run by the worker, `ctxhost recover` and `ctxhost fsck --repair`) finishes the move, and
//! the next transition of the task does too. A directory anywhere else is not something the
//! lifecycle leaves ([`DirFix::Unexplained`]): `ctxhost fsck` reports it.
//!
//! Tests kill the process between 2 and 3 with the failpoint `lifecycle:NAME`
//! ([`crate::failpoint`]; NAME a [`Transition::name`], or `*`).

pub mod dir;
pub mod row;
pub mod task_state;

use std::path::Path;

use anyhow::{Context, bail};

pub use crate::db::Status;
pub use dir::{TreeLock, lock_tree};

use crate::db::{Db, now_rfc3339};
use crate::layout::{DirState, Layout};

/// Where a status keeps the task directory when no transition is under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirRule {
    /// The state folder.
    pub folder: DirState,
    /// The task may have no directory in this status (it never ran, or its files were deleted).
    pub may_be_absent: bool,
}

/// The directory rule of `status` (the table in the module docs).
pub const fn dir_rule(status: Status) -> DirRule {
    match status {
        Status::Queued => DirRule {
            folder: DirState::Paused,
            may_be_absent: true,
        },
        Status::Running => DirRule {
            folder: DirState::Running,
            may_be_absent: false,
        },
        Status::Paused => DirRule {
            folder: DirState::Paused,
            may_be_absent: false,
        },
        Status::Completed | Status::Failed | Status::Stopped => DirRule {
            folder: DirState::Completed,
            may_be_absent: true,
        },
    }
}

/// Whether a task may go from `from` to `to` (the table in the module docs).
pub const fn allowed(from: Status, to: Status) -> bool {
    use Status::*;
    match (from, to) {
        (Queued, Running | Stopped) => true,
        (Queued, Queued | Paused | Completed | Failed) => false,
        (Running, Queued | Paused | Completed | Failed | Stopped) => true,
        (Running, Running) => false,
        (Paused, Queued | Stopped) => true,
        (Paused, Running | Paused | Completed | Failed) => false,
        (Failed, Queued) => true,
        (Failed, Running | Paused | Completed | Failed | Stopped) => false,
        (Completed | Stopped, Queued | Running | Paused | Completed | Failed | Stopped) => false,
    }
}

/// What a claiming task process records in the row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The claiming process.
    pub pid: u32,
    /// This machine's host name ([`crate::layout::hostname`]).
    pub hostname: String,
    /// This machine's identity ([`crate::host::host_id`]).
    pub host_id: String,
    /// The worker that started the process (`hostname:pid:nonce`, [`crate::lease::WorkerId`]),
    /// or the process itself when it runs without one.
    pub worker_id: String,
    /// How long the lease lasts unless renewed (`worker.lease_secs`).
    pub lease: std::time::Duration,
    /// `llm.provider` of the process's config.
    pub llm_provider: String,
    /// `llm.model` of the process's config.
    pub model: String,
    /// `llm.context_length` of the process's config, tokens.
    pub context_length: u64,
}

impl Claim {
    /// The process that holds the task after this claim.
    pub fn owner(&self) -> Owner<'_> {
        Owner {
            pid: self.pid,
            worker_id: &self.worker_id,
        }
    }
}

#[cfg(test)]
impl Claim {
    /// A claim by `pid` of worker `h:1:test` on host `h` (identity `h-id`), provider openai, model `m`, lease 30 s.
    pub(crate) fn test(pid: u32) -> Claim {
        Claim {
            pid,
            hostname: "h".into(),
            host_id: "h-id".into(),
            worker_id: "h:1:test".into(),
            lease: std::time::Duration::from_secs(30),
            llm_provider: "openai".into(),
            model: "m".into(),
            context_length: 4096,
        }
    }
}

/// The process that holds a running task: its pid and the worker id of its claim (a pid
/// alone may be another host's process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner<'a> {
    /// The task process.
    pub pid: u32,
    /// The worker id its claim recorded.
    pub worker_id: &'a str,
}

#[cfg(test)]
impl Owner<'static> {
    /// The owner after [`Claim::test`]`(pid)`.
    pub(crate) fn test(pid: u32) -> Owner<'static> {
        Owner {
            pid,
            worker_id: "h:1:test",
        }
    }
}

/// One change of a task's lifecycle, with what its row half needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition<'a> {
    /// queued → running: the task process claims the task. Directory: from `paused/` (a resumed
    /// task) to `running/`, or created there. ([`claim_next`] claims the oldest queued task
    /// the same way.)
    Claim(&'a Claim),
    /// running → paused: its process honours a pause at a safe point; task_state.json is
    /// written first (with the row's pause reason).
    Pause {
        /// The owning process.
        owner: Owner<'a>,
    },
    /// running → completed, failed or stopped: its process ends the task.
    Finish {
        /// The owning process.
        owner: Owner<'a>,
        /// `Completed`, `Failed` or `Stopped`.
        status: Status,
        /// Why it failed.
        error: Option<&'a str>,
    },
    /// running → queued, paused, stopped or failed: recovery settles a task whose process died
    /// or whose lease expired, after taking it over ([`crate::db::Db::take_over`]); counts a
    /// crash unless the process stopped itself (fenced out); a pause writes task_state.json
    /// first.
    Recover {
        /// The recoverer holding the task (its worker id).
        worker_id: &'a str,
        /// The new status.
        status: Status,
        /// What happened, for `error_message`.
        message: &'a str,
        /// Count a crash (`crash_count` + 1).
        crash: bool,
    },
    /// paused → queued (`ctxhost resume`); the directory stays in `paused/`.
    Resume,
    /// queued or paused → stopped (`ctxhost stop` of a task no process runs).
    StopWaiting,
    /// failed → queued (`ctxhost retry`): the task runs again from its context; its directory
    /// moves from `completed/` to `paused/`, where a queued task that ran keeps it. Not for a
    /// task whose files cleanup deleted.
    Retry,
    /// A finished task's directory is deleted (`ctxhost cleanup`); the row stays, marked
    /// `files_deleted_at`. The status does not change.
    DeleteFiles,
}

impl Transition<'_> {
    /// Short name, for logs and failpoints: `claim`, `pause`, `finish`, `recover`, `resume`,
    /// `stop`, `retry`, `delete-files`.
    pub fn name(&self) -> &'static str {
        match self {
            Transition::Claim(_) => "claim",
            Transition::Pause { .. } => "pause",
            Transition::Finish { .. } => "finish",
            Transition::Recover { .. } => "recover",
            Transition::Resume => "resume",
            Transition::StopWaiting => "stop",
            Transition::Retry => "retry",
            Transition::DeleteFiles => "delete-files",
        }
    }

    /// The statuses it may start from.
    pub fn from(&self) -> &'static [Status] {
        match self {
            Transition::Claim(_) => &[Status::Queued],
            Transition::Pause { .. } | Transition::Finish { .. } | Transition::Recover { .. } => {
                &[Status::Running]
            }
            Transition::Resume => &[Status::Paused],
            Transition::StopWaiting => &[Status::Queued, Status::Paused],
            Transition::Retry => &[Status::Failed],
            Transition::DeleteFiles => &[Status::Completed, Status::Failed, Status::Stopped],
        }
    }

    /// The status it ends in (`None`: unchanged, for [`Transition::DeleteFiles`]).
    pub fn to(&self) -> Option<Status> {
        match self {
            Transition::Claim(_) => Some(Status::Running),
            Transition::Pause { .. } => Some(Status::Paused),
            Transition::Finish { status, .. } | Transition::Recover { status, .. } => Some(*status),
            Transition::Resume | Transition::Retry => Some(Status::Queued),
            Transition::StopWaiting => Some(Status::Stopped),
            Transition::DeleteFiles => None,
        }
    }
}

/// What to do with a task's directory so that it agrees with its row ([`dir_fix`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirFix {
    /// It is where the status keeps it (or absent, where that is allowed).
    InPlace,
    /// The in-between state of a transition into the status: move it.
    Move {
        /// Where it is.
        from: DirState,
        /// Where the status keeps it.
        to: DirState,
    },
    /// A claimed task without a directory: create it in `running/`.
    Create,
    /// The in-between state of a cleanup: the row marks the files deleted, delete the directory.
    Delete {
        /// Where it is.
        from: DirState,
    },
    /// The status needs a directory and there is none.
    Missing,
    /// Where no transition into the status leaves it.
    Unexplained {
        /// Where it is.
        at: DirState,
    },
    /// In more than one state folder.
    Duplicate,
}

/// What to do with the directory of a task whose row has `status` (and `files_deleted`: the
/// row's `files_deleted_at` is set) when it is found in `found` (every state folder holding
/// it). Pure; the heart of recovery's and fsck's understanding of the in-between state.
pub fn dir_fix(status: Status, files_deleted: bool, found: &[DirState]) -> DirFix {
    let rule = dir_rule(status);
    match found {
        [] if files_deleted || rule.may_be_absent => DirFix::InPlace,
        [] if status == Status::Running => DirFix::Create,
        [] => DirFix::Missing,
        [at] if files_deleted && status.is_final() => DirFix::Delete { from: *at },
        [at] if *at == rule.folder => DirFix::InPlace,
        [at] if left_by_a_transition_into(status, *at) => DirFix::Move {
            from: *at,
            to: rule.folder,
        },
        [at] => DirFix::Unexplained { at: *at },
        _ => DirFix::Duplicate,
    }
}

/// Whether some status that may change into `to` keeps its directory in `at`.
fn left_by_a_transition_into(to: Status, at: DirState) -> bool {
    Status::ALL
        .into_iter()
        .any(|from| allowed(from, to) && dir_rule(from).folder == at)
}

/// Every state folder holding the directory of `uuid`.
pub fn find_dirs(layout: &Layout, uuid: &str) -> Vec<DirState> {
    DirState::ALL
        .into_iter()
        .filter(|s| layout.task_dir(*s, uuid).is_dir())
        .collect()
}

/// Apply transition `t` to task `uuid` in the documented order (module docs): needed files,
/// the row (conditional UPDATE), then the directory under the tree lock. Returns the status
/// the task had, or `None` when the row did not match (another process changed it first;
/// nothing was done). An error after the row was written leaves the in-between state, which
/// recovery finishes.
pub fn apply(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    t: &Transition<'_>,
) -> anyhow::Result<Option<Status>> {
    apply_inner(db, layout, uuid, t, None)
}

/// [`apply`] for a caller that already holds the tree lock (recovery).
pub fn apply_locked(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    t: &Transition<'_>,
    lock: &TreeLock,
) -> anyhow::Result<Option<Status>> {
    apply_inner(db, layout, uuid, t, Some(lock))
}

/// A task claimed by [`claim_next`].
#[derive(Debug)]
pub struct Claimed {
    /// The task.
    pub uuid: String,
    /// The directory half failed (the row is the claimer's: it must fail the task).
    pub dir_error: Option<anyhow::Error>,
}

/// Claim the oldest queued task for the process of `claim` ([`row::claim_next`]: one
/// statement, safe across hosts), then put its directory in `running/` (back from `paused/`,
/// or created) under the tree lock: a [`Transition::Claim`] of whichever task is next, with
/// the same failpoint (`lifecycle:claim`). `None` when nothing is queued.
pub fn claim_next(db: &Db, layout: &Layout, claim: &Claim) -> anyhow::Result<Option<Claimed>> {
    // The whole claim under the tree lock, as every transition ([`apply`]).
    let lock = lock_tree(layout)?;
    let Some(uuid) = row::claim_next(db, claim)? else {
        return Ok(None);
    };
    crate::failpoint::kill_if_set("lifecycle:claim");
    let placed = place_as_row_says(db, layout, &uuid, "claim").map(|_| ());
    drop(lock);
    Ok(Some(Claimed {
        uuid,
        dir_error: placed.err(),
    }))
}

fn apply_inner(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    t: &Transition<'_>,
    held: Option<&TreeLock>,
) -> anyhow::Result<Option<Status>> {
    debug_assert!(
        t.to()
            .is_none_or(|to| t.from().iter().all(|from| allowed(*from, to))),
        "transition {} is not in the table",
        t.name()
    );
    // The whole transition under the tree lock: no other transition of any task can come
    // between its row and its directory (see the module docs).
    let _lock = match held {
        Some(_) => None,
        None => Some(lock_tree(layout)?),
    };
    // 1. Files the new status needs.
    if t.to() == Some(Status::Paused) {
        write_pause_state(db, layout, uuid)?;
    }
    // 2. The row: the commit point.
    let from = match t {
        Transition::Claim(claim) => row::claim(db, uuid, claim)?.then_some(Status::Queued),
        Transition::Pause { owner } => {
            row::mark_paused(db, uuid, *owner)?.then_some(Status::Running)
        }
        Transition::Finish {
            owner,
            status,
            error,
        } => row::finish(db, uuid, *owner, *status, *error)?.then_some(Status::Running),
        Transition::Recover {
            worker_id,
            status,
            message,
            crash,
        } => row::settle_crash(db, uuid, worker_id, *status, Some(message), *crash)?
            .then_some(Status::Running),
        Transition::Resume => row::resume(db, uuid)?.then_some(Status::Paused),
        Transition::StopWaiting => row::stop_waiting(db, uuid)?,
        Transition::Retry => row::retry(db, uuid)?.then_some(Status::Failed),
        Transition::DeleteFiles => {
            let status = db.get(uuid)?.map(|r| r.status);
            row::mark_files_deleted(db, uuid)?
                .then_some(status)
                .flatten()
        }
    };
    let Some(from) = from else {
        return Ok(None);
    };
    crate::failpoint::kill_if_set(&format!("lifecycle:{}", t.name()));
    // 3. The directory.
    place_as_row_says(db, layout, uuid, t.name())?;
    Ok(Some(from))
}

/// The directory half of a transition: put the directory of `uuid` where its row, read now,
/// keeps it. Under the tree lock that is the status the transition just wrote; reading it
/// again means that a directory step can never put a task where an older status kept it,
/// even where the lock does not reach (see [`lock_tree`] on shared trees). The caller holds
/// the tree lock.
fn place_as_row_says(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    what: &str,
) -> anyhow::Result<Option<String>> {
    let Some(row) = db.get(uuid)? else {
        bail!("{what}: task {uuid} disappeared from the database");
    };
    place_dir(
        layout,
        uuid,
        row.status,
        row.files_deleted_at.is_some(),
        what,
    )
}

/// Make the directory of `uuid` agree with `status` (see [`dir_fix`]); returns what was done.
/// Errors for a directory the lifecycle cannot explain or found twice. The caller holds the
/// tree lock.
fn place_dir(
    layout: &Layout,
    uuid: &str,
    status: Status,
    files_deleted: bool,
    what: &str,
) -> anyhow::Result<Option<String>> {
    let found = find_dirs(layout, uuid);
    Ok(match dir_fix(status, files_deleted, &found) {
        DirFix::InPlace | DirFix::Missing => {
            if files_deleted {
                dir::remove_deleting(layout, uuid)?;
            }
            None
        }
        DirFix::Move { from, to } => {
            dir::move_dir(layout, uuid, from, to)?;
            Some(format!("moved the directory from {from}/ to {to}/"))
        }
        DirFix::Create => {
            dir::create_dir(layout, uuid, DirState::Running)?;
            Some("created the directory in running/".to_string())
        }
        DirFix::Delete { from } => {
            dir::delete_dir(layout, uuid, from)?;
            Some(format!("deleted the directory in {from}/"))
        }
        DirFix::Unexplained { at } => bail!(
            "{what}: task {uuid} is {status} but its directory is in {at}/, where no transition into {status} leaves it (see `ctxhost fsck`)"
        ),
        DirFix::Duplicate => bail!(
            "{what}: task {uuid} has a directory in more than one state folder (see `ctxhost fsck`)"
        ),
    })
}

/// Finish the interrupted transition of task `uuid`, if its row and directory are in the
/// in-between state ([`DirFix::Move`] or [`DirFix::Delete`]; also a `.deleting-` tree of a
/// cleanup). Running tasks are left to their process, or to recovery. Takes the tree lock
/// unless `held`. Returns what was done.
pub fn complete_interrupted(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    held: Option<&TreeLock>,
) -> anyhow::Result<Option<String>> {
    let _lock = match held {
        Some(_) => None,
        None => Some(lock_tree(layout)?),
    };
    let Some(row) = db.get(uuid)? else {
        return Ok(None);
    };
    if row.status == Status::Running {
        return Ok(None);
    }
    let files_deleted = row.files_deleted_at.is_some();
    match dir_fix(row.status, files_deleted, &find_dirs(layout, uuid)) {
        DirFix::Move { .. } | DirFix::Delete { .. } => {
            place_dir(layout, uuid, row.status, files_deleted, "recovery")
        }
        _ if files_deleted && deleting_path(layout, uuid).is_dir() => {
            dir::remove_deleting(layout, uuid)?;
            Ok(Some("finished deleting the directory".to_string()))
        }
        _ => Ok(None),
    }
}

/// Move the directory of task `uuid`, which no transition explains ([`DirFix::Unexplained`]),
/// to where its status keeps it (`ctxhost fsck --repair`: a human asked for it). Running tasks
/// are left alone. Takes the tree lock. Returns what was done.
pub fn force_placement(db: &Db, layout: &Layout, uuid: &str) -> anyhow::Result<Option<String>> {
    let _lock = lock_tree(layout)?;
    let Some(row) = db.get(uuid)? else {
        return Ok(None);
    };
    if row.status == Status::Running {
        return Ok(None);
    }
    let to = dir_rule(row.status).folder;
    match dir_fix(
        row.status,
        row.files_deleted_at.is_some(),
        &find_dirs(layout, uuid),
    ) {
        DirFix::Unexplained { at } => {
            dir::move_dir(layout, uuid, at, to)?;
            Ok(Some(format!("moved the directory from {at}/ to {to}/")))
        }
        _ => complete_interrupted(db, layout, uuid, Some(&_lock)),
    }
}

/// `completed/.deleting-{uuid}`: a directory cleanup is deleting.
pub fn deleting_path(layout: &Layout, uuid: &str) -> std::path::PathBuf {
    layout
        .state_dir(DirState::Completed)
        .join(format!("{}{uuid}", crate::layout::DELETING_PREFIX))
}

/// Finish every interrupted transition whose directory is in `running/` or `paused/` (the
/// folders a transition moves out of), or in `completed/` for a queued task (a retry; cleanup
/// finishes its own in `completed/`). Takes the
/// tree lock unless `held`. Returns `(uuid, what was done)` per task fixed.
pub fn complete_all_interrupted(
    db: &Db,
    layout: &Layout,
    held: Option<&TreeLock>,
) -> anyhow::Result<Vec<(String, String)>> {
    let _lock = match held {
        Some(_) => None,
        None => Some(lock_tree(layout)?),
    };
    let held = held.or(_lock.as_ref());
    let mut done = Vec::new();
    let mut candidates = Vec::new();
    for state in [DirState::Running, DirState::Paused] {
        candidates.extend(task_dirs_in(&layout.state_dir(state))?);
    }
    // A retry interrupted after its row: a queued task whose directory is still in completed/
    // (looked up from the queue, which is short, rather than from completed/).
    for uuid in db.list_queued(u32::MAX)? {
        if layout.task_dir(DirState::Completed, &uuid).is_dir() {
            candidates.push(uuid);
        }
    }
    for uuid in candidates {
        match complete_interrupted(db, layout, &uuid, held) {
            Ok(Some(what)) => done.push((uuid, what)),
            Ok(None) => {}
            Err(e) => tracing::error!(%uuid, "cannot finish an interrupted transition: {e:#}"),
        }
    }
    Ok(done)
}

/// Canonical task UUIDs naming directories in `folder`, sorted.
fn task_dirs_in(folder: &Path) -> anyhow::Result<Vec<String>> {
    let entries = match std::fs::read_dir(folder) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot list {}", folder.display())),
    };
    let mut out: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (crate::layout::parse_uuid(&name).ok().as_deref() == Some(name.as_str()))
                .then_some(name)
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Step 1 of a transition into `paused`: write task_state.json (paused now, the row's resume
/// count and pause reason) in the task directory, wherever it is. No directory: nothing to do.
fn write_pause_state(db: &Db, layout: &Layout, uuid: &str) -> anyhow::Result<()> {
    let Some(row) = db.get(uuid)? else {
        return Ok(());
    };
    let Some((_, path)) = layout.find_task_dir(uuid) else {
        return Ok(());
    };
    let dir = crate::task_dir::TaskDir::open(&path)
        .with_context(|| format!("cannot open the task directory {}", path.display()))?;
    task_state::write_paused(
        &dir,
        &now_rfc3339(),
        u64::try_from(row.resume_count).unwrap_or(0),
        row.pause_reason.as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{TestStore, new_task, store_tests};

    const U: &str = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b";

    fn setup(store: &TestStore) -> (Layout, Db) {
        let layout = Layout::new(store.contexts());
        layout.ensure().unwrap();
        let db = store.open();
        db.insert_queued(&new_task(U)).unwrap();
        (layout, db)
    }

    #[test]
    fn every_transition_is_in_the_table_and_every_status_has_a_folder() {
        let transitions = [
            Transition::Claim(&Claim::test(1)),
            Transition::Pause {
                owner: Owner::test(1),
            },
            Transition::Finish {
                owner: Owner::test(1),
                status: Status::Failed,
                error: None,
            },
            Transition::Recover {
                worker_id: "r",
                status: Status::Queued,
                message: "x",
                crash: true,
            },
            Transition::Resume,
            Transition::StopWaiting,
            Transition::Retry,
            Transition::DeleteFiles,
        ];
        for t in &transitions {
            if let Some(to) = t.to() {
                for from in t.from() {
                    assert!(allowed(*from, to), "{} {from} → {to}", t.name());
                }
            }
        }
        for s in Status::ALL {
            assert!(!allowed(s, s), "{s} → {s}");
            if s.is_final() {
                // A final status changes no more, but for a failed task's retry.
                assert!(
                    Status::ALL
                        .iter()
                        .all(|to| !allowed(s, *to) || (s, *to) == (Status::Failed, Status::Queued)),
                    "{s} is final"
                );
                assert_eq!(dir_rule(s).folder, DirState::Completed);
            }
        }
    }

    #[test]
    fn the_in_between_state_of_each_transition_is_recognised() {
        use DirState::*;
        // Row written, directory not moved yet: where the old status kept it.
        assert_eq!(
            dir_fix(Status::Running, false, &[Paused]),
            DirFix::Move {
                from: Paused,
                to: Running
            }
        );
        assert_eq!(dir_fix(Status::Running, false, &[]), DirFix::Create);
        for s in [Status::Paused, Status::Queued] {
            assert_eq!(
                dir_fix(s, false, &[Running]),
                DirFix::Move {
                    from: Running,
                    to: Paused
                }
            );
        }
        for s in [Status::Completed, Status::Failed, Status::Stopped] {
            assert_eq!(
                dir_fix(s, false, &[Running]),
                DirFix::Move {
                    from: Running,
                    to: Completed
                }
            );
            assert_eq!(
                dir_fix(s, true, &[Completed]),
                DirFix::Delete { from: Completed }
            );
            assert_eq!(dir_fix(s, false, &[]), DirFix::InPlace);
        }
        assert_eq!(
            dir_fix(Status::Stopped, false, &[Paused]),
            DirFix::Move {
                from: Paused,
                to: Completed
            }
        );
        // Not left by any transition.
        assert_eq!(
            dir_fix(Status::Completed, false, &[Paused]),
            DirFix::Unexplained { at: Paused }
        );
        // A retry's row written, its directory not moved yet.
        assert_eq!(
            dir_fix(Status::Queued, false, &[Completed]),
            DirFix::Move {
                from: Completed,
                to: Paused
            }
        );
        assert_eq!(
            dir_fix(Status::Paused, false, &[Completed]),
            DirFix::Unexplained { at: Completed }
        );
        assert_eq!(dir_fix(Status::Paused, false, &[]), DirFix::Missing);
        assert_eq!(
            dir_fix(Status::Paused, false, &[Paused, Running]),
            DirFix::Duplicate
        );
        assert_eq!(dir_fix(Status::Queued, false, &[Paused]), DirFix::InPlace);
    }

    store_tests! {
        fn apply_writes_the_row_then_moves_the_directory(store: &TestStore) {
            let (layout, db) = setup(store);
            // Claim: the directory is created in running/.
            assert_eq!(
                apply(&db, &layout, U, &Transition::Claim(&Claim::test(7))).unwrap(),
                Some(Status::Queued)
            );
            assert_eq!(find_dirs(&layout, U), [DirState::Running]);
            // A second claim does not match: nothing happens.
            assert_eq!(
                apply(&db, &layout, U, &Transition::Claim(&Claim::test(8))).unwrap(),
                None
            );
            db.request_pause(U, Some("lunch")).unwrap();
            let pause = Transition::Pause {
                owner: Owner::test(7),
            };
            apply(&db, &layout, U, &pause).unwrap();
            assert_eq!(find_dirs(&layout, U), [DirState::Paused]);
            let paused =
                crate::task_dir::TaskDir::open(&layout.task_dir(DirState::Paused, U)).unwrap();
            let state = task_state::read(&paused).unwrap().unwrap();
            assert_eq!(state.reason.as_deref(), Some("lunch"));
            apply(&db, &layout, U, &Transition::Resume).unwrap();
            assert_eq!(find_dirs(&layout, U), [DirState::Paused]);
            // The next claim of the queue takes it back to running/.
            let claimed = claim_next(&db, &layout, &Claim::test(9)).unwrap().unwrap();
            assert_eq!(claimed.uuid, U);
            assert!(claimed.dir_error.is_none());
            assert!(claim_next(&db, &layout, &Claim::test(10)).unwrap().is_none());
            assert_eq!(find_dirs(&layout, U), [DirState::Running]);
            let finish = Transition::Finish {
                owner: Owner::test(9),
                status: Status::Completed,
                error: None,
            };
            apply(&db, &layout, U, &finish).unwrap();
            assert_eq!(find_dirs(&layout, U), [DirState::Completed]);
            apply(&db, &layout, U, &Transition::DeleteFiles).unwrap();
            assert!(find_dirs(&layout, U).is_empty());
            let row = db.get(U).unwrap().unwrap();
            assert_eq!(row.status, Status::Completed);
            assert!(row.files_deleted_at.is_some());
        }

        fn a_failed_task_is_retried_from_its_directory(store: &TestStore) {
            let (layout, db) = setup(store);
            apply(&db, &layout, U, &Transition::Claim(&Claim::test(7))).unwrap();
            let fail = Transition::Finish {
                owner: Owner::test(7),
                status: Status::Failed,
                error: Some("boom"),
            };
            apply(&db, &layout, U, &fail).unwrap();
            assert_eq!(
                apply(&db, &layout, U, &Transition::Retry).unwrap(),
                Some(Status::Failed)
            );
            assert_eq!(find_dirs(&layout, U), [DirState::Paused]);
            let row = db.get(U).unwrap().unwrap();
            assert_eq!(row.status, Status::Queued);
            assert_eq!((row.completed_at, row.error_message), (None, None));
            // Only a failed task.
            assert_eq!(apply(&db, &layout, U, &Transition::Retry).unwrap(), None);
            // Interrupted between the row and the directory: recovery finishes the move.
            apply(&db, &layout, U, &Transition::Claim(&Claim::test(8))).unwrap();
            let fail = Transition::Finish {
                owner: Owner::test(8),
                status: Status::Failed,
                error: Some("again"),
            };
            apply(&db, &layout, U, &fail).unwrap();
            row::retry(&db, U).unwrap();
            assert_eq!(find_dirs(&layout, U), [DirState::Completed]);
            assert_eq!(
                complete_all_interrupted(&db, &layout, None).unwrap().len(),
                1
            );
            assert_eq!(find_dirs(&layout, U), [DirState::Paused]);
        }

        fn an_interrupted_transition_is_completed_by_recovery(store: &TestStore) {
            let (layout, db) = setup(store);
            apply(&db, &layout, U, &Transition::Claim(&Claim::test(7))).unwrap();
            // The row half of a finish, without its directory half (a crash in between).
            row::finish(&db, U, Owner::test(7), Status::Failed, Some("boom")).unwrap();
            assert_eq!(find_dirs(&layout, U), [DirState::Running]);
            let done = complete_all_interrupted(&db, &layout, None).unwrap();
            assert_eq!(done.len(), 1, "{done:?}");
            assert_eq!(find_dirs(&layout, U), [DirState::Completed]);
            assert!(
                complete_all_interrupted(&db, &layout, None)
                    .unwrap()
                    .is_empty()
            );
            // A cleanup interrupted after marking the row.
            row::mark_files_deleted(&db, U).unwrap();
            assert_eq!(
                complete_interrupted(&db, &layout, U, None)
                    .unwrap()
                    .as_deref(),
                Some("deleted the directory in completed/")
            );
            assert!(find_dirs(&layout, U).is_empty());
        }
    }
}
