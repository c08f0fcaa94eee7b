//! Errors of loading and calling plugin components.
//!
//! Every [`RuntimeError`] names the component (`builtin:NAME` or the `.wasm` path it was loaded
//! from) and, for calls, the WIT function, e.g.
//! `component builtin:jsonl-store: add-message exceeded its 30 s deadline`.

use std::time::Duration;

/// A component's own error result (WIT `plugin-error`). `Display`: `io: …`, `invalid input: …`,
/// `llm: …`, `unsupported: …`, `internal: …`, `stream cut: …`.
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
    /// `read-response` of a streamed reply: the stream ended before its end (WIT
    /// `stream-cut`); the request is sent again whole.
    #[error("stream cut: {0}")]
    StreamCut(String),
}

impl PluginError {
    /// The same error with its text bounded and escaped ([`crate::untrusted::text`],
    /// [`crate::untrusted::MAX_ERROR_BYTES`]): what the host keeps of a component's error.
    pub fn bounded(self) -> PluginError {
        let b = |s: String| match crate::untrusted::text(&s, crate::untrusted::MAX_ERROR_BYTES) {
            std::borrow::Cow::Borrowed(_) => s,
            std::borrow::Cow::Owned(o) => o,
        };
        match self {
            PluginError::Io(s) => PluginError::Io(b(s)),
            PluginError::InvalidInput(s) => PluginError::InvalidInput(b(s)),
            PluginError::Llm(s) => PluginError::Llm(b(s)),
            PluginError::Unsupported(s) => PluginError::Unsupported(b(s)),
            PluginError::Internal(s) => PluginError::Internal(b(s)),
            PluginError::StreamCut(s) => PluginError::StreamCut(b(s)),
        }
    }
}

/// Why loading, instantiating or calling a component failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RuntimeError {
    /// `builtin:NAME` names no embedded component.
    #[error("component builtin:{name}: no such builtin component (available: {available})")]
    UnknownBuiltin {
        /// The builtin name asked for.
        name: String,
        /// The builtins there are, `builtin:NAME` comma-separated.
        available: String,
    },
    /// The `.wasm` file does not exist.
    #[error("component {component}: file not found")]
    NotFound {
        /// The component: `builtin:NAME` or its path.
        component: String,
    },
    /// The `.wasm` file exists but cannot be read.
    #[error("component {component}: cannot read the file: {reason}")]
    Read {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// Why, as the runtime or the component said.
        reason: String,
    },
    /// The file is not a WebAssembly component (random bytes, a core module, a precompiled
    /// artefact).
    #[error("component {component}: not a WebAssembly component: {reason}")]
    NotAComponent {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// Why, as the runtime or the component said.
        reason: String,
    },
    /// The component exports none of the expected plugin interface.
    #[error("component {component}: exports {found}, expected {expected} (world {world})")]
    WrongWorld {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// What it exports.
        found: String,
        /// What the kind needs.
        expected: String,
        /// The world of the expected plugin kind.
        world: String,
    },
    /// The component exports the expected interface at a WIT version this host does not load
    /// (`supported` lists those it does, e.g. `ctxhost:plugin@1.0.0`;
    /// `current` is the version of `wit/plugin.wit`).
    #[error(
        "component {component}: built against {built_against} (it exports {found}), {relation}: this host loads {supported} (world {world}) and provides {wasi}; rebuild it against wit/plugin.wit ({current})"
    )]
    IncompatibleVersion {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// The WIT package and version it was built against, e.g. `ctxhost:plugin@0.2.0`.
        built_against: String,
        /// What it exports.
        found: String,
        /// `a newer WIT version than this host loads` or `a WIT version this host does not load`.
        relation: String,
        /// The interface versions this host loads for the kind.
        supported: String,
        /// The world of the expected plugin kind.
        world: String,
        /// The WASI versions the host provides ([`super::mismatch::WASI_PROVIDED`]).
        wasi: String,
        /// The current interface version (wit/plugin.wit).
        current: String,
    },
    /// Compiling the component failed.
    #[error("component {component}: compiling failed: {reason}")]
    Compile {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// Why, as the runtime or the component said.
        reason: String,
    },
    /// The component's imports or export signatures do not fit the world.
    #[error("component {component}: does not fit world {world}: {reason}")]
    Link {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// The world of the expected plugin kind.
        world: String,
        /// Why, as the runtime or the component said.
        reason: String,
    },
    /// The sandbox (WASI context, task directory preopen) could not be set up.
    #[error("component {component}: cannot set up its sandbox on {task_dir}: {reason}")]
    Sandbox {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// The task directory.
        task_dir: String,
        /// Why, as the runtime or the component said.
        reason: String,
    },
    /// A call ran past the call timeout (epoch deadline).
    #[error("component {component}: {function} exceeded its {} deadline", fmt_duration(*timeout))]
    Deadline {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// The component function called.
        function: String,
        /// The limit that passed.
        timeout: Duration,
    },
    /// The task was asked to pause or stop while the call ran: it was interrupted (epoch
    /// interruption) rather than left to run to its deadline.
    #[error("component {component}: {function} interrupted by {request} after {}", fmt_duration(*after))]
    Interrupted {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// The component function called.
        function: String,
        /// `pause` or `stop`.
        request: &'static str,
        /// How long the call had run.
        after: Duration,
    },
    /// A call that used the `llm` import ran past its wall-time limit (LLM calls included).
    #[error(
        "component {component}: {function} ran past its wall-time limit of {} (after {llm_calls} llm.complete call(s); context_storage.max_compression_secs)",
        fmt_duration(*limit)
    )]
    WallTime {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// The component function called.
        function: String,
        /// The limit that passed.
        limit: Duration,
        /// `llm.complete` calls made during the call.
        llm_calls: u32,
    },
    /// The task directory grew past its byte budget during a call (measured while it ran or
    /// when it returned); the call was stopped.
    #[error(
        "component {component}: {function} filled the task directory to {used_bytes} bytes, over its budget of {limit_bytes} bytes (context_storage.max_task_dir_mib); stopped"
    )]
    DiskBudget {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// The component function called.
        function: String,
        /// Bytes the task directory held when measured.
        used_bytes: u64,
        /// The budget, bytes.
        limit_bytes: u64,
    },
    /// The call tried to create more files and folders in the task directory than one call
    /// may ([`super::RuntimeLimits::files_per_call`]); the creations past the limit were
    /// refused (WASI `quota`).
    #[error(
        "component {component}: {function} tried to create more than {limit} files and folders in the task directory in one call ({refused} creation(s) refused; context_storage.max_files_per_call); stopped"
    )]
    FileLimit {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// The component function called.
        function: String,
        /// The limit, files and folders per call.
        limit: u64,
        /// Creations refused.
        refused: u64,
    },
    /// The component tried to grow its memory past the limit.
    #[error("component {component}: memory limit of {} reached in {function}", fmt_bytes(*limit_bytes))]
    MemoryLimit {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// The component function called.
        function: String,
        /// The memory limit, bytes.
        limit_bytes: usize,
    },
    /// The component trapped (a panic, `unreachable`, out-of-bounds access, ...).
    #[error(
        "component {component}: {function} trapped: {trap}{}{}",
        at(frame),
        stderr_tail(stderr)
    )]
    Trap {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// The component function called.
        function: String,
        /// The trap.
        trap: String,
        /// The innermost guest function, when known.
        frame: Option<String>,
        /// The component's last stderr lines, if any.
        stderr: Option<String>,
    },
    /// The component returned its own error (WIT `plugin-error`).
    #[error("component {component}: {function} failed: {error}")]
    Plugin {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// The component function called.
        function: String,
        /// The component's own error.
        error: PluginError,
    },
    /// An earlier trap left the instance unusable.
    #[error(
        "component {component}: cannot call {function}: the instance is unusable after an earlier failure ({cause}); a new instance is needed"
    )]
    Poisoned {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// The component function called.
        function: String,
        /// What happened.
        cause: String,
    },
    /// The host side of a call failed (e.g. a WASI or import error that is not a guest trap).
    #[error("component {component}: {function} failed in the host: {reason}")]
    Host {
        /// The component: `builtin:NAME` or its path.
        component: String,
        /// The component function called.
        function: String,
        /// Why, as the runtime or the component said.
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
            | RuntimeError::Interrupted { component, .. }
            | RuntimeError::WallTime { component, .. }
            | RuntimeError::DiskBudget { component, .. }
            | RuntimeError::FileLimit { component, .. }
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
