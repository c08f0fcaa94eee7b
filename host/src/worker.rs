//! `ctxhost run`: the worker. Starts one child process (`ctxhost task-exec UUID`) per queued
//! task, up to a parallel limit, and reaps them.
//!
//! The child claims its task atomically (a child that loses the claim exits 0 at once), so
//! several workers may share one queue. A child that dies (non-zero exit or a signal) never
//! harms the worker or the other children: if its task is still `running` under its pid, the
//! worker recovers it ([`crate::recovery`]: directory repaired, task queued again, or failed
//! with an error naming the exit status or signal after `worker.max_crashes` deaths). A task
//! whose child keeps exiting before it claims the task is failed after [`MAX_START_FAILURES`]
//! attempts.
//!
//! At start and every [`RECOVERY_INTERVAL`] the worker also recovers `running` tasks of this
//! host whose process is gone and is not one of its children (a worker that died with its
//! children, a machine that rebooted).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::config::Config;
use crate::db::{Db, Status};
use crate::layout::Layout;
use crate::lifecycle::{self, Transition};

/// The checks `ctxhost run` makes before starting any task process, so a configuration
/// mistake is reported once instead of failing every task: the API-key variable named by
/// `llm.api_key_env` is set (a key too short to be redacted is warned about,
/// [`crate::llm::redact::short_key_warning`]), and every configured plugin loads as its kind
/// ([`crate::plugins::PluginSet::load`], which also compiles it into the cache once, instead of
/// in every child). Errors name the config key.
pub fn preflight(config: &Config, layout: &Layout) -> anyhow::Result<()> {
    if let (Some(key), Some(var)) = (config.api_key()?, config.api_key_env())
        && let Some(warning) = crate::llm::redact::short_key_warning(var, &key)
    {
        tracing::warn!("{warning}");
    }
    crate::plugins::PluginSet::load(config, layout)?;
    Ok(())
}

/// Times a task's child may exit without having claimed it before the task is failed.
pub const MAX_START_FAILURES: u32 = 3;

/// How often the worker looks for `running` tasks whose process is gone.
pub const RECOVERY_INTERVAL: Duration = Duration::from_secs(2);

/// How the worker runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Exit when the queue is empty and no child is alive.
    pub once: bool,
    /// Children at once (≥ 1).
    pub max_parallel: u32,
    /// Pause between looks at the queue when nothing changed.
    pub poll_interval: Duration,
    /// Config file passed to the children (`--config`); `None` when the default config.yaml
    /// is missing (the children then use the defaults too).
    pub config_path: Option<PathBuf>,
    /// contexts/ directory passed to the children (`--contexts`).
    pub contexts: PathBuf,
    /// `-v` count passed to the children.
    pub verbose: u8,
    /// `worker.max_crashes`: deaths of a task's process after which it is failed.
    pub max_crashes: u32,
    /// Environment variables the children do not inherit (the task sources' tokens).
    pub env_remove: Vec<String>,
}

/// What a worker that returned did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerSummary {
    /// Task processes reaped.
    pub finished: u64,
    /// Tasks run by this worker's children that ended `failed` (including tasks failed after
    /// their process crashed or could not start).
    pub failed: u64,
}

/// A child the worker started and has not reaped yet.
struct Running {
    started: Instant,
}

/// Sent by a child's waiter thread when the child exits.
struct Exited {
    uuid: String,
    pid: u32,
    status: std::io::Result<ExitStatus>,
}

/// Run the worker until interrupted (or, with `once`, until the queue is empty and all children
/// have finished), returning what was run. Errors only for problems of the worker itself (database, spawning).
///
/// Each child gets a waiter thread that blocks in `wait()` and reports the exit on a channel,
/// so an exit is handled at once; the queue is looked at after every exit and otherwise every
/// `poll_interval`.
pub fn run(opts: &WorkerOptions) -> anyhow::Result<WorkerSummary> {
    let layout = Layout::new(&opts.contexts);
    layout.ensure()?;
    let db = Db::open(layout.root())?;
    let exe = std::env::current_exe()
        .context("cannot find the ctxhost executable to start task processes")?;
    let (tx, rx) = mpsc::channel::<Exited>();
    let mut children: HashMap<String, Running> = HashMap::new();
    let mut start_failures: HashMap<String, u32> = HashMap::new();
    let max = opts.max_parallel.max(1) as usize;
    tracing::info!(max_parallel = max, contexts = %layout.root().display(), "worker started");
    let mut summary = WorkerSummary::default();
    let mut last_recovery: Option<Instant> = None;

    loop {
        // Tasks left `running` by processes that are gone (not our children: those are
        // settled when they exit).
        if last_recovery.is_none_or(|t| t.elapsed() >= RECOVERY_INTERVAL) {
            let ours: std::collections::HashSet<String> = children.keys().cloned().collect();
            match crate::recovery::recover_dead_tasks(&db, &layout, &ours, opts.max_crashes) {
                Ok(done) => {
                    for r in done {
                        tracing::info!(uuid = %r.uuid, status = %r.status, "recovered: {}", r.message);
                    }
                }
                Err(e) => tracing::error!("recovery of dead tasks failed: {e:#}"),
            }
            last_recovery = Some(Instant::now());
        }

        // Start children for queued tasks not already ours.
        if children.len() < max {
            let queued = db.list_queued((max * 2 + children.len()) as u32)?;
            for uuid in queued {
                if children.len() >= max {
                    break;
                }
                if children.contains_key(&uuid) {
                    continue;
                }
                let mut child = spawn(&exe, opts, &uuid)
                    .with_context(|| format!("cannot start a task process for {uuid}"))?;
                let pid = child.id();
                tracing::info!(%uuid, pid, "task process started");
                children.insert(
                    uuid.clone(),
                    Running {
                        started: Instant::now(),
                    },
                );
                let tx = tx.clone();
                std::thread::Builder::new()
                    .name(format!("wait-{pid}"))
                    .spawn(move || {
                        let status = child.wait();
                        let _ = tx.send(Exited { uuid, pid, status });
                    })
                    .context("cannot start a thread to wait for a task process")?;
            }
        }

        if opts.once && children.is_empty() && db.list_queued(1)?.is_empty() {
            tracing::info!(
                tasks = summary.finished,
                failed = summary.failed,
                "queue empty, all task processes finished"
            );
            return Ok(summary);
        }

        // Wait for an exit (or the next look at the queue), then reap every exit pending.
        let mut next = rx.recv_timeout(opts.poll_interval).ok();
        while let Some(exited) = next {
            summary.finished += 1;
            let started = children
                .remove(&exited.uuid)
                .map(|r| r.started.elapsed())
                .unwrap_or_default();
            match exited.status {
                Ok(status) => {
                    let failed = settle(
                        &db,
                        &layout,
                        &exited.uuid,
                        exited.pid,
                        status,
                        started,
                        &mut start_failures,
                        opts.max_crashes,
                    )?;
                    if failed {
                        summary.failed += 1;
                    }
                }
                Err(e) => {
                    tracing::error!(uuid = %exited.uuid, pid = exited.pid, "cannot wait for task process: {e}")
                }
            }
            next = rx.try_recv().ok();
        }
    }
}

fn spawn(exe: &std::path::Path, opts: &WorkerOptions, uuid: &str) -> std::io::Result<Child> {
    let mut cmd = Command::new(exe);
    if let Some(config) = &opts.config_path {
        cmd.arg("--config").arg(config);
    }
    cmd.arg("--contexts").arg(&opts.contexts);
    if opts.verbose > 0 {
        cmd.arg(format!("-{}", "v".repeat(opts.verbose as usize)));
    }
    cmd.arg("task-exec").arg(uuid);
    for var in &opts.env_remove {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    cmd.spawn()
}

/// Describe how a child ended: `exit status 3`, `signal 9 (SIGKILL)`.
pub fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    if let Some(sig) = status.signal() {
        let name = match sig {
            libc::SIGKILL => " (SIGKILL)",
            libc::SIGSEGV => " (SIGSEGV)",
            libc::SIGABRT => " (SIGABRT)",
            libc::SIGTERM => " (SIGTERM)",
            libc::SIGINT => " (SIGINT)",
            libc::SIGBUS => " (SIGBUS)",
            libc::SIGILL => " (SIGILL)",
            libc::SIGFPE => " (SIGFPE)",
            _ => "",
        };
        let core = if status.core_dumped() {
            ", core dumped"
        } else {
            ""
        };
        return format!("signal {sig}{name}{core}");
    }
    format!("{status}")
}

/// After a child exits: a task left `running` under the dead pid is recovered (repaired and
/// queued again, or failed after `max_crashes`); exits before a claim are counted. Returns
/// whether the task was this child's and ended `failed`.
#[allow(clippy::too_many_arguments)]
fn settle(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    pid: u32,
    status: ExitStatus,
    elapsed: Duration,
    start_failures: &mut HashMap<String, u32>,
    max_crashes: u32,
) -> anyhow::Result<bool> {
    let how = describe_exit(status);
    let row = db.get(uuid)?;
    let ours = row.as_ref().and_then(|r| r.process_id) == Some(pid as i64);
    let failed = match row.as_ref().map(|r| r.status) {
        Some(Status::Running) if row.as_ref().and_then(|r| r.process_id) == Some(pid as i64) => {
            let cause = format!("task process {pid} died ({how}) while running the task");
            tracing::error!(%uuid, pid, "{cause}");
            if let Err(e) = crate::recovery::recover_task(
                db,
                layout,
                uuid,
                Some(pid as i64),
                &cause,
                max_crashes,
            ) {
                tracing::error!(%uuid, "recovery failed: {e:#}");
            }
            db.get(uuid)?.is_some_and(|r| r.status == Status::Failed)
        }
        // Claimed by this child, then recovered by someone else (another worker, `ctxhost
        // recover`) before we reaped it: not a start failure.
        Some(Status::Queued) if row.as_ref().and_then(|r| r.process_id) == Some(pid as i64) => {
            tracing::info!(%uuid, pid, "task process exited ({how}); its task was already recovered");
            false
        }
        Some(Status::Queued) => {
            // The child exited without claiming: count it, so a task whose process cannot
            // start is not retried forever.
            let n = start_failures.entry(uuid.to_string()).or_insert(0);
            *n += 1;
            tracing::warn!(%uuid, pid, attempt = *n, "task process exited ({how}) before claiming its task");
            if *n >= MAX_START_FAILURES {
                let msg = format!(
                    "task process exited {n} times before starting the task (last: {how}); see the worker log"
                );
                // A resumed task's directory goes from paused/ to completed/ with it.
                let t = Transition::FailStart { message: &msg };
                let failed = lifecycle::apply(db, layout, uuid, &t)?.is_some();
                if failed {
                    tracing::error!(%uuid, "{msg}");
                }
                failed
            } else {
                false
            }
        }
        Some(s) if ours => {
            tracing::info!(%uuid, pid, status = %s, secs = elapsed.as_secs_f64(), "task process finished ({how})");
            s == Status::Failed
        }
        Some(s) => {
            // The task was claimed by another process (another worker) before this child
            // could: this child did not run it.
            let other = row.as_ref().and_then(|r| r.process_id);
            tracing::info!(
                %uuid,
                pid,
                "task process exited ({how}) without running the task: it lost the claim to \
                 another process ({}; task now {s})",
                other.map_or_else(|| "pid unknown".to_string(), |p| format!("pid {p}"))
            );
            false
        }
        None => {
            tracing::warn!(%uuid, pid, "task process exited ({how}) and its task is not in the database");
            false
        }
    };
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn db_with_task(dir: &std::path::Path, uuid: &str) -> Db {
        let db = Db::open(dir).unwrap();
        db.insert_queued(&crate::db::NewTask {
            uuid: uuid.to_string(),
            key: crate::db::TaskKey::default(),
            prompt: "p".into(),
            user: None,
            llm_provider: "openai".into(),
            model: "m".into(),
            context_length: 4096,
            no_inherit: false,
        })
        .unwrap();
        db
    }

    fn settle_exit0(db: &Db, layout: &Layout, uuid: &str, pid: u32) -> bool {
        let mut starts = HashMap::new();
        settle(
            db,
            layout,
            uuid,
            pid,
            ExitStatus::from_raw(0),
            Duration::ZERO,
            &mut starts,
            3,
        )
        .unwrap()
    }

    #[test]
    fn a_failed_task_counts_only_for_the_child_that_ran_it() {
        use crate::lifecycle::{Claim, row};
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        layout.ensure().unwrap();
        let db = db_with_task(dir.path(), "t");
        assert!(row::claim(&db, "t", &Claim::test(100)).unwrap());
        row::finish(&db, "t", 100, Status::Failed, Some("boom")).unwrap();
        // The child that lost the claim (pid 200) did not run the failed task.
        assert!(!settle_exit0(&db, &layout, "t", 200));
        // The child that ran it did.
        assert!(settle_exit0(&db, &layout, "t", 100));
        db.insert_queued(&crate::db::NewTask {
            uuid: "ok".into(),
            key: crate::db::TaskKey::default(),
            prompt: "p".into(),
            user: None,
            llm_provider: "openai".into(),
            model: "m".into(),
            context_length: 4096,
            no_inherit: false,
        })
        .unwrap();
        assert!(row::claim(&db, "ok", &Claim::test(101)).unwrap());
        row::finish(&db, "ok", 101, Status::Completed, None).unwrap();
        assert!(!settle_exit0(&db, &layout, "ok", 101));
    }

    #[test]
    fn exits_are_described_by_code_or_signal() {
        assert_eq!(describe_exit(ExitStatus::from_raw(3 << 8)), "exit status 3");
        assert_eq!(
            describe_exit(ExitStatus::from_raw(libc::SIGKILL)),
            "signal 9 (SIGKILL)"
        );
        assert_eq!(
            describe_exit(ExitStatus::from_raw(libc::SIGSEGV | 0x80)),
            "signal 11 (SIGSEGV), core dumped"
        );
    }
}
