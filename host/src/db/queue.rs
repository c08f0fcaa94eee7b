//! The queue is the `tasks` table: `ctxhost submit` inserts a `queued` row
//! ([`Db::insert_queued`]); the worker looks for queued tasks, recovery for running ones, cleanup
//! for finished ones. Claiming a task (queued → running) is a lifecycle transition
//! ([`crate::lifecycle::Transition::Claim`]).

use rusqlite::params;

use super::{COLUMNS, Db, DbError, NewTask, TaskRow, now_rfc3339, raw_row};

impl Db {
    /// Insert `task` as `queued` with `created_at` = now. Errors if the UUID exists.
    pub fn insert_queued(&self, task: &NewTask) -> Result<(), DbError> {
        let now = now_rfc3339();
        self.retry(|c| {
            c.execute(
                "INSERT INTO tasks (uuid, task_source, owner, repo, task_type, task_id, status, created_at, \
                 updated_at, llm_provider, model, context_length, user, prompt, no_inherit) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'queued', ?7, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                params![
                    task.uuid,
                    task.key.task_source,
                    task.key.owner,
                    task.key.repo,
                    task.key.task_type,
                    task.key.task_id,
                    now,
                    task.llm_provider,
                    task.model,
                    task.context_length as i64,
                    task.user,
                    task.prompt,
                    task.no_inherit,
                ],
            )
        })?;
        Ok(())
    }

    /// Completed tasks with task key `key` (every field equal, missing ones included) completed at
    /// or after `since` (RFC 3339 UTC text), other than `except`, newest first, at most `limit`:
    /// the candidates a new task of that key inherits from.
    pub fn completed_with_key(
        &self,
        key: &super::TaskKey,
        since: &str,
        except: &str,
        limit: u32,
    ) -> Result<Vec<TaskRow>, DbError> {
        let raws = self.retry(|c| {
            let mut st = c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM tasks WHERE status = 'completed' AND task_source = ?1 \
                 AND owner IS ?2 AND repo IS ?3 AND task_type IS ?4 AND task_id IS ?5 \
                 AND completed_at IS NOT NULL AND completed_at >= ?6 AND uuid <> ?7 \
                 ORDER BY completed_at DESC, rowid DESC LIMIT ?8"
            ))?;
            let rows = st.query_map(
                params![
                    key.task_source,
                    key.owner,
                    key.repo,
                    key.task_type,
                    key.task_id,
                    since,
                    except,
                    i64::from(limit)
                ],
                raw_row,
            )?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
        })?;
        raws.into_iter().map(|r| self.finish_row(r)).collect()
    }

    /// UUIDs of queued tasks, oldest first, at most `limit`.
    pub fn list_queued(&self, limit: u32) -> Result<Vec<String>, DbError> {
        self.retry(|c| {
            let mut st = c.prepare_cached(
                "SELECT uuid FROM tasks WHERE status = 'queued' ORDER BY created_at, rowid LIMIT ?1",
            )?;
            let rows = st.query_map([limit as i64], |r| r.get::<_, String>(0))?;
            rows.collect()
        })
    }

    /// `(uuid, process_id)` of every `running` task recorded on `hostname` (process_id may be
    /// missing in a damaged row).
    pub fn running_on_host(&self, hostname: &str) -> Result<Vec<(String, Option<i64>)>, DbError> {
        self.retry(|c| {
            let mut st = c.prepare_cached(
                "SELECT uuid, process_id FROM tasks WHERE status = 'running' AND hostname = ?1 \
                 ORDER BY started_at, rowid",
            )?;
            let rows = st.query_map([hostname], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })
    }

    /// Finished tasks (`completed`, `failed`, `stopped`) whose `completed_at` is at or before
    /// `cutoff` (RFC 3339 UTC text) and whose files were not deleted yet, oldest first.
    pub fn finished_before(&self, cutoff: &str) -> Result<Vec<TaskRow>, DbError> {
        let raws = self.retry(|c| {
            let mut st = c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM tasks WHERE status IN ('completed', 'failed', 'stopped') \
                 AND completed_at IS NOT NULL AND completed_at <= ?1 AND files_deleted_at IS NULL \
                 ORDER BY completed_at, rowid"
            ))?;
            let rows = st.query_map([cutoff], raw_row)?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
        })?;
        raws.into_iter().map(|r| self.finish_row(r)).collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::db::testing::new_task;
    use crate::db::{Db, Status};
    use crate::lifecycle::{Claim, row};

    #[test]
    fn finished_rows_are_listed_for_cleanup_until_marked() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        for id in ["a", "b"] {
            db.insert_queued(&new_task(id)).unwrap();
        }
        row::claim(&db, "a", &Claim::test(1)).unwrap();
        row::finish(&db, "a", 1, Status::Completed, None).unwrap();
        let later = "9999-01-01T00:00:00.000Z";
        let rows = db.finished_before(later).unwrap();
        assert_eq!(
            rows.iter().map(|r| r.uuid.as_str()).collect::<Vec<_>>(),
            ["a"]
        );
        assert!(
            db.finished_before("2000-01-01T00:00:00.000Z")
                .unwrap()
                .is_empty()
        );
        assert!(row::mark_files_deleted(&db, "a").unwrap());
        assert!(db.get("a").unwrap().unwrap().files_deleted_at.is_some());
        assert!(db.finished_before(later).unwrap().is_empty());
        // Only a finished task's files can be marked deleted.
        assert!(!row::mark_files_deleted(&db, "b").unwrap());
    }

    #[test]
    fn running_tasks_are_found_by_host() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.insert_queued(&new_task("t")).unwrap();
        let mut claim = Claim::test(5);
        claim.hostname = "host-a".into();
        row::claim(&db, "t", &claim).unwrap();
        assert_eq!(
            db.running_on_host("host-a").unwrap(),
            vec![("t".to_string(), Some(5))]
        );
        assert!(db.running_on_host("host-b").unwrap().is_empty());
    }
}
