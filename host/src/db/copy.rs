//! Copying every task row from one store to another (`ctxhost migrate`), and the
//! [`Tally`] both sides are compared by afterwards.

use super::{COLUMNS, Db, DbError, Status, TaskRow, Value, args};

/// Rows read and written per batch.
const PAGE: u32 = 500;

/// What a store holds, to compare two stores: per status, the tasks and the sums of their
/// counters.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Tally {
    /// Tasks in the store.
    pub tasks: i64,
    /// `(status, tasks, llm calls, tool calls, tokens, compressions, crashes, resumes)` per
    /// status present, in status order.
    pub by_status: Vec<(String, [i64; 7])>,
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
        Ok(Tally {
            tasks: by_status.iter().map(|(_, v)| v[0]).sum(),
            by_status,
        })
    }

    /// How many tasks are `running`.
    pub fn count_running(&self) -> Result<i64, DbError> {
        match self.query_opt("SELECT COUNT(*) FROM tasks WHERE status = 'running'", &[])? {
            Some(r) => r.int(0),
            None => Ok(0),
        }
    }

    /// Copy every row of this store into `target` (whose `tasks` table must hold none of
    /// them), in insertion order, [`PAGE`] rows per transaction. Returns the rows copied.
    pub fn copy_rows_to(&self, target: &Db) -> Result<u64, DbError> {
        let order = self.dialect().insert_order();
        let placeholders: Vec<String> = (1..=COLUMNS.split(',').count())
            .map(|i| format!("?{i}"))
            .collect();
        let insert = format!(
            "INSERT INTO tasks ({COLUMNS}) VALUES ({})",
            placeholders.join(", ")
        );
        let mut copied = 0u64;
        let mut offset = 0u64;
        loop {
            let page = self.query(
                &format!(
                    "SELECT {COLUMNS} FROM tasks ORDER BY created_at, {order} LIMIT ?1 OFFSET ?2"
                ),
                &args![PAGE, offset],
            )?;
            if page.is_empty() {
                return Ok(copied);
            }
            let rows: Vec<Vec<Value>> = page
                .iter()
                .map(|r| self.task_row(r).map(|t| row_values(&t)))
                .collect::<Result<_, _>>()?;
            copied += target.write_batch(&insert, &rows)?;
            offset += page.len() as u64;
        }
    }

    /// Delete every task row (`ctxhost migrate` undoing a copy that did not check out, on a
    /// target that was empty before it).
    pub fn delete_all_rows(&self) -> Result<u64, DbError> {
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
        r.worker_id.as_deref(),
        r.lease_expires_at,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{TestStore, new_task};
    use crate::db::{StoreSpec, UsageDelta};
    use crate::lifecycle::{Claim, Owner, row};

    #[test]
    fn rows_copy_between_two_sqlite_stores_with_equal_tallies() {
        let a = TestStore::sqlite();
        let b = TestStore::sqlite();
        let src = a.open();
        for i in 0..1203 {
            src.insert_queued(&new_task(&format!("t{i:04}"))).unwrap();
        }
        row::claim(&src, "t0001", &Claim::test(1)).unwrap();
        src.add_usage("t0001", &UsageDelta::llm_call(40)).unwrap();
        row::finish(&src, "t0001", Owner::test(1), Status::Completed, None).unwrap();
        let dst = Db::open(&StoreSpec::Sqlite, b.contexts()).unwrap();
        assert_eq!(src.copy_rows_to(&dst).unwrap(), 1203);
        assert_eq!(src.tally().unwrap(), dst.tally().unwrap());
        assert_eq!(dst.tally().unwrap().count(Status::Completed), 1);
        assert_eq!(src.get("t0001").unwrap(), dst.get("t0001").unwrap());
        assert_eq!(
            dst.list_queued(3).unwrap(),
            ["t0000", "t0002", "t0003"],
            "insertion order kept"
        );
        assert_eq!(dst.delete_all_rows().unwrap(), 1203);
        assert_eq!(dst.tally().unwrap().tasks, 0);
    }
}
