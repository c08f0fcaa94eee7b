//! `ctxhost pause`, `resume`, `stop` and `recover`: changing a task's lifecycle from outside.
//!
//! Exit codes: 0 done; 1 the task is not in a state that allows it (e.g. pausing a queued
//! task, resuming a running one) — the message says which state it is in and what to do;
//! 2 an invalid or unknown UUID.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;

use super::{Env, usage};
use crate::db::{Db, Status, TaskRow};
use crate::layout::parse_uuid;
use crate::lifecycle::{self, Transition};

/// `ctxhost pause` arguments.
#[derive(Debug, Clone, Args)]
pub struct PauseArgs {
    /// The task's UUID (it must be running).
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
    /// The task's UUID (it must be paused).
    pub uuid: String,
}

/// `ctxhost stop` arguments.
#[derive(Debug, Clone, Args)]
pub struct StopArgs {
    /// The task's UUID (queued, running or paused).
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

/// The database and the task's row; errors (exit 2) for a bad or unknown UUID.
fn open_task(env: &Env, given: &str) -> anyhow::Result<(Db, TaskRow)> {
    let uuid = parse_uuid(given).map_err(|e| usage(e.to_string()))?;
    env.require_tree()?;
    let db = Db::open(env.layout.root())?;
    let row = db.get(&uuid)?.ok_or_else(|| {
        usage(format!(
            "no task with UUID {uuid} in {}",
            db.path().display()
        ))
    })?;
    Ok((db, row))
}

/// Poll the row every 50 ms until `done(status)` or `timeout`; returns the last status.
fn wait_for(
    db: &Db,
    uuid: &str,
    timeout: Duration,
    done: impl Fn(Status) -> bool,
) -> anyhow::Result<Status> {
    let end = Instant::now() + timeout;
    loop {
        let status = db
            .get(uuid)?
            .map(|r| r.status)
            .ok_or_else(|| anyhow::anyhow!("task {uuid} disappeared from the database"))?;
        if done(status) {
            return Ok(status);
        }
        if Instant::now() >= end {
            bail!(
                "task {uuid} is still {status} after {} s; its process honours the request at its next safe point (between steps)",
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(super) fn pause(env: &Env, args: &PauseArgs) -> anyhow::Result<ExitCode> {
    let (db, row) = open_task(env, &args.uuid)?;
    let uuid = row.uuid.as_str();
    let reason = args
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty());
    if !db.request_pause(uuid, reason)? {
        let now = db.get(uuid)?.map(|r| r.status).unwrap_or(row.status);
        match now {
            Status::Queued => bail!(
                "task {uuid} is queued, not running: only a running task can be paused (`ctxhost stop {uuid}` takes it out of the queue)"
            ),
            Status::Paused => {
                bail!("task {uuid} is already paused (`ctxhost resume {uuid}` queues it again)")
            }
            s => bail!("task {uuid} is {s}: only a running task can be paused"),
        }
    }
    if !args.wait {
        println!("pause requested: task {uuid} pauses at its next safe point");
        return Ok(ExitCode::SUCCESS);
    }
    let status = wait_for(&db, uuid, Duration::from_secs(args.timeout), |s| {
        s != Status::Running
    })?;
    if status == Status::Paused {
        println!("task {uuid} paused");
        Ok(ExitCode::SUCCESS)
    } else {
        bail!("task {uuid} ended as {status} before it could pause")
    }
}

pub(super) fn resume(env: &Env, args: &ResumeArgs) -> anyhow::Result<ExitCode> {
    let (db, row) = open_task(env, &args.uuid)?;
    let uuid = row.uuid.clone();
    let uuid = uuid.as_str();
    if lifecycle::apply(&db, &env.layout, uuid, &Transition::Resume)?.is_some() {
        println!("task {uuid} queued again; `ctxhost run` continues it from its context");
        return Ok(ExitCode::SUCCESS);
    }
    let now = db.get(uuid)?.unwrap_or(row);
    match now.status {
        Status::Running if now.pause_requested => bail!(
            "task {uuid} is running (a pause was requested and not honoured yet): only a paused task can be resumed"
        ),
        Status::Queued => bail!("task {uuid} is already queued"),
        s => bail!("task {uuid} is {s}: only a paused task can be resumed"),
    }
}

pub(super) fn stop(env: &Env, args: &StopArgs) -> anyhow::Result<ExitCode> {
    let (db, row) = open_task(env, &args.uuid)?;
    let uuid = row.uuid.clone();
    // A claim or a resume may change the status between two statements: try each way a few times.
    for _ in 0..4 {
        if db.request_stop(&uuid)? {
            if !args.wait {
                println!("stop requested: task {uuid} stops at its next safe point");
                return Ok(ExitCode::SUCCESS);
            }
            let status = wait_for(
                &db,
                &uuid,
                Duration::from_secs(args.timeout),
                Status::is_final,
            )?;
            println!("task {uuid} {status}");
            return Ok(ExitCode::SUCCESS);
        }
        // No process has the task: its directory (if any) goes to completed/ now.
        if let Some(was) = lifecycle::apply(&db, &env.layout, &uuid, &Transition::StopWaiting)? {
            println!("task {uuid} stopped (it was {was})");
            return Ok(ExitCode::SUCCESS);
        }
        let status = db.get(&uuid)?.map(|r| r.status).unwrap_or(row.status);
        if status.is_final() {
            bail!("task {uuid} is already {status}");
        }
    }
    bail!("task {uuid} kept changing state; try again")
}

pub(super) fn recover(env: &Env, args: &RecoverArgs) -> anyhow::Result<ExitCode> {
    env.require_tree()?;
    let db = Db::open(env.layout.root())?;
    let done = crate::recovery::recover_dead_tasks(
        &db,
        &env.layout,
        &Default::default(),
        env.config.worker.max_crashes,
    )?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&done)?);
        return Ok(ExitCode::SUCCESS);
    }
    if done.is_empty() {
        println!("no running task with a dead process on this host");
    }
    for r in &done {
        println!("{} → {}: {}", r.uuid, r.status, r.message);
        for repair in &r.repairs {
            println!("    {repair}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
