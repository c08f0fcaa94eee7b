//! Copying every row from one store to another (`ctxhost migrate`): the `tasks` table (every
//! column, `source_item` included) and the task sources' `publications` table, and the
//! [`Tally`] both sides are compared by afterwards.

use super::{COLUMNS, Db, DbError, Status, TaskRow, Value, args};

/// Every column of `publications`, in the order [`Db::copy_rows_to`] copies them.
const PUBLICATION_COLUMNS: &str = "task_uuid, labels_state, comment_state, comment_id, comment_url, \
posted_at, lease_owner, lease_until_ms, attempts, last_error, next_attempt_ms, item_url, created_at, updated_at, change_state, change_commit, change_branch, change_base, \
pr_number, pr_url";

/// Rows read and written per batch.
const PAGE: u32 = 500;

/// What a store holds, to compare two stores: per status, the tasks and the sums of their
/// counters; the tasks that hold a GitHub / GitLab item or were submitted `--no-inherit`; per
/// result-comment state, the `publications` rows and their failed attempts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Tally {
    /// Tasks in the store.
    pub tasks: i64,
    /// `(status, tasks, llm calls, tool calls, tokens, compressions, crashes, resumes)` per
    /// status present, in status order.
    pub by_status: Vec<(String, [i64; 7])>,
    /// Tasks holding their item (`source_item` set: result not yet published).
    pub items_held: i64,
    /// Tasks submitted with `--no-inherit`.
    pub no_inherit: i64,
    /// `(comment_state, rows, sum of attempts)` of `publications`, per state present, in state
    /// order.
    pub publications: Vec<(String, [i64; 2])>,
}

impl Tally {
    /// Tasks of `status`.
    pub fn count(&self, status: Status) -> i64 {
        self.by_status
            .iter()
            .find(|(s, _)| s == status.as_str())
            .map_or(0, |(_, v)| v[0])
    }
}

impl Db {
    /// The [`Tally`] of this store.
    pub fn tally(&self) -> Result<Tally, DbError> {
        let mut by_status = Vec::new();
        for r in self.query(
            "SELECT status, COUNT(*), CAST(SUM(llm_call_count) AS BIGINT), CAST(SUM(tool_call_count) AS BIGINT), \
             CAST(SUM(total_tokens) AS BIGINT), CAST(SUM(compression_count) AS BIGINT), \
             CAST(SUM(crash_count) AS BIGINT), CAST(SUM(resume_count) AS BIGINT) \
             FROM tasks GROUP BY status ORDER BY status",
            &[],
        )? {
            let mut v = [0i64; 7];
            for (i, slot) in v.iter_mut().enumerate() {
                *slot = r.int(i + 1)?;
            }
            by_status.push((r.text(0)?, v));
        }
        let (items_held, no_inherit) = match self.query_opt(
            "SELECT COUNT(source_item), CAST(COALESCE(SUM(no_inherit), 0) AS BIGINT) FROM tasks",
            &[],
        )? {
            Some(r) => (r.int(0)?, r.int(1)?),
            None => (0, 0),
        };
        let mut publications = Vec::new();
        for r in self.query(
            "SELECT comment_state, COUNT(*), CAST(SUM(attempts) AS BIGINT) FROM publications \
             GROUP BY comment_state ORDER BY comment_state",
            &[],
        )? {
            publications.push((r.text(0)?, [r.int(1)?, r.int(2)?]));
        }
        Ok(Tally {
            tasks: by_status.iter().map(|(_, v)| v[0]).sum(),
            by_status,
            items_held,
            no_inherit,
            publications,
        })
    }

    /// How many tasks are `running`.
    pub fn count_running(&self) -> Result<i64, DbError> {
        match self.query_opt("SELECT COUNT(*) FROM tasks WHERE status = 'running'", &[])? {
            Some(r) => r.int(0),
            None => Ok(0),
        }
    }

    /// Copy every row of this store into `target` (whose tables must hold none of them):
    /// the tasks in insertion order, then the `publications` rows, [`PAGE`] rows per
    /// transaction. Returns the task rows copied.
    pub fn copy_rows_to(&self, target: &Db) -> Result<u64, DbError> {
        let order = self.dialect().insert_order();
        let copied = self.copy_table(
            target,
            &format!("SELECT {COLUMNS}, source_item FROM tasks ORDER BY created_at, {order}"),
            &format!("tasks ({COLUMNS}, source_item)"),
            |r| {
                let mut values = row_values(&self.task_row(r)?);
                values.push(r.0.last().cloned().unwrap_or(Value::Null));
                Ok(values)
            },
        )?;
        self.copy_table(
            target,
            &format!("SELECT {PUBLICATION_COLUMNS} FROM publications ORDER BY task_uuid"),
            &format!("publications ({PUBLICATION_COLUMNS})"),
            |r| Ok(r.0.clone()),
        )?;
        Ok(copied)
    }

    /// Copy the rows of `select` (ordered, without `LIMIT`) into `into` (`table (columns)`),
    /// each made into the `INSERT`'s parameters by `values`, [`PAGE`] rows per transaction.
    fn copy_table(
        &self,
        target: &Db,
        select: &str,
        into: &str,
        values: impl Fn(&super::SqlRow) -> Result<Vec<Value>, DbError>,
    ) -> Result<u64, DbError> {
        let mut copied = 0u64;
        let mut offset = 0u64;
        let mut insert = None;
        loop {
            let page = self.query(
                &format!("{select} LIMIT ?1 OFFSET ?2"),
                &args![PAGE, offset],
            )?;
            if page.is_empty() {
                return Ok(copied);
            }
            let rows: Vec<Vec<Value>> = page.iter().map(&values).collect::<Result<_, _>>()?;
            let insert = insert.get_or_insert_with(|| {
                let placeholders: Vec<String> =
                    (1..=rows[0].len()).map(|i| format!("?{i}")).collect();
                format!("INSERT INTO {into} VALUES ({})", placeholders.join(", "))
            });
            copied += target.write_batch(insert, &rows)?;
            offset += page.len() as u64;
        }
    }

    /// Delete every task and `publications` row (`ctxhost migrate` undoing a copy that did
    /// not check out, on a target that was empty before it).
    pub fn delete_all_rows(&self) -> Result<u64, DbError> {
        self.execute("DELETE FROM publications", args![])?;
        self.execute("DELETE FROM tasks", args![])
    }
}

/// `row` as the parameters of an `INSERT` of [`COLUMNS`].
fn row_values(r: &TaskRow) -> Vec<Value> {
    args![
        r.uuid.as_str(),
        r.task_source.as_str(),
        r.owner.as_deref(),
        r.repo.as_deref(),
        r.task_type.as_deref(),
        r.task_id.as_deref(),
        r.status.as_str(),
        r.created_at.as_str(),
        r.started_at.as_deref(),
        r.completed_at.as_deref(),
        r.updated_at.as_str(),
        r.process_id,
        r.hostname.as_deref(),
        r.llm_provider.as_deref(),
        r.model.as_deref(),
        r.context_length,
        r.llm_call_count,
        r.tool_call_count,
        r.total_tokens,
        r.compression_count,
        r.error_message.as_deref(),
        r.user.as_deref(),
        r.prompt.as_str(),
        r.resume_count,
        r.crash_count,
        r.pause_requested,
        r.stop_requested,
        r.pause_reason.as_deref(),
        r.files_deleted_at.as_deref(),
        r.cache_read_tokens,
        r.cache_creation_tokens,
        r.no_inherit,
        r.worker_id.as_deref(),
        r.lease_expires_at,
        r.host_id.as_deref(),
        r.workspace.as_deref(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{TestStore, new_task, store_tests};
    use crate::db::{TaskKey, UsageDelta};
    use crate::lifecycle::{Claim, Owner, row};

    /// A SQLite store of 1203 tasks: one completed with usage, one polled item holding its
    /// item with a posted result comment, one `--no-inherit`.
    fn filled_sqlite() -> (TestStore, Db) {
        let a = TestStore::sqlite();
        let src = a.open();
        for i in 0..1200 {
            src.insert_queued(&new_task(&format!("t{i:04}"))).unwrap();
        }
        row::claim(&src, "t0001", &Claim::test(1)).unwrap();
        src.add_usage("t0001", &UsageDelta::llm_call(40)).unwrap();
        row::finish(&src, "t0001", Owner::test(1), Status::Completed, None).unwrap();
        let mut polled = new_task("t1200");
        polled.key = TaskKey {
            task_source: "github".into(),
            owner: Some("acme".into()),
            repo: Some("app".into()),
            task_type: Some("issue".into()),
            task_id: Some("5".into()),
        };
        assert!(src.queue_source_task(&polled).unwrap());
        assert!(
            src.record_item_url("t1200", "https://github.com/acme/app/issues/5")
                .unwrap()
        );
        assert!(
            src.take_publish_lease("t1200", "me", std::time::Duration::from_secs(60), None)
                .unwrap()
                .is_some()
        );
        assert!(
            src.record_publish_error(
                "t1200",
                "me",
                "HTTP 502",
                std::time::Duration::from_secs(20)
            )
            .unwrap()
        );
        let mut other = polled.clone();
        other.uuid = "t1201".into();
        other.key.task_id = Some("6".into());
        assert!(src.queue_source_task(&other).unwrap());
        assert!(
            src.take_publish_lease("t1201", "me", std::time::Duration::from_secs(60), None)
                .unwrap()
                .is_some()
        );
        assert!(src.mark_comment_posting("t1201", "me").unwrap());
        assert!(
            src.record_comment("t1201", "me", "c1", Some("https://x/c1"))
                .unwrap()
        );
        let mut fresh = new_task("t1202");
        fresh.no_inherit = true;
        src.insert_queued(&fresh).unwrap();
        (a, src)
    }

    /// Every column of both tables of `a` equals `b`'s.
    fn assert_same_rows(a: &Db, b: &Db) {
        assert_eq!(a.tally().unwrap(), b.tally().unwrap());
        for uuid in ["t0000", "t0001", "t1200", "t1201", "t1202"] {
            assert_eq!(a.get(uuid).unwrap(), b.get(uuid).unwrap(), "{uuid}");
            assert_eq!(
                a.source_item(uuid).unwrap(),
                b.source_item(uuid).unwrap(),
                "{uuid}"
            );
            assert_eq!(
                a.publication(uuid).unwrap(),
                b.publication(uuid).unwrap(),
                "{uuid}"
            );
        }
    }

    store_tests! {
        /// SQLite → this store → a new SQLite store: every row, column and counter kept.
        fn rows_copy_to_this_store_and_back_with_equal_tallies(store: &TestStore) {
            let (_a, src) = filled_sqlite();
            let dst = store.open();
            assert_eq!(src.copy_rows_to(&dst).unwrap(), 1203);
            assert_same_rows(&src, &dst);
            let t = dst.tally().unwrap();
            assert_eq!(t.count(Status::Completed), 1);
            assert_eq!((t.items_held, t.no_inherit), (2, 1));
            assert_eq!(
                t.publications,
                [("none".to_string(), [1, 1]), ("posted".to_string(), [1, 0])]
            );
            assert!(dst.get("t1202").unwrap().unwrap().no_inherit);
            assert_eq!(
                dst.list_queued(3).unwrap(),
                ["t0000", "t0002", "t0003"],
                "insertion order kept"
            );
            // The copy still keeps an item from being queued twice.
            let mut again = new_task("again");
            let r = dst.get("t1200").unwrap().unwrap();
            again.key = TaskKey {
                task_source: r.task_source,
                owner: r.owner,
                repo: r.repo,
                task_type: r.task_type,
                task_id: r.task_id,
            };
            assert!(!dst.queue_source_task(&again).unwrap());

            let back = TestStore::sqlite();
            let back = back.open();
            assert_eq!(dst.copy_rows_to(&back).unwrap(), 1203);
            assert_same_rows(&src, &back);

            assert_eq!(dst.delete_all_rows().unwrap(), 1203);
            let t = dst.tally().unwrap();
            assert_eq!(t.tasks, 0);
            assert!(t.publications.is_empty());
        }
    }
}
