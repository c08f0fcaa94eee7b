//! [`TaskContext`]: one task's context, as its process holds it (the spec's
//! `TaskContextManager`). Made from a claimed row; owns the task directory and everything the
//! agent loop reads and writes in it:
//!
//! - the message store component (messages.jsonl, current.jsonl);
//! - a [`SummaryStore`] (summaries.jsonl, read only), a [`ToolStore`] (the only writer of
//!   tools.jsonl and tool-results/), a [`PlanningStore`] slot (planning/), a [`CallLog`]
//!   (llm_calls.jsonl: each LLM call's context size, each compression);
//! - the LLM transport and a [`UsageMeter`] (the row's counters);
//! - its status, changed only through [`crate::lifecycle`]: [`TaskContext::update_status`],
//!   [`TaskContext::complete`], [`TaskContext::fail`], [`TaskContext::pause`].
//!
//! Also here: [`metadata`] (metadata.json); [`state`] (task_state.json) is the lifecycle's.

pub mod calls;
pub mod history_counts;
pub mod metadata;
pub mod planning;
pub use crate::lifecycle::task_state as state;
pub mod summaries;
pub mod tools;
pub mod usage;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ctxhost_format::ToolCall;
use ctxhost_format::files::MESSAGES;

use crate::config::Config;
use crate::db::{Db, Status, TaskRow, now_rfc3339};
use crate::invariants::queries;
use crate::layout::{DirState, Layout};
use crate::lifecycle::{self, Transition};
use crate::llm::Transport;
use crate::plugins::PluginSet;
use crate::runtime::MessageStore;

pub use calls::{CallLog, CallRecord};
pub use history_counts::HistoryCounts;
pub use metadata::{Metadata, MetadataConfig, MetadataTaskKey, write_metadata_once};
pub use planning::PlanningStore;
pub use summaries::SummaryStore;
pub use tools::{RecordedCall, ToolStore};
pub use usage::{UsageDelta, UsageMeter};

/// What the task's owner asked for, as seen at a safe point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interrupt {
    /// Pause (`ctxhost pause`), with its reason.
    Pause {
        /// The `--reason` given.
        reason: Option<String>,
    },
    /// Stop (`ctxhost stop`).
    Stop,
}

/// The context of one running task, owned by its process.
pub struct TaskContext {
    row: TaskRow,
    pid: u32,
    layout: Layout,
    dir: PathBuf,
    db: Db,
    steps_done: u32,
    history: HistoryCounts,
    store: MessageStore,
    summaries: SummaryStore,
    tools: ToolStore,
    planning: Option<PlanningStore>,
    calls: CallLog,
    transport: Transport,
    usage: UsageMeter,
}

impl TaskContext {
    /// The context of `row`, claimed by this process `pid` on `host` (its directory is in
    /// `running/`, put there by the claim). Repairs the directory if an earlier process left it
    /// (a no-op after a clean pause; tool calls left unanswered by a pause stay, the loop makes
    /// them), counts a resume, writes metadata.json once, and opens the message store.
    pub fn open(
        config: &Config,
        layout: &Layout,
        row: TaskRow,
        pid: u32,
        host: &str,
        plugins: &PluginSet,
    ) -> anyhow::Result<TaskContext> {
        let uuid = row.uuid.clone();
        let dir = layout.task_dir(DirState::Running, &uuid);
        if !dir.is_dir() {
            bail!(
                "the task directory {} does not exist (the claim creates it)",
                dir.display()
            );
        }
        let db = Db::open(layout.root())?;
        let report = crate::repair::repair_task_dir(&dir, false, &now_rfc3339())
            .context("repairing the task directory before resuming")?;
        for r in report.describe() {
            tracing::warn!(%uuid, "repair: {r}");
        }
        if let Some(n) = state::mark_resumed(&dir, &now_rfc3339())? {
            db.set_resume_count(&uuid, n)?;
            tracing::info!(%uuid, resume_count = n, "task resumed");
        }
        write_metadata_once(&dir, &metadata(config, &row, pid, host))?;
        // Steps of earlier runs count against agent.max_steps: the loop's answered LLM calls
        // are the history's assistant messages that are not summaries.
        // (Counted from history_checkpoint.json on: only the lines appended since are read.)
        let history = HistoryCounts::open(&dir)?;
        let steps_done = history.stats().agent_steps;

        let mut store = plugins
            .message_store(&dir)
            .with_context(|| format!("plugins.message_store ({})", plugins.spec_of_store()))?;
        let stats = store.open()?;
        tracing::debug!(%uuid, history = stats.history_count, current = stats.current_count, "message store open");
        Ok(TaskContext {
            pid,
            layout: layout.clone(),
            steps_done: u32::try_from(steps_done).unwrap_or(u32::MAX),
            history,
            store,
            summaries: SummaryStore::new(&dir),
            tools: ToolStore::open(&dir, config.tools.max_tool_output_tokens)?,
            planning: PlanningStore::existing(&dir),
            calls: CallLog::new(&dir),
            transport: Transport::new(config.transport_config()?),
            usage: UsageMeter::open(layout, &uuid)?,
            db,
            dir,
            row,
        })
    }

    /// The task's UUID.
    pub fn uuid(&self) -> &str {
        &self.row.uuid
    }

    /// The user message that starts the task.
    pub fn prompt(&self) -> &str {
        &self.row.prompt
    }

    /// The task directory (`contexts/running/{uuid}/`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Agent steps (LLM calls of the loop that got an answer) made by earlier processes of this
    /// task; they count against `agent.max_steps`.
    pub fn steps_done(&self) -> u32 {
        self.steps_done
    }

    /// The message store (opened).
    pub fn store(&mut self) -> &mut MessageStore {
        &mut self.store
    }

    /// The summaries of the task.
    pub fn summaries(&self) -> &SummaryStore {
        &self.summaries
    }

    /// The record of the task's tool calls.
    pub fn tools(&mut self) -> &mut ToolStore {
        &mut self.tools
    }

    /// The planning history, when the task has one.
    pub fn planning(&self) -> Option<&PlanningStore> {
        self.planning.as_ref()
    }

    /// The record of the task's LLM calls and compressions (llm_calls.jsonl).
    pub fn calls(&self) -> &CallLog {
        &self.calls
    }

    /// The LLM transport.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The message store's current-context file (relative to the task directory).
    pub fn current_file(&mut self) -> anyhow::Result<String> {
        self.store
            .current_context_file()
            .context("message store: current-context-file")
    }

    /// The final answer the context already ends with (a process that died after appending it).
    pub fn final_answer(&mut self) -> anyhow::Result<Option<String>> {
        let current = self.current_file()?;
        let current = self.dir.join(current);
        queries::final_answer_in(&current)
    }

    /// Tool calls at the end of the context still waiting for a result (a task paused between
    /// tool calls).
    pub fn pending_tool_calls(&mut self) -> anyhow::Result<Vec<ToolCall>> {
        let current = self.current_file()?;
        let current = self.dir.join(current);
        queries::pending_tool_calls_in(&current)
    }

    /// fsync the files appended to since the last step boundary (messages.jsonl, the
    /// current-context file, tools.jsonl): called before each LLM call.
    pub fn sync(&mut self) -> anyhow::Result<()> {
        let current = self.current_file()?;
        crate::layout::sync_file(&self.dir.join(MESSAGES))?;
        crate::layout::sync_file(&self.dir.join(current))?;
        self.tools.sync()?;
        self.checkpoint_history(false);
        Ok(())
    }

    /// Bring the history checkpoint up to date ([`HistoryCounts::advance`]); a failure only
    /// costs the next resume a full count, so it is logged.
    fn checkpoint_history(&mut self, force: bool) {
        if let Err(e) = self.history.advance(force) {
            tracing::warn!(uuid = %self.row.uuid, "history checkpoint not written: {e:#}");
        }
    }

    /// Add `delta` to the task's counters in its row.
    pub fn update_statistics(&self, delta: UsageDelta) -> anyhow::Result<()> {
        Ok(self.usage.add(delta)?)
    }

    /// A pause or stop requested from outside, read from the row at a safe point.
    pub fn interrupt(&self) -> anyhow::Result<Option<Interrupt>> {
        let control = self.db.control(self.uuid())?.unwrap_or_default();
        Ok(if control.stop_requested {
            Some(Interrupt::Stop)
        } else if control.pause_requested {
            Some(Interrupt::Pause {
                reason: control.pause_reason,
            })
        } else {
            None
        })
    }

    /// End the task with the final `status` (`Completed`, `Failed` with `error`, `Stopped`):
    /// the context is closed (components dropped), then the lifecycle writes the row and moves
    /// the directory to `completed/`. Returns the status.
    pub fn update_status(self, status: Status, error: Option<&str>) -> anyhow::Result<Status> {
        if !status.is_final() {
            bail!("update_status: {status} is not a final status (pause with `pause`)");
        }
        let (db, layout, uuid, pid) = self.close();
        finish(&db, &layout, &uuid, pid, status, error)
    }

    /// The task completed with a final answer.
    pub fn complete(self) -> anyhow::Result<Status> {
        self.update_status(Status::Completed, None)
    }

    /// The task failed with `error`.
    pub fn fail(self, error: &str) -> anyhow::Result<Status> {
        self.update_status(Status::Failed, Some(error))
    }

    /// Honour a pause at a safe point: the context is closed (components dropped), then the
    /// lifecycle writes task_state.json, the row (`paused`) and moves the directory to
    /// `paused/`.
    pub fn pause(mut self) -> anyhow::Result<Status> {
        self.checkpoint_history(true);
        let (db, layout, uuid, pid) = self.close();
        if lifecycle::apply(&db, &layout, &uuid, &Transition::Pause { pid })?.is_none() {
            tracing::warn!(%uuid, pid, "the task's row was no longer running under this process when it paused");
        }
        Ok(Status::Paused)
    }

    /// Drop the components and files; keep what a status change needs.
    fn close(self) -> (Db, Layout, String, u32) {
        (self.db, self.layout, self.row.uuid, self.pid)
    }
}

/// End task `uuid`, run by this process `pid`, with the final `status` through the lifecycle.
/// Used by [`TaskContext::update_status`], and by the task process when no context could be
/// made (or a panic lost it).
pub fn finish(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    pid: u32,
    status: Status,
    error: Option<&str>,
) -> anyhow::Result<Status> {
    let t = Transition::Finish { pid, status, error };
    if lifecycle::apply(db, layout, uuid, &t)?.is_none() {
        tracing::warn!(%uuid, pid, %status, "the task's row was no longer running under this process when it ended");
    }
    Ok(status)
}

/// metadata.json of `row`, first run by `pid` on `host` with `config`.
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
