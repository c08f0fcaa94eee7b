//! [`UsageMeter`]: adds a task's LLM calls, tool calls, tokens and compressions to its row
//! ([`UsageDelta`], added in SQL). The agent loop and the compressor's `llm` import each hold
//! one (each with its own database connection).

use crate::db::{Db, DbError};
use crate::layout::Layout;

pub use crate::db::UsageDelta;

/// The counters of one task's row.
pub struct UsageMeter {
    db: Db,
    uuid: String,
}

impl UsageMeter {
    /// A meter for task `uuid` of `layout`, on a connection of its own.
    pub fn open(layout: &Layout, uuid: &str) -> Result<UsageMeter, DbError> {
        Ok(UsageMeter {
            db: Db::open(layout.root())?,
            uuid: uuid.to_string(),
        })
    }

    /// Add `delta` to the task's counters.
    pub fn add(&self, delta: UsageDelta) -> Result<(), DbError> {
        self.db.add_usage(&self.uuid, &delta)
    }
}
