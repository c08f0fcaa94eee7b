//! The `tasks` table (DESIGN.md §2) and its upgrades, versioned by `PRAGMA user_version`.

use rusqlite::Connection;

/// Schema version stored in `PRAGMA user_version`. Version 2 added `stop_requested`,
/// `pause_reason` and `files_deleted_at`; version 3 `cache_read_tokens` and
/// `cache_creation_tokens`; version 4 the task sources' `source_item` column and
/// `publications` table; version 5 `no_inherit` and an index on the task key (an older
/// database is upgraded when opened).
pub const SCHEMA_VERSION: i64 = 5;

/// Version 1: the `tasks` table and its indexes.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tasks (
    uuid              TEXT PRIMARY KEY NOT NULL,
    task_source       TEXT NOT NULL DEFAULT 'local',
    owner             TEXT,
    repo              TEXT,
    task_type         TEXT,
    task_id           TEXT,
    status            TEXT NOT NULL CHECK (status IN ('queued','running','paused','completed','failed','stopped')),
    created_at        TEXT NOT NULL,
    started_at        TEXT,
    completed_at      TEXT,
    process_id        INTEGER,
    hostname          TEXT,
    llm_provider      TEXT,
    model             TEXT,
    context_length    INTEGER,
    llm_call_count    INTEGER NOT NULL DEFAULT 0,
    tool_call_count   INTEGER NOT NULL DEFAULT 0,
    total_tokens      INTEGER NOT NULL DEFAULT 0,
    compression_count INTEGER NOT NULL DEFAULT 0,
    error_message     TEXT,
    user              TEXT,
    prompt            TEXT NOT NULL DEFAULT '',
    resume_count      INTEGER NOT NULL DEFAULT 0,
    crash_count       INTEGER NOT NULL DEFAULT 0,
    updated_at        TEXT NOT NULL,
    pause_requested   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS idx_tasks_status ON tasks(status);
CREATE INDEX IF NOT EXISTS idx_tasks_created_at ON tasks(created_at);
CREATE INDEX IF NOT EXISTS idx_tasks_user ON tasks(user);
";

/// Version 1 → 2: stop requests, pause reasons, cleanup marks.
const MIGRATE_V2: &str = "
ALTER TABLE tasks ADD COLUMN stop_requested INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN pause_reason TEXT;
ALTER TABLE tasks ADD COLUMN files_deleted_at TEXT;
";

/// Version 2 → 3: prompt-cache token counters.
const MIGRATE_V3: &str = "
ALTER TABLE tasks ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN cache_creation_tokens INTEGER NOT NULL DEFAULT 0;
";

/// Version 3 → 4: the task sources ([`crate::db::sources`]). `source_item` names the GitHub /
/// GitLab item a polled task answers until its result is published back (then NULL); the
/// unique index lets one statement queue an item at most once, on SQLite and PostgreSQL
/// alike. `publications` records the item's web page (`item_url`), what was published for a
/// task (labels, the result comment) and who holds the right to publish it (a lease).
const MIGRATE_V4: &str = "
ALTER TABLE tasks ADD COLUMN source_item TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS idx_tasks_source_item ON tasks(source_item);
CREATE TABLE IF NOT EXISTS publications (
    task_uuid      TEXT PRIMARY KEY NOT NULL,
    labels_state   TEXT,
    comment_state  TEXT NOT NULL DEFAULT 'none' CHECK (comment_state IN ('none','posting','posted')),
    comment_id     TEXT,
    comment_url    TEXT,
    posted_at      TEXT,
    lease_owner    TEXT,
    lease_until_ms BIGINT,
    attempts       BIGINT NOT NULL DEFAULT 0,
    last_error     TEXT,
    next_attempt_ms BIGINT,
    item_url       TEXT,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL
);
";

/// Version 4 → 5: `submit --no-inherit`, and the task-key lookup of context inheritance.
const MIGRATE_V5: &str = "
ALTER TABLE tasks ADD COLUMN no_inherit INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS idx_tasks_key ON tasks(task_source, owner, repo, task_type, task_id, status);
";

/// Create or upgrade the schema to [`SCHEMA_VERSION`] in one write transaction. Another
/// process may be creating or upgrading it at the same moment: the version is read again
/// inside the transaction.
pub(super) fn upgrade(c: &Connection) -> rusqlite::Result<()> {
    c.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| {
        let v: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if v < 1 {
            c.execute_batch(SCHEMA)?;
        }
        if v < 2 {
            c.execute_batch(MIGRATE_V2)?;
        }
        if v < 3 {
            c.execute_batch(MIGRATE_V3)?;
        }
        if v < 4 {
            c.execute_batch(MIGRATE_V4)?;
        }
        if v < 5 {
            c.execute_batch(MIGRATE_V5)?;
        }
        if v < SCHEMA_VERSION {
            c.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))?;
        }
        c.execute_batch("COMMIT")
    })();
    result.inspect_err(|_| {
        let _ = c.execute_batch("ROLLBACK");
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{Db, Status};

    #[test]
    fn a_version_1_database_is_upgraded_in_place() {
        let dir = tempfile::tempdir().unwrap();
        {
            let c = Connection::open(dir.path().join("tasks.db")).unwrap();
            c.execute_batch(&format!("{SCHEMA} PRAGMA user_version = 1;"))
                .unwrap();
            c.execute(
                "INSERT INTO tasks (uuid, status, created_at, updated_at) VALUES ('old', 'completed', 'x', 'x')",
                [],
            )
            .unwrap();
        }
        let db = Db::open(dir.path()).unwrap();
        let row = db.get("old").unwrap().unwrap();
        assert_eq!(row.status, Status::Completed);
        assert!(!row.stop_requested);
        assert_eq!(row.files_deleted_at, None);
        assert_eq!((row.cache_read_tokens, row.cache_creation_tokens), (0, 0));
        assert!(!row.no_inherit);
        let v: i64 = db
            .conn()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        // Opening again changes nothing.
        drop(db);
        Db::open(dir.path()).unwrap();
    }
}
