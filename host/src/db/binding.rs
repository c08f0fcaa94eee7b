//! Which task store owns a `contexts/` tree, recorded in the tree as `contexts/store.json`
//! and in the store as `ctxhost_meta` rows (`store_id`, `contexts_id`).
//!
//! A tree and its store belong together: the rows say where each task's directory is, and
//! the directories hold what the rows count. So every [`Db::open`] checks that the tree's
//! `store.json` names the store being opened, and that the store is bound to this tree:
//! - a tree of another store (a SQLite tree opened with a PostgreSQL config, a tree migrated to
//!   PostgreSQL opened with the SQLite default, another PostgreSQL database) is refused, with
//!   what to do;
//! - a PostgreSQL store already bound to another tree is refused for a tree without
//!   `store.json`: workers of one store must share one `contexts/` (a shared filesystem), and
//!   a worker on a host where the tree is not mounted would otherwise make an empty one;
//! - a tree that belongs to no store yet (new, or written by ctxhost before store.json) is
//!   bound to the store being opened. A SQLite tree with tasks in `tasks.db` is not bound to
//!   PostgreSQL that way: `ctxhost migrate --to postgres` moves its tasks.
//!
//! `store.json`: `{"store": "sqlite"|"postgres", "store_id", "contexts_id", "location",
//! "bound_at"}`; `location` is for humans (the SQLite file name or
//! `postgres://user@host:port/dbname`, never a password).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{DB_FILE, Db, DbError, StoreSpec, args, now_rfc3339};

/// File name of the binding in the contexts/ directory.
pub const STORE_FILE: &str = "store.json";

/// The content of `contexts/store.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreBinding {
    /// `sqlite` or `postgres`.
    pub store: String,
    /// The store's id (`ctxhost_meta.store_id`, made when its schema was).
    pub store_id: String,
    /// The tree's id (also `ctxhost_meta.contexts_id` of the store).
    pub contexts_id: String,
    /// Where the store is, for humans: `tasks.db` or `postgres://user@host:port/dbname`.
    pub location: String,
    /// When the tree was bound to the store (RFC 3339 UTC).
    pub bound_at: String,
}

/// `contexts/store.json`.
pub fn store_file(contexts: &Path) -> PathBuf {
    contexts.join(STORE_FILE)
}

/// The binding of the tree at `contexts`, if it has one.
pub fn read(contexts: &Path) -> Result<Option<StoreBinding>, DbError> {
    let path = store_file(contexts);
    let bad = |message: String| DbError::Binding {
        path: path.display().to_string(),
        message,
    };
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| bad(format!("not a store binding ({e})"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(bad(format!("cannot read: {e}"))),
    }
}

/// Write `binding` as the tree's `store.json` (atomically).
pub fn write(contexts: &Path, binding: &StoreBinding) -> Result<(), DbError> {
    let path = store_file(contexts);
    let mut text = serde_json::to_string_pretty(binding).map_err(|e| DbError::Binding {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    text.push('\n');
    crate::layout::atomic_write(&path, text.as_bytes()).map_err(|e| DbError::Binding {
        path: path.display().to_string(),
        message: format!("{e:#}"),
    })
}

/// The store's id and the tree it is bound to, from `ctxhost_meta` (the id is made on the
/// first call).
pub fn store_ids(db: &Db) -> Result<(String, Option<String>), DbError> {
    let read = || -> Result<(Option<String>, Option<String>), DbError> {
        let mut store_id = None;
        let mut contexts_id = None;
        for r in db.query(
            "SELECT key, value FROM ctxhost_meta WHERE key IN ('store_id', 'contexts_id')",
            &[],
        )? {
            match r.text(0)?.as_str() {
                "store_id" => store_id = Some(r.text(1)?),
                _ => contexts_id = Some(r.text(1)?),
            }
        }
        Ok((store_id, contexts_id))
    };
    let (store_id, contexts_id) = read()?;
    if let Some(id) = store_id {
        return Ok((id, contexts_id));
    }
    db.execute(
        "INSERT INTO ctxhost_meta (key, value) VALUES ('store_id', ?1) ON CONFLICT (key) DO NOTHING",
        args![uuid::Uuid::new_v4().hyphenated().to_string()],
    )?;
    let (store_id, contexts_id) = read()?;
    let id = store_id.ok_or_else(|| DbError::Decode("ctxhost_meta has no store_id".into()))?;
    Ok((id, contexts_id))
}

/// Record in the store that it is bound to tree `contexts_id` (`None`: to no tree).
pub fn set_contexts_id(db: &Db, contexts_id: Option<&str>) -> Result<(), DbError> {
    match contexts_id {
        Some(id) => db.execute(
            "INSERT INTO ctxhost_meta (key, value) VALUES ('contexts_id', ?1) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            args![id],
        )?,
        None => db.execute(
            "DELETE FROM ctxhost_meta WHERE key = 'contexts_id'",
            args![],
        )?,
    };
    Ok(())
}

/// The binding of `db` to a tree with id `contexts_id`, as store.json records it.
pub fn binding_for(db: &Db, spec: &StoreSpec, store_id: &str, contexts_id: &str) -> StoreBinding {
    StoreBinding {
        store: spec.kind().to_string(),
        store_id: store_id.to_string(),
        contexts_id: contexts_id.to_string(),
        location: match spec {
            StoreSpec::Sqlite => DB_FILE.to_string(),
            StoreSpec::Postgres(_) => db.location().to_string(),
        },
        bound_at: now_rfc3339(),
    }
}

/// Whether this process's trees are working copies of task directories kept in a bucket
/// (`context_storage.remote`, [`set_working_copies`]).
static WORKING_COPIES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Say whether the contexts trees this process opens are working copies of task directories
/// kept in a bucket (`context_storage.remote` is set): then a PostgreSQL store already bound to
/// a tree accepts a new tree on another host as a copy of that tree (the bucket is what they
/// share), instead of refusing it. Set once by the command from its config.
pub fn set_working_copies(on: bool) {
    WORKING_COPIES.store(on, std::sync::atomic::Ordering::SeqCst);
}

/// Whether this process treats its tree as a working copy of a bucket ([`set_working_copies`]).
pub(crate) fn working_copies() -> bool {
    WORKING_COPIES.load(std::sync::atomic::Ordering::SeqCst)
}

/// Check that the tree at `contexts` belongs to `db` (of `spec`), binding a tree that belongs
/// to no store yet (module docs). Binding is safe against other processes opening the same
/// tree at the same moment: store.json is created only if absent (a hard link of a complete
/// temporary file), then the store records the tree's id only if it records none.
pub(crate) fn check(db: &Db, spec: &StoreSpec, contexts: &Path) -> Result<(), DbError> {
    let (store_id, bound_to) = store_ids(db)?;
    let shown = contexts.display();
    if let Some(b) = read(contexts)? {
        return verify(db, spec, contexts, &b, &store_id, bound_to);
    }
    if let StoreSpec::Postgres(_) = spec
        && sqlite_tasks(contexts)? > 0
    {
        return Err(DbError::NotOwner(format!(
            "{shown} holds a SQLite task database ({DB_FILE}) with tasks: `ctxhost migrate --to postgres` \
             moves them to {} before workers use it",
            db.location()
        )));
    }
    let contexts_id = match (&bound_to, spec) {
        // A SQLite store lives in its tree: its id is this tree's (store.json was deleted).
        (Some(id), StoreSpec::Sqlite) => id.clone(),
        // Task directories kept in a bucket: every host's tree is a working copy of the one
        // tree the store is bound to.
        (Some(id), StoreSpec::Postgres(_)) if working_copies() => id.clone(),
        _ => uuid::Uuid::new_v4().hyphenated().to_string(),
    };
    let mine = binding_for(db, spec, &store_id, &contexts_id);
    if !create_new(contexts, &mine)? {
        // Another process bound the tree first.
        let b = read(contexts)?.ok_or_else(|| DbError::Binding {
            path: store_file(contexts).display().to_string(),
            message: "created by another process, then gone".into(),
        })?;
        let (_, bound_to) = store_ids(db)?;
        return verify(db, spec, contexts, &b, &store_id, bound_to);
    }
    if claim_tree(db, &contexts_id)? {
        return Ok(());
    }
    // The store is another tree's: take back the store.json just written.
    let _ = std::fs::remove_file(store_file(contexts));
    Err(DbError::NotOwner(format!(
        "{} is already used with another contexts tree (id {}) and {shown} had no {STORE_FILE}: \
         workers of one task store must share one contexts/ directory (mount the shared tree \
         here), or use another database for a separate tree",
        db.location(),
        store_ids(db)?.1.unwrap_or_default()
    )))
}

/// Record in the store that it is bound to tree `contexts_id`, unless it already records a
/// tree; returns whether it is bound to that tree now.
fn claim_tree(db: &Db, contexts_id: &str) -> Result<bool, DbError> {
    db.execute(
        "INSERT INTO ctxhost_meta (key, value) VALUES ('contexts_id', ?1) \
         ON CONFLICT (key) DO NOTHING",
        args![contexts_id],
    )?;
    Ok(store_ids(db)?.1.as_deref() == Some(contexts_id))
}

/// The tree's store.json `b` names `db`, and `db` is bound to that tree (or to none yet: then
/// it is bound now).
fn verify(
    db: &Db,
    spec: &StoreSpec,
    contexts: &Path,
    b: &StoreBinding,
    store_id: &str,
    bound_to: Option<String>,
) -> Result<(), DbError> {
    let shown = contexts.display();
    if b.store_id != store_id {
        let what = match (b.store.as_str(), spec) {
            ("sqlite", StoreSpec::Postgres(url)) => format!(
                "its tasks are in its SQLite tasks.db; `ctxhost migrate --to postgres` moves them to the \
                 database of {} (or point --contexts at the tree of that database)",
                url.source()
            ),
            ("postgres", StoreSpec::Sqlite) => format!(
                "its tasks are in PostgreSQL ({}): set `task_store: {{url_env: VARIABLE}}` in config.yaml \
                 (or move them back with `ctxhost migrate --to sqlite`)",
                b.location
            ),
            _ => "check the task_store setting and the database URL".to_string(),
        };
        return Err(DbError::NotOwner(format!(
            "{shown} belongs to the {} task store {} (see {shown}/{STORE_FILE}), not to {}: {what}",
            b.store,
            b.location,
            db.location()
        )));
    }
    let bound = match bound_to {
        Some(id) => id == b.contexts_id,
        None => claim_tree(db, &b.contexts_id)?,
    };
    if bound {
        return Ok(());
    }
    Err(DbError::NotOwner(format!(
        "{} is bound to another contexts tree (id {}) than {shown} (id {}): workers of one \
         task store must share one contexts/ directory",
        db.location(),
        store_ids(db)?.1.unwrap_or_default(),
        b.contexts_id
    )))
}

/// Create the tree's store.json with `binding` if it has none (a complete temporary file,
/// fsynced, hard-linked as store.json: the link fails if another process made one first).
/// Returns whether this call created it.
fn create_new(contexts: &Path, binding: &StoreBinding) -> Result<bool, DbError> {
    use std::io::Write;
    let path = store_file(contexts);
    let bad = |message: String| DbError::Binding {
        path: path.display().to_string(),
        message,
    };
    let mut text = serde_json::to_string_pretty(binding).map_err(|e| bad(e.to_string()))?;
    text.push('\n');
    let tmp = contexts.join(crate::task_dir::temp_name(STORE_FILE));
    let written = (|| -> std::io::Result<bool> {
        // Owner-only, like every file ctxhost writes in contexts/.
        let mut f = std::os::unix::fs::OpenOptionsExt::mode(
            std::fs::OpenOptions::new().write(true).create_new(true),
            crate::task_dir::FILE_MODE,
        )
        .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        match std::fs::hard_link(&tmp, &path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    let created = written.map_err(|e| bad(format!("cannot create: {e}")))?;
    if created {
        crate::layout::sync_dir(contexts).map_err(|e| bad(format!("{e:#}")))?;
    }
    Ok(created)
}

/// Tasks in the tree's SQLite `tasks.db` (0 when there is none), read without creating it.
fn sqlite_tasks(contexts: &Path) -> Result<i64, DbError> {
    let path = contexts.join(DB_FILE);
    if !path.is_file() {
        return Ok(0);
    }
    let err = |source| DbError::Sqlite {
        location: path.display().to_string(),
        source,
    };
    let conn = rusqlite::Connection::open_with_flags(
        &path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(err)?;
    let has_table: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tasks')",
            [],
            |r| r.get(0),
        )
        .map_err(err)?;
    if !has_table {
        return Ok(0);
    }
    conn.query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get(0))
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{TestStore, new_task, store_tests};

    store_tests! {
        fn the_first_open_binds_the_tree_and_later_opens_agree(store: &TestStore) {
            let db = store.open();
            let b = read(store.contexts()).unwrap().unwrap();
            assert_eq!(b.store, store.spec.kind());
            let (store_id, bound) = store_ids(&db).unwrap();
            assert_eq!(b.store_id, store_id);
            assert_eq!(bound.as_deref(), Some(b.contexts_id.as_str()));
            drop(db);
            store.open();
            assert_eq!(read(store.contexts()).unwrap().unwrap(), b);
            // The password never reaches the file.
            if let StoreSpec::Postgres(url) = &store.spec {
                let text = std::fs::read_to_string(store_file(store.contexts())).unwrap();
                assert!(!text.contains(&url.password().unwrap()), "{text}");
                assert!(text.contains(url.shown()), "{text}");
            }
        }

        fn a_tree_of_another_store_is_refused(store: &TestStore) {
            store.open();
            let mut b = read(store.contexts()).unwrap().unwrap();
            b.store_id = "someone-else".into();
            b.location = "postgres://x@elsewhere:5432/other".into();
            write(store.contexts(), &b).unwrap();
            let e = Db::open(&store.spec, store.contexts()).err().unwrap().to_string();
            assert!(e.contains("belongs to the") && e.contains("elsewhere"), "{e}");
            assert!(e.contains("store.json"), "{e}");
        }
    }

    #[test]
    fn a_sqlite_tree_with_tasks_is_not_taken_by_postgres() {
        let sqlite = TestStore::sqlite();
        sqlite.open().insert_queued(&new_task("t")).unwrap();
        std::fs::remove_file(store_file(sqlite.contexts())).unwrap();
        assert_eq!(sqlite_tasks(sqlite.contexts()).unwrap(), 1);
        // Re-binding SQLite to its own tree is fine (store.json deleted by hand).
        let db = sqlite.open();
        assert_eq!(db.get("t").unwrap().unwrap().uuid, "t");
        assert_eq!(read(sqlite.contexts()).unwrap().unwrap().store, "sqlite");
    }
}
