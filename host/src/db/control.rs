//! Requests to a running task, asked for from outside (`ctxhost pause`, `ctxhost stop`) and read
//! by its process at every safe point ([`Db::control`]); and the resume count the process
//! records. None of these change the status: the process honours a request through a
//! lifecycle transition.

use super::{Db, DbError, args, now_rfc3339};

/// What a running task's process is asked to do at its next safe point ([`Db::control`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Control {
    /// Pause at the next safe point.
    pub pause_requested: bool,
    /// Stop at the next safe point (wins over a pause).
    pub stop_requested: bool,
    /// The `--reason` of the pause, for task_state.json.
    pub pause_reason: Option<String>,
}

impl Db {
    /// Ask a `running` task to pause at its next safe point (`ctxhost pause`), with an optional
    /// reason for task_state.json. Returns whether the task was running (nothing changes otherwise).
    pub fn request_pause(&self, uuid: &str, reason: Option<&str>) -> Result<bool, DbError> {
        let n = self.execute(
            "UPDATE tasks SET pause_requested = 1, pause_reason = ?2, updated_at = ?3 \
             WHERE uuid = ?1 AND status = 'running'",
            args![uuid, reason, now_rfc3339()],
        )?;
        Ok(n == 1)
    }

    /// Ask a `running` task to stop at its next safe point (`ctxhost stop`). Returns whether
    /// the task was running.
    pub fn request_stop(&self, uuid: &str) -> Result<bool, DbError> {
        let n = self.execute(
            "UPDATE tasks SET stop_requested = 1, updated_at = ?2 WHERE uuid = ?1 AND status = 'running'",
            args![uuid, now_rfc3339()],
        )?;
        Ok(n == 1)
    }

    /// The pause/stop requests of a task (a task process asks at each safe point). `None`
    /// when the row does not exist.
    pub fn control(&self, uuid: &str) -> Result<Option<Control>, DbError> {
        self.query_opt(
            "SELECT pause_requested, stop_requested, pause_reason FROM tasks WHERE uuid = ?1",
            &args![uuid],
        )?
        .map(|r| {
            Ok(Control {
                pause_requested: r.int(0)? != 0,
                stop_requested: r.int(1)? != 0,
                pause_reason: r.opt_text(2)?,
            })
        })
        .transpose()
    }

    /// Record how many times the task was resumed (task_state.json holds the same number; the
    /// one process that owns the task sets it, so this is not a shared counter) and drop the
    /// pause reason.
    pub fn set_resume_count(&self, uuid: &str, resume_count: u64) -> Result<(), DbError> {
        self.execute(
            "UPDATE tasks SET resume_count = ?2, pause_reason = NULL, updated_at = ?3 WHERE uuid = ?1",
            args![uuid, resume_count, now_rfc3339()],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::db::Status;
    use crate::db::testing::{new_task, store_tests};
    use crate::lifecycle::{Claim, Owner, row};

    store_tests! {
        fn pause_resume_and_stop_requests_follow_the_status(store: &TestStore) {
            let db = store.open();
            db.insert_queued(&new_task("t")).unwrap();
            // Only a running task can be asked to pause or stop.
            assert!(!db.request_pause("t", Some("lunch")).unwrap());
            assert!(!db.request_stop("t").unwrap());
            row::claim(&db, "t", &Claim::test(5)).unwrap();
            assert!(db.request_pause("t", Some("lunch")).unwrap());
            let c = db.control("t").unwrap().unwrap();
            assert!(c.pause_requested && !c.stop_requested);
            assert_eq!(c.pause_reason.as_deref(), Some("lunch"));
            assert!(
                !row::mark_paused(&db, "t", Owner::test(6)).unwrap(),
                "another pid cannot pause it"
            );
            assert!(row::mark_paused(&db, "t", Owner::test(5)).unwrap());
            let r = db.get("t").unwrap().unwrap();
            assert_eq!(r.status, Status::Paused);
            assert!(!r.pause_requested);
            assert!(row::resume(&db, "t").unwrap());
            assert!(
                !row::resume(&db, "t").unwrap(),
                "a queued task cannot be resumed"
            );
            assert_eq!(db.get("t").unwrap().unwrap().status, Status::Queued);
            db.set_resume_count("t", 1).unwrap();
            assert_eq!(db.get("t").unwrap().unwrap().resume_count, 1);
            // A queued task stops at once; a finished one cannot be stopped again.
            assert_eq!(row::stop_waiting(&db, "t").unwrap(), Some(Status::Queued));
            let r = db.get("t").unwrap().unwrap();
            assert_eq!(r.status, Status::Stopped);
            assert!(r.completed_at.is_some());
            assert_eq!(row::stop_waiting(&db, "t").unwrap(), None);
            assert!(!row::claim(&db, "t", &Claim::test(9)).unwrap());
        }
    }
}
