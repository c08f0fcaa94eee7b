//! `ctxhost mcp`: the MCP server ([`crate::web::mcp`]) over standard input and output, on this
//! config's tree and task store.

use std::process::ExitCode;
use std::sync::Arc;

use super::{Env, usage};

pub(super) fn run(env: &Env) -> anyhow::Result<ExitCode> {
    env.require_tree()?;
    // Opened once first: an old schema is upgraded (and a newer one refused), and a tree
    // another store owns refused, before serving.
    env.open_db()?;
    let spec = env.config.store_spec().map_err(|e| usage(e.to_string()))?;
    let secrets = super::serve::known_secrets(env, &spec);
    // Kept here until the server returns: the last reference is dropped outside its runtime.
    let remote = crate::remote::open(env.config.context_storage.remote.as_ref())?;
    let (_never, shutdown) = tokio::sync::watch::channel(false);
    let api = crate::web::api::Api {
        layout: env.layout.clone(),
        store: crate::web::store::StorePool::new(spec, env.layout.root().to_path_buf()),
        config: Arc::new(env.config.clone()),
        redactor: Arc::new(crate::web::security::Redactor::new(secrets)),
        remote: remote.clone(),
        shutdown,
    };
    crate::web::mcp::serve_stdio(api)?;
    drop(remote);
    Ok(ExitCode::SUCCESS)
}
