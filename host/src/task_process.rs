//! One task's own process (`ctxhost task-exec UUID`, started by the worker).
//!
//! 1. Claim the task ([`lifecycle::Transition::Claim`]: one atomic UPDATE, then its directory
//!    comes back from `paused/` or is created in `running/`); a lost claim ends the process
//!    quietly.
//! 2. Load the plugins ([`PluginSet`]), make the [`TaskContext`] (repairs a directory an earlier
//!    process left, counts a resume, writes metadata.json), start the tools, run the agent loop.
//! 3. End through the context: completed, stopped (a stop request honoured at a safe point) or
//!    failed with `error_message`, directory to `completed/`; or paused (a pause request
//!    honoured at a safe point), directory to `paused/` with task_state.json.
//!
//! Every error — plugin load, runtime trap, transport, even a panic — ends as a `failed` task
//! with a clear message.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::agent::llm_import::HostLlm;
use crate::agent::strategy::StrategyDriver;
use crate::agent::{Agent, NoTools, Outcome, ToolRunner};
use crate::config::Config;
use crate::db::{Db, Status, TaskRow};
use crate::error::usage;
use crate::layout::{Layout, hostname};
use crate::lifecycle::{self, Claim, Transition};
use crate::llm::Transport;
use crate::plugins::PluginSet;
use crate::task::{TaskContext, UsageMeter};

/// Run task `uuid` in this process. Returns the status it ended with, or `None` when this
/// process did not get the task (not queued, or another process claimed it first).
/// `Err` only when the task could not even be claimed (database unreachable, unknown UUID).
pub fn run(config: &Config, layout: &Layout, uuid: &str) -> anyhow::Result<Option<Status>> {
    if crate::failpoint::is_set("task-exec:exit") {
        std::process::exit(3);
    }
    layout.ensure()?;
    let db = Db::open(layout.root())?;
    let Some(row) = db.get(uuid)? else {
        return Err(usage(format!(
            "no task with UUID {uuid} in {}",
            db.path().display()
        )));
    };
    if row.status != Status::Queued {
        tracing::debug!(%uuid, status = %row.status, "task is not queued; nothing to do");
        return Ok(None);
    }
    let pid = std::process::id();
    let host = hostname();
    let llm = &config.llm;
    let claim = Claim {
        pid,
        hostname: host.clone(),
        llm_provider: llm.provider.to_string(),
        model: llm.model.clone(),
        context_length: llm.context_length,
    };
    let claimed = match lifecycle::apply(&db, layout, uuid, &Transition::Claim(&claim)) {
        Ok(Some(_)) => true,
        Ok(None) => false,
        // The row is ours but its directory could not be placed: fail the task below.
        Err(e)
            if db
                .get(uuid)?
                .is_some_and(|r| r.process_id == Some(i64::from(pid))) =>
        {
            let msg = failure_text(config, &format!("claiming the task failed: {e:#}"));
            tracing::error!(%uuid, "task failed: {msg}");
            return crate::task::finish(&db, layout, uuid, pid, Status::Failed, Some(&msg))
                .map(Some);
        }
        Err(e) => return Err(e),
    };
    if !claimed {
        tracing::debug!(%uuid, "another process claimed the task first");
        return Ok(None);
    }
    tracing::info!(%uuid, pid, "task started");

    let ended = catch_unwind(AssertUnwindSafe(|| {
        execute(config, layout, row, pid, &host)
    }));
    let error = match ended {
        Ok(Ok(status)) => return Ok(Some(status)),
        Ok(Err(e)) => failure_text(config, &format!("{e:#}")),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            failure_text(config, &format!("internal error (panic): {what}"))
        }
    };
    // No context to end the task through (it could not be made, or a panic lost it).
    tracing::error!(%uuid, "task failed: {error}");
    crate::task::finish(&db, layout, uuid, pid, Status::Failed, Some(&error)).map(Some)
}

/// What a task's failure becomes in its `error_message` and the log: the API key redacted
/// (whatever a provider or a component echoed), bounded and escaped
/// ([`crate::untrusted::MAX_DB_ERROR_BYTES`]).
fn failure_text(config: &Config, error: &str) -> String {
    let key = config.api_key().ok().flatten();
    let redacted = crate::llm::redact::redact(error, key.as_deref());
    crate::untrusted::text(&redacted, crate::untrusted::MAX_DB_ERROR_BYTES).into_owned()
}

/// Everything between the claim and the end: plugins, context, tools, agent loop, and the
/// status change the loop's outcome asks for. `Err` when no context could be made or ending
/// the task failed before its row changed.
fn execute(
    config: &Config,
    layout: &Layout,
    row: TaskRow,
    pid: u32,
    host: &str,
) -> anyhow::Result<Status> {
    // CTXHOST_CACHE_DIR lets several contexts trees (or test runs) share compiled components.
    let plugins = PluginSet::load(config, layout)?;
    let mut ctx = TaskContext::open(config, layout, row, pid, host, &plugins)?;
    let outcome = run_loop(config, layout, &plugins, &mut ctx);
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
            tracing::error!(%uuid, "task failed: {msg}");
            ctx.fail(&msg)
        }
    }
}

/// The agent loop of `ctx` with the request formats, compressor, strategy and tools of
/// `plugins` and `config`. The tool servers are stopped and the instances dropped when it
/// returns, before the task's status changes.
fn run_loop(
    config: &Config,
    layout: &Layout,
    plugins: &PluginSet,
    ctx: &mut TaskContext,
) -> anyhow::Result<Outcome> {
    let dir = ctx.dir().clone();
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
                UsageMeter::open(layout, ctx.uuid())?,
            );
            plugins.compressor(dir.path(), Box::new(llm))?
        }
    };
    let strategy_llm = HostLlm::new(
        plugins.request_format(dir.path())?,
        Transport::new(config.transport_config()?),
        &dir,
        &config.llm.model,
        config.llm.temperature,
        UsageMeter::open(layout, ctx.uuid())?,
    );
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
    let mut tools: Box<dyn ToolRunner> = if config.mcp_servers.is_empty() {
        Box::new(NoTools)
    } else {
        Box::new(crate::tools::McpTools::start(
            &config.mcp_servers,
            &config.tools,
            &dir,
        )?)
    };
    let outcome = Agent::new(
        config,
        &mut format,
        compressor.as_mut(),
        tools.as_mut(),
        &mut strategy,
    )
    .run(ctx);
    let s = strategy.stats();
    tracing::info!(uuid = %ctx.uuid(), strategy = strategy.component(), instantiate_ms, hooks = s.calls,
        replayed = s.replayed, side_calls = s.llm_calls,
        component_ms = s.component_time.as_secs_f64() * 1000.0, "strategy cost in this process");
    outcome
}
