//! `ctxhost serve`: the web dashboard over `contexts/` and the task store (SQLite's
//! `tasks.db` or the PostgreSQL database of `task_store`) — watch, inspect and
//! steer tasks in a browser. Everything it serves is built into the binary (templates compiled
//! by askama, CSS and JS embedded); it needs no network.
//!
//! | route | what |
//! |---|---|
//! | `GET /tasks` | task list: status filter, search, sort, paging, counts by status (live) |
//! | `GET /tasks/{uuid}` | task page: row, metadata, context chart, and one of the views `messages`, `context`, `summaries`, `tools`, `calls`, `planning`, paged by byte offsets |
//! | `GET /tasks/{uuid}/messages/{offset}` | one message of messages.jsonl in full |
//! | `GET /tasks/{uuid}/compactions` | each compression: range, summary next to the messages it replaced, what was kept |
//! | `GET /tasks/{uuid}/files/{name}` | a task file (request.json, response.json, …) in windows of bytes; one that is not text as its size and kind, `?download=1` for its bytes |
//! | `GET /tasks/{uuid}/tool-results/{seq}` | a tool call's full (spilled) output |
//! | `POST /tasks/{uuid}/{pause,resume,stop,retry}` | actions (CSRF token required) |
//! | `GET /stats` | the `stats` figures and charts |
//! | `GET /metrics` | Prometheus metrics (OpenMetrics text; [`crate::metrics`]) |
//! | `GET /events` | server-sent events: `change` whenever the task store changes |
//! | `GET /static/…` | the embedded CSS and JS |
//! | `/api/v1/…` | the JSON API ([`api`]; bearer tokens, no cookies) |
//! | `/mcp` | the MCP server over streamable HTTP ([`mcp`]; the API's bearer tokens) |
//!
//! In the GET routes, `{uuid}` may be a prefix only one task has, as on the command line
//! ([`crate::task_ref`]): the answer is a redirect to the same page under the whole UUID.
//!
//! Modules: `security` (bind policy, token, CSRF, headers, redaction), `files` (the only
//! way task files are opened), `pager` (JSONL pages by byte offset), `store` (the
//! connections to the task store), `queries` (read-only SQL), `call_series` (the context chart's data, read incrementally and cached), `charts`
//! (SVG geometry), `pages` (page handlers), `answer` (a rendered template, a redirect), `file_pages` (a task file, a download, a tool result), `login` (the login page), `task_page` (what the task page shows: `row`, `dir`, `views`), `actions`
//! (POST handlers), `events` (change notifications), `assets` (embedded CSS/JS).

mod actions;
mod answer;
pub(crate) mod api;
mod assets;
mod call_series;
mod charts;
mod compactions;
mod events;
pub(crate) mod file_pages;
pub(crate) mod files;
mod login;
pub(crate) mod mcp;
pub(crate) mod pager;
pub(crate) mod pages;
pub(crate) mod queries;
pub(crate) mod security;
pub(crate) mod store;
mod task_page;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::routing::{get, post};

use crate::db::StoreSpec;
use crate::layout::Layout;
use security::{Keys, Redactor};
use store::StorePool;

/// What `ctxhost serve` was asked for.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Address to listen on (port 0: any free port).
    pub bind: SocketAddr,
    /// The access token (required for a non-loopback `bind`; see `web::security::check_bind`):
    /// the dashboard's, and the API's read-write token.
    pub token: Option<String>,
    /// The API's read-only token (`--read-token-env`), if any.
    pub read_token: Option<String>,
    /// The config: the `llm` settings recorded for tasks created through the API.
    pub config: crate::config::Config,
    /// The contexts/ tree (must exist, owned by `store`).
    pub layout: Layout,
    /// The task store (from the config's `task_store`).
    pub store: StoreSpec,
    /// Secret values never to show (the token is added).
    pub secrets: Vec<String>,
    /// `llm.pricing`: the cost shown on task pages ([`crate::task::cost`]).
    pub pricing: crate::config::pricing::Pricing,
    /// The bucket of `context_storage.remote`, when `layout` is a working copy of one: a task
    /// directory that is not here, or older here than in the bucket, is read from a copy
    /// downloaded on demand ([`crate::remote::view`]). Opened outside any tokio runtime (it
    /// holds one of its own), and the caller keeps a reference until the server returns, so
    /// it is never dropped inside the server's runtime.
    pub remote: Option<Arc<crate::remote::Store>>,
}

/// Shared by every request.
#[derive(Clone)]
pub(crate) struct AppState {
    pub layout: Layout,
    /// Connections to the task store.
    pub store: Arc<StorePool>,
    pub keys: Arc<Keys>,
    pub redactor: Arc<Redactor>,
    /// Change notifications (the value is [`queries::Queries::change_version`]).
    pub changes: tokio::sync::watch::Receiver<i64>,
    /// Becomes true when the server shuts down (ends the event streams).
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// The context charts' data of recently viewed tasks.
    pub charts: Arc<call_series::ChartCache>,
    /// `llm.pricing`, for the task page's cost.
    pub pricing: Arc<crate::config::pricing::Pricing>,
    /// The bucket, when `layout` is a working copy of one ([`ServeOptions::remote`]).
    pub remote: Option<Arc<crate::remote::Store>>,
}

impl AppState {
    /// The directory of task `uuid` to read ([`files::open_for_reading`]); `None` when there is
    /// none here nor in the bucket.
    pub fn task_dir(&self, uuid: &str) -> anyhow::Result<Option<files::TaskDir>> {
        files::open_for_reading(&self.layout, self.remote.as_deref(), uuid)
    }
}

/// The routes, with the security guard in front of all of them.
pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(pages::home))
        .route("/tasks", get(pages::tasks))
        .route("/tasks/{uuid}", get(pages::task))
        .route("/tasks/{uuid}/messages/{offset}", get(pages::message))
        .route("/tasks/{uuid}/compactions", get(compactions::page))
        .route("/tasks/{uuid}/files/{name}", get(file_pages::file))
        .route(
            "/tasks/{uuid}/tool-results/{seq}",
            get(file_pages::tool_result),
        )
        .route("/tasks/{uuid}/pause", post(actions::pause))
        .route("/tasks/{uuid}/resume", post(actions::resume))
        .route("/tasks/{uuid}/stop", post(actions::stop))
        .route("/tasks/{uuid}/retry", post(actions::retry))
        .route("/stats", get(pages::stats))
        .route("/metrics", get(pages::metrics))
        .route("/login", post(actions::login))
        .route("/events", get(events::stream))
        .route("/static/{name}", get(assets::serve))
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            security::guard,
        ))
        .with_state(state)
}

/// A bound, not yet running dashboard server.
pub struct Server {
    listener: TcpListener,
    options: ServeOptions,
}

/// Bind `options.bind` (the bind policy, `web::security::check_bind`, must have been applied).
pub fn bind(options: ServeOptions) -> anyhow::Result<Server> {
    let listener = TcpListener::bind(options.bind)
        .with_context(|| format!("cannot listen on {}", options.bind))?;
    listener
        .set_nonblocking(true)
        .context("cannot make the listening socket non-blocking")?;
    Ok(Server { listener, options })
}

impl Server {
    /// The address it listens on (the real port when 0 was asked for).
    pub fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        self.listener
            .local_addr()
            .context("cannot read the listening address")
    }

    /// Serve until Ctrl-C or SIGTERM, on a small tokio runtime of its own (2 workers; file and
    /// database reads run on at most 8 blocking threads).
    pub fn run(self) -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(8)
            .thread_name("ctxhost-serve")
            .enable_all()
            .build()
            .context("cannot start the server's runtime")?;
        // Before entering the runtime: the PostgreSQL client blocks on a runtime of its own,
        // which tokio refuses inside an async context.
        let store = StorePool::new(
            self.options.store.clone(),
            self.options.layout.root().to_path_buf(),
        );
        let changes = events::watch(&store)?;
        runtime.block_on(self.serve(store, changes))
    }

    async fn serve(
        self,
        store: Arc<StorePool>,
        changes: tokio::sync::watch::Receiver<i64>,
    ) -> anyhow::Result<()> {
        let ServeOptions {
            token,
            read_token,
            config,
            layout,
            mut secrets,
            pricing,
            remote,
            ..
        } = self.options;
        secrets.extend(token.clone());
        secrets.extend(read_token.clone());
        let api_auth = Arc::new(
            api::auth::ApiAuth::new(token.clone(), read_token)
                .context("cannot get random bytes from the OS")?,
        );
        let keys = Keys::new(token).context("cannot get random bytes from the OS")?;
        let (shutdown_tx, shutdown) = tokio::sync::watch::channel(false);
        let redactor = Arc::new(Redactor::new(secrets));
        let api = api::Api {
            layout: layout.clone(),
            store: store.clone(),
            config: Arc::new(config),
            redactor: redactor.clone(),
            remote: remote.clone(),
            shutdown: shutdown.clone(),
        };
        let state = AppState {
            layout,
            store,
            keys: Arc::new(keys),
            redactor,
            changes,
            shutdown,
            charts: Arc::default(),
            pricing: Arc::new(pricing),
            remote,
        };
        let listener = tokio::net::TcpListener::from_std(self.listener)
            .context("cannot hand the socket to the runtime")?;
        let app = router(state)
            .nest(api::PREFIX, api::router(api.clone(), api_auth.clone()))
            .route(
                &format!("{}/", api::PREFIX),
                axum::routing::any(api::not_found),
            )
            .merge(mcp::router(api, api_auth));
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                shutdown_signal().await;
                tracing::info!("shutting down");
                let _ = shutdown_tx.send(true);
            })
            .await
            .context("the server failed")
    }
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
