//! `ctxhost pause`, `resume`, `stop`, `retry` and `recover`: parse, call
//! [`crate::ops::control`] (or recovery), print.
//!
//! Exit codes: 0 done; 1 the task is not in a state that allows it (e.g. pausing a queued
//! task, resuming a running one) — the message says which state it is in and what to do;
//! 2 an invalid or unknown UUID, or an ambiguous UUID prefix ([`crate::task_ref`]).

use super::out::outln;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use clap::Args;

use super::Env;
use crate::db::Status;
use crate::ops::control::{self, Stopped};

/// `ctxhost pause` arguments.
#[derive(Debug, Clone, Args)]
pub struct PauseArgs {
    /// The task's UUID, or a unique prefix of it (at least 4 hex digits); it must be running.
    pub uuid: String,
    /// Why; kept in the task's task_state.json.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Wait until the task has paused (or ended), up to --timeout.
    #[arg(long)]
    pub wait: bool,
    /// Seconds --wait waits at most.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout: u64,
}

/// `ctxhost resume` arguments.
#[derive(Debug, Clone, Args)]
pub struct ResumeArgs {
    /// The task's UUID, or a unique prefix of it (at least 4 hex digits); it must be paused.
    pub uuid: String,
}

/// `ctxhost retry` arguments.
#[derive(Debug, Clone, Args)]
pub struct RetryArgs {
    /// The task's UUID, or a unique prefix of it (at least 4 hex digits); it must be failed,
    /// its files not deleted.
    pub uuid: String,
}

/// `ctxhost stop` arguments.
#[derive(Debug, Clone, Args)]
pub struct StopArgs {
    /// The task's UUID, or a unique prefix of it (at least 4 hex digits); queued, running or
    /// paused.
    pub uuid: String,
    /// For a running task: wait until it has stopped, up to --timeout.
    #[arg(long)]
    pub wait: bool,
    /// Seconds --wait waits at most.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout: u64,
}

/// `ctxhost recover` arguments.
#[derive(Debug, Clone, Args)]
pub struct RecoverArgs {
    /// Print JSON: an array of {uuid, pid, status, crash_count, message, repairs}.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn pause(env: &Env, args: &PauseArgs) -> anyhow::Result<ExitCode> {
    let (db, row) = env.open_task(&args.uuid)?;
    let uuid = row.uuid.as_str();
    let reason = args
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty());
    control::pause(&db, uuid, reason)?;
    if !args.wait {
        outln!("pause requested: task {uuid} pauses at its next safe point");
        return Ok(ExitCode::SUCCESS);
    }
    let timeout = Duration::from_secs(args.timeout);
    let status = control::wait_for(&db, uuid, timeout, |s| s != Status::Running)?;
    if status == Status::Paused {
        outln!("task {uuid} paused");
        Ok(ExitCode::SUCCESS)
    } else {
        bail!("task {uuid} ended as {status} before it could pause")
    }
}

pub(super) fn resume(env: &Env, args: &ResumeArgs) -> anyhow::Result<ExitCode> {
    let (db, row) = env.open_task(&args.uuid)?;
    let remote = crate::remote::open(env.config.context_storage.remote.as_ref())?;
    control::resume_with(&db, &env.layout, remote.as_deref(), &row.uuid)?;
    outln!(
        "task {} queued again; `ctxhost run` continues it from its context",
        row.uuid
    );
    Ok(ExitCode::SUCCESS)
}

pub(super) fn retry(env: &Env, args: &RetryArgs) -> anyhow::Result<ExitCode> {
    let (db, row) = env.open_task(&args.uuid)?;
    let remote = crate::remote::open(env.config.context_storage.remote.as_ref())?;
    control::retry_with(&db, &env.layout, remote.as_deref(), &row.uuid)?;
    if env.layout.find_task_dir(&row.uuid).is_some() || row.started_at.is_some() {
        outln!(
            "task {} queued again; `ctxhost run` continues it from its context",
            row.uuid
        );
    } else {
        outln!(
            "task {} queued again; it failed before it had a context, so `ctxhost run` starts it afresh",
            row.uuid
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn stop(env: &Env, args: &StopArgs) -> anyhow::Result<ExitCode> {
    let (db, row) = env.open_task(&args.uuid)?;
    let uuid = row.uuid.as_str();
    match control::stop(&db, &env.layout, uuid)? {
        Stopped::Requested if args.wait => {
            let timeout = Duration::from_secs(args.timeout);
            let status = control::wait_for(&db, uuid, timeout, Status::is_final)?;
            outln!("task {uuid} {status}");
        }
        Stopped::Requested => {
            outln!("stop requested: task {uuid} stops at its next safe point")
        }
        Stopped::Now { was } => outln!("task {uuid} stopped (it was {was})"),
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn recover(env: &Env, args: &RecoverArgs) -> anyhow::Result<ExitCode> {
    env.require_tree()?;
    let db = env.open_db()?;
    let me = crate::recovery::Recoverer::new(env.config.worker.lease());
    let done = crate::recovery::recover_dead_tasks(
        &db,
        &env.layout,
        &Default::default(),
        env.config.worker.max_crashes,
        &me,
    )?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&done)?);
        return Ok(ExitCode::SUCCESS);
    }
    if done.is_empty() {
        outln!("no running task with a dead process on this host or an expired lease");
    }
    for r in &done {
        outln!("{} → {}: {}", r.uuid, r.status, r.message);
        for repair in &r.repairs {
            outln!("    {repair}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
