//! What the task sources ([`crate::sources`]) keep in the task store, in one place: one open
//! task per GitHub / GitLab item, and the record of what was published back to it.
//!
//! - `tasks.source_item` (unique; [`item_id`]) names the item a polled task answers, from the
//!   moment it is queued ([`Db::queue_source_task`], one statement: two pollers cannot both
//!   queue an item) until its result is published ([`Db::release_item`], set to NULL). A task
//!   that still holds its item keeps the item from being queued again — also between the end
//!   of the task and the publication of its result.
//! - `publications`, one row per polled task: the labels last set on the item
//!   (`labels_state`), the result comment (`comment_state` `none` → `posting` → `posted`, its
//!   id and URL), and a lease (`lease_owner`, `lease_until_ms`): only the holder publishes,
//!   and every write below is conditional on holding it; with `pull_requests: true`, the change
//!   a task's result became ([`ChangeState`]: the commit, the branch pushed, the pull/merge
//!   request). The exactly-once argument built on these is in [`crate::sources::publish`].
//!
//! Every statement is one statement in SQL that SQLite and PostgreSQL both accept (numbered
//! placeholders, `ON CONFLICT DO NOTHING`, no `IS ?`, the column `"user"` quoted, a cast where
//! PostgreSQL cannot infer a parameter's type from a column); lease times are milliseconds
//! since the Unix epoch on the database server's clock ([`super::Dialect::now_ms`], as the
//! task leases, [`super::lease`]), so publishers on hosts whose clocks disagree agree on
//! when a lease expired and when a failed attempt may be retried.

use serde::Serialize;

use std::time::Duration;

use super::{COLUMNS, Db, DbError, NewTask, SqlRow, Status, TaskKey, TaskRow, args, now_rfc3339};
use crate::untrusted;

/// The value of `tasks.source_item` for a task key: `SOURCE:OWNER/REPO:TYPE:ID`, e.g.
/// `github:acme/app:issue:42`. `None` unless every part of the key is set.
pub fn item_id(key: &TaskKey) -> Option<String> {
    Some(format!(
        "{}:{}/{}:{}:{}",
        key.task_source,
        key.owner.as_deref()?,
        key.repo.as_deref()?,
        key.task_type.as_deref()?,
        key.task_id.as_deref()?
    ))
}

/// `publications.next_attempt_ms` of a publication given up after a final error
/// ([`Db::give_up_publication`]): no publisher tries it again.
pub const NEVER_MS: i64 = i64::MAX;

/// Where the result comment of a task is (`publications.comment_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CommentState {
    /// Nothing was attempted.
    None,
    /// A publisher set out to post it: a comment carrying the task's marker may exist on the
    /// item (a crash or an ambiguous failure after the request was sent), so the next attempt
    /// looks for it before posting.
    Posting,
    /// Posted; `comment_id` / `comment_url` say where.
    Posted,
}

impl CommentState {
    fn parse(s: &str) -> CommentState {
        match s {
            "posting" => CommentState::Posting,
            "posted" => CommentState::Posted,
            _ => CommentState::None,
        }
    }
}

/// Where the change a finished task's workspace holds is on its way to the forge
/// (`publications.change_state`; [`crate::sources::publish`] has the steps and what each
/// state means after a crash). `none` → `committing` → `committed` → `pushing` → `pushed` →
/// `opening` → `opened`, or `none` → `unchanged`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChangeState {
    /// Nothing was decided yet (or the source does not open pull requests).
    None,
    /// The workspace held no change (or no workspace record): a comment only.
    Unchanged,
    /// A publisher set out to commit the workspace: a commit with the task's trailer may be the
    /// worktree's HEAD.
    Committing,
    /// Committed; `change_commit` names the commit.
    Committed,
    /// A publisher set out to push `change_commit` to `change_branch`: the branch may be on the
    /// remote at that commit.
    Pushing,
    /// The remote's `change_branch` is at `change_commit`.
    Pushed,
    /// A publisher set out to open the pull (merge) request: one with head `change_branch` may
    /// exist.
    Opening,
    /// Done: `pr_number` / `pr_url` name the pull (merge) request that carries the change (the
    /// item itself when the commit went onto its head branch).
    Opened,
}

impl ChangeState {
    /// The column's value.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeState::None => "none",
            ChangeState::Unchanged => "unchanged",
            ChangeState::Committing => "committing",
            ChangeState::Committed => "committed",
            ChangeState::Pushing => "pushing",
            ChangeState::Pushed => "pushed",
            ChangeState::Opening => "opening",
            ChangeState::Opened => "opened",
        }
    }

    fn parse(s: &str) -> ChangeState {
        match s {
            "unchanged" => ChangeState::Unchanged,
            "committing" => ChangeState::Committing,
            "committed" => ChangeState::Committed,
            "pushing" => ChangeState::Pushing,
            "pushed" => ChangeState::Pushed,
            "opening" => ChangeState::Opening,
            "opened" => ChangeState::Opened,
            _ => ChangeState::None,
        }
    }

    /// Whether nothing more is to be done for the change (`unchanged` or `opened`).
    pub fn is_done(self) -> bool {
        matches!(self, ChangeState::Unchanged | ChangeState::Opened)
    }
}

/// What [`Db::advance_change`] records besides the new state: each `Some` sets its column,
/// each `None` leaves it as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChangeFields<'a> {
    /// `change_commit`: the commit made (hex).
    pub commit: Option<&'a str>,
    /// `change_branch`: the branch it is pushed to (without `refs/heads/`).
    pub branch: Option<&'a str>,
    /// `change_base`: the branch the pull request is opened against.
    pub base: Option<&'a str>,
    /// `pr_number`: the pull (merge) request's number (GitLab: iid).
    pub pr_number: Option<i64>,
    /// `pr_url`: its web page (kept only when it is a web URL, [`is_web_url`]).
    pub pr_url: Option<&'a str>,
}

/// One `publications` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Publication {
    /// The task.
    pub task_uuid: String,
    /// The label state last set on the item (`processing`, `paused`, `done`, `failed`), if any.
    pub labels_state: Option<String>,
    /// The result comment's state.
    pub comment_state: CommentState,
    /// The forge's id of the result comment, once posted.
    pub comment_id: Option<String>,
    /// Its web URL, once posted.
    pub comment_url: Option<String>,
    /// When it was recorded as posted (RFC 3339 UTC).
    pub posted_at: Option<String>,
    /// Who may publish for the task now (`HOST/PID/NONCE` of a ctxhost process), if anyone.
    pub lease_owner: Option<String>,
    /// Until when (ms since the Unix epoch).
    pub lease_until_ms: Option<i64>,
    /// Failed publishing attempts since the last success.
    pub attempts: i64,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// Not before this time (ms since the Unix epoch, the database server's clock) is the next
    /// attempt made, by any publisher; [`NEVER_MS`] once given up.
    pub next_attempt_ms: Option<i64>,
    /// The item's web page as the forge gave it when the task was queued (`http(s)://` only;
    /// [`Db::record_item_url`]).
    pub item_url: Option<String>,
    /// Where the change of the task's workspace is (`pull_requests: true`).
    pub change_state: ChangeState,
    /// The commit ctxhost made of it (hex), once made.
    pub change_commit: Option<String>,
    /// The branch it is pushed to, once chosen (`ctxhost/issue-7-0193a4b2`, or a pull
    /// request's head branch).
    pub change_branch: Option<String>,
    /// The branch the pull request is opened against (NULL: the commit goes onto the item's
    /// own head branch, no pull request is opened).
    pub change_base: Option<String>,
    /// The pull (merge) request that carries the change (GitLab: its iid).
    pub pr_number: Option<i64>,
    /// Its web page.
    pub pr_url: Option<String>,
}

impl Publication {
    /// Whether publishing was given up after a final error ([`Db::give_up_publication`]).
    pub fn given_up(&self) -> bool {
        self.next_attempt_ms == Some(NEVER_MS)
    }
}

const PUB_COLUMNS: &str = "task_uuid, labels_state, comment_state, comment_id, comment_url, posted_at, \
lease_owner, lease_until_ms, attempts, last_error, next_attempt_ms, item_url, change_state, change_commit, \
change_branch, change_base, pr_number, pr_url";

/// How many columns [`PUB_COLUMNS`] names.
const PUB_COLUMN_COUNT: usize = 18;

/// A row selected with [`PUB_COLUMNS`] as a [`Publication`].
fn pub_row(r: &SqlRow) -> Result<Publication, DbError> {
    pub_row_at(r, 0)
}

/// The [`PUB_COLUMNS`] of `r` that start at column `at`.
fn pub_row_at(r: &SqlRow, at: usize) -> Result<Publication, DbError> {
    Ok(Publication {
        task_uuid: r.text(at)?,
        labels_state: r.opt_text(at + 1)?,
        comment_state: CommentState::parse(&r.text(at + 2)?),
        comment_id: r.opt_text(at + 3)?,
        comment_url: r.opt_text(at + 4)?,
        posted_at: r.opt_text(at + 5)?,
        lease_owner: r.opt_text(at + 6)?,
        lease_until_ms: r.opt_int(at + 7)?,
        attempts: r.int(at + 8)?,
        last_error: r.opt_text(at + 9)?,
        next_attempt_ms: r.opt_int(at + 10)?,
        item_url: r.opt_text(at + 11)?,
        change_state: ChangeState::parse(&r.text(at + 12)?),
        change_commit: r.opt_text(at + 13)?,
        change_branch: r.opt_text(at + 14)?,
        change_base: r.opt_text(at + 15)?,
        pr_number: r.opt_int(at + 16)?,
        pr_url: r.opt_text(at + 17)?,
    })
}

/// `cols` (a comma-separated column list such as [`COLUMNS`]) with every column qualified by
/// `alias` (`t.uuid, t.status, …`), for a join of tables that share column names.
fn qualified(cols: &str, alias: &str) -> String {
    cols.split(',')
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A task that holds its item, and its `publications` row as read with it (`None`: nothing
/// was recorded yet): what [`crate::sources::publish`] decides from.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldTask {
    /// The task's row.
    pub task: TaskRow,
    /// Its publication, if any.
    pub publication: Option<Publication>,
}

/// Milliseconds of `d`, saturating.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Db {
    /// Insert `task` as `queued`, holding its item ([`item_id`] of its key), unless a task
    /// already holds the item or a queued, running or paused task has the same key. One
    /// statement (`INSERT … SELECT … WHERE NOT EXISTS … ON CONFLICT DO NOTHING` against the
    /// unique `source_item`): of two pollers queueing the same item at once, one inserts.
    /// Returns whether it was inserted. Errors for a key with a part missing.
    pub fn queue_source_task(&self, task: &NewTask) -> Result<bool, DbError> {
        let item = item_id(&task.key).ok_or_else(|| DbError::BadRow {
            location: self.location().to_string(),
            uuid: task.uuid.clone(),
            message: "a polled task needs a full task key (source, owner, repo, type, id)".into(),
        })?;
        let now = now_rfc3339();
        let k = &task.key;
        let n = self.execute(
            "INSERT INTO tasks (uuid, task_source, owner, repo, task_type, task_id, status, created_at, \
             updated_at, llm_provider, model, context_length, \"user\", prompt, source_item) \
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, 'queued', ?7, ?7, ?8, ?9, CAST(?10 AS BIGINT), ?11, ?12, ?13 \
             WHERE NOT EXISTS (SELECT 1 FROM tasks WHERE task_source = ?2 AND owner = ?3 AND repo = ?4 \
             AND task_type = ?5 AND task_id = ?6 AND status IN ('queued', 'running', 'paused')) \
             ON CONFLICT DO NOTHING",
            args![
                task.uuid.as_str(),
                k.task_source.as_str(),
                k.owner.as_deref(),
                k.repo.as_deref(),
                k.task_type.as_deref(),
                k.task_id.as_deref(),
                now,
                task.llm_provider.as_str(),
                task.model.as_str(),
                task.context_length,
                task.user.as_deref().map(untrusted::name),
                task.prompt.as_str(),
                item,
            ],
        )?;
        Ok(n == 1)
    }

    /// The task that keeps the item of `key` from being queued again: the one holding it
    /// (`source_item`), or a queued, running or paused task with the same key.
    pub fn task_holding_item(&self, key: &TaskKey) -> Result<Option<TaskRow>, DbError> {
        let Some(item) = item_id(key) else {
            return Ok(None);
        };
        self.query_opt(
            &format!(
                "SELECT {COLUMNS} FROM tasks WHERE source_item = ?1 OR (task_source = ?2 AND owner = ?3 \
                 AND repo = ?4 AND task_type = ?5 AND task_id = ?6 AND status IN ('queued', 'running', 'paused')) \
                 ORDER BY created_at DESC LIMIT 1"
            ),
            &args![
                item,
                key.task_source.as_str(),
                key.owner.as_deref(),
                key.repo.as_deref(),
                key.task_type.as_deref(),
                key.task_id.as_deref()
            ],
        )?
        .map(|r| self.task_row(&r))
        .transpose()
    }

    /// The tasks the publisher has work for, oldest first, each with its publication: one
    /// query (`tasks LEFT JOIN publications`), whatever the number of held items. A task is
    /// listed when it still holds its item (`source_item`) and either ended (its result is to
    /// be published) or its item's labels do not show its status yet (`labels_state` is not
    /// `label_state(status)`; the caller's table, e.g. [`crate::sources::labels::state_for`]).
    /// A task whose last attempt failed is left out until its `next_attempt_ms` has passed on
    /// the database server's clock — unless `with_waiting`, which lists it too (for a report
    /// of what still waits; the caller compares `next_attempt_ms` with [`Db::now_ms`]). A
    /// publication given up ([`NEVER_MS`]) is never listed.
    pub fn publishing_due(
        &self,
        label_state: impl Fn(Status) -> &'static str,
        with_waiting: bool,
    ) -> Result<Vec<HeldTask>, DbError> {
        // Both lists are built from the enums' own names: no quote or `?` can be in them.
        let finished: Vec<String> = Status::ALL
            .iter()
            .filter(|s| s.is_final())
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        let shown: String = Status::ALL
            .iter()
            .map(|s| format!(" WHEN '{}' THEN '{}'", s.as_str(), label_state(*s)))
            .collect();
        let now = self.dialect().now_ms();
        self.held_tasks(
            &format!(
                "t.source_item IS NOT NULL \
                 AND (t.status IN ({}) OR p.labels_state IS NULL \
                 OR p.labels_state <> CASE t.status{shown} END) \
                 AND (p.next_attempt_ms IS NULL OR p.next_attempt_ms <= {now} \
                 OR (?1 = 1 AND p.next_attempt_ms < ?2))",
                finished.join(", ")
            ),
            args![with_waiting, NEVER_MS],
        )
    }

    /// Task `uuid` with its publication (one query), if it holds its item.
    pub fn held_task(&self, uuid: &str) -> Result<Option<HeldTask>, DbError> {
        Ok(self
            .held_tasks("t.source_item IS NOT NULL AND t.uuid = ?1", args![uuid])?
            .into_iter()
            .next())
    }

    /// The tasks (alias `t`) joined with their publications (alias `p`) where `filter` holds,
    /// oldest first.
    fn held_tasks(&self, filter: &str, args: Vec<super::Value>) -> Result<Vec<HeldTask>, DbError> {
        let columns = COLUMNS.split(',').count();
        self.query(
            &format!(
                "SELECT {}, {} FROM tasks t LEFT JOIN publications p ON p.task_uuid = t.uuid \
                 WHERE {filter} ORDER BY t.created_at, t.uuid",
                qualified(COLUMNS, "t"),
                qualified(PUB_COLUMNS, "p")
            ),
            &args,
        )?
        .into_iter()
        .map(|mut r| {
            let publication = match r.opt_text(columns)? {
                Some(_) => Some(pub_row_at(&r, columns)?),
                None => None,
            };
            debug_assert_eq!(r.0.len(), columns + PUB_COLUMN_COUNT);
            r.0.truncate(columns);
            Ok(HeldTask {
                task: self.task_row(&r)?,
                publication,
            })
        })
        .collect()
    }

    /// The `publications` row of `uuid`, if any.
    pub fn publication(&self, uuid: &str) -> Result<Option<Publication>, DbError> {
        self.query_opt(
            &format!("SELECT {PUB_COLUMNS} FROM publications WHERE task_uuid = ?1"),
            &args![uuid],
        )?
        .map(|r| pub_row(&r))
        .transpose()
    }

    /// Record the web page of the item task `uuid` answers (shown by `ctxhost show` and the
    /// dashboard); the `publications` row is created if missing. Not lease-bound: the page
    /// of an item does not change. A URL that is not `http://` or `https://`, or that holds
    /// whitespace or control characters, is not kept (it would be a link users click).
    /// Returns whether it was kept.
    pub fn record_item_url(&self, uuid: &str, url: &str) -> Result<bool, DbError> {
        if !is_web_url(url) {
            return Ok(false);
        }
        let now = now_rfc3339();
        self.ensure_publication(uuid, &now)?;
        let n = self.execute(
            "UPDATE publications SET item_url = ?2, updated_at = ?3 WHERE task_uuid = ?1",
            args![uuid, url, now],
        )?;
        Ok(n == 1)
    }

    /// Take the publishing lease of `uuid` for `owner` for `ttl` (on the database server's
    /// clock), in one statement (an upsert: the row is created if missing): it is taken when
    /// nobody holds it, `owner` holds it, it expired, or it is held by `dead_owner` (a process
    /// the caller found dead). Returns the publication as it is now, under `owner`'s lease —
    /// what the holder acts on, since nobody else writes it while the lease holds — or `None`
    /// when another publisher holds it.
    pub fn take_publish_lease(
        &self,
        uuid: &str,
        owner: &str,
        ttl: Duration,
        dead_owner: Option<&str>,
    ) -> Result<Option<Publication>, DbError> {
        let now = self.dialect().now_ms();
        let rows = self.write_returning(
            &format!(
                "INSERT INTO publications (task_uuid, lease_owner, lease_until_ms, created_at, updated_at) \
                 VALUES (?1, ?2, {now} + ?3, ?4, ?4) \
                 ON CONFLICT (task_uuid) DO UPDATE SET lease_owner = excluded.lease_owner, \
                 lease_until_ms = excluded.lease_until_ms, updated_at = excluded.updated_at \
                 WHERE publications.lease_owner IS NULL OR publications.lease_owner = ?2 \
                 OR publications.lease_until_ms < {now} OR publications.lease_owner = ?5 \
                 RETURNING {PUB_COLUMNS}"
            ),
            args![uuid, owner, millis(ttl), now_rfc3339(), dead_owner],
        )?;
        rows.first().map(pub_row).transpose()
    }

    /// Renew the publishing lease of `uuid` that `owner` holds, for `ttl` from now (the
    /// server's clock). Returns whether `owner` still held it.
    pub fn renew_publish_lease(
        &self,
        uuid: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, DbError> {
        let now = self.dialect().now_ms();
        let n = self.execute(
            &format!(
                "UPDATE publications SET lease_until_ms = {now} + ?3, updated_at = ?4 \
                 WHERE task_uuid = ?1 AND lease_owner = ?2"
            ),
            args![uuid, owner, millis(ttl), now_rfc3339()],
        )?;
        Ok(n == 1)
    }

    /// Give up the lease of `uuid` held by `owner`.
    pub fn release_publish_lease(&self, uuid: &str, owner: &str) -> Result<bool, DbError> {
        self.publication_update(
            "UPDATE publications SET lease_owner = NULL, lease_until_ms = NULL, updated_at = ?3 \
             WHERE task_uuid = ?1 AND lease_owner = ?2",
            uuid,
            owner,
        )
    }

    /// Record that the item's labels now show `state` (the lease holder `owner` set them);
    /// clears the error record.
    pub fn record_labels(&self, uuid: &str, owner: &str, state: &str) -> Result<bool, DbError> {
        let now = now_rfc3339();
        let n = self.execute(
            "UPDATE publications SET labels_state = ?3, attempts = 0, last_error = NULL, \
             next_attempt_ms = NULL, updated_at = ?4 WHERE task_uuid = ?1 AND lease_owner = ?2",
            args![uuid, owner, state, now],
        )?;
        Ok(n == 1)
    }

    /// `none` → `posting`: the lease holder `owner` is about to post the result comment.
    /// Written before the request is sent, so that whatever happens next, a later attempt
    /// looks for the comment before posting. Returns whether it changed.
    pub fn mark_comment_posting(&self, uuid: &str, owner: &str) -> Result<bool, DbError> {
        self.publication_update(
            "UPDATE publications SET comment_state = 'posting', updated_at = ?3 \
             WHERE task_uuid = ?1 AND lease_owner = ?2 AND comment_state = 'none'",
            uuid,
            owner,
        )
    }

    /// `posting` → `none`: the forge refused the lease holder `owner`'s request to post the
    /// result comment (it was not processed, and no earlier attempt's comment was found before
    /// it), so no comment of the task is on the item. Returns whether it changed.
    pub fn unmark_comment_posting(&self, uuid: &str, owner: &str) -> Result<bool, DbError> {
        self.publication_update(
            "UPDATE publications SET comment_state = 'none', updated_at = ?3 \
             WHERE task_uuid = ?1 AND lease_owner = ?2 AND comment_state = 'posting'",
            uuid,
            owner,
        )
    }

    /// `posting` → `posted` with the comment's id and URL, by the lease holder `owner`. Both come
    /// from the forge: the id is bounded and escaped ([`untrusted::name`]), a URL that is not
    /// a web URL ([`is_web_url`]) is not kept.
    /// Returns whether it changed.
    pub fn record_comment(
        &self,
        uuid: &str,
        owner: &str,
        comment_id: &str,
        comment_url: Option<&str>,
    ) -> Result<bool, DbError> {
        let comment_id = untrusted::name(comment_id);
        let comment_url = comment_url.filter(|u| is_web_url(u));
        let now = now_rfc3339();
        let n = self.execute(
            "UPDATE publications SET comment_state = 'posted', comment_id = ?3, comment_url = ?4, \
             posted_at = ?5, attempts = 0, last_error = NULL, next_attempt_ms = NULL, updated_at = ?5 \
             WHERE task_uuid = ?1 AND lease_owner = ?2 AND comment_state = 'posting'",
            args![uuid, owner, comment_id, comment_url, now],
        )?;
        Ok(n == 1)
    }

    /// Move the change of task `uuid` from state `from` to `to`, setting `fields`, by the lease
    /// holder `owner` (each step's intent is written before its effect:
    /// [`crate::sources::publish`]). Values from the forge are bounded and escaped; a URL that
    /// is not a web URL is not kept. Returns whether it changed (`false`: the lease was lost
    /// or the state is not `from`).
    pub fn advance_change(
        &self,
        uuid: &str,
        owner: &str,
        from: ChangeState,
        to: ChangeState,
        fields: ChangeFields<'_>,
    ) -> Result<bool, DbError> {
        let name = |v: Option<&str>| v.map(|x| untrusted::name(x).into_owned());
        let url = fields.pr_url.filter(|u| is_web_url(u));
        let n = self.execute(
            "UPDATE publications SET change_state = ?3, change_commit = COALESCE(CAST(?4 AS TEXT), change_commit), \
             change_branch = COALESCE(CAST(?5 AS TEXT), change_branch), \
             change_base = COALESCE(CAST(?6 AS TEXT), change_base), \
             pr_number = COALESCE(CAST(?7 AS BIGINT), pr_number), \
             pr_url = COALESCE(CAST(?8 AS TEXT), pr_url), \
             updated_at = ?9 WHERE task_uuid = ?1 AND lease_owner = ?2 AND change_state = ?10",
            args![
                uuid,
                owner,
                to.as_str(),
                name(fields.commit),
                name(fields.branch),
                name(fields.base),
                fields.pr_number,
                url,
                now_rfc3339(),
                from.as_str()
            ],
        )?;
        Ok(n == 1)
    }

    /// A publishing attempt of `owner` failed: count it, keep `error` (it must not hold a
    /// secret; bounded to [`untrusted::MAX_DB_ERROR_BYTES`], control characters escaped), let
    /// a worker try again `wait` from now (the server's clock), and give up the lease.
    pub fn record_publish_error(
        &self,
        uuid: &str,
        owner: &str,
        error: &str,
        wait: Duration,
    ) -> Result<bool, DbError> {
        let error = untrusted::text(error, untrusted::MAX_DB_ERROR_BYTES);
        let now = self.dialect().now_ms();
        let n = self.execute(
            &format!(
                "UPDATE publications SET attempts = attempts + 1, last_error = ?3, \
                 next_attempt_ms = {now} + ?4, lease_owner = NULL, lease_until_ms = NULL, \
                 updated_at = ?5 WHERE task_uuid = ?1 AND lease_owner = ?2"
            ),
            args![uuid, owner, error, millis(wait), now_rfc3339()],
        )?;
        Ok(n == 1)
    }

    /// The result of finished task `uuid` is published (comment posted, final labels set) or
    /// given up ([`Db::give_up_publication`], labels set) by the lease holder `owner`: the
    /// task stops holding its item (`source_item` = NULL), so a new label on the item queues
    /// a new task. Returns whether it changed.
    pub fn release_item(&self, uuid: &str, owner: &str) -> Result<bool, DbError> {
        let n = self.execute(
            "UPDATE tasks SET source_item = NULL WHERE uuid = ?1 AND source_item IS NOT NULL \
             AND status IN ('completed', 'failed', 'stopped') AND EXISTS (SELECT 1 FROM publications \
             WHERE task_uuid = ?1 AND lease_owner = ?2 \
             AND (comment_state = 'posted' OR next_attempt_ms = ?3))",
            args![uuid, owner, NEVER_MS],
        )?;
        Ok(n == 1)
    }

    /// A publishing attempt of the lease holder `owner` failed for good (the forge refused it
    /// in a way another attempt cannot change): count it, keep `error` (as
    /// [`Db::record_publish_error`]) and set `next_attempt_ms` to [`NEVER_MS`], so no
    /// publisher tries again. The lease is kept (the caller releases the item, then the
    /// lease). Returns whether `owner` held it.
    pub fn give_up_publication(
        &self,
        uuid: &str,
        owner: &str,
        error: &str,
    ) -> Result<bool, DbError> {
        let error = untrusted::text(error, untrusted::MAX_DB_ERROR_BYTES);
        let n = self.execute(
            "UPDATE publications SET attempts = attempts + 1, last_error = ?3, \
             next_attempt_ms = ?4, updated_at = ?5 WHERE task_uuid = ?1 AND lease_owner = ?2",
            args![uuid, owner, error, NEVER_MS, now_rfc3339()],
        )?;
        Ok(n == 1)
    }

    /// The `source_item` of `uuid` (`None`: not held, or no such task).
    pub fn source_item(&self, uuid: &str) -> Result<Option<String>, DbError> {
        Ok(self
            .query_opt(
                "SELECT source_item FROM tasks WHERE uuid = ?1",
                &args![uuid],
            )?
            .map(|r| r.opt_text(0))
            .transpose()?
            .flatten())
    }

    /// Run a `publications` UPDATE whose parameters are (uuid, owner, now); returns whether a
    /// row changed.
    fn publication_update(&self, sql: &str, uuid: &str, owner: &str) -> Result<bool, DbError> {
        let now = now_rfc3339();
        let n = self.execute(sql, args![uuid, owner, now])?;
        Ok(n == 1)
    }

    /// Create the `publications` row of `uuid` if it is missing.
    fn ensure_publication(&self, uuid: &str, now: &str) -> Result<(), DbError> {
        self.execute(
            "INSERT INTO publications (task_uuid, created_at, updated_at) VALUES (?1, ?2, ?2) \
             ON CONFLICT DO NOTHING",
            args![uuid, now],
        )?;
        Ok(())
    }
}

/// Longest URL kept from a forge, bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// Whether `url` may be kept and shown as a link: `http://` or `https://`, at most
/// [`MAX_URL_BYTES`], no whitespace or control characters.
pub fn is_web_url(url: &str) -> bool {
    if url.len() > MAX_URL_BYTES {
        return false;
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    (scheme.eq_ignore_ascii_case("https") || scheme.eq_ignore_ascii_case("http"))
        && !rest.is_empty()
        && !rest.starts_with('/')
        && !url.chars().any(|c| c.is_whitespace() || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Status;
    use crate::db::testing::{new_task, store_tests};
    use crate::lifecycle::{Claim, Owner, row};

    const MINUTE: Duration = Duration::from_secs(60);

    /// The label state of a status, as [`crate::sources::labels::state_for`] says.
    fn shown(status: Status) -> &'static str {
        crate::sources::labels::state_for(status).as_str()
    }

    fn item_task(uuid: &str, id: &str) -> NewTask {
        let mut t = new_task(uuid);
        t.key = TaskKey {
            task_source: "github".into(),
            owner: Some("acme".into()),
            repo: Some("app".into()),
            task_type: Some("issue".into()),
            task_id: Some(id.into()),
        };
        t
    }

    store_tests! {
        fn an_item_is_queued_once_until_its_result_is_published(store: &TestStore) {
            let db = store.open();
            assert!(db.queue_source_task(&item_task("a", "1")).unwrap());
            assert!(!db.queue_source_task(&item_task("b", "1")).unwrap());
            assert!(db.queue_source_task(&item_task("c", "2")).unwrap());
            let key = item_task("x", "1").key;
            assert_eq!(db.task_holding_item(&key).unwrap().unwrap().uuid, "a");
            // Finished, but not published yet: still held.
            row::claim(&db, "a", &Claim::test(1)).unwrap();
            row::finish(&db, "a", Owner::test(1), Status::Completed, None).unwrap();
            assert!(!db.queue_source_task(&item_task("b", "1")).unwrap());
            // Only the lease holder, after the comment is recorded, releases it.
            assert!(db.take_publish_lease("a", "me", MINUTE, None).unwrap().is_some());
            assert!(!db.release_item("a", "me").unwrap());
            assert!(db.mark_comment_posting("a", "me").unwrap());
            assert!(!db.record_comment("a", "other", "c1", None).unwrap());
            assert!(db.record_comment("a", "me", "c1", Some("u")).unwrap());
            assert!(!db.release_item("a", "other").unwrap());
            assert!(db.release_item("a", "me").unwrap());
            assert_eq!(db.task_holding_item(&key).unwrap(), None);
            assert!(db.queue_source_task(&item_task("b", "1")).unwrap());
            let mut held: Vec<String> = db
                .publishing_due(shown, true)
                .unwrap()
                .into_iter()
                .map(|h| h.task.uuid)
                .collect();
            held.sort();
            assert_eq!(held, ["b", "c"]);
        }

        fn one_query_lists_the_tasks_with_something_to_publish(store: &TestStore) {
            let db = store.open();
            for (uuid, id) in [("run", "1"), ("shown", "2"), ("done", "3"), ("waits", "4")] {
                assert!(db.queue_source_task(&item_task(uuid, id)).unwrap());
            }
            db.insert_queued(&new_task("local")).unwrap();
            // (uuid, labels_state), sorted by uuid.
            let due = |retry_now| -> Vec<(String, Option<String>)> {
                let mut due: Vec<_> = db
                    .publishing_due(shown, retry_now)
                    .unwrap()
                    .into_iter()
                    .map(|h| (h.task.uuid, h.publication.and_then(|p| p.labels_state)))
                    .collect();
                due.sort();
                due
            };
            // Nothing published yet: every polled task (never the local one).
            assert_eq!(due(false).len(), 4);
            // Labels that show the status: not listed while it lasts.
            for uuid in ["shown", "done"] {
                assert!(db.take_publish_lease(uuid, "me", MINUTE, None).unwrap().is_some());
                assert!(db.record_labels(uuid, "me", "processing").unwrap());
                assert!(db.release_publish_lease(uuid, "me").unwrap());
            }
            // A failed attempt: left out until its wait is over (the server's clock).
            assert!(db.take_publish_lease("waits", "me", MINUTE, None).unwrap().is_some());
            assert!(db.record_publish_error("waits", "me", "HTTP 502", MINUTE).unwrap());
            // A finished task is listed whatever its labels show (its result is due).
            row::claim(&db, "done", &Claim::test(1)).unwrap();
            row::finish(&db, "done", Owner::test(1), Status::Completed, None).unwrap();
            assert_eq!(
                due(false),
                [("done".to_string(), Some("processing".to_string())), ("run".to_string(), None)]
            );
            let all: Vec<String> = due(true).into_iter().map(|(u, _)| u).collect();
            assert_eq!(all, ["done", "run", "waits"]);
            // Paused: "shown"'s labels are stale again.
            db.execute_raw("UPDATE tasks SET status = 'paused' WHERE uuid = 'shown'").unwrap();
            assert!(due(false).iter().any(|(u, _)| u == "shown"));
            // One task with its publication, as the poller reads it after queueing.
            let h = db.held_task("waits").unwrap().unwrap();
            assert_eq!(h.task.uuid, "waits");
            assert_eq!(h.publication.unwrap().attempts, 1);
            assert_eq!(db.held_task("local").unwrap(), None);
            let h = db.held_task("run").unwrap().unwrap();
            assert_eq!(h.publication, None);
        }

        fn an_open_task_submitted_by_hand_keeps_the_item_from_being_queued(store: &TestStore) {
            let db = store.open();
            db.insert_queued(&item_task("manual", "7")).unwrap();
            assert!(!db.queue_source_task(&item_task("polled", "7")).unwrap());
            assert_eq!(
                db.task_holding_item(&item_task("x", "7").key)
                    .unwrap()
                    .unwrap()
                    .uuid,
                "manual"
            );
        }

        fn the_lease_is_exclusive_until_it_expires_or_its_owner_is_dead(store: &TestStore) {
            let db = store.open();
            db.queue_source_task(&item_task("a", "1")).unwrap();
            let taken = |owner, ttl, dead| db.take_publish_lease("a", owner, ttl, dead).unwrap();
            let before = db.now_ms().unwrap();
            let p = taken("p1", MINUTE, None).unwrap();
            assert_eq!(p.lease_owner.as_deref(), Some("p1"));
            // The expiry is on the database server's clock.
            let until = p.lease_until_ms.unwrap();
            assert!(until >= before + 60_000 && until <= db.now_ms().unwrap() + 60_000, "{until}");
            assert_eq!(taken("p2", MINUTE, None), None);
            // Renewal by the holder; nobody else renews it.
            assert!(taken("p1", Duration::ZERO, None).is_some());
            assert!(!db.renew_publish_lease("a", "p2", MINUTE).unwrap());
            // Expired.
            std::thread::sleep(Duration::from_millis(20));
            assert!(taken("p2", MINUTE, None).is_some());
            assert!(!db.renew_publish_lease("a", "p1", MINUTE).unwrap());
            assert!(db.renew_publish_lease("a", "p2", MINUTE).unwrap());
            // Held by a process found dead.
            assert_eq!(taken("p3", MINUTE, Some("p1")), None);
            assert!(taken("p3", MINUTE, Some("p2")).is_some());
            assert!(db.record_labels("a", "p3", "processing").unwrap());
            assert!(!db.record_labels("a", "p2", "done").unwrap());
            let before = db.now_ms().unwrap();
            assert!(
                db.record_publish_error("a", "p3", "HTTP 502", Duration::from_secs(9))
                    .unwrap()
            );
            let p = db.publication("a").unwrap().unwrap();
            assert_eq!(p.labels_state.as_deref(), Some("processing"));
            assert_eq!(p.attempts, 1);
            let next = p.next_attempt_ms.unwrap();
            assert!(next >= before + 9_000 && next <= db.now_ms().unwrap() + 9_000, "{next}");
            assert_eq!(p.lease_owner, None);
            assert_eq!(p.comment_state, CommentState::None);
            // What the lease taker gets back is the row as it is now.
            let p = taken("p4", MINUTE, None).unwrap();
            assert_eq!((p.attempts, p.labels_state.as_deref()), (1, Some("processing")));
        }

        fn forge_texts_are_bounded_and_escaped_before_they_are_stored(store: &TestStore) {
            let db = store.open();
            let mut t = item_task("a", "1");
            t.user = Some(format!("eve\n[ERROR] forged{}", "x".repeat(1000)));
            assert!(db.queue_source_task(&t).unwrap());
            let user = db.get("a").unwrap().unwrap().user.unwrap();
            assert!(user.starts_with("eve\\n[ERROR] forged"), "{user}");
            assert!(user.len() < untrusted::MAX_NAME_BYTES + 64 && user.contains("[cut: "));

            assert!(db.take_publish_lease("a", "me", MINUTE, None).unwrap().is_some());
            let error = format!("forge said: \u{1b}[31mno\n{}", "e".repeat(100_000));
            assert!(db.record_publish_error("a", "me", &error, MINUTE).unwrap());
            let kept = db.publication("a").unwrap().unwrap().last_error.unwrap();
            assert!(
                kept.starts_with("forge said: \\u{1b}[31mno\\n"),
                "{}",
                &kept[..80]
            );
            assert!(kept.len() < untrusted::MAX_DB_ERROR_BYTES + 64);

            assert!(db.take_publish_lease("a", "me", MINUTE, None).unwrap().is_some());
            assert!(db.mark_comment_posting("a", "me").unwrap());
            assert!(
                db.record_comment("a", "me", "1\r\n2", Some("javascript:alert(1)"))
                    .unwrap()
            );
            let p = db.publication("a").unwrap().unwrap();
            assert_eq!(p.comment_id.as_deref(), Some("1\\r\\n2"));
            assert_eq!(p.comment_url, None);
            assert!(!is_web_url(&format!(
                "https://x/{}",
                "a".repeat(MAX_URL_BYTES)
            )));
        }

        fn only_a_web_url_is_kept_as_the_items_page(store: &TestStore) {
            let db = store.open();
            db.queue_source_task(&item_task("a", "1")).unwrap();
            for bad in [
                "javascript:alert(1)",
                "data:text/html,x",
                "https://x/ y",
                "http://",
                "https:///etc/passwd",
                "",
            ] {
                assert!(!db.record_item_url("a", bad).unwrap(), "{bad}");
            }
            assert_eq!(db.publication("a").unwrap(), None);
            assert!(
                db.record_item_url("a", "https://github.com/acme/app/issues/1")
                    .unwrap()
            );
            // Recording it leaves the publishing state alone.
            assert!(db.take_publish_lease("a", "me", MINUTE, None).unwrap().is_some());
            assert!(db.record_labels("a", "me", "processing").unwrap());
            let p = db.publication("a").unwrap().unwrap();
            assert_eq!(
                p.item_url.as_deref(),
                Some("https://github.com/acme/app/issues/1")
            );
            assert_eq!(p.labels_state.as_deref(), Some("processing"));
            assert_eq!(p.lease_owner.as_deref(), Some("me"));
        }

        fn the_change_advances_one_recorded_step_at_a_time_under_the_lease(store: &TestStore) {
            let db = store.open();
            assert!(db.queue_source_task(&item_task("a", "1")).unwrap());
            assert!(db.take_publish_lease("a", "me", MINUTE, None).unwrap().is_some());
            let none = ChangeFields::default();
            assert_eq!(db.publication("a").unwrap().unwrap().change_state, ChangeState::None);
            // Only the holder, only from the state it says.
            assert!(!db.advance_change("a", "other", ChangeState::None, ChangeState::Committing, none).unwrap());
            assert!(db.advance_change("a", "me", ChangeState::None, ChangeState::Committing, none).unwrap());
            assert!(!db.advance_change("a", "me", ChangeState::None, ChangeState::Committing, none).unwrap());
            let commit = "c".repeat(40);
            assert!(db.advance_change("a", "me", ChangeState::Committing, ChangeState::Committed,
                ChangeFields { commit: Some(&commit), ..none }).unwrap());
            assert!(db.advance_change("a", "me", ChangeState::Committed, ChangeState::Pushing,
                ChangeFields { branch: Some("ctxhost/issue-1-abcd1234"), base: Some("main"), ..none }).unwrap());
            // A field not given is kept.
            assert!(db.advance_change("a", "me", ChangeState::Pushing, ChangeState::Pushed, none).unwrap());
            assert!(db.advance_change("a", "me", ChangeState::Pushed, ChangeState::Opening, none).unwrap());
            assert!(db.advance_change("a", "me", ChangeState::Opening, ChangeState::Opened,
                ChangeFields { pr_number: Some(7), pr_url: Some("javascript:alert(1)"), ..none }).unwrap());
            let p = db.publication("a").unwrap().unwrap();
            assert_eq!(p.change_state, ChangeState::Opened);
            assert_eq!(p.change_commit.as_deref(), Some(commit.as_str()));
            assert_eq!(p.change_branch.as_deref(), Some("ctxhost/issue-1-abcd1234"));
            assert_eq!(p.change_base.as_deref(), Some("main"));
            assert_eq!(p.pr_number, Some(7));
            assert_eq!(p.pr_url, None, "not a web URL: not kept");
            assert!(p.change_state.is_done());
            // The joined read sees the same.
            let h = db.held_task("a").unwrap().unwrap();
            assert_eq!(h.publication.unwrap(), p);
        }

        fn concurrent_queueing_of_one_item_inserts_one_task(store: &TestStore) {
            store.open();
            let threads: Vec<_> = (0..6)
                .map(|i| {
                    let p = store.contexts().to_path_buf();
                    let spec = store.spec.clone();
                    std::thread::spawn(move || {
                        let db = Db::open(&spec, &p).unwrap();
                        db.queue_source_task(&item_task(&format!("t{i}"), "9"))
                            .unwrap()
                    })
                })
                .collect();
            let won = threads
                .into_iter()
                .map(|t| t.join().unwrap())
                .filter(|w| *w)
                .count();
            assert_eq!(won, 1);
        }
    }
}
