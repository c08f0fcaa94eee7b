//! The operations behind the CLI commands (cargo's `ops`): each takes parsed, validated input
//! and returns a typed result; the command files in [`crate::cli`] parse arguments, call one,
//! and print. Errors a user caused are [`crate::error::UsageError`]s (exit 2).
//!
//! - [`init`]: create the contexts tree and a commented config.yaml;
//! - [`submit`]: queue a task;
//! - [`control`]: pause, resume, stop a task, wait for it, recover dead ones;
//! - [`show`]: one task's row, directory, result and last messages;
//! - [`plugin_new`]: a new plugin project (`ctxhost plugin new`);
//! - [`poll`]: the GitHub / GitLab task sources, once or continuously.
//!
//! Operations that live with their concept are called directly: [`crate::worker::run`]
//! (`run`), [`crate::cleanup::cleanup`], [`crate::fsck::fsck`], [`crate::plugin_check::run`],
//! [`crate::task_process::run`] (`task-exec`), and the database reads of `tasks` / `stats`.

pub mod control;
pub mod init;
pub mod plugin_new;
pub mod poll;
pub mod show;
pub mod submit;
