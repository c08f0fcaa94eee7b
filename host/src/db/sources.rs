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
//!   and every write below is conditional on holding it. The exactly-once argument built on
//!   these is in [`crate::sources::publish`].
//!
//! Every statement is one statement in SQL that SQLite and PostgreSQL both accept (numbered
//! placeholders, `ON CONFLICT DO NOTHING`, no `IS ?`, the column `"user"` quoted, a cast where
//! PostgreSQL cannot infer a parameter's type from a column); lease times are milliseconds
//! since the Unix epoch.

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use super::{COLUMNS, Db, DbError, NewTask, TaskKey, TaskRow, now_rfc3339, raw_row};
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

/// Where the result comment of a task is (`publications.comment_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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

/// One `publications` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    /// Not before this time (ms since the Unix epoch) is the next attempt made by a worker.
    pub next_attempt_ms: Option<i64>,
    /// The item's web page as the forge gave it when the task was queued (`http(s)://` only;
    /// [`Db::record_item_url`]).
    pub item_url: Option<String>,
}

const PUB_COLUMNS: &str = "task_uuid, labels_state, comment_state, comment_id, comment_url, posted_at, \
lease_owner, lease_until_ms, attempts, last_error, next_attempt_ms, item_url";

fn pub_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Publication> {
    Ok(Publication {
        task_uuid: r.get(0)?,
        labels_state: r.get(1)?,
        comment_state: CommentState::parse(&r.get::<_, String>(2)?),
        comment_id: r.get(3)?,
        comment_url: r.get(4)?,
        posted_at: r.get(5)?,
        lease_owner: r.get(6)?,
        lease_until_ms: r.get(7)?,
        attempts: r.get(8)?,
        last_error: r.get(9)?,
        next_attempt_ms: r.get(10)?,
        item_url: r.get(11)?,
    })
}

impl Db {
    /// Insert `task` as `queued`, holding its item ([`item_id`] of its key), unless a task
    /// already holds the item or a queued, running or paused task has the same key. One
    /// statement (`INSERT … SELECT … WHERE NOT EXISTS … ON CONFLICT DO NOTHING` against the
    /// unique `source_item`): of two pollers queueing the same item at once, one inserts.
    /// Returns whether it was inserted. Errors for a key with a part missing.
    pub fn queue_source_task(&self, task: &NewTask) -> Result<bool, DbError> {
        let item = item_id(&task.key).ok_or_else(|| DbError::BadRow {
            path: self.path().display().to_string(),
            uuid: task.uuid.clone(),
            message: "a polled task needs a full task key (source, owner, repo, type, id)".into(),
        })?;
        let now = now_rfc3339();
        let k = &task.key;
        let n = self.retry(|c| {
            c.execute(
                "INSERT INTO tasks (uuid, task_source, owner, repo, task_type, task_id, status, created_at, \
                 updated_at, llm_provider, model, context_length, \"user\", prompt, source_item) \
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, 'queued', ?7, ?7, ?8, ?9, CAST(?10 AS BIGINT), ?11, ?12, ?13 \
                 WHERE NOT EXISTS (SELECT 1 FROM tasks WHERE task_source = ?2 AND owner = ?3 AND repo = ?4 \
                 AND task_type = ?5 AND task_id = ?6 AND status IN ('queued', 'running', 'paused')) \
                 ON CONFLICT DO NOTHING",
                params![
                    task.uuid,
                    k.task_source,
                    k.owner,
                    k.repo,
                    k.task_type,
                    k.task_id,
                    now,
                    task.llm_provider,
                    task.model,
                    task.context_length as i64,
                    task.user.as_deref().map(untrusted::name),
                    task.prompt,
                    item,
                ],
            )
        })?;
        Ok(n == 1)
    }

    /// The task that keeps the item of `key` from being queued again: the one holding it
    /// (`source_item`), or a queued, running or paused task with the same key.
    pub fn task_holding_item(&self, key: &TaskKey) -> Result<Option<TaskRow>, DbError> {
        let Some(item) = item_id(key) else {
            return Ok(None);
        };
        let raw = self.retry(|c| {
            c.query_row(
                &format!(
                    "SELECT {COLUMNS} FROM tasks WHERE source_item = ?1 OR (task_source = ?2 AND owner = ?3 \
                     AND repo = ?4 AND task_type = ?5 AND task_id = ?6 AND status IN ('queued', 'running', 'paused')) \
                     ORDER BY created_at DESC LIMIT 1"
                ),
                params![
                    item,
                    key.task_source,
                    key.owner,
                    key.repo,
                    key.task_type,
                    key.task_id
                ],
                raw_row,
            )
            .optional()
        })?;
        raw.map(|r| self.finish_row(r)).transpose()
    }

    /// Tasks whose item is still held (result not yet published), oldest first.
    pub fn unpublished_tasks(&self) -> Result<Vec<TaskRow>, DbError> {
        let raws = self.retry(|c| {
            let mut st = c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM tasks WHERE source_item IS NOT NULL ORDER BY created_at, uuid"
            ))?;
            let rows = st.query_map([], raw_row)?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
        })?;
        raws.into_iter().map(|r| self.finish_row(r)).collect()
    }

    /// The `publications` row of `uuid`, if any.
    pub fn publication(&self, uuid: &str) -> Result<Option<Publication>, DbError> {
        self.retry(|c| {
            c.query_row(
                &format!("SELECT {PUB_COLUMNS} FROM publications WHERE task_uuid = ?1"),
                [uuid],
                pub_row,
            )
            .optional()
        })
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
        let n = self.retry(|c| {
            c.execute(
                "INSERT INTO publications (task_uuid, created_at, updated_at) VALUES (?1, ?2, ?2) \
                 ON CONFLICT DO NOTHING",
                params![uuid, now],
            )?;
            c.execute(
                "UPDATE publications SET item_url = ?2, updated_at = ?3 WHERE task_uuid = ?1",
                params![uuid, url, now],
            )
        })?;
        Ok(n == 1)
    }

    /// Take (or renew) the publishing lease of `uuid` for `owner` until `until_ms`: the row is
    /// created if missing, then one conditional UPDATE takes the lease when nobody holds it,
    /// `owner` holds it, it expired before `now_ms`, or it is held by `dead_owner` (a process
    /// the caller found dead). Returns whether `owner` holds it now.
    pub fn take_publish_lease(
        &self,
        uuid: &str,
        owner: &str,
        until_ms: i64,
        now_ms: i64,
        dead_owner: Option<&str>,
    ) -> Result<bool, DbError> {
        let now = now_rfc3339();
        let n = self.retry(|c| {
            c.execute(
                "INSERT INTO publications (task_uuid, created_at, updated_at) VALUES (?1, ?2, ?2) \
                 ON CONFLICT DO NOTHING",
                params![uuid, now],
            )?;
            c.execute(
                "UPDATE publications SET lease_owner = ?2, lease_until_ms = ?3, updated_at = ?4 \
                 WHERE task_uuid = ?1 AND (lease_owner IS NULL OR lease_owner = ?2 OR lease_until_ms < ?5 \
                 OR lease_owner = ?6)",
                params![uuid, owner, until_ms, now, now_ms, dead_owner],
            )
        })?;
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
        let n = self.retry(|c| {
            c.execute(
                "UPDATE publications SET labels_state = ?3, attempts = 0, last_error = NULL, \
                 next_attempt_ms = NULL, updated_at = ?4 WHERE task_uuid = ?1 AND lease_owner = ?2",
                params![uuid, owner, state, now],
            )
        })?;
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
        let n = self.retry(|c| {
            c.execute(
                "UPDATE publications SET comment_state = 'posted', comment_id = ?3, comment_url = ?4, \
                 posted_at = ?5, attempts = 0, last_error = NULL, next_attempt_ms = NULL, updated_at = ?5 \
                 WHERE task_uuid = ?1 AND lease_owner = ?2 AND comment_state = 'posting'",
                params![uuid, owner, comment_id, comment_url, now],
            )
        })?;
        Ok(n == 1)
    }

    /// A publishing attempt of `owner` failed: count it, keep `error` (it must not hold a
    /// secret; bounded to [`untrusted::MAX_DB_ERROR_BYTES`], control characters escaped), set
    /// when a worker may try again, and give up the lease.
    pub fn record_publish_error(
        &self,
        uuid: &str,
        owner: &str,
        error: &str,
        next_attempt_ms: i64,
    ) -> Result<bool, DbError> {
        let error = untrusted::text(error, untrusted::MAX_DB_ERROR_BYTES);
        let now = now_rfc3339();
        let n = self.retry(|c| {
            c.execute(
                "UPDATE publications SET attempts = attempts + 1, last_error = ?3, next_attempt_ms = ?4, \
                 lease_owner = NULL, lease_until_ms = NULL, updated_at = ?5 \
                 WHERE task_uuid = ?1 AND lease_owner = ?2",
                params![uuid, owner, error, next_attempt_ms, now],
            )
        })?;
        Ok(n == 1)
    }

    /// The result of finished task `uuid` is published (comment posted, final labels set) by
    /// the lease holder `owner`: the task stops holding its item (`source_item` = NULL), so a
    /// new label on the item queues a new task. Returns whether it changed.
    pub fn release_item(&self, uuid: &str, owner: &str) -> Result<bool, DbError> {
        let n = self.retry(|c| {
            c.execute(
                "UPDATE tasks SET source_item = NULL WHERE uuid = ?1 AND source_item IS NOT NULL \
                 AND status IN ('completed', 'failed', 'stopped') AND EXISTS (SELECT 1 FROM publications \
                 WHERE task_uuid = ?1 AND lease_owner = ?2 AND comment_state = 'posted')",
                params![uuid, owner],
            )
        })?;
        Ok(n == 1)
    }

    /// The `source_item` of `uuid` (`None`: not held, or no such task).
    pub fn source_item(&self, uuid: &str) -> Result<Option<String>, DbError> {
        Ok(self
            .retry(|c| {
                c.query_row(
                    "SELECT source_item FROM tasks WHERE uuid = ?1",
                    [uuid],
                    |r| r.get::<_, Option<String>>(0),
                )
                .optional()
            })?
            .flatten())
    }

    /// Run a `publications` UPDATE whose parameters are (uuid, owner, now); returns whether a
    /// row changed.
    fn publication_update(&self, sql: &str, uuid: &str, owner: &str) -> Result<bool, DbError> {
        let now = now_rfc3339();
        let n = self.retry(|c| c.execute(sql, params![uuid, owner, now]))?;
        Ok(n == 1)
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
    use crate::db::testing::new_task;
    use crate::lifecycle::{Claim, row};

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

    #[test]
    fn an_item_is_queued_once_until_its_result_is_published() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        assert!(db.queue_source_task(&item_task("a", "1")).unwrap());
        assert!(!db.queue_source_task(&item_task("b", "1")).unwrap());
        assert!(db.queue_source_task(&item_task("c", "2")).unwrap());
        let key = item_task("x", "1").key;
        assert_eq!(db.task_holding_item(&key).unwrap().unwrap().uuid, "a");
        // Finished, but not published yet: still held.
        row::claim(&db, "a", &Claim::test(1)).unwrap();
        row::finish(&db, "a", 1, Status::Completed, None).unwrap();
        assert!(!db.queue_source_task(&item_task("b", "1")).unwrap());
        // Only the lease holder, after the comment is recorded, releases it.
        assert!(db.take_publish_lease("a", "me", 10, 0, None).unwrap());
        assert!(!db.release_item("a", "me").unwrap());
        assert!(db.mark_comment_posting("a", "me").unwrap());
        assert!(!db.record_comment("a", "other", "c1", None).unwrap());
        assert!(db.record_comment("a", "me", "c1", Some("u")).unwrap());
        assert!(!db.release_item("a", "other").unwrap());
        assert!(db.release_item("a", "me").unwrap());
        assert_eq!(db.task_holding_item(&key).unwrap(), None);
        assert!(db.queue_source_task(&item_task("b", "1")).unwrap());
        let mut held: Vec<String> = db
            .unpublished_tasks()
            .unwrap()
            .into_iter()
            .map(|r| r.uuid)
            .collect();
        held.sort();
        assert_eq!(held, ["b", "c"]);
    }

    #[test]
    fn an_open_task_submitted_by_hand_keeps_the_item_from_being_queued() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
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

    #[test]
    fn the_lease_is_exclusive_until_it_expires_or_its_owner_is_dead() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.queue_source_task(&item_task("a", "1")).unwrap();
        assert!(db.take_publish_lease("a", "p1", 1_000, 0, None).unwrap());
        assert!(!db.take_publish_lease("a", "p2", 2_000, 500, None).unwrap());
        // Renewal by the holder.
        assert!(db.take_publish_lease("a", "p1", 1_500, 500, None).unwrap());
        // Expired.
        assert!(
            db.take_publish_lease("a", "p2", 3_000, 1_600, None)
                .unwrap()
        );
        // Held by a process found dead.
        assert!(
            !db.take_publish_lease("a", "p3", 4_000, 1_700, Some("p1"))
                .unwrap()
        );
        assert!(
            db.take_publish_lease("a", "p3", 4_000, 1_700, Some("p2"))
                .unwrap()
        );
        assert!(db.record_labels("a", "p3", "processing").unwrap());
        assert!(!db.record_labels("a", "p2", "done").unwrap());
        assert!(
            db.record_publish_error("a", "p3", "HTTP 502", 9_000)
                .unwrap()
        );
        let p = db.publication("a").unwrap().unwrap();
        assert_eq!(p.labels_state.as_deref(), Some("processing"));
        assert_eq!((p.attempts, p.next_attempt_ms), (1, Some(9_000)));
        assert_eq!(p.lease_owner, None);
        assert_eq!(p.comment_state, CommentState::None);
    }

    #[test]
    fn forge_texts_are_bounded_and_escaped_before_they_are_stored() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let mut t = item_task("a", "1");
        t.user = Some(format!("eve\n[ERROR] forged{}", "x".repeat(1000)));
        assert!(db.queue_source_task(&t).unwrap());
        let user = db.get("a").unwrap().unwrap().user.unwrap();
        assert!(user.starts_with("eve\\n[ERROR] forged"), "{user}");
        assert!(user.len() < untrusted::MAX_NAME_BYTES + 64 && user.contains("[cut: "));

        assert!(db.take_publish_lease("a", "me", 10, 0, None).unwrap());
        let error = format!("forge said: \u{1b}[31mno\n{}", "e".repeat(100_000));
        assert!(db.record_publish_error("a", "me", &error, 5).unwrap());
        let kept = db.publication("a").unwrap().unwrap().last_error.unwrap();
        assert!(
            kept.starts_with("forge said: \\u{1b}[31mno\\n"),
            "{}",
            &kept[..80]
        );
        assert!(kept.len() < untrusted::MAX_DB_ERROR_BYTES + 64);

        assert!(db.take_publish_lease("a", "me", 10, 0, None).unwrap());
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

    #[test]
    fn only_a_web_url_is_kept_as_the_items_page() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
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
        assert!(db.take_publish_lease("a", "me", 10, 0, None).unwrap());
        assert!(db.record_labels("a", "me", "processing").unwrap());
        let p = db.publication("a").unwrap().unwrap();
        assert_eq!(
            p.item_url.as_deref(),
            Some("https://github.com/acme/app/issues/1")
        );
        assert_eq!(p.labels_state.as_deref(), Some("processing"));
        assert_eq!(p.lease_owner.as_deref(), Some("me"));
    }

    #[test]
    fn concurrent_queueing_of_one_item_inserts_one_task() {
        let dir = tempfile::tempdir().unwrap();
        Db::open(dir.path()).unwrap();
        let threads: Vec<_> = (0..6)
            .map(|i| {
                let p = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    let db = Db::open(&p).unwrap();
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
