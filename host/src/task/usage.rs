//! [`UsageMeter`]: adds a task's LLM calls, tool calls, tokens and compressions to its row
//! ([`UsageDelta`], added in SQL). The agent loop and the compressor's `llm` import each hold
//! one (each with its own database connection).

use crate::config::Config;
use crate::db::{Db, DbError, Patience};
use crate::layout::Layout;

pub use crate::db::UsageDelta;

/// The counters of one task's row.
pub struct UsageMeter {
    db: Db,
    uuid: String,
}

impl UsageMeter {
    /// A meter for task `uuid` of `layout`, on a connection of its own to the store of
    /// `config`. An update waits for an unreachable database (the task's lease bounds how
    /// long) and is applied exactly once.
    pub fn open(config: &Config, layout: &Layout, uuid: &str) -> Result<UsageMeter, DbError> {
        let db = Db::open(&config.store_spec()?, layout.root())?;
        db.set_patience(Patience::Unbounded);
        Ok(UsageMeter {
            db,
            uuid: uuid.to_string(),
        })
    }

    /// Add `delta` to the task's counters.
    pub fn add(&self, delta: UsageDelta) -> Result<(), DbError> {
        self.db.add_usage(&self.uuid, &delta)
    }
}
