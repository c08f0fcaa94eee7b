//! `init`: create the contexts/ tree and tasks.db; write a commented config.yaml if absent.

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::layout::Layout;

/// What [`init`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initialized {
    /// The config file.
    pub config_path: PathBuf,
    /// Whether it was written now (`false`: it existed and was kept).
    pub config_written: bool,
    /// The contexts/ directory.
    pub contexts: PathBuf,
    /// The task store: the SQLite file, or `postgres://user@host:port/dbname` (no password).
    pub database: String,
}

/// Create what is missing, keep what exists. An existing `config_path` is loaded (and so
/// validated) to find `context_storage.base_dir`; it is never overwritten. `contexts`
/// overrides that directory.
pub fn init(config_path: &Path, contexts: Option<&Path>) -> anyhow::Result<Initialized> {
    let (config, config_written) = if config_path.exists() {
        (Config::load(config_path)?, false)
    } else {
        let yaml = Config::default_yaml();
        if let Some(dir) = config_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        crate::layout::atomic_write(config_path, yaml.as_bytes())?;
        (
            Config::from_yaml(&yaml, &config_path.display().to_string())?,
            true,
        )
    };
    let root = contexts
        .map(Path::to_path_buf)
        .unwrap_or_else(|| config.context_storage.base_dir.clone());
    let layout = Layout::new(root);
    layout.ensure()?;
    let db = super::open_store(&config, &layout)?;
    Ok(Initialized {
        config_path: config_path.to_path_buf(),
        config_written,
        contexts: layout.root().to_path_buf(),
        database: db.location().to_string(),
    })
}
