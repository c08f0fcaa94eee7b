//! The API's task operations: each a method of [`Api`] that the HTTP handlers
//! ([`super::routes`]) and the MCP tools ([`crate::web::mcp`]) share, on the same operations as
//! the CLI ([`crate::ops::submit`], [`crate::ops::control`], [`crate::ops::show`]) so each
//! gives the CLI's messages. They block (database and file reads): call them on a blocking
//! thread.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::Api;
use super::problem::Problem;
use crate::db::{Status, TaskRow};
use crate::ops::control::{self, Stopped};
use crate::web::files::TaskFile;
use crate::web::pager;
use crate::web::queries::{Queries, TaskPageQuery};

/// Most rows one page of the task list holds.
pub const MAX_PAGE: u32 = 500;
/// Rows of a page of the task list when `limit` is not given.
pub const DEFAULT_PAGE: u32 = 50;
/// Most messages one page of a task's history holds.
pub const MAX_MESSAGES: u32 = 1000;
/// Largest file handed out whole, bytes (as the dashboard's download).
pub const FILE_MAX: u64 = crate::web::file_pages::DOWNLOAD_MAX;

/// A page of the task list.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TaskPage {
    /// The tasks, newest first (by `created_at`, then UUID).
    pub tasks: Vec<TaskRow>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// One task in full: its row (counters, status, error), where its directory is, its answer,
/// its cost and what was published for it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TaskDetail {
    /// The row of the task store.
    pub task: TaskRow,
    /// Where its directory is: `running`, `paused`, `completed`, `bucket` (a copy from the
    /// bucket of `context_storage.remote`), or `null` when it has none.
    pub dir_state: Option<String>,
    /// The final answer of a completed task.
    pub result: Option<String>,
    /// Its cost in US dollars by `llm.pricing`, when the model is priced.
    pub cost_usd: Option<f64>,
    /// What was published to its GitHub / GitLab item (polled tasks only).
    pub publication: Option<crate::db::sources::Publication>,
    /// metadata.json `inherited_from`: the earlier task of the same key this one started from.
    #[schema(value_type = Option<Object>)]
    pub inherited_from: Option<crate::task::InheritedFrom>,
}

/// A task to queue (`POST /api/v1/tasks`; the arguments of MCP `submit_task` too); checked as
/// `ctxhost submit` checks its flags.
// One type for both: utoipa derives its schema in the OpenAPI document, schemars the MCP tool's.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct NewTaskRequest {
    /// The user message that starts the task (1 byte to 1 MiB of text, not blank, no NUL byte).
    #[schema(min_length = 1, max_length = 1048576)]
    #[schemars(length(min = 1, max = 1048576))]
    pub prompt: String,
    /// `github`, `gitlab` or `local` (default); github and gitlab need `owner` and `repo`.
    #[serde(default)]
    #[schema(pattern = "^(github|gitlab|local)$")]
    #[schemars(regex(pattern = "^(github|gitlab|local)$"))]
    pub source: Option<String>,
    /// Repository owner (required for github/gitlab).
    #[serde(default)]
    pub owner: Option<String>,
    /// Repository name (required for github/gitlab).
    #[serde(default)]
    pub repo: Option<String>,
    /// `issue` or `pull_request`.
    #[serde(default, rename = "type")]
    #[schema(pattern = "^(issue|pull_request)$")]
    #[schemars(regex(pattern = "^(issue|pull_request)$"))]
    pub task_type: Option<String>,
    /// Issue or pull request number / id.
    #[serde(default)]
    pub id: Option<String>,
    /// Who submits the task.
    #[serde(default)]
    pub user: Option<String>,
    /// The model to record for the task instead of the config's `llm.model`.
    #[serde(default)]
    pub model: Option<String>,
    /// Do not start from an earlier completed task with the same task key.
    #[serde(default)]
    pub no_inherit: bool,
}

/// What a lifecycle request may carry (`POST /api/v1/tasks/{uuid}/pause`, …).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ControlRequest {
    /// Why the task is paused (pause only; shown by `ctxhost show` until it is resumed).
    #[serde(default)]
    pub reason: Option<String>,
}

/// A change of a task's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// `ctxhost pause`.
    Pause,
    /// `ctxhost resume`.
    Resume,
    /// `ctxhost stop`.
    Stop,
    /// `ctxhost retry`.
    Retry,
}

/// What a lifecycle request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The running task pauses at its next safe point.
    PauseRequested,
    /// The paused task is queued again.
    Resumed,
    /// The running task stops at its next safe point.
    StopRequested,
    /// The task was queued or paused: it is stopped now.
    Stopped,
    /// The failed task is queued again, to continue from its context.
    Retried,
}

/// The answer to a lifecycle request.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ControlResult {
    /// What was done.
    pub outcome: Outcome,
    /// The task's row afterwards.
    pub task: TaskRow,
}

/// A page of a task's history (messages.jsonl), by `seq`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct MessagePage {
    /// The messages (history lines as in messages.jsonl, secrets redacted), in `seq` order.
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<serde_json::Value>,
    /// Pass as `after_seq` for the next page; `null` when this page reached the end of the
    /// file (as it is now: a running task adds more).
    pub next_after_seq: Option<u64>,
}

/// A file of a task's directory.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct FileEntry {
    /// Its name (`messages.jsonl`, …): `GET /api/v1/tasks/{uuid}/files/{name}`.
    pub name: String,
    /// Its size, bytes.
    pub bytes: u64,
}

/// The task list's filters and position, as the query string gives them.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Only tasks with this status.
    pub status: Option<Status>,
    /// Only tasks from this source (`github`, `gitlab`, `local`).
    pub source: Option<String>,
    /// Only tasks of this repository owner (task key).
    pub owner: Option<String>,
    /// Only tasks of this repository (task key).
    pub repo: Option<String>,
    /// Only tasks of this type (`issue`, `pull_request`; task key).
    #[serde(rename = "type")]
    pub task_type: Option<String>,
    /// Only tasks of this issue or pull request id (task key).
    pub id: Option<String>,
    /// Only tasks created at or after this time (RFC 3339, e.g. `2026-12-01T00:00:00Z`).
    pub since: Option<String>,
    /// Tasks per page (1 to 500; default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// Where the page starts: `next_cursor` of the page before (opaque).
    pub cursor: Option<String>,
}

/// The history's paging, as the query string gives it.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MessageParams {
    /// Only messages whose `seq` is greater (default: from the first).
    pub after_seq: Option<u64>,
    /// Messages per page (1 to 1000; default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// The cursor after `row`: its `created_at` and UUID (opaque to clients).
fn cursor_of(row: &TaskRow) -> String {
    format!("{}_{}", row.created_at, row.uuid)
}

/// `(created_at, uuid)` of a cursor made by [`cursor_of`]; 400 for anything else.
fn parse_cursor(cursor: &str) -> Result<(String, String), Problem> {
    let bad = || {
        Problem::bad_request(format!(
            "cursor {cursor:?} is not one this server gave (pass `next_cursor` of the page before as it is)"
        ))
    };
    let (created, uuid) = cursor.rsplit_once('_').ok_or_else(bad)?;
    chrono::DateTime::parse_from_rfc3339(created).map_err(|_| bad())?;
    let uuid = crate::layout::parse_uuid(uuid).map_err(|_| bad())?;
    Ok((created.to_string(), uuid))
}

/// `since` as stored (RFC 3339 UTC with milliseconds); 400 when it is not RFC 3339.
fn parse_since(since: &str) -> Result<String, Problem> {
    chrono::DateTime::parse_from_rfc3339(since)
        .map(|t| {
            t.with_timezone(&chrono::Utc)
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        })
        .map_err(|e| {
            Problem::bad_request(format!(
                "since {since:?} is not an RFC 3339 time such as 2026-12-01T00:00:00Z: {e}"
            ))
        })
}

/// A task's UUID from a path: whole and canonical; 404 for anything else.
pub fn uuid_of(given: &str) -> Result<String, Problem> {
    crate::layout::parse_uuid(given).map_err(|e| Problem::not_found(e.to_string()))
}

impl Api {
    /// The row of task `uuid`; 404 (with the CLI's message) when there is none.
    pub fn row(&self, db: &crate::db::Db, uuid: &str) -> Result<TaskRow, Problem> {
        db.get(uuid)?.ok_or_else(|| {
            Problem::not_found(format!("no task with UUID {uuid} in {}", db.location()))
        })
    }

    /// One page of the task list.
    pub fn list(&self, p: &ListParams) -> Result<TaskPage, Problem> {
        let limit = p.limit.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(Problem::bad_request(format!(
                "limit {limit}: expected 1 to {MAX_PAGE}"
            )));
        }
        let q = TaskPageQuery {
            status: p.status,
            source: p.source.clone(),
            owner: p.owner.clone(),
            repo: p.repo.clone(),
            task_type: p.task_type.clone(),
            task_id: p.id.clone(),
            since: p.since.as_deref().map(parse_since).transpose()?,
            after: p.cursor.as_deref().map(parse_cursor).transpose()?,
            limit: limit + 1,
        };
        let db = self.store.get()?;
        let mut tasks = Queries::new(&db).task_page(&q)?;
        let more = tasks.len() > limit as usize;
        tasks.truncate(limit as usize);
        let next_cursor = if more {
            tasks.last().map(cursor_of)
        } else {
            None
        };
        Ok(TaskPage { tasks, next_cursor })
    }

    /// Task `uuid` in full.
    pub fn get(&self, uuid: &str) -> Result<TaskDetail, Problem> {
        let db = self.store.get()?;
        self.row(&db, uuid)?;
        let report =
            crate::ops::show::show_with(&db, &self.layout, uuid, 0, self.remote.as_deref())?;
        let cost_usd =
            crate::task::cost::task_cost(&self.layout, &report.task, &self.config.llm.pricing);
        Ok(TaskDetail {
            task: report.task,
            dir_state: report.dir_state,
            result: report.result.map(|r| self.redactor.redact(&r)),
            cost_usd,
            publication: report.publication,
            inherited_from: report.inherited_from,
        })
    }

    /// Queue the task `req` describes, checked as `ctxhost submit` checks its flags.
    pub fn create(&self, req: &NewTaskRequest) -> Result<TaskRow, Problem> {
        crate::ops::submit::check_prompt(&req.prompt, "")?;
        let parts = crate::ops::submit::KeyParts {
            source: req.source.as_deref(),
            owner: req.owner.as_deref(),
            repo: req.repo.as_deref(),
            task_type: req.task_type.as_deref(),
            id: req.id.as_deref(),
        };
        let key = crate::ops::submit::task_key(&parts, str::to_string)?;
        let plain = |field: &str, v: &Option<String>| -> Result<Option<String>, Problem> {
            match v.as_deref().map(str::trim) {
                None => Ok(None),
                Some("") => Err(Problem::bad_request(format!("{field} must not be empty"))),
                Some(s) if s.chars().any(char::is_control) => Err(Problem::bad_request(format!(
                    "{field} must not contain control characters"
                ))),
                Some(s) => Ok(Some(s.to_string())),
            }
        };
        let user = plain("user", &req.user)?;
        let model = plain("model", &req.model)?;
        let mut config = (*self.config).clone();
        if let Some(m) = model {
            config.llm.model = m;
        }
        let row = crate::ops::submit::submit(
            &config,
            &self.layout,
            crate::ops::submit::Submission {
                prompt: req.prompt.clone(),
                key,
                user,
                no_inherit: req.no_inherit,
                // Not taken from a request: a caller naming a host directory for the built-in
                // write tools and `shell` would own it. The config's `workspace` applies.
                workspace: None,
            },
        )?;
        tracing::info!(uuid = row.uuid, "task submitted through the API");
        Ok(row)
    }

    /// Pause, resume, stop or retry task `uuid` (as `ctxhost pause|resume|stop|retry`).
    pub fn control(
        &self,
        uuid: &str,
        action: Action,
        reason: Option<&str>,
    ) -> Result<ControlResult, Problem> {
        let db = self.store.get()?;
        self.row(&db, uuid)?;
        let remote = self.remote.as_deref();
        let reason = reason.map(str::trim).filter(|r| !r.is_empty());
        let outcome = match action {
            Action::Pause => control::pause(&db, uuid, reason).map(|()| Outcome::PauseRequested),
            Action::Resume => {
                control::resume_with(&db, &self.layout, remote, uuid).map(|()| Outcome::Resumed)
            }
            Action::Stop => control::stop(&db, &self.layout, uuid).map(|s| match s {
                Stopped::Requested => Outcome::StopRequested,
                Stopped::Now { .. } => Outcome::Stopped,
            }),
            Action::Retry => {
                control::retry_with(&db, &self.layout, remote, uuid).map(|()| Outcome::Retried)
            }
        }?;
        tracing::info!(uuid, ?action, "API action");
        Ok(ControlResult {
            outcome,
            task: self.row(&db, uuid)?,
        })
    }

    /// The task's directory to read; 404 when it has none (here or in the bucket).
    fn dir(&self, uuid: &str) -> Result<crate::web::files::TaskDir, Problem> {
        crate::web::files::open_for_reading(&self.layout, self.remote.as_deref(), uuid)?
            .ok_or_else(|| Problem::not_found(format!("task {uuid} has no directory")))
    }

    /// A page of task `uuid`'s history: the messages whose `seq` is after `p.after_seq`.
    pub fn messages(&self, uuid: &str, p: &MessageParams) -> Result<MessagePage, Problem> {
        let limit = p.limit.unwrap_or(100);
        if !(1..=MAX_MESSAGES).contains(&limit) {
            return Err(Problem::bad_request(format!(
                "limit {limit}: expected 1 to {MAX_MESSAGES}"
            )));
        }
        let db = self.store.get()?;
        self.row(&db, uuid)?;
        let mut page = MessagePage {
            messages: Vec::new(),
            next_after_seq: None,
        };
        let Some(mut f) = self.dir(uuid)?.open(&TaskFile::Messages) else {
            return Ok(page);
        };
        let start = match p.after_seq {
            Some(s) => pager::find_seq(&mut f, s.saturating_add(1))?,
            None => 0,
        };
        f.seek(SeekFrom::Start(start))?;
        let mut reader = BufReader::new(f);
        let mut line = Vec::new();
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 || !line.ends_with(b"\n") {
                break;
            }
            let text = self.redactor.redact(&String::from_utf8_lossy(&line));
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
                continue;
            };
            if page.messages.len() == limit as usize {
                page.next_after_seq = page
                    .messages
                    .last()
                    .and_then(|m| m.get("seq"))
                    .and_then(serde_json::Value::as_u64);
                break;
            }
            page.messages.push(v);
        }
        Ok(page)
    }

    /// The files of task `uuid`'s directory the API hands out (the dashboard's list).
    pub fn files(&self, uuid: &str) -> Result<Vec<FileEntry>, Problem> {
        let db = self.store.get()?;
        self.row(&db, uuid)?;
        let dir = match crate::web::files::open_for_reading(
            &self.layout,
            self.remote.as_deref(),
            uuid,
        )? {
            Some(d) => d,
            None => return Ok(Vec::new()),
        };
        Ok(crate::web::files::top_level_names()
            .filter_map(|name| {
                let f = dir.open(&TaskFile::top_level(name)?)?;
                Some(FileEntry {
                    name: name.to_string(),
                    bytes: f.metadata().ok()?.len(),
                })
            })
            .collect())
    }

    /// The bytes of file `name` of task `uuid`, every secret the server knows redacted (as
    /// the dashboard's download); 404 for a name not in [`Api::files`]' list or missing,
    /// 413 for a file larger than [`FILE_MAX`].
    pub fn file(&self, uuid: &str, name: &str) -> Result<Vec<u8>, Problem> {
        let db = self.store.get()?;
        self.row(&db, uuid)?;
        let missing = || Problem::not_found(format!("task {uuid} has no file {name:?}"));
        let file = TaskFile::top_level(name).ok_or_else(missing)?;
        let f = self.dir(uuid)?.open(&file).ok_or_else(missing)?;
        let len = f.metadata()?.len();
        if len > FILE_MAX {
            return Err(Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{name} is {len} bytes, more than the API hands out ({FILE_MAX} bytes); read it in the task directory"
                ),
            ));
        }
        let mut bytes = Vec::with_capacity(len as usize);
        f.take(FILE_MAX).read_to_end(&mut bytes)?;
        Ok(self.redactor.redact_bytes(bytes))
    }

    /// The compressions of task `uuid` (summaries.jsonl with the ranges they replaced).
    pub fn compactions(&self, uuid: &str) -> Result<Vec<serde_json::Value>, Problem> {
        let db = self.store.get()?;
        self.row(&db, uuid)?;
        let Some(dir) =
            crate::web::files::open_for_reading(&self.layout, self.remote.as_deref(), uuid)?
        else {
            return Ok(Vec::new());
        };
        let record = crate::ops::compactions::compactions(dir.handle())?;
        record
            .compactions
            .iter()
            .map(|c| {
                let text = self.redactor.redact(&serde_json::to_string(c)?);
                Ok(serde_json::from_str(&text)?)
            })
            .collect::<anyhow::Result<Vec<_>>>()
            .map_err(Problem::from)
    }

    /// The `ctxhost stats` figures.
    pub fn stats(&self) -> Result<crate::db::Stats, Problem> {
        Ok(self.store.get()?.stats()?)
    }
}
