//! [`PluginSet`]: the plugin components a config names, loaded once (Spin's load step): each
//! spec parsed, the component read, checked against its world and WIT version, compiled into
//! the cache and pre-linked. Instances are made from it per use (a task's message store,
//! request formats, compressor, strategy). `ctxhost run` loads it once before starting any task (so a
//! configuration mistake is reported once, and every component is compiled into the cache
//! once); each task process loads it (from the cache) and instantiates from it; `ctxhost plugin
//! check` loads one component with [`load_plugin`].

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{Context, anyhow};

use crate::config::Config;
use crate::layout::Layout;
use crate::runtime::{
    Compressor, LlmImport, LoadedPlugin, MessageStore, PlanningImport, PluginKind, PluginSource,
    RequestFormat, Runtime, RuntimeError, Strategy,
};

/// Environment variable naming a compiled-component cache directory to use instead of
/// `<contexts>/.cache/` (shared between contexts trees; only ctxhost writes it).
pub const CACHE_DIR_ENV: &str = "CTXHOST_CACHE_DIR";

/// The compiled-component cache directory: `$CTXHOST_CACHE_DIR` if set, else
/// `<contexts>/.cache/` of `layout`.
pub fn cache_dir(layout: &Layout) -> PathBuf {
    std::env::var_os(CACHE_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| layout.cache_dir())
}

/// A fresh runtime with `config`'s limits (`runtime` section) and the cache of [`cache_dir`].
pub fn runtime_for(config: &Config, layout: &Layout) -> anyhow::Result<Runtime> {
    Runtime::new(&cache_dir(layout), config.runtime_limits())
        .context("cannot start the WebAssembly runtime")
}

/// Load the component `spec` (`builtin:NAME` or a `.wasm` path) as `kind`, or as whichever
/// plugin kind it exports when `kind` is `None`. Errors name `key` (the config key, or what
/// the spec is) and the spec.
pub fn load_plugin(
    runtime: &Runtime,
    key: &str,
    spec: &str,
    kind: Option<PluginKind>,
) -> anyhow::Result<LoadedPlugin> {
    let source = PluginSource::from_str(spec).map_err(|e| anyhow!("{key}: `{spec}`: {e}"))?;
    match kind {
        Some(kind) => runtime
            .load(&source, kind)
            .with_context(|| format!("{key} (`{spec}`) cannot be loaded as a {kind}")),
        None => runtime
            .load_any(&source)
            .with_context(|| format!("{key} `{spec}` cannot be loaded")),
    }
}

/// The configured plugins, loaded and checked: `plugins.message_store`,
/// `plugins.request_format` (or the provider's default), `plugins.compressor` (unless `none`)
/// and `plugins.strategy`. Cloning is cheap and shares the runtime (a task context keeps a
/// clone to open its message store again after repairing the files).
#[derive(Clone)]
pub struct PluginSet {
    runtime: std::sync::Arc<Runtime>,
    message_store: LoadedPlugin,
    request_format: LoadedPlugin,
    compressor: Option<LoadedPlugin>,
    strategy: LoadedPlugin,
}

impl PluginSet {
    /// Load every plugin of `config` with a runtime of its own ([`runtime_for`]). Errors name
    /// the config key and the spec.
    pub fn load(config: &Config, layout: &Layout) -> anyhow::Result<PluginSet> {
        let runtime = runtime_for(config, layout)?;
        let message_store = load_plugin(
            &runtime,
            "plugins.message_store",
            &config.plugins.message_store,
            Some(PluginKind::MessageStore),
        )?;
        let request_format = load_plugin(
            &runtime,
            "plugins.request_format",
            config.request_format(),
            Some(PluginKind::RequestFormat),
        )?;
        let compressor = config
            .compressor()
            .map(|spec| {
                load_plugin(
                    &runtime,
                    "plugins.compressor",
                    spec,
                    Some(PluginKind::Compressor),
                )
            })
            .transpose()?;
        let strategy = load_plugin(
            &runtime,
            "plugins.strategy",
            &config.plugins.strategy,
            Some(PluginKind::Strategy),
        )?;
        Ok(PluginSet {
            runtime: std::sync::Arc::new(runtime),
            message_store,
            request_format,
            compressor,
            strategy,
        })
    }

    /// The runtime the plugins were loaded with.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The spec (`builtin:NAME` or path) of the message store, for messages.
    pub fn spec_of_store(&self) -> &str {
        self.message_store.name()
    }

    /// A message store instance on `task_dir`.
    pub fn message_store(&self, task_dir: &Path) -> Result<MessageStore, RuntimeError> {
        self.runtime.message_store(&self.message_store, task_dir)
    }

    /// A request format instance on `task_dir` (each user gets its own: the agent loop and the
    /// compressor's `llm` import).
    pub fn request_format(&self, task_dir: &Path) -> Result<RequestFormat, RuntimeError> {
        self.runtime.request_format(&self.request_format, task_dir)
    }

    /// The spec (`builtin:NAME` or path) of the strategy, for messages.
    pub fn spec_of_strategy(&self) -> &str {
        self.strategy.name()
    }

    /// A strategy instance on `task_dir` whose `llm` import calls `llm` and whose `planning`
    /// import is `planning`.
    pub fn strategy(
        &self,
        task_dir: &Path,
        llm: Box<dyn LlmImport>,
        planning: Box<dyn PlanningImport>,
    ) -> Result<Strategy, RuntimeError> {
        self.runtime
            .strategy(&self.strategy, task_dir, llm, planning)
    }

    /// Whether a compressor is configured.
    pub fn has_compressor(&self) -> bool {
        self.compressor.is_some()
    }

    /// A compressor instance on `task_dir` whose `llm` import calls `llm`; `None` when
    /// compression is off.
    pub fn compressor(
        &self,
        task_dir: &Path,
        llm: Box<dyn LlmImport>,
    ) -> Result<Option<Compressor>, RuntimeError> {
        self.compressor
            .as_ref()
            .map(|p| self.runtime.compressor(p, task_dir, llm))
            .transpose()
    }
}
