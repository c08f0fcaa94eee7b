//! The MCP server of ctxhost: how Claude Code, Codex or an IDE hand a task to ctxhost and
//! follow it. Over stdio (`ctxhost mcp`) and over streamable HTTP at `/mcp` on `ctxhost serve`
//! (behind the API's bearer tokens: [`crate::web::api::auth`]). The tools are the API's
//! operations ([`crate::web::api::Api`]), so they check and answer as the CLI does:
//!
//! - `submit_task` (the API's [`NewTaskRequest`]: prompt, optional task key, user, model,
//!   no_inherit), `get_task`, `list_tasks`,
//!   `pause_task`, `resume_task`, `stop_task`;
//! - `wait_for_task`: blocks until the task is no longer queued or running, or a timeout,
//!   sending MCP progress notifications (progress = LLM calls made so far) while it runs when
//!   the request carries a progress token.
//!
//! Resources: the files of each task, `ctxhost://tasks/{uuid}/files/{name}` (secrets
//! redacted as in the API); the list holds the most recent [`RESOURCE_TASKS`] tasks', the
//! template reaches any task's.
//!
//! Changing tools need write access: always over stdio (the user's own process), with the
//! read-write token over HTTP; a read-only caller gets a tool error saying so.

use std::time::{Duration, Instant};

use axum::Router;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, ProgressNotificationParam, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;

use super::api::Api;
use super::api::auth::{Access, ApiAuth};
use super::api::problem::Problem;
use super::api::tasks::{Action, ListParams, NewTaskRequest};
use crate::db::Status;

/// Tasks whose files `resources/list` names (the newest).
pub const RESOURCE_TASKS: u32 = 20;
/// Longest `wait_for_task` wait, seconds.
pub const MAX_WAIT_SECS: u64 = 3600;
/// How often `wait_for_task` looks at the task.
const WAIT_POLL: Duration = Duration::from_millis(250);

/// Arguments naming one task.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct TaskArgs {
    /// The task's UUID.
    pub uuid: String,
}

/// `pause_task`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct PauseArgs {
    /// The task's UUID.
    pub uuid: String,
    /// Why (shown until it is resumed).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `wait_for_task`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct WaitArgs {
    /// The task's UUID.
    pub uuid: String,
    /// Longest wait, seconds (default 300, at most 3600).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// `list_tasks`' arguments.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ListArgs {
    /// Only this status: queued, running, paused, completed, failed, stopped.
    #[serde(default)]
    pub status: Option<String>,
    /// Only this source (github, gitlab, local).
    #[serde(default)]
    pub source: Option<String>,
    /// Tasks per page (1 to 500; default 50).
    #[serde(default)]
    pub limit: Option<u32>,
    /// `next_cursor` of the page before.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// The MCP server: the API's operations as tools, task files as resources.
#[derive(Clone)]
pub struct CtxhostMcp {
    api: Api,
    /// The access of a caller that brings none (stdio: [`Access::Write`]); over HTTP the
    /// guard's, from the request.
    default_access: Access,
    auth: Option<std::sync::Arc<ApiAuth>>,
    tool_router: ToolRouter<CtxhostMcp>,
}

/// A tool's answer: the value as JSON text (and structured content), or the problem as a
/// tool error.
fn answer<T: serde::Serialize>(r: Result<T, Problem>) -> CallToolResult {
    match r.and_then(|v| serde_json::to_value(v).map_err(|e| anyhow::Error::from(e).into())) {
        Ok(v) => {
            let mut out = CallToolResult::success(vec![ContentBlock::text(
                serde_json::to_string_pretty(&v).unwrap_or_default(),
            )]);
            if v.is_object() {
                out.structured_content = Some(v);
            }
            out
        }
        Err(p) => CallToolResult::error(vec![ContentBlock::text(p.detail)]),
    }
}

/// Run `f` on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Problem> + Send + 'static,
) -> Result<T, Problem> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Problem::from(anyhow::anyhow!("tool failed: {e}")))?
}

#[tool_router]
impl CtxhostMcp {
    /// A server on `api`; `auth` given for HTTP (the guard put each request's access in its
    /// extensions), `None` for stdio (the caller may do anything).
    pub fn new(api: Api, auth: Option<std::sync::Arc<ApiAuth>>) -> CtxhostMcp {
        CtxhostMcp {
            api,
            default_access: if auth.is_some() {
                Access::Read
            } else {
                Access::Write
            },
            auth,
            tool_router: Self::tool_router(),
        }
    }

    /// `Some(problem)` when the caller of `ctx` may not change tasks.
    fn refuse_write(&self, ctx: &RequestContext<RoleServer>) -> Option<Problem> {
        let access = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Access>().copied())
            .unwrap_or(self.default_access);
        match &self.auth {
            Some(auth) => auth.refuse_write(access),
            None => None,
        }
    }

    #[tool(
        description = "Queue a ctxhost task: a coding agent runs it with its whole context kept in files. Returns the task's row (its `uuid`, `status` queued). Follow it with wait_for_task."
    )]
    async fn submit_task(
        &self,
        Parameters(req): Parameters<NewTaskRequest>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        if let Some(p) = self.refuse_write(&ctx) {
            return answer::<()>(Err(p));
        }
        let api = self.api.clone();
        answer(blocking(move || api.create(&req)).await)
    }

    #[tool(
        description = "One ctxhost task: its row (status, counters, error), where its directory is, its final answer (`result`) when completed, its cost."
    )]
    async fn get_task(&self, Parameters(a): Parameters<TaskArgs>) -> CallToolResult {
        let api = self.api.clone();
        answer(
            blocking(move || {
                let uuid = super::api::tasks::uuid_of(&a.uuid)?;
                api.get(&uuid)
            })
            .await,
        )
    }

    #[tool(
        description = "ctxhost tasks, newest first, with filters and a cursor for the next page."
    )]
    async fn list_tasks(&self, Parameters(a): Parameters<ListArgs>) -> CallToolResult {
        let api = self.api.clone();
        answer(
            blocking(move || {
                let status = a
                    .status
                    .as_deref()
                    .map(|s| {
                        s.parse::<Status>().map_err(|_| {
                            Problem::bad_request(format!(
                                "status {s:?}: expected queued, running, paused, completed, failed or stopped"
                            ))
                        })
                    })
                    .transpose()?;
                api.list(&ListParams {
                    status,
                    source: a.source,
                    limit: a.limit,
                    cursor: a.cursor,
                    ..ListParams::default()
                })
            })
            .await,
        )
    }

    #[tool(
        description = "Wait until a ctxhost task is no longer queued or running (completed, failed, stopped or paused), at most timeout_secs (default 300). Sends progress notifications (LLM calls so far) while it runs. Returns the task as get_task does, with `waiting_timed_out` true when it is still running."
    )]
    async fn wait_for_task(
        &self,
        Parameters(a): Parameters<WaitArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let uuid = match super::api::tasks::uuid_of(&a.uuid) {
            Ok(u) => u,
            Err(p) => return answer::<()>(Err(p)),
        };
        let timeout = Duration::from_secs(a.timeout_secs.unwrap_or(300).min(MAX_WAIT_SECS));
        let end = Instant::now() + timeout;
        let token = ctx.meta.get_progress_token();
        let mut last_progress = None;
        loop {
            let api = self.api.clone();
            let u = uuid.clone();
            let row = match blocking(move || {
                let db = api.store.get()?;
                api.row(&db, &u)
            })
            .await
            {
                Ok(r) => r,
                Err(p) => return answer::<()>(Err(p)),
            };
            let live = matches!(row.status, Status::Queued | Status::Running);
            let timed_out = Instant::now() >= end;
            if !live || timed_out || ctx.ct.is_cancelled() {
                let api = self.api.clone();
                let got = blocking(move || api.get(&uuid)).await.map(|d| {
                    let mut v = serde_json::to_value(d).unwrap_or_default();
                    if let Some(o) = v.as_object_mut() {
                        o.insert("waiting_timed_out".into(), serde_json::Value::Bool(live));
                    }
                    v
                });
                return answer(got);
            }
            let progress = row.llm_call_count as f64;
            if let Some(token) = &token
                && last_progress != Some((row.status, row.llm_call_count))
            {
                last_progress = Some((row.status, row.llm_call_count));
                let _ = ctx
                    .peer
                    .notify_progress(
                        ProgressNotificationParam::new(token.clone(), progress).with_message(
                            format!(
                                "task {uuid} is {}: {} LLM calls, {} tool calls",
                                row.status, row.llm_call_count, row.tool_call_count
                            ),
                        ),
                    )
                    .await;
            }
            tokio::select! {
                _ = tokio::time::sleep(WAIT_POLL) => {}
                _ = ctx.ct.cancelled() => {}
            }
        }
    }

    #[tool(
        description = "Ask a running ctxhost task to pause at its next safe point (as `ctxhost pause`)."
    )]
    async fn pause_task(
        &self,
        Parameters(a): Parameters<PauseArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.control(&a.uuid, Action::Pause, a.reason, &ctx).await
    }

    #[tool(
        description = "Queue a paused ctxhost task again; it continues from its context (as `ctxhost resume`)."
    )]
    async fn resume_task(
        &self,
        Parameters(a): Parameters<TaskArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.control(&a.uuid, Action::Resume, None, &ctx).await
    }

    #[tool(
        description = "Stop a ctxhost task: at once if queued or paused, at its next safe point if running (as `ctxhost stop`)."
    )]
    async fn stop_task(
        &self,
        Parameters(a): Parameters<TaskArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.control(&a.uuid, Action::Stop, None, &ctx).await
    }
}

impl CtxhostMcp {
    async fn control(
        &self,
        uuid: &str,
        action: Action,
        reason: Option<String>,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        if let Some(p) = self.refuse_write(ctx) {
            return answer::<()>(Err(p));
        }
        let api = self.api.clone();
        let uuid = uuid.to_string();
        answer(
            blocking(move || {
                let uuid = super::api::tasks::uuid_of(&uuid)?;
                api.control(&uuid, action, reason.as_deref())
            })
            .await,
        )
    }
}

/// The URI of file `name` of task `uuid`.
pub fn file_uri(uuid: &str, name: &str) -> String {
    format!("ctxhost://tasks/{uuid}/files/{name}")
}

/// `(uuid, name)` of a URI made by [`file_uri`].
fn parse_file_uri(uri: &str) -> Option<(String, String)> {
    let rest = uri.strip_prefix("ctxhost://tasks/")?;
    let (uuid, name) = rest.split_once("/files/")?;
    Some((uuid.to_string(), name.to_string()))
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for CtxhostMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("ctxhost", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "ctxhost runs coding-agent tasks whose whole context lives in files. submit_task queues one \
             (a `ctxhost run` worker must be running to execute it); wait_for_task blocks until it ends and \
             returns its answer (`result`); get_task and list_tasks read; pause_task, resume_task, stop_task steer. \
             Each task's files are resources ctxhost://tasks/{uuid}/files/{name}.",
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let api = self.api.clone();
        let listed = blocking(move || {
            let page = api.list(&ListParams {
                limit: Some(RESOURCE_TASKS),
                ..ListParams::default()
            })?;
            let mut out = Vec::new();
            for t in page.tasks {
                for f in api.files(&t.uuid)? {
                    out.push(
                        Resource::new(file_uri(&t.uuid, &f.name), format!("{}/{}", t.uuid, f.name))
                            .with_size(f.bytes),
                    );
                }
            }
            Ok(out)
        })
        .await
        .map_err(|p| ErrorData::internal_error(p.detail, None))?;
        Ok(ListResourcesResult::with_all_items(listed))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("ctxhost://tasks/{uuid}/files/{name}", "task file")
                .with_description(
                    "A file of a task's directory (messages.jsonl, metadata.json, llm_calls.jsonl, …), secrets redacted",
                ),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.clone();
        let Some((uuid, name)) = parse_file_uri(&uri) else {
            return Err(ErrorData::resource_not_found(
                format!("{uri}: not a ctxhost://tasks/{{uuid}}/files/{{name}} URI"),
                None,
            ));
        };
        let api = self.api.clone();
        let bytes = blocking(move || {
            let uuid = super::api::tasks::uuid_of(&uuid)?;
            api.file(&uuid, &name)
        })
        .await
        .map_err(|p| ErrorData::resource_not_found(p.detail, None))?;
        // Task files are JSON and text; a byte that is not UTF-8 reads as U+FFFD.
        let contents = ResourceContents::text(String::from_utf8_lossy(&bytes), uri);
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

/// `/mcp` on `ctxhost serve`: the MCP server over streamable HTTP, behind the API's guard.
pub fn router(api: Api, auth: std::sync::Arc<ApiAuth>) -> Router {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let mut shutdown = api.shutdown.clone();
    let server = CtxhostMcp::new(api, Some(auth.clone()));
    // The guard checks the Host header (without tokens) and the bearer token.
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    let ct = config.cancellation_token.clone();
    tokio::spawn(async move {
        let _ = shutdown.wait_for(|down| *down).await;
        ct.cancel();
    });
    let service: StreamableHttpService<CtxhostMcp, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(server.clone()), Default::default(), config);
    Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            auth,
            super::api::auth::guard,
        ))
}

/// `ctxhost mcp`: serve `api` over standard input and output until the client closes them.
pub fn serve_stdio(api: Api) -> anyhow::Result<()> {
    use anyhow::Context;
    use rmcp::ServiceExt;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(8)
        .thread_name("ctxhost-mcp")
        .enable_all()
        .build()
        .context("cannot start the MCP server's runtime")?;
    runtime.block_on(async move {
        let service = CtxhostMcp::new(api, None)
            .serve(rmcp::transport::stdio())
            .await
            .context("the MCP client did not initialize")?;
        service.waiting().await.context("the MCP server failed")?;
        anyhow::Ok(())
    })
}
