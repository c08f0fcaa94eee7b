//! The task store a test runs on. Every test that touches the store runs on SQLite (its plain
//! `#[test]`) and on PostgreSQL: [`postgres_variants!`] adds, per listed test, a test of the same
//! name in a `postgres` module that runs it with [`TestEnv`](super::TestEnv) on a fresh
//! database of the test server (`CTXHOST_TEST_DATABASE_URL`, the URL of a role that may create
//! databases; `scripts/test-postgres.sh start` prints one, `.ci/run` starts it).
//!
//! The PostgreSQL variants are built `#[ignore]`d unless the test server is configured, or CI
//! is on (build.rs sets `cfg(ctxhost_pg_tests)`): without a server they show as ignored,
//! never as passed; in CI a missing server fails them.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ctxhost::db::{PgUrl, StoreSpec};

/// The variable naming the test server.
pub const TEST_URL_ENV: &str = "CTXHOST_TEST_DATABASE_URL";

/// The variable the configs written by [`super::TestEnv`] name in `task_store.url_env`.
pub const URL_ENV: &str = "CTXHOST_DATABASE_URL";

thread_local! {
    static POSTGRES: Cell<bool> = const { Cell::new(false) };
    static SPECS: RefCell<HashMap<PathBuf, StoreSpec>> = RefCell::new(HashMap::new());
}

/// Run `test` with every [`super::TestEnv`] it makes on PostgreSQL.
pub fn on_postgres(test: fn()) {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            POSTGRES.with(|p| p.set(false));
        }
    }
    let _reset = Reset;
    POSTGRES.with(|p| p.set(true));
    test();
}

/// Whether this test runs on PostgreSQL.
pub fn postgres() -> bool {
    POSTGRES.with(Cell::get)
}

/// Record that the tree at `contexts` uses `spec` (for [`spec_for`]).
pub fn register(contexts: &Path, spec: StoreSpec) {
    SPECS.with(|s| s.borrow_mut().insert(contexts.to_path_buf(), spec));
}

/// The store of the tree at `contexts`: what its [`super::TestEnv`] registered, else SQLite.
pub fn spec_for(contexts: &Path) -> StoreSpec {
    SPECS
        .with(|s| s.borrow().get(contexts).cloned())
        .unwrap_or(StoreSpec::Sqlite)
}

/// The URL of the test server (panics saying how to start one when it is not set).
pub fn admin_url() -> String {
    std::env::var(TEST_URL_ENV).unwrap_or_else(|_| {
        panic!(
            "{TEST_URL_ENV} is not set: start a test server with `scripts/test-postgres.sh start` and set \
             {TEST_URL_ENV} to the URL it prints (.ci/run does this)"
        )
    })
}

/// A database made for one test on the test server, dropped (with its connections) with it.
pub struct PgDb {
    admin: String,
    name: String,
    /// Its URL (with the password).
    pub url: String,
}

impl PgDb {
    /// A new empty database.
    pub fn create() -> PgDb {
        let admin = admin_url();
        let name = format!("ctxhost_it_{}", uuid::Uuid::new_v4().simple());
        let mut c = postgres::Client::connect(&admin, postgres::NoTls)
            .unwrap_or_else(|e| panic!("cannot reach the test server of {TEST_URL_ENV}: {e}"));
        c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let url = database_url(&admin, &name);
        PgDb { admin, name, url }
    }

    /// The store spec of this database.
    pub fn spec(&self) -> StoreSpec {
        StoreSpec::Postgres(PgUrl::parse(&self.url, URL_ENV).unwrap())
    }

    /// The password in its URL (tests check it never leaks).
    pub fn password(&self) -> String {
        PgUrl::parse(&self.url, URL_ENV)
            .unwrap()
            .password()
            .unwrap_or_default()
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        if std::env::var_os("CTXHOST_KEEP_TEST_DIRS").is_some() {
            eprintln!("keeping test database {}", self.name);
            return;
        }
        if let Ok(mut c) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
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

/// `postgres_variants!(a, b, c);` in a test module adds a module `postgres` with tests `a`,
/// `b`, `c` that run the module's tests of those names on PostgreSQL ([`on_postgres`]).
macro_rules! postgres_variants {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[test]
                #[cfg_attr(
                    not(ctxhost_pg_tests),
                    ignore = "needs PostgreSQL: set CTXHOST_TEST_DATABASE_URL (scripts/test-postgres.sh start)"
                )]
                fn $name() {
                    $crate::support::store::on_postgres(super::$name)
                }
            )*
        }
    };
}
pub(crate) use postgres_variants;
