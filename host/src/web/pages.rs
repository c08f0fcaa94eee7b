//! The dashboard's pages (GET): task list, task page, one message, file windows, stats, and
//! the error and login pages. Each handler parses its input, reads on a blocking thread, and
//! renders an askama template (HTML-escaped by default: nothing read from a file or the
//! database is ever output unescaped).

use std::collections::HashMap;

use askama::Template;
use axum::Extension;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::answer::{render, see_other};
use super::charts::{self, ColumnChart, HBarChart};
use super::files::{self, TaskFile};
use super::pager::Anchor;
use super::queries::{DURATION_BUCKETS, ListQuery, Queries, SortKey};
use super::security::CsrfCookie;
use super::task_page::{self, Actions, DirInfo, MessageView, Position, Tab, View, ViewBody};
use crate::db::{Status, TaskRow};
use crate::layout::parse_uuid;

/// An error answer, rendered as an HTML page with its status.
#[derive(Debug)]
pub enum WebError {
    /// 404: no such task, file or page (also every refused path).
    NotFound,
    /// 400, with what was wrong.
    BadRequest(String),
    /// 409: the task's state does not allow the action.
    Conflict(String),
    /// 403, with why.
    Forbidden(String),
    /// 500.
    Internal(String),
}

impl From<anyhow::Error> for WebError {
    fn from(e: anyhow::Error) -> Self {
        WebError::Internal(format!("{e:#}"))
    }
}

impl From<std::io::Error> for WebError {
    fn from(e: std::io::Error) -> Self {
        WebError::Internal(e.to_string())
    }
}

impl From<crate::db::DbError> for WebError {
    fn from(e: crate::db::DbError) -> Self {
        WebError::Internal(e.to_string())
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    status: u16,
    title: String,
    message: String,
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            WebError::NotFound => (
                StatusCode::NOT_FOUND,
                "There is no such page, task or file.".to_string(),
            ),
            WebError::BadRequest(m) => (StatusCode::BAD_REQUEST, m),
            WebError::Conflict(m) => (StatusCode::CONFLICT, m),
            WebError::Forbidden(m) => (StatusCode::FORBIDDEN, m),
            WebError::Internal(m) => {
                tracing::warn!("dashboard error: {m}");
                (StatusCode::INTERNAL_SERVER_ERROR, m)
            }
        };
        let page = ErrorPage {
            status: status.as_u16(),
            title: status.canonical_reason().unwrap_or("Error").to_string(),
            message,
        };
        (status, render(&page)).into_response()
    }
}

/// Run `f` on a blocking thread (file and database reads) and answer with its result.
pub async fn blocking<F>(f: F) -> Response
where
    F: FnOnce() -> Result<Response, WebError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => e.into_response(),
        Err(e) => WebError::Internal(format!("request handler failed: {e}")).into_response(),
    }
}

/// Query parameters (`application/x-www-form-urlencoded`), last value wins.
pub struct Params(HashMap<String, String>);

impl Params {
    /// Parse a raw query string.
    pub fn parse(raw: Option<String>) -> Result<Params, WebError> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.as_deref().unwrap_or(""))
            .map_err(|e| WebError::BadRequest(format!("bad query string: {e}")))?;
        Ok(Params(pairs.into_iter().collect()))
    }

    /// The non-empty value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// `name` as a number, if given; 400 if it is not one.
    pub fn number(&self, name: &str) -> Result<Option<u64>, WebError> {
        self.get(name)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    WebError::BadRequest(format!("`{name}` must be a whole number, not {v:?}"))
                })
            })
            .transpose()
    }
}

/// A task's UUID from a URL; anything else is 404.
pub fn task_uuid(given: &str) -> Result<String, WebError> {
    parse_uuid(given).map_err(|_| WebError::NotFound)
}

/// The task a page's URL names ([`named_task`]).
pub enum Named {
    /// Its whole UUID (canonical).
    Task(String),
    /// A redirect to the same page under the whole UUID.
    Elsewhere(Response),
}

/// The task named by `given` in the URL of a page (`/tasks/{given}{rest}?{query}`): a whole
/// UUID, or — as the CLI takes them ([`crate::task_ref`]) — a prefix of at least
/// [`crate::task_ref::MIN_PREFIX_DIGITS`] hexadecimal digits that only one task has, answered
/// by a redirect to the page under its whole UUID, the query kept. 404 for anything else or
/// no such task; 400 naming the tasks (at most [`crate::task_ref::MAX_LISTED`]) when the
/// prefix is ambiguous. Actions (POST) take the whole UUID only.
pub fn named_task(
    state: &AppState,
    given: &str,
    rest: &str,
    query: Option<&str>,
) -> Result<Named, WebError> {
    use crate::task_ref::{MAX_LISTED, TaskRef};
    let prefix = match TaskRef::parse(given).map_err(|_| WebError::NotFound)? {
        TaskRef::Uuid(uuid) => return Ok(Named::Task(uuid)),
        TaskRef::Prefix(prefix) => prefix,
    };
    let limit = u32::try_from(MAX_LISTED + 1).unwrap_or(u32::MAX);
    let rows = state.store.get()?.tasks_with_uuid_prefix(&prefix, limit)?;
    match rows.as_slice() {
        [] => Err(WebError::NotFound),
        [one] => {
            let query = query.map(|q| format!("?{q}")).unwrap_or_default();
            Ok(Named::Elsewhere(see_other(&format!(
                "/tasks/{}{rest}{query}",
                one.uuid
            ))))
        }
        many => {
            let listed: Vec<&str> = many
                .iter()
                .take(MAX_LISTED)
                .map(|r| r.uuid.as_str())
                .collect();
            let more = if many.len() > MAX_LISTED { ", …" } else { "" };
            Err(WebError::BadRequest(format!(
                "UUID prefix {prefix} is ambiguous: it matches {}{more}; give more of the UUID",
                listed.join(", ")
            )))
        }
    }
}

fn status_class(s: Status) -> &'static str {
    s.as_str()
}

/// One line for a task: the task key for github/gitlab, else the start of the prompt.
pub fn describe(r: &TaskRow) -> String {
    if r.task_source != "local" {
        let mut s = format!(
            "{} {}/{}",
            r.task_source,
            r.owner.as_deref().unwrap_or("?"),
            r.repo.as_deref().unwrap_or("?")
        );
        if let Some(t) = &r.task_type {
            s.push_str(&format!(" {t}"));
        }
        if let Some(id) = &r.task_id {
            s.push_str(&format!(" #{id}"));
        }
        return s;
    }
    let first = r
        .prompt
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let (short, cut) = task_page::cut_chars(first, 90);
    if cut > 0 {
        format!("{short}…")
    } else {
        short
    }
}

fn duration_of(r: &TaskRow) -> String {
    let parse = |s: &str| chrono::DateTime::parse_from_rfc3339(s).ok();
    let Some(start) = r.started_at.as_deref().and_then(parse) else {
        return "—".into();
    };
    let end = match r.completed_at.as_deref().and_then(parse) {
        Some(e) => e.with_timezone(&chrono::Utc),
        None if r.status == Status::Running => chrono::Utc::now(),
        None => return "—".into(),
    };
    let ms = (end - start.with_timezone(&chrono::Utc))
        .num_milliseconds()
        .max(0) as u64;
    task_page::millis(ms)
}

fn short_time(t: &str) -> String {
    t.get(..19).unwrap_or(t).replace('T', " ")
}

// ---------------------------------------------------------------- task list

/// A status filter chip.
struct Chip {
    label: String,
    class: String,
    count: u64,
    href: String,
    active: bool,
}

/// A sortable column header.
struct SortLink {
    label: &'static str,
    href: String,
    /// `▲`, `▼` or "".
    arrow: &'static str,
}

/// A row of the task list.
struct RowView {
    uuid: String,
    short_uuid: String,
    href: String,
    status: String,
    requested: String,
    describe: String,
    created: String,
    duration: String,
    calls: i64,
    tools: i64,
    tokens: i64,
    compressions: i64,
    model: String,
    /// Its cost (`llm.pricing`), `—` without a price.
    cost: String,
    error: String,
}

#[derive(Template)]
#[template(path = "tasks.html")]
struct TasksPage {
    chips: Vec<Chip>,
    q: String,
    status: String,
    sort: String,
    dir: String,
    per_page: u64,
    per_page_choices: Vec<u64>,
    sort_links: Vec<SortLink>,
    rows: Vec<RowView>,
    total: u64,
    page: u64,
    pages: u64,
    first_href: String,
    prev_href: String,
    next_href: String,
    last_href: String,
}

/// `GET /`: to the task list.
pub async fn home() -> Response {
    see_other("/tasks")
}

/// The list's URL for `q` (only non-default parameters).
fn list_href(q: &ListQuery) -> String {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    if let Some(s) = q.status {
        pairs.push(("status", s.to_string()));
    }
    if let Some(s) = q.search.as_deref().filter(|s| !s.is_empty()) {
        pairs.push(("q", s.to_string()));
    }
    if q.sort != SortKey::Created || !q.descending {
        pairs.push(("sort", q.sort.name().to_string()));
        pairs.push(("dir", if q.descending { "desc" } else { "asc" }.to_string()));
    }
    if q.per_page != 50 {
        pairs.push(("per_page", q.per_page.to_string()));
    }
    if q.page > 0 {
        pairs.push(("page", (q.page + 1).to_string()));
    }
    if pairs.is_empty() {
        "/tasks".into()
    } else {
        format!(
            "/tasks?{}",
            serde_urlencoded::to_string(&pairs).unwrap_or_default()
        )
    }
}

fn list_query(p: &Params) -> Result<ListQuery, WebError> {
    let status = p
        .get("status")
        .map(|s| s.parse::<Status>().map_err(WebError::BadRequest))
        .transpose()?;
    let sort = match p.get("sort") {
        None => SortKey::Created,
        Some(s) => SortKey::parse(s)
            .ok_or_else(|| WebError::BadRequest(format!("unknown sort key {s:?}")))?,
    };
    let descending = match p.get("dir") {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(d) => {
            return Err(WebError::BadRequest(format!(
                "dir must be asc or desc, not {d:?}"
            )));
        }
    };
    let per_page = p.number("per_page")?.unwrap_or(50).clamp(1, 500);
    let page = p.number("page")?.unwrap_or(1).max(1) - 1;
    Ok(ListQuery {
        status,
        search: p
            .get("q")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty()),
        sort,
        descending,
        page,
        per_page,
    })
}

/// `GET /tasks`: the task list.
pub async fn tasks(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Response {
    blocking(move || {
        let q = list_query(&Params::parse(raw)?)?;
        let db = state.store.get()?;
        let found = Queries::new(&db).list(&q)?;
        let mut rows = Vec::with_capacity(found.uuids.len());
        for uuid in &found.uuids {
            let Some(r) = db.get(uuid)? else { continue };
            rows.push(RowView {
                href: format!("/tasks/{}", r.uuid),
                short_uuid: r.uuid.get(..8).unwrap_or(&r.uuid).to_string(),
                status: r.status.to_string(),
                requested: if r.stop_requested {
                    "stop requested".into()
                } else if r.pause_requested {
                    "pause requested".into()
                } else if r.files_deleted_at.is_some() {
                    "files deleted".into()
                } else {
                    String::new()
                },
                describe: state.redactor.redact(&describe(&r)),
                created: short_time(&r.created_at),
                duration: duration_of(&r),
                calls: r.llm_call_count,
                tools: r.tool_call_count,
                tokens: r.total_tokens,
                compressions: r.compression_count,
                model: r.model.clone().unwrap_or_default(),
                cost: crate::config::pricing::show_cost(crate::task::cost::task_cost(
                    &state.layout,
                    &r,
                    &state.pricing,
                )),
                error: state
                    .redactor
                    .redact(&task_page::cut_chars(r.error_message.as_deref().unwrap_or(""), 160).0),
                uuid: r.uuid,
            });
        }
        let all_count: u64 = found.counts.iter().map(|(_, n)| n).sum();
        let mut chips = vec![Chip {
            label: "all".into(),
            class: "all".into(),
            count: all_count,
            href: list_href(&ListQuery {
                status: None,
                page: 0,
                ..q.clone()
            }),
            active: q.status.is_none(),
        }];
        chips.extend(found.counts.iter().map(|(s, n)| Chip {
            label: s.to_string(),
            class: status_class(*s).into(),
            count: *n,
            href: list_href(&ListQuery {
                status: Some(*s),
                page: 0,
                ..q.clone()
            }),
            active: q.status == Some(*s),
        }));
        let pages = found.total.div_ceil(q.per_page).max(1);
        let at = |page: u64| list_href(&ListQuery { page, ..q.clone() });
        let sort_links = [
            ("Created", SortKey::Created),
            ("Status", SortKey::Status),
            ("Duration", SortKey::Duration),
            ("LLM calls", SortKey::Calls),
            ("Tokens", SortKey::Tokens),
            ("Model", SortKey::Model),
            ("Updated", SortKey::Updated),
        ]
        .into_iter()
        .map(|(label, key)| {
            let active = q.sort == key;
            SortLink {
                label,
                href: list_href(&ListQuery {
                    sort: key,
                    descending: !(active && q.descending),
                    page: 0,
                    ..q.clone()
                }),
                arrow: match (active, q.descending) {
                    (false, _) => "",
                    (true, true) => "▼",
                    (true, false) => "▲",
                },
            }
        })
        .collect();
        let page = TasksPage {
            chips,
            q: q.search.clone().unwrap_or_default(),
            status: q.status.map(|s| s.to_string()).unwrap_or_default(),
            sort: q.sort.name().into(),
            dir: if q.descending { "desc" } else { "asc" }.into(),
            per_page: q.per_page,
            per_page_choices: vec![25, 50, 100, 200],
            sort_links,
            rows,
            total: found.total,
            page: q.page + 1,
            pages,
            first_href: at(0),
            prev_href: if q.page > 0 {
                at(q.page - 1)
            } else {
                String::new()
            },
            next_href: if q.page + 1 < pages {
                at(q.page + 1)
            } else {
                String::new()
            },
            last_href: at(pages - 1),
        };
        Ok(render(&page))
    })
    .await
}

// ---------------------------------------------------------------- task page

/// A notice shown after an action (a fixed text chosen by a code, never text from the URL).
pub struct Notice {
    pub class: &'static str,
    pub text: &'static str,
}

/// The notice for `?notice=CODE`.
pub fn notice(code: &str) -> Option<Notice> {
    let ok = |text| Some(Notice { class: "ok", text });
    match code {
        "pause-requested" => ok(
            "Pause requested: the task pauses at its next safe point (before its next LLM or tool call).",
        ),
        "resumed" => {
            ok("The task is queued again; a worker (`ctxhost run`) continues it from its context.")
        }
        "stop-requested" => ok("Stop requested: the task stops at its next safe point."),
        "stopped" => ok("The task is stopped."),
        "retried" => ok(
            "The failed task is queued again; a worker (`ctxhost run`) continues it from its context, or starts it afresh if it has none.",
        ),
        _ => None,
    }
}

#[derive(Template)]
#[template(path = "task.html")]
struct TaskPage {
    uuid: String,
    status: String,
    describe: String,
    prompt: String,
    error: String,
    requested: String,
    notice: Option<Notice>,
    live: bool,
    /// The view shows the latest lines of its file: it follows the task live.
    view_live: bool,
    fields: Vec<(String, String)>,
    /// The GitHub / GitLab item the task answers, if any.
    source: Option<task_page::SourceItem>,
    actions: Actions,
    dir: Option<DirInfo>,
    no_dir: String,
    tabs: Vec<Tab>,
    body: ViewBody,
    /// The reply being streamed (a running task's `reply.stream`), as far as it arrived.
    streaming: Option<StreamingReply>,
    /// What the running task's process waits for (the model between attempts, the bucket),
    /// empty when nothing ([`crate::remote::read_wait_note`]).
    waiting: String,
}

/// The reply a running task is receiving, shown growing on its page (the page's script
/// refreshes it every second while it is there; no database change marks its growth).
struct StreamingReply {
    /// The text so far (its last [`STREAMING_CHARS`] characters), redacted.
    text: String,
    /// Characters before `text` not shown.
    text_cut: usize,
    /// The reasoning so far (its last [`STREAMING_CHARS`] characters), redacted.
    reasoning: String,
    /// Characters before `reasoning` not shown.
    reasoning_cut: usize,
    /// reply.stream's size, in human units.
    size: String,
    /// The stream this one restarts (it broke off during this call): its size in human units
    /// and where it is kept.
    restarts: Option<(String, String)>,
}

/// Characters of a reply being streamed shown on the task page (its end).
const STREAMING_CHARS: usize = 20_000;

/// The reply `dir`'s task is receiving, if it is running and one is in flight
/// ([`crate::ops::reply_stream::partial_reply`]); a stream that cannot be read is not shown.
fn streaming_reply(
    dir: &files::TaskDir,
    row: &crate::db::TaskRow,
    redactor: &crate::web::security::Redactor,
) -> Option<StreamingReply> {
    if row.status != Status::Running {
        return None;
    }
    let p = crate::ops::reply_stream::partial_reply(dir.handle(), STREAMING_CHARS)
        .ok()
        .flatten()?;
    Some(StreamingReply {
        text: redactor.redact(&p.text),
        text_cut: p.text_cut,
        reasoning: redactor.redact(&p.reasoning),
        reasoning_cut: p.reasoning_cut,
        size: task_page::bytes(p.bytes),
        restarts: p.restarts.map(|b| (task_page::bytes(b.bytes), b.kept())),
    })
}

/// `GET /tasks/{uuid}`: the task page.
pub async fn task(
    State(state): State<AppState>,
    Path(uuid): Path<String>,
    RawQuery(raw): RawQuery,
    Extension(csrf): Extension<CsrfCookie>,
) -> Response {
    blocking(move || {
        let uuid = match named_task(&state, &uuid, "", raw.as_deref())? {
            Named::Task(uuid) => uuid,
            Named::Elsewhere(redirect) => return Ok(redirect),
        };
        let p = Params::parse(raw)?;
        let view = match p.get("view") {
            None => View::Messages,
            Some(v) => {
                View::parse(v).ok_or_else(|| WebError::BadRequest(format!("unknown view {v:?}")))?
            }
        };
        let anchor = match (p.number("from")?, p.number("before")?) {
            (Some(f), _) => Anchor::From(f),
            (None, Some(b)) => Anchor::Before(b),
            (None, None) => Anchor::Last,
        };
        let position = Position {
            anchor,
            seq: p.number("seq")?,
        };
        let db = state.store.get()?;
        let row = db.get(&uuid)?.ok_or(WebError::NotFound)?;
        let redactor = &state.redactor;
        let dir = state.task_dir(&uuid)?;
        let (dir_info, body) = match &dir {
            Some(d) => (
                Some(task_page::dir_info(&uuid, d, &row, redactor, &state.charts)),
                task_page::view_body(&uuid, d, view, &position, p.get("file"), redactor)?,
            ),
            None => (None, ViewBody::Empty(String::new())),
        };
        let streaming = dir
            .as_ref()
            .and_then(|d| streaming_reply(d, &row, redactor));
        let no_dir = match (&dir, &row.files_deleted_at) {
            (Some(_), _) => String::new(),
            (None, Some(at)) => format!(
                "The task's directory was deleted by `ctxhost cleanup` at {at}; its row stays."
            ),
            (None, None) if row.status == Status::Queued => {
                "The task is queued: its directory is created when a worker starts it.".into()
            }
            (None, None) => "The task's directory is missing.".into(),
        };
        let page = TaskPage {
            status: row.status.to_string(),
            describe: redactor.redact(&describe(&row)),
            prompt: redactor.redact(&row.prompt),
            error: redactor.redact(row.error_message.as_deref().unwrap_or("")),
            requested: if row.stop_requested {
                "stop requested".into()
            } else if row.pause_requested {
                format!(
                    "pause requested{}",
                    row.pause_reason
                        .as_deref()
                        .map(|r| format!(": {}", redactor.redact(r)))
                        .unwrap_or_default()
                )
            } else if let (Status::Paused, Some(r)) = (row.status, &row.pause_reason) {
                format!("paused: {}", redactor.redact(r))
            } else {
                String::new()
            },
            notice: p.get("notice").and_then(notice),
            live: !row.status.is_final(),
            view_live: !row.status.is_final()
                && position.anchor == Anchor::Last
                && position.seq.is_none(),
            fields: task_page::row_fields(&row)
                .into_iter()
                .chain([(
                    "Cost".to_string(),
                    crate::config::pricing::show_cost(dir.as_ref().and_then(|d| {
                        crate::task::cost::dir_cost(d.handle(), &row, &state.pricing)
                    })),
                )])
                .chain(
                    dir.as_ref()
                        .and_then(|d| crate::telemetry::last_trace_id(d.handle()))
                        .map(|id| ("Trace id".to_string(), id)),
                )
                .map(|(k, v)| (k, redactor.redact(&v)))
                .collect(),
            source: task_page::source_item(&row, db.publication(&uuid)?.as_ref()).map(|mut s| {
                s.error = redactor.redact(&s.error);
                s
            }),
            actions: Actions::of(&row, state.keys.csrf_token(&csrf.0)),
            dir: dir_info,
            no_dir,
            tabs: task_page::tabs(&uuid, view),
            body,
            streaming,
            waiting: if row.status == Status::Running {
                crate::remote::read_wait_note(&state.layout, &uuid)
                    .map(|w| redactor.redact(&w))
                    .unwrap_or_default()
            } else {
                String::new()
            },
            uuid,
        };
        Ok(render(&page))
    })
    .await
}

#[derive(Template)]
#[template(path = "message.html")]
struct MessagePage {
    uuid: String,
    back_href: String,
    message: MessageView,
}

/// `GET /tasks/{uuid}/messages/{offset}`: one history message in full.
pub async fn message(
    State(state): State<AppState>,
    Path((uuid, offset)): Path<(String, String)>,
) -> Response {
    blocking(move || {
        let offset: u64 = offset.parse().map_err(|_| WebError::NotFound)?;
        let uuid = match named_task(&state, &uuid, &format!("/messages/{offset}"), None)? {
            Named::Task(uuid) => uuid,
            Named::Elsewhere(redirect) => return Ok(redirect),
        };
        let dir = state.task_dir(&uuid)?.ok_or(WebError::NotFound)?;
        let mut f = dir.open(&TaskFile::Messages).ok_or(WebError::NotFound)?;
        let m = task_page::full_message(&uuid, &mut f, offset, &state.redactor)?
            .ok_or(WebError::NotFound)?;
        let page = MessagePage {
            back_href: format!("/tasks/{uuid}?view=messages&from={offset}#m{offset}"),
            uuid,
            message: m,
        };
        Ok(render(&page))
    })
    .await
}

// ---------------------------------------------------------------- stats

/// A row of the stats table.
struct StatsRow {
    model: String,
    tasks: i64,
    completed: i64,
    failed: i64,
    avg: String,
    tokens: i64,
    cached: i64,
    cache_written: i64,
    calls: i64,
    tools: i64,
    compressions: i64,
}

#[derive(Template)]
#[template(path = "stats.html")]
struct StatsPage {
    chips: Vec<(String, i64)>,
    total: i64,
    rows: Vec<StatsRow>,
    day_choices: Vec<(u32, String, bool)>,
    per_day: ColumnChart,
    statuses: Vec<String>,
    tokens: HBarChart,
    durations: ColumnChart,
    finished: u64,
}

/// `GET /stats`.
pub async fn stats(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Response {
    blocking(move || {
        let p = Params::parse(raw)?;
        let days = p.number("days")?.unwrap_or(30).clamp(1, 3660) as u32;
        let db = state.store.get()?;
        let s = db.stats()?;
        let ro = Queries::new(&db);
        let per_day = ro.per_day(days)?;
        let hist = ro.duration_histogram()?;
        let row = |m: &crate::db::ModelStats, name: String| StatsRow {
            model: name,
            tasks: m.tasks,
            completed: m.completed,
            failed: m.failed,
            avg: m
                .avg_duration_secs
                .map_or("—".into(), |d| task_page::millis((d * 1000.0) as u64)),
            tokens: m.total_tokens,
            cached: m.cache_read_tokens,
            cache_written: m.cache_creation_tokens,
            calls: m.llm_calls,
            tools: m.tool_calls,
            compressions: m.compressions,
        };
        let mut rows: Vec<StatsRow> = s
            .by_model
            .iter()
            .map(|m| row(m, m.model.clone().unwrap_or_else(|| "—".into())))
            .collect();
        rows.push(row(&s.total, "(all)".into()));
        let label_every = (days as usize).div_ceil(10).max(1);
        let columns: Vec<charts::ColumnInput> = per_day
            .iter()
            .enumerate()
            .map(|(i, d)| {
                (
                    d.day.get(5..).unwrap_or(&d.day).to_string(),
                    i % label_every == 0 || i + 1 == per_day.len(),
                    d.counts
                        .iter()
                        .map(|(st, n)| (st.to_string(), *n as f64, format!("{}: {n} {st}", d.day)))
                        .collect(),
                )
            })
            .collect();
        let tokens: Vec<(String, f64)> = s
            .by_model
            .iter()
            .map(|m| {
                (
                    m.model.clone().unwrap_or_else(|| "—".into()),
                    m.total_tokens as f64,
                )
            })
            .collect();
        let durations: Vec<charts::ColumnInput> = DURATION_BUCKETS
            .iter()
            .zip(&hist)
            .map(|((_, label), n)| {
                (
                    label.to_string(),
                    true,
                    vec![(
                        "duration".to_string(),
                        *n as f64,
                        format!("{label}: {n} task(s)"),
                    )],
                )
            })
            .collect();
        let page = StatsPage {
            chips: s
                .by_status
                .iter()
                .map(|(st, n)| (st.to_string(), *n))
                .collect(),
            total: s.total.tasks,
            rows,
            day_choices: [7u32, 30, 90, 365]
                .into_iter()
                .map(|d| (d, format!("/stats?days={d}"), d == days))
                .collect(),
            per_day: charts::stacked_columns(&columns, 760.0, 240.0),
            statuses: Status::ALL.iter().map(|s| s.to_string()).collect(),
            tokens: charts::horizontal_bars(&tokens, 760.0),
            durations: charts::stacked_columns(&durations, 760.0, 220.0),
            finished: hist.iter().sum(),
        };
        Ok(render(&page))
    })
    .await
}

// ---------------------------------------------------------------- misc

/// Any other path: 404.
pub async fn not_found() -> Response {
    WebError::NotFound.into_response()
}

/// `GET /metrics`: the Prometheus metrics of this process ([`crate::metrics`]), the task counts
/// by status read from the store at each scrape. A store that cannot be read is counted in
/// `ctxhost_scrape_errors_total`; the rest is still served.
pub async fn metrics(State(state): State<AppState>) -> Response {
    blocking(move || {
        let db = state.store.get();
        if let Err(e) = &db {
            tracing::warn!("metrics: cannot open the task store: {e}");
            crate::metrics::global().scrape_errors.inc();
        }
        let body = crate::metrics::render(db.as_deref().ok());
        Ok((
            [(
                axum::http::header::CONTENT_TYPE,
                crate::metrics::CONTENT_TYPE,
            )],
            body,
        )
            .into_response())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_are_fixed_texts() {
        assert!(notice("pause-requested").is_some());
        assert!(notice("<script>").is_none());
    }

    #[test]
    fn list_urls_keep_only_what_differs_from_the_defaults() {
        assert_eq!(list_href(&ListQuery::default()), "/tasks");
        let q = ListQuery {
            status: Some(Status::Failed),
            search: Some("a&b".into()),
            page: 2,
            ..Default::default()
        };
        assert_eq!(list_href(&q), "/tasks?status=failed&q=a%26b&page=3");
        let p = Params::parse(Some("status=failed&q=a%26b&page=3".into())).unwrap();
        assert_eq!(list_query(&p).unwrap(), q);
        assert!(list_query(&Params::parse(Some("sort=evil".into())).unwrap()).is_err());
        assert!(list_query(&Params::parse(Some("page=x".into())).unwrap()).is_err());
    }
}
