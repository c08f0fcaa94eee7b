//! [`UsageMeter`]: adds a task's LLM calls, tool calls, tokens and compressions to its row
//! ([`UsageDelta`], added in SQL, exactly once). The agent loop and the compressor's `llm`
//! import each hold one, on the task process's one connection ([`SharedDb`]).

use crate::db::{DbError, SharedDb};

pub use crate::db::UsageDelta;

/// The counters of one task's row.
#[derive(Clone)]
pub struct UsageMeter {
    db: SharedDb,
    uuid: String,
}

impl UsageMeter {
    /// A meter for task `uuid` on `db` (a task process's connection: its updates wait for
    /// an unreachable database as its other statements do).
    pub fn new(db: SharedDb, uuid: &str) -> UsageMeter {
        UsageMeter {
            db,
            uuid: uuid.to_string(),
        }
    }

    /// Add `delta` to the task's counters.
    pub fn add(&self, delta: UsageDelta) -> Result<(), DbError> {
        self.db.with(|db| db.add_usage(&self.uuid, &delta))
    }
}
