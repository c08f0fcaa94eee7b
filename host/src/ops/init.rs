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
/// overrides that directory. The contexts directory is created, never missing folders above
/// it: a usage error naming it and where it was set otherwise.
pub fn init(config_path: &Path, contexts: Option<&Path>) -> anyhow::Result<Initialized> {
    let existing = config_path.exists();
    let yaml = Config::default_yaml();
    let config = if existing {
        Config::load(config_path)?
    } else {
        Config::from_yaml(&yaml, &config_path.display().to_string())?
    };
    let root = contexts
        .map(Path::to_path_buf)
        .unwrap_or_else(|| config.context_storage.base_dir.clone());
    let layout = Layout::new(root);
    // Checked before anything is written.
    if let Some(why) = layout.creation_blocker() {
        return Err(crate::error::usage(format!(
            "{}: cannot create the contexts directory {}: {why}",
            crate::config::contexts_from(contexts.is_some(), config_path),
            layout.root().display()
        )));
    }
    if !existing {
        if let Some(dir) = config_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        crate::layout::atomic_write(config_path, yaml.as_bytes())?;
    }
    layout.ensure()?;
    let db = super::open_store(&config, &layout)?;
    Ok(Initialized {
        config_path: config_path.to_path_buf(),
        config_written: !existing,
        contexts: layout.root().to_path_buf(),
        database: db.location().to_string(),
    })
}
