//! `migrate`: move a contexts tree's tasks from its SQLite `tasks.db` to a PostgreSQL database
//! (`--to postgres`), or back (`--to sqlite`).
//!
//! 1. The source is the store that owns the tree (`contexts/store.json`); no task may be
//!    running (stop the workers first: a running task's process writes to its store).
//! 2. The target must hold no task and no publication record, and (PostgreSQL) must not be
//!    bound to another tree.
//! 3. Every row is copied (tasks in insertion order, `source_item` included, then the task
//!    sources' `publications`); then both stores are compared by their [`Tally`] (tasks and
//!    counter sums per status, items held, `--no-inherit` tasks, publication records per
//!    comment state), and the source's tally must not have changed meanwhile. A mismatch or an error deletes what was copied and fails.
//! 4. The tree is bound to the target (store.json; the target's `ctxhost_meta`). The source
//!    is kept as it was, as a backup, but released: a SQLite `tasks.db` is renamed
//!    `tasks.db.migrated-TIMESTAMP`; a PostgreSQL database keeps its rows but is no longer
//!    bound to the tree.
//!
//! Then point the config at the new store (`task_store`).

use anyhow::{Context, bail};
use serde::Serialize;

use crate::db::binding::{self, STORE_FILE};
use crate::db::copy::Tally;
use crate::db::{DB_FILE, Db, PgUrl, StoreSpec};
use crate::error::usage;
use crate::layout::Layout;

/// Which way [`migrate`] moves the tasks.
#[derive(Debug, Clone)]
pub enum Direction {
    /// From the tree's SQLite `tasks.db` into the PostgreSQL database at this URL.
    ToPostgres(PgUrl),
    /// From the PostgreSQL database at this URL into the tree's SQLite `tasks.db`.
    ToSqlite(PgUrl),
}

/// What [`migrate`] did.
#[derive(Debug, Clone, Serialize)]
pub struct Migrated {
    /// The source store (file or `postgres://user@host:port/dbname`).
    pub from: String,
    /// The target store.
    pub to: String,
    /// Rows copied.
    pub copied: u64,
    /// The tally both stores agree on.
    pub tally: Tally,
    /// What became of the source: where the old `tasks.db` went, or that the PostgreSQL
    /// database keeps its rows.
    pub source_kept: String,
}

/// Move the tasks of the tree of `layout` in `direction` (module docs).
pub fn migrate(layout: &Layout, direction: &Direction) -> anyhow::Result<Migrated> {
    if !layout.exists() {
        return Err(usage(format!(
            "no contexts directory at {}",
            layout.root().display()
        )));
    }
    let contexts = layout.root();
    let (source_spec, target_spec) = match direction {
        Direction::ToPostgres(url) => (StoreSpec::Sqlite, StoreSpec::Postgres(url.clone())),
        Direction::ToSqlite(url) => (StoreSpec::Postgres(url.clone()), StoreSpec::Sqlite),
    };
    if let Some(b) = binding::read(contexts)?
        && b.store != source_spec.kind()
    {
        return Err(usage(format!(
            "the tasks of {} are already in the {} store {} ({STORE_FILE})",
            contexts.display(),
            b.store,
            b.location
        )));
    }
    if matches!(direction, Direction::ToPostgres(_)) && !layout.db_path().is_file() {
        return Err(usage(format!(
            "{} has no {DB_FILE} to migrate",
            contexts.display()
        )));
    }
    // Opening the source checks that it owns the tree (and binds an unbound SQLite tree).
    let source = Db::open(&source_spec, contexts).map_err(|e| usage(e.to_string()))?;
    let running = source.count_running()?;
    if running > 0 {
        return Err(usage(format!(
            "{running} task(s) are running in {}: stop every worker (or let the tasks end) before migrating",
            source.location()
        )));
    }
    let (_, tree_id) = binding::store_ids(&source)?;
    let tree_id = binding::read(contexts)?
        .map(|b| b.contexts_id)
        .or(tree_id)
        .context("the tree has no id: open it once with its store")?;

    let target = Db::open_unbound(&target_spec, contexts)?;
    let (target_id, bound_to) = binding::store_ids(&target)?;
    if let Some(other) = bound_to.filter(|b| *b != tree_id) {
        return Err(usage(format!(
            "{} is bound to another contexts tree (id {other}): migrate into a database of its own",
            target.location()
        )));
    }
    let before = source.tally()?;
    let existing = target.tally()?;
    if existing.tasks > 0 || !existing.publications.is_empty() {
        return Err(usage(format!(
            "{} already holds {} task(s) and {} publication record(s): migrate into an empty store",
            target.location(),
            existing.tasks,
            existing.publications.iter().map(|(_, v)| v[0]).sum::<i64>()
        )));
    }

    let copied = match source.copy_rows_to(&target) {
        Ok(n) => n,
        Err(e) => {
            let _ = target.delete_all_rows();
            return Err(e).context(format!("copying the tasks to {}", target.location()));
        }
    };
    let copy = target.tally()?;
    let after = source.tally()?;
    if copy != before || after != before || copied != u64::try_from(before.tasks).unwrap_or(0) {
        let _ = target.delete_all_rows();
        bail!(
            "the copy does not match (source {} tasks before, {} after; {} copied, target {}): \
             nothing was changed; stop every worker and try again",
            before.tasks,
            after.tasks,
            copied,
            copy.tasks
        );
    }

    // Release the source, then bind the tree to the target.
    let source_kept = match direction {
        Direction::ToPostgres(_) => match release_sqlite(source, layout) {
            Ok(kept) => format!("the SQLite database was renamed {kept}"),
            Err(e) => {
                let _ = target.delete_all_rows();
                return Err(e);
            }
        },
        Direction::ToSqlite(_) => {
            binding::set_contexts_id(&source, None)?;
            format!(
                "{} keeps its {} row(s), no longer bound to this tree",
                source.location(),
                before.tasks
            )
        }
    };
    binding::set_contexts_id(&target, Some(&tree_id))?;
    binding::write(
        contexts,
        &binding::binding_for(&target, &target_spec, &target_id, &tree_id),
    )?;
    Ok(Migrated {
        from: source_location(&source_spec, layout),
        to: source_location(&target_spec, layout),
        copied,
        tally: copy,
        source_kept,
    })
}

fn source_location(spec: &StoreSpec, layout: &Layout) -> String {
    match spec {
        StoreSpec::Sqlite => layout.db_path().display().to_string(),
        StoreSpec::Postgres(url) => url.shown().to_string(),
    }
}

/// Checkpoint the SQLite database into its main file, close it, and rename it
/// `tasks.db.migrated-TIMESTAMP`. Fails, changing nothing, when another process still has it
/// open (its write-ahead log outlives this connection). Returns the new file name.
fn release_sqlite(db: Db, layout: &Layout) -> anyhow::Result<String> {
    if let Some(s) = db.sqlite() {
        s.retry(|c| c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)"))?;
    }
    drop(db);
    let wal = layout.root().join(format!("{DB_FILE}-wal"));
    if wal.exists() {
        bail!(
            "another process still has {} open (a worker?): stop every worker and migrate again",
            layout.db_path().display()
        );
    }
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    let name = format!("{DB_FILE}.migrated-{stamp}");
    let from = layout.db_path();
    let to = layout.root().join(&name);
    std::fs::rename(&from, &to)
        .with_context(|| format!("cannot rename {} to {}", from.display(), to.display()))?;
    let _ = std::fs::remove_file(layout.root().join(format!("{DB_FILE}-shm")));
    crate::layout::sync_dir(layout.root())?;
    Ok(name)
}
