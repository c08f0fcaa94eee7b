//! `contexts/tasks.db`: every task's status and statistics (SQLite, WAL).
//!
//! - [`schema`]: the `tasks` table, its version and upgrades.
//! - [`queue`]: submitting tasks and finding them (queued, running on a host, finished).
//! - [`control`]: requests to a running task (pause, stop) and its resume count.
//! - [`stats`]: the counters of a task ([`UsageDelta`]) and the statistics over all tasks.
//! - [`sources`]: what the GitHub / GitLab task sources keep: one open task per item, and
//!   what was published back to it.
//! - [`health`]: whether the database can still be written and read (for `ctxhost fsck`).
//!
//! Status changes are not here: each is one conditional `UPDATE` owned by
//! [`crate::lifecycle`], the only code that changes a task's status or moves its directory.
//!
//! Counters are only ever changed in SQL (`col = col + ?`), never read-modify-write.
//! Timestamps are RFC 3339 UTC text with milliseconds (`2025-01-31T12:00:00.123Z`), which
//! sorts as text and is understood by SQLite's date functions.
//!
//! Every statement is retried up to 3 times (after the 5 s busy timeout) on `SQLITE_BUSY` /
//! `SQLITE_LOCKED`, with a short backoff.

pub mod control;
pub mod health;
pub mod queue;
pub mod schema;
pub mod sources;
pub mod stats;
mod status;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};

pub use control::Control;
pub use schema::SCHEMA_VERSION;
pub use stats::{ModelStats, Stats, UsageDelta};
pub use status::Status;

/// Busy timeout per statement.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Extra attempts after a busy/locked error.
pub const BUSY_RETRIES: u32 = 3;

/// File name of the database in the contexts/ directory.
pub const DB_FILE: &str = "tasks.db";

/// Database errors. Messages name the database file.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// An SQLite error (after the busy retries).
    #[error("{path}: {source}")]
    Sqlite {
        /// The database file.
        path: String,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
    /// The database was written by a newer ctxhost.
    #[error(
        "{path}: schema version {found} is newer than this ctxhost understands ({SCHEMA_VERSION})"
    )]
    NewerSchema {
        /// The database file.
        path: String,
        /// Its `PRAGMA user_version`.
        found: i64,
    },
    /// A row that does not read as a task (e.g. an unknown status text).
    #[error("{path}: row {uuid}: {message}")]
    BadRow {
        /// The database file.
        path: String,
        /// The row's uuid column.
        uuid: String,
        /// What is wrong with it.
        message: String,
    },
}

/// The task key of the seed: where the task comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TaskKey {
    /// `github`, `gitlab` or `local`.
    pub task_source: String,
    /// Repository owner (github/gitlab).
    pub owner: Option<String>,
    /// Repository name (github/gitlab).
    pub repo: Option<String>,
    /// `issue` or `pull_request`.
    pub task_type: Option<String>,
    /// Issue or pull request number / id.
    pub task_id: Option<String>,
}

/// A task to insert as `queued`.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// Canonical hyphenated lowercase UUID.
    pub uuid: String,
    /// Where the task comes from.
    pub key: TaskKey,
    /// The user message that starts the task.
    pub prompt: String,
    /// Who submitted it.
    pub user: Option<String>,
    /// Provider of the config at submit time (the task process overwrites it with its own
    /// when it claims the task); likewise `model` and `context_length`.
    pub llm_provider: String,
    /// Model of the config at submit time.
    pub model: String,
    /// Context window of the config at submit time, tokens.
    pub context_length: u64,
    /// Start from scratch even if an earlier task with the same key completed
    /// (`submit --no-inherit`).
    pub no_inherit: bool,
}

/// One `tasks` row (DESIGN.md §2; timestamps RFC 3339 UTC text).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskRow {
    /// Primary key: canonical UUID.
    pub uuid: String,
    /// `github`, `gitlab` or `local`.
    pub task_source: String,
    /// Repository owner.
    pub owner: Option<String>,
    /// Repository name.
    pub repo: Option<String>,
    /// `issue` or `pull_request`.
    pub task_type: Option<String>,
    /// Issue or pull request id.
    pub task_id: Option<String>,
    /// Lifecycle status.
    pub status: Status,
    /// Submit time.
    pub created_at: String,
    /// First claim by a task process.
    pub started_at: Option<String>,
    /// When the task reached a final status.
    pub completed_at: Option<String>,
    /// Last change of the row.
    pub updated_at: String,
    /// The task process that claimed it last.
    pub process_id: Option<i64>,
    /// The host of that process.
    pub hostname: Option<String>,
    /// Provider used by the last task process.
    pub llm_provider: Option<String>,
    /// Model used by the last task process.
    pub model: Option<String>,
    /// Context window used by the last task process, tokens.
    pub context_length: Option<i64>,
    /// LLM calls made (agent loop and compressor).
    pub llm_call_count: i64,
    /// Tool calls made.
    pub tool_call_count: i64,
    /// Tokens of all LLM calls (provider usage when given, estimate otherwise).
    pub total_tokens: i64,
    /// Compressions of the context.
    pub compression_count: i64,
    /// Why the task failed (or how its process ended, after a crash).
    pub error_message: Option<String>,
    /// Who submitted it.
    pub user: Option<String>,
    /// The user message that starts the task.
    pub prompt: String,
    /// Times the task was resumed after a pause (set by the task process that resumes it).
    pub resume_count: i64,
    /// Times a process running the task died (counted by recovery).
    pub crash_count: i64,
    /// `ctxhost pause` asked the running task to pause at its next safe point.
    pub pause_requested: bool,
    /// `ctxhost stop` asked the running task to stop at its next safe point.
    pub stop_requested: bool,
    /// The `--reason` given to `ctxhost pause`, until the task is resumed.
    pub pause_reason: Option<String>,
    /// When `ctxhost cleanup` deleted the task's directory (RFC 3339 UTC); the row stays.
    pub files_deleted_at: Option<String>,
    /// Prompt tokens the provider served from its prompt cache (part of `total_tokens`):
    /// Anthropic `cache_read_input_tokens`, OpenAI `prompt_tokens_details.cached_tokens`.
    pub cache_read_tokens: i64,
    /// Prompt tokens the provider wrote to its prompt cache (part of `total_tokens`):
    /// Anthropic `cache_creation_input_tokens`.
    pub cache_creation_tokens: i64,
    /// Submitted with `--no-inherit`: the task does not start from an earlier task's state.
    pub no_inherit: bool,
}

/// Filter for [`Db::list`]. Rows come newest first.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    /// Only this status.
    pub status: Option<Status>,
    /// Only tasks of this user.
    pub user: Option<String>,
    /// At most this many rows (`None`: all).
    pub limit: Option<u32>,
}

/// Current time as RFC 3339 UTC with milliseconds (`2025-01-31T12:00:00.123Z`).
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A connection to `tasks.db`. Not shared between threads: open one per process/thread.
pub struct Db {
    conn: Connection,
    path: PathBuf,
}

/// The columns of [`TaskRow`], in [`raw_row`]'s order.
pub(crate) const COLUMNS: &str = "uuid, task_source, owner, repo, task_type, task_id, status, created_at, started_at, \
completed_at, updated_at, process_id, hostname, llm_provider, model, context_length, llm_call_count, \
tool_call_count, total_tokens, compression_count, error_message, user, prompt, resume_count, crash_count, \
pause_requested, stop_requested, pause_reason, files_deleted_at, cache_read_tokens, cache_creation_tokens, \
no_inherit";

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

impl Db {
    /// Open (creating if needed) `contexts_dir/tasks.db`: WAL, 5 s busy timeout, schema created
    /// or upgraded ([`schema`]). `contexts_dir` must exist.
    pub fn open(contexts_dir: &Path) -> Result<Db, DbError> {
        let path = contexts_dir.join(DB_FILE);
        let shown = path.display().to_string();
        let sq = |source| DbError::Sqlite {
            path: shown.clone(),
            source,
        };
        // A new database file is created owner-only; SQLite gives its -wal and -shm files the
        // mode of the database file. (An existing file keeps its mode: `ctxhost fsck` reports a
        // looser one.) If this fails, SQLite's own open reports why.
        let _ = std::os::unix::fs::OpenOptionsExt::mode(
            std::fs::OpenOptions::new().write(true).create_new(true),
            crate::task_dir::FILE_MODE,
        )
        .open(&path);
        let conn = Connection::open(&path).map_err(sq)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sq)?;
        let db = Db { conn, path };
        db.retry(|c| {
            // journal_mode returns a row; query it rather than execute.
            let _mode: String = c.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
            c.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
        })?;
        let version: i64 = db.retry(|c| c.query_row("PRAGMA user_version", [], |r| r.get(0)))?;
        if version > SCHEMA_VERSION {
            return Err(DbError::NewerSchema {
                path: shown,
                found: version,
            });
        }
        if version < SCHEMA_VERSION {
            db.retry(schema::upgrade)?;
        }
        Ok(db)
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `f`, retrying up to [`BUSY_RETRIES`] times on busy/locked with 50, 100, 200 ms backoff.
    pub(crate) fn retry<T>(
        &self,
        mut f: impl FnMut(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, DbError> {
        let mut attempt = 0;
        loop {
            match f(&self.conn) {
                Ok(v) => return Ok(v),
                Err(e) if is_busy(&e) && attempt < BUSY_RETRIES => {
                    attempt += 1;
                    tracing::debug!(db = %self.path.display(), attempt, "database busy, retrying");
                    std::thread::sleep(Duration::from_millis(50 << (attempt - 1)));
                }
                Err(source) => {
                    return Err(DbError::Sqlite {
                        path: self.path.display().to_string(),
                        source,
                    });
                }
            }
        }
    }

    /// The row of `uuid`, if any.
    pub fn get(&self, uuid: &str) -> Result<Option<TaskRow>, DbError> {
        let rows = self.retry(|c| {
            c.query_row(
                &format!("SELECT {COLUMNS} FROM tasks WHERE uuid = ?1"),
                [uuid],
                raw_row,
            )
            .optional()
        })?;
        rows.map(|r| self.finish_row(r)).transpose()
    }

    /// Rows matching `filter`, newest first.
    pub fn list(&self, filter: &TaskFilter) -> Result<Vec<TaskRow>, DbError> {
        let limit = filter.limit.map(i64::from).unwrap_or(-1);
        let raws = self.retry(|c| {
            let mut st = c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM tasks WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR user = ?2) \
                 ORDER BY created_at DESC, rowid DESC LIMIT ?3"
            ))?;
            let rows = st.query_map(
                params![filter.status.map(|s| s.as_str()), filter.user, limit],
                raw_row,
            )?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
        })?;
        raws.into_iter().map(|r| self.finish_row(r)).collect()
    }

    /// A row read with [`raw_row`], its status text checked.
    pub(crate) fn finish_row(&self, raw: (TaskRow, String)) -> Result<TaskRow, DbError> {
        let (mut row, status) = raw;
        row.status = status.parse().map_err(|message| DbError::BadRow {
            path: self.path.display().to_string(),
            uuid: row.uuid.clone(),
            message,
        })?;
        Ok(row)
    }

    /// The raw connection, for this module's tests.
    #[cfg(test)]
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }
}

/// Read a row selected with [`COLUMNS`]; the status text is returned beside it for checking.
pub(crate) fn raw_row(r: &Row<'_>) -> rusqlite::Result<(TaskRow, String)> {
    let status: String = r.get(6)?;
    Ok((
        TaskRow {
            uuid: r.get(0)?,
            task_source: r.get(1)?,
            owner: r.get(2)?,
            repo: r.get(3)?,
            task_type: r.get(4)?,
            task_id: r.get(5)?,
            status: Status::Queued,
            created_at: r.get(7)?,
            started_at: r.get(8)?,
            completed_at: r.get(9)?,
            updated_at: r.get(10)?,
            process_id: r.get(11)?,
            hostname: r.get(12)?,
            llm_provider: r.get(13)?,
            model: r.get(14)?,
            context_length: r.get(15)?,
            llm_call_count: r.get(16)?,
            tool_call_count: r.get(17)?,
            total_tokens: r.get(18)?,
            compression_count: r.get(19)?,
            error_message: r.get(20)?,
            user: r.get(21)?,
            prompt: r.get(22)?,
            resume_count: r.get(23)?,
            crash_count: r.get(24)?,
            pause_requested: r.get::<_, i64>(25)? != 0,
            stop_requested: r.get::<_, i64>(26)? != 0,
            pause_reason: r.get(27)?,
            files_deleted_at: r.get(28)?,
            cache_read_tokens: r.get(29)?,
            cache_creation_tokens: r.get(30)?,
            no_inherit: r.get::<_, i64>(31)? != 0,
        },
        status,
    ))
}

/// Shared by the database tests of this crate.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A local task `uuid` with prompt `do it`, user `alice`, model `m`.
    pub fn new_task(uuid: &str) -> NewTask {
        NewTask {
            uuid: uuid.to_string(),
            key: TaskKey {
                task_source: "local".into(),
                ..Default::default()
            },
            prompt: "do it".into(),
            user: Some("alice".into()),
            llm_provider: "openai".into(),
            model: "m".into(),
            context_length: 4096,
            no_inherit: false,
        }
    }

    /// A queued local row `uuid` with every counter 0.
    pub fn task_row(uuid: &str) -> TaskRow {
        TaskRow {
            uuid: uuid.to_string(),
            task_source: "local".into(),
            owner: None,
            repo: None,
            task_type: None,
            task_id: None,
            status: Status::Queued,
            created_at: "2025-01-01T00:00:00.000Z".into(),
            started_at: None,
            completed_at: None,
            updated_at: "2025-01-01T00:00:00.000Z".into(),
            process_id: None,
            hostname: None,
            llm_provider: None,
            model: None,
            context_length: None,
            llm_call_count: 0,
            tool_call_count: 0,
            total_tokens: 0,
            compression_count: 0,
            error_message: None,
            user: None,
            prompt: "do it".into(),
            resume_count: 0,
            crash_count: 0,
            pause_requested: false,
            stop_requested: false,
            pause_reason: None,
            files_deleted_at: None,
            cache_read_tokens: 0,
            cache_creation_tokens: 0,
            no_inherit: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::new_task;
    use super::*;

    #[test]
    fn schema_is_created_and_reopen_is_fine() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.insert_queued(&new_task("a")).unwrap();
        drop(db);
        let db = Db::open(dir.path()).unwrap();
        assert_eq!(db.get("a").unwrap().unwrap().status, Status::Queued);
        let mode: String = db
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn list_filters_and_orders_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        for id in ["a", "b", "c"] {
            db.insert_queued(&new_task(id)).unwrap();
        }
        crate::lifecycle::row::claim(&db, "b", &crate::lifecycle::Claim::test(1)).unwrap();
        let all = db.list(&TaskFilter::default()).unwrap();
        assert_eq!(
            all.iter().map(|r| r.uuid.as_str()).collect::<Vec<_>>(),
            ["c", "b", "a"]
        );
        let q = db
            .list(&TaskFilter {
                status: Some(Status::Queued),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!(
            db.list(&TaskFilter {
                limit: Some(1),
                ..Default::default()
            })
            .unwrap()
            .len(),
            1
        );
        assert_eq!(db.list_queued(10).unwrap(), ["a", "c"]);
    }
}
