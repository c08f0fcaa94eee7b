//! Errors of loading and calling plugin components.
//!
//! Every [`RuntimeError`] names the component (`builtin:NAME` or the `.wasm` path it was loaded
//! from) and, for calls, the WIT function, e.g.
//! `component builtin:jsonl-store: add-message exceeded its 30 s deadline`.

use std::time::Duration;

/// A component's own error result (WIT `plugin-error`). `Display`: `io: …`, `invalid input: …`,
/// `llm: …`, `unsupported: …`, `internal: …`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    /// Reading or writing a file of the task directory failed.
    #[error("io: {0}")]
    Io(String),
    /// A file or argument is malformed.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The host's `llm` import failed.
    #[error("llm: {0}")]
    Llm(String),
    /// The request is not supported by this plugin.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Anything else.
    #[error("internal: {0}")]
    Internal(String),
}

/// Why loading, instantiating or calling a component failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RuntimeError {
    /// `builtin:NAME` names no embedded component.
    #[error("component builtin:{name}: no such builtin component (available: {available})")]
    UnknownBuiltin { name: String, available: String },
    /// The `.wasm` file does not exist.
    #[error("component {component}: file not found")]
    NotFound { component: String },
    /// The `.wasm` file exists but cannot be read.
    #[error("component {component}: cannot read the file: {reason}")]
    Read { component: String, reason: String },
    /// The file is not a WebAssembly component (random bytes, a core module, a precompiled
    /// artefact).
    #[error("component {component}: not a WebAssembly component: {reason}")]
    NotAComponent { component: String, reason: String },
    /// The component exports none of the expected plugin interface.
    #[error("component {component}: exports {found}, expected {expected} (world {world})")]
    WrongWorld {
        component: String,
        found: String,
        expected: String,
        world: String,
    },
    /// The component exports the expected interface at a WIT version this host does not load
    /// (`supported` lists those it does, e.g. `ctxhost:plugin@0.1.0 and ctxhost:plugin@0.2.0`;
    /// `current` is the version of `wit/plugin.wit`).
    #[error(
        "component {component}: exports {found}, a WIT version this host does not load; it loads {supported} (world {world}): rebuild it against wit/plugin.wit ({current})"
    )]
    IncompatibleVersion {
        component: String,
        found: String,
        supported: String,
        world: String,
        current: String,
    },
    /// Compiling the component failed.
    #[error("component {component}: compiling failed: {reason}")]
    Compile { component: String, reason: String },
    /// The component's imports or export signatures do not fit the world.
    #[error("component {component}: does not fit world {world}: {reason}")]
    Link {
        component: String,
        world: String,
        reason: String,
    },
    /// The sandbox (WASI context, task directory preopen) could not be set up.
    #[error("component {component}: cannot set up its sandbox on {task_dir}: {reason}")]
    Sandbox {
        component: String,
        task_dir: String,
        reason: String,
    },
    /// A call ran past the call timeout (epoch deadline).
    #[error("component {component}: {function} exceeded its {} deadline", fmt_duration(*timeout))]
    Deadline {
        component: String,
        function: String,
        timeout: Duration,
    },
    /// The component tried to grow its memory past the limit.
    #[error("component {component}: memory limit of {} reached in {function}", fmt_bytes(*limit_bytes))]
    MemoryLimit {
        component: String,
        function: String,
        limit_bytes: usize,
    },
    /// The component trapped (a panic, `unreachable`, out-of-bounds access, ...).
    #[error(
        "component {component}: {function} trapped: {trap}{}{}",
        at(frame),
        stderr_tail(stderr)
    )]
    Trap {
        component: String,
        function: String,
        trap: String,
        frame: Option<String>,
        stderr: Option<String>,
    },
    /// The component returned its own error (WIT `plugin-error`).
    #[error("component {component}: {function} failed: {error}")]
    Plugin {
        component: String,
        function: String,
        error: PluginError,
    },
    /// An earlier trap left the instance unusable.
    #[error(
        "component {component}: cannot call {function}: the instance is unusable after an earlier failure ({cause}); a new instance is needed"
    )]
    Poisoned {
        component: String,
        function: String,
        cause: String,
    },
    /// The host side of a call failed (e.g. a WASI or import error that is not a guest trap).
    #[error("component {component}: {function} failed in the host: {reason}")]
    Host {
        component: String,
        function: String,
        reason: String,
    },
}

impl RuntimeError {
    /// The component this error is about: `builtin:NAME` or a path (for
    /// [`RuntimeError::UnknownBuiltin`], the NAME alone).
    pub fn component(&self) -> &str {
        match self {
            RuntimeError::UnknownBuiltin { name, .. } => name,
            RuntimeError::NotFound { component }
            | RuntimeError::Read { component, .. }
            | RuntimeError::NotAComponent { component, .. }
            | RuntimeError::WrongWorld { component, .. }
            | RuntimeError::IncompatibleVersion { component, .. }
            | RuntimeError::Compile { component, .. }
            | RuntimeError::Link { component, .. }
            | RuntimeError::Sandbox { component, .. }
            | RuntimeError::Deadline { component, .. }
            | RuntimeError::MemoryLimit { component, .. }
            | RuntimeError::Trap { component, .. }
            | RuntimeError::Plugin { component, .. }
            | RuntimeError::Poisoned { component, .. }
            | RuntimeError::Host { component, .. } => component,
        }
    }

    /// The component's own error, when the call returned one.
    pub fn plugin_error(&self) -> Option<&PluginError> {
        match self {
            RuntimeError::Plugin { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// `30 s`, `500 ms`, `1.5 s`.
pub(crate) fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// `256 MiB`, `512 KiB`, `100 bytes`.
pub(crate) fn fmt_bytes(n: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= MIB {
        format!("{:.1} MiB", n as f64 / MIB as f64)
    } else if n >= KIB && n.is_multiple_of(KIB) {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} bytes")
    }
}

fn at(frame: &Option<String>) -> String {
    frame
        .as_ref()
        .map(|f| format!(" in {f}"))
        .unwrap_or_default()
}

fn stderr_tail(stderr: &Option<String>) -> String {
    stderr
        .as_ref()
        .map(|s| format!(" (component stderr: {s})"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_read_naturally() {
        assert_eq!(fmt_duration(Duration::from_secs(30)), "30 s");
        assert_eq!(fmt_duration(Duration::from_millis(500)), "500 ms");
        assert_eq!(fmt_duration(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(fmt_bytes(256 * 1024 * 1024), "256 MiB");
        assert_eq!(fmt_bytes(64 * 1024), "64 KiB");
        assert_eq!(fmt_bytes(100), "100 bytes");
    }

    #[test]
    fn messages_name_component_and_function() {
        let e = RuntimeError::Deadline {
            component: "builtin:jsonl-store".into(),
            function: "add-message".into(),
            timeout: Duration::from_secs(30),
        };
        assert_eq!(
            e.to_string(),
            "component builtin:jsonl-store: add-message exceeded its 30 s deadline"
        );
        let e = RuntimeError::Plugin {
            component: "builtin:openai-chat".into(),
            function: "read-response".into(),
            error: PluginError::InvalidInput("response.json is not JSON".into()),
        };
        assert_eq!(
            e.to_string(),
            "component builtin:openai-chat: read-response failed: invalid input: response.json is not JSON"
        );
    }
}
