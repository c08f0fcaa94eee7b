//! What the statements of [`crate::db`] are made of, the same for both backends: parameter
//! and column [`Value`]s, result rows ([`SqlRow`]), and the few [`Dialect`] differences
//! between SQLite and PostgreSQL.
//!
//! Statements are written once, in SQL both backends accept, with numbered placeholders
//! `?1`, `?2`, ... (SQLite's spelling; the PostgreSQL backend rewrites them to `$1`, `$2`,
//! [`to_postgres_placeholders`]). What that SQL avoids, and writes instead:
//! - `x IS ?1` → `x IS NOT DISTINCT FROM ?1`; a boolean parameter → an integer compared
//!   with `= 1`; `?1 IS NULL` → `CAST(?1 AS TEXT) IS NULL` (PostgreSQL must know its type);
//! - `SUM(...)` → `CAST(SUM(...) AS BIGINT)` (PostgreSQL sums integers as `numeric`);
//! - the column `user` is always quoted (`"user"`: a keyword in PostgreSQL);
//! - no `?` inside string literals (the placeholder rewrite does not parse SQL);
//! - the current time, insertion order, row locking and durations come from [`Dialect`].

use super::DbError;

/// A parameter or column value. Integers are 64-bit on both backends (PostgreSQL columns are
/// `BIGINT`); booleans are integers 0/1; timestamps are RFC 3339 text, lease expiries
/// integer milliseconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// An integer.
    Int(i64),
    /// A floating-point number (only read: averages).
    Real(f64),
    /// Text.
    Text(String),
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(i64::from(v))
    }
}

impl From<u64> for Value {
    /// Saturates at `i64::MAX` (no counter or duration gets there).
    fn from(v: u64) -> Value {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Int(i64::from(v))
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}

impl From<&String> for Value {
    fn from(v: &String) -> Value {
        Value::Text(v.clone())
    }
}

impl From<std::borrow::Cow<'_, str>> for Value {
    fn from(v: std::borrow::Cow<'_, str>) -> Value {
        Value::Text(v.into_owned())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// `args![a, b, c]`: a `Vec<Value>` of the statement's parameters `?1`, `?2`, `?3`.
macro_rules! args {
    ($($v:expr),* $(,)?) => {
        <::std::vec::Vec<$crate::db::sql::Value>>::from([$($crate::db::sql::Value::from($v)),*])
    };
}
pub(crate) use args;

/// One result row: its columns in `SELECT` order.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlRow(pub Vec<Value>);

impl SqlRow {
    fn at(&self, i: usize) -> Result<&Value, DbError> {
        self.0
            .get(i)
            .ok_or_else(|| DbError::Decode(format!("no column {i} in a row of {}", self.0.len())))
    }

    /// Column `i` as an integer (NULL is an error).
    pub fn int(&self, i: usize) -> Result<i64, DbError> {
        self.opt_int(i)?
            .ok_or_else(|| DbError::Decode(format!("column {i} is NULL, expected an integer")))
    }

    /// Column `i` as an integer or NULL.
    pub fn opt_int(&self, i: usize) -> Result<Option<i64>, DbError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Int(v) => Ok(Some(*v)),
            other => Err(DbError::Decode(format!(
                "column {i} is {other:?}, expected an integer"
            ))),
        }
    }

    /// Column `i` as a number or NULL (integers are converted).
    pub fn opt_real(&self, i: usize) -> Result<Option<f64>, DbError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Real(v) => Ok(Some(*v)),
            Value::Int(v) => Ok(Some(*v as f64)),
            other => Err(DbError::Decode(format!(
                "column {i} is {other:?}, expected a number"
            ))),
        }
    }

    /// Column `i` as text (NULL is an error).
    pub fn text(&self, i: usize) -> Result<String, DbError> {
        self.opt_text(i)?
            .ok_or_else(|| DbError::Decode(format!("column {i} is NULL, expected text")))
    }

    /// Column `i` as text or NULL.
    pub fn opt_text(&self, i: usize) -> Result<Option<String>, DbError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Text(v) => Ok(Some(v.clone())),
            other => Err(DbError::Decode(format!(
                "column {i} is {other:?}, expected text"
            ))),
        }
    }
}

/// Which SQL a backend speaks, for the few places where SQLite and PostgreSQL differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite (bundled with rusqlite).
    Sqlite,
    /// PostgreSQL 12 or newer.
    Postgres,
}

impl Dialect {
    /// An integer expression: the database server's clock, in milliseconds since the Unix
    /// epoch. Lease expiries are computed and compared with it, so the hosts' own clocks
    /// never meet.
    pub fn now_ms(self) -> &'static str {
        match self {
            Dialect::Sqlite => "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
            Dialect::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        }
    }

    /// The column that orders rows by insertion (a tie-breaker after `created_at`).
    pub fn insert_order(self) -> &'static str {
        match self {
            Dialect::Sqlite => "rowid",
            Dialect::Postgres => "seq",
        }
    }

    /// Appended to the sub-select of a claim: rows another transaction has locked are
    /// skipped (PostgreSQL); SQLite has one writer at a time and needs nothing.
    pub fn skip_locked(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::Postgres => " FOR UPDATE SKIP LOCKED",
        }
    }

    /// A floating-point expression: seconds from timestamp column `from` to `to` (RFC 3339
    /// text).
    pub fn seconds_between(self, from: &str, to: &str) -> String {
        match self {
            Dialect::Sqlite => {
                format!("(unixepoch({to}, 'subsec') - unixepoch({from}, 'subsec'))")
            }
            Dialect::Postgres => format!(
                "CAST(EXTRACT(EPOCH FROM (CAST({to} AS timestamptz) - CAST({from} AS timestamptz))) AS DOUBLE PRECISION)"
            ),
        }
    }
}

/// `?N` placeholders rewritten as PostgreSQL's `$N` (see the module docs: the SQL has no `?`
/// in literals).
pub fn to_postgres_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_rewritten_and_nothing_else() {
        assert_eq!(
            to_postgres_placeholders("SELECT a FROM t WHERE b = ?1 AND c IN (?2, ?10) AND d = '?'"),
            "SELECT a FROM t WHERE b = $1 AND c IN ($2, $10) AND d = '?'"
        );
    }

    #[test]
    fn rows_decode_by_kind_and_name_the_column() {
        let row = SqlRow(vec![
            Value::Int(3),
            Value::Null,
            Value::Text("x".into()),
            Value::Real(1.5),
        ]);
        assert_eq!(row.int(0).unwrap(), 3);
        assert_eq!(row.opt_int(1).unwrap(), None);
        assert_eq!(row.text(2).unwrap(), "x");
        assert_eq!(row.opt_real(3).unwrap(), Some(1.5));
        assert_eq!(row.opt_real(0).unwrap(), Some(3.0));
        assert!(row.int(2).unwrap_err().to_string().contains("column 2"));
        assert!(row.text(9).is_err());
        assert_eq!(args![1i64, "a", None::<String>, true].len(), 4);
    }
}
