//! The queue is the `tasks` table: `ctxhost submit` inserts a `queued` row
//! ([`Db::insert_queued`]); the worker looks for queued tasks, recovery for running ones, cleanup
//! for finished ones. Claiming a task (queued → running) is a lifecycle transition
//! ([`crate::lifecycle::Transition::Claim`]).

use super::{COLUMNS, Db, DbError, NewTask, TaskRow, args, now_rfc3339};
use crate::task_ref::UuidPrefix;

impl Db {
    /// Insert `task` as `queued` with `created_at` = now. Errors if the UUID exists.
    pub fn insert_queued(&self, task: &NewTask) -> Result<(), DbError> {
        let now = now_rfc3339();
        self.execute(
            "INSERT INTO tasks (uuid, task_source, owner, repo, task_type, task_id, status, created_at, \
             updated_at, llm_provider, model, context_length, \"user\", prompt, no_inherit, \
             workspace) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'queued', ?7, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            args![
                task.uuid.as_str(),
                task.key.task_source.as_str(),
                task.key.owner.as_deref(),
                task.key.repo.as_deref(),
                task.key.task_type.as_deref(),
                task.key.task_id.as_deref(),
                now,
                task.llm_provider.as_str(),
                task.model.as_str(),
                task.context_length,
                task.user.as_deref(),
                task.prompt.as_str(),
                task.no_inherit,
                task.workspace.as_deref(),
            ],
        )?;
        Ok(())
    }

    /// Tasks whose UUID starts with `prefix`, in UUID order, at most `limit`: the candidates a
    /// short UUID given on the command line names ([`crate::task_ref::TaskRef::resolve`]).
    /// One `LIKE` with the pattern as a parameter; a [`UuidPrefix`] holds only hexadecimal
    /// digits and hyphens, so nothing in it is a wildcard.
    pub fn tasks_with_uuid_prefix(
        &self,
        prefix: &UuidPrefix,
        limit: u32,
    ) -> Result<Vec<TaskRow>, DbError> {
        self.query(
            &format!("SELECT {COLUMNS} FROM tasks WHERE uuid LIKE ?1 ORDER BY uuid LIMIT ?2"),
            &args![prefix.like_pattern(), limit],
        )?
        .iter()
        .map(|r| self.task_row(r))
        .collect()
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
        let order = self.dialect().insert_order();
        self.query(
            &format!(
                "SELECT {COLUMNS} FROM tasks WHERE status = 'completed' AND task_source = ?1 \
                 AND owner IS NOT DISTINCT FROM ?2 AND repo IS NOT DISTINCT FROM ?3 \
                 AND task_type IS NOT DISTINCT FROM ?4 AND task_id IS NOT DISTINCT FROM ?5 \
                 AND completed_at IS NOT NULL AND completed_at >= ?6 AND uuid <> ?7 \
                 ORDER BY completed_at DESC, {order} DESC LIMIT ?8"
            ),
            &args![
                key.task_source.as_str(),
                key.owner.as_deref(),
                key.repo.as_deref(),
                key.task_type.as_deref(),
                key.task_id.as_deref(),
                since,
                except,
                limit
            ],
        )?
        .iter()
        .map(|r| self.task_row(r))
        .collect()
    }

    /// UUIDs of queued tasks, oldest first, at most `limit`.
    pub fn list_queued(&self, limit: u32) -> Result<Vec<String>, DbError> {
        let order = self.dialect().insert_order();
        self.query(
            &format!(
                "SELECT uuid FROM tasks WHERE status = 'queued' ORDER BY created_at, {order} LIMIT ?1"
            ),
            &args![limit],
        )?
        .iter()
        .map(|r| r.text(0))
        .collect()
    }

    /// How many tasks are queued.
    pub fn count_queued(&self) -> Result<u64, DbError> {
        let n = self
            .query("SELECT COUNT(*) FROM tasks WHERE status = 'queued'", &[])?
            .first()
            .map(|r| r.int(0))
            .transpose()?
            .unwrap_or(0);
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// `(uuid, process_id)` of every `running` task recorded on `hostname` (process_id may be
    /// missing in a damaged row, or while a recovery holds the task).
    pub fn running_on_host(&self, hostname: &str) -> Result<Vec<(String, Option<i64>)>, DbError> {
        let order = self.dialect().insert_order();
        self.query(
            &format!(
                "SELECT uuid, process_id FROM tasks WHERE status = 'running' AND hostname = ?1 \
                 ORDER BY started_at, {order}"
            ),
            &args![hostname],
        )?
        .iter()
        .map(|r| Ok((r.text(0)?, r.opt_int(1)?)))
        .collect()
    }

    /// Finished tasks (`completed`, `failed`, `stopped`) whose `completed_at` is at or before
    /// `cutoff` (RFC 3339 UTC text) and whose files were not deleted yet, oldest first.
    pub fn finished_before(&self, cutoff: &str) -> Result<Vec<TaskRow>, DbError> {
        let order = self.dialect().insert_order();
        self.query(
            &format!(
                "SELECT {COLUMNS} FROM tasks WHERE status IN ('completed', 'failed', 'stopped') \
                 AND completed_at IS NOT NULL AND completed_at <= ?1 AND files_deleted_at IS NULL \
                 ORDER BY completed_at, {order}"
            ),
            &args![cutoff],
        )?
        .iter()
        .map(|r| self.task_row(r))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::db::testing::{new_task, store_tests};
    use crate::db::{Status, TaskKey};
    use crate::lifecycle::{Claim, Owner, row};

    /// A task `uuid` with key github `owner`/app issue `id` (`owner` `None`: a key without an
    /// owner).
    fn keyed(uuid: &str, owner: Option<&str>, id: &str) -> crate::db::NewTask {
        let mut t = new_task(uuid);
        t.key = TaskKey {
            task_source: "github".into(),
            owner: owner.map(str::to_string),
            repo: Some("app".into()),
            task_type: Some("issue".into()),
            task_id: Some(id.into()),
        };
        t
    }

    store_tests! {
        /// Context inheritance's lookup: completed tasks of exactly this key (a missing part
        /// equals only a missing part), completed since the cutoff, newest first, bounded.
        fn completed_tasks_are_found_by_task_key(store: &TestStore) {
            let db = store.open();
            let complete = |uuid: &str, pid: u32| {
                assert!(row::claim(&db, uuid, &Claim::test(pid)).unwrap());
                row::finish(&db, uuid, Owner::test(pid), Status::Completed, None).unwrap();
            };
            for (i, (uuid, owner, id)) in [
                ("k1", Some("acme"), "7"),
                ("k2", Some("acme"), "7"),
                ("k3", Some("acme"), "7"),
                ("other-id", Some("acme"), "8"),
                ("no-owner", None, "7"),
            ]
            .into_iter()
            .enumerate()
            {
                db.insert_queued(&keyed(uuid, owner, id)).unwrap();
                complete(uuid, 10 + i as u32);
            }
            db.insert_queued(&keyed("open", Some("acme"), "7")).unwrap();
            let key = keyed("x", Some("acme"), "7").key;
            let since = "2000-01-01T00:00:00.000Z";
            let found = |key: &TaskKey, since: &str, except: &str, limit: u32| -> Vec<String> {
                db.completed_with_key(key, since, except, limit)
                    .unwrap()
                    .into_iter()
                    .map(|r| r.uuid)
                    .collect()
            };
            assert_eq!(found(&key, since, "none", 10), ["k3", "k2", "k1"]);
            assert_eq!(found(&key, since, "k3", 10), ["k2", "k1"]);
            assert_eq!(found(&key, since, "none", 2), ["k3", "k2"]);
            assert!(found(&key, "9999-01-01T00:00:00.000Z", "none", 10).is_empty());
            let no_owner = keyed("x", None, "7").key;
            assert_eq!(found(&no_owner, since, "none", 10), ["no-owner"]);
        }

        fn no_inherit_is_stored(store: &TestStore) {
            let db = store.open();
            let mut t = new_task("fresh");
            t.no_inherit = true;
            db.insert_queued(&t).unwrap();
            db.insert_queued(&new_task("default")).unwrap();
            assert!(db.get("fresh").unwrap().unwrap().no_inherit);
            assert!(!db.get("default").unwrap().unwrap().no_inherit);
        }

        /// `submit --workspace`: stored with the queued row, read back; none by default.
        fn workspace_is_stored(store: &TestStore) {
            let db = store.open();
            let mut t = new_task("placed");
            t.workspace = Some("/srv/ws ü".into());
            db.insert_queued(&t).unwrap();
            db.insert_queued(&new_task("default")).unwrap();
            assert_eq!(db.get("placed").unwrap().unwrap().workspace.as_deref(), Some("/srv/ws ü"));
            assert_eq!(db.get("default").unwrap().unwrap().workspace, None);
        }

        fn finished_rows_are_listed_for_cleanup_until_marked(store: &TestStore) {
            let db = store.open();
            for id in ["a", "b"] {
                db.insert_queued(&new_task(id)).unwrap();
            }
            row::claim(&db, "a", &Claim::test(1)).unwrap();
            row::finish(&db, "a", Owner::test(1), Status::Completed, None).unwrap();
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

        fn running_tasks_are_found_by_host(store: &TestStore) {
            let db = store.open();
            db.insert_queued(&new_task("t")).unwrap();
            let mut claim = Claim::test(5);
            claim.hostname = "host-a".into();
            row::claim(&db, "t", &claim).unwrap();
            assert_eq!(
                db.running_on_host("host-a").unwrap(),
                vec![("t".to_string(), Some(5))]
            );
            assert!(db.running_on_host("host-b").unwrap().is_empty());
            assert_eq!(db.count_queued().unwrap(), 0);
        }
    }
}
