//! The `tasks` table (DESIGN.md §2), the `publications` table of the task sources
//! ([`crate::db::sources`]) and the `ctxhost_meta` table (the store's id, the contexts tree it
//! is bound to, its schema version): the same tables and columns on both backends, created and
//! upgraded automatically when a store is opened ([`ensure`]).
//!
//! - SQLite: versioned by `PRAGMA user_version`; version 1 was the first table, each later
//!   version an upgrade step ([`MIGRATE_V2`] ... [`MIGRATE_V9`]), run in one `BEGIN IMMEDIATE`
//!   transaction that reads the version again (another process may be upgrading too).
//! - PostgreSQL: versioned by `ctxhost_meta.schema_version`. PostgreSQL support began at
//!   version 4 with the schema of that time ([`POSTGRES_V4`]: SQLite's version 3 plus the
//!   lease and `ctxhost_meta`); [`POSTGRES_STEPS`] bring it to the current version. A new
//!   database gets them all in one transaction; an older one gets the missing steps in one
//!   transaction holding an advisory lock, after reading the version again.
//!
//! The step numbers of the two backends differ (the lease is SQLite's step 6 and part of
//! PostgreSQL's first schema; the task sources are SQLite's 4 and PostgreSQL's 5), but at
//! [`SCHEMA_VERSION`] both have the same tables and columns. Other differences: PostgreSQL
//! columns are `BIGINT` where SQLite's are `INTEGER` (both 64-bit), the timestamp and uuid
//! columns sort bytewise (`COLLATE "C"`, as SQLite compares text), and PostgreSQL has an
//! identity column `seq` for insertion order where SQLite has its `rowid`.
//!
//! To add a column or table: a step for each backend (`MIGRATE_V9` in [`upgrade_sqlite`], a
//! [`Step`] in [`POSTGRES_STEPS`], which may use `IF NOT EXISTS`), [`SCHEMA_VERSION`] bumped,
//! and the column in [`crate::db::copy`] (which checks that a migration copied it).

use super::{Db, DbError};

/// The schema version this ctxhost writes. Version 2 added `stop_requested`, `pause_reason`
/// and `files_deleted_at`; version 3 `cache_read_tokens` and `cache_creation_tokens`;
/// version 4 the task sources' `source_item` column and `publications` table; version 5
/// `no_inherit` and an index on the task key; version 6 the lease (`worker_id`,
/// `lease_expires_at`) and `ctxhost_meta` (on PostgreSQL, whose own step numbers differ, see
/// the module docs, version 6 is the same schema); version 7 `host_id` (the identity of a
/// task process's host, [`crate::host`]), step 7 on both backends; version 8 `workspace`
/// (`submit --workspace`), step 8 on both; version 9 the change a task's result became
/// (`publications.change_state`, `change_commit`, `change_branch`, `change_base`, `pr_number`,
/// `pr_url`: [`crate::sources::publish`]), step 9 on both.
pub const SCHEMA_VERSION: i64 = 9;

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

/// SQLite version 3 → 4: the task sources ([`crate::db::sources`]). `source_item` names the
/// GitHub / GitLab item a polled task answers until its result is published back (then NULL);
/// the unique index lets one statement queue an item at most once. `publications` records the
/// item's web page (`item_url`), what was published for a task (labels, the result comment)
/// and who holds the right to publish it (a lease).
pub(crate) const MIGRATE_V4: &str = "
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

/// SQLite version 4 → 5: `submit --no-inherit`, and the task-key lookup of context
/// inheritance ([`Db::completed_with_key`]).
pub(crate) const MIGRATE_V5: &str = "
ALTER TABLE tasks ADD COLUMN no_inherit INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS idx_tasks_key ON tasks(task_source, owner, repo, task_type, task_id, status);
";

/// SQLite version 5 → 6: the lease of a running task, the claim index, the meta table.
pub(crate) const MIGRATE_V6: &str = "
ALTER TABLE tasks ADD COLUMN worker_id TEXT;
ALTER TABLE tasks ADD COLUMN lease_expires_at INTEGER;
CREATE INDEX IF NOT EXISTS idx_tasks_status_created ON tasks(status, created_at);
CREATE TABLE IF NOT EXISTS ctxhost_meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
";

/// SQLite version 6 → 7: the host identity of a running task's process.
pub(crate) const MIGRATE_V7: &str = "
ALTER TABLE tasks ADD COLUMN host_id TEXT;
";

/// SQLite version 7 → 8: the directory the built-in tools work on (`submit --workspace`).
pub(crate) const MIGRATE_V8: &str = "
ALTER TABLE tasks ADD COLUMN workspace TEXT;
";

/// SQLite version 8 → 9: the change a task's result became on the forge (issue 40): its state
/// (`none` → `committing` → `committed` → `pushing` → `pushed` → `opening` → `opened`, or
/// `unchanged`), the commit, the branch pushed, the pull request's base branch (NULL: pushed
/// onto the item's own head branch) and the pull (merge) request's number and URL.
pub(crate) const MIGRATE_V9: &str = "
ALTER TABLE publications ADD COLUMN change_state TEXT NOT NULL DEFAULT 'none' CHECK (change_state IN ('none','unchanged','committing','committed','pushing','pushed','opening','opened'));
ALTER TABLE publications ADD COLUMN change_commit TEXT;
ALTER TABLE publications ADD COLUMN change_branch TEXT;
ALTER TABLE publications ADD COLUMN change_base TEXT;
ALTER TABLE publications ADD COLUMN pr_number BIGINT;
ALTER TABLE publications ADD COLUMN pr_url TEXT;
";

/// PostgreSQL version 4, the first PostgreSQL schema (SQLite's version 3 plus the lease and
/// `ctxhost_meta`); [`POSTGRES_STEPS`] follow it, for a new database as for an old one.
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

/// One PostgreSQL upgrade after version 4.
pub(crate) struct Step {
    /// The version it upgrades to.
    pub version: i64,
    /// Its statements (idempotent: `IF NOT EXISTS`).
    pub sql: &'static str,
}

/// The PostgreSQL upgrades after [`POSTGRES_V4`], in order: 5, the task sources (SQLite's
/// [`MIGRATE_V4`]); 6, `no_inherit` and the task-key index (SQLite's [`MIGRATE_V5`]); 7,
/// `host_id` (SQLite's [`MIGRATE_V7`]); 8, `workspace` (SQLite's [`MIGRATE_V8`]); 9, the
/// change state of `publications` (SQLite's [`MIGRATE_V9`]).
pub(crate) const POSTGRES_STEPS: &[Step] = &[
    Step {
        version: 5,
        sql: r#"
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS source_item TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS idx_tasks_source_item ON tasks(source_item);
CREATE TABLE IF NOT EXISTS publications (
    task_uuid       TEXT COLLATE "C" PRIMARY KEY,
    labels_state    TEXT,
    comment_state   TEXT NOT NULL DEFAULT 'none' CHECK (comment_state IN ('none','posting','posted')),
    comment_id      TEXT,
    comment_url     TEXT,
    posted_at       TEXT COLLATE "C",
    lease_owner     TEXT,
    lease_until_ms  BIGINT,
    attempts        BIGINT NOT NULL DEFAULT 0,
    last_error      TEXT,
    next_attempt_ms BIGINT,
    item_url        TEXT,
    created_at      TEXT COLLATE "C" NOT NULL,
    updated_at      TEXT COLLATE "C" NOT NULL
)
"#,
    },
    Step {
        version: 6,
        sql: "
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS no_inherit BIGINT NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS idx_tasks_key ON tasks(task_source, owner, repo, task_type, task_id, status)
",
    },
    Step {
        version: 7,
        sql: "ALTER TABLE tasks ADD COLUMN IF NOT EXISTS host_id TEXT",
    },
    Step {
        version: 8,
        sql: "ALTER TABLE tasks ADD COLUMN IF NOT EXISTS workspace TEXT",
    },
    Step {
        version: 9,
        sql: "
ALTER TABLE publications ADD COLUMN IF NOT EXISTS change_state TEXT NOT NULL DEFAULT 'none' CHECK (change_state IN ('none','unchanged','committing','committed','pushing','pushed','opening','opened'));
ALTER TABLE publications ADD COLUMN IF NOT EXISTS change_commit TEXT;
ALTER TABLE publications ADD COLUMN IF NOT EXISTS change_branch TEXT;
ALTER TABLE publications ADD COLUMN IF NOT EXISTS change_base TEXT;
ALTER TABLE publications ADD COLUMN IF NOT EXISTS pr_number BIGINT;
ALTER TABLE publications ADD COLUMN IF NOT EXISTS pr_url TEXT
",
    },
];

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
            for step in POSTGRES_STEPS.iter().filter(|s| s.version > version.max(4)) {
                sql.push_str(step.sql);
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
///
/// A tasks.db written by the first builds of PostgreSQL support says version 4 but holds the
/// lease (today's step 6) instead of the task sources (today's step 4): it is recognised by
/// its `worker_id` column and gets steps 4 and 5.
fn upgrade_sqlite(c: &rusqlite::Connection) -> rusqlite::Result<()> {
    c.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| {
        let v: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let has_lease = v >= 1 && has_column(c, "tasks", "worker_id")?;
        let from = if v == 4 && has_lease { 3 } else { v };
        if from < 1 {
            c.execute_batch(SCHEMA)?;
        }
        if from < 2 {
            c.execute_batch(MIGRATE_V2)?;
        }
        if from < 3 {
            c.execute_batch(MIGRATE_V3)?;
        }
        if from < 4 {
            c.execute_batch(MIGRATE_V4)?;
        }
        if from < 5 {
            c.execute_batch(MIGRATE_V5)?;
        }
        if from < 6 && !has_lease {
            c.execute_batch(MIGRATE_V6)?;
        }
        if from < 7 {
            c.execute_batch(MIGRATE_V7)?;
        }
        if from < 8 {
            c.execute_batch(MIGRATE_V8)?;
        }
        if from < 9 {
            c.execute_batch(MIGRATE_V9)?;
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

/// Whether SQLite table `table` has a column `column`.
fn has_column(c: &rusqlite::Connection, table: &str, column: &str) -> rusqlite::Result<bool> {
    c.query_row(
        "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
        [table, column],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
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
        assert!(!row.no_inherit);
        assert_eq!(db.source_item("old").unwrap(), None);
        assert_eq!(db.publication("old").unwrap(), None);
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
        /// A store written by the first builds of PostgreSQL support (schema 4: the lease,
        /// no task sources, no `no_inherit`) is upgraded when opened, its rows kept.
        fn a_schema_4_store_of_the_first_postgres_builds_is_upgraded(store: &TestStore) {
            let db = store.open();
            db.insert_queued(&crate::db::testing::new_task("old")).unwrap();
            crate::lifecycle::row::claim(&db, "old", &crate::lifecycle::Claim::test(7)).unwrap();
            // Back to that schema: what steps 4 and 5 (PostgreSQL: 5 and 6) add, removed.
            for sql in [
                "DROP INDEX idx_tasks_key",
                "DROP INDEX idx_tasks_source_item",
                "ALTER TABLE tasks DROP COLUMN no_inherit",
                "ALTER TABLE tasks DROP COLUMN source_item",
                "ALTER TABLE tasks DROP COLUMN host_id",
                "ALTER TABLE tasks DROP COLUMN workspace",
                "DROP TABLE publications",
            ] {
                db.execute_raw(sql).unwrap();
            }
            db.execute_raw(match db.dialect() {
                crate::db::Dialect::Sqlite => "PRAGMA user_version = 4",
                crate::db::Dialect::Postgres => {
                    "UPDATE ctxhost_meta SET value = '4' WHERE key = 'schema_version'"
                }
            })
            .unwrap();
            drop(db);

            let db = store.open();
            let row = db.get("old").unwrap().unwrap();
            assert_eq!(row.status, Status::Running);
            assert_eq!(row.process_id, Some(7));
            assert!(row.worker_id.is_some() && row.lease_expires_at.is_some());
            assert!(!row.no_inherit);
            let version = match db.dialect() {
                crate::db::Dialect::Sqlite => db
                    .sqlite()
                    .unwrap()
                    .conn()
                    .query_row("PRAGMA user_version", [], |r| r.get(0))
                    .unwrap(),
                crate::db::Dialect::Postgres => db
                    .query_opt("SELECT value FROM ctxhost_meta WHERE key = 'schema_version'", &[])
                    .unwrap()
                    .unwrap()
                    .text(0)
                    .unwrap()
                    .parse::<i64>()
                    .unwrap(),
            };
            assert_eq!(version, SCHEMA_VERSION);
            // What the new steps added works.
            let mut polled = crate::db::testing::new_task("polled");
            polled.key = crate::db::TaskKey {
                task_source: "github".into(),
                owner: Some("acme".into()),
                repo: Some("app".into()),
                task_type: Some("issue".into()),
                task_id: Some("1".into()),
            };
            assert!(db.queue_source_task(&polled).unwrap());
            assert!(!db.queue_source_task(&polled).unwrap());
            assert!(db.take_publish_lease("polled", "me", std::time::Duration::from_secs(60), None).unwrap().is_some());
            let mut fresh = crate::db::testing::new_task("fresh");
            fresh.no_inherit = true;
            db.insert_queued(&fresh).unwrap();
            assert!(db.get("fresh").unwrap().unwrap().no_inherit);
            let mut placed = crate::db::testing::new_task("placed");
            placed.workspace = Some("/srv/ws".into());
            db.insert_queued(&placed).unwrap();
            assert_eq!(db.get("placed").unwrap().unwrap().workspace.as_deref(), Some("/srv/ws"));
            // Opening again changes nothing.
            drop(db);
            store.open();
        }

        /// A version-8 store (no change columns in `publications`) is upgraded when opened; its
        /// publications read as `change_state = none`.
        fn a_schema_8_store_gets_the_change_columns(store: &TestStore) {
            let db = store.open();
            let mut polled = crate::db::testing::new_task("polled");
            polled.key = crate::db::TaskKey {
                task_source: "github".into(),
                owner: Some("acme".into()),
                repo: Some("app".into()),
                task_type: Some("issue".into()),
                task_id: Some("1".into()),
            };
            assert!(db.queue_source_task(&polled).unwrap());
            assert!(db.take_publish_lease("polled", "me", std::time::Duration::from_secs(60), None).unwrap().is_some());
            for c in ["change_state", "change_commit", "change_branch", "change_base", "pr_number", "pr_url"] {
                db.execute_raw(&format!("ALTER TABLE publications DROP COLUMN {c}")).unwrap();
            }
            db.execute_raw(match db.dialect() {
                crate::db::Dialect::Sqlite => "PRAGMA user_version = 8",
                crate::db::Dialect::Postgres => {
                    "UPDATE ctxhost_meta SET value = '8' WHERE key = 'schema_version'"
                }
            })
            .unwrap();
            drop(db);
            let db = store.open();
            let p = db.publication("polled").unwrap().unwrap();
            assert_eq!(p.change_state, crate::db::sources::ChangeState::None);
            assert_eq!(p.lease_owner.as_deref(), Some("me"));
            assert!(db.advance_change("polled", "me", crate::db::sources::ChangeState::None,
                crate::db::sources::ChangeState::Unchanged, Default::default()).unwrap());
        }

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
