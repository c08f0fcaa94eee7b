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

/// Schema version stored in `PRAGMA user_version`. Version 2 added `stop_requested`,
/// `pause_reason` and `files_deleted_at`; version 3 `cache_read_tokens` and
/// `cache_creation_tokens` (an older database is upgraded when opened).
pub const SCHEMA_VERSION: i64 = 3;

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
}

/// What a running task's process is asked to do at its next safe point ([`Db::control`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Control {
    pub pause_requested: bool,
    pub stop_requested: bool,
    pub pause_reason: Option<String>,
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
    /// Prompt tokens read from the provider's prompt cache (part of `total_tokens`).
    pub cache_read_tokens: i64,
    /// Prompt tokens written to the provider's prompt cache (part of `total_tokens`).
    pub cache_creation_tokens: i64,
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

const COLUMNS: &str = "uuid, task_source, owner, repo, task_type, task_id, status, created_at, started_at, \
completed_at, updated_at, process_id, hostname, llm_provider, model, context_length, llm_call_count, \
tool_call_count, total_tokens, compression_count, error_message, user, prompt, resume_count, crash_count, \
pause_requested, stop_requested, pause_reason, files_deleted_at, cache_read_tokens, cache_creation_tokens";

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
            // Another process may be creating or upgrading the schema at the same moment: the
            // version is read again inside the write transaction.
            db.retry(|c| {
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
                    if v < SCHEMA_VERSION {
                        c.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))?;
                    }
                    c.execute_batch("COMMIT")
                })();
                result.inspect_err(|_| {
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
                "UPDATE tasks SET status = ?2, error_message = ?3, completed_at = ?4, updated_at = ?4, \
                 pause_requested = 0, stop_requested = 0, pause_reason = NULL \
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
                 crash_count = crash_count + 1, pause_requested = 0, stop_requested = 0 \
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

    /// Ask a `running` task to pause at its next safe point (`ctxhost pause`), with an optional
    /// reason for task_state.json. Returns whether the task was running (nothing changes otherwise).
    pub fn request_pause(&self, uuid: &str, reason: Option<&str>) -> Result<bool, DbError> {
        let now = now_rfc3339();
        let n = self.retry(|c| {
            c.execute(
                "UPDATE tasks SET pause_requested = 1, pause_reason = ?2, updated_at = ?3 \
                 WHERE uuid = ?1 AND status = 'running'",
                params![uuid, reason, now],
            )
        })?;
        Ok(n == 1)
    }

    /// Ask a `running` task to stop at its next safe point (`ctxhost stop`). Returns whether
    /// the task was running.
    pub fn request_stop(&self, uuid: &str) -> Result<bool, DbError> {
        let now = now_rfc3339();
        let n = self.retry(|c| {
            c.execute(
                "UPDATE tasks SET stop_requested = 1, updated_at = ?2 WHERE uuid = ?1 AND status = 'running'",
                params![uuid, now],
            )
        })?;
        Ok(n == 1)
    }

    /// Stop a task that no process runs (`queued` or `paused`) at once: status `stopped`,
    /// `completed_at` = now. One conditional UPDATE, so it never races a claim: either the
    /// claim or the stop wins. Returns the status the task had, or `None` when it was neither
    /// queued nor paused (running, finished or unknown).
    pub fn stop_waiting(&self, uuid: &str) -> Result<Option<Status>, DbError> {
        for _ in 0..8 {
            let Some(row) = self.get(uuid)? else {
                return Ok(None);
            };
            if !matches!(row.status, Status::Queued | Status::Paused) {
                return Ok(None);
            }
            let now = now_rfc3339();
            let n = self.retry(|c| {
                c.execute(
                    "UPDATE tasks SET status = 'stopped', completed_at = ?3, updated_at = ?3, \
                     pause_requested = 0, stop_requested = 0, pause_reason = NULL \
                     WHERE uuid = ?1 AND status = ?2",
                    params![uuid, row.status.as_str(), now],
                )
            })?;
            if n == 1 {
                return Ok(Some(row.status));
            }
            // The status changed between the read and the update (a claim, a resume): look again.
        }
        Ok(None)
    }

    /// Put a `paused` task back in the queue (`ctxhost resume`) and clear its pause request.
    /// Returns whether it was paused.
    pub fn resume(&self, uuid: &str) -> Result<bool, DbError> {
        let now = now_rfc3339();
        let n = self.retry(|c| {
            c.execute(
                "UPDATE tasks SET status = 'queued', pause_requested = 0, updated_at = ?2 \
                 WHERE uuid = ?1 AND status = 'paused'",
                params![uuid, now],
            )
        })?;
        Ok(n == 1)
    }

    /// The pause/stop requests of a task (a task process asks at each safe point). `None`
    /// when the row does not exist.
    pub fn control(&self, uuid: &str) -> Result<Option<Control>, DbError> {
        self.retry(|c| {
            c.query_row(
                "SELECT pause_requested, stop_requested, pause_reason FROM tasks WHERE uuid = ?1",
                [uuid],
                |r| {
                    Ok(Control {
                        pause_requested: r.get::<_, i64>(0)? != 0,
                        stop_requested: r.get::<_, i64>(1)? != 0,
                        pause_reason: r.get(2)?,
                    })
                },
            )
            .optional()
        })
    }

    /// A task process honoured a pause: `running` under `pid` → `paused`, pause request
    /// cleared (the reason stays until the task is resumed). Returns whether it changed.
    pub fn mark_paused(&self, uuid: &str, pid: u32) -> Result<bool, DbError> {
        let now = now_rfc3339();
        let n = self.retry(|c| {
            c.execute(
                "UPDATE tasks SET status = 'paused', pause_requested = 0, updated_at = ?3 \
                 WHERE uuid = ?1 AND status = 'running' AND process_id = ?2",
                params![uuid, pid as i64, now],
            )
        })?;
        Ok(n == 1)
    }

    /// Record how many times the task was resumed (task_state.json holds the same number; the
    /// one process that owns the task sets it, so this is not a shared counter) and drop the
    /// pause reason.
    pub fn set_resume_count(&self, uuid: &str, resume_count: u64) -> Result<(), DbError> {
        let now = now_rfc3339();
        self.retry(|c| {
            c.execute(
                "UPDATE tasks SET resume_count = ?2, pause_reason = NULL, updated_at = ?3 WHERE uuid = ?1",
                params![uuid, resume_count as i64, now],
            )
        })?;
        Ok(())
    }

    /// `(uuid, process_id)` of every `running` task recorded on `hostname` (process_id may be
    /// missing in a damaged row).
    pub fn running_on_host(&self, hostname: &str) -> Result<Vec<(String, Option<i64>)>, DbError> {
        self.retry(|c| {
            let mut st = c.prepare_cached(
                "SELECT uuid, process_id FROM tasks WHERE status = 'running' AND hostname = ?1 \
                 ORDER BY started_at, rowid",
            )?;
            let rows = st.query_map([hostname], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })
    }

    /// Settle a task whose process `pid` died while it was `running`: count the crash and set
    /// `status` — `queued` (to run again), `paused` or `stopped` (a request that was pending),
    /// or `failed` — with `error_message`. Final statuses get `completed_at`. Only changes a
    /// row still `running` under `pid` (`None`: a row with no pid recorded); returns whether it did.
    pub fn settle_crash(
        &self,
        uuid: &str,
        pid: Option<i64>,
        status: Status,
        error_message: Option<&str>,
    ) -> Result<bool, DbError> {
        debug_assert!(status != Status::Running);
        let now = now_rfc3339();
        let n = self.retry(|c| {
            c.execute(
                "UPDATE tasks SET status = ?3, error_message = ?4, updated_at = ?5, \
                 crash_count = crash_count + 1, \
                 completed_at = CASE WHEN ?6 THEN ?5 ELSE completed_at END, \
                 pause_requested = 0, \
                 stop_requested = CASE WHEN ?6 THEN 0 ELSE stop_requested END \
                 WHERE uuid = ?1 AND status = 'running' AND process_id IS ?2",
                params![
                    uuid,
                    pid,
                    status.as_str(),
                    error_message,
                    now,
                    status.is_final()
                ],
            )
        })?;
        Ok(n == 1)
    }

    /// Finished tasks (`completed`, `failed`, `stopped`) whose `completed_at` is at or before
    /// `cutoff` (RFC 3339 UTC text) and whose files were not deleted yet, oldest first.
    pub fn finished_before(&self, cutoff: &str) -> Result<Vec<TaskRow>, DbError> {
        let raws = self.retry(|c| {
            let mut st = c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM tasks WHERE status IN ('completed', 'failed', 'stopped') \
                 AND completed_at IS NOT NULL AND completed_at <= ?1 AND files_deleted_at IS NULL \
                 ORDER BY completed_at, rowid"
            ))?;
            let rows = st.query_map([cutoff], raw_row)?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
        })?;
        raws.into_iter().map(|r| self.finish_row(r)).collect()
    }

    /// Record that `ctxhost cleanup` deleted the task's directory (keeps an earlier mark).
    pub fn mark_files_deleted(&self, uuid: &str) -> Result<bool, DbError> {
        let now = now_rfc3339();
        let n = self.retry(|c| {
            c.execute(
                "UPDATE tasks SET files_deleted_at = COALESCE(files_deleted_at, ?2), updated_at = ?2 \
                 WHERE uuid = ?1",
                params![uuid, now],
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

    /// Add prompt-cache tokens to the counters in SQL (`col = col + ?`): tokens read from and
    /// written to the provider's prompt cache, both already counted in `total_tokens`.
    pub fn add_cache_tokens(
        &self,
        uuid: &str,
        cache_read_tokens: u64,
        cache_creation_tokens: u64,
    ) -> Result<(), DbError> {
        if cache_read_tokens == 0 && cache_creation_tokens == 0 {
            return Ok(());
        }
        self.retry(|c| {
            c.execute(
                "UPDATE tasks SET cache_read_tokens = cache_read_tokens + ?2, \
                 cache_creation_tokens = cache_creation_tokens + ?3 WHERE uuid = ?1",
                params![uuid, cache_read_tokens as i64, cache_creation_tokens as i64],
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
            COALESCE(SUM(tool_call_count), 0), COALESCE(SUM(compression_count), 0), \
            COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_creation_tokens), 0)";
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
                cache_read_tokens: r.get(first + 8)?,
                cache_creation_tokens: r.get(first + 9)?,
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
            stop_requested: r.get::<_, i64>(26)? != 0,
            pause_reason: r.get(27)?,
            files_deleted_at: r.get(28)?,
            cache_read_tokens: r.get(29)?,
            cache_creation_tokens: r.get(30)?,
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
        db.add_cache_tokens("t", 20, 5).unwrap();
        db.add_cache_tokens("t", 7, 0).unwrap();
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
        assert_eq!((row.cache_read_tokens, row.cache_creation_tokens), (27, 5));
        assert_eq!(row.status, Status::Completed);
        assert!(row.completed_at.is_some());
        let stats = db.stats().unwrap();
        assert_eq!(stats.total.tasks, 1);
        assert_eq!(stats.total.total_tokens, 42);
        assert_eq!(
            (
                stats.by_model[0].cache_read_tokens,
                stats.by_model[0].cache_creation_tokens
            ),
            (27, 5)
        );
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
        let v: i64 = db
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        // Opening again changes nothing.
        drop(db);
        Db::open(dir.path()).unwrap();
    }

    #[test]
    fn pause_resume_and_stop_requests_follow_the_status() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.insert_queued(&new_task("t")).unwrap();
        // Only a running task can be asked to pause or stop.
        assert!(!db.request_pause("t", Some("lunch")).unwrap());
        assert!(!db.request_stop("t").unwrap());
        db.claim("t", 5, "h", "p", "m", 1).unwrap();
        assert!(db.request_pause("t", Some("lunch")).unwrap());
        let c = db.control("t").unwrap().unwrap();
        assert!(c.pause_requested && !c.stop_requested);
        assert_eq!(c.pause_reason.as_deref(), Some("lunch"));
        assert!(
            !db.mark_paused("t", 6).unwrap(),
            "another pid cannot pause it"
        );
        assert!(db.mark_paused("t", 5).unwrap());
        let row = db.get("t").unwrap().unwrap();
        assert_eq!(row.status, Status::Paused);
        assert!(!row.pause_requested);
        assert!(db.resume("t").unwrap());
        assert!(!db.resume("t").unwrap(), "a queued task cannot be resumed");
        assert_eq!(db.get("t").unwrap().unwrap().status, Status::Queued);
        db.set_resume_count("t", 1).unwrap();
        assert_eq!(db.get("t").unwrap().unwrap().resume_count, 1);
        // A queued task stops at once; a finished one cannot be stopped again.
        assert_eq!(db.stop_waiting("t").unwrap(), Some(Status::Queued));
        let row = db.get("t").unwrap().unwrap();
        assert_eq!(row.status, Status::Stopped);
        assert!(row.completed_at.is_some());
        assert_eq!(db.stop_waiting("t").unwrap(), None);
        assert!(!db.claim("t", 9, "h", "p", "m", 1).unwrap());
    }

    #[test]
    fn a_crash_is_settled_once_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.insert_queued(&new_task("t")).unwrap();
        db.claim("t", 5, "host-a", "p", "m", 1).unwrap();
        assert_eq!(
            db.running_on_host("host-a").unwrap(),
            vec![("t".to_string(), Some(5))]
        );
        assert!(db.running_on_host("host-b").unwrap().is_empty());
        assert!(
            !db.settle_crash("t", Some(6), Status::Queued, Some("x"))
                .unwrap()
        );
        assert!(
            db.settle_crash("t", Some(5), Status::Queued, Some("died"))
                .unwrap()
        );
        assert!(
            !db.settle_crash("t", Some(5), Status::Queued, Some("died"))
                .unwrap()
        );
        let row = db.get("t").unwrap().unwrap();
        assert_eq!((row.status, row.crash_count), (Status::Queued, 1));
        assert_eq!(row.completed_at, None);
        db.claim("t", 7, "host-a", "p", "m", 1).unwrap();
        assert!(
            db.settle_crash("t", Some(7), Status::Failed, Some("gave up"))
                .unwrap()
        );
        let row = db.get("t").unwrap().unwrap();
        assert_eq!((row.status, row.crash_count), (Status::Failed, 2));
        assert!(row.completed_at.is_some());
    }

    #[test]
    fn finished_rows_are_listed_for_cleanup_until_marked() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        for id in ["a", "b"] {
            db.insert_queued(&new_task(id)).unwrap();
        }
        db.finish("a", Status::Completed, None).unwrap();
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
        assert!(db.mark_files_deleted("a").unwrap());
        assert!(db.get("a").unwrap().unwrap().files_deleted_at.is_some());
        assert!(db.finished_before(later).unwrap().is_empty());
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
