//! The JSON API of `ctxhost serve` (`/api/v1`), for programs: CI jobs, other agents, a team's
//! own UI. Described by an OpenAPI 3.1 document generated from these handlers and types
//! (utoipa: [`ApiDoc`]), served at `/api/v1/openapi.json` and kept as docs/openapi.json.
//!
//! | route | what |
//! |---|---|
//! | `GET /api/v1/tasks` | task list: filters `status`, `source`, `owner`, `repo`, `type`, `id`, `since`; `limit`; `cursor` (keyset: stays correct while tasks are added) |
//! | `POST /api/v1/tasks` | queue a task (checked as `ctxhost submit`) |
//! | `GET /api/v1/tasks/{uuid}` | one task: row, counters, result, cost, publication |
//! | `POST /api/v1/tasks/{uuid}/{pause,resume,stop,retry}` | as the CLI commands |
//! | `GET /api/v1/tasks/{uuid}/messages` | its history, paged by `seq` |
//! | `GET /api/v1/tasks/{uuid}/files`, `…/files/{name}` | its files; one file's bytes, secrets redacted |
//! | `GET /api/v1/tasks/{uuid}/compactions` | its compressions |
//! | `GET /api/v1/tasks/{uuid}/events` | its events, live, as server-sent events ([`events`]) |
//! | `GET /api/v1/stats` | the `ctxhost stats` figures |
//! | `GET /api/v1/openapi.json` | the OpenAPI document |
//!
//! Errors are RFC 9457 problem details ([`problem`]), every one: those axum gives itself (a
//! body over [`BODY_LIMIT`]: 413, a method a route does not take: 405, an unknown route: 404)
//! are rewritten as problems too; who may do what: [`auth`].

pub mod auth;
pub mod events;
pub mod problem;
pub mod tasks;

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use utoipa::OpenApi;

use crate::config::Config;
use crate::layout::Layout;
use crate::web::security::Redactor;
use crate::web::store::StorePool;
use problem::Problem;
use tasks::{
    Action, ControlRequest, ControlResult, FileEntry, ListParams, MessagePage, MessageParams,
    NewTaskRequest, TaskDetail, TaskPage, uuid_of,
};

/// What the API (and the MCP server) works on; cheap to clone.
#[derive(Clone)]
pub struct Api {
    /// The contexts/ tree.
    pub layout: Layout,
    /// Connections to the task store.
    pub store: Arc<StorePool>,
    /// The config (`llm` for new tasks, `llm.pricing` for costs).
    pub config: Arc<Config>,
    /// Secret values never handed out.
    pub redactor: Arc<Redactor>,
    /// The bucket, when `layout` is a working copy of one.
    pub remote: Option<Arc<crate::remote::Store>>,
    /// Becomes true when the server shuts down (ends the event streams).
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

/// The OpenAPI document of the API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "ctxhost API",
        version = "1",
        description = "Queue, watch and steer ctxhost tasks. Errors are RFC 9457 problem details. \
            Authentication: `Authorization: Bearer TOKEN` (the read-write token of `ctxhost serve --token-env`, \
            or the read-only one of `--read-token-env`); without tokens (loopback only) the API is read-only."
    ),
    paths(
        list_tasks, create_task, get_task, control_task, task_messages, task_files,
        task_file, task_compactions, stats, events::task_events, serve_openapi
    ),
    components(schemas(
        Problem, TaskPage, TaskDetail, NewTaskRequest, ControlRequest, ControlResult, Action,
        tasks::Outcome, events::ServerSentEvent, MessagePage, FileEntry, crate::db::TaskRow, crate::db::Status,
        crate::db::sources::Publication, crate::db::sources::CommentState,
        crate::db::sources::ChangeState
    )),
    modifiers(&BearerAuth),
    security(("bearer" = []), ()),
    tags((name = "tasks", description = "Tasks and what they did"))
)]
pub struct ApiDoc;

/// Adds the bearer security scheme.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The OpenAPI document as pretty JSON with a final newline (docs/openapi.json holds the same).
pub fn openapi_json() -> String {
    let mut s = ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

/// Where the API's routes are nested on `ctxhost serve`.
pub const PREFIX: &str = "/api/v1";

/// The API's routes, to nest under [`PREFIX`], with the bearer-token guard in front.
pub fn router(api: Api, auth: Arc<auth::ApiAuth>) -> Router {
    Router::new()
        .route("/tasks", get(list_tasks).post(create_task))
        .route("/tasks/{uuid}", get(get_task))
        .route("/tasks/{uuid}/{action}", post(control_task))
        .route("/tasks/{uuid}/messages", get(task_messages))
        .route("/tasks/{uuid}/files", get(task_files))
        .route("/tasks/{uuid}/files/{name}", get(task_file))
        .route("/tasks/{uuid}/compactions", get(task_compactions))
        .route("/tasks/{uuid}/events", get(events::task_events))
        .route("/stats", get(stats))
        .route("/openapi.json", get(serve_openapi))
        .fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(auth, auth::guard))
        .layer(axum::middleware::from_fn(problems_only))
        .with_state(api)
}

/// The largest request body the API reads (bytes; axum's default, made explicit): room for a
/// prompt of 1 MiB of text (the limit `submit` gives) in its JSON string. A larger body is
/// answered 413.
pub const BODY_LIMIT: usize = 2 * 1024 * 1024;

/// Makes every error answer of the API a [`Problem`]: the handlers' are already; those axum
/// gives itself come as `text/plain` or empty (a body over [`BODY_LIMIT`]: 413; a method the
/// route does not take: 405, with `Allow`; a body or path it cannot read: 400) and are
/// rewritten here with the same status and headers, their text as `detail`.
async fn problems_only(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let method = req.method().clone();
    // The path as the client sent it (inside the nest, the URI lacks the prefix).
    let path = format!("{PREFIX}{}", req.uri().path());
    let answer = next.run(req).await;
    let status = answer.status();
    let is_problem = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == problem::PROBLEM_JSON.as_bytes());
    if !(status.is_client_error() || status.is_server_error()) || is_problem {
        return answer;
    }
    let (parts, body) = answer.into_parts();
    // axum's own error texts are a line or two; a larger body is not read.
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let detail = match status {
        // axum adds the `Allow` header after this layer has run.
        StatusCode::METHOD_NOT_ALLOWED => format!(
            "{method} is not allowed on {path}: the `Allow` header names the methods it takes"
        ),
        StatusCode::PAYLOAD_TOO_LARGE => format!(
            "the request body is larger than the API reads ({BODY_LIMIT} bytes){}",
            if text.is_empty() {
                String::new()
            } else {
                format!(": {text}")
            }
        ),
        _ if text.is_empty() => format!("{method} {path}: {status}"),
        _ => text,
    };
    let mut out = Problem::new(status, detail).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().append(name.clone(), value.clone());
        }
    }
    out
}

/// 404 for a path under [`PREFIX`] that is no route (also `/api/v1/`, which the nest does not
/// reach).
pub(crate) async fn not_found() -> Problem {
    Problem::not_found("there is no such API route (see /api/v1/openapi.json)")
}

/// Run `f` on a blocking thread (database and file reads).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Problem> + Send + 'static,
) -> Result<T, Problem> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Problem::from(anyhow::anyhow!("request handler failed: {e}")))?
}

/// `T` from a query string; 400 naming the parameter that is wrong and why (an empty value is
/// a value: `status=` is not a status).
fn query<T: serde::de::DeserializeOwned>(raw: Option<String>) -> Result<T, Problem> {
    let raw = raw.unwrap_or_default();
    let bad = |e: &dyn std::fmt::Display| Problem::bad_request(format!("bad query string: {e}"));
    serde_urlencoded::from_str(&raw).map_err(|whole| {
        // serde_urlencoded does not say which parameter: try each alone.
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(&raw).unwrap_or_default();
        pairs
            .iter()
            .find_map(|(k, v)| {
                let one = serde_urlencoded::to_string([(k, v)]).ok()?;
                serde_urlencoded::from_str::<T>(&one)
                    .err()
                    .map(|e| Problem::bad_request(format!("query parameter {k}={v:?}: {e}")))
            })
            .unwrap_or_else(|| bad(&whole))
    })
}

/// `T` from a JSON body (an empty body is `{}`); 400 naming what is wrong.
fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    let bytes = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        bytes
    };
    serde_json::from_slice(bytes).map_err(|e| Problem::bad_request(format!("bad JSON body: {e}")))
}

fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response {
    (status, axum::Json(value)).into_response()
}

/// `GET /api/v1/tasks`.
#[utoipa::path(get, path = "/api/v1/tasks", tag = "tasks", params(ListParams),
    responses(
        (status = 200, description = "A page of tasks, newest first", body = TaskPage),
        (status = 400, description = "A filter or the cursor is wrong", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong bearer token", body = Problem, content_type = "application/problem+json"),
    ))]
async fn list_tasks(State(api): State<Api>, RawQuery(raw): RawQuery) -> Result<Response, Problem> {
    let p: ListParams = query(raw)?;
    let page = blocking(move || api.list(&p)).await?;
    Ok(json(StatusCode::OK, &page))
}

/// `POST /api/v1/tasks`.
#[utoipa::path(post, path = "/api/v1/tasks", tag = "tasks", request_body = NewTaskRequest,
    responses(
        (status = 201, description = "Queued: the new task's row", body = crate::db::TaskRow),
        (status = 400, description = "The task is not valid (the message `ctxhost submit` gives)", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Read-only access", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than the API reads", body = Problem, content_type = "application/problem+json"),
    ))]
async fn create_task(State(api): State<Api>, bytes: Bytes) -> Result<Response, Problem> {
    let req: NewTaskRequest = body(&bytes)?;
    let row = blocking(move || api.create(&req)).await?;
    let mut r = json(StatusCode::CREATED, &row);
    if let Ok(v) = format!("/api/v1/tasks/{}", row.uuid).parse() {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Ok(r)
}

/// `GET /api/v1/tasks/{uuid}`.
#[utoipa::path(get, path = "/api/v1/tasks/{uuid}", tag = "tasks",
    params(("uuid" = String, Path, description = "The task's UUID")),
    responses(
        (status = 200, description = "The task", body = TaskDetail),
        (status = 401, description = "No or wrong bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
    ))]
async fn get_task(State(api): State<Api>, Path(uuid): Path<String>) -> Result<Response, Problem> {
    let uuid = uuid_of(&uuid)?;
    let task = blocking(move || api.get(&uuid)).await?;
    Ok(json(StatusCode::OK, &task))
}

/// `POST /api/v1/tasks/{uuid}/{action}`.
#[utoipa::path(post, path = "/api/v1/tasks/{uuid}/{action}", tag = "tasks",
    params(
        ("uuid" = String, Path, description = "The task's UUID"),
        ("action" = Action, Path, description = "pause, resume, stop or retry (as the CLI commands)"),
    ),
    request_body(content = ControlRequest, description = "Optional (an empty body is `{}`): a pause's reason"),
    responses(
        (status = 200, description = "Done (or requested: a running task honours it at its next safe point)", body = ControlResult),
        (status = 400, description = "Bad body", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Read-only access", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such task or action", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The task's state does not allow it (the CLI's message)", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than the API reads", body = Problem, content_type = "application/problem+json"),
    ))]
async fn control_task(
    State(api): State<Api>,
    Path((uuid, action)): Path<(String, String)>,
    bytes: Bytes,
) -> Result<Response, Problem> {
    let uuid = uuid_of(&uuid)?;
    let action: Action = serde_json::from_value(serde_json::Value::String(action.clone()))
        .map_err(|_| {
            Problem::not_found(format!(
                "no action {action:?}: expected pause, resume, stop or retry"
            ))
        })?;
    let req: ControlRequest = body(&bytes)?;
    let done = blocking(move || api.control(&uuid, action, req.reason.as_deref())).await?;
    Ok(json(StatusCode::OK, &done))
}

/// `GET /api/v1/tasks/{uuid}/messages`.
#[utoipa::path(get, path = "/api/v1/tasks/{uuid}/messages", tag = "tasks",
    params(("uuid" = String, Path, description = "The task's UUID"), MessageParams),
    responses(
        (status = 200, description = "A page of its history", body = MessagePage),
        (status = 400, description = "Bad paging", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No or wrong bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such task, or it has no directory", body = Problem, content_type = "application/problem+json"),
    ))]
async fn task_messages(
    State(api): State<Api>,
    Path(uuid): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, Problem> {
    let uuid = uuid_of(&uuid)?;
    let p: MessageParams = query(raw)?;
    let page = blocking(move || api.messages(&uuid, &p)).await?;
    Ok(json(StatusCode::OK, &page))
}

/// `GET /api/v1/tasks/{uuid}/files`.
#[utoipa::path(get, path = "/api/v1/tasks/{uuid}/files", tag = "tasks",
    params(("uuid" = String, Path, description = "The task's UUID")),
    responses(
        (status = 200, description = "Its files (none when it has no directory)", body = Vec<FileEntry>),
        (status = 401, description = "No or wrong bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
    ))]
async fn task_files(State(api): State<Api>, Path(uuid): Path<String>) -> Result<Response, Problem> {
    let uuid = uuid_of(&uuid)?;
    let files = blocking(move || api.files(&uuid)).await?;
    Ok(json(StatusCode::OK, &files))
}

/// `GET /api/v1/tasks/{uuid}/files/{name}`.
#[utoipa::path(get, path = "/api/v1/tasks/{uuid}/files/{name}", tag = "tasks",
    params(
        ("uuid" = String, Path, description = "The task's UUID"),
        ("name" = String, Path, description = "A name from the file list"),
    ),
    responses(
        (status = 200, description = "The file's bytes, every secret the server knows replaced by `[redacted]`", content_type = "application/octet-stream", body = String),
        (status = 401, description = "No or wrong bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such task or file", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Larger than the API hands out", body = Problem, content_type = "application/problem+json"),
    ))]
async fn task_file(
    State(api): State<Api>,
    Path((uuid, name)): Path<(String, String)>,
) -> Result<Response, Problem> {
    let uuid = uuid_of(&uuid)?;
    let bytes = blocking(move || api.file(&uuid, &name)).await?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

/// `GET /api/v1/tasks/{uuid}/compactions`.
#[utoipa::path(get, path = "/api/v1/tasks/{uuid}/compactions", tag = "tasks",
    params(("uuid" = String, Path, description = "The task's UUID")),
    responses(
        (status = 200, description = "Its compressions, oldest first: each summary with the range of messages it replaced", body = Vec<Object>),
        (status = 401, description = "No or wrong bearer token", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
    ))]
async fn task_compactions(
    State(api): State<Api>,
    Path(uuid): Path<String>,
) -> Result<Response, Problem> {
    let uuid = uuid_of(&uuid)?;
    let list = blocking(move || api.compactions(&uuid)).await?;
    Ok(json(StatusCode::OK, &list))
}

/// `GET /api/v1/stats`.
#[utoipa::path(get, path = "/api/v1/stats", tag = "tasks",
    responses(
        (status = 200, description = "The `ctxhost stats --json` figures: counts by status, totals, by model", body = Object),
        (status = 401, description = "No or wrong bearer token", body = Problem, content_type = "application/problem+json"),
    ))]
async fn stats(State(api): State<Api>) -> Result<Response, Problem> {
    let s = blocking(move || api.stats()).await?;
    Ok(json(StatusCode::OK, &s))
}

/// `GET /api/v1/openapi.json`.
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "tasks",
    responses(
        (status = 200, description = "This document", body = Object),
        (status = 401, description = "No or wrong bearer token", body = Problem, content_type = "application/problem+json"),
    ))]
async fn serve_openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], openapi_json()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/openapi.json is the document the code generates: a change to a handler or type
    /// that is not carried into it fails here. Regenerate with
    /// `CTXHOST_UPDATE_OPENAPI=1 cargo test -p ctxhost --lib web::api::tests`.
    #[test]
    fn docs_openapi_json_is_the_document_the_code_generates() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
        let now = openapi_json();
        if std::env::var_os("CTXHOST_UPDATE_OPENAPI").is_some() {
            std::fs::write(&path, &now).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == now,
            "docs/openapi.json is stale: regenerate it with `CTXHOST_UPDATE_OPENAPI=1 cargo test -p ctxhost --lib web::api::tests`"
        );
        let doc: serde_json::Value = serde_json::from_str(&now).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        let paths = doc["paths"].as_object().unwrap();
        for p in [
            "/api/v1/tasks",
            "/api/v1/tasks/{uuid}",
            "/api/v1/tasks/{uuid}/{action}",
            "/api/v1/tasks/{uuid}/messages",
            "/api/v1/tasks/{uuid}/files",
            "/api/v1/tasks/{uuid}/files/{name}",
            "/api/v1/tasks/{uuid}/compactions",
            "/api/v1/tasks/{uuid}/events",
            "/api/v1/stats",
            "/api/v1/openapi.json",
        ] {
            assert!(paths.contains_key(p), "{p} is not in the document");
        }
    }
}
