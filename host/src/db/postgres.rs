//! The PostgreSQL backend (`task_store: {url_env: VAR}`): one connection of rust-postgres's
//! synchronous client, re-made when it breaks.
//!
//! - **Connection loss.** A statement that fails because the server cannot be reached (refused,
//!   closed, reset, the server shutting down or starting up) is retried on a new connection
//!   with exponential backoff (100 ms doubling to 5 s), for as long as the [`Patience`] allows;
//!   the first failure and every retry are logged (`warn`), and so is the reconnection.
//! - **Exact writes.** Every write runs in its own transaction that first takes its
//!   transaction id (`pg_current_xact_id()`). When the connection breaks while `COMMIT` is on
//!   its way, nobody knows whether the write happened: the backend reconnects and asks the
//!   server (`pg_xact_status`), and retries only a write that did not commit. So a counter
//!   update (`col = col + ?`) is applied exactly once and a conditional status change reports
//!   exactly whether it matched, even across a server restart.
//! - **TLS.** With `sslmode=require` in the URL, rustls (ring, the webpki roots, plus the PEM
//!   certificates of the file named by `PGSSLROOTCERT`) encrypts and verifies the server;
//!   otherwise (`disable`, or the default `prefer`) the connection is plain TCP or a Unix
//!   socket.
//! - **Secrets.** The URL's password is never printed: messages name the database by
//!   [`PgUrl::shown`] (`postgres://user@host:port/dbname`).
//!
//! Sessions set `idle_in_transaction_session_timeout` (60 s), so a transaction left open by a
//! client that vanished mid-write is rolled back by the server instead of holding its locks.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::error::SqlState;
use postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};
use postgres::{Client, NoTls, SimpleQueryMessage, Statement};

use super::sql::{SqlRow, Value, to_postgres_placeholders};
use super::{DbError, Patience};

/// A PostgreSQL URL from the environment: the secret text, and what may be shown of it.
#[derive(Clone)]
pub struct PgUrl {
    config: postgres::Config,
    shown: String,
    source: String,
}

impl std::fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgUrl({})", self.shown)
    }
}

impl PgUrl {
    /// Read and parse the URL held by environment variable `var` (`task_store.url_env`).
    /// Errors name the variable, never its value.
    pub fn from_env(var: &str) -> Result<PgUrl, DbError> {
        match std::env::var(var) {
            Ok(url) if !url.trim().is_empty() => PgUrl::parse(&url, var),
            Ok(_) | Err(std::env::VarError::NotPresent) => Err(DbError::Config(format!(
                "task_store.url_env: the environment variable {var} is not set (it must hold the \
                 PostgreSQL URL, postgres://USER:PASSWORD@HOST:PORT/DBNAME)"
            ))),
            Err(std::env::VarError::NotUnicode(_)) => Err(DbError::Config(format!(
                "task_store.url_env: the environment variable {var} is not valid UTF-8"
            ))),
        }
    }

    /// Parse `url` (a `postgres://` URL or libpq `key=value` pairs); `source` names where it
    /// came from in errors (the environment variable). The error never repeats the URL.
    pub fn parse(url: &str, source: &str) -> Result<PgUrl, DbError> {
        let config: postgres::Config = url.parse().map_err(|e: postgres::Error| {
            // Only the option-level causes are safe to repeat (they name an option, not text
            // of the URL, which may hold the password).
            let cause = e
                .source()
                .map(ToString::to_string)
                .filter(|c| c.starts_with("unknown option") || c.starts_with("invalid value"))
                .map(|c| format!(": {c}"))
                .unwrap_or_default();
            DbError::Config(format!(
                "{source}: not a PostgreSQL URL{cause} (expected postgres://USER:PASSWORD@HOST:PORT/DBNAME)"
            ))
        })?;
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            return Err(DbError::Config(format!(
                "{source}: the PostgreSQL URL names no host (expected postgres://USER:PASSWORD@HOST:PORT/DBNAME)"
            )));
        }
        let shown = shown(&config);
        Ok(PgUrl {
            config,
            shown,
            source: source.to_string(),
        })
    }

    /// `postgres://user@host:port/dbname`: the database without the password.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The environment variable the URL came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The URL's password, if it has one (tests check it never reaches logs or files).
    pub fn password(&self) -> Option<String> {
        self.config
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned())
    }
}

fn shown(config: &postgres::Config) -> String {
    use postgres::config::Host;
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match h {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    let hosts = if hosts.is_empty() {
        config
            .get_hostaddrs()
            .iter()
            .map(|a| format!("{a}:{}", ports.first().copied().unwrap_or(5432)))
            .collect::<Vec<_>>()
            .join(",")
    } else {
        hosts.join(",")
    };
    let user = config
        .get_user()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let db = config.get_dbname().or(config.get_user()).unwrap_or("");
    format!("postgres://{user}{hosts}/{db}")
}

impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(v) => match *ty {
                Type::INT8 => v.to_sql(ty, out),
                Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*v)?.to_sql(ty, out),
                Type::FLOAT8 => (*v as f64).to_sql(ty, out),
                Type::BOOL => (*v != 0).to_sql(ty, out),
                _ => Err(format!("an integer parameter where the statement expects {ty}").into()),
            },
            Value::Real(v) => match *ty {
                Type::FLOAT8 => v.to_sql(ty, out),
                Type::FLOAT4 => (*v as f32).to_sql(ty, out),
                _ => Err(format!("a number parameter where the statement expects {ty}").into()),
            },
            Value::Text(s) => s.as_str().to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

impl<'a> FromSql<'a> for Value {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Value, Box<dyn StdError + Sync + Send>> {
        Ok(match *ty {
            Type::INT2 => Value::Int(i64::from(i16::from_sql(ty, raw)?)),
            Type::INT4 => Value::Int(i64::from(i32::from_sql(ty, raw)?)),
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f64::from(f32::from_sql(ty, raw)?)),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::BOOL => Value::Int(i64::from(bool::from_sql(ty, raw)?)),
            _ if <&str as FromSql>::accepts(ty) => Value::Text(String::from_sql(ty, raw)?),
            _ => return Err(format!("a column of type {ty}, which ctxhost does not read").into()),
        })
    }

    fn from_sql_null(_: &Type) -> Result<Value, Box<dyn StdError + Sync + Send>> {
        Ok(Value::Null)
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// How the connection is encrypted.
#[derive(Clone)]
enum Tls {
    /// `sslmode=disable` or `prefer` (the default): plain.
    Plain,
    /// `sslmode=require`: rustls, verifying the server.
    Rustls(tokio_postgres_rustls::MakeRustlsConnect),
}

fn tls_for(url: &PgUrl) -> Result<Tls, DbError> {
    if url.config.get_ssl_mode() != postgres::config::SslMode::Require {
        return Ok(Tls::Plain);
    }
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(file) = std::env::var_os("PGSSLROOTCERT") {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let shown = std::path::Path::new(&file).display().to_string();
        let bad = |e: String| DbError::Config(format!("PGSSLROOTCERT ({shown}): {e}"));
        for cert in CertificateDer::pem_file_iter(&file).map_err(|e| bad(e.to_string()))? {
            roots
                .add(cert.map_err(|e| bad(e.to_string()))?)
                .map_err(|e| bad(e.to_string()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| DbError::Config(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Tls::Rustls(tokio_postgres_rustls::MakeRustlsConnect::new(
        config,
    )))
}

/// What one attempt of an operation came to.
enum Attempt<T> {
    Done(T),
    /// A transient failure (the server unreachable), described: reconnect and try again.
    Retry(String),
    Fail(DbError),
}

/// The outcome of a write: rows changed, and the rows its `RETURNING` gave.
pub(crate) struct Written {
    pub changed: u64,
    pub rows: Vec<SqlRow>,
}

/// A connection to a PostgreSQL task store.
pub(crate) struct PgStore {
    url: PgUrl,
    tls: Tls,
    client: Option<Client>,
    statements: HashMap<String, Statement>,
    patience: Patience,
}

/// First wait after a failure; doubled per attempt up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl PgStore {
    /// Connect (waiting for the server as `patience` allows).
    pub fn connect(url: &PgUrl, patience: Patience) -> Result<PgStore, DbError> {
        let mut store = PgStore {
            url: url.clone(),
            tls: tls_for(url)?,
            client: None,
            statements: HashMap::new(),
            patience,
        };
        store.run(|s| match s.client() {
            Ok(_) => Attempt::Done(()),
            Err(e) => s.classify(e),
        })?;
        Ok(store)
    }

    pub fn location(&self) -> &str {
        self.url.shown()
    }

    pub fn set_patience(&mut self, patience: Patience) {
        self.patience = patience;
    }

    fn client(&mut self) -> Result<&mut Client, postgres::Error> {
        let client = match self.client.take() {
            Some(c) if !c.is_closed() => c,
            _ => {
                self.statements.clear();
                self.connect_now()?
            }
        };
        Ok(self.client.insert(client))
    }

    fn connect_now(&self) -> Result<Client, postgres::Error> {
        let mut config = self.url.config.clone();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(Duration::from_secs(30));
        }
        if config.get_application_name().is_none() {
            config.application_name("ctxhost");
        }
        let mut client = match &self.tls {
            Tls::Plain => config.connect(NoTls)?,
            Tls::Rustls(tls) => config.connect(tls.clone())?,
        };
        client.batch_execute(
            "SET idle_in_transaction_session_timeout = '60s'; SET lock_timeout = '30s'",
        )?;
        Ok(client)
    }

    fn reset(&mut self) {
        self.client = None;
        self.statements.clear();
    }

    fn statement(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let text = to_postgres_placeholders(sql);
        let st = self.client()?.prepare(&text)?;
        self.statements.insert(sql.to_string(), st.clone());
        Ok(st)
    }

    /// A transient error: reset the connection and ask for a retry; anything else fails.
    fn classify<T>(&mut self, e: postgres::Error) -> Attempt<T> {
        if is_transient(&e) {
            self.reset();
            Attempt::Retry(describe(&e))
        } else {
            Attempt::Fail(self.error(&e))
        }
    }

    fn error(&self, e: &postgres::Error) -> DbError {
        DbError::Postgres {
            location: self.url.shown().to_string(),
            message: describe(e),
            code: e.code().map(|c| c.code().to_string()),
        }
    }

    /// Run `op` until it is done or fails, retrying transient failures with backoff while
    /// the patience lasts.
    fn run<T>(&mut self, mut op: impl FnMut(&mut PgStore) -> Attempt<T>) -> Result<T, DbError> {
        let start = Instant::now();
        let mut attempt: u32 = 0;
        loop {
            match op(self) {
                Attempt::Done(v) => {
                    if attempt > 0 {
                        tracing::warn!(
                            db = %self.url.shown(),
                            secs = start.elapsed().as_secs_f64(),
                            "database reachable again"
                        );
                    }
                    return Ok(v);
                }
                Attempt::Fail(e) => return Err(e),
                Attempt::Retry(e) => {
                    let delay = backoff(attempt);
                    let waited = start.elapsed();
                    if let Patience::Bounded(max) = self.patience
                        && waited + delay > max
                    {
                        return Err(DbError::Unavailable {
                            location: self.url.shown().to_string(),
                            waited_secs: waited.as_secs(),
                            last: e,
                        });
                    }
                    attempt += 1;
                    super::count_retry();
                    tracing::warn!(
                        db = %self.url.shown(),
                        attempt,
                        retry_in_ms = delay.as_millis() as u64,
                        "database unreachable: {e}; retrying"
                    );
                    std::thread::sleep(delay);
                }
            }
        }
    }

    /// A read (or any statement that is safe to repeat): retried on a new connection after
    /// a transient failure.
    pub fn query(&mut self, sql: &str, args: &[Value]) -> Result<Vec<SqlRow>, DbError> {
        self.run(|s| {
            let st = match s.statement(sql) {
                Ok(st) => st,
                Err(e) => return s.classify(e),
            };
            let params = params(args);
            let rows = match s.client() {
                Ok(c) => c.query(&st, &params),
                Err(e) => Err(e),
            };
            match rows.and_then(|rows| rows.iter().map(to_row).collect()) {
                Ok(rows) => Attempt::Done(rows),
                Err(e) => s.classify(e),
            }
        })
    }

    /// A write of `sql` once per argument list of `batch`, in one transaction, applied
    /// exactly once (see the module docs).
    pub fn write(&mut self, sql: &str, batch: &[Vec<Value>]) -> Result<Written, DbError> {
        self.run(|s| s.write_once(sql, batch))
    }

    fn write_once(&mut self, sql: &str, batch: &[Vec<Value>]) -> Attempt<Written> {
        let st = match self.statement(sql) {
            Ok(st) => st,
            Err(e) => return self.classify(e),
        };
        let client = match self.client() {
            Ok(c) => c,
            Err(e) => return self.classify(e),
        };
        let xid = match client.simple_query("BEGIN; SELECT pg_current_xact_id()::text") {
            Ok(msgs) => msgs.iter().find_map(|m| match m {
                SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            }),
            Err(e) => return self.classify(e),
        };
        let Some(xid) = xid else {
            return Attempt::Fail(DbError::Decode(
                "pg_current_xact_id() returned no row".to_string(),
            ));
        };
        let mut out = Written {
            changed: 0,
            rows: Vec::new(),
        };
        for args in batch {
            let params = params(args);
            let done = if st.columns().is_empty() {
                client.execute(&st, &params).map(|n| (n, Vec::new()))
            } else {
                client
                    .query(&st, &params)
                    .and_then(|rows| rows.iter().map(to_row).collect::<Result<Vec<_>, _>>())
                    .map(|rows| (rows.len() as u64, rows))
            };
            match done {
                Ok((changed, rows)) => {
                    out.changed += changed;
                    out.rows.extend(rows);
                }
                Err(e) => {
                    if !is_transient(&e) {
                        let _ = client.batch_execute("ROLLBACK");
                    }
                    return self.classify(e);
                }
            }
        }
        match client.batch_execute("COMMIT") {
            Ok(()) => Attempt::Done(out),
            Err(e) if is_transient(&e) => {
                // Did the server commit before the connection broke? Ask it.
                self.reset();
                match self.committed(&xid) {
                    Ok(true) => Attempt::Done(out),
                    Ok(false) => Attempt::Retry(describe(&e)),
                    Err(err) => Attempt::Fail(err),
                }
            }
            Err(e) => self.classify(e),
        }
    }

    /// Whether transaction `xid` committed, asked on a new connection (waiting while the
    /// server still has it in progress).
    fn committed(&mut self, xid: &str) -> Result<bool, DbError> {
        self.run(|s| {
            let status = match s.client() {
                Ok(c) => c
                    .query_one("SELECT pg_xact_status(CAST($1 AS xid8))", &[&xid])
                    .map(|r| r.get::<_, Option<String>>(0)),
                Err(e) => Err(e),
            };
            match status {
                Ok(Some(s)) if s == "committed" => Attempt::Done(true),
                Ok(Some(s)) if s == "aborted" => Attempt::Done(false),
                Ok(Some(_)) => {
                    // Still "in progress": the old session has not ended yet.
                    Attempt::Retry(format!("transaction {xid} is still in progress"))
                }
                Ok(None) => Attempt::Fail(DbError::Decode(format!(
                    "cannot tell whether transaction {xid} committed (too old)"
                ))),
                Err(e) => s.classify(e),
            }
        })
    }

    /// Create or upgrade the schema: in one transaction holding the transaction-level
    /// advisory lock `lock`, read the schema version (`ctxhost_meta.schema_version`, 0 when
    /// the table does not exist), ask `plan` for the SQL that brings it up to date (`None`:
    /// nothing to do; an error is returned as is), run it, commit. A quick read first skips
    /// the lock when the schema is current.
    pub fn upgrade(
        &mut self,
        lock: i64,
        plan: impl Fn(i64) -> Result<Option<String>, DbError>,
    ) -> Result<(), DbError> {
        // ctxhost_meta may not exist yet: ask for it first (a query naming a missing table
        // fails when it is planned, whatever its CASE says).
        fn version(tx: &mut postgres::Transaction<'_>) -> Result<i64, postgres::Error> {
            let exists: bool = tx
                .query_one("SELECT to_regclass('ctxhost_meta') IS NOT NULL", &[])?
                .get(0);
            if !exists {
                return Ok(0);
            }
            let v: Option<String> = tx
                .query_opt(
                    "SELECT value FROM ctxhost_meta WHERE key = 'schema_version'",
                    &[],
                )?
                .map(|r| r.get(0));
            Ok(v.and_then(|v| v.parse().ok()).unwrap_or(0))
        }
        // A quick look first, outside a transaction and without preparing anything: most
        // opens find the schema current.
        let current = self.run(|s| {
            let client = match s.client() {
                Ok(c) => c,
                Err(e) => return s.classify(e),
            };
            let first = |msgs: Vec<SimpleQueryMessage>| {
                msgs.into_iter().find_map(|m| match m {
                    SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                    _ => None,
                })
            };
            let quick = (|| -> Result<i64, postgres::Error> {
                let exists =
                    first(client.simple_query("SELECT to_regclass('ctxhost_meta') IS NOT NULL")?);
                if exists.as_deref() != Some("t") {
                    return Ok(0);
                }
                let v =
                    first(client.simple_query(
                        "SELECT value FROM ctxhost_meta WHERE key = 'schema_version'",
                    )?);
                Ok(v.and_then(|v| v.parse().ok()).unwrap_or(0))
            })();
            match quick {
                Ok(v) => Attempt::Done(v),
                Err(e) => s.classify(e),
            }
        })?;
        if plan(current)?.is_none() {
            return Ok(());
        }
        let changed = self.run(|s| {
            let client = match s.client() {
                Ok(c) => c,
                Err(e) => return s.classify(e),
            };
            let result = (|| -> Result<Result<bool, DbError>, postgres::Error> {
                let mut tx = client.transaction()?;
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock])?;
                match plan(version(&mut tx)?) {
                    Ok(Some(sql)) => {
                        tx.batch_execute(&sql)?;
                        tx.commit()?;
                        Ok(Ok(true))
                    }
                    Ok(None) => {
                        tx.commit()?;
                        Ok(Ok(false))
                    }
                    Err(e) => Ok(Err(e)),
                }
            })();
            match result {
                Ok(Ok(changed)) => Attempt::Done(changed),
                Ok(Err(e)) => Attempt::Fail(e),
                Err(e) => s.classify(e),
            }
        })?;
        if changed {
            // Statements prepared before the upgrade may describe old columns.
            self.statements.clear();
        }
        Ok(())
    }
}

fn params(args: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    args.iter().map(|v| v as &(dyn ToSql + Sync)).collect()
}

fn to_row(row: &postgres::Row) -> Result<SqlRow, postgres::Error> {
    (0..row.len())
        .map(|i| row.try_get::<_, Value>(i))
        .collect::<Result<Vec<_>, _>>()
        .map(SqlRow)
}

fn backoff(attempt: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1u32 << attempt.min(10))
        .min(MAX_BACKOFF)
}

/// The server could not be reached or went away (connection refused, closed or reset,
/// shutting down, starting up, too many connections), or the statement lost a serialization
/// race: worth trying again.
fn is_transient(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        return [
            SqlState::CONNECTION_EXCEPTION,
            SqlState::CONNECTION_DOES_NOT_EXIST,
            SqlState::CONNECTION_FAILURE,
            SqlState::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
            SqlState::IDLE_SESSION_TIMEOUT,
        ]
        .contains(code);
    }
    // No server error: I/O (connect, read, write) or a timeout.
    let mut source = e.source();
    while let Some(s) = source {
        if s.is::<std::io::Error>() {
            return true;
        }
        source = s.source();
    }
    let text = e.to_string();
    text.starts_with("error connecting to server")
        || text.starts_with("error communicating with the server")
        || text.starts_with("timeout waiting for server")
}

/// A one-line description of `e`: the server's message (and code) for a database error,
/// else the client's error and its cause.
fn describe(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {} ({})", db.severity(), db.message(), db.code().code());
    }
    match e.source() {
        Some(s) => format!("{e}: {s}"),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shown_url_has_no_password() {
        let url = PgUrl::parse("postgres://alice:s3cret@db.example:6543/tasks", "X").unwrap();
        assert_eq!(url.shown(), "postgres://alice@db.example:6543/tasks");
        assert_eq!(url.password().as_deref(), Some("s3cret"));
        assert!(!format!("{url:?}").contains("s3cret"));
        let url = PgUrl::parse("host=/run/pg user=bob password=pw dbname=x", "X").unwrap();
        assert_eq!(url.shown(), "postgres://bob@/run/pg:5432/x");
    }

    #[test]
    fn a_bad_url_is_named_by_its_variable_without_its_text() {
        for bad in [
            "postgres://alice:s3cret@db.example:6543/tasks?sslmode=maybe",
            "postgres://alice:s3cret@db.example:notaport/tasks",
            "postgres://alice:s3cret@db.example/tasks?colour=red",
        ] {
            let e = PgUrl::parse(bad, "CTXHOST_DATABASE_URL")
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("CTXHOST_DATABASE_URL: not a PostgreSQL URL"),
                "{e}"
            );
            assert!(!e.contains("s3cret"), "{e}");
        }
        let e = PgUrl::parse("postgres://h/d?colour=red", "V")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown option `colour`"), "{e}");
    }

    #[test]
    fn backoff_doubles_up_to_five_seconds() {
        assert_eq!(backoff(0), Duration::from_millis(100));
        assert_eq!(backoff(3), Duration::from_millis(800));
        assert_eq!(backoff(30), MAX_BACKOFF);
    }
}
