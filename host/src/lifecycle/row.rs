//! The row half of each transition: one conditional `UPDATE` of the `tasks` row, which is the
//! transition's commit point (it decides races: two claimers, a claim and a stop). The only
//! statements that change a task's `status` or mark its files deleted; called by
//! [`super::apply`] (and by tests).

use rusqlite::params;

use super::{Claim, Status};
use crate::db::{Db, DbError, now_rfc3339};
use crate::untrusted::{self, MAX_DB_ERROR_BYTES};

/// What the database keeps of an error message: bounded and escaped, whoever wrote it.
fn bounded(message: &str) -> std::borrow::Cow<'_, str> {
    untrusted::text(message, MAX_DB_ERROR_BYTES)
}

/// Queued → running for the process of `claim`: one atomic
/// `UPDATE … SET status='running', process_id, hostname, started_at … WHERE uuid=? AND status='queued'`.
/// `started_at` keeps its first value on a resume. Returns whether this process won the claim.
pub fn claim(db: &Db, uuid: &str, claim: &Claim) -> Result<bool, DbError> {
    let now = now_rfc3339();
    let n = db.retry(|c| {
        c.execute(
            "UPDATE tasks SET status = 'running', process_id = ?2, hostname = ?3, \
             started_at = COALESCE(started_at, ?4), updated_at = ?4, llm_provider = ?5, model = ?6, \
             context_length = ?7, error_message = NULL \
             WHERE uuid = ?1 AND status = 'queued'",
            params![
                uuid,
                i64::from(claim.pid),
                claim.hostname,
                now,
                claim.llm_provider,
                claim.model,
                claim.context_length as i64
            ],
        )
    })?;
    Ok(n == 1)
}

/// Running under `pid` → paused, pause request cleared (the reason stays until the task is
/// resumed). Returns whether it changed.
pub fn mark_paused(db: &Db, uuid: &str, pid: u32) -> Result<bool, DbError> {
    let now = now_rfc3339();
    let n = db.retry(|c| {
        c.execute(
            "UPDATE tasks SET status = 'paused', pause_requested = 0, updated_at = ?3 \
             WHERE uuid = ?1 AND status = 'running' AND process_id = ?2",
            params![uuid, i64::from(pid), now],
        )
    })?;
    Ok(n == 1)
}

/// Running under `pid` → a final `status` (`completed`, `failed`, `stopped`) with
/// `error_message` and `completed_at` = now; requests cleared. Returns whether it changed.
pub fn finish(
    db: &Db,
    uuid: &str,
    pid: u32,
    status: Status,
    error_message: Option<&str>,
) -> Result<bool, DbError> {
    debug_assert!(status.is_final(), "finish with non-final status {status}");
    let error_message = error_message.map(bounded);
    let now = now_rfc3339();
    let n = db.retry(|c| {
        c.execute(
            "UPDATE tasks SET status = ?3, error_message = ?4, completed_at = ?5, updated_at = ?5, \
             pause_requested = 0, stop_requested = 0, pause_reason = NULL \
             WHERE uuid = ?1 AND status = 'running' AND process_id = ?2",
            params![uuid, i64::from(pid), status.as_str(), error_message, now],
        )
    })?;
    Ok(n == 1)
}

/// Running under the dead process `pid` (`None`: a row with no pid recorded) → `status`:
/// `queued` (to run again), `paused` or `stopped` (a request that was pending), or `failed`,
/// with `error_message`; counts the crash; final statuses get `completed_at`. Returns whether
/// it changed.
pub fn settle_crash(
    db: &Db,
    uuid: &str,
    pid: Option<i64>,
    status: Status,
    error_message: Option<&str>,
) -> Result<bool, DbError> {
    debug_assert!(status != Status::Running);
    let error_message = error_message.map(bounded);
    let now = now_rfc3339();
    let n = db.retry(|c| {
        c.execute(
            "UPDATE tasks SET status = ?3, error_message = ?4, updated_at = ?5, \
             crash_count = crash_count + 1, \
             completed_at = CASE WHEN ?6 THEN ?5 ELSE completed_at END, \
             pause_requested = 0, \
             stop_requested = CASE WHEN ?6 THEN 0 ELSE stop_requested END \
             WHERE uuid = ?1 AND status = 'running' AND process_id IS ?2",
            params![
                uuid,
                pid,
                status.as_str(),
                error_message,
                now,
                status.is_final()
            ],
        )
    })?;
    Ok(n == 1)
}

/// Paused → queued (`ctxhost resume`), pause request cleared. Returns whether it was paused.
pub fn resume(db: &Db, uuid: &str) -> Result<bool, DbError> {
    let now = now_rfc3339();
    let n = db.retry(|c| {
        c.execute(
            "UPDATE tasks SET status = 'queued', pause_requested = 0, updated_at = ?2 \
             WHERE uuid = ?1 AND status = 'paused'",
            params![uuid, now],
        )
    })?;
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
        let now = now_rfc3339();
        let n = db.retry(|c| {
            c.execute(
                "UPDATE tasks SET status = 'stopped', completed_at = ?3, updated_at = ?3, \
                 pause_requested = 0, stop_requested = 0, pause_reason = NULL \
                 WHERE uuid = ?1 AND status = ?2",
                params![uuid, row.status.as_str(), now],
            )
        })?;
        if n == 1 {
            return Ok(Some(row.status));
        }
        // The status changed between the read and the update (a claim, a resume): look again.
    }
    Ok(None)
}

/// Queued → failed with `error_message` (its process could not start). Returns whether it changed.
pub fn fail_queued(db: &Db, uuid: &str, error_message: &str) -> Result<bool, DbError> {
    let error_message = bounded(error_message);
    let now = now_rfc3339();
    let n = db.retry(|c| {
        c.execute(
            "UPDATE tasks SET status = 'failed', error_message = ?2, completed_at = ?3, updated_at = ?3 \
             WHERE uuid = ?1 AND status = 'queued'",
            params![uuid, error_message, now],
        )
    })?;
    Ok(n == 1)
}

/// Failed → queued (`ctxhost retry`), unless its files were deleted: `completed_at`,
/// `error_message`, requests and the crash count cleared (the task gets the worker's full
/// crash budget again). Returns whether it changed.
pub fn retry(db: &Db, uuid: &str) -> Result<bool, DbError> {
    let now = now_rfc3339();
    let n = db.retry(|c| {
        c.execute(
            "UPDATE tasks SET status = 'queued', completed_at = NULL, error_message = NULL, \
             crash_count = 0, pause_requested = 0, stop_requested = 0, pause_reason = NULL, updated_at = ?2 \
             WHERE uuid = ?1 AND status = 'failed' AND files_deleted_at IS NULL",
            params![uuid, now],
        )
    })?;
    Ok(n == 1)
}

/// Mark a finished task's files deleted (`ctxhost cleanup`; keeps an earlier mark). Returns
/// whether the row is a finished task.
pub fn mark_files_deleted(db: &Db, uuid: &str) -> Result<bool, DbError> {
    let now = now_rfc3339();
    let n = db.retry(|c| {
        c.execute(
            "UPDATE tasks SET files_deleted_at = COALESCE(files_deleted_at, ?2), updated_at = ?2 \
             WHERE uuid = ?1 AND status IN ('completed', 'failed', 'stopped')",
            params![uuid, now],
        )
    })?;
    Ok(n == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::new_task;

    #[test]
    fn claim_is_won_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let other = Db::open(dir.path()).unwrap();
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

    #[test]
    fn finish_checks_the_pid() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.insert_queued(&new_task("t")).unwrap();
        claim(&db, "t", &Claim::test(7)).unwrap();
        assert!(!finish(&db, "t", 8, Status::Failed, Some("x")).unwrap());
        assert!(finish(&db, "t", 7, Status::Failed, Some("killed by signal 9")).unwrap());
        let row = db.get("t").unwrap().unwrap();
        assert_eq!(row.status, Status::Failed);
        assert_eq!(row.error_message.as_deref(), Some("killed by signal 9"));
        assert!(row.completed_at.is_some());
        assert!(!finish(&db, "t", 7, Status::Completed, None).unwrap());
    }

    #[test]
    fn a_crash_is_settled_once_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.insert_queued(&new_task("t")).unwrap();
        claim(&db, "t", &Claim::test(5)).unwrap();
        assert!(!settle_crash(&db, "t", Some(6), Status::Queued, Some("x")).unwrap());
        assert!(settle_crash(&db, "t", Some(5), Status::Queued, Some("died")).unwrap());
        assert!(!settle_crash(&db, "t", Some(5), Status::Queued, Some("died")).unwrap());
        let row = db.get("t").unwrap().unwrap();
        assert_eq!((row.status, row.crash_count), (Status::Queued, 1));
        assert_eq!(row.completed_at, None);
        claim(&db, "t", &Claim::test(7)).unwrap();
        assert!(settle_crash(&db, "t", Some(7), Status::Failed, Some("gave up")).unwrap());
        let row = db.get("t").unwrap().unwrap();
        assert_eq!((row.status, row.crash_count), (Status::Failed, 2));
        assert!(row.completed_at.is_some());
    }

    #[test]
    fn only_one_of_many_claimers_wins() {
        let dir = tempfile::tempdir().unwrap();
        Db::open(dir.path())
            .unwrap()
            .insert_queued(&new_task("t"))
            .unwrap();
        let threads: Vec<_> = (0..6)
            .map(|i| {
                let p = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    claim(&Db::open(&p).unwrap(), "t", &Claim::test(100 + i)).unwrap()
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
