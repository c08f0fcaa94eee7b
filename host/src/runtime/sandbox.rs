//! One sandboxed component instance: its `Store`, WASI context, limits and call wrapper.
//!
//! Each instance gets its own `Store` (so instances never share memory, WASI state, limits or
//! deadlines) with:
//! - WASI preopening only the task directory, as `.` (read/write); no environment variables,
//!   no arguments, no stdin, no network (TCP, UDP and name lookup denied, every socket address
//!   refused); stdout/stderr forwarded to `tracing` ([`super::output`]);
//! - `StoreLimits`: linear memory capped at [`super::RuntimeLimits::memory_bytes`], a failed
//!   grow traps (`trap_on_grow_failure`);
//! - an epoch deadline of [`super::RuntimeLimits::call_timeout`] set before instantiation and
//!   before every call. Time the component spends waiting in the host's `llm` import is
//!   credited back, so only the component's own work counts.
//!
//! [`Sandbox::call`] turns a failed call into a [`RuntimeError`] naming the component and the
//! function (deadline, memory limit, trap with the first wasm frame and the component's last
//! stderr lines) and poisons the instance: wasmtime refuses to re-enter a trapped instance, and
//! so do we, with a clear message. A fresh instance from the runtime works.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::{
    Engine, ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder, Trap, UpdateDeadline,
    WasmBacktrace,
};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::RuntimeLimits;
use super::epoch::{EpochTicker, ticks_for};
use super::error::{PluginError, RuntimeError};
use super::output::{GuestOutput, Stream};
use super::types::{LlmImport, PlanningImport};

/// The data of a component's `Store`.
pub struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: SandboxLimiter,
    /// The component's display name (`builtin:NAME` or its path), for logs.
    pub(crate) component: Arc<str>,
    /// What the `llm` import calls (compressors and strategies).
    pub(crate) llm: Option<Box<dyn LlmImport>>,
    /// What the `planning` import calls (strategies only).
    pub(crate) planning: Option<Box<dyn PlanningImport>>,
    /// Most `llm.complete` calls one component call may make (`None`: no limit).
    pub(crate) llm_call_limit: Option<u32>,
    /// `llm.complete` calls made during the current component call.
    pub(crate) llm_calls: u32,
    /// Time spent in `llm.complete` during the current component call.
    pub(crate) llm_time: Duration,
    /// Time spent in host imports during the current call, credited back to the deadline.
    pub(crate) host_time: Duration,
    deadline_hit: bool,
    stdout: GuestOutput,
    stderr: GuestOutput,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// wasmtime's `StoreLimits`, observed: remembers whether the memory limit was hit and the
/// largest linear memory granted.
struct SandboxLimiter {
    limits: StoreLimits,
    hit: bool,
    peak_bytes: usize,
}

impl ResourceLimiter for SandboxLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let result = self.limits.memory_growing(current, desired, maximum);
        match result {
            Ok(true) => self.peak_bytes = self.peak_bytes.max(desired),
            _ => self.hit = true,
        }
        result
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.hit = true;
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// The innermost frame of a trap that is the component's own code (not Rust's panic and abort
/// machinery), demangled without its hash, e.g. `hostile::exports::…::_export_count_messages_cabi`.
fn guest_frame(bt: &WasmBacktrace) -> Option<String> {
    const RUNTIME: [&str; 6] = [
        "std::",
        "core::",
        "alloc::",
        "__rustc::",
        "panic_abort::",
        "abort",
    ];
    let names: Vec<String> = bt
        .frames()
        .iter()
        .map(|f| match f.func_name() {
            Some(name) => format!("{:#}", rustc_demangle::demangle(name)),
            None => format!("wasm function {}", f.func_index()),
        })
        .collect();
    names
        .iter()
        .find(|n| !RUNTIME.iter().any(|p| n.starts_with(p)))
        .or(names.first())
        .cloned()
}

/// A component instance's store plus the bookkeeping of its calls.
pub struct Sandbox {
    store: Store<StoreState>,
    name: Arc<str>,
    timeout: Duration,
    memory_limit: usize,
    /// Why the instance is unusable, after a failed call.
    poisoned: Option<String>,
    _ticker: Arc<EpochTicker>,
}

impl Sandbox {
    /// A store for component `name` seeing only `task_dir`.
    pub fn new(
        engine: &Engine,
        ticker: Arc<EpochTicker>,
        name: Arc<str>,
        limits: &RuntimeLimits,
        task_dir: &Path,
        llm: Option<Box<dyn LlmImport>>,
    ) -> Result<Sandbox, RuntimeError> {
        let stdout = GuestOutput::new(name.clone(), Stream::Stdout);
        let stderr = GuestOutput::new(name.clone(), Stream::Stderr);
        let mut builder = WasiCtxBuilder::new();
        // Must come before `preopened_dir`, which captures it.
        builder
            .allow_blocking_current_thread(true)
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }));
        builder
            .preopened_dir(task_dir, ".", FsPerms::ReadWrite)
            .map_err(|e| RuntimeError::Sandbox {
                component: name.to_string(),
                task_dir: task_dir.display().to_string(),
                reason: format!("{e:#}"),
            })?;
        let limiter = SandboxLimiter {
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes)
                .trap_on_grow_failure(true)
                .build(),
            hit: false,
            peak_bytes: 0,
        };
        let state = StoreState {
            wasi: builder.build(),
            table: ResourceTable::new(),
            limiter,
            component: name.clone(),
            llm,
            planning: None,
            llm_call_limit: None,
            llm_calls: 0,
            llm_time: Duration::ZERO,
            host_time: Duration::ZERO,
            deadline_hit: false,
            stdout,
            stderr,
        };
        let mut store = Store::new(engine, state);
        store.limiter(|s| &mut s.limiter);
        store.epoch_deadline_callback(|mut ctx| {
            let state = ctx.data_mut();
            let credit = std::mem::take(&mut state.host_time);
            if credit > Duration::ZERO {
                return Ok(UpdateDeadline::Continue(ticks_for(credit)));
            }
            state.deadline_hit = true;
            Ok(UpdateDeadline::Interrupt)
        });
        Ok(Sandbox {
            store,
            name,
            timeout: limits.call_timeout,
            memory_limit: limits.memory_bytes,
            poisoned: None,
            _ticker: ticker,
        })
    }

    /// The component's display name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The largest linear memory the instance has had (bytes).
    pub fn memory_peak_bytes(&self) -> usize {
        self.store.data().limiter.peak_bytes
    }

    /// The store's data, to give an instance its imports (planning, llm limits) after it is made.
    pub(crate) fn state_mut(&mut self) -> &mut StoreState {
        self.store.data_mut()
    }

    /// `llm.complete` calls made by the last component call, and the time they took.
    pub(crate) fn last_llm_use(&self) -> (u32, Duration) {
        let s = self.store.data();
        (s.llm_calls, s.llm_time)
    }

    /// Run `f` (a call into the component, or its instantiation) under the deadline, mapping a
    /// failure to a [`RuntimeError`] for `function` and poisoning the instance.
    pub fn call<R>(
        &mut self,
        function: &str,
        f: impl FnOnce(&mut Store<StoreState>) -> wasmtime::Result<R>,
    ) -> Result<R, RuntimeError> {
        if let Some(cause) = &self.poisoned {
            return Err(RuntimeError::Poisoned {
                component: self.name.to_string(),
                function: function.to_string(),
                cause: cause.clone(),
            });
        }
        {
            let state = self.store.data_mut();
            state.host_time = Duration::ZERO;
            state.llm_calls = 0;
            state.llm_time = Duration::ZERO;
            state.deadline_hit = false;
            state.stderr.clear_tail();
        }
        self.store.set_epoch_deadline(ticks_for(self.timeout));
        let result = f(&mut self.store);
        {
            let state = self.store.data();
            state.stdout.flush_partial();
            state.stderr.flush_partial();
        }
        result.map_err(|e| {
            let err = self.classify(function, e);
            let prefix = format!("component {}: ", self.name);
            let text = err.to_string();
            self.poisoned = Some(text.strip_prefix(&prefix).unwrap_or(&text).to_string());
            tracing::warn!(component = %self.name, function, "{err}");
            err
        })
    }

    /// Map a component's own `plugin-error` result for `function` (`E` is the `plugin-error` of
    /// the component's WIT version), converting the value with `From`.
    pub fn plugin_result<T, U: From<T>, E>(
        &self,
        function: &str,
        result: Result<T, E>,
    ) -> Result<U, RuntimeError>
    where
        PluginError: From<E>,
    {
        result.map(U::from).map_err(|e| RuntimeError::Plugin {
            component: self.name.to_string(),
            function: function.to_string(),
            error: PluginError::from(e),
        })
    }

    fn classify(&self, function: &str, err: wasmtime::Error) -> RuntimeError {
        let state = self.store.data();
        let component = self.name.to_string();
        let function = function.to_string();
        let trap = err.downcast_ref::<Trap>().copied();
        if state.limiter.hit {
            return RuntimeError::MemoryLimit {
                component,
                function,
                limit_bytes: self.memory_limit,
            };
        }
        if state.deadline_hit || trap == Some(Trap::Interrupt) {
            return RuntimeError::Deadline {
                component,
                function,
                timeout: self.timeout,
            };
        }
        match trap {
            Some(trap) => {
                let frame = err.downcast_ref::<WasmBacktrace>().and_then(guest_frame);
                let trap = trap.to_string();
                let trap = trap
                    .strip_prefix("wasm trap: ")
                    .unwrap_or(&trap)
                    .to_string();
                RuntimeError::Trap {
                    component,
                    function,
                    trap,
                    frame,
                    stderr: state.stderr.tail(),
                }
            }
            None => RuntimeError::Host {
                component,
                function,
                reason: format!("{err:#}"),
            },
        }
    }
}
