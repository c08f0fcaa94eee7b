//! The dashboard's connections to the task store (SQLite or PostgreSQL, whichever the config
//! names): a few kept open and reused by the request handlers, so a page costs no new
//! connection (for PostgreSQL: no new login), no schema check and no ownership check.

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::db::{Db, DbError, Patience, StoreSpec};

/// Idle connections kept at most (the server runs at most 8 blocking threads).
const MAX_IDLE: usize = 8;

/// How long a page waits for an unreachable PostgreSQL server before it shows an error.
const PATIENCE: Duration = Duration::from_secs(5);

/// Connections to one task store for one contexts/ tree.
pub struct StorePool {
    spec: StoreSpec,
    contexts: PathBuf,
    idle: Mutex<Vec<Db>>,
}

impl StorePool {
    /// A pool for the store of `spec` that owns the tree at `contexts`; connects lazily.
    pub fn new(spec: StoreSpec, contexts: PathBuf) -> Arc<StorePool> {
        Arc::new(StorePool {
            spec,
            contexts,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// A new connection of its own (not from the pool), checked like every command's
    /// ([`Db::open`]): for the change watcher's thread.
    pub fn open(&self) -> Result<Db, DbError> {
        let db = Db::open(&self.spec, &self.contexts)?;
        db.set_patience(Patience::Bounded(PATIENCE));
        Ok(db)
    }

    /// An idle connection, or a new one; it goes back to the pool when dropped.
    pub fn get(self: &Arc<Self>) -> Result<Pooled, DbError> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let db = match idle {
            Some(db) => db,
            None => self.open()?,
        };
        Ok(Pooled {
            db: Some(db),
            pool: Arc::clone(self),
        })
    }
}

/// A connection lent by a [`StorePool`].
pub struct Pooled {
    db: Option<Db>,
    pool: Arc<StorePool>,
}

impl Deref for Pooled {
    type Target = Db;
    fn deref(&self) -> &Db {
        // Only taken in drop.
        self.db.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(db) = self.db.take() {
            let mut idle = self
                .pool
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if idle.len() < MAX_IDLE {
                idle.push(db);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{new_task, store_tests};

    store_tests! {
        fn connections_are_reused(store: &TestStore) {
            let pool = StorePool::new(store.spec.clone(), store.contexts().to_path_buf());
            {
                let a = pool.get().unwrap();
                let b = pool.get().unwrap();
                a.insert_queued(&new_task("t")).unwrap();
                assert!(b.get("t").unwrap().is_some(), "both see one store");
            }
            assert_eq!(pool.idle.lock().unwrap().len(), 2);
            let c = pool.get().unwrap();
            assert_eq!(pool.idle.lock().unwrap().len(), 1, "taken from the pool");
            assert!(c.get("t").unwrap().is_some());
        }
    }
}
