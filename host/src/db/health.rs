//! Whether the task store can do what ctxhost asks of it ([`Db::health`], for `ctxhost fsck`):
//! on SQLite its own integrity check (a damaged page or index makes inserts fail while reads
//! may still work); on both stores the columns of the `tasks` table, and a write (SQLite: a
//! write transaction, for a read-only file or directory or a lock held forever; PostgreSQL: a
//! statement that changes nothing, for a read-only server or role).

use super::{COLUMNS, Db, Dialect, args};

/// Messages of SQLite's `PRAGMA integrity_check` kept (it can list thousands).
const MAX_INTEGRITY_MESSAGES: usize = 20;

impl Db {
    /// Everything wrong with the database, one sentence each (empty: healthy). Never fails: a
    /// check that cannot run is itself reported.
    pub fn health(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(s) = self.sqlite() {
            match s.retry(|c| {
                let mut st =
                    c.prepare(&format!("PRAGMA integrity_check({MAX_INTEGRITY_MESSAGES})"))?;
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
        }
        let columns = match self.dialect() {
            Dialect::Sqlite => "SELECT name FROM pragma_table_info('tasks')",
            Dialect::Postgres => {
                "SELECT column_name FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = 'tasks'"
            }
        };
        match self.query(columns, &[]).and_then(|rows| {
            rows.iter()
                .map(|r| r.text(0))
                .collect::<Result<Vec<_>, _>>()
        }) {
            Ok(have) if have.is_empty() => problems.push("the `tasks` table is missing".into()),
            Ok(have) => {
                let missing: Vec<&str> = COLUMNS
                    .split(',')
                    .map(|c| c.trim().trim_matches('"'))
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
        let written = match self.sqlite() {
            Some(s) => s
                .retry(|c| c.execute_batch("BEGIN IMMEDIATE; ROLLBACK;"))
                .map(|()| 0),
            None => self.execute(
                "UPDATE tasks SET updated_at = updated_at WHERE uuid IS NULL",
                args![],
            ),
        };
        if let Err(e) = written {
            problems.push(format!("the database cannot be written: {e}"));
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use crate::db::testing::{new_task, store_tests};

    store_tests! {
        fn a_fresh_database_is_healthy_and_a_missing_column_is_named(store: &TestStore) {
            let db = store.open();
            db.insert_queued(&new_task("a")).unwrap();
            assert!(db.health().is_empty(), "{:?}", db.health());
            db.execute_raw("ALTER TABLE tasks DROP COLUMN pause_reason")
                .unwrap();
            let h = db.health();
            assert_eq!(h.len(), 1, "{h:?}");
            assert!(h[0].contains("lacks column(s) pause_reason"), "{h:?}");
        }
    }
}
