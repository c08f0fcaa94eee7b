//! [`TaskContext`]: one task's context, as its process holds it (the spec's
//! `TaskContextManager`). Made from a claimed row; owns the task directory, as a [`TaskDir`]
//! handle through which every host read and write there goes, and everything the agent loop
//! reads and writes in it:
//!
//! - the message store component (messages.jsonl, current.jsonl);
//! - a [`SummaryStore`] (summaries.jsonl, read only), a [`ToolStore`] (the only writer of
//!   tools.jsonl and tool-results/), a [`PlanningStore`] (the only writer of
//!   planning/{uuid}.jsonl, shared with the strategy's `planning` import), a [`CallLog`]
//!   (llm_calls.jsonl: each LLM call's context size, each compression);
//! - the LLM transport and a [`UsageMeter`] (the row's counters);
//! - its status, changed only through [`crate::lifecycle`]: [`TaskContext::update_status`],
//!   [`TaskContext::complete`], [`TaskContext::fail`], [`TaskContext::pause`].
//!
//! Also here: [`metadata`] (metadata.json); [`inheritance`] (what a new task takes over from
//! an earlier completed task with the same key); [`state`] (task_state.json) is the lifecycle's.

pub mod calls;
pub mod cost;
pub mod history_counts;
pub mod inheritance;
pub mod metadata;
pub mod planning;
pub use crate::lifecycle::task_state as state;
pub mod summaries;
pub mod tools;
pub mod usage;

use anyhow::{Context, bail};
use ctxhost_format::files::{CURRENT, MESSAGES};
use ctxhost_format::{ChatMessage, ToolCall};

use crate::config::Config;
use crate::db::{Db, SharedDb, Status, TaskRow, now_rfc3339};
use crate::invariants::context_check::{self, ContextCheck};
use crate::invariants::ids::make_call_ids_unique;
use crate::invariants::pairing::PairingFix;
use crate::invariants::{check_context_file, queries};
use crate::layout::{DirState, Layout};
use crate::lifecycle::{self, Owner, Transition};
use crate::llm::Transport;
use crate::plugins::PluginSet;
use crate::runtime::MessageStore;
use crate::task_dir::TaskDir;
use crate::untrusted;

pub use crate::interrupt::InterruptProbe;
pub use calls::{CallLog, CallRecord};
pub use history_counts::HistoryCounts;
pub use inheritance::Inheritance;
pub use metadata::{
    InheritedFrom, Metadata, MetadataConfig, MetadataTaskKey, SkippedPredecessor, read_metadata,
    write_metadata_once,
};
pub use planning::{PlanningStore, SharedPlanning};
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
    worker_id: String,
    layout: Layout,
    dir: TaskDir,
    /// `context_storage.max_task_dir_mib` in bytes.
    max_dir_bytes: u64,
    db: SharedDb,
    steps_done: u32,
    /// messages.jsonl's counts and tool-call ids, kept up to date at step boundaries.
    history: HistoryCounts,
    history_ends_with_summary: bool,
    /// The invariant check of current.jsonl up to what was last checked.
    context: ContextCheck,
    /// Bytes of current.jsonl covered by the saved context_checkpoint.json.
    context_saved: u64,
    store: MessageStore,
    summaries: SummaryStore,
    tools: ToolStore,
    planning: SharedPlanning,
    inherited: Option<String>,
    calls: CallLog,
    transport: Transport,
    usage: UsageMeter,
    /// The plugins, to open the message store again after the host repaired the files.
    plugins: PluginSet,
    /// The task's objects in the bucket (`context_storage.remote`), synced at step boundaries.
    remote: Option<crate::remote::TaskSync>,
}

impl TaskContext {
    /// The context of `row`, claimed by this process `pid` on `host` (its directory is in
    /// `running/`, put there by the claim), on the process's connection `db`. Repairs the
    /// directory if an earlier process left it (a no-op after a clean pause; tool calls left
    /// unanswered by a pause stay, the loop makes them), counts a resume, writes metadata.json
    /// once, and opens the message store.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        config: &Config,
        layout: &Layout,
        db: SharedDb,
        row: TaskRow,
        pid: u32,
        host: &str,
        plugins: &PluginSet,
    ) -> anyhow::Result<TaskContext> {
        let uuid = row.uuid.clone();
        let path = layout.task_dir(DirState::Running, &uuid);
        if !path.is_dir() {
            bail!(
                "the task directory {} does not exist (the claim creates it)",
                path.display()
            );
        }
        let Some(worker_id) = row.worker_id.clone() else {
            bail!("task {uuid}: the claimed row records no worker id");
        };
        let dir = TaskDir::open(&path)
            .with_context(|| format!("cannot open the task directory {}", path.display()))?;
        // The pairing check reads current.jsonl from context_checkpoint.json on (only what was
        // appended since it was saved).
        let mut context = ContextCheck::load(&dir);
        let mut context_saved = context.checked_bytes();
        let report = crate::repair::repair_task_dir_from(&dir, false, &now_rfc3339(), &mut context)
            .context("repairing the task directory before resuming")?;
        // Saved again when the check read lines (no checkpoint, a stale one, or appends).
        if context.checked_bytes() != context_saved {
            match context.save(&dir) {
                Ok(()) => context_saved = context.checked_bytes(),
                Err(e) => tracing::warn!(%uuid, "context checkpoint not written: {e:#}"),
            }
        }
        for r in report.describe() {
            tracing::warn!(%uuid, "repair: {r}");
        }
        if let Some(n) = state::mark_resumed(&dir, &now_rfc3339())? {
            db.with(|db| db.set_resume_count(&uuid, n))?;
            tracing::info!(%uuid, resume_count = n, "task resumed");
        }
        // Steps of earlier runs count against agent.max_steps: the loop's answered LLM calls
        // are the history's assistant messages that are not summaries.
        // Counted from history_checkpoint.json on: only the lines appended since are read, with
        // the id of every tool call of the conversation (kept unique, `make_call_ids_unique`).
        let history = HistoryCounts::open(&dir)?;
        let stats = history.stats();
        // A task whose context is still empty takes over an earlier task's final state (the
        // one metadata.json names, when an earlier process of this task chose it already).
        let inheritance = if stats.lines > 0 {
            Inheritance::default()
        } else {
            match read_metadata(&dir)? {
                Some(meta) => meta
                    .inherited_from
                    .map(|from| db.with(|d| inheritance::rebuild(config, layout, d, &from)))
                    .unwrap_or_default(),
                None => db.with(|d| inheritance::find(config, layout, d, &row))?,
            }
        };
        if let Some(from) = &inheritance.from {
            tracing::info!(%uuid, predecessor = %from.uuid, tokens = from.tokens, parts = ?from.parts, "inheriting the final state of an earlier task with the same key");
        }
        let mut meta = metadata(config, &row, pid, host);
        meta.inherited_from = inheritance.from.clone();
        meta.inheritance_skipped = inheritance.skipped.clone();
        write_metadata_once(&dir, &meta)?;
        let planning = PlanningStore::open(&dir, &uuid)?;

        let mut store = plugins
            .message_store(dir.path())
            .with_context(|| format!("plugins.message_store ({})", plugins.spec_of_store()))?;
        let opened = store.open()?;
        tracing::debug!(%uuid, history = opened.history_count, current = opened.current_count, "message store open");
        Ok(TaskContext {
            pid,
            worker_id,
            layout: layout.clone(),
            steps_done: u32::try_from(stats.agent_steps).unwrap_or(u32::MAX),
            history_ends_with_summary: stats.ends_with_summary,
            history,
            context,
            context_saved,
            store,
            summaries: SummaryStore::new(&dir),
            tools: ToolStore::open(&dir, config.tool_output_cap())?,
            planning: SharedPlanning::new(planning),
            inherited: inheritance.text,
            calls: CallLog::new(&dir),
            transport: Transport::new(config.transport_config()?)
                .with_wait_note(crate::remote::model_wait_note_path(layout, &uuid)?),
            usage: UsageMeter::new(db.clone(), &uuid),
            plugins: plugins.clone(),
            max_dir_bytes: config.context_storage.max_task_dir_bytes(),
            remote: None,
            db,
            dir,
            row,
        })
    }

    /// The context inherited from an earlier task with the same key, to add after the system
    /// prompt of a new context ([`inheritance`]); `None` for a resumed task or when nothing is
    /// inherited.
    pub fn inherited(&self) -> Option<&str> {
        self.inherited.as_deref()
    }

    /// Make sure the context about to be sent keeps every invariant
    /// ([`crate::invariants`]): a repairable break (a duplicate or orphan tool result, a call
    /// without result, arguments that are not JSON) is repaired in the files and recorded in
    /// messages.jsonl ([`crate::repair::pairing::repair_context`]), and the message store opened
    /// again on them; returns the repairs. Errors: a break that cannot be repaired, naming the
    /// file and line — nothing is sent then.
    pub fn ensure_sendable(&mut self) -> anyhow::Result<Vec<PairingFix>> {
        let current = self.current_file()?;
        if current != CURRENT {
            // A store with its own context file: check it, repair nothing.
            check_context_file(&self.dir, &current, false).map_err(|e| {
                anyhow::anyhow!(
                    "the context about to be sent breaks an invariant: {e}; nothing was sent"
                )
            })?;
            return Ok(Vec::new());
        }
        match crate::repair::pairing::needs_repair_from(&self.dir, false, &mut self.context) {
            Ok(false) => Ok(Vec::new()),
            Ok(true) => {
                let fixes = crate::repair::pairing::repair_context_from(
                    &self.dir,
                    &now_rfc3339(),
                    false,
                    &mut self.context,
                )
                .context("repairing the context before sending it")?;
                self.reopen_store()?;
                Ok(fixes)
            }
            Err(e) => bail!(
                "the context about to be sent breaks an invariant that cannot be repaired: {e}; nothing was sent (see `ctxhost fsck`)"
            ),
        }
    }

    /// Drop the message store instance and open a new one on the files (after the host changed
    /// them).
    fn reopen_store(&mut self) -> anyhow::Result<()> {
        let mut store = self
            .plugins
            .message_store(self.dir.path())
            .with_context(|| format!("plugins.message_store ({})", self.plugins.spec_of_store()))?;
        store.open()?;
        self.store = store;
        Ok(())
    }

    /// Give the tool calls of `message` (a reply about to be appended) ids unused in the
    /// conversation ([`make_call_ids_unique`]); returns the `(old, new)` ids replaced.
    pub fn make_call_ids_unique(
        &mut self,
        message: &mut ChatMessage,
    ) -> anyhow::Result<Vec<(String, String)>> {
        let seq = self
            .store
            .count_messages()
            .context("message store: count-messages")?
            + 1;
        Ok(make_call_ids_unique(
            message,
            seq,
            self.history.call_ids_mut(),
        ))
    }

    /// The task's UUID.
    pub fn uuid(&self) -> &str {
        &self.row.uuid
    }

    /// The user message that starts the task.
    pub fn prompt(&self) -> &str {
        &self.row.prompt
    }

    /// The task directory (`contexts/running/{uuid}/`): the handle every host access there
    /// goes through.
    pub fn dir(&self) -> &TaskDir {
        &self.dir
    }

    /// Agent steps (LLM calls of the loop that got an answer) made by earlier processes of this
    /// task; they count against `agent.max_steps`.
    pub fn steps_done(&self) -> u32 {
        self.steps_done
    }

    /// messages.jsonl ended with a summary when the task was opened: a compression's new
    /// context was installed, and nothing was appended after it (the plan was not stated again).
    pub fn history_ends_with_summary(&self) -> bool {
        self.history_ends_with_summary
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

    /// The record of the task's tool calls, to read.
    pub fn tools_ref(&self) -> &ToolStore {
        &self.tools
    }

    /// The planning history (empty for a task whose strategy never planned).
    pub fn planning(&self) -> &SharedPlanning {
        &self.planning
    }

    /// The record of the task's LLM calls and compressions (llm_calls.jsonl).
    pub fn calls(&self) -> &CallLog {
        &self.calls
    }

    /// The LLM transport.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The message store's current-context file, relative to the task directory, checked like
    /// every path a component returns ([`untrusted::component_path`]: a plain relative path
    /// inside the task directory, not through a link).
    pub fn current_file(&mut self) -> anyhow::Result<String> {
        let name = self
            .store
            .current_context_file()
            .context("message store: current-context-file")?;
        untrusted::component_path(&self.dir, &name).with_context(|| {
            format!(
                "message store {}: current-context-file returned a path the host refuses",
                self.store.component()
            )
        })
    }

    /// The final answer the context already ends with (a process that died after appending it).
    pub fn final_answer(&mut self) -> anyhow::Result<Option<String>> {
        let current = self.current_file()?;
        queries::final_answer_in(&self.dir, &current)
    }

    /// Tool calls at the end of the context still waiting for a result (a task paused between
    /// tool calls).
    pub fn pending_tool_calls(&mut self) -> anyhow::Result<Vec<ToolCall>> {
        let current = self.current_file()?;
        queries::pending_tool_calls_in(&self.dir, &current)
    }

    /// The step boundary, before each LLM call: fsync the files appended to since the last
    /// one (messages.jsonl, the current-context file, tools.jsonl), check that messages.jsonl
    /// still starts with the history recorded so far ([`TaskContext::verify_history`]), and
    /// check the task directory against its byte budget (what the host wrote counts too).
    pub fn sync(&mut self) -> anyhow::Result<()> {
        let current = self.current_file()?;
        for name in [MESSAGES, current.as_str()] {
            self.dir
                .sync_file(name)
                .with_context(|| format!("cannot fsync {}", self.dir.show(name)))?;
        }
        self.tools.sync()?;
        self.checkpoint(false)?;
        self.check_budget()?;
        self.sync_remote("step");
        Ok(())
    }

    /// Keep the task's directory in the bucket from now on ([`crate::remote::TaskSync`], made
    /// by the claim).
    pub fn set_remote(&mut self, remote: crate::remote::TaskSync) {
        self.remote = Some(remote);
    }

    /// Bring the bucket level with the directory (`context_storage.remote`), at a step
    /// boundary or before the task pauses or ends (`when`). A store that cannot be reached
    /// costs only this sync (logged; the next one uploads what this one did not); a manifest
    /// claimed by another host means this process lost the task: it exits at once
    /// ([`crate::lease::EXIT_LEASE_LOST`]), writing nothing more.
    fn sync_remote(&mut self, when: &str) {
        let Some(remote) = self.remote.as_mut() else {
            return;
        };
        let synced = if when == "end" && crate::failpoint::is_set("remote:end-sync") {
            Err(anyhow::anyhow!("failpoint remote:end-sync"))
        } else {
            remote.sync(&self.dir)
        };
        match synced {
            Ok(r) => tracing::debug!(uuid = %self.row.uuid, when, written = r.written,
                objects = r.objects, data_bytes = r.data_bytes, manifest_bytes = r.manifest_bytes,
                "synced to the bucket"),
            Err(e) if e.is::<crate::remote::Fenced>() => {
                tracing::error!(uuid = %self.row.uuid, "{e:#}");
                std::process::exit(crate::lease::EXIT_LEASE_LOST);
            }
            // The task's last sync: nothing syncs it again, so the bucket stays behind this
            // host's copy until `fsck --repair` here uploads it.
            Err(e) if when == "end" => {
                tracing::error!(uuid = %self.row.uuid, "syncing the finished task's directory to the bucket failed: {e:#}; \
                    the bucket's copy is behind this host's, other hosts read the older one; \
                    run `ctxhost fsck --repair` on this host to upload it")
            }
            Err(e) => {
                tracing::warn!(uuid = %self.row.uuid, when, "syncing the task directory to the bucket failed: {e:#}")
            }
        }
    }

    /// That messages.jsonl still starts with every line counted so far (and count what was
    /// appended): the history is append-only, so a history replaced (a hard link or a rename
    /// over it), cut or rewritten by a component is an error naming the file
    /// ([`history_counts::HistoryChanged`]). Run at every step boundary and before the task
    /// ends, pauses or stops.
    pub fn verify_history(&mut self) -> anyhow::Result<()> {
        self.history.advance(false)
    }

    /// Fail when the task directory holds more than `context_storage.max_task_dir_mib`.
    pub fn check_budget(&self) -> anyhow::Result<()> {
        let used = self.dir.disk_usage().with_context(|| {
            format!(
                "cannot measure the task directory {}",
                self.dir.path().display()
            )
        })?;
        if used > self.max_dir_bytes {
            bail!(
                "the task directory {} holds {} bytes, over its budget of {} bytes (context_storage.max_task_dir_mib)",
                self.dir.path().display(),
                used,
                self.max_dir_bytes
            );
        }
        Ok(())
    }

    /// A meter of the task's counters, for the compressor's `llm` import.
    pub fn usage_meter(&self) -> UsageMeter {
        self.usage.clone()
    }

    /// Bring the checkpoints up to date: the history's ([`HistoryCounts::advance`]) and the
    /// context check's ([`ContextCheck::save`]), each when its file grew by 1 MiB since it was
    /// last saved (`force`: whenever it grew). A failure to write one only costs the next
    /// resume a full read, so it is logged. Errors: the history changed
    /// ([`TaskContext::verify_history`]).
    fn checkpoint(&mut self, force: bool) -> anyhow::Result<()> {
        self.history.advance(force)?;
        let checked = self.context.checked_bytes();
        if checked != self.context_saved
            && (force || checked >= self.context_saved + context_check::CHECKPOINT_EVERY)
        {
            match self.context.save(&self.dir) {
                Ok(()) => self.context_saved = checked,
                Err(e) => {
                    tracing::warn!(uuid = %self.row.uuid, "context checkpoint not written: {e:#}")
                }
            }
        }
        Ok(())
    }

    /// Add `delta` to the task's counters in its row.
    pub fn update_statistics(&self, delta: UsageDelta) -> anyhow::Result<()> {
        Ok(self.usage.add(delta)?)
    }

    /// [`TaskContext::interrupt`] as a probe a running call can hold (the `llm` import and
    /// the hooks of a compressor or strategy, an MCP tool call): a pause or stop was
    /// requested (a stop wins); a row that cannot be read counts as no request (logged).
    pub fn interrupt_probe(&self) -> InterruptProbe {
        use crate::interrupt::Request;
        let (db, uuid) = (self.db.clone(), self.uuid().to_string());
        InterruptProbe::new(move || match db.with(|db| db.control(&uuid)) {
            Ok(Some(c)) if c.stop_requested => Request::Stop,
            Ok(Some(c)) if c.pause_requested => Request::Pause,
            Ok(_) => Request::None,
            Err(e) => {
                tracing::warn!(%uuid, "cannot read the task's pause/stop requests during a running call: {e:#}");
                Request::None
            }
        })
    }

    /// A pause or stop requested from outside, read from the row at a safe point.
    pub fn interrupt(&self) -> anyhow::Result<Option<Interrupt>> {
        let control = self
            .db
            .with(|db| db.control(self.uuid()))?
            .unwrap_or_default();
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
        let mut this = self;
        this.sync_remote("end");
        let (db, layout, uuid, pid, worker_id) = this.close();
        let owner = Owner {
            pid,
            worker_id: &worker_id,
        };
        db.with(|db| finish(db, &layout, &uuid, owner, status, error))
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
        // The history was verified by the caller ([`TaskContext::verify_history`]).
        if let Err(e) = self.checkpoint(true) {
            tracing::warn!(uuid = %self.row.uuid, "{e:#}");
        }
        self.sync_remote("pause");
        let remote = self.remote.take();
        let (db, layout, uuid, pid, worker_id) = self.close();
        let owner = Owner {
            pid,
            worker_id: &worker_id,
        };
        if db
            .with(|db| lifecycle::apply(db, &layout, &uuid, &Transition::Pause { owner }))?
            .is_none()
        {
            tracing::warn!(%uuid, pid, "the task's row was no longer running under this process when it paused");
        } else if let Some(mut remote) = remote {
            // task_state.json, written by the pause, goes up too (no one can have claimed the
            // task since: it is paused until resumed).
            let paused = TaskDir::open(&layout.task_dir(crate::layout::DirState::Paused, &uuid));
            match paused
                .map_err(anyhow::Error::from)
                .and_then(|d| remote.sync(&d))
            {
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(%uuid, "syncing the paused task's directory to the bucket failed: {e:#}")
                }
            }
        }
        Ok(Status::Paused)
    }

    /// Drop the components and files; keep what a status change needs.
    fn close(self) -> (SharedDb, Layout, String, u32, String) {
        (
            self.db,
            self.layout,
            self.row.uuid,
            self.pid,
            self.worker_id,
        )
    }
}

/// End task `uuid`, run by this process (`owner`), with the final `status` through the
/// lifecycle. Used by [`TaskContext::update_status`], and by the task process when no context
/// could be made (or a panic lost it). The row's statement waits for an unreachable database
/// like every statement of a task process ([`crate::db::Patience::Unbounded`]).
pub fn finish(
    db: &Db,
    layout: &Layout,
    uuid: &str,
    owner: Owner<'_>,
    status: Status,
    error: Option<&str>,
) -> anyhow::Result<Status> {
    let t = Transition::Finish {
        owner,
        status,
        error,
    };
    if lifecycle::apply(db, layout, uuid, &t)?.is_none() {
        tracing::warn!(%uuid, pid = owner.pid, %status, "the task's row was no longer running under this process when it ended (its lease was taken over)");
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
        inherited_from: None,
        inheritance_skipped: Vec::new(),
        // The task's own (`submit --workspace`, `ask`), else the config's.
        workspace: row
            .workspace
            .as_ref()
            .map(std::path::PathBuf::from)
            .or_else(|| config.workspace.clone())
            .filter(|_| config.tools.builtin)
            .map(|w| std::path::absolute(&w).unwrap_or(w).display().to_string()),
    }
}
