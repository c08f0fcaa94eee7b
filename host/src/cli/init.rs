//! `ctxhost init`: create the contexts/ tree and tasks.db; write a commented config.yaml if absent.

use std::process::ExitCode;

use super::GlobalArgs;
use crate::config::Config;
use crate::db::Db;
use crate::layout::Layout;

/// Create what is missing, keep what exists. An existing config.yaml is loaded (and so
/// validated) to find `context_storage.base_dir`; it is never overwritten.
pub(super) fn run(global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    // `--config PATH` names the file to write when absent (a missing path is not an error here).
    let config_path = &global.config_path();
    let config = if config_path.exists() {
        let c = Config::load(config_path)?;
        println!("config:   {} (kept)", config_path.display());
        c
    } else {
        let yaml = Config::default_yaml();
        if let Some(dir) = config_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        crate::layout::atomic_write(config_path, yaml.as_bytes())?;
        println!("config:   {} (written)", config_path.display());
        Config::from_yaml(&yaml, &config_path.display().to_string())?
    };
    let root = global
        .contexts
        .clone()
        .unwrap_or_else(|| config.context_storage.base_dir.clone());
    let layout = Layout::new(root);
    layout.ensure()?;
    let db = Db::open(layout.root())?;
    println!("contexts: {}", layout.root().display());
    println!("database: {}", db.path().display());
    Ok(ExitCode::SUCCESS)
}
