//! The operations behind the CLI commands (cargo's `ops`): each takes parsed, validated input
//! and returns a typed result; the command files in [`crate::cli`] parse arguments, call one,
//! and print. Errors a user caused are [`crate::error::UsageError`]s (exit 2).
//!
//! - [`init`]: create the contexts tree and a commented config.yaml;
//! - [`submit`]: queue a task;
//! - [`control`]: pause, resume, stop a task, wait for it, recover dead ones;
//! - [`show`]: one task's row, directory, result and last messages;
//! - [`follow`]: a task's files read as they grow, as events (`ask`, `show --follow`), and the
//!   reply being streamed (`reply.stream`) as text (the dashboard);
//! - [`reasoning`]: a model's reasoning items as shown to a person;
//! - [`migrate`]: move a tree's tasks from one task store to the other.
//! - [`plugin_new`]: a new plugin project (`ctxhost plugin new`);
//! - [`poll`]: the GitHub / GitLab task sources, once or continuously.
//!
//! Operations that live with their concept are called directly: [`crate::worker::run`]
//! (`run`), [`crate::cleanup::cleanup`], [`crate::fsck::fsck`], [`crate::plugin_check::run`],
//! [`crate::task_process::run`] (`task-exec`), and the database reads of `tasks` / `stats`.

pub mod compactions;
pub mod control;
pub mod follow;
pub mod init;
pub mod migrate;
pub mod plugin_new;
pub mod poll;
pub mod reasoning;
pub mod reply_stream;
pub mod show;
pub mod submit;
mod tail;

use crate::config::Config;
use crate::db::{Db, DbError};
use crate::error::usage;
use crate::layout::Layout;

/// Open the task store of `config` for the tree of `layout` (which must exist). A store
/// configured wrongly (the URL variable) or that does not own the tree
/// ([`crate::db::binding`]) is a usage error (exit 2), with what to do.
pub fn open_store(config: &Config, layout: &Layout) -> anyhow::Result<Db> {
    let spec = config.store_spec().map_err(|e| usage(e.to_string()))?;
    // Every command that opens the store from a config (`init` too, which loads no `Env`)
    // treats its tree as a working copy when the task directories are kept in a bucket.
    crate::db::binding::set_working_copies(config.context_storage.remote.is_some());
    Db::open(&spec, layout.root()).map_err(|e| match e {
        DbError::Config(_) | DbError::NotOwner(_) => usage(e.to_string()),
        e => e.into(),
    })
}

/// `n` with a comma every three digits: `7,412`.
pub fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}
