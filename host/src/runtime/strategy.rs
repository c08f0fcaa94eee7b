//! [`Strategy`]: a `strategy-plugin` instance (WIT interface `ctxhost:plugin/strategy`,
//! WIT 1.0.0), which decides what goes into the context before the first model call and what
//! happens after each reply. Its `llm` import calls the [`super::LlmImport`] given to
//! [`super::Runtime::strategy`] (at most [`MAX_LLM_CALLS_PER_HOOK`] per hook, whatever
//! `context_storage.max_llm_calls_per_compression` says, within the wall time of one call,
//! `context_storage.max_compression_secs`); its `planning` import the
//! [`super::PlanningImport`].
//!
//! Each hook returns the decision as the component gave it, with what the call cost
//! ([`HookCall`]); checking the decision against the host's rules is the agent loop's job
//! ([`crate::agent::strategy`]).

use std::time::{Duration, Instant};

use super::error::RuntimeError;
use super::sandbox::{Sandbox, StoreState};
use super::types::{Decision, StrategyConfig, TaskState, ToolOutcome};
use super::wit::v1_0_0;
use ctxhost_format::ChatMessage;

/// Most `llm.complete` side calls one hook may make; the next one is refused with an `llm`
/// error.
pub const MAX_LLM_CALLS_PER_HOOK: u32 = 4;

/// A pre-linked strategy component.
pub(crate) type Pre = v1_0_0::StrategyPluginPre<StoreState>;
type Bindings = v1_0_0::StrategyPlugin;

/// `hook!(self, "name", |b, s| body)`: calls `body` with the instance's bindings and turns the
/// result into a [`HookCall`].
macro_rules! hook {
    ($self:ident, $function:expr, |$b:ident, $s:ident| $body:expr) => {{
        let started = Instant::now();
        let function: &str = $function;
        let $b = &$self.bindings;
        let r = $self.sandbox.call(function, |$s| $body).map(|r| {
            r.map(Decision::from)
                .map_err(crate::runtime::PluginError::from)
        })?;
        let elapsed = started.elapsed();
        let (llm_calls, llm_time) = $self.sandbox.last_llm_use();
        let decision: Decision = $self.sandbox.plugin_result(function, r)?;
        Ok(HookCall {
            decision,
            llm_calls,
            component_time: elapsed.saturating_sub(llm_time),
        })
    }};
}

/// What one hook returned and cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookCall {
    /// The decision, unchecked.
    pub decision: Decision,
    /// `llm.complete` side calls made.
    pub llm_calls: u32,
    /// Wall time in the component, side calls excluded.
    pub component_time: Duration,
}

/// One strategy instance on one task directory. A trap, deadline or memory-limit error leaves
/// the instance unusable ([`RuntimeError::Poisoned`] afterwards).
pub struct Strategy {
    sandbox: Sandbox,
    bindings: Bindings,
}

impl Strategy {
    /// Instantiate `pre` in `sandbox` (whose imports are set).
    pub(crate) fn instantiate(mut sandbox: Sandbox, pre: &Pre) -> Result<Self, RuntimeError> {
        let state = sandbox.state_mut();
        state.limits.llm_calls_per_call = MAX_LLM_CALLS_PER_HOOK;
        state.llm_limit_source = "one strategy hook may make";
        let bindings = sandbox.call("instantiation", |s| pre.instantiate(s))?;
        Ok(Strategy { sandbox, bindings })
    }

    /// The component's name (`builtin:NAME` or its path).
    pub fn component(&self) -> &str {
        self.sandbox.name()
    }

    /// The largest linear memory this instance has used so far (bytes).
    pub fn memory_peak_bytes(&self) -> usize {
        self.sandbox.memory_peak_bytes()
    }

    /// `start`: before the first model call.
    pub fn start(
        &mut self,
        config: &StrategyConfig,
        state: &TaskState,
    ) -> Result<HookCall, RuntimeError> {
        hook!(self, "start", |b, s| {
            let (c, t) = (config.into(), state.into());
            b.ctxhost_plugin_strategy().call_start(s, &c, &t)
        })
    }

    /// `after-reply`: after a reply without tool calls.
    pub fn after_reply(
        &mut self,
        config: &StrategyConfig,
        state: &TaskState,
        reply: &ChatMessage,
    ) -> Result<HookCall, RuntimeError> {
        hook!(self, "after-reply", |b, s| {
            let (c, t, r) = (config.into(), state.into(), reply.into());
            b.ctxhost_plugin_strategy().call_after_reply(s, &c, &t, &r)
        })
    }

    /// `after-tools`: after the tool calls of `reply` were made (`outcomes`, in call order).
    pub fn after_tools(
        &mut self,
        config: &StrategyConfig,
        state: &TaskState,
        reply: &ChatMessage,
        outcomes: &[ToolOutcome],
    ) -> Result<HookCall, RuntimeError> {
        hook!(self, "after-tools", |b, s| {
            let (c, t, r) = (config.into(), state.into(), reply.into());
            let o: Vec<_> = outcomes.iter().map(Into::into).collect();
            b.ctxhost_plugin_strategy()
                .call_after_tools(s, &c, &t, &r, &o)
        })
    }
}
