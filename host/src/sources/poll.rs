//! One poll of a source: every open issue and pull/merge request carrying the source's
//! `label` becomes a queued task, unless a task already holds the item.
//!
//! Per item: skip it when a task holds it ([`Db::task_holding_item`]: queued, running,
//! paused, or ended with its result not yet published); read its comments (unless the
//! listing says there are none) and, for a GitHub pull request, its branches; build the
//! prompt ([`super::prompt`]); queue it ([`Db::queue_source_task`], one statement that a
//! concurrent poller cannot also win); move its labels to `processing`
//! ([`super::publish::Publisher::sync`]). A repository that fails (404, 401, still rate
//! limited) is reported and the others are polled.

use serde::Serialize;

use super::publish::Publisher;
use super::{Source, prompt};
use crate::config::Config;
use crate::db::{Db, NewTask};

/// A task a poll queued.
#[derive(Debug, Clone, Serialize)]
pub struct QueuedItem {
    /// The new task.
    pub uuid: String,
    /// `acme/app#42`.
    pub item: String,
    /// The item's page.
    pub url: Option<String>,
}

/// What one poll of one source did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PollReport {
    /// Tasks queued.
    pub queued: Vec<QueuedItem>,
    /// Labelled items that already have a task.
    pub already_held: usize,
    /// Errors, each naming the repository (a failed repository does not stop the others).
    pub errors: Vec<String>,
}

/// Poll every repository of `source` once (module docs), queueing with the provider and
/// model of `config`.
pub fn poll_source(
    source: &Source,
    db: &Db,
    config: &Config,
    publisher: &Publisher<'_>,
) -> PollReport {
    let mut report = PollReport::default();
    for repo in source.config.repo_paths(source.kind) {
        if let Err(e) = poll_repo(source, repo, db, config, publisher, &mut report) {
            let msg = source.forge.redact(&format!("{e:#}"));
            tracing::error!(forge = %source.kind, repo = %repo, "poll failed: {msg}");
            report.errors.push(msg);
        }
    }
    report
}

fn poll_repo(
    source: &Source,
    repo: &str,
    db: &Db,
    config: &Config,
    publisher: &Publisher<'_>,
    report: &mut PollReport,
) -> anyhow::Result<()> {
    let forge = source.forge.as_ref();
    let items = forge.labelled_items(repo, &source.config.label)?;
    tracing::debug!(forge = %source.kind, repo, items = items.len(), "labelled items");
    for mut item in items {
        // The item's page is shown in the prompt, stored and linked: only an http(s) URL.
        item.url = item
            .url
            .take()
            .filter(|u| crate::db::sources::is_web_url(u));
        let key = item.r.task_key();
        if let Some(holder) = db.task_holding_item(&key)? {
            tracing::debug!(item = %item.r.short(), task = %holder.uuid, status = %holder.status, "item already has a task");
            report.already_held += 1;
            continue;
        }
        let comments = if item.comment_count == Some(0) {
            Vec::new()
        } else {
            forge.comments(&item.r)?
        };
        forge.complete_item(&mut item)?;
        let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
        let task = NewTask {
            uuid: uuid.clone(),
            key,
            prompt: prompt::build(&item, &comments),
            user: Some(prompt::requester(&item, &comments).to_string()),
            llm_provider: config.llm.provider.to_string(),
            model: config.llm.model.clone(),
            context_length: config.llm.context_length,
            // A relabelled item's new task starts from the earlier task's context (issue 12).
            no_inherit: false,
            // `workspace: true`: the task's own worktree, made when its process starts
            // ([`super::workspace::prepare`]).
            workspace: source.config.workspace.then(|| {
                let p = publisher.layout().task_workspace(&uuid);
                std::path::absolute(&p).unwrap_or(p).display().to_string()
            }),
        };
        if !db.queue_source_task(&task)? {
            tracing::debug!(item = %item.r.short(), "another poller queued the item first");
            report.already_held += 1;
            continue;
        }
        tracing::info!(%uuid, item = %item.r.short(), "task queued from {}", item.r.describe_kind());
        if let Some(url) = &item.url
            && let Err(e) = db.record_item_url(&uuid, url)
        {
            tracing::warn!(%uuid, "recording the page of {} failed: {e:#}", item.r.short());
        }
        report.queued.push(QueuedItem {
            uuid: uuid.clone(),
            item: item.r.short(),
            url: item.url.clone(),
        });
        // label -> processing now; a failure here is retried by the next publishing pass.
        if let Some(held) = db.held_task(&uuid)?
            && let Err(e) = publisher.sync(&held, Some(&item.labels))
        {
            tracing::warn!(%uuid, "moving the labels of {} failed (retried later): {e:#}", item.r.short());
        }
    }
    Ok(())
}
