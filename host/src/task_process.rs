//! One task's own process (`ctxhost task-exec`, started by the worker).
//!
//! 1. Claim a task: the oldest queued one (`task-exec --next`, what the worker starts:
//!    [`lifecycle::claim_next`], one statement safe across hosts) or a given one
//!    (`task-exec UUID`: [`lifecycle::Transition::Claim`]); then its directory comes back
//!    from `paused/` or is created in `running/`. Nothing to claim ends the process quietly.
//!    With `--next` the UUID claimed is printed on stdout (one line) for the worker.
//! 2. Start the lease's [`Heartbeat`] (renewals; the process stops itself when it cannot
//!    renew: [`crate::lease`]).
//! 3. Load the plugins ([`PluginSet`]), make the [`TaskContext`] (repairs a directory an earlier
//!    process left, counts a resume, writes metadata.json), start the tools, run the agent loop.
//! 4. End through the context: completed, stopped (a stop request honoured at a safe point) or
//!    failed with `error_message`, directory to `completed/`; or paused (a pause request
//!    honoured at a safe point), directory to `paused/` with task_state.json.
//!
//! Every error — plugin load, runtime trap, transport, even a panic — ends as a `failed` task
//! with a clear message. The database may be unreachable for a while: every statement waits
//! and retries (the lease bounds how long), the end of the task included, so its status and
//! its directory never disagree for longer than a crash would leave them (recovery and
//! `ctxhost fsck --repair` finish that).

use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use crate::agent::llm_import::HostLlm;
use crate::agent::strategy::StrategyDriver;
use crate::agent::{Agent, NoTools, Outcome, ToolRunner};
use crate::config::Config;
use crate::db::{Db, Patience, SharedDb, Status, TaskRow};
use crate::error::usage;
use crate::layout::{Layout, hostname};
use crate::lease::{Heartbeat, WorkerId};
use crate::lifecycle::{self, Claim, Transition};
use crate::llm::Transport;
use crate::plugins::PluginSet;
use crate::task::TaskContext;

/// Which task a process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// This task (`task-exec UUID`), if it is queued.
    Task(String),
    /// The oldest queued task (`task-exec --next`, started by a worker).
    Next,
}

/// The log target of the line saying a task failed (`task failed: …`). `ask` turns it off in
/// its task process: it prints the task's end (with the error) itself, once.
pub const TASK_END_LOG: &str = "ctxhost::task_end";

/// Run a task in this process: claim `target` for worker `worker_id` (`None`: this process
/// is its own worker), run it, end it. Returns the task and the status it ended with, or
/// `None` when this process got no task (not queued, claimed by another process first, or
/// nothing queued). `Err` only when no task could even be claimed (database unreachable,
/// unknown UUID).
pub fn run(
    config: &Config,
    layout: &Layout,
    target: &Target,
    worker_id: Option<&str>,
) -> anyhow::Result<Option<(String, Status)>> {
    // Traces (off unless OTEL_EXPORTER_OTLP_ENDPOINT is set): flushed once the run's span
    // has ended.
    let telemetry = crate::telemetry::init();
    let mut announced = false;
    let result = run_traced(config, layout, target, worker_id, &mut announced);
    let spans = telemetry.map(crate::telemetry::Telemetry::finish);
    if announced {
        // What only this process knows, for the worker's metrics ([`crate::metrics::run`]).
        let end = crate::metrics::run::RunEnd::of_this_process(spans);
        let mut out = std::io::stdout();
        let _ = writeln!(out, "{}", end.to_line()).and_then(|()| out.flush());
    }
    result
}

/// [`run`] with its traces set up; `announced`: whether it told the worker which task it
/// claimed (`--next`).
fn run_traced(
    config: &Config,
    layout: &Layout,
    target: &Target,
    worker_id: Option<&str>,
    announced: &mut bool,
) -> anyhow::Result<Option<(String, Status)>> {
    if crate::failpoint::is_set("task-exec:exit") {
        std::process::exit(3);
    }
    if crate::failpoint::is_set("task-exec:late") {
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    layout.ensure()?;
    let spec = config.store_spec()?;
    let db = Db::open(&spec, layout.root())?;
    // Wait out a database outage rather than fail the task: the lease bounds it.
    db.set_patience(Patience::Unbounded);
    let pid = std::process::id();
    let host = hostname();
    let worker_id = match worker_id {
        Some(w) => WorkerId::given(w),
        None => WorkerId::new(&host),
    };
    let llm = &config.llm;
    let claim = Claim {
        pid,
        hostname: host.clone(),
        host_id: crate::host::host_id(),
        worker_id: worker_id.as_str().to_string(),
        lease: config.worker.lease(),
        llm_provider: llm.provider.to_string(),
        model: llm.model.clone(),
        context_length: llm.context_length,
    };
    let claimed_at = Instant::now();
    // Whether the worker is told where the run began (`--next`: [`crate::metrics::run`]).
    let mut announce = false;
    let (uuid, placed) = match target {
        Target::Task(uuid) => {
            let Some(row) = db.get(uuid)? else {
                return Err(usage(format!(
                    "no task with UUID {uuid} in {}",
                    db.location()
                )));
            };
            if row.status != Status::Queued {
                tracing::debug!(%uuid, status = %row.status, "task is not queued; nothing to do");
                return Ok(None);
            }
            match lifecycle::apply(&db, layout, uuid, &Transition::Claim(&claim)) {
                Ok(Some(_)) => (uuid.clone(), Ok(())),
                Ok(None) => {
                    tracing::debug!(%uuid, "another process claimed the task first");
                    return Ok(None);
                }
                // The row is ours but its directory could not be placed: fail the task below.
                Err(e)
                    if db.get(uuid)?.is_some_and(|r| {
                        r.process_id == Some(i64::from(pid))
                            && r.worker_id.as_deref() == Some(worker_id.as_str())
                    }) =>
                {
                    (uuid.clone(), Err(e))
                }
                Err(e) => return Err(e),
            }
        }
        Target::Next => match lifecycle::claim_next(&db, layout, &claim)? {
            None => {
                tracing::debug!("nothing queued");
                return Ok(None);
            }
            Some(c) => {
                // Tell the worker which task this process runs (it may be gone: ignore).
                let mut out = std::io::stdout();
                let _ = writeln!(out, "{}", c.uuid).and_then(|()| out.flush());
                announce = true;
                *announced = true;
                (c.uuid, c.dir_error.map_or(Ok(()), Err))
            }
        },
    };
    let owner = claim.owner();
    // One connection for the whole process, the heartbeat's thread included.
    let db = SharedDb::new(db);
    let heartbeat = Heartbeat::start(
        db.clone(),
        uuid.clone(),
        worker_id.as_str().to_string(),
        claim.lease,
        claimed_at,
    );
    let failed = |msg: String| {
        let msg = failure_text(config, &msg);
        tracing::error!(target: TASK_END_LOG, %uuid, "task failed: {msg}");
        db.with(|db| crate::task::finish(db, layout, &uuid, owner, Status::Failed, Some(&msg)))
            .map(|s| Some((uuid.clone(), s)))
    };
    if let Err(e) = placed {
        return failed(format!("claiming the task failed: {e:#}"));
    }
    let heartbeat = match heartbeat {
        Ok(h) => h,
        Err(e) => return failed(format!("cannot start the lease's heartbeat: {e:#}")),
    };
    // With `context_storage.remote`, the directory comes from the bucket when this host's
    // copy is not the latest, and the claim takes the manifest's next epoch (the fence).
    let remote = match remote_claim(config, layout, &db, &uuid, &worker_id, pid) {
        Ok(r) => r,
        // The bucket could not be reached (or a pause or stop came while it was waited for),
        // its store does not honour conditional writes, or this host's clock is off: nothing
        // was read or written, so the task is set aside as it is, resumable.
        Err(e)
            if e.downcast_ref::<crate::remote::store::Unreachable>()
                .is_some()
                || e.downcast_ref::<crate::remote::fencing::Unfenced>()
                    .is_some()
                || e.downcast_ref::<crate::remote::store::ClockSkew>()
                    .is_some() =>
        {
            heartbeat.stop();
            let msg = failure_text(config, &format!("{e:#}"));
            return set_aside(&db, layout, &uuid, owner, &msg).map(|s| Some((uuid.clone(), s)));
        }
        Err(e) => {
            heartbeat.stop();
            return failed(format!("{e:#}"));
        }
    };
    tracing::info!(%uuid, pid, worker = %worker_id, "task started");
    let Some(row) = db.with(|db| db.get(&uuid))? else {
        return Err(anyhow::anyhow!("task {uuid} vanished after its claim"));
    };
    if announce {
        // The row's counters before this run added anything, for the worker's metrics.
        let start = crate::metrics::run::RunStart::of(&row, crate::db::now_rfc3339());
        let mut out = std::io::stdout();
        let _ = writeln!(out, "{}", start.to_line()).and_then(|()| out.flush());
    }

    // The run's span (a child of the worker's, TRACEPARENT): every LLM call, tool call,
    // compression and strategy hook of the run is under it.
    let run_span = crate::telemetry::RunSpan::start(
        &crate::telemetry::parent_from_env(),
        "invoke_agent ctxhost".to_string(),
        crate::telemetry::genai::agent_attributes(&uuid, &llm.provider.to_string(), &llm.model),
    );
    let trace_id = run_span.trace_id().filter(|_| crate::telemetry::enabled());
    let ended = catch_unwind(AssertUnwindSafe(|| {
        execute(
            config,
            layout,
            db.clone(),
            row,
            pid,
            &host,
            RunExtras {
                remote,
                trace_id: trace_id.as_deref(),
            },
        )
    }));
    let result = match ended {
        Ok(Ok(status)) => Ok(Some((uuid.clone(), status))),
        Ok(Err(e)) => failed(format!("{e:#}")),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            // No context to end the task through (a panic lost it).
            failed(format!("internal error (panic): {what}"))
        }
    };
    match &result {
        Ok(Some((_, status))) => {
            run_span.set(opentelemetry::KeyValue::new(
                "ctxhost.task.status",
                status.to_string(),
            ));
            if *status == Status::Failed {
                run_span.fail("the task failed");
            }
        }
        Ok(None) => {}
        Err(_) => run_span.fail("the task could not be ended"),
    }
    drop(run_span);
    heartbeat.stop();
    result
}

/// The bucket side of claimed task `uuid` ([`crate::remote::TaskSync::claim`]); `None`
/// without `context_storage.remote`. The store gives up waiting for an unreachable bucket as
/// soon as a pause or stop of the task is asked, and says what it waits for in the task's
/// wait note ([`crate::remote::wait_note_path`]).
fn remote_claim(
    config: &Config,
    layout: &Layout,
    db: &SharedDb,
    uuid: &str,
    worker_id: &WorkerId,
    pid: u32,
) -> anyhow::Result<Option<crate::remote::TaskSync>> {
    let Some(cfg) = config.context_storage.remote.as_ref() else {
        return Ok(None);
    };
    let (db, id) = (db.clone(), uuid.to_string());
    let requested = move || match db.with(|db| db.control(&id)) {
        Ok(c) => c.is_some_and(|c| c.pause_requested || c.stop_requested),
        Err(e) => {
            tracing::warn!(uuid = %id, "cannot read the task's pause/stop requests while the object store is waited for: {e:#}");
            false
        }
    };
    // A note left by an earlier process of the task that was killed while it waited.
    let note = crate::remote::wait_note_path(layout, uuid)?;
    let _ = std::fs::remove_file(&note);
    let store = crate::remote::Store::open(cfg)?
        .with_interrupt(std::sync::Arc::new(requested))
        .with_wait_note(note);
    let dir = layout.task_dir(crate::layout::DirState::Running, uuid);
    let holder = format!("{worker_id}/{pid}");
    crate::remote::TaskSync::claim(std::sync::Arc::new(store), layout, uuid, &holder, &dir)
        .map(Some)
}

/// End this run of task `uuid` without failing it when its directory could not be fetched
/// from the bucket (`why`): stopped if a stop was asked, otherwise paused (with `why` as the
/// pause reason when no pause was asked), to be resumed once the store is back. Nothing of the
/// task was read or written, so nothing is lost.
fn set_aside(
    db: &SharedDb,
    layout: &Layout,
    uuid: &str,
    owner: lifecycle::Owner<'_>,
    why: &str,
) -> anyhow::Result<Status> {
    let control = db.with(|db| db.control(uuid))?.unwrap_or_default();
    if control.stop_requested {
        tracing::warn!(%uuid, "task stopped as requested while the object store was waited for: {why}");
        return db.with(|db| crate::task::finish(db, layout, uuid, owner, Status::Stopped, None));
    }
    if !control.pause_requested {
        db.with(|db| db.request_pause(uuid, Some(why)))?;
    }
    tracing::warn!(%uuid, "task paused, its directory could not be fetched from the bucket (resume it once the store is back: `ctxhost resume {uuid}`): {why}");
    match db.with(|db| lifecycle::apply(db, layout, uuid, &Transition::Pause { owner }))? {
        Some(_) => Ok(Status::Paused),
        None => anyhow::bail!(
            "task {uuid}: its row was no longer running under this process when it was to pause"
        ),
    }
}

/// What a task's failure becomes in its `error_message` and the log: the API key and the
/// database password redacted (whatever a provider, a component or a driver echoed), bounded
/// and escaped ([`crate::untrusted::MAX_DB_ERROR_BYTES`]).
fn failure_text(config: &Config, error: &str) -> String {
    let key = config.api_key().ok().flatten();
    let redacted = crate::llm::redact::redact(error, key.as_deref());
    let password = match config.store_spec() {
        Ok(crate::db::StoreSpec::Postgres(url)) => url.password(),
        _ => None,
    };
    let redacted = crate::llm::redact::redact(&redacted, password.as_deref());
    crate::untrusted::text(&redacted, crate::untrusted::MAX_DB_ERROR_BYTES).into_owned()
}

/// What a run may have besides its task: the bucket sync (`context_storage.remote`) and the
/// trace id of its span (when traces are exported), recorded in the task's `trace_ids`.
struct RunExtras<'a> {
    remote: Option<crate::remote::TaskSync>,
    trace_id: Option<&'a str>,
}

/// Everything between the claim and the end: plugins, context, tools, agent loop, and the
/// status change the loop's outcome asks for. `Err` when no context could be made or ending
/// the task failed before its row changed.
fn execute(
    config: &Config,
    layout: &Layout,
    db: SharedDb,
    row: TaskRow,
    pid: u32,
    host: &str,
    extras: RunExtras<'_>,
) -> anyhow::Result<Status> {
    let RunExtras { remote, trace_id } = extras;
    // CTXHOST_CACHE_DIR lets several contexts trees (or test runs) share compiled components.
    let plugins = PluginSet::load(config, layout)?;
    let row_copy = row.clone();
    let mut ctx = TaskContext::open(config, layout, db, row, pid, host, &plugins)?;
    if let Some(r) = remote {
        ctx.set_remote(r);
    }
    if let Some(id) = trace_id
        && let Err(e) = ctx.dir().append_line(ctxhost_format::files::TRACE_IDS, id)
    {
        // A record for people (the task page): never fails the task.
        tracing::warn!(uuid = %ctx.uuid(), "cannot record the run's trace id: {e}");
    }
    // The workspace as a git checkout (issue 40): a forge item's worktree made or rebuilt, a
    // user's git directory recorded; a failure here fails the task before any step.
    let workspace = crate::task::read_metadata(ctx.dir())
        .ok()
        .flatten()
        .and_then(|m| m.workspace)
        .map(std::path::PathBuf::from)
        .or_else(|| config.workspace.clone());
    let record = crate::sources::workspace::prepare(
        config,
        layout,
        ctx.dir(),
        &row_copy,
        workspace.as_deref(),
    )
    .map_err(|e| anyhow::anyhow!("preparing the task's workspace failed: {e:#}"));
    let mut outcome = match record {
        Ok(record) => {
            let outcome = run_loop(config, &plugins, &mut ctx, workspace, record.as_ref());
            // The change as it is at the end of this run, whatever the outcome.
            if let Some(rec) = &record {
                write_patch(config, &ctx, rec);
            }
            outcome
        }
        Err(e) => Err(e),
    };
    // Whatever the loop's outcome, the task never ends, pauses or stops on a history a
    // component replaced or rewrote during its last step: it fails, naming the file.
    if outcome.is_ok()
        && let Err(e) = ctx.verify_history()
    {
        outcome = Err(e);
    }
    let uuid = ctx.uuid().to_string();
    match outcome {
        Ok(Outcome::Completed { answer }) => {
            tracing::info!(%uuid, chars = answer.chars().count(), "task completed");
            ctx.complete()
        }
        Ok(Outcome::Stopped) => {
            tracing::info!(%uuid, "task stopped as requested");
            ctx.update_status(Status::Stopped, None)
        }
        Ok(Outcome::Paused { reason }) => {
            let status = ctx
                .pause()
                .map_err(|e| anyhow::anyhow!("pausing the task failed: {e:#}"))?;
            tracing::info!(%uuid, reason = reason.as_deref().unwrap_or(""), "task paused");
            Ok(status)
        }
        Err(e) => {
            let msg = failure_text(config, &format!("{e:#}"));
            tracing::error!(target: TASK_END_LOG, %uuid, "task failed: {msg}");
            ctx.fail(&msg)
        }
    }
}

/// Write the task's `changes.patch` for its git workspace `rec` if it changed (a step
/// boundary); a failure is logged, never the task's.
fn write_patch(
    config: &Config,
    ctx: &TaskContext,
    rec: &crate::workspace::record::WorkspaceRecord,
) {
    match crate::workspace::checkout::write_patch(ctx.dir(), rec, &own_paths(config, ctx, None)) {
        Ok(true) => tracing::debug!(uuid = %ctx.uuid(), "changes.patch written"),
        Ok(false) => {}
        Err(e) => tracing::warn!(uuid = %ctx.uuid(), "cannot write changes.patch: {e:#}"),
    }
}

/// Give the allocator's free pages back to the kernel once the task's components are loaded
/// (glibc keeps what loading freed: ~0.5 MiB per task process of heap that every one of many
/// concurrent tasks would otherwise hold while it waits for its model; issue 42 item 3).
fn release_free_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory of the allocator to the kernel; it takes
    // the allocator's own locks and touches no memory the program uses.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The worktree's own git directory and its mirror's (`git rev-parse --git-dir` and
/// `--git-common-dir`, absolute), each only when it lies outside the worktree; none when git
/// cannot say (logged: `shell`'s git then fails in the sandbox, the task goes on).
fn worktree_git_dirs(
    worktree: &std::path::Path,
) -> (Vec<std::path::PathBuf>, Vec<std::path::PathBuf>) {
    let git = crate::workspace::git::Git::new(worktree);
    let dir = |flag: &str| -> Option<std::path::PathBuf> {
        match git.read(["rev-parse", "--path-format=absolute", flag]) {
            Ok(p) => Some(std::path::PathBuf::from(p)).filter(|p| !p.starts_with(worktree)),
            Err(e) => {
                tracing::warn!("the worktree's git directories are unknown: {e:#}");
                None
            }
        }
    };
    (
        dir("--git-dir").into_iter().collect(),
        dir("--git-common-dir").into_iter().collect(),
    )
}

/// The paths of ctxhost itself no tool may touch even inside a workspace: the contexts/ tree
/// (the parent of `running/`, where the task's directory is) and the config file.
/// `managed`: the task's own worktree `contexts/.workspaces/<uuid>` when it works in one;
/// contexts/ is then left out (the worktree lies inside it and nothing else of contexts/ lies
/// inside the worktree), which is what lets exactly that folder be a workspace.
fn own_paths(
    config: &Config,
    ctx: &TaskContext,
    managed: Option<&std::path::Path>,
) -> Vec<std::path::PathBuf> {
    let mut paths = Vec::new();
    if let Some(contexts) = ctx.dir().path().parent().and_then(|p| p.parent()) {
        let canon = |p: &std::path::Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let own_worktree = managed
            .is_some_and(|m| canon(m) == canon(&contexts.join(".workspaces")).join(ctx.uuid()));
        if !own_worktree {
            paths.push(contexts.to_path_buf());
        }
    }
    if let Some(c) = &config.loaded_from {
        paths.push(c.clone());
    }
    paths
}

/// The agent loop of `ctx` with the request formats, compressor, strategy and tools of
/// `plugins` and `config`. The tool servers are stopped and the instances dropped when it
/// returns, before the task's status changes.
fn run_loop(
    config: &Config,
    plugins: &PluginSet,
    ctx: &mut TaskContext,
    workspace: Option<std::path::PathBuf>,
    record: Option<&crate::workspace::record::WorkspaceRecord>,
) -> anyhow::Result<Outcome> {
    let dir = ctx.dir().clone();
    // The LLM calls of the compressor and the strategy give way to a pause or stop as the
    // agent loop's own do.
    let grace = std::time::Duration::from_secs(config.llm.interrupt_grace_secs);
    let probe = ctx.interrupt_probe();
    let mut format = plugins.request_format(dir.path())?;
    let mut compressor = match plugins.has_compressor() {
        false => None,
        true => {
            let llm = HostLlm::new(
                plugins.request_format(dir.path())?,
                Transport::new(config.transport_config()?),
                &dir,
                &config.llm.model,
                config.llm.temperature,
                ctx.usage_meter(),
            )
            .interruptible(probe.clone(), grace)
            .traced_as(&config.llm.provider.to_string(), "compressor");
            plugins.compressor(dir.path(), Box::new(llm))?
        }
    };
    let strategy_llm = HostLlm::new(
        plugins.request_format(dir.path())?,
        Transport::new(config.transport_config()?),
        &dir,
        &config.llm.model,
        config.llm.temperature,
        ctx.usage_meter(),
    )
    .interruptible(probe.clone(), grace)
    .traced_as(&config.llm.provider.to_string(), "strategy");
    let instantiating = std::time::Instant::now();
    let strategy = plugins
        .strategy(
            dir.path(),
            Box::new(strategy_llm),
            Box::new(ctx.planning().clone()),
        )
        .map_err(|e| anyhow::anyhow!("plugins.strategy ({}): {e}", plugins.spec_of_strategy()))?;
    let instantiate_ms = instantiating.elapsed().as_secs_f64() * 1000.0;
    let mut strategy = StrategyDriver::new(
        strategy,
        ctx.planning().clone(),
        Agent::strategy_config(config),
    );
    // The built-in coding tools on the task's workspace (issue 39): the managed worktree
    // (issue 40), else the one metadata.json recorded when the task first ran (the task's own,
    // from `submit --workspace` or `ask`, else the config's); a task older than that record:
    // the config's (or `task-exec --workspace`'s).
    let managed = record
        .filter(|r| r.managed)
        .map(|r| std::path::PathBuf::from(&r.path));
    let workspace = managed.clone().or(workspace);
    let managed = managed.as_deref();
    let task_tools: Box<dyn ToolRunner> = if config.mcp_servers.is_empty() {
        Box::new(NoTools)
    } else {
        // Servers with `sandbox: true` are confined to the workspace (issue 39).
        let confinement = crate::tools::Confinement {
            workspace: workspace.clone(),
            hidden: own_paths(config, ctx, managed),
            tools: config.tools.clone(),
        };
        Box::new(
            crate::tools::McpTools::start(&config.mcp_servers, &config.tools, &dir, &confinement)?
                .interruptible(probe.clone()),
        )
    };
    // A managed worktree's git directories live in its mirror, outside the workspace: `shell`
    // may write the worktree's own one and read the mirror, so `git status`/`diff`/`commit`
    // work there (nothing else of contexts/).
    let git_dirs = managed.map_or((Vec::new(), Vec::new()), worktree_git_dirs);
    let task_tools: Box<dyn ToolRunner> = match &workspace {
        Some(ws) if config.tools.builtin => Box::new(crate::tools::BuiltinTools::new(
            task_tools,
            &dir,
            crate::tools::builtin::Setup {
                workspace: ws.clone(),
                hidden: own_paths(config, ctx, managed),
                config: config.tools.clone(),
                secret: config.api_key().ok().flatten(),
                git_write: git_dirs.0.clone(),
                git_read: git_dirs.1.clone(),
            },
            Some({
                let probe = probe.clone();
                Box::new(move || probe.requested())
            }),
        )?),
        _ => task_tools,
    };
    // The host's history tools, offered once the context was compressed (issue 27).
    let mut tools: Box<dyn ToolRunner> = Box::new(
        crate::tools::HistoryTools::new(
            task_tools,
            &dir,
            config.context_storage.recall,
            config.llm.context_length,
            config.api_key().ok().flatten(),
        )?
        .with_task(ctx.uuid()),
    );
    release_free_heap();
    let outcome = Agent::new(
        config,
        &mut format,
        compressor.as_mut(),
        tools.as_mut(),
        &mut strategy,
    )
    .with_interrupt_probe(probe)
    .with_step_end(Box::new(|ctx: &TaskContext| {
        if let Some(rec) = record {
            write_patch(config, ctx, rec);
        }
    }))
    .run(ctx);
    let s = strategy.stats();
    tracing::info!(uuid = %ctx.uuid(), strategy = strategy.component(), instantiate_ms, hooks = s.calls,
        replayed = s.replayed, side_calls = s.llm_calls,
        component_ms = s.component_time.as_secs_f64() * 1000.0, "strategy cost in this process");
    outcome
}
