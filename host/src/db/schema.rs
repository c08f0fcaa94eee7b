//! The `tasks` table (DESIGN.md §2) and the `ctxhost_meta` table (the store's id, the contexts
//! tree it is bound to, its schema version), the same columns on both backends, created and
//! upgraded automatically when a store is opened ([`ensure`]).
//!
//! - SQLite: versioned by `PRAGMA user_version`; version 1 was the first table, each later
//!   version an upgrade step ([`MIGRATE_V2`] ... [`MIGRATE_V4`]), run in one `BEGIN IMMEDIATE`
//!   transaction that reads the version again (another process may be upgrading too).
//! - PostgreSQL: versioned by `ctxhost_meta.schema_version`; a new database gets the current
//!   schema in one step ([`POSTGRES_V4`]); later steps run in one transaction holding an
//!   advisory lock, after reading the version again.
//!
//! Differences: PostgreSQL columns are `BIGINT` where SQLite's are `INTEGER` (both 64-bit),
//! the timestamp and uuid columns sort bytewise (`COLLATE "C"`, as SQLite compares text), and
//! PostgreSQL has an identity column `seq` for insertion order where SQLite has its `rowid`.
//!
//! To add a column or table: a [`Step`] in [`STEPS`] with the SQL of each backend (PostgreSQL
//! steps may use `IF NOT EXISTS`), and [`SCHEMA_VERSION`] bumped to its version.

use super::{Db, DbError};

/// The schema version this ctxhost writes. Version 2 added `stop_requested`, `pause_reason`
/// and `files_deleted_at`; version 3 `cache_read_tokens` and `cache_creation_tokens`;
/// version 4 the lease (`worker_id`, `lease_expires_at`) and `ctxhost_meta`.
pub const SCHEMA_VERSION: i64 = 4;

/// SQLite version 1: the `tasks` table and its indexes.
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

/// SQLite version 1 → 2: stop requests, pause reasons, cleanup marks.
pub(crate) const MIGRATE_V2: &str = "
ALTER TABLE tasks ADD COLUMN stop_requested INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN pause_reason TEXT;
ALTER TABLE tasks ADD COLUMN files_deleted_at TEXT;
";

/// SQLite version 2 → 3: prompt-cache token counters.
pub(crate) const MIGRATE_V3: &str = "
ALTER TABLE tasks ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN cache_creation_tokens INTEGER NOT NULL DEFAULT 0;
";

/// SQLite version 3 → 4: the lease of a running task, the claim index, the meta table.
pub(crate) const MIGRATE_V4: &str = "
ALTER TABLE tasks ADD COLUMN worker_id TEXT;
ALTER TABLE tasks ADD COLUMN lease_expires_at INTEGER;
CREATE INDEX IF NOT EXISTS idx_tasks_status_created ON tasks(status, created_at);
CREATE TABLE IF NOT EXISTS ctxhost_meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
";

/// PostgreSQL: the whole schema at version 4, for a new database.
pub(crate) const POSTGRES_V4: &str = r#"
CREATE TABLE IF NOT EXISTS ctxhost_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    uuid                  TEXT COLLATE "C" PRIMARY KEY,
    task_source           TEXT NOT NULL DEFAULT 'local',
    owner                 TEXT,
    repo                  TEXT,
    task_type             TEXT,
    task_id               TEXT,
    status                TEXT NOT NULL CHECK (status IN ('queued','running','paused','completed','failed','stopped')),
    created_at            TEXT COLLATE "C" NOT NULL,
    started_at            TEXT COLLATE "C",
    completed_at          TEXT COLLATE "C",
    process_id            BIGINT,
    hostname              TEXT,
    llm_provider          TEXT,
    model                 TEXT,
    context_length        BIGINT,
    llm_call_count        BIGINT NOT NULL DEFAULT 0,
    tool_call_count       BIGINT NOT NULL DEFAULT 0,
    total_tokens          BIGINT NOT NULL DEFAULT 0,
    compression_count     BIGINT NOT NULL DEFAULT 0,
    error_message         TEXT,
    "user"                TEXT,
    prompt                TEXT NOT NULL DEFAULT '',
    resume_count          BIGINT NOT NULL DEFAULT 0,
    crash_count           BIGINT NOT NULL DEFAULT 0,
    updated_at            TEXT COLLATE "C" NOT NULL,
    pause_requested       BIGINT NOT NULL DEFAULT 0,
    stop_requested        BIGINT NOT NULL DEFAULT 0,
    pause_reason          TEXT,
    files_deleted_at      TEXT COLLATE "C",
    cache_read_tokens     BIGINT NOT NULL DEFAULT 0,
    cache_creation_tokens BIGINT NOT NULL DEFAULT 0,
    worker_id             TEXT,
    lease_expires_at      BIGINT,
    seq                   BIGINT GENERATED BY DEFAULT AS IDENTITY
);
CREATE INDEX IF NOT EXISTS idx_tasks_status ON tasks(status);
CREATE INDEX IF NOT EXISTS idx_tasks_created_at ON tasks(created_at);
CREATE INDEX IF NOT EXISTS idx_tasks_user ON tasks("user");
CREATE INDEX IF NOT EXISTS idx_tasks_status_created ON tasks(status, created_at, seq);
INSERT INTO ctxhost_meta (key, value) VALUES ('schema_version', '4') ON CONFLICT (key) DO NOTHING
"#;

/// One upgrade after version 4, for both backends.
pub(crate) struct Step {
    /// The version it upgrades to.
    pub version: i64,
    /// Its SQLite statements.
    pub sqlite: &'static str,
    /// Its PostgreSQL statements (idempotent: `IF NOT EXISTS`).
    pub postgres: &'static str,
}

/// The upgrades after version 4, in order.
pub(crate) const STEPS: &[Step] = &[];

/// The PostgreSQL advisory lock key held while the schema is created or upgraded
/// (`ctxhost` in ASCII).
const SCHEMA_LOCK: i64 = 0x0063_7478_686f_7374;

/// Create or upgrade the schema of `db` to [`SCHEMA_VERSION`]; a schema newer than that is
/// an error.
pub(crate) fn ensure(db: &Db) -> Result<(), DbError> {
    if let Some(s) = db.sqlite() {
        let version: i64 = s.retry(|c| c.query_row("PRAGMA user_version", [], |r| r.get(0)))?;
        if version > SCHEMA_VERSION {
            return Err(DbError::NewerSchema {
                location: db.location().to_string(),
                found: version,
            });
        }
        if version < SCHEMA_VERSION {
            s.retry(upgrade_sqlite)?;
        }
        return Ok(());
    }
    if let Some(mut pg) = db.postgres() {
        let location = db.location().to_string();
        pg.upgrade(SCHEMA_LOCK, |version| {
            if version > SCHEMA_VERSION {
                return Err(DbError::NewerSchema {
                    location: location.clone(),
                    found: version,
                });
            }
            let mut sql = String::new();
            if version < 4 {
                sql.push_str(POSTGRES_V4);
                sql.push_str(";\n");
            }
            for step in STEPS.iter().filter(|s| s.version > version.max(4)) {
                sql.push_str(step.postgres);
                sql.push_str(&format!(
                    ";\nUPDATE ctxhost_meta SET value = '{}' WHERE key = 'schema_version';\n",
                    step.version
                ));
            }
            Ok((!sql.is_empty()).then_some(sql))
        })?;
    }
    Ok(())
}

/// Create or upgrade the SQLite schema to [`SCHEMA_VERSION`] in one write transaction.
/// Another process may be creating or upgrading it at the same moment: the version is read
/// again inside the transaction.
fn upgrade_sqlite(c: &rusqlite::Connection) -> rusqlite::Result<()> {
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
        for step in STEPS.iter().filter(|s| s.version > v) {
            c.execute_batch(step.sqlite)?;
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
    use crate::db::testing::store_tests;
    use crate::db::{Db, Status, StoreSpec};

    #[test]
    fn a_version_1_database_is_upgraded_in_place() {
        let dir = tempfile::tempdir().unwrap();
        {
            let c = rusqlite::Connection::open(dir.path().join("tasks.db")).unwrap();
            c.execute_batch(&format!("{SCHEMA} PRAGMA user_version = 1;"))
                .unwrap();
            c.execute(
                "INSERT INTO tasks (uuid, status, created_at, updated_at) VALUES ('old', 'completed', 'x', 'x')",
                [],
            )
            .unwrap();
        }
        let db = Db::open(&StoreSpec::Sqlite, dir.path()).unwrap();
        let row = db.get("old").unwrap().unwrap();
        assert_eq!(row.status, Status::Completed);
        assert!(!row.stop_requested);
        assert_eq!(row.files_deleted_at, None);
        assert_eq!((row.cache_read_tokens, row.cache_creation_tokens), (0, 0));
        assert_eq!((row.worker_id, row.lease_expires_at), (None, None));
        let v: i64 = db
            .sqlite()
            .unwrap()
            .conn()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        // Opening again changes nothing.
        drop(db);
        Db::open(&StoreSpec::Sqlite, dir.path()).unwrap();
    }

    store_tests! {
        fn a_newer_schema_is_refused(store: &TestStore) {
            let db = store.open();
            let sql = match db.dialect() {
                crate::db::Dialect::Sqlite => "PRAGMA user_version = 99".to_string(),
                crate::db::Dialect::Postgres => {
                    "UPDATE ctxhost_meta SET value = '99' WHERE key = 'schema_version'".to_string()
                }
            };
            db.execute_raw(&sql).unwrap();
            drop(db);
            let e = Db::open(&store.spec, store.contexts()).err().unwrap();
            assert!(matches!(e, DbError::NewerSchema { found: 99, .. }), "{e}");
            assert!(e.to_string().contains("newer than this ctxhost"), "{e}");
        }

        fn concurrent_first_opens_create_one_schema(store: &TestStore) {
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let spec = store.spec.clone();
                    let dir = store.contexts().to_path_buf();
                    std::thread::spawn(move || Db::open(&spec, &dir).map(|_| ()))
                })
                .collect();
            for t in threads {
                t.join().unwrap().unwrap();
            }
            let db = store.open();
            db.insert_queued(&crate::db::testing::new_task("x")).unwrap();
            assert_eq!(db.get("x").unwrap().unwrap().status, Status::Queued);
        }
    }
}
