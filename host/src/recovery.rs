//! Crash recovery (DESIGN §3, §7): a `running` task whose process is gone, or whose lease
//! expired, is repaired and run again, or failed after `worker.max_crashes` deaths.
//!
//! "Gone" is decided two ways:
//! - on the host that recorded the task (its row's `hostname` and `host_id` are this
//!   machine's, [`ThisHost::recorded`]: two live machines may share a name): the recorded pid
//!   is not alive, or it is alive but is not a ctxhost task process for that task (its
//!   `/proc/PID/cmdline` lacks `task-exec` or the UUID — the pid was reused). No need to wait
//!   for the lease. A live process whose lease expired is stopped or hung (a healthy one
//!   renews its lease or stops itself): it is killed first.
//! - anywhere else: the task's lease expired ([`crate::db::lease`]; a pid means nothing on
//!   another host, nor on one that shares this host's name, which is warned about:
//!   [`crate::host::warn_name_clash`]). Any worker that can reach the database and the shared
//!   `contexts/` does it.
//!
//! Recovering one task ([`recover_task`]), under the tree lock ([`lifecycle::lock_tree`]),
//! after reading the row again:
//! 1. take the task over ([`Db::take_over`]: one conditional `UPDATE` on the holder seen, and
//!    for another host's task on the lease having expired): of several recoverers, one goes
//!    on; it now holds the task's lease;
//! 2. repair its directory where it is ([`crate::repair::repair_task_dir`]: temporaries
//!    deleted, torn last lines cut, current.jsonl reconciled with messages.jsonl, unanswered
//!    tool calls answered as interrupted); the changes are logged;
//! 3. choose the new status: `stopped` if a stop was requested, else `failed` when this was
//!    crash number `max_crashes`, else `paused` if a pause was requested, else `queued`;
//! 4. apply it ([`lifecycle::Transition::Recover`]): task_state.json for a pause, the row (one
//!    conditional UPDATE: still held by this recoverer; counts the crash), then the
//!    directory to where the status keeps it — `paused/` for queued and paused tasks (the next
//!    task process moves it back to `running/`), `completed/` for final ones.
//!
//! A recoverer that dies half-way leaves the task held under its own lease, which expires:
//! the next recoverer starts again at 1.
//!
//! Recovery also finishes transitions a crash interrupted between their row and their
//! directory ([`lifecycle::complete_all_interrupted`]).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::db::lease::Holder;
use crate::db::{Db, Status, now_rfc3339};
use crate::host::{ThisHost, warn_name_clash};
use crate::layout::Layout;
use crate::lease::WorkerId;
use crate::lifecycle::{self, Transition};
use crate::repair::repair_task_dir;

/// Who recovers tasks: this process's worker id on this host, and the lease it holds a task
/// with while it repairs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recoverer {
    /// The worker id recorded while the task is held.
    pub worker_id: String,
    /// This host: name and identity ([`ThisHost::current`]).
    pub host: ThisHost,
    /// The lease taken with the task (`worker.lease_secs`).
    pub lease: Duration,
}

impl Recoverer {
    /// This process on this host, with leases of `lease`.
    pub fn new(lease: Duration) -> Recoverer {
        let host = ThisHost::current();
        Recoverer {
            worker_id: WorkerId::new(&host.name).to_string(),
            host,
            lease,
        }
    }

    /// A worker (`worker_id`) on this host.
    pub fn for_worker(worker_id: &WorkerId, lease: Duration) -> Recoverer {
        Recoverer {
            worker_id: worker_id.to_string(),
            host: ThisHost::current(),
            lease,
        }
    }
}

/// Whether process `pid` is alive and is a ctxhost task process for `uuid`: its command line
/// holds the argument `task-exec` and the UUID (`task-exec UUID`) or the worker id `worker_id`
/// the task's row records (`task-exec --next --worker-id ID`, which claimed whichever task was
/// next; a worker id is unique, and a worker settles its own children as they exit). Where
/// `/proc` is not available, only whether the pid is alive.
pub fn process_runs_task(pid: i64, uuid: &str, worker_id: Option<&str>) -> bool {
    if pid <= 0 || pid > i64::from(i32::MAX) {
        return false;
    }
    if std::path::Path::new("/proc/self/cmdline").exists() {
        // A zombie (dead, not reaped) has an empty command line: gone.
        return match std::fs::read(format!("/proc/{pid}/cmdline")) {
            Ok(bytes) => {
                let args: Vec<&[u8]> = bytes.split(|b| *b == 0).collect();
                args.contains(&b"task-exec".as_slice())
                    && (args.contains(&uuid.as_bytes())
                        || worker_id.is_some_and(|w| args.contains(&w.as_bytes())))
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
    /// Deaths of the task's processes so far, this one included unless its process fenced
    /// itself out ([`Lost::crash`]).
    pub crash_count: i64,
    /// What happened, as stored in `error_message`.
    pub message: String,
    /// The repairs made to its directory (one sentence each).
    pub repairs: Vec<String>,
}

/// A running task whose process is gone, as its recoverer saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// Who held it (the row, as read).
    pub holder: Holder,
    /// How its process ended, for `error_message`: `task process 123 died (signal 9
    /// (SIGKILL))`, `the lease of worker ... expired`.
    pub cause: String,
    /// Take it over only if its lease has expired (another host's task).
    pub only_if_expired: bool,
    /// Count it as a crash of the task's process (towards `worker.max_crashes`); `false`
    /// for a process that stopped itself because it lost the database (the fencing exit,
    /// [`crate::lease::EXIT_LEASE_LOST`]).
    pub crash: bool,
}

/// Recover task `uuid` if it is still `running` under the holder `lost` saw (see the module
/// docs). Returns `None` when the row changed meanwhile (another process recovered it, or it
/// is not running).
pub fn recover_task(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    lost: &Lost,
    max_crashes: u32,
    me: &Recoverer,
) -> anyhow::Result<Option<Recovered>> {
    let (seen, cause) = (&lost.holder, lost.cause.as_str());
    let lock = lifecycle::lock_tree(layout)?;
    let Some(row) = db.get(uuid)? else {
        return Ok(None);
    };
    let holder = Holder::of(&row);
    if row.status != Status::Running
        || holder.worker_id != seen.worker_id
        || holder.process_id != seen.process_id
    {
        return Ok(None);
    }
    if !db.take_over(
        uuid,
        &holder,
        &me.worker_id,
        &me.host,
        me.lease,
        lost.only_if_expired,
    )? {
        return Ok(None);
    }
    // Requests that came meanwhile count too.
    let row = db.get(uuid)?.unwrap_or(row);
    let pid = seen.process_id;
    let crash_count = row.crash_count + i64::from(lost.crash);
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

    let count = if lost.crash {
        format!(" (crash {crash_count} of at most {max_crashes})")
    } else {
        String::new()
    };
    let (status, message) = if row.stop_requested {
        (Status::Stopped, format!("{cause}; stopped as requested"))
    } else if let Some(e) = &repair_error {
        (
            Status::Failed,
            format!("{cause}; repairing its directory failed: {e}"),
        )
    } else if lost.crash && crash_count >= i64::from(max_crashes) {
        (
            Status::Failed,
            format!(
                "{cause}; failed after {crash_count} crash(es) of its task process (worker.max_crashes = {max_crashes})"
            ),
        )
    } else if row.pause_requested {
        (
            Status::Paused,
            format!("{cause}; paused as requested{count}"),
        )
    } else {
        (
            Status::Queued,
            format!("{cause}; repaired and queued again{count}"),
        )
    };

    let t = Transition::Recover {
        worker_id: &me.worker_id,
        status,
        message: &message,
        crash: lost.crash,
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

/// Recover every `running` task whose process is gone (recorded on this host: same host name
/// and identity, [`ThisHost::recorded`]) or whose lease expired (anywhere), except those in `skip` (the caller's own children, which it settles
/// itself); then finish the transitions a crash interrupted between their row and their
/// directory (logged).
pub fn recover_dead_tasks(
    db: &Db,
    layout: &Layout,
    skip: &HashSet<String>,
    max_crashes: u32,
    me: &Recoverer,
) -> anyhow::Result<Vec<Recovered>> {
    let host = &me.host.name;
    let mut out = Vec::new();
    for t in db.running_to_check(host)? {
        let uuid = t.uuid.as_str();
        if skip.contains(uuid) {
            continue;
        }
        if crate::layout::parse_uuid(uuid).ok().as_deref() != Some(uuid) {
            tracing::error!(%uuid, "a running row with an invalid UUID: left alone (see `ctxhost fsck`)");
            continue;
        }
        let (name, id) = (t.holder.hostname.as_deref(), t.holder.host_id.as_deref());
        let on_this_host = me.host.recorded(name, id);
        if let Some(other) = me.host.clash(name, id) {
            // Another live machine with this name: its pids mean nothing here.
            warn_name_clash(&me.host, other);
        }
        let worker = t.holder.worker_id.as_deref().unwrap_or("an unknown worker");
        let (cause, only_if_expired) = match (on_this_host, t.holder.process_id) {
            (true, Some(p)) if process_runs_task(p, uuid, t.holder.worker_id.as_deref()) => {
                if !t.expired {
                    continue;
                }
                // A live process renews its lease or stops itself: this one is stopped or hung.
                kill_and_wait(p);
                (
                    format!(
                        "task process {p} on {host} held an expired lease (stopped or hung) and was killed"
                    ),
                    true,
                )
            }
            (true, Some(p)) => (format!("task process {p} on {host} is gone"), false),
            (true, None) if !t.expired => continue,
            (_, None) => (
                format!(
                    "the recovery of the task by {worker} stopped half-way (its lease expired)"
                ),
                true,
            ),
            (false, Some(_)) if !t.expired => continue,
            (false, Some(p)) => (
                format!(
                    "the lease of worker {worker} (task process {p} on {}) expired",
                    t.holder.hostname.as_deref().unwrap_or("an unknown host")
                ),
                true,
            ),
        };
        let lost = Lost {
            holder: t.holder.clone(),
            cause,
            only_if_expired,
            crash: true,
        };
        if let Some(r) = recover_task(db, layout, uuid, &lost, max_crashes, me)? {
            let cause = if only_if_expired {
                "lease_expired"
            } else {
                "crash"
            };
            crate::metrics::global()
                .recovered
                .get_or_create(&crate::metrics::CauseLabel {
                    cause: cause.to_string(),
                })
                .inc();
            out.push(r);
        }
    }
    for (uuid, what) in lifecycle::complete_all_interrupted(db, layout, None)? {
        tracing::warn!(%uuid, "recovery: finished an interrupted transition: {what}");
    }
    Ok(out)
}

/// SIGKILL process `pid` and wait (up to 5 s) until it is gone.
fn kill_and_wait(pid: i64) {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill has no memory effects; `p` is a positive pid of a ctxhost task process.
    unsafe { libc::kill(p, libc::SIGKILL) };
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        // SAFETY: signal 0 only checks for the process.
        if unsafe { libc::kill(p, 0) } != 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{TestStore, new_task, store_tests};
    use crate::layout::DirState;
    use crate::lifecycle::{Claim, apply};

    const U: &str = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b";

    /// A claim of U by `pid` on this host, with a lease of `lease`.
    fn claim(db: &Db, layout: &Layout, pid: u32, lease: Duration) -> bool {
        let mut c = Claim::test(pid);
        c.hostname = crate::layout::hostname();
        c.host_id = crate::host::host_id();
        c.lease = lease;
        apply(db, layout, U, &Transition::Claim(&c))
            .unwrap()
            .is_some()
    }

    fn setup(store: &TestStore) -> (Layout, Db) {
        let layout = Layout::new(store.contexts());
        layout.ensure().unwrap();
        let db = store.open();
        db.insert_queued(&new_task(U)).unwrap();
        (layout, db)
    }

    fn me() -> Recoverer {
        Recoverer::new(Duration::from_secs(30))
    }

    fn lost(holder: Holder) -> Lost {
        Lost {
            holder,
            cause: "gone".into(),
            only_if_expired: false,
            crash: true,
        }
    }

    fn holder(db: &Db) -> Holder {
        Holder::of(&db.get(U).unwrap().unwrap())
    }

    #[test]
    fn our_own_process_is_not_a_task_process_and_a_dead_pid_is_gone() {
        assert!(!process_runs_task(std::process::id() as i64, U, None));
        assert!(!process_runs_task(0, U, None));
        assert!(!process_runs_task(i64::from(i32::MAX) + 1, U, None));
        // A child that has exited and been reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i64;
        child.wait().unwrap();
        assert!(!process_runs_task(pid, U, Some("h:1:test")));
    }

    store_tests! {
        fn a_dead_task_is_repaired_requeued_then_failed_after_max_crashes(store: &TestStore) {
            let (layout, db) = setup(store);
            for round in 1..=2 {
                assert!(claim(&db, &layout, 999_999, Duration::from_secs(30)));
                let dir = layout.task_dir(DirState::Running, U);
                if round == 1 {
                    std::fs::write(dir.join("messages.jsonl"), "{\"seq\":1,\"ro").unwrap();
                    std::fs::write(dir.join("request.json"), "{}").unwrap();
                }
                let got = recover_dead_tasks(&db, &layout, &HashSet::new(), 2, &me()).unwrap();
                assert_eq!(got.len(), 1);
                let r = &got[0];
                assert_eq!(r.crash_count, round);
                assert_eq!(r.pid, Some(999_999));
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
                recover_dead_tasks(&db, &layout, &HashSet::new(), 2, &me())
                    .unwrap()
                    .is_empty()
            );
        }

        fn another_hosts_task_is_taken_over_only_when_its_lease_expires(store: &TestStore) {
            let (layout, db) = setup(store);
            let mut c = Claim::test(std::process::id());
            c.hostname = "some-other-host".into();
            c.lease = Duration::from_millis(300);
            assert!(apply(&db, &layout, U, &Transition::Claim(&c)).unwrap().is_some());
            // Its pid is alive here, but that means nothing for another host's task: the
            // lease decides.
            assert!(recover_dead_tasks(&db, &layout, &HashSet::new(), 3, &me()).unwrap().is_empty());
            assert_eq!(db.get(U).unwrap().unwrap().status, Status::Running);
            std::thread::sleep(Duration::from_millis(400));
            let got = recover_dead_tasks(&db, &layout, &HashSet::new(), 3, &me()).unwrap();
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].status, Status::Queued);
            assert!(got[0].message.contains("the lease of worker h:1:test"), "{}", got[0].message);
            assert!(got[0].message.contains("some-other-host"), "{}", got[0].message);
            assert!(layout.task_dir(DirState::Paused, U).is_dir());
        }

        /// Issue 25 item 3: a live machine that shares this host's name (another host
        /// identity) runs a task. Its pid means nothing here (not alive here): the task is
        /// left to its lease, and taken over only once that expired; a row of an older
        /// ctxhost (no identity) is judged by its lease too.
        fn a_task_of_another_host_with_this_name_is_left_to_its_lease(store: &TestStore) {
            let (layout, db) = setup(store);
            let mut c = Claim::test(999_996);
            c.hostname = crate::layout::hostname();
            c.host_id = "another-machine".into();
            c.lease = Duration::from_secs(1);
            assert!(apply(&db, &layout, U, &Transition::Claim(&c)).unwrap().is_some());
            assert!(recover_dead_tasks(&db, &layout, &HashSet::new(), 3, &me()).unwrap().is_empty());
            let row = db.get(U).unwrap().unwrap();
            assert_eq!((row.status, row.process_id, row.crash_count), (Status::Running, Some(999_996), 0));
            assert_eq!(row.host_id.as_deref(), Some("another-machine"));
            assert!(layout.task_dir(DirState::Running, U).is_dir());
            std::thread::sleep(Duration::from_millis(1100));
            let got = recover_dead_tasks(&db, &layout, &HashSet::new(), 3, &me()).unwrap();
            assert_eq!(got.len(), 1);
            assert_eq!((got[0].status, got[0].crash_count), (Status::Queued, 1));
            assert!(got[0].message.contains("the lease of worker h:1:test"), "{}", got[0].message);

            // No identity recorded (a row of a ctxhost before schema 7): the lease decides.
            apply(&db, &layout, U, &Transition::Claim(&c)).unwrap();
            db.execute_raw(&format!("UPDATE tasks SET host_id = NULL WHERE uuid = '{U}'")).unwrap();
            assert!(recover_dead_tasks(&db, &layout, &HashSet::new(), 3, &me()).unwrap().is_empty());
            assert_eq!(db.get(U).unwrap().unwrap().status, Status::Running);

            // The same name and identity: this host's process, gone, so recovered at once.
            db.execute_raw(&format!(
                "UPDATE tasks SET host_id = '{}', lease_expires_at = lease_expires_at + 60000 WHERE uuid = '{U}'",
                crate::host::host_id()
            ))
            .unwrap();
            let got = recover_dead_tasks(&db, &layout, &HashSet::new(), 3, &me()).unwrap();
            assert_eq!(got.len(), 1);
            assert!(got[0].message.contains("task process 999996 on"), "{}", got[0].message);
            assert_eq!(got[0].crash_count, 2);
        }

        fn pending_requests_are_honoured_and_skipped_tasks_left_alone(store: &TestStore) {
            let (layout, db) = setup(store);
            claim(&db, &layout, 999_998, Duration::from_secs(30));
            let skip: HashSet<String> = [U.to_string()].into();
            assert!(
                recover_dead_tasks(&db, &layout, &skip, 3, &me())
                    .unwrap()
                    .is_empty()
            );
            assert_eq!(db.get(U).unwrap().unwrap().status, Status::Running);

            db.request_pause(U, Some("later")).unwrap();
            let seen = lost(holder(&db));
            let r = recover_task(&db, &layout, U, &seen, 3, &me())
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
                recover_task(&db, &layout, U, &seen, 3, &me()).unwrap(),
                None
            );

            apply(&db, &layout, U, &Transition::Resume).unwrap();
            claim(&db, &layout, 999_997, Duration::from_secs(30));
            assert!(layout.task_dir(DirState::Running, U).is_dir());
            db.request_stop(U).unwrap();
            // A holder that is not the row's is not recovered.
            assert_eq!(
                recover_task(&db, &layout, U, &seen, 3, &me()).unwrap(),
                None
            );
            let r = recover_task(&db, &layout, U, &lost(holder(&db)), 3, &me())
                .unwrap()
                .unwrap();
            assert_eq!(r.status, Status::Stopped);
            assert!(layout.task_dir(DirState::Completed, U).is_dir());
            let row = db.get(U).unwrap().unwrap();
            assert_eq!((row.status, row.crash_count), (Status::Stopped, 2));
            assert!(row.completed_at.is_some());
        }
    }
}
