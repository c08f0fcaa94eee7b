//! `submit`: queue a task.

use crate::config::Config;
use crate::db::{NewTask, TaskKey, TaskRow};
use crate::layout::Layout;

/// A task to queue, validated by the caller.
#[derive(Debug, Clone)]
pub struct Submission {
    /// The user message that starts the task (non-empty).
    pub prompt: String,
    /// Where it comes from.
    pub key: TaskKey,
    /// Who submits it.
    pub user: Option<String>,
    /// Do not start from an earlier task with the same key (`--no-inherit`).
    pub no_inherit: bool,
    /// The directory the built-in tools work on (absolute, existing: checked by the caller);
    /// `None`: the config's `workspace` when the task runs.
    pub workspace: Option<std::path::PathBuf>,
}

/// Queue `task` in the tree of `layout` (created if missing) with a new UUID and `config`'s
/// provider, model and context length; returns its row.
pub fn submit(config: &Config, layout: &Layout, task: Submission) -> anyhow::Result<TaskRow> {
    layout.ensure()?;
    let db = super::open_store(config, layout)?;
    let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
    db.insert_queued(&NewTask {
        uuid: uuid.clone(),
        key: task.key,
        prompt: task.prompt,
        user: task.user,
        llm_provider: config.llm.provider.to_string(),
        model: config.llm.model.clone(),
        context_length: config.llm.context_length,
        no_inherit: task.no_inherit,
        workspace: task.workspace.map(|w| w.display().to_string()),
    })?;
    tracing::debug!(%uuid, "task queued");
    db.get(&uuid)?
        .ok_or_else(|| anyhow::anyhow!("task {uuid} vanished after insert"))
}
