//! A task's workspace as a git checkout: what it was made from ([`record::WorkspaceRecord`],
//! `workspace.json` in the task directory) and the `git` commands that make, read and
//! publish it ([`git::Git`]), with a forge token given to one command only; managed worktrees of
//! per-repository mirrors and the change as `changes.patch` ([`checkout`]).
//!
//! Issue 40: a task from a source with `workspace: true` works in its own worktree of a
//! per-repository mirror; its change travels with the task as `changes.patch` against the
//! record's base commit, and ends as a pull (merge) request.

pub mod checkout;
pub mod git;
pub mod record;
