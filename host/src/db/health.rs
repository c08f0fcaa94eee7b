//! Whether tasks.db can do what ctxhost asks of it ([`Db::health`], for `ctxhost fsck`): SQLite's
//! own integrity check (a damaged page or index makes inserts fail while reads may still
//! work), the columns of the `tasks` table, and a write transaction (a read-only file or
//! directory, a lock held forever).

use super::{COLUMNS, Db};

/// Messages of SQLite's `PRAGMA integrity_check` kept (it can list thousands).
const MAX_INTEGRITY_MESSAGES: usize = 20;

impl Db {
    /// Everything wrong with the database, one sentence each (empty: healthy). Never fails: a
    /// check that cannot run is itself reported.
    pub fn health(&self) -> Vec<String> {
        let mut problems = Vec::new();
        match self.retry(|c| {
            let mut st = c.prepare(&format!("PRAGMA integrity_check({MAX_INTEGRITY_MESSAGES})"))?;
            let rows = st.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect::<rusqlite::Result<Vec<String>>>()
        }) {
            Ok(lines) if lines == ["ok"] => {}
            Ok(lines) => problems.push(format!(
                "SQLite's integrity check fails: {}",
                lines.join("; ")
            )),
            Err(e) => problems.push(format!("SQLite's integrity check cannot run: {e}")),
        }
        match self.retry(|c| {
            let mut st = c.prepare("SELECT name FROM pragma_table_info('tasks')")?;
            let rows = st.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect::<rusqlite::Result<Vec<String>>>()
        }) {
            Ok(have) if have.is_empty() => problems.push("the `tasks` table is missing".into()),
            Ok(have) => {
                let missing: Vec<&str> = COLUMNS
                    .split(',')
                    .map(str::trim)
                    .filter(|c| !have.iter().any(|h| h == c))
                    .collect();
                if !missing.is_empty() {
                    problems.push(format!(
                        "the `tasks` table lacks column(s) {} (its schema version says they exist)",
                        missing.join(", ")
                    ));
                }
            }
            Err(e) => problems.push(format!("the `tasks` table cannot be read: {e}")),
        }
        if let Err(e) = self.retry(|c| c.execute_batch("BEGIN IMMEDIATE; ROLLBACK;")) {
            problems.push(format!("the database cannot be written: {e}"));
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::new_task;

    #[test]
    fn a_fresh_database_is_healthy_and_a_missing_column_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.insert_queued(&new_task("a")).unwrap();
        assert!(db.health().is_empty(), "{:?}", db.health());
        db.conn()
            .execute_batch("ALTER TABLE tasks DROP COLUMN pause_reason")
            .unwrap();
        let h = db.health();
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h[0].contains("lacks column(s) pause_reason"), "{h:?}");
    }
}
