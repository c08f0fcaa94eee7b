//! One task's own process (`ctxhost task-exec UUID`, started by the worker).
//!
//! Claim the task (one atomic UPDATE; a lost claim ends the process quietly), create
//! `running/{uuid}/` with metadata.json, load the plugins into a fresh wasmtime runtime, run the
//! agent loop, then finish: directory renamed to `completed/{uuid}/`, status `completed`,
//! `stopped` (a stop request honoured at a safe point) or `failed` with `error_message`,
//! `completed_at` set. Every error — plugin load, runtime trap, transport, even a panic — ends
//! as a `failed` task with a clear message. A pause request honoured at a safe point ends the
//! process with the task `paused` and its directory in `paused/{uuid}/` (task_state.json written).
//!
//! A task whose directory already exists (resumed after a pause, or queued again by crash
//! recovery) gets it back from `paused/`, repaired ([`crate::repair`]), and continues from
//! current.jsonl; a resume after a pause counts in `resume_count`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, anyhow};

use crate::agent::llm_import::HostLlm;
use crate::agent::{Agent, Interrupt, NoTools, Outcome, TaskInput};
use crate::config::Config;
use crate::db::{Db, Status, TaskRow, now_rfc3339};
use crate::layout::{
    DirState, Layout, Metadata, MetadataConfig, MetadataTaskKey, hostname, write_metadata_once,
};
use crate::llm::{Transport, TransportConfig};
use crate::runtime::{PluginKind, PluginSource, Runtime, RuntimeLimits};

/// Environment variable naming a compiled-component cache directory to use instead of
/// `<contexts>/.cache/` (shared between contexts trees; only ctxhost writes it).
pub const CACHE_DIR_ENV: &str = "CTXHOST_CACHE_DIR";

/// The compiled-component cache directory: `$CTXHOST_CACHE_DIR` if set, else
/// `<contexts>/.cache/` of `layout`.
pub fn cache_dir(layout: &Layout) -> std::path::PathBuf {
    std::env::var_os(CACHE_DIR_ENV)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| layout.cache_dir())
}

/// A fresh runtime with `config`'s limits and the cache of [`cache_dir`].
fn runtime_for(config: &Config, layout: &Layout) -> anyhow::Result<Runtime> {
    let (memory_bytes, call_timeout) = config.runtime_limits();
    Runtime::new(
        &cache_dir(layout),
        RuntimeLimits {
            memory_bytes,
            call_timeout,
        },
    )
    .context("cannot start the WebAssembly runtime")
}

/// The checks `ctxhost run` makes before starting any task process, so a configuration
/// mistake is reported once instead of failing every task: each configured plugin
/// (`plugins.message_store`, `plugins.request_format`, `plugins.compressor` unless `none`)
/// loads as its kind (which also compiles it into the cache once, instead of in every
/// child), and the API-key variable named by `llm.api_key_env` is set. Errors name the
/// config key.
pub fn preflight(config: &Config, layout: &Layout) -> anyhow::Result<()> {
    config.api_key()?;
    let runtime = runtime_for(config, layout)?;
    let mut plugins = vec![
        (
            "plugins.message_store",
            config.plugins.message_store.as_str(),
            PluginKind::MessageStore,
        ),
        (
            "plugins.request_format",
            config.request_format(),
            PluginKind::RequestFormat,
        ),
    ];
    if let Some(spec) = config.compressor() {
        plugins.push(("plugins.compressor", spec, PluginKind::Compressor));
    }
    for (key, spec, kind) in plugins {
        let src = load_source(key, spec)?;
        runtime
            .load(&src, kind)
            .with_context(|| format!("config {key} (`{spec}`) cannot be loaded as a {kind}"))?;
    }
    Ok(())
}

/// The transport settings of `config`'s `llm` section, with the API key read from the
/// environment now (error naming `llm.api_key_env` if it is configured but unset).
pub fn transport_config(config: &Config) -> anyhow::Result<TransportConfig> {
    let llm = &config.llm;
    Ok(TransportConfig {
        base_url: config.base_url(),
        api_key: config.api_key()?,
        auth: llm.provider.auth_scheme(),
        connect_timeout: Duration::from_secs(llm.connect_timeout_secs),
        request_timeout: Duration::from_secs(llm.timeout_secs),
        max_retries: llm.max_retries,
        max_backoff: Duration::from_secs(llm.max_backoff_secs),
        max_response_bytes: llm.max_response_mib.saturating_mul(1024 * 1024),
    })
}

/// Run task `uuid` in this process. Returns the status it ended with, or `None` when this
/// process did not get the task (not queued, or another process claimed it first).
/// `Err` only when the task could not even be claimed (database unreachable).
pub fn run(config: &Config, layout: &Layout, uuid: &str) -> anyhow::Result<Option<Status>> {
    layout.ensure()?;
    let db = Db::open(layout.root())?;
    let Some(row) = db.get(uuid)? else {
        return Err(crate::cli::UsageError(format!(
            "no task with UUID {uuid} in {}",
            db.path().display()
        ))
        .into());
    };
    if row.status != Status::Queued {
        tracing::debug!(%uuid, status = %row.status, "task is not queued; nothing to do");
        return Ok(None);
    }
    let pid = std::process::id();
    let host = hostname();
    let llm = &config.llm;
    if !db.claim(
        uuid,
        pid,
        &host,
        llm.provider.as_str(),
        &llm.model,
        llm.context_length,
    )? {
        tracing::debug!(%uuid, "another process claimed the task first");
        return Ok(None);
    }
    tracing::info!(%uuid, pid, "task started");

    let outcome = catch_unwind(AssertUnwindSafe(|| {
        execute(config, layout, &db, &row, pid, &host)
    }));
    let (status, error) = match outcome {
        Ok(Ok(Outcome::Completed { answer })) => {
            tracing::info!(%uuid, chars = answer.chars().count(), "task completed");
            (Status::Completed, None)
        }
        Ok(Ok(Outcome::Stopped)) => {
            tracing::info!(%uuid, "task stopped as requested");
            (Status::Stopped, None)
        }
        Ok(Ok(Outcome::Paused { reason })) => {
            match pause(layout, &db, uuid, pid, reason.as_deref()) {
                Ok(()) => {
                    tracing::info!(%uuid, reason = reason.as_deref().unwrap_or(""), "task paused");
                    return Ok(Some(Status::Paused));
                }
                Err(e) => (
                    Status::Failed,
                    Some(format!("pausing the task failed: {e:#}")),
                ),
            }
        }
        Ok(Err(e)) => (Status::Failed, Some(format!("{e:#}"))),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            (
                Status::Failed,
                Some(format!("internal error (panic): {what}")),
            )
        }
    };
    if let Some(e) = &error {
        tracing::error!(%uuid, "task failed: {e}");
    }
    finish(layout, &db, uuid, status, error.as_deref())?;
    Ok(Some(status))
}

/// Honour a pause at a safe point (the loop has returned, so the task's tool servers are shut
/// down and its plugins dropped): write task_state.json, move the directory to `paused/`, then
/// set the status `paused` (in that order, so a resumed task's next process always finds the
/// directory in `paused/`).
fn pause(
    layout: &Layout,
    db: &Db,
    uuid: &str,
    pid: u32,
    reason: Option<&str>,
) -> anyhow::Result<()> {
    let dir = layout.task_dir(DirState::Running, uuid);
    let resume_count = db.get(uuid)?.map(|r| r.resume_count).unwrap_or(0);
    crate::task_state::write_paused(
        &dir,
        &now_rfc3339(),
        u64::try_from(resume_count).unwrap_or(0),
        reason,
    )?;
    layout.move_task_dir(uuid, DirState::Running, DirState::Paused)?;
    if !db.mark_paused(uuid, pid)? {
        tracing::warn!(%uuid, pid, "the task's row was no longer running under this process when it paused");
    }
    Ok(())
}

/// Move the directory to `completed/` and record the final status. The directory moves first:
/// a crash in between leaves a `running` row with a dead pid, which the worker or recovery
/// fails; never a finished row with its directory still in `running/`.
fn finish(
    layout: &Layout,
    db: &Db,
    uuid: &str,
    status: Status,
    error: Option<&str>,
) -> anyhow::Result<()> {
    let mut error = error.map(str::to_string);
    let running = layout.task_dir(DirState::Running, uuid);
    let completed = layout.task_dir(DirState::Completed, uuid);
    let moved = if running.is_dir() {
        layout
            .move_task_dir(uuid, DirState::Running, DirState::Completed)
            .map(|_| ())
    } else if layout.task_dir(DirState::Paused, uuid).is_dir() {
        // Failed before its directory came back from paused/.
        layout
            .move_task_dir(uuid, DirState::Paused, DirState::Completed)
            .map(|_| ())
    } else if completed.is_dir() {
        Ok(())
    } else {
        // Failed before its directory existed: create it so status and directory agree.
        std::fs::create_dir_all(&completed)
            .with_context(|| format!("cannot create {}", completed.display()))
    };
    let status = match moved {
        Ok(()) => status,
        Err(e) => {
            let msg = format!("{e:#}");
            error = Some(match error {
                Some(prev) => format!("{prev}; then: {msg}"),
                None => msg,
            });
            Status::Failed
        }
    };
    db.finish(uuid, status, error.as_deref())?;
    Ok(())
}

fn load_source(key: &str, spec: &str) -> anyhow::Result<PluginSource> {
    PluginSource::from_str(spec).map_err(|e| anyhow!("config {key}: `{spec}`: {e}"))
}

/// Everything between the claim and the end: directory, plugins, transport, agent loop.
fn execute(
    config: &Config,
    layout: &Layout,
    db: &Db,
    row: &TaskRow,
    pid: u32,
    host: &str,
) -> anyhow::Result<Outcome> {
    let uuid = row.uuid.as_str();
    let dir = layout.task_dir(DirState::Running, uuid);
    // A resumed (or recovered) task brings its directory back from paused/; the loop then
    // continues from current.jsonl (it never re-adds the system prompt or the first user message).
    if !dir.exists() && layout.task_dir(DirState::Paused, uuid).is_dir() {
        layout.move_task_dir(uuid, DirState::Paused, DirState::Running)?;
    }
    if dir.is_dir() {
        // Whatever stopped the previous process, the files are made whole before any component
        // opens them (a no-op after a clean pause). Tool calls left unanswered by a pause stay:
        // the loop makes them.
        let report = crate::repair::repair_task_dir(&dir, false, &now_rfc3339())
            .context("repairing the task directory before resuming")?;
        for r in report.describe() {
            tracing::warn!(%uuid, "repair: {r}");
        }
        if let Some(n) = crate::task_state::mark_resumed(&dir, &now_rfc3339())? {
            db.set_resume_count(uuid, n)?;
            tracing::info!(%uuid, resume_count = n, "task resumed");
        }
    }
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the task directory {}", dir.display()))?;
    write_metadata_once(&dir, &metadata(config, row, pid, host))?;
    // Steps of earlier runs count against agent.max_steps: the loop's answered LLM calls are
    // the history's assistant messages that are not summaries (compressor calls do not count).
    let steps_done =
        crate::repair::history_stats(&dir.join(crate::repair::MESSAGES_FILE))?.agent_steps;

    // CTXHOST_CACHE_DIR lets several contexts trees (or test runs) share compiled components.
    let runtime = runtime_for(config, layout)?;

    let store_src = load_source("plugins.message_store", &config.plugins.message_store)?;
    let store_plugin = runtime
        .load(&store_src, PluginKind::MessageStore)
        .with_context(|| format!("plugins.message_store ({})", config.plugins.message_store))?;
    let mut store = runtime.message_store(&store_plugin, &dir)?;
    let stats = store.open()?;
    tracing::debug!(%uuid, history = stats.history_count, current = stats.current_count, "message store open");

    let format_spec = config.request_format();
    let format_src = load_source("plugins.request_format", format_spec)?;
    let format_plugin = runtime
        .load(&format_src, PluginKind::RequestFormat)
        .with_context(|| format!("plugins.request_format ({format_spec})"))?;
    let mut format = runtime.request_format(&format_plugin, &dir)?;

    let transport_cfg = transport_config(config)?;
    let transport = Transport::new(transport_cfg.clone());

    let mut compressor = match config.compressor() {
        None => None,
        Some(spec) => {
            let src = load_source("plugins.compressor", spec)?;
            let plugin = runtime
                .load(&src, PluginKind::Compressor)
                .with_context(|| format!("plugins.compressor ({spec})"))?;
            let llm = HostLlm::new(
                runtime.request_format(&format_plugin, &dir)?,
                Transport::new(transport_cfg),
                &dir,
                &config.llm.model,
                config.llm.temperature,
                Db::open(layout.root())?,
                uuid,
            );
            Some(runtime.compressor(&plugin, &dir, Box::new(llm))?)
        }
    };

    let mut tools: Box<dyn crate::agent::ToolRunner> = if config.mcp_servers.is_empty() {
        Box::new(NoTools::open(&dir)?)
    } else {
        Box::new(crate::tools::McpTools::start(
            &config.mcp_servers,
            &config.tools,
            &dir,
        )?)
    };
    let mut interrupts = || -> anyhow::Result<Option<Interrupt>> {
        let control = db.control(uuid)?.unwrap_or_default();
        Ok(if control.stop_requested {
            Some(Interrupt::Stop)
        } else if control.pause_requested {
            Some(Interrupt::Pause {
                reason: control.pause_reason,
            })
        } else {
            None
        })
    };
    let mut agent = Agent {
        config,
        db,
        store: &mut store,
        format: &mut format,
        compressor: compressor.as_mut(),
        transport: &transport,
        tools: tools.as_mut(),
        compaction_failures: 0,
        interrupts: Some(&mut interrupts),
    };
    agent.run(&TaskInput {
        uuid,
        prompt: &row.prompt,
        dir: &dir,
        steps_done: u32::try_from(steps_done).unwrap_or(u32::MAX),
    })
}

fn metadata(config: &Config, row: &TaskRow, pid: u32, host: &str) -> Metadata {
    Metadata {
        uuid: row.uuid.clone(),
        task_key: MetadataTaskKey {
            task_source: row.task_source.clone(),
            owner: row.owner.clone(),
            repo: row.repo.clone(),
            task_type: row.task_type.clone(),
            task_id: row.task_id.clone(),
        },
        created_at: row.created_at.clone(),
        process_id: pid,
        hostname: host.to_string(),
        config: MetadataConfig {
            llm_provider: config.llm.provider.to_string(),
            model: config.llm.model.clone(),
            context_length: config.llm.context_length,
            compression_threshold: config.context_storage.compression_threshold,
        },
        user: row.user.clone(),
    }
}
