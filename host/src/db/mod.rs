//! The task store: every task's status and statistics, in `contexts/tasks.db` (SQLite, WAL;
//! the default) or in a PostgreSQL database shared by workers on several hosts
//! (`task_store: {url_env: VAR}`). [`Db`] is one connection to either; [`StoreSpec`] says
//! which.
//!
//! - [`schema`]: the `tasks` table (the same columns on both backends), its version and
//!   upgrades, created and migrated automatically when a store is opened.
//! - [`binding`]: which store owns a `contexts/` tree (`contexts/store.json`); a store never
//!   opens a tree another store owns.
//! - [`queue`]: submitting tasks and finding them (queued, running, finished, by UUID prefix).
//! - [`control`]: requests to a running task (pause, stop) and its resume count.
//! - [`stats`]: the counters of a task ([`UsageDelta`]) and the statistics over all tasks.
//! - [`lease`]: a running task's lease (worker id, expiry), renewed by its process, taken
//!   over when it expires.
//! - [`copy`]: copying every row from one store to another (`ctxhost migrate`).
//! - the backends, [`sqlite`] and [`postgres`] (connection, retries, exact writes), and
//!   [`sql`], what the statements are made of: written once, in SQL both accept.
//! - [`sources`]: what the GitHub / GitLab task sources keep: one open task per item, and
//!   what was published back to it.
//! - [`health`]: whether the database can still be written and read (for `ctxhost fsck`).
//!
//! Status changes are not here: each is one conditional `UPDATE` owned by
//! [`crate::lifecycle`], the only code that changes a task's status or moves its directory.
//!
//! Counters are only ever changed in SQL (`col = col + ?`), never read-modify-write.
//! Timestamps are RFC 3339 UTC text with milliseconds (`2025-01-31T12:00:00.123Z`), which
//! sorts as text and is understood by both databases' date functions; lease expiries are
//! milliseconds since the Unix epoch on the database server's clock.
//!
//! # Adding to the store
//! A new query or statement is a method in the module of its concept (or a new module),
//! written once with [`Db::query`] / [`Db::execute`] / [`Db::write_returning`] in the SQL
//! both backends accept ([`sql`] lists what to avoid). A new column or table is a step in
//! [`schema`] with its SQL for each backend, and a bump of [`SCHEMA_VERSION`].

pub mod binding;
pub mod control;
pub mod copy;
pub mod health;
pub mod lease;
pub mod postgres;
pub mod queue;
pub mod schema;
pub mod sources;
pub mod sql;
pub mod sqlite;
pub mod stats;
mod status;

use std::cell::RefCell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Statements of this process retried because the database was busy or the connection failed
/// (both stores); read by `metrics` at each scrape (`ctxhost_db_retries_total`).
static RETRIES: AtomicU64 = AtomicU64::new(0);

/// Count one retried statement.
fn count_retry() {
    RETRIES.fetch_add(1, Ordering::Relaxed);
}

/// Statements of this process retried so far (busy SQLite file, PostgreSQL connection or
/// serialization failure).
pub fn retries() -> u64 {
    RETRIES.load(Ordering::Relaxed)
}

pub use control::Control;
pub use postgres::PgUrl;
pub use schema::SCHEMA_VERSION;
pub use sql::{Dialect, SqlRow, Value};
pub use sqlite::{BUSY_RETRIES, BUSY_TIMEOUT};
pub use stats::{ModelStats, Stats, UsageDelta};
pub use status::Status;

pub(crate) use sql::args;

/// File name of the SQLite database in the contexts/ directory (named by [`crate::layout`],
/// which owns the names of the tree's files).
pub use crate::layout::DB_FILE;

/// The environment variable `task_store.url_env` names by default.
pub const DEFAULT_URL_ENV: &str = "CTXHOST_DATABASE_URL";

/// Which task store to open, resolved from `task_store` (config.yaml) and the environment
/// ([`crate::config::Config::store_spec`]).
#[derive(Debug, Clone)]
// One per process, resolved once: the size of the PostgreSQL variant does not matter.
#[allow(clippy::large_enum_variant)]
pub enum StoreSpec {
    /// `contexts/tasks.db`.
    Sqlite,
    /// A PostgreSQL database (its URL came from the environment).
    Postgres(PgUrl),
}

impl StoreSpec {
    /// `sqlite` or `postgres` (as in contexts/store.json).
    pub fn kind(&self) -> &'static str {
        match self {
            StoreSpec::Sqlite => "sqlite",
            StoreSpec::Postgres(_) => "postgres",
        }
    }
}

/// How long a statement waits for an unreachable database before it fails (PostgreSQL;
/// SQLite is a local file and only waits for its busy timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patience {
    /// Give up after this long (commands a user waits for).
    Bounded(Duration),
    /// Retry with backoff until the database answers (workers and task processes: a task
    /// process's lease ends it if the outage outlasts the lease).
    Unbounded,
}

impl Default for Patience {
    /// 30 seconds.
    fn default() -> Patience {
        Patience::Bounded(Duration::from_secs(30))
    }
}

/// Database errors. Messages name the store (the SQLite file, or the PostgreSQL database
/// without its password).
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// An SQLite error (after the busy retries).
    #[error("{location}: {source}")]
    Sqlite {
        /// The database file.
        location: String,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
    /// A PostgreSQL error that retrying does not help (a constraint, a permission, a bad
    /// password).
    #[error("{location}: {message}")]
    Postgres {
        /// The database, `postgres://user@host:port/dbname`.
        location: String,
        /// What the server (or the client) said.
        message: String,
        /// The SQLSTATE code, for a server error.
        code: Option<String>,
    },
    /// The PostgreSQL server could not be reached for as long as the command waits.
    #[error("{location}: unreachable for {waited_secs} s, giving up (last error: {last})")]
    Unavailable {
        /// The database.
        location: String,
        /// How long it was tried.
        waited_secs: u64,
        /// The last error.
        last: String,
    },
    /// The task store is configured wrongly (`task_store`, the URL variable).
    #[error("{0}")]
    Config(String),
    /// The database was written by a newer ctxhost.
    #[error(
        "{location}: schema version {found} is newer than this ctxhost understands ({SCHEMA_VERSION})"
    )]
    NewerSchema {
        /// The database.
        location: String,
        /// Its schema version.
        found: i64,
    },
    /// The contexts/ tree belongs to another task store (contexts/store.json), or the store
    /// to another tree.
    #[error("{0}")]
    NotOwner(String),
    /// contexts/store.json cannot be read or written.
    #[error("{path}: {message}")]
    Binding {
        /// contexts/store.json.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A row that does not read as a task (e.g. an unknown status text).
    #[error("{location}: row {uuid}: {message}")]
    BadRow {
        /// The database.
        location: String,
        /// The row's uuid column.
        uuid: String,
        /// What is wrong with it.
        message: String,
    },
    /// A value of an unexpected kind in a result.
    #[error("unexpected result: {0}")]
    Decode(String),
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
    /// The directory the built-in tools work on (absolute; `submit --workspace`, or the
    /// current directory of `ctxhost ask`); `None`: the config's `workspace`.
    pub workspace: Option<String>,
}

/// One `tasks` row (DESIGN.md §2; timestamps RFC 3339 UTC text).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
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
    /// The worker whose task process holds the task's lease (`hostname:pid:nonce`), or the
    /// process recovering it; set by a claim, kept after the task ends.
    pub worker_id: Option<String>,
    /// When the lease of a running task expires: milliseconds since the Unix epoch, on the
    /// database server's clock ([`lease`]).
    pub lease_expires_at: Option<i64>,
    /// The identity of the host its task process ran on ([`crate::host::host_id`]; with
    /// `hostname`, what tells whether its pid can be checked here); `None` in rows written
    /// before schema version 7.
    pub host_id: Option<String>,
    /// The directory the built-in tools work on, stored at submit (absolute; `submit
    /// --workspace`, `ask`'s current directory); `None`: the config's `workspace`.
    pub workspace: Option<String>,
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

/// The backend of a [`Db`].
// One per connection: the size of the PostgreSQL variant does not matter.
#[allow(clippy::large_enum_variant)]
enum Backend {
    Sqlite(sqlite::SqliteStore),
    Postgres(RefCell<postgres::PgStore>),
}

/// A connection to the task store. Not shared between threads: open one per process/thread.
pub struct Db {
    backend: Backend,
    location: String,
}

/// One connection shared by the parts of a task process that run on its threads (the task
/// context, the usage meters of the agent loop and of the compressor's `llm` import): a
/// task process connects once, not once per part. Statements take turns.
#[derive(Clone)]
pub struct SharedDb(std::sync::Arc<std::sync::Mutex<Db>>);

impl SharedDb {
    /// Share `db`.
    pub fn new(db: Db) -> SharedDb {
        SharedDb(std::sync::Arc::new(std::sync::Mutex::new(db)))
    }

    /// Run `f` on the connection (waiting for another user of it).
    pub fn with<T>(&self, f: impl FnOnce(&Db) -> T) -> T {
        // A panic while holding the lock leaves the connection as usable as before.
        let db = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&db)
    }
}

/// The columns of [`TaskRow`], in [`task_row`]'s order.
pub(crate) const COLUMNS: &str = "uuid, task_source, owner, repo, task_type, task_id, status, created_at, started_at, \
completed_at, updated_at, process_id, hostname, llm_provider, model, context_length, llm_call_count, \
tool_call_count, total_tokens, compression_count, error_message, \"user\", prompt, resume_count, crash_count, \
pause_requested, stop_requested, pause_reason, files_deleted_at, cache_read_tokens, cache_creation_tokens, \
no_inherit, worker_id, lease_expires_at, host_id, workspace";

impl Db {
    /// Open the task store of `spec` for the contexts tree at `contexts` (which must exist):
    /// connect (SQLite: create `contexts/tasks.db`), create or upgrade the schema
    /// ([`schema`]), and check that the tree belongs to this store, recording it in
    /// `contexts/store.json` if the tree belongs to none yet ([`binding`]).
    pub fn open(spec: &StoreSpec, contexts: &Path) -> Result<Db, DbError> {
        let db = Db::open_unbound(spec, contexts)?;
        binding::check(&db, spec, contexts)?;
        Ok(db)
    }

    /// [`Db::open`] without the ownership check (`ctxhost migrate`, which moves a tree
    /// from one store to another).
    pub fn open_unbound(spec: &StoreSpec, contexts: &Path) -> Result<Db, DbError> {
        let db = match spec {
            StoreSpec::Sqlite => {
                let store = sqlite::SqliteStore::open(&contexts.join(DB_FILE))?;
                Db {
                    location: store.path().display().to_string(),
                    backend: Backend::Sqlite(store),
                }
            }
            StoreSpec::Postgres(url) => {
                let store = postgres::PgStore::connect(url, Patience::default())?;
                Db {
                    location: store.location().to_string(),
                    backend: Backend::Postgres(RefCell::new(store)),
                }
            }
        };
        schema::ensure(&db)?;
        Ok(db)
    }

    /// How long statements wait for an unreachable database (default: 30 s).
    pub fn set_patience(&self, patience: Patience) {
        if let Backend::Postgres(pg) = &self.backend {
            pg.borrow_mut().set_patience(patience);
        }
    }

    /// The store, for messages: the SQLite file, or `postgres://user@host:port/dbname`
    /// (never the password).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Which SQL the backend speaks.
    pub fn dialect(&self) -> Dialect {
        match self.backend {
            Backend::Sqlite(_) => Dialect::Sqlite,
            Backend::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Run a query (`?1`, `?2` placeholders, [`sql`]'s portable SQL) and return its rows.
    pub fn query(&self, sql: &str, args: &[Value]) -> Result<Vec<SqlRow>, DbError> {
        match &self.backend {
            Backend::Sqlite(s) => s.query(sql, args),
            Backend::Postgres(pg) => pg.borrow_mut().query(sql, args),
        }
    }

    /// [`Db::query`], first row only.
    pub fn query_opt(&self, sql: &str, args: &[Value]) -> Result<Option<SqlRow>, DbError> {
        Ok(self.query(sql, args)?.into_iter().next())
    }

    /// Run a write (one statement, its own transaction) and return the rows it changed.
    /// Applied exactly once, even when a PostgreSQL connection breaks during it
    /// ([`postgres`]).
    pub fn execute(&self, sql: &str, args: Vec<Value>) -> Result<u64, DbError> {
        self.write_batch(sql, &[args])
    }

    /// Run a write with a `RETURNING` clause and return the rows it gave.
    pub fn write_returning(&self, sql: &str, args: Vec<Value>) -> Result<Vec<SqlRow>, DbError> {
        let batch = [args];
        match &self.backend {
            Backend::Sqlite(s) => Ok(s.write(sql, &batch)?.1),
            Backend::Postgres(pg) => Ok(pg.borrow_mut().write(sql, &batch)?.rows),
        }
    }

    /// Run write `sql` once per argument list of `batch`, all in one transaction; returns
    /// the rows changed.
    pub fn write_batch(&self, sql: &str, batch: &[Vec<Value>]) -> Result<u64, DbError> {
        match &self.backend {
            Backend::Sqlite(s) => Ok(s.write(sql, batch)?.0),
            Backend::Postgres(pg) => Ok(pg.borrow_mut().write(sql, batch)?.changed),
        }
    }

    /// Run `sql` as given, outside the statements of this module (tests that plant a state
    /// no command makes; operators' one-off fixes). Returns the rows changed.
    #[doc(hidden)]
    pub fn execute_raw(&self, sql: &str) -> Result<u64, DbError> {
        self.execute(sql, Vec::new())
    }

    /// The SQLite backend (schema upgrades), if that is the backend.
    pub(crate) fn sqlite(&self) -> Option<&sqlite::SqliteStore> {
        match &self.backend {
            Backend::Sqlite(s) => Some(s),
            Backend::Postgres(_) => None,
        }
    }

    /// The PostgreSQL backend (schema upgrades), if that is the backend.
    pub(crate) fn postgres(&self) -> Option<std::cell::RefMut<'_, postgres::PgStore>> {
        match &self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(pg) => Some(pg.borrow_mut()),
        }
    }

    /// The row of `uuid`, if any.
    pub fn get(&self, uuid: &str) -> Result<Option<TaskRow>, DbError> {
        self.query_opt(
            &format!("SELECT {COLUMNS} FROM tasks WHERE uuid = ?1"),
            &args![uuid],
        )?
        .map(|r| self.task_row(&r))
        .transpose()
    }

    /// Rows matching `filter`, newest first.
    pub fn list(&self, filter: &TaskFilter) -> Result<Vec<TaskRow>, DbError> {
        let limit = filter
            .limit
            .map(|n| format!(" LIMIT {n}"))
            .unwrap_or_default();
        let order = self.dialect().insert_order();
        self.query(
            &format!(
                "SELECT {COLUMNS} FROM tasks WHERE (CAST(?1 AS TEXT) IS NULL OR status = ?1) \
                 AND (CAST(?2 AS TEXT) IS NULL OR \"user\" = ?2) \
                 ORDER BY created_at DESC, {order} DESC{limit}"
            ),
            &args![filter.status.map(|s| s.as_str()), filter.user.as_deref()],
        )?
        .iter()
        .map(|r| self.task_row(r))
        .collect()
    }

    /// How many rows match `filter`, its limit aside.
    pub fn count_matching(&self, filter: &TaskFilter) -> Result<i64, DbError> {
        match self.query_opt(
            "SELECT COUNT(*) FROM tasks WHERE (CAST(?1 AS TEXT) IS NULL OR status = ?1) \
             AND (CAST(?2 AS TEXT) IS NULL OR \"user\" = ?2)",
            &args![filter.status.map(|s| s.as_str()), filter.user.as_deref()],
        )? {
            Some(r) => r.int(0),
            None => Ok(0),
        }
    }

    /// A row selected with [`COLUMNS`] as a [`TaskRow`], its status text checked.
    pub(crate) fn task_row(&self, r: &SqlRow) -> Result<TaskRow, DbError> {
        let row = task_row(r)?;
        let status = r.text(6)?;
        let status = status.parse().map_err(|message| DbError::BadRow {
            location: self.location.clone(),
            uuid: row.uuid.clone(),
            message,
        })?;
        Ok(TaskRow { status, ..row })
    }
}

/// Read a row selected with [`COLUMNS`] (the status is left `queued`: [`Db::task_row`]
/// checks and sets it).
fn task_row(r: &SqlRow) -> Result<TaskRow, DbError> {
    let uuid = r.text(0)?;
    let counter = |i: usize, column: &str| counter(r, i, &uuid, column);
    Ok(TaskRow {
        task_source: r.text(1)?,
        owner: r.opt_text(2)?,
        repo: r.opt_text(3)?,
        task_type: r.opt_text(4)?,
        task_id: r.opt_text(5)?,
        status: Status::Queued,
        created_at: r.text(7)?,
        started_at: r.opt_text(8)?,
        completed_at: r.opt_text(9)?,
        updated_at: r.text(10)?,
        process_id: r.opt_int(11)?,
        hostname: r.opt_text(12)?,
        llm_provider: r.opt_text(13)?,
        model: r.opt_text(14)?,
        context_length: r.opt_int(15)?,
        llm_call_count: counter(16, "llm_call_count"),
        tool_call_count: counter(17, "tool_call_count"),
        total_tokens: counter(18, "total_tokens"),
        compression_count: counter(19, "compression_count"),
        error_message: r.opt_text(20)?,
        user: r.opt_text(21)?,
        prompt: r.text(22)?,
        resume_count: counter(23, "resume_count"),
        crash_count: counter(24, "crash_count"),
        pause_requested: r.int(25)? != 0,
        stop_requested: r.int(26)? != 0,
        pause_reason: r.opt_text(27)?,
        files_deleted_at: r.opt_text(28)?,
        cache_read_tokens: counter(29, "cache_read_tokens"),
        cache_creation_tokens: counter(30, "cache_creation_tokens"),
        no_inherit: r.int(31)? != 0,
        worker_id: r.opt_text(32)?,
        lease_expires_at: r.opt_int(33)?,
        host_id: r.opt_text(34)?,
        workspace: r.opt_text(35)?,
        uuid,
    })
}

/// Column `i` of `r`, the counter `column` of task `uuid`: an integer. Anything else (a REAL
/// that an integer overflow left in SQLite — a provider's usage past i64 did so before the
/// host bounded it, [`crate::runtime::MAX_USAGE_TOKENS`] — a NULL or text) does not make the
/// row unreadable: it is read as the nearest integer (0 for what is not a number) with a
/// warning naming the task and column, so one bad row never breaks a listing.
fn counter(r: &SqlRow, i: usize, uuid: &str, column: &str) -> i64 {
    use sql::Value;
    let (value, held) = match r.0.get(i) {
        Some(Value::Int(v)) => return *v,
        // `as` saturates at the i64 bounds and makes NaN 0.
        Some(Value::Real(v)) => (*v as i64, format!("the real number {v}")),
        Some(Value::Text(t)) => (0, format!("the text {:?}", crate::untrusted::name(t))),
        Some(Value::Null) => (0, "NULL".to_string()),
        None => (0, "nothing (no such column)".to_string()),
    };
    tracing::warn!(
        %uuid,
        column,
        "task {uuid}: its counter {column} holds {held}, not an integer; read as {value} (set it right in the store to count on)"
    );
    value
}

/// Shared by the database tests of this crate: a task to insert, and [`TestStore`], a
/// throwaway store of either backend for the tests that [`store_tests!`] runs on both.
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
            workspace: None,
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
            worker_id: None,
            lease_expires_at: None,
            host_id: None,
            workspace: None,
        }
    }

    /// The variable naming a PostgreSQL server for tests: the URL of a role that may create
    /// databases (`scripts/test-postgres.sh start` prints one).
    pub const TEST_URL_ENV: &str = "CTXHOST_TEST_DATABASE_URL";

    /// A contexts tree (a temporary directory) and its store: SQLite in the tree, or a fresh
    /// PostgreSQL database on the test server, dropped with it.
    pub struct TestStore {
        dir: tempfile::TempDir,
        /// The store.
        pub spec: StoreSpec,
        pg: Option<(String, String)>,
    }

    /// A new temporary directory, owner-only (0700) as ctxhost makes `contexts/`.
    fn private_tempdir() -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    impl TestStore {
        /// SQLite in a new temporary directory.
        pub fn sqlite() -> TestStore {
            TestStore {
                dir: private_tempdir(),
                spec: StoreSpec::Sqlite,
                pg: None,
            }
        }

        /// A new database on the server of [`TEST_URL_ENV`] (panics, saying how to start
        /// one, when the variable is not set).
        pub fn postgres() -> TestStore {
            let admin = std::env::var(TEST_URL_ENV).unwrap_or_else(|_| {
                panic!(
                    "{TEST_URL_ENV} is not set: start a test server with `scripts/test-postgres.sh start` \
                     and set {TEST_URL_ENV} to the URL it prints (CI does this in .ci/run)"
                )
            });
            let name = format!("ctxhost_unit_{}", uuid::Uuid::new_v4().simple());
            let mut client = ::postgres::Client::connect(&admin, ::postgres::NoTls).unwrap();
            client
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .unwrap();
            let url = database_url(&admin, &name);
            TestStore {
                dir: private_tempdir(),
                spec: StoreSpec::Postgres(PgUrl::parse(&url, TEST_URL_ENV).unwrap()),
                pg: Some((admin, name)),
            }
        }

        /// The contexts tree.
        pub fn contexts(&self) -> &Path {
            self.dir.path()
        }

        /// A new connection.
        pub fn open(&self) -> Db {
            Db::open(&self.spec, self.contexts()).unwrap()
        }
    }

    impl Drop for TestStore {
        fn drop(&mut self) {
            if let Some((admin, name)) = &self.pg
                && let Ok(mut c) = ::postgres::Client::connect(admin, ::postgres::NoTls)
            {
                let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
            }
        }
    }

    /// `admin` (a `postgres://` URL) with its database name replaced by `name`.
    pub fn database_url(admin: &str, name: &str) -> String {
        let (base, query) = match admin.split_once('?') {
            Some((b, q)) => (b, format!("?{q}")),
            None => (admin, String::new()),
        };
        let authority_end = base
            .find("://")
            .map(|i| i + 3)
            .and_then(|start| base[start..].find('/').map(|j| start + j))
            .unwrap_or(base.len());
        format!("{}/{name}{query}", &base[..authority_end])
    }

    /// Each test `fn NAME(store: &TestStore) { ... }` becomes a module `NAME` with two tests:
    /// `sqlite`, and `postgres` — built `#[ignore]`d unless a PostgreSQL test server is
    /// configured ([`TEST_URL_ENV`]) or CI is on (build.rs sets `cfg(ctxhost_pg_tests)`).
    macro_rules! store_tests {
        ($($(#[$attr:meta])* fn $name:ident($store:ident: &TestStore) $body:block)*) => {$(
            $(#[$attr])*
            mod $name {
                #[allow(unused_imports)]
                use super::*;
                fn run($store: &$crate::db::testing::TestStore) $body
                #[test]
                fn sqlite() {
                    run(&$crate::db::testing::TestStore::sqlite())
                }
                #[test]
                #[cfg_attr(
                    not(ctxhost_pg_tests),
                    ignore = "needs PostgreSQL: set CTXHOST_TEST_DATABASE_URL (scripts/test-postgres.sh start)"
                )]
                fn postgres() {
                    run(&$crate::db::testing::TestStore::postgres())
                }
            }
        )*};
    }
    pub(crate) use store_tests;

    #[test]
    fn database_urls_swap_the_name() {
        assert_eq!(
            database_url("postgres://u:p@h:1/postgres", "x"),
            "postgres://u:p@h:1/x"
        );
        assert_eq!(
            database_url("postgres://u:p@h:1/postgres?sslmode=disable", "x"),
            "postgres://u:p@h:1/x?sslmode=disable"
        );
        assert_eq!(database_url("postgres://h", "x"), "postgres://h/x");
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{new_task, store_tests};
    use super::*;

    store_tests! {
        fn schema_is_created_and_reopen_is_fine(store: &TestStore) {
            let db = store.open();
            db.insert_queued(&new_task("a")).unwrap();
            drop(db);
            let db = store.open();
            assert_eq!(db.get("a").unwrap().unwrap().status, Status::Queued);
            if let Some(s) = db.sqlite() {
                let mode: String = s
                    .conn()
                    .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                    .unwrap();
                assert_eq!(mode, "wal");
            }
        }

        fn list_filters_and_orders_newest_first(store: &TestStore) {
            let db = store.open();
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
            let mine = db
                .list(&TaskFilter {
                    user: Some("alice".into()),
                    limit: Some(1),
                    ..Default::default()
                })
                .unwrap();
            assert_eq!(mine.len(), 1);
            assert!(
                db.list(&TaskFilter {
                    user: Some("bob".into()),
                    ..Default::default()
                })
                .unwrap()
                .is_empty()
            );
            assert_eq!(db.list_queued(10).unwrap(), ["a", "c"]);
        }
    }
}
