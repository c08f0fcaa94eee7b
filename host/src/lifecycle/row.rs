//! The row half of each transition: one conditional `UPDATE` of the `tasks` row, which is the
//! transition's commit point (it decides races: two claimers, a claim and a stop). The only
//! statements that change a task's `status` or mark its files deleted; called by
//! [`super::apply`] (and by tests).

use super::{Claim, Owner, Status};
use crate::db::{Db, DbError, args, now_rfc3339};
use crate::untrusted::{self, MAX_DB_ERROR_BYTES};

/// The `SET` list of a claim: parameters `?1`..`?9` of [`claim_args`].
fn claim_set(db: &Db) -> String {
    format!(
        "status = 'running', process_id = ?1, hostname = ?2, started_at = COALESCE(started_at, ?3), \
         updated_at = ?3, llm_provider = ?4, model = ?5, context_length = ?6, error_message = NULL, \
         worker_id = ?7, lease_expires_at = {} + ?8, host_id = ?9",
        db.dialect().now_ms()
    )
}

/// The parameters of [`claim_set`], then `extra` (`?10`...).
fn claim_args(claim: &Claim, extra: Option<&str>) -> Vec<crate::db::Value> {
    let mut a = args![
        i64::from(claim.pid),
        claim.hostname.as_str(),
        now_rfc3339(),
        claim.llm_provider.as_str(),
        claim.model.as_str(),
        claim.context_length,
        claim.worker_id.as_str(),
        i64::try_from(claim.lease.as_millis()).unwrap_or(i64::MAX),
        claim.host_id.as_str()
    ];
    a.extend(extra.map(crate::db::Value::from));
    a
}

/// What the database keeps of an error message: bounded and escaped, whoever wrote it.
fn bounded(message: &str) -> std::borrow::Cow<'_, str> {
    untrusted::text(message, MAX_DB_ERROR_BYTES)
}

/// Queued → running for the process of `claim`: one atomic
/// `UPDATE … SET status='running', process_id, hostname, host_id, worker_id, lease_expires_at, started_at …
/// WHERE uuid=? AND status='queued'`. `started_at` keeps its first value on a resume. Returns
/// whether this process won the claim.
pub fn claim(db: &Db, uuid: &str, claim: &Claim) -> Result<bool, DbError> {
    let n = db.execute(
        &format!(
            "UPDATE tasks SET {} WHERE uuid = ?10 AND status = 'queued'",
            claim_set(db)
        ),
        claim_args(claim, Some(uuid)),
    )?;
    Ok(n == 1)
}

/// The oldest queued task → running for the process of `claim`, in one statement that is
/// safe across hosts: the sub-select of the next queued row skips rows another claim has
/// locked (`FOR UPDATE SKIP LOCKED` on PostgreSQL; SQLite has one writer at a time).
/// Returns the task claimed, or `None` when nothing is queued.
pub fn claim_next(db: &Db, claim: &Claim) -> Result<Option<String>, DbError> {
    let d = db.dialect();
    let rows = db.write_returning(
        &format!(
            "UPDATE tasks SET {} WHERE status = 'queued' AND uuid = (SELECT uuid FROM tasks \
             WHERE status = 'queued' ORDER BY created_at, {} LIMIT 1{}) RETURNING uuid",
            claim_set(db),
            d.insert_order(),
            d.skip_locked()
        ),
        claim_args(claim, None),
    )?;
    rows.first().map(|r| r.text(0)).transpose()
}

/// Running under `owner` → paused, pause request cleared (the reason stays until the task is
/// resumed). Returns whether it changed.
pub fn mark_paused(db: &Db, uuid: &str, owner: Owner<'_>) -> Result<bool, DbError> {
    let n = db.execute(
        "UPDATE tasks SET status = 'paused', pause_requested = 0, updated_at = ?4 \
         WHERE uuid = ?1 AND status = 'running' AND process_id = ?2 AND worker_id = ?3",
        args![uuid, i64::from(owner.pid), owner.worker_id, now_rfc3339()],
    )?;
    Ok(n == 1)
}

/// Running under `owner` → a final `status` (`completed`, `failed`, `stopped`) with
/// `error_message` and `completed_at` = now; requests cleared. Returns whether it changed.
pub fn finish(
    db: &Db,
    uuid: &str,
    owner: Owner<'_>,
    status: Status,
    error_message: Option<&str>,
) -> Result<bool, DbError> {
    debug_assert!(status.is_final(), "finish with non-final status {status}");
    let error_message = error_message.map(bounded);
    let n = db.execute(
        "UPDATE tasks SET status = ?4, error_message = ?5, completed_at = ?6, updated_at = ?6, \
         pause_requested = 0, stop_requested = 0, pause_reason = NULL \
         WHERE uuid = ?1 AND status = 'running' AND process_id = ?2 AND worker_id = ?3",
        args![
            uuid,
            i64::from(owner.pid),
            owner.worker_id,
            status.as_str(),
            error_message.as_deref(),
            now_rfc3339()
        ],
    )?;
    Ok(n == 1)
}

/// Running, taken over by recoverer `worker_id` (no process: [`Db::take_over`]) → `status`:
/// `queued` (to run again), `paused` or `stopped` (a request that was pending), or `failed`,
/// with `error_message`; counts the crash if `crash` (not for a process that fenced itself
/// out); final statuses get `completed_at`. Returns whether it changed.
///
/// [`Db::take_over`]: crate::db::Db::take_over
pub fn settle_crash(
    db: &Db,
    uuid: &str,
    worker_id: &str,
    status: Status,
    error_message: Option<&str>,
    crash: bool,
) -> Result<bool, DbError> {
    debug_assert!(status != Status::Running);
    let error_message = error_message.map(bounded);
    let n = db.execute(
        "UPDATE tasks SET status = ?3, error_message = ?4, updated_at = ?5, \
         crash_count = crash_count + ?7, \
         completed_at = CASE WHEN ?6 = 1 THEN ?5 ELSE completed_at END, \
         pause_requested = 0, \
         stop_requested = CASE WHEN ?6 = 1 THEN 0 ELSE stop_requested END \
         WHERE uuid = ?1 AND status = 'running' AND worker_id = ?2 AND process_id IS NULL",
        args![
            uuid,
            worker_id,
            status.as_str(),
            error_message.as_deref(),
            now_rfc3339(),
            status.is_final(),
            i64::from(crash)
        ],
    )?;
    Ok(n == 1)
}

/// Paused → queued (`ctxhost resume`), pause request cleared. Returns whether it was paused.
pub fn resume(db: &Db, uuid: &str) -> Result<bool, DbError> {
    let n = db.execute(
        "UPDATE tasks SET status = 'queued', pause_requested = 0, updated_at = ?2 \
         WHERE uuid = ?1 AND status = 'paused'",
        args![uuid, now_rfc3339()],
    )?;
    Ok(n == 1)
}

/// Queued or paused (no process runs it) → stopped, `completed_at` = now. One conditional
/// UPDATE per attempt, so it never races a claim: either the claim or the stop wins. Returns
/// the status the task had, or `None` when it was neither queued nor paused (running, finished
/// or unknown).
pub fn stop_waiting(db: &Db, uuid: &str) -> Result<Option<Status>, DbError> {
    for _ in 0..8 {
        let Some(row) = db.get(uuid)? else {
            return Ok(None);
        };
        if !matches!(row.status, Status::Queued | Status::Paused) {
            return Ok(None);
        }
        let n = db.execute(
            "UPDATE tasks SET status = 'stopped', completed_at = ?3, updated_at = ?3, \
             pause_requested = 0, stop_requested = 0, pause_reason = NULL \
             WHERE uuid = ?1 AND status = ?2",
            args![uuid, row.status.as_str(), now_rfc3339()],
        )?;
        if n == 1 {
            return Ok(Some(row.status));
        }
        // The status changed between the read and the update (a claim, a resume): look again.
    }
    Ok(None)
}

/// Failed → queued (`ctxhost retry`), unless its files were deleted: `completed_at`,
/// `error_message`, requests and the crash count cleared (the task gets the worker's full
/// crash budget again). Returns whether it changed.
pub fn retry(db: &Db, uuid: &str) -> Result<bool, DbError> {
    let n = db.execute(
        "UPDATE tasks SET status = 'queued', completed_at = NULL, error_message = NULL, \
         crash_count = 0, pause_requested = 0, stop_requested = 0, pause_reason = NULL, updated_at = ?2 \
         WHERE uuid = ?1 AND status = 'failed' AND files_deleted_at IS NULL",
        args![uuid, now_rfc3339()],
    )?;
    Ok(n == 1)
}

/// Mark a finished task's files deleted (`ctxhost cleanup`; keeps an earlier mark). Returns
/// whether the row is a finished task.
pub fn mark_files_deleted(db: &Db, uuid: &str) -> Result<bool, DbError> {
    let n = db.execute(
        "UPDATE tasks SET files_deleted_at = COALESCE(files_deleted_at, ?2), updated_at = ?2 \
         WHERE uuid = ?1 AND status IN ('completed', 'failed', 'stopped')",
        args![uuid, now_rfc3339()],
    )?;
    Ok(n == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{new_task, store_tests};

    store_tests! {
        fn claim_is_won_once(store: &TestStore) {
            let db = store.open();
            let other = store.open();
            db.insert_queued(&new_task("t")).unwrap();
            let mut c = Claim::test(10);
            c.model = "m2".into();
            assert!(claim(&db, "t", &c).unwrap());
            c.pid = 11;
            assert!(!claim(&other, "t", &c).unwrap());
            let row = db.get("t").unwrap().unwrap();
            assert_eq!(row.status, Status::Running);
            assert_eq!(row.process_id, Some(10));
            assert_eq!(row.model.as_deref(), Some("m2"));
            assert!(row.started_at.is_some());
            assert!(db.list_queued(10).unwrap().is_empty());
        }

        fn claim_next_takes_the_oldest_queued_task(store: &TestStore) {
            let db = store.open();
            assert_eq!(claim_next(&db, &Claim::test(1)).unwrap(), None);
            for id in ["a", "b", "c"] {
                db.insert_queued(&new_task(id)).unwrap();
            }
            assert!(claim(&db, "a", &Claim::test(1)).unwrap());
            assert_eq!(claim_next(&db, &Claim::test(2)).unwrap().as_deref(), Some("b"));
            assert_eq!(claim_next(&db, &Claim::test(3)).unwrap().as_deref(), Some("c"));
            assert_eq!(claim_next(&db, &Claim::test(4)).unwrap(), None);
            let c = db.get("c").unwrap().unwrap();
            assert_eq!((c.status, c.process_id), (Status::Running, Some(3)));
            assert_eq!(c.worker_id.as_deref(), Some("h:1:test"));
        }

        fn concurrent_claimers_take_every_task_exactly_once(store: &TestStore) {
            let db = store.open();
            for i in 0..60 {
                db.insert_queued(&new_task(&format!("t{i:02}"))).unwrap();
            }
            let threads: Vec<_> = (0..4)
                .map(|w| {
                    let spec = store.spec.clone();
                    let dir = store.contexts().to_path_buf();
                    std::thread::spawn(move || {
                        let db = Db::open(&spec, &dir).unwrap();
                        let mut mine = Vec::new();
                        while let Some(u) = claim_next(&db, &Claim::test(100 + w)).unwrap() {
                            mine.push(u);
                        }
                        mine
                    })
                })
                .collect();
            let mut all: Vec<String> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
            all.sort();
            let want: Vec<String> = (0..60).map(|i| format!("t{i:02}")).collect();
            assert_eq!(all, want, "every task claimed once");
        }

        fn finish_checks_the_owner(store: &TestStore) {
            let db = store.open();
            db.insert_queued(&new_task("t")).unwrap();
            claim(&db, "t", &Claim::test(7)).unwrap();
            assert!(!finish(&db, "t", Owner::test(8), Status::Failed, Some("x")).unwrap());
            let other_worker = Owner { pid: 7, worker_id: "elsewhere:7:x" };
            assert!(!finish(&db, "t", other_worker, Status::Failed, Some("x")).unwrap());
            assert!(finish(&db, "t", Owner::test(7), Status::Failed, Some("killed by signal 9")).unwrap());
            let row = db.get("t").unwrap().unwrap();
            assert_eq!(row.status, Status::Failed);
            assert_eq!(row.error_message.as_deref(), Some("killed by signal 9"));
            assert!(row.completed_at.is_some());
            assert!(!finish(&db, "t", Owner::test(7), Status::Completed, None).unwrap());
        }

        fn a_crash_is_settled_once_by_its_recoverer_and_counted(store: &TestStore) {
            let db = store.open();
            db.insert_queued(&new_task("t")).unwrap();
            claim(&db, "t", &Claim::test(5)).unwrap();
            let seen = db.get("t").unwrap().unwrap();
            let holder = crate::db::lease::Holder::of(&seen);
            let h = crate::host::ThisHost { name: "h".into(), id: "h-id".into() };
            let ttl = std::time::Duration::from_secs(30);
            // Not taken over: nothing to settle.
            assert!(!settle_crash(&db, "t", "r:1:x", Status::Queued, Some("x"), true).unwrap());
            assert!(db.take_over("t", &holder, "r:1:x", &h, ttl, false).unwrap());
            assert!(!settle_crash(&db, "t", "r:2:y", Status::Queued, Some("x"), true).unwrap());
            assert!(settle_crash(&db, "t", "r:1:x", Status::Queued, Some("died"), true).unwrap());
            assert!(!settle_crash(&db, "t", "r:1:x", Status::Queued, Some("died"), true).unwrap());
            let row = db.get("t").unwrap().unwrap();
            assert_eq!((row.status, row.crash_count), (Status::Queued, 1));
            assert_eq!(row.completed_at, None);
            claim(&db, "t", &Claim::test(7)).unwrap();
            let holder = crate::db::lease::Holder {
                process_id: Some(7),
                ..holder
            };
            assert!(db.take_over("t", &holder, "r:1:x", &h, ttl, false).unwrap());
            assert!(settle_crash(&db, "t", "r:1:x", Status::Failed, Some("gave up"), true).unwrap());
            let row = db.get("t").unwrap().unwrap();
            assert_eq!((row.status, row.crash_count), (Status::Failed, 2));
            assert!(row.completed_at.is_some());
        }

        fn only_one_of_many_claimers_wins(store: &TestStore) {
            store.open().insert_queued(&new_task("t")).unwrap();
            let threads: Vec<_> = (0..6)
                .map(|i| {
                    let spec = store.spec.clone();
                    let p = store.contexts().to_path_buf();
                    std::thread::spawn(move || {
                        claim(&Db::open(&spec, &p).unwrap(), "t", &Claim::test(100 + i)).unwrap()
                    })
                })
                .collect();
            let wins = threads
                .into_iter()
                .map(|t| t.join().unwrap())
                .filter(|w| *w)
                .count();
            assert_eq!(wins, 1);
        }
    }
}
