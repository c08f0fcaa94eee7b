//! The host's WebAssembly component runtime (DESIGN.md §5): one wasmtime `Engine`, a linker per
//! plugin world, a compiled-component cache, and sandboxed instances.
//!
//! ```text
//! Runtime::new(contexts/.cache, limits)
//!   .load(&"builtin:jsonl-store".parse()?, PluginKind::MessageStore)  -> LoadedPlugin
//!   .message_store(&plugin, task_dir)                                -> MessageStore
//!      .open() / .add_message(..) / ...                              -> Result<_, RuntimeError>
//! ```
//!
//! - [`world`]: which world and WIT version a component implements (from its exports).
//! - [`wit`]: one module per supported WIT version (1.0.0): generated bindings and the shim to
//!   the host's types in [`types`].
//! - [`cache`]: precompiled artefacts under `contexts/.cache/`.
//! - [`sandbox`]: per-instance `Store`, WASI (task directory only), limits, deadlines, error
//!   mapping. [`output`]: component stdout/stderr → `tracing`. [`fs_guard`]: no symbolic links
//!   from WASI, the task directory's byte budget.
//! - [`MessageStore`], [`RequestFormat`], [`Compressor`], [`Strategy`]: the typed instances.

mod builtin;
pub mod cache;
pub mod call_times;
pub mod compile_progress;
mod compressor;
pub mod dir_budget;
mod epoch;
mod error;
pub mod fs_guard;
mod host_imports;
mod message_store;
pub mod mismatch;
pub mod output;
pub mod plugin_kind;
mod request_format;
mod sandbox;
mod strategy;
pub mod types;
pub mod wit;
pub mod world;

use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine};

use epoch::EpochTicker;
use sandbox::{Sandbox, StoreState};
use wit::v1_0_0;

/// Default of `context_storage.max_files_per_call`, the files and folders one component call
/// may create: far more than any component needs in one call (a compression writes a handful
/// of work files), far fewer than would slow the walk that measures the directory's byte
/// budget.
pub const DEFAULT_MAX_FILES_PER_CALL: u64 = 1000;

pub use cache::CacheOutcome;
pub use compressor::Compressor;
pub use error::{PluginError, RuntimeError};
pub use message_store::MessageStore;
#[doc(hidden)]
pub use message_store::UncheckedProbe;
pub use mismatch::explain_link_error;
pub use request_format::RequestFormat;
pub use strategy::{HookCall, MAX_LLM_CALLS_PER_HOOK, Strategy};
pub use types::{
    AddedMessage, Completion, CompressConfig, CompressResult, Decision, LlmImport,
    MAX_USAGE_TOKENS, NoLlm, Plan, PlanStep, PlanningEntry, PlanningImport, ReasoningConfig, Reply,
    RequestConfig, RequestInfo, StepStatus, StoreStats, StrategyConfig, SummaryInfo, TaskState,
    ToolOutcome, Usage, Verdict,
};
pub use wit::WitVersion;
pub use world::{PluginKind, WIT_PACKAGE, WIT_VERSION};

/// Per-instance resource limits (config `runtime.memory_limit_mib`,
/// `runtime.call_timeout_secs`, `context_storage.max_task_dir_mib`,
/// `context_storage.max_files_per_call`,
/// `context_storage.max_llm_calls_per_compression`, `context_storage.max_compression_secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeLimits {
    /// Largest linear memory of one instance, in bytes (default 256 MiB). Growing past it
    /// traps: [`RuntimeError::MemoryLimit`].
    pub memory_bytes: usize,
    /// Longest a single call (or instantiation) may run, not counting time in the host's `llm`
    /// import (default 30 s; resolution 10 ms). Past it: [`RuntimeError::Deadline`].
    pub call_timeout: Duration,
    /// Most bytes the task directory an instance sees may hold (default 1 GiB; `None`: no
    /// budget). Checked every 10 ms while a call runs and when it returns; a call that writes
    /// past it is stopped: [`RuntimeError::DiskBudget`].
    pub task_dir_bytes: Option<u64>,
    /// Most files and folders one call may create in the task directory (default 1000;
    /// `None`: no limit). A creation past it fails with WASI `quota`, and the call with
    /// [`RuntimeError::FileLimit`].
    pub files_per_call: Option<u64>,
    /// Most `llm.complete` calls within one call of a component (one compression; default 16).
    /// Further calls fail with `plugin-error::llm` saying so.
    pub llm_calls_per_call: u32,
    /// Longest wall time of one call, time in the host's `llm` import included (one
    /// compression; default 600 s). `llm.complete` gets only the time left; past it the call
    /// is stopped: [`RuntimeError::WallTime`].
    pub wall_time_per_call: Duration,
}

impl Default for RuntimeLimits {
    fn default() -> Self {
        RuntimeLimits {
            memory_bytes: 256 * 1024 * 1024,
            call_timeout: Duration::from_secs(30),
            task_dir_bytes: Some(1024 * 1024 * 1024),
            files_per_call: Some(DEFAULT_MAX_FILES_PER_CALL),
            llm_calls_per_call: 16,
            wall_time_per_call: Duration::from_secs(600),
        }
    }
}

/// Where a component comes from: `builtin:NAME` (embedded in the binary) or a `.wasm` path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PluginSource {
    /// A builtin, by NAME (without the `builtin:` prefix), e.g. `jsonl-store`.
    Builtin(String),
    /// A component file.
    Path(PathBuf),
}

impl PluginSource {
    /// Every builtin, as `builtin:NAME` sources.
    pub fn builtins() -> Vec<PluginSource> {
        builtin::names()
            .into_iter()
            .map(|n| PluginSource::Builtin(n.to_string()))
            .collect()
    }
}

impl FromStr for PluginSource {
    type Err = RuntimeError;

    /// `builtin:NAME` → [`PluginSource::Builtin`] (NAME must be a known builtin); anything
    /// else → [`PluginSource::Path`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.strip_prefix("builtin:") {
            Some(name) if builtin::bytes(name).is_some() => {
                Ok(PluginSource::Builtin(name.to_string()))
            }
            Some(name) => Err(unknown_builtin(name)),
            None => Ok(PluginSource::Path(PathBuf::from(s))),
        }
    }
}

impl fmt::Display for PluginSource {
    /// `builtin:NAME` or the path as given; this is the component's name in every message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginSource::Builtin(name) => write!(f, "builtin:{name}"),
            PluginSource::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

fn unknown_builtin(name: &str) -> RuntimeError {
    RuntimeError::UnknownBuiltin {
        name: name.to_string(),
        available: builtin::names()
            .iter()
            .map(|n| format!("builtin:{n}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// A compiled component checked against its world and pre-linked, ready to instantiate
/// (cheap to clone; instantiating takes tens of microseconds).
#[derive(Clone)]
pub struct LoadedPlugin {
    name: Arc<str>,
    kind: PluginKind,
    version: String,
    wit: WitVersion,
    exports: Vec<String>,
    cache: CacheOutcome,
    pre: Pre,
}

#[derive(Clone)]
enum Pre {
    MessageStore(message_store::Pre),
    Compressor(compressor::Pre),
    RequestFormat(request_format::Pre),
    Strategy(strategy::Pre),
}

impl LoadedPlugin {
    /// The component's name: `builtin:NAME` or its path.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its plugin kind (world).
    pub fn kind(&self) -> PluginKind {
        self.kind
    }

    /// The WIT version of the exported plugin interface as the component names it, e.g.
    /// `1.0.0`.
    pub fn wit_version(&self) -> &str {
        &self.version
    }

    /// The supported WIT version the component runs as (its shim).
    pub fn wit(&self) -> WitVersion {
        self.wit
    }

    /// Every export name of the component.
    pub fn exports(&self) -> &[String] {
        &self.exports
    }

    /// Whether it came from the compiled-component cache.
    pub fn cache_outcome(&self) -> CacheOutcome {
        self.cache
    }
}

impl fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// The task directory as the `history` import reads it (opened once, never through a link).
fn history_dir(
    plugin: &LoadedPlugin,
    task_dir: &Path,
) -> Result<crate::task_dir::TaskDir, RuntimeError> {
    crate::task_dir::TaskDir::open(task_dir).map_err(|e| RuntimeError::Sandbox {
        component: plugin.name.to_string(),
        task_dir: task_dir.display().to_string(),
        reason: format!("cannot open it for the history import: {e}"),
    })
}

/// The linkers of one WIT version: one per world (WASI p2 + `log`, `llm` for compressors and
/// strategies, `planning` for strategies, `history` for compressors and strategies).
struct WorldLinkers {
    message_store: Linker<StoreState>,
    compressor: Linker<StoreState>,
    request_format: Linker<StoreState>,
    strategy: Linker<StoreState>,
}

impl WorldLinkers {
    fn get(&self, kind: PluginKind) -> &Linker<StoreState> {
        match kind {
            PluginKind::MessageStore => &self.message_store,
            PluginKind::Compressor => &self.compressor,
            PluginKind::RequestFormat => &self.request_format,
            PluginKind::Strategy => &self.strategy,
        }
    }
}

/// A linker with WASI p2 (links refused, creations counted: [`fs_guard::guard_filesystem`]) and what
/// `add` defines (a world's `ctxhost:plugin` imports).
fn linker(
    engine: &Engine,
    add: impl FnOnce(&mut Linker<StoreState>) -> wasmtime::Result<()>,
) -> anyhow::Result<Linker<StoreState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(wasmtime_error)?;
    fs_guard::guard_filesystem(&mut linker).map_err(wasmtime_error)?;
    add(&mut linker).map_err(wasmtime_error)?;
    Ok(linker)
}

/// The component runtime of one process: one `Engine` (epoch interruption, ticked every 10 ms
/// by a background thread), a `Linker` per world of the WIT version it loads, the
/// compiled-component cache and the per-instance limits. `Send + Sync`.
pub struct Runtime {
    engine: Engine,
    linkers: WorldLinkers,
    cache: cache::ComponentCache,
    limits: RuntimeLimits,
    ticker: Arc<EpochTicker>,
}

impl Runtime {
    /// A runtime caching compiled components in `cache_dir` (normally `contexts/.cache`,
    /// created on first use) and applying `limits` to every instance.
    ///
    /// Errors: the engine cannot be configured or the ticker thread cannot start.
    pub fn new(cache_dir: &Path, limits: RuntimeLimits) -> anyhow::Result<Runtime> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        let engine = Engine::new(&config).map_err(wasmtime_error)?;

        let linkers = WorldLinkers {
            message_store: linker(&engine, |l| {
                v1_0_0::MessageStorePlugin::add_to_linker::<_, HasSelf<_>>(l, |s| s)
            })?,
            compressor: linker(&engine, |l| {
                v1_0_0::CompressorPlugin::add_to_linker::<_, HasSelf<_>>(l, |s| s)
            })?,
            request_format: linker(&engine, |l| {
                v1_0_0::RequestFormatPlugin::add_to_linker::<_, HasSelf<_>>(l, |s| s)
            })?,
            strategy: linker(&engine, |l| {
                v1_0_0::StrategyPlugin::add_to_linker::<_, HasSelf<_>>(l, |s| s)
            })?,
        };

        let cache = cache::ComponentCache::new(cache_dir, &engine);
        let ticker = EpochTicker::start(&engine)?;
        Ok(Runtime {
            engine,
            linkers,
            cache,
            limits,
            ticker,
        })
    }

    /// The limits applied to every instance.
    pub fn limits(&self) -> RuntimeLimits {
        self.limits
    }

    /// The compiled-component cache directory.
    pub fn cache_dir(&self) -> &Path {
        self.cache.dir()
    }

    /// Load `source` as a plugin of `kind`: read it, compile it (or load it from the cache),
    /// check it exports `kind`'s interface at a supported WIT version ([`WitVersion::SUPPORTED`]:
    /// 1.0.x), and pre-link it with that version's linker.
    ///
    /// Errors name the component: [`RuntimeError::NotFound`], [`RuntimeError::Read`],
    /// [`RuntimeError::NotAComponent`], [`RuntimeError::UnknownBuiltin`],
    /// [`RuntimeError::WrongWorld`] (e.g. `component x.wasm: exports
    /// ctxhost:plugin/request-format@1.0.0, expected ctxhost:plugin/message-store@1.0.0 (world
    /// message-store-plugin)`), [`RuntimeError::IncompatibleVersion`] (another WIT version, e.g.
    /// a pre-1.0 `0.2.0`: the message names it and the version this host loads), [`RuntimeError::Compile`],
    /// [`RuntimeError::Link`] (imports the world does not provide, or export signatures that do
    /// not match the WIT).
    pub fn load(
        &self,
        source: &PluginSource,
        kind: PluginKind,
    ) -> Result<LoadedPlugin, RuntimeError> {
        let (name, component, outcome) = self.compile(source)?;
        let exports = world::export_names(&self.engine, &component);
        let (version, wit) = world::expect_kind(&name, &exports, kind)?;
        self.prepare(name, component, outcome, kind, (version, wit), exports)
    }

    /// Load `source` as whichever plugin kind it exports (for `ctxhost plugin check`).
    /// Errors as [`Runtime::load`]; a component exporting no (or several) plugin interfaces is
    /// [`RuntimeError::WrongWorld`].
    pub fn load_any(&self, source: &PluginSource) -> Result<LoadedPlugin, RuntimeError> {
        let (name, component, outcome) = self.compile(source)?;
        let exports = world::export_names(&self.engine, &component);
        let (kind, version, wit) = world::detect(&name, &exports)?;
        self.prepare(name, component, outcome, kind, (version, wit), exports)
    }

    /// A new message store instance of `plugin` on `task_dir` (which must exist).
    pub fn message_store(
        &self,
        plugin: &LoadedPlugin,
        task_dir: &Path,
    ) -> Result<MessageStore, RuntimeError> {
        let Pre::MessageStore(pre) = &plugin.pre else {
            return Err(self.kind_mismatch(plugin, PluginKind::MessageStore));
        };
        MessageStore::instantiate(
            self.sandbox(plugin, task_dir, None)?,
            pre,
            task_dir.to_path_buf(),
        )
    }

    /// A new request format instance of `plugin` on `task_dir`.
    pub fn request_format(
        &self,
        plugin: &LoadedPlugin,
        task_dir: &Path,
    ) -> Result<RequestFormat, RuntimeError> {
        let Pre::RequestFormat(pre) = &plugin.pre else {
            return Err(self.kind_mismatch(plugin, PluginKind::RequestFormat));
        };
        RequestFormat::instantiate(self.sandbox(plugin, task_dir, None)?, pre)
    }

    /// A new compressor instance of `plugin` on `task_dir`; its `llm` import calls `llm`.
    pub fn compressor(
        &self,
        plugin: &LoadedPlugin,
        task_dir: &Path,
        llm: Box<dyn LlmImport>,
    ) -> Result<Compressor, RuntimeError> {
        let Pre::Compressor(pre) = &plugin.pre else {
            return Err(self.kind_mismatch(plugin, PluginKind::Compressor));
        };
        let mut sandbox = self.sandbox(plugin, task_dir, Some(llm))?;
        sandbox.state_mut().history = Some(history_dir(plugin, task_dir)?);
        Compressor::instantiate(sandbox, pre)
    }

    /// A new strategy instance of `plugin` on `task_dir`; its `llm` import calls `llm`, its
    /// `planning` import `planning`.
    pub fn strategy(
        &self,
        plugin: &LoadedPlugin,
        task_dir: &Path,
        llm: Box<dyn LlmImport>,
        planning: Box<dyn PlanningImport>,
    ) -> Result<Strategy, RuntimeError> {
        let Pre::Strategy(pre) = &plugin.pre else {
            return Err(self.kind_mismatch(plugin, PluginKind::Strategy));
        };
        let mut sandbox = self.sandbox(plugin, task_dir, Some(llm))?;
        sandbox.state_mut().planning = Some(planning);
        sandbox.state_mut().history = Some(history_dir(plugin, task_dir)?);
        Strategy::instantiate(sandbox, pre)
    }

    fn sandbox(
        &self,
        plugin: &LoadedPlugin,
        task_dir: &Path,
        llm: Option<Box<dyn LlmImport>>,
    ) -> Result<Sandbox, RuntimeError> {
        Sandbox::new(
            &self.engine,
            self.ticker.clone(),
            plugin.name.clone(),
            &self.limits,
            task_dir,
            llm,
        )
    }

    fn kind_mismatch(&self, plugin: &LoadedPlugin, wanted: PluginKind) -> RuntimeError {
        RuntimeError::WrongWorld {
            component: plugin.name.to_string(),
            found: plugin.kind.export_name_at(plugin.wit),
            expected: wanted.export_name_at(plugin.wit),
            world: wanted.world().to_string(),
        }
    }

    /// Read and compile (or load from the cache) `source`.
    fn compile(
        &self,
        source: &PluginSource,
    ) -> Result<(Arc<str>, Component, CacheOutcome), RuntimeError> {
        let name = source.to_string();
        let bytes: Cow<'static, [u8]> = match source {
            PluginSource::Builtin(n) => {
                Cow::Borrowed(builtin::bytes(n).ok_or_else(|| unknown_builtin(n))?)
            }
            PluginSource::Path(p) => Cow::Owned(read_component_file(&name, p)?),
        };
        check_header(&name, &bytes)?;
        let (component, outcome) = self.cache.load_or_compile(&self.engine, &bytes, || {
            let _progress =
                compile_progress::CompileProgress::start(&name, bytes.len(), self.cache.dir());
            Component::new(&self.engine, &bytes).map_err(|e| RuntimeError::Compile {
                component: name.clone(),
                reason: format!("{e:#}"),
            })
        })?;
        tracing::debug!(component = %name, cache = ?outcome, "component loaded");
        Ok((name.into(), component, outcome))
    }

    fn prepare(
        &self,
        name: Arc<str>,
        component: Component,
        cache: CacheOutcome,
        kind: PluginKind,
        (version, wit): (String, WitVersion),
        exports: Vec<String>,
    ) -> Result<LoadedPlugin, RuntimeError> {
        let link_error = |e: wasmtime::Error| RuntimeError::Link {
            component: name.to_string(),
            world: format!("{} ({WIT_PACKAGE}@{wit})", kind.world()),
            reason: explain_link_error(&format!("{e:#}"), kind, wit),
        };
        let ip = self
            .linkers
            .get(kind)
            .instantiate_pre(&component)
            .map_err(link_error)?;
        let pre = match wit {
            WitVersion::V1_0_0 => match kind {
                PluginKind::MessageStore => {
                    Pre::MessageStore(v1_0_0::MessageStorePluginPre::new(ip).map_err(link_error)?)
                }
                PluginKind::Compressor => {
                    Pre::Compressor(v1_0_0::CompressorPluginPre::new(ip).map_err(link_error)?)
                }
                PluginKind::RequestFormat => {
                    Pre::RequestFormat(v1_0_0::RequestFormatPluginPre::new(ip).map_err(link_error)?)
                }
                PluginKind::Strategy => {
                    Pre::Strategy(v1_0_0::StrategyPluginPre::new(ip).map_err(link_error)?)
                }
            },
        };
        Ok(LoadedPlugin {
            name,
            kind,
            version,
            wit,
            exports,
            cache,
            pre,
        })
    }
}

/// `wasmtime::Error` is not a `std::error::Error`: keep its full chain as text.
fn wasmtime_error(e: wasmtime::Error) -> anyhow::Error {
    anyhow::anyhow!("{e:#}")
}

/// Names of every builtin component (`builtin:NAME`).
pub fn builtin_names() -> Vec<String> {
    builtin::names()
        .into_iter()
        .map(|n| format!("builtin:{n}"))
        .collect()
}

/// Refuse what is not a component before wasmtime tries to compile it, saying what it is.
fn check_header(name: &str, bytes: &[u8]) -> Result<(), RuntimeError> {
    let not = |reason: String| RuntimeError::NotAComponent {
        component: name.to_string(),
        reason,
    };
    if Engine::detect_precompiled(bytes).is_some() {
        return Err(not(
            "it is a precompiled wasmtime artefact (.cwasm); give the component's .wasm file"
                .to_string(),
        ));
    }
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        let head: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
        return Err(not(if bytes.is_empty() {
            "the file is empty".to_string()
        } else {
            format!(
                "the file does not start with the WebAssembly magic `\\0asm` (first bytes: {})",
                head.join(" ")
            )
        }));
    }
    match &bytes[4..8] {
        [1, 0, 0, 0] => Err(not(
            "it is a core WebAssembly module, not a component; build it for wasm32-wasip2 or wrap it with \
             `wasm-tools component new`"
                .to_string(),
        )),
        [_, _, 1, 0] => Ok(()),
        other => Err(not(format!("unknown WebAssembly version/layer {other:02x?}"))),
    }
}

// The runtime is shared between threads and instances can move between them: checked when
// the crate compiles.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    const fn send<T: Send>() {}
    send_sync::<Runtime>();
    send_sync::<LoadedPlugin>();
    send::<MessageStore>();
    send::<RequestFormat>();
    send::<Compressor>();
    send::<Strategy>();
};

/// Largest `.wasm` file the host reads: 256 MiB (a Python component is ~19 MB, a JavaScript one
/// ~13 MB). Bounds what a wrong path (`/dev/zero`, a disk image) can make the host allocate.
pub const MAX_COMPONENT_FILE_BYTES: u64 = 256 << 20;

/// The bytes of the component file at `path`: a regular file (a symlink to one is followed) of at
/// most [`MAX_COMPONENT_FILE_BYTES`]. A directory, a device or a FIFO is refused before it is
/// opened, so neither `/dev/zero` nor a named pipe can exhaust memory or block the host.
///
/// # Errors
/// [`RuntimeError::NotFound`] when nothing is there; [`RuntimeError::Read`] naming the reason
/// (not a regular file, too large, an I/O error) otherwise.
fn read_component_file(name: &str, path: &Path) -> Result<Vec<u8>, RuntimeError> {
    use std::io::Read as _;
    let read_err = |reason: String| RuntimeError::Read {
        component: name.to_string(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => RuntimeError::NotFound {
            component: name.to_string(),
        },
        _ => read_err(e.to_string()),
    })?;
    let ft = meta.file_type();
    if !ft.is_file() {
        let what = if ft.is_dir() {
            "a directory"
        } else {
            "a device, FIFO or socket"
        };
        return Err(read_err(format!("not a regular file ({what})")));
    }
    let too_large = || {
        read_err(format!(
            "larger than {} MiB, the most a component file may hold",
            MAX_COMPONENT_FILE_BYTES >> 20
        ))
    };
    if meta.len() > MAX_COMPONENT_FILE_BYTES {
        return Err(too_large());
    }
    let file = std::fs::File::open(path).map_err(|e| read_err(e.to_string()))?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_COMPONENT_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| read_err(e.to_string()))?;
    if bytes.len() as u64 > MAX_COMPONENT_FILE_BYTES {
        return Err(too_large());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_and_display() {
        let b: PluginSource = "builtin:jsonl-store".parse().unwrap();
        assert_eq!(b, PluginSource::Builtin("jsonl-store".into()));
        assert_eq!(b.to_string(), "builtin:jsonl-store");
        let p: PluginSource = "plugins/x.wasm".parse().unwrap();
        assert_eq!(p, PluginSource::Path("plugins/x.wasm".into()));
        let e = "builtin:nope".parse::<PluginSource>().unwrap_err();
        assert!(
            e.to_string().contains("builtin:nope") && e.to_string().contains("builtin:jsonl-store"),
            "{e}"
        );
    }

    #[test]
    fn headers_say_what_a_file_is() {
        let e = check_header("x.wasm", b"\0asm\x01\0\0\0").unwrap_err();
        assert!(e.to_string().contains("core WebAssembly module"), "{e}");
        let e = check_header("x.wasm", b"hello world").unwrap_err();
        assert!(e.to_string().contains("68 65 6c 6c"), "{e}");
        let e = check_header("x.wasm", b"").unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        assert!(check_header("x.wasm", b"\0asm\x0d\0\x01\0").is_ok());
    }
}
