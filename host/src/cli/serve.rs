//! `ctxhost serve`: parse the flags, apply the bind policy, start the web dashboard
//! ([`crate::web`]) and print where it listens.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;

use clap::Args;

use super::{Env, usage};
use crate::web::{self, ServeOptions, security};

/// The address `serve` listens on by default.
pub const DEFAULT_BIND: &str = "127.0.0.1:7878";

/// `ctxhost serve` arguments.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on, `IP:PORT` (port 0: any free port). Anything but a loopback
    /// address needs --token-env.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_BIND)]
    pub bind: String,
    /// Name of the environment variable that holds the access token (at least 16
    /// characters). Required for a non-loopback --bind; with it, every request must present
    /// the token: the dashboard takes it from its login form, a `?token=` link or
    /// `Authorization: Bearer`; the JSON API (`/api/v1`) and `/mcp` take it only as
    /// `Authorization: Bearer` (read-write there).
    #[arg(long, value_name = "NAME")]
    pub token_env: Option<String>,
    /// Name of the environment variable that holds a read-only token for the JSON API
    /// (`/api/v1`) and `/mcp` (at least 16 characters): it may list and read tasks, not
    /// create or steer them. Without any token the API is read-only (loopback only).
    #[arg(long, value_name = "NAME")]
    pub read_token_env: Option<String>,
}

fn resolve(bind: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(a) = bind.parse::<SocketAddr>() {
        return Ok(a);
    }
    // `localhost:PORT` and other names: the first address they resolve to.
    bind.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            usage(format!(
                "--bind {bind}: not an address (expected IP:PORT, e.g. {DEFAULT_BIND})"
            ))
        })
}

/// The secrets the server must never show: the LLM API key is never written to contexts/, but
/// should a provider have echoed it into a file, the dashboard, the API and the MCP server do
/// not show it; nor the database password of `store`, should it appear in a task's files.
pub(super) fn known_secrets(env: &Env, store: &crate::db::StoreSpec) -> Vec<String> {
    env.config
        .api_key_env()
        .and_then(|n| std::env::var(n).ok())
        .into_iter()
        .chain(match store {
            crate::db::StoreSpec::Postgres(url) => url.password(),
            crate::db::StoreSpec::Sqlite => None,
        })
        .collect()
}

pub(super) fn run(env: &Env, args: &ServeArgs) -> anyhow::Result<ExitCode> {
    env.require_tree()?;
    // Opened once first: an old schema is upgraded (and a newer one refused), and a tree
    // another store owns refused, before serving.
    env.open_db()?;
    let store = env.config.store_spec().map_err(|e| usage(e.to_string()))?;
    let bind = resolve(&args.bind)?;
    let token = security::check_bind(bind, args.token_env.as_deref(), |name| {
        std::env::var(name).ok()
    })
    .map_err(|e| usage(e.to_string()))?;
    let read_token = security::read_token(args.read_token_env.as_deref(), |name| {
        std::env::var(name).ok()
    })
    .map_err(|e| usage(e.to_string()))?;
    let secrets = known_secrets(env, &store);
    // Kept here until the server returns: the last reference is dropped outside its runtime.
    let remote = crate::remote::open(env.config.context_storage.remote.as_ref())?;
    let server = web::bind(ServeOptions {
        bind,
        token: token.clone(),
        read_token,
        config: env.config.clone(),
        layout: env.layout.clone(),
        store,
        secrets,
        pricing: env.config.llm.pricing.clone(),
        remote: remote.clone(),
    })?;
    let addr = server.local_addr()?;
    let host = if addr.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else if addr.is_ipv6() {
        format!("[{}]", addr.ip())
    } else {
        addr.ip().to_string()
    };
    println!(
        "ctxhost dashboard: http://{host}:{}/ (contexts {}; API /api/v1, MCP /mcp){}",
        addr.port(),
        env.layout.root().display(),
        match &args.token_env {
            Some(name) => format!("; access token: the value of ${name}"),
            None => String::new(),
        }
    );
    let _ = std::io::stdout().flush();
    server.run()?;
    drop(remote);
    Ok(ExitCode::SUCCESS)
}
