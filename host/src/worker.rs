//! `ctxhost run`: the worker. While tasks are queued it starts child processes (`ctxhost
//! task-exec --next --worker-id ID`), up to a parallel limit; each claims the oldest queued
//! task itself (one statement, safe across hosts: [`crate::lifecycle::claim_next`]), tells
//! the worker which one on its stdout, holds the task's lease while it runs it
//! ([`crate::lease`]), and ends it. Workers on several hosts share one queue this way.
//!
//! A child that dies (non-zero exit or a signal) never harms the worker or the other
//! children: if its task is still `running` under it, the worker recovers it at once
//! ([`crate::recovery`]: directory repaired, task queued again, or failed with an error naming
//! the exit status or signal after `worker.max_crashes` deaths). A child that stopped itself
//! because it lost the database (the fencing exit, [`EXIT_LEASE_LOST`]) did not crash: its task
//! is queued again without counting one. Children that keep exiting
//! before they claim a task (they cannot start: a broken installation) are reported; after
//! [`MAX_START_FAILURES`] in a row the worker waits before starting more (with `--once`, it
//! gives up with an error).
//!
//! At start and every [`RECOVERY_INTERVAL`] the worker also recovers `running` tasks whose
//! process is gone (recorded on this host — same host name and identity, [`crate::host`] — not
//! one of its children: a worker that died with its children) or whose lease expired
//! (anywhere: another host died or lost the database; this host rebooted, which gives it a new
//! identity).
//!
//! The worker's database statements wait for an unreachable database with backoff, logging
//! each retry ([`crate::db::Patience::Unbounded`]); its children keep running meanwhile
//! (each stops itself if it cannot renew its lease in time).

use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::config::Config;
use crate::db::lease::Holder;
use crate::db::{Db, Patience, Status, StoreSpec, args};
use crate::layout::{Layout, hostname};
use crate::lease::{EXIT_LEASE_LOST, WorkerId};
use crate::recovery::{Lost, Recoverer};

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

/// Children in a row that may exit without claiming a task before the worker backs off.
pub const MAX_START_FAILURES: u32 = 3;

/// How often the worker looks for `running` tasks whose process is gone or lease expired.
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
    /// `worker.lease_secs`: the lease a recovery holds a task with.
    pub lease: Duration,
    /// The task store.
    pub store: StoreSpec,
    /// Environment variables the children do not inherit (the task sources' tokens).
    pub env_remove: Vec<String>,
    /// Arguments added to every child's `task-exec` (the `llm` flags of `ctxhost run`).
    pub child_args: Vec<String>,
    /// Bytes written to every child's stdin, which is then closed: the forge tokens of the
    /// sources with `workspace: true` (the child gets `--forge-tokens-on-stdin`). `None`: the
    /// child's stdin is empty.
    pub child_stdin: Option<Secret>,
    /// Ctrl-C / SIGTERM seen by the command ([`crate::interrupt`]): at the first the worker
    /// starts no more children, asks its running tasks to pause and returns when every child
    /// has exited; at the second it asks them to stop. `None`: signals are not caught.
    pub interrupts: Option<crate::interrupt::Interrupts>,
    /// `llm.pricing`, for `ctxhost_llm_cost_usd_total` ([`crate::metrics`]).
    pub pricing: crate::config::pricing::Pricing,
}

/// Bytes that must not be shown (`Debug` prints their length only).
#[derive(Clone)]
pub struct Secret(pub Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(<{} bytes redacted>)", self.0.len())
    }
}

/// What a worker that returned did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerSummary {
    /// Task processes reaped that had claimed a task.
    pub finished: u64,
    /// Tasks run by this worker's children that ended `failed` (including tasks failed after
    /// their process crashed).
    pub failed: u64,
    /// Tasks this worker paused because it was interrupted (Ctrl-C / SIGTERM), and that are
    /// paused now.
    pub paused: Vec<String>,
}

/// A child the worker started and has not reaped yet.
struct Running {
    started: Instant,
    /// The task it claimed, once it said.
    uuid: Option<String>,
    /// The task's counters at the claim, once it said ([`crate::metrics::run`]).
    run_start: Option<crate::metrics::run::RunStart>,
    /// The run's span, the task process's parent ([`crate::telemetry`]).
    span: crate::telemetry::ChildSpan,
    /// What the child said when it ended ([`crate::metrics::run::RunEnd`]).
    run_end: Option<crate::metrics::run::RunEnd>,
}

/// What a child's waiter thread reports.
enum Event {
    /// The child claimed `uuid` (the line it printed).
    Claimed { pid: u32, uuid: String },
    /// The child said where its run began (the line after the claim).
    Started {
        pid: u32,
        start: crate::metrics::run::RunStart,
    },
    /// The child said what only it knows (its last line, before it exits).
    Ended {
        pid: u32,
        end: crate::metrics::run::RunEnd,
    },
    /// The child exited.
    Exited {
        pid: u32,
        status: std::io::Result<ExitStatus>,
    },
}

/// Run the worker until interrupted (or, with `once`, until the queue is empty and all children
/// have finished), returning what was run. Errors only for problems of the worker itself
/// (the store refused, spawning failed, children that cannot start with `--once`).
///
/// Each child gets a waiter thread that reads the task it claimed from its stdout, blocks in
/// `wait()`, and reports both on a channel, so an exit is handled at once; the queue is looked
/// at after every exit and otherwise every `poll_interval`.
pub fn run(opts: &WorkerOptions) -> anyhow::Result<WorkerSummary> {
    // Traces (off unless OTEL_EXPORTER_OTLP_ENDPOINT is set): one span per task process.
    let _telemetry = crate::telemetry::init();
    let layout = Layout::new(&opts.contexts);
    layout.ensure()?;
    let db = Db::open(&opts.store, layout.root())?;
    db.set_patience(Patience::Unbounded);
    let me = WorkerId::new(&hostname());
    let recoverer = Recoverer::for_worker(&me, opts.lease);
    let exe = std::env::current_exe()
        .context("cannot find the ctxhost executable to start task processes")?;
    let (tx, rx) = mpsc::channel::<Event>();
    let mut children: HashMap<u32, Running> = HashMap::new();
    let max = opts.max_parallel.max(1) as usize;
    tracing::info!(
        worker = %me,
        max_parallel = max,
        contexts = %layout.root().display(),
        store = %db.location(),
        "worker started"
    );
    let mut summary = WorkerSummary::default();
    let mut last_recovery: Option<Instant> = None;
    let mut start_failures: u32 = 0;
    let mut paused_until: Option<Instant> = None;
    // The interrupt request carried out so far, and the tasks it was made for.
    let mut interrupted = crate::interrupt::Request::None;
    let mut asked: HashSet<String> = HashSet::new();

    loop {
        let wanted =
            crate::interrupt::Request::of(opts.interrupts.as_ref().map_or(0, |i| i.count()));
        if wanted > interrupted {
            interrupted = wanted;
            asked.clear();
            let n = children.len();
            match wanted {
                crate::interrupt::Request::Pause => eprintln!(
                    "pausing {n} running task(s) at their next safe point, starting no more; Ctrl-C again to stop them"
                ),
                _ => eprintln!("stopping {n} running task(s)…"),
            }
        }
        if interrupted != crate::interrupt::Request::None {
            // Children that claimed a task since are asked too.
            for uuid in children.values().filter_map(|c| c.uuid.clone()) {
                if asked.contains(&uuid) {
                    continue;
                }
                let done = match interrupted {
                    crate::interrupt::Request::Pause => {
                        crate::ops::control::pause(&db, &uuid, Some("worker interrupted"))
                    }
                    _ => crate::ops::control::stop(&db, &layout, &uuid).map(|_| ()),
                };
                match done {
                    Ok(()) => {
                        asked.insert(uuid);
                    }
                    Err(e) => tracing::debug!(%uuid, "interrupt request not taken yet: {e:#}"),
                }
            }
            if children.is_empty() {
                for uuid in &asked {
                    if db.get(uuid)?.is_some_and(|r| r.status == Status::Paused) {
                        summary.paused.push(uuid.clone());
                    }
                }
                summary.paused.sort();
                tracing::info!(
                    tasks = summary.finished,
                    "worker interrupted; every task process has exited"
                );
                return Ok(summary);
            }
        }

        // Tasks left `running` by processes that are gone, or whose lease expired (not our
        // children: those are settled when they exit).
        if last_recovery.is_none_or(|t| t.elapsed() >= RECOVERY_INTERVAL) {
            let ours: HashSet<String> = children.values().filter_map(|c| c.uuid.clone()).collect();
            match crate::recovery::recover_dead_tasks(
                &db,
                &layout,
                &ours,
                opts.max_crashes,
                &recoverer,
            ) {
                Ok(done) => {
                    for r in done {
                        tracing::info!(uuid = %r.uuid, status = %r.status, "recovered: {}", r.message);
                    }
                }
                Err(e) => tracing::error!("recovery of dead tasks failed: {e:#}"),
            }
            last_recovery = Some(Instant::now());
        }

        // Start children for queued tasks (each claims the next one itself).
        if interrupted == crate::interrupt::Request::None
            && paused_until.is_none_or(|t| Instant::now() >= t)
            && children.len() < max
        {
            let queued = usize::try_from(db.count_queued()?).unwrap_or(usize::MAX);
            let unclaimed = children.values().filter(|c| c.uuid.is_none()).count();
            let want = queued.saturating_sub(unclaimed).min(max - children.len());
            for _ in 0..want {
                let span = crate::telemetry::ChildSpan::start("task run");
                span.set(opentelemetry::KeyValue::new(
                    "ctxhost.worker.id",
                    me.as_str().to_string(),
                ));
                let mut child =
                    spawn(&exe, opts, &me, &span.env()).context("cannot start a task process")?;
                let pid = child.id();
                tracing::debug!(pid, "task process started");
                children.insert(
                    pid,
                    Running {
                        started: Instant::now(),
                        uuid: None,
                        run_start: None,
                        span,
                        run_end: None,
                    },
                );
                let tx = tx.clone();
                let stdout = child.stdout.take();
                std::thread::Builder::new()
                    .name(format!("wait-{pid}"))
                    .spawn(move || {
                        if let Some(out) = stdout {
                            let mut out = std::io::BufReader::new(out);
                            let mut line = String::new();
                            if out.read_line(&mut line).is_ok() && !line.trim().is_empty() {
                                let uuid = line.trim().to_string();
                                let _ = tx.send(Event::Claimed { pid, uuid });
                                line.clear();
                                if out.read_line(&mut line).is_ok()
                                    && let Some(start) = crate::metrics::run::RunStart::parse(&line)
                                {
                                    let _ = tx.send(Event::Started { pid, start });
                                }
                                // Its last line, when it ends (read to the end of its output,
                                // which closes when it exits).
                                let mut last = None;
                                line.clear();
                                while out.read_line(&mut line).is_ok_and(|n| n > 0) {
                                    if let Some(end) = crate::metrics::run::RunEnd::parse(&line) {
                                        last = Some(end);
                                    }
                                    line.clear();
                                }
                                if let Some(end) = last {
                                    let _ = tx.send(Event::Ended { pid, end });
                                }
                            }
                        }
                        let status = child.wait();
                        let _ = tx.send(Event::Exited { pid, status });
                    })
                    .context("cannot start a thread to wait for a task process")?;
            }
        }

        if opts.once && children.is_empty() && db.count_queued()? == 0 {
            tracing::info!(
                tasks = summary.finished,
                failed = summary.failed,
                "queue empty, all task processes finished"
            );
            return Ok(summary);
        }

        // Wait for an event (or the next look at the queue), then handle every event pending.
        let wait = if opts.interrupts.is_some() {
            opts.poll_interval.min(Duration::from_millis(200))
        } else {
            opts.poll_interval
        };
        let mut next = rx.recv_timeout(wait).ok();
        while let Some(event) = next {
            match event {
                Event::Claimed { pid, uuid } => {
                    tracing::info!(%uuid, pid, "task process claimed a task");
                    start_failures = 0;
                    paused_until = None;
                    crate::metrics::global().tasks_started.inc();
                    if let Some(c) = children.get_mut(&pid) {
                        c.span.set(opentelemetry::KeyValue::new(
                            "ctxhost.task.uuid",
                            uuid.clone(),
                        ));
                        c.uuid = Some(uuid);
                    }
                }
                Event::Started { pid, start } => {
                    if let Some(c) = children.get_mut(&pid) {
                        c.run_start = Some(start);
                    }
                }
                Event::Ended { pid, end } => {
                    if let Some(c) = children.get_mut(&pid) {
                        c.run_end = Some(end);
                    }
                }
                Event::Exited { pid, status } => {
                    let mut child = children.remove(&pid);
                    if let Some(end) = child.as_mut().and_then(|c| c.run_end.take()) {
                        end.account(crate::metrics::global());
                    }
                    let started = child.as_ref().map(|c| c.started.elapsed());
                    let run_start = child.as_mut().and_then(|c| c.run_start.take());
                    if let (Some(c), Ok(s)) = (&child, &status) {
                        c.span
                            .end((!s.success()).then(|| describe_exit(*s)).as_deref());
                    } else if let Some(c) = &child {
                        c.span.end(Some("cannot wait for the task process"));
                    }
                    let status = match status {
                        Ok(s) => s,
                        Err(e) => {
                            tracing::error!(pid, "cannot wait for task process: {e}");
                            next = rx.try_recv().ok();
                            continue;
                        }
                    };
                    // A child killed between its claim and its line: ask the database.
                    let uuid = match child.and_then(|c| c.uuid) {
                        Some(u) => Some(u),
                        None => claimed_by(&db, &me, pid)?,
                    };
                    match uuid {
                        Some(uuid) => {
                            summary.finished += 1;
                            let elapsed = started.unwrap_or_default();
                            // A run whose task was taken over meanwhile (its lease expired) is
                            // not counted here: the row holds the other process's work too.
                            let ours = db.get(&uuid)?.is_some_and(|r| {
                                r.process_id == Some(i64::from(pid))
                                    && r.worker_id.as_deref() == Some(me.as_str())
                            });
                            if settle(
                                &db,
                                &layout,
                                &uuid,
                                pid,
                                status,
                                elapsed,
                                &me,
                                &recoverer,
                                opts.max_crashes,
                            )? {
                                summary.failed += 1;
                            }
                            match db.get(&uuid) {
                                Ok(Some(row)) if ours => crate::metrics::run::account(
                                    crate::metrics::global(),
                                    &layout,
                                    run_start.as_ref(),
                                    &row,
                                    &opts.pricing,
                                ),
                                Ok(_) => {}
                                Err(e) => {
                                    tracing::warn!(%uuid, "metrics: cannot read the task: {e}")
                                }
                            }
                        }
                        None if status.success() => {
                            tracing::debug!(pid, "task process found nothing to claim");
                        }
                        None => {
                            start_failures += 1;
                            let how = describe_exit(status);
                            tracing::warn!(
                                pid,
                                attempt = start_failures,
                                "task process exited ({how}) before claiming a task"
                            );
                            if start_failures >= MAX_START_FAILURES {
                                if opts.once {
                                    bail!(
                                        "task processes exited {start_failures} times in a row before claiming a task (last: {how}); see the log above"
                                    );
                                }
                                let wait = Duration::from_secs(
                                    5 << (start_failures - MAX_START_FAILURES).min(4),
                                );
                                tracing::error!(
                                    "task processes keep exiting before claiming a task (last: {how}); starting more in {} s",
                                    wait.as_secs()
                                );
                                paused_until = Some(Instant::now() + wait);
                            }
                        }
                    }
                }
            }
            next = rx.try_recv().ok();
        }
    }
}

fn spawn(
    exe: &std::path::Path,
    opts: &WorkerOptions,
    me: &WorkerId,
    trace: &[(&'static str, String)],
) -> std::io::Result<Child> {
    let mut cmd = Command::new(exe);
    // The run's trace context (W3C), none when traces are off; never one inherited.
    cmd.env_remove(crate::telemetry::TRACEPARENT)
        .env_remove(crate::telemetry::TRACESTATE)
        .envs(trace.iter().map(|(k, v)| (k, v)));
    if let Some(config) = &opts.config_path {
        cmd.arg("--config").arg(config);
    }
    cmd.arg("--contexts").arg(&opts.contexts);
    if opts.verbose > 0 {
        cmd.arg(format!("-{}", "v".repeat(opts.verbose as usize)));
    }
    cmd.args(["task-exec", "--next", "--worker-id", me.as_str()]);
    if opts.child_stdin.is_some() {
        cmd.arg(crate::sources::workspace::TOKENS_ON_STDIN);
    }
    cmd.args(&opts.child_args);
    for var in &opts.env_remove {
        cmd.env_remove(var);
    }
    // A process group of its own: the terminal's Ctrl-C reaches the worker only, which asks
    // the tasks to pause at a safe point instead of killing them mid-step.
    use std::os::unix::process::CommandExt;
    cmd.stdin(if opts.child_stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .process_group(0);
    let mut child = cmd.spawn()?;
    if let (Some(secret), Some(mut stdin)) = (&opts.child_stdin, child.stdin.take()) {
        use std::io::Write as _;
        // A few hundred bytes: the pipe takes them without the child reading first. A child
        // that died at once is seen by the worker's reaping, not here.
        let _ = stdin.write_all(&secret.0);
    }
    Ok(child)
}

/// The task running under this worker's child `pid`, if any (a child killed before it said).
fn claimed_by(db: &Db, me: &WorkerId, pid: u32) -> anyhow::Result<Option<String>> {
    Ok(db
        .query_opt(
            "SELECT uuid FROM tasks WHERE status = 'running' AND worker_id = ?1 AND process_id = ?2",
            &args![me.as_str(), i64::from(pid)],
        )?
        .map(|r| r.text(0))
        .transpose()?)
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

/// After this worker's child `pid`, which claimed `uuid`, exits: a task left `running` under
/// it is recovered at once (repaired and queued again, or failed after `max_crashes`).
/// Returns whether the child's task ended `failed`.
#[allow(clippy::too_many_arguments)]
fn settle(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    pid: u32,
    status: ExitStatus,
    elapsed: Duration,
    me: &WorkerId,
    recoverer: &Recoverer,
    max_crashes: u32,
) -> anyhow::Result<bool> {
    let how = describe_exit(status);
    let Some(row) = db.get(uuid)? else {
        tracing::warn!(%uuid, pid, "task process exited ({how}) and its task is not in the database");
        return Ok(false);
    };
    let ours =
        row.process_id == Some(i64::from(pid)) && row.worker_id.as_deref() == Some(me.as_str());
    Ok(match row.status {
        Status::Running if ours => {
            // A process that fenced itself out (it could not reach the database) did not
            // crash: its task is recovered without using up `worker.max_crashes`.
            let fenced = status.code() == Some(EXIT_LEASE_LOST);
            let cause = if fenced {
                format!(
                    "task process {pid} stopped itself: it could not renew the task's lease (not counted as a crash)"
                )
            } else {
                format!("task process {pid} died ({how}) while running the task")
            };
            if fenced {
                tracing::warn!(%uuid, pid, "{cause}");
            } else {
                tracing::error!(%uuid, pid, "{cause}");
            }
            let lost = Lost {
                holder: Holder::of(&row),
                cause,
                only_if_expired: false,
                crash: !fenced,
            };
            match crate::recovery::recover_task(db, layout, uuid, &lost, max_crashes, recoverer) {
                Ok(Some(_)) => {
                    crate::metrics::global()
                        .recovered
                        .get_or_create(&crate::metrics::CauseLabel {
                            cause: if fenced { "fenced" } else { "crash" }.to_string(),
                        })
                        .inc();
                }
                Ok(None) => {}
                Err(e) => tracing::error!(%uuid, "recovery failed: {e:#}"),
            }
            db.get(uuid)?.is_some_and(|r| r.status == Status::Failed)
        }
        s if ours => {
            tracing::info!(%uuid, pid, status = %s, secs = elapsed.as_secs_f64(), "task process finished ({how})");
            s == Status::Failed
        }
        s => {
            // Taken over meanwhile (its lease expired), or recovered by someone else.
            tracing::info!(
                %uuid,
                pid,
                "task process exited ({how}); its task had been taken over by {} (task now {s})",
                row.worker_id.as_deref().unwrap_or("another process")
            );
            false
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{new_task, store_tests};
    use crate::lifecycle::{Claim, Owner, row};
    use std::os::unix::process::ExitStatusExt;

    fn settle_exit(db: &Db, layout: &Layout, uuid: &str, pid: u32, code: i32) -> bool {
        let me = WorkerId::given("h:1:test");
        let recoverer = Recoverer::for_worker(&me, Duration::from_secs(30));
        settle(
            db,
            layout,
            uuid,
            pid,
            ExitStatus::from_raw(code << 8),
            Duration::ZERO,
            &me,
            &recoverer,
            3,
        )
        .unwrap()
    }

    store_tests! {
        fn a_failed_task_counts_only_for_the_child_that_ran_it(store: &TestStore) {
            let layout = Layout::new(store.contexts());
            layout.ensure().unwrap();
            let db = store.open();
            db.insert_queued(&new_task("t")).unwrap();
            assert!(row::claim(&db, "t", &Claim::test(100)).unwrap());
            row::finish(&db, "t", Owner::test(100), Status::Failed, Some("boom")).unwrap();
            // A child that did not run the failed task (pid 200).
            assert!(!settle_exit(&db, &layout, "t", 200, 0));
            // The child that ran it.
            assert!(settle_exit(&db, &layout, "t", 100, 1));
            db.insert_queued(&new_task("ok")).unwrap();
            assert!(row::claim(&db, "ok", &Claim::test(101)).unwrap());
            row::finish(&db, "ok", Owner::test(101), Status::Completed, None).unwrap();
            assert!(!settle_exit(&db, &layout, "ok", 101, 0));
        }

        fn a_child_that_died_with_its_task_is_recovered_at_once(store: &TestStore) {
            let layout = Layout::new(store.contexts());
            layout.ensure().unwrap();
            let db = store.open();
            const U: &str = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b";
            db.insert_queued(&new_task(U)).unwrap();
            let mut c = Claim::test(300);
            c.hostname = hostname();
            crate::lifecycle::apply(&db, &layout, U, &crate::lifecycle::Transition::Claim(&c)).unwrap();
            assert_eq!(
                claimed_by(&db, &WorkerId::given("h:1:test"), 300).unwrap().as_deref(),
                Some(U)
            );
            assert!(!settle_exit(&db, &layout, U, 300, 1));
            let r = db.get(U).unwrap().unwrap();
            assert_eq!((r.status, r.crash_count), (Status::Queued, 1));
            assert!(
                r.error_message.as_deref().unwrap_or("").contains("died (exit status 1)"),
                "{r:?}"
            );
        }

        /// Issue 25 item 4: a process that fenced itself out (it lost the database) did not
        /// crash. With `worker.max_crashes` = 3, five fencing exits in a row leave the task
        /// queued with no crash counted, and it then runs to completion.
        fn fencing_exits_never_use_up_max_crashes(store: &TestStore) {
            let layout = Layout::new(store.contexts());
            layout.ensure().unwrap();
            let db = store.open();
            const U: &str = "0193a4b2-1c3d-7e8f-9a0b-1c2d3e4f5a6b";
            db.insert_queued(&new_task(U)).unwrap();
            let claim = |pid: u32| {
                let c = Claim::test(pid);
                let t = crate::lifecycle::Transition::Claim(&c);
                assert!(crate::lifecycle::apply(&db, &layout, U, &t).unwrap().is_some());
            };
            for pid in 400..405 {
                claim(pid);
                assert!(!settle_exit(&db, &layout, U, pid, EXIT_LEASE_LOST));
                let r = db.get(U).unwrap().unwrap();
                assert_eq!((r.status, r.crash_count), (Status::Queued, 0), "{r:?}");
                let msg = r.error_message.unwrap_or_default();
                assert!(msg.contains("stopped itself") && msg.contains("not counted as a crash"), "{msg}");
                assert_eq!(crate::lifecycle::find_dirs(&layout, U), [crate::layout::DirState::Paused]);
            }
            // A real crash still counts.
            claim(405);
            assert!(!settle_exit(&db, &layout, U, 405, 1));
            assert_eq!(db.get(U).unwrap().unwrap().crash_count, 1);
            claim(406);
            crate::lifecycle::apply(&db, &layout, U, &crate::lifecycle::Transition::Finish {
                owner: Owner::test(406),
                status: Status::Completed,
                error: None,
            })
            .unwrap();
            assert!(!settle_exit(&db, &layout, U, 406, 0));
            let r = db.get(U).unwrap().unwrap();
            assert_eq!((r.status, r.crash_count), (Status::Completed, 1));
            assert_eq!(crate::lifecycle::find_dirs(&layout, U), [crate::layout::DirState::Completed]);
        }
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
