//! Builtin components instantiated in process, for the tests that call one directly (no task
//! process): one [`Runtime`] (and compile cache) for the whole test binary, and the golden
//! inputs under `tests/golden/`.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use ctxhost::runtime::{MessageStore, PluginKind, RequestFormat, Runtime, RuntimeLimits};
use tempfile::TempDir;

/// The runtime every in-process component of the tests runs on (its compile cache in a
/// temporary directory kept for the life of the binary).
static RUNTIME: LazyLock<(TempDir, Runtime)> = LazyLock::new(|| {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(&dir.path().join(".cache"), RuntimeLimits::default()).unwrap();
    (dir, runtime)
});

/// The shared runtime.
pub fn runtime() -> &'static Runtime {
    &RUNTIME.1
}

/// An instance of the message store `spec` (`builtin:jsonl-store`, a path…) on the task
/// directory `task`.
pub fn message_store(spec: &str, task: &Path) -> MessageStore {
    let plugin = runtime()
        .load(&spec.parse().unwrap(), PluginKind::MessageStore)
        .unwrap();
    runtime().message_store(&plugin, task).unwrap()
}

/// An instance of the request format `spec` (`builtin:openai-chat`, …) on the task directory
/// `task`.
pub fn request_format(spec: &str, task: &Path) -> RequestFormat {
    let plugin = runtime()
        .load(&spec.parse().unwrap(), PluginKind::RequestFormat)
        .unwrap();
    runtime().request_format(&plugin, task).unwrap()
}

/// The golden input `name` (`tests/golden/<name>`).
pub fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/golden")
        .join(name)
}
