//! One sandboxed component instance: its `Store`, WASI context, limits and call wrapper.
//!
//! Each instance gets its own `Store` (so instances never share memory, WASI state, limits or
//! deadlines) with:
//! - WASI preopening only the task directory, as `.` (read/write); no environment variables,
//!   no arguments, no stdin, no network (TCP, UDP and name lookup denied, every socket address
//!   refused); stdout/stderr forwarded to `tracing` ([`super::output`]);
//! - `StoreLimits`: linear memory capped at [`super::RuntimeLimits::memory_bytes`], a failed
//!   grow traps (`trap_on_grow_failure`);
//! - a clock per call, checked by the epoch callback every tick while the component runs:
//!   [`super::RuntimeLimits::call_timeout`] bounds the component's own time (time it spends
//!   waiting in the host's `llm` import is not counted), [`super::RuntimeLimits::wall_time_per_call`]
//!   the whole call, that time included; the `llm` import gets at most
//!   [`super::RuntimeLimits::llm_calls_per_call`] calls per call; an instance whose `llm`
//!   import has an interrupt probe ([`super::LlmImport::interrupt_probe`]: a task's compressor
//!   and strategy, `plugin try`) asks it every [`INTERRUPT_POLL`] and stops the call at once on
//!   a pause or stop ([`RuntimeError::Interrupted`]);
//! - the task directory's byte budget ([`super::dir_budget::DirBudget`]), measured during and
//!   after every call; the files and folders one call may create bounded, WASI `symlink-at`
//!   and `link-at` refused ([`super::fs_guard::guard_filesystem`]).
//!
//! [`Sandbox::call`] turns a failed call into a [`RuntimeError`] naming the component and the
//! function (deadline, wall time, byte budget, memory limit, trap with the first wasm frame and
//! the component's last stderr lines) and poisons the instance: wasmtime refuses to re-enter a
//! trapped instance, and so do we, with a clear message. A fresh instance from the runtime
//! works. Every text the component supplies in such an error (its `plugin-error`, stderr, the
//! trap's frame name) is bounded and escaped ([`crate::untrusted::text`]).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::{
    Engine, ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder, Trap, UpdateDeadline,
    WasmBacktrace,
};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::RuntimeLimits;
use super::dir_budget::DirBudget;
use super::epoch::EpochTicker;
use super::error::{PluginError, RuntimeError};
use super::output::{GuestOutput, Stream};
use super::types::{LlmImport, PlanningImport};
use crate::untrusted;

/// How often a running call asks its interrupt probe (which may read the task's row).
pub const INTERRUPT_POLL: Duration = Duration::from_millis(200);

/// The clock and counters of the call in progress.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallState {
    /// When the call started.
    pub(crate) started: Instant,
    /// Time spent in the host's `llm` import during the call (not the component's own time).
    pub(crate) host_time: Duration,
    /// `llm.complete` calls made (and refused) during the call.
    pub(crate) llm_calls: u32,
    /// `llm.complete` calls refused by the limits.
    pub(crate) llm_refused: u32,
    deadline_hit: bool,
    wall_hit: bool,
    /// When the interrupt probe was last asked.
    probe_asked: Instant,
    /// The pause or stop that interrupted the call.
    interrupted: Option<crate::interrupt::Request>,
    /// Bytes the task directory held when the budget stopped the call.
    budget_hit: Option<u64>,
    /// Files and folders the call created in the task directory.
    files_created: u64,
    /// Creations refused by [`super::RuntimeLimits::files_per_call`].
    files_refused: u64,
}

impl CallState {
    fn new() -> CallState {
        CallState {
            started: Instant::now(),
            host_time: Duration::ZERO,
            llm_calls: 0,
            llm_refused: 0,
            deadline_hit: false,
            wall_hit: false,
            probe_asked: Instant::now(),
            interrupted: None,
            budget_hit: None,
            files_created: 0,
            files_refused: 0,
        }
    }
}

/// [`StoreState::llm_limit_source`] of every instance but a strategy.
pub(crate) const COMPRESSION_LLM_LIMIT: &str =
    "one compression may make (context_storage.max_llm_calls_per_compression)";

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
    /// Asked every [`INTERRUPT_POLL`] while a call runs: a pause or stop interrupts it.
    interrupt: Option<crate::interrupt::InterruptProbe>,
    /// The task directory the `history` import reads (compressors and strategies).
    pub(crate) history: Option<crate::task_dir::TaskDir>,
    /// The instance's limits.
    pub(crate) limits: RuntimeLimits,
    /// The call in progress.
    pub(crate) call: CallState,
    budget: Option<DirBudget>,
    /// What bounds `limits.llm_calls_per_call`, for the refusal message ("one compression
    /// may make (…)", "one strategy hook may make").
    pub(crate) llm_limit_source: &'static str,
    stdout: GuestOutput,
    stderr: GuestOutput,
}

impl StoreState {
    /// Whether the call in progress may create one more file or folder in the task directory
    /// ([`super::RuntimeLimits::files_per_call`]); a refusal is counted (the call then fails).
    pub(crate) fn may_create_entry(&mut self) -> bool {
        match self.limits.files_per_call {
            Some(max) if self.call.files_created >= max => {
                self.call.files_refused += 1;
                false
            }
            _ => true,
        }
    }

    /// The call in progress created a file or folder.
    pub(crate) fn entry_created(&mut self) {
        self.call.files_created += 1;
    }
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
        let budget = match limits.task_dir_bytes {
            None => None,
            Some(limit) => {
                Some(
                    DirBudget::new(task_dir, limit).map_err(|e| RuntimeError::Sandbox {
                        component: name.to_string(),
                        task_dir: task_dir.display().to_string(),
                        reason: format!("cannot open it to watch its byte budget: {e}"),
                    })?,
                )
            }
        };
        let interrupt = llm.as_ref().and_then(|l| l.interrupt_probe());
        let state = StoreState {
            wasi: builder.build(),
            table: ResourceTable::new(),
            limiter,
            component: name.clone(),
            interrupt,
            llm,
            planning: None,
            history: None,
            limits: *limits,
            call: CallState::new(),
            budget,
            llm_limit_source: COMPRESSION_LLM_LIMIT,
            stdout,
            stderr,
        };
        let mut store = Store::new(engine, state);
        store.limiter(|s| &mut s.limiter);
        // Every tick while the component runs: its own time, the call's wall time, the byte
        // budget.
        store.epoch_deadline_callback(|mut ctx| {
            let state = ctx.data_mut();
            let wall = state.call.started.elapsed();
            if wall.saturating_sub(state.call.host_time) >= state.limits.call_timeout {
                state.call.deadline_hit = true;
                return Ok(UpdateDeadline::Interrupt);
            }
            if wall >= state.limits.wall_time_per_call {
                state.call.wall_hit = true;
                return Ok(UpdateDeadline::Interrupt);
            }
            if let Some(used) = state.budget.as_mut().and_then(|b| b.over(false)) {
                state.call.budget_hit = Some(used);
                return Ok(UpdateDeadline::Interrupt);
            }
            if let Some(probe) = &state.interrupt
                && state.call.probe_asked.elapsed() >= INTERRUPT_POLL
            {
                state.call.probe_asked = Instant::now();
                let request = probe.request();
                if request != crate::interrupt::Request::None {
                    probe.mark_gave_way();
                    state.call.interrupted = Some(request);
                    return Ok(UpdateDeadline::Interrupt);
                }
            }
            Ok(UpdateDeadline::Continue(1))
        });
        Ok(Sandbox {
            store,
            name,
            memory_limit: limits.memory_bytes,
            poisoned: None,
            _ticker: ticker,
        })
    }

    /// The component's display name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The task directory's byte budget this instance is held to
    /// ([`super::RuntimeLimits::task_dir_bytes`]; `None`: none).
    pub fn task_dir_bytes(&self) -> Option<u64> {
        self.store.data().limits.task_dir_bytes
    }

    /// The largest linear memory the instance has had (bytes).
    pub fn memory_peak_bytes(&self) -> usize {
        self.store.data().limiter.peak_bytes
    }

    /// The store's data, to give an instance its imports (planning, llm limits) after it is made.
    pub(crate) fn state_mut(&mut self) -> &mut StoreState {
        self.store.data_mut()
    }

    /// `llm.complete` calls made by the last component call (refused ones not counted), and
    /// the time spent in them.
    pub(crate) fn last_llm_use(&self) -> (u32, Duration) {
        let c = &self.store.data().call;
        (c.llm_calls - c.llm_refused, c.host_time)
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
            state.call = CallState::new();
            state.stdout.begin_call(function);
            state.stderr.begin_call(function);
        }
        // The epoch callback runs at the next tick and then at every tick.
        self.store.set_epoch_deadline(1);
        let started = std::time::Instant::now();
        let result = f(&mut self.store);
        super::call_times::record(&self.name, function, started.elapsed());
        let state = self.store.data_mut();
        state.stdout.end_call();
        state.stderr.end_call();
        if state.call.llm_refused > 0 {
            tracing::warn!(component = %self.name, function, refused = state.call.llm_refused,
                made = state.call.llm_calls - state.call.llm_refused,
                "llm.complete calls were refused by the limits of one call");
        }
        // What the call wrote, measured once more now that it returned: always, however
        // recent the last scan (a write and a return within one scan interval of it went
        // unmeasured, and the next component's call was blamed for the bytes).
        let over = match &result {
            Ok(_) => state.budget.as_mut().and_then(|b| b.over(true)),
            Err(_) => None,
        };
        // A call that was refused a creation fails, whatever the component made of the refusal
        // (unless the byte budget stopped it: that says more).
        let refused = state.call.files_refused;
        let file_limit =
            (refused > 0 && over.is_none() && state.call.budget_hit.is_none()).then(|| {
                RuntimeError::FileLimit {
                    component: self.name.to_string(),
                    function: function.to_string(),
                    limit: state.limits.files_per_call.unwrap_or_default(),
                    refused,
                }
            });
        let err = match (result, over, file_limit) {
            (_, _, Some(e)) => e,
            (Ok(r), None, None) => return Ok(r),
            (Ok(_), Some(used), None) => self.budget_error(function, used),
            (Err(e), _, None) => self.classify(function, e),
        };
        let prefix = format!("component {}: ", self.name);
        let text = err.to_string();
        self.poisoned = Some(text.strip_prefix(&prefix).unwrap_or(&text).to_string());
        tracing::warn!(component = %self.name, function, "{err}");
        Err(err)
    }

    fn budget_error(&self, function: &str, used: u64) -> RuntimeError {
        let state = self.store.data();
        RuntimeError::DiskBudget {
            component: self.name.to_string(),
            function: function.to_string(),
            used_bytes: used,
            limit_bytes: state.budget.as_ref().map_or(0, DirBudget::limit),
        }
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
            error: PluginError::from(e).bounded(),
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
        if let Some(used) = state.call.budget_hit {
            return self.budget_error(&function, used);
        }
        if let Some(request) = state.call.interrupted {
            return RuntimeError::Interrupted {
                component,
                function,
                request: request.as_str(),
                after: state.call.started.elapsed(),
            };
        }
        if state.call.wall_hit {
            return RuntimeError::WallTime {
                component,
                function,
                limit: state.limits.wall_time_per_call,
                llm_calls: state.call.llm_calls,
            };
        }
        if state.call.deadline_hit || trap == Some(Trap::Interrupt) {
            return RuntimeError::Deadline {
                component,
                function,
                timeout: state.limits.call_timeout,
            };
        }
        match trap {
            Some(trap) => {
                let frame = err
                    .downcast_ref::<WasmBacktrace>()
                    .and_then(guest_frame)
                    .map(|f| untrusted::name(&f).into_owned());
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
                    stderr: state
                        .stderr
                        .tail()
                        .map(|t| untrusted::text(&t, untrusted::MAX_ERROR_BYTES).into_owned()),
                }
            }
            None => RuntimeError::Host {
                component,
                function,
                reason: untrusted::text(&format!("{err:#}"), untrusted::MAX_ERROR_BYTES)
                    .into_owned(),
            },
        }
    }
}
