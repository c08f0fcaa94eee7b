//! `contexts/tasks.db`: every task's status and statistics (SQLite, WAL).
//!
//! The queue is the `tasks` table: `submit` inserts a `queued` row, a task process claims it
//! with one atomic `UPDATE … WHERE status='queued'`, so two processes never run one task.
//! Counters are only ever changed in SQL (`col = col + ?`), never read-modify-write.
//! Timestamps are RFC 3339 UTC text with milliseconds (`2025-01-31T12:00:00.123Z`), which
//! sorts as text and is understood by SQLite's date functions.
//!
//! Every statement is retried up to 3 times (after the 5 s busy timeout) on `SQLITE_BUSY` /
//! `SQLITE_LOCKED`, with a short backoff.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};

/// Schema version stored in `PRAGMA user_version`.
pub const SCHEMA_VERSION: i64 = 1;

/// Busy timeout per statement.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Extra attempts after a busy/locked error.
pub const BUSY_RETRIES: u32 = 3;

/// Database errors. Messages name the database file.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("{path}: {source}")]
    Sqlite {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "{path}: schema version {found} is newer than this ctxhost understands ({SCHEMA_VERSION})"
    )]
    NewerSchema { path: String, found: i64 },
    #[error("{path}: row {uuid}: {message}")]
    BadRow {
        path: String,
        uuid: String,
        message: String,
    },
}

/// A task's status. Text in the database: `queued`, `running`, `paused`, `completed`, `failed`, `stopped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Queued,
    Running,
    Paused,
    Completed,
    Failed,
    Stopped,
}

impl Status {
    /// All statuses, in lifecycle order.
    pub const ALL: [Status; 6] = [
        Status::Queued,
        Status::Running,
        Status::Paused,
        Status::Completed,
        Status::Failed,
        Status::Stopped,
    ];

    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Stopped => "stopped",
        }
    }

    /// `completed`, `failed` and `stopped`: the task is over and its directory is in `completed/`.
    pub fn is_final(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Stopped)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Status {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Status::ALL
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown status `{s}` (known: {})",
                    Status::ALL
                        .iter()
                        .map(|x| x.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }
}

/// The task key of the seed: where the task comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TaskKey {
    /// `github`, `gitlab` or `local`.
    pub task_source: String,
    pub owner: Option<String>,
    pub repo: Option<String>,
    /// `issue` or `pull_request`.
    pub task_type: Option<String>,
    pub task_id: Option<String>,
}

/// A task to insert as `queued`.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// Canonical hyphenated lowercase UUID.
    pub uuid: String,
    pub key: TaskKey,
    /// The user message that starts the task.
    pub prompt: String,
    pub user: Option<String>,
    /// Provider, model and context length of the config at submit time (the task process
    /// overwrites them with its own when it claims the task).
    pub llm_provider: String,
    pub model: String,
    pub context_length: u64,
}

/// One `tasks` row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskRow {
    pub uuid: String,
    pub task_source: String,
    pub owner: Option<String>,
    pub repo: Option<String>,
    pub task_type: Option<String>,
    pub task_id: Option<String>,
    pub status: Status,
    pub created_at: String,
    pub started_at: Option<String>,
    pub completed_at: Option<String>,
    pub updated_at: String,
    pub process_id: Option<i64>,
    pub hostname: Option<String>,
    pub llm_provider: Option<String>,
    pub model: Option<String>,
    pub context_length: Option<i64>,
    pub llm_call_count: i64,
    pub tool_call_count: i64,
    pub total_tokens: i64,
    pub compression_count: i64,
    pub error_message: Option<String>,
    pub user: Option<String>,
    pub prompt: String,
    pub resume_count: i64,
    pub crash_count: i64,
    pub pause_requested: bool,
}

/// Filter for [`Db::list`]. Rows come newest first.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub status: Option<Status>,
    pub user: Option<String>,
    /// At most this many rows (`None`: all).
    pub limit: Option<u32>,
}

/// Statistics of one model (or of all tasks when `model` is `None`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelStats {
    pub model: Option<String>,
    pub tasks: i64,
    pub completed: i64,
    pub failed: i64,
    /// Mean of `completed_at - started_at` over finished tasks, seconds.
    pub avg_duration_secs: Option<f64>,
    pub total_tokens: i64,
    pub llm_calls: i64,
    pub tool_calls: i64,
    pub compressions: i64,
}

/// What `ctxhost stats` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// Count per status, every status listed (zeros included), in lifecycle order.
    pub by_status: Vec<(Status, i64)>,
    /// All tasks together.
    pub total: ModelStats,
    /// One entry per model, by model name.
    pub by_model: Vec<ModelStats>,
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

const SCHEMA: &str = "
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

const COLUMNS: &str = "uuid, task_source, owner, repo, task_type, task_id, status, created_at, started_at, \
completed_at, updated_at, process_id, hostname, llm_provider, model, context_length, llm_call_count, \
tool_call_count, total_tokens, compression_count, error_message, user, prompt, resume_count, crash_count, \
pause_requested";

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

impl Db {
    /// Open (creating if needed) `contexts_dir/tasks.db`: WAL, 5 s busy timeout, schema created
    /// or checked. `contexts_dir` must exist.
    pub fn open(contexts_dir: &Path) -> Result<Db, DbError> {
        let path = contexts_dir.join("tasks.db");
        let shown = path.display().to_string();
        let sq = |source| DbError::Sqlite {
            path: shown.clone(),
            source,
        };
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
            db.retry(|c| {
                c.execute_batch(&format!(
                    "BEGIN IMMEDIATE; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
                ))
                .inspect_err(|_| {
                    let _ = c.execute_batch("ROLLBACK");
                })
            })?;
        }
        Ok(db)
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `f`, retrying up to [`BUSY_RETRIES`] times on busy/locked with 50, 100, 200 ms backoff.
    fn retry<T>(
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

    /// Insert `task` as `queued` with `created_at` = now. Errors if the UUID exists.
    pub fn insert_queued(&self, task: &NewTask) -> Result<(), DbError> {
        let now = now_rfc3339();
        self.retry(|c| {
            c.execute(
                "INSERT INTO tasks (uuid, task_source, owner, repo, task_type, task_id, status, created_at, \
                 updated_at, llm_provider, model, context_length, user, prompt) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'queued', ?7, ?7, ?8, ?9, ?10, ?11, ?12)",
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
                ],
            )
        })?;
        Ok(())
    }

    /// Claim a queued task for this process: one atomic
    /// `UPDATE … SET status='running', process_id, hostname, started_at … WHERE uuid=? AND status='queued'`.
    /// `started_at` keeps its first value on a resume. Returns whether this process won the claim.
    pub fn claim(
        &self,
        uuid: &str,
        pid: u32,
        hostname: &str,
        llm_provider: &str,
        model: &str,
        context_length: u64,
    ) -> Result<bool, DbError> {
        let now = now_rfc3339();
        let n = self.retry(|c| {
            c.execute(
                "UPDATE tasks SET status = 'running', process_id = ?2, hostname = ?3, \
                 started_at = COALESCE(started_at, ?4), updated_at = ?4, llm_provider = ?5, model = ?6, \
                 context_length = ?7, error_message = NULL \
                 WHERE uuid = ?1 AND status = 'queued'",
                params![uuid, pid as i64, hostname, now, llm_provider, model, context_length as i64],
            )
        })?;
        Ok(n == 1)
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

    /// Set `status` (and `error_message`, replacing any earlier one) without touching completed_at.
    /// For non-final transitions (paused, queued on resume). Returns whether the row exists.
    pub fn set_status(
        &self,
        uuid: &str,
        status: Status,
        error_message: Option<&str>,
    ) -> Result<bool, DbError> {
        let now = now_rfc3339();
        let n = self.retry(|c| {
            c.execute(
                "UPDATE tasks SET status = ?2, error_message = ?3, updated_at = ?4 WHERE uuid = ?1",
                params![uuid, status.as_str(), error_message, now],
            )
        })?;
        Ok(n == 1)
    }

    /// End a task: set a final `status` (`completed`, `failed`, `stopped`), `error_message`
    /// and `completed_at` = now. Returns whether the row exists.
    pub fn finish(
        &self,
        uuid: &str,
        status: Status,
        error_message: Option<&str>,
    ) -> Result<bool, DbError> {
        debug_assert!(status.is_final(), "finish with non-final status {status}");
        let now = now_rfc3339();
        let n = self.retry(|c| {
            c.execute(
                "UPDATE tasks SET status = ?2, error_message = ?3, completed_at = ?4, updated_at = ?4 \
                 WHERE uuid = ?1",
                params![uuid, status.as_str(), error_message, now],
            )
        })?;
        Ok(n == 1)
    }

    /// Mark a task `failed` with `error_message` only if it is still `running` under process `pid`
    /// (the worker's answer to a child that died). Also counts a crash. Returns whether it changed.
    pub fn fail_if_running_by(
        &self,
        uuid: &str,
        pid: u32,
        error_message: &str,
    ) -> Result<bool, DbError> {
        let now = now_rfc3339();
        let n = self.retry(|c| {
            c.execute(
                "UPDATE tasks SET status = 'failed', error_message = ?3, completed_at = ?4, updated_at = ?4, \
                 crash_count = crash_count + 1 \
                 WHERE uuid = ?1 AND status = 'running' AND process_id = ?2",
                params![uuid, pid as i64, error_message, now],
            )
        })?;
        Ok(n == 1)
    }

    /// Mark a still-`queued` task `failed` (e.g. its process could not start). Returns whether it changed.
    pub fn fail_if_queued(&self, uuid: &str, error_message: &str) -> Result<bool, DbError> {
        let now = now_rfc3339();
        let n = self.retry(|c| {
            c.execute(
                "UPDATE tasks SET status = 'failed', error_message = ?2, completed_at = ?3, updated_at = ?3 \
                 WHERE uuid = ?1 AND status = 'queued'",
                params![uuid, error_message, now],
            )
        })?;
        Ok(n == 1)
    }

    /// Add to the counters in SQL (`col = col + ?`): LLM calls, tool calls, tokens, compressions.
    pub fn add_usage(
        &self,
        uuid: &str,
        llm_calls: u64,
        tool_calls: u64,
        tokens: u64,
        compressions: u64,
    ) -> Result<(), DbError> {
        let now = now_rfc3339();
        self.retry(|c| {
            c.execute(
                "UPDATE tasks SET llm_call_count = llm_call_count + ?2, tool_call_count = tool_call_count + ?3, \
                 total_tokens = total_tokens + ?4, compression_count = compression_count + ?5, updated_at = ?6 \
                 WHERE uuid = ?1",
                params![uuid, llm_calls as i64, tool_calls as i64, tokens as i64, compressions as i64, now],
            )
        })?;
        Ok(())
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

    /// Counts by status, and totals overall and per model.
    pub fn stats(&self) -> Result<Stats, DbError> {
        let counts: Vec<(String, i64)> = self.retry(|c| {
            let mut st = c.prepare_cached("SELECT status, COUNT(*) FROM tasks GROUP BY status")?;
            let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })?;
        let by_status = Status::ALL
            .iter()
            .map(|s| {
                (
                    *s,
                    counts
                        .iter()
                        .find(|(n, _)| n == s.as_str())
                        .map(|(_, c)| *c)
                        .unwrap_or(0),
                )
            })
            .collect();
        const AGG: &str = "COUNT(*), \
            COALESCE(SUM(status = 'completed'), 0), COALESCE(SUM(status = 'failed'), 0), \
            AVG(CASE WHEN completed_at IS NOT NULL AND started_at IS NOT NULL \
                THEN (julianday(completed_at) - julianday(started_at)) * 86400.0 END), \
            COALESCE(SUM(total_tokens), 0), COALESCE(SUM(llm_call_count), 0), \
            COALESCE(SUM(tool_call_count), 0), COALESCE(SUM(compression_count), 0)";
        fn agg(r: &Row<'_>, first: usize, model: Option<String>) -> rusqlite::Result<ModelStats> {
            Ok(ModelStats {
                model,
                tasks: r.get(first)?,
                completed: r.get(first + 1)?,
                failed: r.get(first + 2)?,
                avg_duration_secs: r.get(first + 3)?,
                total_tokens: r.get(first + 4)?,
                llm_calls: r.get(first + 5)?,
                tool_calls: r.get(first + 6)?,
                compressions: r.get(first + 7)?,
            })
        }
        let total = self
            .retry(|c| c.query_row(&format!("SELECT {AGG} FROM tasks"), [], |r| agg(r, 0, None)))?;
        let by_model = self.retry(|c| {
            let mut st = c.prepare_cached(&format!(
                "SELECT model, {AGG} FROM tasks GROUP BY model ORDER BY model"
            ))?;
            let rows = st.query_map([], |r| agg(r, 1, r.get(0)?))?;
            rows.collect()
        })?;
        Ok(Stats {
            by_status,
            total,
            by_model,
        })
    }

    fn finish_row(&self, raw: (TaskRow, String)) -> Result<TaskRow, DbError> {
        let (mut row, status) = raw;
        row.status = status.parse().map_err(|message| DbError::BadRow {
            path: self.path.display().to_string(),
            uuid: row.uuid.clone(),
            message,
        })?;
        Ok(row)
    }
}

/// Read a row selected with [`COLUMNS`]; the status text is returned beside it for checking.
fn raw_row(r: &Row<'_>) -> rusqlite::Result<(TaskRow, String)> {
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
        },
        status,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_task(uuid: &str) -> NewTask {
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
        }
    }

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
    fn claim_is_won_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let other = Db::open(dir.path()).unwrap();
        db.insert_queued(&new_task("t")).unwrap();
        assert!(db.claim("t", 10, "h", "openai", "m2", 8192).unwrap());
        assert!(!other.claim("t", 11, "h", "openai", "m2", 8192).unwrap());
        let row = db.get("t").unwrap().unwrap();
        assert_eq!(row.status, Status::Running);
        assert_eq!(row.process_id, Some(10));
        assert_eq!(row.model.as_deref(), Some("m2"));
        assert!(row.started_at.is_some());
        assert!(db.list_queued(10).unwrap().is_empty());
    }

    #[test]
    fn counters_add_up_and_finish_sets_completed_at() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.insert_queued(&new_task("t")).unwrap();
        db.claim("t", 1, "h", "p", "m", 1).unwrap();
        db.add_usage("t", 1, 2, 30, 0).unwrap();
        db.add_usage("t", 1, 0, 12, 1).unwrap();
        db.finish("t", Status::Completed, None).unwrap();
        let row = db.get("t").unwrap().unwrap();
        assert_eq!(
            (
                row.llm_call_count,
                row.tool_call_count,
                row.total_tokens,
                row.compression_count
            ),
            (2, 2, 42, 1)
        );
        assert_eq!(row.status, Status::Completed);
        assert!(row.completed_at.is_some());
        let stats = db.stats().unwrap();
        assert_eq!(stats.total.tasks, 1);
        assert_eq!(stats.total.total_tokens, 42);
        assert!(stats.total.avg_duration_secs.unwrap() >= 0.0);
        assert_eq!(
            stats
                .by_status
                .iter()
                .find(|(s, _)| *s == Status::Completed)
                .unwrap()
                .1,
            1
        );
    }

    #[test]
    fn fail_if_running_by_checks_the_pid() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.insert_queued(&new_task("t")).unwrap();
        db.claim("t", 7, "h", "p", "m", 1).unwrap();
        assert!(!db.fail_if_running_by("t", 8, "x").unwrap());
        assert!(db.fail_if_running_by("t", 7, "killed by signal 9").unwrap());
        let row = db.get("t").unwrap().unwrap();
        assert_eq!(row.status, Status::Failed);
        assert_eq!(row.crash_count, 1);
        assert_eq!(row.error_message.as_deref(), Some("killed by signal 9"));
    }

    #[test]
    fn list_filters_and_orders_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        for id in ["a", "b", "c"] {
            db.insert_queued(&new_task(id)).unwrap();
        }
        db.claim("b", 1, "h", "p", "m", 1).unwrap();
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

    #[test]
    fn concurrent_counter_updates_from_many_connections_are_exact() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.insert_queued(&new_task("t")).unwrap();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let p = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    let db = Db::open(&p).unwrap();
                    for _ in 0..50 {
                        db.add_usage("t", 1, 2, 3, 0).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let row = db.get("t").unwrap().unwrap();
        assert_eq!(
            (row.llm_call_count, row.tool_call_count, row.total_tokens),
            (400, 800, 1200)
        );
    }

    #[test]
    fn only_one_of_many_claimers_wins() {
        let dir = tempfile::tempdir().unwrap();
        Db::open(dir.path())
            .unwrap()
            .insert_queued(&new_task("t"))
            .unwrap();
        let threads: Vec<_> = (0..6)
            .map(|i| {
                let p = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    Db::open(&p)
                        .unwrap()
                        .claim("t", 100 + i, "h", "p", "m", 1)
                        .unwrap()
                })
            })
            .collect();
        let wins = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|w| *w)
            .count();
        assert_eq!(wins, 1);
    }
}
