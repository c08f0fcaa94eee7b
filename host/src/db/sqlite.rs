//! The SQLite backend (`task_store: sqlite`, the default): `contexts/tasks.db` in WAL mode,
//! 5 s busy timeout, and every statement retried up to [`BUSY_RETRIES`] times on
//! `SQLITE_BUSY` / `SQLITE_LOCKED` with a short backoff (50, 100, 200 ms). A write is one
//! statement in autocommit mode (or one `BEGIN IMMEDIATE` transaction for a batch), so a
//! retry never repeats a write that happened.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, params_from_iter};

use super::DbError;
use super::sql::{SqlRow, Value};

/// Busy timeout per statement.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Extra attempts after a busy/locked error.
pub const BUSY_RETRIES: u32 = 3;

/// A connection to `tasks.db`.
pub(crate) struct SqliteStore {
    conn: Connection,
    path: PathBuf,
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(match self {
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::Int(v) => ToSqlOutput::Borrowed(ValueRef::Integer(*v)),
            Value::Real(v) => ToSqlOutput::Borrowed(ValueRef::Real(*v)),
            Value::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
        })
    }
}

fn to_row(r: &rusqlite::Row<'_>, columns: usize) -> rusqlite::Result<SqlRow> {
    (0..columns)
        .map(|i| {
            Ok(match r.get_ref(i)? {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(v) => Value::Int(v),
                ValueRef::Real(v) => Value::Real(v),
                ValueRef::Text(t) | ValueRef::Blob(t) => {
                    Value::Text(String::from_utf8_lossy(t).into_owned())
                }
            })
        })
        .collect::<rusqlite::Result<Vec<_>>>()
        .map(SqlRow)
}

impl SqliteStore {
    /// Open (creating if needed, owner-only) `path`: WAL, busy timeout, foreign keys.
    pub fn open(path: &Path) -> Result<SqliteStore, DbError> {
        let shown = path.display().to_string();
        // A new database file is created owner-only; SQLite gives its -wal and -shm files the
        // mode of the database file. (An existing file keeps its mode: `ctxhost fsck` reports a
        // looser one.) If this fails, SQLite's own open reports why.
        let _ = std::os::unix::fs::OpenOptionsExt::mode(
            std::fs::OpenOptions::new().write(true).create_new(true),
            crate::task_dir::FILE_MODE,
        )
        .open(path);
        let conn = Connection::open(path).map_err(|source| DbError::Sqlite {
            location: shown.clone(),
            source,
        })?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|source| DbError::Sqlite {
                location: shown,
                source,
            })?;
        let store = SqliteStore {
            conn,
            path: path.to_path_buf(),
        };
        store.retry(|c| {
            // journal_mode returns a row; query it rather than execute.
            let _mode: String = c.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
            c.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
        })?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `f`, retrying up to [`BUSY_RETRIES`] times on busy/locked with 50, 100, 200 ms
    /// backoff.
    pub fn retry<T>(
        &self,
        mut f: impl FnMut(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, DbError> {
        let mut attempt = 0;
        loop {
            match f(&self.conn) {
                Ok(v) => return Ok(v),
                Err(e) if is_busy(&e) && attempt < BUSY_RETRIES => {
                    attempt += 1;
                    super::count_retry();
                    tracing::debug!(db = %self.path.display(), attempt, "database busy, retrying");
                    std::thread::sleep(Duration::from_millis(50 << (attempt - 1)));
                }
                Err(source) => {
                    return Err(DbError::Sqlite {
                        location: self.path.display().to_string(),
                        source,
                    });
                }
            }
        }
    }

    pub fn query(&self, sql: &str, args: &[Value]) -> Result<Vec<SqlRow>, DbError> {
        self.retry(|c| {
            let mut st = c.prepare_cached(sql)?;
            let columns = st.column_count();
            let rows = st.query_map(params_from_iter(args), |r| to_row(r, columns))?;
            rows.collect()
        })
    }

    /// `sql` once per argument list of `batch` (one statement in autocommit mode, or one
    /// `BEGIN IMMEDIATE` transaction for several): rows changed (or returned, with
    /// `RETURNING`) and the rows returned.
    pub fn write(&self, sql: &str, batch: &[Vec<Value>]) -> Result<(u64, Vec<SqlRow>), DbError> {
        self.retry(|c| {
            let several = batch.len() > 1;
            if several {
                c.execute_batch("BEGIN IMMEDIATE")?;
            }
            let result = (|| {
                let mut st = c.prepare_cached(sql)?;
                let columns = st.column_count();
                let mut changed = 0u64;
                let mut out = Vec::new();
                for args in batch {
                    if columns == 0 {
                        changed += st.execute(params_from_iter(args))? as u64;
                    } else {
                        let rows = st.query_map(params_from_iter(args), |r| to_row(r, columns))?;
                        for row in rows {
                            out.push(row?);
                            changed += 1;
                        }
                    }
                }
                if several {
                    c.execute_batch("COMMIT")?;
                }
                Ok((changed, out))
            })();
            if result.is_err() && several {
                let _ = c.execute_batch("ROLLBACK");
            }
            result
        })
    }

    /// The raw connection (tests).
    #[cfg(test)]
    pub fn conn(&self) -> &Connection {
        &self.conn
    }
}
