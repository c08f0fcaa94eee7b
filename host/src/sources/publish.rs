//! Publishing a polled task's status to its item: labels while it runs, and once it ends one
//! comment with the final answer (or the error) — exactly once.
//!
//! The publisher is a reconciler over the task store, not a hook in the task process: it
//! reads what a task's row says (a status is only ever changed by [`crate::lifecycle`]) and
//! what was already published (`publications`, [`crate::db::sources`]), and does what is
//! missing. A pass ([`Publisher::sweep`]) reads both in one query that lists only the tasks
//! with something to do ([`Db::publishing_due`]): a pass with nothing to do is that query. The worker runs it continuously (and right after a task process exits),
//! `ctxhost poll` before every poll, `ctxhost run --once` once more at its end; any of them,
//! on any host, may crash at any point and another picks up where it stopped.
//!
//! # Exactly one result comment
//! For one task ([`Publisher::sync`]):
//! 1. **Lease.** Only the holder of the task's publishing lease acts. Taking it is one
//!    conditional upsert (free, expired, already ours, or held by a process of this host that
//!    is dead) that returns the publication as it is under the new lease; every later write
//!    is conditional on still holding it. Lease expiries and retry times are computed and
//!    compared on the database server's clock, never a host's, so publishers on hosts whose
//!    clocks disagree agree on them.
//! 2. **Intent before effect.** `comment_state` goes `none` → `posting` (committed) before the
//!    request is sent. So a comment can only exist on the item if the row says `posting` or
//!    `posted`.
//! 3. **Look before posting again.** Every comment carries a hidden marker with the task's
//!    UUID ([`result_marker`]). In `posting`, the holder first reads the item's comments: a
//!    comment with the marker is the one an earlier attempt posted (it crashed, or the request
//!    failed after it may have reached the forge): it is recorded, not posted again. Only when
//!    none exists is it posted.
//! 4. **Record.** `posting` → `posted` with the comment's id and URL. Then the final labels,
//!    then the task lets go of its item (`source_item` = NULL).
//!
//! A request the forge refused (a 4xx, a rate limit: not processed) puts `posting` back to
//! `none`, so `posting` after a failed attempt always means "the comment may exist".
//!
//! Crash cases: before 2 — nothing was posted, the next holder posts. Between 2 and the
//! request — `posting`, no marker on the item: the next holder posts (nothing lost). Between
//! the request and 4 — `posting`, the marker is on the item: the next holder records it
//! (nothing doubled). After 4 — `posted`: nothing more is posted. A request whose answer was
//! lost (timeout, 5xx) is not repeated by the client ([`super::http::Repeat::Once`]); it is
//! a failed attempt, retried later through step 3. Two publishers at once: the lease lets one
//! act; the lease is renewed right before the request, and a request lasts at most the HTTP
//! timeout (30 s), far less than [`LEASE`], so no other holder can look for the marker while
//! a request of the first is under way — except after the first process died, which the
//! takeover of a dead holder's lease assumes means its request is over.
//!
//! # The result as a change (`pull_requests: true`)
//! Before step 2, a completed task whose workspace differs from its base commit has its
//! change brought to the forge under the same lease ([`super::change`]): `change_state` goes
//! `none` → `committing` → `committed` → `pushing` → `pushed` → `opening` → `opened`, each
//! intent recorded before its effect, each begun step looked for (the commit's
//! `Ctxhost-Task:` trailer on the worktree's HEAD, the branch on the remote at the recorded
//! commit, a pull request with that head) before it is done again. Only then is the comment
//! posted, with a link to the pull (merge) request. A push or request the forge refuses
//! follows the rules below like a comment: rate limits waited for in the task store, a 403
//! final. Failpoints: `publish:after-commit`, `publish:after-push`, `publish:after-pr`.
//!
//! Labels converge instead (adding or removing a label twice changes nothing); they are set
//! under the same lease, after reading the status under it, so a slow publisher never puts an
//! old state over a newer one for good: the state it records is compared with the status on
//! the next pass.
//!
//! # Failed attempts
//! A failed attempt is recorded with the time of the next one (`next_attempt_ms`, on the
//! database server's clock), which every publisher obeys — the worker's loop, `ctxhost poll`,
//! a `ctxhost poll --once` started by cron, `ctxhost run --once`'s last pass — so the wait
//! holds across processes ([`retry_wait`]): [`FIRST_RETRY_WAIT`] doubling per failure; after a
//! rate limit at least [`FIRST_RATE_LIMIT_WAIT`] doubling (GitHub asks for at least a minute
//! after a secondary limit, then longer); never sooner than the forge's `Retry-After` or
//! rate-limit reset. A final refusal ([`super::http::ForgeError::is_final`]: a permission
//! 403 such as "Resource not accessible by integration", a 404) of a finished task's
//! publication is not tried again: the item gets the failed label (when the forge allows
//! it) and is let go, and the error stays on the publication for `ctxhost show`
//! ([`Db::give_up_publication`]).
//!
//! Failpoints (tests): `publish:before-comment` (after 2) and `publish:after-comment` (after
//! the request, before 4) kill the process with SIGKILL.

use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;

use super::http::ForgeError;
use super::labels::{LabelState, moves, state_for};
use super::{ItemRef, Source, Sources};
use crate::db::sources::{ChangeState, CommentState, HeldTask, Publication};
use crate::db::{Db, Status, TaskRow};
use crate::layout::{Layout, hostname};

/// How long a publishing lease lasts without renewal.
pub const LEASE: Duration = Duration::from_secs(300);

/// First wait before a failed publication is tried again; doubles per failure, at most
/// [`MAX_RETRY_WAIT`].
pub const FIRST_RETRY_WAIT: Duration = Duration::from_secs(10);

/// First wait after the forge refused a publishing request for its rate limit without saying
/// how long to wait (GitHub's secondary limits: "wait at least one minute", then
/// exponentially longer); doubles per failure, at most [`MAX_RETRY_WAIT`].
pub const FIRST_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);

/// Longest wait between two attempts to publish that ctxhost chooses (a longer
/// `Retry-After` or rate-limit reset of the forge is still obeyed, up to
/// [`MAX_FORGE_WAIT`]).
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(3600);

/// Longest wait asked by a forge that is obeyed as it is (a day).
pub const MAX_FORGE_WAIT: Duration = Duration::from_secs(24 * 3600);

/// The wait before the next attempt after a failed one, when `failures` attempts had failed
/// before it and it ended with `error` (`None`: not a forge error, e.g. the task store):
/// [`FIRST_RETRY_WAIT`] (after a rate limit [`FIRST_RATE_LIMIT_WAIT`]) doubled per earlier
/// failure, capped at [`MAX_RETRY_WAIT`]; never shorter than the wait the forge asked for
/// ([`ForgeError::retry_after`], capped at [`MAX_FORGE_WAIT`]).
pub fn retry_wait(failures: i64, error: Option<&ForgeError>) -> Duration {
    let first = if error.is_some_and(ForgeError::is_rate_limit) {
        FIRST_RATE_LIMIT_WAIT
    } else {
        FIRST_RETRY_WAIT
    };
    let own = first
        .saturating_mul(1u32 << failures.clamp(0, 16) as u32)
        .min(MAX_RETRY_WAIT);
    let forge = error
        .and_then(|e| e.retry_after)
        .unwrap_or_default()
        .min(MAX_FORGE_WAIT);
    own.max(forge)
}

/// Longest final answer or error posted, characters (GitHub takes 65,536 per comment).
pub const MAX_RESULT_CHARS: usize = 60_000;

const MARKER_PREFIX: &str = "<!-- ctxhost:result task=";

/// The hidden first line of the result comment of task `uuid`:
/// `<!-- ctxhost:result task=UUID -->` (an HTML comment: not shown on the page).
pub fn result_marker(uuid: &str) -> String {
    format!("{MARKER_PREFIX}{uuid} -->")
}

/// Whether a comment body is a ctxhost result (of any task).
pub fn is_result_comment(body: &str) -> bool {
    body.contains(MARKER_PREFIX)
}

/// What was published for a task, as one sentence (`ctxhost show`'s `published:` line, the task
/// page's "Source item" block): `result posted[ WHERE][ at TIME]; labels STATE[; change
/// CHANGE_STATE[ #N][ URL]]` (`; no change to push` when the workspace held none), or
/// `result being posted; …` / `no result posted yet; …`, with `labels not moved yet` before the
/// first label move. `comment`: where the posted result comment is, named after
/// `result posted` (the CLI prints its URL or id; the web page links it instead and passes
/// `None`). The values come from the forge and the store as they are: escape them for the
/// output.
pub fn status_sentence(p: &Publication, comment: Option<&str>) -> String {
    let result = match p.comment_state {
        CommentState::Posted => format!(
            "result posted{}{}",
            comment.map(|c| format!(" {c}")).unwrap_or_default(),
            p.posted_at
                .as_deref()
                .map(|at| format!(" at {at}"))
                .unwrap_or_default()
        ),
        _ if p.given_up() => "result not posted: publishing given up".to_string(),
        CommentState::Posting => "result being posted".to_string(),
        CommentState::None => "no result posted yet".to_string(),
    };
    let labels = p.labels_state.as_deref().unwrap_or("not moved yet");
    let change = match p.change_state {
        ChangeState::None => String::new(),
        ChangeState::Unchanged => "; no change to push".to_string(),
        state => format!(
            "; change {}{}{}",
            state.as_str(),
            p.pr_number.map(|n| format!(" #{n}")).unwrap_or_default(),
            p.pr_url
                .as_deref()
                .filter(|_| state == ChangeState::Opened)
                .map(|u| format!(" {u}"))
                .unwrap_or_default()
        ),
    };
    format!("{result}; labels {labels}{change}")
}

/// The last failed publishing attempt of `p`, as one sentence: `ERROR (N failed attempt(s))`,
/// with `; NOTE` inside the parentheses when given; `None` when the last attempt did not fail.
pub fn error_sentence(p: &Publication, note: Option<&str>) -> Option<String> {
    let note = note.map(|n| format!("; {n}")).unwrap_or_default();
    p.last_error
        .as_ref()
        .map(|e| format!("{e} ({} failed attempt(s){note})", p.attempts))
}

/// The comment posted for `row` (a task that ended) with its final `answer` and, when its
/// result became a change on the forge, the line that says where (`change`: the pull request's
/// link, [`super::change::comment_line`]). The marker comes first; text longer than
/// [`MAX_RESULT_CHARS`] is cut with a pointer to `ctxhost show`.
pub fn result_comment(row: &TaskRow, answer: Option<&str>, change: Option<&str>) -> String {
    let uuid = &row.uuid;
    let cut = |s: &str| {
        let n = s.chars().count();
        if n <= MAX_RESULT_CHARS {
            s.trim().to_string()
        } else {
            let kept: String = s.chars().take(MAX_RESULT_CHARS).collect();
            format!(
                "{kept}\n\n[... {} more characters: `ctxhost show {uuid}` has it all]",
                n - MAX_RESULT_CHARS
            )
        }
    };
    let body = match row.status {
        Status::Completed => match answer {
            Some(a) if !a.trim().is_empty() => cut(a),
            _ => format!(
                "The task completed, but its final answer is no longer available (its files were \
                 removed); `ctxhost show {uuid}` has its record."
            ),
        },
        Status::Failed => format!(
            "The task failed:\n\n```text\n{}\n```",
            cut(row
                .error_message
                .as_deref()
                .unwrap_or("(no error message recorded)"))
            .replace("```", "'''")
        ),
        Status::Stopped => "The task was stopped before it finished (`ctxhost stop`).".to_string(),
        s => format!("The task is {s}."),
    };
    let change = change.map(|c| format!("{c}\n\n")).unwrap_or_default();
    format!(
        "{}\n{body}\n\n{change}<sub>ctxhost task `{uuid}` · {} · {} LLM calls · {} tool calls · {} tokens</sub>\n",
        result_marker(uuid),
        row.status,
        row.llm_call_count,
        row.tool_call_count,
        row.total_tokens,
    )
}

/// What one [`Publisher::sync`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Synced {
    /// The item shows the task's status; nothing was needed.
    UpToDate,
    /// Labels were moved (`label state`).
    Labels(String),
    /// The result comment was posted (its URL or id), labels moved, the item let go.
    Published(String),
    /// The result comment an earlier attempt posted was found and recorded.
    Recovered(String),
    /// Another publisher holds the lease, or a failed attempt's wait is not over.
    Skipped(String),
}

/// What [`Publisher::sweep`] did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SweepReport {
    /// (task UUID, item, what happened) for every task that needed something.
    pub done: Vec<(String, String, Synced)>,
    /// Errors (task UUID, message), each also recorded in the task's publication.
    pub errors: Vec<(String, String)>,
    /// Failed attempts (task UUID, message) after which the result comment may exist on the
    /// item (the forge's answer to the request was lost): the next pass looks for it and
    /// records it, or posts it if it is not there. Recorded like [`SweepReport::errors`].
    pub unconfirmed: Vec<(String, String)>,
    /// Tasks whose publication waits after a failed attempt (only in a sweep asked to report
    /// them).
    pub waiting: Vec<Waiting>,
    /// Publications given up after a final refusal of the forge (task UUID, message); not
    /// tried again ([`Db::give_up_publication`]).
    pub given_up: Vec<(String, String)>,
}

/// A failed publishing attempt as [`Publisher::sync`] returns it (recorded in the task's
/// publication with the time of the next attempt). The text has the token redacted.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct PublishError {
    /// What failed.
    pub message: String,
    /// Whether the result comment may exist on the item although the attempt failed (the
    /// forge's answer to the request was lost): the next attempt looks for it first.
    pub comment_may_exist: bool,
    /// Whether publishing was given up: no attempt follows.
    pub given_up: bool,
}

/// A publication whose next attempt is not due yet ([`SweepReport::waiting`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Waiting {
    /// The task.
    pub uuid: String,
    /// Its item (`acme/app#42`).
    pub item: String,
    /// When the next attempt may be made (RFC 3339 UTC, the task store's clock).
    pub next_attempt: String,
    /// Seconds until then.
    pub wait_secs: u64,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// Whether the result comment may already be on the item (an attempt's answer was lost;
    /// the next attempt looks for it first).
    pub comment_may_exist: bool,
}

/// `ms` since the Unix epoch as RFC 3339 UTC (seconds).
pub fn rfc3339_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| format!("{ms} ms since the epoch"))
}

/// Publishes for every configured source, with one lease identity.
pub struct Publisher<'a> {
    sources: &'a Sources,
    db: &'a Db,
    layout: &'a Layout,
    /// The bucket, when `layout` is a working copy of one: a task that completed on another
    /// host has its answer read from the bucket.
    remote: Option<std::sync::Arc<crate::remote::Store>>,
    owner: String,
}

/// Whether the lease `owner` (`HOST/PID/NONCE/HOSTID`) belongs to a process of this host (same
/// name and identity, [`crate::host::short_host_id`]: two live hosts may share a name) that is
/// no longer alive. An owner of another host, or without an identity (written by an older
/// ctxhost), is left to its lease's expiry.
fn owner_is_dead(owner: &str) -> bool {
    let parts: Vec<&str> = owner.split('/').collect();
    let [host, pid, _nonce, id] = parts[..] else {
        return false;
    };
    let Ok(pid) = pid.parse::<i32>() else {
        return false;
    };
    if host != hostname() || id != crate::host::short_host_id() || pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for the process; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

impl<'a> Publisher<'a> {
    /// The contexts/ tree it publishes from.
    pub fn layout(&self) -> &'a Layout {
        self.layout
    }

    /// A publisher of this process (lease identity `HOST/PID/NONCE/HOSTID`).
    pub fn new(sources: &'a Sources, db: &'a Db, layout: &'a Layout) -> Publisher<'a> {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        Publisher {
            sources,
            db,
            layout,
            remote: None,
            owner: format!(
                "{}/{}/{}/{}",
                hostname(),
                std::process::id(),
                &nonce[..8],
                crate::host::short_host_id()
            ),
        }
    }

    /// Read the answers of tasks that completed on another host from the bucket `remote`
    /// (`context_storage.remote`; `None`: this host's tree only).
    pub fn with_remote(mut self, remote: Option<std::sync::Arc<crate::remote::Store>>) -> Self {
        self.remote = remote;
        self
    }

    /// Sync every task the publisher has work for ([`Db::publishing_due`]: one query per
    /// pass, listing only finished tasks and those whose labels do not show their status).
    /// A task whose last attempt failed waits until its next attempt is due (module docs),
    /// whoever runs the pass; `report_waiting` (one-shot commands): list those in
    /// [`SweepReport::waiting`] (one more query).
    pub fn sweep(&self, report_waiting: bool) -> anyhow::Result<SweepReport> {
        let mut report = SweepReport::default();
        let due = self
            .db
            .publishing_due(|s| state_for(s).as_str(), report_waiting)?;
        let now = report_waiting.then(|| self.db.now_ms()).transpose()?;
        for held in due {
            let Some(item) = ItemRef::from_task(&held.task) else {
                continue;
            };
            let uuid = held.task.uuid.clone();
            if let (Some(now), Some(p)) = (now, held.publication.as_ref())
                && let Some(next) = p.next_attempt_ms.filter(|n| *n > now)
            {
                report.waiting.push(Waiting {
                    uuid,
                    item: item.short(),
                    next_attempt: rfc3339_ms(next),
                    wait_secs: u64::try_from((next - now + 999) / 1000).unwrap_or(0),
                    last_error: p.last_error.clone(),
                    comment_may_exist: p.comment_state == CommentState::Posting,
                });
                continue;
            }
            match self.sync(&held, None) {
                Ok(Synced::UpToDate) => {}
                Ok(s) => report.done.push((uuid, item.short(), s)),
                Err(e) => {
                    let p = e.downcast_ref::<PublishError>();
                    let entry = (uuid, format!("{e:#}"));
                    if p.is_some_and(|p| p.given_up) {
                        report.given_up.push(entry);
                    } else if p.is_some_and(|p| p.comment_may_exist) {
                        report.unconfirmed.push(entry);
                    } else {
                        report.errors.push(entry);
                    }
                }
            }
        }
        Ok(report)
    }

    /// Bring the item of task `held` (its row and publication as read, [`Db::held_task`])
    /// up to date with its status (module docs); `labels`: the item's labels when just read
    /// (spares a request). Errors are recorded in the task's publication (with the time of
    /// the next attempt) and returned.
    pub fn sync(&self, held: &HeldTask, labels: Option<&[String]>) -> anyhow::Result<Synced> {
        let row = &held.task;
        let uuid = row.uuid.as_str();
        let item = ItemRef::from_task(row)
            .with_context(|| format!("task {uuid} has no GitHub/GitLab task key"))?;
        let Some(source) = self.sources.find(item.forge, &item.repo) else {
            return Ok(Synced::Skipped(format!(
                "{} {} is not in sources.{}.{} any more",
                item.forge,
                item.repo,
                item.forge.as_str(),
                item.forge.repos_key()
            )));
        };
        let seen = held.publication.as_ref();
        // A task still under way whose labels show its status: nothing to do (a finished
        // task is only seen here until its result is published).
        if !row.status.is_final()
            && seen.and_then(|p| p.labels_state.as_deref()) == Some(state_for(row.status).as_str())
        {
            return Ok(Synced::UpToDate);
        }
        let dead = seen
            .and_then(|p| p.lease_owner.as_deref())
            .filter(|o| *o != self.owner && owner_is_dead(o));
        let Some(leased) = self.db.take_publish_lease(uuid, &self.owner, LEASE, dead)? else {
            return Ok(Synced::Skipped(
                "another ctxhost process is publishing it".into(),
            ));
        };
        if let Some(d) = dead {
            tracing::info!(%uuid, dead_owner = d, "took over the publication of a process that died");
        }
        match self.sync_leased(source, &item, &leased, labels) {
            Ok(done) => {
                self.db.release_publish_lease(uuid, &self.owner)?;
                Ok(done)
            }
            Err(e) => {
                let msg = source.forge.redact(&format!("{e:#}"));
                let forge_error = find_forge_error(&e);
                if row.status.is_final() && forge_error.is_some_and(ForgeError::is_final) {
                    return Err(self.give_up(source, &item, uuid, &msg));
                }
                let wait = retry_wait(leased.attempts, forge_error);
                crate::metrics::global().publish_failures.inc();
                tracing::warn!(%uuid, item = %item.short(), retry_in_secs = wait.as_secs(), "publishing failed: {msg}");
                self.db
                    .record_publish_error(uuid, &self.owner, &msg, wait)?;
                Err(PublishError {
                    message: msg,
                    // Only posting the comment fails that way (its request is not repeated).
                    comment_may_exist: forge_error.is_some_and(ForgeError::may_have_taken_effect),
                    given_up: false,
                }
                .into())
            }
        }
    }

    /// Publishing finished task `uuid` failed for good with `msg` (a final refusal of the
    /// forge, module docs): put the failed label on the item if the forge lets us (then let
    /// the item go: a new label on it queues a new task), keep `msg` on the publication and
    /// never try again. With the labels not moved the item stays held, so its trigger label
    /// does not queue the same task again. Returns the error to report.
    fn give_up(&self, source: &Source, item: &ItemRef, uuid: &str, msg: &str) -> anyhow::Error {
        let (add, remove) = moves(&source.config, LabelState::Failed);
        let labelled = match source.forge.move_labels(item, None, add, &remove) {
            Ok(()) => self
                .db
                .record_labels(uuid, &self.owner, LabelState::Failed.as_str())
                .unwrap_or(false),
            Err(e) => {
                tracing::warn!(%uuid, item = %item.short(), "cannot put the failed label on the item either: {e}");
                false
            }
        };
        let recorded = self
            .db
            .give_up_publication(uuid, &self.owner, msg)
            .and_then(|held| {
                if held && labelled {
                    self.db.release_item(uuid, &self.owner)?;
                }
                self.db.release_publish_lease(uuid, &self.owner)
            });
        if let Err(e) = recorded {
            return anyhow::anyhow!("{msg}; recording that publishing is given up failed: {e}");
        }
        crate::metrics::global().publish_failures.inc();
        tracing::error!(%uuid, item = %item.short(), labelled, "publishing given up (not retried): {msg}");
        let labels = if labelled {
            "the item has the failed label"
        } else {
            "the failed label could not be set either"
        };
        PublishError {
            message: format!("{msg} (publishing given up, not tried again; {labels})"),
            comment_may_exist: false,
            given_up: true,
        }
        .into()
    }

    /// The work under the lease, from `leased` (the publication as the lease was taken: only
    /// the holder changes it now): re-read the row, post the result of a finished task, move
    /// the labels, let go of the item.
    fn sync_leased(
        &self,
        source: &Source,
        item: &ItemRef,
        leased: &Publication,
        labels: Option<&[String]>,
    ) -> anyhow::Result<Synced> {
        let uuid = leased.task_uuid.as_str();
        let row = self
            .db
            .get(uuid)?
            .with_context(|| format!("task {uuid} vanished"))?;
        let mut outcome = Synced::UpToDate;
        if row.status.is_final() && leased.comment_state != CommentState::Posted {
            let answer = if row.status == Status::Completed {
                crate::ops::show::final_answer_with(self.layout, self.remote.as_deref(), uuid)
                    .unwrap_or_else(|e| {
                        tracing::warn!(%uuid, "cannot read the final answer: {e:#}");
                        None
                    })
            } else {
                None
            };
            // The change first (pull_requests: true): the comment links it.
            let cx = super::change::Ctx {
                db: self.db,
                owner: &self.owner,
                layout: self.layout,
                remote: self.remote.as_deref(),
                lease: LEASE,
            };
            let change =
                super::change::ensure_change(&cx, source, item, &row, leased, answer.as_deref())?
                    .and_then(|p| super::change::comment_line(&p, item));
            outcome = self.ensure_comment(
                source,
                item,
                &row,
                leased.comment_state,
                answer.as_deref(),
                change.as_deref(),
            )?;
        }
        let state = state_for(row.status);
        if leased.labels_state.as_deref() != Some(state.as_str()) {
            let (add, remove) = moves(&source.config, state);
            source.forge.move_labels(item, labels, add, &remove)?;
            if !self.db.record_labels(uuid, &self.owner, state.as_str())? {
                bail!("lost the publishing lease of task {uuid} while moving its labels");
            }
            if outcome == Synced::UpToDate {
                outcome = Synced::Labels(state.as_str().to_string());
            }
        }
        if row.status.is_final() {
            self.db.release_item(uuid, &self.owner)?;
        }
        Ok(outcome)
    }

    /// Steps 2–4 of the module docs for a finished task.
    /// `state`: the comment's state as the lease was taken; `answer`: the task's final answer;
    /// `change`: the line saying where its change is ([`super::change::comment_line`]).
    fn ensure_comment(
        &self,
        source: &Source,
        item: &ItemRef,
        row: &TaskRow,
        state: CommentState,
        answer: Option<&str>,
        change: Option<&str>,
    ) -> anyhow::Result<Synced> {
        let uuid = row.uuid.as_str();
        match state {
            CommentState::Posted => return Ok(Synced::UpToDate),
            CommentState::Posting => {
                let marker = result_marker(uuid);
                let comments = source.forge.comments(item)?;
                if let Some(c) = comments.iter().find(|c| c.body.contains(&marker)) {
                    if !self
                        .db
                        .record_comment(uuid, &self.owner, &c.id, c.url.as_deref())?
                    {
                        bail!(
                            "lost the publishing lease of task {uuid} while recording its comment"
                        );
                    }
                    tracing::info!(%uuid, item = %item.short(), comment = %c.id, "found the result comment an earlier attempt posted; recorded it");
                    return Ok(Synced::Recovered(
                        c.url.clone().unwrap_or_else(|| c.id.clone()),
                    ));
                }
            }
            CommentState::None => {
                if !self.db.mark_comment_posting(uuid, &self.owner)? {
                    bail!("lost the publishing lease of task {uuid} before commenting");
                }
            }
        }
        crate::failpoint::kill_if_set("publish:before-comment");
        let body = source.forge.redact(&result_comment(row, answer, change));
        // Renew right before the request: it then ends long before the lease can.
        if !self.db.renew_publish_lease(uuid, &self.owner, LEASE)? {
            bail!("lost the publishing lease of task {uuid} before commenting");
        }
        let posted = match source.forge.post_comment(item, &body) {
            Ok(posted) => posted,
            Err(e) if !e.may_have_taken_effect() => {
                // Refused (not processed), and no comment with the marker was on the item:
                // none is there now, so the next attempt need not look for one.
                self.db.unmark_comment_posting(uuid, &self.owner)?;
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        crate::failpoint::kill_if_set("publish:after-comment");
        if !self
            .db
            .record_comment(uuid, &self.owner, &posted.id, posted.url.as_deref())?
        {
            bail!(
                "lost the publishing lease of task {uuid} after commenting (comment {}); the next \
                 attempt finds and records it",
                posted.id
            );
        }
        crate::metrics::global().published.inc();
        tracing::info!(%uuid, item = %item.short(), comment = %posted.id, status = %row.status, "result posted");
        Ok(Synced::Published(posted.url.unwrap_or(posted.id)))
    }
}

/// The forge's error in `e`'s chain, if the failure came from a forge.
fn find_forge_error(e: &anyhow::Error) -> Option<&ForgeError> {
    e.chain().find_map(|c| c.downcast_ref::<ForgeError>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_sentence_says_what_was_published() {
        let mut p = Publication {
            task_uuid: "u".into(),
            labels_state: None,
            comment_state: CommentState::None,
            comment_id: None,
            comment_url: None,
            posted_at: None,
            lease_owner: None,
            lease_until_ms: None,
            attempts: 0,
            last_error: None,
            next_attempt_ms: None,
            item_url: None,
            change_state: ChangeState::None,
            change_commit: None,
            change_branch: None,
            change_base: None,
            pr_number: None,
            pr_url: None,
        };
        assert_eq!(
            status_sentence(&p, None),
            "no result posted yet; labels not moved yet"
        );
        assert_eq!(error_sentence(&p, Some("retried")), None);
        p.comment_state = CommentState::Posting;
        p.labels_state = Some("running".into());
        assert_eq!(
            status_sentence(&p, None),
            "result being posted; labels running"
        );
        p.comment_state = CommentState::Posted;
        p.posted_at = Some("2026-01-02T03:04:05Z".into());
        p.labels_state = Some("done".into());
        assert_eq!(
            status_sentence(&p, Some("https://x/1#c9")),
            "result posted https://x/1#c9 at 2026-01-02T03:04:05Z; labels done"
        );
        assert_eq!(
            status_sentence(&p, None),
            "result posted at 2026-01-02T03:04:05Z; labels done"
        );
        p.change_state = ChangeState::Opened;
        p.pr_number = Some(3);
        p.pr_url = Some("https://x/pull/3".into());
        assert_eq!(
            status_sentence(&p, None),
            "result posted at 2026-01-02T03:04:05Z; labels done; change opened #3 https://x/pull/3"
        );
        p.change_state = ChangeState::Unchanged;
        assert!(status_sentence(&p, None).ends_with("labels done; no change to push"));
        p.change_state = ChangeState::None;
        p.last_error = Some("HTTP 502".into());
        p.attempts = 2;
        assert_eq!(
            error_sentence(&p, None).as_deref(),
            Some("HTTP 502 (2 failed attempt(s))")
        );
        assert_eq!(
            error_sentence(&p, Some("retried later")).as_deref(),
            Some("HTTP 502 (2 failed attempt(s); retried later)")
        );
    }

    #[test]
    fn result_comments_carry_the_marker_first() {
        let mut row = crate::db::testing::task_row("1234");
        row.status = Status::Completed;
        row.llm_call_count = 3;
        let c = result_comment(&row, Some("All good."), None);
        assert!(
            c.starts_with("<!-- ctxhost:result task=1234 -->\nAll good.\n"),
            "{c}"
        );
        assert!(is_result_comment(&c));
        assert!(c.contains("3 LLM calls"));
        row.status = Status::Failed;
        row.error_message = Some("LLM said ```no```".into());
        let c = result_comment(&row, None, None);
        assert!(
            c.contains("The task failed:\n\n```text\nLLM said '''no'''\n```"),
            "{c}"
        );
        row.status = Status::Completed;
        let long = "y".repeat(MAX_RESULT_CHARS + 5);
        let c = result_comment(&row, Some(&long), None);
        assert!(c.contains("[... 5 more characters: `ctxhost show 1234` has it all]"));
        assert!(!is_result_comment("a normal comment"));
    }

    #[test]
    fn the_wait_after_a_failure_grows_and_never_undercuts_the_forge() {
        use super::super::http::FailureKind;
        let error = |kind, retry_after: Option<u64>| ForgeError {
            forge: crate::config::SourceKind::Github,
            repo: "acme/app".into(),
            action: "comment on #1".into(),
            kind,
            token_env: "GITHUB_TOKEN".into(),
            retry_after: retry_after.map(Duration::from_secs),
        };
        let secs = |failures, e: Option<&ForgeError>| retry_wait(failures, e).as_secs();
        let bad_gateway = error(
            FailureKind::Http {
                status: 502,
                message: "x".into(),
            },
            None,
        );
        assert_eq!(
            [0, 1, 2, 20].map(|n| secs(n, Some(&bad_gateway))),
            [10, 20, 40, 3600]
        );
        assert_eq!(secs(1, None), 20);
        // A secondary rate limit without Retry-After: a minute, then longer.
        let secondary = error(FailureKind::RateLimited("secondary".into()), Some(60));
        assert_eq!([0, 1, 2].map(|n| secs(n, Some(&secondary))), [60, 120, 240]);
        // Retry-After (or a reset) is never undercut, up to a day.
        let told = error(FailureKind::RateLimited("429".into()), Some(90));
        assert_eq!(secs(0, Some(&told)), 90);
        let unavailable = error(FailureKind::Unknown("HTTP 503".into()), Some(7 * 24 * 3600));
        assert_eq!(secs(0, Some(&unavailable)), 24 * 3600);
        assert!(error(FailureKind::Forbidden("no".into()), None).is_final());
        assert!(!error(FailureKind::Unauthorized, None).is_final());
    }

    #[test]
    fn only_dead_owners_of_this_host_are_dead() {
        let (host, id) = (hostname(), crate::host::short_host_id());
        let me = format!("{host}/{}/x/{id}", std::process::id());
        assert!(!owner_is_dead(&me));
        assert!(!owner_is_dead(&format!("some-other-host/1/x/{id}")));
        assert!(!owner_is_dead("garbage"));
        // A pid far above any pid_max (2^22) is not alive.
        assert!(owner_is_dead(&format!("{host}/2147483000/x/{id}")));
        // Issue 25 item 3: another live host with this name (another identity), or an owner
        // of an older ctxhost (no identity): its pid means nothing here.
        assert!(!owner_is_dead(&format!("{host}/2147483000/x/0123456789ab")));
        assert!(!owner_is_dead(&format!("{host}/2147483000/x")));
    }
}
