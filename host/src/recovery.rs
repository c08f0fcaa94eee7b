//! Crash recovery (DESIGN §3, §7): a `running` task whose process is gone is repaired and run
//! again, or failed after `worker.max_crashes` deaths.
//!
//! "Gone" is decided on this host only (rows whose `hostname` is this machine's): the recorded
//! pid is not alive, or it is alive but is not a ctxhost task process for that task (its
//! `/proc/PID/cmdline` lacks `task-exec` or the UUID — the pid was reused).
//!
//! Recovering one task ([`recover_task`]), under the tree lock shared by every ctxhost process
//! on the tree ([`lifecycle::lock_tree`]), after reading the row again:
//! 1. repair its directory where it is ([`crate::repair::repair_task_dir`]: temporaries
//!    deleted, torn last lines cut, current.jsonl reconciled with messages.jsonl, unanswered
//!    tool calls answered as interrupted); the changes are logged;
//! 2. choose the new status: `stopped` if a stop was requested, else `failed` when this was
//!    crash number `max_crashes`, else `paused` if a pause was requested, else `queued`;
//! 3. apply it ([`lifecycle::Transition::Recover`]): task_state.json for a pause, the row (one
//!    conditional UPDATE: still `running` under the dead pid; counts the crash), then the
//!    directory to where the status keeps it — `paused/` for queued and paused tasks (the next
//!    task process moves it back to `running/`), `completed/` for final ones.
//!
//! Recovery also finishes transitions a crash interrupted between their row and their
//! directory ([`lifecycle::complete_all_interrupted`]).

use std::collections::HashSet;

use serde::Serialize;

use crate::db::{Db, Status, now_rfc3339};
use crate::layout::{Layout, hostname};
use crate::lifecycle::{self, Transition};
use crate::repair::repair_task_dir;

/// Whether process `pid` is alive and is a ctxhost task process for `uuid` (its command line
/// holds the argument `task-exec` and the UUID). Where `/proc` is not available, only whether
/// the pid is alive.
pub fn process_runs_task(pid: i64, uuid: &str) -> bool {
    if pid <= 0 || pid > i64::from(i32::MAX) {
        return false;
    }
    if std::path::Path::new("/proc/self/cmdline").exists() {
        // A zombie (dead, not reaped) has an empty command line: gone.
        return match std::fs::read(format!("/proc/{pid}/cmdline")) {
            Ok(bytes) => {
                let args: Vec<&[u8]> = bytes.split(|b| *b == 0).collect();
                args.contains(&b"task-exec".as_slice()) && args.contains(&uuid.as_bytes())
            }
            Err(_) => false,
        };
    }
    // SAFETY: kill with signal 0 only checks for the process; it sends nothing.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// What recovery did to one task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recovered {
    /// The task.
    pub uuid: String,
    /// The dead process, as recorded in the row.
    pub pid: Option<i64>,
    /// The task's new status: `queued`, `paused`, `stopped` or `failed`.
    pub status: Status,
    /// Deaths of the task's processes so far, this one included.
    pub crash_count: i64,
    /// What happened, as stored in `error_message`.
    pub message: String,
    /// The repairs made to its directory (one sentence each).
    pub repairs: Vec<String>,
}

/// Recover task `uuid` if it is still `running` under `pid` (see the module docs). `cause`
/// says how the process ended (`task process 123 died (signal 9 (SIGKILL))`). Returns `None`
/// when the row changed meanwhile (another process recovered it, or it is not running).
pub fn recover_task(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    pid: Option<i64>,
    cause: &str,
    max_crashes: u32,
) -> anyhow::Result<Option<Recovered>> {
    let lock = lifecycle::lock_tree(layout)?;
    let Some(row) = db.get(uuid)? else {
        return Ok(None);
    };
    if row.status != Status::Running || row.process_id != pid {
        return Ok(None);
    }
    let crash_count = row.crash_count + 1;
    // running/ normally; paused/ if it died between the row and the directory of its claim;
    // none if it never had one.
    let found = lifecycle::find_dirs(layout, uuid).first().copied();

    let mut repairs = Vec::new();
    let mut repair_error = None;
    if let Some(state) = found {
        let path = layout.task_dir(state, uuid);
        let repaired = crate::task_dir::TaskDir::open(&path)
            .map_err(anyhow::Error::from)
            .and_then(|dir| repair_task_dir(&dir, true, &now_rfc3339()));
        match repaired {
            Ok(report) => {
                repairs = report.describe();
                for r in &repairs {
                    tracing::warn!(%uuid, "recovery: {r}");
                }
            }
            Err(e) => repair_error = Some(format!("{e:#}")),
        }
    }

    let (status, message) = if row.stop_requested {
        (Status::Stopped, format!("{cause}; stopped as requested"))
    } else if let Some(e) = &repair_error {
        (
            Status::Failed,
            format!("{cause}; repairing its directory failed: {e}"),
        )
    } else if crash_count >= i64::from(max_crashes) {
        (
            Status::Failed,
            format!(
                "{cause}; failed after {crash_count} crash(es) of its task process (worker.max_crashes = {max_crashes})"
            ),
        )
    } else if row.pause_requested {
        (
            Status::Paused,
            format!("{cause}; paused as requested (crash {crash_count})"),
        )
    } else {
        (
            Status::Queued,
            format!(
                "{cause}; repaired and queued again (crash {crash_count} of at most {max_crashes})"
            ),
        )
    };

    let t = Transition::Recover {
        pid,
        status,
        message: &message,
    };
    if lifecycle::apply_locked(db, layout, uuid, &t, &lock)?.is_none() {
        // Unreachable under the lock unless the row was edited by hand.
        tracing::warn!(%uuid, "recovery: the row changed while the task was being recovered");
        return Ok(None);
    }
    match status {
        Status::Failed => tracing::error!(%uuid, "{message}"),
        _ => tracing::warn!(%uuid, "{message}"),
    }
    Ok(Some(Recovered {
        uuid: uuid.to_string(),
        pid,
        status,
        crash_count,
        message,
        repairs,
    }))
}

/// Recover every `running` task recorded on this host whose process is gone, except those in
/// `skip` (the caller's own children, which it settles itself); then finish the transitions a
/// crash interrupted between their row and their directory (logged).
pub fn recover_dead_tasks(
    db: &Db,
    layout: &Layout,
    skip: &HashSet<String>,
    max_crashes: u32,
) -> anyhow::Result<Vec<Recovered>> {
    let host = hostname();
    let mut out = Vec::new();
    for (uuid, pid) in db.running_on_host(&host)? {
        if skip.contains(&uuid) || pid.is_some_and(|p| process_runs_task(p, &uuid)) {
            continue;
        }
        if crate::layout::parse_uuid(&uuid).ok().as_deref() != Some(uuid.as_str()) {
            tracing::error!(%uuid, "a running row with an invalid UUID: left alone (see `ctxhost fsck`)");
            continue;
        }
        let cause = match pid {
            Some(p) => format!("task process {p} on {host} is gone"),
            None => "the task's process is not recorded".to_string(),
        };
        if let Some(r) = recover_task(db, layout, &uuid, pid, &cause, max_crashes)? {
            out.push(r);
        }
    }
    for (uuid, what) in lifecycle::complete_all_interrupted(db, layout, None)? {
        tracing::warn!(%uuid, "recovery: finished an interrupted transition: {what}");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{NewTask, TaskKey};
    use crate::layout::DirState;
    use crate::lifecycle::{Claim, apply};

    fn claim(db: &Db, layout: &Layout, pid: u32) -> bool {
        let mut c = Claim::test(pid);
        c.hostname = hostname();
        apply(db, layout, U, &Transition::Claim(&c))
            .unwrap()
            .is_some()
    }

    const U: &str = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b";

    fn setup() -> (tempfile::TempDir, Layout, Db) {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("contexts"));
        layout.ensure().unwrap();
        let db = Db::open(layout.root()).unwrap();
        db.insert_queued(&NewTask {
            uuid: U.into(),
            key: TaskKey {
                task_source: "local".into(),
                ..Default::default()
            },
            prompt: "p".into(),
            user: None,
            llm_provider: "openai".into(),
            model: "m".into(),
            context_length: 4096,
            no_inherit: false,
        })
        .unwrap();
        (dir, layout, db)
    }

    #[test]
    fn our_own_process_is_not_a_task_process_and_a_dead_pid_is_gone() {
        assert!(!process_runs_task(std::process::id() as i64, U));
        assert!(!process_runs_task(0, U));
        assert!(!process_runs_task(i64::from(i32::MAX) + 1, U));
        // A child that has exited and been reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i64;
        child.wait().unwrap();
        assert!(!process_runs_task(pid, U));
    }

    #[test]
    fn a_dead_task_is_repaired_requeued_then_failed_after_max_crashes() {
        let (_d, layout, db) = setup();
        for round in 1..=2 {
            assert!(claim(&db, &layout, 999_999));
            let dir = layout.task_dir(DirState::Running, U);
            if round == 1 {
                std::fs::write(dir.join("messages.jsonl"), "{\"seq\":1,\"ro").unwrap();
                std::fs::write(dir.join("request.json"), "{}").unwrap();
            }
            let got = recover_dead_tasks(&db, &layout, &HashSet::new(), 2).unwrap();
            assert_eq!(got.len(), 1);
            let r = &got[0];
            assert_eq!(r.crash_count, round);
            if round == 1 {
                assert_eq!(r.status, Status::Queued);
                assert_eq!(r.repairs.len(), 2, "{:?}", r.repairs);
                assert!(layout.task_dir(DirState::Paused, U).is_dir());
                let dir = layout.task_dir(DirState::Paused, U);
                assert_eq!(std::fs::read(dir.join("messages.jsonl")).unwrap(), b"");
                assert!(!dir.join("request.json").exists());
            } else {
                assert_eq!(r.status, Status::Failed);
                assert!(
                    r.message.contains("worker.max_crashes = 2"),
                    "{}",
                    r.message
                );
                assert!(layout.task_dir(DirState::Completed, U).is_dir());
            }
            let row = db.get(U).unwrap().unwrap();
            assert_eq!((row.status, row.crash_count), (r.status, round));
        }
        // Nothing running: nothing to do.
        assert!(
            recover_dead_tasks(&db, &layout, &HashSet::new(), 2)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn pending_requests_are_honoured_and_skipped_tasks_left_alone() {
        let (_d, layout, db) = setup();
        claim(&db, &layout, 999_998);
        let skip: HashSet<String> = [U.to_string()].into();
        assert!(
            recover_dead_tasks(&db, &layout, &skip, 3)
                .unwrap()
                .is_empty()
        );
        assert_eq!(db.get(U).unwrap().unwrap().status, Status::Running);

        db.request_pause(U, Some("later")).unwrap();
        let r = recover_task(&db, &layout, U, Some(999_998), "gone", 3)
            .unwrap()
            .unwrap();
        assert_eq!(r.status, Status::Paused);
        let state = crate::task::state::read(
            &crate::task_dir::TaskDir::open(&layout.task_dir(DirState::Paused, U)).unwrap(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(state.reason.as_deref(), Some("later"));
        // Recovering again finds nothing to do.
        assert_eq!(
            recover_task(&db, &layout, U, Some(999_998), "gone", 3).unwrap(),
            None
        );

        apply(&db, &layout, U, &Transition::Resume).unwrap();
        claim(&db, &layout, 999_997);
        assert!(layout.task_dir(DirState::Running, U).is_dir());
        db.request_stop(U).unwrap();
        let r = recover_task(&db, &layout, U, Some(999_997), "gone", 3)
            .unwrap()
            .unwrap();
        assert_eq!(r.status, Status::Stopped);
        assert!(layout.task_dir(DirState::Completed, U).is_dir());
        let row = db.get(U).unwrap().unwrap();
        assert_eq!((row.status, row.crash_count), (Status::Stopped, 2));
        assert!(row.completed_at.is_some());
    }
}
